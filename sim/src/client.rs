//! Simulated clients: each backend's recipe from docs/guide.md#recipes, spoken
//! to the simulated servers, including the deliberately broken variants.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use lockcheck_workloads::{Catalogue, FaultKind, Grant, LockClient, Outcome, Stall};

use crate::host::{Connection, DownHosts, Primary};
use crate::nemesis::refused_in_sim;
use crate::service::{Link, SimSession};
use crate::services;

pub use lockcheck_workloads::Backend;
use lockcheck_workloads::World;

/// What the simulation hands the factory of each logical client's lock
/// client: who it is, its deadline, and the run's shared fault hooks.
pub(crate) struct ClientSetup {
    pub logical: u32,
    /// `client-3`.
    pub name: String,
    /// Every request's deadline.
    pub deadline: Duration,
    /// Where the pause nemesis stalls this client.
    pub stall: Stall,
    /// This client's clock offset (the skew nemesis).
    pub clock: Rc<Cell<i64>>,
    /// With the failover fault, the replica set's primary to follow.
    pub primary: Option<Primary>,
    /// The lock servers crashed right now: connections to them are refused.
    pub down: DownHosts,
    /// The client's session of the run's service (a client of its own,
    /// such as a user's, leaves it unused).
    pub session: Box<dyn SimSession>,
}

/// The simulator's view of the one catalogue ([`Backend`]): how it hosts
/// each service, and the faults it cannot carry out at all.
#[derive(Debug, Clone, Copy)]
pub struct Simulator;

impl Simulator {
    /// The hosts that keep `backend`'s locks (none for a backend the
    /// simulator does not run), as its service says
    /// ([`crate::services`]).
    pub fn lock_hosts(backend: Backend) -> &'static [&'static str] {
        let service = backend.service();
        services::keeping(service, &[]).map_or(&[], |keeper| keeper.lock_hosts(service))
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
        let link =
            Link { clock_offset_ms: clock, backend, fencing, name, grants: 0, instances, stall };
        SimClient { session, link }
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

    fn take_wake_ups(&mut self) -> Option<u64> {
        self.session.take_wake_ups()
    }
}
