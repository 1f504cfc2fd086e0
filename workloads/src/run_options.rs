//! One run's options, the same type in both worlds: what `lockcheck check`
//! asks for, typed (durations, shapes, points, a fencing flag), read once
//! from the command line, and written back as the one line that replays
//! the run ([`RunOptions::replay`]), for `check`, the matrices and the
//! stored runs alike.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use lockcheck_checker::{CheckOptions, Purpose};

use crate::payments::Protection;
use crate::provider::{Profile, Variant};
use crate::queue::QueueKind;
use crate::{Backend, FaultKind, Shape, StallPoint, StorageKind, Workload, World};

/// The faults a simulated run has on when `--nemesis` is not given.
pub const DEFAULT_SIM_FAULTS: [FaultKind; 6] = [
    FaultKind::Pause,
    FaultKind::Sigstop,
    FaultKind::Clock,
    FaultKind::Kill,
    FaultKind::SlowNet,
    FaultKind::Loss,
];

/// The fault a real run has on when `--nemesis` is not given.
pub const DEFAULT_REAL_FAULTS: [FaultKind; 1] = [FaultKind::Pause];

/// How long the linearizability search may take when not told.
pub const DEFAULT_LINEARIZABILITY_TIMEOUT: Duration = Duration::from_secs(10);

/// A service a real run may be given by URL instead of one lockcheck starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum UrlService {
    Postgres,
    Redis,
    Mysql,
    Etcd,
    /// The payments workload's RabbitMQ queue.
    Rabbitmq,
    /// A ZooKeeper ensemble's servers.
    ZooKeeper,
}

impl UrlService {
    /// In the order a replay line gives them.
    pub const ALL: [UrlService; 6] = [
        UrlService::Postgres,
        UrlService::Redis,
        UrlService::Mysql,
        UrlService::Etcd,
        UrlService::Rabbitmq,
        UrlService::ZooKeeper,
    ];

    /// Its command-line flag.
    pub fn flag(self) -> &'static str {
        match self {
            UrlService::Postgres => "--postgres-url",
            UrlService::Redis => "--redis-url",
            UrlService::Mysql => "--mysql-url",
            UrlService::Etcd => "--etcd-url",
            UrlService::Rabbitmq => "--rabbitmq-url",
            UrlService::ZooKeeper => "--zookeeper-url",
        }
    }

    /// The environment variable that may hold its URL, password and all.
    pub fn variable(self) -> &'static str {
        match self {
            UrlService::Postgres => "LOCKCHECK_POSTGRES_URL",
            UrlService::Redis => "LOCKCHECK_REDIS_URL",
            UrlService::Mysql => "LOCKCHECK_MYSQL_URL",
            UrlService::Etcd => "LOCKCHECK_ETCD_URL",
            UrlService::Rabbitmq => "LOCKCHECK_RABBITMQ_URL",
            UrlService::ZooKeeper => "LOCKCHECK_ZOOKEEPER_URL",
        }
    }
}

/// The running services a real run is given, each with its URLs (one, or
/// Redlock's instances, or an etcd cluster's members): one map, where the
/// command line has a flag per service.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Services(BTreeMap<UrlService, Vec<String>>);

impl Services {
    /// The URLs given for `service` (none: lockcheck starts its own).
    pub fn urls(&self, service: UrlService) -> &[String] {
        self.0.get(&service).map(Vec::as_slice).unwrap_or_default()
    }

    /// The first URL given for `service`.
    pub fn url(&self, service: UrlService) -> Option<&str> {
        self.urls(service).first().map(String::as_str)
    }

    /// Whether `service` is given.
    pub fn given(&self, service: UrlService) -> bool {
        !self.urls(service).is_empty()
    }

    /// Gives `service` these URLs (none: lockcheck starts its own).
    pub fn set(&mut self, service: UrlService, urls: Vec<String>) {
        if urls.is_empty() {
            self.0.remove(&service);
        } else {
            self.0.insert(service, urls);
        }
    }

