//! What a real run asks for, checked before any server starts: the options
//! of `lockcheck check` against real servers, and the faults they turn on.

use lockcheck_workloads::{check_sizes, FaultKind, Pooler, Recipe, RunOptions, UrlService, World};

use crate::catalogue::{LockService, RealBackend};
use crate::netfault::Shape;
use crate::servers::ServerKind;

/// A real test checked, its backend and faults settled: what a run
/// executes, planned once.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub test: RunOptions,
    pub backend: RealBackend,
    pub faults: Faults,
}

impl Plan {
    /// The same test with another seed (a matrix cell's next run).
    pub fn seeded(&self, seed: u64) -> Plan {
        Plan { test: RunOptions { seed, ..self.test.clone() }, ..self.clone() }
    }

    /// What the pooler between the clients and their server does to their
    /// locks, for the report: why a lock through it holds or does not.
    pub fn pooling(&self) -> Option<String> {
        let pooler = self.test.pooler?;
        let session_lock = self.backend.backend().recipe() == Recipe::PostgresAdvisory;
        Some(match (pooler, session_lock) {
            (Pooler::Transaction, true) => "PgBouncer in transaction pooling: each transaction may run on another server connection, and a session advisory lock stays with the connection it was taken on, so the next client whose transaction gets that connection holds the lock too (pg_try_advisory_lock answers true to the session that holds it), and an unlock may run where the lock is not (PgBouncer's own table: session advisory locks, never). pg_try_advisory_xact_lock (postgres-advisory-xact) or session pooling keeps a lock with its holder".to_string(),
            (Pooler::Transaction, false) => "PgBouncer in transaction pooling: a transaction keeps its server connection until it ends, and pg_try_advisory_xact_lock's lock ends with it, so the lock stays with its holder".to_string(),
            (Pooler::Session, _) => "PgBouncer in session pooling: a client keeps its server connection for its whole session, so its locks stay its own; a session that ends is reset (DISCARD ALL) before another client gets the connection, which frees them".to_string(),
        })
    }
}

/// The order a real run names its faults in.
const REAL_ORDER: [FaultKind; 10] = [
    FaultKind::Pause,
    FaultKind::Sigstop,
    FaultKind::Kill,
    FaultKind::ConnKill,
    FaultKind::Partition,
    FaultKind::SlowNet,
    FaultKind::SlowClient,
    FaultKind::Clock,
    FaultKind::Failover,
    FaultKind::ClientKill,
];

/// The faults a real run has on: a set of [`FaultKind`]s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Faults(u16);

impl Faults {
    fn bit(fault: FaultKind) -> u16 {
        1 << fault as u16
    }

    fn insert(&mut self, fault: FaultKind) {
        self.0 |= Faults::bit(fault);
    }

    /// Whether no fault is on.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether `fault` is on.
    pub fn has(self, fault: FaultKind) -> bool {
        self.0 & Faults::bit(fault) != 0
    }

    /// How long a hold must be able to last for these faults to break it
    /// (0: no fault needs more than the backend's own holds):
    /// - a clock drift, two thirds of a TTL: a clock running `rate` times
    ///   fast expires a fresh lease after TTL / `rate`, a third of a TTL at
    ///   most for the drifts drawn (3 to 10 times fast), and the holder
    ///   must still be at work then, long enough for the next one to take
    ///   the lock;
    /// - a failover or a killed session, a third of a TTL: the fault, and
    ///   the client's reconnection, must fall inside one hold;
    /// - a partition, for a `backend` whose holders keep a session's lease
    ///   alive, three TTLs: a holder cut off is aimed at when its work
    ///   outlasts a lease from the cut and a margin, and jobs of up to three
    ///   TTLs (two otherwise, as in the simulator) give the cut more than
    ///   half the grants to choose from instead of a quarter.
    pub fn hold_needed_ms(self, backend: RealBackend, ttl_ms: u64) -> u64 {
        if self.has(FaultKind::Partition) && backend.pinned() {
            // A member cut off under a holder that leads: its lease lasts
            // until it steps down, then a TTL from the new leader's election.
            ttl_ms * 5
        } else if self.has(FaultKind::Partition) && backend.keepalive_ms(ttl_ms).is_some() {
            ttl_ms * 3
        } else if self.has(FaultKind::Clock) {
            ttl_ms * 2 / 3
        } else if self.has(FaultKind::Failover) || self.has(FaultKind::ConnKill) {
            ttl_ms / 3
        } else {
            0
        }
    }

