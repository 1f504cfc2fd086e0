//! Exactly once: a unit of work must be done once, not twice and not zero
//! times. Two workloads record units.
//!
//! The cron workloads: every replica that fires records a `run` of the unit
//! (`data`) of a job (`key`): `ok` when it ran the job, `fail` when it
//! skipped it (another replica had it). Two `ok` runs of one unit are a
//! double run. A unit every replica skipped, with no run of unknown
//! outcome, never ran. An `info` run may have run.
//!
//! The payments workload: a unit (`data`, an order) is enqueued with a
//! bound (`due_ms`), delivered to workers, and done by an effect: a
//! `charge` that ended `ok`, or a `run` of that unit. Oks of one charge
//! carrying the same `charge` id are one effect (the provider replayed
//! it); a table's charge has no id, and each of its oks is an effect. Two
//! effects are a double, named with the delivery each worker acted on. A
//! unit with no effect whose bound passed before the history ended was
//! never done, unless a charge (or run) of unknown outcome may have done
//! it: an `info` never makes a double, and always may be the one.
//!
//! What a double means depends on what the lock is for
//! ([`crate::Purpose`]): under `Efficiency` it is a cost, counted in the
//! notes, and only work never done fails.

use std::collections::BTreeMap;

use crate::event::{Function, PaymentFields};
use crate::history::{History, KeyId, Op, Outcome, PaymentOp};
use crate::verdict::{
    CheckOptions, CheckResult, Checker, Findings, Purpose, Subject, Violation, ViolationKind,
    Window,
};
use crate::{format_seconds, format_time};

#[derive(Debug, Default, Clone, Copy)]
pub struct ExactlyOnce;

/// What a `run` says as a payments unit's effect: nothing more.
static RUN: PaymentFields = PaymentFields::NONE;

/// One payments unit's operations, in history (invoke) order.
#[derive(Debug, Default)]
struct Unit<'h> {
    /// Its enqueues, whatever their outcome.
    enqueues: Vec<PaymentOp<'h>>,
    /// The deliveries that handed it out (`ok`, naming it).
    deliveries: Vec<PaymentOp<'h>>,
    /// Its charges, whatever their outcome.
    charges: Vec<PaymentOp<'h>>,
    /// Runs of it, when it was enqueued (a unit no enqueue names is a cron
    /// job's, judged per job as before).
    runs: Vec<PaymentOp<'h>>,
}

impl Unit<'_> {
    fn ops(&self) -> u64 {
        (self.enqueues.len() + self.deliveries.len() + self.charges.len() + self.runs.len()) as u64
    }

    /// The key its verdict is reported under: the queue it was enqueued
    /// on, else where its first charge landed.
    fn key(&self) -> Option<KeyId> {
        self.enqueues.iter().chain(&self.charges).chain(&self.runs).map(|op| op.key).next()
    }
}

/// What judging one unit found: a violation, or a double that is only a
/// cost under the purpose asked for.
enum Judged {
    Fine,
    Violation(Violation),
    Cost(Violation),
}

