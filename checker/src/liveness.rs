//! Liveness: a lock must not stay unobtainable long after every holder is gone.
//!
//! The classic case is `SETNX` then `EXPIRE` as two commands with a crash in
//! between: the key never expires, and every later acquire fails forever.

use crate::beliefs::{BeliefEnd, Beliefs};
use crate::event::Function;
use crate::history::{History, KeyId, Moment, Op, OpId, Outcome};
use crate::verdict::{
    CheckOptions, CheckResult, Checker, Findings, Subject, Violation, ViolationKind, Window,
};
use crate::{format_seconds, format_time, is_refusal};

/// Per lock: a stretch of time in which no client believed it held the lock,
/// no acquire of unknown outcome might have taken it, and clients kept asking
/// and being refused as busy, longer than the bound (by default 3 × the largest TTL seen:
/// one TTL for a crashed holder's lease to run out, and room to spare).
///
/// The stuck-lock clock starts when the last holder lets go, and starts again
/// at every moment a lease service may have restarted its lease timers, since
/// a lease it restarts then rightly keeps the lock for up to a TTL after it:
/// - a fault's start or end (any nemesis event): a crash, a partition, a
///   paused or restarted server, a failover, and the leader elections any of
///   them sets off (etcd's new leader restarts every lease's TTL, so a lease
///   whose holder is gone may outlive the fault by an election and a TTL);
/// - the end of an acquire that failed because the service did not answer
///   (`unavailable`, `timeout`, `conn-lost`, …): an outage the history shows
///   even when no nemesis is recorded (a leader change, a restart by hand).
///
/// The bound of 3 TTLs then leaves two TTLs for the elections a fault sets
/// off, after its end, before the restarted lease runs out. A service that
/// keeps a lock from being taken for a while after its holder's session
/// ended (Consul's lock-delay, recorded as an acquire's `lock_delay_ms`)
/// adds that while to the bound: the wait is the service's design.
#[derive(Debug, Default, Clone, Copy)]
pub struct Liveness;

impl Checker for Liveness {
    fn name(&self) -> &'static str {
        crate::verdict::names::LIVENESS
    }

    fn judge(&self, history: &Subject<'_>, options: &CheckOptions) -> CheckResult {
        let keys = history.lock_keys();
        if keys.is_empty() {
            return CheckResult::not_applicable(self.name(), "no acquire operations");
        }
        let largest_ttl_ms = history
            .ops()
            .iter()
            .filter(|op| matches!(op.f, Function::Acquire | Function::Renew))
            .filter_map(|op| op.ttl_ms)
            .max();
        let bound_ns = match (options.liveness_bound_ns, largest_ttl_ms) {
            (Some(bound_ns), _) => bound_ns,
            (None, Some(ttl_ms)) => ttl_ms
                .saturating_mul(3)
                .saturating_add(history.lock_delay_ms())
                .saturating_mul(1_000_000),
            (None, None) => {
                return CheckResult::not_applicable(
                    self.name(),
                    "no acquire carries ttl_ms, so there is no default bound; give one with --liveness-bound",
                )
            }
        };
        let beliefs = history.beliefs();
        let mut attempts: Vec<Vec<OpId>> = vec![Vec::new(); history.key_count()];
        for (id, op) in history.ops().iter().enumerate() {
            if op.f == Function::Acquire {
                attempts[op.key as usize].push(id as OpId);
            }
        }
        let mut findings = Findings::new(self.name(), options);
        for &(key, _) in keys {
            let held = held_spans(history, beliefs, key, &attempts[key as usize]);
            let violations = stuck_stretches(history, &held, &attempts[key as usize], bound_ns);
            findings.key(history.key_name(key), attempts[key as usize].len() as u64, violations);
        }
        findings.note(format!("bound: {} without a holder", format_seconds(bound_ns)));
        let ttl_ns = largest_ttl_ms.unwrap_or(0).saturating_mul(1_000_000);
        for note in outage_notes(history, ttl_ns) {
            findings.note(note);
        }
        findings.finish()
    }
}

