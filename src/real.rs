//! `lockcheck check --backend <real>`: the same workloads against real
//! servers, which the tool starts on loopback (and always stops) unless
//! `--*-url` points at running ones.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockcheck_checker::{analyze, default_checkers, Analysis, Event, HistoryBuilder, Verdict};
use lockcheck_real::driver::{drive_recorded, DriveOptions, StallNemesis};
use lockcheck_real::etcd::EtcdClient;
use lockcheck_real::exec::{self, ExecClient, ExecProgram, PidSlot};
use lockcheck_real::failover::{self, RedisPair};
use lockcheck_real::nemesis::{self, ServerAction, ServerFault, SharedServer};
use lockcheck_real::netfault::{self, proxied_url, NetChoice, NetFault, Shape, Topology};
use lockcheck_real::proxy::Proxy;
use lockcheck_real::redis::{self as real_redis, RedisClient, RedisRecipe};
use lockcheck_real::redlock::RedlockClient;
use lockcheck_real::semaphore::{self, RedisSemaphoreClient};
use lockcheck_real::servers::{ManagedServer, ServerKind, ServerOptions};
use lockcheck_real::sql::{SqlClient, SqlRecipe};
use lockcheck_real::storage::Storage;
use lockcheck_real::{ClientConfig, RealError};
use lockcheck_reports::Analyzed;
use lockcheck_workloads::{interrupt, HistoryFile, SharedRecorder, Workload, WorkloadOptions};
use rand::rngs::SmallRng;
use rand::SeedableRng;

use crate::args::{CheckArgs, Format};
use crate::exit;
use crate::options::{check_options, random_seed};
use crate::output::{print, render};

/// A real lock backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RealBackend {
    Redis(RedisRecipe),
    /// The sorted-set semaphore of docs/guide.md#semaphore, by the server's `TIME`, or
    /// (broken) by the caller's clock.
    Semaphore {
        client_clock: bool,
    },
    Redlock,
    Etcd,
    Sql(SqlRecipe),
    /// The user's program speaking the exec protocol (docs/exec-protocol.md).
    Exec,
}

/// Mixed into the seed for the server faults' schedule, so that it is not
/// the client stalls' schedule.
const SERVER_FAULT_SEED: u64 = 0x5e47_e4fa_0175;

/// A semaphore's permits, as the simulator's.
const PERMITS: u32 = 2;

/// Redlock's instances.
const REDLOCK_INSTANCES: usize = 5;

/// The etcd cluster a partition among members splits.
const ETCD_MEMBERS: usize = 3;
/// The etcd cluster of a ring partition: each member sees two of four.
const ETCD_RING_MEMBERS: usize = 5;

/// Mixed into the seed for the exec program kills' schedule.
const CLIENT_KILL_SEED: u64 = 0xc1_1e47_c1a5;

/// Mixed into the seed for the failovers' schedule.
const FAILOVER_SEED: u64 = 0xfa11_0ee5;

/// Mixed into the seed for the network faults' schedule.
const NET_FAULT_SEED: u64 = 0x0e7_fa17_5eed;

/// The shortest lease Debian's etcd 3.4 grants with its default timing.
const ETCD_MIN_TTL_S: u64 = 2;

/// The chance that `redis-lost-reply` loses a grant's reply: its bug needs a
/// lost reply to show, and the client injects them itself.
const LOST_REPLY_CHANCE: f64 = 0.1;

impl RealBackend {
    pub fn parse(name: &str) -> Option<RealBackend> {
        match name {
            "redlock" => Some(RealBackend::Redlock),
            "redis-semaphore" => Some(RealBackend::Semaphore { client_clock: false }),
            "redis-semaphore-client-clock" => Some(RealBackend::Semaphore { client_clock: true }),
            "etcd" => Some(RealBackend::Etcd),
            "exec" => Some(RealBackend::Exec),
            _ => RedisRecipe::parse(name)
                .map(RealBackend::Redis)
                .or_else(|| SqlRecipe::parse(name).map(RealBackend::Sql)),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            RealBackend::Redis(recipe) => recipe.name(),
            RealBackend::Semaphore { client_clock: false } => "redis-semaphore",
            RealBackend::Semaphore { client_clock: true } => "redis-semaphore-client-clock",
            RealBackend::Redlock => "redlock",
            RealBackend::Etcd => "etcd",
            RealBackend::Sql(recipe) => recipe.name(),
            RealBackend::Exec => "exec",
        }
    }
}

/// The servers a run uses: URLs given, or private servers started for it.
/// Dropping it stops and deletes the private ones.
#[derive(Debug, Default)]
struct Servers {
    storage: String,
    redis: Vec<String>,
    mysql: Option<String>,
    etcd: Vec<String>,
    /// The private servers that hold the locks: the nemesis' targets.
    lock: Vec<SharedServer>,
    /// The other private servers (the storage's PostgreSQL).
    other: Vec<ManagedServer>,
    /// Say which servers were started.
    chatty: bool,
    /// The fault-injecting proxy every client dials through, when a
    /// network fault is on.
    proxy: Option<Proxy>,
    /// etcd members whose peer links go through the proxy.
    members: usize,
    /// Each client's URLs: its lock servers', then its storage's.
    routes: Vec<(Vec<String>, String)>,
    /// A Redis primary and its replica, for the failover fault: clients
    /// follow the primary wherever it is (directly, not through the proxy).
    pair: Option<RedisPair>,
    /// The exec backend's servers, each with its kind's node name
    /// (`redis`, `postgres`, `mariadb`, `etcd`), in `--servers` order.
    exec: Vec<(&'static str, String)>,
}

impl Servers {
    /// Starts `count` private servers of `kind`; `lock`: they hold the
    /// locks (the storage's PostgreSQL may too: the postgres-* backends).
    fn start(
        &mut self,
        kind: ServerKind,
        count: usize,
        lock: bool,
        options: &ServerOptions,
    ) -> Result<Vec<String>, RealError> {
        let started = Instant::now();
        let servers = ManagedServer::start_many(kind, count, options)?;
        let urls: Vec<String> = servers.iter().map(ManagedServer::url).collect();
        if self.chatty {
            eprintln!(
                "started {count} private {} on {} ({:.1} s)",
                kind.name(),
                urls.join(", "),
                started.elapsed().as_secs_f64()
            );
        }
        if lock {
            self.lock.extend(servers.into_iter().map(|server| Arc::new(Mutex::new(server))));
        } else {
            self.other.extend(servers);
        }
        Ok(urls)
    }

