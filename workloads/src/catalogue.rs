//! The one catalogue of backends, for both worlds. A backend is one value
//! ([`Backend`]) and one entry ([`Entry`]): its name and help line, the
//! recipe its clients run, the service that keeps its locks, its tuning,
//! the worlds it runs in and the faults it refuses there. `sim-X` is X run
//! in the simulator: the name derives from the entry. Each world answers
//! one question per [`Service`]: the simulator how to host it, the real
//! world which servers it needs and which driver speaks to it.
//!
//! Adding a backend is one variant and one entry here (and, for a new
//! service, its recipe and its service's file in each world it runs in).

use crate::etcd_lock::Check;
use crate::redis_lock::Variant;
use crate::zookeeper_lock::{Suspension, Variant as ZkVariant, Waiting};
use crate::FaultKind;

/// Where a run takes place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum World {
    /// The deterministic simulator: no servers, the same history for a seed.
    Simulated,
    /// Servers lockcheck starts on loopback, or is given by URL.
    Real,
}

impl World {
    pub const ALL: [World; 2] = [World::Simulated, World::Real];

    /// As a listing names it.
    pub fn name(self) -> &'static str {
        match self {
            World::Simulated => "simulated",
            World::Real => "real",
        }
    }
}

/// The service that keeps a backend's locks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Service {
    /// Independent Redis instances: one, or Redlock's five.
    Redis { instances: u32 },
    /// An etcd cluster of this many members agreeing by Raft (the real
    /// world starts one member, or more when a fault splits members).
    Etcd { members: u32 },
    /// The PostgreSQL that also holds the protected resources.
    Postgres,
    /// A MariaDB (or MySQL) of its own.
    Mariadb,
    /// A ZooKeeper ensemble of this many members agreeing by Zab (the real
    /// world starts one member, or three when a fault needs an ensemble).
    ZooKeeper { members: u32 },
    /// Consul's sessions and KV store (simulated only: no Consul binary is
    /// packaged for this machine).
    Consul,
    /// A lock table on a primary that ships each write to one replica
    /// (simulated only): asynchronously, or synchronously (the primary
    /// answers a write once the replica has it).
    PrimaryReplica { sync: bool },
    /// A leaderless store of this many nodes, reading and writing a
    /// majority of them (W + R > N; simulated only).
    Leaderless { nodes: u32 },
    /// The servers `--servers` names, for the user's lock program.
    Exec,
}

impl Service {
    /// Whether its locks live in a database, which keeps them across a
    /// restart and ends them with the session.
    pub const fn is_sql(self) -> bool {
        matches!(self, Service::Postgres | Service::Mariadb)
    }
}

/// The recipe a backend's clients run (docs/guide.md#recipes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Recipe {
    /// A single Redis (`crate::redis_lock`), and which variant.
    Redis(Variant),
    /// `SET NX PX` and the fence's `INCR` in one script (real only).
    RedisFenced,
    /// The sorted-set semaphore (`crate::semaphore`), by the server's `TIME`
    /// or (broken) by the caller's clock.
    Semaphore { client_clock: bool },
    /// Redlock (`crate::redlock`); a crashed instance stays down longer than
    /// any lease it granted, or (broken) restarts at once.
    Redlock { delayed_restart: bool },
    /// The SQL lease table (`crate::lease_table`), expiring by the
    /// database's clock or (broken) the client's.
    LeaseTable { client_clock: bool },
    /// etcd's lease and lock (`crate::etcd_lock`); (broken) a leader that
    /// commits without a majority; with `waits`, a client whose lock is
    /// taken waits in line watching its predecessor (`Mutex.Lock`) rather
    /// than being refused at once (`Mutex.TryLock`); `check`: what a holder
    /// whose keepalive goes unanswered asks before it goes on believing.
    Etcd { commits_alone: bool, waits: bool, check: Check },
    /// etcd's election (`crate::etcd_lock`): a candidate campaigns with a
    /// lease of its own (`Campaign`), waiting in line; the leader key's
    /// create revision is the term; `Resign` steps down.
    EtcdElection,
    /// `pg_try_advisory_lock`, held by a session.
    PostgresAdvisory,
    /// `pg_try_advisory_xact_lock`, held by an open transaction.
    PostgresAdvisoryXact,
    /// `GET_LOCK`, held by a session.
    MysqlGetLock,
    /// Curator's lock over ZooKeeper (`crate::zookeeper_lock`), and which
    /// variant: what waiters watch, what a holder does once SUSPENDED.
    ZooKeeper(crate::zookeeper_lock::Variant),
    /// Consul's session and `?acquire=`, with a lock-delay in ms.
    Consul { lock_delay_ms: u64 },
    /// A primary's lock table: each acquire decided by the primary, or
    /// (broken) by the replica from what it has been shipped so far.
    PrimaryReplica { replica_decides: bool },
    /// Read a majority, take the newest, write a majority: the version
    /// read plus one is the token.
    Quorum,
    /// The user's program, speaking the exec protocol.
    Exec,
}

