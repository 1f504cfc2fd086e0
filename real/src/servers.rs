//! Servers the tool manages itself: private instances of Redis, PostgreSQL,
//! MariaDB and etcd, started from the binaries installed on this machine, on
//! free loopback ports, each in its own temporary directory.
//!
//! The promise is that no server outlives the tool, however it ends:
//! * a normal return or an error return drops the [`ManagedServer`], which
//!   stops the server and deletes its directory; so does a panic, unwinding;
//! * Ctrl-C, SIGTERM or SIGHUP: the tool's handler ([`lockcheck_workloads::interrupt`],
//!   installed with the first server if not before) stops every live
//!   server (a global registry knows them all), deletes their directories,
//!   and the tool exits with 128 + the signal (130, 143, 129);
//! * SIGKILL, or `std::process::exit` without [`stop_all`]: every server is
//!   started through `setpriv --pdeathsig KILL`, so the kernel kills it when
//!   its parent dies. The parent-death signal fires when the parent *thread*
//!   ends, so every server is spawned by one thread that lives as long as
//!   the tool. Its temporary directory stays behind in that case, until
//!   the next run that starts a server removes it ([`leftovers`]).
//!
//! Each server leads its own process group, so that stopping it also stops
//! the processes it forks (PostgreSQL's backends), and a Ctrl-C typed at the
//! terminal reaches the tool, which then stops the servers in order.
//!
//! PostgreSQL refuses to run as root (and CI runs as root): then `initdb`
//! and `postgres` run as the `postgres` user (`setpriv --reuid=postgres`,
//! which, unlike `runuser`, execs instead of forking, so the parent-death
//! signal reaches the server itself), in a directory owned by that user.
//!
//! A server started with [`ServerOptions::faketime`] reads its wall clock
//! through Debian's libfaketime, preloaded into the server only (never into
//! this tool, nor into setup tools such as `initdb`), so that
//! [`ManagedServer::set_clock`] can jump the server's clock while it runs:
//! Redis expires keys by its wall clock, so a forward jump frees locks early
//! (docs/guide.md#redis). See [`ManagedServer::set_clock`] for how.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};
use std::{env, thread};

use super::leftovers;
use super::proxy::Proxy;
use super::RealError;

/// The servers the tool can start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ServerKind {
    Redis,
    Postgres,
    Mariadb,
    Etcd,
}

impl ServerKind {
    pub const ALL: [ServerKind; 4] =
        [ServerKind::Redis, ServerKind::Postgres, ServerKind::Mariadb, ServerKind::Etcd];

    pub fn name(self) -> &'static str {
        match self {
            ServerKind::Redis => "redis",
            ServerKind::Postgres => "postgres",
            ServerKind::Mariadb => "mariadb",
            ServerKind::Etcd => "etcd",
        }
    }

    /// The binaries it needs: the server first, then its setup tool.
    pub fn binaries(self) -> &'static [&'static str] {
        match self {
            ServerKind::Redis => &["redis-server"],
            ServerKind::Postgres => &["postgres", "initdb"],
            ServerKind::Mariadb => &["mariadbd", "mariadb-install-db"],
            ServerKind::Etcd => &["etcd"],
        }
    }

    /// The Debian package that installs the binaries.
    pub fn package(self) -> &'static str {
        match self {
            ServerKind::Redis => "redis-server",
            ServerKind::Postgres => "postgresql",
            ServerKind::Mariadb => "mariadb-server",
            ServerKind::Etcd => "etcd-server",
        }
    }

    /// The signal that shuts it down cleanly. PostgreSQL's SIGTERM is a
    /// "smart" shutdown that waits for every client to leave; SIGINT is its
    /// fast one.
    fn stop_signal(self) -> &'static str {
        match self {
            ServerKind::Postgres => "INT",
            ServerKind::Redis | ServerKind::Mariadb | ServerKind::Etcd => "TERM",
        }
    }

    /// Whether libfaketime can fake this server's wall clock
    /// ([`ServerOptions::faketime`]). Not etcd's: etcd is a statically
    /// linked Go program, which reads the clock through the vDSO or raw
    /// system calls, never through libc, so `LD_PRELOAD` has no effect on
    /// it and a faked clock would silently stay real. Starting etcd with
    /// `faketime` is therefore an error.
    pub fn clock_is_fakeable(self) -> bool {
        match self {
            ServerKind::Redis | ServerKind::Postgres | ServerKind::Mariadb => true,
            ServerKind::Etcd => false,
        }
    }

    /// Loopback ports a server listens on: etcd has a peer port too.
    fn port_count(self) -> usize {
        match self {
            ServerKind::Etcd => 2,
            ServerKind::Redis | ServerKind::Postgres | ServerKind::Mariadb => 1,
        }
    }
}

/// How to start a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerOptions {
    /// Redis: an append-only file fsynced on every write, so a server killed
    /// and restarted keeps its keys. (The others always persist.)
    pub persistent: bool,
    /// How long the server may take to answer after it was started.
    pub ready_timeout: Duration,
    /// The server reads its wall clock through libfaketime (package
    /// `faketime`), so that [`ManagedServer::set_clock`] can jump it: a
    /// clock nemesis. Only for kinds whose
    /// [`ServerKind::clock_is_fakeable`]; kept across restarts.
    pub faketime: bool,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions { persistent: false, ready_timeout: Duration::from_secs(60), faketime: false }
    }
}

/// How long a server may take to stop cleanly before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// How long the signal handler lets servers stop cleanly: shorter, since
/// someone is waiting for the tool to exit.
const EXIT_GRACE: Duration = Duration::from_secs(3);
/// How long a setup tool (`initdb`, `mariadb-install-db`) may run.
const SETUP_TIMEOUT: Duration = Duration::from_secs(120);
/// One readiness probe's connect and read timeout.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);
const POLL: Duration = Duration::from_millis(25);
/// Starts retried on a new port when another process took the chosen one
/// between our probe and the server's bind.
const PORT_ATTEMPTS: usize = 3;
const LOG_TAIL_LINES: usize = 25;