    fn for_backend(
        args: &CheckArgs,
        backend: RealBackend,
        faults: Faults,
        chatty: bool,
    ) -> Result<Servers, RealError> {
        let mut servers = Servers { chatty, ..Servers::default() };
        if faults.partition || faults.slow_net || faults.failover {
            servers.proxy = Some(Proxy::start()?);
        }
        let options = ServerOptions {
            persistent: args.persistent,
            faketime: faults.clock,
            ..ServerOptions::default()
        };
        let storage_options = ServerOptions { faketime: false, ..options.clone() };
        let postgres_locks = matches!(backend, RealBackend::Sql(recipe) if !recipe.is_mysql());
        servers.storage = match &args.postgres_url {
            Some(url) => url.clone(),
            None => {
                let options = if postgres_locks { &options } else { &storage_options };
                servers.start(ServerKind::Postgres, 1, postgres_locks, options)?.remove(0)
            }
        };
        match backend {
            RealBackend::Redis(_) | RealBackend::Semaphore { .. } | RealBackend::Redlock => {
                let count = if backend == RealBackend::Redlock { REDLOCK_INSTANCES } else { 1 };
                servers.redis = if let (true, Some(proxy)) = (faults.failover, &servers.proxy) {
                    let started = Instant::now();
                    let pair = RedisPair::start(&options, proxy)?;
                    if chatty {
                        eprintln!(
                            "started a private redis primary on {} with an async replica on {}, replicating through the proxy ({:.1} s)",
                            pair.urls()[0],
                            pair.urls()[1],
                            started.elapsed().as_secs_f64()
                        );
                    }
                    servers.lock.extend(pair.servers().iter().cloned());
                    let urls = vec![pair.urls()[0].clone()];
                    servers.pair = Some(pair);
                    urls
                } else if args.redis_url.is_empty() {
                    servers.start(ServerKind::Redis, count, true, &options)?
                } else {
                    args.redis_url.clone()
                };
            }
            RealBackend::Etcd => {
                let asked = match faults.partition {
                    true => shapes(args, backend).unwrap_or_default(),
                    false => Vec::new(),
                };
                let split = asked.iter().any(|shape| *shape != Shape::Client);
                servers.etcd = match (&servers.proxy, args.etcd_url.is_empty()) {
                    (_, false) => args.etcd_url.clone(),
                    (Some(proxy), true) if split => {
                        let started = Instant::now();
                        let count = if asked.contains(&Shape::Ring) {
                            ETCD_RING_MEMBERS
                        } else {
                            ETCD_MEMBERS
                        };
                        let members =
                            ManagedServer::start_etcd_cluster_behind(count, &options, proxy)?;
                        let urls: Vec<String> = members.iter().map(ManagedServer::url).collect();
                        if chatty {
                            eprintln!(
                                "started a private etcd cluster of {count} members, its peers talking through the proxy, on {} ({:.1} s)",
                                urls.join(", "),
                                started.elapsed().as_secs_f64()
                            );
                        }
                        servers.members = count;
                        servers
                            .lock
                            .extend(members.into_iter().map(|member| Arc::new(Mutex::new(member))));
                        urls
                    }
                    (_, true) => servers.start(ServerKind::Etcd, 1, true, &options)?,
                };
            }
            RealBackend::Sql(recipe) if recipe.is_mysql() => {
                servers.mysql = Some(match &args.mysql_url {
                    Some(url) => url.clone(),
                    None => servers.start(ServerKind::Mariadb, 1, true, &options)?.remove(0),
                });
            }
            RealBackend::Sql(_) => {}
            RealBackend::Exec => {
                for (kind, count) in exec_servers(args).map_err(|reason| RealError::Setup {
                    what: "the exec backend's servers",
                    reason,
                })? {
                    let urls = match kind {
                        ServerKind::Postgres => vec![servers.storage.clone()],
                        kind => servers.start(kind, count, true, &options)?,
                    };
                    servers.exec.extend(urls.into_iter().map(|url| (kind.name(), url)));
                }
            }
        }
        servers.route(backend, args.clients)?;
        Ok(servers)
    }

    /// The lock servers' URLs.
    fn lock_urls(&self, backend: RealBackend) -> Vec<String> {
        match backend {
            RealBackend::Redis(_) | RealBackend::Semaphore { .. } | RealBackend::Redlock => {
                self.redis.clone()
            }
            RealBackend::Etcd => self.etcd.clone(),
            RealBackend::Sql(_) => vec![self.mysql.clone().unwrap_or_else(|| self.storage.clone())],
            RealBackend::Exec => self.exec.iter().map(|(_, url)| url.clone()).collect(),
        }
    }

