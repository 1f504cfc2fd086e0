//! The servers a real run uses: given by URL, or private ones started for
//! it, and each client's route to them (through the proxy when a network
//! fault is on).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use lockcheck_workloads::{FaultKind, RunOptions, UrlService};

use crate::catalogue::{LockService, RealBackend, ETCD_MEMBERS, ETCD_RING_MEMBERS};
use crate::failover::RedisPair;
use crate::nemesis::SharedServer;
use crate::netfault::{proxied_url, Shape, Topology};
use crate::plan::{exec_servers, shapes, Faults};
use crate::proxy::Proxy;
use crate::servers::{ManagedServer, ServerKind, ServerOptions};
use crate::RealError;

/// The storage's server. The exec backend's `postgres` is the storage
/// itself, not a second one.
const STORAGE: ServerKind = ServerKind::Postgres;

/// The servers a run uses: URLs given, or private servers started for it.
/// Dropping it stops and deletes the private ones.
#[derive(Debug, Default)]
pub(crate) struct Servers {
    pub(crate) storage: String,
    pub(crate) redis: Vec<String>,
    pub(crate) mysql: Option<String>,
    pub(crate) etcd: Vec<String>,
    /// The private servers that hold the locks: the nemesis' targets.
    pub(crate) lock: Vec<SharedServer>,
    /// The other private servers (the storage's PostgreSQL).
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
}

impl Servers {
    /// Starts `count` private servers of `kind`; `lock`: they hold the
    /// locks (the storage's PostgreSQL may too: the postgres-* backends).
    pub(crate) fn start(
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
        servers.storage = match test.services.url(UrlService::Postgres) {
            Some(url) => url.to_string(),
            None => {
                let options = if postgres_locks { &options } else { &storage_options };
                servers.start(STORAGE, 1, postgres_locks, options)?.remove(0)
            }
        };
        match service {
            LockService::Redis { instances } => {
                servers.redis = if let (true, Some(proxy)) =
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
                    servers.start(ServerKind::Redis, instances, true, &options)?
                } else {
                    test.services.urls(UrlService::Redis).to_vec()
                };
            }
            LockService::Etcd => {
                let asked = match faults.has(FaultKind::Partition) {
                    true => shapes(test, backend).unwrap_or_default(),
                    false => Vec::new(),
                };
                let split = asked.iter().any(|shape| *shape != Shape::Client);
                let given = test.services.urls(UrlService::Etcd);
                servers.etcd = match (&servers.proxy, given.is_empty()) {
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
                    (_, true) => servers.start(ServerKind::Etcd, 1, true, &options)?,
                };
            }
            LockService::Mariadb => {
                servers.mysql = Some(match test.services.url(UrlService::Mysql) {
                    Some(url) => url.to_string(),
                    None => servers.start(ServerKind::Mariadb, 1, true, &options)?.remove(0),
                });
            }
            LockService::Postgres => {}
            LockService::Exec => {
                for (kind, count) in exec_servers(test).map_err(|reason| RealError::Setup {
                    what: "the exec backend's servers",
                    reason,
                })? {
                    let urls = if kind == STORAGE {
                        vec![servers.storage.clone()]
                    } else {
                        servers.start(kind, count, true, &options)?
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
            LockService::Redis { .. } => self.redis.clone(),
            LockService::Etcd => self.etcd.clone(),
            LockService::Mariadb | LockService::Postgres => {
                vec![self.mysql.clone().unwrap_or_else(|| self.storage.clone())]
            }
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
    /// there is one.
    pub(crate) fn route(&mut self, backend: RealBackend, clients: u32) -> Result<(), RealError> {
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
    pub(crate) fn topology(&self, backend: RealBackend, clients: u32) -> Topology {
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
}
