//! Servers the tool manages itself: private instances of each
//! [`ServerKind`], started from the binaries installed on this machine, on
//! free loopback ports, each in its own temporary directory.
//!
//! A kind is one value, in its own file of this folder (`redis.rs`,
//! `postgres.rs`, `mariadb.rs`, `etcd.rs`, `moto.rs`), listed once in
//! [`KINDS`]: its
//! binaries, its arguments, how its folder is prepared, its readiness probe,
//! its ports, its stop signal and whether libfaketime works on it. The
//! machinery here asks the value and never names a kind.
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
//! A kind that refuses to run as root (PostgreSQL, and CI runs as root)
//! names the user it runs as then: its setup tool and server run as that
//! user (`setpriv --reuid`, which, unlike `runuser`, execs instead of
//! forking, so the parent-death signal reaches the server itself), in a
//! directory owned by that user.
//!
//! A server started with [`ServerOptions::faketime`] reads its wall clock
//! through Debian's libfaketime, preloaded into the server only (never into
//! this tool, nor into setup tools such as `initdb`), so that
//! [`ManagedServer::set_clock`] can jump the server's clock while it runs:
//! Redis expires keys by its wall clock, so a forward jump frees locks early
//! (docs/guide.md#redis). See [`ManagedServer::set_clock`] for how.

use std::cmp::Ordering as Order;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::hash::{Hash, Hasher};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};
use std::{env, fmt, thread};

use lockcheck_workloads::Pooler;

use super::RealError;

mod etcd;
mod leftovers;
mod mariadb;
mod moto;
mod pgbouncer;
mod postgres;
mod redis;
mod zookeeper;

pub(crate) use moto::http_status;

/// Every kind of server the tool can start, in the order kinds are listed
/// (in messages, and in the exec backend's environment). A new kind is a
/// file of this folder with its value, and one line here.
const KINDS: &[ServerKind] = &[
    ServerKind::Redis,
    ServerKind::Postgres,
    ServerKind::Mariadb,
    ServerKind::Etcd,
    ServerKind::Moto,
    ServerKind::ZooKeeper,
    ServerKind::PgBouncer,
];

/// A kind of server the tool can start: what sets it apart from the
/// others, as data, and as functions where behaviour differs (its
/// arguments, its folder's preparation, its readiness probe, its URL).
/// One value a kind ([`ServerKind::Redis`], …), all in [`ServerKind::ALL`].
/// Two kinds are the same when their names are.
#[derive(Clone, Copy)]
pub struct ServerKind {
    /// Its name: in messages, folder names and node names (`redis-0`).
    name: &'static str,
    /// Other names `--servers` takes for it; the first is the one the list
    /// of kinds suggests (MariaDB's `mysql`, like `--mysql-url`).
    aliases: &'static [&'static str],
    /// The binaries it needs: the server first, then its setup tool, if any.
    binaries: &'static [&'static str],
    /// The package that installs them.
    package: Package,
    /// The directory that holds all its binaries, when they are not looked
    /// for one by one on PATH (PostgreSQL's, which is versioned).
    bin_dir: Option<fn() -> Option<PathBuf>>,
    /// The user it runs as, in a directory owned by that user, when the
    /// tool runs as root (PostgreSQL refuses root).
    root_user: Option<&'static str>,
    /// The signal that shuts it down cleanly (`TERM`, `INT`, …).
    stop_signal: &'static str,
    /// Why libfaketime cannot fake its wall clock, if it cannot.
    ignores_faketime: Option<&'static str>,
    /// The loopback ports it listens on, the client port first.
    ports: usize,
    /// Its data outlives a crash (a database's); Redis's only when started
    /// persistent.
    durable: bool,
    /// Its data remembers its ports (etcd's member id is bound to its peer
    /// URL): a start retried on new ports begins with no data.
    data_knows_ports: bool,
    /// Several may serve one run (`--servers redis*5`: Redlock's five).
    several: bool,
    /// It pools another server ([`ServerOptions::upstream`]), so it never
    /// runs alone (`--servers` refuses it).
    pools: bool,
    /// Where clients connect, given its client port.
    url: fn(u16) -> String,
    /// Prepares a new server's directory (its data directory, files it
    /// reads at start); the arguments of its setup tool, if one must run.
    prepare: fn(&Site) -> io::Result<Option<Vec<OsString>>>,
    /// The server's arguments to run alone on its ports.
    args: fn(&Site) -> Vec<OsString>,
    /// Asks the server on its client port, connected, whether it serves
    /// requests: each speaks just enough of its protocol to know it does,
    /// not merely that its port is open.
    probe: fn(&mut TcpStream, u16) -> Result<(), String>,
    /// The variables that tell the exec backend's program where servers of
    /// this kind are (docs/exec-protocol.md), in order.
    exec_env: &'static [(&'static str, EnvUrls)],
}

