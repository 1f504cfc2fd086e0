//! `lockcheck matrix --sim`: the simulated world of the matrix loop
//! (`matrix.rs`), every simulated cell of docs/truth-table.md over seeds.
//! Without `--sim`, `matrix_real.rs` runs the real cells. Also `bench
//! --only sweep`, the simulated safe cells over many more seeds.

use std::process::ExitCode;
use std::time::Instant;

use lockcheck_sim::{cells, run_cell_with_progress, sweep_cell, Cell, Effort, Expect};

use crate::exit;
use crate::matrix::{Layout, Ran, World};
use crate::MatrixRequest;
use lockcheck_runs::Progress;

/// The faults column: the cell's faults and whatever else it sets that a
/// default run does not (`pause --no-fencing`, `partition (client)`).
fn setup(cell: &Cell) -> String {
    let faults: Vec<&str> = cell.faults.iter().map(|kind| kind.name()).collect();
    let mut setup = if faults.is_empty() { "none".to_string() } else { faults.join(",") };
    if cell.workload != lockcheck_workloads::Workload::FencedWrite {
        setup.push_str(&format!(" --workload {}", cell.workload.name()));
    }
    let payments = cell.workload == lockcheck_workloads::Workload::Payments;
    if payments || cell.protection != lockcheck_workloads::payments::Protection::default() {
        setup.push_str(&format!(" --protection {}", cell.protection.name()));
    }
    if payments && cell.provider_variant != lockcheck_workloads::provider::Variant::default() {
        setup.push_str(&format!(" --provider-variant {}", cell.provider_variant.name()));
    }
    if cell.faults.contains(&lockcheck_sim::FaultKind::Pause)
        && cell.pause_at != lockcheck_workloads::StallPoint::ALL
    {
        setup.push_str(&format!(" at {}", lockcheck_workloads::StallPoint::list(cell.pause_at)));
    }
    if !cell.fencing {
        setup.push_str(" --no-fencing");
    }
    if cell.persistent {
        setup.push_str(" --persistent");
    }
    if let Some(ttl) = cell.ttl {
        setup.push_str(&format!(" --ttl {}ms", ttl.as_millis()));
    }
    if cell.faults.contains(&lockcheck_sim::FaultKind::Partition)
        && cell.shapes != lockcheck_sim::Shape::ALL
    {
        let shapes: Vec<&str> = cell.shapes.iter().map(|shape| shape.name()).collect();
        setup.push_str(&format!(" ({})", shapes.join(",")));
    }
    setup
}

/// The simulated world of the matrix: its cells' runs over seeds, as
/// `effort` asks.
struct Simulated {
    effort: Effort,
}

impl World for Simulated {
    type Backend = lockcheck_sim::Backend;

    fn backend_name(backend: Self::Backend) -> &'static str {
        backend.sim_name()
    }
    const LAYOUT: Layout = Layout { labels: &[("backend", 30), ("faults", 26)], timed: false };
    const CELLS: &'static str = "cell";

    fn header(&self) -> String {
        format!(
            "the simulated truth table (docs/truth-table.md): violated cells must show within {} seeds, safe ones stay clean over {}; {} s simulated per run",
            self.effort.violated_within,
            self.effort.safe_seeds,
            self.effort.time_limit.as_secs_f64()
        )
    }

    fn labels(cell: &Cell) -> Vec<String> {
        vec![cell.backend.sim_name().to_string(), setup(cell)]
    }

    fn name(cell: &Cell) -> String {
        cell.backend.sim_name().to_string()
    }

    fn budget(&self, _: &Cell) -> u64 {
        self.effort.violated_within
    }

    fn run(&self, cell: &Cell, first_seed: u64, progress: &Progress) -> anyhow::Result<Ran> {
        let effort = &Effort { first_seed, ..self.effort };
        let what = format!("{} {}", cell.backend.sim_name(), setup(cell));
        let seeds = lockcheck_sim::seeds_of(cell, effort);
        progress.message(format!("{what}: seed 1 of up to {seeds}"));
        let (mut lock_ops, mut done) = (0, 0);
        let result = run_cell_with_progress(cell, effort, &mut |_, sim| {
            lock_ops += sim.stats.lock_ops;
            done += 1;
            progress
                .message(format!("{what}: seed {done} of up to {seeds} done, {lock_ops} lock ops"));
        })?;
        Ok(Ran::Judged {
            runs: result.seeds,
            matches: result.matches,
            found: result.found,
            replay: crate::program::replay_line(&result.options.replay()),
        })
    }
}