impl Checker for ExactlyOnce {
    fn name(&self) -> &'static str {
        crate::verdict::names::EXACTLY_ONCE
    }

    fn judge(&self, history: &Subject<'_>, options: &CheckOptions) -> CheckResult {
        // Per job, per unit, the runs; per payments unit, its operations.
        // Both in history order.
        let mut jobs: BTreeMap<KeyId, BTreeMap<&str, Vec<&Op>>> = BTreeMap::new();
        for op in history.ops().iter().filter(|op| op.f == Function::Run) {
            let unit = op.data.as_deref().unwrap_or("");
            jobs.entry(op.key).or_default().entry(unit).or_default().push(op);
        }
        let mut units: BTreeMap<&str, Unit<'_>> = BTreeMap::new();
        for op in history.payment_ops() {
            let Some(unit) = op.op.data.as_deref() else { continue };
            match op.f {
                Function::Enqueue => units.entry(unit).or_default().enqueues.push(op),
                Function::Charge => units.entry(unit).or_default().charges.push(op),
                Function::Deliver if op.is_ok() => {
                    units.entry(unit).or_default().deliveries.push(op)
                }
                _ => {}
            }
        }
        // A unit only delivered (its enqueue is not in the history) has
        // nothing to judge.
        units.retain(|_, unit| !unit.enqueues.is_empty() || !unit.charges.is_empty());
        if jobs.is_empty() && units.is_empty() {
            return CheckResult::not_applicable(
                self.name(),
                "no run, enqueue or charge operations",
            );
        }
        let purpose = options.purpose;
        // Per key, in key order: operations looked at, violations found.
        let mut keys: BTreeMap<KeyId, (u64, Vec<Violation>)> = BTreeMap::new();
        let mut costs: Vec<Violation> = Vec::new();
        let mut judged_units = 0u64;
        let mut record = |keys: &mut BTreeMap<KeyId, (u64, Vec<Violation>)>,
                          key: KeyId,
                          ops: u64,
                          judged: Judged| {
            let entry = keys.entry(key).or_default();
            entry.0 += ops;
            match judged {
                Judged::Fine => {}
                Judged::Violation(violation) => entry.1.push(violation),
                Judged::Cost(violation) => costs.push(violation),
            }
        };
        for (key, job_units) in &jobs {
            let job = history.key_name(*key);
            for (unit, runs) in job_units {
                // Runs of an enqueued unit are among its effects.
                if let Some(payments) = units.get_mut(unit) {
                    if !payments.enqueues.is_empty() {
                        let runs = runs.iter().map(|&op| PaymentOp { op, fields: &RUN });
                        payments.runs.extend(runs);
                        continue;
                    }
                }
                judged_units += 1;
                let judged = match judge(history, job, unit, runs) {
                    None => Judged::Fine,
                    Some(violation) if violation.kind == ViolationKind::RanTwice => {
                        as_purpose(purpose, violation)
                    }
                    Some(violation) => Judged::Violation(violation),
                };
                record(&mut keys, *key, runs.len() as u64, judged);
            }
        }
        for (name, unit) in &units {
            let Some(key) = unit.key() else { continue };
            judged_units += 1;
            let judged = judge_unit(history, name, unit, purpose);
            record(&mut keys, key, unit.ops(), judged);
        }
        let mut findings = Findings::new(self.name(), options);
        for (key, (ops, violations)) in keys {
            findings.key(history.key_name(key), ops, violations);
        }
        if !costs.is_empty() {
            findings.note(format!(
                "{} of {judged_units} units done twice (cost: --purpose {})",
                costs.len(),
                purpose.name()
            ));
            let shown = costs.len().min(options.max_violations);
            for cost in &costs[..shown] {
                findings.note(format!("cost: {}", cost.explanation));
            }
            if costs.len() > shown {
                findings.note(format!("… and {} more units done twice", costs.len() - shown));
            }
        }
        findings.finish()
    }
}

/// A double is a violation when the lock is for correctness, a cost when
/// it is for efficiency.
fn as_purpose(purpose: Purpose, violation: Violation) -> Judged {
    match purpose {
        Purpose::Correctness => Judged::Violation(violation),
        Purpose::Efficiency => Judged::Cost(violation),
    }
}

