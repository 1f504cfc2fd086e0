//! The real world's view of the one catalogue
//! ([`lockcheck_workloads::Backend`]): which of its backends run against
//! real servers, the servers each service needs ([`LockService`]), the
//! faults the real world cannot carry out at all, the tuning that only real
//! servers need (etcd's whole-second leases), and how each recipe's
//! clients are built. The rest of the real world asks this view, never the
//! backend's name.

use std::future::Future;
use std::pin::Pin;

use lockcheck_checker::Event;
use lockcheck_workloads::etcd_lock::Check;
use lockcheck_workloads::redis_lock::Variant;
use lockcheck_workloads::{
    Backend, Catalogue, FaultKind, HistoryFile, Holders, LockClient, Recipe, Service,
    SharedRecorder, Stall, World, PERMITS,
};
use tokio::time::Instant;

use crate::driver::{drive_paying, DriveOptions};
use crate::etcd::EtcdClient;
use crate::exec::{ExecClient, ExecProgram, PidSlot};
use crate::failover::RedisPair;
use crate::payments::{PaymentsServices, RealPayments};
use crate::proxy::LinkFreezer;
use crate::proxy::Proxy;
use crate::redis::{RedisClient, RedisRecipe};
use crate::redlock::RedlockClient;
use crate::s3::Resources;
use crate::semaphore::RedisSemaphoreClient;
use crate::servers::ServerKind;
use crate::sql::{SqlClient, SqlRecipe};
use crate::zookeeper::ZooKeeperClient;
use crate::{ClientConfig, RealError};

/// A backend that runs against real servers: a backend of the one
/// catalogue, seen from the real world.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RealBackend(Backend);

/// The etcd cluster a partition among members splits.
pub(crate) const ETCD_MEMBERS: usize = 3;
/// The ZooKeeper ensemble a member fault strikes: one of three may fail.
pub(crate) const ZOOKEEPER_MEMBERS: usize = 3;
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
    /// A ZooKeeper ensemble (one server, for now).
    ZooKeeper,
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
            LockService::ZooKeeper => Some(ServerKind::ZooKeeper),
            LockService::Postgres => Some(ServerKind::Postgres),
            LockService::Mariadb => Some(ServerKind::Mariadb),
            LockService::Exec => None,
        }
    }
}

/// The client recipe of a single-Redis backend.
fn redis_recipe(recipe: Recipe) -> RedisRecipe {
    match recipe {
        Recipe::RedisFenced => RedisRecipe::Fenced,
        Recipe::Redis(Variant::Plain) => RedisRecipe::Plain,
        Recipe::Redis(Variant::DelRelease) => RedisRecipe::DelRelease,
        Recipe::Redis(Variant::SetnxExpire) => RedisRecipe::SetnxExpire,
        Recipe::Redis(Variant::LostReply) => RedisRecipe::LostReply,
        Recipe::Redis(Variant::GetDelRelease) => RedisRecipe::GetDelRelease,
        Recipe::Redis(Variant::BlindRenew) => RedisRecipe::BlindRenew,
        recipe => unreachable!("{recipe:?} is not a single-Redis recipe"),
    }
}

/// The client recipe of a SQL backend: its recipe on its database.
fn sql_recipe(service: Service, recipe: Recipe) -> SqlRecipe {
    match (service, recipe) {
        (Service::Postgres, Recipe::PostgresAdvisory) => SqlRecipe::PostgresAdvisory,
        (Service::Postgres, Recipe::PostgresAdvisoryXact) => SqlRecipe::PostgresAdvisoryXact,
        (Service::Postgres, Recipe::LeaseTable { .. }) => SqlRecipe::PostgresLease,
        (Service::Mariadb, Recipe::MysqlGetLock) => SqlRecipe::MysqlGetLock,
        (Service::Mariadb, Recipe::LeaseTable { .. }) => SqlRecipe::MysqlLease,
        pair => unreachable!("{pair:?} is not a SQL recipe"),
    }
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
    /// The payments services, when the run's workload uses them.
    pub payments: Option<&'a PaymentsServices>,
    /// The fault-injecting proxy, when the run has one, and the lock
    /// servers' node names on it.
    pub proxy: Option<&'a Proxy>,
    pub lock_nodes: &'a [String],
}

