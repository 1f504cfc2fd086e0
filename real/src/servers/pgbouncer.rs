//! PgBouncer: Debian's `pgbouncer` with lockcheck's own `pgbouncer.ini`, in
//! front of a PostgreSQL of the run ([`super::ServerOptions::upstream`]):
//! every database name goes to that server, every client is trusted as a
//! user the file lists, and the pooling mode is the run's (`--pooler`).
//!
//! In transaction pooling a server connection is a client's for one
//! transaction only: a session advisory lock stays with the server
//! connection it was taken on, and the next client whose transaction gets
//! that connection finds itself holding it (docs/guide.md#pgbouncer).
//! PgBouncer refuses to run as root, so it runs as `postgres`, as the
//! server does.

use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::PathBuf;

use lockcheck_workloads::Pooler;

use super::{Package, ServerKind, Site};

// Named like the enum variant it replaced, so that callers read the same.
#[allow(non_upper_case_globals)]
impl ServerKind {
    /// PgBouncer. It pools a PostgreSQL of the run, so it never runs alone.
    /// SIGTERM shuts it down at once (SIGINT would wait for its clients).
    pub const PgBouncer: ServerKind = ServerKind {
        name: "pgbouncer",
        aliases: &[],
        binaries: &["pgbouncer"],
        package: Package::Debian("pgbouncer"),
        bin_dir: Some(bin_dir),
        root_user: Some("postgres"),
        stop_signal: "TERM",
        ignores_faketime: None,
        ports: 1,
        durable: false,
        data_knows_ports: false,
        several: false,
        pools: true,
        url: |port| format!("postgres://postgres@127.0.0.1:{port}/postgres"),
        prepare,
        args,
        probe: super::postgres::probe,
        exec_env: &[],
    };
}

/// Debian installs it in `/usr/sbin`, which a user's PATH may lack.
fn bin_dir() -> Option<PathBuf> {
    let sbin = PathBuf::from("/usr/sbin");
    super::is_executable(&sbin.join("pgbouncer")).then_some(sbin)
}

/// The users it trusts: `postgres`, with no password.
fn prepare(site: &Site) -> io::Result<Option<Vec<OsString>>> {
    fs::write(site.dir.join("userlist.txt"), "\"postgres\" \"\"\n")?;
    Ok(None)
}

/// What `pgbouncer.ini` says: the upstream server for every database, the
/// client port on loopback and no Unix socket, trust, the run's pooling
/// mode, and room for every client of a run.
pub(super) fn config(site: &Site) -> String {
    let (upstream, mode) = site.options.upstream.unwrap_or((5432, Pooler::Session));
    let dir = site.dir.display();
    format!(
        "[databases]\n\
         * = host=127.0.0.1 port={upstream}\n\
         [pgbouncer]\n\
         listen_addr = 127.0.0.1\n\
         listen_port = {port}\n\
         unix_socket_dir =\n\
         auth_type = trust\n\
         auth_file = {dir}/userlist.txt\n\
         pool_mode = {mode}\n\
         max_client_conn = 200\n\
         default_pool_size = 20\n\
         ignore_startup_parameters = extra_float_digits,options\n\
         pidfile = {dir}/pgbouncer.pid\n\
         admin_users = postgres\n",
        port = site.port(),
        mode = mode.name(),
    )
}

/// The `pgbouncer.ini` written here, run in the foreground.
fn args(site: &Site) -> Vec<OsString> {
    let path = site.dir.join("pgbouncer.ini");
    // The arguments are made right before the launch: a file that cannot be
    // written shows as the server's own error (no such file), in its log.
    let _ = fs::write(&path, config(site));
    vec![path.into_os_string()]
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use lockcheck_workloads::Pooler;

    use super::config;
    use crate::servers::{ServerOptions, Site};

    #[test]
    fn its_ini_pools_the_runs_postgres_in_the_runs_mode_on_loopback() {
        let options =
            ServerOptions { upstream: Some((5500, Pooler::Transaction)), ..Default::default() };
        let site =
            Site { dir: Path::new("/tmp/b"), ports: &[6400], options: &options, root: true, id: 1 };
        let ini = config(&site);
        for line in [
            "* = host=127.0.0.1 port=5500",
            "listen_addr = 127.0.0.1",
            "listen_port = 6400",
            "pool_mode = transaction",
            "auth_type = trust",
            "auth_file = /tmp/b/userlist.txt",
        ] {
            assert!(ini.lines().any(|given| given == line), "{line:?} not in\n{ini}");
        }
        let session = ServerOptions { upstream: Some((5500, Pooler::Session)), ..options };
        let site = Site { options: &session, ..site };
        assert!(config(&site).contains("pool_mode = session"));
    }
}