/// Where a binary comes from: a missing one's error says how to install it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Package {
    /// A Debian package (`apt-get install -y redis-server`): the servers,
    /// `setpriv`, libfaketime.
    Debian(&'static str),
    /// A Python package from PyPI (`pip install 'moto[server]'`): moto's
    /// S3 server, which Debian does not package.
    Python(&'static str),
}

impl Package {
    /// Its name, as its installer takes it (`moto[server]`).
    pub fn name(self) -> &'static str {
        match self {
            Package::Debian(name) | Package::Python(name) => name,
        }
    }

    /// The command that installs it.
    pub fn install_command(self) -> String {
        match self {
            Package::Debian(name) => format!("apt-get install -y {name}"),
            // Quoted: a shell would expand `moto[server]` as a pattern.
            Package::Python(name) => format!("pip install '{name}'"),
        }
    }

    /// What to do about a binary it installs that is missing. A server
    /// from Debian can also be given by URL (`--redis-url`, …); moto's
    /// S3 server cannot, so its advice is to install it.
    pub(crate) fn advice(self) -> String {
        match self {
            Package::Debian(name) => format!(
                "install the Debian package `{name}` ({}), or point --url at a running server",
                self.install_command()
            ),
            Package::Python(name) => {
                format!("install the Python package `{name}` ({})", self.install_command())
            }
        }
    }
}

/// Which URLs of a kind's servers an exec variable holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EnvUrls {
    /// The first server's.
    First,
    /// Every server's, comma-separated.
    Joined,
}

/// A server name `--servers` does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown server {name:?}: use {}", ServerKind::choices())]
pub struct UnknownServer {
    pub name: String,
}

impl ServerKind {
    /// Every kind.
    pub const ALL: &'static [ServerKind] = KINDS;

    /// The kind named `name` (or one of its other names: `mysql`).
    pub fn parse(name: &str) -> Result<ServerKind, UnknownServer> {
        KINDS
            .iter()
            .find(|kind| kind.name == name || kind.aliases.contains(&name))
            .copied()
            .ok_or_else(|| UnknownServer { name: name.to_string() })
    }

