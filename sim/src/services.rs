//! Every simulated lock service, one line each: the one table the
//! simulator asks which service keeps a backend's locks. A service is a
//! module of its own implementing [`SimService`]; adding one is its file
//! and its line here.

use lockcheck_workloads::{FaultKind, Service};

use crate::service::SimService;

/// Every simulated service, one line each. Exactly one keeps the locks of
/// each simulated backend in a run, whatever its faults (a test holds it).
const SERVICES: [&dyn SimService; 10] = [
    &crate::redis_lock::OneRedis,
    &crate::replicated::ReplicatedRedis,
    &crate::redlock::FiveRedis,
    &crate::lease_table::LeaseDatabase,
    &crate::etcd::EtcdCluster,
    &crate::consul::ConsulServer,
    &crate::zookeeper::ZooKeeperEnsemble,
    &crate::primary_replica::Pair(crate::primary_replica::Shipping::Async),
    &crate::primary_replica::Pair(crate::primary_replica::Shipping::Sync),
    &crate::leaderless::Leaderless,
];

/// The service that keeps `service`'s locks in a run with `faults`, if the
/// simulator has one.
pub(crate) fn keeping(service: Service, faults: &[FaultKind]) -> Option<&'static dyn SimService> {
    SERVICES.into_iter().find(|candidate| candidate.keeps(service, faults))
}

#[cfg(test)]
mod tests {
    use lockcheck_workloads::{Backend, Catalogue, FaultKind, World};

    use super::{keeping, SERVICES};
    use crate::Simulator;

    /// The fault sets that choose between services: none, and each fault a
    /// backend takes alone.
    fn fault_sets(backend: Backend) -> Vec<Vec<FaultKind>> {
        let mut sets = vec![Vec::new()];
        sets.extend(Simulator::faults(backend).into_iter().map(|fault| vec![fault]));
        sets
    }

    #[test]
    fn exactly_one_service_keeps_and_runs_each_simulated_backend_whatever_its_faults() {
        for backend in Backend::all_in(World::Simulated) {
            for faults in fault_sets(backend) {
                let keepers: Vec<usize> = (0..SERVICES.len())
                    .filter(|&at| SERVICES[at].keeps(backend.service(), &faults))
                    .collect();
                assert_eq!(
                    keepers.len(),
                    1,
                    "{} under {faults:?}: {keepers:?}",
                    backend.sim_name()
                );
                let service = keeping(backend.service(), &faults);
                let session = service.and_then(|service| service.session(backend, true));
                assert!(session.is_some(), "{} runs no session", backend.sim_name());
                let hosts = service.map(|service| service.lock_hosts(backend.service()));
                assert!(hosts.is_some_and(|hosts| !hosts.is_empty()), "{}", backend.sim_name());
            }
        }
    }

    #[test]
    fn a_recipe_of_the_real_world_only_has_no_simulated_session() {
        let simulated = |recipe| Backend::all_in(World::Simulated).any(|b| b.recipe() == recipe);
        for backend in Backend::ALL.into_iter().filter(|backend| !simulated(backend.recipe())) {
            let service = keeping(backend.service(), &[]);
            let session = service.and_then(|service| service.session(backend, true));
            assert!(session.is_none(), "{} has a simulated session", backend.real_name());
        }
    }
}