/// Everything the catalogue knows of one backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// Its `--backend` name against real servers.
    pub name: &'static str,
    /// Its name in the simulator: `sim-` and the name.
    pub sim_name: &'static str,
    /// One line on what it is.
    pub help: &'static str,
    pub recipe: Recipe,
    pub service: Service,
    /// Whether it runs in the simulator, and against real servers.
    pub simulated: bool,
    pub real: bool,
    /// Other names the simulator takes for it.
    pub sim_aliases: &'static [&'static str],
}

/// An entry's names: the real one, and `sim-` and it.
macro_rules! entry {
    ($name:literal, $($field:ident: $value:expr,)* ..$base:expr) => {
        Entry { name: $name, sim_name: concat!("sim-", $name), $($field: $value,)* ..$base }
    };
    ($name:literal, $($field:ident: $value:expr),* $(,)?) => {
        Entry { name: $name, sim_name: concat!("sim-", $name), $($field: $value),* }
    };
}

/// The default an entry starts from: one Redis, in both worlds.
const REDIS: Entry = entry!(
    "redis",
    help: "",
    recipe: Recipe::Redis(Variant::Plain),
    service: Service::Redis { instances: 1 },
    simulated: true,
    real: true,
    sim_aliases: &[],
);

/// A backend of either world (or both).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Backend {
    Redis,
    RedisFenced,
    RedisDelRelease,
    RedisSetnxExpire,
    RedisLostReply,
    RedisGetDelRelease,
    RedisBlindRenew,
    LeaseTable,
    LeaseTableClientClock,
    Redlock,
    RedlockNoDelay,
    RedisSemaphore,
    RedisSemaphoreClientClock,
    Etcd,
    Etcd5,
    EtcdNoQuorum,
    EtcdWaiting,
    EtcdLinearizableCheck,
    EtcdSerializableCheck,
    EtcdElection,
    PostgresAdvisory,
    PostgresAdvisoryXact,
    PostgresLease,
    MysqlGetLock,
    MysqlLease,
    Exec,
    Consul,
    ConsulNoDelay,
    ZooKeeper,
    ZooKeeperHerd,
    ZooKeeperActsSuspended,
    ReplicaReads,
    PrimaryReads,
    SyncReplica,
    LeaderlessQuorum,
}

/// Redlock's instances.
pub const REDLOCK_INSTANCES: u32 = 5;

/// A semaphore's permits, in both worlds.
pub const PERMITS: u32 = 2;

/// Consul's default lock-delay.
pub const CONSUL_LOCK_DELAY_MS: u64 = 15_000;

