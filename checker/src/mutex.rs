//! Mutual exclusion: no two clients may believe they hold the same lock at once.

use crate::beliefs::Belief;
use crate::history::History;
use crate::verdict::{
    CheckOptions, CheckResult, Checker, Findings, Subject, Violation, ViolationKind, Window,
};
use crate::{format_seconds, format_time};

/// Finds pairs of clients whose beliefs (see [`crate::beliefs`]) definitely
/// overlap. Only an acquire's `ok` starts a belief, so an `info` acquire (which
/// may or may not have been granted) can never produce a false violation.
#[derive(Debug, Default, Clone, Copy)]
pub struct MutualExclusion;

impl Checker for MutualExclusion {
    fn name(&self) -> &'static str {
        crate::verdict::names::MUTUAL_EXCLUSION
    }

    fn judge(&self, history: &Subject<'_>, options: &CheckOptions) -> CheckResult {
        let keys = history.lock_keys();
        if keys.is_empty() {
            return CheckResult::not_applicable(self.name(), "no acquire operations");
        }
        let beliefs = history.beliefs();
        let permits = history.permits();
        let mut findings = Findings::new(self.name(), options);
        for &(key, ops) in keys {
            let violations = match permits[key as usize] {
                0 | 1 => overlaps(history, beliefs.of_key(key)),
                limit => over_limit(history, beliefs.of_key(key), limit as usize),
            };
            findings.key(history.key_name(key), ops, violations);
        }
        findings.finish()
    }
}

/// A semaphore's beliefs: more than `limit` clients at once is a violation,
/// reported once per grant that went over.
fn over_limit(history: &History, beliefs: &[Belief], limit: usize) -> Vec<Violation> {
    let mut violations = Vec::new();
    let mut running: Vec<&Belief> = Vec::new();
    for later in beliefs {
        running.retain(|earlier| earlier.end.index > later.start.index);
        running.push(later);
        if running.len() <= limit {
            continue;
        }
        let end = running.iter().map(|belief| belief.end).min().expect("running is not empty");
        let window = Window::between(later.start, end);
        let key = history.key_name(later.key);
        let holders: Vec<String> = running
            .iter()
            .map(|belief| format!("{} (granted at index {})", belief.process, belief.start.index))
            .collect();
        let mut events: Vec<u64> = running.iter().map(|belief| belief.start.index).collect();
        events.sort_unstable();
        let root = running
            .iter()
            .min_by_key(|belief| lease_runs_out(history, belief))
            .map(|belief| belief.start.index);
        violations.push(Violation {
            root,
            finding: None,
            linearization: None,
            kind: ViolationKind::Overlap,
            key: key.to_string(),
            processes: running.iter().map(|belief| belief.process).collect(),
            window: Some(window),
            events,
            explanation: format!(
                "{} clients believed they held {key:?}, whose limit is {limit}, for {}, from t={} to t={}: \
                 processes {}.",
                running.len(),
                format_seconds(window.duration_ns()),
                format_time(window.start_ns),
                format_time(window.end_ns),
                holders.join(", ")
            ),
        });
    }
    violations
}

/// When a belief's lease may have run out first: its grant's invoke plus
/// its TTL (the service may have started the lease as early as the
/// request); a lock without a lease never runs out, so the holder granted
/// first is then the one in the wrong. Of two overlapping beliefs, the one
/// whose lease ran out first is the stale holder: usually the one granted
/// first, but a grant that came back late (its client stalled between the
/// request and the reply) may have run out before it began.
fn lease_runs_out(history: &History, belief: &Belief) -> (u64, u64) {
    let grant = history.op(belief.grant);
    let runs_out = grant
        .ttl_ms
        .map_or(u64::MAX, |ttl| grant.invoke.time_ns.saturating_add(ttl.saturating_mul(1_000_000)));
    (runs_out, belief.start.index)
}

/// Sweeps one lock's beliefs in start order, keeping those still running.
fn overlaps(history: &History, beliefs: &[Belief]) -> Vec<Violation> {
    let mut violations = Vec::new();
    let mut running: Vec<&Belief> = Vec::new();
    for later in beliefs {
        running.retain(|earlier| earlier.end.index > later.start.index);
        for earlier in &running {
            violations.push(overlap(history, earlier, later));
        }
        running.push(later);
    }
    violations
}

