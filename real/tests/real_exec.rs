//! The exec driver (`docs/exec-protocol.md`) against real programs: the
//! protocol's failure cases with `examples/python/misbehave.py`, and the
//! Python Redis locks of `examples/python/` driven like any real backend:
//! the correct one is valid without faults and, under stalls, keeps fenced
//! storage safe and stays linearizable; the DEL-release one is caught under
//! stalls (mutual exclusion and linearizability).
//!
//! Servers: Redis at `LOCKCHECK_REDIS_URL` (default redis://127.0.0.1:6379),
//! PostgreSQL at `LOCKCHECK_POSTGRES_URL` (default
//! postgres://postgres@127.0.0.1:5432/test). Python: `LOCKCHECK_PYTHON`
//! (default /usr/bin/python3, where Debian's `python3-redis` installs). A
//! server or module that is missing fails the test: nothing is skipped.
//! Every run uses names unique to it (Redis keys under a random
//! `LOCKCHECK_KEY_PREFIX`), so concurrent runs of the suite do not collide.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lockcheck_checker::names::{LINEARIZABILITY, MUTUAL_EXCLUSION, RESOURCE_SAFETY};
use lockcheck_checker::{write_events, Analysis, Event, EventType, Function, Process, Verdict};
use lockcheck_real::schedule::{schedule, split, FaultTargets};
use lockcheck_real::Storage;
use lockcheck_real::{drive, DriveOptions};
use lockcheck_real::{ClientConfig, RealError};
use lockcheck_real::{ExecClient, ExecProgram};
use lockcheck_workloads::{
    FaultKind, LockClient, Outcome, Stall, StallPoint, Workload, WorkloadOptions,
};

