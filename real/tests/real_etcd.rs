//! The etcd lock (lease + the v3 Lock API, the lock key's create revision as
//! the fencing token) against a real etcd: Debian's 3.4 passes a clean run,
//! and a holder stalled past its lease loses mutual exclusion while the
//! fenced storage stays safe (docs/truth-table.md).
//!
//! The server: `LOCKCHECK_ETCD_URL` (comma-separated client URLs), or else a
//! private etcd each test starts from the `etcd` on PATH and stops at its
//! end; without one the test fails, naming the package to install. The
//! protected resources live in PostgreSQL at `LOCKCHECK_POSTGRES_URL`
//! (default `postgres://postgres@127.0.0.1:5432/test`).

mod common;

use std::time::Duration;

use lockcheck_checker::names::{FENCE_MONOTONICITY, MUTUAL_EXCLUSION, RESOURCE_SAFETY};
use lockcheck_checker::{Analysis, EventType, Function, Process, Verdict};
use lockcheck_real::ClientConfig;
use lockcheck_real::{EtcdClient, ManagedServer, ServerKind, Storage};
use lockcheck_workloads::payments::NoPayments;
use lockcheck_workloads::{
    run_client, ClientPlan, LockClient, Outcome, Recorder, Stall, StallPoint, Workload,
    WorkloadOptions,
};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use serde_json::json;

fn postgres_url() -> String {
    std::env::var("LOCKCHECK_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string())
}

/// The cluster's endpoints, and the server this test started (stopped and
/// deleted when dropped), if it started one.
fn etcd() -> (Vec<String>, Option<ManagedServer>) {
    if let Ok(urls) = std::env::var("LOCKCHECK_ETCD_URL") {
        return (urls.split(',').map(str::to_string).collect(), None);
    }
    let server = ManagedServer::start(ServerKind::Etcd)
        .unwrap_or_else(|error| panic!("this test needs an etcd server: {error}"));
    (vec![server.url()], Some(server))
}

fn config(client: u32, deadline: Duration) -> ClientConfig {
    ClientConfig {
        name: format!("client-{client}"),
        deadline,
        storage_url: postgres_url(),
        fenced_storage: true,
    }
}

/// A client whose calls may take up to a second: a workload's, which
/// records a slow call as unknown and goes on.
async fn connect(endpoints: &[String], client: u32) -> EtcdClient {
    connect_within(endpoints, client, Duration::from_millis(1000)).await
}

/// A client whose calls may take up to `deadline`. Each of etcd's writes
/// waits for its log's fsync, which a machine busy writing (a build beside
/// the tests) can hold up for a second or more: a test that asserts what a
/// single call returns gives it room.
async fn connect_within(endpoints: &[String], client: u32, deadline: Duration) -> EtcdClient {
    EtcdClient::connect(endpoints, &config(client, deadline), true, false)
        .await
        .unwrap_or_else(|error| panic!("etcd must be reachable at {endpoints:?}: {error}"))
}

fn options(tag: &str, ttl_ms: u64) -> WorkloadOptions {
    WorkloadOptions {
        workload: Workload::FencedWrite,
        locks: (0..2).map(|lock| format!("{tag}-lock-{lock}")).collect(),
        resources: (0..2).map(|lock| format!("{tag}-resource-{lock}")).collect(),
        ttl_ms,
        hold_ms: (0, 20),
        think_ms: (0, 40),
        send_fence: true,
        permits: None,
        keepalive_ms: None,
        lock_delay_ms: None,
        protection: Default::default(),
    }
}

/// Runs five clients for `run_for`, stalling client 0 for `stall_ms` (if
/// any) at its first grant after 500 ms, and checks the history.
async fn run(
    endpoints: &[String],
    options: &WorkloadOptions,
    run_for: Duration,
    stall_ms: u64,
) -> Analysis {
    const CLIENTS: u32 = 5;
    Storage::prepare(&postgres_url(), &options.resources)
        .await
        .unwrap_or_else(|error| panic!("PostgreSQL (storage) must be reachable: {error}"));
    let mut clients = Vec::new();
    for client in 0..CLIENTS {
        let store = Storage::connect(&config(client, Duration::from_millis(1000)))
            .await
            .unwrap_or_else(|error| panic!("PostgreSQL (storage) must be reachable: {error}"));
        clients.push((connect(endpoints, client).await, store));
    }
    let recorder = Recorder::new().shared();
    let stalls: Vec<Stall> = (0..CLIENTS).map(|_| Stall::default()).collect();
    let until = tokio::time::Instant::now() + run_for;
    let local = tokio::task::LocalSet::new();
    for (logical, (mut client, mut store)) in (0u32..).zip(clients) {
        let plan = ClientPlan { logical, clients: CLIENTS, until };
        let (options, recorder) = (options.clone(), recorder.clone());
        let stall = stalls[logical as usize].clone();
        local.spawn_local(async move {
            let rng = SmallRng::seed_from_u64(u64::from(logical));
            run_client(
                &mut client,
                &mut store,
                &mut NoPayments,
                &plan,
                &options,
                rng,
                &recorder,
                &stall,
            )
            .await;
        });
    }
    if stall_ms > 0 {
        let (recorder, stall) = (recorder.clone(), stalls[0].clone());
        local.spawn_local(async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let value = json!({ "fault": "pause", "targets": ["client-0"], "stall_ms": stall_ms });
            recorder.lock().expect("not poisoned").record(
                Process::Nemesis,
                EventType::Info,
                Function::Start,
                None,
                value,
                None,
            );
            stall.request(stall_ms);
        });
    }
    local.await;
    let events = std::mem::take(&mut *recorder.lock().expect("not poisoned")).into_events();
    let analysis = common::analyzed(&events);
    let grants = events
        .iter()
        .filter(|event| event.f == Function::Acquire && event.event_type == EventType::Ok)
        .count();
    let infos = events.iter().filter(|event| event.event_type == EventType::Info).count();
    eprintln!(
        "etcd: {} events, {grants} grants, {infos} info; {}",
        events.len(),
        describe(&analysis).replace('\n', " ")
    );
    assert!(grants >= 5, "only {grants} grants in {run_for:?}");
    analysis
}

