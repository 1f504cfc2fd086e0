//! Shrinking: a failure found after ten thousand operations is shown on the
//! smallest run that still fails the same way.
//!
//! The seed stays fixed (so every candidate is itself a replayable run);
//! what shrinks is the run around it: a shorter time limit, fewer clients,
//! fewer locks, fewer kinds of fault. Each step keeps a candidate only if the
//! same checker still finds it invalid; the search is greedy and bounded.

use std::time::Duration;

use lockcheck_checker::{Analysis, CheckOptions, Event, Verdict};

use crate::matrix::{check_run, MatrixError};
use crate::run::run;
use lockcheck_workloads::RunOptions;

/// The smallest failing run found.
#[derive(Debug, Clone)]
pub struct Shrunk {
    pub options: RunOptions,
    pub events: usize,
    /// The smallest failing run's history; `None` when nothing smaller failed.
    pub history: Option<Vec<Event>>,
    /// Runs tried, failing or not.
    pub attempts: u32,
}

/// The checkers that found the run invalid.
fn failing(analysis: &Analysis) -> Vec<&'static str> {
    analysis
        .results
        .iter()
        .filter(|result| result.verdict == Some(Verdict::Invalid))
        .map(|result| result.checker)
        .collect()
}

/// Candidates one step smaller than `options`, most promising first.
fn smaller(options: &RunOptions) -> Vec<RunOptions> {
    let mut candidates = Vec::new();
    let shortest = Duration::from_millis(options.ttl_ms() * 4);
    if options.time_limit / 2 >= shortest {
        candidates.push(RunOptions { time_limit: options.time_limit / 2, ..options.clone() });
    }
    if options.time_limit * 3 / 4 >= shortest {
        candidates.push(RunOptions { time_limit: options.time_limit * 3 / 4, ..options.clone() });
    }
    if options.clients > 2 {
        candidates.push(RunOptions { clients: options.clients - 1, ..options.clone() });
    }
    if options.locks > 1 {
        candidates.push(RunOptions { locks: 1, ..options.clone() });
    }
    if options.faults.len() > 1 {
        for drop in 0..options.faults.len() {
            let mut faults = options.faults.clone();
            faults.remove(drop);
            candidates.push(RunOptions { faults, ..options.clone() });
        }
    }
    candidates
}

/// Shrinks a failing run: the checkers that fail in `analysis` must still
/// fail (at least one of them) in the run reported. At most `budget` runs.
pub fn shrink(
    options: &RunOptions,
    analysis: &Analysis,
    events: usize,
    check_options: &CheckOptions,
    budget: u32,
) -> Result<Shrunk, MatrixError> {
    let wanted = failing(analysis);
    let mut best = Shrunk { options: options.clone(), events, history: None, attempts: 0 };
    if wanted.is_empty() {
        return Ok(best);
    }
    'improve: while best.attempts < budget {
        for candidate in smaller(&best.options) {
            if best.attempts >= budget {
                break 'improve;
            }
            best.attempts += 1;
            let sim = run(&candidate)?;
            let seed = candidate.seed;
            let checked = check_run(&sim, check_options)
                .map_err(|error| MatrixError::History { seed, error: Box::new(error) })?;
            if failing(&checked).iter().any(|checker| wanted.contains(checker))
                && sim.events.len() < best.events
            {
                best = Shrunk {
                    options: candidate,
                    events: sim.events.len(),
                    history: Some(sim.events),
                    attempts: best.attempts,
                };
                continue 'improve;
            }
        }
        break;
    }
    Ok(best)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::Backend;
    use crate::nemesis::FaultKind;
    use lockcheck_checker::names::MUTUAL_EXCLUSION;

    #[test]
    fn a_pause_violation_shrinks_to_a_smaller_run_that_still_fails() {
        let options = RunOptions {
            backend: Backend::Redis,
            faults: vec![FaultKind::Pause, FaultKind::SlowNet],
            time_limit: Duration::from_secs(20),
            // The classic stall, between the grant and the write: its
            // violation lives in a few operations around one stall.
            pause_at: vec![lockcheck_workloads::StallPoint::AfterGrant],
            ..RunOptions::default()
        };
        let check_options = CheckOptions::default();
        let sim = run(&options).unwrap();
        let analysis = check_run(&sim, &check_options).unwrap();
        assert!(failing(&analysis).contains(&MUTUAL_EXCLUSION), "seed 0 should fail under pause");
        let shrunk = shrink(&options, &analysis, sim.events.len(), &check_options, 40).unwrap();
        assert!(
            shrunk.events < sim.events.len() / 2,
            "{} of {} events",
            shrunk.events,
            sim.events.len()
        );
        // The shrunk run replays, and still fails.
        let again = run(&shrunk.options).unwrap();
        assert_eq!(again.events.len(), shrunk.events);
        let bytes = |events: &[Event]| {
            let mut bytes = Vec::new();
            lockcheck_checker::write_events(&mut bytes, events).unwrap();
            bytes
        };
        let kept = shrunk.history.as_deref().expect("a smaller run failed");
        assert_eq!(bytes(&again.events), bytes(kept), "the kept history is the replayed one");
        let checked = check_run(&again, &check_options).unwrap();
        assert!(failing(&checked).contains(&MUTUAL_EXCLUSION));
    }
}