/// The program and arguments that run one server (kept to restart it).
#[derive(Debug, Clone, Default)]
struct Launch {
    program: PathBuf,
    args: Vec<OsString>,
}

/// A server this tool started, stopped and deleted when dropped.
#[derive(Debug)]
pub struct ManagedServer {
    kind: ServerKind,
    /// Its key in the registry of live servers.
    id: u64,
    dir: PathBuf,
    /// The client port, then etcd's peer port.
    ports: Vec<u16>,
    programs: Programs,
    launch: Launch,
    child: Option<Child>,
    pid: u32,
    options: ServerOptions,
    /// Where its faked clock is set, when started with `faketime`.
    clock: Option<FakeClock>,
}

impl ManagedServer {
    /// Starts a server of `kind` with the default options and waits until it
    /// answers.
    pub fn start(kind: ServerKind) -> Result<ManagedServer, RealError> {
        ManagedServer::start_with(kind, &ServerOptions::default())
    }

    /// Starts a server of `kind` and waits until it answers.
    pub fn start_with(kind: ServerKind, options: &ServerOptions) -> Result<Self, RealError> {
        let mut server = ManagedServer::create(kind, options)?;
        let deadline = Instant::now() + options.ready_timeout;
        for attempt in 1..=PORT_ATTEMPTS {
            server.ports = reserve_ports(kind.port_count()).map_err(|error| server.error(error))?;
            server.launch = server.single_launch();
            server.spawn()?;
            match server.wait_ready(deadline) {
                Ok(()) => return Ok(server),
                Err(failure) if failure.port_taken && attempt < PORT_ATTEMPTS => {
                    server.kill_process();
                    release_ports(&std::mem::take(&mut server.ports));
                    if kind == ServerKind::Etcd {
                        // Its member id is bound to the old peer URL.
                        let _ = fs::remove_dir_all(server.data_dir());
                    }
                }
                Err(failure) => return Err(server.error(failure.reason)),
            }
        }
        Err(server.error("no free port"))
    }

