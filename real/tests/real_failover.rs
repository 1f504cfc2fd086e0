//! The failover fault against real Redis (docs/guide.md#redis): a primary
//! with an async replica that dials it through lockcheck's proxy; the
//! nemesis holds the replication link, kills the primary and promotes the
//! replica, and clients follow the new primary. The grants the replica never
//! received are given a second time: mutual exclusion is violated.
//!
//! Servers: two managed `redis-server`s per test on free loopback ports;
//! PostgreSQL for the protected resources at `LOCKCHECK_POSTGRES_URL`
//! (default postgres://postgres@127.0.0.1:5432/test). A server that cannot
//! be reached fails the test: nothing is skipped.

mod common;

use std::time::Duration;

use lockcheck_checker::names::MUTUAL_EXCLUSION;
use lockcheck_checker::{write_events, Analysis, Event, EventType, Function, Process, Verdict};
use lockcheck_real::failover::{self, Failover, RedisPair, NAMES};
use lockcheck_real::schedule::{schedule, split, FaultTargets};
use lockcheck_real::{drive_with, DriveOptions};
use lockcheck_real::{ClientConfig, RealError};
use lockcheck_real::{LinkState, Proxy};
use lockcheck_real::{RedisClient, RedisRecipe, ServerOptions, Storage};
use lockcheck_workloads::{
    FaultKind, Grant, Holders, LockClient, Outcome, Recorder, SharedRecorder, Stall, Workload,
    WorkloadOptions,
};
use redis::Value;
use serde_json::json;
use tokio::time::Instant;

const TTL_MS: u64 = 500;