    /// With `service` given these URLs.
    pub fn with(mut self, service: UrlService, urls: &[&str]) -> Services {
        self.set(service, urls.iter().map(|url| url.to_string()).collect());
        self
    }

    /// The services given, in [`UrlService::ALL`]'s order.
    pub fn iter(&self) -> impl Iterator<Item = (UrlService, &[String])> {
        self.0.iter().map(|(service, urls)| (*service, urls.as_slice()))
    }
}

/// A connection pooler between the lock clients and a real PostgreSQL
/// that holds their locks: PgBouncer, in one of its pooling modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pooler {
    /// A server connection is the client's for one transaction at a time:
    /// session state (a session advisory lock) stays on the server
    /// connection, which the next transaction of any client may get.
    Transaction,
    /// A server connection is the client's for its whole session.
    Session,
}

impl Pooler {
    pub const ALL: [Pooler; 2] = [Pooler::Transaction, Pooler::Session];

    /// Its name, as `--pooler` takes it and PgBouncer's `pool_mode` says it.
    pub fn name(self) -> &'static str {
        match self {
            Pooler::Transaction => "transaction",
            Pooler::Session => "session",
        }
    }

    pub fn parse(name: &str) -> Option<Pooler> {
        Pooler::ALL.into_iter().find(|pooler| pooler.name() == name)
    }
}

/// One run's options, simulated or real.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOptions {
    pub backend: Backend,
    /// Where it runs: the simulator, or real servers.
    pub world: World,
    pub workload: Workload,
    /// The faults that may strike (empty: none).
    pub faults: Vec<FaultKind>,
    /// The shapes a partition may take (those that split nothing in this
    /// backend are left out; a client cut off always applies).
    pub partition_shapes: Vec<Shape>,
    /// Let the seed also choose which of `faults` are on, and how often
    /// (swarm testing; simulated runs only).
    pub swarm: bool,
    /// Time the clients run for: simulated time, or the wall's.
    pub time_limit: Duration,
    pub clients: u32,
    pub locks: u32,
    pub ttl: Duration,
    pub seed: u64,
    /// Grants carry a fencing token, writes send it and the storage fences.
    pub fencing: bool,
    /// The lock servers keep their state across a restart (a lease table's
    /// database always does).
    pub persistent: bool,
    /// How long a killed real lock server stays down [default: drawn].
    pub restart_delay: Option<Duration>,
    /// Where a client's pause may strike (every point: drawn per stall).
    pub pause_at: Vec<StallPoint>,
    /// What holds the protected resources.
    pub storage: StorageKind,
    /// What the payments workload relies on to charge each order once.
    pub protection: Protection,
    /// The payments workload's provider: whose idempotency semantics it
    /// follows, and whether it is one of the broken ones.
    pub provider: Profile,
    pub provider_variant: Variant,
    /// The payments workload's real queue (the simulator's is the pure
    /// one, whichever is named).
    pub queue: QueueKind,
    /// Whether duplicate work fails the run (correctness, the default) or
    /// is counted as cost (efficiency).
    pub purpose: Purpose,
    /// Running services to use instead of the servers lockcheck starts.
    pub services: Services,
    /// The exec backend's servers (`redis*5`, `postgres`, …).
    pub servers: Vec<String>,
    /// The exec backend's program and its arguments.
    pub exec: Vec<String>,
    /// PgBouncer between the clients and the PostgreSQL that holds their
    /// locks (real runs of the postgres-* backends).
    pub pooler: Option<Pooler>,
    /// How long the linearizability search may take, per history.
    pub linearizability_timeout: Duration,
    /// The checkers whose findings fail the run (empty: all of them).
    pub gate: Vec<String>,
    /// Each fault waits, within its slack, for the holder whose window it
    /// breaks (`crate::Aim`). Real faults are always aimed; a simulated
    /// run's are only when asked, as the pinned seeds' faults strike when
    /// and whom the seed drew.
    pub aim: bool,
}

