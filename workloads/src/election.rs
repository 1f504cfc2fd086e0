//! The leader-election workload (being written).

use rand::rngs::SmallRng;

use crate::client::LockClient;
use crate::recorder::SharedRecorder;
use crate::stall::Stall;
use crate::storage::ResourceStore;
use crate::workload::{ClientPlan, WorkloadOptions};

pub(crate) async fn run_election<C: LockClient, S: ResourceStore>(
    _client: &mut C,
    _store: &mut S,
    _plan: &ClientPlan,
    _options: &WorkloadOptions,
    _rng: SmallRng,
    _recorder: &SharedRecorder,
    _stall: &Stall,
) {
}
