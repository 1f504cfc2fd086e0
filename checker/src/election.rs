//! Re-election: a new leader within the stated bound after the leader dies.
//!
//! A leader election is a lock whose acquires are candidates' campaigns:
//! each says, as `elect_within_ms`, the bound within which a new leader
//! must be elected once the leader is gone. For each leadership of a key
//! (an acquire `ok`), its end is
//! - its resignation: the completion of a release that took effect;
//! - else, when it died (its renewal failed or never came, its process
//!   ended `info`, it stalled, its resignation failed), the moment its
//!   lease ran out at the latest: its last `ok` grant or renewal's
//!   completion plus its `ttl_ms`.
//!
//! An acquire of unknown outcome may have made a leader nobody knows of,
//! whose lease then runs a TTL from that acquire's completion: the key may
//! rightly be taken until then, and that counts as led.
//!
//! From the end of the last leadership, once some candidate campaigns (an
//! acquire of the key in flight then, or invoked later), the next `ok`
//! acquire must come within the bound (plus a lock-delay the service
//! states, `lock_delay_ms`). A stretch that overlaps a fault (from its
//! start to a TTL after its stop) is unavailability the fault is expected
//! to cause: noted, not counted.

use rustc_hash::FxHashMap as HashMap;

use crate::beliefs::BeliefEnd;
use crate::event::Function;
use crate::history::{History, KeyId, Moment, NemesisEvent, Op, OpId, Outcome};
use crate::verdict::{
    CheckOptions, CheckResult, Checker, Findings, Subject, Violation, ViolationKind, Window,
};
use crate::{format_seconds, format_time};

#[derive(Debug, Default, Clone, Copy)]
pub struct ReElection;

impl Checker for ReElection {
    fn name(&self) -> &'static str {
        crate::verdict::names::RE_ELECTION
    }

    fn judge(&self, history: &Subject<'_>, options: &CheckOptions) -> CheckResult {
        let Some(bound_ms) = history.elect_within_ms() else {
            return CheckResult::not_applicable(self.name(), "no election in this history");
        };
        let bound_ns = bound_ms.saturating_add(history.lock_delay_ms()).saturating_mul(1_000_000);
        let faults = fault_spans(history);
        let mut findings = Findings::new(self.name(), options);
        let mut handovers = 0u64;
        let mut longest_ns = 0u64;
        let mut excused: Vec<Stretch> = Vec::new();
        for &(key, ops) in history.lock_keys() {
            let judged = judge_key(history, key, bound_ns, &faults);
            handovers += judged.handovers;
            longest_ns = longest_ns.max(judged.longest_ns);
            let violations = judged
                .late
                .iter()
                .map(|stretch| violation(history, key, stretch, bound_ns))
                .collect();
            findings.key(history.key_name(key), ops, violations);
            excused.extend(judged.excused);
        }
        findings.note(format!(
            "{handovers} handover{}, the longest {} after the leader's end (bound {})",
            if handovers == 1 { "" } else { "s" },
            format_seconds(longest_ns),
            format_seconds(bound_ns)
        ));
        for stretch in excused.iter().take(3) {
            findings.note(format!(
                "no leader for {} from t={} to t={} while {} was on: unavailability a fault is \
                 expected to cause, not counted",
                format_seconds(stretch.window().duration_ns()),
                format_time(stretch.from.time_ns),
                format_time(stretch.until.time_ns),
                stretch.faults.join(", ")
            ));
        }
        if excused.len() > 3 {
            findings.note(format!(
                "{} stretches without a leader in all overlapped a fault and were not counted",
                excused.len()
            ));
        }
        findings.finish()
    }
}

/// How a leadership ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// It resigned: its release took effect (at this op's completion).
    Resigned,
    /// It died: its lease ran out (at the latest) then.
    LeaseRanOut,
    /// A grant of unknown outcome: a leader nobody knew of, whose lease
    /// ran out then.
    Unknown,
}

/// What held (or may have held) the key until some moment.
#[derive(Debug, Clone, Copy)]
struct Led {
    /// The grant (an acquire `ok`, or `info`).
    grant: OpId,
    process: i64,
    end_ns: u64,
    /// The event at or after which it ended (a release's completion, the
    /// last renewal's, the grant's).
    end_index: u64,
    how: End,
}

/// A stretch without a leader while candidates campaigned.
#[derive(Debug, Clone)]
struct Stretch {
    led: Led,
    /// When the clock started: the leader's end, or the first campaign
    /// after it.
    from: Moment,
    /// The next grant's completion, or the last campaign's end.
    until: Moment,
    /// The grant that ended it, if one did.
    next: Option<OpId>,
    /// The candidates that campaigned in it.
    candidates: Vec<i64>,
    /// The faults it overlapped (excused when any).
    faults: Vec<String>,
}