fn verdict_of(analysis: &Analysis, checker: &str) -> Option<Verdict> {
    analysis.verdict_of(checker)
}

/// Every checker's verdict and the first violations, for a failure message.
fn describe(analysis: &Analysis) -> String {
    let mut text = format!("verdict {}\n", analysis.verdict.as_str());
    for result in &analysis.results {
        let verdict = result.verdict.map_or("n/a", Verdict::as_str);
        text.push_str(&format!("  {}: {verdict}\n", result.checker));
        for violation in result.violations.iter().take(2) {
            text.push_str(&format!("    {}\n", violation.explanation));
        }
        if let Some(reason) = &result.reason {
            text.push_str(&format!("    ({reason})\n"));
        }
    }
    text
}

#[tokio::test]
async fn etcd_lock_clean_run_is_valid() {
    let (endpoints, _server) = etcd();
    let analysis = run(&endpoints, &options("etcd-clean", 2000), Duration::from_secs(3), 0).await;
    assert_eq!(analysis.verdict, Verdict::Valid, "{}", describe(&analysis));
}

/// Busy while held, fences growing, a renewal, and a release only by the
/// holder; returns the TTL the server granted, in seconds.
async fn check_semantics(endpoints: &[String], tag: &str) -> i64 {
    let roomy = Duration::from_secs(10);
    let (mut a, mut b) =
        (connect_within(endpoints, 0, roomy).await, connect_within(endpoints, 1, roomy).await);
    let key = format!("{tag}-lock");
    let Outcome::Ok(first) = a.acquire(&key, 1000).await else { panic!("a's acquire") };
    assert!(first.fence.is_some(), "{first:?}");
    assert_eq!(b.acquire(&key, 1000).await, Outcome::Fail("busy".into()));
    assert_eq!(a.renew(&key, &first, 1000).await, Outcome::Ok(()));
    assert_eq!(b.release(&key, &first).await, Outcome::Fail("not-held".into()));
    assert_eq!(a.release(&key, &first).await, Outcome::Ok(()));
    let Outcome::Ok(second) = b.acquire(&key, 1000).await else { panic!("b's acquire") };
    assert!(second.fence > first.fence, "{first:?} then {second:?}");
    assert_eq!(b.release(&key, &second).await, Outcome::Ok(()));
    a.granted_ttl_s().expect("a lease was granted")
}

