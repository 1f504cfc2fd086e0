//! `lockcheck matrix --sim`: every simulated cell of LOCKS.md §6, expected
//! against found. Without `--sim`, `matrix_real.rs` runs the real cells.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use lockcheck_sim::{cells, run_cell_with_progress, Cell, Effort};

use crate::args::MatrixArgs;
use crate::exit;
use crate::progress::Progress;

fn setup(cell: &Cell) -> String {
    let faults: Vec<&str> = cell.faults.iter().map(|kind| kind.name()).collect();
    let mut setup = if faults.is_empty() { "none".to_string() } else { faults.join(",") };
    if cell.workload != lockcheck_workloads::Workload::FencedWrite {
        setup.push_str(&format!(" --workload {}", cell.workload.name()));
    }
    if !cell.fencing {
        setup.push_str(" --no-fencing");
    }
    if cell.persistent {
        setup.push_str(" --persistent");
    }
    if cell.faults.contains(&lockcheck_sim::FaultKind::Partition)
        && cell.shapes != lockcheck_sim::Shape::ALL
    {
        let shapes: Vec<&str> = cell.shapes.iter().map(|shape| shape.name()).collect();
        setup.push_str(&format!(" ({})", shapes.join(",")));
    }
    setup
}

pub fn run(args: &MatrixArgs) -> anyhow::Result<ExitCode> {
    if !args.sim {
        return crate::matrix_real::run(args);
    }
    let effort = Effort {
        violated_within: args.violated_within.unwrap_or(50).max(1),
        safe_seeds: args.safe_seeds.unwrap_or(200).max(1),
        time_limit: args.time_limit.unwrap_or(Duration::from_secs(30)),
        linearizability_timeout: args.linearizability_timeout,
    };
    println!(
        "the simulated truth table (LOCKS.md §6): violated cells must show within {} seeds, safe ones stay clean over {}; {} s simulated per run",
        effort.violated_within,
        effort.safe_seeds,
        effort.time_limit.as_secs_f64()
    );
    println!("{:<30} {:<26} {:<44} {:<44} result", "backend", "faults", "expected", "found");
    let started = Instant::now();
    let mut mismatches = Vec::new();
    let cells: Vec<Cell> = cells()
        .into_iter()
        .filter(|cell| {
            args.backends.is_empty() || args.backends.iter().any(|name| name == cell.backend.name())
        })
        .collect();
    if cells.is_empty() {
        eprintln!("lockcheck: no cell has the backends {:?}", args.backends);
        return Ok(exit::USAGE.into());
    }
    let progress = Progress::count(cells.len() as u64, "cells");
    for cell in &cells {
        let what = format!("{} {}", cell.backend.name(), setup(cell));
        let seeds = match cell.expect {
            lockcheck_sim::Expect::Safe => effort.safe_seeds,
            lockcheck_sim::Expect::Violated { .. } => effort.violated_within,
        };
        progress.message(format!("{what}: seed 1 of up to {seeds}"));
        let mut lock_ops = 0;
        let result = run_cell_with_progress(cell, &effort, &mut |seed, sim| {
            lock_ops += sim.stats.lock_ops;
            progress.message(format!(
                "{what}: seed {} of up to {seeds} done, {lock_ops} lock ops",
                seed + 1
            ));
        })?;
        progress.suspend(|| {
            println!(
                "{:<30} {:<26} {:<44} {:<44} {}",
                cell.backend.name(),
                setup(cell),
                cell.expect.describe(),
                result.found,
                if result.matches { "ok" } else { "MISMATCH" }
            )
        });
        progress.inc();
        if !result.matches {
            mismatches.push(format!(
                "  {} ({}): replay: lockcheck {}",
                cell.backend.name(),
                cell.note,
                result.options.check_arguments()
            ));
        }
    }
    drop(progress);
    summary(cells.len(), started, &mismatches);
    Ok(if mismatches.is_empty() { exit::VALID } else { exit::INVALID }.into())
}

/// The last lines of a matrix: how many cells matched, then each mismatch.
pub fn summary(cells: usize, started: Instant, mismatches: &[String]) {
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
