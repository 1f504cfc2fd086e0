//! `lockcheck check --backend exec -- PROGRAM`: a lock implementation in any
//! language as a CI gate. The Python examples (redis-py, Debian's
//! `python3-redis`, run by /usr/bin/python3 or $LOCKCHECK_PYTHON) against a
//! Redis lockcheck starts itself: the correct lock passes the gate under
//! stalls, the one that releases by DEL fails it; a program that crashes is
//! reported and replaced. The Rust example (examples/redis_lock.rs) passes
//! and fails the same gate. A pause between two round trips of a program's
//! operation holds its second command until the stall is over (Redis's own
//! clock shows the gap), and leaves the correct lock valid; a program that
//! takes its token before its grant fails the gate within three 20 s runs,
//! and one that renews without a compare in one.

use std::process::{Command, Output};

mod common;
use common::{both, lockcheck};

fn python() -> String {
    std::env::var("LOCKCHECK_PYTHON").unwrap_or_else(|_| "/usr/bin/python3".to_string())
}

/// A gated exec run of `program` (under examples/python) with `nemesis`.
fn gate(program: &str, nemesis: &str, seed: u64) -> Output {
    let script = format!("examples/python/{program}");
    gate_command(&[&python(), &script], nemesis, seed)
}

/// The Rust example: `cargo test` builds it beside the binary; a test run
/// of this file alone builds it here.
fn rust_example() -> String {
    let binary = std::path::Path::new(env!("CARGO_BIN_EXE_lockcheck"));
    let example = binary.parent().expect("the binary's folder").join("examples").join("redis_lock");
    if !example.is_file() {
        let built = Command::new(env!("CARGO"))
            .args(["build", "--quiet", "--example", "redis_lock"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("cargo runs");
        assert!(built.success(), "cargo build --example redis_lock failed");
    }
    example.display().to_string()
}

/// A gated exec run of `command` with `nemesis`.
fn gate_command(command: &[&str], nemesis: &str, seed: u64) -> Output {
    let seed = seed.to_string();
    let options = ["--nemesis", nemesis, "--ttl", "500ms", "--time-limit", "8s", "--seed", &seed];
    exec_run(&[&options[..], &GATE, &["--no-store"]].concat(), command)
}

/// What the gate asks: the lock's own promises and the storage's.
const GATE: [&str; 2] = ["--gate", "resource-safety,linearizability,fence-monotonicity"];

/// `lockcheck check --backend exec --servers redis OPTIONS -- COMMAND`.
fn exec_run(options: &[&str], command: &[&str]) -> Output {
    let mut args = vec!["check", "--backend", "exec", "--servers", "redis"];
    args.extend_from_slice(options);
    args.push("--");
    args.extend_from_slice(command);
    lockcheck(&args)
}

#[test]
fn redis_py_is_installed_for_the_examples() {
    let status = Command::new(python()).args(["-c", "import redis"]).status();
    assert!(
        status.is_ok_and(|status| status.success()),
        "{} cannot import redis: apt-get install -y python3-redis (or set LOCKCHECK_PYTHON)",
        python()
    );
}

#[test]
fn the_correct_python_lock_passes_the_gate_and_the_del_release_one_fails_it() {
    let clean = gate("redis_lock.py", "none", 1);
    assert_eq!(clean.status.code(), Some(0), "{}", both(&clean));
    let stalled = gate("redis_lock.py", "pause", 1);
    assert_eq!(stalled.status.code(), Some(0), "{}", both(&stalled));
    // Stalls break mutual exclusion for any TTL lock: the report says so,
    // and the gate, on the storage and the lock's own promises, passes.
    assert!(String::from_utf8_lossy(&stalled.stdout).contains("mutual-exclusion"));
    let mut outputs = Vec::new();
    for seed in 1..=4 {
        let broken = gate("redis_lock_del_release.py", "pause", seed);
        if broken.status.code() == Some(1) {
            return;
        }
        outputs.push(both(&broken));
    }
    panic!("release by DEL passed the gate on 4 seeds:\n{}", outputs.join("\n---\n"));
}

#[test]
fn the_rust_example_passes_the_gate_and_fails_it_releasing_by_del() {
    let example = rust_example();
    let stalled = gate_command(&[&example], "pause", 1);
    assert_eq!(stalled.status.code(), Some(0), "{}", both(&stalled));
    let mut outputs = Vec::new();
    for seed in 1..=4 {
        let broken = gate_command(&[&example, "--del-release"], "pause", seed);
        if broken.status.code() == Some(1) {
            return;
        }
        outputs.push(both(&broken));
    }
    panic!("release by DEL passed the gate on 4 seeds:\n{}", outputs.join("\n---\n"));
}

#[test]
fn killed_programs_are_crashed_clients_and_the_correct_lock_survives_them() {
    let python = python();
    let options = [
        "--nemesis",
        "client-kill",
        "--ttl",
        "500ms",
        "--time-limit",
        "6s",
        "--seed",
        "1",
        "--no-store",
        "--format",
        "json",
    ];
    let output = exec_run(&options, &[&python, "examples/python/redis_lock.py"]);
    assert_eq!(output.status.code(), Some(0), "{}", both(&output));
    let json: serde_json::Value =
        serde_json::from_slice(&output.stdout).unwrap_or_else(|_| panic!("{}", both(&output)));
    let nemesis = json["histories"][0]["summary"]["nemesis_events"].as_u64().unwrap_or(0);
    assert!(nemesis >= 2, "kills are recorded: {}", both(&output));
    assert!(String::from_utf8_lossy(&output.stderr).contains("SIGKILL"), "{}", both(&output));
}

#[test]
fn a_crashing_program_is_reported_and_replaced_and_bad_usage_is_exit_64() {
    let python = python();
    let output = lockcheck(&[
        "check",
        "--backend",
        "exec",
        "--nemesis",
        "none",
        "--time-limit",
        "3s",
        "--seed",
        "1",
        "--no-store",
        "--format",
        "json",
        "--",
        &python,
        "examples/python/misbehave.py",
        "crash",
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("misbehave"), "the program's stderr tail is shown: {}", both(&output));
    let json: serde_json::Value =
        serde_json::from_slice(&output.stdout).unwrap_or_else(|_| panic!("{}", both(&output)));
    assert!(json["histories"][0]["summary"]["ops"].as_u64().unwrap_or(0) > 10, "{}", both(&output));

    let missing =
        lockcheck(&["check", "--backend", "exec", "--time-limit", "1s", "--", "/nonexistent/lock"]);
    assert_eq!(missing.status.code(), Some(69), "{}", both(&missing));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/lock"));

    for args in [
        &["check", "--backend", "exec"][..],
        &["check", "--backend", "redis", "--servers", "redis"],
        &["check", "--backend", "redis", "--", "true"],
        &["check", "--backend", "exec", "--servers", "oracle", "--", "true"],
        &["check", "--backend", "exec", "--gate", "happiness", "--", "true"],
        &["check", "--backend", "redis", "--nemesis", "client-kill"],
    ] {
        let output = lockcheck(args);
        assert_eq!(output.status.code(), Some(64), "{args:?}: {}", both(&output));
    }
}

/// A folder of this test's own, empty.
fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("lockcheck-exec-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch folder");
    dir
}

/// The nemesis events of the one history stored under `store`.
fn nemesis_stops(store: &std::path::Path) -> Vec<serde_json::Value> {
    let history = common::files_under(store)
        .into_iter()
        .find(|file| file.ends_with("history.jsonl"))
        .expect("the run's history is stored");
    std::fs::read_to_string(history)
        .expect("the history reads")
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).expect("a JSON line"))
        .filter(|event| event["process"] == "nemesis" && event["f"] == "stop")
        .collect()
}