    /// The kinds as `--servers` takes them: `redis (redis*5 for five),
    /// postgres, mysql or etcd`.
    fn choices() -> String {
        let words: Vec<String> = KINDS
            .iter()
            .filter(|kind| !kind.pools)
            .map(|kind| {
                let word = kind.aliases.first().unwrap_or(&kind.name);
                match kind.several {
                    true => format!("{word} ({word}*5 for five)"),
                    false => word.to_string(),
                }
            })
            .collect();
        match words.split_last() {
            Some((last, [])) => last.clone(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        }
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The binaries it needs: the server first, then its setup tool.
    pub fn binaries(&self) -> &'static [&'static str] {
        self.binaries
    }

    /// The package that installs the binaries.
    pub fn package(&self) -> Package {
        self.package
    }

    /// Whether libfaketime can fake this server's wall clock
    /// ([`ServerOptions::faketime`]). Not etcd's: a static Go binary reads
    /// the clock without libc, so a faked clock would silently stay real.
    /// Starting such a kind with `faketime` is therefore an error.
    pub fn clock_is_fakeable(&self) -> bool {
        self.ignores_faketime.is_none()
    }

    /// Whether several may serve one run (`--servers redis*5`).
    pub(crate) fn allows_several(&self) -> bool {
        self.several
    }

    /// Whether it pools another server, and so never runs alone.
    pub(crate) fn pools(&self) -> bool {
        self.pools
    }

    /// The exec backend's variables for servers of this kind at `urls`
    /// (none when there is none).
    pub(crate) fn exec_env(&self, urls: &[String]) -> Vec<(String, String)> {
        let Some(first) = urls.first() else { return Vec::new() };
        let value = |which: EnvUrls| match which {
            EnvUrls::First => first.clone(),
            EnvUrls::Joined => urls.join(","),
        };
        self.exec_env.iter().map(|&(name, which)| (name.to_string(), value(which))).collect()
    }

    /// Its place in [`KINDS`].
    fn rank(&self) -> usize {
        KINDS.iter().position(|kind| kind.name == self.name).unwrap_or(KINDS.len())
    }
}

impl fmt::Debug for ServerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ServerKind").field(&self.name).finish()
    }
}

impl PartialEq for ServerKind {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for ServerKind {}

impl Hash for ServerKind {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}

/// In the order of [`KINDS`].
impl Ord for ServerKind {
    fn cmp(&self, other: &Self) -> Order {
        (self.rank(), self.name).cmp(&(other.rank(), other.name))
    }
}

impl PartialOrd for ServerKind {
    fn partial_cmp(&self, other: &Self) -> Option<Order> {
        Some(self.cmp(other))
    }
}

/// What a kind's functions are told of one server of theirs.
#[derive(Debug)]
struct Site<'a> {
    /// Its temporary directory.
    dir: &'a Path,
    /// Its ports, the client port first.
    ports: &'a [u16],
    options: &'a ServerOptions,
    /// The tool runs as root.
    root: bool,
    /// Its key in the registry of live servers: unique in this process.
    id: u64,
}

impl Site<'_> {
    /// Its data directory, in its temporary directory.
    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// Its client port.
    fn port(&self) -> u16 {
        self.ports.first().copied().unwrap_or(0)
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
    /// A pooler's server (PgBouncer's PostgreSQL): its loopback port, and
    /// how the pooler pools.
    pub upstream: Option<(u16, Pooler)>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            persistent: false,
            ready_timeout: Duration::from_secs(60),
            faketime: false,
            upstream: None,
        }
    }
}

