//! `lockcheck matrix` (without `--sim`): the real-server cells of
//! docs/truth-table.md, each a `check` command line against servers the tool
//! starts itself, expected against found.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use lockcheck_real::matrix::{cell_options, cells, check_args, RealCell};
use lockcheck_real::{execute, RealRun};

use crate::args::MatrixArgs;
use crate::exit;
use crate::options::check_options;
use crate::progress::Progress;

/// Wall time per run of a cell that names none.
const DEFAULT_TIME_LIMIT: Duration = Duration::from_secs(8);

/// The cell's arguments as `check` takes them, for one run.
fn check_line(cell: &RealCell, seed: u64, time_limit: Duration) -> String {
    format!("{} --time-limit {}ms --seed {seed}", check_args(cell), time_limit.as_millis())
}

/// How a cell came out.
struct Outcome {
    matches: bool,
    found: String,
    /// The run that decided it (or the first), as a `check` command line.
    replay: String,
}

fn run_cell(cell: &RealCell, args: &MatrixArgs, progress: &Progress) -> Result<Outcome, String> {
    let runs = match cell.expect.seeks_violation() {
        true => args.violated_within.or(cell.runs).unwrap_or(3),
        false => args.safe_seeds.unwrap_or(1),
    }
    .max(1);
    let time_limit = args.time_limit.or(cell.time_limit).unwrap_or(DEFAULT_TIME_LIMIT);
    let checks = check_options(
        args.linearizability_timeout
            .unwrap_or(lockcheck_sim::Effort::default().linearizability_timeout),
    );
    let test = cell_options(cell, time_limit, checks);
    let args_line = check_args(cell);
    let what = args_line.strip_prefix("--backend ").unwrap_or(&args_line);
    let outcome = cell.expect.judge_runs(
        runs,
        // A run is named by its seed; what a cell took is counted in runs.
        ("seed", "run"),
        |seed| {
            let label = format!("{what}, run {}/{runs}", seed + 1);
            progress
                .watch(&label, time_limit, || execute(&test, cell.backend, seed, false))
                .map_err(|failure| failure.to_string())
        },
        |run| &run.analysis,
    )?;
    let seed = outcome.decided.as_ref().map_or(0, |(seed, _)| *seed);
    let replay = format!("lockcheck check {}", check_line(cell, seed, time_limit));
    if let (false, Some((_, run))) = (outcome.matches, &outcome.decided) {
        progress.suspend(|| keep_evidence(&replay, run));
    }
    Ok(Outcome { matches: outcome.matches, found: outcome.found, replay })
}

pub fn run(args: &MatrixArgs) -> anyhow::Result<ExitCode> {
    let cells: Vec<RealCell> = cells()
        .into_iter()
        .filter(|cell| {
            args.backends.is_empty() || args.backends.iter().any(|name| cell.backend.name() == name)
        })
        .collect();
    if cells.is_empty() {
        eprintln!("lockcheck: no real cell has the backends {:?}", args.backends);
        return Ok(exit::USAGE.into());
    }
    println!(
        "the real-server truth table (docs/truth-table.md), on servers lockcheck starts itself: violated cells must show within {} runs, safe ones stay clean over {}",
        args.violated_within.unwrap_or(3),
        args.safe_seeds.unwrap_or(1),
    );
    println!("{:<64} {:<44} {:<44} result", "check", "expected", "found");
    let started = Instant::now();
    let mut mismatches = Vec::new();
    let mut errors = 0;
    let progress = Progress::count(cells.len() as u64, "cells");
    for cell in &cells {
        let cell_started = Instant::now();
        let (found, result) = match run_cell(cell, args, &progress) {
            Ok(outcome) => {
                if !outcome.matches {
                    mismatches.push(format!(
                        "  {} ({}): replay: {}",
                        check_args(cell),
                        cell.note,
                        outcome.replay
                    ));
                }
                (outcome.found, if outcome.matches { "ok" } else { "MISMATCH" })
            }
            Err(error) => {
                errors += 1;
                mismatches.push(format!("  {}: {error}", check_args(cell)));
                ("could not run".to_string(), "ERROR")
            }
        };
        progress.suspend(|| {
            println!(
                "{:<64} {:<44} {:<44} {result} ({:.0} s)",
                check_args(cell),
                cell.expect.describe(),
                found,
                cell_started.elapsed().as_secs_f64()
            )
        });
        progress.inc();
    }
    drop(progress);
    crate::matrix::summary(cells.len(), started, &mismatches);
    Ok(if errors > 0 {
        exit::UNAVAILABLE
    } else if mismatches.is_empty() {
        exit::VALID
    } else {
        exit::INVALID
    }
    .into())
}

/// A cell that did not come out as expected keeps what shows why: its
/// history in the temporary folder and the report on stderr, since a real
/// run on a loaded machine may not come out the same way twice.
fn keep_evidence(replay: &str, run: &RealRun) {
    let path = std::env::temp_dir().join(format!(
        "lockcheck-matrix-{}-{}.jsonl",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_millis())
    ));
    let written = std::fs::File::create(&path).map_err(anyhow::Error::from).and_then(|file| {
        Ok(lockcheck_checker::write_events(std::io::BufWriter::new(file), &run.events)?)
    });
    let analyzed = lockcheck_reports::Analyzed { source: replay, analysis: &run.analysis };
    let report = crate::output::render(
        crate::args::Format::Text,
        run.analysis.verdict,
        &[analyzed],
        Some(&run.events),
        None,
    );
    eprintln!("mismatch: {replay}\n{report}");
    match written {
        Ok(()) => eprintln!("mismatch: its history is in {}", path.display()),
        Err(error) => eprintln!("mismatch: its history could not be kept: {error:#}"),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use clap::Parser;
    use lockcheck_real::matrix::cells;
    use lockcheck_real::RealOptions;

    use crate::args::{Cli, Command};
    use crate::real::real_options;

    /// What `lockcheck check ARGS` runs against real servers.
    fn parsed(line: &str) -> RealOptions {
        let words = ["lockcheck", "check"].into_iter().chain(line.split_whitespace());
        match Cli::try_parse_from(words) {
            Ok(Cli { command: Command::Check(check) }) => real_options(&check).unwrap(),
            other => panic!("{line}: {other:?}"),
        }
    }

    #[test]
    fn the_real_defaults_are_check_defaults() {
        assert_eq!(parsed("--backend redis"), RealOptions::default());
    }

    #[test]
    fn each_cell_replays_as_the_check_line_the_matrix_prints() {
        for cell in cells() {
            let line = super::check_line(&cell, 3, Duration::from_millis(2500));
            let options = lockcheck_real::matrix::cell_options(
                &cell,
                Duration::from_millis(2500),
                crate::options::check_options(Duration::from_secs(10)),
            );
            assert_eq!(parsed(&line), options, "{line}");
        }
    }
}
