//! `lockcheck check --backend <real>`: the same workloads against real
//! servers, which the tool starts on loopback (and always stops) unless
//! `--*-url` points at running ones.

use std::fs;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use lockcheck_checker::{
    analyze, default_checkers, write_events, Analysis, Event, HistoryBuilder, Verdict,
};
use lockcheck_reports::{render_json, render_text, Analyzed, TextOptions};
use lockcheck_workloads::real::driver::{drive_with, DriveOptions, StallNemesis};
use lockcheck_workloads::real::etcd::EtcdClient;
use lockcheck_workloads::real::nemesis::{self, ServerAction, ServerFault, SharedServer};
use lockcheck_workloads::real::redis::{self as real_redis, RedisClient, RedisRecipe};
use lockcheck_workloads::real::redlock::RedlockClient;
use lockcheck_workloads::real::semaphore::{self, RedisSemaphoreClient};
use lockcheck_workloads::real::servers::{ManagedServer, ServerKind, ServerOptions};
use lockcheck_workloads::real::sql::{SqlClient, SqlRecipe};
use lockcheck_workloads::real::storage::Storage;
use lockcheck_workloads::real::{ClientConfig, RealError};
use lockcheck_workloads::{SharedRecorder, Workload, WorkloadOptions};
use rand::rngs::SmallRng;
use rand::SeedableRng;

use crate::args::{CheckArgs, Format};
use crate::check::{check_options, random_seed, utc_stamp};
use crate::exit;

/// A real lock backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RealBackend {
    Redis(RedisRecipe),
    /// The sorted-set semaphore of LOCKS.md §3, by the server's `TIME`, or
    /// (broken) by the caller's clock.
    Semaphore {
        client_clock: bool,
    },
    Redlock,
    Etcd,
    Sql(SqlRecipe),
}

/// Mixed into the seed for the server faults' schedule, so that it is not
/// the client stalls' schedule.
const SERVER_FAULT_SEED: u64 = 0x5e47_e4fa_0175;

/// A semaphore's permits, as the simulator's.
const PERMITS: u32 = 2;

/// Redlock's instances.
const REDLOCK_INSTANCES: usize = 5;

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
        chatty: bool,
    ) -> Result<Servers, RealError> {
        let mut servers = Servers { chatty, ..Servers::default() };
        let options = ServerOptions { persistent: args.persistent, ..ServerOptions::default() };
        let postgres_locks = matches!(backend, RealBackend::Sql(recipe) if !recipe.is_mysql());
        servers.storage = match &args.postgres_url {
            Some(url) => url.clone(),
            None => servers.start(ServerKind::Postgres, 1, postgres_locks, &options)?.remove(0),
        };
        match backend {
            RealBackend::Redis(_) | RealBackend::Semaphore { .. } | RealBackend::Redlock => {
                let count = if backend == RealBackend::Redlock { REDLOCK_INSTANCES } else { 1 };
                servers.redis = if args.redis_url.is_empty() {
                    servers.start(ServerKind::Redis, count, true, &options)?
                } else {
                    args.redis_url.clone()
                };
            }
            RealBackend::Etcd => {
                servers.etcd = if args.etcd_url.is_empty() {
                    servers.start(ServerKind::Etcd, 1, true, &options)?
                } else {
                    args.etcd_url.clone()
                };
            }
            RealBackend::Sql(recipe) if recipe.is_mysql() => {
                servers.mysql = Some(match &args.mysql_url {
                    Some(url) => url.clone(),
                    None => servers.start(ServerKind::Mariadb, 1, true, &options)?.remove(0),
                });
            }
            RealBackend::Sql(_) => {}
        }
        Ok(servers)
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
}