impl Default for RunOptions {
    /// `lockcheck check` with no arguments: a simulated Redis.
    fn default() -> Self {
        RunOptions::new(World::Simulated, Backend::Redis)
    }
}

impl RunOptions {
    /// Why the workload's options given do not apply, if they do not: a
    /// lock-ordering workload with fewer than two locks, or on a backend
    /// whose client holds one lock at a time; the protection's own
    /// refusal; a queue or provider named for a workload that has none.
    pub fn refuses_workload_options(&self) -> Option<String> {
        if matches!(self.workload, Workload::LockOrder | Workload::LockOrderOpposite) {
            if self.locks < 2 {
                return Some(format!(
                    "--workload {} takes two locks at a time: give --locks 2 or more",
                    self.workload.name()
                ));
            }
            if self.backend.recipe() == crate::Recipe::PostgresAdvisoryXact {
                return Some(format!(
                    "--workload {} holds two locks at once, and {} holds one per transaction: try postgres-advisory",
                    self.workload.name(),
                    self.backend_name()
                ));
            }
        }
        if let Some(why) = self.protection.refuses(self.workload) {
            return Some(why);
        }
        let payments = self.workload == Workload::Payments;
        let named = [
            (self.queue != QueueKind::default(), "--queue"),
            (self.provider != Profile::default(), "--provider"),
            (self.provider_variant != Variant::default(), "--provider-variant"),
        ];
        named.into_iter().find(|(given, _)| *given && !payments).map(|(_, flag)| {
            format!("{flag} applies to --workload payments, not {}", self.workload.name())
        })
    }

    /// `lockcheck check --backend <backend>` in `world` with no other
    /// option.
    pub fn new(world: World, backend: Backend) -> RunOptions {
        RunOptions {
            backend,
            world,
            workload: Workload::FencedWrite,
            faults: match world {
                World::Simulated => DEFAULT_SIM_FAULTS.to_vec(),
                World::Real => DEFAULT_REAL_FAULTS.to_vec(),
            },
            partition_shapes: Shape::ALL.to_vec(),
            swarm: false,
            time_limit: Duration::from_secs(60),
            clients: 5,
            locks: 2,
            ttl: Duration::from_secs(1),
            seed: 0,
            fencing: true,
            persistent: false,
            restart_delay: None,
            pause_at: StallPoint::ALL.to_vec(),
            storage: StorageKind::Table,
            protection: Protection::default(),
            provider: Profile::default(),
            provider_variant: Variant::default(),
            queue: QueueKind::default(),
            purpose: Purpose::default(),
            services: Services::default(),
            servers: Vec::new(),
            exec: Vec::new(),
            pooler: None,
            linearizability_timeout: DEFAULT_LINEARIZABILITY_TIMEOUT,
            gate: Vec::new(),
            aim: world == World::Real,
        }
    }