impl Stretch {
    fn window(&self) -> Window {
        Window::between(self.from, self.until)
    }
}

#[derive(Debug, Default)]
struct Judged {
    handovers: u64,
    longest_ns: u64,
    late: Vec<Stretch>,
    excused: Vec<Stretch>,
}

/// A fault from its start to its stop (or the history's end), by time,
/// with its name.
struct FaultSpan {
    start_ns: u64,
    stop_ns: u64,
    name: String,
}

/// Pairs each nemesis start with the first open start of the same fault
/// and targets' stop.
fn fault_spans(history: &History) -> Vec<FaultSpan> {
    let mut spans: Vec<(&NemesisEvent, Option<u64>)> = Vec::new();
    for event in history.nemesis_events() {
        match event.f {
            Function::Start => spans.push((event, None)),
            Function::Stop => {
                let open = spans.iter_mut().find(|(start, stop)| {
                    stop.is_none() && start.fault == event.fault && start.targets == event.targets
                });
                if let Some((_, stop)) = open {
                    *stop = Some(event.at.time_ns);
                }
            }
            _ => {}
        }
    }
    let end = history.end().time_ns;
    spans
        .into_iter()
        .map(|(start, stop)| {
            let fault = start.fault.as_deref().unwrap_or("a fault");
            let name = match start.targets.as_slice() {
                [] => fault.to_string(),
                targets => format!("{fault} ({})", targets.join(", ")),
            };
            FaultSpan { start_ns: start.at.time_ns, stop_ns: stop.unwrap_or(end), name }
        })
        .collect()
}

/// The TTL in ns an op asked for.
fn ttl_ns(op: &Op) -> Option<u64> {
    op.ttl_ms.map(|ttl| ttl.saturating_mul(1_000_000))
}

fn judge_key(history: &Subject<'_>, key: KeyId, bound_ns: u64, faults: &[FaultSpan]) -> Judged {
    let mut judged = Judged::default();
    // Each process's renewals of the key that may have extended its lease
    // (ok, or of unknown outcome), and the key's campaigns, in history order.
    let mut renewed: HashMap<i64, Vec<Moment>> = HashMap::default();
    let mut campaigns: Vec<OpId> = Vec::new();
    let mut moments: Vec<Moment> = Vec::new();
    let mut longest_ttl_ns = 0u64;
    for (id, op) in history.ops().iter().enumerate() {
        if op.key != key {
            continue;
        }
        moments.push(op.invoke);
        moments.push(history.completion_or_end(op));
        match op.f {
            Function::Renew if op.outcome != Outcome::Fail => {
                renewed.entry(op.process).or_default().push(history.completion_or_end(op));
            }
            Function::Acquire => {
                campaigns.push(id as OpId);
                longest_ttl_ns = longest_ttl_ns.max(ttl_ns(op).unwrap_or(0));
            }
            _ => {}
        }
    }
    moments.sort_unstable_by_key(|moment| moment.index);
    // Every leadership, and every grant of unknown outcome, from its start.
    let mut led: Vec<(Moment, Led, bool)> = Vec::new();
    for belief in history.beliefs().of_key(key) {
        let grant = history.op(belief.grant);
        let resigned = match belief.end_reason {
            BeliefEnd::Released(release) => {
                let release = history.op(release);
                (release.outcome == Outcome::Ok).then(|| history.completion_or_end(release))
            }
            BeliefEnd::Crashed(_) | BeliefEnd::EndOfHistory => None,
        };
        let (end_ns, end_index, how) = match (resigned, belief.end_reason) {
            (Some(done), _) => (done.time_ns, done.index, End::Resigned),
            // Still leading when the history ended.
            (None, _) => {
                let last = renewed
                    .get(&belief.process)
                    .map(|renewals| {
                        renewals
                            .iter()
                            .filter(|at| {
                                at.index > belief.start.index && at.index <= belief.end.index
                            })
                            .copied()
                            .max_by_key(|at| at.index)
                    })
                    .unwrap_or_default()
                    .unwrap_or(belief.start);
                match ttl_ns(grant) {
                    Some(ttl) => (last.time_ns.saturating_add(ttl), last.index, End::LeaseRanOut),
                    None => (belief.end.time_ns, belief.end.index, End::LeaseRanOut),
                }
            }
        };
        let led_by = Led { grant: belief.grant, process: belief.process, end_ns, end_index, how };
        led.push((belief.start, led_by, true));
    }
    for &id in &campaigns {
        let op = history.op(id);
        if op.outcome != Outcome::Info {
            continue;
        }
        let done = history.completion_or_end(op);
        let end_ns = done.time_ns.saturating_add(ttl_ns(op).unwrap_or(0));
        let unknown = Led {
            grant: id,
            process: op.process,
            end_ns,
            end_index: done.index,
            how: End::Unknown,
        };
        led.push((op.invoke, unknown, false));
    }
    led.sort_by_key(|(start, _, _)| (start.time_ns, start.index));
    let mut covered: Option<Led> = None;
    for (start, next, is_grant) in led {
        if let (Some(previous), true) = (covered, is_grant) {
            judged.handovers += 1;
            if start.time_ns > previous.end_ns {
                judged.longest_ns = judged.longest_ns.max(start.time_ns - previous.end_ns);
                let stretch =
                    stretch(history, &campaigns, &moments, previous, Some((next.grant, start)));
                judge(&mut judged, stretch, bound_ns, faults, longest_ttl_ns);
            }
        }
        if covered.is_none_or(|covered| next.end_ns > covered.end_ns) {
            covered = Some(next);
        }
    }
    // After the last leader's end: candidates that never won.
    if let Some(previous) = covered {
        let stretch = stretch(history, &campaigns, &moments, previous, None);
        judge(&mut judged, stretch, bound_ns, faults, longest_ttl_ns);
    }
    judged
}

