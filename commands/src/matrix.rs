//! `lockcheck matrix`: the one loop that prints a truth table of
//! docs/truth-table.md, expected against found, a row per cell. Both worlds
//! go through it; what differs is a [`World`]: the simulated one
//! (`matrix_sim.rs`, `--sim`) and the real one (`matrix_real.rs`). Running
//! and judging a cell belongs to the world crates
//! (`lockcheck_sim::run_cell_with_progress`,
//! `lockcheck_real::matrix::run_cell`): the binary only prints.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use lockcheck_workloads::Cell;

use crate::exit;
use lockcheck_runs::Progress;

/// Width of the expected and found columns, in both tables.
const VERDICT_WIDTH: usize = 44;

/// How a world's table is laid out.
#[derive(Debug)]
pub struct Layout {
    /// The columns that name a cell, before expected and found: heading
    /// and width.
    pub labels: &'static [(&'static str, usize)],
    /// Whether a row ends with the time the cell took: a real cell takes
    /// seconds to minutes of wall time, a simulated one no telling time.
    pub timed: bool,
}

/// How a cell came out.
#[derive(Debug)]
pub enum Ran {
    /// Its runs decided it, after `runs` of them; `replay` is the command
    /// line of the run that did (or of the first).
    Judged { matches: bool, found: String, replay: String, runs: u64 },
    /// It could not run (a server missing, say): an ERROR row, and the
    /// matrix exits UNAVAILABLE rather than passing judgement.
    Failed(String),
}

/// What one world's matrix prints and how it runs a cell.
pub trait World {
    /// The world's backends: `--backends` selects cells by their names.
    type Backend: Copy;
    /// A backend's name in this world.
    fn backend_name(backend: Self::Backend) -> &'static str;
    const LAYOUT: Layout;
    /// How the usage error calls the cells (`cell`, `real cell`).
    const CELLS: &'static str;
    /// The sentence above the table: what it is and how hard it looks.
    fn header(&self) -> String;
    /// The cell's columns before expected and found, one per
    /// [`Layout::labels`].
    fn labels(cell: &Cell<Self::Backend>) -> Vec<String>;
    /// How the lines after the table name the cell.
    fn name(cell: &Cell<Self::Backend>) -> String;
    /// Runs and judges the cell, its first run at seed `first_seed`,
    /// showing its progress. An error stops the matrix (a bug, not a cell's
    /// outcome).
    fn run(
        &self,
        cell: &Cell<Self::Backend>,
        first_seed: u64,
        progress: &Progress,
    ) -> anyhow::Result<Ran>;
    /// How many runs a violated cell may take.
    fn budget(&self, cell: &Cell<Self::Backend>) -> u64;
}

/// Which cells a matrix runs: those of these backends and workloads (a
/// list left empty names every one).
#[derive(Debug, Clone, Copy)]
pub struct Selection<'a> {
    pub backends: &'a [String],
    pub workloads: &'a [String],
    pub protections: &'a [String],
    /// Leave out the cells whose runs each take longer than this (a
    /// quicker sample); a cell with no time of its own is kept.
    pub longest_run: Option<Duration>,
}

impl std::fmt::Display for Selection<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if !self.backends.is_empty() {
            parts.push(format!("the backends {:?}", self.backends));
        }
        if !self.workloads.is_empty() {
            parts.push(format!("the workloads {:?}", self.workloads));
        }
        if !self.protections.is_empty() {
            parts.push(format!("the protections {:?}", self.protections));
        }
        if let Some(longest) = self.longest_run {
            parts.push(format!("runs of at most {:?}", longest));
        }
        match parts.is_empty() {
            true => write!(f, "any cell"),
            false => write!(f, "{}", parts.join(" and ")),
        }
    }
}

/// The cells `selection` names.
fn selected<W: World>(
    cells: Vec<Cell<W::Backend>>,
    selection: Selection<'_>,
) -> Vec<Cell<W::Backend>> {
    let named =
        |list: &[String], name: &str| list.is_empty() || list.iter().any(|wanted| wanted == name);
    cells
        .into_iter()
        .filter(|cell| {
            named(selection.backends, W::backend_name(cell.backend))
                && named(selection.workloads, cell.workload.name())
                && named(selection.protections, cell.protection.name())
                && selection
                    .longest_run
                    .is_none_or(|longest| cell.time_limit.is_none_or(|own| own <= longest))
        })
        .collect()
}

