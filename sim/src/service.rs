//! The simulated lock services, as one table ([`SERVICES`]): each is a
//! module of its own implementing [`SimService`], the one place that knows
//! its hosts, how they start on the simulation and what its clients run.
//! The run (`run.rs`) and the client (`client.rs`) ask the table and never
//! name a service.
//!
//! A new simulated service is its file and one line of [`SERVICES`], as
//! the catalogue's entry (`lockcheck_workloads::catalogue`) is one line
//! there.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use lockcheck_workloads::{Backend, FaultKind, Grant, Outcome, Service};
use rand::rngs::SmallRng;
use rand::Rng;

use crate::host::{serve, Connection, Knobs, Primary};
use crate::server::ServerState;

/// One simulated lock service: its hosts, how they start, and one
/// client's side of it.
pub(crate) trait SimService {
    /// Whether it keeps the locks of the catalogue's `service` in a run
    /// with `faults` on (a single Redis gets a replica when it can fail
    /// over).
    fn keeps(&self, service: Service, faults: &[FaultKind]) -> bool;

    /// The hosts its clients send requests to, in the order a fault's
    /// target index counts them.
    fn lock_hosts(&self, service: Service) -> &'static [&'static str];

    /// Starts its hosts on the simulation, in order, each with its knobs.
    /// The seeds its hosts take from the run's randomness, and their
    /// order, are part of every history: they must not change.
    fn start(&self, hosting: &mut Hosting<'_, '_>) -> Started;

    /// A new client's session of `backend`'s recipe (taking a fencing
    /// token with each grant when `fencing`), or none if this service does
    /// not run that recipe.
    fn session(&self, backend: Backend, fencing: bool) -> Option<Box<dyn SimSession>>;
}

/// What a service's hosts start with.
pub(crate) struct Hosting<'a, 'sim> {
    pub sim: &'a mut turmoil::Sim<'sim>,
    /// The run's randomness: each host's seeds are drawn from it.
    pub rng: &'a mut SmallRng,
    pub backend: Backend,
    /// A server that can lose its state keeps it across a restart
    /// (`--persistent`, or a database).
    pub persistent: bool,
    pub ttl_ms: u64,
}

impl Hosting<'_, '_> {
    /// The next seed of the run's randomness.
    pub fn seed(&mut self) -> u64 {
        self.rng.gen()
    }

    /// Starts `software` on host `name` with `knobs`, again on every
    /// restart, and counts the host among `started`'s.
    pub fn host<F, Fut>(
        &mut self,
        started: &mut Started,
        name: &'static str,
        knobs: Rc<Knobs>,
        software: F,
    ) where
        F: Fn(Rc<Knobs>) -> Fut + 'static,
        Fut: Future<Output = Result<(), Box<dyn std::error::Error>>> + 'static,
    {
        started.knobs.push(knobs.clone());
        self.sim.host(name, move || software(knobs.clone()));
    }
}

/// A service's started hosts, as the nemesis strikes them.
pub(crate) struct Started {
    /// The hosts, in the order a fault's target index counts them.
    pub hosts: &'static [&'static str],
    /// One per host.
    pub knobs: Vec<Rc<Knobs>>,
    /// For a replica set, which host is the primary: the clients follow
    /// it, and every server fault strikes the primary of its start.
    pub primary: Option<Primary>,
    /// Each client reaches the service through one host of its own (client
    /// `i` through host `i` modulo their number), which passes its requests
    /// on: a split among the hosts cuts the client off from every host its
    /// own is cut off from.
    pub pinned: bool,
}

impl Started {
    /// No host started yet of `hosts`.
    pub fn on(hosts: &'static [&'static str]) -> Started {
        Started { hosts, knobs: Vec::with_capacity(hosts.len()), primary: None, pinned: false }
    }
}

/// Starts a plain simulated server (`crate::server`: Redis' keys, the
/// lease table) on each of `hosts`.
pub(crate) fn start_servers(
    hosting: &mut Hosting<'_, '_>,
    hosts: &'static [&'static str],
) -> Started {
    let mut started = Started::on(hosts);
    for &host in hosts {
        let state = Rc::new(std::cell::RefCell::new(ServerState::new(false)));
        let knobs = Knobs::new(hosting.seed(), hosting.persistent);
        hosting.host(&mut started, host, knobs, move |knobs| serve(state.clone(), knobs));
    }
    started
}

/// An operation of a session under way.
pub(crate) type Pending<'a, T> = Pin<Box<dyn Future<Output = Outcome<T>> + 'a>>;

/// One client's session of a service's recipe: what the client holds of
/// it (etcd's leases), over the connections every client has ([`Link`]).
pub(crate) trait SimSession: std::fmt::Debug {
    fn acquire<'a>(
        &'a mut self,
        link: &'a mut Link,
        key: &'a str,
        ttl_ms: u64,
    ) -> Pending<'a, Grant>;

    fn release<'a>(
        &'a mut self,
        link: &'a mut Link,
        key: &'a str,
        grant: &'a Grant,
    ) -> Pending<'a, ()>;

    fn renew<'a>(
        &'a mut self,
        link: &'a mut Link,
        key: &'a str,
        grant: &'a Grant,
        ttl_ms: u64,
    ) -> Pending<'a, ()>;

    /// A new session after an unknown outcome: what the old one held is
    /// forgotten (its leases expire by themselves, as a crashed client's).
    fn reset(&mut self) {}

    /// The watch wake-ups since last asked, for a recipe whose waiters wait
    /// on a watch ([`lockcheck_workloads::LockClient::take_wake_ups`]).
    fn take_wake_ups(&mut self) -> Option<u64> {
        None
    }
}

/// The lease a grant carries, as the recipes that name their value by it
/// take it (none: the empty value, which matches no lock).
pub(crate) fn lease_of(grant: &Grant) -> String {
    grant.lease.clone().unwrap_or_default()
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
    pub(crate) name: String,
    pub(crate) grants: u64,
    /// The lock hosts' connections: one, or Redlock's five.
    pub(crate) instances: Vec<Connection>,
    /// This client's clock, ahead of simulated time by this much (a skew
    /// nemesis moves it); only a recipe that trusts the client's clock reads it.
    pub(crate) clock_offset_ms: std::rc::Rc<std::cell::Cell<i64>>,
    /// The client's pause point, which its connections stall at: a client
    /// library with threads of its own (ZooKeeper's heartbeats) has them
    /// stopped too while the client stalls ([`lockcheck_workloads::Freezer`]).
    pub(crate) stall: lockcheck_workloads::Stall,
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