    /// The lock servers' node names (`redis-0`, `etcd-2`): the history's
    /// names for them, and the proxy's.
    fn lock_nodes(&self, backend: RealBackend) -> Vec<String> {
        if backend == RealBackend::Exec {
            let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
            return self
                .exec
                .iter()
                .map(|(kind, _)| {
                    let at = seen.entry(kind).or_default();
                    *at += 1;
                    format!("{kind}-{}", *at - 1)
                })
                .collect();
        }
        let kind = match backend {
            RealBackend::Redis(_) | RealBackend::Semaphore { .. } | RealBackend::Redlock => "redis",
            RealBackend::Etcd => "etcd",
            RealBackend::Sql(recipe) if recipe.is_mysql() => "mariadb",
            RealBackend::Sql(_) | RealBackend::Exec => "postgres",
        };
        (0..self.lock_urls(backend).len()).map(|at| format!("{kind}-{at}")).collect()
    }

    /// The storage's node: the lock server itself for the postgres-*
    /// backends.
    fn storage_node(&self, backend: RealBackend) -> String {
        match backend {
            RealBackend::Sql(recipe) if !recipe.is_mysql() => "postgres-0".to_string(),
            RealBackend::Exec if self.exec.iter().any(|(kind, _)| *kind == "postgres") => {
                "postgres-0".to_string()
            }
            _ => "storage".to_string(),
        }
    }

    /// The environment of client `logical`'s program: where its servers
    /// are (through the proxy when there is one), as docs/exec-protocol.md
    /// names them.
    fn exec_env(&self, logical: u32) -> Vec<(String, String)> {
        let urls = &self.routes[logical as usize].0;
        let of = |wanted: &str| -> Vec<String> {
            self.exec
                .iter()
                .zip(urls)
                .filter(|((kind, _), _)| *kind == wanted)
                .map(|(_, url)| url.clone())
                .collect()
        };
        let mut env = Vec::new();
        let redis = of("redis");
        if let Some(first) = redis.first() {
            env.push(("LOCKCHECK_REDIS_URL".to_string(), first.clone()));
            env.push(("LOCKCHECK_REDIS_URLS".to_string(), redis.join(",")));
        }
        for (kind, name) in
            [("postgres", "LOCKCHECK_POSTGRES_URL"), ("mariadb", "LOCKCHECK_MYSQL_URL")]
        {
            if let Some(url) = of(kind).first() {
                env.push((name.to_string(), url.clone()));
            }
        }
        let etcd = of("etcd");
        if !etcd.is_empty() {
            env.push(("LOCKCHECK_ETCD_ENDPOINTS".to_string(), etcd.join(",")));
        }
        env
    }

    /// Each client's URLs: through the proxy, on links of its own, when
    /// there is one.
    fn route(&mut self, backend: RealBackend, clients: u32) -> Result<(), RealError> {
        let (urls, nodes) = (self.lock_urls(backend), self.lock_nodes(backend));
        let storage_node = self.storage_node(backend);
        self.routes = match &self.proxy {
            None => (0..clients).map(|_| (urls.clone(), self.storage.clone())).collect(),
            Some(proxy) => {
                let mut routes = Vec::with_capacity(clients as usize);
                for client in 0..clients {
                    let from = format!("client-{client}");
                    let mut locks = Vec::with_capacity(urls.len());
                    for (url, node) in urls.iter().zip(&nodes) {
                        locks.push(proxied_url(proxy, &from, node, url)?);
                    }
                    routes.push((locks, proxied_url(proxy, &from, &storage_node, &self.storage)?));
                }
                routes
            }
        };
        Ok(())
    }

    /// The network a fault schedule strikes.
    fn topology(&self, backend: RealBackend, clients: u32) -> Topology {
        let storage_node = self.storage_node(backend);
        let lock_nodes = self.lock_nodes(backend);
        Topology {
            clients,
            storage_node: (!lock_nodes.contains(&storage_node)).then_some(storage_node),
            lock_nodes,
            members: self.members,
        }
    }

    /// The lock servers' names in the history: `redis-0`, `postgres-0`, …
    fn lock_names(&self) -> Vec<String> {
        self.lock
            .iter()
            .enumerate()
            .map(|(at, server)| {
                let server = server.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                format!("{}-{at}", server.kind().name())
            })
            .collect()
    }
}

/// The faults a real run has on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Faults {
    /// Client stalls longer than the TTL: the GC pause.
    pause: bool,
    /// SIGSTOP, later SIGCONT, of a lock server.
    sigstop: bool,
    /// SIGKILL, later a restart, of lock servers.
    kill: bool,
    /// The SQL server ends the lock sessions.
    conn_kill: bool,
    /// Links held through the proxy: a client cut off, or members split.
    partition: bool,
    /// One client's links delayed through the proxy.
    slow_net: bool,
    /// A lock server's wall clock jumps (libfaketime).
    clock: bool,
    /// A Redis primary dies and its async replica takes over.
    failover: bool,
    /// The exec backend's lock program is killed (SIGKILL).
    client_kill: bool,
}

impl Faults {
    fn names(self) -> String {
        let names: Vec<&str> = [
            (self.pause, "pause"),
            (self.sigstop, "sigstop"),
            (self.kill, "kill"),
            (self.conn_kill, "conn-kill"),
            (self.partition, "partition"),
            (self.slow_net, "slow-net"),
            (self.clock, "clock"),
            (self.failover, "failover"),
            (self.client_kill, "client-kill"),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, name)| *name)
        .collect();
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(",")
        }
    }
}

