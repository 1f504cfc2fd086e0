//! Turning a failed search into a violation a person can read.

use super::model::{Model, Operation};
use super::{PartEvidence, PartOutcome, PartResult};
use crate::verdict::{
    CheckOptions, CheckResult, Findings, LinearizationEvidence, Violation, ViolationKind,
};

/// How many of the prefix's last operations a violation names as events.
const PREFIX_EVENTS: usize = 3;

fn describe<M: Model>(model: &M, operation: &Operation<M::Input, M::Output>) -> String {
    let returned = match (operation.ret, &operation.output) {
        (Some(ret), Some(_)) => format!(", returned at event {ret}"),
        _ => ", never returned".to_string(),
    };
    format!(
        "process {}'s {} (invoked at event {}{returned})",
        operation.client,
        model.describe_operation(&operation.input, operation.output.as_ref()),
        operation.call,
    )
}

/// The violation for one part that is not linearizable. Positions in the
/// operations (`call`, `ret`) are event indices.
pub(crate) fn violation<M: Model>(
    model: &M,
    key: &str,
    operations: &[Operation<M::Input, M::Output>],
    part_len: usize,
    evidence: &PartEvidence,
) -> Violation {
    let on = if key.is_empty() { String::new() } else { format!(" on {key:?}") };
    let last = match evidence.prefix.last() {
        Some(&at) => format!(", the last being {}", describe(model, &operations[at])),
        None => String::new(),
    };
    let blocked = &operations[evidence.blocked];
    let explanation = format!(
        "no order of the {part_len} operations{on} is legal for a {name}. The longest linearizable prefix has \
         {length} operations{last}. After it, {blocked_op} cannot take effect in any state possible there ({states}).",
        name = model.name(),
        length = evidence.prefix.len(),
        blocked_op = describe(model, blocked),
        states = evidence.states.join("; "),
    );
    let recent = evidence.prefix.iter().rev().take(PREFIX_EVENTS).map(|&at| &operations[at]);
    let mut events: Vec<u64> = recent.clone().map(|operation| operation.call).collect();
    events.push(blocked.call);
    events.extend(blocked.ret);
    events.sort_unstable();
    events.dedup();
    let mut processes: Vec<i64> = recent.map(|operation| operation.client).collect();
    processes.retain(|&process| process != blocked.client);
    processes.dedup();
    processes.push(blocked.client);
    Violation {
        root: None,
        finding: None,
        kind: ViolationKind::NotLinearizable,
        key: key.to_string(),
        processes,
        window: None,
        events,
        explanation,
        linearization: Some(LinearizationEvidence {
            model: model.name(),
            prefix: evidence.prefix.iter().map(|&at| operations[at].call).collect(),
            blocked: blocked.call,
            states: evidence.states.clone(),
        }),
    }
}

/// The checker result for a history checked part by part against one model.
pub fn check_result<M: Model>(
    model: &M,
    operations: &[Operation<M::Input, M::Output>],
    parts: &[PartResult],
    options: &CheckOptions,
) -> CheckResult {
    let mut findings = Findings::new(crate::verdict::names::LINEARIZABILITY, options);
    for part in parts {
        let ops = part.operations.len() as u64;
        match &part.outcome {
            PartOutcome::Linearizable => findings.key(&part.name, ops, Vec::new()),
            PartOutcome::Unknown(reason) => findings.key_unknown(&part.name, ops, reason.clone()),
            PartOutcome::NotLinearizable(evidence) => {
                let violation =
                    violation(model, &part.name, operations, part.operations.len(), evidence);
                findings.key(&part.name, ops, vec![violation]);
            }
        }
    }
    findings.note(format!("model: {}", model.name()));
    findings.finish()
}