fn redis_url() -> String {
    std::env::var("LOCKCHECK_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_string())
}

fn postgres_url() -> String {
    std::env::var("LOCKCHECK_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string())
}

fn python() -> String {
    std::env::var("LOCKCHECK_PYTHON").unwrap_or_else(|_| "/usr/bin/python3".to_string())
}

/// The path of an example program.
fn example(file: &str) -> String {
    format!("{}/../examples/python/{file}", env!("CARGO_MANIFEST_DIR"))
}

/// `name` made unique to this run (process and time).
fn unique(name: &str) -> String {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |since| since.as_nanos());
    format!("{name}-{}-{nanos:x}", std::process::id())
}

fn config(logical: u32, deadline: Duration) -> ClientConfig {
    ClientConfig {
        name: format!("client-{logical}"),
        deadline,
        storage_url: postgres_url(),
        fenced_storage: true,
    }
}

/// The storage table exists (an exec client opens a storage session).
async fn storage_ready(resources: &[String]) {
    let url = postgres_url();
    Storage::prepare(&url, resources)
        .await
        .unwrap_or_else(|error| panic!("PostgreSQL must be reachable at {url}: {error}"));
}

fn misbehave(mode: &str, nth: u32) -> ExecProgram {
    ExecProgram::new(python(), [example("misbehave.py"), mode.to_string(), nth.to_string()])
}

/// Client 0 of 1 running `program`, with a 3 s deadline: a reply that must
/// come has seconds to, however slowly a loaded machine runs Python, and
/// one that must not still times out.
async fn connect(program: &ExecProgram) -> Result<ExecClient, RealError> {
    storage_ready(&[]).await;
    ExecClient::connect(program, 0, 1, &[], &config(0, Duration::from_secs(3))).await
}

async fn misbehaving(mode: &str, nth: u32) -> ExecClient {
    connect(&misbehave(mode, nth)).await.unwrap_or_else(|error| panic!("{mode}: {error}"))
}

/// Whether process `pid` is gone (or a zombie nobody reaped yet), waiting
/// up to 30 seconds for it (a hang guard: it is usually at once).
async fn gone(pid: u32) -> bool {
    for _ in 0..600 {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => return true,
            Ok(stat)
                if stat
                    .rsplit(')')
                    .next()
                    .is_some_and(|rest| rest.trim_start().starts_with('Z')) =>
            {
                return true
            }
            Ok(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    false
}

fn granted(outcome: &Outcome<lockcheck_workloads::Grant>) -> bool {
    matches!(outcome, Outcome::Ok(grant) if grant.fence.is_some() && grant.lease.is_some())
}

#[tokio::test]
async fn a_crash_is_info_and_the_next_operation_gets_a_fresh_process() {
    let mut client = misbehaving("crash", 3).await;
    let first = client.pid().expect("a running program");
    let grant = match client.acquire("lock", 1000).await {
        Outcome::Ok(grant) => grant,
        other => panic!("{other:?}"),
    };
    assert_eq!(grant.fence, Some(1), "the fence is the request id: {grant:?}");
    assert_eq!(client.release("lock", &grant).await, Outcome::Ok(()));
    assert_eq!(client.acquire("lock", 1000).await, Outcome::Info("exec-exited".into()));
    assert_eq!(client.pid(), None);
    client.reset().await;
    let second = client.pid().expect("a fresh program");
    assert_ne!(first, second);
    assert!(gone(first).await, "the crashed process {first} is gone");
    let grant = client.acquire("lock", 1000).await;
    assert!(granted(&grant), "{grant:?}");
    let Outcome::Ok(grant) = grant else { unreachable!() };
    assert_eq!(client.renew("lock", &grant, 1000).await, Outcome::Ok(()));
}

#[tokio::test]
async fn a_line_that_is_not_a_reply_is_exec_garbage() {
    let mut client = misbehaving("garbage", 2).await;
    assert!(granted(&client.acquire("lock", 1000).await), "the first request is answered");
    assert_eq!(client.acquire("lock", 1000).await, Outcome::Info("exec-garbage".into()));
    client.reset().await;
    assert!(granted(&client.acquire("lock", 1000).await));
}

#[tokio::test]
async fn a_reply_to_another_id_is_exec_garbage() {
    let mut client = misbehaving("wrong-id", 2).await;
    assert!(granted(&client.acquire("lock", 1000).await), "the first request is answered");
    assert_eq!(client.acquire("lock", 1000).await, Outcome::Info("exec-garbage".into()));
    client.reset().await;
    assert!(granted(&client.acquire("lock", 1000).await));
}

#[tokio::test]
async fn no_reply_by_the_deadline_is_a_timeout_and_the_process_is_killed() {
    let mut client = misbehaving("sleep", 2).await;
    assert!(granted(&client.acquire("lock", 1000).await), "the first request is answered");
    let sleeper = client.pid().expect("a running program");
    assert_eq!(client.acquire("lock", 1000).await, Outcome::Info("timeout".into()));
    client.reset().await;
    assert!(gone(sleeper).await, "the sleeping process {sleeper} was killed");
    assert!(granted(&client.acquire("lock", 1000).await));
}

#[tokio::test]
async fn the_programs_own_info_also_gets_a_fresh_process() {
    let mut client = misbehaving("info", 2).await;
    assert!(granted(&client.acquire("lock", 1000).await), "the first request is answered");
    let first = client.pid().expect("a running program");
    assert_eq!(client.acquire("lock", 1000).await, Outcome::Info("lost-connection".into()));
    client.reset().await;
    assert_ne!(client.pid(), Some(first));
    assert!(gone(first).await);
    assert!(granted(&client.acquire("lock", 1000).await));
}

#[tokio::test]
async fn a_stopped_program_times_out_as_a_paused_client_would() {
    let mut client = misbehaving("fine", 0).await;
    let pid = client.pid().expect("a running program");
    // The pause fault: SIGSTOP to the program's process group.
    let stopped = std::process::Command::new("kill")
        .args(["-STOP", "--", &format!("-{pid}")])
        .status()
        .expect("kill runs");
    assert!(stopped.success());
    assert_eq!(client.acquire("lock", 1000).await, Outcome::Info("timeout".into()));
    client.reset().await;
    assert!(gone(pid).await, "a stopped process is killed too");
    assert!(granted(&client.acquire("lock", 1000).await));
}

/// Whether process `pid` is stopped (state `T` in /proc).
fn stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('T'))
    })
}

/// Samples whether `pid` is stopped every 100 ms for `for_ms`: how many
/// samples found it stopped.
async fn stopped_samples(pid: u32, for_ms: u64) -> usize {
    let mut count = 0;
    for _ in 0..for_ms / 100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        count += usize::from(stopped(pid));
    }
    count
}

