//! Running every checker that applies to a history.

use rayon::prelude::*;
use serde::Serialize;

use crate::deadlock::Deadlock;
use crate::election::ReElection;
use crate::fence::FenceMonotonicity;
use std::collections::BTreeSet;

use crate::coverage::{coverage_with, Coverage};
use crate::event::Event;
use crate::history::{History, HistoryBuilder, HistoryError};
use crate::idempotency::Idempotency;
use crate::import::Imported;
use crate::linear::models::{CasRegister, Register};
use crate::linear::Linearizability;
use crate::linear::{check_parts, check_result, Model, Operation};
use crate::liveness::Liveness;
use crate::mutex::MutualExclusion;
use crate::once::ExactlyOnce;
use crate::resource::ResourceSafety;
use crate::verdict::{CheckOptions, CheckResult, Checker, Subject, Verdict};
use crate::KeyStats;

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
    /// The violations grouped by cause, each with the fault behind it.
    pub findings: Vec<crate::findings::Finding>,
    /// Problems in the history that did not stop it from being checked.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Which vulnerable windows the run's faults reached (none for a history
    /// without faults, and for imported register and key-value histories).
    #[serde(skip_serializing_if = "Coverage::is_none")]
    pub coverage: Coverage,
}

impl Analysis {
    /// The result of the checker named `checker` (see [`crate::names`]), if
    /// it ran.
    pub fn result_of(&self, checker: &str) -> Option<&CheckResult> {
        self.results.iter().find(|result| result.checker == checker)
    }

    /// The verdict of the checker named `checker`: `None` if it did not run
    /// or did not apply to this history.
    pub fn verdict_of(&self, checker: &str) -> Option<Verdict> {
        self.result_of(checker).and_then(|result| result.verdict)
    }

    /// Valid, but none of the run's faults reached a window where the lock
    /// could break: the pass proves nothing about them.
    pub fn vacuous(&self) -> bool {
        self.verdict == Verdict::Valid && self.coverage.vacuous()
    }
}

/// The checkers `analyze` runs by default, in report order.
pub fn default_checkers() -> Vec<Box<dyn Checker>> {
    vec![
        Box::new(MutualExclusion),
        Box::new(FenceMonotonicity),
        Box::new(ResourceSafety),
        Box::new(Liveness),
        Box::new(Deadlock),
        Box::new(ReElection),
        Box::new(Linearizability),
        Box::new(ExactlyOnce),
        Box::new(Idempotency),
    ]
}

pub fn summarize(history: &History) -> Summary {
    summarize_with(history, &KeyStats::of(history))
}

fn summarize_with(history: &History, stats: &KeyStats) -> Summary {
    Summary {
        events: history.event_count(),
        ops: history.ops().len() as u64,
        lock_keys: stats.lock_keys.len() as u64,
        resource_keys: stats.resource_keys as u64,
        clients: stats.clients as u64,
        nemesis_events: history.nemesis_events().len() as u64,
        start_ns: history.start().map_or(0, |start| start.time_ns),
        end_ns: history.end().time_ns,
    }
}

/// Checks an imported history: a lock history with the checkers, register
/// and key-value histories for linearizability against their model.
pub fn analyze_imported(
    imported: &Imported,
    checkers: &[Box<dyn Checker>],
    options: &CheckOptions,
) -> Analysis {
    let mut analysis = match imported {
        Imported::Locks(history) => analyze(history, checkers, options),
        Imported::Register { cas: true, operations, events } => {
            analyze_operations(&CasRegister, operations, *events, options)
        }
        Imported::Register { cas: false, operations, events } => {
            analyze_operations(&Register, operations, *events, options)
        }
        Imported::Kv { model, operations, events } => {
            analyze_operations(model, operations, *events, options)
        }
    };
    // An empty history is not a safe one: nothing was shown to be safe.
    if analysis.summary.ops == 0 {
        analysis.verdict = Verdict::Unknown;
        analysis.warnings.push(NOTHING_TO_CHECK.to_string());
    }
    analysis
}

/// The warning of an analysis of a history without operations (whose verdict is unknown).
pub const NOTHING_TO_CHECK: &str = "nothing to check: the history has no operations";

/// Checks operations for linearizability against a model, part by part.
pub fn analyze_operations<M: Model>(
    model: &M,
    operations: &[Operation<M::Input, M::Output>],
    events: u64,
    options: &CheckOptions,
) -> Analysis {
    let limits = options.search_limits();
    let parts = check_parts(model, operations, &limits);
    let result = check_result(model, operations, &parts, options);
    let clients: BTreeSet<i64> = operations.iter().map(|operation| operation.client).collect();
    let summary = Summary {
        events,
        ops: operations.len() as u64,
        lock_keys: 0,
        resource_keys: parts.len() as u64,
        clients: clients.len() as u64,
        nemesis_events: 0,
        start_ns: 0,
        end_ns: 0,
    };
    let verdict = result.verdict.unwrap_or(Verdict::Unknown);
    Analysis {
        verdict,
        summary,
        results: vec![result],
        findings: Vec::new(),
        warnings: Vec::new(),
        coverage: Coverage::none(),
    }
}

/// Pairs recorded `events` into a history and runs the default checkers on
/// it, as a driver or a test that recorded a run does; the error says which
/// event broke the pairing.
pub fn analyze_events(events: &[Event], options: &CheckOptions) -> Result<Analysis, HistoryError> {
    let mut builder = HistoryBuilder::with_capacity(events.len());
    for event in events {
        builder.push(event)?;
    }
    Ok(analyze(&builder.finish(), &default_checkers(), options))
}

/// Runs the checkers (in parallel) and combines their verdicts. A history no
/// checker applies to is `Unknown`: nothing was shown to be safe.
pub fn analyze(
    history: &History,
    checkers: &[Box<dyn Checker>],
    options: &CheckOptions,
) -> Analysis {
    let subject = Subject::new(history);
    let mut results: Vec<CheckResult> =
        checkers.par_iter().map(|checker| checker.judge(&subject, options)).collect();
    let findings = crate::findings::group(history, subject.beliefs(), &mut results);
    let verdict = results
        .iter()
        .filter_map(|result| result.verdict)
        .reduce(Verdict::combine)
        .unwrap_or(Verdict::Unknown);
    Analysis {
        verdict,
        summary: summarize_with(history, subject.key_stats()),
        results,
        findings,
        warnings: history.warnings().to_vec(),
        coverage: coverage_with(history, subject.beliefs()),
    }
}