/// Spans in which someone held, or may have held, the lock, merged and sorted.
/// They are drawn wide on purpose, so that no failure they could explain is
/// counted: a grant may take effect anywhere from its acquire's invoke, a
/// release anywhere up to its completion, and an acquire of unknown outcome
/// may have been granted (that grant may then last one TTL, which the bound
/// allows for).
fn held_spans(
    history: &History,
    beliefs: &Beliefs,
    key: KeyId,
    attempts: &[OpId],
) -> Vec<(Moment, Moment)> {
    let mut spans: Vec<(Moment, Moment)> = beliefs
        .of_key(key)
        .iter()
        .map(|belief| {
            let end = match belief.end_reason {
                BeliefEnd::Released(release) => history.completion_or_end(history.op(release)),
                BeliefEnd::Crashed(_) | BeliefEnd::EndOfHistory => belief.end,
            };
            (history.op(belief.grant).invoke, end)
        })
        .collect();
    spans.extend(
        attempts
            .iter()
            .map(|&id| history.op(id))
            .filter(|op| op.outcome == Outcome::Info)
            .map(|op| (op.invoke, history.completion_or_end(op))),
    );
    spans.sort_unstable_by_key(|&(start, _)| start.index);
    let mut merged: Vec<(Moment, Moment)> = Vec::with_capacity(spans.len());
    for (start, end) in spans {
        match merged.last_mut() {
            Some(last) if start.index <= last.1.index => {
                if end.index > last.1.index {
                    last.1 = end;
                }
            }
            _ => merged.push((start, end)),
        }
    }
    merged
}

/// The failed attempts of one free stretch: from `free_since` (where the last
/// held span ended; `None` before the lock was ever held) to the next span.
struct Stretch<'h> {
    free_since: Option<Moment>,
    failed: Vec<&'h Op>,
    last_failure_end: Moment,
    /// Why `free_since` is not a holder's release, when it is not.
    restart: Option<Restart>,
}

/// Groups the failed attempts that lie wholly inside a free stretch (an
/// attempt that overlaps a held span may have failed because of it) and
/// judges each stretch.
fn stuck_stretches(
    history: &History,
    held: &[(Moment, Moment)],
    attempts: &[OpId],
    bound_ns: u64,
) -> Vec<Violation> {
    let mut violations = Vec::new();
    let mut current: Option<(usize, Stretch)> = None;
    // Only refusals show a stuck lock; an attempt that failed because the
    // service was unreachable shows an outage, which is not this check's.
    let refused = |op: &&Op| op.outcome == Outcome::Fail && is_refusal(op.error.as_deref());
    let restarts = restarts(history, attempts);
    for op in attempts.iter().map(|&id| history.op(id)).filter(refused) {
        let before = held.partition_point(|&(start, _)| start.index < op.invoke.index);
        let end = history.completion_or_end(op);
        let after_previous = before == 0 || held[before - 1].1.index < op.invoke.index;
        let before_next = held.get(before).is_none_or(|&(next, _)| end.index < next.index);
        if !(after_previous && before_next) {
            continue;
        }
        match &mut current {
            Some((stretch_id, stretch)) if *stretch_id == before => {
                stretch.failed.push(op);
                if end.index > stretch.last_failure_end.index {
                    stretch.last_failure_end = end;
                }
            }
            _ => {
                if let Some((_, done)) = current.take() {
                    violations.extend(judge(history, done, &restarts, bound_ns));
                }
                let free_since = before.checked_sub(1).map(|last| held[last].1);
                current = Some((
                    before,
                    Stretch { free_since, failed: vec![op], last_failure_end: end, restart: None },
                ));
            }
        }
    }
    if let Some((_, done)) = current {
        violations.extend(judge(history, done, &restarts, bound_ns));
    }
    violations
}

/// Why the stuck-lock clock started again (see [`Liveness`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Restart {
    /// A fault started or ended.
    Fault,
    /// An acquire failed because the service did not answer.
    Outage,
}

