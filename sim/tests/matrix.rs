//! The simulated truth table of docs/truth-table.md, as `lockcheck matrix
//! --sim` runs it: each violated cell is found within 50 seeds, each safe
//! cell stays clean over 200.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use lockcheck_sim::{cells, run_cell, Effort};

#[test]
fn every_simulated_cell_comes_out_as_the_truth_table_says() {
    // Exactly what `lockcheck matrix --sim` runs with no options: a false
    // alarm a user would meet must fail here.
    let effort = Effort::default();
    let started = Instant::now();
    let cells = cells();
    assert!(cells.len() >= 17, "the table lost cells");
    // The cells are independent and each is deterministic: they run on
    // every core, and are reported in the table's order.
    let next = AtomicUsize::new(0);
    let results = Mutex::new(vec![None; cells.len()]);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).min(cells.len());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let at = next.fetch_add(1, Ordering::Relaxed);
                let Some(cell) = cells.get(at) else { break };
                let cell_started = Instant::now();
                let result = run_cell(cell, &effort)
                    .unwrap_or_else(|error| panic!("{}: {error}", cell.backend.sim_name()));
                results.lock().unwrap()[at] = Some((result, cell_started.elapsed()));
            });
        }
    });
    let mut mismatches = Vec::new();
    for (cell, result) in cells.iter().zip(results.into_inner().unwrap()) {
        let (result, took) = result.expect("every cell ran");
        eprintln!(
            "{} {:?}: {} ({} seeds, {:.1} s)",
            cell.backend.sim_name(),
            cell.faults,
            result.found,
            result.seeds,
            took.as_secs_f64()
        );
        // No cell with faults passes bare: it says how many of its runs'
        // faults reached a vulnerable window, and is vacuous if none did.
        if !cell.faults.is_empty() && result.matches && !cell.expect.seeks_violation() {
            assert!(
                result.found.contains(", covered "),
                "{} {:?}: {}",
                cell.backend.sim_name(),
                cell.faults,
                result.found
            );
            let vacuous = result.found.contains(", covered 0/");
            assert_eq!(vacuous, result.found.starts_with("vacuous: "), "{}", result.found);
        }
        if !result.matches {
            mismatches.push(format!(
                "{} ({}): {}; replay: cargo run --release -- {}",
                cell.backend.sim_name(),
                cell.note,
                result.found,
                result.options.replay().arguments()
            ));
        }
    }
    eprintln!("{} cells in {:.1} s", cells.len(), started.elapsed().as_secs_f64());
    assert!(mismatches.is_empty(), "cells that do not match the table:\n{}", mismatches.join("\n"));
}