/// What a real run takes from the arguments, or what is wrong with them.
fn plan(args: &CheckArgs, backend: RealBackend) -> Result<(Workload, Faults), String> {
    let workload = args.workload()?;
    exit::check_gate(&args.gate)?;
    let nemesis = args.nemesis.as_deref().unwrap_or("pause");
    let mut faults = Faults::default();
    for name in nemesis.split(',').map(str::trim).filter(|name| !name.is_empty()) {
        match name {
            "none" => {}
            "pause" => faults.pause = true,
            "sigstop" => faults.sigstop = true,
            "kill" => faults.kill = true,
            "conn-kill" if matches!(backend, RealBackend::Sql(_)) => faults.conn_kill = true,
            "partition" => faults.partition = true,
            "slow-net" => faults.slow_net = true,
            "clock" if backend == RealBackend::Etcd => {
                return Err(
                    "clock: etcd is written in Go and reads the time without libc, so libfaketime cannot move its clock (its leases run on the leader's monotonic clock anyway); the simulated sim-etcd has clock faults"
                        .to_string(),
                )
            }
            "clock" => faults.clock = true,
            "failover" if matches!(backend, RealBackend::Redis(_)) => faults.failover = true,
            "client-kill" if backend == RealBackend::Exec => faults.client_kill = true,
            "client-kill" => {
                return Err(format!(
                    "client-kill kills your lock program: it applies to --backend exec, not {}",
                    backend.name()
                ))
            }
            "failover" => {
                return Err(format!(
                    "failover promotes a Redis replica: it applies to the single-Redis backends (redis, redis-fenced, redis-del-release, …), not {}",
                    backend.name()
                ))
            }
            "conn-kill" => {
                return Err(format!(
                    "conn-kill ends SQL sessions: it applies to the postgres-* and mysql-* backends, not {}",
                    backend.name()
                ))
            }
            other => {
                return Err(format!(
                    "the fault {other:?} is not available against real servers: use pause (client stalls), sigstop (SIGSTOP of a lock server), kill (SIGKILL and restart of a lock server), conn-kill (the SQL server ends the lock sessions), partition, slow-net, clock (libfaketime), failover (Redis), client-kill (exec) or none"
                ))
            }
        }
    }
    match (backend, args.exec.is_empty()) {
        (RealBackend::Exec, true) => {
            return Err(
                "--backend exec runs your lock program: give it after --, e.g. lockcheck check --backend exec --servers redis -- python3 examples/python/redis_lock.py (docs/exec-protocol.md)"
                    .to_string(),
            )
        }
        (RealBackend::Exec, false) => {
            let servers = exec_servers(args)?;
            if faults.clock && servers.iter().any(|(kind, _)| *kind == ServerKind::Etcd) {
                return Err(
                    "clock: etcd is written in Go and ignores libfaketime: leave etcd out of --servers for clock faults"
                        .to_string(),
                );
            }
        }
        (_, false) => {
            return Err(format!(
                "a program after -- is for --backend exec, not {}",
                backend.name()
            ))
        }
        (_, true) if !args.servers.is_empty() => {
            return Err(format!("--servers is for --backend exec, not {}", backend.name()))
        }
        (_, true) => {}
    }
    let given_url = match backend {
        RealBackend::Redis(_) | RealBackend::Semaphore { .. } | RealBackend::Redlock => {
            !args.redis_url.is_empty()
        }
        RealBackend::Etcd => !args.etcd_url.is_empty(),
        RealBackend::Sql(recipe) if recipe.is_mysql() => args.mysql_url.is_some(),
        RealBackend::Sql(_) => args.postgres_url.is_some(),
        RealBackend::Exec => false,
    };
    if under_faketime() {
        return Err(
            "lockcheck itself runs under libfaketime (LD_PRELOAD or FAKETIME is set): the history's times would be fake; run it without, and --nemesis clock fakes only the lock servers' clocks"
                .to_string(),
        );
    }
    if (faults.kill || faults.sigstop || faults.clock || faults.failover) && given_url {
        return Err(
            "kill, sigstop, clock and failover need the lock servers lockcheck starts itself: leave out the --*-url of the lock service"
                .to_string(),
        );
    }
    shapes(args, backend)?;
    if backend == RealBackend::Redlock && !args.redis_url.is_empty() {
        if args.redis_url.len() < 3 {
            return Err(format!(
                "redlock needs several independent Redis (five is usual): --redis-url has {}",
                args.redis_url.len()
            ));
        }
    } else if args.redis_url.len() > 1 {
        return Err(format!("{} uses one Redis: --redis-url has several", backend.name()));
    }
    if args.swarm || args.seeds > 1 {
        return Err("--swarm and --seeds apply to the simulated backends only".to_string());
    }
    if args.clients == 0 || args.locks == 0 {
        return Err("--clients and --locks must be at least 1".to_string());
    }
    let ttl_ms = args.ttl.as_millis() as u64;
    if !(10..=600_000).contains(&ttl_ms) {
        return Err("--ttl must be between 10ms and 10m".to_string());
    }
    if args.time_limit.is_zero() || args.time_limit > Duration::from_secs(24 * 3600) {
        return Err("--time-limit must be between 1ms and 24h".to_string());
    }
    Ok((workload, faults))
}

/// The servers `--servers` asks for the exec backend: each kind with how
/// many (`redis*5`: five Redis, for a Redlock).
fn exec_servers(args: &CheckArgs) -> Result<Vec<(ServerKind, usize)>, String> {
    let mut servers = Vec::new();
    for word in args.servers.iter().map(|word| word.trim()).filter(|word| !word.is_empty()) {
        let (name, count) = match word.split_once('*') {
            Some((name, count)) => match count.parse::<usize>() {
                Ok(count) if (1..=9).contains(&count) => (name, count),
                _ => return Err(format!("--servers {word}: the count after * must be 1 to 9")),
            },
            None => (word, 1),
        };
        let kind = match name {
            "redis" => ServerKind::Redis,
            "postgres" if count == 1 => ServerKind::Postgres,
            "mysql" | "mariadb" if count == 1 => ServerKind::Mariadb,
            "etcd" if count == 1 => ServerKind::Etcd,
            "postgres" | "mysql" | "mariadb" | "etcd" => {
                return Err(format!("--servers {word}: one {name} at most"))
            }
            other => {
                return Err(format!(
                    "--servers: unknown server {other:?}: use redis (redis*5 for five), postgres, mysql or etcd"
                ))
            }
        };
        if servers.iter().any(|(seen, _)| *seen == kind) {
            return Err(format!("--servers names {name} twice"));
        }
        servers.push((kind, count));
    }
    Ok(servers)
}