    /// The lease's TTL in milliseconds, as the recipes take it.
    pub fn ttl_ms(&self) -> u64 {
        u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX)
    }

    /// The backend's name in this run's world (`sim-redis`, `redis`).
    pub fn backend_name(&self) -> &'static str {
        self.backend.name_in(self.world)
    }

    /// The checkers' options: the defaults, with this run's bound on the
    /// linearizability search.
    pub fn checks(&self) -> CheckOptions {
        CheckOptions {
            linearizability_time_limit: Some(self.linearizability_timeout),
            purpose: self.purpose,
            ..CheckOptions::default()
        }
    }

    /// The command that runs this test again: the same options and seed
    /// (a simulated run replays byte for byte; a real one draws the same
    /// schedule, on servers whose timing is their own). Only the options
    /// that differ from their defaults are written; a URL's password is
    /// masked, and the line says where a replay finds it.
    pub fn replay(&self) -> Replay {
        let faults: Vec<&str> = self.faults.iter().map(|kind| kind.name()).collect();
        let mut line = format!(
            "lockcheck check --backend {} --workload {} --nemesis {} --time-limit {}s --clients {} --locks {} --ttl {}ms --seed {}",
            self.backend_name(),
            self.workload.name(),
            if faults.is_empty() { "none".to_string() } else { faults.join(",") },
            self.time_limit.as_secs_f64(),
            self.clients,
            self.locks,
            self.ttl.as_millis(),
            self.seed,
        );
        let mut add = |flag: String| {
            line.push(' ');
            line.push_str(&flag);
        };
        if self.storage != StorageKind::Table {
            add(format!("--storage {}", self.storage.name()));
        }
        if self.workload == Workload::Payments || self.protection != Protection::default() {
            add(format!("--protection {}", self.protection.name()));
        }
        if self.workload == Workload::Payments {
            if self.provider != Profile::default() {
                add(format!("--provider {}", self.provider.name()));
            }
            if self.provider_variant != Variant::default() {
                add(format!("--provider-variant {}", self.provider_variant.name()));
            }
            if self.queue != QueueKind::default() {
                add(format!("--queue {}", self.queue.name()));
            }
        }
        if self.purpose != Purpose::default() {
            add(format!("--purpose {}", self.purpose.name()));
        }
        if let Some(pooler) = self.pooler {
            add(format!("--pooler {}", pooler.name()));
        }
        let mut secrets = Vec::new();
        for (service, urls) in self.services.iter() {
            let given = urls.join(",");
            let shown = lockcheck_checker::redact(&given);
            if shown == given {
                add(format!("{} {shown}", service.flag()));
            } else {
                add(format!("{} '{shown}'", service.flag()));
                secrets.push(service.variable());
            }
        }
        let mut shapes = self.partition_shapes.clone();
        shapes.sort();
        shapes.dedup();
        if shapes != Shape::ALL {
            add(format!("--partition-shapes {}", Shape::list(&self.partition_shapes)));
        }
        let mut points = self.pause_at.clone();
        points.sort();
        points.dedup();
        if points != StallPoint::ALL {
            add(format!("--pause-at {}", StallPoint::list(&points)));
        }
        if self.linearizability_timeout != DEFAULT_LINEARIZABILITY_TIMEOUT {
            add(format!(
                "--linearizability-timeout {}ms",
                self.linearizability_timeout.as_millis()
            ));
        }
        for (on, flag) in [
            (self.swarm, "--swarm"),
            (!self.fencing, "--no-fencing"),
            (self.persistent, "--persistent"),
            (self.aim && self.world == World::Simulated, "--aim"),
        ] {
            if on {
                add(flag.to_string());
            }
        }
        if let Some(delay) = self.restart_delay {
            add(format!("--restart-delay {}ms", delay.as_millis()));
        }
        if !self.gate.is_empty() {
            add(format!("--gate {}", self.gate.join(",")));
        }
        if !self.servers.is_empty() {
            add(format!("--servers {}", self.servers.join(",")));
        }
        if !self.exec.is_empty() {
            add(format!("-- {}", self.exec.join(" ")));
        }
        Replay { line: lockcheck_checker::redact(&line), secrets }
    }
}

/// The line that replays a run, and the environment variables its masked
/// passwords are to be given in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replay {
    /// `lockcheck check …`, every password masked.
    pub line: String,
    pub secrets: Vec<&'static str>,
}

impl Replay {
    /// The line's arguments, after `lockcheck `: `check --backend …`.
    pub fn arguments(&self) -> &str {
        self.line.strip_prefix("lockcheck ").unwrap_or(&self.line)
    }

    /// The line as [`Replay`]'s `Display` shows it, with `program` (what
    /// runs lockcheck from a shell: `lockcheck`, `cargo run --release --`,
    /// a path) in place of `lockcheck`.
    pub fn run_by(&self, program: &str) -> String {
        let shown = self.to_string();
        format!("{program} {}", shown.strip_prefix("lockcheck ").unwrap_or(&shown))
    }
}

