//! MariaDB: `mariadbd` without option files (`--no-defaults`), its tables
//! made by `mariadb-install-db`, its socket and pid file in its folder, the
//! `test` database made at start by an init file.

use std::ffi::OsString;
use std::fs;
use std::io;
use std::net::TcpStream;

use super::{flag, read_reply, EnvUrls, Package, ServerKind, Site};

// Named like the enum variant it replaced, so that callers read the same.
#[allow(non_upper_case_globals)]
impl ServerKind {
    /// MariaDB (or MySQL: `--servers mysql`, like `--mysql-url`).
    pub const Mariadb: ServerKind = ServerKind {
        name: "mariadb",
        aliases: &["mysql"],
        binaries: &["mariadbd", "mariadb-install-db"],
        package: Package::Debian("mariadb-server"),
        bin_dir: None,
        root_user: None,
        stop_signal: "TERM",
        ignores_faketime: None,
        ports: 1,
        durable: true,
        data_knows_ports: false,
        several: false,
        pools: false,
        url: |port| format!("mysql://root@127.0.0.1:{port}/test"),
        prepare,
        args,
        probe,
        exec_env: &[("LOCKCHECK_MYSQL_URL", EnvUrls::First)],
    };
}

/// The init file that makes the `test` database, and
/// `mariadb-install-db`'s arguments.
fn prepare(site: &Site) -> io::Result<Option<Vec<OsString>>> {
    let mut args = vec![
        OsString::from("--no-defaults"),
        flag("--datadir=", &site.data()),
        "--auth-root-authentication-method=normal".into(),
        "--skip-name-resolve".into(),
    ];
    if site.root {
        args.push("--user=root".into());
    }
    fs::write(site.dir.join("init.sql"), "CREATE DATABASE IF NOT EXISTS test;\n")?;
    Ok(Some(args))
}

fn args(site: &Site) -> Vec<OsString> {
    let mut args = vec![
        OsString::from("--no-defaults"),
        flag("--datadir=", &site.data()),
        format!("--port={}", site.port()).into(),
        "--bind-address=127.0.0.1".into(),
        flag("--socket=", &site.dir.join("mysql.sock")),
        flag("--pid-file=", &site.dir.join("mariadbd.pid")),
        flag("--init-file=", &site.dir.join("init.sql")),
        "--skip-name-resolve".into(),
        // Readiness probes leave before authenticating, which MariaDB would
        // otherwise count towards blocking us.
        "--max-connect-errors=1000000".into(),
    ];
    if site.root {
        args.push("--user=root".into());
    }
    args
}

/// The server greets first: a handshake packet (protocol 10) once it
/// serves, an error packet (0xff) otherwise.
fn probe(stream: &mut TcpStream, _port: u16) -> Result<(), String> {
    let reply = read_reply(stream, 5, false)?;
    match reply.get(4) {
        Some(10) => Ok(()),
        Some(0xff) => {
            let rest = read_reply(stream, 512, false).unwrap_or_default();
            Err(format!("error packet: {}", String::from_utf8_lossy(&rest)))
        }
        _ => Err(format!("greeted with {reply:?}")),
    }
}
