//! The SQL locks (PostgreSQL advisory and lease, MySQL/MariaDB `GET_LOCK` and
//! lease) against real servers, checked as docs/truth-table.md says they must come
//! out: clean runs valid; a holder stall longer than a lease's TTL breaks
//! mutual exclusion while the fenced storage stays safe; a cut connection
//! frees a session lock while its client still believes in it.
//!
//! The servers: `LOCKCHECK_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`) and `LOCKCHECK_MYSQL_URL`
//! (default `mysql://root@127.0.0.1:3306/test`). A server that cannot be
//! reached fails the test, saying so. Every test names its own locks and
//! resources, so the tests run in parallel without meeting.

mod common;

use std::future::Future;
use std::time::Duration;

use lockcheck_checker::{Analysis, EventType, Function, Process, Verdict};
use lockcheck_real::ClientConfig;
use lockcheck_real::{advisory_key, mysql_lock_name, SqlClient, SqlRecipe, Storage};
use lockcheck_workloads::payments::NoPayments;
use lockcheck_workloads::{
    run_client, ClientPlan, Grant, LockClient, Outcome, Recorder, SharedRecorder, Stall,
    StallPoint, Workload, WorkloadOptions,
};
use mysql_async::prelude::Queryable;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use serde_json::json;

use lockcheck_checker::names::DEADLOCK;
use lockcheck_checker::names::MUTUAL_EXCLUSION as MUTEX;
use lockcheck_checker::names::RESOURCE_SAFETY as RESOURCE;

