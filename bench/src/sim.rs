//! `bench --only sim`: the default `lockcheck check` run, seed after seed:
//! how much simulated time and how many lock operations one wall second
//! buys (the simulation is single-threaded), and what the whole check costs
//! with its analysis.

use std::time::{Duration, Instant};

use lockcheck_checker::CheckOptions;
use lockcheck_sim::{check_run, Backend, RunOptions};
use lockcheck_workloads::World;

use crate::{BenchError, BenchOptions, Outcome};

pub fn sim(options: &BenchOptions) -> Result<Outcome, BenchError> {
    for name in &options.sim_backends {
        let Some(backend) = Backend::parse_in(World::Simulated, name) else {
            eprintln!("lockcheck: unknown simulated backend {name:?}");
            return Ok(Outcome::Refused);
        };
        sim_backend(options, backend)?;
    }
    Ok(Outcome::Valid)
}

/// The default `check` run on one backend, seed after seed.
fn sim_backend(options: &BenchOptions, backend: Backend) -> Result<(), BenchError> {
    let base = RunOptions { backend, ..RunOptions::default() };
    println!(
        "simulator: the default check on {} ({}, faults {}), {} simulated s, seeds 0..{}",
        base.backend.sim_name(),
        base.workload.name(),
        base.faults.iter().map(|kind| kind.name()).collect::<Vec<_>>().join(","),
        base.time_limit.as_secs(),
        options.sim_seeds
    );
    println!(
        "{:>6} {:>10} {:>8} {:>12} {:>10} {:>12} {:>10} {:>9}",
        "seed", "sim s", "wall s", "compression", "lock ops", "ops/wall s", "check s", "verdict"
    );
    // As `lockcheck check` checks a run: a minute for the linearizability search.
    let check_options = CheckOptions {
        linearizability_time_limit: Some(Duration::from_secs(60)),
        ..CheckOptions::default()
    };
    let (mut simulated, mut wall, mut ops, mut slowest, mut checks) =
        (0.0, 0.0, 0u64, 0.0f64, 0.0f64);
    for seed in 0..options.sim_seeds.max(1) {
        let run_options = RunOptions { seed, ..base.clone() };
        let started = Instant::now();
        let sim = lockcheck_sim::run(&run_options)?;
        let analysis = check_run(&sim, &check_options).map_err(BenchError::Malformed)?;
        let check_s = started.elapsed().as_secs_f64();
        let stats = sim.stats;
        println!(
            "{seed:>6} {:>10.1} {:>8.3} {:>11.0}x {:>10} {:>12.0} {:>10.3} {:>9}",
            stats.simulated_s,
            stats.wall_s,
            stats.simulated_s / stats.wall_s,
            stats.lock_ops,
            stats.lock_ops as f64 / stats.wall_s,
            check_s,
            analysis.verdict.as_str()
        );
        simulated += stats.simulated_s;
        wall += stats.wall_s;
        ops += stats.lock_ops;
        slowest = slowest.max(check_s);
        checks += check_s;
    }
    println!(
        "all: {:.0}x time compression, {:.0} simulated lock ops per wall second; slowest whole check {:.2} s; {:.0} seeds per minute",
        simulated / wall,
        ops as f64 / wall,
        slowest,
        60.0 * options.sim_seeds.max(1) as f64 / checks
    );
    println!();
    Ok(())
}
