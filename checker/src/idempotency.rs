//! Idempotency: what a provider that takes idempotency keys promises a
//! client that retries a charge (Stripe's `Idempotency-Key`, the IETF
//! draft's header).
//!
//! The requests are the `charge`s whose invoke carries an
//! `idempotency_key`, per key and per place they went (`key`: the
//! provider), in history order. A key is safe to retry with only if:
//!
//! * a reused key with another body is refused, never answered with
//!   success: an `ok` whose body differs from the body of the request that
//!   created its charge id (the first `ok` with that id that was not a
//!   replay) is a violation, and so is a second new charge for the key
//!   whose body differs from the first's (unless the key had expired:
//!   invoked after the first completed plus its `retention_ms`);
//! * a replay gets the first response: once a response for the key has
//!   completed (an `ok`, or a `fail` with a `status` other than 409, the
//!   in-flight refusal, or a key mismatch), a request with the same body
//!   invoked after it (within its `retention_ms`, when it gives one) must
//!   get the same status and charge id;
//! * a request made while the first is in flight is refused (409) or
//!   waits for its replay: two requests with the same body, in flight at
//!   once before any response completed, that both succeeded with
//!   different charges (a table's `ok` without an id is a charge of its
//!   own) are a violation.
//!
//! Each request is judged by one of the rules only (a different body by
//! the first, a later request by the second, concurrent ones by the
//! third), so one wrong answer is one violation. A table's refusal of a
//! second row (`exists`, `not-pending`) makes no second effect and is no
//! replay to compare.

use std::collections::{BTreeMap, BTreeSet};

use crate::event::Function;
use crate::history::{History, KeyId, Moment, Op, Outcome, PaymentOp};
use crate::verdict::{
    CheckOptions, CheckResult, Checker, Findings, Subject, Violation, ViolationKind, Window,
};
use crate::{format_seconds, format_time};

#[derive(Debug, Default, Clone, Copy)]
pub struct Idempotency;

impl Checker for Idempotency {
    fn name(&self) -> &'static str {
        crate::verdict::names::IDEMPOTENCY
    }

    fn judge(&self, history: &Subject<'_>, options: &CheckOptions) -> CheckResult {
        // One pass: per place and key, the keyed requests in history order.
        let mut keys: BTreeMap<(KeyId, &str), Vec<PaymentOp<'_>>> = BTreeMap::new();
        for op in history.payment_ops().filter(|op| op.f == Function::Charge) {
            if let Some(key) = op.fields.idempotency_key.as_deref() {
                keys.entry((op.key, key)).or_default().push(op);
            }
        }
        if keys.is_empty() {
            return CheckResult::not_applicable(
                self.name(),
                "no charge carries an idempotency_key",
            );
        }
        let mut places: BTreeMap<KeyId, (u64, Vec<Violation>)> = BTreeMap::new();
        for ((place, key), requests) in &keys {
            let entry = places.entry(*place).or_default();
            entry.0 += requests.len() as u64;
            let requests = Requests { history, place: history.key_name(*place), key, requests };
            requests.judge(&mut entry.1);
        }
        let mut findings = Findings::new(self.name(), options);
        for (place, (ops, violations)) in places {
            findings.key(history.key_name(place), ops, violations);
        }
        findings.finish()
    }
}

/// What a charge's completion said, as a replay must repeat it.
#[derive(Debug, PartialEq, Eq)]
struct Response<'h> {
    ok: bool,
    status: Option<u64>,
    /// The charge id; for a table's `ok` without one that is not a replay,
    /// the request itself (its invoke index): a charge no other response
    /// can repeat.
    charge: Charge<'h>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Charge<'h> {
    None,
    Id(&'h str),
    Own(u64),
}

fn body<'h>(op: &PaymentOp<'h>) -> Option<&'h str> {
    op.fields.body.as_deref()
}

fn status(op: &PaymentOp<'_>) -> Option<u64> {
    op.fields.status
}

fn replayed(op: &PaymentOp<'_>) -> bool {
    op.fields.replayed == Some(true)
}