/// `lockcheck matrix --sim`.
pub fn run(args: &MatrixRequest) -> anyhow::Result<ExitCode> {
    let defaults = Effort::default();
    let effort = Effort {
        violated_within: args.violated_within.unwrap_or(defaults.violated_within).max(1),
        safe_seeds: args.safe_seeds.unwrap_or(defaults.safe_seeds).max(1),
        time_limit: args.time_limit.unwrap_or(defaults.time_limit),
        linearizability_timeout: args
            .linearizability_timeout
            .unwrap_or(defaults.linearizability_timeout),
        first_seed: 0,
    };
    match args.runs_needed {
        Some(samples) => {
            crate::matrix::runs_needed(&Simulated { effort }, cells(), args.selection(), samples)
        }
        None => crate::matrix::run(&Simulated { effort }, cells(), args.selection()),
    }
}

/// `bench --only sweep`: every safe simulated cell at the matrix's defaults
/// over many seeds, on every core. A safe cell that finds a violation is a
/// false alarm, the worst defect a CI gate can have: each is printed with
/// the command that replays it, and the sweep exits 1.
pub fn sweep(sweep_seeds: u64, sweep_backends: &[String]) -> anyhow::Result<u8> {
    let effort = Effort::default();
    let threads = std::thread::available_parallelism().map_or(1, |cores| cores.get());
    let cells: Vec<Cell> = cells()
        .into_iter()
        .filter(|cell| cell.expect == Expect::Safe)
        .filter(|cell| {
            sweep_backends.is_empty()
                || sweep_backends.iter().any(|name| name == cell.backend.sim_name())
        })
        .collect();
    if cells.is_empty() {
        eprintln!("lockcheck: no safe cell has the backends {:?}", sweep_backends);
        return Ok(exit::USAGE);
    }
    println!(
        "sweep: {} safe simulated cells, seeds 0..{}, {} simulated s a run, {threads} threads",
        cells.len(),
        sweep_seeds,
        effort.time_limit.as_secs_f64()
    );
    println!(
        "{:<30} {:<36} {:>7} {:>12} {:>8}",
        "backend", "faults", "seeds", "false alarms", "wall s"
    );
    let started = Instant::now();
    let mut alarms = Vec::new();
    for cell in &cells {
        let cell_started = Instant::now();
        let found = sweep_cell(cell, &effort, 0..sweep_seeds, threads)?;
        println!(
            "{:<30} {:<36} {:>7} {:>12} {:>8.1}",
            cell.backend.sim_name(),
            setup(cell),
            sweep_seeds,
            found.len(),
            cell_started.elapsed().as_secs_f64()
        );
        alarms.extend(found.into_iter().map(|alarm| {
            format!(
                "  {} seed {}: {}; replay: {}",
                cell.backend.sim_name(),
                alarm.seed,
                alarm.found,
                crate::program::replay_line(&alarm.options.replay())
            )
        }));
    }
    println!(
        "{} runs in {:.1} s: {} false alarms",
        cells.len() as u64 * sweep_seeds,
        started.elapsed().as_secs_f64(),
        alarms.len()
    );
    for alarm in &alarms {
        println!("{alarm}");
    }
    Ok(if alarms.is_empty() { exit::VALID } else { exit::INVALID })
}
