//! The leader-election workload: every client is a candidate for one
//! election, the first lock's.
//!
//! A candidate campaigns: each attempt is a recorded `acquire` that says,
//! besides its TTL, the bound within which a new leader must be elected
//! once the leader is gone (`elect_within_ms`, [`elect_within_ms`]). A
//! recipe whose acquire waits in line (etcd's campaign) waits inside that
//! one acquire; a candidate refused (`fail busy`) thinks a while and
//! campaigns again.
//!
//! Granted, it leads, the grant's token as its term, for a tenure of more
//! than a TTL: it does a unit of work (a recorded `write` to the first
//! resource, stamped with its term as the fence when fencing is on), and
//! every third of a TTL renews its lease (a recorded `renew`) and works
//! again. A renewal that fails deposes it (a recorded `release`, and it
//! campaigns again); one of unknown outcome ends the process, and the
//! client goes on as a new one; a write the fenced storage refuses as
//! stale tells it another leads, and it steps down too. At its tenure's
//! end it resigns (a recorded `release`).
//!
//! The pause strikes where it strikes the mutex workload's holders: after
//! the grant or a renewal, before the work (`after-grant`), after the work
//! (`after-write`), before a renewal and before the resignation. So a
//! leader stalled mid-tenure past its lease goes on believing it leads
//! while another is elected (mutual exclusion), and its late work carries
//! its old term, which fenced storage refuses (resource safety).

use std::time::Duration;

use lockcheck_checker::{EventType, Function};
use rand::rngs::SmallRng;
use serde_json::{json, Value};

use crate::client::{Grant, LockClient, Outcome};
use crate::recorder::{record_client, SharedRecorder};
use crate::stall::{Stall, StallPoint};
use crate::storage::ResourceStore;
use crate::workload::{
    acquire_value, grant_value, pause, reset, uniform, versioned, with_woken, ClientPlan,
    WorkloadOptions,
};

/// The bound within which a new leader must be elected after the leader's
/// end (its resignation, or its lease running out when it died), as each
/// campaign records it: two TTLs and the campaign's retry interval. One
/// TTL for the lock service to notice a lease that ran out and let the key
/// go (a lease checked by a timer, a new consensus leader restarting the
/// lease's clock, a campaign's request in flight under its deadline of a
/// quarter TTL when the key goes); one more for the campaign that then
/// finds the key free to be granted, or for a waiter in line to be woken
/// and answered; and the longest a refused candidate thinks before it
/// campaigns again.
pub fn elect_within_ms(options: &WorkloadOptions) -> u64 {
    options.ttl_ms.saturating_mul(2).saturating_add(options.think_ms.1)
}

/// A campaign's recorded value: the acquire's, and the election's bound.
fn campaign_value(options: &WorkloadOptions) -> Value {
    let mut value = acquire_value(options);
    value["elect_within_ms"] = json!(elect_within_ms(options));
    value
}

/// How the leader's last step went.
enum Step {
    /// It leads on.
    Leads,
    /// It was deposed, or resigns: a recorded release follows.
    StepsDown,
    /// An outcome unknown: the process is over; the client goes on as a
    /// new one (already reset).
    Crashed,
}

