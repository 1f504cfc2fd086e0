//! `lockcheck bench --only real`: how many lock operations a second the
//! harness drives against a real server, beside what the server's own
//! benchmark tool gets from it in the same run (the ceiling).

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use lockcheck_checker::{analyze, default_checkers, Event, EventType, Function, HistoryBuilder};
use lockcheck_real::driver::{drive, DriveOptions};
use lockcheck_real::redis::{self as real_redis, RedisClient, RedisRecipe};
use lockcheck_real::servers::{ManagedServer, ServerKind};
use lockcheck_real::sql::{SqlClient, SqlRecipe};
use lockcheck_real::storage::Storage;
use lockcheck_real::ClientConfig;
use lockcheck_workloads::{Workload, WorkloadOptions};

use crate::args::BenchArgs;
use crate::exit;

const CLIENTS: u32 = 32;
const SECONDS: u64 = 5;

/// Lock operations (acquire, release, renew) that completed.
fn lock_ops(events: &[Event]) -> usize {
    events
        .iter()
        .filter(|event| {
            event.event_type != EventType::Invoke
                && matches!(event.f, Function::Acquire | Function::Release | Function::Renew)
        })
        .count()
}

fn options(seed: u64) -> DriveOptions {
    DriveOptions {
        // Back to back on many locks: the harness' own cost, not contention.
        workload: WorkloadOptions {
            workload: Workload::Mutex,
            locks: (0..CLIENTS * 2).map(|lock| format!("bench-{lock}")).collect(),
            resources: (0..CLIENTS * 2).map(|lock| format!("bench-resource-{lock}")).collect(),
            ttl_ms: 10_000,
            hold_ms: (0, 0),
            think_ms: (0, 0),
            send_fence: true,
            permits: None,
            keepalive_ms: None,
        },
        clients: CLIENTS,
        time_limit: Duration::from_secs(SECONDS),
        seed,
        stall: None,
    }
}

fn config(logical: u32, storage: &str) -> ClientConfig {
    ClientConfig {
        name: format!("client-{logical}"),
        deadline: Duration::from_secs(2),
        storage_url: storage.to_string(),
        fenced_storage: true,
    }
}

/// Runs a tool and returns its standard output, or why it failed.
fn tool(program: &str, args: &[&str]) -> anyhow::Result<String> {
    let output = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("cannot run {program} (is it installed?)"))?;
    if !output.status.success() {
        bail!("{program} failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The first number after the last `marker` in `text` (progress lines come
/// before the result).
fn number_after(text: &str, marker: &str) -> Option<f64> {
    let rest = &text[text.rfind(marker)? + marker.len()..];
    let start = rest.find(|c: char| c.is_ascii_digit())?;
    let digits: String =
        rest[start..].chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
    digits.parse().ok()
}

fn row(what: &str, harness: f64, ceiling: f64, ceiling_tool: &str, verdict: &str) {
    println!(
        "{what:<22} {harness:>14.0} {ceiling:>14.0} {:>9.0}%   {verdict:<8} ceiling: {ceiling_tool}",
        harness / ceiling * 100.0
    );
}

pub fn real(args: &BenchArgs) -> anyhow::Result<u8> {
    println!(
        "real servers: {CLIENTS} clients back to back for {SECONDS} s, against private servers started for the run"
    );
    println!(
        "{:<22} {:>14} {:>14} {:>10}   {:<8}",
        "backend", "lock ops/s", "ceiling/s", "share", "verdict"
    );
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("runtime")?;
    let postgres = ManagedServer::start(ServerKind::Postgres)?;
    let storage = postgres.url();
    let redis = ManagedServer::start(ServerKind::Redis)?;
    let port = redis.port().to_string();
    let clients = CLIENTS.to_string();
    let set = tool(
        "redis-benchmark",
        &["-h", "127.0.0.1", "-p", &port, "-t", "set", "-c", &clients, "-n", "300000", "-q"],
    )?;
    let ceiling = number_after(&set, "SET:").context("redis-benchmark printed no SET rate")?;
    let options = options(args.seed);
    let (ops, verdict) = runtime.block_on(async {
        Storage::prepare(&storage, &options.workload.resources).await?;
        real_redis::prepare(&redis.url(), &options.workload.locks).await?;
        let url = redis.url();
        let started = Instant::now();
        let events =
                drive(&options, |logical, stall| {
                    let config = config(logical, &storage);
                    let url = url.clone();
                    async move {
                        RedisClient::connect(&url, RedisRecipe::Plain, true, stall, &config).await
                    }
                })
                .await?;
        Ok::<_, anyhow::Error>((
            lock_ops(&events) as f64 / started.elapsed().as_secs_f64(),
            verdict_of(&events),
        ))
    })?;
    row("redis", ops, ceiling, "redis-benchmark -t set, same clients", &verdict);

    let pg_port = postgres.port().to_string();
    let connection = ["-h", "127.0.0.1", "-p", &pg_port, "-U", "postgres"];
    tool("pgbench", &[&connection[..], &["-i", "-q", "postgres"]].concat())?;
    let select = tool(
        "pgbench",
        &[&connection[..], &["-S", "-c", &clients, "-j", "2", "-T", "5", "postgres"]].concat(),
    )?;
    let ceiling = number_after(&select, "tps =").context("pgbench printed no tps")?;
    let (ops, verdict) = runtime.block_on(async {
        SqlClient::prepare(&storage, SqlRecipe::PostgresLease).await?;
        let started = Instant::now();
        let events = drive(&options, |logical, _stall| {
            let config = config(logical, &storage);
            let url = storage.clone();
            async move { SqlClient::connect(&url, SqlRecipe::PostgresLease, &config).await }
        })
        .await?;
        Ok::<_, anyhow::Error>((
            lock_ops(&events) as f64 / started.elapsed().as_secs_f64(),
            verdict_of(&events),
        ))
    })?;
    row("postgres-lease", ops, ceiling, "pgbench -S (read-only selects), same clients", &verdict);
    Ok(exit::VALID)
}

/// The run's verdict, so that a fast but wrong harness does not pass.
fn verdict_of(events: &[Event]) -> String {
    let mut builder = HistoryBuilder::with_capacity(events.len());
    for event in events {
        if builder.push(event).is_err() {
            return "malformed".to_string();
        }
    }
    let options = crate::options::check_options(Duration::from_secs(30));
    analyze(&builder.finish(), &default_checkers(), &options).verdict.as_str().to_string()
}
