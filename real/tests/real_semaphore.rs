//! The Redis semaphore (docs/guide.md#semaphore) against a real Redis, with the protected
//! resources in PostgreSQL: a clean run keeps at most `permits` holders (and
//! does reach that many), a holder stalled past its TTL loses its slot while
//! it still runs (over the limit), and the client-clock variant lets a
//! skewed caller evict live holders.
//!
//! Servers: Redis at `LOCKCHECK_REDIS_URL` (default redis://127.0.0.1:6379),
//! PostgreSQL at `LOCKCHECK_POSTGRES_URL` (default
//! postgres://postgres@127.0.0.1:5432/test); the fault test starts its own
//! `redis-server`. A server that cannot be reached fails the test: nothing
//! is skipped. Each test uses its own names, and deletes only those.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::TcpListener;
use std::time::Duration;

use futures_util::future::join_all;
use lockcheck_checker::names::MUTUAL_EXCLUSION;
use lockcheck_checker::{write_events, Analysis, Event, EventType, Function, Process, Verdict};
use lockcheck_real::{ClientConfig, RealError};
use lockcheck_real::{ManagedServer, RedisSemaphoreClient, ServerKind, Storage};
use lockcheck_workloads::payments::NoPayments;
use lockcheck_workloads::{
    run_client, ClientPlan, Grant, LockClient, Outcome, Recorder, SharedRecorder, Stall, Workload,
    WorkloadOptions,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

/// The permits of every test's semaphore, as the simulator's.
const PERMITS: u32 = 2;

fn redis_url() -> String {
    std::env::var("LOCKCHECK_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_string())
}

fn postgres_url() -> String {
    std::env::var("LOCKCHECK_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string())
}

/// One real run: five clients on one semaphore, with or without stalls.
#[derive(Debug, Clone)]
struct Spec {
    /// Prefix of the run's semaphore and resource names, unique per test.
    name: &'static str,
    clients: u32,
    ttl_ms: u64,
    run_for: Duration,
    /// Stall a holder past its TTL now and then (the GC pause).
    stalls: bool,
    seed: u64,
}

impl Spec {
    fn new(name: &'static str) -> Spec {
        Spec {
            name,
            clients: 5,
            ttl_ms: 400,
            run_for: Duration::from_secs(3),
            stalls: false,
            seed: 1,
        }
    }

    /// One semaphore, so that five clients contend for its two permits.
    fn locks(&self) -> Vec<String> {
        vec![format!("{}-sem", self.name)]
    }

    fn resources(&self) -> Vec<String> {
        vec![format!("{}-resource", self.name)]
    }

    /// The simulator's semaphore workload: fenced-write shape, no token (a
    /// member is not one), the permits recorded with each acquire.
    fn options(&self) -> WorkloadOptions {
        WorkloadOptions {
            workload: Workload::FencedWrite,
            locks: self.locks(),
            resources: self.resources(),
            ttl_ms: self.ttl_ms,
            hold_ms: (0, 20),
            think_ms: (0, 40),
            send_fence: false,
            permits: Some(PERMITS),
            keepalive_ms: None,
            lock_delay_ms: None,
            protection: Default::default(),
        }
    }

    /// As the simulator sets it: a quarter of the TTL.
    fn config(&self, logical: u32) -> ClientConfig {
        ClientConfig {
            name: format!("client-{logical}"),
            deadline: Duration::from_millis(self.ttl_ms / 4),
            storage_url: postgres_url(),
            fenced_storage: false,
        }
    }
}

/// Empties the run's resources and deletes its semaphore keys on `redis`.
async fn prepare(spec: &Spec, redis: &str) {
    let url = postgres_url();
    Storage::prepare(&url, &spec.resources())
        .await
        .unwrap_or_else(|error| panic!("PostgreSQL must be reachable at {url}: {error}"));
    RedisSemaphoreClient::prepare(redis, &spec.locks())
        .await
        .unwrap_or_else(|error| panic!("Redis must be reachable at {redis}: {error}"));
}

async fn client(url: &str, client_clock: bool, config: &ClientConfig) -> RedisSemaphoreClient {
    RedisSemaphoreClient::connect(url, PERMITS, client_clock, config)
        .await
        .unwrap_or_else(|error| panic!("Redis must be reachable at {url}: {error}"))
}

/// How long a stalling run lasts: room for two or three stalls of 3 to 4
/// TTLs and the quiet end.
const STALLING_RUN: Duration = Duration::from_secs(5);

/// The nemesis of a stalling run: every so often one client stalls at its
/// next grant for 3 to 4 TTLs, recorded as a `pause` fault. Longer than the
/// simulator's 1.5 to 3: the others get a whole TTL or more after the
/// stalled lease expires to take it, however loaded the machine. It stays
/// quiet for the last 5 TTLs, so that every stall ends inside the run.
async fn stall_holders(spec: &Spec, stalls: &[Stall], recorder: &SharedRecorder) {
    let mut rng = SmallRng::seed_from_u64(spec.seed ^ 0x5eed);
    let started = tokio::time::Instant::now();
    let record = |f: Function, client: usize, stall_ms: u64| {
        let value = json!({ "fault": "pause", "targets": [format!("client-{client}")], "stall_ms": stall_ms });
        recorder.lock().unwrap().record(Process::Nemesis, EventType::Info, f, None, value, None);
    };
    let quiet = Duration::from_millis(spec.ttl_ms * 5);
    loop {
        tokio::time::sleep(Duration::from_millis(rng.gen_range(50..=200))).await;
        if started.elapsed() + quiet >= spec.run_for {
            return;
        }
        let client = rng.gen_range(0..stalls.len());
        let stall_ms = rng.gen_range(spec.ttl_ms * 3..=spec.ttl_ms * 4);
        stalls[client].request(stall_ms);
        record(Function::Start, client, stall_ms);
        tokio::time::sleep(Duration::from_millis(stall_ms)).await;
        // A stall not taken by now is dropped, as the simulator's is.
        stalls[client].clear();
        record(Function::Stop, client, stall_ms);
    }
}

/// Runs `spec` against the semaphore on the machine's Redis and checks the
/// history as `lockcheck check` does.
async fn run(spec: &Spec) -> Checked {
    let url = redis_url();
    prepare(spec, &url).await;
    let stalls: Vec<Stall> = (0..spec.clients).map(|_| Stall::default()).collect();
    let mut clients = Vec::new();
    for logical in 0..spec.clients {
        let config = spec.config(logical);
        let store = Storage::connect(&config).await.expect("the storage is reachable");
        clients.push((client(&url, false, &config).await, store));
    }
    let recorder = Recorder::new().shared();
    let options = spec.options();
    let until = tokio::time::Instant::now() + spec.run_for;
    let workers = clients.iter_mut().enumerate().map(|(logical, (client, store))| {
        let plan = ClientPlan { logical: logical as u32, clients: spec.clients, until };
        let rng = SmallRng::seed_from_u64(spec.seed * 1000 + logical as u64);
        let (options, recorder, stall) = (&options, &recorder, &stalls[logical]);
        async move {
            run_client(client, store, &mut NoPayments, &plan, options, rng, recorder, stall).await
        }
    });
    let nemesis = async {
        if spec.stalls {
            stall_holders(spec, &stalls, &recorder).await;
        }
    };
    tokio::join!(join_all(workers), nemesis);
    drop(clients);
    let events = recorder.lock().unwrap().events().to_vec();
    check(spec, events)
}

/// A run's history and what the checkers made of it.
struct Checked {
    analysis: Analysis,
    events: Vec<Event>,
}

fn check(spec: &Spec, events: Vec<Event>) -> Checked {
    let analysis = common::analyzed(&events);
    let checked = Checked { analysis, events };
    let granted = checked
        .events
        .iter()
        .filter(|event| event.f == Function::Acquire && event.event_type == EventType::Ok)
        .count();
    assert!(
        granted >= 10,
        "only {granted} grants: the run did not exercise the semaphore\n{}",
        describe(spec, &checked)
    );
    checked
}

/// The most clients that believed at once that they held one key, as the
/// mutual-exclusion checker counts beliefs: from an acquire's `ok` to the
/// holder's release invoke or any `info` completion of its process.
fn most_simultaneous_holders(events: &[Event]) -> usize {
    let mut holders: BTreeMap<&str, BTreeSet<Process>> = BTreeMap::new();
    let mut most = 0;
    for event in events {
        match (&event.f, event.event_type) {
            (Function::Acquire, EventType::Ok) => {
                let key = event.key.as_deref().unwrap_or_default();
                let held = holders.entry(key).or_default();
                held.insert(event.process);
                most = most.max(held.len());
            }
            (Function::Release, EventType::Invoke) => {
                if let Some(held) = holders.get_mut(event.key.as_deref().unwrap_or_default()) {
                    held.remove(&event.process);
                }
            }
            (_, EventType::Info) => {
                for held in holders.values_mut() {
                    held.remove(&event.process);
                }
            }
            _ => {}
        }
    }
    most
}

fn verdict(checked: &Checked, checker: &str) -> Option<Verdict> {
    checked.analysis.verdict_of(checker)
}

/// Each checker's verdict and first violation, for assertion messages; the
/// history is saved for a person to look at.
fn describe(spec: &Spec, checked: &Checked) -> String {
    let path = std::env::temp_dir().join(format!("lockcheck-{}.jsonl", spec.name));
    let saved = std::fs::File::create(&path)
        .and_then(|file| write_events(std::io::BufWriter::new(file), &checked.events));
    let mut lines = vec![format!(
        "{}: {} (history {})",
        spec.name,
        checked.analysis.verdict.as_str(),
        match saved {
            Ok(()) => format!("in {}", path.display()),
            Err(error) => format!("not saved: {error}"),
        }
    )];
    for result in &checked.analysis.results {
        let verdict = result.verdict.map_or("n/a", |verdict| verdict.as_str());
        let first = result.violations.first().map_or("", |v| v.explanation.as_str());
        lines.push(format!("  {}: {verdict} {first}", result.checker));
    }
    lines.join("\n")
}

#[tokio::test]
async fn semaphore_clean_run_is_valid_and_fills_its_permits() {
    let spec = Spec::new("real-semaphore-clean");
    let checked = run(&spec).await;
    assert_eq!(checked.analysis.verdict, Verdict::Valid, "{}", describe(&spec, &checked));
    // Valid, and not because it behaved as a mutex: two did hold at once.
    let most = most_simultaneous_holders(&checked.events);
    assert_eq!(most, PERMITS as usize, "{}", describe(&spec, &checked));
}

#[tokio::test]
async fn semaphore_holder_stall_exceeds_the_limit() {
    let spec = Spec { stalls: true, run_for: STALLING_RUN, ..Spec::new("real-semaphore-stall") };
    let checked = run(&spec).await;
    assert_eq!(
        verdict(&checked, MUTUAL_EXCLUSION),
        Some(Verdict::Invalid),
        "{}",
        describe(&spec, &checked)
    );
    let most = most_simultaneous_holders(&checked.events);
    assert!(most > PERMITS as usize, "{most} holders at most\n{}", describe(&spec, &checked));
}

/// Three clients of one semaphore (prepared empty) on the machine's Redis.
async fn three_clients(name: &'static str, client_clock: bool) -> [RedisSemaphoreClient; 3] {
    let spec = Spec::new(name);
    let url = redis_url();
    prepare(&spec, &url).await;
    let mut clients = Vec::new();
    for logical in 0..3 {
        clients.push(client(&url, client_clock, &spec.config(logical)).await);
    }
    clients.try_into().expect("three clients")
}

fn granted(outcome: Outcome<Grant>) -> Grant {
    match outcome {
        Outcome::Ok(grant) => {
            assert_eq!(grant.fence, None, "a semaphore issues no token");
            assert!(grant.lease.is_some(), "the grant names its member");
            grant
        }
        other => panic!("expected a grant, got {other:?}"),
    }
}

#[tokio::test]
async fn third_acquire_is_busy_until_a_holder_releases() {
    let name = "real-semaphore-busy";
    let sem = Spec::new(name).locks().remove(0);
    let [mut a, mut b, mut c] = three_clients(name, false).await;
    let first = granted(a.acquire(&sem, 10_000).await);
    let second = granted(b.acquire(&sem, 10_000).await);
    assert_ne!(first.lease, second.lease);
    assert_eq!(c.acquire(&sem, 10_000).await, Outcome::Fail("busy".into()));
    assert_eq!(b.renew(&sem, &second, 10_000).await, Outcome::Ok(()));
    assert_eq!(b.release(&sem, &second).await, Outcome::Ok(()));
    assert_eq!(b.release(&sem, &second).await, Outcome::Fail("not-held".into()));
    assert_eq!(b.renew(&sem, &second, 10_000).await, Outcome::Fail("not-held".into()));
    let third = granted(c.acquire(&sem, 10_000).await);
    assert_eq!(b.acquire(&sem, 10_000).await, Outcome::Fail("busy".into()));
    assert_eq!(a.release(&sem, &first).await, Outcome::Ok(()));
    assert_eq!(c.release(&sem, &third).await, Outcome::Ok(()));
}

#[tokio::test]
async fn a_lapsed_member_loses_its_slot_and_a_heartbeat_keeps_it() {
    let name = "real-semaphore-lapse";
    let sem = Spec::new(name).locks().remove(0);
    let [mut a, mut b, mut c] = three_clients(name, false).await;
    // The script stamps a member with the server's TIME between an invoke
    // and its reply, so each check below is timed from the instant that
    // bounds the expiry it tests: half a second after an expiry that must
    // have passed (a late wake-up only adds to that), a second before the
    // one that must not have (only a stall of a second could cross it).
    const TTL_MS: u64 = 3_000;
    let (ttl, margin) = (Duration::from_millis(TTL_MS), Duration::from_millis(500));
    let lapsing = granted(a.acquire(&sem, TTL_MS).await);
    // a's first expiry comes before this instant + the TTL.
    let acquired = tokio::time::Instant::now();
    let _held = granted(b.acquire(&sem, 60_000).await);
    tokio::time::sleep(ttl / 2).await;
    // Renewed at ~1.5 s for 3 s: its new expiry comes after this + the TTL.
    let renewing = tokio::time::Instant::now();
    assert_eq!(a.renew(&sem, &lapsing, TTL_MS).await, Outcome::Ok(()));
    let renewed = tokio::time::Instant::now();
    // Past the first expiry, ~1 s before the renewed one: still a member.
    tokio::time::sleep_until(acquired + ttl + margin).await;
    let busy = c.acquire(&sem, 60_000).await;
    let late = renewing.elapsed();
    assert_eq!(busy, Outcome::Fail("busy".into()), "asked {late:?} after the renewal");
    // Past the renewed expiry nobody heartbeats for it: the next acquire
    // drops it.
    tokio::time::sleep_until(renewed + ttl + margin).await;
    granted(c.acquire(&sem, 60_000).await);
    assert_eq!(a.renew(&sem, &lapsing, TTL_MS).await, Outcome::Fail("not-held".into()));
    assert_eq!(a.release(&sem, &lapsing).await, Outcome::Fail("not-held".into()));
}

#[tokio::test]
async fn a_caller_clock_ahead_evicts_live_holders_only_with_the_client_clock() {
    for (client_clock, name) in
        [(false, "real-semaphore-server-clock"), (true, "real-semaphore-client-clock")]
    {
        let sem = Spec::new(name).locks().remove(0);
        let [mut a, mut b, c] = three_clients(name, client_clock).await;
        granted(a.acquire(&sem, 10_000).await);
        granted(b.acquire(&sem, 10_000).await);
        // A minute ahead: both members look expired by this caller's clock.
        let mut skewed = c.clock_offset(60_000);
        let third = skewed.acquire(&sem, 10_000).await;
        if client_clock {
            // The bug: three hold a two-permit semaphore.
            granted(third);
        } else {
            assert_eq!(third, Outcome::Fail("busy".into()), "TIME in the script ignores skew");
        }
    }
}

#[tokio::test]
async fn semaphore_outcomes_when_the_server_stops_answering_or_is_gone() {
    let mut server = ManagedServer::start(ServerKind::Redis)
        .unwrap_or_else(|error| panic!("a managed redis-server: {error}"));
    let spec = Spec::new("real-semaphore-outcomes");
    let url = server.url();
    prepare(&spec, &url).await;
    let sem = spec.locks().remove(0);
    let mut client = client(&url, false, &spec.config(0)).await;
    let held = granted(client.acquire(&sem, 10_000).await);
    // Frozen: the script may have run, its reply does not come.
    server.pause().expect("paused");
    assert_eq!(client.acquire(&sem, 10_000).await, Outcome::Info("timeout".into()));
    server.resume().expect("resumed");
    client.reset().await;
    // A new connection; the lost acquire did take the second permit.
    assert_eq!(client.acquire(&sem, 10_000).await, Outcome::Fail("busy".into()));
    assert_eq!(client.renew(&sem, &held, 10_000).await, Outcome::Ok(()));
    server.crash();
    assert!(matches!(client.release(&sem, &held).await, Outcome::Info(_)));
    client.reset().await;
    // Nothing can be sent: certainly not taken.
    assert_eq!(client.acquire(&sem, 10_000).await, Outcome::Fail("unavailable".into()));
}

#[tokio::test]
async fn unreachable_redis_or_no_permits_is_a_setup_error() {
    // A port nothing listens on: bound, then released.
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let config = Spec::new("real-semaphore-unreachable").config(0);
    let url = format!("redis://127.0.0.1:{port}");
    let connected = RedisSemaphoreClient::connect(&url, PERMITS, false, &config).await;
    assert!(matches!(connected, Err(RealError::Connect { .. })), "{connected:?}");
    let connected = RedisSemaphoreClient::connect(&redis_url(), 0, false, &config).await;
    assert!(matches!(connected, Err(RealError::Setup { .. })), "{connected:?}");
}
