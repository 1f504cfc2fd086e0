//! The linearizability checker for lock histories: each lock's operations
//! against `fenced-lease` (when its grants carry a TTL or a token) or `mutex`.

use std::sync::atomic::{AtomicBool, Ordering};

use rayon::prelude::*;

use super::explain::violation;
use super::model::{EitherWay, Model, Operation};
use super::models::{FencedLease, LockCall, LockInput, LockOutput, Mutex};
use super::refute::{refute, Refutation};
use super::search::{search_all_until, SearchLimits, SearchOutcome};
use super::PartEvidence;
use crate::event::Function;
use crate::history::{History, KeyId, Op, OpId, Outcome};
use crate::import::ModelChoice;
use crate::is_refusal;
use crate::verdict::{
    CheckOptions, CheckResult, Checker, Findings, LinearizationEvidence, Subject, Violation,
    ViolationKind,
};

#[derive(Debug, Default, Clone, Copy)]
pub struct Linearizability;

/// What one lock's search concluded.
enum KeyOutcome {
    Valid,
    Invalid(Box<Violation>),
    Unknown(String),
}

impl Checker for Linearizability {
    fn name(&self) -> &'static str {
        crate::verdict::names::LINEARIZABILITY
    }

    fn judge(&self, history: &Subject<'_>, options: &CheckOptions) -> CheckResult {
        // A semaphore (permits > 1) is no lock: neither model fits it.
        let permits = history.permits();
        let all_keys = history.lock_keys();
        let keys: Vec<(KeyId, u64)> =
            all_keys.iter().copied().filter(|&(key, _)| permits[key as usize] <= 1).collect();
        if keys.is_empty() {
            let reason = if all_keys.is_empty() {
                "no acquire operations"
            } else {
                "only semaphores (permits > 1)"
            };
            return CheckResult::not_applicable(self.name(), reason);
        }
        let mut per_key: Vec<Vec<OpId>> = vec![Vec::new(); history.key_count()];
        for &(key, ops) in &keys {
            per_key[key as usize].reserve_exact(ops as usize);
        }
        for (id, op) in history.ops().iter().enumerate() {
            if matches!(op.f, Function::Acquire | Function::Release | Function::Renew) {
                per_key[op.key as usize].push(id as OpId);
            }
        }
        let limits = options.search_limits();
        let stop = AtomicBool::new(false);
        let outcomes: Vec<KeyOutcome> = keys
            .par_iter()
            .map(|&(key, _)| {
                let outcome = check_key(
                    history,
                    key,
                    &per_key[key as usize],
                    options.lock_model,
                    &limits,
                    &stop,
                );
                if limits.stop_at_first_violation && matches!(outcome, KeyOutcome::Invalid(_)) {
                    stop.store(true, Ordering::Relaxed);
                }
                outcome
            })
            .collect();
        let mut findings = Findings::new(self.name(), options);
        if keys.len() < all_keys.len() {
            findings.note(format!(
                "{} semaphores (permits > 1) not checked: no lock model fits them",
                all_keys.len() - keys.len()
            ));
        }
        for (&(key, _), outcome) in keys.iter().zip(outcomes) {
            let name = history.key_name(key);
            let ops = per_key[key as usize].len() as u64;
            match outcome {
                KeyOutcome::Valid => findings.key(name, ops, Vec::new()),
                KeyOutcome::Invalid(violation) => findings.key(name, ops, vec![*violation]),
                KeyOutcome::Unknown(reason) => findings.key_unknown(name, ops, reason),
            }
        }
        findings.finish()
    }
}

/// A lock history's operation as the lock models read it.
pub fn lock_operation(op: &Op) -> Operation<LockInput, LockOutput> {
    let call = match op.f {
        Function::Acquire => LockCall::Acquire,
        Function::Release => LockCall::Release { fence: op.fence },
        _ => LockCall::Renew,
    };
    let refused = is_refusal(op.error.as_deref());
    let output = match (op.outcome, call) {
        (Outcome::Info, _) => None,
        (Outcome::Ok, LockCall::Acquire) => Some(LockOutput::Granted { fence: op.fence }),
        (Outcome::Ok, _) => Some(LockOutput::Done),
        (Outcome::Fail, _) if !refused => Some(LockOutput::NoEffect),
        (Outcome::Fail, LockCall::Acquire) => Some(LockOutput::Busy),
        (Outcome::Fail, _) => Some(LockOutput::NotHeld),
    };
    Operation {
        client: op.process,
        input: LockInput { client: op.process, call },
        output,
        call: op.invoke.index,
        ret: op
            .completion
            .filter(|_| op.outcome != Outcome::Info)
            .map(|completion| completion.index),
    }
}

