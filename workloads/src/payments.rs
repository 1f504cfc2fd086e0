//! The double charge, end to end: orders go into a queue that delivers at
//! least once, and workers take them, charge each order and acknowledge
//! the job. A worker that stalls past the queue's visibility timeout (and
//! its lock's lease, when it takes one) finds its job redelivered to
//! another, and both charge: unless something downstream makes the effect
//! happen once. [`Protection`] says what a run relies on; [`Payments`] is
//! the transport each world supplies (the queue, the payment provider and
//! the payments table); [`run_payments`] is the worker, written once.
//!
//! The effect of a job is its `charge`: at the provider (an HTTP service
//! with idempotency keys, [`crate::provider`]) or, for the protections that
//! rely on a table of our own, a row of the payments [`Ledger`]. The
//! history records every step (`enqueue`, `deliver`, `charge`, `ack`;
//! histories/README.md), and `exactly-once` counts each order's effects.

use std::collections::BTreeMap;
use std::time::Duration;

use lockcheck_checker::{EventType, Function, Process};
use rand::rngs::SmallRng;
use rand::Rng;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::client::{LockClient, Outcome};
pub use crate::protection::{LedgerMode, Protection};
pub use crate::queue::Delivery;
use crate::recorder::SharedRecorder;
use crate::stall::{Stall, StallPoint};
use crate::workload::{pause, ClientPlan, WorkloadOptions};

/// The payments table: one row per charge, as [`LedgerMode`] allows.
/// Pure, so that both worlds' tables are held to the same answers.
#[derive(Debug, Clone)]
pub struct Ledger {
    mode: LedgerMode,
    /// Per order: its row's id and the highest token it took.
    rows: BTreeMap<String, (String, Option<u64>)>,
    /// Rows inserted, for the ids of an append.
    inserted: u64,
}

impl Ledger {
    pub fn new(mode: LedgerMode) -> Ledger {
        Ledger { mode, rows: BTreeMap::new(), inserted: 0 }
    }

    /// Charges `order`: the row's id, or why not (`stale-fence`, `exists`,
    /// `not-pending`).
    pub fn charge(&mut self, order: &str, fence: Option<u64>) -> Result<String, &'static str> {
        let row = |ledger: &mut Ledger| {
            ledger.inserted += 1;
            format!("row-{}", ledger.inserted)
        };
        match self.mode {
            LedgerMode::Append => Ok(row(self)),
            LedgerMode::Unique | LedgerMode::Conditional => {
                if self.rows.contains_key(order) {
                    return Err(if self.mode == LedgerMode::Unique {
                        "exists"
                    } else {
                        "not-pending"
                    });
                }
                let id = row(self);
                self.rows.insert(order.to_string(), (id.clone(), fence));
                Ok(id)
            }
            LedgerMode::Fenced => {
                if let Some((id, taken)) = self.rows.get_mut(order) {
                    if let (Some(token), Some(highest)) = (fence, *taken) {
                        if token < highest {
                            return Err("stale-fence");
                        }
                    }
                    *taken = fence.max(*taken);
                    return Ok(id.clone());
                }
                let id = row(self);
                self.rows.insert(order.to_string(), (id.clone(), fence));
                Ok(id)
            }
        }
    }
}

/// A charge's answer: the provider's status, the charge's id (the row's,
/// for the payments table), and whether it replays an earlier answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Charged {
    pub status: u16,
    pub charge: Option<String>,
    pub replayed: bool,
}

/// What a worker sends to charge an order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChargeOrder {
    pub order: String,
    pub amount: u64,
    /// The provider's idempotency key, when the run relies on one.
    pub idempotency_key: Option<String>,
    /// The token of the order's lock, for a fenced payments table.
    pub fence: Option<u64>,
}

impl ChargeOrder {
    /// The request body the provider gets, a JSON text.
    pub fn body(&self) -> String {
        json!({ "order": self.order, "amount": self.amount }).to_string()
    }
}