impl fmt::Display for Replay {
    /// The line, with a shell comment naming where the masked passwords
    /// go: it still runs as it is.
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(out, "{}", self.line)?;
        if !self.secrets.is_empty() {
            write!(out, "  # password redacted: pass the URL in {}", self.secrets.join(", "))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Pooler, RunOptions, Services, UrlService};
    use crate::{Backend, FaultKind, Shape, StallPoint, StorageKind, World};

    #[test]
    fn a_default_run_replays_with_only_what_every_line_names() {
        let simulated = RunOptions { seed: 7, ..RunOptions::default() };
        assert_eq!(
            simulated.replay().to_string(),
            "lockcheck check --backend sim-redis --workload fenced-write \
             --nemesis pause,sigstop,clock,kill,slow-net,loss --time-limit 60s --clients 5 \
             --locks 2 --ttl 1000ms --seed 7"
        );
        let real = RunOptions::new(World::Real, Backend::Etcd);
        assert!(real.replay().line.starts_with("lockcheck check --backend etcd "));
        assert!(real.replay().line.contains("--nemesis pause "));
        assert!(!real.replay().line.contains("--pooler"));
        let pooled = RunOptions {
            pooler: Some(Pooler::Transaction),
            ..RunOptions::new(World::Real, Backend::PostgresAdvisory)
        };
        assert!(pooled.replay().line.contains(" --pooler transaction"));
        for pooler in Pooler::ALL {
            assert_eq!(Pooler::parse(pooler.name()), Some(pooler));
        }
        assert_eq!(Pooler::parse("statement"), None);
    }

    #[test]
    fn options_off_their_defaults_are_written_and_passwords_masked() {
        let options = RunOptions {
            faults: vec![FaultKind::Partition],
            partition_shapes: vec![Shape::Halves, Shape::Client],
            pause_at: vec![StallPoint::InFlight],
            storage: StorageKind::S3Cas,
            fencing: false,
            restart_delay: Some(Duration::from_millis(0)),
            gate: vec!["mutual-exclusion".to_string()],
            services: Services::default()
                .with(UrlService::Redis, &["redis://:hunter2@db:6379"])
                .with(UrlService::Etcd, &["http://a:2379", "http://b:2379"]),
            exec: vec!["python3".to_string(), "lock.py".to_string()],
            ..RunOptions::new(World::Real, Backend::Redis)
        };
        let replay = options.replay();
        let line = replay.to_string();
        assert!(!line.contains("hunter2"), "{line}");
        for part in [
            "--storage s3-cas",
            "--partition-shapes halves,client",
            "--pause-at in-flight",
            "--no-fencing",
            "--restart-delay 0ms",
            "--gate mutual-exclusion",
            "--etcd-url http://a:2379,http://b:2379",
            "-- python3 lock.py",
            "# password redacted: pass the URL in LOCKCHECK_REDIS_URL",
        ] {
            assert!(line.contains(part), "{part} missing from {line}");
        }
        assert_eq!(replay.secrets, ["LOCKCHECK_REDIS_URL"]);
        let run = replay.run_by("cargo run --release --");
        assert!(run.starts_with("cargo run --release -- check --backend redis "), "{run}");
        assert!(run.ends_with("# password redacted: pass the URL in LOCKCHECK_REDIS_URL"), "{run}");
        assert_eq!(replay.arguments(), replay.line.strip_prefix("lockcheck ").expect("lockcheck"));
    }

    #[test]
    fn services_given_no_url_are_not_given() {
        let mut services = Services::default().with(UrlService::Mysql, &["mysql://x"]);
        assert_eq!(services.url(UrlService::Mysql), Some("mysql://x"));
        assert!(!services.given(UrlService::Postgres));
        services.set(UrlService::Mysql, Vec::new());
        assert_eq!(services, Services::default());
    }
}