#[tokio::test]
async fn etcd_holder_stall_past_the_lease_breaks_mutex_but_fenced_storage_holds() {
    let (endpoints, _server) = etcd();
    // A TTL of 1 s, which etcd raises to its minimum (2 s by default).
    let ttl_s = check_semantics(&endpoints, "etcd-semantics").await;
    assert!((1..=3).contains(&ttl_s), "etcd granted a {ttl_s} s lease for 1 s");
    // The lessor revokes expired leases every 500 ms: stall well past that,
    // three leases long, so that a loaded machine (etcd's revoke is a Raft
    // proposal of its own) still frees the lock with seconds to spare; and
    // run on 3 s after the stall for the others to take it.
    let stall_ms = 3000 * ttl_s as u64;
    let run_for = Duration::from_millis(stall_ms + 3000);
    let analysis = run(&endpoints, &options("etcd-stall", 1000), run_for, stall_ms).await;
    let report = describe(&analysis);
    assert_eq!(verdict_of(&analysis, MUTUAL_EXCLUSION), Some(Verdict::Invalid), "{report}");
    assert_eq!(verdict_of(&analysis, RESOURCE_SAFETY), Some(Verdict::Valid), "{report}");
    assert_eq!(verdict_of(&analysis, FENCE_MONOTONICITY), Some(Verdict::Valid), "{report}");
}

/// A pause strikes the real etcd client in flight (a reply has come, the
/// recipe has not read it) and between the recipe's commands (a lease
/// granted, its lock not yet taken). The stall is the client's own, so the
/// operation's deadline (3 s here, room for a slow fsync) waits it out: the
/// acquire takes longer than its deadline and is still granted.
#[tokio::test]
async fn a_pause_strikes_the_etcd_client_in_flight_and_between_its_commands() {
    let (endpoints, _server) = etcd();
    for (at, point) in [StallPoint::InFlight, StallPoint::BetweenCommands].into_iter().enumerate() {
        let stall = Stall::default();
        let mut client =
            connect_within(&endpoints, 0, Duration::from_secs(3)).await.stalling_at(stall.clone());
        let key = format!("stall-point-{at}");
        stall.request_at(3_500, point);
        let started = std::time::Instant::now();
        let acquired = client.acquire(&key, 5_000).await;
        let took = started.elapsed();
        let Outcome::Ok(grant) = acquired else {
            panic!("{}: a stall is not a timeout: {acquired:?}", point.name())
        };
        assert!(took >= Duration::from_millis(3_500), "{}: {took:?}", point.name());
        assert_eq!(stall.clear(), Some(point));
        assert!(stall.has_passed(point));
        assert_eq!(client.release(&key, &grant).await, Outcome::Ok(()), "{}", point.name());
    }
}

