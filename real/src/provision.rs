//! The servers a real run uses: given by URL, or private ones started for
//! it, and each client's route to them (through the proxy when a network
//! fault is on). A PostgreSQL is started only for a run that uses one: the
//! table storage's, or the backend's own (the postgres-* backends, an exec
//! program's `postgres`); an S3 storage is moto's server instead.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use lockcheck_workloads::{
    FaultKind, Pooler, RunOptions, Services, StorageKind, UrlService, Workload,
};

use crate::catalogue::{
    LockService, RealBackend, ETCD_MEMBERS, ETCD_RING_MEMBERS, ZOOKEEPER_MEMBERS,
};
use crate::failover::RedisPair;
use crate::nemesis::SharedServer;
use crate::netfault::{proxied_url, Shape, Topology};
use crate::plan::{exec_servers, shapes, Faults};
use crate::provider::{ProviderConfig, ProviderServer};
use crate::proxy::Proxy;
use crate::servers::{ManagedServer, ServerKind, ServerOptions};
use crate::{moto, s3, RealError};

/// The storage's server. The exec backend's `postgres` is the storage
/// itself, not a second one.
const STORAGE: ServerKind = ServerKind::Postgres;

/// The S3 storage's server: its objects hold the protected resources.
const S3_SERVER: ServerKind = ServerKind::Moto;

/// The S3 storage of a run with an S3 `--storage`: moto's server, which
/// holds the bucket of the resources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct S3Storage {
    /// The server's endpoint, `http://127.0.0.1:PORT`.
    pub(crate) endpoint: String,
    /// The storage URL clients are given (`s3.rs`): its kind, the
    /// endpoint and the bucket.
    pub(crate) url: String,
}

/// The servers a run uses: URLs given, or private servers started for it.
/// Dropping it stops and deletes the private ones.
#[derive(Debug, Default)]
pub(crate) struct Servers {
    /// lockcheck's own payment provider, for a payments run: first, so
    /// that it stops before the PostgreSQL that keeps its keys.
    pub(crate) provider: Option<ProviderServer>,
    /// The services' URLs, given or of the servers started: one map, as
    /// the run's options give them. PostgreSQL is the table storage's, and
    /// the lock server of the postgres-* backends (and of an exec
    /// program's `postgres`); none when the run needs none (an S3 storage
    /// and a backend that locks elsewhere).
    pub(crate) urls: Services,
    /// The S3 storage, when `--storage` is an S3 one.
    pub(crate) s3: Option<S3Storage>,
    /// The private servers that hold the locks: the nemesis' targets.
    pub(crate) lock: Vec<SharedServer>,
    /// The private servers of the protected side that the nemesis strikes
    /// too (a payments run's PostgreSQL: its queue, its table and the
    /// provider's keys), after the lock servers.
    pub(crate) resources: Vec<SharedServer>,
    /// The other private servers (the storage's PostgreSQL, or moto's S3).
    pub(crate) other: Vec<ManagedServer>,
    /// Say which servers were started.
    pub(crate) chatty: bool,
    /// The fault-injecting proxy every client dials through, when a
    /// network fault is on.
    pub(crate) proxy: Option<Proxy>,
    /// etcd members whose peer links go through the proxy.
    pub(crate) members: usize,
    /// Each client's URLs: its lock servers', then its storage's.
    pub(crate) routes: Vec<(Vec<String>, String)>,
    /// A Redis primary and its replica, for the failover fault: clients
    /// follow the primary wherever it is (directly, not through the proxy).
    pub(crate) pair: Option<RedisPair>,
    /// The exec backend's servers, each with its kind, in `--servers`
    /// order.
    pub(crate) exec: Vec<(ServerKind, String)>,
    /// PgBouncer's URL, when the clients reach the PostgreSQL that holds
    /// their locks through it (`--pooler`): the lock URL, while the
    /// storage stays on the server itself.
    pub(crate) pooled: Option<String>,
}

/// What a private server is to the run, and so whether the nemesis
/// strikes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// It holds the locks (the storage's PostgreSQL may too: the
    /// postgres-* backends).
    Lock,
    /// It holds a payments run's queue, table and provider keys.
    Resource,
    /// The storage only: no fault strikes it.
    Other,
}