impl Backend {
    /// Every backend, in the order a listing of either world gives them.
    pub const ALL: [Backend; 35] = [
        Backend::Redis,
        Backend::RedisFenced,
        Backend::RedisDelRelease,
        Backend::RedisSetnxExpire,
        Backend::RedisLostReply,
        Backend::RedisGetDelRelease,
        Backend::RedisBlindRenew,
        Backend::LeaseTable,
        Backend::LeaseTableClientClock,
        Backend::Redlock,
        Backend::RedlockNoDelay,
        Backend::RedisSemaphore,
        Backend::RedisSemaphoreClientClock,
        Backend::Etcd,
        Backend::Etcd5,
        Backend::EtcdNoQuorum,
        Backend::EtcdWaiting,
        Backend::EtcdLinearizableCheck,
        Backend::EtcdSerializableCheck,
        Backend::EtcdElection,
        Backend::ZooKeeper,
        Backend::ZooKeeperHerd,
        Backend::ZooKeeperActsSuspended,
        Backend::Consul,
        Backend::ConsulNoDelay,
        Backend::PrimaryReads,
        Backend::ReplicaReads,
        Backend::SyncReplica,
        Backend::LeaderlessQuorum,
        Backend::PostgresAdvisory,
        Backend::PostgresAdvisoryXact,
        Backend::PostgresLease,
        Backend::MysqlGetLock,
        Backend::MysqlLease,
        Backend::Exec,
    ];

