//! ZooKeeper (Debian's `zookeeper` 3.8): `QuorumPeerMain` on the JVM with
//! lockcheck's own `zoo.cfg`: a private data directory, a client port on
//! loopback, a short tick so that short sessions are allowed, and the
//! AdminServer (an HTTP port of its own) off. No systemd, no
//! `/etc/zookeeper`: the server is started like the others, as a child of
//! the tool.
//!
//! ZooKeeper reads its settings from a file only, and the ports are known
//! only when the server is launched, so the kind's arguments write
//! `zoo.cfg` beside the data as they are made. The JVM reads its wall clock
//! through libc, so libfaketime moves it; ZooKeeper's sessions expire by
//! its monotonic clock, which a clock fault leaves alone.

use std::ffi::OsString;
use std::fs;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::Path;
use std::time::Instant;

use super::{
    release_ports, reserve_ports, EnvUrls, Launch, ManagedServer, Package, ServerKind,
    ServerOptions, Site, PORT_ATTEMPTS,
};
use crate::proxy::Proxy;
use crate::RealError;

/// The jar of Debian's package, and the logger that makes its log useful
/// (without it, SLF4J drops every line).
const CLASSPATH: &str = "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar";
const JAR: &str = "/usr/share/java/zookeeper.jar";

/// A tick of 200 ms: sessions may be as short as two ticks (400 ms) and as
/// long as a minute.
const TICK_MS: u64 = 200;
const MAX_SESSION_MS: u64 = 60_000;

// Named like the other kinds' values, so that callers read the same.
#[allow(non_upper_case_globals)]
impl ServerKind {
    /// ZooKeeper: a client port, and the two ports a member of an ensemble
    /// talks to its peers on (unused by a single server).
    pub const ZooKeeper: ServerKind = ServerKind {
        name: "zookeeper",
        aliases: &[],
        binaries: &["java"],
        package: Package::Debian("zookeeper"),
        bin_dir: None,
        root_user: None,
        stop_signal: "TERM",
        ignores_faketime: None,
        ports: 3,
        durable: true,
        data_knows_ports: false,
        several: false,
        pools: false,
        url: |port| format!("zk://127.0.0.1:{port}"),
        prepare,
        args,
        probe,
        exec_env: &[("LOCKCHECK_ZOOKEEPER_SERVERS", EnvUrls::Joined)],
    };
}

/// The data directory; an error that says how to install ZooKeeper when
/// its jar is missing (`java` alone is no ZooKeeper).
fn prepare(site: &Site) -> io::Result<Option<Vec<OsString>>> {
    if !Path::new(JAR).exists() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("{JAR} is missing: install ZooKeeper with apt-get install -y zookeeper"),
        ));
    }
    fs::create_dir_all(site.data())?;
    Ok(None)
}

/// What `zoo.cfg` says of a server alone on its ports (an ensemble's
/// member adds its `server.N` lines).
fn config(site: &Site) -> String {
    format!(
        "tickTime={TICK_MS}\n\
         initLimit=50\n\
         syncLimit=10\n\
         dataDir={}\n\
         clientPort={}\n\
         clientPortAddress=127.0.0.1\n\
         minSessionTimeout={}\n\
         maxSessionTimeout={MAX_SESSION_MS}\n\
         admin.enableServer=false\n\
         4lw.commands.whitelist=srvr,ruok\n\
         autopurge.purgeInterval=0\n",
        site.data().display(),
        site.port(),
        2 * TICK_MS,
    )
}

/// The JVM's arguments: a small heap, the AdminServer off, then
/// `QuorumPeerMain` and the `zoo.cfg` written here.
fn java_args(site: &Site, config_text: &str) -> Vec<OsString> {
    let path = site.dir.join("zoo.cfg");
    // The arguments are made right before the launch: a file that cannot be
    // written shows as the server's own error (no such file), in its log.
    let _ = fs::write(&path, config_text);
    let mut args: Vec<OsString> = [
        "-Xms32m",
        "-Xmx256m",
        "-XX:+UseSerialGC",
        "-Dzookeeper.admin.enableServer=false",
        "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
        "-cp",
        CLASSPATH,
        "org.apache.zookeeper.server.quorum.QuorumPeerMain",
    ]
    .map(OsString::from)
    .into();
    args.push(path.into_os_string());
    args
}

/// A server alone: standalone mode.
fn args(site: &Site) -> Vec<OsString> {
    java_args(site, &config(site))
}

/// `srvr` answers with the server's mode (`standalone`, `leader`,
/// `follower`) once it serves requests, and says it does not otherwise (a
/// member without a quorum).
fn probe(stream: &mut TcpStream, _port: u16) -> Result<(), String> {
    stream.write_all(b"srvr").map_err(|error| format!("write: {error}"))?;
    let mut reply = Vec::new();
    stream.take(4096).read_to_end(&mut reply).map_err(|error| format!("read: {error}"))?;
    let reply = String::from_utf8_lossy(&reply);
    match reply.lines().any(|line| line.starts_with("Mode: ")) {
        true => Ok(()),
        false => Err(format!("srvr answered {:?}", reply.lines().next().unwrap_or_default())),
    }
}

