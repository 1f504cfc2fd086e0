//! The real backends' catalogue: each backend's name, help line, lock
//! service, the faults it refuses and why, and how its runs are tuned; and
//! the sizes every real run shares. The rest of the real world
//! asks the catalogue, never the backend's name.

use std::future::Future;
use std::pin::Pin;

use lockcheck_checker::Event;
use lockcheck_workloads::{
    Catalogue, FaultKind, HistoryFile, Holders, LockClient, SharedRecorder, Stall,
};
use tokio::time::Instant;

use crate::driver::{drive_recorded, DriveOptions};
use crate::etcd::EtcdClient;
use crate::exec::{ExecClient, ExecProgram, PidSlot};
use crate::failover::RedisPair;
use crate::redis::{RedisClient, RedisRecipe};
use crate::redlock::RedlockClient;
use crate::s3::Resources;
use crate::semaphore::RedisSemaphoreClient;
use crate::servers::ServerKind;
use crate::sql::{SqlClient, SqlRecipe};
use crate::{ClientConfig, RealError};

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

/// A semaphore's permits, as the simulator's.
pub(crate) const PERMITS: u32 = 2;

/// Redlock's instances.
pub(crate) const REDLOCK_INSTANCES: usize = 5;

/// The etcd cluster a partition among members splits.
pub(crate) const ETCD_MEMBERS: usize = 3;
/// The etcd cluster of a ring partition: each member sees two of four.
pub(crate) const ETCD_RING_MEMBERS: usize = 5;

/// The shortest lease Debian's etcd 3.4 grants with its default timing.
pub(crate) const ETCD_MIN_TTL_S: u64 = 2;

/// The chance that `redis-lost-reply` loses a grant's reply: its bug needs a
/// lost reply to show, and the client injects them itself.
pub(crate) const LOST_REPLY_CHANCE: f64 = 0.1;

/// Where a backend keeps its locks: the servers lockcheck starts for it (or
/// is given by URL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockService {
    /// Independent Redis instances (one, or Redlock's five).
    Redis { instances: usize },
    /// An etcd cluster (one member, or three or five behind the proxy when
    /// a partition splits members).
    Etcd,
    /// The PostgreSQL that also holds the protected resources.
    Postgres,
    /// A MariaDB (or MySQL) of its own.
    Mariadb,
    /// The servers `--servers` names, for the user's program.
    Exec,
}

impl LockService {
    /// The server kind of its lock servers (the exec backend's vary).
    pub fn kind(self) -> Option<ServerKind> {
        match self {
            LockService::Redis { .. } => Some(ServerKind::Redis),
            LockService::Etcd => Some(ServerKind::Etcd),
            LockService::Postgres => Some(ServerKind::Postgres),
            LockService::Mariadb => Some(ServerKind::Mariadb),
            LockService::Exec => None,
        }
    }
}

/// Everything the real world knows of one backend, but how its clients are
/// built: its catalogue entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RealEntry {
    /// One line on what it is.
    pub help: &'static str,
    /// Where it keeps its locks: the servers lockcheck starts for it.
    pub service: LockService,
    /// A semaphore's permits (none: a mutex).
    pub permits: Option<u32>,
    /// Holders keep a session's lease alive (etcd): leases of whole seconds,
    /// at least the server's minimum, a keepalive every third of the TTL,
    /// and a long job under it.
    pub session_lease: bool,
    /// Independent instances, each holding its copy of the lock (Redlock):
    /// a kill takes a majority at once, a killed instance stays down 1.5
    /// TTLs (the delayed restart), and a hold lasts a third of a TTL.
    pub independent: bool,
    /// One Redis, which the failover fault gives an async replica.
    pub fails_over: bool,
    /// SQL sessions hold the locks, which conn-kill ends.
    pub sql_sessions: bool,
    /// The user's program, which client-kill kills.
    pub program: bool,
}