/// An acquire that finds the lock free and loses it before its lock call
/// (here: stalled between its lease's grant and the call, while another
/// takes the lock) is refused at once, as a busy lock is, rather than
/// waiting in line behind the holder until its deadline; and it leaves
/// nothing behind: once the holder releases, it takes the lock. (The Lock
/// API's call waited, timed out as `info`, and its key held the lock for
/// nobody until its lease went.)
#[tokio::test]
async fn an_acquire_that_loses_the_race_after_its_read_is_busy_at_once() {
    let (endpoints, _server) = etcd();
    let roomy = Duration::from_secs(10);
    let stall = Stall::default();
    let mut late = connect_within(&endpoints, 0, roomy).await.stalling_at(stall.clone());
    let mut first = connect_within(&endpoints, 1, roomy).await;
    let key = "lost-race-lock";
    stall.request_at(1_500, StallPoint::BetweenCommands);
    let taken_meanwhile = async {
        // The late client has read the lock free and taken its stall.
        while stall.is_pending_at(StallPoint::BetweenCommands) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        first.acquire(key, 5_000).await
    };
    let (lost, taken) = tokio::join!(late.acquire(key, 5_000), taken_meanwhile);
    assert_eq!(stall.clear(), Some(StallPoint::BetweenCommands));
    let Outcome::Ok(grant) = taken else { panic!("the lock was free: {taken:?}") };
    assert_eq!(lost, Outcome::Fail("busy".into()), "the late acquire");
    assert_eq!(first.release(key, &grant).await, Outcome::Ok(()));
    let again = late.acquire(key, 5_000).await;
    let Outcome::Ok(second) = again else { panic!("free once released: {again:?}") };
    assert!(second.fence > grant.fence, "{grant:?} then {second:?}");
    assert_eq!(late.release(key, &second).await, Outcome::Ok(()));
}

/// A client of etcd's waiting recipe (`Mutex.Lock`): one that finds the
/// lock taken waits in line, watching the key before its own, for half of
/// `deadline`.
async fn waiter(endpoints: &[String], client: u32, deadline: Duration) -> EtcdClient {
    EtcdClient::connect(endpoints, &config(client, deadline), true, true)
        .await
        .unwrap_or_else(|error| panic!("etcd must be reachable at {endpoints:?}: {error}"))
}

#[tokio::test]
async fn a_release_wakes_the_one_waiter_next_in_line() {
    let (endpoints, _server) = etcd();
    let key = format!("etcd-line-{}", std::process::id());
    let roomy = Duration::from_secs(20);
    let mut holder = waiter(&endpoints, 0, roomy).await;
    let mut waiters = Vec::new();
    for client in 1..4 {
        waiters.push(waiter(&endpoints, client, roomy).await);
    }
    let Outcome::Ok(first) = holder.acquire(&key, 10_000).await else {
        panic!("the first acquire")
    };
    // Each waiter joins the line a third of a second after the one before,
    // takes the lock when its turn comes, holds it a moment and lets go.
    let turns = waiters.iter_mut().zip(1u64..).map(|(waiter, at)| {
        let key = key.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(300 * at)).await;
            let Outcome::Ok(grant) = waiter.acquire(&key, 10_000).await else {
                panic!("waiter {at}")
            };
            tokio::time::sleep(Duration::from_millis(200)).await;
            assert_eq!(waiter.release(&key, &grant).await, Outcome::Ok(()));
            (grant.fence, waiter.take_wake_ups().expect("a waiter counts its wake-ups"))
        }
    });
    let (turns, released) = tokio::join!(futures_util::future::join_all(turns), async {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        holder.release(&key, &first).await
    });
    assert_eq!(released, Outcome::Ok(()));
    // Three releases with someone in line: one wake-up each, and the line
    // is served in the order it was joined, each token above the last.
    let woken: u64 = turns.iter().map(|&(_, woken)| woken).sum();
    assert_eq!(woken, 3, "{turns:?}");
    let fences: Vec<Option<u64>> =
        std::iter::once(first.fence).chain(turns.iter().map(|&(fence, _)| fence)).collect();
    assert!(fences.windows(2).all(|pair| pair[0] < pair[1]), "{fences:?}");
    // A client refused at once polls: it has no wake-ups to count.
    let mut polling = connect(&endpoints, 9).await;
    assert_eq!(polling.take_wake_ups(), None);
}
