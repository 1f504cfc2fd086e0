//! `lockcheck serve`: the web view of the store (`lockcheck_runs::serve`),
//! on a port of loopback.

use std::io::Write;
use std::process::ExitCode;

use lockcheck_runs::serve::Server;

use crate::args::ServeArgs;
use lockcheck_commands::exit;

pub fn run(args: &ServeArgs) -> anyhow::Result<ExitCode> {
    let server = match Server::bind(&args.store, args.port) {
        Ok(server) => server,
        Err(error) => {
            eprintln!("lockcheck: cannot listen on 127.0.0.1:{}: {error}", args.port);
            return Ok(exit::UNAVAILABLE.into());
        }
    };
    let address = server.address()?;
    println!("serving the runs in {} at http://{address}/ (Ctrl-C stops)", args.store.display());
    let _ = std::io::stdout().flush();
    server.run()?;
    Ok(exit::VALID.into())
}
