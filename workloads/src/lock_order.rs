//! The lock-ordering workloads (being written).

use rand::rngs::SmallRng;

use crate::client::LockClient;
use crate::recorder::SharedRecorder;
use crate::stall::Stall;
use crate::workload::{ClientPlan, WorkloadOptions};

pub(crate) async fn run_lock_order<C: LockClient>(
    _client: &mut C,
    _plan: &ClientPlan,
    _options: &WorkloadOptions,
    _rng: SmallRng,
    _recorder: &SharedRecorder,
    _stall: &Stall,
) {
}