/// What each client has beside its lock client: its configuration (its
/// storage) and the payments services.
#[derive(Clone, Copy)]
struct Sides<'a> {
    config: &'a dyn Fn(u32) -> ClientConfig,
    payments: Option<&'a PaymentsServices>,
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
    /// The catalogue's `backend`, if it runs against real servers.
    pub fn new(backend: Backend) -> Option<RealBackend> {
        backend.runs_in(World::Real).then_some(RealBackend(backend))
    }

    /// Every real backend, in the order `lockcheck backends` lists them.
    pub fn all() -> impl Iterator<Item = RealBackend> {
        Backend::all_in(World::Real).map(RealBackend)
    }

    /// The backend of the one catalogue.
    pub fn backend(self) -> Backend {
        self.0
    }

    pub fn parse(name: &str) -> Option<RealBackend> {
        Backend::parse_in(World::Real, name).map(RealBackend)
    }

    pub fn name(self) -> &'static str {
        self.0.real_name()
    }

    /// One line on what it is.
    pub fn help(self) -> &'static str {
        self.0.help()
    }

    /// Where it keeps its locks: the servers lockcheck starts for it.
    pub fn service(self) -> LockService {
        match self.0.service() {
            Service::Redis { instances } => LockService::Redis { instances: instances as usize },
            Service::Etcd { .. } => LockService::Etcd,
            Service::ZooKeeper { .. } => LockService::ZooKeeper,
            Service::Postgres => LockService::Postgres,
            Service::Mariadb => LockService::Mariadb,
            Service::Exec => LockService::Exec,
            Service::Consul | Service::PrimaryReplica { .. } | Service::Leaderless { .. } => {
                unreachable!("{} runs in the simulator only", self.0.sim_name())
            }
        }
    }

    /// Why `fault` cannot strike it, if it cannot: its own reasons, and the
    /// faults the real world has no executor for.
    pub fn refuses(self, fault: FaultKind) -> Option<String> {
        match fault {
            FaultKind::Loss => Some(
                "loss is simulated only: against real servers, slow-net and slow-client delay links through the proxy and partition cuts them"
                    .to_string(),
            ),
            FaultKind::Skew => Some(
                "skew moves a simulated client's clock: real clients read the machine's clock, and clock moves a lock server's"
                    .to_string(),
            ),
            fault => self.0.refuses(World::Real, fault),
        }
    }

    /// The lease a run asks for, given `ttl_ms`: a session's lease (etcd's)
    /// is whole seconds, and the server raises a short TTL to its minimum.
    pub fn granted_ttl_ms(self, ttl_ms: u64) -> u64 {
        match self.0.is_etcd() {
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
        if self.0.is_consensus() {
            let own = if faults_on { ttl_ms * 2 } else { ttl_ms };
            return (0, fault_hold_ms.max(own));
        }
        let own = if self.0.is_independent() { ttl_ms / 3 } else { (ttl_ms / 10).max(1) };
        (0, fault_hold_ms.max(own))
    }

    /// Each client talks to its own member only (etcd's holders that
    /// check their key with a read: the read is that member's).
    pub fn pinned(self) -> bool {
        matches!(self.0.recipe(), Recipe::Etcd { check, .. } if check != Check::Deadline)
    }

    /// A semaphore's permits (none: a mutex).
    pub fn permits(self) -> Option<u32> {
        self.0.semaphore_permits()
    }

    /// The session keepalive's period, for a backend whose holders keep
    /// their lease alive.
    pub fn keepalive_ms(self, ttl_ms: u64) -> Option<u64> {
        self.0.keepalive_ms(ttl_ms)
    }

    /// How long a killed lock server stays down at least, unless told:
    /// independent instances' delayed restart outlives any lease they may
    /// have granted.
    pub fn min_down_ms(self, ttl_ms: u64) -> u64 {
        self.0.min_down_ms(ttl_ms)
    }

    /// Whether its client library keeps the session alive by itself
    /// (ZooKeeper's heartbeats): a pause of the client must then hold its
    /// links on the proxy too, as a GC pause stops the library's threads.
    pub fn beats_by_itself(self) -> bool {
        matches!(self.0.service(), Service::ZooKeeper { .. })
    }

    /// Whether a kill takes a majority of its lock servers at once: a
    /// Redlock lock is held on a majority, often on all five, and only a
    /// majority killed at once can free it.
    pub fn kills_a_majority(self) -> bool {
        self.0.is_independent()
    }

    /// Sets up the backend's lock servers, connects a client per logical
    /// client and drives the workload through them, with the faults beside:
    /// how the real world builds each backend's client.
    pub(crate) async fn drive(self, run: Drive<'_>) -> Result<Vec<Event>, RealError> {
        let Drive { options, history, nemesis, config, routes, lock_urls, pair, payments, .. } =
            run;
        let sides = Sides { config, payments };
        let urls = |logical: u32| routes[logical as usize].0.as_slice();
        let locks = &options.workload.locks;
        match self.0.recipe() {
            recipe @ (Recipe::Redis(_) | Recipe::RedisFenced) => {
                let recipe = redis_recipe(recipe);
                RedisClient::prepare(&lock_urls[0], locks).await?;
                let fencing = run.fencing;
                drive_stored(
                    options,
                    history,
                    sides,
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
            Recipe::Semaphore { client_clock } => {
                RedisSemaphoreClient::prepare(&lock_urls[0], locks).await?;
                drive_stored(
                    options,
                    history,
                    sides,
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
            Recipe::Redlock { .. } => {
                for url in lock_urls {
                    RedisClient::prepare(url, locks).await?;
                }
                drive_stored(
                    options,
                    history,
                    sides,
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
            recipe @ (Recipe::Etcd { .. } | Recipe::EtcdElection) => {
                let fencing = run.fencing;
                drive_stored(
                    options,
                    history,
                    sides,
                    |logical, stall| {
                        let config = config(logical);
                        let endpoints = urls(logical);
                        // A client that checks with a read asks one member,
                        // its own (client i, member i): the read's answer is
                        // that member's, wherever it stands.
                        let endpoints = match self.pinned() {
                            false => endpoints,
                            true => {
                                let own = logical as usize % endpoints.len().max(1);
                                endpoints.get(own..=own).unwrap_or(endpoints)
                            }
                        };
                        async move {
                            let client = match recipe {
                                Recipe::Etcd { waits, check, .. } => {
                                    EtcdClient::connect(endpoints, &config, fencing, waits)
                                        .await?
                                        .checking(check)
                                }
                                // Candidates campaign with etcd's Election API.
                                _ => EtcdClient::connect(endpoints, &config, fencing, false)
                                    .await?
                                    .campaigning(&config, fencing),
                            };
                            Ok(client.stalling_at(stall))
                        }
                    },
                    nemesis,
                )
                .await
            }
            Recipe::ZooKeeper(variant) => {
                ZooKeeperClient::prepare(lock_urls, locks).await?;
                let (fencing, ttl_ms) = (run.fencing, options.workload.ttl_ms);
                let (proxy, nodes) = (run.proxy, run.lock_nodes);
                drive_stored(
                    options,
                    history,
                    sides,
                    |logical, stall| {
                        let config = config(logical);
                        let urls = urls(logical);
                        let links = proxy.map(|proxy| LinkFreezer {
                            proxy: proxy.clone(),
                            from: config.name.clone(),
                            to: nodes.to_vec(),
                        });
                        async move {
                            let client =
                                ZooKeeperClient::connect(urls, &config, variant, fencing, ttl_ms)
                                    .await?;
                            Ok(client.stalling_at(stall, links))
                        }
                    },
                    nemesis,
                )
                .await
            }
            Recipe::Exec => {
                let program =
                    ExecProgram::from_words(run.program).ok_or_else(|| RealError::Setup {
                        what: "the exec backend",
                        reason: "no program after --".to_string(),
                    })?;
                let (program, clients) = (&program, options.clients);
                let (proxy, nodes) = (run.proxy, run.lock_nodes);
                drive_stored(
                    options,
                    history,
                    sides,
                    |logical, stall| {
                        let config = config(logical);
                        let env = (run.exec_env)(logical);
                        let links = proxy.map(|proxy| LinkFreezer {
                            proxy: proxy.clone(),
                            from: config.name.clone(),
                            to: nodes.to_vec(),
                        });
                        async move {
                            let client =
                                ExecClient::connect(program, logical, clients, &env, &config)
                                    .await?;
                            let slot = run.slots[logical as usize].clone();
                            Ok(client.share_pid(slot).holding_links(links).freeze_on_stall(stall))
                        }
                    },
                    nemesis,
                )
                .await
            }
            recipe @ (Recipe::LeaseTable { .. }
            | Recipe::PostgresAdvisory
            | Recipe::PostgresAdvisoryXact
            | Recipe::MysqlGetLock) => {
                let recipe = sql_recipe(self.0.service(), recipe);
                SqlClient::prepare(&lock_urls[0], recipe).await?;
                drive_stored(
                    options,
                    history,
                    sides,
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
            Recipe::Consul { .. } | Recipe::PrimaryReplica { .. } | Recipe::Quorum => {
                unreachable!("{} runs in the simulator only", self.0.sim_name())
            }
        }
    }
}

/// Drives the lock clients `connect` makes, each beside its own session to
/// the protected resources (the table, or S3 objects, as the client's
/// storage URL says) and its way to the payments services, if the run has
/// them.
async fn drive_stored<C, F, Fut>(
    options: &DriveOptions,
    history: Option<HistoryFile>,
    sides: Sides<'_>,
    connect: F,
    nemesis: Nemesis<'_>,
) -> Result<Vec<Event>, RealError>
where
    C: LockClient,
    F: Fn(u32, Stall) -> Fut,
    Fut: Future<Output = Result<C, RealError>>,
{
    let connect = |logical: u32, stall: Stall| {
        let (client, config) = (connect(logical, stall), (sides.config)(logical));
        async move {
            let client = client.await?;
            let payments = match sides.payments {
                Some(services) => services.connect(config.deadline).await?,
                None => RealPayments::Off,
            };
            Ok((client, Resources::connect(&config).await?, payments))
        }
    };
    drive_paying(options, history, connect, nemesis).await
}

/// The real world's view of the one catalogue, for listings and matrices.
#[derive(Debug, Clone, Copy)]
pub struct RealWorld;

impl Catalogue for RealWorld {
    const WORLD: World = World::Real;

    fn refuses(backend: Backend, fault: FaultKind) -> Option<String> {
        RealBackend::new(backend).and_then(|backend| backend.refuses(fault))
    }
}