fn postgres_url() -> String {
    std::env::var("LOCKCHECK_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string())
}

fn mysql_url() -> String {
    std::env::var("LOCKCHECK_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_string())
}

fn url_of(recipe: SqlRecipe) -> String {
    if recipe.is_mysql() {
        mysql_url()
    } else {
        postgres_url()
    }
}

fn config(client: u32, fenced_storage: bool) -> ClientConfig {
    ClientConfig {
        name: format!("client-{client}"),
        deadline: Duration::from_millis(1000),
        storage_url: postgres_url(),
        fenced_storage,
    }
}

/// What one test runs.
struct Scenario {
    recipe: SqlRecipe,
    /// Prefix of the test's lock and resource names.
    tag: &'static str,
    workload: Workload,
    clients: u32,
    locks: u32,
    ttl_ms: u64,
    hold_ms: (u64, u64),
    run_for: Duration,
}

impl Scenario {
    fn clean(recipe: SqlRecipe, tag: &'static str) -> Scenario {
        Scenario {
            recipe,
            tag,
            workload: Workload::FencedWrite,
            clients: 5,
            locks: 2,
            ttl_ms: 2000,
            hold_ms: (0, 20),
            run_for: Duration::from_secs(2),
        }
    }

    fn options(&self) -> WorkloadOptions {
        WorkloadOptions {
            workload: self.workload,
            locks: (0..self.locks).map(|lock| format!("{}-lock-{lock}", self.tag)).collect(),
            resources: (0..self.locks)
                .map(|lock| format!("{}-resource-{lock}", self.tag))
                .collect(),
            ttl_ms: self.ttl_ms,
            hold_ms: self.hold_ms,
            think_ms: (0, 40),
            send_fence: self.recipe.has_fence(),
            permits: None,
            keepalive_ms: None,
            lock_delay_ms: None,
            protection: Default::default(),
        }
    }
}

/// Records a nemesis event, as the simulator does.
fn record_fault(recorder: &SharedRecorder, f: Function, value: serde_json::Value) {
    recorder.lock().expect("the recorder is never poisoned").record(
        Process::Nemesis,
        EventType::Info,
        f,
        None,
        value,
        None,
    );
}

/// Runs the scenario's clients against the real server while `nemesis`
/// runs beside them (given the recorder and each client's stall), and
/// checks the history.
async fn run<N, F>(scenario: &Scenario, nemesis: N) -> Analysis
where
    N: FnOnce(SharedRecorder, Vec<Stall>) -> F,
    F: Future<Output = ()> + 'static,
{
    let (recipe, url) = (scenario.recipe, url_of(scenario.recipe));
    let options = scenario.options();
    SqlClient::prepare(&url, recipe)
        .await
        .unwrap_or_else(|error| panic!("{} must be reachable at {url}: {error}", recipe.name()));
    Storage::prepare(&postgres_url(), &options.resources)
        .await
        .unwrap_or_else(|error| panic!("PostgreSQL (storage) must be reachable: {error}"));
    let mut clients = Vec::new();
    for client in 0..scenario.clients {
        let config = config(client, recipe.has_fence());
        let connected = SqlClient::connect(&url, recipe, &config).await;
        let connected = connected.unwrap_or_else(|error| panic!("client {client}: {error}"));
        let store = Storage::connect(&config).await;
        clients
            .push((connected, store.unwrap_or_else(|error| panic!("storage {client}: {error}"))));
    }
    let recorder = Recorder::new().shared();
    let stalls: Vec<Stall> = (0..scenario.clients).map(|_| Stall::default()).collect();
    let until = tokio::time::Instant::now() + scenario.run_for;
    let local = tokio::task::LocalSet::new();
    for (logical, (mut client, mut store)) in (0u32..).zip(clients) {
        let plan = ClientPlan { logical, clients: scenario.clients, until };
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
    local.spawn_local(nemesis(recorder.clone(), stalls));
    local.await;
    let events = std::mem::take(&mut *recorder.lock().expect("not poisoned")).into_events();
    let analysis = common::analyzed(&events);
    let grants = events
        .iter()
        .filter(|event| event.f == Function::Acquire && event.event_type == EventType::Ok)
        .count();
    let infos = events.iter().filter(|event| event.event_type == EventType::Info).count();
    eprintln!(
        "{} ({}): {} events, {grants} grants, {infos} info; {}",
        scenario.tag,
        recipe.name(),
        events.len(),
        describe(&analysis).replace('\n', " ")
    );
    assert!(grants >= 5, "{}: only {grants} grants in {:?}", recipe.name(), scenario.run_for);
    analysis
}

async fn no_faults(_: SharedRecorder, _: Vec<Stall>) {}

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

async fn assert_clean_run_valid(recipe: SqlRecipe, tag: &'static str) {
    let analysis = run(&Scenario::clean(recipe, tag), no_faults).await;
    assert_eq!(analysis.verdict, Verdict::Valid, "{}: {}", recipe.name(), describe(&analysis));
}

#[tokio::test]
async fn postgres_advisory_clean_run_is_valid() {
    assert_clean_run_valid(SqlRecipe::PostgresAdvisory, "pg-advisory-clean").await;
}

#[tokio::test]
async fn postgres_advisory_xact_clean_run_is_valid() {
    assert_clean_run_valid(SqlRecipe::PostgresAdvisoryXact, "pg-xact-clean").await;
}

#[tokio::test]
async fn postgres_lease_clean_run_is_valid() {
    assert_clean_run_valid(SqlRecipe::PostgresLease, "pg-lease-clean").await;
}

#[tokio::test]
async fn mysql_get_lock_clean_run_is_valid() {
    assert_clean_run_valid(SqlRecipe::MysqlGetLock, "my-get-lock-clean").await;
}

#[tokio::test]
async fn mysql_lease_clean_run_is_valid() {
    assert_clean_run_valid(SqlRecipe::MysqlLease, "my-lease-clean").await;
}

/// Stalls a holder for three TTLs, twice: its lease expires, another client
/// takes the lock, and the stalled one wakes believing it still holds it.
async fn stall_holders(recorder: SharedRecorder, stalls: Vec<Stall>, ttl_ms: u64) {
    for (pause_before_ms, client) in [(500, 0), (1500, 1)] {
        tokio::time::sleep(Duration::from_millis(pause_before_ms)).await;
        let stall_ms = 3 * ttl_ms;
        let targets = [format!("client-{client}")];
        let value = json!({ "fault": "pause", "targets": targets, "stall_ms": stall_ms });
        record_fault(&recorder, Function::Start, value);
        stalls[client].request(stall_ms);
    }
}

async fn assert_stall_breaks_mutex_but_not_fenced_storage(recipe: SqlRecipe, tag: &'static str) {
    let scenario =
        Scenario { ttl_ms: 400, run_for: Duration::from_secs(3), ..Scenario::clean(recipe, tag) };
    let analysis =
        run(&scenario, |recorder, stalls| stall_holders(recorder, stalls, scenario.ttl_ms)).await;
    let report = describe(&analysis);
    assert_eq!(verdict_of(&analysis, MUTEX), Some(Verdict::Invalid), "{}: {report}", recipe.name());
    assert_eq!(
        verdict_of(&analysis, RESOURCE),
        Some(Verdict::Valid),
        "{}: {report}",
        recipe.name()
    );
}

#[tokio::test]
async fn postgres_lease_holder_stall_breaks_mutex_but_fenced_storage_holds() {
    assert_stall_breaks_mutex_but_not_fenced_storage(SqlRecipe::PostgresLease, "pg-lease-stall")
        .await;
}

#[tokio::test]
async fn mysql_lease_holder_stall_breaks_mutex_but_fenced_storage_holds() {
    assert_stall_breaks_mutex_but_not_fenced_storage(SqlRecipe::MysqlLease, "my-lease-stall").await;
}

/// A scenario where holders keep a lock long enough for a connection to be
/// cut under them: holds of 1 to 1.5 s, so that after a cut the others have
/// most of a second to take the freed lock while its holder still works,
/// however slowly a loaded machine ends the killed session.
fn long_holds(recipe: SqlRecipe, tag: &'static str) -> Scenario {
    Scenario {
        workload: Workload::Mutex,
        clients: 4,
        locks: 1,
        hold_ms: (1000, 1500),
        run_for: Duration::from_secs(5),
        ..Scenario::clean(recipe, tag)
    }
}

/// Every 400 ms, terminates the PostgreSQL backend holding advisory `key`.
async fn kill_pg_holders(recorder: SharedRecorder, key: i64) {
    let (killer, connection) = tokio_postgres::connect(&postgres_url(), tokio_postgres::NoTls)
        .await
        .expect("the killer's connection to PostgreSQL");
    tokio::spawn(connection);
    let (high, low) = ((key as u64 >> 32) as u32, key as u64 as u32);
    let holders = "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted \
                   AND classid = $1 AND objid = $2 AND objsubid = 1";
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        let rows = killer.query(holders, &[&high, &low]).await.expect("pg_locks");
        for row in rows {
            let pid: i32 = row.get(0);
            record_fault(
                &recorder,
                Function::Start,
                json!({ "fault": "kill-connection", "pid": pid }),
            );
            killer.execute("SELECT pg_terminate_backend($1)", &[&pid]).await.expect("terminate");
        }
    }
}

#[tokio::test]
async fn postgres_advisory_connection_cut_frees_the_lock_while_the_client_believes() {
    let scenario = long_holds(SqlRecipe::PostgresAdvisory, "pg-advisory-cut");
    let key = advisory_key(&scenario.options().locks[0]);
    let analysis = run(&scenario, move |recorder, _| kill_pg_holders(recorder, key)).await;
    assert_eq!(verdict_of(&analysis, MUTEX), Some(Verdict::Invalid), "{}", describe(&analysis));
}

/// Every 400 ms, kills the MySQL connection holding `GET_LOCK` lock `name`.
async fn kill_mysql_holders(recorder: SharedRecorder, name: String) {
    let mut killer =
        mysql_async::Conn::from_url(mysql_url()).await.expect("the killer's connection to MySQL");
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        let holder: Option<Option<u64>> =
            killer.exec_first("SELECT IS_USED_LOCK(?)", (&name,)).await.expect("IS_USED_LOCK");
        if let Some(Some(id)) = holder {
            record_fault(
                &recorder,
                Function::Start,
                json!({ "fault": "kill-connection", "id": id }),
            );
            // The holder may have gone already: an unknown thread is fine.
            let _ = killer.query_drop(format!("KILL CONNECTION {id}")).await;
        }
    }
}

#[tokio::test]
async fn mysql_get_lock_connection_kill_frees_the_lock_while_the_client_believes() {
    let scenario = long_holds(SqlRecipe::MysqlGetLock, "my-get-lock-kill");
    let name = mysql_lock_name(&scenario.options().locks[0]);
    let analysis = run(&scenario, move |recorder, _| kill_mysql_holders(recorder, name)).await;
    assert_eq!(verdict_of(&analysis, MUTEX), Some(Verdict::Invalid), "{}", describe(&analysis));
}

/// Two clients, one lock: busy while held, only the holder releases, and a
/// lease's token grows with each grant.
async fn assert_recipe_semantics(recipe: SqlRecipe, tag: &str) {
    let url = url_of(recipe);
    SqlClient::prepare(&url, recipe)
        .await
        .unwrap_or_else(|error| panic!("{} must be reachable at {url}: {error}", recipe.name()));
    let fenced = recipe.has_fence();
    let mut a = SqlClient::connect(&url, recipe, &config(0, fenced)).await.expect("client a");
    let mut b = SqlClient::connect(&url, recipe, &config(1, fenced)).await.expect("client b");
    let key = format!("{tag}-lock");
    let Outcome::Ok(first) = a.acquire(&key, 5000).await else { panic!("a's acquire") };
    assert_eq!(first.fence.is_some(), fenced, "{}: {first:?}", recipe.name());
    assert_eq!(b.acquire(&key, 5000).await, Outcome::Fail("busy".into()), "{}", recipe.name());
    assert_eq!(a.renew(&key, &first, 5000).await, Outcome::Ok(()), "{}", recipe.name());
    let wrong = Grant { fence: first.fence.map(|fence| fence + 7), lease: Some("nobody".into()) };
    assert_eq!(
        b.release(&key, &wrong).await,
        Outcome::Fail("not-held".into()),
        "{}",
        recipe.name()
    );
    assert_eq!(b.renew(&key, &wrong, 5000).await, Outcome::Fail("not-held".into()));
    assert_eq!(a.release(&key, &first).await, Outcome::Ok(()), "{}", recipe.name());
    let Outcome::Ok(second) = b.acquire(&key, 5000).await else { panic!("b's acquire") };
    assert!(second.fence > first.fence || !fenced, "{}: {first:?} {second:?}", recipe.name());
    assert_eq!(b.release(&key, &second).await, Outcome::Ok(()), "{}", recipe.name());
    // A new session holds nothing of the old one.
    let Outcome::Ok(third) = a.acquire(&key, 5000).await else { panic!("a's second acquire") };
    a.reset().await;
    assert_eq!(a.release(&key, &third).await, expected_after_reset(recipe));
}

/// A session lock dies with its session; a lease outlives it.
fn expected_after_reset(recipe: SqlRecipe) -> Outcome<()> {
    if recipe.has_fence() {
        Outcome::Ok(())
    } else {
        Outcome::Fail("not-held".into())
    }
}

#[tokio::test]
async fn every_recipe_refuses_a_held_lock_and_a_stranger_release() {
    for recipe in SqlRecipe::ALL {
        assert_recipe_semantics(recipe, &format!("semantics-{}", recipe.name())).await;
    }
}

/// A pause in flight strikes every SQL recipe's client: its statements'
/// reply has come, the recipe reads it after the stall, and the stall, the
/// client's own, does not count against the operation's deadline (here
/// shorter than the stall).
#[tokio::test]
async fn a_pause_in_flight_strikes_every_recipe_and_the_call_just_takes_longer() {
    for recipe in SqlRecipe::ALL {
        let url = url_of(recipe);
        SqlClient::prepare(&url, recipe).await.unwrap_or_else(|error| {
            panic!("{} must be reachable at {url}: {error}", recipe.name())
        });
        let stall = Stall::default();
        let config = ClientConfig { deadline: Duration::from_millis(300), ..config(0, false) };
        let mut client = SqlClient::connect(&url, recipe, &config)
            .await
            .expect("a client")
            .stalling_at(stall.clone());
        let key = format!("in-flight-{}", recipe.name());
        stall.request_at(700, StallPoint::InFlight);
        let started = std::time::Instant::now();
        let acquired = client.acquire(&key, 5000).await;
        let took = started.elapsed();
        let Outcome::Ok(grant) = acquired else {
            panic!("{}: a stall in flight is not a timeout: {acquired:?}", recipe.name())
        };
        assert!(took >= Duration::from_millis(700), "{}: {took:?}", recipe.name());
        assert_eq!(stall.clear(), Some(StallPoint::InFlight), "{}", recipe.name());
        assert!(stall.has_passed(StallPoint::InFlight));
        assert_eq!(client.release(&key, &grant).await, Outcome::Ok(()), "{}", recipe.name());
    }
}

/// Clients that each take two session locks, in one fixed order or (every
/// other client) in the opposite one, waiting for the second on the server
/// for a third of a 6 s TTL: past PostgreSQL's `deadlock_timeout` (1 s).
fn two_locks(recipe: SqlRecipe, tag: &'static str, workload: Workload) -> Scenario {
    Scenario {
        workload,
        clients: 4,
        ttl_ms: 6000,
        hold_ms: (0, 50),
        run_for: Duration::from_secs(6),
        ..Scenario::clean(recipe, tag)
    }
}

/// In one fixed order no cycle of waits forms; in opposite orders one
/// does, the server itself refuses a wait in it with its own error (the
/// report quotes it: `server_words`), and the deadlock checker finds it.
async fn assert_lock_ordering(
    recipe: SqlRecipe,
    [tag, tag_opposite]: [&'static str; 2],
    server_words: &str,
) {
    let fixed = run(&two_locks(recipe, tag, Workload::LockOrder), no_faults).await;
    assert_eq!(fixed.verdict, Verdict::Valid, "{}: {}", recipe.name(), describe(&fixed));
    assert_eq!(verdict_of(&fixed, DEADLOCK), Some(Verdict::Valid), "{}", describe(&fixed));
    let opposite =
        run(&two_locks(recipe, tag_opposite, Workload::LockOrderOpposite), no_faults).await;
    assert_eq!(verdict_of(&opposite, DEADLOCK), Some(Verdict::Invalid), "{}", describe(&opposite));
    assert_eq!(verdict_of(&opposite, MUTEX), Some(Verdict::Valid), "{}", describe(&opposite));
    let result = opposite.result_of(DEADLOCK).expect("the deadlock checker ran");
    assert!(
        result.violations.iter().any(|violation| violation.explanation.contains(server_words)),
        "a deadlock the server refused, in its words ({server_words}): {}",
        describe(&opposite)
    );
}

#[tokio::test]
async fn postgres_advisory_locks_in_opposite_orders_deadlock_and_the_server_says_so() {
    assert_lock_ordering(SqlRecipe::PostgresAdvisory, ["pg-order", "pg-order-opposite"], "40P01")
        .await;
}

#[tokio::test]
async fn mysql_get_lock_in_opposite_orders_deadlocks_and_the_server_says_so() {
    assert_lock_ordering(SqlRecipe::MysqlGetLock, ["my-order", "my-order-opposite"], "1213").await;
}
