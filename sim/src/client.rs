//! Simulated clients: each backend's recipe from docs/guide.md#recipes, spoken
//! to the simulated servers, including the deliberately broken variants.

use std::time::Duration;

use lockcheck_workloads::etcd_lock::EtcdLock;
use lockcheck_workloads::redis_lock::Variant;
use lockcheck_workloads::{Catalogue, FaultKind, Grant, LockClient, Outcome, Stall};

use crate::etcd::ETCD_HOSTS;
use crate::etcd_client::Members;
use crate::host::{Connection, DownHosts, Failure, Primary};
use crate::nemesis::refused_in_sim;

/// The simulated lock backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Backend {
    /// `SET NX PX`, Lua compare-and-delete release, `INCR` fence.
    Redis,
    /// Broken: release by plain `DEL` (deletes someone else's lock).
    RedisDelRelease,
    /// Broken: `SETNX` then `EXPIRE` as two commands (a crash between them
    /// leaves a lock that never expires).
    RedisSetnxExpire,
    /// Broken: a lost `SET` reply is taken for "busy" (an orphan lock).
    RedisLostReply,
    /// The SQL lease table: the database's clock, a fence column.
    LeaseTable,
    /// Broken: the lease table, but expiry by the client's clock (it sends
    /// its own `now`), so a skewed client steals or keeps leases.
    LeaseTableClientClock,
    /// Redlock over five independent Redis: a majority, validity time minus
    /// drift, release everywhere on failure; a crashed instance stays down
    /// longer than any lease (delayed restart). No fencing token.
    Redlock,
    /// Broken: Redlock whose crashed instances restart at once, having
    /// forgotten their keys.
    RedlockNoDelay,
    /// A per-tenant semaphore (two permits) on one Redis: a sorted set per
    /// key, member = holder, score = lease expiry; one script drops expired
    /// members, counts, adds if below the limit, by the server's own TIME;
    /// holders heartbeat with `ZADD XX`.
    RedisSemaphore,
    /// Broken: the semaphore script takes `now` from the caller's clock.
    RedisSemaphoreClientClock,
    /// etcd: three members agreeing by Raft; a lease per acquisition,
    /// TryLock, the lock key's create revision as the token.
    Etcd,
    /// The same with five members.
    Etcd5,
    /// Broken: three members whose leader commits an entry as soon as it
    /// has it, without waiting for a majority (asynchronous replication): a
    /// leader cut off from the others goes on granting.
    EtcdNoQuorum,
    /// Broken: release by `GET`, a compare in the client, then `DEL`.
    RedisGetDelRelease,
    /// Broken: renew by plain `PEXPIRE`, without the compare.
    RedisBlindRenew,
}

/// The five Redlock instances.
pub const REDLOCK_HOSTS: [&str; 5] = ["redis-0", "redis-1", "redis-2", "redis-3", "redis-4"];

/// The members of a three-member etcd cluster.
const ETCD_HOSTS_3: [&str; 3] = [ETCD_HOSTS[0], ETCD_HOSTS[1], ETCD_HOSTS[2]];

/// A single Redis with an async replica (the failover fault): the primary
/// first, then the replica.
pub const REPLICATED_HOSTS: [&str; 2] = ["redis", "redis-replica"];

/// Everything the simulator knows of one backend: its catalogue entry.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Entry {
    pub name: &'static str,
    /// One line on what it is.
    pub help: &'static str,
    /// The recipe its clients run.
    recipe: Recipe,
    /// The hosts that hold the locks.
    pub lock_hosts: &'static [&'static str],
    /// How many may hold a key at once.
    pub permits: u32,
    /// The lock hosts talk among themselves (a consensus cluster): the
    /// partitions among servers have something to split.
    pub cluster: bool,
    /// A cluster whose leader commits without a majority.
    pub commits_alone: bool,
    /// Independent instances, each asked with a short timeout of its own
    /// (Redlock).
    pub independent: bool,
    /// A crashed instance stays down longer than any lease it granted
    /// (Redlock's delayed restart).
    pub delayed_restart: bool,
    /// The lock host keeps its state across a restart, as a database does.
    pub durable: bool,
    /// One Redis, which the failover fault gives an async replica to fail
    /// over to.
    pub fails_over: bool,
    /// The recipe (wrongly) takes `now` from the caller's clock.
    pub trusts_caller_clock: bool,
}

