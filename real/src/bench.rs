//! How many lock operations a second the harness drives against a real
//! server, beside what the server's own benchmark tool gets from it in the
//! same run (the ceiling): `lockcheck bench --only real`.

use std::process::Command;
use std::time::{Duration, Instant};

use lockcheck_checker::{analyze_events, CheckOptions, Event};
use lockcheck_workloads::{Workload, WorkloadOptions};

use crate::driver::{drive, DriveOptions};
use crate::redis::{RedisClient, RedisRecipe};
use crate::run::lock_ops;
use crate::servers::{ManagedServer, ServerKind};
use crate::sql::{SqlClient, SqlRecipe};
use crate::storage::Storage;
use crate::ClientConfig;

/// Clients, back to back.
pub const CLIENTS: u32 = 32;
/// How long each backend is driven.
pub const SECONDS: u64 = 5;

/// One backend's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Throughput {
    pub backend: &'static str,
    /// Lock operations (acquire, release, renew) completed a second.
    pub lock_ops_per_s: f64,
    /// The server's own benchmark, with as many clients.
    pub ceiling_per_s: f64,
    pub ceiling_tool: &'static str,
    /// The run's verdict, so that a fast but wrong harness does not pass.
    pub verdict: String,
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
            lock_delay_ms: None,
            protection: Default::default(),
        },
        clients: CLIENTS,
        time_limit: Duration::from_secs(SECONDS),
        seed,
        stalls: Vec::new(),
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
fn tool(program: &str, args: &[&str]) -> Result<String, String> {
    let output = Command::new(program)
        .args(args)
        .output()
        .map_err(|error| format!("cannot run {program} (is it installed?): {error}"))?;
    if !output.status.success() {
        return Err(format!("{program} failed: {}", String::from_utf8_lossy(&output.stderr)));
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

/// Redis (`SET NX PX` with an `INCR` fence) beside `redis-benchmark -t set`,
/// then the PostgreSQL lease table beside `pgbench -S`, on private servers
/// started for the run; `row` gets each backend's figures as they come.
pub fn throughput(seed: u64, mut row: impl FnMut(&Throughput)) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| format!("cannot start the async runtime: {error}"))?;
    let failed = |error: crate::RealError| error.to_string();
    let postgres = ManagedServer::start(ServerKind::Postgres).map_err(failed)?;
    let storage = postgres.url();
    let redis = ManagedServer::start(ServerKind::Redis).map_err(failed)?;
    let port = redis.port().to_string();
    let clients = CLIENTS.to_string();
    let set = tool(
        "redis-benchmark",
        &["-h", "127.0.0.1", "-p", &port, "-t", "set", "-c", &clients, "-n", "300000", "-q"],
    )?;
    let ceiling =
        number_after(&set, "SET:").ok_or("redis-benchmark printed no SET rate".to_string())?;
    let options = options(seed);
    let url = redis.url();
    let (ops, verdict) = runtime
        .block_on(async {
            Storage::prepare(&storage, &options.workload.resources).await?;
            RedisClient::prepare(&url, &options.workload.locks).await?;
            let started = Instant::now();
            let events = drive(&options, |logical, stall| {
                let config = config(logical, &storage);
                let url = url.clone();
                async move {
                    let client =
                        RedisClient::connect(&url, RedisRecipe::Plain, true, stall, &config)
                            .await?;
                    Ok((client, Storage::connect(&config).await?))
                }
            })
            .await?;
            Ok((lock_ops(&events) as f64 / started.elapsed().as_secs_f64(), verdict_of(&events)))
        })
        .map_err(failed)?;
    row(&Throughput {
        backend: "redis",
        lock_ops_per_s: ops,
        ceiling_per_s: ceiling,
        ceiling_tool: "redis-benchmark -t set, same clients",
        verdict,
    });

    let pg_port = postgres.port().to_string();
    let connection = ["-h", "127.0.0.1", "-p", &pg_port, "-U", "postgres"];
    tool("pgbench", &[&connection[..], &["-i", "-q", "postgres"]].concat())?;
    let select = tool(
        "pgbench",
        &[&connection[..], &["-S", "-c", &clients, "-j", "2", "-T", "5", "postgres"]].concat(),
    )?;
    let ceiling = number_after(&select, "tps =").ok_or("pgbench printed no tps".to_string())?;
    let (ops, verdict) = runtime
        .block_on(async {
            SqlClient::prepare(&storage, SqlRecipe::PostgresLease).await?;
            let started = Instant::now();
            let events = drive(&options, |logical, _stall| {
                let config = config(logical, &storage);
                let url = storage.clone();
                async move {
                    let client =
                        SqlClient::connect(&url, SqlRecipe::PostgresLease, &config).await?;
                    Ok((client, Storage::connect(&config).await?))
                }
            })
            .await?;
            Ok((lock_ops(&events) as f64 / started.elapsed().as_secs_f64(), verdict_of(&events)))
        })
        .map_err(failed)?;
    row(&Throughput {
        backend: "postgres-lease",
        lock_ops_per_s: ops,
        ceiling_per_s: ceiling,
        ceiling_tool: "pgbench -S (read-only selects), same clients",
        verdict,
    });
    Ok(())
}

/// The run's verdict, so that a fast but wrong harness does not pass.
fn verdict_of(events: &[Event]) -> String {
    let options = CheckOptions {
        linearizability_time_limit: Some(Duration::from_secs(30)),
        ..CheckOptions::default()
    };
    match analyze_events(events, &options) {
        Ok(analysis) => analysis.verdict.as_str().to_string(),
        Err(_) => "malformed".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::number_after;

    #[test]
    fn the_last_figure_after_a_marker_is_read() {
        let text = "SET: rps=1000.0 (overall: 900.0)\rSET: 138888.89 requests per second\n";
        assert_eq!(number_after(text, "SET:"), Some(138_888.89));
        assert_eq!(
            number_after("tps = 50303.1 (without initial connection time)", "tps ="),
            Some(50_303.1)
        );
        assert_eq!(number_after("nothing here", "tps ="), None);
    }
}