/// Runs the `cells` of `backends` (all of them: none named) and prints the
/// table; exits 0 when every cell matches, 1 on a mismatch, 69 when a cell
/// could not run, 64 when no cell is left.
pub fn run<W: World>(
    world: &W,
    cells: Vec<Cell<W::Backend>>,
    selection: Selection<'_>,
) -> anyhow::Result<ExitCode> {
    let cells = selected::<W>(cells, selection);
    if cells.is_empty() {
        eprintln!("lockcheck: no {} has {selection}", W::CELLS);
        return Ok(exit::USAGE.into());
    }
    println!("{}", world.header());
    println!("{}", heading(&W::LAYOUT));
    let started = Instant::now();
    let mut after = Vec::new();
    let mut errors = 0;
    let progress = Progress::count(cells.len() as u64, "cells");
    for cell in &cells {
        let cell_started = Instant::now();
        let (found, result) = match world.run(cell, 0, &progress)? {
            Ran::Judged { matches: true, found, .. } => (found, "ok"),
            Ran::Judged { matches: false, found, replay, .. } => {
                after.push(format!("  {} ({}): replay: {replay}", W::name(cell), cell.note));
                (found, "MISMATCH")
            }
            Ran::Failed(error) => {
                errors += 1;
                after.push(format!("  {}: {error}", W::name(cell)));
                ("could not run".to_string(), "ERROR")
            }
        };
        let took = W::LAYOUT.timed.then(|| cell_started.elapsed());
        let row = row(&W::LAYOUT, &W::labels(cell), &cell.expect.describe(), &found, result, took);
        progress.suspend(|| println!("{row}"));
        progress.inc();
    }
    drop(progress);
    summary(cells.len(), started, &after);
    Ok(exit_code(errors, after.len()).into())
}

/// Seeds between two samples of [`runs_needed`]: more than any cell takes.
pub const SAMPLE_STRIDE: u64 = 1_000;

/// `matrix --runs-needed SAMPLES`: how many runs each violated cell of
/// `backends` needs to show, `samples` times, the k-th from seed
/// `k * SAMPLE_STRIDE`: each sample's count, their median and maximum. A
/// sample that shows nothing within the cell's budget counts as one run
/// more, and the cell is a mismatch (exit 1), as in the table.
pub fn runs_needed<W: World>(
    world: &W,
    cells: Vec<Cell<W::Backend>>,
    selection: Selection<'_>,
    samples: u64,
) -> anyhow::Result<ExitCode> {
    let cells: Vec<Cell<W::Backend>> = selected::<W>(cells, selection)
        .into_iter()
        .filter(|cell| cell.expect.seeks_violation())
        .collect();
    if cells.is_empty() {
        eprintln!("lockcheck: no violated {} has {selection}", W::CELLS);
        return Ok(exit::USAGE.into());
    }
    let samples = samples.max(1);
    println!(
        "runs each violated cell needed to show, {samples} samples (the k-th from seed k*{SAMPLE_STRIDE})"
    );
    let mut line = String::new();
    for (heading, width) in W::LAYOUT.labels {
        line.push_str(&format!("{heading:<width$} "));
    }
    println!("{line}{:>6} {:>4}  runs", "median", "max");
    let started = Instant::now();
    let (mut errors, mut blind) = (0, Vec::new());
    let progress = Progress::count(cells.len() as u64 * samples, "samples");
    for cell in &cells {
        let budget = world.budget(cell);
        let mut needed = Vec::new();
        for sample in 0..samples {
            match world.run(cell, sample * SAMPLE_STRIDE, &progress)? {
                Ran::Judged { matches: true, runs, .. } => needed.push(Sample::Found(runs)),
                Ran::Judged { matches: false, replay, .. } => {
                    blind.push(format!("  {} ({}): replay: {replay}", W::name(cell), cell.note));
                    needed.push(Sample::NotFound);
                }
                Ran::Failed(error) => {
                    errors += 1;
                    blind.push(format!("  {}: {error}", W::name(cell)));
                    needed.push(Sample::Failed);
                }
            }
            progress.inc();
        }
        let row = needed_row(&W::LAYOUT, &W::labels(cell), &needed, budget);
        progress.suspend(|| println!("{row}"));
    }
    drop(progress);
    println!(
        "{} cells, {} samples each, in {:.1} s",
        cells.len(),
        samples,
        started.elapsed().as_secs_f64()
    );
    for line in &blind {
        println!("{line}");
    }
    Ok(exit_code(errors, blind.len()).into())
}

/// How one sample of a violated cell came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sample {
    /// Shown after this many runs.
    Found(u64),
    /// Not shown within the cell's budget.
    NotFound,
    /// A run could not run: no count.
    Failed,
}

/// One cell's row of [`runs_needed`]: labels, median, maximum, each
/// sample's count (`>3`: not within a budget of 3; `error`: a run could
/// not run, left out of the median and maximum).
fn needed_row(layout: &Layout, labels: &[String], needed: &[Sample], budget: u64) -> String {
    let mut line = String::new();
    for (label, (_, width)) in labels.iter().zip(layout.labels) {
        line.push_str(&format!("{label:<width$} "));
    }
    let count = |sample: &Sample| match sample {
        Sample::Found(runs) => Some(*runs),
        Sample::NotFound => Some(budget + 1),
        Sample::Failed => None,
    };
    let mut counts: Vec<u64> = needed.iter().filter_map(count).collect();
    counts.sort_unstable();
    // The median and maximum of the samples that ran.
    let median = match counts.len() {
        0 => 0.0,
        n if n % 2 == 1 => counts[n / 2] as f64,
        n => (counts[n / 2 - 1] + counts[n / 2]) as f64 / 2.0,
    };
    let over = |runs: u64| if runs > budget { format!(">{budget}") } else { runs.to_string() };
    let each: Vec<String> =
        needed.iter().map(|sample| count(sample).map_or("error".to_string(), over)).collect();
    let (median, max) = match counts.last() {
        Some(&max) => (median.to_string(), over(max)),
        None => ("-".to_string(), "-".to_string()),
    };
    line + &format!("{median:>6} {max:>4}  {}", each.join(" "))
}