#[test]
fn a_pause_between_commands_holds_a_programs_next_command_for_the_stall() {
    let dir = scratch("round-trips");
    let (log, store) = (dir.join("gaps.log"), dir.join("store"));
    let (log_arg, store_arg) = (log.display().to_string(), store.display().to_string());
    let python = python();
    let options = [
        "--nemesis",
        "pause",
        "--pause-at",
        "between-commands",
        "--ttl",
        "500ms",
        "--time-limit",
        "6s",
        "--seed",
        "1",
        "--store",
        &store_arg,
    ];
    let output = exec_run(&options, &[&python, "examples/python/two_round_trips.py", &log_arg]);
    // No real lock behind it: the checkers say so (exit 1), and the run
    // itself went through.
    assert_eq!(output.status.code(), Some(1), "{}", both(&output));
    let struck: Vec<u64> = nemesis_stops(&store)
        .iter()
        .filter(|stop| stop["value"]["struck"] == "between-commands")
        .filter_map(|stop| stop["value"]["stall_ms"].as_u64())
        .collect();
    assert!(!struck.is_empty(), "no stall struck between commands: {}", both(&output));
    // Each operation's two commands, as far apart as Redis saw them: the
    // ones a stall struck waited it out.
    let gaps: Vec<f64> = std::fs::read_to_string(&log)
        .expect("the program wrote its gaps")
        .lines()
        .filter_map(|line| line.split_whitespace().nth(1)?.parse().ok())
        .collect();
    let shortest = *struck.iter().min().expect("a stall") as f64;
    let held = gaps.iter().filter(|&&gap| gap >= shortest).count();
    assert!(held >= 1, "no operation's second command waited {shortest} ms: {} gaps", gaps.len());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn between_round_trips_the_correct_lock_passes_the_gate() {
    let dir = scratch("between");
    let store = dir.join("store");
    let store_arg = store.display().to_string();
    let python = python();
    let options = ["--nemesis", "pause", "--pause-at", "between-commands", "--time-limit", "10s"];
    let stored = ["--seed", "1", "--store", &store_arg];
    let correct = exec_run(
        &[&options[..], &GATE, &stored].concat(),
        &[&python, "examples/python/redis_lock.py"],
    );
    assert_eq!(correct.status.code(), Some(0), "{}", both(&correct));
    let struck = nemesis_stops(&store)
        .iter()
        .filter(|stop| stop["value"]["struck"] == "between-commands")
        .count();
    assert!(struck > 0, "no stall struck between commands: {}", both(&correct));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Gated 20 s runs of `program` under the default pauses, one per seed of
/// `seeds` until one fails the gate: a program's stalls take turns between
/// commands (an acquire's aimed to end once the lock looks free) and
/// before a renewal (aimed to end once another client holds the lock).
fn found_within(program: &str, seeds: std::ops::RangeInclusive<u64>) {
    let script = format!("examples/python/{program}");
    let mut outputs = Vec::new();
    for seed in seeds {
        let seed = seed.to_string();
        let options = ["--nemesis", "pause", "--time-limit", "20s", "--seed", &seed, "--no-store"];
        let output = exec_run(&[&options[..], &GATE].concat(), &[&python(), &script]);
        let stdout = String::from_utf8_lossy(&output.stdout);
        let found = stdout
            .lines()
            .any(|line| line.starts_with("linearizability") && line.contains("INVALID"));
        if output.status.code() == Some(1) && found {
            return;
        }
        outputs.push(both(&output));
    }
    panic!("{program} passed the gate:\n{}", outputs.join("\n---\n"));
}

/// Found at each of the seeds 1 to 6 on an idle machine; a loaded CI run
/// once missed seed 1 (the lock taken by another client as the program
/// resumed), so the test gives it three seeds.
#[test]
fn a_program_that_takes_its_token_before_its_grant_fails_the_gate() {
    found_within("redis_lock_token_first.py", 1..=3);
}

/// Found at each of the seeds 1 to 6 on an idle machine; a loaded CI run
/// once missed seed 1 (the next holder released before the late renewal
/// came: the stall now ends at a fresh grant), so it gets three seeds too.
#[test]
fn a_program_that_renews_without_a_compare_fails_the_gate() {
    found_within("redis_lock_blind_renew.py", 1..=3);
}