    /// Starts `count` servers of `kind` at once (Redlock's five Redis).
    pub fn start_many(
        kind: ServerKind,
        count: usize,
        options: &ServerOptions,
    ) -> Result<Vec<ManagedServer>, RealError> {
        let results: Vec<Result<ManagedServer, RealError>> = thread::scope(|scope| {
            let starts: Vec<_> = (0..count)
                .map(|_| scope.spawn(|| ManagedServer::start_with(kind, options)))
                .collect();
            starts
                .into_iter()
                .map(|start| start.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
                .collect()
        });
        // On an error the servers already started are dropped: stopped.
        results.into_iter().collect()
    }

    /// Starts an etcd cluster of `members` (3 for a partition test): every
    /// member is one server, its URL its client URL.
    pub fn start_etcd_cluster(
        members: usize,
        options: &ServerOptions,
    ) -> Result<Vec<ManagedServer>, RealError> {
        ManagedServer::start_etcd_members(members, options, None)
    }

    /// Starts an etcd cluster of `members` whose peer traffic goes through
    /// `proxy`, so a test can partition the members: member `i` is the node
    /// `etcd-i` of the proxy (its etcd `--name` stays `member-i`). Each
    /// member advertises a [`Proxy::route_peers`] listener as its peer URL
    /// and listens on its real port; once the cluster runs, each member's id
    /// is aliased to its node name, so the peer connections are attributed
    /// to their links. Clients reach the members through the proxy by the
    /// URLs a route per client gives (a listener per client and
    /// member), or directly at [`ManagedServer::url`].
    pub fn start_etcd_cluster_behind(
        members: usize,
        options: &ServerOptions,
        proxy: &Proxy,
    ) -> Result<Vec<ManagedServer>, RealError> {
        ManagedServer::start_etcd_members(members, options, Some(proxy))
    }

    /// An etcd cluster whose members dial each other directly, or through
    /// `proxy`'s peer listeners. Started again on new ports when a member
    /// could not bind its own (another process took it after we chose it).
    fn start_etcd_members(
        members: usize,
        options: &ServerOptions,
        proxy: Option<&Proxy>,
    ) -> Result<Vec<ManagedServer>, RealError> {
        let mut servers = Vec::with_capacity(members);
        if members == 0 {
            return Ok(servers);
        }
        for _ in 0..members {
            servers.push(ManagedServer::create(ServerKind::Etcd, options)?);
        }
        let deadline = Instant::now() + options.ready_timeout;
        for attempt in 1..=PORT_ATTEMPTS {
            if ManagedServer::launch_etcd_members(&mut servers, proxy, deadline)? {
                break;
            }
            if attempt == PORT_ATTEMPTS {
                return Err(servers[0].error("no free port"));
            }
            for server in &mut servers {
                server.kill_process();
                release_ports(&std::mem::take(&mut server.ports));
                // Its member id is bound to the old peer URLs.
                let _ = fs::remove_dir_all(server.data_dir());
            }
        }
        if let Some(proxy) = proxy {
            for (name, id) in servers[0].etcd_member_ids()? {
                // etcd's rafthttp sends its id as lowercase hex, unpadded.
                let at = name.strip_prefix("member-").unwrap_or(&name);
                proxy.alias(&format!("{id:x}"), &format!("etcd-{at}"));
            }
        }
        Ok(servers)
    }

    /// Gives the members new ports, runs them and waits until every one is
    /// ready; `false` when one could not bind its port.
    fn launch_etcd_members(
        servers: &mut [ManagedServer],
        proxy: Option<&Proxy>,
        deadline: Instant,
    ) -> Result<bool, RealError> {
        let mut cluster = Vec::with_capacity(servers.len());
        for (at, server) in servers.iter_mut().enumerate() {
            server.ports = reserve_ports(2).map_err(|error| server.error(error))?;
            let peer = SocketAddr::from((Ipv4Addr::LOCALHOST, server.ports[1]));
            // A retry leaves the earlier attempt's listener unused.
            let advertised = match proxy {
                Some(proxy) => proxy.route_peers(&format!("etcd-{at}"), peer)?,
                None => peer,
            };
            cluster.push(format!("member-{at}=http://{advertised}"));
        }
        let cluster = cluster.join(",");
        let token = format!("lockcheck-{}-{}", std::process::id(), servers[0].id);
        for (at, server) in servers.iter_mut().enumerate() {
            server.launch = server.etcd_launch(&format!("member-{at}"), &cluster, &token);
            server.spawn()?;
        }
        // No member is healthy before a majority has started and elected.
        for server in servers.iter_mut() {
            match server.wait_ready(deadline) {
                Ok(()) => {}
                Err(failure) if failure.port_taken => return Ok(false),
                Err(failure) => return Err(server.error(failure.reason)),
            }
        }
        Ok(true)
    }

    /// The cluster's members as etcd lists them: each one's `--name` and
    /// id. Asked of etcd's JSON gateway (3.4 serves `/v3/`), which spells
    /// the 64-bit ids as decimal strings.
    fn etcd_member_ids(&self) -> Result<Vec<(String, u64)>, RealError> {
        let failed = |reason: String| self.error(format!("cannot list the members: {reason}"));
        let port = self.port();
        let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port))
            .map_err(|error| failed(format!("connect: {error}")))?;
        let timeouts = stream
            .set_read_timeout(Some(STOP_GRACE))
            .and_then(|()| stream.set_write_timeout(Some(STOP_GRACE)));
        timeouts.map_err(|error| failed(error.to_string()))?;
        let request = format!(
            "POST /v3/cluster/member/list HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
        );
        stream.write_all(request.as_bytes()).map_err(|error| failed(format!("write: {error}")))?;
        let reply = read_reply(&mut stream, 1024 * 1024, false).map_err(failed)?;
        let reply = String::from_utf8_lossy(&reply);
        // The JSON document, whether or not the body came in one chunk.
        let json = match (reply.find('{'), reply.rfind('}')) {
            (Some(start), Some(end)) if start < end => &reply[start..=end],
            _ => return Err(failed(format!("answered {reply:?}"))),
        };
        let list: serde_json::Value =
            serde_json::from_str(json).map_err(|error| failed(format!("{error} in {json}")))?;
        let members = list["members"].as_array().cloned().unwrap_or_default();
        let ids: Vec<(String, u64)> = members
            .iter()
            .filter_map(|member| {
                let id = &member["ID"];
                let id = id.as_u64().or_else(|| id.as_str()?.parse().ok())?;
                Some((member["name"].as_str()?.to_string(), id))
            })
            .collect();
        match ids.is_empty() {
            true => Err(failed(format!("no member in {json}"))),
            false => Ok(ids),
        }
    }

    pub fn kind(&self) -> ServerKind {
        self.kind
    }

    /// Where clients connect.
    pub fn url(&self) -> String {
        let port = self.port();
        match self.kind {
            ServerKind::Redis => format!("redis://127.0.0.1:{port}"),
            ServerKind::Postgres => format!("postgres://postgres@127.0.0.1:{port}/postgres"),
            ServerKind::Mariadb => format!("mysql://root@127.0.0.1:{port}/test"),
            ServerKind::Etcd => format!("http://127.0.0.1:{port}"),
        }
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.ports.first().copied().unwrap_or(0)
    }

    /// The server process (the leader of its process group); after
    /// [`ManagedServer::crash`], the one that was killed.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The temporary directory with its data and log, deleted on stop.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The last lines the server logged.
    pub fn log_tail(&self) -> String {
        log_tail(&self.dir.join("server.log"))
    }

    /// Stops the server and deletes its directory (as dropping it does).
    pub fn stop(self) {}

    /// Kills the server at once (SIGKILL), keeping its data: a crash, for a
    /// kill nemesis. [`ManagedServer::restart`] brings it back.
    pub fn crash(&mut self) {
        self.kill_process();
    }

    /// Starts the server again on the same port with the same data, after
    /// [`ManagedServer::crash`], and waits until it answers.
    pub fn restart(&mut self) -> Result<(), RealError> {
        self.kill_process();
        self.spawn()?;
        let deadline = Instant::now() + self.options.ready_timeout;
        self.wait_ready(deadline).map_err(|failure| self.error(failure.reason))
    }

    /// From now on the server's wall clock reads real time + `offset_ms`
    /// (negative: behind); 0 brings it back to real time. Its monotonic
    /// clock and its sleeps are left alone, so its timers run as before:
    /// only what it does by the wall clock (Redis's key expiry, `TIME`,
    /// PostgreSQL's `now()`) sees the jump.
    ///
    /// How: the server runs with `FAKETIME_TIMESTAMP_FILE` pointing at a
    /// file in its directory and `FAKETIME_NO_CACHE=1`, so libfaketime reads
    /// the file at every clock call. The file holds a relative offset in
    /// libfaketime 0.9.10's syntax: a sign, then seconds with a decimal
    /// fraction (`+1.500`, `-0.250`, `+0.000`). A unit suffix would be read
    /// as minutes, hours or days (`+1500ms` is 1500 *minutes*), and text it
    /// cannot parse makes libfaketime exit the server, so the file is
    /// replaced atomically (written aside, then renamed over), never
    /// rewritten in place where the server could read half of it.
    ///
    /// An error if the server was not started with
    /// [`ServerOptions::faketime`], or if the file cannot be written.
    pub fn set_clock(&self, offset_ms: i64) -> Result<(), RealError> {
        let clock = self.clock.as_ref().ok_or_else(|| {
            self.error("its clock cannot be set: it was not started with the faketime option")
        })?;
        clock.set(offset_ms).map_err(|error| {
            self.error(format!("cannot set its clock in {}: {error}", clock.file.display()))
        })
    }

    /// Freezes the server and its children (SIGSTOP): it accepts
    /// connections but answers nothing until [`ManagedServer::resume`].
    pub fn pause(&self) -> Result<(), RealError> {
        self.signal_group("STOP")
    }

    pub fn resume(&self) -> Result<(), RealError> {
        self.signal_group("CONT")
    }

    fn signal_group(&self, signal: &str) -> Result<(), RealError> {
        if self.child.is_none() || !signal_group(self.pid, signal) {
            return Err(self.error(format!("cannot send SIG{signal} to its process group")));
        }
        Ok(())
    }

    /// A registered, empty server of `kind`: its binaries found, its
    /// directory made and prepared (the database initialised), no process.
    fn create(kind: ServerKind, options: &ServerOptions) -> Result<ManagedServer, RealError> {
        let programs = Programs::locate(kind)?;
        let library = match options.faketime {
            true => Some(FakeClock::library(kind)?),
            false => None,
        };
        let (id, dir) = new_dir(kind)?;
        let mut server = ManagedServer {
            kind,
            id,
            dir,
            ports: Vec::new(),
            programs,
            launch: Launch::default(),
            child: None,
            pid: 0,
            options: options.clone(),
            clock: None,
        };
        if let Some(library) = library {
            // Dropping the server on an error deletes its directory.
            let clock = FakeClock::new(library, &server.dir).map_err(|error| {
                server.error(format!("cannot prepare its clock for libfaketime: {error}"))
            })?;
            server.clock = Some(clock);
        }
        server.prepare()?;
        Ok(server)
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn error(&self, reason: impl std::fmt::Display) -> RealError {
        RealError::Server { what: self.kind.name(), reason: reason.to_string() }
    }

    /// Makes the data directory, as the server's setup tool does.
    fn prepare(&self) -> Result<(), RealError> {
        let data = self.data_dir();
        match self.kind {
            ServerKind::Redis => fs::create_dir(&data).map_err(|error| self.error(error)),
            ServerKind::Etcd => Ok(()),
            ServerKind::Postgres => {
                let mut args: Vec<OsString> = vec!["-D".into(), data.into()];
                args.extend(
                    ["-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"]
                        .map(OsString::from),
                );
                self.run_setup(&self.programs.setup, args)
            }
            ServerKind::Mariadb => {
                let mut args = vec![
                    OsString::from("--no-defaults"),
                    flag("--datadir=", &data),
                    "--auth-root-authentication-method=normal".into(),
                    "--skip-name-resolve".into(),
                ];
                if self.programs.root {
                    args.push("--user=root".into());
                }
                fs::write(self.dir.join("init.sql"), "CREATE DATABASE IF NOT EXISTS test;\n")
                    .map_err(|error| self.error(error))?;
                self.run_setup(&self.programs.setup, args)
            }
        }
    }

    /// Runs a setup tool to the end, owned like a server, so that a Ctrl-C
    /// during a slow `initdb` stops it too.
    fn run_setup(&self, program: &Path, args: Vec<OsString>) -> Result<(), RealError> {
        let log_path = self.dir.join("setup.log");
        let launch = Launch { program: program.to_path_buf(), args };
        let command = self.command(&launch, &log_path).map_err(|error| self.error(error))?;
        let mut child = spawn_owned(self.id, command).map_err(|error| self.error(error))?;
        let status = wait_timeout(&mut child, SETUP_TIMEOUT).map_err(|error| self.error(error));
        if !matches!(status, Ok(Some(_))) {
            let _ = child.kill();
            let _ = child.wait();
        }
        set_leader(self.id, None);
        let outcome = match status? {
            Some(status) if status.success() => return Ok(()),
            Some(status) => format!("exited with {status}"),
            None => format!("did not finish within {} s", SETUP_TIMEOUT.as_secs()),
        };
        Err(self.error(format!(
            "{} {outcome}; last lines of {}:\n{}",
            program.display(),
            log_path.display(),
            log_tail(&log_path)
        )))
    }

    /// How to run this server alone on its ports.
    fn single_launch(&self) -> Launch {
        let (data, port) = (self.data_dir(), self.port().to_string());
        let args: Vec<OsString> = match self.kind {
            ServerKind::Redis => {
                let mut args: Vec<OsString> =
                    ["--port", port.as_str(), "--bind", "127.0.0.1", "--save", ""]
                        .map(OsString::from)
                        .into();
                let persistence: &[&str] = if self.options.persistent {
                    &["--appendonly", "yes", "--appendfsync", "always"]
                } else {
                    &["--appendonly", "no"]
                };
                args.extend(persistence.iter().map(OsString::from));
                args.extend(["--dir".into(), data.into_os_string()]);
                args
            }
            ServerKind::Postgres => {
                let mut args: Vec<OsString> = vec!["-D".into(), data.into(), "-p".into()];
                args.push(port.into());
                args.extend(["-k".into(), self.dir.clone().into_os_string()]);
                // fsync off: a killed server loses nothing the kernel has,
                // and a test never survives the machine.
                for setting in ["listen_addresses=127.0.0.1", "fsync=off", "max_connections=200"] {
                    args.extend(["-c".into(), setting.into()]);
                }
                args
            }
            ServerKind::Mariadb => {
                let mut args = vec![
                    OsString::from("--no-defaults"),
                    flag("--datadir=", &data),
                    format!("--port={port}").into(),
                    "--bind-address=127.0.0.1".into(),
                    flag("--socket=", &self.dir.join("mysql.sock")),
                    flag("--pid-file=", &self.dir.join("mariadbd.pid")),
                    flag("--init-file=", &self.dir.join("init.sql")),
                    "--skip-name-resolve".into(),
                    // Readiness probes leave before authenticating, which
                    // MariaDB would otherwise count towards blocking us.
                    "--max-connect-errors=1000000".into(),
                ];
                if self.programs.root {
                    args.push("--user=root".into());
                }
                args
            }
            ServerKind::Etcd => {
                let cluster = format!("default=http://127.0.0.1:{}", self.ports[1]);
                let token = format!("lockcheck-{}-{}", std::process::id(), self.id);
                return self.etcd_launch("default", &cluster, &token);
            }
        };
        Launch { program: self.programs.server.clone(), args }
    }

    /// How to run one etcd member `name` of `cluster` (`name=peer-url,…`).
    fn etcd_launch(&self, name: &str, cluster: &str, token: &str) -> Launch {
        let client = format!("http://127.0.0.1:{}", self.ports[0]);
        let peer = format!("http://127.0.0.1:{}", self.ports[1]);
        // The URL the cluster knows this member by: a proxy's listener when
        // its peers talk through one, else the port it listens on.
        let advertised = cluster
            .split(',')
            .find_map(|member| member.strip_prefix(name)?.strip_prefix('='))
            .unwrap_or(&peer);
        let mut args: Vec<OsString> = vec!["--name".into(), name.into()];
        args.extend(["--data-dir".into(), self.data_dir().into_os_string()]);
        for (option, value) in [
            ("--listen-client-urls", client.as_str()),
            ("--advertise-client-urls", &client),
            ("--listen-peer-urls", &peer),
            ("--initial-advertise-peer-urls", advertised),
            ("--initial-cluster", cluster),
            ("--initial-cluster-state", "new"),
            ("--initial-cluster-token", token),
        ] {
            args.extend([option.into(), value.into()]);
        }
        Launch { program: self.programs.server.clone(), args }
    }

    /// `launch` wrapped so the kernel kills it with its parent, run as the
    /// `postgres` user where PostgreSQL needs it, in its own process group,
    /// logging to `log_path` (appended: a restart keeps the earlier lines).
    fn command(&self, launch: &Launch, log_path: &Path) -> io::Result<Command> {
        let log = OpenOptions::new().create(true).append(true).open(log_path)?;
        let mut command = Command::new(&self.programs.setpriv);
        if self.kind == ServerKind::Postgres && self.programs.root {
            command.args(["--reuid=postgres", "--regid=postgres", "--init-groups"]);
        }
        command.args(["--pdeathsig", "KILL", "--"]).arg(&launch.program).args(&launch.args);
        command.current_dir(&self.dir).stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log);
        command.process_group(0);
        Ok(command)
    }

    /// Starts the server process, with `faketime` under libfaketime (setup
    /// tools never are).
    fn spawn(&mut self) -> Result<(), RealError> {
        let log_path = self.dir.join("server.log");
        let launch = match &self.clock {
            Some(clock) => clock.wrap(&self.launch),
            None => self.launch.clone(),
        };
        let command = self.command(&launch, &log_path).map_err(|error| self.error(error))?;
        let child = spawn_owned(self.id, command).map_err(|error| self.error(error))?;
        self.pid = child.id();
        self.child = Some(child);
        Ok(())
    }

    /// Probes until the server answers, it exits, or `deadline` passes.
    fn wait_ready(&mut self, deadline: Instant) -> Result<(), NotReady> {
        loop {
            let exited = match self.child.as_mut().map(Child::try_wait) {
                None => Some("is not running".to_string()),
                Some(Ok(Some(status))) => Some(format!("exited with {status}")),
                Some(Ok(None)) => None,
                Some(Err(error)) => Some(format!("cannot be waited for: {error}")),
            };
            if let Some(exited) = exited {
                let tail = self.log_tail();
                let port_taken = tail.to_lowercase().contains("already in use");
                let reason = format!("it {exited}; {}", self.tail_note(&tail));
                return Err(NotReady { reason, port_taken });
            }
            let last = match probe(self.kind, self.port()) {
                Ok(()) => return Ok(()),
                Err(reason) => reason,
            };
            if Instant::now() >= deadline {
                self.kill_process();
                let reason = format!(
                    "it did not answer within {} s (last probe: {last}); {}",
                    self.options.ready_timeout.as_secs(),
                    self.tail_note(&self.log_tail())
                );
                return Err(NotReady { reason, port_taken: false });
            }
            thread::sleep(POLL);
        }
    }

    fn tail_note(&self, tail: &str) -> String {
        format!("last lines of {}:\n{tail}", self.dir.join("server.log").display())
    }

    /// Kills the server and whatever it forked, at once.
    fn kill_process(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            kill_group(child.id());
            if self.clock.is_some() {
                forget_faketime_memory(child.id());
            }
        }
        set_leader(self.id, None);
    }

    /// Asks the server to shut down, kills it if it does not in time, and
    /// kills its leftover children.
    fn shut_down(&mut self) {
        if let Some(mut child) = self.child.take() {
            send_signal(self.kind.stop_signal(), &child.id().to_string());
            if !matches!(wait_timeout(&mut child, STOP_GRACE), Ok(Some(_))) {
                let _ = child.kill();
                let _ = child.wait();
            }
            kill_group(child.id());
            if self.clock.is_some() {
                forget_faketime_memory(child.id());
            }
        }
    }
}