/// Every moment the stuck-lock clock starts again, in history order.
fn restarts(history: &History, attempts: &[OpId]) -> Vec<(Moment, Restart)> {
    let mut restarts: Vec<(Moment, Restart)> = attempts
        .iter()
        .map(|&id| history.op(id))
        .filter(|op| op.outcome == Outcome::Fail && !is_refusal(op.error.as_deref()))
        .map(|op| (history.completion_or_end(op), Restart::Outage))
        .chain(history.nemesis_events().iter().map(|event| (event.at, Restart::Fault)))
        .collect();
    restarts.sort_unstable_by_key(|(moment, _)| moment.index);
    restarts
}

fn judge(
    history: &History,
    mut stretch: Stretch,
    restarts: &[(Moment, Restart)],
    bound_ns: u64,
) -> Option<Violation> {
    let end = stretch.last_failure_end;
    // The last restart before the stretch's last refusal starts its clock.
    let last_invoke = stretch.failed[stretch.failed.len() - 1].invoke.index;
    let restart =
        restarts[..restarts.partition_point(|(moment, _)| moment.index < last_invoke)].last();
    let mut start = stretch.free_since.unwrap_or(stretch.failed[0].invoke);
    if let Some(&(moment, cause)) = restart.filter(|(moment, _)| moment.index > start.index) {
        start = moment;
        stretch.free_since = Some(moment);
        stretch.failed.retain(|op| op.invoke.index > moment.index);
        stretch.restart = Some(cause);
    }
    let first = *stretch.failed.first()?;
    let window = Window::between(start, end);
    if window.duration_ns() <= bound_ns {
        return None;
    }
    let last = stretch.failed[stretch.failed.len() - 1];
    let key = history.key_name(first.key);
    let since = match stretch.free_since {
        Some(free) if stretch.restart == Some(Restart::Outage) => format!(
            "since the lock service last failed to answer, at index {} (t={})",
            free.index,
            format_time(free.time_ns)
        ),
        Some(free) if stretch.restart == Some(Restart::Fault) => format!(
            "since the last fault started or ended, at index {} (t={})",
            free.index,
            format_time(free.time_ns)
        ),
        Some(free) => format!(
            "since the last holder let go at index {} (t={})",
            free.index,
            format_time(free.time_ns)
        ),
        None => format!(
            "since the first attempt at index {} (t={}); nobody ever held it",
            first.invoke.index,
            format_time(first.invoke.time_ns)
        ),
    };
    let mut events = vec![
        start.index,
        first.invoke.index,
        last.invoke.index,
        history.completion_or_end(last).index,
    ];
    events.sort_unstable();
    events.dedup();
    let mut processes: Vec<i64> = stretch.failed.iter().map(|op| op.process).collect();
    processes.sort_unstable();
    processes.dedup();
    Some(Violation {
        root: None,
        finding: None,
        linearization: None,
        kind: ViolationKind::Stuck,
        key: key.to_string(),
        processes,
        window: Some(window),
        events,
        explanation: format!(
            "{key:?} could not be obtained for {length} {since}, while no client believed it held it: \
             {count} acquire attempts failed, the last at index {last_index} (t={last_time}). The bound is {bound}.",
            length = format_seconds(window.duration_ns()),
            count = stretch.failed.len(),
            last_index = history.completion_or_end(last).index,
            last_time = format_time(end.time_ns),
            bound = format_seconds(bound_ns),
        ),
    })
}

/// A stretch in which the lock service answered no lock operation.
struct Outage {
    /// From the first unanswered operation's invoke to the next answer (or
    /// the end of the history).
    window: Window,
    unanswered: u64,
}

/// Whether a lock operation's completion is the service's answer: a grant,
/// a renewal or release that took, or a refusal. A timeout, a refused
/// connection or a crash is not.
fn answered(op: &Op) -> bool {
    match op.outcome {
        Outcome::Ok => true,
        Outcome::Fail => is_refusal(op.error.as_deref()),
        Outcome::Info => false,
    }
}