fn postgres_url() -> String {
    std::env::var("LOCKCHECK_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string())
}

fn config(logical: u32) -> ClientConfig {
    ClientConfig {
        name: format!("client-{logical}"),
        deadline: Duration::from_millis(TTL_MS / 4),
        storage_url: postgres_url(),
        fenced_storage: true,
    }
}

fn start_pair() -> (Proxy, RedisPair) {
    let proxy = Proxy::start().unwrap_or_else(|error| panic!("the proxy: {error}"));
    let pair = RedisPair::start(&ServerOptions::default(), &proxy)
        .unwrap_or_else(|error| panic!("a primary and its replica: {error}"));
    (proxy, pair)
}

/// One command on its own connection, straight to the server at `url`.
fn command(url: &str, args: &[&str]) -> redis::RedisResult<Value> {
    let client = redis::Client::open(url)?;
    let mut connection = client.get_connection_with_timeout(Duration::from_secs(2))?;
    connection.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut command = redis::cmd(args[0]);
    for arg in &args[1..] {
        command.arg(*arg);
    }
    command.query(&mut connection)
}

fn get(url: &str, key: &str) -> Option<String> {
    match command(url, &["GET", key]) {
        Ok(Value::BulkString(bytes)) => Some(String::from_utf8_lossy(&bytes).into_owned()),
        Ok(Value::Nil) => None,
        other => panic!("GET {key} on {url}: {other:?}"),
    }
}

/// Waits (60 s at most: a hang guard) until `key` is `expected` on the
/// Redis at `url`.
async fn wait_for(url: &str, key: &str, expected: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while get(url, key).as_deref() != Some(expected) {
        assert!(Instant::now() < deadline, "{key} never became {expected:?} on {url}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Whether a process runs (a zombie has ended).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.rsplit_once(')').map(|(_, rest)| rest.trim_start().to_string()))
        .is_some_and(|rest| !rest.starts_with(['Z', 'X', 'x']))
}

fn pids(pair: &RedisPair) -> Vec<u32> {
    pair.servers().iter().map(|server| server.lock().unwrap().pid()).collect()
}

#[tokio::test]
async fn the_replica_follows_its_primary_through_the_proxy_and_a_held_link_stops_it() {
    let (proxy, pair) = start_pair();
    let [primary, replica] = [0, 1].map(|at| pair.urls()[at].clone());
    assert_eq!(pair.primary().get(), primary);
    assert_eq!(pair.primary_index(), 0);
    command(&primary, &["SET", "failover-key", "one"]).expect("SET on the primary");
    wait_for(&replica, "failover-key", "one").await;
    let refused = command(&replica, &["SET", "failover-key", "two"]);
    assert!(
        refused.is_err_and(|error| error.code() == Some("READONLY")),
        "the replica took a write"
    );
    // Held: the primary's writes stay in the proxy, kept, not lost.
    proxy.set_both(NAMES[0], NAMES[1], LinkState::Hold);
    command(&primary, &["SET", "failover-key", "held"]).expect("SET on the primary");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(get(&replica, "failover-key").as_deref(), Some("one"));
    proxy.set_both(NAMES[0], NAMES[1], LinkState::Pass);
    wait_for(&replica, "failover-key", "held").await;
}

/// Acquires `lock` until an answer other than `info` (whose connection the
/// client then gives up, as the workload does), five tries at most.
async fn acquire(client: &mut RedisClient, lock: &str) -> Outcome<Grant> {
    let mut outcome = client.acquire(lock, 60_000).await;
    for _ in 0..5 {
        if !matches!(outcome, Outcome::Info(_) | Outcome::Fail(_))
            || outcome == Outcome::Fail("busy".into())
        {
            break;
        }
        client.reset().await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        outcome = client.acquire(lock, 60_000).await;
    }
    outcome
}

#[tokio::test]
async fn redis_failover_grants_a_lock_the_replica_never_received_twice() {
    let (_proxy, pair) = start_pair();
    let [old, new] = [0, 1].map(|at| pair.urls()[at].clone());
    let (replicated, lost) = ("failover-setup-replicated", "failover-setup-lost");
    // A deadline of seconds, not the workload's quarter TTL: every grant
    // below must come back, however loaded the machine.
    let patient = ClientConfig { deadline: Duration::from_secs(5), ..config(0) };
    let mut client = RedisClient::connect_following(
        pair.primary(),
        RedisRecipe::Plain,
        true,
        Stall::default(),
        &patient,
    )
    .await
    .expect("a client following the primary");
    let Outcome::Ok(first) = client.acquire(replicated, 60_000).await else {
        panic!("the first grant")
    };
    wait_for(&new, &format!("lock:{replicated}"), first.lease.as_deref().unwrap()).await;
    let recorder = Recorder::new().shared();
    // A lag of 1.5 s: the grant below, asked at 100 ms, has well over a
    // second to land on the old primary before it is killed.
    let failovers = [Failover {
        start: Duration::ZERO,
        lag: Duration::from_millis(1500),
        end: Duration::from_millis(2500),
    }];
    let start = Instant::now();
    let clients = async {
        // Inside the held link's lag: redis-0 grants, redis-1 never hears.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let before = client.acquire(lost, 60_000).await;
        while pair.primary_index() == 0 {
            assert!(start.elapsed() < Duration::from_secs(60), "no promotion");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let after = acquire(&mut client, lost).await;
        let again = acquire(&mut client, replicated).await;
        (before, after, again)
    };
    let (failed_over, (before, after, again)) =
        tokio::join!(failover::run(&pair, &failovers, &recorder, start), clients);
    failed_over.expect("the failover");
    let (Outcome::Ok(before), Outcome::Ok(after)) = (&before, &after) else {
        panic!("both grants of the lost lock: {before:?}, then {after:?}")
    };
    // Two holders at once, and the `INCR` token given twice.
    assert_ne!(before.lease, after.lease);
    assert_eq!(before.fence, after.fence, "{before:?} {after:?}");
    assert_eq!(again, Outcome::Fail("busy".into()), "the replicated grant was lost");
    assert_eq!((pair.primary_index(), pair.primary().get()), (1, new.clone()));
    // The new primary takes writes; the old one, back, replicates it.
    command(&new, &["SET", "failover-after", "written"]).expect("the promoted replica is writable");
    wait_for(&old, "failover-after", "written").await;
    wait_for(&old, &format!("lock:{lost}"), after.lease.as_deref().unwrap()).await;
    let events = recorder.lock().unwrap().events().to_vec();
    let value =
        json!({"fault": "failover", "targets": ["redis-0"], "promoted": "redis-1", "lag_ms": 1500});
    let recorded: Vec<(Function, serde_json::Value)> = events
        .iter()
        .filter(|event| event.process == Process::Nemesis)
        .map(|event| {
            (event.f.clone(), serde_json::from_str(event.value.as_ref().unwrap().get()).unwrap())
        })
        .collect();
    assert_eq!(recorded, [(Function::Start, value.clone()), (Function::Stop, value)]);
}

/// A run's history, what the checkers made of it, and its failovers.
struct Run {
    events: Vec<Event>,
    analysis: Analysis,
    failovers: Vec<Failover>,
}

impl Run {
    fn verdict(&self, checker: &str) -> Option<Verdict> {
        self.analysis.verdict_of(checker)
    }

    /// Each checker's verdict and first violation; the history is saved.
    fn describe(&self, name: &str) -> String {
        let path = std::env::temp_dir().join(format!("lockcheck-{name}.jsonl"));
        let saved = std::fs::File::create(&path)
            .and_then(|file| write_events(std::io::BufWriter::new(file), &self.events));
        let mut lines = vec![format!(
            "{name}: {} after {} failovers (history {})",
            self.analysis.verdict.as_str(),
            self.failovers.len(),
            match saved {
                Ok(()) => format!("in {}", path.display()),
                Err(error) => format!("not saved: {error}"),
            }
        )];
        for result in &self.analysis.results {
            let verdict = result.verdict.map_or("n/a", |verdict| verdict.as_str());
            let first = result.violations.first().map_or("", |v| v.explanation.as_str());
            lines.push(format!("  {}: {verdict} {first}", result.checker));
        }
        lines.join("\n")
    }

    fn nemesis(&self, f: Function) -> usize {
        let is_failover = |event: &&Event| {
            event.value.as_ref().is_some_and(|value| value.get().contains("\"failover\""))
        };
        self.events
            .iter()
            .filter(|event| event.process == Process::Nemesis && event.f == f)
            .filter(is_failover)
            .count()
    }
}

/// Four clients on one lock for 5 s, with TTLs of 500 ms.
fn options(name: &str, seed: u64) -> DriveOptions {
    DriveOptions {
        workload: WorkloadOptions {
            workload: Workload::FencedWrite,
            locks: vec![format!("{name}-lock-0")],
            resources: vec![format!("{name}-resource-0")],
            ttl_ms: TTL_MS,
            // Long enough for a failover to fall inside a hold (the
            // simulator's failover runs hold up to a third of the TTL): the
            // promoted replica still has the lock of the hold's start until
            // it expires, and only a holder still working then overlaps.
            hold_ms: (0, TTL_MS / 2),
            think_ms: (0, 40),
            send_fence: true,
            permits: None,
            keepalive_ms: None,
            lock_delay_ms: None,
            protection: Default::default(),
        },
        clients: 4,
        time_limit: Duration::from_secs(5),
        seed,
        stalls: Vec::new(),
    }
}

/// Drives `options`' clients against `pair`'s primary, wherever it moves,
/// with the failovers of `schedule`.
async fn drive_pair(
    pair: &RedisPair,
    options: &DriveOptions,
    schedule: &[Failover],
) -> Result<Vec<Event>, RealError> {
    let primary = pair.primary();
    let connect = |logical: u32, stall: Stall| {
        let primary = primary.clone();
        let config = config(logical);
        async move {
            let client =
                RedisClient::connect_following(primary, RedisRecipe::Plain, true, stall, &config)
                    .await?;
            Ok((client, Storage::connect(&config).await?))
        }
    };
    let nemesis = |recorder: SharedRecorder, start: Instant, _: Holders| async move {
        failover::run(pair, schedule, &recorder, start).await
    };
    drive_with(options, connect, nemesis).await
}

fn check(events: &[Event]) -> Analysis {
    common::analyzed(events)
}

/// Four clients on one lock through a fresh pair, with the failover fault
/// on schedule (`failovers`) or none, checked as `lockcheck check` does.
/// Afterwards, no server of the pair may be left running.
async fn run(name: &str, seed: u64, failovers: bool) -> Run {
    let (_proxy, pair) = start_pair();
    let options = options(name, seed);
    let url = postgres_url();
    Storage::prepare(&url, &options.workload.resources)
        .await
        .unwrap_or_else(|error| panic!("PostgreSQL must be reachable at {url}: {error}"));
    let schedule = match failovers {
        true => {
            let targets = FaultTargets::clients(options.clients, TTL_MS);
            split(schedule(&[FaultKind::Failover], &targets, options.time_limit, seed)).failovers
        }
        false => Vec::new(),
    };
    let mut pids = pids(&pair);
    let events = drive_pair(&pair, &options, &schedule)
        .await
        .unwrap_or_else(|error| panic!("{name} seed {seed}: {error}"));
    // The servers of now, and those the failovers killed.
    pids.extend(self::pids(&pair));
    drop(pair);
    let left: Vec<u32> = pids.into_iter().filter(|&pid| alive(pid)).collect();
    assert!(left.is_empty(), "redis-server processes left running: {left:?}");
    let run = Run { analysis: check(&events), events, failovers: schedule };
    let granted = run
        .events
        .iter()
        .filter(|event| event.f == Function::Acquire && event.event_type == EventType::Ok)
        .count();
    assert!(granted >= 10, "only {granted} grants\n{}", run.describe(name));
    run
}

#[tokio::test]
async fn redis_failover_to_a_lagging_replica_violates_mutual_exclusion() {
    let name = "real-failover";
    let mut verdicts = Vec::new();
    for seed in 1..=5 {
        let run = run(name, seed, true).await;
        assert!(!run.failovers.is_empty(), "seed {seed} scheduled no failover");
        // Every failover recorded: started once promoted, stopped once healed.
        assert_eq!(run.nemesis(Function::Start), run.failovers.len(), "{}", run.describe(name));
        assert_eq!(run.nemesis(Function::Stop), run.failovers.len(), "{}", run.describe(name));
        if run.verdict(MUTUAL_EXCLUSION) == Some(Verdict::Invalid) {
            return;
        }
        verdicts.push(run.describe(&format!("{name}-{seed}")));
    }
    panic!("no seed found two holders:\n{}", verdicts.join("\n"));
}

#[tokio::test]
async fn redis_pair_without_failover_is_valid() {
    let name = "real-failover-none";
    let run = run(name, 1, false).await;
    assert_eq!(run.nemesis(Function::Start), 0);
    assert_eq!(run.analysis.verdict, Verdict::Valid, "{}", run.describe(name));
}