/// An entry with every flag off: one Redis, one permit.
const ONE_REDIS: Entry = Entry {
    name: "",
    help: "",
    recipe: Recipe::Redis(Variant::Plain),
    lock_hosts: &["redis"],
    permits: 1,
    cluster: false,
    commits_alone: false,
    independent: false,
    delayed_restart: false,
    durable: false,
    fails_over: false,
    trusts_caller_clock: false,
};

const SINGLE_REDIS: Entry = Entry { fails_over: true, ..ONE_REDIS };
const LEASE_TABLE: Entry =
    Entry { recipe: Recipe::LeaseTable, lock_hosts: &["db"], durable: true, ..ONE_REDIS };
const REDLOCK: Entry =
    Entry { recipe: Recipe::Redlock, lock_hosts: &REDLOCK_HOSTS, independent: true, ..ONE_REDIS };
const SEMAPHORE: Entry = Entry { recipe: Recipe::Semaphore, permits: 2, ..ONE_REDIS };
const ETCD: Entry =
    Entry { recipe: Recipe::Etcd, lock_hosts: &ETCD_HOSTS_3, cluster: true, ..ONE_REDIS };

impl Backend {
    pub const ALL: [Backend; 15] = [
        Backend::Redis,
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
    ];

    /// The catalogue: one entry a backend.
    pub const fn entry(self) -> Entry {
        match self {
            Backend::Redis => Entry {
                name: "sim-redis",
                help: "SET NX PX, Lua compare-and-delete release and renew, INCR fence",
                ..SINGLE_REDIS
            },
            Backend::RedisDelRelease => Entry {
                name: "sim-redis-del-release",
                help: "broken: release by plain DEL deletes the next holder's lock",
                recipe: Recipe::Redis(Variant::DelRelease),
                ..SINGLE_REDIS
            },
            Backend::RedisSetnxExpire => Entry {
                name: "sim-redis-setnx-expire",
                help: "broken: SETNX then EXPIRE, two commands: a crash between them leaves a lock without TTL",
                recipe: Recipe::Redis(Variant::SetnxExpire),
                ..SINGLE_REDIS
            },
            Backend::RedisLostReply => Entry {
                name: "sim-redis-lost-reply",
                help: "broken: a lost SET reply is taken for busy (an orphan lock until its TTL)",
                recipe: Recipe::Redis(Variant::LostReply),
                ..SINGLE_REDIS
            },
            Backend::RedisGetDelRelease => Entry {
                name: "sim-redis-get-del-release",
                help: "broken: release by GET, compare, then DEL: a pause between deletes the next holder's lock",
                recipe: Recipe::Redis(Variant::GetDelRelease),
                ..SINGLE_REDIS
            },
            Backend::RedisBlindRenew => Entry {
                name: "sim-redis-blind-renew",
                help: "broken: renew by plain PEXPIRE: a late watchdog extends the next holder's lock",
                recipe: Recipe::Redis(Variant::BlindRenew),
                ..SINGLE_REDIS
            },
            Backend::LeaseTable => Entry {
                name: "sim-lease-table",
                help: "the SQL lease table: the database's clock, a fence column",
                ..LEASE_TABLE
            },
            Backend::LeaseTableClientClock => Entry {
                name: "sim-lease-table-client-clock",
                help: "broken: the lease table, expiring leases by the client's clock",
                trusts_caller_clock: true,
                ..LEASE_TABLE
            },
            Backend::Redlock => Entry {
                name: "sim-redlock",
                help: "Redlock over five independent Redis: a majority, validity minus drift, delayed restart",
                delayed_restart: true,
                ..REDLOCK
            },
            Backend::RedlockNoDelay => Entry {
                name: "sim-redlock-no-delay",
                help: "broken: Redlock whose crashed instances restart at once, having forgotten their keys",
                ..REDLOCK
            },
            Backend::RedisSemaphore => Entry {
                name: "sim-redis-semaphore",
                help: "a two-permit semaphore: a sorted set per key, by the server's TIME",
                ..SEMAPHORE
            },
            Backend::RedisSemaphoreClientClock => Entry {
                name: "sim-redis-semaphore-client-clock",
                help: "broken: the semaphore by the caller's clock",
                trusts_caller_clock: true,
                ..SEMAPHORE
            },
            Backend::Etcd => Entry {
                name: "sim-etcd",
                help: "etcd of three Raft members: a lease per acquisition, the lock key's create revision as the token",
                ..ETCD
            },
            Backend::Etcd5 => Entry {
                name: "sim-etcd-5",
                help: "the same etcd with five members",
                lock_hosts: &ETCD_HOSTS,
                ..ETCD
            },
            Backend::EtcdNoQuorum => Entry {
                name: "sim-etcd-no-quorum",
                help: "broken: etcd whose leader commits without a majority: a leader cut off goes on granting",
                commits_alone: true,
                ..ETCD
            },
        }
    }

