//! Simulated clients: each backend's recipe from docs/guide.md#recipes, spoken
//! to the simulated servers, including the deliberately broken variants.

use lockcheck_workloads::{Catalogue, FaultKind, Grant, LockClient, Outcome};

use crate::host::Connection;
use crate::nemesis::refused_in_sim;
use crate::run::ClientSetup;
use crate::service::{self, SimSession};

pub use lockcheck_workloads::Backend;
use lockcheck_workloads::World;

/// The simulator's view of the one catalogue ([`Backend`]): how it hosts
/// each service, and the faults it cannot carry out at all.
#[derive(Debug, Clone, Copy)]
pub struct Simulator;

impl Simulator {
    /// The hosts that keep `backend`'s locks (none for a backend the
    /// simulator does not run), as its service says
    /// ([`crate::service`]).
    pub fn lock_hosts(backend: Backend) -> &'static [&'static str] {
        let service = backend.service();
        service::keeping(service, &[]).map_or(&[], |keeper| keeper.lock_hosts(service))
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

/// One session of one simulated client: its service's session of the
/// recipe, over the connections every client has.
#[derive(Debug)]
pub struct SimClient {
    session: Box<dyn SimSession>,
    link: Link,
}

/// What every simulated client has, whatever its service: its connections
/// to the lock hosts (each pausing at the client's pause points), the
/// values it names its grants by, and its clock.
#[derive(Debug)]
pub(crate) struct Link {
    pub(crate) backend: Backend,
    /// Take a fencing token with each grant (`INCR` for Redis; the lease
    /// table always has one).
    pub(crate) fencing: bool,
    name: String,
    grants: u64,
    /// The lock hosts' connections: one, or Redlock's five.
    pub(crate) instances: Vec<Connection>,
    /// This client's clock, ahead of simulated time by this much (a skew
    /// nemesis moves it); only a recipe that trusts the client's clock reads it.
    clock_offset_ms: std::rc::Rc<std::cell::Cell<i64>>,
}

impl SimClient {
    /// The client `setup` describes, running its session against
    /// `backend`'s lock hosts, or following the primary of a replica set
    /// when there is one.
    pub(crate) fn new(backend: Backend, fencing: bool, setup: ClientSetup) -> Self {
        let ClientSetup { name, deadline, stall, clock, primary, down, session, .. } = setup;
        let instances = match primary {
            Some(primary) => vec![Connection::to_primary(primary, deadline).stalling(&stall)],
            // Redlock asks each instance with a short timeout of its own.
            None => Simulator::lock_hosts(backend)
                .iter()
                .map(|host| {
                    Connection::new(
                        host,
                        if backend.is_independent() { deadline / 2 } else { deadline },
                    )
                    .refusing_when_down(&down)
                    .stalling(&stall)
                })
                .collect(),
        };
        let link = Link { clock_offset_ms: clock, backend, fencing, name, grants: 0, instances };
        SimClient { session, link }
    }
}

impl Link {
    pub(crate) fn next_value(&mut self) -> String {
        self.grants += 1;
        format!("{}:{}", self.name, self.grants)
    }

    /// The client's number, from its name (`client-3`: 3): an etcd client
    /// asks its own member first.
    pub(crate) fn number(&self) -> usize {
        self.name.rsplit('-').next().and_then(|logical| logical.parse().ok()).unwrap_or_default()
    }

    /// The caller's clock, for the recipes that (wrongly) trust it.
    pub(crate) fn caller_now_ms(&self) -> Option<i64> {
        self.backend.trusts_caller_clock().then(|| {
            turmoil::sim_elapsed().unwrap_or_default().as_millis() as i64
                + self.clock_offset_ms.get()
        })
    }
}

impl LockClient for SimClient {
    async fn acquire(&mut self, key: &str, ttl_ms: u64) -> Outcome<Grant> {
        self.session.acquire(&mut self.link, key, ttl_ms).await
    }

    async fn release(&mut self, key: &str, grant: &Grant) -> Outcome<()> {
        self.session.release(&mut self.link, key, grant).await
    }

    async fn renew(&mut self, key: &str, grant: &Grant, ttl_ms: u64) -> Outcome<()> {
        self.session.renew(&mut self.link, key, grant, ttl_ms).await
    }

    async fn reset(&mut self) {
        // The leases of a session given up expire by themselves, as a
        // crashed client's do.
        self.session.reset();
        for instance in &mut self.link.instances {
            instance.reset();
        }
    }
}