/// The stretch without a leader after `previous` ended, until `next`'s
/// grant (its op and completion), or without one until the last campaign
/// ended: none when nobody campaigned in it.
fn stretch(
    history: &History,
    campaigns: &[OpId],
    moments: &[Moment],
    previous: Led,
    next: Option<(OpId, Moment)>,
) -> Option<Stretch> {
    let end_ns = previous.end_ns;
    let in_it: Vec<&Op> = campaigns
        .iter()
        .map(|&id| history.op(id))
        .filter(|op| history.completion_or_end(op).time_ns > end_ns)
        .filter(|op| next.is_none_or(|(_, granted)| op.invoke.index < granted.index))
        .collect();
    let first = in_it.iter().min_by_key(|op| op.invoke.index)?;
    let from = match first.invoke.time_ns > end_ns {
        true => first.invoke,
        // Campaigning at the leader's end: the clock starts then, at the
        // first event from that moment on.
        false => {
            let at = moments.partition_point(|moment| moment.time_ns < end_ns);
            let index = moments.get(at).map_or(first.invoke.index, |moment| moment.index);
            Moment { index, time_ns: end_ns }
        }
    };
    let until = match next {
        Some((_, granted)) => granted,
        None => in_it.iter().map(|op| history.completion_or_end(op)).max_by_key(|at| at.index)?,
    };
    let mut candidates: Vec<i64> = in_it.iter().map(|op| op.process).collect();
    candidates.sort_unstable();
    candidates.dedup();
    Some(Stretch {
        led: previous,
        from,
        until,
        next: next.map(|(grant, _)| grant),
        candidates,
        faults: Vec::new(),
    })
}

/// Counts `stretch` as late if it outlasted the bound outside the faults
/// it overlaps: each fault, from its start to a TTL after its stop, is
/// time the service may rightly be without a leader, and the clock starts
/// again after it, as liveness's does. A long stretch that a short fault
/// touched is still late.
fn judge(
    judged: &mut Judged,
    stretch: Option<Stretch>,
    bound_ns: u64,
    faults: &[FaultSpan],
    ttl_ns: u64,
) {
    let Some(mut stretch) = stretch else { return };
    if stretch.until.time_ns.saturating_sub(stretch.from.time_ns) <= bound_ns {
        return;
    }
    let (from, until) = (stretch.from.time_ns, stretch.until.time_ns);
    let mut overlapping: Vec<&FaultSpan> = faults
        .iter()
        .filter(|fault| fault.start_ns <= until && from <= fault.stop_ns.saturating_add(ttl_ns))
        .collect();
    overlapping.sort_by_key(|fault| fault.start_ns);
    // The longest time without a leader outside every fault's window.
    let mut clock = from;
    let mut late = false;
    for fault in &overlapping {
        late |= fault.start_ns.saturating_sub(clock) > bound_ns;
        clock = clock.max(fault.stop_ns.saturating_add(ttl_ns));
    }
    late |= until.saturating_sub(clock) > bound_ns;
    stretch.faults = overlapping.iter().map(|fault| fault.name.clone()).collect();
    stretch.faults.dedup();
    match late {
        true => judged.late.push(stretch),
        false => judged.excused.push(stretch),
    }
}