#[allow(clippy::too_many_lines)]
pub(crate) async fn run_election<C: LockClient, S: ResourceStore>(
    client: &mut C,
    store: &mut S,
    plan: &ClientPlan,
    options: &WorkloadOptions,
    mut rng: SmallRng,
    recorder: &SharedRecorder,
    stall: &Stall,
) {
    let (Some(name), Some(resource)) = (options.locks.first(), options.resources.first()) else {
        return;
    };
    let ttl_ms = options.ttl_ms;
    // Renewals come every third of a TTL, or as the session's keepalive.
    let every = Duration::from_millis(options.keepalive_ms.unwrap_or(ttl_ms / 3).max(1));
    let mut process = i64::from(plan.logical);
    stall.set_process(process);
    let mut writes = 0u64;
    let record = |process: i64, event_type, f, key: &str, value, error: Option<&str>| {
        record_client(recorder, process, event_type, f, key, value, error)
    };
    // Records a completion, with `note` as the value of a `fail` or `info`;
    // on `info` the process is finished and the client goes on as a new
    // one (the caller resets).
    let complete_noting =
        |process: &mut i64, f: Function, key: &str, outcome: &Outcome<Value>, note: Value| {
            match outcome {
                Outcome::Ok(value) => record(*process, EventType::Ok, f, key, value.clone(), None),
                Outcome::Fail(error) => {
                    record(*process, EventType::Fail, f, key, note, Some(error))
                }
                Outcome::Info(error) => {
                    record(*process, EventType::Info, f, key, note, Some(error));
                    *process += i64::from(plan.clients);
                    stall.set_process(*process);
                }
            }
        };
    let complete = |process: &mut i64, f: Function, key: &str, outcome: &Outcome<Value>| {
        complete_noting(process, f, key, outcome, Value::Null)
    };
    while tokio::time::Instant::now() < plan.until {
        stall.set_holding(false);
        // ---- Campaign ----
        record(process, EventType::Invoke, Function::Acquire, name, campaign_value(options), None);
        let outcome = client.acquire(name, ttl_ms).await;
        let woken = client.take_wake_ups();
        let with_woken = |value: Value| with_woken(value, woken);
        let grant: Grant = match outcome {
            Outcome::Ok(grant) => {
                let value = with_woken(grant_value(&grant));
                complete(&mut process, Function::Acquire, name, &Outcome::Ok(value));
                stall.set_holding(true);
                grant
            }
            Outcome::Fail(error) => {
                let (note, outcome) = (with_woken(Value::Null), Outcome::Fail(error));
                complete_noting(&mut process, Function::Acquire, name, &outcome, note);
                // Refused: think a while, and campaign again.
                pause(&mut rng, options.think_ms).await;
                continue;
            }
            Outcome::Info(error) => {
                let (note, outcome) = (with_woken(Value::Null), Outcome::Info(error));
                complete_noting(&mut process, Function::Acquire, name, &outcome, note);
                reset(client, store).await;
                continue;
            }
        };
        // ---- Lead, with the grant's token as the term ----
        let term = grant.fence;
        let tenure = Duration::from_millis(ttl_ms) + uniform(&mut rng, options.hold_ms);
        // It steps down at the test's end at the latest (a leader granted
        // after it still works once).
        let now = tokio::time::Instant::now();
        let tenure_end = (now + tenure).min(plan.until.max(now));
        stall.holds_until(tenure_end);
        let mut step = Step::Leads;
        loop {
            // A unit of work, stamped with the term. The classic GC pause
            // strikes before it: after the grant, or after a renewal.
            stall.strike(StallPoint::AfterGrant).await;
            writes += 1;
            let term_name = term.map_or_else(|| "?".to_string(), |term| term.to_string());
            let data = format!("{name} term {term_name} by {process} #{writes}");
            let fence = if options.send_fence { term } else { None };
            let value = match fence {
                Some(fence) => json!({ "fence": fence, "data": data }),
                None => json!({ "data": data }),
            };
            record(process, EventType::Invoke, Function::Write, resource, value, None);
            let outcome = versioned(store.write_versioned(resource, fence, &data).await);
            complete(&mut process, Function::Write, resource, &outcome);
            match &outcome {
                Outcome::Info(_) => {
                    reset(client, store).await;
                    step = Step::Crashed;
                    break;
                }
                // The storage took a newer term's work: another leads.
                Outcome::Fail(error) if error == "stale-fence" => {
                    step = Step::StepsDown;
                    break;
                }
                _ => {}
            }
            stall.strike(StallPoint::AfterWrite).await;
            // The next renewal a third of a TTL on, if the tenure lasts.
            let next = tokio::time::Instant::now() + every;
            if next >= tenure_end {
                tokio::time::sleep_until(tenure_end).await;
                break;
            }
            tokio::time::sleep_until(next).await;
            // A stall here: the watchdog resumes with the process and
            // renews late.
            stall.strike(StallPoint::BeforeRenew).await;
            record(
                process,
                EventType::Invoke,
                Function::Renew,
                name,
                json!({ "ttl_ms": ttl_ms }),
                None,
            );
            let outcome = client.renew(name, &grant, ttl_ms).await.map(|()| Value::Null);
            complete(&mut process, Function::Renew, name, &outcome);
            match outcome {
                Outcome::Ok(_) => {}
                // Deposed: its lease is gone.
                Outcome::Fail(_) => {
                    step = Step::StepsDown;
                    break;
                }
                Outcome::Info(_) => {
                    reset(client, store).await;
                    step = Step::Crashed;
                    break;
                }
            }
        }
        if let Step::Crashed = step {
            continue;
        }
        // ---- Resign (or say it was deposed) ----
        stall.strike(StallPoint::BeforeRelease).await;
        stall.set_holding(false);
        record(process, EventType::Invoke, Function::Release, name, grant_value(&grant), None);
        let outcome = client.release(name, &grant).await.map(|()| Value::Null);
        complete(&mut process, Function::Release, name, &outcome);
        if let Outcome::Info(_) = outcome {
            reset(client, store).await;
            continue;
        }
        // A leader that stepped down thinks before campaigning again.
        pause(&mut rng, options.think_ms).await;
    }
}