fn overlap(history: &History, earlier: &Belief, later: &Belief) -> Violation {
    let end = if earlier.end.index <= later.end.index { earlier.end } else { later.end };
    let window = Window::between(later.start, end);
    let key = history.key_name(later.key);
    let (first, second) = (history.op(earlier.grant), history.op(later.grant));
    let mut events =
        vec![first.invoke.index, earlier.start.index, second.invoke.index, later.start.index];
    events.extend(earlier.end_event().filter(|&index| index <= end.index));
    events.extend(later.end_event().filter(|&index| index <= end.index));
    events.sort_unstable();
    events.dedup();
    let explanation = format!(
        "processes {a} and {b} both believed they held {key:?} for {length}, from t={from} to t={to}. \
         {a} was granted it at index {a_ok} (t={a_time}) and believed it held it {a_end}; \
         {b} was granted it at index {b_ok} while {a} still did.",
        a = earlier.process,
        b = later.process,
        length = format_seconds(window.duration_ns()),
        from = format_time(window.start_ns),
        to = format_time(window.end_ns),
        a_ok = earlier.start.index,
        a_time = format_time(earlier.start.time_ns),
        a_end = earlier.describe_end(history),
        b_ok = later.start.index,
    );
    let stale = if lease_runs_out(history, later) < lease_runs_out(history, earlier) {
        later
    } else {
        earlier
    };
    Violation {
        root: Some(stale.start.index),
        finding: None,
        linearization: None,
        kind: ViolationKind::Overlap,
        key: key.to_string(),
        processes: vec![earlier.process, later.process],
        window: Some(window),
        events,
        explanation,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{history_from, Verdict};

    fn check(lines: &str) -> CheckResult {
        MutualExclusion.check(&history_from(lines), &CheckOptions::default())
    }

    #[test]
    fn an_info_acquire_never_counts_as_a_hold() {
        let result = check(
            "0 1 invoke acquire l
             1 2 invoke acquire l
             2 1 info acquire l
             3 2 ok acquire l",
        );
        assert_eq!(result.verdict, Some(Verdict::Valid));
    }

    #[test]
    fn a_crash_ends_the_belief_but_not_before_it_happened() {
        // 1 holds, 2 is granted while 1 still believes, then 1's write times out.
        let result = check(
            "0 1 invoke acquire l
             1 1 ok acquire l
             2 1 invoke write r
             3 2 invoke acquire l
             4 2 ok acquire l
             5 1 info write r",
        );
        assert_eq!(result.verdict, Some(Verdict::Invalid));
        let violation = &result.violations[0];
        assert_eq!(violation.processes, [1, 2]);
        let window = violation.window.unwrap();
        assert_eq!((window.start_index, window.end_index), (4, 5));
        assert_eq!(violation.events, [0, 1, 3, 4, 5]);
    }

    #[test]
    fn release_invoke_ends_the_belief_before_the_next_grant() {
        let result = check(
            "0 1 invoke acquire l
             1 1 ok acquire l
             2 1 invoke release l
             3 2 invoke acquire l
             4 2 ok acquire l
             5 1 ok release l",
        );
        assert_eq!(result.verdict, Some(Verdict::Valid));
    }
}

#[cfg(test)]
mod semaphore_tests {
    use super::*;
    use crate::{history_from, Verdict};

    #[test]
    fn a_semaphore_allows_its_permits_and_no_more() {
        let two = r#"
            0 1 invoke acquire s {"permits":2}
            1 1 ok acquire s
            2 2 invoke acquire s {"permits":2}
            3 2 ok acquire s"#;
        let result = MutualExclusion.check(&history_from(two), &CheckOptions::default());
        assert_eq!(result.verdict, Some(Verdict::Valid));
        let three = format!("{two}\n            4 3 invoke acquire s {{\"permits\":2}}\n            5 3 ok acquire s");
        let result = MutualExclusion.check(&history_from(&three), &CheckOptions::default());
        assert_eq!(result.verdict, Some(Verdict::Invalid));
        assert_eq!(result.violations[0].processes, [1, 2, 3]);
    }
}
