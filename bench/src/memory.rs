//! `bench --only memory`: what a simulated run costs in memory per
//! client and per simulated second, against the estimate that `check`
//! refuses a run by. Each size runs `lockcheck check --stats` in a child
//! process, so that each peak is that run's own.

use std::process::{Command, Stdio};

use lockcheck_sim::{RunOptions, Simulated, BASE_BYTES, BYTES_PER_CLIENT, BYTES_PER_CLIENT_SECOND};
use lockcheck_workloads::memory::format_size;

use crate::child::stats_field;
use crate::{BenchError, BenchOptions, Outcome};

/// The sizes measured: clients and simulated seconds. The first, tiny,
/// gives the base the others are measured above.
const SIZES: [(u32, u64); 6] = [(5, 1), (5, 600), (100, 60), (1000, 5), (1000, 15), (5000, 3)];

/// What one `check --stats` child reported.
#[derive(Debug, Clone, Copy)]
struct Measured {
    events: u64,
    wall_s: f64,
    recorded_rss: u64,
    peak_rss: u64,
}

pub fn memory(args: &BenchOptions) -> Result<Outcome, BenchError> {
    let mut outcome = Outcome::Valid;
    for backend in &args.sim_backends {
        outcome = outcome.max(memory_backend(args, backend)?);
    }
    Ok(outcome)
}

fn memory_backend(args: &BenchOptions, backend: &str) -> Result<Outcome, BenchError> {
    let Some(parsed) =
        lockcheck_sim::Backend::parse_in(lockcheck_workloads::World::Simulated, backend)
    else {
        eprintln!("lockcheck: unknown simulated backend {backend:?}");
        return Ok(Outcome::Refused);
    };
    println!(
        "simulator memory: {backend}, default workload and faults, seed {}; the estimate is \
         {} + {} per client + {} per client and simulated second",
        args.seed,
        format_size(BASE_BYTES),
        format_size(BYTES_PER_CLIENT),
        format_size(BYTES_PER_CLIENT_SECOND)
    );
    println!(
        "{:>7} {:>7} {:>10} {:>8} {:>12} {:>12} {:>14} {:>12} {:>6}",
        "clients",
        "sim s",
        "events",
        "wall s",
        "recorded",
        "peak",
        "per client-s",
        "estimate",
        "fits"
    );
    let mut base = None;
    let mut outcome = Outcome::Valid;
    for (clients, seconds) in SIZES {
        let measured = child(args, backend, clients, seconds)?;
        let base_rss = *base.get_or_insert(measured.peak_rss);
        let client_seconds = f64::from(clients) * seconds as f64;
        let per_client_second = measured.peak_rss.saturating_sub(base_rss) as f64 / client_seconds;
        let options = RunOptions {
            backend: parsed,
            clients,
            time_limit: std::time::Duration::from_secs(seconds),
            ..RunOptions::default()
        };
        let estimate = options.memory_estimate();
        let fits = measured.peak_rss <= estimate;
        if !fits {
            outcome = Outcome::Invalid;
        }
        println!(
            "{clients:>7} {seconds:>7} {:>10} {:>8.2} {:>12} {:>12} {:>14} {:>12} {:>6}",
            measured.events,
            measured.wall_s,
            format_size(measured.recorded_rss),
            format_size(measured.peak_rss),
            format_size(per_client_second as u64),
            format_size(estimate),
            if fits { "yes" } else { "NO" }
        );
    }
    Ok(outcome)
}

/// `lockcheck check --stats` of one size, in a child process.
fn child(
    args: &BenchOptions,
    backend: &str,
    clients: u32,
    seconds: u64,
) -> Result<Measured, BenchError> {
    let seed = args.seed;
    let output = Command::new(&args.program)
        .args(["check", "--backend", backend, "--no-store", "--no-shrink", "--stats"])
        .args(["--clients", &clients.to_string(), "--time-limit", &format!("{seconds}s")])
        .args(["--seed", &seed.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|source| BenchError::Spawn { command: "check", source })?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !matches!(output.status.code(), Some(0..=2)) {
        return Err(BenchError::Failed(format!(
            "check of {clients} clients for {seconds} s failed ({}): {stderr}",
            output.status
        )));
    }
    let line = stderr
        .lines()
        .find(|line| line.starts_with("stats: "))
        .ok_or_else(|| BenchError::Failed(format!("check printed no stats: {stderr}")))?;
    let field = |name: &str| stats_field(line, name);
    Ok(Measured {
        events: field("events")? as u64,
        wall_s: field("wall_s")?,
        recorded_rss: field("recorded_rss_bytes")? as u64,
        peak_rss: field("peak_rss_bytes")? as u64,
    })
}