/// The queue, the provider and the payments table, as one worker reaches
/// them. Every call ends within the world's deadline, as `Info` when its
/// outcome is unknown.
#[allow(async_fn_in_trait)]
pub trait Payments {
    /// Puts a job on the queue: its message id.
    async fn enqueue(&mut self, data: &str) -> Outcome<u64>;
    /// The next visible job, invisible to others for `visibility_ms`;
    /// `None` when there is none.
    async fn deliver(&mut self, visibility_ms: u64) -> Outcome<Option<Delivery>>;
    /// Acknowledges a job: `Fail("gone")` when it was acknowledged before.
    async fn ack(&mut self, message: u64) -> Outcome<()>;
    /// Charges an order at the provider, or in the payments table when
    /// `ledger` says so. A refusal is `Fail` with its reason (`in-flight`,
    /// `key-mismatch`, `declined`, `stale-fence`, `exists`, `not-pending`).
    async fn charge(&mut self, order: &ChargeOrder, ledger: bool) -> Outcome<Charged>;
    /// New sessions after an `Info`.
    async fn reset(&mut self) {}
}

/// A world without the payments services: every call fails, so that a run
/// that asks for them says so rather than hangs.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoPayments;

impl Payments for NoPayments {
    async fn enqueue(&mut self, _: &str) -> Outcome<u64> {
        Outcome::Fail("unavailable".into())
    }
    async fn deliver(&mut self, _: u64) -> Outcome<Option<Delivery>> {
        Outcome::Fail("unavailable".into())
    }
    async fn ack(&mut self, _: u64) -> Outcome<()> {
        Outcome::Fail("unavailable".into())
    }
    async fn charge(&mut self, _: &ChargeOrder, _: bool) -> Outcome<Charged> {
        Outcome::Fail("unavailable".into())
    }
}

/// The queue every worker takes jobs from, as the history names it.
pub const QUEUE: &str = "orders";
/// Where a provider charge lands, as the history names it.
pub const PROVIDER: &str = "provider";
/// Where a table charge lands.
pub const TABLE: &str = "payments";

/// A job not acknowledged within this many TTLs is delivered again: the
/// visibility timeout equals the lock's lease, so a stall past one is
/// past the other.
const VISIBILITY_IN_TTLS: u64 = 1;
/// An order must be charged within this many visibility timeouts of its
/// enqueue (a redelivery or two, and the work), or it counts as never done.
const DUE_IN_VISIBILITIES: u64 = 8;

/// How often a keyed worker sends a redelivered order with a recomputed
/// amount.
const RECOMPUTED_CHANCE: f64 = 0.5;
/// How many times a keyed charge is tried, and how long a worker waits
/// between tries.
const CHARGE_ATTEMPTS: u32 = 4;
const RETRY_AFTER_MS: u64 = 100;

/// Whether a charge refused with `error` settles its job, which the worker
/// then acknowledges: the order is done already (`exists`, `not-pending`,
/// a key's replay refused as `key-mismatch`), can never be done
/// (`declined`, `bad-request`), or is another worker's now (`stale-fence`).
/// A refusal that says nothing happened yet and a retry may succeed (the
/// service down, a key still in flight, a provider's 503) leaves the job
/// unacknowledged, to be delivered again: a worker that acknowledged it
/// would lose the order.
pub fn settles(error: &str) -> bool {
    !matches!(error, "unavailable" | "in-flight" | "refused") && !error.starts_with("db-error")
}