/// What a backend's client-building gets from the run: the driver's options,
/// where each logical client's servers are, and the fault executors to run
/// beside the clients.
pub(crate) struct Drive<'a> {
    pub options: &'a DriveOptions,
    pub history: Option<HistoryFile>,
    pub nemesis: Nemesis<'a>,
    /// Each logical client's configuration.
    pub config: &'a dyn Fn(u32) -> ClientConfig,
    /// Each logical client's lock servers' URLs (through the proxy when a
    /// network fault is on) and its storage's.
    pub routes: &'a [(Vec<String>, String)],
    /// The lock servers' own URLs, for setting them up.
    pub lock_urls: &'a [String],
    /// A Redis primary and its replica, for the failover fault.
    pub pair: Option<&'a RedisPair>,
    pub fencing: bool,
    /// The exec backend's program and its arguments.
    pub program: &'a [String],
    /// The exec backend's environment for each logical client's program.
    pub exec_env: &'a dyn Fn(u32) -> Vec<(String, String)>,
    /// Where each exec client's program is, for client-kill.
    pub slots: &'a [PidSlot],
}

/// The fault executors of a run, started with the clients.
pub(crate) type Nemesis<'a> = Box<
    dyn FnOnce(
            SharedRecorder,
            Instant,
            Holders,
        ) -> Pin<Box<dyn Future<Output = Result<(), RealError>> + 'a>>
        + 'a,
>;

impl RealBackend {
    /// Every real backend, in the order `lockcheck backends` lists them.
    pub const ALL: [RealBackend; 17] = [
        RealBackend::Redis(RedisRecipe::Plain),
        RealBackend::Redis(RedisRecipe::Fenced),
        RealBackend::Redis(RedisRecipe::DelRelease),
        RealBackend::Redis(RedisRecipe::SetnxExpire),
        RealBackend::Redis(RedisRecipe::LostReply),
        RealBackend::Redis(RedisRecipe::GetDelRelease),
        RealBackend::Redis(RedisRecipe::BlindRenew),
        RealBackend::Redlock,
        RealBackend::Semaphore { client_clock: false },
        RealBackend::Semaphore { client_clock: true },
        RealBackend::Etcd,
        RealBackend::Sql(SqlRecipe::PostgresAdvisory),
        RealBackend::Sql(SqlRecipe::PostgresAdvisoryXact),
        RealBackend::Sql(SqlRecipe::PostgresLease),
        RealBackend::Sql(SqlRecipe::MysqlGetLock),
        RealBackend::Sql(SqlRecipe::MysqlLease),
        RealBackend::Exec,
    ];

