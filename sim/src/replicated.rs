//! A single Redis with an asynchronous replica: the simulated service that
//! keeps a single Redis' locks when the failover fault is on (the hosts of
//! every other run stay as they were, and so do their histories). The
//! pair's machinery is `crate::host`'s [`ReplicaSet`]; its clients run the
//! single Redis' recipes (`crate::redis_lock`), following the primary.

use lockcheck_workloads::{Backend, FaultKind, Service};

use crate::host::TICK;
use crate::host::{serve_replicated, Knobs, ReplicaSet};
use crate::redis_lock::OneRedis;
use crate::service::{Hosting, SimService, SimSession, Started};

/// A single Redis with an async replica (the failover fault): the primary
/// first, then the replica.
pub const REPLICATED_HOSTS: [&str; 2] = ["redis", "redis-replica"];

/// The replicated pair as a simulated service.
pub(crate) struct ReplicatedRedis;

impl SimService for ReplicatedRedis {
    fn keeps(&self, service: Service, faults: &[FaultKind]) -> bool {
        service == Service::Redis { instances: 1 } && faults.contains(&FaultKind::Failover)
    }

    /// The one lock host the clients and the fault schedule know: the
    /// primary's name before any failover. The clients follow the primary
    /// wherever it goes; the nemesis strikes whichever host is the primary.
    fn lock_hosts(&self, service: Service) -> &'static [&'static str] {
        OneRedis.lock_hosts(service)
    }

    /// A write reaches the replica two ticks to a quarter of the TTL late.
    fn start(&self, hosting: &mut Hosting<'_, '_>) -> Started {
        let lag_ms = 2 * TICK.as_millis() as u64;
        let set = ReplicaSet::new(REPLICATED_HOSTS, (lag_ms, (hosting.ttl_ms / 4).max(lag_ms)));
        let mut started = Started::on(&REPLICATED_HOSTS);
        for (me, &host) in REPLICATED_HOSTS.iter().enumerate() {
            let (set, knobs) = (set.clone(), Knobs::new(hosting.seed(), hosting.persistent));
            hosting.host(&mut started, host, knobs, move |knobs| {
                serve_replicated(me, set.clone(), knobs)
            });
        }
        started.primary = Some(set.primary.clone());
        started
    }

    fn session(&self, backend: Backend, fencing: bool) -> Option<Box<dyn SimSession>> {
        OneRedis.session(backend, fencing)
    }
}