/// One payments unit: done twice, never done, or fine.
fn judge_unit(history: &History, name: &str, unit: &Unit<'_>, purpose: Purpose) -> Judged {
    // Its effects: each run ok, each charge ok with an id of its own (the
    // first ok with an id is the effect; replays of it add none), each
    // charge ok without an id. In the order they were known done.
    let mut effects: Vec<PaymentOp<'_>> = Vec::new();
    let mut by_id: BTreeMap<&str, usize> = BTreeMap::new();
    for op in unit.charges.iter().chain(&unit.runs).copied().filter(|op| op.is_ok()) {
        match op.fields.charge.as_deref().map(|id| (id, by_id.get(id).copied())) {
            Some((_, Some(at))) => {
                if done(history, &op) < done(history, &effects[at]) {
                    effects[at] = op;
                }
            }
            Some((id, None)) => {
                by_id.insert(id, effects.len());
                effects.push(op);
            }
            None => effects.push(op),
        }
    }
    effects.sort_by_key(|op| done(history, op));
    if effects.len() >= 2 {
        return as_purpose(purpose, done_twice(history, name, unit, &effects));
    }
    let maybe = unit.charges.iter().chain(&unit.runs).any(|op| op.outcome == Outcome::Info);
    if !effects.is_empty() || maybe {
        return Judged::Fine;
    }
    // The first enqueue that took, with a bound.
    let Some((enqueue, due_ms)) = unit
        .enqueues
        .iter()
        .find_map(|op| op.fields.due_ms.filter(|_| op.is_ok()).map(|due| (*op, due)))
    else {
        return Judged::Fine;
    };
    let enqueued = history.completion_or_end(&enqueue);
    let bound_ns = enqueued.time_ns.saturating_add(due_ms.saturating_mul(1_000_000));
    let end = history.end();
    if end.time_ns <= bound_ns {
        return Judged::Fine;
    }
    Judged::Violation(never_done(history, name, unit, enqueue, due_ms, bound_ns))
}

/// When an operation was known done: its completion's index.
fn done(history: &History, op: &Op) -> u64 {
    history.completion_or_end(op).index
}

/// The delivery of `unit` that `effect`'s process acted on: its last one
/// completed before the effect was invoked.
fn delivery_before<'h>(unit: &Unit<'h>, effect: &Op) -> Option<PaymentOp<'h>> {
    unit.deliveries
        .iter()
        .copied()
        .filter(|delivery| delivery.process == effect.process)
        .filter(|delivery| delivery.completion.is_some_and(|at| at.index < effect.invoke.index))
        .max_by_key(|delivery| delivery.completion.map(|at| at.index))
}

/// `delivery 2 of message 7 (ok at t=8.500 s, redelivered)`.
fn describe_delivery(history: &History, delivery: PaymentOp<'_>) -> String {
    let (number, message) = (delivery.fields.delivery, delivery.fields.message);
    let what = match (number, message) {
        (Some(number), Some(message)) => format!("delivery {number} of message {message}"),
        (None, Some(message)) => format!("a delivery of message {message}"),
        (Some(number), None) => format!("delivery {number}"),
        (None, None) => "a delivery".to_string(),
    };
    let again = match delivery.fields.redelivered {
        Some(true) => ", redelivered",
        _ => "",
    };
    let at = format_time(history.completion_or_end(&delivery).time_ns);
    format!("{what} (ok at t={at}{again})")
}

/// `process 3's charge ch_1 at "provider" (ok at t=5.000 s), after …`.
fn describe_effect(history: &History, unit: &Unit<'_>, effect: PaymentOp<'_>) -> String {
    let key = history.key_name(effect.key);
    let what = match (&effect.f, effect.fields.charge.as_deref()) {
        (Function::Charge, Some(id)) => format!("charge {id} at {key:?}"),
        (Function::Charge, None) => format!("charge written to {key:?}"),
        _ => format!("run of {key:?}"),
    };
    let at = format_time(history.completion_or_end(&effect).time_ns);
    let after = match delivery_before(unit, &effect) {
        Some(delivery) => format!("after {}", describe_delivery(history, delivery)),
        None => "with no delivery of the unit to it before".to_string(),
    };
    format!("process {}'s {what} (ok at t={at}), {after}", effect.process)
}