impl Drop for ManagedServer {
    fn drop(&mut self) {
        self.shut_down();
        let _ = fs::remove_dir_all(&self.dir);
        release_ports(&self.ports);
        registry().live.remove(&self.id);
    }
}

/// Why a server did not become ready.
#[derive(Debug)]
struct NotReady {
    reason: String,
    /// It failed to bind its port: start it again on another.
    port_taken: bool,
}

/// The binaries one kind of server runs, found on this machine.
#[derive(Debug, Clone)]
struct Programs {
    server: PathBuf,
    /// `initdb` or `mariadb-install-db`; the server again where none.
    setup: PathBuf,
    setpriv: PathBuf,
    /// The tool runs as root (PostgreSQL must then switch user).
    root: bool,
}

impl Programs {
    fn locate(kind: ServerKind) -> Result<Programs, RealError> {
        let setpriv = find_on_path("setpriv")
            .ok_or(RealError::MissingBinary { binary: "setpriv", package: "util-linux" })?;
        let missing = |binary| RealError::MissingBinary { binary, package: kind.package() };
        let (server, setup) = match kind {
            ServerKind::Postgres => {
                let bin = postgres_bin_dir().ok_or(missing("postgres"))?;
                (bin.join("postgres"), bin.join("initdb"))
            }
            ServerKind::Mariadb => (
                find_on_path("mariadbd").ok_or(missing("mariadbd"))?,
                find_on_path("mariadb-install-db").ok_or(missing("mariadb-install-db"))?,
            ),
            ServerKind::Redis | ServerKind::Etcd => {
                let binary = kind.binaries()[0];
                let server = find_on_path(binary).ok_or(missing(binary))?;
                (server.clone(), server)
            }
        };
        Ok(Programs { server, setup, setpriv, root: running_as_root() })
    }
}

