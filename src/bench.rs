//! `lockcheck bench`: the benchmarks of `lockcheck-bench`, part after
//! part; `--only sweep` is `matrix --sim`'s (`matrix_sim.rs`).

use std::process::ExitCode;

use anyhow::Context;
use lockcheck_bench::{BenchOptions, Outcome, Part};

use crate::args::{BenchArgs, BenchPart};
use lockcheck_commands::exit;

pub fn run(args: &BenchArgs) -> anyhow::Result<ExitCode> {
    let options = BenchOptions {
        program: std::env::current_exe().context("cannot find the lockcheck executable")?,
        porcupine: args.porcupine.clone(),
        sim_seeds: args.sim_seeds,
        sim_backends: args.sim_backends.clone(),
        lease_ops: args.lease_ops,
        ops: args.ops.clone(),
        clients: args.clients,
        keys: args.keys,
        seed: args.seed,
        runs: args.runs,
        dir: args.dir.clone(),
        one_lock_ops: args.one_lock_ops.clone(),
        hard_timeout: args.hard_timeout,
        compare_with: args.compare_with.clone(),
    };
    if let Err(error) = options.validate() {
        eprintln!("lockcheck: {error}");
        return Ok(exit::USAGE.into());
    }
    let mut code = exit::VALID;
    for part in &args.only {
        let part = match part {
            BenchPart::Analyze => Part::Analyze,
            BenchPart::Porcupine => Part::Porcupine,
            BenchPart::Lease => Part::Lease,
            BenchPart::Sim => Part::Sim,
            BenchPart::Memory => Part::Memory,
            BenchPart::Real => Part::Real,
            BenchPart::OneLock => Part::OneLock,
            BenchPart::Hard => Part::Hard,
            BenchPart::Model => Part::Model,
            BenchPart::Sweep => {
                code = code.max(lockcheck_commands::matrix_sim::sweep(
                    args.sweep_seeds,
                    &args.sweep_backends,
                )?);
                println!();
                continue;
            }
        };
        let part_code = match lockcheck_bench::run(part, &options)? {
            Outcome::Valid => exit::VALID,
            Outcome::Invalid => exit::INVALID,
            Outcome::Unknown => exit::UNKNOWN,
            Outcome::Refused => exit::USAGE,
        };
        code = code.max(part_code);
        println!();
    }
    Ok(code.into())
}
