//! The Redis backends and the PostgreSQL storage of the protected resources,
//! against real servers: clean runs must be valid, and each broken variant
//! (and a holder stall past the TTL) must be found by the checker docs/truth-table.md
//! says finds it.
//!
//! Servers: Redis at `LOCKCHECK_REDIS_URL` (default redis://127.0.0.1:6379),
//! PostgreSQL at `LOCKCHECK_POSTGRES_URL` (default
//! postgres://postgres@127.0.0.1:5432/test); Redlock's five instances are
//! managed `redis-server` processes on free loopback ports. A server
//! that cannot be reached fails the test: nothing is skipped. Each test uses
//! its own lock and resource names, and deletes only those.

mod common;

use std::future::Future;
use std::net::TcpListener;
use std::time::Duration;

use futures_util::future::join_all;
use lockcheck_checker::names::{LINEARIZABILITY, LIVENESS, MUTUAL_EXCLUSION, RESOURCE_SAFETY};
use lockcheck_checker::{write_events, Analysis, Event, EventType, Function, Process, Verdict};
use lockcheck_real::{ClientConfig, RealError};
use lockcheck_real::{
    ManagedServer, RedisClient, RedisRecipe, RedlockClient, ServerKind, ServerOptions, Storage,
};
use lockcheck_workloads::payments::NoPayments;
use lockcheck_workloads::{
    run_client, ClientPlan, LockClient, Outcome, Recorder, SharedRecorder, Stall, StallPoint,
    Workload, WorkloadOptions,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

fn redis_url() -> String {
    std::env::var("LOCKCHECK_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_string())
}

fn postgres_url() -> String {
    std::env::var("LOCKCHECK_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string())
}

/// One real run: a workload against a backend, with or without stalls.
#[derive(Debug, Clone)]
struct Spec {
    /// Prefix of the run's lock and resource names, unique per test.
    name: &'static str,
    workload: Workload,
    clients: u32,
    locks: u32,
    ttl_ms: u64,
    run_for: Duration,
    /// Grants carry tokens, writes send them and the storage fences.
    fencing: bool,
    /// Stall a holder past its TTL now and then (the GC pause).
    stalls: bool,
    /// How many stalls at most (then the nemesis is quiet to the end).
    stalls_at_most: usize,
    /// Each operation's deadline, if not the simulator's quarter TTL.
    deadline: Option<Duration>,
    /// Where each stall is aimed.
    pause_at: StallPoint,
    /// How long a holder works, in ms, drawn.
    hold_ms: (u64, u64),
    seed: u64,
}

impl Spec {
    fn new(name: &'static str) -> Spec {
        Spec {
            name,
            workload: Workload::FencedWrite,
            clients: 5,
            locks: 2,
            ttl_ms: 400,
            run_for: Duration::from_secs(3),
            fencing: true,
            stalls: false,
            stalls_at_most: usize::MAX,
            deadline: None,
            pause_at: StallPoint::AfterGrant,
            hold_ms: (0, 20),
            seed: 1,
        }
    }

    fn locks(&self) -> Vec<String> {
        (0..self.locks).map(|lock| format!("{}-lock-{lock}", self.name)).collect()
    }

    fn resources(&self) -> Vec<String> {
        (0..self.locks).map(|lock| format!("{}-resource-{lock}", self.name)).collect()
    }

    fn options(&self) -> WorkloadOptions {
        WorkloadOptions {
            workload: self.workload,
            locks: self.locks(),
            resources: self.resources(),
            ttl_ms: self.ttl_ms,
            hold_ms: self.hold_ms,
            think_ms: (0, 40),
            send_fence: self.fencing,
            permits: None,
            keepalive_ms: None,
            lock_delay_ms: None,
            protection: Default::default(),
        }
    }

    /// As the simulator sets it: a quarter of the TTL.
    fn config(&self, logical: u32) -> ClientConfig {
        ClientConfig {
            name: format!("client-{logical}"),
            deadline: self.deadline.unwrap_or(Duration::from_millis(self.ttl_ms / 4)),
            storage_url: postgres_url(),
            fenced_storage: self.fencing,
        }
    }
}

/// Empties the run's resources and deletes its lock keys on every Redis.
async fn prepare(spec: &Spec, redis_urls: &[String]) {
    let url = postgres_url();
    Storage::prepare(&url, &spec.resources())
        .await
        .unwrap_or_else(|error| panic!("PostgreSQL must be reachable at {url}: {error}"));
    for url in redis_urls {
        RedisClient::prepare(url, &spec.locks())
            .await
            .unwrap_or_else(|error| panic!("Redis must be reachable at {url}: {error}"));
    }
}

/// How long a stalling run lasts: room for two or three stalls of 3 to 4
/// TTLs and the quiet end.
const STALLING_RUN: Duration = Duration::from_secs(5);

/// The nemesis of a stalling run: every so often one client stalls at its
/// next grant for 3 to 4 TTLs, recorded as a `pause` fault. Longer than the
/// simulator's 1.5 to 3: the others get a whole TTL or more after the
/// stalled lease expires to take it, however loaded the machine. It stays
/// quiet for the last 5 TTLs, so that every stall ends inside the run.
async fn stall_holders(spec: &Spec, stalls: &[Stall], recorder: &SharedRecorder, until: Duration) {
    let mut rng = SmallRng::seed_from_u64(spec.seed ^ 0x5eed);
    let started = tokio::time::Instant::now();
    let record = |f: Function, client: usize, stall_ms: u64, struck: Option<StallPoint>| {
        let mut value = json!({ "fault": "pause", "targets": [format!("client-{client}")], "stall_ms": stall_ms, "at": spec.pause_at.name() });
        if f == Function::Stop {
            value["struck"] = json!(struck.map(StallPoint::name));
        }
        recorder.lock().unwrap().record(Process::Nemesis, EventType::Info, f, None, value, None);
    };
    let quiet = Duration::from_millis(spec.ttl_ms * 5);
    for _ in 0..spec.stalls_at_most {
        tokio::time::sleep(Duration::from_millis(rng.gen_range(50..=200))).await;
        if started.elapsed() + quiet >= until {
            return;
        }
        let client = rng.gen_range(0..stalls.len());
        let stall_ms = rng.gen_range(spec.ttl_ms * 3..=spec.ttl_ms * 4);
        stalls[client].request_at(stall_ms, spec.pause_at);
        record(Function::Start, client, stall_ms, None);
        tokio::time::sleep(Duration::from_millis(stall_ms)).await;
        // A stall not taken by now is dropped, as the simulator's is.
        let struck = stalls[client].clear();
        record(Function::Stop, client, stall_ms, struck);
    }
}

/// Runs `spec` with one client per logical client from `connect`, and
/// checks the history as `lockcheck check` does.
async fn run<C, F, Fut>(spec: &Spec, redis_urls: &[String], connect: F) -> Checked
where
    C: LockClient,
    F: Fn(ClientConfig, Stall) -> Fut,
    Fut: Future<Output = Result<C, RealError>>,
{
    prepare(spec, redis_urls).await;
    let stalls: Vec<Stall> = (0..spec.clients).map(|_| Stall::default()).collect();
    let mut clients = Vec::new();
    for logical in 0..spec.clients {
        let config = spec.config(logical);
        let client = connect(config.clone(), stalls[logical as usize].clone()).await;
        let client = client.unwrap_or_else(|error| panic!("client {logical}: {error}"));
        let store = Storage::connect(&config).await;
        clients.push((client, store.unwrap_or_else(|error| panic!("storage {logical}: {error}"))));
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
            stall_holders(spec, &stalls, &recorder, spec.run_for).await;
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
        "only {granted} grants: the run did not exercise the lock\n{}",
        describe(spec, &checked)
    );
    checked
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

fn assert_valid(spec: &Spec, checked: &Checked) {
    assert_eq!(checked.analysis.verdict, Verdict::Valid, "{}", describe(spec, checked));
}

fn assert_invalid(spec: &Spec, checked: &Checked, checker: &str) {
    assert_eq!(verdict(checked, checker), Some(Verdict::Invalid), "{}", describe(spec, checked));
}

async fn redis_run(spec: &Spec, recipe: RedisRecipe, lose_replies: f64) -> Checked {
    let url = redis_url();
    let urls = [url.clone()];
    run(spec, &urls, |config: ClientConfig, stall: Stall| {
        let url = url.clone();
        // Each client loses its own replies.
        let seed = config
            .name
            .bytes()
            .fold(spec.seed, |seed, byte| seed.wrapping_mul(31).wrapping_add(u64::from(byte)));
        async move {
            let client = RedisClient::connect(&url, recipe, spec.fencing, stall, &config).await?;
            Ok(client.lose_replies(lose_replies, seed))
        }
    })
    .await
}

#[tokio::test]
async fn redis_clean_run_is_valid() {
    let spec = Spec::new("real-redis-clean");
    let analysis = redis_run(&spec, RedisRecipe::Plain, 0.0).await;
    assert_valid(&spec, &analysis);
}

#[tokio::test]
async fn redis_fenced_clean_run_is_valid() {
    let spec = Spec::new("real-redis-fenced-clean");
    let analysis = redis_run(&spec, RedisRecipe::Fenced, 0.0).await;
    assert_valid(&spec, &analysis);
}

#[tokio::test]
async fn redis_lost_replies_taken_as_unknown_stay_valid() {
    let spec = Spec { seed: 3, ..Spec::new("real-redis-lossy") };
    let analysis = redis_run(&spec, RedisRecipe::Plain, 0.1).await;
    assert_valid(&spec, &analysis);
}

#[tokio::test]
async fn redis_holder_stall_violates_mutex_but_fenced_storage_rejects_stale_write() {
    let spec = Spec { stalls: true, run_for: STALLING_RUN, ..Spec::new("real-redis-stall") };
    let analysis = redis_run(&spec, RedisRecipe::Plain, 0.0).await;
    assert_invalid(&spec, &analysis, MUTUAL_EXCLUSION);
    assert_eq!(
        verdict(&analysis, RESOURCE_SAFETY),
        Some(Verdict::Valid),
        "{}",
        describe(&spec, &analysis)
    );
}

#[tokio::test]
async fn redis_del_release_deletes_another_holders_lock() {
    let spec = Spec { stalls: true, run_for: STALLING_RUN, ..Spec::new("real-redis-del-release") };
    let analysis = redis_run(&spec, RedisRecipe::DelRelease, 0.0).await;
    assert_invalid(&spec, &analysis, MUTUAL_EXCLUSION);
}

#[tokio::test]
async fn redis_setnx_expire_crash_leaves_the_lock_stuck() {
    // The stuck-lock clock starts again at every fault event and every
    // timed-out operation: two stalls (each a likely crash, one per lock)
    // and then seconds of quiet, with deadlines of a second instead of
    // 75 ms, so that a loaded machine's timeouts cannot keep restarting it
    // to the end of the run. The crash itself does not depend on them.
    let spec = Spec {
        stalls: true,
        stalls_at_most: 2,
        deadline: Some(Duration::from_secs(1)),
        pause_at: StallPoint::BetweenCommands,
        ttl_ms: 300,
        run_for: STALLING_RUN,
        ..Spec::new("real-redis-setnx-expire")
    };
    let analysis = redis_run(&spec, RedisRecipe::SetnxExpire, 0.0).await;
    assert_invalid(&spec, &analysis, LIVENESS);
}

/// The linearizability verdicts of `recipe` under stalls aimed at `at`,
/// over up to three seeds, until one is invalid.
///
/// A blind renewal after a stall is caught only if another client holds
/// the lock when it lands: a `PEXPIRE` of a key nobody holds fails, as the
/// correct recipe's does. So the run keeps the lock busy: one lock for the
/// five clients, holds of 20 to 60 ms against 0 to 40 ms of thinking.
/// Measured with both cores busy, over 5 runs of the 3 seeds: 33 of 35 late
/// renewals landed on a held key, and every seed was invalid. With two
/// locks and holds of 0 to 20 ms, 18 of 35 did, 4 of the 15 seeds stayed
/// linearizable, and once all three of a run had (CI, under load).
async fn linearizable_under_stalls_at(
    name: &'static str,
    recipe: RedisRecipe,
    at: StallPoint,
) -> (bool, String) {
    let mut described = Vec::new();
    for seed in 1..=3 {
        let spec = Spec {
            stalls: true,
            run_for: STALLING_RUN,
            pause_at: at,
            locks: 1,
            hold_ms: (20, 60),
            seed,
            ..Spec::new(name)
        };
        let checked = redis_run(&spec, recipe, 0.0).await;
        described.push(describe(&spec, &checked));
        if verdict(&checked, LINEARIZABILITY) == Some(Verdict::Invalid) {
            return (false, described.join("\n"));
        }
    }
    (true, described.join("\n"))
}

#[tokio::test]
async fn redis_get_del_release_paused_between_its_commands_deletes_the_next_holders_lock() {
    let (linearizable, described) = linearizable_under_stalls_at(
        "real-redis-get-del",
        RedisRecipe::GetDelRelease,
        StallPoint::BetweenCommands,
    )
    .await;
    assert!(!linearizable, "{described}");
}

#[tokio::test]
async fn redis_blind_renew_paused_before_renewing_extends_the_next_holders_lock() {
    let (linearizable, described) = linearizable_under_stalls_at(
        "real-redis-blind-renew",
        RedisRecipe::BlindRenew,
        StallPoint::BeforeRenew,
    )
    .await;
    assert!(!linearizable, "{described}");
}

#[tokio::test]
async fn redis_paused_before_renewing_or_releasing_stays_linearizable() {
    // The correct recipe in the same windows: its compare finds the lease
    // gone. Every seed must stay linearizable.
    for (name, at) in [
        ("real-redis-late-renew", StallPoint::BeforeRenew),
        ("real-redis-late-release", StallPoint::BeforeRelease),
    ] {
        for seed in 1..=2 {
            let spec =
                Spec { stalls: true, run_for: STALLING_RUN, pause_at: at, seed, ..Spec::new(name) };
            let checked = redis_run(&spec, RedisRecipe::Plain, 0.0).await;
            let text = describe(&spec, &checked);
            assert_eq!(verdict(&checked, LINEARIZABILITY), Some(Verdict::Valid), "{text}");
            assert_eq!(verdict(&checked, RESOURCE_SAFETY), Some(Verdict::Valid), "{text}");
            assert!(
                checked.events.iter().any(|event| event.f == Function::Stop
                    && event.value.as_ref().is_some_and(|raw| {
                        raw.get().contains(&format!("\"struck\":\"{}\"", at.name()))
                    })),
                "no stall struck at {}: {text}",
                at.name()
            );
        }
    }
}

#[tokio::test]
async fn redis_lost_reply_taken_for_busy_is_not_linearizable() {
    let spec = Spec { seed: 3, ..Spec::new("real-redis-lost-reply") };
    let analysis = redis_run(&spec, RedisRecipe::LostReply, 0.1).await;
    assert_invalid(&spec, &analysis, LINEARIZABILITY);
}

#[tokio::test]
async fn redlock_over_five_instances_clean_run_is_valid() {
    let servers = ManagedServer::start_many(ServerKind::Redis, 5, &ServerOptions::default())
        .unwrap_or_else(|error| panic!("five redis-server instances: {error}"));
    let urls: Vec<String> = servers.iter().map(ManagedServer::url).collect();
    // Redlock issues no token: the writes go unfenced.
    let spec = Spec { fencing: false, ..Spec::new("real-redlock-clean") };
    let analysis = run(&spec, &urls, |config: ClientConfig, _stall: Stall| {
        let urls = urls.clone();
        async move { RedlockClient::connect(&urls, &config).await }
    })
    .await;
    assert_valid(&spec, &analysis);
}

async fn storage(resources: &[String], fenced: bool) -> Storage {
    let url = postgres_url();
    Storage::prepare(&url, resources)
        .await
        .unwrap_or_else(|error| panic!("PostgreSQL must be reachable at {url}: {error}"));
    let config = ClientConfig {
        name: "client-0".to_string(),
        deadline: Duration::from_millis(500),
        storage_url: url,
        fenced_storage: fenced,
    };
    Storage::connect(&config).await.expect("a storage session")
}

#[tokio::test]
async fn fenced_storage_rejects_an_older_token() {
    let resource = "real-storage-fenced".to_string();
    let mut storage = storage(std::slice::from_ref(&resource), true).await;
    assert_eq!(storage.read(&resource).await, Outcome::Ok((None, None)));
    assert_eq!(storage.write(&resource, Some(5), "x").await, Outcome::Ok(()));
    assert_eq!(storage.write(&resource, Some(5), "y").await, Outcome::Ok(()));
    assert_eq!(storage.write(&resource, Some(4), "z").await, Outcome::Fail("stale-fence".into()));
    assert_eq!(storage.read(&resource).await, Outcome::Ok((Some(5), Some("y".into()))));
    // A write without a token is not fenced, and keeps the token.
    assert_eq!(storage.write(&resource, None, "w").await, Outcome::Ok(()));
    assert_eq!(storage.read(&resource).await, Outcome::Ok((Some(5), Some("w".into()))));
    // A new session sees the same rows.
    storage.reset().await;
    assert_eq!(storage.write(&resource, Some(6), "v").await, Outcome::Ok(()));
    assert_eq!(storage.read(&resource).await, Outcome::Ok((Some(6), Some("v".into()))));
}

#[tokio::test]
async fn unfenced_storage_accepts_an_older_token() {
    let resource = "real-storage-unfenced".to_string();
    let mut storage = storage(std::slice::from_ref(&resource), false).await;
    assert_eq!(storage.write(&resource, Some(5), "x").await, Outcome::Ok(()));
    assert_eq!(storage.write(&resource, Some(4), "z").await, Outcome::Ok(()));
    assert_eq!(storage.read(&resource).await, Outcome::Ok((None, Some("z".into()))));
}

#[tokio::test]
async fn storage_prepare_empties_the_resources_and_their_units() {
    let resource = "real-storage-prepare".to_string();
    let mut storage = storage(std::slice::from_ref(&resource), true).await;
    let unit = format!("{resource}:day-1");
    assert_eq!(storage.write(&resource, Some(3), "x").await, Outcome::Ok(()));
    assert_eq!(storage.write(&unit, Some(3), "y").await, Outcome::Ok(()));
    Storage::prepare(&postgres_url(), std::slice::from_ref(&resource)).await.expect("prepared");
    assert_eq!(storage.read(&resource).await, Outcome::Ok((None, None)));
    assert_eq!(storage.read(&unit).await, Outcome::Ok((None, None)));
}

#[tokio::test]
async fn unreachable_redis_is_a_setup_error() {
    // A port nothing listens on: bound, then released.
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let spec = Spec::new("real-redis-unreachable");
    let url = format!("redis://127.0.0.1:{port}");
    let connected =
        RedisClient::connect(&url, RedisRecipe::Plain, true, Stall::default(), &spec.config(0))
            .await;
    assert!(matches!(connected, Err(RealError::Connect { .. })), "{connected:?}");
}

#[tokio::test]
async fn redis_outcomes_when_the_server_stops_answering_or_is_gone() {
    let mut server = ManagedServer::start(ServerKind::Redis)
        .unwrap_or_else(|error| panic!("a managed redis-server: {error}"));
    let spec = Spec::new("real-redis-outcomes");
    let url = server.url();
    prepare(&spec, std::slice::from_ref(&url)).await;
    let [first, second, third] = ["a", "b", "c"].map(|lock| format!("{}-{lock}", spec.name));
    let mut client =
        RedisClient::connect(&url, RedisRecipe::Plain, true, Stall::default(), &spec.config(0))
            .await
            .expect("connected");
    assert!(matches!(client.acquire(&first, 10_000).await, Outcome::Ok(_)));
    // Frozen: the command may have run, its reply does not come.
    server.pause().expect("paused");
    assert_eq!(client.acquire(&second, 10_000).await, Outcome::Info("timeout".into()));
    server.resume().expect("resumed");
    client.reset().await;
    // The late reply to the lost SET is not taken for this one's.
    assert_eq!(client.acquire(&first, 10_000).await, Outcome::Fail("busy".into()));
    assert!(matches!(client.acquire(&third, 10_000).await, Outcome::Ok(_)));
    server.crash();
    assert!(matches!(client.acquire(spec.name, 10_000).await, Outcome::Info(_)));
    client.reset().await;
    // Nothing can be sent: certainly not taken.
    assert_eq!(client.acquire(spec.name, 10_000).await, Outcome::Fail("unavailable".into()));
}

/// A pause in flight strikes a Redlock client after every instance has
/// answered and before the recipe reads the answers: a stall shorter than
/// the lease leaves a grant with validity left; one past the lease leaves
/// none, and Redlock gives the majority it won back instead of believing.
#[tokio::test]
async fn a_pause_in_flight_strikes_redlock_and_its_validity_check_catches_a_long_one() {
    let servers = ManagedServer::start_many(ServerKind::Redis, 3, &ServerOptions::default())
        .unwrap_or_else(|error| panic!("three redis-server instances: {error}"));
    let urls: Vec<String> = servers.iter().map(ManagedServer::url).collect();
    let config = ClientConfig {
        name: "client-0".to_string(),
        deadline: Duration::from_millis(500),
        storage_url: postgres_url(),
        fenced_storage: false,
    };
    let stall = Stall::default();
    let mut client = RedlockClient::connect(&urls, &config)
        .await
        .expect("three instances and the storage")
        .stalling_at(stall.clone());
    stall.request_at(100, StallPoint::InFlight);
    let short = client.acquire("in-flight-short", 2_000).await;
    assert_eq!(stall.clear(), Some(StallPoint::InFlight));
    let Outcome::Ok(grant) = short else { panic!("a 100 ms stall in a 2 s lease: {short:?}") };
    assert_eq!(client.release("in-flight-short", &grant).await, Outcome::Ok(()));
    stall.request_at(1_200, StallPoint::InFlight);
    let long = client.acquire("in-flight-long", 1_000).await;
    assert_eq!(stall.clear(), Some(StallPoint::InFlight));
    assert!(matches!(long, Outcome::Fail(_)), "a 1.2 s stall in a 1 s lease: {long:?}");
    // What it won was given back: the lock is free.
    let again = client.acquire("in-flight-long", 1_000).await;
    assert!(matches!(again, Outcome::Ok(_)), "{again:?}");
}