/// The preload library that fakes a server's clock.
const FAKETIME_LIBRARY: &str = "libfaketime.so.1";

/// A server's faked wall clock: the libfaketime it preloads, and the file
/// in its directory that libfaketime reads the offset from.
#[derive(Debug)]
struct FakeClock {
    library: PathBuf,
    file: PathBuf,
    /// `env`, which sets libfaketime's variables for the server alone.
    env: PathBuf,
}

impl FakeClock {
    /// libfaketime, for a server of `kind`: an error if that kind ignores
    /// it, or if it is not installed (Debian's multiarch directory first).
    fn library(kind: ServerKind) -> Result<PathBuf, RealError> {
        if !kind.clock_is_fakeable() {
            return Err(RealError::Server {
                what: kind.name(),
                reason: format!(
                    "{} ignores libfaketime (a static Go binary reads the clock without libc), \
                     so its clock cannot be faked: start it without the faketime option",
                    kind.name()
                ),
            });
        }
        let multiarch = format!("/usr/lib/{}-linux-gnu/faketime", env::consts::ARCH);
        [multiarch.as_str(), "/usr/lib64/faketime", "/usr/lib/faketime", "/usr/local/lib/faketime"]
            .iter()
            .map(|dir| Path::new(dir).join(FAKETIME_LIBRARY))
            .find(|library| library.is_file())
            .ok_or(RealError::MissingBinary { binary: FAKETIME_LIBRARY, package: "faketime" })
    }