/// Every stretch in which the lock service answered no lock operation
/// for longer than `longer_than_ns`, in history order.
fn outages(history: &History, longer_than_ns: u64) -> Vec<Outage> {
    let mut outages = Vec::new();
    let mut open: Option<(Moment, u64)> = None;
    let lock_op = |op: &Op| matches!(op.f, Function::Acquire | Function::Renew | Function::Release);
    let mut close = |open: &mut Option<(Moment, u64)>, end: Moment| {
        if let Some((start, unanswered)) = open.take() {
            let window = Window::between(start, end);
            if window.duration_ns() > longer_than_ns {
                outages.push(Outage { window, unanswered });
            }
        }
    };
    for step in history.steps().filter(|step| step.is_completion) {
        let op = history.op(step.op);
        if !lock_op(op) {
            continue;
        }
        let end = history.completion_or_end(op);
        if answered(op) {
            close(&mut open, end);
        } else {
            let (_, unanswered) = open.get_or_insert((op.invoke, 0));
            *unanswered += 1;
        }
    }
    close(&mut open, history.end());
    outages
}

/// The faults on at some point of `window`: each as `kill (replica)`, in
/// the order they started.
fn faults_during(history: &History, window: &Window) -> Vec<String> {
    let mut on: Vec<(&crate::history::NemesisEvent, bool)> = Vec::new();
    for event in history.nemesis_events() {
        let same = |(start, stopped): &(&crate::history::NemesisEvent, bool)| {
            !stopped && start.fault == event.fault && start.targets == event.targets
        };
        match event.f {
            Function::Start if event.at.index <= window.end_index => on.push((event, false)),
            Function::Stop => {
                if let Some(at) = on.iter().position(same) {
                    // Stopped before the window began: it was not on in it.
                    if event.at.index < window.start_index {
                        on.remove(at);
                    } else {
                        on[at].1 = true;
                    }
                }
            }
            _ => {}
        }
    }
    let mut names: Vec<String> = on
        .into_iter()
        .map(|(start, _)| {
            let fault = start.fault.as_deref().unwrap_or("a fault");
            match start.targets.as_slice() {
                [] => fault.to_string(),
                targets => format!("{fault} ({})", targets.join(", ")),
            }
        })
        .collect();
    names.dedup();
    names
}

