//! One logical client driven through its workload: the one entry point
//! both worlds call ([`run_client`]), which hands the client to the
//! workload its options name.

use rand::rngs::SmallRng;

use crate::client::LockClient;
use crate::cron::run_cron;
use crate::election::run_election;
use crate::lock_order::run_lock_order;
use crate::payments::{run_payments, Payments};
use crate::recorder::SharedRecorder;
use crate::stall::Stall;
use crate::storage::ResourceStore;
use crate::workload::{run_locking, run_unlocked, ClientPlan, Workload, WorkloadOptions};

/// Runs one logical client until `plan.until`, recording every operation:
/// its locks through `client`, its writes and reads through `store`, the
/// payments workload's queue and charges through `payments`.
#[allow(clippy::too_many_arguments)]
pub async fn run_client<C: LockClient, S: ResourceStore, P: Payments>(
    client: &mut C,
    store: &mut S,
    payments: &mut P,
    plan: &ClientPlan,
    options: &WorkloadOptions,
    rng: SmallRng,
    recorder: &SharedRecorder,
    stall: &Stall,
) {
    match options.workload {
        Workload::Cron | Workload::CronRelease => {
            run_cron(client, store, payments, plan, options, rng, recorder, stall).await
        }
        Workload::Mutex | Workload::FencedWrite => {
            run_locking(client, store, plan, options, rng, recorder, stall).await
        }
        Workload::UnlockedWrite => run_unlocked(store, plan, options, rng, recorder, stall).await,
        Workload::Payments => {
            run_payments(client, payments, plan, options, rng, recorder, stall).await
        }
        Workload::LockOrder | Workload::LockOrderOpposite => {
            run_lock_order(client, plan, options, rng, recorder, stall).await
        }
        Workload::Election => {
            run_election(client, store, plan, options, rng, recorder, stall).await
        }
    }
}
