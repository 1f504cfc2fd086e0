//! PostgreSQL: a cluster made by `initdb` in the folder's `data`, trusting
//! every local connection, its socket in the folder.
//!
//! PostgreSQL refuses to run as root (and CI runs as root): then `initdb`
//! and `postgres` run as the `postgres` user (`setpriv --reuid=postgres`,
//! which, unlike `runuser`, execs instead of forking, so the parent-death
//! signal reaches the server itself), in a folder owned by that user.

use std::ffi::OsString;
use std::fs;
use std::io::{self, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};

use super::{find_on_path, is_executable, read_reply, EnvUrls, Package, ServerKind, Site};

// Named like the enum variant it replaced, so that callers read the same.
#[allow(non_upper_case_globals)]
impl ServerKind {
    /// PostgreSQL. Its SIGTERM is a "smart" shutdown that waits for every
    /// client to leave; SIGINT is its fast one.
    pub const Postgres: ServerKind = ServerKind {
        name: "postgres",
        aliases: &[],
        binaries: &["postgres", "initdb"],
        package: Package::Debian("postgresql"),
        bin_dir: Some(bin_dir),
        root_user: Some("postgres"),
        stop_signal: "INT",
        ignores_faketime: None,
        ports: 1,
        durable: true,
        data_knows_ports: false,
        several: false,
        pools: false,
        url: |port| format!("postgres://postgres@127.0.0.1:{port}/postgres"),
        prepare,
        args,
        probe,
        exec_env: &[("LOCKCHECK_POSTGRES_URL", EnvUrls::First)],
    };
}

/// `initdb`'s arguments: user `postgres`, trusted, no fsync.
fn prepare(site: &Site) -> io::Result<Option<Vec<OsString>>> {
    let mut args: Vec<OsString> = vec!["-D".into(), site.data().into()];
    args.extend(
        ["-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"]
            .map(OsString::from),
    );
    Ok(Some(args))
}

fn args(site: &Site) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec!["-D".into(), site.data().into(), "-p".into()];
    args.push(site.port().to_string().into());
    args.extend(["-k".into(), site.dir.to_path_buf().into_os_string()]);
    // fsync off: a killed server loses nothing the kernel has, and a test
    // never survives the machine.
    for setting in ["listen_addresses=127.0.0.1", "fsync=off", "max_connections=200"] {
        args.extend(["-c".into(), setting.into()]);
    }
    args
}

/// A startup message as user `postgres`: `R` (authentication: trust says
/// ok) once it accepts sessions, `E` while it starts up. PgBouncer speaks
/// the same protocol.
pub(super) fn probe(stream: &mut TcpStream, _port: u16) -> Result<(), String> {
    let mut body = 196_608u32.to_be_bytes().to_vec(); // protocol 3.0
    for part in ["user", "postgres", "database", "postgres", ""] {
        body.extend_from_slice(part.as_bytes());
        body.push(0);
    }
    let mut message = u32::try_from(body.len() + 4).unwrap_or(u32::MAX).to_be_bytes().to_vec();
    message.extend(body);
    stream.write_all(&message).map_err(|error| format!("write: {error}"))?;
    let reply = read_reply(stream, 1024, false)?;
    match reply.first() {
        Some(b'R') => {
            let _ = stream.write_all(b"X\0\0\0\x04"); // Terminate
            Ok(())
        }
        Some(b'E') => {
            // Fields: a type byte, then a zero-terminated string; M = message.
            let fields = reply.get(5..).unwrap_or_default();
            let message = fields
                .split(|&byte| byte == 0)
                .find_map(|field| field.strip_prefix(b"M"))
                .map(|text| String::from_utf8_lossy(text).into_owned())
                .unwrap_or_default();
            Err(format!("refused the session: {message}"))
        }
        _ => Err(format!("answered {:?}", String::from_utf8_lossy(&reply))),
    }
}

/// PostgreSQL's bin directory: the one `postgres` on PATH really lives in
/// (symlinks resolved, so `initdb` is of the same version), else Debian's
/// newest `/usr/lib/postgresql/<major>/bin`, which is not on PATH.
fn bin_dir() -> Option<PathBuf> {
    let complete =
        |bin: &Path| is_executable(&bin.join("postgres")) && is_executable(&bin.join("initdb"));
    let on_path = find_on_path("postgres")
        .and_then(|postgres| fs::canonicalize(postgres).ok())
        .and_then(|postgres| postgres.parent().map(Path::to_path_buf));
    if let Some(bin) = on_path.filter(|bin| complete(bin)) {
        return Some(bin);
    }
    let mut installed: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .filter_map(|entry| {
            let major = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            complete(&bin).then_some((major, bin))
        })
        .collect();
    installed.sort();
    installed.pop().map(|(_, bin)| bin)
}