fn done_twice(
    history: &History,
    name: &str,
    unit: &Unit<'_>,
    effects: &[PaymentOp<'_>],
) -> Violation {
    let (first, second) = (effects[0], effects[1]);
    let (first_done, to) = (history.completion_or_end(&first), history.completion_or_end(&second));
    // The worker behind the double is the one whose delivery came first:
    // its job outlived the visibility timeout (a stall, a slow charge) and
    // went to the other. It is named last, and the window opens at its
    // delivery, so that a stall that ended before either effect still
    // falls within it.
    // Deliveries are ordered by their count (the queue's own order), else
    // by their invoke: a worker stalled with a delivery's reply unread got
    // the job at the server long before its `ok`. The window opens at that
    // invoke.
    let delivered = |effect: &PaymentOp<'_>| {
        delivery_before(unit, effect).map(|delivery| {
            let order = (delivery.fields.delivery.unwrap_or(u64::MAX), delivery.invoke.time_ns);
            (order, delivery.invoke)
        })
    };
    let (other, behind, opened) = match (delivered(&first), delivered(&second)) {
        (Some((a, _)), Some((b, at))) if b < a => (first, second, Some(at)),
        (Some((_, at)), _) => (second, first, Some(at)),
        (None, b) => (first, second, b.map(|(_, at)| at)),
    };
    let from = match opened {
        Some(opened) if opened.time_ns < first_done.time_ns => opened,
        _ => first_done,
    };
    let mut events: Vec<u64> = [first, second]
        .iter()
        .flat_map(|effect| {
            let delivery = delivery_before(unit, effect).map(|delivery| done(history, &delivery));
            delivery.into_iter().chain([done(history, effect)])
        })
        .collect();
    events.sort_unstable();
    events.dedup();
    let more = match effects.len() - 2 {
        0 => String::new(),
        1 => " (and 1 more effect)".to_string(),
        more => format!(" (and {more} more effects)"),
    };
    Violation {
        root: None,
        finding: None,
        kind: ViolationKind::DoneTwice,
        key: unit.key().map_or("", |key| history.key_name(key)).to_string(),
        processes: vec![other.process, behind.process],
        window: Some(Window::between(from, to)),
        events,
        explanation: format!(
            "{name:?} was done {} times: first by {}, then by {}, {} later{more}.",
            effects.len(),
            describe_effect(history, unit, first),
            describe_effect(history, unit, second),
            format_seconds(to.time_ns.saturating_sub(first_done.time_ns)),
        ),
        linearization: None,
    }
}

fn never_done(
    history: &History,
    name: &str,
    unit: &Unit<'_>,
    enqueue: PaymentOp<'_>,
    due_ms: u64,
    bound_ns: u64,
) -> Violation {
    let enqueued = history.completion_or_end(&enqueue);
    let end = history.end();
    let queue = history.key_name(enqueue.key);
    let mut failed: BTreeMap<&str, usize> = BTreeMap::new();
    for op in unit.charges.iter().chain(&unit.runs) {
        *failed.entry(op.error.as_deref().unwrap_or("failed")).or_default() += 1;
    }
    let failed: Vec<String> =
        failed.iter().map(|(reason, count)| format!("{reason} ×{count}")).collect();
    let delivered = match unit.deliveries.len() {
        0 => "never delivered".to_string(),
        1 => "delivered once".to_string(),
        times => format!("delivered {times} times"),
    };
    let attempts = if failed.is_empty() {
        format!("it was {delivered}, and never charged")
    } else {
        format!("it was {delivered}; its charges failed ({})", failed.join(", "))
    };
    let mut processes = vec![enqueue.process];
    for op in unit.deliveries.iter().chain(&unit.charges).chain(&unit.runs) {
        if !processes.contains(&op.process) {
            processes.push(op.process);
        }
    }
    let mut events = vec![enqueue.invoke.index, enqueued.index];
    for op in unit.deliveries.iter().chain(&unit.charges).chain(&unit.runs) {
        events.push(done(history, op));
    }
    events.sort_unstable();
    events.dedup();
    Violation {
        root: None,
        finding: None,
        kind: ViolationKind::NeverDone,
        key: queue.to_string(),
        processes,
        window: Some(Window::between(enqueued, end)),
        events,
        explanation: format!(
            "{name:?} was never done: process {p} enqueued it on {queue:?} (ok at t={at}) to be done within {due} (by t={bound}); no charge or run of it took effect or may have ({attempts}), and the history ran {past} past the bound (to t={until}).",
            p = enqueue.process,
            at = format_time(enqueued.time_ns),
            due = format_seconds(due_ms.saturating_mul(1_000_000)),
            bound = format_time(bound_ns),
            past = format_seconds(end.time_ns.saturating_sub(bound_ns)),
            until = format_time(end.time_ns),
        ),
        linearization: None,
    }
}

