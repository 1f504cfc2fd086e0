//! `bench --only real`: prints `lockcheck_real::bench`'s figures.

use lockcheck_real::bench::{throughput, Throughput, CLIENTS, SECONDS};

use crate::{BenchError, BenchOptions, Outcome};

pub fn real(args: &BenchOptions) -> Result<Outcome, BenchError> {
    println!(
        "real servers: {CLIENTS} clients back to back for {SECONDS} s, against private servers started for the run"
    );
    println!(
        "wake-ups: waiters woken per release (a watch's wake-ups; for a polling recipe, its polls refused busy)"
    );
    println!(
        "{:<22} {:>14} {:>14} {:>10} {:>10}   {:<8}",
        "backend", "per second", "ceiling/s", "share", "wake-ups", "verdict"
    );
    throughput(args.seed, |row: &Throughput| {
        println!(
            "{:<22} {:>14} {:>14.0} {:>9.0}% {:>10}   {:<8} ceiling: {}",
            row.backend,
            format!("{:.0} {}", row.lock_ops_per_s, row.what),
            row.ceiling_per_s,
            row.lock_ops_per_s / row.ceiling_per_s * 100.0,
            row.wake_ups_per_release.map_or("-".to_string(), |wakes| format!("{wakes:.2}")),
            row.verdict,
            row.ceiling_tool
        )
    })
    .map_err(BenchError::Failed)?;
    Ok(Outcome::Valid)
}