/// Any cell that could not run outweighs a mismatch: its verdict is missing.
fn exit_code(errors: usize, mismatches: usize) -> u8 {
    if errors > 0 {
        exit::UNAVAILABLE
    } else if mismatches > 0 {
        exit::INVALID
    } else {
        exit::VALID
    }
}

/// The table's first line: `backend   faults   expected   found   result`.
fn heading(layout: &Layout) -> String {
    let mut line = String::new();
    for (heading, width) in layout.labels {
        line.push_str(&format!("{heading:<width$} "));
    }
    line + &format!("{:<VERDICT_WIDTH$} {:<VERDICT_WIDTH$} result", "expected", "found")
}

/// One cell's row: its labels, expected, found, the result and, in a timed
/// layout, how long it took (`ok (12 s)`).
fn row(
    layout: &Layout,
    labels: &[String],
    expected: &str,
    found: &str,
    result: &str,
    took: Option<Duration>,
) -> String {
    let mut line = String::new();
    for (label, (_, width)) in labels.iter().zip(layout.labels) {
        line.push_str(&format!("{label:<width$} "));
    }
    line.push_str(&format!("{expected:<VERDICT_WIDTH$} {found:<VERDICT_WIDTH$} {result}"));
    if let Some(took) = took {
        line.push_str(&format!(" ({:.0} s)", took.as_secs_f64()));
    }
    line
}

/// The last lines of a matrix: how many cells matched, then each mismatch
/// (and each cell that could not run).
fn summary(cells: usize, started: Instant, mismatches: &[String]) {
    println!(
        "{cells} cells in {:.1} s: {} match, {} do not",
        started.elapsed().as_secs_f64(),
        cells - mismatches.len(),
        mismatches.len()
    );
    for mismatch in mismatches {
        println!("{mismatch}");
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{heading, needed_row, row, Layout, Sample};

    const SIMULATED: Layout = Layout { labels: &[("backend", 30), ("faults", 26)], timed: false };
    const REAL: Layout = Layout { labels: &[("check", 64)], timed: true };

    #[test]
    fn a_layout_prints_the_columns_both_tables_printed() {
        assert_eq!(
            heading(&SIMULATED),
            format!("{:<30} {:<26} {:<44} {:<44} result", "backend", "faults", "expected", "found")
        );
        assert_eq!(
            heading(&REAL),
            format!("{:<64} {:<44} {:<44} result", "check", "expected", "found")
        );
    }

    #[test]
    fn a_row_of_runs_needed_gives_the_median_the_maximum_and_each_sample() {
        let labels = ["sim-redis".to_string(), "pause".to_string()];
        let needed = [Sample::Found(1), Sample::Found(3), Sample::Found(1), Sample::Found(2)];
        assert_eq!(
            needed_row(&SIMULATED, &labels, &needed, 50),
            format!("{:<30} {:<26} {:>6} {:>4}  1 3 1 2", "sim-redis", "pause", "1.5", "3")
        );
        let blind = [Sample::Found(1), Sample::NotFound, Sample::Found(2), Sample::Failed];
        assert_eq!(
            needed_row(&SIMULATED, &labels, &blind, 3),
            format!("{:<30} {:<26} {:>6} {:>4}  1 >3 2 error", "sim-redis", "pause", "2", ">3")
        );
        assert_eq!(
            needed_row(&SIMULATED, &labels, &[Sample::Failed], 3),
            format!("{:<30} {:<26} {:>6} {:>4}  error", "sim-redis", "pause", "-", "-")
        );
    }

    #[test]
    fn a_timed_row_ends_with_the_seconds_a_cell_took() {
        let labels = ["sim-redis".to_string(), "pause".to_string()];
        assert_eq!(
            row(&SIMULATED, &labels, "safe", "valid over 200 seeds", "ok", None),
            format!(
                "{:<30} {:<26} {:<44} {:<44} ok",
                "sim-redis", "pause", "safe", "valid over 200 seeds"
            )
        );
        let labels = ["--backend redis --nemesis none --ttl 500ms".to_string()];
        let took = Some(Duration::from_millis(6400));
        assert_eq!(
            row(&REAL, &labels, "safe", "could not run", "ERROR", took),
            format!("{:<64} {:<44} {:<44} ERROR (6 s)", labels[0], "safe", "could not run")
        );
    }
}