    /// The clock of a server living in `dir`, at real time until set.
    fn new(library: PathBuf, dir: &Path) -> io::Result<FakeClock> {
        let env = find_on_path("env").ok_or_else(|| io::Error::other("`env` is not on PATH"))?;
        let clock = FakeClock { library, file: dir.join("faketime"), env };
        clock.set(0)?;
        Ok(clock)
    }

    /// Writes the offset aside, then renames it over the file: the server
    /// reads the old offset or the new one, never a partial one (which
    /// would make libfaketime exit the server). Readable by all, since
    /// PostgreSQL reads it as the `postgres` user.
    fn set(&self, offset_ms: i64) -> io::Result<()> {
        static WRITES: AtomicU64 = AtomicU64::new(0);
        let aside =
            self.file.with_extension(format!("{}.tmp", WRITES.fetch_add(1, Ordering::Relaxed)));
        let write = || -> io::Result<()> {
            let mut file = File::create(&aside)?;
            file.write_all(faketime_offset(offset_ms).as_bytes())?;
            file.set_permissions(fs::Permissions::from_mode(0o644))?;
            fs::rename(&aside, &self.file)
        };
        let written = write();
        if written.is_err() {
            let _ = fs::remove_file(&aside);
        }
        written
    }

    /// `launch` run through `env`, which gives the server libfaketime's
    /// environment. Not `setpriv`'s: libfaketime in `setpriv` (root) would
    /// make its shared semaphore and pass its name on, which PostgreSQL,
    /// run as `postgres`, cannot open, and libfaketime would exit it.
    ///
    /// glibc is preloaded after libfaketime so that its `malloc` comes
    /// before any allocator the server links: Debian's Redis links
    /// jemalloc, whose first allocation reads the clock, which makes
    /// libfaketime initialise, which allocates, and the server hangs at
    /// start (libfaketime issue #130, unfixed in 0.9.10). The monotonic
    /// clock stays real, so the server's timers do not jump with its wall
    /// clock.
    fn wrap(&self, launch: &Launch) -> Launch {
        let mut preload = OsString::from("LD_PRELOAD=");
        preload.push(&self.library);
        preload.push(":libc.so.6");
        // FAKETIME would take precedence over the file.
        let mut args: Vec<OsString> =
            ["-u", "FAKETIME", "-u", "FAKETIME_SHARED"].map(OsString::from).into();
        args.extend([
            preload,
            flag("FAKETIME_TIMESTAMP_FILE=", &self.file),
            "FAKETIME_NO_CACHE=1".into(),
            "FAKETIME_DONT_FAKE_MONOTONIC=1".into(),
            launch.program.clone().into_os_string(),
        ]);
        args.extend(launch.args.iter().cloned());
        Launch { program: self.env.clone(), args }
    }
}

/// libfaketime in a server makes a semaphore and a shared memory object
/// named by the server's pid, removed when it exits cleanly; a killed
/// server leaves them in /dev/shm, so they are removed once it is gone.
fn forget_faketime_memory(pid: u32) {
    for name in [format!("sem.faketime_sem_{pid}"), format!("faketime_shm_{pid}")] {
        let _ = fs::remove_file(Path::new("/dev/shm").join(name));
    }
}

/// A relative offset as libfaketime 0.9.10 reads it: sign, seconds, and a
/// decimal fraction (`+1.500`); no unit, since `m` would mean minutes.
fn faketime_offset(offset_ms: i64) -> String {
    let sign = if offset_ms < 0 { '-' } else { '+' };
    let magnitude = offset_ms.unsigned_abs();
    format!("{sign}{}.{:03}", magnitude / 1000, magnitude % 1000)
}

