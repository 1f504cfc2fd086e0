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
    let mut first_with_token: HashMap<u64, OpId> = HashMap::default();
    for &id in &fenced {
        let fence = history.op(id).fence.expect("partitioned on fence");
        if let Some(&earlier) = first_with_token.get(&fence) {
            violations.push(duplicate(history, history.op(earlier), history.op(id), fence));
        } else {
            first_with_token.insert(fence, id);
        }
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
    for (at, preceding) in largest_preceding(&timed).into_iter().enumerate() {
        let Some(preceding) = preceding else { continue };
        if timed[preceding].value > timed[at].value {
            violations.push(backwards(
                history,
                history.op(fenced[preceding]),
                history.op(fenced[at]),
            ));
        }
    }
    violations
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