fn charge<'h>(op: &PaymentOp<'h>) -> Charge<'h> {
    match op.fields.charge.as_deref() {
        Some(id) => Charge::Id(id),
        None if op.is_ok() && !replayed(op) => Charge::Own(op.invoke.index),
        None => Charge::None,
    }
}

/// The response a request got from the provider: `None` when it got none
/// (`info`, or a `fail` without a status, which never reached it) or the
/// table refused a second row.
fn response<'h>(op: &PaymentOp<'h>) -> Option<Response<'h>> {
    let refused_row = matches!(op.error.as_deref(), Some("exists" | "not-pending"));
    let answered = match op.outcome {
        Outcome::Ok => true,
        Outcome::Fail => status(op).is_some() && !refused_row,
        Outcome::Info => false,
    };
    answered.then(|| Response { ok: op.is_ok(), status: status(op), charge: charge(op) })
}

/// Whether a response is one the provider keeps for its key: not the
/// refusal of a request in flight, nor of a key with another body.
fn is_kept(op: &PaymentOp<'_>) -> bool {
    let refusal = status(op) == Some(409)
        || matches!(op.error.as_deref(), Some("in-flight" | "key-mismatch"));
    response(op).is_some() && (op.is_ok() || !refusal)
}

/// `201 ch_1`, `201 ch_1 (replayed)`, `declined (402)`.
fn describe_response(op: &PaymentOp<'_>) -> String {
    let status = status(op);
    match op.outcome {
        Outcome::Ok => {
            let mut text = status.map_or_else(|| "ok".to_string(), |status| status.to_string());
            match charge(op) {
                Charge::Id(id) => text.push_str(&format!(" {id}")),
                Charge::Own(_) => text.push_str(" (a new row)"),
                Charge::None => {}
            }
            if replayed(op) {
                text.push_str(" (replayed)");
            }
            text
        }
        Outcome::Fail => {
            let error = op.error.as_deref().unwrap_or("fail");
            match status {
                Some(status) => format!("{error} ({status})"),
                None => error.to_string(),
            }
        }
        Outcome::Info => "no answer".to_string(),
    }
}

/// One key's requests to one place.
struct Requests<'a, 'h> {
    history: &'h History,
    place: &'a str,
    key: &'h str,
    requests: &'a [PaymentOp<'h>],
}