impl ManagedServer {
    /// Starts a ZooKeeper ensemble of `members` (three: one may fail), each
    /// member one server, its URL its client URL. With `proxy`, each
    /// member reaches its peers through the proxy, on the links
    /// `zookeeper-i -> zookeeper-j`, so a test can partition them; without,
    /// directly. Started again on new ports when a member could not bind
    /// its own.
    pub fn start_zookeeper_ensemble(
        members: usize,
        options: &ServerOptions,
        proxy: Option<&Proxy>,
    ) -> Result<Vec<ManagedServer>, RealError> {
        let mut servers = Vec::with_capacity(members);
        for _ in 0..members {
            servers.push(ManagedServer::create(ServerKind::ZooKeeper, options)?);
        }
        if servers.is_empty() {
            return Ok(servers);
        }
        let deadline = Instant::now() + options.ready_timeout;
        for attempt in 1..=PORT_ATTEMPTS {
            if ManagedServer::launch_zookeeper_members(&mut servers, proxy, deadline)? {
                return Ok(servers);
            }
            if attempt == PORT_ATTEMPTS {
                return Err(servers[0].error("no free port"));
            }
            for server in &mut servers {
                server.kill_process();
                release_ports(&std::mem::take(&mut server.ports));
            }
        }
        Ok(servers)
    }

    /// Gives the members new ports and each its `myid` and `zoo.cfg`, runs
    /// them and waits until every one serves (which needs a quorum, so a
    /// leader); `false` when one could not bind its port.
    fn launch_zookeeper_members(
        servers: &mut [ManagedServer],
        proxy: Option<&Proxy>,
        deadline: Instant,
    ) -> Result<bool, RealError> {
        for server in servers.iter_mut() {
            server.ports =
                reserve_ports(ServerKind::ZooKeeper.ports).map_err(|error| server.error(error))?;
        }
        let peers: Vec<(SocketAddr, SocketAddr)> = servers
            .iter()
            .map(|server| {
                let at = |port: u16| SocketAddr::from((Ipv4Addr::LOCALHOST, port));
                (at(server.ports[1]), at(server.ports[2]))
            })
            .collect();
        for (at, server) in servers.iter_mut().enumerate() {
            let mut lines = Vec::with_capacity(peers.len());
            for (other, &(quorum, election)) in peers.iter().enumerate() {
                // A member binds its own ports and dials its peers', or the
                // proxy's listeners for them.
                let (quorum, election) = match proxy {
                    Some(proxy) if other != at => {
                        let (from, to) = (format!("zookeeper-{at}"), format!("zookeeper-{other}"));
                        (proxy.route(&from, &to, quorum)?, proxy.route(&from, &to, election)?)
                    }
                    _ => (quorum, election),
                };
                lines.push(format!(
                    "server.{}=127.0.0.1:{}:{}",
                    other + 1,
                    quorum.port(),
                    election.port()
                ));
            }
            let site = server.site();
            let written = fs::write(site.data().join("myid"), format!("{}\n", at + 1));
            written.map_err(|error| server.error(format!("cannot write its myid: {error}")))?;
            let config = format!("{}{}\n", config(&site), lines.join("\n"));
            let args = java_args(&site, &config);
            server.launch = Launch { program: server.programs.server.clone(), args };
            server.spawn()?;
        }
        for server in servers.iter_mut() {
            match server.wait_ready(deadline) {
                Ok(()) => {}
                Err(failure) if failure.port_taken => return Ok(false),
                Err(failure) => return Err(server.error(failure.reason)),
            }
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_alone_runs_quorum_peer_main_on_its_own_config() {
        let dir = std::env::temp_dir().join(format!("lockcheck-zk-args-{}", std::process::id()));
        fs::create_dir_all(&dir).expect("a temporary folder");
        let options = ServerOptions::default();
        let site =
            Site { dir: &dir, ports: &[6000, 6001, 6002], options: &options, root: false, id: 1 };
        let args: Vec<String> =
            args(&site).iter().map(|arg| arg.to_string_lossy().into_owned()).collect();
        let at =
            args.iter().position(|arg| arg.ends_with("QuorumPeerMain")).expect("the main class");
        assert_eq!(args[at + 1], dir.join("zoo.cfg").display().to_string());
        assert!(args.contains(&"-Dzookeeper.admin.enableServer=false".to_string()), "{args:?}");
        let config = fs::read_to_string(dir.join("zoo.cfg")).expect("zoo.cfg written");
        for line in [
            "clientPort=6000",
            "clientPortAddress=127.0.0.1",
            "admin.enableServer=false",
            "minSessionTimeout=400",
            &format!("dataDir={}", dir.join("data").display()),
        ] {
            assert!(config.lines().any(|have| have == line), "{line} not in {config}");
        }
        assert!(!config.contains("server.1="), "a server alone has no peers: {config}");
        let _ = fs::remove_dir_all(&dir);
    }
}
