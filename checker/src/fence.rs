//! Fence monotonicity: every grant carries a token, and tokens strictly
//! increase in real-time order.

use rustc_hash::FxHashMap as HashMap;

use crate::event::Function;
use crate::format_time;
use crate::history::{History, KeyId, Op, OpId};
use crate::realtime::{largest_preceding, Timed};
use crate::verdict::{
    CheckOptions, CheckResult, Checker, Findings, Subject, Violation, ViolationKind,
};

/// Per lock: a grant that completed before another was invoked must carry a
/// strictly smaller token; no two grants may share a token; a lock whose
/// grants are only sometimes fenced is reported, because its unfenced holders
/// cannot be stopped by the storage.
#[derive(Debug, Default, Clone, Copy)]
pub struct FenceMonotonicity;

impl Checker for FenceMonotonicity {
    fn name(&self) -> &'static str {
        crate::verdict::names::FENCE_MONOTONICITY
    }

    fn judge(&self, history: &Subject<'_>, options: &CheckOptions) -> CheckResult {
        let keys = history.lock_keys();
        let mut grants: Vec<Vec<OpId>> = vec![Vec::new(); history.key_count()];
        for (id, op) in history.ops().iter().enumerate() {
            if op.f == Function::Acquire && op.is_ok() {
                grants[op.key as usize].push(id as OpId);
            }
        }
        if !grants.iter().flatten().any(|&id| history.op(id).fence.is_some()) {
            return CheckResult::not_applicable(self.name(), "no grant carries a fencing token");
        }
        let mut findings = Findings::new(self.name(), options);
        for &(key, _) in keys {
            let key_grants = &grants[key as usize];
            let violations = check_key(history, key, key_grants);
            findings.key(history.key_name(key), key_grants.len() as u64, violations);
        }
        findings.finish()
    }
}

fn check_key(history: &History, key: KeyId, grants: &[OpId]) -> Vec<Violation> {
    let name = history.key_name(key);
    let (fenced, unfenced): (Vec<OpId>, Vec<OpId>) =
        grants.iter().partition(|&&id| history.op(id).fence.is_some());
    let mut violations = Vec::new();
    if !fenced.is_empty() && !unfenced.is_empty() {
        let first = history.op(unfenced[0]);
        violations.push(Violation {
            root: None,
            finding: None,
            linearization: None,
            kind: ViolationKind::MixedFencing,
            key: name.to_string(),
            processes: vec![first.process],
            window: None,
            events: vec![history.completion_or_end(first).index],
            explanation: format!(
                "{} grants of {name:?} carry a fencing token and {} do not; the first without one went to process {} \
                 at index {}. A holder without a token cannot be fenced off by the storage.",
                fenced.len(),
                unfenced.len(),
                first.process,
                history.completion_or_end(first).index,
            ),
        });
    }
    let timed: Vec<Timed<u64>> = fenced
        .iter()
        .map(|&id| {
            let op = history.op(id);
            Timed {
                invoke: op.invoke.index,
                completion: history.completion_or_end(op).index,
                value: op.fence.expect("partitioned on fence"),
            }
        })
        .collect();
    let preceding = largest_preceding(&timed);
    let resets = resets(&timed, &preceding);
    let mut first_with_token: HashMap<u64, OpId> = HashMap::default();
    for (at, &id) in fenced.iter().enumerate() {
        let fence = history.op(id).fence.expect("partitioned on fence");
        if let Some(&earlier) = first_with_token.get(&fence) {
            let mut violation = duplicate(history, history.op(earlier), history.op(id), fence);
            violation.root = Some(resets[at].unwrap_or(timed[at].completion));
            violations.push(violation);
        } else {
            first_with_token.insert(fence, id);
        }
    }
    for (at, preceding) in preceding.into_iter().enumerate() {
        let Some(preceding) = preceding else { continue };
        if timed[preceding].value > timed[at].value {
            let mut violation =
                backwards(history, history.op(fenced[preceding]), history.op(fenced[at]));
            violation.root = resets[at];
            violations.push(violation);
        }
    }
    violations
}

/// Per grant (in `timed`'s order): the grant whose token started over, if
/// this one's token is below one granted before it was asked for. Such a
/// grant begins a run of low tokens (a lock service that lost its counter
/// in a crash); every later grant still below the old tokens belongs to
/// the same reset, until one goes lower than its run has reached: another
/// reset. Each reset is one cause, however many violations follow it.
fn resets(timed: &[Timed<u64>], preceding: &[Option<usize>]) -> Vec<Option<u64>> {
    let mut root: Option<(u64, u64)> = None;
    timed
        .iter()
        .zip(preceding)
        .map(|(grant, &preceding)| {
            let low = preceding.is_some_and(|preceding| timed[preceding].value >= grant.value);
            if !low {
                root = None;
                return None;
            }
            root = match root {
                Some((index, reached)) if grant.value >= reached => Some((index, grant.value)),
                _ => Some((grant.completion, grant.value)),
            };
            root.map(|(index, _)| index)
        })
        .collect()
}

fn grant_at(history: &History, op: &Op) -> String {
    let ok = history.completion_or_end(op);
    format!("process {} at index {} (t={})", op.process, ok.index, format_time(ok.time_ns))
}

fn duplicate(history: &History, first: &Op, second: &Op, fence: u64) -> Violation {
    let key = history.key_name(first.key);
    let mut events =
        vec![history.completion_or_end(first).index, history.completion_or_end(second).index];
    events.sort_unstable();
    Violation {
        root: None,
        finding: None,
        linearization: None,
        kind: ViolationKind::DuplicateToken,
        key: key.to_string(),
        processes: vec![first.process, second.process],
        window: None,
        events,
        explanation: format!(
            "two grants of {key:?} carry token {fence}: to {} and to {}. Storage that fences on this token \
             cannot tell these holders apart.",
            grant_at(history, first),
            grant_at(history, second)
        ),
    }
}

fn backwards(history: &History, earlier: &Op, later: &Op) -> Violation {
    let key = history.key_name(later.key);
    Violation {
        root: None,
        finding: None,
        linearization: None,
        kind: ViolationKind::BackwardsToken,
        key: key.to_string(),
        processes: vec![earlier.process, later.process],
        window: None,
        events: vec![history.completion_or_end(earlier).index, later.invoke.index, history.completion_or_end(later).index],
        explanation: format!(
            "token went backwards on {key:?}: {} was granted token {}, and the grant to {} (asked for at index {}, \
             after that grant completed) carries the smaller token {}. Storage would reject the newer holder.",
            grant_at(history, earlier),
            earlier.fence.unwrap_or_default(),
            grant_at(history, later),
            later.invoke.index,
            later.fence.unwrap_or_default()
        ),
    }
}
