//! Redis: `redis-server` without a config file, every setting on its
//! command line, its data in its folder's `data`.

use std::ffi::OsString;
use std::fs;
use std::io::{self, Write};
use std::net::TcpStream;

use super::{read_reply, EnvUrls, Package, ServerKind, Site};

// Named like the enum variant it replaced, so that callers read the same.
#[allow(non_upper_case_globals)]
impl ServerKind {
    /// Redis. Several may serve one run (Redlock's five).
    pub const Redis: ServerKind = ServerKind {
        name: "redis",
        aliases: &[],
        binaries: &["redis-server"],
        package: Package::Debian("redis-server"),
        bin_dir: None,
        root_user: None,
        stop_signal: "TERM",
        ignores_faketime: None,
        ports: 1,
        durable: false,
        data_knows_ports: false,
        several: true,
        pools: false,
        url: |port| format!("redis://127.0.0.1:{port}"),
        prepare,
        args,
        probe,
        exec_env: &[
            ("LOCKCHECK_REDIS_URL", EnvUrls::First),
            ("LOCKCHECK_REDIS_URLS", EnvUrls::Joined),
        ],
    };
}

/// The data directory: Redis does not make it.
fn prepare(site: &Site) -> io::Result<Option<Vec<OsString>>> {
    fs::create_dir(site.data())?;
    Ok(None)
}

/// No snapshots; with [`super::ServerOptions::persistent`], an append-only
/// file fsynced on every write.
fn args(site: &Site) -> Vec<OsString> {
    let port = site.port().to_string();
    let mut args: Vec<OsString> =
        ["--port", port.as_str(), "--bind", "127.0.0.1", "--save", ""].map(OsString::from).into();
    let persistence: &[&str] = if site.options.persistent {
        &["--appendonly", "yes", "--appendfsync", "always"]
    } else {
        &["--appendonly", "no"]
    };
    args.extend(persistence.iter().map(OsString::from));
    args.extend(["--dir".into(), site.data().into_os_string()]);
    args
}

/// `PING` answers `+PONG`, or `-LOADING` while the AOF is read back.
fn probe(stream: &mut TcpStream, _port: u16) -> Result<(), String> {
    stream.write_all(b"PING\r\n").map_err(|error| format!("write: {error}"))?;
    let reply = read_reply(stream, 256, true)?;
    match reply.starts_with(b"+PONG") {
        true => Ok(()),
        false => Err(format!("PING answered {:?}", String::from_utf8_lossy(&reply).trim())),
    }
}
