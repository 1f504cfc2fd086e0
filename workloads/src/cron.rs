//! The cron workloads: every client is a replica of a service whose
//! scheduler fires a daily job, and the job must run once a day. Under the
//! day's lock (the default), with no lock at all (`--protection none`:
//! every replica runs it), or with no lock and an effect the payments
//! table takes once per day (`--protection unique`).

use std::time::Duration;

use lockcheck_checker::{EventType, Function, Process};
use rand::rngs::SmallRng;
use rand::Rng;
use serde_json::{json, Value};

use crate::client::{LockClient, Outcome};
use crate::payments::{ChargeOrder, Payments};
use crate::protection::Protection;
use crate::recorder::SharedRecorder;
use crate::stall::{Stall, StallPoint};
use crate::storage::ResourceStore;
use crate::workload::{reset, ClientPlan, Workload, WorkloadOptions};

/// A simulated day of the cron workload, in TTLs.
const DAY_IN_TTLS: u64 = 5;

/// The cron workload: fire once a simulated day, a little late (up to half a
/// TTL: clock skew, a slow start), and run the job if the day's lock is ours.
/// Only the `run` is recorded; the lock and the job's write are its insides.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn run_cron<C: LockClient, S: ResourceStore, P: Payments>(
    client: &mut C,
    store: &mut S,
    payments: &mut P,
    plan: &ClientPlan,
    options: &WorkloadOptions,
    mut rng: SmallRng,
    recorder: &SharedRecorder,
    stall: &Stall,
) {
    let (job, output, ttl_ms) = (&options.locks[0], &options.resources[0], options.ttl_ms);
    let start = tokio::time::Instant::now();
    let mut process = i64::from(plan.logical);
    stall.set_process(process);
    for day in 0u64.. {
        let late = Duration::from_millis(rng.gen_range(0..=ttl_ms / 2));
        let fire_at = start + Duration::from_millis(day * DAY_IN_TTLS * ttl_ms) + late;
        if fire_at >= plan.until {
            break;
        }
        tokio::time::sleep_until(fire_at).await;
        let unit = format!("day-{day}");
        let record = |process: i64, event_type, value, error: Option<&str>| {
            recorder.lock().expect("the recorder is never poisoned").record(
                Process::Client(process),
                event_type,
                Function::Run,
                Some(job),
                value,
                error,
            );
        };
        record(process, EventType::Invoke, json!({ "data": unit }), None);
        let lock = format!("{job}:{unit}");
        let report = format!("{output}:{unit}");
        let outcome = match options.protection {
            // No lock: every replica runs the job (three pods, three emails).
            Protection::None | Protection::Append => {
                stall.strike(StallPoint::AfterGrant).await;
                store.write(&report, None, &format!("{unit} by {process}")).await
            }
            // No lock: the job's effect is a row the table takes once per
            // unit (`UNIQUE (job, day)`, or `pending → sent`); a replica that
            // finds it taken did not run it.
            Protection::Unique | Protection::Conditional => {
                stall.strike(StallPoint::AfterGrant).await;
                let effect = ChargeOrder {
                    order: lock.clone(),
                    amount: 1,
                    idempotency_key: None,
                    fence: None,
                };
                payments.charge(&effect, true).await.map(|_| ())
            }
            // Refused before a run starts (`Protection::refuses`): the cron
            // workloads have no provider; run under the lock.
            Protection::Lock | Protection::Fenced | Protection::IdempotencyKey => {
                locked(client, store, options, stall, &lock, &report, process).await
            }
        };
        match outcome {
            Outcome::Ok(()) => record(process, EventType::Ok, Value::Null, None),
            Outcome::Fail(error) => record(process, EventType::Fail, Value::Null, Some(&error)),
            Outcome::Info(error) => {
                record(process, EventType::Info, Value::Null, Some(&error));
                process += i64::from(plan.clients);
                stall.set_process(process);
                reset(client, store).await;
                payments.reset().await;
            }
        }
    }
}

/// A day's run under the day's lock, as the cron workloads take it: the
/// job runs if the lock is ours (and, for cron-release, the lock is then
/// released: the bug).
async fn locked<C: LockClient, S: ResourceStore>(
    client: &mut C,
    store: &mut S,
    options: &WorkloadOptions,
    stall: &Stall,
    lock: &str,
    report: &str,
    process: i64,
) -> Outcome<()> {
    let unit = report.rsplit(':').next().unwrap_or(report);
    match client.acquire(lock, options.ttl_ms).await {
        Outcome::Ok(grant) => {
            stall.strike(StallPoint::AfterGrant).await;
            let fence = if options.send_fence { grant.fence } else { None };
            // Each day's run writes that day's report.
            let outcome = store.write(report, fence, &format!("{unit} by {process}")).await;
            stall.strike(StallPoint::AfterWrite).await;
            if matches!(outcome, Outcome::Ok(())) && options.workload == Workload::CronRelease {
                // The bug: a late replica now finds the lock free.
                stall.strike(StallPoint::BeforeRelease).await;
                let _ = client.release(lock, &grant).await;
            }
            outcome
        }
        Outcome::Fail(error) if error == "busy" => Outcome::Fail("skipped".to_string()),
        other => other.map_unit(),
    }
}