impl Servers {
    /// Starts PgBouncer, pooling as `pooler` says, in front of the
    /// PostgreSQL that holds the locks (started already): the clients'
    /// lock URL becomes its. No fault strikes it.
    fn start_pooler(&mut self, pooler: Pooler, options: &ServerOptions) -> Result<(), RealError> {
        let port = self
            .lock
            .last()
            .map(|server| server.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).port());
        let Some(port) = port else {
            return Err(RealError::Setup {
                what: "PgBouncer",
                reason: "no PostgreSQL of lockcheck's own to pool".to_string(),
            });
        };
        let options = ServerOptions { upstream: Some((port, pooler)), ..options.clone() };
        let urls = self.start(ServerKind::PgBouncer, 1, Role::Other, &options)?;
        self.pooled = urls.into_iter().next();
        Ok(())
    }

    /// Starts `count` private servers of `kind`, in `role`.
    pub(crate) fn start(
        &mut self,
        kind: ServerKind,
        count: usize,
        role: Role,
        options: &ServerOptions,
    ) -> Result<Vec<String>, RealError> {
        let started = Instant::now();
        let servers = ManagedServer::start_many(kind, count, options)?;
        let urls: Vec<String> = servers.iter().map(ManagedServer::url).collect();
        self.say_started(kind, &urls, started);
        let struck = match role {
            Role::Lock => &mut self.lock,
            Role::Resource => &mut self.resources,
            Role::Other => {
                self.other.extend(servers);
                return Ok(urls);
            }
        };
        struck.extend(servers.into_iter().map(|server| Arc::new(Mutex::new(server))));
        Ok(urls)
    }

    /// With `chatty`, says on stderr which servers were started, and how
    /// long they took.
    fn say_started(&self, kind: ServerKind, urls: &[String], started: Instant) {
        if self.chatty {
            eprintln!(
                "started {} private {} on {} ({:.1} s)",
                urls.len(),
                kind.name(),
                urls.join(", "),
                started.elapsed().as_secs_f64()
            );
        }
    }

    /// Starts moto's S3 server and makes the resources' bucket on it: the
    /// S3 storage of `kind`.
    fn start_s3(
        &mut self,
        kind: StorageKind,
        options: &ServerOptions,
    ) -> Result<S3Storage, RealError> {
        let started = Instant::now();
        let server = ManagedServer::start_with(S3_SERVER, options)?;
        moto::create_bucket(&server, s3::BUCKET)?;
        let endpoint = server.url();
        self.say_started(S3_SERVER, std::slice::from_ref(&endpoint), started);
        self.other.push(server);
        let url = s3::storage_url(kind, &endpoint, s3::BUCKET);
        Ok(S3Storage { endpoint, url })
    }

    /// Starts lockcheck's own payment provider, its keys in the run's
    /// PostgreSQL, as the run's options say.
    fn start_provider(&mut self, test: &RunOptions) -> Result<(), RealError> {
        let started = Instant::now();
        let mut config = ProviderConfig::new(self.postgres(), test.provider, test.provider_variant);
        config.seed = test.seed;
        let provider = ProviderServer::start(config)?;
        if self.chatty {
            eprintln!(
                "started lockcheck's payment provider ({}, {}) on {} ({:.1} s)",
                test.provider.name(),
                test.provider_variant.name(),
                provider.url(),
                started.elapsed().as_secs_f64()
            );
        }
        self.provider = Some(provider);
        Ok(())
    }

    pub(crate) fn for_backend(
        test: &RunOptions,
        backend: RealBackend,
        faults: Faults,
        chatty: bool,
    ) -> Result<Servers, RealError> {
        let mut servers = Servers { chatty, ..Servers::default() };
        if faults.has(FaultKind::Partition)
            || faults.has(FaultKind::SlowNet)
            || faults.has(FaultKind::SlowClient)
            || faults.has(FaultKind::Failover)
            || (faults.has(FaultKind::Pause) && backend.beats_by_itself())
            // A program paused between two round trips is held on the proxy.
            || (faults.has(FaultKind::Pause) && backend.backend().is_program())
        {
            servers.proxy = Some(Proxy::start()?);
        }
        let options = ServerOptions {
            persistent: test.persistent,
            faketime: faults.has(FaultKind::Clock),
            ..ServerOptions::default()
        };
        let storage_options = ServerOptions { faketime: false, ..options.clone() };
        let service = backend.service();
        let postgres_locks = service == LockService::Postgres;
        let exec = match service {
            LockService::Exec => exec_servers(test).map_err(|reason| RealError::Setup {
                what: "the exec backend's servers",
                reason,
            })?,
            _ => Vec::new(),
        };
        let postgres = match test.services.url(UrlService::Postgres) {
            Some(url) => vec![url.to_string()],
            None if needs_postgres(test, service, &exec) => {
                let options = if postgres_locks { &options } else { &storage_options };
                // A payments run's services keep their state in it: it is
                // theirs to be killed or stopped (a postgres-* backend's is
                // a lock server already).
                let role = if postgres_locks {
                    Role::Lock
                } else if test.protection.needs_payments(test.workload) {
                    Role::Resource
                } else {
                    Role::Other
                };
                servers.start(STORAGE, 1, role, options)?
            }
            None => Vec::new(),
        };
        servers.urls.set(UrlService::Postgres, postgres);
        if let (Some(pooler), true) = (test.pooler, postgres_locks) {
            servers.start_pooler(pooler, &storage_options)?;
        }
        if test.storage.is_s3() {
            servers.s3 = Some(servers.start_s3(test.storage, &storage_options)?);
        }
        if test.workload == Workload::Payments {
            servers.start_provider(test)?;
        }
        match service {
            LockService::Redis { instances } => {
                let redis = if let (true, Some(proxy)) =
                    (faults.has(FaultKind::Failover), &servers.proxy)
                {
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
                } else if !test.services.given(UrlService::Redis) {
                    servers.start(ServerKind::Redis, instances, Role::Lock, &options)?
                } else {
                    test.services.urls(UrlService::Redis).to_vec()
                };
                servers.urls.set(UrlService::Redis, redis);
            }
            LockService::Etcd => {
                let asked = match faults.has(FaultKind::Partition) {
                    true => shapes(test, backend).unwrap_or_default(),
                    false => Vec::new(),
                };
                let split = asked.iter().any(|shape| *shape != Shape::Client);
                let given = test.services.urls(UrlService::Etcd);
                let etcd = match (&servers.proxy, given.is_empty()) {
                    (_, false) => given.to_vec(),
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
                    (_, true) => servers.start(ServerKind::Etcd, 1, Role::Lock, &options)?,
                };
                servers.urls.set(UrlService::Etcd, etcd);
            }
            LockService::ZooKeeper => {
                // One server for clean runs and a client's faults; an
                // ensemble of three when a fault strikes members (one of
                // three may fail), its peers talking through the proxy when
                // a partition splits them.
                let split = faults.has(FaultKind::Partition)
                    && shapes(test, backend)
                        .unwrap_or_default()
                        .iter()
                        .any(|s| *s != Shape::Client);
                let ensemble =
                    split || faults.has(FaultKind::Sigstop) || faults.has(FaultKind::Kill);
                let zookeeper = if test.services.given(UrlService::ZooKeeper) {
                    test.services.urls(UrlService::ZooKeeper).to_vec()
                } else if ensemble {
                    let started = Instant::now();
                    let proxy = servers.proxy.as_ref().filter(|_| split);
                    let members = ManagedServer::start_zookeeper_ensemble(
                        ZOOKEEPER_MEMBERS,
                        &options,
                        proxy,
                    )?;
                    let urls: Vec<String> = members.iter().map(ManagedServer::url).collect();
                    if chatty {
                        let peers =
                            if split { ", its peers talking through the proxy" } else { "" };
                        eprintln!(
                            "started a private zookeeper ensemble of {ZOOKEEPER_MEMBERS} members{peers}, on {} ({:.1} s)",
                            urls.join(", "),
                            started.elapsed().as_secs_f64()
                        );
                    }
                    if split {
                        servers.members = ZOOKEEPER_MEMBERS;
                    }
                    servers
                        .lock
                        .extend(members.into_iter().map(|member| Arc::new(Mutex::new(member))));
                    urls
                } else {
                    servers.start(ServerKind::ZooKeeper, 1, Role::Lock, &options)?
                };
                servers.urls.set(UrlService::ZooKeeper, zookeeper);
            }
            LockService::Mariadb => {
                let mysql = match test.services.url(UrlService::Mysql) {
                    Some(url) => vec![url.to_string()],
                    None => servers.start(ServerKind::Mariadb, 1, Role::Lock, &options)?,
                };
                servers.urls.set(UrlService::Mysql, mysql);
            }
            LockService::Postgres => {}
            LockService::Exec => {
                for (kind, count) in exec {
                    let urls = if kind == STORAGE {
                        servers.urls.urls(UrlService::Postgres).to_vec()
                    } else {
                        servers.start(kind, count, Role::Lock, &options)?
                    };
                    servers.exec.extend(urls.into_iter().map(|url| (kind, url)));
                }
            }
        }
        servers.route(backend, test.clients)?;
        Ok(servers)
    }

    /// The lock servers' URLs.
    pub(crate) fn lock_urls(&self, backend: RealBackend) -> Vec<String> {
        match backend.service() {
            LockService::Redis { .. } => self.urls.urls(UrlService::Redis).to_vec(),
            LockService::Etcd => self.urls.urls(UrlService::Etcd).to_vec(),
            LockService::ZooKeeper => self.urls.urls(UrlService::ZooKeeper).to_vec(),
            LockService::Mariadb => self.urls.urls(UrlService::Mysql).to_vec(),
            LockService::Postgres => match &self.pooled {
                Some(pooled) => vec![pooled.clone()],
                None => self.urls.urls(UrlService::Postgres).to_vec(),
            },
            LockService::Exec => self.exec.iter().map(|(_, url)| url.clone()).collect(),
        }
    }

    /// The lock servers' node names (`redis-0`, `etcd-2`): the history's
    /// names for them, and the proxy's.
    pub(crate) fn lock_nodes(&self, backend: RealBackend) -> Vec<String> {
        let Some(kind) = backend.service().kind() else {
            let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
            return self
                .exec
                .iter()
                .map(|(kind, _)| {
                    let at = seen.entry(kind.name()).or_default();
                    *at += 1;
                    format!("{}-{}", kind.name(), *at - 1)
                })
                .collect();
        };
        let kind = kind.name();
        (0..self.lock_urls(backend).len()).map(|at| format!("{kind}-{at}")).collect()
    }

    /// The storage's node: the lock server itself for the postgres-*
    /// backends.
    pub(crate) fn storage_node(&self, backend: RealBackend) -> String {
        match backend.service() {
            LockService::Postgres => format!("{}-0", STORAGE.name()),
            LockService::Exec if self.exec.iter().any(|(kind, _)| *kind == STORAGE) => {
                format!("{}-0", STORAGE.name())
            }
            _ => "storage".to_string(),
        }
    }

    /// The environment of client `logical`'s program: where its servers
    /// are (through the proxy when there is one), as docs/exec-protocol.md
    /// names them.
    pub(crate) fn exec_env(&self, logical: u32) -> Vec<(String, String)> {
        let urls = &self.routes[logical as usize].0;
        let of = |wanted: &ServerKind| -> Vec<String> {
            self.exec
                .iter()
                .zip(urls)
                .filter(|((kind, _), _)| kind == wanted)
                .map(|(_, url)| url.clone())
                .collect()
        };
        // Kind by kind, in their order, whatever the order of `--servers`.
        ServerKind::ALL.iter().flat_map(|kind| kind.exec_env(&of(kind))).collect()
    }

    /// Each client's URLs: through the proxy, on links of its own, when
    /// there is one. An S3 storage is reached directly: the network faults
    /// strike the lock service's links.
    pub(crate) fn route(&mut self, backend: RealBackend, clients: u32) -> Result<(), RealError> {
        let (urls, nodes) = (self.lock_urls(backend), self.lock_nodes(backend));
        let storage_node = self.storage_node(backend);
        self.routes = match &self.proxy {
            None => (0..clients).map(|_| (urls.clone(), self.storage_url())).collect(),
            Some(proxy) => {
                let mut routes = Vec::with_capacity(clients as usize);
                for client in 0..clients {
                    let from = format!("client-{client}");
                    let mut locks = Vec::with_capacity(urls.len());
                    for (url, node) in urls.iter().zip(&nodes) {
                        locks.push(proxied_url(proxy, &from, node, url)?);
                    }
                    let storage = match &self.s3 {
                        Some(s3) => s3.url.clone(),
                        None => proxied_url(proxy, &from, &storage_node, self.postgres())?,
                    };
                    routes.push((locks, storage));
                }
                routes
            }
        };
        Ok(())
    }

    /// Where the protected resources are: the S3 storage, or the
    /// PostgreSQL table.
    fn storage_url(&self) -> String {
        match &self.s3 {
            Some(s3) => s3.url.clone(),
            None => self.postgres().to_string(),
        }
    }

    /// The run's PostgreSQL (empty: it has none).
    pub(crate) fn postgres(&self) -> &str {
        self.urls.url(UrlService::Postgres).unwrap_or_default()
    }

    /// The network a fault schedule strikes.
    pub(crate) fn topology(&self, backend: RealBackend, clients: u32) -> Topology {
        let storage_node = self.storage_node(backend);
        let lock_nodes = self.lock_nodes(backend);
        // An S3 storage is not behind the proxy: no fault reaches it.
        let proxied = self.s3.is_none() && !lock_nodes.contains(&storage_node);
        Topology {
            clients,
            storage_node: proxied.then_some(storage_node),
            lock_nodes,
            members: self.members,
            pinned: backend.pinned(),
        }
    }

    /// The lock servers' names in the history: `redis-0`, `postgres-0`, …
    pub(crate) fn lock_names(&self) -> Vec<String> {
        self.lock
            .iter()
            .enumerate()
            .map(|(at, server)| {
                let server = server.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                format!("{}-{at}", server.kind().name())
            })
            .collect()
    }

    /// The servers the nemesis strikes, the lock servers first, with their
    /// names in the history: `redis-0`, and a payments run's
    /// `postgres-payments`.
    pub(crate) fn struck(&self) -> (Vec<SharedServer>, Vec<String>) {
        let servers = self.lock.iter().chain(&self.resources).cloned().collect();
        let mut names = self.lock_names();
        names.extend(self.resources.iter().map(|server| {
            let server = server.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            format!("{}-payments", server.kind().name())
        }));
        (servers, names)
    }
}