    pub fn name(self) -> &'static str {
        self.entry().name
    }

    /// A simulated backend by its name, or by `sim-` and the name of a real
    /// backend it simulates: the SQL lease table is PostgreSQL's and
    /// MariaDB's (`sim-postgres-lease`, `sim-mysql-lease`).
    pub fn parse(name: &str) -> Option<Backend> {
        match name {
            "sim-postgres-lease" | "sim-mysql-lease" => Some(Backend::LeaseTable),
            name => Backend::ALL.into_iter().find(|backend| backend.name() == name),
        }
    }

    /// The hosts that hold the locks.
    pub fn lock_hosts(self) -> &'static [&'static str] {
        self.entry().lock_hosts
    }

    /// How many may hold a key at once: 2 for the semaphores, else 1.
    pub fn permits(self) -> u32 {
        self.entry().permits
    }

    /// Lock hosts that talk among themselves (a consensus cluster).
    pub fn is_cluster(self) -> bool {
        self.entry().cluster
    }

    /// One line on what it is.
    pub fn help(self) -> &'static str {
        self.entry().help
    }

    /// Why the simulator cannot strike it with `fault`, if it cannot.
    pub fn refuses(self, fault: FaultKind) -> Option<String> {
        if let Some(why) = refused_in_sim(fault) {
            return Some(why.to_string());
        }
        (fault == FaultKind::Failover && !self.entry().fails_over).then(|| {
            format!(
                "{} has no replica to fail over to: failover applies to the sim-redis backends",
                self.name()
            )
        })
    }
}

impl Catalogue for Backend {
    const WORLD: &'static str = "simulated";

    fn all() -> &'static [Backend] {
        &Backend::ALL
    }

    fn name(self) -> &'static str {
        Backend::name(self)
    }

    fn help(self) -> &'static str {
        Backend::help(self)
    }

    fn refuses(self, fault: FaultKind) -> Option<String> {
        Backend::refuses(self, fault)
    }

    fn parse(name: &str) -> Option<Backend> {
        Backend::parse(name)
    }
}

/// The recipe a simulated backend's client runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Recipe {
    /// A single Redis (`lockcheck_workloads::redis_lock`), and which variant.
    Redis(Variant),
    /// The semaphore (`lockcheck_workloads::semaphore`).
    Semaphore,
    /// Redlock (`lockcheck_workloads::redlock`).
    Redlock,
    /// The SQL lease table (`lockcheck_workloads::lease_table`).
    LeaseTable,
    /// etcd's lease and lock (`lockcheck_workloads::etcd_lock`).
    Etcd,
}

/// One session of one simulated client.
#[derive(Debug)]
pub struct SimClient {
    pub(crate) backend: Backend,
    /// Take a fencing token with each grant (`INCR` for Redis; the lease
    /// table always has one).
    pub(crate) fencing: bool,
    /// etcd: the member this client asks first.
    local_member: usize,
    /// etcd: the locks held and their sessions
    /// (`lockcheck_workloads::etcd_lock`).
    etcd: EtcdLock,
    name: String,
    grants: u64,
    /// The lock hosts' connections: one, or Redlock's five.
    pub(crate) instances: Vec<Connection>,
    /// The client's pause point, for the points inside its recipe.
    pub(crate) stall: Stall,
    /// This client's clock, ahead of simulated time by this much (a skew
    /// nemesis moves it); only a recipe that trusts the client's clock reads it.
    clock_offset_ms: std::rc::Rc<std::cell::Cell<i64>>,
}

