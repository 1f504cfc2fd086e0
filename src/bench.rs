//! `lockcheck bench`: how fast `analyze` checks large synthetic histories, and
//! how much memory it needs. Each measurement runs `lockcheck analyze --stats`
//! in a child process, so the peak memory is that of the analysis alone, not
//! of generating the history.

use std::fs::{self, File};
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context};
use lockcheck_checker::synth::{generate, SynthOptions};
use lockcheck_checker::write_events;

use crate::args::{BenchArgs, BenchPart};
use crate::bench_child::{analyze_child, Run};
use crate::exit;

pub fn run(args: &BenchArgs) -> anyhow::Result<ExitCode> {
    if args.ops.is_empty() || args.runs == 0 || args.clients == 0 || args.keys == 0 {
        eprintln!("lockcheck: --ops, --runs, --clients and --keys must each be at least 1");
        return Ok(exit::USAGE.into());
    }
    let mut code = exit::VALID;
    for part in &args.only {
        let part_code = match part {
            BenchPart::Analyze => bench_analyze(args)?,
            BenchPart::Porcupine => crate::bench_linear::porcupine(args)?,
            BenchPart::Lease => crate::bench_linear::lease(args)?,
            BenchPart::Sim => bench_sim(args)?,
            BenchPart::Memory => crate::bench_memory::memory(args)?,
            BenchPart::Real => crate::bench_real::real(args)?,
            BenchPart::Sweep => crate::matrix_sim::sweep(args)?,
            BenchPart::OneLock => crate::bench_hard::one_lock(args)?,
            BenchPart::Hard => crate::bench_hard::hard(args)?,
        };
        code = code.max(part_code);
        println!();
    }
    Ok(code.into())
}

/// The default `lockcheck check` run, seed after seed: how much simulated
/// time and how many lock operations one wall second buys (the simulation is
/// single-threaded), and what the whole check costs with its analysis.
fn bench_sim(args: &BenchArgs) -> anyhow::Result<u8> {
    for name in &args.sim_backends {
        let Some(backend) = lockcheck_sim::Backend::parse(name) else {
            eprintln!("lockcheck: unknown simulated backend {name:?}");
            return Ok(exit::USAGE);
        };
        bench_sim_backend(args, backend)?;
    }
    Ok(exit::VALID)
}

/// The default `check` run on one backend, seed after seed.
fn bench_sim_backend(args: &BenchArgs, backend: lockcheck_sim::Backend) -> anyhow::Result<()> {
    let base = lockcheck_sim::SimOptions { backend, ..lockcheck_sim::SimOptions::default() };
    println!(
        "simulator: the default check on {} ({}, faults {}), {} simulated s, seeds 0..{}",
        base.backend.name(),
        base.workload.name(),
        base.faults.iter().map(|kind| kind.name()).collect::<Vec<_>>().join(","),
        base.time_limit.as_secs(),
        args.sim_seeds
    );
    println!(
        "{:>6} {:>10} {:>8} {:>12} {:>10} {:>12} {:>10} {:>9}",
        "seed", "sim s", "wall s", "compression", "lock ops", "ops/wall s", "check s", "verdict"
    );
    let (mut simulated, mut wall, mut ops, mut slowest, mut checks) =
        (0.0, 0.0, 0u64, 0.0f64, 0.0f64);
    for seed in 0..args.sim_seeds.max(1) {
        let options = lockcheck_sim::SimOptions { seed, ..base.clone() };
        let started = std::time::Instant::now();
        let sim = lockcheck_sim::run(&options)?;
        let analysis = crate::check::check(&sim, std::time::Duration::from_secs(60))?;
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
        60.0 * args.sim_seeds.max(1) as f64 / checks
    );
    println!();
    Ok(())
}

fn bench_analyze(args: &BenchArgs) -> anyhow::Result<u8> {
    let dir = match &args.dir {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!("lockcheck-bench-{}", std::process::id())),
    };
    fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    println!(
        "analyze on synthetic fenced histories: {} clients, {} keys, seed {}, best of {} runs",
        args.clients, args.keys, args.seed, args.runs
    );
    println!(
        "{:>10} {:>10} {:>9} {:>8} {:>8} {:>8} {:>10} {:>9} {:>12}",
        "ops",
        "events",
        "file MB",
        "read s",
        "check s",
        "total s",
        "peak MB",
        "bytes/op",
        "check ops/s"
    );
    for &ops in &args.ops {
        let path = write_history(&dir, args, ops)?;
        let file_mb = fs::metadata(&path)?.len() as f64 / 1e6;
        let mut best: Option<Run> = None;
        for _ in 0..args.runs {
            let run = analyze_in_child(&path)?;
            if best.is_none_or(|best| run.read_s + run.check_s < best.read_s + best.check_s) {
                best = Some(run);
            }
        }
        let best = best.expect("at least one run");
        println!(
            "{:>10} {:>10} {:>9.1} {:>8.3} {:>8.3} {:>8.3} {:>10.1} {:>9.0} {:>12.0}",
            ops,
            best.events,
            file_mb,
            best.read_s,
            best.check_s,
            best.read_s + best.check_s,
            best.peak_rss_bytes as f64 / 1e6,
            best.peak_rss_bytes as f64 / ops as f64,
            ops as f64 / best.check_s
        );
        if args.dir.is_none() {
            let _ = fs::remove_file(&path);
        }
    }
    if args.dir.is_none() {
        let _ = fs::remove_dir(&dir);
    }
    Ok(exit::VALID)
}

fn write_history(dir: &Path, args: &BenchArgs, ops: usize) -> anyhow::Result<PathBuf> {
    let path =
        dir.join(format!("synth-{ops}-c{}-k{}-s{}.jsonl", args.clients, args.keys, args.seed));
    let started = Instant::now();
    let events = generate(&SynthOptions {
        ops,
        clients: args.clients,
        keys: args.keys,
        seed: args.seed,
        ..SynthOptions::default()
    });
    let file = File::create(&path).with_context(|| format!("cannot create {}", path.display()))?;
    write_events(BufWriter::with_capacity(1 << 20, file), &events)?;
    eprintln!(
        "generated {} ({} events) in {:.2} s",
        path.display(),
        events.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(path)
}

fn analyze_in_child(path: &Path) -> anyhow::Result<Run> {
    let (code, run) = analyze_child(path, &[])?;
    if code != exit::VALID {
        bail!("the synthetic history was not found valid (exit {code})");
    }
    Ok(run)
}