/// What the notes say of the stretches in which the service answered
/// nothing for longer than a TTL (`ttl_ns`): unavailability, which this
/// check does not count. During a fault it is what the fault is expected
/// to do (a synchronous replica that is down stops every write); with no
/// fault on, the service went away by itself.
fn outage_notes(history: &History, ttl_ns: u64) -> Vec<String> {
    const SHOWN: usize = 3;
    let outages = outages(history, ttl_ns.max(1));
    let mut longest: Vec<&Outage> = outages.iter().collect();
    longest.sort_by_key(|outage| std::cmp::Reverse(outage.window.duration_ns()));
    let mut notes: Vec<String> = longest
        .iter()
        .take(SHOWN)
        .map(|outage| {
            let faults = faults_during(history, &outage.window);
            let why = match faults.as_slice() {
                [] => "with no fault on: the service went away by itself".to_string(),
                faults => format!(
                    "while {} was on: unavailability a fault is expected to cause, not counted",
                    faults.join(", ")
                ),
            };
            format!(
                "unavailable for {} from t={} to t={}: {} lock operations got no answer and none got one, {why}",
                format_seconds(outage.window.duration_ns()),
                format_time(outage.window.start_ns),
                format_time(outage.window.end_ns),
                outage.unanswered,
            )
        })
        .collect();
    if outages.len() > SHOWN {
        let total: u64 = outages.iter().map(|outage| outage.window.duration_ns()).sum();
        notes.push(format!(
            "unavailable {} times in all, for {} (longer than a TTL each)",
            outages.len(),
            format_seconds(total)
        ));
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history_from;

    fn verdict(lines: &str) -> Option<crate::Verdict> {
        Liveness.check(&history_from(lines), &CheckOptions::default()).verdict
    }

    fn notes(lines: &str) -> Vec<String> {
        Liveness.check(&history_from(lines), &CheckOptions::default()).notes
    }

    #[test]
    fn a_stretch_without_an_answer_is_noted_with_the_fault_on_not_counted() {
        // ttl 1 s; from 1 s to 3.5 s every operation times out while a
        // replica is down (a synchronous primary waits for it).
        let during = r#"
            0 1 invoke acquire l {"ttl_ms":1000}
            1 1 ok acquire l
            2 1 invoke release l
            3 1 ok release l
            900000000 "nemesis" info start null {"fault":"kill","targets":["replica"]}
            1000000000 2 invoke acquire l {"ttl_ms":1000}
            1250000000 2 info acquire l !timeout
            1300000000 3 invoke acquire l {"ttl_ms":1000}
            1550000000 3 info acquire l !timeout
            3000000000 4 invoke acquire l {"ttl_ms":1000}
            3250000000 4 info acquire l !timeout
            3300000000 "nemesis" info stop null {"fault":"kill","targets":["replica"]}
            3400000000 5 invoke acquire l {"ttl_ms":1000}
            3500000000 5 ok acquire l"#;
        assert_eq!(verdict(during), Some(crate::Verdict::Valid));
        let noted = notes(during);
        assert_eq!(
            noted[1],
            "unavailable for 2.500 s from t=1.000 s to t=3.500 s: 3 lock operations got no answer \
             and none got one, while kill (replica) was on: unavailability a fault is expected to \
             cause, not counted",
            "{noted:?}"
        );
        // The same stretch with no fault recorded says so.
        let alone: String =
            during.lines().filter(|line| !line.contains("nemesis")).collect::<Vec<_>>().join("\n");
        let noted = notes(&alone);
        assert!(
            noted[1].ends_with("with no fault on: the service went away by itself"),
            "{noted:?}"
        );
        // A fault that stopped before the stretch began is not named.
        let before: String = alone
            .lines()
            .flat_map(|line| match line.trim().starts_with("3 1 ok release") {
                true => vec![
                    line.to_string(),
                    r#"800000000 "nemesis" info start null {"fault":"kill","targets":["replica"]}"#
                        .to_string(),
                    r#"950000000 "nemesis" info stop null {"fault":"kill","targets":["replica"]}"#
                        .to_string(),
                ],
                false => vec![line.to_string()],
            })
            .collect::<Vec<_>>()
            .join("\n");
        let noted = notes(&before);
        assert!(noted[1].contains("with no fault on"), "{noted:?}");
        // Shorter than a TTL: no note.
        let short = r#"
            0 2 invoke acquire l {"ttl_ms":1000}
            250000000 2 info acquire l !timeout
            300000000 3 invoke acquire l {"ttl_ms":1000}
            400000000 3 ok acquire l"#;
        assert_eq!(notes(short).len(), 1);
    }

    #[test]
    fn lock_never_freed_after_holder_crash_is_stuck() {
        // ttl 1 s, so the bound is 3 s; attempts fail for 10 s after the crash.
        let lines = "
            0 1 invoke acquire l {\"ttl_ms\":1000}
            1 1 ok acquire l
            2 1 invoke renew l
            3 1 info renew l
            5000000000 2 invoke acquire l {\"ttl_ms\":1000}
            5000000001 2 fail acquire l
            10000000000 2 invoke acquire l {\"ttl_ms\":1000}
            10000000001 2 fail acquire l";
        assert_eq!(verdict(lines), Some(crate::Verdict::Invalid));
    }

    #[test]
    fn an_outage_restarts_the_clock() {
        // The holder crashes; the service is unreachable until 4 s (an
        // election, a restart), then refuses for 2 s while a lease it
        // restarted at the outage's end runs out: within the 3 s bound.
        let lines = "
            0 1 invoke acquire l {\"ttl_ms\":1000}
            1 1 ok acquire l
            2 1 invoke renew l
            3 1 info renew l
            2000000000 2 invoke acquire l {\"ttl_ms\":1000}
            2000000001 2 fail acquire l !busy
            4000000000 2 invoke acquire l {\"ttl_ms\":1000}
            4000000001 2 fail acquire l !unavailable
            6000000000 2 invoke acquire l {\"ttl_ms\":1000}
            6000000001 2 fail acquire l !busy";
        assert_eq!(verdict(lines), Some(crate::Verdict::Valid));
        // Refused for longer than the bound after the outage: stuck.
        let stuck = format!(
            "{lines}
            8000000000 2 invoke acquire l {{\"ttl_ms\":1000}}
            8000000001 2 fail acquire l !busy"
        );
        assert_eq!(verdict(&stuck), Some(crate::Verdict::Invalid));
    }

    #[test]
    fn a_fault_starting_or_ending_restarts_the_clock() {
        // The holder crashes at once; refusals go on for 5 s. A partition
        // among the members ends at 2.5 s: a new leader may have restarted
        // the lease's TTL then, so 2.5 s of refusals after it are within
        // the 3 s bound (the history of sim-etcd seed 54 under partition).
        let refusals = "
            0 1 invoke acquire l {\"ttl_ms\":1000}
            1 1 ok acquire l
            2 1 invoke renew l
            3 1 info renew l
            1000000000 2 invoke acquire l {\"ttl_ms\":1000}
            1000000001 2 fail acquire l !busy
            5000000000 2 invoke acquire l {\"ttl_ms\":1000}
            5000000001 2 fail acquire l !busy";
        assert_eq!(verdict(refusals), Some(crate::Verdict::Invalid), "no fault: stuck for 5 s");
        let with_fault = |f: &str| {
            let fault = format!(
                "2500000000 \"nemesis\" info {f} - {{\"fault\":\"partition\",\"targets\":[\"etcd-1\"]}}"
            );
            let mut lines: Vec<&str> = refusals.lines().collect();
            lines.insert(7, &fault);
            verdict(&lines.join("\n"))
        };
        assert_eq!(with_fault("stop"), Some(crate::Verdict::Valid), "a fault's end");
        assert_eq!(with_fault("start"), Some(crate::Verdict::Valid), "a fault's start");
        // Refused for longer than the bound after the fault: stuck, and said so.
        let stuck = format!(
            "{refusals}
            6000000000 \"nemesis\" info stop - {{\"fault\":\"kill\",\"targets\":[\"redis-0\"]}}
            9500000000 2 invoke acquire l {{\"ttl_ms\":1000}}
            9500000001 2 fail acquire l !busy"
        );
        let result = Liveness.check(&history_from(&stuck), &CheckOptions::default());
        assert_eq!(result.verdict, Some(crate::Verdict::Invalid));
        let explanation = &result.violations[0].explanation;
        assert!(
            explanation.contains("since the last fault started or ended, at index 8"),
            "{explanation}"
        );
    }

    #[test]
    fn busy_answer_racing_a_grant_after_a_long_idle_stretch_is_not_stuck() {
        // Nobody asks for 100 s; then 3's attempt fails because 2's grant
        // landed on the server before 2 heard of it.
        let lines = "
            0 1 invoke acquire l {\"ttl_ms\":1000}
            1 1 ok acquire l
            2 1 invoke release l
            3 1 ok release l
            100000000000 2 invoke acquire l {\"ttl_ms\":1000}
            100000000001 3 invoke acquire l {\"ttl_ms\":1000}
            100000000002 3 fail acquire l
            100000000003 2 ok acquire l";
        assert_eq!(verdict(lines), Some(crate::Verdict::Valid));
    }

    #[test]
    fn without_ttl_or_bound_it_does_not_apply() {
        let lines = "
            0 1 invoke acquire l
            1 1 ok acquire l";
        assert_eq!(verdict(lines), None);
    }
}
