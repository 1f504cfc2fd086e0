//! `lockcheck check --backend <real>`: the arguments made into the real
//! world's options, the run stored as it is recorded, and its outcome
//! printed and mapped to an exit code. The servers, faults and recipes are
//! `lockcheck_real`'s.

use std::process::ExitCode;

use lockcheck_checker::{Analysis, Event, Verdict};
use lockcheck_real::{execute_recorded, plan, RealBackend, RealError, RealFailure, RealRun};
use lockcheck_reports::Analyzed;
use lockcheck_workloads::interrupt;

use crate::exit;
use crate::output::{print, render, work_done};
use crate::{CheckRequest, Format};

/// Prints why a real test came to no verdict and gives the exit code.
pub fn failure_exit(failure: &RealFailure) -> ExitCode {
    match failure {
        RealFailure::Usage(message) => {
            eprintln!("lockcheck: {message}");
            exit::USAGE.into()
        }
        RealFailure::Server(error) => unavailable(error),
        RealFailure::Internal(error) => {
            eprintln!("lockcheck: internal error: {error}");
            exit::INTERNAL.into()
        }
    }
}

/// `lockcheck check` on a real backend: planned once, run, stored as it is
/// recorded. A replay line's masked URLs are taken from the environment.
pub fn run(args: &CheckRequest) -> anyhow::Result<ExitCode> {
    let seed = args.options.seed;
    eprintln!("seed: {seed}");
    let planned = match plan(&args.options) {
        Ok(planned) => planned,
        Err(message) => return Ok(failure_exit(&RealFailure::Usage(message))),
    };
    let (test, backend) = (&planned.test, planned.backend);
    // Real servers' timing is not the seed's: a rerun draws the same
    // schedule, not always the same history.
    let rerun = crate::program::replay_line(&test.replay());
    // The run's folder first: its history is written as it is recorded.
    let stored = match &args.store {
        None => None,
        Some(store) => {
            let name = format!("{}-{}", backend.name(), test.workload.name());
            Some(lockcheck_runs::begin(store, &name, seed, &rerun)?)
        }
    };
    lockcheck_runs::last_words(seed, stored.as_ref());
    let history = stored.as_ref().map(|stored| stored.history.clone());
    let progress = lockcheck_runs::Progress::timed(test.time_limit);
    let faults: Vec<&str> = test.faults.iter().map(|fault| fault.name()).collect();
    let faults = if faults.is_empty() { "none".to_string() } else { faults.join(",") };
    let label = format!("{} --nemesis {faults}", backend.name());
    let outcome = progress.watch(&label, test.time_limit, || {
        execute_recorded(&planned, true, history, &lockcheck_runs::progress::recording)
    });
    drop(progress);
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(failure) => {
            if let Some(signal) = interrupt::signal() {
                return Ok(lockcheck_runs::interrupted(signal, seed, stored.as_ref()));
            }
            let code = failure_exit(&failure);
            match &stored {
                // Nothing recorded (a server missing, say): nothing to keep.
                Some(stored) if stored.history.events() == 0 => {
                    let _ = std::fs::remove_dir_all(&stored.dir);
                }
                Some(stored) => eprintln!("lockcheck: {}", stored.so_far()),
                None => {}
            }
            return Ok(code);
        }
    };
    if let Some(signal) = interrupt::signal() {
        return Ok(lockcheck_runs::interrupted(signal, seed, stored.as_ref()));
    }
    let RealRun { events, analysis, wall_s, faults, .. } = &outcome;
    interrupt::hold_before("store");
    let dir = match &stored {
        Some(stored) => Some(finish_store(backend, seed, stored, events, analysis, &rerun)?),
        None => None,
    };
    interrupt::set_last_words(None);
    let source = format!("{} seed {seed}", backend.name());
    let analyzed = Analyzed { source: &source, analysis };
    let html = dir.as_ref().map(|dir| dir.join("report.html").display().to_string());
    let mut text =
        render(args.format, analysis.verdict, &[analyzed], Some(events), html.as_deref());
    if args.format == Format::Text {
        text.push_str(&format!(
            "ran {wall_s:.1} s against real servers, {}; faults: {}\n",
            work_done(events, *wall_s),
            faults.names(),
        ));
        if let Some(pooling) = planned.pooling() {
            text.push_str(&format!("pooler: {pooling}\n"));
        }
        if let Some(dir) = &dir {
            text.push_str(&format!("stored in {}\n", dir.display()));
        }
        if analysis.verdict != Verdict::Valid {
            text.push_str(&format!("rerun: {rerun}\n"));
        }
    }
    print(&text)?;
    let gated = exit::gated(analysis, &test.gate);
    let gated = exit::require_coverage(analysis, gated, args.require_coverage, &source);
    Ok(exit::for_verdict(gated).into())
}

/// Exit 69 with the reason: a server is missing or cannot be reached.
fn unavailable(error: &RealError) -> ExitCode {
    if let RealError::Interrupted { signal } = error {
        interrupt::report(*signal, None);
        return interrupt::exit_code(*signal).into();
    }
    eprintln!("lockcheck: {error}");
    match error {
        // A lock program that does not start or speak the protocol is the
        // user's to fix, as a missing server is.
        RealError::Setup { what: "the exec program", .. } => exit::UNAVAILABLE.into(),
        RealError::Setup { .. } => exit::INTERNAL.into(),
        _ => exit::UNAVAILABLE.into(),
    }
}

fn finish_store(
    backend: RealBackend,
    seed: u64,
    stored: &lockcheck_runs::Stored,
    events: &[Event],
    analysis: &Analysis,
    rerun: &str,
) -> anyhow::Result<std::path::PathBuf> {
    let title = format!("{} seed {seed}", backend.name());
    Ok(lockcheck_runs::finish(
        stored,
        &lockcheck_runs::Run { events, analysis, command: rerun, title: &title },
    )?)
}