    /// The catalogue: all the real world knows of a backend but how its
    /// clients are built (`RealBackend::drive`), one entry a backend.
    pub fn entry(self) -> RealEntry {
        const REDIS: RealEntry = RealEntry {
            help: "",
            service: LockService::Redis { instances: 1 },
            permits: None,
            session_lease: false,
            independent: false,
            fails_over: true,
            sql_sessions: false,
            program: false,
        };
        const SEMAPHORE: RealEntry =
            RealEntry { permits: Some(PERMITS), fails_over: false, ..REDIS };
        const SQL: RealEntry = RealEntry {
            service: LockService::Postgres,
            fails_over: false,
            sql_sessions: true,
            ..REDIS
        };
        const MYSQL: RealEntry = RealEntry { service: LockService::Mariadb, ..SQL };
        match self {
            RealBackend::Redis(RedisRecipe::Plain) => RealEntry {
                help: "SET NX PX, Lua release and renew; with fencing, INCR after the grant",
                ..REDIS
            },
            RealBackend::Redis(RedisRecipe::Fenced) => RealEntry {
                help: "SET NX PX and the fence's INCR in one script: the token is atomic with the grant",
                ..REDIS
            },
            RealBackend::Redis(RedisRecipe::DelRelease) => RealEntry {
                help: "broken: release by plain DEL deletes the next holder's lock",
                ..REDIS
            },
            RealBackend::Redis(RedisRecipe::SetnxExpire) => RealEntry {
                help: "broken: SETNX then PEXPIRE, two commands: a crash between them leaves a lock without TTL",
                ..REDIS
            },
            RealBackend::Redis(RedisRecipe::LostReply) => RealEntry {
                help: "broken: a lost SET reply is taken for busy (an orphan lock until its TTL)",
                ..REDIS
            },
            RealBackend::Redis(RedisRecipe::GetDelRelease) => RealEntry {
                help: "broken: release by GET, compare, then DEL: a pause between deletes the next holder's lock",
                ..REDIS
            },
            RealBackend::Redis(RedisRecipe::BlindRenew) => RealEntry {
                help: "broken: renew by plain PEXPIRE: a late watchdog extends the next holder's lock",
                ..REDIS
            },
            RealBackend::Redlock => RealEntry {
                help: "Redlock over five independent Redis: a majority, validity minus drift, delayed restart",
                service: LockService::Redis { instances: REDLOCK_INSTANCES },
                independent: true,
                fails_over: false,
                ..REDIS
            },
            RealBackend::Semaphore { client_clock: false } => RealEntry {
                help: "a two-permit semaphore: a sorted set per key, by the server's TIME",
                ..SEMAPHORE
            },
            RealBackend::Semaphore { client_clock: true } => {
                RealEntry { help: "broken: the semaphore by the caller's clock", ..SEMAPHORE }
            }
            RealBackend::Etcd => RealEntry {
                help: "etcd lease + lock: a session's lease, the lock key's create revision as the token",
                service: LockService::Etcd,
                session_lease: true,
                fails_over: false,
                ..REDIS
            },
            RealBackend::Sql(SqlRecipe::PostgresAdvisory) => RealEntry {
                help: "pg_try_advisory_lock: held by a session, freed when the session ends",
                ..SQL
            },
            RealBackend::Sql(SqlRecipe::PostgresAdvisoryXact) => RealEntry {
                help: "pg_try_advisory_xact_lock: held by an open transaction",
                ..SQL
            },
            RealBackend::Sql(SqlRecipe::PostgresLease) => RealEntry {
                help: "a PostgreSQL lease table: the database's clock, a fence column",
                ..SQL
            },
            RealBackend::Sql(SqlRecipe::MysqlGetLock) => RealEntry {
                help: "MariaDB/MySQL GET_LOCK: held by a session, freed when the session ends",
                ..MYSQL
            },
            RealBackend::Sql(SqlRecipe::MysqlLease) => RealEntry {
                help: "a MariaDB/MySQL lease table: the database's clock, a fence column",
                ..MYSQL
            },
            RealBackend::Exec => RealEntry {
                help: "your own lock program after --, speaking the exec protocol",
                service: LockService::Exec,
                fails_over: false,
                program: true,
                ..REDIS
            },
        }
    }