impl Faults {
    fn names(self) -> String {
        let names: Vec<&str> = [
            (self.pause, "pause"),
            (self.sigstop, "sigstop"),
            (self.kill, "kill"),
            (self.conn_kill, "conn-kill"),
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
    let nemesis = args.nemesis.as_deref().unwrap_or("pause");
    let mut faults = Faults::default();
    for name in nemesis.split(',').map(str::trim).filter(|name| !name.is_empty()) {
        match name {
            "none" => {}
            "pause" => faults.pause = true,
            "sigstop" => faults.sigstop = true,
            "kill" => faults.kill = true,
            "conn-kill" if matches!(backend, RealBackend::Sql(_)) => faults.conn_kill = true,
            "conn-kill" => {
                return Err(format!(
                    "conn-kill ends SQL sessions: it applies to the postgres-* and mysql-* backends, not {}",
                    backend.name()
                ))
            }
            other => {
                return Err(format!(
                    "the fault {other:?} is not available against real servers yet: use pause (client stalls), sigstop (SIGSTOP of a lock server), kill (SIGKILL and restart of a lock server), conn-kill (the SQL server ends the lock sessions) or none; the simulated backends (sim-*) have every fault"
                ))
            }
        }
    }
    let given_url = match backend {
        RealBackend::Redis(_) | RealBackend::Semaphore { .. } | RealBackend::Redlock => {
            !args.redis_url.is_empty()
        }
        RealBackend::Etcd => !args.etcd_url.is_empty(),
        RealBackend::Sql(recipe) if recipe.is_mysql() => args.mysql_url.is_some(),
        RealBackend::Sql(_) => args.postgres_url.is_some(),
    };
    if (faults.kill || faults.sigstop) && given_url {
        return Err(
            "kill and sigstop need the lock servers lockcheck starts itself: leave out the --*-url of the lock service"
                .to_string(),
        );
    }
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

pub fn run(args: &CheckArgs, backend: RealBackend) -> anyhow::Result<ExitCode> {
    let seed = args.seed.unwrap_or_else(random_seed);
    eprintln!("seed: {seed}");
    let outcome = match execute(args, backend, seed, true) {
        Ok(outcome) => outcome,
        Err(failure) => return Ok(failure.exit()),
    };
    let RealRun { events, analysis, wall_s, faults, .. } = &outcome;
    let rerun = rerun_command(args, backend, seed);
    let dir = if args.no_store {
        None
    } else {
        Some(store(args, backend, seed, events, analysis, &rerun)?)
    };
    let source = format!("{} seed {seed}", backend.name());
    let analyzed = Analyzed { source: &source, analysis };
    let text = match args.format {
        Format::Json => render_json(analysis.verdict, &[analyzed], &[]),
        Format::Text => {
            let mut text = render_text(&analyzed, &TextOptions::default());
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
            text
        }
    };
    print!("{text}");
    Ok(exit::for_verdict(analysis.verdict).into())
}

/// Runs one real test with `seed` and checks its history; `chatty`: say on
/// stderr which servers were started.
pub fn execute(
    args: &CheckArgs,
    backend: RealBackend,
    seed: u64,
    chatty: bool,
) -> Result<RealRun, RealFailure> {
    let (workload, faults) = plan(args, backend).map_err(RealFailure::Usage)?;
    let started = Instant::now();
    let servers = Servers::for_backend(args, backend, chatty).map_err(RealFailure::Server)?;
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
            hold_ms: (0, (ttl_ms / 10).max(1)),
            think_ms: (0, 40),
            send_fence: !args.no_fencing,
            permits: matches!(backend, RealBackend::Semaphore { .. }).then_some(PERMITS),
            keepalive_ms: None,
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
    if let Some(delay) = args.restart_delay {
        // A restart delay given is the down time itself: 0 restarts a
        // killed server at once, while its clients may still hold a lock.
        for fault in server_faults.iter_mut().filter(|fault| fault.action == ServerAction::Kill) {
            fault.end = fault.start + delay;
        }
    }
    let names = servers.lock_names();
    let events = runtime
        .block_on(drive_backend(args, backend, &servers, &options, (&server_faults, &names)))
        .map_err(RealFailure::Server)?;
    let wall_s = started.elapsed().as_secs_f64();
    drop(servers);
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
    eprintln!("lockcheck: {error}");
    match error {
        RealError::Setup { .. } => exit::INTERNAL.into(),
        _ => exit::UNAVAILABLE.into(),
    }
}

async fn drive_backend(
    args: &CheckArgs,
    backend: RealBackend,
    servers: &Servers,
    options: &DriveOptions,
    (faults, names): (&[ServerFault], &[String]),
) -> Result<Vec<Event>, RealError> {
    let lock_servers = &servers.lock;
    let sessions = match backend {
        RealBackend::Sql(recipe) if recipe.is_mysql() => {
            servers.mysql.as_deref().map(|url| (url, true))
        }
        RealBackend::Sql(_) => Some((servers.storage.as_str(), false)),
        _ => None,
    };
    let nemesis = |recorder: SharedRecorder, start| async move {
        nemesis::run(faults, lock_servers, names, sessions, &recorder, start).await
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
        storage_url: servers.storage.clone(),
        fenced_storage: !args.no_fencing,
    };
    let locks = &workload.locks;
    match backend {
        RealBackend::Redis(recipe) => {
            let url = &servers.redis[0];
            real_redis::prepare(url, locks).await?;
            let fencing = !args.no_fencing;
            drive_with(
                options,
                |logical, stall| {
                    let config = config(logical);
                    async move {
                        let client =
                            RedisClient::connect(url, recipe, fencing, stall, &config).await?;
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
            let url = &servers.redis[0];
            semaphore::prepare(url, locks).await?;
            drive_with(
                options,
                |logical, _stall| {
                    let config = config(logical);
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
            let urls = &servers.redis;
            drive_with(
                options,
                |logical, _stall| {
                    let config = config(logical);
                    async move { RedlockClient::connect(urls, &config).await }
                },
                nemesis,
            )
            .await
        }
        RealBackend::Etcd => {
            let endpoints = &servers.etcd;
            drive_with(
                options,
                |logical, _stall| {
                    let config = config(logical);
                    async move { EtcdClient::connect(endpoints, &config).await }
                },
                nemesis,
            )
            .await
        }
        RealBackend::Sql(recipe) => {
            let url = servers.mysql.as_ref().unwrap_or(&servers.storage);
            SqlClient::prepare(url, recipe).await?;
            drive_with(
                options,
                |logical, _stall| {
                    let config = config(logical);
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
    if let Some(url) = &args.postgres_url {
        command.push_str(&format!(" --postgres-url {url}"));
    }
    for (flag, urls) in [("--redis-url", &args.redis_url), ("--etcd-url", &args.etcd_url)] {
        if !urls.is_empty() {
            command.push_str(&format!(" {flag} {}", urls.join(",")));
        }
    }
    if let Some(url) = &args.mysql_url {
        command.push_str(&format!(" --mysql-url {url}"));
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
    command
}

fn store(
    args: &CheckArgs,
    backend: RealBackend,
    seed: u64,
    events: &[Event],
    analysis: &Analysis,
    rerun: &str,
) -> anyhow::Result<std::path::PathBuf> {
    let test = format!("{}-{}", backend.name(), args.workload);
    let dir = args.store.join(&test).join(format!("{}-seed-{seed}", utc_stamp(SystemTime::now())));
    fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let history = fs::File::create(dir.join("history.jsonl"))?;
    write_events(std::io::BufWriter::new(history), events)?;
    let source = dir.join("history.jsonl").display().to_string();
    let json = render_json(analysis.verdict, &[Analyzed { source: &source, analysis }], &[]);
    fs::write(dir.join("results.json"), json)?;
    fs::write(dir.join("command"), format!("{rerun}\n"))?;
    Ok(dir)
}