pub(crate) fn unknown<T>(failure: Failure) -> Outcome<T> {
    match failure {
        Failure::NotSent => Outcome::Fail("unavailable".into()),
        Failure::Unknown => Outcome::Info("timeout".into()),
    }
}

impl SimClient {
    pub fn new(
        backend: Backend,
        fencing: bool,
        name: String,
        deadline: Duration,
        stall: Stall,
        clock_offset_ms: std::rc::Rc<std::cell::Cell<i64>>,
        down: &DownHosts,
    ) -> Self {
        SimClient {
            clock_offset_ms,
            backend,
            fencing,
            local_member: name
                .rsplit('-')
                .next()
                .and_then(|logical| logical.parse().ok())
                .unwrap_or_default(),
            etcd: EtcdLock::new(fencing),
            name,
            grants: 0,
            // Redlock asks each instance with a short timeout of its own.
            instances: backend
                .lock_hosts()
                .iter()
                .map(|host| {
                    Connection::new(
                        host,
                        if backend.entry().independent { deadline / 2 } else { deadline },
                    )
                    .refusing_when_down(down)
                    .stalling(&stall)
                })
                .collect(),
            stall,
        }
    }

    /// Talks to whichever host of a replica set is the primary, following
    /// it through failovers, instead of the backend's one lock host.
    pub(crate) fn following(mut self, primary: Primary, deadline: Duration) -> Self {
        self.instances = vec![Connection::to_primary(primary, deadline).stalling(&self.stall)];
        self
    }

    pub(crate) fn next_value(&mut self) -> String {
        self.grants += 1;
        format!("{}:{}", self.name, self.grants)
    }

    /// The caller's clock, for the recipes that (wrongly) trust it.
    pub(crate) fn caller_now_ms(&self) -> Option<i64> {
        self.backend.entry().trusts_caller_clock.then(|| {
            turmoil::sim_elapsed().unwrap_or_default().as_millis() as i64
                + self.clock_offset_ms.get()
        })
    }
}

impl LockClient for SimClient {
    async fn acquire(&mut self, key: &str, ttl_ms: u64) -> Outcome<Grant> {
        match self.backend.entry().recipe {
            Recipe::Redis(variant) => self.acquire_redis(variant, key, ttl_ms).await,
            Recipe::Semaphore => self.acquire_permit(key, ttl_ms).await,
            Recipe::Redlock => self.acquire_redlock(key, ttl_ms).await,
            Recipe::LeaseTable => self.acquire_lease(key, ttl_ms).await,
            Recipe::Etcd => {
                let mut members = Members::new(&mut self.instances, self.local_member);
                self.etcd.acquire(&mut members, key, ttl_ms).await
            }
        }
    }

    async fn release(&mut self, key: &str, grant: &Grant) -> Outcome<()> {
        let value = grant.lease.clone().unwrap_or_default();
        match self.backend.entry().recipe {
            Recipe::Redis(variant) => self.release_redis(variant, key, &value).await,
            Recipe::Semaphore => self.release_permit(key, &value).await,
            Recipe::Redlock => self.release_redlock(key, &value).await,
            Recipe::LeaseTable => self.release_lease(key, grant).await,
            Recipe::Etcd => {
                let mut members = Members::new(&mut self.instances, self.local_member);
                self.etcd.release(&mut members, key).await
            }
        }
    }

    async fn renew(&mut self, key: &str, grant: &Grant, ttl_ms: u64) -> Outcome<()> {
        let value = grant.lease.clone().unwrap_or_default();
        match self.backend.entry().recipe {
            Recipe::Redis(variant) => self.renew_redis(variant, key, &value, ttl_ms).await,
            Recipe::Semaphore => self.renew_permit(key, &value, ttl_ms).await,
            Recipe::Redlock => self.renew_redlock(key, &value, ttl_ms).await,
            Recipe::LeaseTable => self.renew_lease(key, grant, ttl_ms).await,
            Recipe::Etcd => {
                let mut members = Members::new(&mut self.instances, self.local_member);
                self.etcd.renew(&mut members, key).await
            }
        }
    }

    async fn reset(&mut self) {
        // The leases of a session given up expire by themselves, as a
        // crashed client's do.
        self.etcd.reset();
        for instance in &mut self.instances {
            instance.reset();
        }
    }
}