#[tokio::test]
async fn a_pause_in_flight_stops_the_program_with_its_request_outstanding_and_not_against_the_deadline(
) {
    // The deadline is 3 s; the program is stopped for 4 s while the acquire
    // is outstanding, and the acquire is granted all the same: the stall
    // is the program's own, so the call just takes longer.
    let stall = Stall::default();
    let mut client = misbehaving("fine", 0).await.freeze_on_stall(stall.clone());
    let pid = client.pid().expect("a running program");
    stall.request_at(4_000, StallPoint::InFlight);
    let started = std::time::Instant::now();
    let (outcome, stopped_for) =
        tokio::join!(client.acquire("lock", 1000), stopped_samples(pid, 3_500));
    assert!(granted(&outcome), "{outcome:?}");
    assert!(started.elapsed() >= Duration::from_millis(4_000), "{:?}", started.elapsed());
    assert!(stopped_for >= 15, "stopped in {stopped_for} of 35 samples");
    assert!(!stopped(pid), "continued once the stall was over");
    assert_eq!(stall.clear(), Some(StallPoint::InFlight));
    // Once struck, the next request is not stopped.
    let started = std::time::Instant::now();
    assert!(granted(&client.acquire("lock", 1000).await));
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn a_pause_anywhere_else_stops_the_whole_program_for_the_stall() {
    // At the workload's points (here after a grant), lockcheck's client
    // stalls and the program with it, its own threads included.
    let stall = Stall::default();
    let mut client = misbehaving("fine", 0).await.freeze_on_stall(stall.clone());
    let pid = client.pid().expect("a running program");
    assert!(granted(&client.acquire("lock", 1000).await));
    stall.request_at(1_500, StallPoint::AfterGrant);
    let (struck, stopped_for) =
        tokio::join!(stall.strike(StallPoint::AfterGrant), stopped_samples(pid, 1_200));
    assert_eq!(struck, Duration::from_millis(1_500));
    assert!(stopped_for >= 5, "stopped in {stopped_for} of 12 samples");
    assert!(!stopped(pid), "continued once the stall was over");
    assert!(granted(&client.acquire("lock", 1000).await));
}

#[tokio::test]
async fn another_protocol_version_is_a_setup_error_naming_the_command() {
    let program = misbehave("protocol", 0);
    let error = connect(&program).await.expect_err("hello fails");
    let text = error.to_string();
    assert!(matches!(error, RealError::Setup { .. }), "{error:?}");
    assert!(text.contains(&program.to_string()), "{text}");
    assert!(text.contains("protocol"), "{text}");
    assert!(text.contains("speaking protocol 0"), "the stderr tail: {text}");
}

#[tokio::test]
async fn a_program_that_exits_at_hello_is_a_setup_error_with_its_stderr() {
    let error = connect(&misbehave("no-hello", 0)).await.expect_err("hello fails");
    let text = error.to_string();
    assert!(text.contains("exited before answering hello"), "{text}");
    assert!(text.contains("exit status: 1"), "{text}");
    assert!(text.contains("no hello today"), "{text}");
}

#[tokio::test]
async fn a_missing_program_is_a_setup_error() {
    let error = connect(&ExecProgram::new("/nonexistent/lock-program", ["x"]))
        .await
        .expect_err("nothing to run");
    let text = error.to_string();
    assert!(text.contains("/nonexistent/lock-program x"), "{text}");
}

#[tokio::test]
async fn the_program_gets_the_protocols_environment_and_the_callers() {
    // Answers hello only with the right environment, then waits on stdin.
    let script = r#"read -r line
if [ "$LOCKCHECK_PROTOCOL/$LOCKCHECK_CLIENT/$LOCKCHECK_CLIENTS/$LOCKCHECK_DEADLINE_MS/$EXTRA" = "1/2/5/300/yes" ]
then echo '{"id":0,"type":"ok"}'
else echo "environment: $LOCKCHECK_PROTOCOL/$LOCKCHECK_CLIENT/$LOCKCHECK_CLIENTS/$LOCKCHECK_DEADLINE_MS/$EXTRA" >&2; exit 1
fi
exec cat >/dev/null"#;
    let program = ExecProgram::new("sh", ["-c", script]);
    storage_ready(&[]).await;
    let env = [("EXTRA".to_string(), "yes".to_string())];
    let client = ExecClient::connect(&program, 2, 5, &env, &config(2, Duration::from_millis(300)))
        .await
        .unwrap_or_else(|error| panic!("{error}"));
    let pid = client.pid().expect("running");
    drop(client);
    assert!(gone(pid).await, "the program dies with its client");
}

/// A gate run: four clients of one Python lock on one key, TTL 500 ms,
/// 6 s, with or without stalls, and its history checked.
async fn gate_run(script: &str, seed: u64, stalled: bool) -> (Vec<Event>, Analysis) {
    let name = unique(&format!("exec-{}", script.trim_end_matches(".py")));
    let (lock, resource) = (format!("{name}-lock"), format!("{name}-resource"));
    storage_ready(std::slice::from_ref(&resource)).await;
    let time_limit = Duration::from_secs(6);
    let kinds: &[FaultKind] = if stalled { &[FaultKind::Pause] } else { &[] };
    let stalls = split(schedule(kinds, &FaultTargets::clients(4, 500), time_limit, seed)).stalls;
    let options = DriveOptions {
        workload: WorkloadOptions {
            workload: Workload::FencedWrite,
            locks: vec![lock.clone()],
            resources: vec![resource.clone()],
            ttl_ms: 500,
            hold_ms: (0, 20),
            think_ms: (0, 40),
            send_fence: true,
            permits: None,
            keepalive_ms: None,
            lock_delay_ms: None,
            protection: Default::default(),
        },
        clients: 4,
        time_limit,
        seed,
        stalls,
    };
    let prefix = format!("{name}:");
    let env = [
        ("LOCKCHECK_REDIS_URL".to_string(), redis_url()),
        ("LOCKCHECK_KEY_PREFIX".to_string(), prefix.clone()),
    ];
    let program = ExecProgram::new(python(), [example(script)]);
    let connect = |logical: u32, _stall: Stall| {
        let (program, env) = (&program, &env);
        async move {
            let config = config(logical, Duration::from_millis(125));
            let client = ExecClient::connect(program, logical, 4, env, &config).await?;
            Ok::<_, RealError>((client, Storage::connect(&config).await?))
        }
    };
    let events = drive(&options, connect).await.unwrap_or_else(|error| panic!("{script}: {error}"));
    forget_keys(&[format!("{prefix}lock:{lock}"), format!("{prefix}fence:{lock}")]).await;
    let _ = Storage::prepare(&postgres_url(), std::slice::from_ref(&resource)).await;
    let analysis = common::analyzed(&events);
    let grants = events
        .iter()
        .filter(|event| event.f == Function::Acquire && event.event_type == EventType::Ok)
        .count();
    assert!(grants >= 10, "only {grants} grants\n{}", describe(&name, &events, &analysis));
    (events, analysis)
}

/// Deletes the run's Redis keys (the fence counter never expires).
async fn forget_keys(keys: &[String]) {
    let url = redis_url();
    let client = redis::Client::open(url.as_str()).expect("a Redis URL");
    let mut connection =
        client.get_multiplexed_async_connection().await.expect("Redis is reachable");
    let _: () = redis::cmd("DEL").arg(keys).query_async(&mut connection).await.expect("DEL");
}

fn verdict(analysis: &Analysis, checker: &str) -> Option<Verdict> {
    analysis.verdict_of(checker)
}

/// Each checker's verdict and first violation; the history is saved.
fn describe(name: &str, events: &[Event], analysis: &Analysis) -> String {
    let path = std::env::temp_dir().join(format!("lockcheck-{name}.jsonl"));
    let saved = std::fs::File::create(&path)
        .and_then(|file| write_events(std::io::BufWriter::new(file), events));
    let mut lines = vec![format!(
        "{name}: {} (history {})",
        analysis.verdict.as_str(),
        match saved {
            Ok(()) => format!("in {}", path.display()),
            Err(error) => format!("not saved: {error}"),
        }
    )];
    for result in &analysis.results {
        let verdict = result.verdict.map_or("n/a", |verdict| verdict.as_str());
        let first = result.violations.first().map_or("", |v| v.explanation.as_str());
        lines.push(format!("  {}: {verdict} {first}", result.checker));
    }
    lines.join("\n")
}

fn stalls(events: &[Event]) -> usize {
    events.iter().filter(|event| event.process == Process::Nemesis).count() / 2
}

#[tokio::test]
async fn the_python_redis_lock_without_faults_is_valid() {
    let (events, analysis) = gate_run("redis_lock.py", 1, false).await;
    assert_eq!(analysis.verdict, Verdict::Valid, "{}", describe("exec-clean", &events, &analysis));
}

#[tokio::test]
async fn the_python_redis_lock_under_stalls_keeps_fenced_storage_safe() {
    let (events, analysis) = gate_run("redis_lock.py", 1, true).await;
    let text = describe("exec-stall", &events, &analysis);
    assert!(stalls(&events) > 0, "no stall happened\n{text}");
    assert_eq!(verdict(&analysis, RESOURCE_SAFETY), Some(Verdict::Valid), "{text}");
    // The stalled holder's release fails `not-held`: the lock itself stays
    // linearizable (what tells it from the DEL-release one below).
    assert_eq!(verdict(&analysis, LINEARIZABILITY), Some(Verdict::Valid), "{text}");
}

#[tokio::test]
async fn the_python_del_release_lock_under_stalls_breaks_mutual_exclusion_and_linearizability() {
    let mut described = Vec::new();
    for seed in 1..=3 {
        let (events, analysis) = gate_run("redis_lock_del_release.py", seed, true).await;
        // A stalled holder's DEL deletes the next holder's lock: its
        // release succeeds although the lock was not its own any more.
        let invalid = |checker| verdict(&analysis, checker) == Some(Verdict::Invalid);
        if invalid(MUTUAL_EXCLUSION) && invalid(LINEARIZABILITY) {
            return;
        }
        described.push(describe("exec-del-release", &events, &analysis));
    }
    panic!("three seeds and no violation:\n{}", described.join("\n"));
}
