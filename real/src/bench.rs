//! How many lock operations a second the harness drives against a real
//! server, beside what the server's own benchmark tool gets from it in the
//! same run (the ceiling; for etcd and ZooKeeper, which have none packaged,
//! the same client writing plain keys or znodes): `lockcheck bench --only
//! real`.

use std::future::Future;
use std::process::Command;
use std::time::{Duration, Instant};

use lockcheck_checker::{analyze_events, CheckOptions, Event, EventType, Function};
use lockcheck_workloads::payments::Protection;
use lockcheck_workloads::provider::{Profile, Variant};
use lockcheck_workloads::queue::QueueKind;
use lockcheck_workloads::{LockClient, Stall, Workload, WorkloadOptions};

use crate::driver::{drive, drive_paying, DriveOptions};
use crate::etcd::{self, EtcdClient};
use crate::payments::PaymentsServices;
use crate::provider::{ProviderConfig, ProviderServer};
use crate::queues::{QueueConfig, RealQueue, DEFAULT_RABBITMQ_URL};
use crate::redis::{RedisClient, RedisRecipe};
use crate::run::lock_ops;
use crate::servers::{ManagedServer, ServerKind};
use crate::sql::{SqlClient, SqlRecipe};
use crate::storage::Storage;
use crate::zookeeper::{plain_writes_per_s, ZooKeeperClient};
use crate::ClientConfig;
use lockcheck_checker::WakeUps;
use lockcheck_workloads::zookeeper_lock::{parent_path, Variant as ZkVariant, Waiting};

/// Clients, back to back.
pub const CLIENTS: u32 = 32;
/// How long each backend is driven.
pub const SECONDS: u64 = 5;

/// One backend's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Throughput {
    pub backend: &'static str,
    /// What is counted: `lock ops` (acquire, release, renew completed) or
    /// `orders` (jobs charged and acknowledged).
    pub what: &'static str,
    /// Those completed a second.
    pub lock_ops_per_s: f64,
    /// The server's own benchmark, with as many clients.
    pub ceiling_per_s: f64,
    pub ceiling_tool: &'static str,
    /// The run's verdict, so that a fast but wrong harness does not pass.
    pub verdict: String,
    /// How many waiters a release woke, for a lock run (a watch's wake-ups
    /// or a polling recipe's refused polls).
    pub wake_ups_per_release: Option<f64>,
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
    let (ops, verdict, wake_ups_per_release) = runtime
        .block_on(async {
            Storage::prepare(&storage, &options.workload.resources).await?;
            RedisClient::prepare(&url, &options.workload.locks).await?;
            lock_figures(&options, |logical, stall| {
                let config = config(logical, &storage);
                let url = url.clone();
                async move {
                    let client =
                        RedisClient::connect(&url, RedisRecipe::Plain, true, stall, &config)
                            .await?;
                    Ok((client, Storage::connect(&config).await?))
                }
            })
            .await
        })
        .map_err(failed)?;
    row(&Throughput {
        backend: "redis",
        what: "lock ops",
        lock_ops_per_s: ops,
        ceiling_per_s: ceiling,
        ceiling_tool: "redis-benchmark -t set, same clients",
        verdict,
        wake_ups_per_release,
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
        what: "lock ops",
        lock_ops_per_s: ops,
        ceiling_per_s: ceiling,
        ceiling_tool: "pgbench -S (read-only selects), same clients",
        verdict,
        wake_ups_per_release: None,
    });

    // ZooKeeper: Curator's lock, each acquire a create, a list and a read,
    // each release a delete, beside the same client creating and deleting
    // plain znodes (its writes a second); then the herd, whose waiters all
    // watch the lock.
    let zookeeper = ManagedServer::start(ServerKind::ZooKeeper).map_err(failed)?;
    let urls = [zookeeper.url()];
    let seconds = Duration::from_secs(SECONDS);
    let plain = "bench-plain".to_string();
    let ceiling = runtime
        .block_on(async {
            ZooKeeperClient::prepare(&urls, std::slice::from_ref(&plain)).await?;
            plain_writes_per_s(&urls, &parent_path(&plain), CLIENTS, seconds).await
        })
        .map_err(failed)?;
    let herd = ZkVariant { waiting: Waiting::Herd, ..ZkVariant::CURATOR };
    for (backend, variant) in [("zookeeper", ZkVariant::CURATOR), ("zookeeper-herd", herd)] {
        let (ops, verdict, wake_ups_per_release) = runtime
            .block_on(async {
                ZooKeeperClient::prepare(&urls, &options.workload.locks).await?;
                let ttl_ms = options.workload.ttl_ms;
                lock_figures(&options, |logical, stall| {
                    let config = config(logical, &storage);
                    let urls = &urls;
                    async move {
                        let client = ZooKeeperClient::connect(urls, &config, variant, true, ttl_ms)
                            .await?
                            .stalling_at(stall, None);
                        Ok((client, Storage::connect(&config).await?))
                    }
                })
                .await
            })
            .map_err(failed)?;
        row(&Throughput {
            backend,
            what: "lock ops",
            lock_ops_per_s: ops,
            ceiling_per_s: ceiling,
            ceiling_tool:
                "plain znodes created and deleted by the same client (writes), same clients",
            verdict,
            wake_ups_per_release,
        });
    }
    drop(zookeeper);

    // etcd: the lock refused at once (TryLock: its waiters poll) and the
    // lock waited for in line (each waiter watching the key before its
    // own), each acquire a lease's grant and a transaction, each release a
    // revocation, beside the same client putting and deleting plain keys.
    let etcd_server = ManagedServer::start(ServerKind::Etcd).map_err(failed)?;
    let endpoints = [etcd_server.url()];
    let ceiling =
        runtime.block_on(etcd::plain_writes_per_s(&endpoints, CLIENTS, seconds)).map_err(failed)?;
    for (backend, waits) in [("etcd", false), ("etcd-waiting", true)] {
        let (ops, verdict, wake_ups_per_release) = runtime
            .block_on(lock_figures(&options, |logical, stall| {
                let config = config(logical, &storage);
                let endpoints = &endpoints;
                async move {
                    let client = EtcdClient::connect(endpoints, &config, true, waits)
                        .await?
                        .stalling_at(stall);
                    Ok((client, Storage::connect(&config).await?))
                }
            }))
            .map_err(failed)?;
        row(&Throughput {
            backend,
            what: "lock ops",
            lock_ops_per_s: ops,
            ceiling_per_s: ceiling,
            ceiling_tool: "plain keys put and deleted by the same client (writes), same clients",
            verdict,
            wake_ups_per_release,
        });
    }
    drop(etcd_server);

    // The payments workload: orders through the real queue and provider,
    // beside pgbench's TPC-B-like transactions (each order is four
    // transactions: enqueue, deliver, the provider's charge, ack).
    let tpcb = tool(
        "pgbench",
        &[&connection[..], &["-c", &clients, "-j", "2", "-T", "5", "postgres"]].concat(),
    )?;
    let ceiling = number_after(&tpcb, "tps =").ok_or("pgbench printed no tps".to_string())?;
    for (backend, queue) in
        [("payments/postgres", QueueKind::Postgres), ("payments/rabbitmq", QueueKind::Rabbitmq)]
    {
        let (orders, verdict) =
            runtime.block_on(orders_per_s(&storage, queue, seed)).map_err(failed)?;
        row(&Throughput {
            backend,
            what: "orders",
            lock_ops_per_s: orders,
            ceiling_per_s: ceiling,
            ceiling_tool: "pgbench (TPC-B-like transactions), same clients",
            verdict,
            wake_ups_per_release: None,
        });
    }
    Ok(())
}