    /// The faults on, a comma list (`none` when none is).
    pub fn names(self) -> String {
        let names: Vec<&str> =
            REAL_ORDER.iter().filter(|fault| self.has(**fault)).map(|fault| fault.name()).collect();
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(",")
        }
    }
}

/// The real test `test` asks for, its faults on, or what is wrong with the
/// options.
pub fn plan(test: &RunOptions) -> Result<Plan, String> {
    let Some(backend) = RealBackend::new(test.backend).filter(|_| test.world == World::Real) else {
        return Err(format!(
            "{} is not a real backend: lockcheck backends lists the real ones",
            test.backend_name()
        ));
    };
    let faults = faults(test, backend)?;
    Ok(Plan { test: test.clone(), backend, faults })
}

/// The faults a real run of `backend` has on, or what is wrong with the
/// options.
fn faults(test: &RunOptions, backend: RealBackend) -> Result<Faults, String> {
    if let Some(why) = test.storage.refuses(test.workload) {
        return Err(why);
    }
    if let Some(why) = test.refuses_workload_options() {
        return Err(why);
    }
    let mut faults = Faults::default();
    for &fault in &test.faults {
        if let Some(why) = backend.refuses(fault) {
            return Err(why);
        }
        faults.insert(fault);
    }
    match (backend.service(), test.exec.is_empty()) {
        (LockService::Exec, true) => {
            return Err(
                "--backend exec runs your lock program: give it after --, e.g. lockcheck check --backend exec --servers redis -- python3 examples/python/redis_lock.py (docs/exec-protocol.md)"
                    .to_string(),
            )
        }
        (LockService::Exec, false) => {
            let servers = exec_servers(test)?;
            if faults.has(FaultKind::Clock) && servers.iter().any(|(kind, _)| *kind == ServerKind::Etcd) {
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
        (_, true) if !test.servers.is_empty() => {
            return Err(format!("--servers is for --backend exec, not {}", backend.name()))
        }
        (_, true) => {}
    }
    if let Some(pooler) = test.pooler {
        refuses_pooler(test, backend, pooler)?;
    }
    let given_url = match backend.service() {
        LockService::Redis { .. } => test.services.given(UrlService::Redis),
        LockService::Etcd => test.services.given(UrlService::Etcd),
        LockService::ZooKeeper => test.services.given(UrlService::ZooKeeper),
        LockService::Mariadb => test.services.given(UrlService::Mysql),
        LockService::Postgres => test.services.given(UrlService::Postgres),
        LockService::Exec => false,
    };
    if under_faketime() {
        return Err(
            "lockcheck itself runs under libfaketime (LD_PRELOAD or FAKETIME is set): the history's times would be fake; run it without, and --nemesis clock fakes only the lock servers' clocks"
                .to_string(),
        );
    }
    if (faults.has(FaultKind::Kill)
        || faults.has(FaultKind::Sigstop)
        || faults.has(FaultKind::Clock)
        || faults.has(FaultKind::Failover))
        && given_url
    {
        return Err(
            "kill, sigstop, clock and failover need the lock servers lockcheck starts itself: leave out the --*-url of the lock service"
                .to_string(),
        );
    }
    let shapes = shapes(test, backend)?;
    let splits_members =
        faults.has(FaultKind::Partition) && shapes.iter().any(|shape| *shape != Shape::Client);
    if backend.service() == LockService::ZooKeeper
        && faults.has(FaultKind::Clock)
        && (faults.has(FaultKind::Sigstop) || faults.has(FaultKind::Kill) || splits_members)
    {
        return Err(
            "clock with sigstop, kill or a partition among members: those start a ZooKeeper ensemble of three JVMs, and under libfaketime (which reads its offset file at every clock call) they do not elect a leader in time on a small machine; run clock against the single server, in a run of its own"
                .to_string(),
        );
    }
    let several = matches!(backend.service(), LockService::Redis { instances } if instances > 1);
    let redis = test.services.urls(UrlService::Redis);
    if several && !redis.is_empty() {
        if redis.len() < 3 {
            return Err(format!(
                "{} needs several independent Redis (five is usual): --redis-url has {}",
                backend.name(),
                redis.len()
            ));
        }
    } else if redis.len() > 1 {
        return Err(format!("{} uses one Redis: --redis-url has several", backend.name()));
    }
    check_sizes(test.clients, test.locks, test.ttl_ms(), test.time_limit)?;
    Ok(faults)
}

/// The servers `--servers` asks for the exec backend: each kind with how
/// many (`redis*5`: five Redis, for a Redlock).
pub(crate) fn exec_servers(test: &RunOptions) -> Result<Vec<(ServerKind, usize)>, String> {
    let mut servers = Vec::new();
    for word in test.servers.iter().map(|word| word.trim()).filter(|word| !word.is_empty()) {
        let (name, count) = match word.split_once('*') {
            Some((name, count)) => match count.parse::<usize>() {
                Ok(count) if (1..=9).contains(&count) => (name, count),
                _ => return Err(format!("--servers {word}: the count after * must be 1 to 9")),
            },
            None => (word, 1),
        };
        let kind = ServerKind::parse(name).map_err(|unknown| format!("--servers: {unknown}"))?;
        if kind.pools() {
            return Err(format!(
                "--servers {name}: {name} pools a PostgreSQL, so it does not run alone; --pooler puts it in front of a postgres-* backend's server"
            ));
        }
        if count > 1 && !kind.allows_several() {
            return Err(format!("--servers {word}: one {name} at most"));
        }
        if servers.iter().any(|(seen, _)| *seen == kind) {
            return Err(format!("--servers names {name} twice"));
        }
        servers.push((kind, count));
    }
    Ok(servers)
}

/// Why PgBouncer cannot go in front of `backend`'s server in `test`, if it
/// cannot.
fn refuses_pooler(test: &RunOptions, backend: RealBackend, pooler: Pooler) -> Result<(), String> {
    let flag = format!("--pooler {}", pooler.name());
    match backend.backend().recipe() {
        Recipe::PostgresAdvisory | Recipe::PostgresAdvisoryXact => {}
        _ => {
            return Err(format!(
                "{flag} puts PgBouncer in front of postgres-advisory and postgres-advisory-xact, whose locks live in a session or a transaction; {} keeps its locks elsewhere",
                backend.name()
            ))
        }
    }
    if test.services.given(UrlService::Postgres) {
        return Err(format!(
            "{flag} starts PgBouncer in front of lockcheck's own PostgreSQL; for your own server, point --postgres-url at your PgBouncer instead"
        ));
    }
    if test.faults.contains(&FaultKind::ConnKill) {
        return Err(format!(
            "{flag}: conn-kill ends the lock clients' server sessions, which behind a pooler belong to no one client"
        ));
    }
    Ok(())
}

/// Whether this process runs under libfaketime: its times would be fake.
fn under_faketime() -> bool {
    std::env::var_os("FAKETIME").is_some()
        || std::env::var("LD_PRELOAD").is_ok_and(|preload| preload.contains("faketime"))
}

/// The partition shapes asked for that can strike `backend`: `client`
/// always; `isolate-one`, `halves` and `ring` split an etcd cluster that
/// lockcheck starts behind its proxy (five members when `ring` is asked
/// for, three otherwise), `isolate-one` and `halves` a ZooKeeper ensemble
/// of three. Shapes that cannot strike the backend are left
/// out; none left is an error.
pub(crate) fn shapes(test: &RunOptions, backend: RealBackend) -> Result<Vec<Shape>, String> {
    let mut shapes = Vec::new();
    // The clusters lockcheck starts behind its proxy: etcd's of three or
    // five members, ZooKeeper's of three (no ring: each of three members
    // is every other's neighbour).
    let etcd = backend.service() == LockService::Etcd && !test.services.given(UrlService::Etcd);
    let zookeeper =
        backend.service() == LockService::ZooKeeper && !test.services.given(UrlService::ZooKeeper);
    for &shape in &test.partition_shapes {
        if shape == Shape::Client || etcd || (zookeeper && shape != Shape::Ring) {
            shapes.push(shape);
        }
    }
    if shapes.is_empty() {
        return Err(format!(
            "none of the partition shapes {:?} applies to {}: against real servers, client cuts a client off from its lock servers, and isolate-one and halves split the three members of an etcd cluster or ZooKeeper ensemble lockcheck starts",
            Shape::list(&test.partition_shapes),
            backend.name()
        ));
    }
    Ok(shapes)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use lockcheck_workloads::{Backend, FaultKind, Pooler, RunOptions, Shape, UrlService, World};

    use super::{plan, Faults};
    use crate::catalogue::RealBackend;

    fn options(nemesis: &str) -> RunOptions {
        RunOptions {
            faults: FaultKind::parse_list(nemesis).unwrap(),
            ..RunOptions::new(World::Real, Backend::Redis)
        }
    }

    fn backend(name: &str) -> RealBackend {
        RealBackend::parse(name).unwrap()
    }

    /// The faults of `options` run on backend `name`.
    fn planned(options: &RunOptions, name: &str) -> Result<Faults, String> {
        let test = RunOptions { backend: backend(name).backend(), ..options.clone() };
        plan(&test).map(|plan| plan.faults)
    }

    fn refused(options: &RunOptions, name: &str) -> String {
        match planned(options, name) {
            Ok(faults) => panic!("{name} {:?}: accepted with {}", options.faults, faults.names()),
            Err(message) => message,
        }
    }

    #[test]
    fn a_pooler_goes_in_front_of_the_advisory_locks_own_server_only() {
        let pooled =
            |nemesis: &str, pooler: Pooler| RunOptions { pooler: Some(pooler), ..options(nemesis) };
        for name in ["postgres-advisory", "postgres-advisory-xact"] {
            for pooler in Pooler::ALL {
                assert!(planned(&pooled("none", pooler), name).is_ok(), "{name} {pooler:?}");
                assert!(planned(&pooled("pause,kill", pooler), name).is_ok(), "{name}");
            }
        }
        for name in ["postgres-lease", "redis", "mysql-get-lock", "etcd"] {
            let why = refused(&pooled("none", Pooler::Transaction), name);
            assert!(why.contains("postgres-advisory and postgres-advisory-xact"), "{name}: {why}");
        }
        let why = refused(&pooled("conn-kill", Pooler::Session), "postgres-advisory");
        assert!(why.contains("belong to no one client"), "{why}");
        let mut given = pooled("none", Pooler::Transaction);
        given.services.set(UrlService::Postgres, vec!["postgres://db:5432/x".into()]);
        let why = refused(&given, "postgres-advisory");
        assert!(why.contains("point --postgres-url at your PgBouncer"), "{why}");
        // The plan says what the pooler does to the run's locks.
        let test = RunOptions {
            backend: Backend::PostgresAdvisory,
            ..pooled("none", Pooler::Transaction)
        };
        let note = plan(&test).unwrap().pooling().unwrap();
        assert!(note.contains("never"), "{note}");
        assert_eq!(plan(&options("none")).unwrap().pooling(), None);
    }

    #[test]
    fn a_holder_pinned_to_a_member_cut_off_holds_past_a_step_down_and_a_new_lease() {
        for name in ["etcd-linearizable-check", "etcd-serializable-check"] {
            assert!(backend(name).pinned(), "{name}");
            let faults = planned(&options("partition"), name).unwrap();
            assert_eq!(faults.hold_needed_ms(backend(name), 2000), 10_000, "{name}");
        }
        assert!(!backend("etcd").pinned());
        let faults = planned(&options("partition"), "etcd").unwrap();
        assert_eq!(faults.hold_needed_ms(backend("etcd"), 2000), 6000);
    }

    #[test]
    fn zookeeper_takes_member_faults_and_its_clock_alone() {
        for nemesis in ["pause", "sigstop,kill", "clock", "partition"] {
            assert!(planned(&options(nemesis), "zookeeper").is_ok(), "{nemesis}");
        }
        for nemesis in ["clock,kill", "clock,sigstop"] {
            assert!(refused(&options(nemesis), "zookeeper").contains("libfaketime"), "{nemesis}");
        }
        let mut split = options("clock,partition");
        split.partition_shapes = vec![Shape::IsolateOne];
        assert!(refused(&split, "zookeeper").contains("ensemble"));
        split.partition_shapes = vec![Shape::Client];
        assert!(planned(&split, "zookeeper").is_ok());
        // No ring in an ensemble of three.
        let mut ring = options("partition");
        ring.partition_shapes = vec![Shape::Ring, Shape::Halves];
        let test = RunOptions { backend: Backend::ZooKeeper, ..ring };
        assert_eq!(super::shapes(&test, backend("zookeeper")), Ok(vec![Shape::Halves]));
        assert!(refused(&options("conn-kill"), "zookeeper").contains("SQL sessions"));
    }

    #[test]
    fn holds_last_as_long_as_the_faults_on_need_to_break_them() {
        let hold = |nemesis: &str, name: &str| {
            let faults = planned(&options(nemesis), name).unwrap();
            backend(name).hold_ms(
                500,
                faults.hold_needed_ms(backend(name), 500),
                !faults.is_empty(),
            )
        };
        // A tenth of a TTL; a third where a failover or a killed session
        // must fall inside a hold; two thirds where a drift must expire a
        // lease inside one.
        assert_eq!(hold("pause", "redis"), (0, 50));
        assert_eq!(hold("failover", "redis"), (0, 166));
        assert_eq!(hold("conn-kill", "postgres-lease"), (0, 166));
        assert_eq!(hold("clock", "redis"), (0, 333));
        assert_eq!(hold("clock,failover", "redis"), (0, 333));
        // Independent instances hold a third at least; a session's holder
        // works a long job under its keepalive.
        assert_eq!(hold("pause", "redlock"), (0, 166));
        assert_eq!(hold("clock", "redlock"), (0, 333));
        assert_eq!(hold("pause", "etcd"), (0, 1000));
        // A session's holder cut off must work on past its lease; a
        // holder under a lease it does not renew must not.
        assert_eq!(hold("partition", "etcd"), (0, 1500));
        assert_eq!(hold("partition", "redis"), (0, 50));
        // With no fault at all, a session's holder works up to one TTL.
        assert_eq!(hold("none", "etcd"), (0, 500));
        assert_eq!(hold("none", "redis"), (0, 50));
    }

    #[test]
    fn every_fault_that_applies_is_taken_by_its_name() {
        let faults =
            planned(&options("pause,sigstop,kill,partition,slow-net,clock"), "redis").unwrap();
        assert_eq!(faults.names(), "pause,sigstop,kill,partition,slow-net,clock");
        assert_eq!(planned(&options("failover"), "redis-fenced").unwrap().names(), "failover");
        assert_eq!(
            planned(&options("conn-kill"), "postgres-advisory").unwrap().names(),
            "conn-kill"
        );
        assert_eq!(planned(&options("none"), "etcd").unwrap().names(), "none");
    }

    #[test]
    fn a_fault_that_cannot_strike_the_backend_is_refused_with_the_reason() {
        assert!(refused(&options("conn-kill"), "redis").contains("ends SQL sessions"));
        assert!(refused(&options("clock"), "etcd").contains("libfaketime"));
        assert!(refused(&options("failover"), "etcd").contains("promotes a Redis replica"));
        assert!(refused(&options("client-kill"), "redlock").contains("--backend exec"));
        assert!(refused(&options("loss"), "redis").contains("simulated only"));
        assert!(refused(&options("skew"), "etcd").contains("machine's clock"));
        // delay is slow-net's other name, in both worlds.
        assert_eq!(planned(&options("delay"), "redis").unwrap().names(), "slow-net");
    }

    #[test]
    fn options_that_make_no_test_are_refused() {
        assert!(refused(&options("pause"), "exec").contains("give it after --"));
        let mut program = options("pause");
        program.exec = vec!["true".to_string()];
        assert!(refused(&program, "redis").contains("a program after --"));
        let mut given = options("kill");
        given.services = given.services.with(UrlService::Redis, &["redis://127.0.0.1:1"]);
        assert!(refused(&given, "redis").contains("need the lock servers lockcheck starts"));
        let mut two = options("pause");
        two.services = two.services.with(UrlService::Redis, &["redis://a:1", "redis://b:1"]);
        assert!(refused(&two, "redlock").contains("several independent Redis"));
        assert!(refused(&two, "redis").contains("uses one Redis"));
        let mut shapes = options("partition");
        shapes.partition_shapes = vec![Shape::Halves];
        assert!(refused(&shapes, "redis").contains("none of the partition shapes \"halves\""));
        let mut ttl = options("pause");
        ttl.ttl = Duration::from_millis(5);
        assert!(refused(&ttl, "redis").contains("--ttl"));
        let mut clients = options("pause");
        clients.clients = 0;
        assert!(refused(&clients, "redis").contains("--clients"));
        let mut exec = options("pause");
        exec.exec = vec!["true".to_string()];
        exec.servers = vec!["etcd".to_string()];
        exec.faults = vec![FaultKind::Clock];
        assert!(refused(&exec, "exec").contains("leave etcd out"));
        exec.servers = vec!["postgres*2".to_string()];
        assert!(refused(&exec, "exec").contains("one postgres at most"));
    }

    #[test]
    fn every_backend_name_reads_back() {
        for name in [
            "redis",
            "redis-fenced",
            "redis-del-release",
            "redis-setnx-expire",
            "redis-lost-reply",
            "redis-get-del-release",
            "redis-blind-renew",
            "redlock",
            "redis-semaphore",
            "redis-semaphore-client-clock",
            "etcd",
            "postgres-advisory",
            "postgres-advisory-xact",
            "postgres-lease",
            "mysql-get-lock",
            "mysql-lease",
            "exec",
        ] {
            assert_eq!(backend(name).name(), name);
        }
        assert_eq!(RealBackend::parse("sim-redis"), None);
        let simulated = RunOptions::new(World::Simulated, Backend::Redis);
        assert!(plan(&simulated).unwrap_err().contains("not a real backend"));
    }
}