    /// One line on what it is.
    pub fn help(self) -> &'static str {
        self.entry().help
    }

    /// Where it keeps its locks.
    pub fn service(self) -> LockService {
        self.entry().service
    }

    /// Why `fault` cannot strike it, if it cannot.
    pub fn refuses(self, fault: FaultKind) -> Option<String> {
        let (name, entry) = (self.name(), self.entry());
        match fault {
            FaultKind::ConnKill if !entry.sql_sessions => Some(format!(
                "conn-kill ends SQL sessions: it applies to the postgres-* and mysql-* backends, not {name}"
            )),
            FaultKind::Clock if entry.service == LockService::Etcd => Some(
                "clock: etcd is written in Go and reads the time without libc, so libfaketime cannot move its clock (its leases run on the leader's monotonic clock anyway); the simulated sim-etcd has clock faults"
                    .to_string(),
            ),
            FaultKind::Failover if !entry.fails_over => Some(format!(
                "failover promotes a Redis replica: it applies to the single-Redis backends (redis, redis-fenced, redis-del-release, …), not {name}"
            )),
            FaultKind::ClientKill if !entry.program => Some(format!(
                "client-kill kills your lock program: it applies to --backend exec, not {name}"
            )),
            FaultKind::Loss => Some(
                "loss is simulated only: against real servers, slow-net delays a client's links and partition cuts them"
                    .to_string(),
            ),
            FaultKind::Skew => Some(
                "skew moves a simulated client's clock: real clients read the machine's clock, and clock moves a lock server's"
                    .to_string(),
            ),
            _ => None,
        }
    }

    /// The lease a run asks for, given `ttl_ms`: a session's lease (etcd's)
    /// is whole seconds, and the server raises a short TTL to its minimum.
    pub fn granted_ttl_ms(self, ttl_ms: u64) -> u64 {
        match self.entry().session_lease {
            true => ttl_ms.div_ceil(1000).max(ETCD_MIN_TTL_S) * 1000,
            false => ttl_ms,
        }
    }

    /// How long a holder works, drawn from this range: up to
    /// `fault_hold_ms`, the hold the run's faults need to fall inside one
    /// ([`crate::plan::Faults::hold_needed_ms`]), or the backend's own if
    /// longer: a holder under a session's keepalive works a long job of up
    /// to two TTLs under faults, as the simulated one does, and of up to
    /// one with none (`faults_on` false: renewals still come, one due every
    /// third of a TTL, and grants twice as often); a third of a TTL for
    /// independent instances (a crash and restart of some of them must fall
    /// inside a hold); else a tenth of the TTL.
    pub fn hold_ms(self, ttl_ms: u64, fault_hold_ms: u64, faults_on: bool) -> (u64, u64) {
        let entry = self.entry();
        if entry.session_lease {
            let own = if faults_on { ttl_ms * 2 } else { ttl_ms };
            return (0, fault_hold_ms.max(own));
        }
        let own = if entry.independent { ttl_ms / 3 } else { (ttl_ms / 10).max(1) };
        (0, fault_hold_ms.max(own))
    }

    /// A semaphore's permits (none: a mutex).
    pub fn permits(self) -> Option<u32> {
        self.entry().permits
    }

    /// The session keepalive's period, for a backend whose holders keep
    /// their lease alive.
    pub fn keepalive_ms(self, ttl_ms: u64) -> Option<u64> {
        self.entry().session_lease.then_some(ttl_ms / 3)
    }

    /// How long a killed lock server stays down at least, unless told:
    /// independent instances' delayed restart outlives any lease they may
    /// have granted.
    pub fn min_down_ms(self, ttl_ms: u64) -> u64 {
        match self.entry().independent {
            true => ttl_ms * 3 / 2,
            false => 0,
        }
    }

    /// Whether a kill takes a majority of its lock servers at once: a
    /// Redlock lock is held on a majority, often on all five, and only a
    /// majority killed at once can free it.
    pub fn kills_a_majority(self) -> bool {
        self.entry().independent
    }

    /// Sets up the backend's lock servers, connects a client per logical
    /// client and drives the workload through them, with the faults beside:
    /// how the real world builds each backend's client.
    pub(crate) async fn drive(self, run: Drive<'_>) -> Result<Vec<Event>, RealError> {
        let Drive { options, history, nemesis, config, routes, lock_urls, pair, .. } = run;
        let urls = |logical: u32| routes[logical as usize].0.as_slice();
        let locks = &options.workload.locks;
        match self {
            RealBackend::Redis(recipe) => {
                RedisClient::prepare(&lock_urls[0], locks).await?;
                let fencing = run.fencing;
                drive_stored(
                    options,
                    history,
                    config,
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
                                    RedisClient::connect(url, recipe, fencing, stall, &config)
                                        .await?
                                }
                            };
                            Ok(match recipe {
                                RedisRecipe::LostReply => client.lose_replies(
                                    LOST_REPLY_CHANCE,
                                    options.seed ^ u64::from(logical),
                                ),
                                _ => client,
                            })
                        }
                    },
                    nemesis,
                )
                .await
            }
            RealBackend::Semaphore { client_clock } => {
                RedisSemaphoreClient::prepare(&lock_urls[0], locks).await?;
                drive_stored(
                    options,
                    history,
                    config,
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
                for url in lock_urls {
                    RedisClient::prepare(url, locks).await?;
                }
                drive_stored(
                    options,
                    history,
                    config,
                    |logical, stall| {
                        let config = config(logical);
                        let urls = urls(logical);
                        async move {
                            Ok(RedlockClient::connect(urls, &config).await?.stalling_at(stall))
                        }
                    },
                    nemesis,
                )
                .await
            }
            RealBackend::Etcd => {
                let fencing = run.fencing;
                drive_stored(
                    options,
                    history,
                    config,
                    |logical, stall| {
                        let config = config(logical);
                        let endpoints = urls(logical);
                        async move {
                            Ok(EtcdClient::connect(endpoints, &config, fencing)
                                .await?
                                .stalling_at(stall))
                        }
                    },
                    nemesis,
                )
                .await
            }
            RealBackend::Exec => {
                let program =
                    ExecProgram::from_words(run.program).ok_or_else(|| RealError::Setup {
                        what: "the exec backend",
                        reason: "no program after --".to_string(),
                    })?;
                let (program, clients) = (&program, options.clients);
                drive_stored(
                    options,
                    history,
                    config,
                    |logical, stall| {
                        let config = config(logical);
                        let env = (run.exec_env)(logical);
                        async move {
                            let client =
                                ExecClient::connect(program, logical, clients, &env, &config)
                                    .await?;
                            let slot = run.slots[logical as usize].clone();
                            Ok(client.share_pid(slot).freeze_on_stall(stall))
                        }
                    },
                    nemesis,
                )
                .await
            }
            RealBackend::Sql(recipe) => {
                SqlClient::prepare(&lock_urls[0], recipe).await?;
                drive_stored(
                    options,
                    history,
                    config,
                    |logical, stall| {
                        let config = config(logical);
                        let url = &urls(logical)[0];
                        async move {
                            Ok(SqlClient::connect(url, recipe, &config).await?.stalling_at(stall))
                        }
                    },
                    nemesis,
                )
                .await
            }
        }
    }

    pub fn parse(name: &str) -> Option<RealBackend> {
        <RealBackend as Catalogue>::parse(name)
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

/// Drives the lock clients `connect` makes, each beside its own session to
/// the protected resources: the table, or S3 objects, as the client's
/// storage URL says.
async fn drive_stored<C, F, Fut>(
    options: &DriveOptions,
    history: Option<HistoryFile>,
    config: &dyn Fn(u32) -> ClientConfig,
    connect: F,
    nemesis: Nemesis<'_>,
) -> Result<Vec<Event>, RealError>
where
    C: LockClient,
    F: Fn(u32, Stall) -> Fut,
    Fut: Future<Output = Result<C, RealError>>,
{
    let connect = |logical: u32, stall: Stall| {
        let (client, config) = (connect(logical, stall), config(logical));
        async move {
            let client = client.await?;
            Ok((client, Resources::connect(&config).await?))
        }
    };
    drive_recorded(options, history, connect, nemesis).await
}

impl Catalogue for RealBackend {
    const WORLD: &'static str = "real";

    fn all() -> &'static [RealBackend] {
        &RealBackend::ALL
    }

    fn name(self) -> &'static str {
        RealBackend::name(self)
    }

    fn help(self) -> &'static str {
        RealBackend::help(self)
    }

    fn refuses(self, fault: FaultKind) -> Option<String> {
        RealBackend::refuses(self, fault)
    }
}