/// Drives `options` with the clients `connect` makes: the lock operations
/// completed a second, the run's verdict, and its wake-ups per release.
async fn lock_figures<C, F, Fut>(
    options: &DriveOptions,
    connect: F,
) -> Result<(f64, String, Option<f64>), crate::RealError>
where
    C: LockClient,
    F: Fn(u32, Stall) -> Fut,
    Fut: Future<Output = Result<(C, Storage), crate::RealError>>,
{
    let started = Instant::now();
    let events = drive(options, connect).await?;
    let ops = lock_ops(&events) as f64 / started.elapsed().as_secs_f64();
    Ok((ops, verdict_of(&events), WakeUps::of(&events).per_release()))
}

/// Orders charged and acknowledged a second by [`CLIENTS`] workers back to
/// back, each charge keyed (no lock), through `queue` and lockcheck's own
/// provider with no charge delay, its keys in `postgres`; and the run's
/// verdict.
async fn orders_per_s(
    postgres: &str,
    queue: QueueKind,
    seed: u64,
) -> Result<(f64, String), crate::RealError> {
    let provider = ProviderServer::start(
        ProviderConfig::new(postgres, Profile::default(), Variant::default()).without_delays(),
    )?;
    let queue_config = QueueConfig {
        postgres_url: postgres.to_string(),
        rabbitmq_url: DEFAULT_RABBITMQ_URL.to_string(),
        name: format!("lockcheck-bench-{}", std::process::id()),
        deadline: Duration::from_secs(2),
    };
    let services = PaymentsServices {
        queue: Some(RealQueue::prepare(queue, queue_config).await?),
        provider: Some(provider.url()),
        ledger: None,
    };
    let mut options = options(seed);
    options.workload.workload = Workload::Payments;
    options.workload.protection = Protection::IdempotencyKey;
    options.workload.ttl_ms = 2_000;
    let started = Instant::now();
    let events = drive_paying(
        &options,
        None,
        |logical, _stall| {
            let config = config(logical, postgres);
            let services = &services;
            async move {
                // Never asked: a keyed charge takes no lock.
                let client =
                    SqlClient::connect(&config.storage_url, SqlRecipe::PostgresLease, &config)
                        .await?;
                let payments = services.connect(config.deadline).await?;
                Ok((client, Storage::connect(&config).await?, payments))
            }
        },
        |_, _, _| async { Ok(()) },
    )
    .await;
    let elapsed = started.elapsed().as_secs_f64();
    if let Some(queue) = services.queue {
        let _ = queue.remove().await;
    }
    let events = events?;
    let orders = events
        .iter()
        .filter(|event| event.f == Function::Ack && event.event_type == EventType::Ok)
        .count();
    Ok((orders as f64 / elapsed, verdict_of(&events)))
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
