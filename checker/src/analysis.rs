//! Running every checker that applies to a history.

use rayon::prelude::*;
use serde::Serialize;

use crate::fence::FenceMonotonicity;
use crate::history::History;
use crate::liveness::Liveness;
use crate::mutex::MutualExclusion;
use crate::resource::ResourceSafety;
use crate::verdict::{CheckOptions, CheckResult, Checker, Verdict};
use crate::{lock_keys, resource_keys};

/// What was checked: the size and span of the history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub events: u64,
    pub ops: u64,
    pub lock_keys: u64,
    pub resource_keys: u64,
    pub clients: u64,
    pub nemesis_events: u64,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// Every checker's result on one history, and the verdict of them all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Analysis {
    pub verdict: Verdict,
    pub summary: Summary,
    pub results: Vec<CheckResult>,
    /// Problems in the history that did not stop it from being checked.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// The checkers `analyze` runs by default, in report order.
pub fn default_checkers() -> Vec<Box<dyn Checker>> {
    vec![
        Box::new(MutualExclusion),
        Box::new(FenceMonotonicity),
        Box::new(ResourceSafety),
        Box::new(Liveness),
    ]
}

pub fn summarize(history: &History) -> Summary {
    Summary {
        events: history.event_count(),
        ops: history.ops().len() as u64,
        lock_keys: lock_keys(history).len() as u64,
        resource_keys: resource_keys(history) as u64,
        clients: history.clients().len() as u64,
        nemesis_events: history.nemesis_events().len() as u64,
        start_ns: history.start().map_or(0, |start| start.time_ns),
        end_ns: history.end().time_ns,
    }
}

/// Runs the checkers (in parallel) and combines their verdicts. A history no
/// checker applies to is `Unknown`: nothing was shown to be safe.
pub fn analyze(
    history: &History,
    checkers: &[Box<dyn Checker>],
    options: &CheckOptions,
) -> Analysis {
    let results: Vec<CheckResult> =
        checkers.par_iter().map(|checker| checker.check(history, options)).collect();
    let verdict = results
        .iter()
        .filter_map(|result| result.verdict)
        .reduce(Verdict::combine)
        .unwrap_or(Verdict::Unknown);
    Analysis {
        verdict,
        summary: summarize(history),
        results,
        warnings: history.warnings().to_vec(),
    }
}