fn judge(history: &History, job: &str, unit: &str, runs: &[&Op]) -> Option<Violation> {
    let ran: Vec<&Op> = runs.iter().copied().filter(|op| op.outcome == Outcome::Ok).collect();
    let unknown = runs.iter().any(|op| op.outcome == Outcome::Info);
    let at = |op: &Op| {
        let done = history.completion_or_end(op);
        format!("process {} at index {} (t={})", op.process, done.index, format_time(done.time_ns))
    };
    let events = |ops: &[&Op]| {
        let mut events: Vec<u64> =
            ops.iter().map(|op| history.completion_or_end(op).index).collect();
        events.sort_unstable();
        events
    };
    if ran.len() >= 2 {
        let who: Vec<String> = ran.iter().map(|op| at(op)).collect();
        return Some(Violation {
            root: None,
            finding: None,
            kind: ViolationKind::RanTwice,
            key: job.to_string(),
            processes: ran.iter().map(|op| op.process).collect(),
            window: None,
            events: events(&ran),
            explanation: format!(
                "{job:?} ran {} times for {unit:?}: by {}.",
                ran.len(),
                who.join(", ")
            ),
            linearization: None,
        });
    }
    if ran.is_empty() && !unknown {
        let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
        for op in runs {
            *reasons.entry(op.error.as_deref().unwrap_or("failed")).or_default() += 1;
        }
        let reasons: Vec<String> =
            reasons.iter().map(|(reason, count)| format!("{reason} ×{count}")).collect();
        return Some(Violation {
            root: None,
            finding: None,
            kind: ViolationKind::NeverRan,
            key: job.to_string(),
            processes: runs.iter().map(|op| op.process).collect(),
            window: None,
            events: events(runs),
            explanation: format!(
                "{job:?} never ran for {unit:?}: none of the {} replicas that fired ran it ({}), the last {}.",
                runs.len(),
                reasons.join(", "),
                at(runs[runs.len() - 1])
            ),
            linearization: None,
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{history_from, Verdict};

    fn verdict(lines: &str) -> Option<Verdict> {
        ExactlyOnce.check(&history_from(lines), &CheckOptions::default()).verdict
    }

    #[test]
    fn once_twice_and_never() {
        let once = r#"
            0 1 invoke run report {"data":"day-1"}
            1 2 invoke run report {"data":"day-1"}
            2 1 ok run report
            3 2 fail run report"#;
        assert_eq!(verdict(once), Some(Verdict::Valid));
        let twice = r#"
            0 1 invoke run report {"data":"day-1"}
            1 1 ok run report
            2 2 invoke run report {"data":"day-1"}
            3 2 ok run report"#;
        assert_eq!(verdict(twice), Some(Verdict::Invalid));
        let never = r#"
            0 1 invoke run report {"data":"day-1"}
            1 1 fail run report
            2 2 invoke run report {"data":"day-1"}
            3 2 fail run report"#;
        assert_eq!(verdict(never), Some(Verdict::Invalid));
        // A run of unknown outcome may have been the one.
        let maybe = r#"
            0 1 invoke run report {"data":"day-1"}
            1 1 info run report
            2 2 invoke run report {"data":"day-1"}
            3 2 fail run report"#;
        assert_eq!(verdict(maybe), Some(Verdict::Valid));
    }
}

#[cfg(test)]
mod payments_tests {
    use super::*;
    use crate::{history_from, Verdict};

    fn check(lines: &str, purpose: Purpose) -> CheckResult {
        let options = CheckOptions { purpose, ..CheckOptions::default() };
        ExactlyOnce.check(&history_from(lines), &options)
    }

    fn verdict(lines: &str) -> Option<Verdict> {
        check(lines, Purpose::Correctness).verdict
    }

    /// Enqueued at t=1 s with 20 s to be done; the order is delivered to
    /// process 2, charged, and acknowledged.
    const ONCE: &str = r#"
        1000000000 1 invoke enqueue orders {"data":"order-7","due_ms":20000}
        1001000000 1 ok enqueue orders {"message":7}
        2000000000 2 invoke deliver orders {"visibility_ms":3000}
        2001000000 2 ok deliver orders {"data":"order-7","message":7,"delivery":1,"redelivered":false}
        2100000000 2 invoke charge provider {"data":"order-7","amount":4200,"idempotency_key":"order-7","body":"b"}
        2300000000 2 ok charge provider {"charge":"ch_1","status":201,"replayed":false}
        2400000000 2 invoke ack orders {"message":7,"delivery":1}
        2401000000 2 ok ack orders"#;

    /// Process 2's charge is slow: its message becomes visible again, and
    /// process 3 is handed it and charges again under a new key.
    const TWICE: &str = r#"
        1000000000 1 invoke enqueue orders {"data":"order-7","due_ms":20000}
        1001000000 1 ok enqueue orders {"message":7}
        2000000000 2 invoke deliver orders {"visibility_ms":3000}
        2001000000 2 ok deliver orders {"data":"order-7","message":7,"delivery":1,"redelivered":false}
        2100000000 2 invoke charge provider {"data":"order-7","amount":4200,"body":"b"}
        5200000000 3 invoke deliver orders {"visibility_ms":3000}
        5201000000 3 ok deliver orders {"data":"order-7","message":7,"delivery":2,"redelivered":true}
        5300000000 3 invoke charge provider {"data":"order-7","amount":4200,"body":"b"}
        5500000000 3 ok charge provider {"charge":"ch_2","status":201,"replayed":false}
        6000000000 2 ok charge provider {"charge":"ch_1","status":201,"replayed":false}
        6100000000 2 invoke ack orders {"message":7,"delivery":1}
        6101000000 2 fail ack orders !gone"#;

    /// The worker that had the order first charged it first too, then
    /// stalled before its ack: the redelivery went to another, which
    /// charged again. The first worker is still the one behind it.
    #[test]
    fn a_worker_that_charged_and_stalled_before_its_ack_is_behind_the_double() {
        let late_ack = r#"
            1000000000 1 invoke enqueue orders {"data":"order-7","due_ms":20000}
            1001000000 1 ok enqueue orders {"message":7}
            2000000000 2 invoke deliver orders {"visibility_ms":3000}
            2001000000 2 ok deliver orders {"data":"order-7","message":7,"delivery":1,"redelivered":false}
            2100000000 2 invoke charge provider {"data":"order-7","amount":4200,"body":"b"}
            2200000000 2 ok charge provider {"charge":"ch_1","status":201,"replayed":false}
            5200000000 3 invoke deliver orders {"visibility_ms":3000}
            5201000000 3 ok deliver orders {"data":"order-7","message":7,"delivery":2,"redelivered":true}
            5300000000 3 invoke charge provider {"data":"order-7","amount":4200,"body":"b"}
            5500000000 3 ok charge provider {"charge":"ch_2","status":201,"replayed":false}"#;
        let result = check(late_ack, Purpose::Correctness);
        let violation = &result.violations[0];
        assert_eq!(violation.processes, [3, 2]);
        let window = violation.window.expect("a window");
        assert_eq!((window.start_index, window.end_index), (2, 9));
    }

    #[test]
    fn one_effect_is_valid() {
        let result = check(ONCE, Purpose::Correctness);
        assert_eq!(result.verdict, Some(Verdict::Valid));
        let keys: Vec<(&str, u64)> =
            result.keys.iter().map(|key| (key.key.as_str(), key.ops)).collect();
        assert_eq!(keys, [("orders", 3)]);
    }

    #[test]
    fn two_effects_are_done_twice_naming_both_deliveries() {
        let result = check(TWICE, Purpose::Correctness);
        assert_eq!(result.verdict, Some(Verdict::Invalid));
        assert_eq!(result.violations.len(), 1, "{result:#?}");
        let violation = &result.violations[0];
        assert_eq!(violation.kind, ViolationKind::DoneTwice);
        assert_eq!(violation.key, "orders");
        // Process 2 had the order first (delivery 1) and charged it last:
        // it is behind the double, named last.
        assert_eq!(violation.processes, [3, 2]);
        // Both deliveries and both effects.
        assert_eq!(violation.events, [3, 6, 8, 9]);
        // From process 2's delivery (its invoke) to the second effect.
        let window = violation.window.expect("a window");
        assert_eq!((window.start_index, window.end_index), (2, 9));
        let text = &violation.explanation;
        for part in [
            "\"order-7\" was done 2 times",
            "process 3's charge ch_2 at \"provider\" (ok at t=5.500 s), after delivery 2 of message 7 (ok at t=5.201 s, redelivered)",
            "process 2's charge ch_1 at \"provider\" (ok at t=6.000 s), after delivery 1 of message 7 (ok at t=2.001 s)",
            "500.0 ms later",
        ] {
            assert!(text.contains(part), "{text} lacks {part}");
        }
    }

    #[test]
    fn a_replay_of_the_same_charge_is_one_effect() {
        let replayed = r#"
            1000000000 1 invoke enqueue orders {"data":"order-7","due_ms":20000}
            1001000000 1 ok enqueue orders {"message":7}
            2000000000 2 invoke charge provider {"data":"order-7","idempotency_key":"k","body":"b"}
            2300000000 2 ok charge provider {"charge":"ch_1","status":201,"replayed":false}
            2400000000 3 invoke charge provider {"data":"order-7","idempotency_key":"k","body":"b"}
            2500000000 3 ok charge provider {"charge":"ch_1","status":201,"replayed":true}"#;
        assert_eq!(verdict(replayed), Some(Verdict::Valid));
        // A table has no charge ids: each ok is an effect of its own.
        let table = r#"
            2000000000 2 invoke charge payments {"data":"order-7"}
            2300000000 2 ok charge payments
            2400000000 3 invoke charge payments {"data":"order-7"}
            2500000000 3 ok charge payments"#;
        let result = check(table, Purpose::Correctness);
        assert_eq!(result.verdict, Some(Verdict::Invalid));
        assert!(
            result.violations[0].explanation.contains("charge written to \"payments\""),
            "{}",
            result.violations[0].explanation
        );
        assert_eq!(result.keys[0].key, "payments");
    }

    #[test]
    fn a_run_of_an_enqueued_unit_is_an_effect_too() {
        let both = r#"
            1000000000 1 invoke enqueue orders {"data":"order-7","due_ms":20000}
            1001000000 1 ok enqueue orders {"message":7}
            2000000000 2 invoke run fulfil {"data":"order-7"}
            2300000000 2 ok run fulfil
            2400000000 3 invoke charge provider {"data":"order-7"}
            2500000000 3 ok charge provider {"charge":"ch_1"}"#;
        let result = check(both, Purpose::Correctness);
        assert_eq!(result.verdict, Some(Verdict::Invalid));
        assert!(result.violations[0].explanation.contains("run of \"fulfil\""));
        // Reported under the queue, not the job.
        let keys: Vec<&str> = result.keys.iter().map(|key| key.key.as_str()).collect();
        assert_eq!(keys, ["orders"]);
    }

    #[test]
    fn a_charge_of_unknown_outcome_never_doubles_and_excuses_never_done() {
        let maybe_twice = r#"
            1000000000 1 invoke enqueue orders {"data":"order-7","due_ms":2000}
            1001000000 1 ok enqueue orders {"message":7}
            2000000000 2 invoke charge provider {"data":"order-7"}
            2300000000 2 info charge provider !timeout
            2400000000 3 invoke charge provider {"data":"order-7"}
            2500000000 3 ok charge provider {"charge":"ch_2"}"#;
        assert_eq!(verdict(maybe_twice), Some(Verdict::Valid));
        let maybe_once = r#"
            1000000000 1 invoke enqueue orders {"data":"order-7","due_ms":2000}
            1001000000 1 ok enqueue orders {"message":7}
            2000000000 2 invoke charge provider {"data":"order-7"}
            2300000000 2 info charge provider !timeout
            9000000000 3 invoke deliver orders
            9001000000 3 fail deliver orders !empty"#;
        assert_eq!(verdict(maybe_once), Some(Verdict::Valid));
    }

    #[test]
    fn a_unit_not_done_by_its_bound_is_never_done() {
        let never = r#"
            1000000000 1 invoke enqueue orders {"data":"order-9","due_ms":5000}
            1001000000 1 ok enqueue orders {"message":9}
            2000000000 2 invoke deliver orders
            2001000000 2 ok deliver orders {"data":"order-9","message":9,"delivery":1,"redelivered":false}
            2100000000 2 invoke charge provider {"data":"order-9"}
            2300000000 2 fail charge provider !declined {"status":402}
            10000000000 3 invoke deliver orders
            10001000000 3 fail deliver orders !empty"#;
        let result = check(never, Purpose::Correctness);
        assert_eq!(result.verdict, Some(Verdict::Invalid));
        let violation = &result.violations[0];
        assert_eq!(violation.kind, ViolationKind::NeverDone);
        assert_eq!(violation.processes, [1, 2]);
        assert_eq!(violation.events, [0, 1, 3, 5]);
        let text = &violation.explanation;
        for part in [
            "\"order-9\" was never done",
            "within 5.000 s (by t=6.001 s)",
            "delivered once; its charges failed (declined ×1)",
            "ran 4.000 s past the bound (to t=10.001 s)",
        ] {
            assert!(text.contains(part), "{text} lacks {part}");
        }
        // The same history ending before the bound: not yet due.
        let early: String = never.lines().take(7).collect::<Vec<_>>().join("\n");
        assert_eq!(verdict(&early), Some(Verdict::Valid));
        // An enqueue that failed put nothing on the queue.
        let failed = never.replacen("ok enqueue orders", "fail enqueue orders", 1);
        assert_eq!(verdict(&failed), Some(Verdict::Valid));
    }

    #[test]
    fn under_efficiency_a_double_is_a_cost_and_never_done_still_fails() {
        let result = check(TWICE, Purpose::Efficiency);
        assert_eq!(result.verdict, Some(Verdict::Valid), "{result:#?}");
        assert!(result.violations.is_empty());
        assert_eq!(result.notes[0], "1 of 1 units done twice (cost: --purpose efficiency)");
        assert!(result.notes[1].starts_with("cost: \"order-7\" was done 2 times"));
        // A cron job run twice is a cost too.
        let cron = r#"
            0 1 invoke run report {"data":"day-1"}
            1 1 ok run report
            2 2 invoke run report {"data":"day-1"}
            3 2 ok run report"#;
        assert_eq!(check(cron, Purpose::Efficiency).verdict, Some(Verdict::Valid));
        let never = r#"
            1000000000 1 invoke enqueue orders {"data":"order-9","due_ms":5000}
            1001000000 1 ok enqueue orders {"message":9}
            10000000000 3 invoke deliver orders
            10001000000 3 fail deliver orders !empty"#;
        assert_eq!(check(never, Purpose::Efficiency).verdict, Some(Verdict::Invalid));
    }

    #[test]
    fn deliveries_alone_are_not_applicable() {
        let lines = r#"
            0 3 invoke deliver orders
            1 3 ok deliver orders {"data":"order-1","message":1,"delivery":1}"#;
        let result = check(lines, Purpose::Correctness);
        assert_eq!(result.verdict, None);
        assert_eq!(result.reason.as_deref(), Some("no run, enqueue or charge operations"));
    }
}
