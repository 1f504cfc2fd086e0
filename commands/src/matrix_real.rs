//! `lockcheck matrix` (without `--sim`): the real world of the matrix loop
//! (`matrix.rs`), the real-server cells of docs/truth-table.md, each a
//! `check` command line against servers the tool starts itself.

use std::process::ExitCode;

use lockcheck_real::matrix::{
    cells, check_args, run_cell, Effort, Missed, RealCell, DEFAULT_SAFE_RUNS,
    DEFAULT_VIOLATED_WITHIN,
};
use lockcheck_real::{RealBackend, RealRun};

use crate::matrix::{Layout, Ran, World};
use crate::program::replay_line;
use crate::MatrixRequest;
use lockcheck_runs::Progress;

/// The real world of the matrix: its cells' runs on private servers, as
/// `effort` asks.
struct Real {
    effort: Effort,
}

impl World for Real {
    type Backend = RealBackend;

    fn backend_name(backend: Self::Backend) -> &'static str {
        backend.name()
    }
    const LAYOUT: Layout = Layout { labels: &[("check", 64)], timed: true };
    const CELLS: &'static str = "real cell";

    fn header(&self) -> String {
        format!(
            "the real-server truth table (docs/truth-table.md), on servers lockcheck starts itself: violated cells must show within {} runs, safe ones stay clean over {}",
            self.effort.violated_within.unwrap_or(DEFAULT_VIOLATED_WITHIN),
            self.effort.safe_runs.unwrap_or(DEFAULT_SAFE_RUNS),
        )
    }

    fn labels(cell: &RealCell) -> Vec<String> {
        vec![check_args(cell)]
    }

    fn name(cell: &RealCell) -> String {
        check_args(cell)
    }

    /// A cell that cannot run is a row of its own, not the matrix's end:
    /// the other cells may still run. A mismatch keeps its evidence.
    fn budget(&self, cell: &RealCell) -> u64 {
        self.effort.runs(cell)
    }

    fn run(&self, cell: &RealCell, first_seed: u64, progress: &Progress) -> anyhow::Result<Ran> {
        let shown = |label: &str, time_limit, run: lockcheck_real::matrix::Run<'_>| {
            progress.watch(label, time_limit, || run(&lockcheck_runs::progress::recording))
        };
        let effort = Effort { first_seed, ..self.effort.clone() };
        Ok(match run_cell(cell, &effort, &shown) {
            Ok(result) => {
                if let (false, Some(run)) = (result.matches, &result.decided) {
                    let replay = replay_line(&result.replay);
                    progress.suspend(|| keep_evidence(&replay, run));
                }
                for missed in &result.missed {
                    progress.suspend(|| keep_missed(missed));
                }
                Ran::Judged {
                    matches: result.matches,
                    found: result.found,
                    replay: replay_line(&result.replay),
                    runs: result.runs,
                }
            }
            Err(failure) => Ran::Failed(failure.to_string()),
        })
    }
}

/// `lockcheck matrix`.
pub fn run(args: &MatrixRequest) -> anyhow::Result<ExitCode> {
    let effort = Effort {
        violated_within: args.violated_within,
        safe_runs: args.safe_seeds,
        time_limit: args.time_limit,
        linearizability_timeout: args.linearizability_timeout,
        first_seed: 0,
    };
    match args.runs_needed {
        Some(samples) => {
            crate::matrix::runs_needed(&Real { effort }, cells(), args.selection(), samples)
        }
        None => crate::matrix::run(&Real { effort }, cells(), args.selection()),
    }
}

/// Where a kept history goes: the temporary folder, named by this
/// process and a counter, so that no two kept in one matrix collide.
fn kept_path() -> std::path::PathBuf {
    static KEPT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = KEPT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::env::temp_dir().join(format!("lockcheck-matrix-{}-{n}.jsonl", std::process::id()))
}

/// Writes `events` to a new file of [`kept_path`].
fn keep_history(events: &[lockcheck_checker::Event]) -> anyhow::Result<std::path::PathBuf> {
    let path = kept_path();
    let file = std::fs::File::create(&path)?;
    lockcheck_checker::write_events(std::io::BufWriter::new(file), events)?;
    Ok(path)
}

/// A violated cell's run that showed nothing says on stderr what it did
/// and found, and keeps its history: a real run is not replayed the same
/// way twice, and a run that misses is what makes a gate weak.
fn keep_missed(missed: &Missed) {
    let kept = match keep_history(&missed.events) {
        Ok(path) => format!("history in {}", path.display()),
        Err(error) => format!("history not kept: {error:#}"),
    };
    eprintln!("showed nothing: {}\n  {}; {kept}", replay_line(&missed.replay), missed.summary);
}

/// A cell that did not come out as expected keeps what shows why: its
/// history in the temporary folder and the report on stderr, since a real
/// run on a loaded machine may not come out the same way twice.
fn keep_evidence(replay: &str, run: &RealRun) {
    let written = keep_history(&run.events);
    let analyzed = lockcheck_reports::Analyzed { source: replay, analysis: &run.analysis };
    let report = crate::output::render(
        crate::Format::Text,
        run.analysis.verdict,
        &[analyzed],
        Some(&run.events),
        None,
    );
    eprintln!("mismatch: {replay}\n{report}");
    match written {
        Ok(path) => eprintln!("mismatch: its history is in {}", path.display()),
        Err(error) => eprintln!("mismatch: its history could not be kept: {error:#}"),
    }
}
