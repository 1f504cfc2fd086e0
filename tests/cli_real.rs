//! `lockcheck check` against real servers that the tool starts itself:
//! verdicts of docs/truth-table.md, usage errors, a missing server binary, and no
//! server left running however the tool ends.

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{both, lockcheck};

/// Each checker's verdict in a JSON report.
fn verdicts(output: &Output) -> Vec<(String, String)> {
    let document: serde_json::Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|error| panic!("not a JSON report ({error}): {}", both(output)));
    document["histories"][0]["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|result| {
            (
                result["checker"].as_str().unwrap_or_default().to_string(),
                result["verdict"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn verdict_of(verdicts: &[(String, String)], checker: &str) -> String {
    verdicts
        .iter()
        .find(|(name, _)| name == checker)
        .map(|(_, verdict)| verdict.clone())
        .unwrap_or_default()
}

fn check(backend: &str, nemesis: &str, seconds: u32) -> Output {
    let time_limit = format!("{seconds}s");
    let args = [
        "check",
        "--backend",
        backend,
        "--nemesis",
        nemesis,
        "--time-limit",
        &time_limit,
        "--ttl",
        "500ms",
        "--seed",
        "3",
        "--no-store",
        "--format",
        "json",
    ];
    lockcheck(&args)
}

#[test]
fn a_clean_redis_run_is_valid_and_a_stalled_holder_breaks_mutual_exclusion_only() {
    let clean = check("redis", "none", 3);
    assert_eq!(clean.status.code(), Some(0), "{}", both(&clean));
    let stalled = check("redis", "pause", 6);
    assert_eq!(stalled.status.code(), Some(1), "{}", both(&stalled));
    let found = verdicts(&stalled);
    assert_eq!(verdict_of(&found, "mutual-exclusion"), "invalid", "{found:?}");
    assert_eq!(verdict_of(&found, "resource-safety"), "valid", "fenced storage: {found:?}");
}

#[test]
fn a_postgres_lease_table_breaks_under_stalls_and_advisory_locks_do_not() {
    let lease = check("postgres-lease", "pause", 6);
    assert_eq!(lease.status.code(), Some(1), "{}", both(&lease));
    assert_eq!(verdict_of(&verdicts(&lease), "resource-safety"), "valid");
    let advisory = check("postgres-advisory", "pause", 4);
    assert_eq!(advisory.status.code(), Some(0), "a session lock has no TTL: {}", both(&advisory));
}

#[test]
fn faults_a_backend_cannot_take_and_bad_urls_are_usage_errors() {
    let usage = |args: &[&str], says: &str| {
        let output = lockcheck(args);
        assert_eq!(output.status.code(), Some(64), "{args:?}: {}", both(&output));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(says), "{args:?} must say {says:?}: {}", both(&output));
    };
    usage(&["check", "--backend", "redis", "--nemesis", "loss"], "loss is simulated only");
    usage(&["check", "--backend", "redis", "--nemesis", "gc"], "unknown fault \"gc\"");
    usage(&["check", "--backend", "redlock", "--redis-url", "redis://x:1"], "five is usual");
    // etcd, written in Go, ignores libfaketime: said, never silently done.
    usage(&["check", "--backend", "etcd", "--nemesis", "clock"], "libfaketime");
    usage(&["check", "--backend", "redlock", "--nemesis", "failover"], "single-Redis");
    usage(
        &["check", "--backend", "redis", "--nemesis", "partition", "--partition-shapes", "ring"],
        "none of the partition shapes",
    );
    usage(
        &["check", "--backend", "redis", "--nemesis", "partition", "--partition-shapes", "star"],
        "unknown partition shape",
    );
    usage(
        &[
            "check",
            "--backend",
            "redis",
            "--nemesis",
            "clock",
            "--redis-url",
            "redis://127.0.0.1:6379",
        ],
        "lockcheck starts itself",
    );
}

#[test]
fn a_missing_server_binary_exits_69_naming_its_package() {
    // A PATH with the tools lockcheck needs but no redis-server.
    let bin = std::env::temp_dir().join(format!("lockcheck-no-redis-{}", std::process::id()));
    std::fs::create_dir_all(&bin).expect("a scratch dir");
    let setpriv = String::from_utf8(
        Command::new("sh").args(["-c", "command -v setpriv"]).output().expect("sh").stdout,
    )
    .expect("a path");
    let _ = std::os::unix::fs::symlink(setpriv.trim(), bin.join("setpriv"));
    let output = Command::new(env!("CARGO_BIN_EXE_lockcheck"))
        .args(["check", "--backend", "redis", "--time-limit", "1s", "--no-store"])
        .args(["--postgres-url", "postgres://postgres@127.0.0.1:1/none"])
        .env("PATH", &bin)
        .output()
        .expect("the lockcheck binary runs");
    let _ = std::fs::remove_dir_all(&bin);
    assert_eq!(output.status.code(), Some(69), "{}", both(&output));
    assert!(String::from_utf8_lossy(&output.stderr).contains("redis-server"), "{}", both(&output));
}

/// Processes whose command line names one of this run's private servers
/// (their data directories are `lockcheck-<kind>-<pid>-<n>`).
fn servers_of(pid: u32) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if ["redis", "postgres"]
            .iter()
            .any(|kind| cmdline.contains(&format!("lockcheck-{kind}-{pid}-")))
        {
            found.push(cmdline);
        }
    }
    found
}