    /// The catalogue: one entry a backend.
    pub const fn entry(self) -> Entry {
        const SEMAPHORE: Entry =
            Entry { recipe: Recipe::Semaphore { client_clock: false }, ..REDIS };
        const REDLOCK: Entry = Entry {
            recipe: Recipe::Redlock { delayed_restart: true },
            service: Service::Redis { instances: REDLOCK_INSTANCES },
            ..REDIS
        };
        const ETCD: Entry = Entry {
            recipe: Recipe::Etcd { commits_alone: false, waits: false, check: Check::Deadline },
            service: Service::Etcd { members: 3 },
            ..REDIS
        };
        const ZOOKEEPER: Entry = Entry {
            recipe: Recipe::ZooKeeper(ZkVariant::CURATOR),
            service: Service::ZooKeeper { members: 3 },
            ..REDIS
        };
        const POSTGRES: Entry = Entry { service: Service::Postgres, simulated: false, ..REDIS };
        const MYSQL: Entry = Entry { service: Service::Mariadb, ..POSTGRES };
        const LEASE_TABLE: Entry = Entry {
            recipe: Recipe::LeaseTable { client_clock: false },
            service: Service::Postgres,
            real: false,
            ..REDIS
        };
        const CONSUL: Entry = Entry {
            recipe: Recipe::Consul { lock_delay_ms: CONSUL_LOCK_DELAY_MS },
            service: Service::Consul,
            real: false,
            ..REDIS
        };
        const REPLICATED: Entry = Entry {
            recipe: Recipe::PrimaryReplica { replica_decides: false },
            service: Service::PrimaryReplica { sync: false },
            real: false,
            ..REDIS
        };
        const fn redis(variant: Variant) -> Entry {
            Entry { recipe: Recipe::Redis(variant), ..REDIS }
        }
        match self {
            Backend::Redis => Entry {
                help: "SET NX PX, Lua compare-and-delete release and renew; with fencing, INCR after the grant",
                ..REDIS
            },
            Backend::RedisFenced => entry!("redis-fenced",
                help: "SET NX PX and the fence's INCR in one script: the token is atomic with the grant",
                recipe: Recipe::RedisFenced, simulated: false, ..REDIS),
            Backend::RedisDelRelease => entry!("redis-del-release",
                help: "broken: release by plain DEL deletes the next holder's lock",
                ..redis(Variant::DelRelease)),
            Backend::RedisSetnxExpire => entry!("redis-setnx-expire",
                help: "broken: SETNX then PEXPIRE, two commands: a crash between them leaves a lock without TTL",
                ..redis(Variant::SetnxExpire)),
            Backend::RedisLostReply => entry!("redis-lost-reply",
                help: "broken: a lost SET reply is taken for busy (an orphan lock until its TTL)",
                ..redis(Variant::LostReply)),
            Backend::RedisGetDelRelease => entry!("redis-get-del-release",
                help: "broken: release by GET, compare, then DEL: a pause between deletes the next holder's lock",
                ..redis(Variant::GetDelRelease)),
            Backend::RedisBlindRenew => entry!("redis-blind-renew",
                help: "broken: renew by plain PEXPIRE: a late watchdog extends the next holder's lock",
                ..redis(Variant::BlindRenew)),
            Backend::LeaseTable => entry!("lease-table",
                help: "the SQL lease table: the database's clock, a fence column",
                sim_aliases: &["sim-postgres-lease", "sim-mysql-lease"], ..LEASE_TABLE),
            Backend::LeaseTableClientClock => entry!("lease-table-client-clock",
                help: "broken: the lease table, expiring leases by the client's clock",
                recipe: Recipe::LeaseTable { client_clock: true }, ..LEASE_TABLE),
            Backend::Redlock => entry!("redlock",
                help: "Redlock over five independent Redis: a majority, validity minus drift, delayed restart",
                ..REDLOCK),
            Backend::RedlockNoDelay => entry!("redlock-no-delay",
                help: "broken: Redlock whose crashed instances restart at once, having forgotten their keys",
                recipe: Recipe::Redlock { delayed_restart: false }, real: false, ..REDLOCK),
            Backend::RedisSemaphore => entry!("redis-semaphore",
                help: "a two-permit semaphore: a sorted set per key, by the server's TIME",
                ..SEMAPHORE),
            Backend::RedisSemaphoreClientClock => entry!("redis-semaphore-client-clock",
                help: "broken: the semaphore by the caller's clock",
                recipe: Recipe::Semaphore { client_clock: true }, ..SEMAPHORE),
            Backend::Etcd => entry!("etcd",
                help: "etcd lease + lock: a lease per acquisition, the lock key's create revision as the token",
                ..ETCD),
            Backend::Etcd5 => entry!("etcd-5",
                help: "the same etcd with five members",
                service: Service::Etcd { members: 5 }, real: false, ..ETCD),
            Backend::EtcdNoQuorum => entry!("etcd-no-quorum",
                help: "broken: etcd whose leader commits without a majority: a leader cut off goes on granting",
                recipe: Recipe::Etcd { commits_alone: true, waits: false, check: Check::Deadline }, real: false, ..ETCD),
            Backend::EtcdWaiting => entry!("etcd-waiting",
                help: "etcd's Mutex.Lock: a waiter's key stays in line, watching the key just before its own (one wake-up per release)",
                recipe: Recipe::Etcd { commits_alone: false, waits: true, check: Check::Deadline }, ..ETCD),
            Backend::EtcdLinearizableCheck => entry!("etcd-linearizable-check",
                help: "etcd whose holder, its keepalive unanswered, reads its key linearizably before it goes on (until its session's deadline)",
                recipe: Recipe::Etcd { commits_alone: false, waits: false, check: Check::Linearizable }, ..ETCD),
            Backend::EtcdSerializableCheck => entry!("etcd-serializable-check",
                help: "broken: etcd whose holder, its keepalive unanswered, takes a serializable read of its key for proof that it holds the lock",
                recipe: Recipe::Etcd { commits_alone: false, waits: false, check: Check::Serializable }, ..ETCD),
            Backend::EtcdElection => entry!("etcd-election",
                help: "etcd's election API: candidates Campaign with a lease each, waiting in line; the leader key's create revision is the term, Resign steps down",
                recipe: Recipe::EtcdElection, ..ETCD),
            Backend::ZooKeeper => entry!("zookeeper",
                help: "Curator's lock: an ephemeral sequential znode, each waiter watching its predecessor, the czxid as the token",
                ..ZOOKEEPER),
            Backend::ZooKeeperHerd => entry!("zookeeper-herd",
                help: "slow: every waiter watches the lock's parent, so each release wakes them all (the herd)",
                recipe: Recipe::ZooKeeper(ZkVariant { waiting: Waiting::Herd, ..ZkVariant::CURATOR }),
                ..ZOOKEEPER),
            Backend::ZooKeeperActsSuspended => entry!("zookeeper-acts-suspended",
                help: "broken: a holder acts on through SUSPENDED until its session is LOST",
                recipe: Recipe::ZooKeeper(ZkVariant { suspension: Suspension::KeepsActing, ..ZkVariant::CURATOR }),
                ..ZOOKEEPER),
            Backend::PostgresAdvisory => entry!("postgres-advisory",
                help: "pg_try_advisory_lock: held by a session, freed when the session ends",
                recipe: Recipe::PostgresAdvisory, ..POSTGRES),
            Backend::PostgresAdvisoryXact => entry!("postgres-advisory-xact",
                help: "pg_try_advisory_xact_lock: held by an open transaction",
                recipe: Recipe::PostgresAdvisoryXact, ..POSTGRES),
            Backend::PostgresLease => entry!("postgres-lease",
                help: "a PostgreSQL lease table: the database's clock, a fence column",
                recipe: Recipe::LeaseTable { client_clock: false }, ..POSTGRES),
            Backend::MysqlGetLock => entry!("mysql-get-lock",
                help: "MariaDB/MySQL GET_LOCK: held by a session, freed when the session ends",
                recipe: Recipe::MysqlGetLock, ..MYSQL),
            Backend::MysqlLease => entry!("mysql-lease",
                help: "a MariaDB/MySQL lease table: the database's clock, a fence column",
                recipe: Recipe::LeaseTable { client_clock: false }, ..MYSQL),
            Backend::Exec => entry!("exec",
                help: "your own lock program after --, speaking the exec protocol",
                recipe: Recipe::Exec, service: Service::Exec, simulated: false, ..REDIS),
            Backend::Consul => entry!("consul",
                help: "Consul sessions and KV acquire, LockIndex as the token, a lock-delay of 15 s",
                ..CONSUL),
            Backend::ConsulNoDelay => entry!("consul-no-delay",
                help: "Consul with lock-delay 0: a stalled holder's lock is taken at once",
                recipe: Recipe::Consul { lock_delay_ms: 0 }, ..CONSUL),
            Backend::PrimaryReads => entry!("primary-reads",
                help: "a lock table on a primary with an async replica: the primary decides every acquire",
                ..REPLICATED),
            Backend::ReplicaReads => entry!("replica-reads",
                help: "broken: the same pair, each acquire decided by the replica from what it has been shipped: a grant it has not seen looks free",
                recipe: Recipe::PrimaryReplica { replica_decides: true }, ..REPLICATED),
            Backend::SyncReplica => entry!("sync-replica",
                help: "a primary that answers a write once its replica has it: safe, and no write (no grant) while the replica is down",
                service: Service::PrimaryReplica { sync: true }, ..REPLICATED),
            Backend::LeaderlessQuorum => entry!("leaderless-quorum",
                help: "broken: three leaderless nodes, read two, write two (W + R > N): two clients can get the same token",
                recipe: Recipe::Quorum, service: Service::Leaderless { nodes: 3 }, ..REPLICATED),
        }
    }