/// Whether this process runs under libfaketime: its times would be fake.
fn under_faketime() -> bool {
    std::env::var_os("FAKETIME").is_some()
        || std::env::var("LD_PRELOAD").is_ok_and(|preload| preload.contains("faketime"))
}

/// The partition shapes asked for that can strike `backend`: `client`
/// always; `isolate-one`, `halves` and `ring` split an etcd cluster that
/// lockcheck starts behind its proxy (five members when `ring` is asked
/// for, three otherwise). Shapes that cannot strike the backend are left
/// out; none left is an error.
fn shapes(args: &CheckArgs, backend: RealBackend) -> Result<Vec<Shape>, String> {
    let mut shapes = Vec::new();
    let cluster = backend == RealBackend::Etcd && args.etcd_url.is_empty();
    for name in args.partition_shapes.split(',').map(str::trim).filter(|name| !name.is_empty()) {
        match Shape::parse(name) {
            Some(Shape::Client) => shapes.push(Shape::Client),
            Some(shape) if cluster => shapes.push(shape),
            Some(_) => {}
            None => {
                return Err(format!(
                    "unknown partition shape {name:?}: use client, isolate-one, halves or ring"
                ))
            }
        }
    }
    if shapes.is_empty() {
        return Err(format!(
            "none of the partition shapes {:?} applies to {}: against real servers, client cuts a client off from its lock servers, and isolate-one and halves split the three members of an etcd cluster lockcheck starts",
            args.partition_shapes,
            backend.name()
        ));
    }
    Ok(shapes)
}

/// One real test, run and checked.
pub struct RealRun {
    pub events: Vec<Event>,
    pub analysis: Analysis,
    /// Wall time from the servers' start to the clients' end.
    pub wall_s: f64,
    faults: Faults,
}

/// Why a real test did not come to a verdict.
#[derive(Debug)]
pub enum RealFailure {
    /// The arguments do not make a test (exit 64).
    Usage(String),
    /// A server is missing or unreachable (exit 69), or could not be set up.
    Server(RealError),
    /// A bug in lockcheck (exit 70).
    Internal(anyhow::Error),
}

impl RealFailure {
    /// Prints the reason and gives the exit code.
    pub fn exit(&self) -> ExitCode {
        match self {
            RealFailure::Usage(message) => {
                eprintln!("lockcheck: {message}");
                exit::USAGE.into()
            }
            RealFailure::Server(error) => unavailable(error),
            RealFailure::Internal(error) => {
                eprintln!("lockcheck: internal error: {error:#}");
                exit::INTERNAL.into()
            }
        }
    }
}

impl std::fmt::Display for RealFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RealFailure::Usage(message) => write!(f, "{message}"),
            RealFailure::Server(error) => write!(f, "{error}"),
            RealFailure::Internal(error) => write!(f, "internal error: {error:#}"),
        }
    }
}

/// `lockcheck check` on a real backend. A replay line's masked URLs are
/// taken from the environment.
pub fn run_check(args: &CheckArgs, backend: RealBackend) -> anyhow::Result<ExitCode> {
    match args.with_secrets() {
        Ok(args) => run(&args, backend),
        Err(message) => {
            eprintln!("lockcheck: {message}");
            Ok(exit::USAGE.into())
        }
    }
}

pub fn run(args: &CheckArgs, backend: RealBackend) -> anyhow::Result<ExitCode> {
    let seed = args.seed.unwrap_or_else(random_seed);
    eprintln!("seed: {seed}");
    if let Err(message) = plan(args, backend) {
        return Ok(RealFailure::Usage(message).exit());
    }
    let rerun = rerun_command(args, backend, seed);
    // The run's folder first: its history is written as it is recorded.
    let stored = match args.no_store {
        true => None,
        false => {
            let test = format!("{}-{}", backend.name(), args.workload);
            Some(crate::store::begin(&args.store, &test, seed, &rerun)?)
        }
    };
    crate::store::last_words(seed, stored.as_ref());
    let history = stored.as_ref().map(|stored| stored.history.clone());
    let progress = crate::progress::Progress::timed(args.time_limit);
    let label =
        format!("{} --nemesis {}", backend.name(), args.nemesis.as_deref().unwrap_or("pause"));
    let outcome = progress
        .watch(&label, args.time_limit, || execute_recorded(args, backend, seed, true, history));
    drop(progress);
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(failure) => {
            if let Some(signal) = interrupt::signal() {
                return Ok(crate::store::interrupted(signal, seed, stored.as_ref()));
            }
            let code = failure.exit();
            match &stored {
                // Nothing recorded (a server missing, say): nothing to keep.
                Some(stored) if stored.history.events() == 0 => {
                    let _ = std::fs::remove_dir_all(&stored.dir);
                }
                Some(stored) => eprintln!("lockcheck: {}", stored.so_far()),
                None => {}
            }
            return Ok(code);
        }
    };
    if let Some(signal) = interrupt::signal() {
        return Ok(crate::store::interrupted(signal, seed, stored.as_ref()));
    }
    let RealRun { events, analysis, wall_s, faults, .. } = &outcome;
    crate::store::hold_before("store");
    let dir = match &stored {
        Some(stored) => Some(finish_store(backend, seed, stored, events, analysis, &rerun)?),
        None => None,
    };
    interrupt::set_last_words(None);
    let source = format!("{} seed {seed}", backend.name());
    let analyzed = Analyzed { source: &source, analysis };
    let html = dir.as_ref().map(|dir| dir.join("report.html").display().to_string());
    let mut text =
        render(args.format, analysis.verdict, &[analyzed], Some(events), html.as_deref());
    if args.format == Format::Text {
        let lock_ops = events
            .iter()
            .filter(|event| {
                event.event_type != lockcheck_checker::EventType::Invoke
                    && matches!(
                        event.f,
                        lockcheck_checker::Function::Acquire
                            | lockcheck_checker::Function::Release
                            | lockcheck_checker::Function::Renew
                    )
            })
            .count();
        text.push_str(&format!(
            "ran {wall_s:.1} s against real servers, {lock_ops} lock operations ({:.0}/s); faults: {}\n",
            lock_ops as f64 / wall_s.max(1e-9),
            faults.names(),
        ));
        if let Some(dir) = &dir {
            text.push_str(&format!("stored in {}\n", dir.display()));
        }
        if analysis.verdict != Verdict::Valid {
            // Real servers' timing is not the seed's: a rerun draws the
            // same schedule, not always the same history.
            text.push_str(&format!("rerun: {rerun}\n"));
        }
    }
    print(&text)?;
    Ok(exit::for_verdict(exit::gated(analysis, &args.gate)).into())
}

