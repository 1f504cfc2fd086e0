//! The simulated truth table of docs/truth-table.md, as `lockcheck matrix
//! --sim` runs it: each violated cell is found within 50 seeds, each safe
//! cell stays clean over 200.

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
    let mut mismatches = Vec::new();
    for cell in &cells {
        let result = run_cell(cell, &effort)
            .unwrap_or_else(|error| panic!("{}: {error}", cell.backend.name()));
        eprintln!(
            "{} {:?}: {} ({} seeds)",
            cell.backend.name(),
            cell.faults,
            result.found,
            result.seeds
        );
        if !result.matches {
            mismatches.push(format!(
                "{} ({}): {}; replay: cargo run --release -- {}",
                cell.backend.name(),
                cell.note,
                result.found,
                result.options.check_arguments()
            ));
        }
    }
    eprintln!("{} cells in {:.1} s", cells.len(), started.elapsed().as_secs_f64());
    assert!(mismatches.is_empty(), "cells that do not match the table:\n{}", mismatches.join("\n"));
}