    /// Whether it runs in `world`.
    pub const fn runs_in(self, world: World) -> bool {
        let entry = self.entry();
        match world {
            World::Simulated => entry.simulated,
            World::Real => entry.real,
        }
    }

    /// The backends of `world`, in the order a listing gives them.
    pub fn all_in(world: World) -> impl Iterator<Item = Backend> {
        Backend::ALL.into_iter().filter(move |backend| backend.runs_in(world))
    }

    /// Its `--backend` name in `world`: `sim-` and its name in the simulator.
    pub const fn name_in(self, world: World) -> &'static str {
        match world {
            World::Simulated => self.entry().sim_name,
            World::Real => self.entry().name,
        }
    }

    /// Its name in the simulator.
    pub const fn sim_name(self) -> &'static str {
        self.entry().sim_name
    }

    /// Its name against real servers.
    pub const fn real_name(self) -> &'static str {
        self.entry().name
    }

    /// One line on what it is.
    pub const fn help(self) -> &'static str {
        self.entry().help
    }

    pub const fn recipe(self) -> Recipe {
        self.entry().recipe
    }

    pub const fn service(self) -> Service {
        self.entry().service
    }

    /// The backend `name` names in `world`, or none.
    pub fn parse_in(world: World, name: &str) -> Option<Backend> {
        Backend::all_in(world).find(|backend| {
            backend.name_in(world) == name
                || (world == World::Simulated && backend.entry().sim_aliases.contains(&name))
        })
    }

    /// Every `--backend` name of `world`, in the order a listing gives them.
    pub fn names_in(world: World) -> Vec<&'static str> {
        Backend::all_in(world).map(|backend| backend.name_in(world)).collect()
    }

    /// The names of either world a mistyped `name` may have meant, the
    /// likeliest first (at most four): those it begins, then those a
    /// letter or two away (`postgres`: `postgres-advisory`, …; `reddis`:
    /// `redis`).
    pub fn suggest(name: &str) -> Vec<&'static str> {
        let typed = name.trim().to_ascii_lowercase();
        let mut scored: Vec<(usize, usize, &'static str)> = Vec::new();
        let names = World::ALL.into_iter().flat_map(Backend::names_in);
        for (order, candidate) in names.enumerate() {
            let score = if !typed.is_empty() && candidate.starts_with(&typed) {
                Some(0)
            } else {
                let distance = edit_distance(&typed, candidate);
                (distance <= if typed.len() < 5 { 1 } else { 2 }).then_some(distance)
            };
            if let Some(score) = score {
                scored.push((score, order, candidate));
            }
        }
        scored.sort();
        scored.into_iter().map(|(_, _, candidate)| candidate).take(4).collect()
    }

    /// What is wrong with a `--backend` nobody answers to: what it may
    /// have meant, and every backend of both worlds.
    pub fn unknown(name: &str) -> String {
        let meant = Backend::suggest(name);
        let meant = match meant.as_slice() {
            [] => String::new(),
            meant => format!(" (did you mean {}?)", meant.join(", ")),
        };
        format!(
            "unknown backend {name:?}{meant}: the simulated backends are {}; the real ones are {}",
            Backend::names_in(World::Simulated).join(", "),
            Backend::names_in(World::Real).join(", ")
        )
    }

    /// The backend `name` names in either world, and that world.
    pub fn parse(name: &str) -> Option<(Backend, World)> {
        World::ALL
            .into_iter()
            .find_map(|world| Backend::parse_in(world, name).map(|backend| (backend, world)))
    }

    // ---- What its recipe and service imply: the tuning, written once ----

    /// How many may hold a key at once: [`PERMITS`] for the semaphores, 1
    /// for a lock.
    pub const fn permits(self) -> u32 {
        match self.recipe() {
            Recipe::Semaphore { .. } => PERMITS,
            _ => 1,
        }
    }

    /// A semaphore's permits, as a workload records them (none: a mutex).
    pub const fn semaphore_permits(self) -> Option<u32> {
        match self.permits() {
            1 => None,
            permits => Some(permits),
        }
    }

    /// Its lock hosts agree by consensus (etcd): holders keep a session's
    /// lease alive, partitions among members have something to split.
    pub const fn is_consensus(self) -> bool {
        matches!(self.service(), Service::Etcd { .. } | Service::ZooKeeper { .. })
    }

    /// Its service is etcd's (whose leases are whole seconds).
    pub const fn is_etcd(self) -> bool {
        matches!(self.service(), Service::Etcd { .. })
    }

    /// Its lock hosts keep copies of one table (a primary and its replica,
    /// leaderless nodes): a crash takes out one or some of them for a while,
    /// not every instance at once for a moment (Redlock's restart).
    pub const fn replicates(self) -> bool {
        matches!(self.service(), Service::PrimaryReplica { .. } | Service::Leaderless { .. })
    }

    /// Independent instances, each holding its copy of the lock (Redlock).
    pub const fn is_independent(self) -> bool {
        matches!(self.service(), Service::Redis { instances } if instances > 1)
    }

    /// A crashed instance stays down longer than any lease it granted.
    pub const fn delays_restart(self) -> bool {
        matches!(self.recipe(), Recipe::Redlock { delayed_restart: true })
    }

    /// A consensus leader that commits without a majority (broken).
    pub const fn commits_alone(self) -> bool {
        matches!(self.recipe(), Recipe::Etcd { commits_alone: true, .. })
    }

    /// The lock service keeps its state across a restart, as a database
    /// (or a replicated store's log) does.
    pub const fn is_durable(self) -> bool {
        self.service().is_sql() || self.replicates()
    }

    /// One Redis, which the failover fault gives an async replica.
    pub const fn fails_over(self) -> bool {
        matches!(self.recipe(), Recipe::Redis(_) | Recipe::RedisFenced)
    }

    /// The recipe (wrongly) takes `now` from the caller's clock.
    pub const fn trusts_caller_clock(self) -> bool {
        matches!(
            self.recipe(),
            Recipe::Semaphore { client_clock: true } | Recipe::LeaseTable { client_clock: true }
        )
    }

    /// SQL sessions hold its locks, which conn-kill ends.
    pub const fn has_sql_sessions(self) -> bool {
        self.service().is_sql()
    }

    /// The user's program, which client-kill kills.
    pub const fn is_program(self) -> bool {
        matches!(self.recipe(), Recipe::Exec)
    }

    /// How long its service keeps a lock whose holder's session ended from
    /// being taken again (Consul's lock-delay), if it does.
    pub const fn lock_delay_ms(self) -> Option<u64> {
        match self.recipe() {
            Recipe::Consul { lock_delay_ms } => Some(lock_delay_ms),
            _ => None,
        }
    }

    /// The session keepalive's period, for a backend whose holders keep
    /// their lease alive: every third of the TTL.
    pub const fn keepalive_ms(self, ttl_ms: u64) -> Option<u64> {
        match self.is_consensus() {
            true => Some(ttl_ms / 3),
            false => None,
        }
    }

    /// How long a killed lock server stays down at least: a delayed
    /// restart outlives any lease it may have granted.
    pub const fn min_down_ms(self, ttl_ms: u64) -> u64 {
        match self.delays_restart() {
            true => ttl_ms * 3 / 2,
            false => 0,
        }
    }

    /// Why `fault` cannot strike it in `world`, for a reason of its own
    /// (each world adds the faults it cannot carry out at all).
    pub fn refuses(self, world: World, fault: FaultKind) -> Option<String> {
        let name = self.name_in(world);
        match (world, fault) {
            (World::Simulated, FaultKind::Failover) if !self.fails_over() => Some(format!(
                "{name} has no replica to fail over to: failover applies to the sim-redis backends"
            )),
            (World::Real, FaultKind::Failover) if !self.fails_over() => Some(format!(
                "failover promotes a Redis replica: it applies to the single-Redis backends (redis, redis-fenced, redis-del-release, …), not {name}"
            )),
            (World::Real, FaultKind::ConnKill) if !self.has_sql_sessions() => Some(format!(
                "conn-kill ends SQL sessions: it applies to the postgres-* and mysql-* backends, not {name}"
            )),
            (World::Real, FaultKind::Clock) if self.is_etcd() => Some(
                "clock: etcd is written in Go and reads the time without libc, so libfaketime cannot move its clock (its leases run on the leader's monotonic clock anyway); the simulated sim-etcd has clock faults"
                    .to_string(),
            ),
            (World::Real, FaultKind::ClientKill) if !self.is_program() => Some(format!(
                "client-kill kills your lock program: it applies to --backend exec, not {name}"
            )),
            _ => None,
        }
    }
}