/// One violation: the stretch, its dead leader and its candidates.
fn violation(history: &History, key: KeyId, stretch: &Stretch, bound_ns: u64) -> Violation {
    let name = history.key_name(key);
    let grant = history.op(stretch.led.grant);
    let term = grant.fence.map(|fence| format!(" (term {fence})")).unwrap_or_default();
    let ended = match stretch.led.how {
        End::Resigned => format!("resigned at t={}", format_time(stretch.led.end_ns)),
        End::LeaseRanOut => {
            format!("died, and its lease ran out by t={}", format_time(stretch.led.end_ns))
        }
        End::Unknown => format!(
            "may have been granted by an acquire of unknown outcome, whose lease ran out by t={}",
            format_time(stretch.led.end_ns)
        ),
    };
    let outcome = match stretch.next {
        Some(next) => format!(
            "the next leader, process {}, was elected only at t={}",
            history.op(next).process,
            format_time(stretch.until.time_ns)
        ),
        None => format!(
            "no leader was elected by the last campaign's end at t={}",
            format_time(stretch.until.time_ns)
        ),
    };
    let candidates: Vec<String> = stretch.candidates.iter().map(i64::to_string).collect();
    let window = stretch.window();
    let mut events = vec![
        history.completion_or_end(grant).index,
        stretch.led.end_index,
        stretch.from.index,
        stretch.until.index,
    ];
    events.sort_unstable();
    events.dedup();
    let mut processes = stretch.candidates.clone();
    processes.retain(|&process| process != stretch.led.process);
    processes.insert(0, stretch.led.process);
    Violation {
        root: None,
        finding: None,
        linearization: None,
        kind: ViolationKind::NoLeader,
        key: name.to_string(),
        processes,
        window: Some(window),
        events,
        explanation: format!(
            "the leader of {name:?}, process {}{term} granted at index {}, {ended}; candidates \
             (processes {}) campaigned from t={} and no leader was elected for {}: {outcome}. \
             The bound is {}.",
            stretch.led.process,
            history.completion_or_end(grant).index,
            candidates.join(", "),
            format_time(stretch.from.time_ns),
            format_seconds(window.duration_ns()),
            format_seconds(bound_ns),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{history_from, Verdict};

    fn check(lines: &str) -> CheckResult {
        ReElection.check(&history_from(lines), &CheckOptions::default())
    }

    const CAMPAIGN: &str = r#"{"ttl_ms":1000,"elect_within_ms":2100}"#;

    fn lines(template: &str) -> String {
        template.replace("CAMPAIGN", CAMPAIGN)
    }

    #[test]
    fn a_resignation_with_a_quick_handover_is_valid() {
        let history = lines(
            r#"
            0 1 invoke acquire l CAMPAIGN
            1000000 1 ok acquire l {"fence":1}
            2000000 2 invoke acquire l CAMPAIGN
            3000000 2 fail acquire l !busy
            300000000 1 invoke renew l {"ttl_ms":1000}
            301000000 1 ok renew l
            500000000 1 invoke release l {"fence":1}
            501000000 1 ok release l
            510000000 2 invoke acquire l CAMPAIGN
            520000000 2 ok acquire l {"fence":2}
            900000000 2 invoke release l {"fence":2}
            901000000 2 ok release l"#,
        );
        let result = check(&history);
        assert_eq!(result.verdict, Some(Verdict::Valid), "{result:?}");
        assert_eq!(
            result.notes[0],
            "1 handover, the longest 19.0 ms after the leader's end (bound 2.100 s)"
        );
    }

    /// Process 1 leads with term 1, renews once at 0.301 s and dies (its
    /// lease runs out by 1.301 s); process 2 campaigns every half second
    /// and is refused until 5 s.
    fn dead_leader(extra: &str) -> String {
        let mut history = lines(
            r#"
            0 1 invoke acquire l CAMPAIGN
            1000000 1 ok acquire l {"fence":1}
            300000000 1 invoke renew l {"ttl_ms":1000}
            301000000 1 ok renew l
            400000000 2 invoke acquire l CAMPAIGN
            401000000 2 fail acquire l !busy"#,
        );
        history.push_str(extra);
        for at in 3..10 {
            let ns = at as u64 * 500_000_000;
            history.push_str(&format!(
                "\n{ns} 2 invoke acquire l {CAMPAIGN}\n{} 2 fail acquire l !busy",
                ns + 1_000_000
            ));
        }
        history.push_str(&format!(
            "\n5000000000 2 invoke acquire l {CAMPAIGN}\n5001000000 2 ok acquire l {{\"fence\":2}}"
        ));
        // In time order, whatever `extra` adds.
        let mut lines: Vec<&str> = history.lines().filter(|line| !line.trim().is_empty()).collect();
        lines.sort_by_key(|line| line.trim().split(' ').next().and_then(|t| t.parse::<u64>().ok()));
        lines.join("\n")
    }

    #[test]
    fn a_dead_leader_with_candidates_and_a_late_new_leader_is_a_violation() {
        let result = check(&dead_leader(""));
        assert_eq!(result.verdict, Some(Verdict::Invalid), "{result:?}");
        let violation = &result.violations[0];
        assert_eq!(violation.kind, ViolationKind::NoLeader);
        assert_eq!(violation.processes, [1, 2]);
        let explanation = &violation.explanation;
        for part in [
            "process 1 (term 1)",
            "its lease ran out by t=1.301 s",
            "candidates (processes 2) campaigned from t=1.500 s",
            "no leader was elected for 3.501 s",
            "process 2, was elected only at t=5.001 s",
            "The bound is 2.100 s",
        ] {
            assert!(explanation.contains(part), "{part:?} not in {explanation}");
        }
    }

    #[test]
    fn the_same_stretch_during_a_fault_is_expected_unavailability() {
        let fault = r#"
            200000000 "nemesis" info start null {"fault":"partition","targets":["redis-0"]}
            2000000000 "nemesis" info stop null {"fault":"partition","targets":["redis-0"]}"#;
        let result = check(&dead_leader(fault));
        assert_eq!(result.verdict, Some(Verdict::Valid), "{result:?}");
        assert!(
            result.notes[1].contains("while partition (redis-0) was on: unavailability a fault is expected to cause, not counted"),
            "{:?}",
            result.notes
        );
    }

    #[test]
    fn a_short_fault_does_not_excuse_a_long_stretch_after_it() {
        // A pause of some client at the start: its window (to a TTL after
        // its stop) ends at 1.5 s, and no leader comes for 3.5 s more.
        let fault = r#"
            200000000 "nemesis" info start null {"fault":"pause","targets":["client-3"]}
            500000000 "nemesis" info stop null {"fault":"pause","targets":["client-3"]}"#;
        let result = check(&dead_leader(fault));
        assert_eq!(result.verdict, Some(Verdict::Invalid), "{result:?}");
        assert_eq!(result.violations[0].kind, ViolationKind::NoLeader);
    }

    #[test]
    fn candidates_that_never_win_after_the_leader_dies_are_a_violation() {
        let history = lines(
            r#"
            0 1 invoke acquire l CAMPAIGN
            1000000 1 ok acquire l {"fence":1}
            1500000000 2 invoke acquire l CAMPAIGN
            1501000000 2 fail acquire l !busy
            4000000000 2 invoke acquire l CAMPAIGN
            4001000000 2 fail acquire l !busy"#,
        );
        let result = check(&history);
        assert_eq!(result.verdict, Some(Verdict::Invalid), "{result:?}");
        assert!(result.violations[0]
            .explanation
            .contains("no leader was elected by the last campaign's end"));
    }

    #[test]
    fn an_acquire_of_unknown_outcome_may_lead_for_a_ttl() {
        // 2's acquire may have made it leader unbeknown: refusals until a
        // TTL after it are no late election.
        let history = lines(
            r#"
            0 1 invoke acquire l CAMPAIGN
            1000000 1 ok acquire l {"fence":1}
            100000000 1 invoke release l {"fence":1}
            101000000 1 ok release l
            1000000000 2 invoke acquire l CAMPAIGN
            1100000000 2 info acquire l !timeout
            1200000000 3 invoke acquire l CAMPAIGN
            1201000000 3 fail acquire l !busy
            2000000000 3 invoke acquire l CAMPAIGN
            2001000000 3 fail acquire l !busy
            2200000000 3 invoke acquire l CAMPAIGN
            2201000000 3 ok acquire l {"fence":3}"#,
        );
        assert_eq!(check(&history).verdict, Some(Verdict::Valid));
    }

    #[test]
    fn without_an_election_it_does_not_apply() {
        let result = check(
            r#"
            0 1 invoke acquire l {"ttl_ms":1000}
            1 1 ok acquire l"#,
        );
        assert_eq!(result.verdict, None);
        assert_eq!(result.reason.as_deref(), Some("no election in this history"));
    }
}