fn is_executable(path: &Path) -> bool {
    fs::metadata(path)
        .map(|metadata| metadata.is_file() && metadata.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// A binary on PATH, or in an sbin directory: Debian installs `mariadbd`
/// in /usr/sbin, which is not on an ordinary user's PATH.
fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = env::var_os("PATH").unwrap_or_default();
    let sbin = ["/usr/local/sbin", "/usr/sbin", "/sbin"].map(PathBuf::from);
    env::split_paths(&path)
        .chain(sbin)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

/// PostgreSQL's bin directory: the one `postgres` on PATH really lives in
/// (symlinks resolved, so `initdb` is of the same version), else Debian's
/// newest `/usr/lib/postgresql/<major>/bin`, which is not on PATH.
fn postgres_bin_dir() -> Option<PathBuf> {
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

/// `/proc/self` belongs to the process's effective user.
fn running_as_root() -> bool {
    fs::metadata("/proc/self").map(|metadata| metadata.uid() == 0).unwrap_or(false)
}

fn flag(name: &str, path: &Path) -> OsString {
    let mut flag = OsString::from(name);
    flag.push(path);
    flag
}

/// The last lines of a log, read from its end (a log may be large).
fn log_tail(path: &Path) -> String {
    let read = || -> io::Result<String> {
        let mut file = File::open(path)?;
        let length = file.metadata()?.len();
        file.seek(SeekFrom::Start(length.saturating_sub(16 * 1024)))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    };
    match read() {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
        }
        Err(error) => format!("(cannot read it: {error})"),
    }
}

fn wait_timeout(child: &mut Child, timeout: Duration) -> io::Result<Option<ExitStatus>> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        thread::sleep(POLL.min(Duration::from_millis(10)));
    }
}

/// Sends `signal` (`TERM`, `KILL`, …) to `target`: a pid, or `-pgid` for a
/// whole process group. The `kill` command, since this workspace has no
/// unsafe code to call kill(2) with. Whether it was delivered.
fn send_signal(signal: &str, target: &str) -> bool {
    Command::new("kill")
        .args(["-s", signal, "--", target])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|status| status.success())
        .unwrap_or(false)
}

/// Sends `signal` (`STOP`, `CONT`, `KILL`) to the process group `leader`
/// leads; whether it was delivered.
pub(crate) fn signal_group(leader: u32, signal: &str) -> bool {
    send_signal(signal, &format!("-{leader}"))
}

/// Kills what is left of a server's process group (a PostgreSQL backend,
/// a forked Redis child); usually nothing.
fn kill_group(leader: u32) {
    signal_group(leader, "KILL");
}

/// Whether a process runs (a zombie has ended: it waits only to be reaped).
fn process_alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let state = stat.rsplit_once(')')?.1.trim_start().chars().next()?;
            Some(!matches!(state, 'Z' | 'X' | 'x'))
        })
        .unwrap_or(false)
}

// ---------------------------------------------------------------------------
// Ports

/// Ports handed to live servers of this process, never handed out twice.
static PORTS_IN_USE: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// Free loopback ports, from the kernel: bound all at once (so they differ),
/// then released for the server to bind. Another process may take one in
/// between: the start then retries on another.
fn reserve_ports(count: usize) -> io::Result<Vec<u16>> {
    let mut in_use = PORTS_IN_USE.lock().unwrap_or_else(PoisonError::into_inner);
    let mut listeners = Vec::new();
    let mut ports = Vec::with_capacity(count);
    while ports.len() < count {
        if listeners.len() > count + 64 {
            return Err(io::Error::other("the kernel keeps handing out ports in use"));
        }
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let port = listener.local_addr()?.port();
        if in_use.insert(port) {
            ports.push(port);
        }
        listeners.push(listener);
    }
    Ok(ports)
}

fn release_ports(ports: &[u16]) {
    let mut in_use = PORTS_IN_USE.lock().unwrap_or_else(PoisonError::into_inner);
    for port in ports {
        in_use.remove(port);
    }
}

// ---------------------------------------------------------------------------
// The registry of live servers, the spawner thread and the signal handler

/// A live server: what the signal handler must stop and delete.
#[derive(Debug)]
struct Live {
    dir: PathBuf,
    /// The running process (the server, or its setup tool), if any.
    leader: Option<u32>,
    stop_signal: &'static str,
}

#[derive(Debug)]
struct Registry {
    live: BTreeMap<u64, Live>,
    /// The tool is exiting: start nothing more.
    closing: bool,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry { live: BTreeMap::new(), closing: false });
static NEXT_SERVER: AtomicU64 = AtomicU64::new(0);

fn registry() -> MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(PoisonError::into_inner)
}

fn set_leader(id: u64, leader: Option<u32>) {
    if let Some(live) = registry().live.get_mut(&id) {
        live.leader = leader;
    }
}

/// Registers a new server and makes its directory,
/// `<temp>/lockcheck-<kind>-<pid>-<start>-<n>` (its owner's pid and start
/// time: [`leftovers`]), owned by `postgres` where PostgreSQL will run as
/// that user. The first one removes the folders of runs that are gone.
fn new_dir(kind: ServerKind) -> Result<(u64, PathBuf), RealError> {
    let error = |reason: String| RealError::Server { what: kind.name(), reason };
    lockcheck_workloads::interrupt::install()
        .map_err(|reason| error(format!("cannot catch signals: {reason}")))?;
    static STOP_AT_EXIT: std::sync::Once = std::sync::Once::new();
    STOP_AT_EXIT.call_once(|| lockcheck_workloads::interrupt::at_exit(stop_all));
    // A signal that came before `stop_all` was registered did not close the
    // registry; the handler sets the signal before it runs the cleanups, so
    // one of the two always sees the other.
    if lockcheck_workloads::interrupt::requested() {
        return Err(error("the tool is exiting".to_string()));
    }
    leftovers::sweep_once();
    let id = NEXT_SERVER.fetch_add(1, Ordering::Relaxed);
    let name = leftovers::folder_name(kind.name(), leftovers::this_process(), id);
    let dir = env::temp_dir().join(name);
    {
        let mut registry = registry();
        if registry.closing {
            return Err(error("the tool is exiting".to_string()));
        }
        let live = Live { dir: dir.clone(), leader: None, stop_signal: kind.stop_signal() };
        registry.live.insert(id, live);
    }
    let made = || -> io::Result<()> {
        // Left by an earlier process of the same pid and start (after a
        // reboot, say) that was SIGKILLed.
        if dir.exists() {
            fs::remove_dir_all(&dir)?;
        }
        fs::create_dir(&dir)?;
        if kind == ServerKind::Postgres && running_as_root() {
            let status = Command::new("chown").arg("postgres:postgres").arg(&dir).status()?;
            if !status.success() {
                return Err(io::Error::other(format!(
                    "chown postgres:postgres {} {status} (does the postgres user exist?)",
                    dir.display()
                )));
            }
        }
        Ok(())
    };
    if let Err(reason) = made() {
        registry().live.remove(&id);
        let _ = fs::remove_dir_all(&dir);
        return Err(error(format!("cannot make {}: {reason}", dir.display())));
    }
    Ok((id, dir))
}