/// What a world's catalogue answers: the one catalogue seen from one world.
pub trait Catalogue {
    /// The world.
    const WORLD: World;
    /// Why `fault` cannot strike `backend` in this world, if it cannot:
    /// the backend's own reasons and the world's.
    fn refuses(backend: Backend, fault: FaultKind) -> Option<String>;
    /// The faults that can strike `backend`, in the vocabulary's order.
    fn faults(backend: Backend) -> Vec<FaultKind> {
        FaultKind::ALL
            .into_iter()
            .filter(|&fault| Self::refuses(backend, fault).is_none())
            .collect()
    }
}

/// How many single-letter insertions, deletions and substitutions turn
/// `from` into `to` (Levenshtein's distance).
fn edit_distance(from: &str, to: &str) -> usize {
    let to: Vec<char> = to.chars().collect();
    let mut previous: Vec<usize> = (0..=to.len()).collect();
    for (row, letter) in from.chars().enumerate() {
        let mut current = vec![row + 1; to.len() + 1];
        for (column, other) in to.iter().enumerate() {
            let substitution = previous[column] + usize::from(letter != *other);
            current[column + 1] =
                substitution.min(previous[column + 1] + 1).min(current[column] + 1);
        }
        previous = current;
    }
    previous[to.len()]
}