/// Runs one real test with `seed` and checks its history; `chatty`: say on
/// stderr which servers were started.
pub fn execute(
    args: &CheckArgs,
    backend: RealBackend,
    seed: u64,
    chatty: bool,
) -> Result<RealRun, RealFailure> {
    execute_recorded(args, backend, seed, chatty, None)
}

/// As [`execute`], writing each event to `history` as it is recorded. An
/// interrupt ends it with [`RealError::Interrupted`], the servers stopped.
fn execute_recorded(
    args: &CheckArgs,
    backend: RealBackend,
    seed: u64,
    chatty: bool,
    history: Option<HistoryFile>,
) -> Result<RealRun, RealFailure> {
    let (workload, faults) = plan(args, backend).map_err(RealFailure::Usage)?;
    let started = Instant::now();
    let servers = Servers::for_backend(args, backend, faults, chatty)
        .map_err(|error| RealFailure::Server(error.or_interrupted()))?;
    let mut ttl_ms = args.ttl.as_millis() as u64;
    if backend == RealBackend::Etcd {
        // etcd grants whole seconds, and raises short TTLs to its minimum
        // (2 s for Debian's 3.4 defaults): stalls must outlast that.
        let granted = ttl_ms.div_ceil(1000).max(ETCD_MIN_TTL_S) * 1000;
        if granted != ttl_ms && chatty {
            eprintln!(
                "etcd leases are whole seconds, at least {ETCD_MIN_TTL_S}: the TTL is {granted} ms"
            );
        }
        ttl_ms = granted;
    }
    let options = DriveOptions {
        workload: WorkloadOptions {
            workload,
            locks: (0..args.locks).map(|lock| format!("lock-{lock}")).collect(),
            resources: (0..args.locks).map(|lock| format!("resource-{lock}")).collect(),
            ttl_ms,
            // An etcd session's holder works a long job under its
            // keepalive, as the simulated one does.
            hold_ms: if backend == RealBackend::Etcd {
                (0, ttl_ms * 2)
            } else if faults.failover || faults.clock || backend == RealBackend::Redlock {
                // As the simulator's: a hold long enough for a failover, a
                // clock jump, or a crash and restart of Redlock's instances
                // to fall inside one.
                (0, ttl_ms / 3)
            } else {
                (0, (ttl_ms / 10).max(1))
            },
            think_ms: (0, 40),
            send_fence: !args.no_fencing,
            permits: matches!(backend, RealBackend::Semaphore { .. }).then_some(PERMITS),
            keepalive_ms: (backend == RealBackend::Etcd).then_some(ttl_ms / 3),
        },
        clients: args.clients,
        time_limit: args.time_limit,
        seed,
        stall: faults.pause.then(StallNemesis::default),
    };
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|error| {
            RealFailure::Internal(anyhow::anyhow!("cannot start the async runtime: {error}"))
        })?;
    let mut rng = SmallRng::seed_from_u64(seed ^ SERVER_FAULT_SEED);
    let actions: Vec<ServerAction> = [
        (faults.sigstop, ServerAction::Pause),
        (faults.kill, ServerAction::Kill),
        (faults.conn_kill, ServerAction::ConnKill),
        (faults.clock, ServerAction::ClockJump),
        (faults.clock, ServerAction::ClockDrift),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .map(|(_, action)| *action)
    .collect();
    let min_down = args.restart_delay.unwrap_or(match backend {
        // Redlock's delayed restart: a crashed instance stays down longer
        // than any lease it may have granted.
        RealBackend::Redlock => Duration::from_millis(ttl_ms * 3 / 2),
        _ => Duration::ZERO,
    });
    let mut server_faults = nemesis::schedule(
        &actions,
        servers.lock.len(),
        ttl_ms,
        min_down,
        args.time_limit,
        &mut rng,
    );
    if backend == RealBackend::Redlock {
        // A lock is held on a majority, often on all five: only a majority
        // killed at once can free it, so every Redlock kill takes one.
        let majority = servers.lock.len() / 2 + 1;
        for fault in server_faults.iter_mut().filter(|fault| fault.action == ServerAction::Kill) {
            if let Some(&first) = fault.servers.first() {
                fault.servers = (0..majority).map(|at| (first + at) % servers.lock.len()).collect();
            }
        }
    }
    if let Some(delay) = args.restart_delay {
        // A restart delay given is the down time itself: 0 restarts a
        // killed server at once, while its clients may still hold a lock.
        for fault in server_faults.iter_mut().filter(|fault| fault.action == ServerAction::Kill) {
            fault.end = fault.start + delay;
        }
    }
    let names = servers.lock_names();
    let choice = NetChoice {
        shapes: if faults.partition {
            shapes(args, backend).map_err(RealFailure::Usage)?
        } else {
            Vec::new()
        },
        slow: faults.slow_net,
    };
    let topology = servers.topology(backend, args.clients);
    let net_faults = netfault::schedule(
        &choice,
        &topology,
        ttl_ms,
        args.time_limit,
        &mut SmallRng::seed_from_u64(seed ^ NET_FAULT_SEED),
    );
    let failovers = if faults.failover {
        failover::schedule(
            ttl_ms,
            args.time_limit,
            &mut SmallRng::seed_from_u64(seed ^ FAILOVER_SEED),
        )
    } else {
        Vec::new()
    };
    let kills = if faults.client_kill {
        exec::kill_schedule(
            args.clients,
            ttl_ms,
            args.time_limit,
            &mut SmallRng::seed_from_u64(seed ^ CLIENT_KILL_SEED),
        )
    } else {
        Vec::new()
    };
    let slots: Vec<PidSlot> = (0..args.clients).map(|_| PidSlot::default()).collect();
    let planned = Planned {
        kills: &kills,
        slots: &slots,
        server: &server_faults,
        names: &names,
        net: &net_faults,
        topology: &topology,
        failovers: &failovers,
    };
    let events = runtime
        .block_on(drive_backend(args, backend, &servers, &options, planned, history))
        .map_err(|error| RealFailure::Server(error.or_interrupted()))?;
    let wall_s = started.elapsed().as_secs_f64();
    drop(servers);
    crate::store::hold_before("check");
    let mut builder = HistoryBuilder::with_capacity(events.len());
    for event in &events {
        builder.push(event).map_err(|error| {
            RealFailure::Internal(anyhow::anyhow!(
                "the driver recorded a malformed history: {error}"
            ))
        })?;
    }
    let analysis = analyze(
        &builder.finish(),
        &default_checkers(),
        &check_options(args.linearizability_timeout),
    );
    Ok(RealRun { events, analysis, wall_s, faults })
}

