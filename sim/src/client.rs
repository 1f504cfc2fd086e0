//! Simulated clients: each backend's recipe from docs/guide.md#recipes, spoken
//! to the simulated servers, including the deliberately broken variants.

use std::time::Duration;

use lockcheck_workloads::etcd_lock::EtcdLock;
use lockcheck_workloads::{Catalogue, FaultKind, Grant, LockClient, Outcome, Stall};

use crate::consul;
use crate::etcd::ETCD_HOSTS;
use crate::etcd_client::Members;
use crate::host::{Connection, DownHosts, Primary};
use crate::nemesis::refused_in_sim;

pub use lockcheck_workloads::Backend;
use lockcheck_workloads::{Recipe, Service, World};

/// The five Redlock instances.
pub const REDLOCK_HOSTS: [&str; 5] = ["redis-0", "redis-1", "redis-2", "redis-3", "redis-4"];

/// The members of a three-member etcd cluster.
const ETCD_HOSTS_3: [&str; 3] = [ETCD_HOSTS[0], ETCD_HOSTS[1], ETCD_HOSTS[2]];

/// A single Redis with an async replica (the failover fault): the primary
/// first, then the replica.
pub const REPLICATED_HOSTS: [&str; 2] = ["redis", "redis-replica"];

/// The simulator's view of the one catalogue ([`Backend`]): how it hosts
/// each service, and the faults it cannot carry out at all.
#[derive(Debug, Clone, Copy)]
pub struct Simulator;

impl Simulator {
    /// The hosts that keep `backend`'s locks.
    pub fn lock_hosts(backend: Backend) -> &'static [&'static str] {
        match backend.service() {
            Service::Redis { instances: 1 } => &["redis"],
            Service::Redis { .. } => &REDLOCK_HOSTS,
            Service::Etcd { members: 3 } => &ETCD_HOSTS_3,
            Service::Etcd { .. } => &ETCD_HOSTS,
            Service::Postgres | Service::Mariadb => &["db"],
            Service::Consul => &[consul::CONSUL_HOST],
            Service::Exec => &[],
        }
    }
}

impl Catalogue for Simulator {
    const WORLD: World = World::Simulated;

    fn refuses(backend: Backend, fault: FaultKind) -> Option<String> {
        if let Some(why) = refused_in_sim(fault) {
            return Some(why.to_string());
        }
        backend.refuses(World::Simulated, fault)
    }
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
            instances: Simulator::lock_hosts(backend)
                .iter()
                .map(|host| {
                    Connection::new(
                        host,
                        if backend.is_independent() { deadline / 2 } else { deadline },
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
        self.backend.trusts_caller_clock().then(|| {
            turmoil::sim_elapsed().unwrap_or_default().as_millis() as i64
                + self.clock_offset_ms.get()
        })
    }
}

/// A recipe of the real world only: [`crate::RunOptions::check`] refuses
/// its backend before any client runs.
fn not_simulated<T>(recipe: Recipe) -> Outcome<T> {
    unreachable!("{recipe:?} has no simulated service")
}

impl LockClient for SimClient {
    async fn acquire(&mut self, key: &str, ttl_ms: u64) -> Outcome<Grant> {
        match self.backend.recipe() {
            Recipe::Redis(variant) => self.acquire_redis(variant, key, ttl_ms).await,
            Recipe::Semaphore { .. } => self.acquire_permit(key, ttl_ms).await,
            Recipe::Redlock { .. } => self.acquire_redlock(key, ttl_ms).await,
            Recipe::LeaseTable { .. } => self.acquire_lease(key, ttl_ms).await,
            Recipe::Etcd { .. } => {
                let mut members = Members::new(&mut self.instances, self.local_member);
                self.etcd.acquire(&mut members, key, ttl_ms).await
            }
            Recipe::Consul { lock_delay_ms } => {
                consul::acquire(&mut self.instances[0], self.fencing, key, ttl_ms, lock_delay_ms)
                    .await
            }
            recipe => not_simulated(recipe),
        }
    }

    async fn release(&mut self, key: &str, grant: &Grant) -> Outcome<()> {
        let value = grant.lease.clone().unwrap_or_default();
        match self.backend.recipe() {
            Recipe::Redis(variant) => self.release_redis(variant, key, &value).await,
            Recipe::Semaphore { .. } => self.release_permit(key, &value).await,
            Recipe::Redlock { .. } => self.release_redlock(key, &value).await,
            Recipe::LeaseTable { .. } => self.release_lease(key, grant).await,
            Recipe::Etcd { .. } => {
                let mut members = Members::new(&mut self.instances, self.local_member);
                self.etcd.release(&mut members, key).await
            }
            Recipe::Consul { .. } => consul::release(&mut self.instances[0], key, grant).await,
            recipe => not_simulated(recipe),
        }
    }

    async fn renew(&mut self, key: &str, grant: &Grant, ttl_ms: u64) -> Outcome<()> {
        let value = grant.lease.clone().unwrap_or_default();
        match self.backend.recipe() {
            Recipe::Redis(variant) => self.renew_redis(variant, key, &value, ttl_ms).await,
            Recipe::Semaphore { .. } => self.renew_permit(key, &value, ttl_ms).await,
            Recipe::Redlock { .. } => self.renew_redlock(key, &value, ttl_ms).await,
            Recipe::LeaseTable { .. } => self.renew_lease(key, grant, ttl_ms).await,
            Recipe::Etcd { .. } => {
                let mut members = Members::new(&mut self.instances, self.local_member);
                self.etcd.renew(&mut members, key).await
            }
            Recipe::Consul { .. } => consul::renew(&mut self.instances[0], grant).await,
            recipe => not_simulated(recipe),
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
