//! `lockcheck check --backend exec -- PROGRAM`: a lock implementation in any
//! language as a CI gate. The Python examples (redis-py, Debian's
//! `python3-redis`, run by /usr/bin/python3 or $LOCKCHECK_PYTHON) against a
//! Redis lockcheck starts itself: the correct lock passes the gate under
//! stalls, the one that releases by DEL fails it; a program that crashes is
//! reported and replaced. The Rust example (examples/redis_lock.rs) passes
//! and fails the same gate.

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
    let mut args = vec![
        "check",
        "--backend",
        "exec",
        "--servers",
        "redis",
        "--nemesis",
        nemesis,
        "--gate",
        "resource-safety,linearizability,fence-monotonicity",
        "--ttl",
        "500ms",
        "--time-limit",
        "8s",
        "--seed",
        &seed,
        "--no-store",
        "--",
    ];
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
    let output = lockcheck(&[
        "check",
        "--backend",
        "exec",
        "--servers",
        "redis",
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
        "--",
        &python,
        "examples/python/redis_lock.py",
    ]);
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