#[test]
fn ctrl_c_mid_run_leaves_no_server_running() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_lockcheck"))
        .args(["check", "--backend", "redis", "--time-limit", "60s", "--no-store"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the lockcheck binary runs");
    let pid = child.id();
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let mut line = String::new();
    while !line.contains("private redis") {
        line.clear();
        assert!(stderr.read_line(&mut line).expect("stderr reads") > 0, "exited before starting");
    }
    assert!(!servers_of(pid).is_empty(), "the servers are not where this test looks");
    let status = Command::new("kill").args(["-INT", &pid.to_string()]).status().expect("kill runs");
    assert!(status.success());
    let status = child.wait().expect("lockcheck exits");
    assert_eq!(status.code(), Some(130), "Ctrl-C exits 130");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !servers_of(pid).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(servers_of(pid), Vec::<String>::new(), "servers outlived lockcheck");
}

/// How many nemesis events (fault starts and stops) the run recorded.
fn nemesis_events(output: &Output) -> u64 {
    let document: serde_json::Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|error| panic!("not a JSON report ({error}): {}", both(output)));
    document["histories"][0]["summary"]["nemesis_events"].as_u64().unwrap_or_default()
}

fn check_with(args: &[&str]) -> Output {
    let mut all = vec!["check", "--ttl", "500ms", "--seed", "1", "--no-store", "--format", "json"];
    all.extend_from_slice(args);
    lockcheck(&all)
}

#[test]
fn a_redis_killed_without_persistence_repeats_tokens_and_with_it_stays_safe() {
    let forgetful = check_with(&["--backend", "redis", "--nemesis", "kill", "--time-limit", "10s"]);
    assert_eq!(forgetful.status.code(), Some(1), "{}", both(&forgetful));
    let found = verdicts(&forgetful);
    assert!(
        ["mutual-exclusion", "fence-monotonicity"]
            .iter()
            .any(|checker| verdict_of(&found, checker) == "invalid"),
        "{found:?}"
    );
    assert!(nemesis_events(&forgetful) >= 2, "no kill struck: {}", both(&forgetful));
    let persistent = check_with(&[
        "--backend",
        "redis",
        "--nemesis",
        "kill",
        "--persistent",
        "--time-limit",
        "10s",
    ]);
    assert_eq!(persistent.status.code(), Some(0), "appendfsync always: {}", both(&persistent));
    assert!(nemesis_events(&persistent) >= 2, "no kill struck: {}", both(&persistent));
}

#[test]
fn redlock_with_a_delayed_restart_stays_safe_when_instances_are_killed() {
    let output = check_with(&["--backend", "redlock", "--nemesis", "kill", "--time-limit", "10s"]);
    assert_eq!(output.status.code(), Some(0), "{}", both(&output));
    assert!(nemesis_events(&output) >= 2, "no kill struck: {}", both(&output));
}

#[test]
fn a_redis_server_stopped_and_continued_stays_safe() {
    let output = check_with(&["--backend", "redis", "--nemesis", "sigstop", "--time-limit", "8s"]);
    assert_eq!(output.status.code(), Some(0), "{}", both(&output));
    assert!(nemesis_events(&output) >= 2, "no SIGSTOP struck: {}", both(&output));
}

#[test]
fn killed_sessions_free_session_locks_while_their_holders_believe_but_not_lease_tables() {
    // Real timing varies from run to run: a violated cell must show within
    // a few seeds, as the simulated truth table's do within 50.
    for backend in ["postgres-advisory", "mysql-get-lock"] {
        let mut seen = Vec::new();
        let found = (1..=4).any(|seed| {
            let seed = seed.to_string();
            let output = lockcheck(&[
                "check",
                "--backend",
                backend,
                "--nemesis",
                "conn-kill",
                "--time-limit",
                "8s",
                "--ttl",
                "500ms",
                "--seed",
                &seed,
                "--no-store",
                "--format",
                "json",
            ]);
            assert!(nemesis_events(&output) >= 2, "{backend}: no conn-kill: {}", both(&output));
            let verdicts = verdicts(&output);
            seen.push(format!("seed {seed}: {verdicts:?}"));
            output.status.code() == Some(1)
                && verdict_of(&verdicts, "mutual-exclusion") == "invalid"
        });
        assert!(found, "{backend} under conn-kill: no violation in 4 seeds:\n{}", seen.join("\n"));
    }
    let lease = check_with(&[
        "--backend",
        "postgres-lease",
        "--nemesis",
        "conn-kill",
        "--time-limit",
        "8s",
    ]);
    assert_eq!(lease.status.code(), Some(0), "{}", both(&lease));
    assert!(nemesis_events(&lease) >= 2, "no conn-kill: {}", both(&lease));
    let redis = check_with(&["--backend", "redis", "--nemesis", "conn-kill", "--no-store"]);
    assert_eq!(redis.status.code(), Some(64), "{}", both(&redis));
}