/// Whether a run needs a PostgreSQL: for the table storage, or for the
/// backend itself (the postgres-* backends lock with it; an exec program
/// may ask for one among its `servers`). An S3 storage needs none.
fn needs_postgres(test: &RunOptions, service: LockService, exec: &[(ServerKind, usize)]) -> bool {
    !test.storage.is_s3()
        || test.protection.needs_payments(test.workload)
        || service == LockService::Postgres
        || exec.iter().any(|(kind, _)| *kind == STORAGE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::plan;
    use lockcheck_workloads::World;

    #[test]
    fn only_the_table_storage_the_payments_or_the_backend_itself_needs_postgres() {
        let redis = LockService::Redis { instances: 1 };
        let exec_redis = [(ServerKind::Redis, 1)];
        let exec_postgres = [(ServerKind::Redis, 1), (ServerKind::Postgres, 1)];
        let with = |storage| RunOptions {
            storage,
            ..RunOptions::new(World::Real, lockcheck_workloads::Backend::Redis)
        };
        let table = &with(StorageKind::Table);
        assert!(needs_postgres(table, redis, &[]));
        assert!(needs_postgres(table, LockService::Etcd, &[]));
        assert!(needs_postgres(table, LockService::Exec, &exec_redis));
        for kind in [StorageKind::S3Put, StorageKind::S3Cas, StorageKind::S3Create] {
            let s3 = &with(kind);
            assert!(!needs_postgres(s3, redis, &[]), "{kind:?}");
            assert!(!needs_postgres(s3, LockService::Etcd, &[]), "{kind:?}");
            assert!(!needs_postgres(s3, LockService::Mariadb, &[]), "{kind:?}");
            assert!(!needs_postgres(s3, LockService::Exec, &exec_redis), "{kind:?}");
            assert!(needs_postgres(s3, LockService::Postgres, &[]), "{kind:?}");
            assert!(needs_postgres(s3, LockService::Exec, &exec_postgres), "{kind:?}");
            let payments = RunOptions { workload: Workload::Payments, ..s3.clone() };
            assert!(needs_postgres(&payments, redis, &[]), "{kind:?}: the provider's keys");
        }
    }

    /// The kinds of the private servers `servers` started, lock servers
    /// first, each once a server.
    fn started(servers: &Servers) -> Vec<ServerKind> {
        let lock =
            servers.lock.iter().chain(&servers.resources).map(|server| {
                server.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).kind()
            });
        lock.chain(servers.other.iter().map(ManagedServer::kind)).collect()
    }

    /// The servers a run of `backend` with `storage` and `faults` starts
    /// (on this machine's binaries).
    fn provision(backend: &str, storage: StorageKind, faults: &[FaultKind]) -> Servers {
        let backend = RealBackend::parse(backend).expect("a real backend");
        let test = RunOptions {
            storage,
            faults: faults.to_vec(),
            partition_shapes: vec![Shape::Client],
            clients: 2,
            ..RunOptions::new(World::Real, backend.backend())
        };
        let faults = plan(&test).expect("the options make a test").faults;
        Servers::for_backend(&test, backend, faults, false)
            .unwrap_or_else(|error| panic!("{}: {error}", backend.name()))
    }

    #[test]
    fn an_s3_run_of_redis_starts_moto_and_no_postgres() {
        let servers = provision("redis", StorageKind::S3Cas, &[FaultKind::Partition]);
        assert_eq!(started(&servers), [ServerKind::Redis, ServerKind::Moto]);
        assert_eq!(servers.urls.url(UrlService::Postgres), None, "no PostgreSQL URL");
        let s3 = servers.s3.clone().expect("an S3 storage");
        let moto = servers.other[0].url();
        assert_eq!(s3.endpoint, moto);
        assert_eq!(s3.url, format!("s3-cas+{moto}/{}", s3::BUCKET));
        // The bucket is there, and every client reaches it directly while
        // its lock server is behind the proxy.
        let port = servers.other[0].port();
        assert_eq!(moto::request(port, "HEAD", &format!("/{}", s3::BUCKET)), Ok(200));
        assert_eq!(moto::request(port, "HEAD", "/another-bucket"), Ok(404));
        assert_eq!(servers.routes.len(), 2);
        let redis = servers.lock_urls(RealBackend::parse("redis").expect("redis"));
        for (locks, storage) in &servers.routes {
            assert_eq!(storage, &s3.url);
            assert_eq!(locks.len(), 1);
            assert_ne!(locks, &redis, "the lock server is reached through the proxy");
        }
        let topology = servers.topology(RealBackend::parse("redis").expect("redis"), 2);
        assert_eq!(topology.storage_node, None, "no fault strikes the S3 storage");
    }

    #[test]
    fn the_table_storage_and_a_postgres_backend_still_start_postgres() {
        let table = provision("redis", StorageKind::Table, &[]);
        assert_eq!(started(&table), [ServerKind::Redis, ServerKind::Postgres]);
        assert!(table.s3.is_none());
        assert!(table.routes.iter().all(|(_, storage)| storage == table.postgres()));
        drop(table);
        let locks_in_postgres = provision("postgres-lease", StorageKind::S3Put, &[]);
        assert_eq!(started(&locks_in_postgres), [ServerKind::Postgres, ServerKind::Moto]);
        let url = &locks_in_postgres.s3.as_ref().expect("an S3 storage").url;
        assert!(url.starts_with("s3-put+http://127.0.0.1:"), "{url}");
        assert!(locks_in_postgres.routes.iter().all(|(_, storage)| storage == url));
    }
}