impl<'h> Requests<'_, 'h> {
    fn judge(&self, violations: &mut Vec<Violation>) {
        // The first kept response: what every later request with its body
        // must get back.
        let reference =
            self.requests.iter().copied().filter(is_kept).min_by_key(|op| self.done(op).index);
        self.reused(violations);
        if let Some(reference) = &reference {
            self.replays(reference, violations);
        }
        self.in_flight(reference.as_ref(), violations);
    }

    fn done(&self, op: &Op) -> Moment {
        self.history.completion_or_end(op)
    }

    /// Whether `later`, invoked after `earlier` completed, came after the
    /// provider may have forgotten the key.
    fn expired(&self, earlier: &Op, later: &PaymentOp<'_>) -> bool {
        later.fields.retention_ms.is_some_and(|retention_ms| {
            let kept_until =
                self.done(earlier).time_ns.saturating_add(retention_ms.saturating_mul(1_000_000));
            later.invoke.time_ns > kept_until
        })
    }

    /// `process 3's request (invoked at t=2.100 s, answered 201 ch_2 at
    /// t=2.500 s)`.
    fn describe(&self, op: &PaymentOp<'_>) -> String {
        format!(
            "process {}'s request (invoked at t={}, answered {} at t={})",
            op.process,
            format_time(op.invoke.time_ns),
            describe_response(op),
            format_time(self.done(op).time_ns)
        )
    }

    fn violation(
        &self,
        kind: ViolationKind,
        first: &Op,
        second: &Op,
        window: Window,
        explanation: String,
    ) -> Violation {
        let mut events = vec![
            first.invoke.index,
            self.done(first).index,
            second.invoke.index,
            self.done(second).index,
        ];
        events.sort_unstable();
        events.dedup();
        Violation {
            root: None,
            finding: None,
            kind,
            key: self.place.to_string(),
            processes: vec![first.process, second.process],
            window: Some(window),
            events,
            explanation,
            linearization: None,
        }
    }

    /// A reused key with another body answered with success.
    fn reused(&self, violations: &mut Vec<Violation>) {
        let oks: Vec<PaymentOp<'_>> =
            self.requests.iter().copied().filter(|op| op.is_ok()).collect();
        // Each charge id's creator: its first ok that was not a replay.
        let mut creators: BTreeMap<&str, PaymentOp<'_>> = BTreeMap::new();
        for op in oks.iter().copied().filter(|op| !replayed(op)) {
            if let Charge::Id(id) = charge(&op) {
                let creator = creators.entry(id).or_insert(op);
                if self.done(&op).index < self.done(creator).index {
                    *creator = op;
                }
            }
        }
        let key = self.key;
        // An ok naming a charge made for another body.
        for op in &oks {
            let Charge::Id(id) = charge(op) else { continue };
            let Some(creator) = creators.get(id) else { continue };
            if creator.invoke.index == op.invoke.index || body(creator) == body(op) {
                continue;
            }
            violations.push(self.violation(
                ViolationKind::KeyReused,
                creator,
                op,
                Window::between(self.done(creator), self.done(op)),
                format!(
                    "key {key:?}: {} had a body other than that of {}, which created {id}: a reused key with another body must be refused, not answered with success.",
                    self.describe(op),
                    self.describe(creator),
                ),
            ));
        }
        // New charges after the first with another body.
        let mut new: Vec<PaymentOp<'_>> = creators.values().copied().collect();
        new.extend(oks.iter().copied().filter(|op| matches!(charge(op), Charge::Own(_))));
        new.sort_by_key(|op| self.done(op).index);
        let Some((first, later)) = new.split_first() else { return };
        for op in later {
            let after = op.invoke.index > self.done(first).index;
            if body(op) == body(first) || (after && self.expired(first, op)) {
                continue;
            }
            violations.push(self.violation(
                ViolationKind::KeyReused,
                first,
                op,
                Window::between(self.done(first), self.done(op)),
                format!(
                    "key {key:?}: {} made a new charge, though {} had charged first with another body: a reused key with another body must be refused, not charged again.",
                    self.describe(op),
                    self.describe(first),
                ),
            ));
        }
    }

    /// Requests with the reference's body invoked after it completed must
    /// get it back.
    fn replays(&self, reference: &PaymentOp<'_>, violations: &mut Vec<Violation>) {
        let (Some(expected), completed) = (response(reference), self.done(reference)) else {
            return;
        };
        let key = self.key;
        for op in self.requests {
            if op.invoke.index <= completed.index
                || body(op) != body(reference)
                || self.expired(reference, op)
            {
                continue;
            }
            let Some(got) = response(op) else { continue };
            if got == expected {
                continue;
            }
            violations.push(self.violation(
                ViolationKind::ReplayDiffers,
                reference,
                op,
                Window::between(completed, self.done(op)),
                format!(
                    "key {key:?}: {} repeated the body of {} {} after that had completed, and got another response: a replay must get the first response.",
                    self.describe(op),
                    self.describe(reference),
                    format_seconds(op.invoke.time_ns.saturating_sub(completed.time_ns)),
                ),
            ));
        }
    }

    /// Requests with one body in flight at once, before any response had
    /// completed, that both succeeded with different charges: sorted by
    /// invoke (history order), swept with the ones still in flight.
    fn in_flight(&self, reference: Option<&PaymentOp<'_>>, violations: &mut Vec<Violation>) {
        let before = reference.map_or(u64::MAX, |reference| self.done(reference).index);
        let mut bodies: BTreeMap<Option<&str>, Vec<PaymentOp<'_>>> = BTreeMap::new();
        for op in self.requests.iter().copied() {
            if op.is_ok() && op.invoke.index < before {
                bodies.entry(body(&op)).or_default().push(op);
            }
        }
        let key = self.key;
        for oks in bodies.values() {
            // In flight: by completion index; and per charge, their
            // completion indices.
            let mut open: BTreeMap<u64, PaymentOp<'_>> = BTreeMap::new();
            let mut by_charge: BTreeMap<Charge<'_>, BTreeSet<u64>> = BTreeMap::new();
            for op in oks {
                while let Some(entry) = open.first_entry() {
                    if *entry.key() > op.invoke.index {
                        break;
                    }
                    let (done, ended) = entry.remove_entry();
                    if let Some(set) = by_charge.get_mut(&charge(&ended)) {
                        set.remove(&done);
                        if set.is_empty() {
                            by_charge.remove(&charge(&ended));
                        }
                    }
                }
                let mine = charge(op);
                let other = by_charge
                    .iter()
                    .find(|(charge, _)| **charge != mine)
                    .and_then(|(_, set)| set.first())
                    .and_then(|done| open.get(done).copied());
                if let Some(other) = other {
                    let start = Moment { index: op.invoke.index, time_ns: op.invoke.time_ns };
                    let end = self.done(&other).min(self.done(op));
                    violations.push(self.violation(
                        ViolationKind::InFlightNotRefused,
                        &other,
                        op,
                        Window::between(start, end),
                        format!(
                            "key {key:?}: {} and {} were in flight at once and both succeeded with different charges: one of them should have been refused (409) or replayed.",
                            self.describe(op),
                            self.describe(&other),
                        ),
                    ));
                }
                let done = self.done(op).index;
                open.insert(done, *op);
                by_charge.entry(mine).or_default().insert(done);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{history_from, Verdict};

    fn check(lines: &str) -> CheckResult {
        Idempotency.check(&history_from(lines), &CheckOptions::default())
    }

    fn kinds(lines: &str) -> Vec<ViolationKind> {
        check(lines).violations.iter().map(|violation| violation.kind).collect()
    }

    #[test]
    fn not_applicable_without_keys() {
        let lines = r#"
            0 1 invoke charge provider {"data":"order-1","body":"b"}
            1 1 ok charge provider {"charge":"ch_1","status":201}"#;
        let result = check(lines);
        assert_eq!(result.verdict, None);
        assert_eq!(result.reason.as_deref(), Some("no charge carries an idempotency_key"));
    }

    /// (a) A key reused with another body must be refused.
    #[test]
    fn a_reused_key_with_another_body_is_refused_not_answered() {
        let refused = r#"
            1000000000 1 invoke charge provider {"idempotency_key":"k","body":"4200"}
            1200000000 1 ok charge provider {"charge":"ch_1","status":201,"replayed":false}
            2000000000 2 invoke charge provider {"idempotency_key":"k","body":"9900"}
            2100000000 2 fail charge provider !key-mismatch {"status":422}"#;
        assert_eq!(check(refused).verdict, Some(Verdict::Valid));
        // Answered with the first charge: replayed for another body.
        let replayed = refused.replace(
            r#"2100000000 2 fail charge provider !key-mismatch {"status":422}"#,
            r#"2100000000 2 ok charge provider {"charge":"ch_1","status":201,"replayed":true}"#,
        );
        let result = check(&replayed);
        assert_eq!(result.verdict, Some(Verdict::Invalid));
        let violation = &result.violations[0];
        assert_eq!(violation.kind, ViolationKind::KeyReused);
        assert_eq!(
            (violation.processes.as_slice(), violation.events.as_slice()),
            (&[1, 2][..], &[0, 1, 2, 3][..])
        );
        let text = &violation.explanation;
        for part in [
            "key \"k\"",
            "process 2's request (invoked at t=2.000 s, answered 201 ch_1 (replayed) at t=2.100 s) had a body other than that of",
            "process 1's request (invoked at t=1.000 s, answered 201 ch_1 at t=1.200 s), which created ch_1",
            "must be refused, not answered with success",
        ] {
            assert!(text.contains(part), "{text} lacks {part}");
        }
        // Answered with a new charge.
        let charged = refused.replace(
            r#"2100000000 2 fail charge provider !key-mismatch {"status":422}"#,
            r#"2100000000 2 ok charge provider {"charge":"ch_2","status":201,"replayed":false}"#,
        );
        let result = check(&charged);
        assert_eq!(kinds(&charged), [ViolationKind::KeyReused]);
        assert!(
            result.violations[0].explanation.contains("(invoked at t=2.000 s, answered 201 ch_2 at t=2.100 s) made a new charge, though process 1's request"),
            "{}",
            result.violations[0].explanation
        );
        // Unless the key had expired: invoked after the first completed
        // plus the retention the request gives.
        let expired = charged.replace(r#""body":"9900"}"#, r#""body":"9900","retention_ms":500}"#);
        assert_eq!(check(&expired).verdict, Some(Verdict::Valid));
    }

    /// (b) A replay gets the first response, success or a kept failure.
    #[test]
    fn a_replay_gets_the_first_response() {
        let replayed = r#"
            1000000000 1 invoke charge provider {"idempotency_key":"k","body":"b"}
            1200000000 1 ok charge provider {"charge":"ch_1","status":201,"replayed":false}
            2000000000 2 invoke charge provider {"idempotency_key":"k","body":"b"}
            2100000000 2 ok charge provider {"charge":"ch_1","status":201,"replayed":true}"#;
        assert_eq!(check(replayed).verdict, Some(Verdict::Valid));
        let recharged = replayed.replace(
            r#"{"charge":"ch_1","status":201,"replayed":true}"#,
            r#"{"charge":"ch_2","status":201,"replayed":false}"#,
        );
        let result = check(&recharged);
        assert_eq!(result.verdict, Some(Verdict::Invalid));
        let violation = &result.violations[0];
        assert_eq!(violation.kind, ViolationKind::ReplayDiffers);
        let text = &violation.explanation;
        for part in [
            "process 2's request (invoked at t=2.000 s, answered 201 ch_2 at t=2.100 s) repeated the body of",
            "process 1's request (invoked at t=1.000 s, answered 201 ch_1 at t=1.200 s) 800.0 ms after that had completed",
        ] {
            assert!(text.contains(part), "{text} lacks {part}");
        }
        // A decline is kept: its replay must decline too.
        let declined = r#"
            1000000000 1 invoke charge provider {"idempotency_key":"k","body":"b"}
            1200000000 1 fail charge provider !declined {"status":402}
            2000000000 2 invoke charge provider {"idempotency_key":"k","body":"b"}
            2100000000 2 fail charge provider !declined {"status":402}"#;
        assert_eq!(check(declined).verdict, Some(Verdict::Valid));
        let then_charged = declined.replace(
            r#"2100000000 2 fail charge provider !declined {"status":402}"#,
            r#"2100000000 2 ok charge provider {"charge":"ch_1","status":201}"#,
        );
        assert_eq!(kinds(&then_charged), [ViolationKind::ReplayDiffers]);
        // A 409 is not kept: a retry after it may charge.
        let refused_then_charged = r#"
            1000000000 1 invoke charge provider {"idempotency_key":"k","body":"b"}
            1200000000 1 fail charge provider !in-flight {"status":409}
            2000000000 2 invoke charge provider {"idempotency_key":"k","body":"b"}
            2100000000 2 ok charge provider {"charge":"ch_1","status":201}"#;
        assert_eq!(check(refused_then_charged).verdict, Some(Verdict::Valid));
        // A request that never got an answer is no reference.
        let lost_then_charged = refused_then_charged.replace(
            r#"fail charge provider !in-flight {"status":409}"#,
            "info charge provider !timeout",
        );
        assert_eq!(check(&lost_then_charged).verdict, Some(Verdict::Valid));
    }

    #[test]
    fn a_replay_after_the_retention_may_differ() {
        let late = r#"
            1000000000 1 invoke charge provider {"idempotency_key":"k","body":"b"}
            1200000000 1 ok charge provider {"charge":"ch_1","status":201,"replayed":false}
            90000000000 2 invoke charge provider {"idempotency_key":"k","body":"b","retention_ms":60000}
            90100000000 2 ok charge provider {"charge":"ch_2","status":201,"replayed":false}"#;
        assert_eq!(check(late).verdict, Some(Verdict::Valid));
        // Within it, the same request is a double charge.
        let within = late.replace(r#""retention_ms":60000"#, r#""retention_ms":100000"#);
        assert_eq!(kinds(&within), [ViolationKind::ReplayDiffers]);
    }

    /// (c) A request while the first is in flight must get 409 or wait for
    /// the replay.
    #[test]
    fn concurrent_requests_with_one_key_do_not_both_charge() {
        let refused = r#"
            1000000000 1 invoke charge provider {"idempotency_key":"k","body":"b"}
            1100000000 2 invoke charge provider {"idempotency_key":"k","body":"b"}
            1150000000 2 fail charge provider !in-flight {"status":409}
            1200000000 1 ok charge provider {"charge":"ch_1","status":201,"replayed":false}"#;
        assert_eq!(check(refused).verdict, Some(Verdict::Valid));
        // The provider held the second request until the first was done,
        // and replayed it.
        let waited = r#"
            1000000000 1 invoke charge provider {"idempotency_key":"k","body":"b"}
            1100000000 2 invoke charge provider {"idempotency_key":"k","body":"b"}
            1200000000 1 ok charge provider {"charge":"ch_1","status":201,"replayed":false}
            1250000000 2 ok charge provider {"charge":"ch_1","status":201,"replayed":true}"#;
        assert_eq!(check(waited).verdict, Some(Verdict::Valid));
        let both = refused.replace(
            r#"1150000000 2 fail charge provider !in-flight {"status":409}"#,
            r#"1150000000 2 ok charge provider {"charge":"ch_2","status":201,"replayed":false}"#,
        );
        let result = check(&both);
        assert_eq!(result.verdict, Some(Verdict::Invalid));
        assert_eq!(result.violations.len(), 1, "{result:#?}");
        let violation = &result.violations[0];
        assert_eq!(violation.kind, ViolationKind::InFlightNotRefused);
        assert_eq!(violation.processes, [1, 2]);
        assert_eq!(violation.events, [0, 1, 2, 3]);
        let window = violation.window.expect("a window");
        assert_eq!((window.start_index, window.end_index), (1, 2));
        let text = &violation.explanation;
        for part in [
            "key \"k\": process 2's request (invoked at t=1.100 s, answered 201 ch_2 at t=1.150 s) and process 1's request (invoked at t=1.000 s, answered 201 ch_1 at t=1.200 s) were in flight at once",
            "refused (409) or replayed",
        ] {
            assert!(text.contains(part), "{text} lacks {part}");
        }
        // Requests one after the other are no overlap (a replay's business).
        let apart = r#"
            1000000000 1 invoke charge provider {"idempotency_key":"k","body":"b"}
            1200000000 1 info charge provider !timeout
            2000000000 2 invoke charge provider {"idempotency_key":"k","body":"b"}
            2100000000 2 ok charge provider {"charge":"ch_2","status":201}"#;
        assert_eq!(check(apart).verdict, Some(Verdict::Valid));
    }

    /// Many requests in flight at once: each that charged anew while
    /// another charge was in flight is one violation, found by the sweep.
    #[test]
    fn the_sweep_pairs_each_request_with_one_in_flight() {
        let mut lines = String::new();
        for process in 0..5u64 {
            lines.push_str(&format!(
                "{} {process} invoke charge provider {{\"idempotency_key\":\"k\",\"body\":\"b\"}}\n",
                1000 + process
            ));
        }
        for process in 0..5u64 {
            lines.push_str(&format!(
                "{} {process} ok charge provider {{\"charge\":\"ch_{process}\",\"status\":201}}\n",
                2000 + process
            ));
        }
        assert_eq!(kinds(&lines), vec![ViolationKind::InFlightNotRefused; 4]);
    }

    /// A table with a unique key refuses the second row: no effect, and no
    /// response to replay.
    #[test]
    fn a_table_refusing_a_second_row_is_no_replay() {
        let table = r#"
            1000000000 1 invoke charge payments {"idempotency_key":"k","body":"b"}
            1200000000 1 ok charge payments
            2000000000 2 invoke charge payments {"idempotency_key":"k","body":"b"}
            2100000000 2 fail charge payments !exists"#;
        assert_eq!(check(table).verdict, Some(Verdict::Valid));
        let twice = table.replace(
            "2100000000 2 fail charge payments !exists",
            "2100000000 2 ok charge payments",
        );
        assert_eq!(kinds(&twice), [ViolationKind::ReplayDiffers]);
        assert!(check(&twice).violations[0].explanation.contains("(a new row)"));
    }
}