/// A real payments run, fault-free, as JSON with its history: the verdicts
/// and the operations of each step.
fn payments(extra: &[&str]) -> (Output, String) {
    let mut args = vec!["--nemesis", "none", "--time-limit", "3s", "--ttl", "500ms", "--seed", "5"];
    args.extend_from_slice(extra);
    payments_run(&args)
}

/// A real payments run with `args`, as JSON with its history.
fn payments_run(extra: &[&str]) -> (Output, String) {
    let dir = tempfile_dir();
    let store = dir.to_string_lossy().to_string();
    let mut args = vec![
        "check",
        "--backend",
        "redis",
        "--workload",
        "payments",
        "--store",
        &store,
        "--format",
        "json",
    ];
    args.extend_from_slice(extra);
    let output = lockcheck(&args);
    // store/<test>/<time>/history.jsonl
    let written = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(|test| std::fs::read_dir(test.path()).into_iter().flatten().flatten())
        .map(|run| run.path().join("history.jsonl"))
        .find(|history| history.is_file())
        .and_then(|history| std::fs::read_to_string(history).ok())
        .unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    (output, written)
}

fn tempfile_dir() -> std::path::PathBuf {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("lockcheck-cli-real-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary folder");
    dir
}

#[test]
fn a_real_payments_run_records_every_step_through_the_real_queue_and_provider() {
    for (extra, target) in [
        (&["--protection", "idempotency-key"][..], "\"key\":\"provider\""),
        (&["--protection", "unique", "--queue", "rabbitmq"][..], "\"key\":\"payments\""),
    ] {
        let (output, history) = payments(extra);
        assert_eq!(output.status.code(), Some(0), "{extra:?}: {}", both(&output));
        let verdicts = verdicts(&output);
        assert_eq!(verdict_of(&verdicts, "exactly-once"), "valid", "{extra:?}: {verdicts:?}");
        for step in ["enqueue", "deliver", "charge", "ack"] {
            let ok = format!("\"type\":\"ok\",\"f\":\"{step}\"");
            assert!(history.contains(&ok), "{extra:?}: no {step} ok in the history");
        }
        assert!(history.contains(target), "{extra:?}: no charge at {target}");
    }
}

#[test]
fn sigstop_and_kill_strike_the_payments_postgresql_and_no_order_is_lost_or_doubled() {
    // No lock is taken: every stop and kill strikes the PostgreSQL that
    // holds the queue, the payments table and the provider's keys (seed 5
    // draws both within 12 s).
    let (output, history) = payments_run(&[
        "--protection",
        "unique",
        "--nemesis",
        "sigstop,kill",
        "--time-limit",
        "12s",
        "--ttl",
        "1s",
        "--seed",
        "5",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", both(&output));
    assert_eq!(verdict_of(&verdicts(&output), "exactly-once"), "valid", "{}", both(&output));
    for fault in ["sigstop", "kill"] {
        let struck = format!("\"fault\":\"{fault}\",\"targets\":[\"postgres-payments\"]");
        assert!(history.contains(&struck), "no {fault} of the payments PostgreSQL");
    }
    assert!(!history.contains("\"targets\":[\"redis-0\"]"), "the idle Redis was struck");
    // Orders were charged after the PostgreSQL came back.
    let last_stop = history.rfind("\"f\":\"stop\"").expect("a fault ended");
    assert!(history[last_stop..].contains("\"type\":\"ok\",\"f\":\"charge\""));
}

#[test]
fn payments_options_that_do_not_apply_are_usage_errors() {
    for args in [
        &["check", "--backend", "redis", "--queue", "rabbitmq"][..],
        &["check", "--backend", "redis", "--provider", "stripe"][..],
        &["check", "--queue", "kafka", "--workload", "payments"][..],
        &["check", "--backend", "redis", "--workload", "payments", "--storage", "s3-put"][..],
    ] {
        let output = lockcheck(args);
        assert_eq!(output.status.code(), Some(64), "{args:?}: {}", both(&output));
    }
}