/// Exit 69 with the reason: a server is missing or cannot be reached.
fn unavailable(error: &RealError) -> ExitCode {
    if let RealError::Interrupted { signal } = error {
        interrupt::report(*signal, None);
        return interrupt::exit_code(*signal).into();
    }
    eprintln!("lockcheck: {error}");
    match error {
        // A lock program that does not start or speak the protocol is the
        // user's to fix, as a missing server is.
        RealError::Setup { what: "the exec program", .. } => exit::UNAVAILABLE.into(),
        RealError::Setup { .. } => exit::INTERNAL.into(),
        _ => exit::UNAVAILABLE.into(),
    }
}

/// The faults a run's nemeses carry out.
#[derive(Debug, Clone, Copy)]
struct Planned<'a> {
    server: &'a [ServerFault],
    /// The lock servers' names in the history.
    names: &'a [String],
    net: &'a [NetFault],
    topology: &'a Topology,
    failovers: &'a [failover::Failover],
    /// The exec backend's program kills, and where each client's program is.
    kills: &'a [exec::ProgramKill],
    slots: &'a [PidSlot],
}

async fn drive_backend(
    args: &CheckArgs,
    backend: RealBackend,
    servers: &Servers,
    options: &DriveOptions,
    planned: Planned<'_>,
    history: Option<HistoryFile>,
) -> Result<Vec<Event>, RealError> {
    let lock_servers = &servers.lock;
    let sessions = match backend {
        RealBackend::Sql(recipe) if recipe.is_mysql() => {
            servers.mysql.as_deref().map(|url| (url, true))
        }
        RealBackend::Sql(_) => Some((servers.storage.as_str(), false)),
        _ => None,
    };
    let proxy = servers.proxy.as_ref();
    let pair = servers.pair.as_ref();
    let nemesis = |recorder: SharedRecorder, start| async move {
        crate::progress::recording(&recorder);
        let net = async {
            if let Some(proxy) = proxy {
                netfault::run(planned.net, proxy, planned.topology, &recorder, start).await;
            }
        };
        let failovers = async {
            match pair {
                Some(pair) => failover::run(pair, planned.failovers, &recorder, start).await,
                None => Ok(()),
            }
        };
        let servers =
            nemesis::run(planned.server, lock_servers, planned.names, sessions, &recorder, start);
        let kills = exec::kill_programs(planned.kills, planned.slots, &recorder, start);
        let (done, (), failed_over, ()) = tokio::join!(servers, net, failovers, kills);
        done.and(failed_over)
    };
    let workload = &options.workload;
    let mut resources = workload.resources.clone();
    if matches!(workload.workload, Workload::Cron | Workload::CronRelease) {
        // The cron workload writes a report per day: `resource-0:day-3`.
        resources.truncate(1);
    }
    Storage::prepare(&servers.storage, &resources).await?;
    let config = |logical: u32| ClientConfig {
        name: format!("client-{logical}"),
        deadline: Duration::from_millis((workload.ttl_ms / 4).clamp(20, 2000)),
        storage_url: servers.routes[logical as usize].1.clone(),
        fenced_storage: !args.no_fencing,
    };
    let urls = |logical: u32| servers.routes[logical as usize].0.as_slice();
    let locks = &workload.locks;
    match backend {
        RealBackend::Redis(recipe) => {
            let url = &servers.redis[0];
            real_redis::prepare(url, locks).await?;
            let fencing = !args.no_fencing;
            drive_recorded(
                options,
                history.clone(),
                |logical, stall| {
                    let config = config(logical);
                    let url = &urls(logical)[0];
                    async move {
                        let client = match pair {
                            Some(pair) => {
                                RedisClient::connect_following(
                                    pair.primary(),
                                    recipe,
                                    fencing,
                                    stall,
                                    &config,
                                )
                                .await?
                            }
                            None => {
                                RedisClient::connect(url, recipe, fencing, stall, &config).await?
                            }
                        };
                        Ok(match recipe {
                            RedisRecipe::LostReply => client
                                .lose_replies(LOST_REPLY_CHANCE, options.seed ^ u64::from(logical)),
                            _ => client,
                        })
                    }
                },
                nemesis,
            )
            .await
        }
        RealBackend::Semaphore { client_clock } => {
            semaphore::prepare(&servers.redis[0], locks).await?;
            drive_recorded(
                options,
                history.clone(),
                |logical, _stall| {
                    let config = config(logical);
                    let url = &urls(logical)[0];
                    async move {
                        RedisSemaphoreClient::connect(url, PERMITS, client_clock, &config).await
                    }
                },
                nemesis,
            )
            .await
        }
        RealBackend::Redlock => {
            for url in &servers.redis {
                real_redis::prepare(url, locks).await?;
            }
            drive_recorded(
                options,
                history.clone(),
                |logical, _stall| {
                    let config = config(logical);
                    let urls = urls(logical);
                    async move { RedlockClient::connect(urls, &config).await }
                },
                nemesis,
            )
            .await
        }
        RealBackend::Etcd => {
            drive_recorded(
                options,
                history.clone(),
                |logical, _stall| {
                    let config = config(logical);
                    let endpoints = urls(logical);
                    async move { EtcdClient::connect(endpoints, &config).await }
                },
                nemesis,
            )
            .await
        }
        RealBackend::Exec => {
            let program = ExecProgram::from_words(&args.exec).ok_or_else(|| RealError::Setup {
                what: "the exec backend",
                reason: "no program after --".to_string(),
            })?;
            let (program, clients) = (&program, options.clients);
            drive_recorded(
                options,
                history.clone(),
                |logical, stall| {
                    let config = config(logical);
                    let env = servers.exec_env(logical);
                    async move {
                        let client =
                            ExecClient::connect(program, logical, clients, &env, &config).await?;
                        let slot = planned.slots[logical as usize].clone();
                        Ok(client.freeze_on_stall(stall).share_pid(slot))
                    }
                },
                nemesis,
            )
            .await
        }
        RealBackend::Sql(recipe) => {
            SqlClient::prepare(servers.mysql.as_ref().unwrap_or(&servers.storage), recipe).await?;
            drive_recorded(
                options,
                history.clone(),
                |logical, _stall| {
                    let config = config(logical);
                    let url = &urls(logical)[0];
                    async move { SqlClient::connect(url, recipe, &config).await }
                },
                nemesis,
            )
            .await
        }
    }
}