fn check_key(
    history: &History,
    key: KeyId,
    ids: &[OpId],
    choice: ModelChoice,
    limits: &SearchLimits,
    stop: &AtomicBool,
) -> KeyOutcome {
    // In parallel: for a history of one lock, this is most of the work
    // outside the search, and the other checkers are done by now.
    let operations: Vec<Operation<LockInput, LockOutput>> =
        ids.par_iter().map(|&id| lock_operation(history.op(id))).collect();
    let leased = match choice {
        ModelChoice::Mutex => false,
        ModelChoice::FencedLease => true,
        _ => ids
            .iter()
            .map(|&id| history.op(id))
            .any(|op| op.f == Function::Acquire && (op.ttl_ms.is_some() || op.fence.is_some())),
    };
    if let Some(refutation) = refute(&operations, leased) {
        let name: &'static str = if leased { "fenced-lease" } else { "mutex" };
        return KeyOutcome::Invalid(Box::new(refuted(history, key, &operations, name, refutation)));
    }
    // Crashed operations: each placed one either took effect or did not,
    // in one set of states, rather than a branch of the search per crash.
    let crashed = operations.iter().any(|operation| operation.output.is_none());
    match (leased, crashed) {
        (true, false) => judge(&FencedLease, history, key, &operations, limits, stop),
        (true, true) => judge(&EitherWay(FencedLease), history, key, &operations, limits, stop),
        (false, false) => judge(&Mutex, history, key, &operations, limits, stop),
        (false, true) => judge(&EitherWay(Mutex), history, key, &operations, limits, stop),
    }
}

fn refuted(
    history: &History,
    key: KeyId,
    operations: &[Operation<LockInput, LockOutput>],
    model: &'static str,
    refutation: Refutation,
) -> Violation {
    let name = history.key_name(key);
    let mut events: Vec<u64> = refutation
        .operations
        .iter()
        .flat_map(|&at| [Some(operations[at].call), operations[at].ret])
        .flatten()
        .collect();
    events.sort_unstable();
    events.dedup();
    let mut processes: Vec<i64> =
        refutation.operations.iter().map(|&at| operations[at].client).collect();
    processes.dedup();
    let last = *refutation.operations.last().expect("a refutation names operations");
    Violation {
        root: None,
        finding: None,
        kind: ViolationKind::NotLinearizable,
        key: name.to_string(),
        processes,
        window: None,
        events,
        explanation: format!(
            "no order of the {} operations on {name:?} is legal for a {model}: {}.",
            operations.len(),
            refutation.reason
        ),
        linearization: Some(LinearizationEvidence {
            model,
            prefix: Vec::new(),
            blocked: operations[last].call,
            states: Vec::new(),
        }),
    }
}

fn judge<M: Model<Input = LockInput, Output = LockOutput>>(
    model: &M,
    history: &History,
    key: KeyId,
    operations: &[Operation<LockInput, LockOutput>],
    limits: &SearchLimits,
    stop: &AtomicBool,
) -> KeyOutcome {
    match search_all_until(model, operations, limits, stop).0 {
        SearchOutcome::Linearizable => KeyOutcome::Valid,
        SearchOutcome::Unknown(reason) => KeyOutcome::Unknown(reason),
        SearchOutcome::NotLinearizable(evidence) => {
            let evidence = PartEvidence {
                prefix: evidence.prefix,
                blocked: evidence.blocked,
                states: evidence.states.iter().map(|state| model.describe_state(state)).collect(),
            };
            let key = history.key_name(key);
            KeyOutcome::Invalid(Box::new(violation(
                model,
                key,
                operations,
                operations.len(),
                &evidence,
            )))
        }
    }
}
