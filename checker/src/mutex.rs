//! Mutual exclusion: no two clients may believe they hold the same lock at once.

use crate::beliefs::Belief;
use crate::history::History;
use crate::verdict::{
    CheckOptions, CheckResult, Checker, Findings, Violation, ViolationKind, Window,
};
use crate::{format_seconds, lock_keys};

/// Finds pairs of clients whose beliefs (see [`crate::beliefs`]) definitely
/// overlap. Only an acquire's `ok` starts a belief, so an `info` acquire (which
/// may or may not have been granted) can never produce a false violation.
#[derive(Debug, Default, Clone, Copy)]
pub struct MutualExclusion;

impl Checker for MutualExclusion {
    fn name(&self) -> &'static str {
        "mutual-exclusion"
    }

    fn check(&self, history: &History, options: &CheckOptions) -> CheckResult {
        let keys = lock_keys(history);
        if keys.is_empty() {
            return CheckResult::not_applicable(self.name(), "no acquire operations");
        }
        let beliefs = history.beliefs();
        let mut findings = Findings::new(self.name(), options);
        for (key, ops) in keys {
            let violations = overlaps(history, beliefs.of_key(key));
            findings.key(history.key_name(key), ops, violations);
        }
        findings.finish()
    }
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
    let window = Window {
        start_index: later.start.index,
        start_ns: later.start.time_ns,
        end_index: end.index,
        end_ns: end.time_ns,
    };
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
        from = format_seconds(window.start_ns),
        to = format_seconds(window.end_ns),
        a_ok = earlier.start.index,
        a_time = format_seconds(earlier.start.time_ns),
        a_end = earlier.describe_end(history),
        b_ok = later.start.index,
    );
    Violation {
        kind: ViolationKind::Overlap,
        key: key.to_string(),
        processes: vec![earlier.process, later.process],
        window: Some(window),
        events,
        explanation,
    }
}