/// The package of `setpriv`, through which every server is started.
pub(crate) const SETPRIV_PACKAGE: Package = Package::Debian("util-linux");

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
    /// The client port first (etcd's peer port next).
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
            server.ports = reserve_ports(kind.ports).map_err(|error| server.error(error))?;
            server.launch = server.single_launch();
            server.spawn()?;
            match server.wait_ready(deadline) {
                Ok(()) => return Ok(server),
                Err(failure) if failure.port_taken && attempt < PORT_ATTEMPTS => {
                    server.kill_process();
                    release_ports(&std::mem::take(&mut server.ports));
                    if kind.data_knows_ports {
                        // Its data is bound to the old ports.
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

    /// Whether its data outlives a crash: Redis (and moto's in-memory S3)
    /// only when started persistent, a database always.
    pub fn keeps_data(&self) -> bool {
        self.kind.durable || self.options.persistent
    }

    pub fn kind(&self) -> ServerKind {
        self.kind
    }

    /// Where clients connect.
    pub fn url(&self) -> String {
        (self.kind.url)(self.port())
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
        let programs = Programs::locate(&kind)?;
        let library = match options.faketime {
            true => Some(FakeClock::library(&kind)?),
            false => None,
        };
        let (id, dir) = new_dir(&kind)?;
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
        RealError::Server { what: self.kind.name, reason: reason.to_string() }
    }

    /// What a kind's functions are told of this server.
    fn site(&self) -> Site<'_> {
        Site {
            dir: &self.dir,
            ports: &self.ports,
            options: &self.options,
            root: self.programs.root,
            id: self.id,
        }
    }

    /// Prepares the directory as the kind says, then runs its setup tool
    /// (which makes the data directory), if it has one.
    fn prepare(&self) -> Result<(), RealError> {
        match (self.kind.prepare)(&self.site()).map_err(|error| self.error(error))? {
            Some(args) => self.run_setup(&self.programs.setup, args),
            None => Ok(()),
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
        Launch { program: self.programs.server.clone(), args: (self.kind.args)(&self.site()) }
    }

    /// `launch` wrapped so the kernel kills it with its parent, run as the
    /// kind's user where it refuses root, in its own process group,
    /// logging to `log_path` (appended: a restart keeps the earlier lines).
    fn command(&self, launch: &Launch, log_path: &Path) -> io::Result<Command> {
        let log = OpenOptions::new().create(true).append(true).open(log_path)?;
        let mut command = Command::new(&self.programs.setpriv);
        if let (Some(user), true) = (self.kind.root_user, self.programs.root) {
            command.args([format!("--reuid={user}"), format!("--regid={user}")]);
            command.arg("--init-groups");
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
            let last = match probe(&self.kind, self.port()) {
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
            send_signal(self.kind.stop_signal, &child.id().to_string());
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
    /// The kind's binaries: all in its bin directory if it has one, else
    /// each on PATH.
    fn locate(kind: &ServerKind) -> Result<Programs, RealError> {
        let setpriv = find_on_path("setpriv")
            .ok_or(RealError::MissingBinary { binary: "setpriv", package: SETPRIV_PACKAGE })?;
        let missing = |binary| RealError::MissingBinary { binary, package: kind.package };
        let server_binary = kind.binaries.first().copied().unwrap_or(kind.name);
        let setup_binary = kind.binaries.get(1).copied();
        let (server, setup) = match kind.bin_dir {
            Some(bin_dir) => {
                let bin = bin_dir().ok_or(missing(server_binary))?;
                (bin.join(server_binary), bin.join(setup_binary.unwrap_or(server_binary)))
            }
            None => {
                let server = find_on_path(server_binary).ok_or(missing(server_binary))?;
                let setup = match setup_binary {
                    Some(binary) => find_on_path(binary).ok_or(missing(binary))?,
                    None => server.clone(),
                };
                (server, setup)
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
    fn library(kind: &ServerKind) -> Result<PathBuf, RealError> {
        if let Some(why) = kind.ignores_faketime {
            return Err(RealError::Server {
                what: kind.name,
                reason: format!(
                    "{} ignores libfaketime ({why}), so its clock cannot be faked: start it \
                     without the faketime option",
                    kind.name
                ),
            });
        }
        let multiarch = format!("/usr/lib/{}-linux-gnu/faketime", env::consts::ARCH);
        [multiarch.as_str(), "/usr/lib64/faketime", "/usr/lib/faketime", "/usr/local/lib/faketime"]
            .iter()
            .map(|dir| Path::new(dir).join(FAKETIME_LIBRARY))
            .find(|library| library.is_file())
            .ok_or(RealError::MissingBinary {
                binary: FAKETIME_LIBRARY,
                package: Package::Debian("faketime"),
            })
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
/// time: [`leftovers`]), owned by the kind's user where it will run as that
/// user. The first one removes the folders of runs that are gone.
fn new_dir(kind: &ServerKind) -> Result<(u64, PathBuf), RealError> {
    let error = |reason: String| RealError::Server { what: kind.name, reason };
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
    let name = leftovers::folder_name(kind.name, leftovers::this_process(), id);
    let dir = env::temp_dir().join(name);
    {
        let mut registry = registry();
        if registry.closing {
            return Err(error("the tool is exiting".to_string()));
        }
        let live = Live { dir: dir.clone(), leader: None, stop_signal: kind.stop_signal };
        registry.live.insert(id, live);
    }
    let made = || -> io::Result<()> {
        // Left by an earlier process of the same pid and start (after a
        // reboot, say) that was SIGKILLed.
        if dir.exists() {
            fs::remove_dir_all(&dir)?;
        }
        fs::create_dir(&dir)?;
        if let (Some(user), true) = (kind.root_user, running_as_root()) {
            let owner = format!("{user}:{user}");
            let status = Command::new("chown").arg(&owner).arg(&dir).status()?;
            if !status.success() {
                return Err(io::Error::other(format!(
                    "chown {owner} {} {status} (does the {user} user exist?)",
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
// Readiness probes: each kind's speaks just enough of its protocol to know
// it serves requests, not merely that its port is open.

fn probe(kind: &ServerKind, port: u16) -> Result<(), String> {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&address, PROBE_TIMEOUT)
        .map_err(|error| format!("connect: {error}"))?;
    let timeouts = stream
        .set_read_timeout(Some(PROBE_TIMEOUT))
        .and_then(|()| stream.set_write_timeout(Some(PROBE_TIMEOUT)));
    timeouts.map_err(|error| error.to_string())?;
    (kind.probe)(&mut stream, port)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn words(args: &[OsString]) -> Vec<&str> {
        args.iter().map(|arg| arg.to_str().unwrap()).collect()
    }

    fn site<'a>(dir: &'a Path, ports: &'a [u16], options: &'a ServerOptions) -> Site<'a> {
        Site { dir, ports, options, root: true, id: 7 }
    }

    #[test]
    fn every_kind_is_found_by_its_names_and_only_by_them() {
        let names: Vec<&str> = ServerKind::ALL.iter().map(ServerKind::name).collect();
        assert_eq!(
            names,
            ["redis", "postgres", "mariadb", "etcd", "moto", "zookeeper", "pgbouncer"]
        );
        assert_eq!(ServerKind::parse("zookeeper"), Ok(ServerKind::ZooKeeper));
        for kind in ServerKind::ALL {
            assert_eq!(ServerKind::parse(kind.name()), Ok(*kind));
        }
        assert_eq!(ServerKind::parse("mysql"), Ok(ServerKind::Mariadb));
        let unknown = ServerKind::parse("oracle").unwrap_err();
        assert_eq!(
            unknown.to_string(),
            "unknown server \"oracle\": use redis (redis*5 for five), postgres, mysql, etcd, moto or zookeeper"
        );
        assert!(ServerKind::parse("Redis").is_err() && ServerKind::parse("").is_err());
    }

    #[test]
    fn kinds_compare_by_name_and_sort_in_their_list_order() {
        assert_eq!(ServerKind::Redis, ServerKind::parse("redis").unwrap());
        assert_ne!(ServerKind::Redis, ServerKind::Etcd);
        let mut kinds = vec![ServerKind::Moto, ServerKind::Etcd, ServerKind::Mariadb];
        kinds.extend([ServerKind::PgBouncer, ServerKind::ZooKeeper, ServerKind::Redis]);
        kinds.push(ServerKind::Postgres);
        kinds.sort();
        assert_eq!(kinds, ServerKind::ALL);
        assert_eq!(format!("{:?}", ServerKind::Etcd), "ServerKind(\"etcd\")");
    }

    #[test]
    fn each_kind_says_what_it_needs_and_where_clients_connect() {
        let url = |kind: ServerKind| (kind.url)(6000);
        assert_eq!(url(ServerKind::Redis), "redis://127.0.0.1:6000");
        assert_eq!(url(ServerKind::Postgres), "postgres://postgres@127.0.0.1:6000/postgres");
        assert_eq!(url(ServerKind::Mariadb), "mysql://root@127.0.0.1:6000/test");
        assert_eq!(url(ServerKind::Etcd), "http://127.0.0.1:6000");
        assert_eq!(url(ServerKind::Moto), "http://127.0.0.1:6000");
        assert_eq!(url(ServerKind::ZooKeeper), "zk://127.0.0.1:6000");
        assert_eq!(url(ServerKind::PgBouncer), "postgres://postgres@127.0.0.1:6000/postgres");
        assert_eq!(ServerKind::PgBouncer.package(), Package::Debian("pgbouncer"));
        assert_eq!(ServerKind::ZooKeeper.binaries(), ["java"]);
        assert_eq!(ServerKind::ZooKeeper.package(), Package::Debian("zookeeper"));
        assert_eq!(ServerKind::Postgres.binaries(), ["postgres", "initdb"]);
        assert_eq!(ServerKind::Moto.binaries(), ["moto_server"]);
        assert_eq!(ServerKind::Mariadb.package(), Package::Debian("mariadb-server"));
        assert_eq!(ServerKind::Moto.package(), Package::Python("moto[server]"));
        let signals: Vec<&str> = ServerKind::ALL.iter().map(|kind| kind.stop_signal).collect();
        assert_eq!(signals, ["TERM", "INT", "TERM", "TERM", "TERM", "TERM", "TERM"]);
        let ports: Vec<usize> = ServerKind::ALL.iter().map(|kind| kind.ports).collect();
        assert_eq!(ports, [1, 1, 1, 2, 1, 3, 1]);
        let fakeable: Vec<bool> =
            ServerKind::ALL.iter().map(|kind| kind.clock_is_fakeable()).collect();
        assert_eq!(fakeable, [true, true, true, false, true, true, true]);
        let several: Vec<bool> = ServerKind::ALL.iter().map(|kind| kind.allows_several()).collect();
        assert_eq!(several, [true, false, false, false, false, false, false]);
        let pools: Vec<bool> = ServerKind::ALL.iter().map(|kind| kind.pools()).collect();
        assert_eq!(pools, [false, false, false, false, false, false, true]);
    }

    #[test]
    fn each_kind_launches_with_its_own_command_line() {
        let dir = Path::new("/tmp/lockcheck-x");
        let plain = ServerOptions::default();
        let persistent = ServerOptions { persistent: true, ..ServerOptions::default() };
        let args = |kind: ServerKind, ports: &[u16], options: &ServerOptions| {
            words(&(kind.args)(&site(dir, ports, options))).join(" ")
        };
        assert_eq!(
            args(ServerKind::Redis, &[6000], &plain),
            "--port 6000 --bind 127.0.0.1 --save  --appendonly no --dir /tmp/lockcheck-x/data"
        );
        assert_eq!(
            args(ServerKind::Redis, &[6000], &persistent),
            "--port 6000 --bind 127.0.0.1 --save  --appendonly yes --appendfsync always \
             --dir /tmp/lockcheck-x/data"
        );
        assert_eq!(
            args(ServerKind::Postgres, &[6000], &plain),
            "-D /tmp/lockcheck-x/data -p 6000 -k /tmp/lockcheck-x -c listen_addresses=127.0.0.1 \
             -c fsync=off -c max_connections=200"
        );
        assert_eq!(
            args(ServerKind::Mariadb, &[6000], &plain),
            "--no-defaults --datadir=/tmp/lockcheck-x/data --port=6000 --bind-address=127.0.0.1 \
             --socket=/tmp/lockcheck-x/mysql.sock --pid-file=/tmp/lockcheck-x/mariadbd.pid \
             --init-file=/tmp/lockcheck-x/init.sql --skip-name-resolve \
             --max-connect-errors=1000000 --user=root"
        );
        assert_eq!(
            args(ServerKind::Etcd, &[6000, 6001], &plain),
            format!(
                "--name default --data-dir /tmp/lockcheck-x/data \
                 --listen-client-urls http://127.0.0.1:6000 \
                 --advertise-client-urls http://127.0.0.1:6000 \
                 --listen-peer-urls http://127.0.0.1:6001 \
                 --initial-advertise-peer-urls http://127.0.0.1:6001 \
                 --initial-cluster default=http://127.0.0.1:6001 --initial-cluster-state new \
                 --initial-cluster-token lockcheck-{}-7",
                std::process::id()
            )
        );
        assert_eq!(args(ServerKind::Moto, &[6000], &plain), "-H 127.0.0.1 -p 6000");
    }

    #[test]
    fn each_kind_prepares_its_folder_and_names_its_setup() {
        let dir = env::temp_dir().join(format!("lockcheck-prepare-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let options = ServerOptions::default();
        let prepare = |kind: ServerKind| {
            (kind.prepare)(&site(&dir, &[6000], &options))
                .unwrap()
                .map(|args| words(&args).join(" ").replace(dir.to_str().unwrap(), "DIR"))
        };
        assert_eq!(prepare(ServerKind::Redis), None);
        assert!(dir.join("data").is_dir());
        assert_eq!(prepare(ServerKind::Etcd), None);
        assert_eq!(prepare(ServerKind::Moto), None);
        assert_eq!(
            prepare(ServerKind::Postgres).as_deref(),
            Some("-D DIR/data -U postgres -A trust -E UTF8 --locale=C --no-sync")
        );
        assert_eq!(
            prepare(ServerKind::Mariadb).as_deref(),
            Some(
                "--no-defaults --datadir=DIR/data --auth-root-authentication-method=normal \
                 --skip-name-resolve --user=root"
            )
        );
        let init = fs::read_to_string(dir.join("init.sql")).unwrap();
        assert_eq!(init, "CREATE DATABASE IF NOT EXISTS test;\n");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_exec_variables_of_each_kind() {
        let urls = |urls: &[&str]| urls.iter().map(|url| url.to_string()).collect::<Vec<_>>();
        let env = |kind: ServerKind, given: &[&str]| {
            kind.exec_env(&urls(given))
                .into_iter()
                .map(|(name, value)| format!("{name}={value}"))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            env(ServerKind::Redis, &["redis://a", "redis://b"]),
            ["LOCKCHECK_REDIS_URL=redis://a", "LOCKCHECK_REDIS_URLS=redis://a,redis://b"]
        );
        assert_eq!(
            env(ServerKind::Postgres, &["postgres://p"]),
            ["LOCKCHECK_POSTGRES_URL=postgres://p"]
        );
        assert_eq!(env(ServerKind::Mariadb, &["mysql://m"]), ["LOCKCHECK_MYSQL_URL=mysql://m"]);
        assert_eq!(
            env(ServerKind::Etcd, &["http://a", "http://b"]),
            ["LOCKCHECK_ETCD_ENDPOINTS=http://a,http://b"]
        );
        assert_eq!(env(ServerKind::Moto, &["http://s3"]), ["LOCKCHECK_S3_ENDPOINT=http://s3"]);
        for kind in ServerKind::ALL {
            assert!(env(*kind, &[]).is_empty(), "{kind:?}");
        }
    }

    #[test]
    fn a_missing_binary_says_how_its_package_is_installed() {
        let missing = |binary, package| RealError::MissingBinary { binary, package }.to_string();
        assert_eq!(
            missing("etcd", ServerKind::Etcd.package()),
            "`etcd` is not installed: install the Debian package `etcd-server` (apt-get install \
             -y etcd-server), or point --url at a running server"
        );
        // moto is not a Debian package, and no option takes an S3 URL.
        assert_eq!(
            missing("moto_server", ServerKind::Moto.package()),
            "`moto_server` is not installed: install the Python package `moto[server]` (pip \
             install 'moto[server]')"
        );
        assert_eq!(SETPRIV_PACKAGE.install_command(), "apt-get install -y util-linux");
    }

    #[test]
    fn etcd_alone_refuses_a_faked_clock_and_says_why() {
        let error = FakeClock::library(&ServerKind::Etcd).unwrap_err();
        assert_eq!(
            error.to_string(),
            "the etcd server did not start: etcd ignores libfaketime (a static Go binary reads \
             the clock without libc), so its clock cannot be faked: start it without the \
             faketime option"
        );
    }
}