/// The command that runs the same test again (the same schedule of
/// faults; the servers' timing may differ).
fn rerun_command(args: &CheckArgs, backend: RealBackend, seed: u64) -> String {
    let mut command = format!(
        "lockcheck check --backend {} --workload {} --nemesis {} --time-limit {}s --clients {} --locks {} --ttl {}ms --seed {seed}",
        backend.name(),
        args.workload,
        args.nemesis.as_deref().unwrap_or("pause"),
        args.time_limit.as_secs_f64(),
        args.clients,
        args.locks,
        args.ttl.as_millis(),
    );
    // A URL's password is never printed nor stored: the line shows it
    // masked, and says where a replay finds it.
    let mut secrets = Vec::new();
    for ((flag, variable), urls) in crate::args::URL_VARIABLES.iter().zip([
        args.postgres_url.as_slice(),
        args.redis_url.as_slice(),
        args.mysql_url.as_slice(),
        args.etcd_url.as_slice(),
    ]) {
        if urls.is_empty() {
            continue;
        }
        let shown = lockcheck_checker::redact(&urls.join(","));
        if shown == urls.join(",") {
            command.push_str(&format!(" {flag} {shown}"));
        } else {
            command.push_str(&format!(" {flag} '{shown}'"));
            secrets.push(*variable);
        }
    }
    if args.no_fencing {
        command.push_str(" --no-fencing");
    }
    if args.persistent {
        command.push_str(" --persistent");
    }
    if let Some(delay) = args.restart_delay {
        command.push_str(&format!(" --restart-delay {}ms", delay.as_millis()));
    }
    if !args.gate.is_empty() {
        command.push_str(&format!(" --gate {}", args.gate.join(",")));
    }
    if !args.servers.is_empty() {
        command.push_str(&format!(" --servers {}", args.servers.join(",")));
    }
    if !args.exec.is_empty() {
        command.push_str(&format!(" -- {}", args.exec.join(" ")));
    }
    if !secrets.is_empty() {
        // A shell comment: the line still runs as it is.
        command.push_str(&format!("  # password redacted: pass the URL in {}", secrets.join(", ")));
    }
    lockcheck_checker::redact(&command)
}

fn finish_store(
    backend: RealBackend,
    seed: u64,
    stored: &crate::store::Stored,
    events: &[Event],
    analysis: &Analysis,
    rerun: &str,
) -> anyhow::Result<std::path::PathBuf> {
    let title = format!("{} seed {seed}", backend.name());
    crate::store::finish(
        stored,
        &crate::store::Run { events, analysis, command: rerun, title: &title },
    )
}