struct SpawnRequest {
    id: u64,
    command: Command,
    reply: mpsc::Sender<io::Result<Child>>,
}

/// Spawns `command` from the spawner thread, which lives as long as the
/// tool (so the parent-death signal fires only when the tool dies), and
/// records the process as server `id`'s leader before anyone can look.
fn spawn_owned(id: u64, command: Command) -> io::Result<Child> {
    static SPAWNER: OnceLock<Option<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (requests, inbox) = mpsc::channel();
        let thread = thread::Builder::new().name("lockcheck-spawner".to_string());
        thread.spawn(move || serve_spawns(inbox)).ok().map(|_| requests)
    });
    let gone = || io::Error::other("the thread that spawns servers is gone");
    let spawner = spawner.as_ref().ok_or_else(gone)?;
    let (reply, answer) = mpsc::channel();
    spawner.send(SpawnRequest { id, command, reply }).map_err(|_| gone())?;
    answer.recv().map_err(|_| gone())?
}

/// The spawner thread: never returns (its channel's sender is a static).
fn serve_spawns(inbox: mpsc::Receiver<SpawnRequest>) {
    for SpawnRequest { id, mut command, reply } in inbox {
        // Spawned under the registry's lock: the signal handler, which takes
        // it, either sees the process or stops it from being spawned.
        let mut registry = registry();
        let spawned = if registry.closing {
            Err(io::Error::other("the tool is exiting"))
        } else {
            command.spawn()
        };
        if let (Ok(child), Some(live)) = (&spawned, registry.live.get_mut(&id)) {
            live.leader = Some(child.id());
        }
        drop(registry);
        let _ = reply.send(spawned);
    }
}

/// Stops every live managed server and deletes its directory, and starts no
/// more. For a tool about to `std::process::exit` (which runs no `Drop`),
/// and for the signal handler. Servers still owned are then dead: dropping
/// them does nothing more.
pub fn stop_all() {
    // The lock is held to the end: no server starts meanwhile.
    let mut registry = registry();
    registry.closing = true;
    let live = std::mem::take(&mut registry.live);
    let leaders: Vec<u32> = live.values().filter_map(|live| live.leader).collect();
    for live in live.values() {
        if let Some(leader) = live.leader {
            send_signal(live.stop_signal, &leader.to_string());
        }
    }
    let deadline = Instant::now() + EXIT_GRACE;
    while leaders.iter().any(|&leader| process_alive(leader)) && Instant::now() < deadline {
        thread::sleep(POLL);
    }
    for &leader in &leaders {
        send_signal("KILL", &leader.to_string());
        kill_group(leader);
        forget_faketime_memory(leader);
    }
    for live in live.values() {
        let _ = fs::remove_dir_all(&live.dir);
    }
}

// ---------------------------------------------------------------------------
// Readiness probes: each speaks just enough of the server's protocol to
// know it serves requests, not merely that its port is open.

fn probe(kind: ServerKind, port: u16) -> Result<(), String> {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&address, PROBE_TIMEOUT)
        .map_err(|error| format!("connect: {error}"))?;
    let timeouts = stream
        .set_read_timeout(Some(PROBE_TIMEOUT))
        .and_then(|()| stream.set_write_timeout(Some(PROBE_TIMEOUT)));
    timeouts.map_err(|error| error.to_string())?;
    match kind {
        ServerKind::Redis => probe_redis(&mut stream),
        ServerKind::Postgres => probe_postgres(&mut stream),
        ServerKind::Mariadb => probe_mariadb(&mut stream),
        ServerKind::Etcd => probe_etcd(&mut stream, port),
    }
}

/// Reads what the server sends until `limit` bytes, a newline (when
/// `line`), or the end.
fn read_reply(stream: &mut TcpStream, limit: usize, line: bool) -> Result<Vec<u8>, String> {
    let mut reply = Vec::new();
    let mut buffer = [0u8; 512];
    while reply.len() < limit && !(line && reply.contains(&b'\n')) {
        match stream.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => reply.extend_from_slice(&buffer[..read]),
            Err(error) if reply.is_empty() => return Err(format!("read: {error}")),
            Err(_) => break,
        }
    }
    Ok(reply)
}

/// `PING` answers `+PONG`, or `-LOADING` while the AOF is read back.
fn probe_redis(stream: &mut TcpStream) -> Result<(), String> {
    stream.write_all(b"PING\r\n").map_err(|error| format!("write: {error}"))?;
    let reply = read_reply(stream, 256, true)?;
    match reply.starts_with(b"+PONG") {
        true => Ok(()),
        false => Err(format!("PING answered {:?}", String::from_utf8_lossy(&reply).trim())),
    }
}

/// A startup message as user `postgres`: `R` (authentication: trust says
/// ok) once it accepts sessions, `E` while it starts up.
fn probe_postgres(stream: &mut TcpStream) -> Result<(), String> {
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

/// The server greets first: a handshake packet (protocol 10) once it
/// serves, an error packet (0xff) otherwise.
fn probe_mariadb(stream: &mut TcpStream) -> Result<(), String> {
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

/// `GET /health` says `"health":"true"` once the member has a leader.
fn probe_etcd(stream: &mut TcpStream, port: u16) -> Result<(), String> {
    let request =
        format!("GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).map_err(|error| format!("write: {error}"))?;
    let reply = read_reply(stream, 64 * 1024, false)?;
    let reply = String::from_utf8_lossy(&reply);
    match reply.contains("\"health\":\"true\"") {
        true => Ok(()),
        false => Err(format!("/health answered {:?}", reply.lines().last().unwrap_or_default())),
    }
}
