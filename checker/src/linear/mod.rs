//! Linearizability: is there an order of the operations, each taking effect
//! at one instant between its invoke and its completion, that a sequential
//! model accepts? Found by the search porcupine runs (see `search.rs`), on
//! each part of the history (each key) separately and in parallel.

mod checker;
mod explain;
pub mod model;
pub mod models;
mod refute;
mod search;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use rayon::prelude::*;

pub use checker::{lock_operation, Linearizability};
pub use explain::check_result;
pub use model::{EitherWay, Model, NondeterministicModel, Operation, PowerSet};
pub use search::{
    search, search_until, Evidence, SearchLimits, SearchOutcome, SearchStats, STOPPED,
};

/// The verdict on one part of a history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PartOutcome {
    Linearizable,
    /// With the evidence, described by the model.
    NotLinearizable(PartEvidence),
    Unknown(String),
}

/// [`Evidence`] with operations as positions in the whole history and states
/// described for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartEvidence {
    /// The longest linearizable prefix, in order (positions in the history).
    pub prefix: Vec<usize>,
    /// The operation that could not be placed after it.
    pub blocked: usize,
    /// States possible after such a prefix.
    pub states: Vec<String>,
}

/// One part's result.
#[derive(Debug, Clone, PartialEq)]
pub struct PartResult {
    /// The part's name (its key), empty when the history is one part.
    pub name: String,
    /// Positions in the history of the part's operations.
    pub operations: Vec<usize>,
    pub outcome: PartOutcome,
    pub stats: SearchStats,
    pub elapsed_s: f64,
}

/// Checks every part of a history against a model, in parallel.
pub fn check_parts<M: Model>(
    model: &M,
    operations: &[Operation<M::Input, M::Output>],
    limits: &SearchLimits,
) -> Vec<PartResult> {
    let mut parts = model.partition(operations);
    // Small parts first: when one is not linearizable, it is most likely
    // found quickly, and can stop the rest.
    parts.sort_by_key(Vec::len);
    let stop = AtomicBool::new(false);
    let mut results: Vec<PartResult> = parts
        .into_par_iter()
        .map(|part| {
            let started = Instant::now();
            let (outcome, stats) = search_until(model, operations, &part, limits, &stop);
            if limits.stop_at_first_violation
                && matches!(outcome, SearchOutcome::NotLinearizable(_))
            {
                stop.store(true, Ordering::Relaxed);
            }
            let outcome = match outcome {
                SearchOutcome::Linearizable => PartOutcome::Linearizable,
                SearchOutcome::Unknown(reason) => PartOutcome::Unknown(reason),
                SearchOutcome::NotLinearizable(evidence) => {
                    PartOutcome::NotLinearizable(PartEvidence {
                        prefix: evidence.prefix,
                        blocked: evidence.blocked,
                        states: evidence
                            .states
                            .iter()
                            .map(|state| model.describe_state(state))
                            .collect(),
                    })
                }
            };
            PartResult {
                name: model.partition_name(operations, &part),
                operations: part,
                outcome,
                stats,
                elapsed_s: started.elapsed().as_secs_f64(),
            }
        })
        .collect();
    results.sort_by_key(|result| result.operations.first().copied());
    results
}