#[cfg(test)]
mod tests {
    use super::{Backend, World};

    #[test]
    fn every_name_reads_back_in_its_world_and_sim_names_derive() {
        for world in World::ALL {
            for backend in Backend::all_in(world) {
                assert_eq!(Backend::parse_in(world, backend.name_in(world)), Some(backend));
            }
        }
        for backend in Backend::ALL {
            assert_eq!(backend.sim_name(), format!("sim-{}", backend.real_name()));
            assert!(backend.runs_in(World::Simulated) || backend.runs_in(World::Real));
        }
        assert_eq!(
            Backend::parse_in(World::Simulated, "sim-postgres-lease"),
            Some(Backend::LeaseTable)
        );
        assert_eq!(Backend::parse_in(World::Real, "sim-redis"), None);
        assert_eq!(Backend::parse_in(World::Simulated, "redis"), None);
        assert_eq!(Backend::parse("etcd"), Some((Backend::Etcd, World::Real)));
        assert_eq!(Backend::all_in(World::Simulated).count(), 28);
        assert_eq!(Backend::all_in(World::Real).count(), 24);
    }

    #[test]
    fn a_mistyped_backend_gets_what_it_may_have_meant_from_both_worlds() {
        let postgres = Backend::suggest("postgres");
        assert!(postgres.contains(&"postgres-advisory"), "{postgres:?}");
        assert!(postgres.contains(&"postgres-lease"), "{postgres:?}");
        assert_eq!(Backend::suggest("reddis").first(), Some(&"redis"));
        assert_eq!(Backend::suggest("REDLOK").first(), Some(&"redlock"));
        assert!(Backend::suggest("chubby").is_empty());
        assert_eq!(Backend::suggest("zookeper").first(), Some(&"zookeeper"));
        let message = Backend::unknown("postgres");
        assert!(message.contains("did you mean postgres-advisory"), "{message}");
        assert!(message.contains("the real ones are redis, "), "{message}");
        assert!(message.contains("the simulated backends are sim-redis, "), "{message}");
        assert!(!Backend::unknown("chubby").contains("did you mean"));
        assert_eq!(super::edit_distance("kitten", "sitting"), 3);
        assert_eq!(super::edit_distance("", "abc"), 3);
    }
}