/// The payments workload for one worker: enqueue an order, take a job,
/// charge it (under its lock when the protection takes one), acknowledge
/// it; over and over until `plan.until`, protected as
/// `options.protection` says. After an `info` the worker goes
/// on as a new process with new sessions, as every workload's client does.
pub async fn run_payments<C: LockClient, P: Payments>(
    client: &mut C,
    payments: &mut P,
    plan: &ClientPlan,
    options: &WorkloadOptions,
    mut rng: SmallRng,
    recorder: &SharedRecorder,
    stall: &Stall,
) {
    let protection = options.protection;
    let mut process = i64::from(plan.logical);
    stall.set_process(process);
    let visibility_ms = options.ttl_ms * VISIBILITY_IN_TTLS;
    let mut orders = 0u64;
    let record = |process: i64, event_type, f, key: &str, value, error: Option<&str>| {
        recorder.lock().expect("the recorder is never poisoned").record(
            Process::Client(process),
            event_type,
            f,
            Some(key),
            value,
            error,
        );
    };
    // Records a completion; `false` when it was `info` (the worker is then a
    // new process, with new sessions).
    macro_rules! complete {
        ($f:expr, $key:expr, $outcome:expr) => {{
            match $outcome {
                Outcome::Ok(value) => {
                    record(process, EventType::Ok, $f, $key, value, None);
                    true
                }
                Outcome::Fail(error) => {
                    record(process, EventType::Fail, $f, $key, Value::Null, Some(&error));
                    true
                }
                Outcome::Info(error) => {
                    record(process, EventType::Info, $f, $key, Value::Null, Some(&error));
                    process += i64::from(plan.clients);
                    stall.set_process(process);
                    client.reset().await;
                    payments.reset().await;
                    false
                }
            }
        }};
    }
    while tokio::time::Instant::now() < plan.until {
        stall.set_holding(false);
        pause(&mut rng, options.think_ms).await;
        // A new order, now and then, so that the queue never runs dry and
        // never floods.
        if orders == 0 || rng.gen_bool(0.5) {
            orders += 1;
            let order = format!("order-{}-{orders}", plan.logical);
            let due_ms = visibility_ms * DUE_IN_VISIBILITIES;
            record(
                process,
                EventType::Invoke,
                Function::Enqueue,
                QUEUE,
                json!({ "data": order, "due_ms": due_ms }),
                None,
            );
            let outcome = payments.enqueue(&order).await.map(|id| json!({ "message": id }));
            if !complete!(Function::Enqueue, QUEUE, outcome) {
                continue;
            }
        }
        record(
            process,
            EventType::Invoke,
            Function::Deliver,
            QUEUE,
            json!({ "visibility_ms": visibility_ms }),
            None,
        );
        let job = match payments.deliver(visibility_ms).await {
            Outcome::Ok(Some(job)) => {
                let value = json!({
                    "data": job.data, "message": job.message,
                    "delivery": job.delivery, "redelivered": job.redelivered,
                });
                complete!(Function::Deliver, QUEUE, Outcome::Ok(value));
                job
            }
            Outcome::Ok(None) => {
                complete!(Function::Deliver, QUEUE, Outcome::<Value>::Fail("empty".into()));
                continue;
            }
            Outcome::Fail(error) => {
                complete!(Function::Deliver, QUEUE, Outcome::<Value>::Fail(error));
                continue;
            }
            Outcome::Info(error) => {
                complete!(Function::Deliver, QUEUE, Outcome::<Value>::Info(error));
                continue;
            }
        };
        // The job's order lock, when the protection takes one.
        let order = job.data.clone();
        let grant = if protection.locks() {
            record(
                process,
                EventType::Invoke,
                Function::Acquire,
                &order,
                json!({ "ttl_ms": options.ttl_ms }),
                None,
            );
            match client.acquire(&order, options.ttl_ms).await {
                Outcome::Ok(grant) => {
                    let value = grant.fence.map_or(Value::Null, |fence| json!({ "fence": fence }));
                    complete!(Function::Acquire, &order, Outcome::Ok(value));
                    stall.set_holding(true);
                    Some(grant)
                }
                // Another worker has the order: leave the job to it (not
                // acknowledged: should that worker die, it comes back).
                Outcome::Fail(error) => {
                    complete!(Function::Acquire, &order, Outcome::<Value>::Fail(error));
                    continue;
                }
                Outcome::Info(error) => {
                    complete!(Function::Acquire, &order, Outcome::<Value>::Info(error));
                    continue;
                }
            }
        } else {
            None
        };
        // The classic stall: the job (and its lock) in hand, nothing done.
        stall.strike(StallPoint::AfterGrant).await;
        // A redelivered job's amount is now and then recomputed (a price
        // that changed since the order): the same key with another body,
        // which a provider must refuse rather than answer with the first
        // charge.
        let recomputed = protection.keyed() && job.redelivered && rng.gen_bool(RECOMPUTED_CHANCE);
        let charge = ChargeOrder {
            order: order.clone(),
            amount: 100 * (1 + job.message % 50) + u64::from(recomputed),
            idempotency_key: protection.keyed().then(|| order.clone()),
            fence: grant.as_ref().and_then(|grant| grant.fence),
        };
        let ledger = protection.ledger().is_some();
        let target = if ledger { TABLE } else { PROVIDER };
        let mut invoke = json!({ "data": order, "amount": charge.amount });
        if let Some(key) = &charge.idempotency_key {
            invoke["idempotency_key"] = json!(key);
        }
        if ledger {
            if let Some(fence) = charge.fence {
                invoke["fence"] = json!(fence);
            }
        } else {
            invoke["body"] = json!(charge.body());
        }
        // With an idempotency key a charge whose outcome is unknown, or
        // that found the key in flight, is retried: safe retries are what
        // keys are for. Without one, a worker never retries a charge.
        let mut attempt = 1;
        let charged = loop {
            record(process, EventType::Invoke, Function::Charge, target, invoke.clone(), None);
            let outcome = payments.charge(&charge, ledger).await.map(|charged| {
                let mut value = json!({ "status": charged.status, "replayed": charged.replayed });
                if let Some(id) = charged.charge {
                    value["charge"] = json!(id);
                }
                value
            });
            let again = protection.keyed()
                && attempt < CHARGE_ATTEMPTS
                && match &outcome {
                    Outcome::Info(_) => true,
                    Outcome::Fail(error) => error == "in-flight",
                    Outcome::Ok(_) => false,
                };
            let settled = match &outcome {
                Outcome::Fail(error) => settles(error),
                Outcome::Ok(_) | Outcome::Info(_) => true,
            };
            let known = complete!(Function::Charge, target, outcome);
            if !again {
                break known && settled;
            }
            attempt += 1;
            tokio::time::sleep(Duration::from_millis(RETRY_AFTER_MS)).await;
        };
        // Not acknowledged unless charged or settled: the job comes back.
        if !charged {
            continue;
        }
        stall.strike(StallPoint::AfterWrite).await;
        record(
            process,
            EventType::Invoke,
            Function::Ack,
            QUEUE,
            json!({ "message": job.message, "delivery": job.delivery }),
            None,
        );
        let outcome = payments.ack(job.message).await.map(|()| Value::Null);
        if !complete!(Function::Ack, QUEUE, outcome) {
            continue;
        }
        if let Some(grant) = grant {
            stall.strike(StallPoint::BeforeRelease).await;
            stall.set_holding(false);
            let value = grant.fence.map_or(Value::Null, |fence| json!({ "fence": fence }));
            record(process, EventType::Invoke, Function::Release, &order, value, None);
            let outcome = client.release(&order, &grant).await.map(|()| Value::Null);
            complete!(Function::Release, &order, outcome);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_settles_its_job_only_when_nothing_is_left_to_try() {
        for done in
            ["exists", "not-pending", "key-mismatch", "declined", "bad-request", "stale-fence"]
        {
            assert!(settles(done), "{done}");
        }
        for retry in ["unavailable", "in-flight", "refused", "db-error:40001"] {
            assert!(!settles(retry), "{retry}");
        }
    }

    #[test]
    fn every_protection_reads_back_by_its_name() {
        for protection in Protection::ALL {
            assert_eq!(Protection::parse(protection.name()), Some(protection));
        }
        assert!(Protection::unknown("locks").contains("idempotency-key"));
    }

    #[test]
    fn a_unique_or_conditional_table_takes_one_charge_per_order() {
        for (mode, refusal) in
            [(LedgerMode::Unique, "exists"), (LedgerMode::Conditional, "not-pending")]
        {
            let mut ledger = Ledger::new(mode);
            assert_eq!(ledger.charge("order-1", None), Ok("row-1".to_string()));
            assert_eq!(ledger.charge("order-1", None), Err(refusal));
            assert_eq!(ledger.charge("order-2", None), Ok("row-2".to_string()));
        }
    }

    #[test]
    fn an_append_table_takes_every_charge_as_a_new_row() {
        let mut ledger = Ledger::new(LedgerMode::Append);
        assert_eq!(ledger.charge("order-1", None), Ok("row-1".to_string()));
        assert_eq!(ledger.charge("order-1", None), Ok("row-2".to_string()));
    }

    #[test]
    fn a_fenced_table_keeps_one_row_and_refuses_an_older_token() {
        let mut ledger = Ledger::new(LedgerMode::Fenced);
        assert_eq!(ledger.charge("order-1", Some(5)), Ok("row-1".to_string()));
        assert_eq!(ledger.charge("order-1", Some(6)), Ok("row-1".to_string()));
        assert_eq!(ledger.charge("order-1", Some(5)), Err("stale-fence"));
        assert_eq!(ledger.charge("order-2", Some(1)), Ok("row-2".to_string()));
    }
}
