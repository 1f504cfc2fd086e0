//! Coverage as a user meets it: a valid run whose faults reached no
//! vulnerable window says "valid, but vacuous", and `--require-coverage`
//! fails it (exit 1, as a gate's violation) in `check` and `analyze` alike.

use std::path::PathBuf;
use std::process::Output;

mod common;
use common::{both, lockcheck};

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A fresh, empty folder for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("cli_coverage-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A client cut that catches no holder whose work outlasts its lease.
const VACUOUS: &[&str] = &[
    "check",
    "--no-store",
    "--no-shrink",
    "--nemesis",
    "partition",
    "--time-limit",
    "5s",
    "--seed",
    "1",
];

#[test]
fn a_vacuous_pass_says_so_and_fails_only_when_coverage_is_required() {
    let output = lockcheck(VACUOUS);
    assert_eq!(output.status.code(), Some(0), "{}", both(&output));
    let text = stdout(&output);
    assert!(text.contains("verdict: valid\n"), "{}", both(&output));
    assert!(
        text.contains(
            "valid, but vacuous: 0 of 1 client cuts caught a holder whose work outlasted its lease"
        ),
        "{}",
        both(&output)
    );

    let required: Vec<&str> = VACUOUS.iter().copied().chain(["--require-coverage"]).collect();
    let output = lockcheck(&required);
    assert_eq!(output.status.code(), Some(1), "{}", both(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--require-coverage: valid, but vacuous"), "{}", both(&output));
}

#[test]
fn a_covered_pass_and_a_run_without_faults_pass_the_requirement() {
    // Two kills of a Redlock's instances while keys were held.
    let output = lockcheck(&[
        "check",
        "--no-store",
        "--no-shrink",
        "--backend",
        "sim-redlock",
        "--nemesis",
        "kill",
        "--time-limit",
        "10s",
        "--seed",
        "16",
        "--require-coverage",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", both(&output));
    let text = stdout(&output);
    assert!(text.contains("verdict: valid\n"), "{}", both(&output));
    assert!(text.contains("coverage: 2 of 2 faults reached a vulnerable window (kill 2/2: a kill while a key was held)"), "{}", both(&output));
    assert!(!text.contains("vacuous"), "{}", both(&output));

    // No faults: nothing to cover, nothing vacuous.
    let output = lockcheck(&[
        "check",
        "--no-store",
        "--no-shrink",
        "--workload",
        "mutex",
        "--nemesis",
        "none",
        "--time-limit",
        "5s",
        "--seed",
        "2",
        "--require-coverage",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", both(&output));
    assert!(!stdout(&output).contains("coverage"), "{}", both(&output));
}

/// One holder within its lease, and a pause of it that ends before the
/// lease does; then a kill while nobody holds anything.
const HISTORY: &str = r#"{"index":0,"time":100000000,"process":1,"type":"invoke","f":"acquire","key":"l","value":{"ttl_ms":1000}}
{"index":1,"time":110000000,"process":1,"type":"ok","f":"acquire","key":"l","value":{"fence":1}}
{"index":2,"time":200000000,"process":"nemesis","type":"info","f":"start","key":null,"value":{"fault":"pause","targets":["client-1"],"processes":[1],"stall_ms":300}}
{"index":3,"time":500000000,"process":"nemesis","type":"info","f":"stop","key":null,"value":{"fault":"pause","targets":["client-1"],"processes":[1],"stall_ms":300,"struck":"after-grant"}}
{"index":4,"time":600000000,"process":1,"type":"invoke","f":"release","key":"l","value":{"fence":1}}
{"index":5,"time":610000000,"process":1,"type":"ok","f":"release","key":"l","value":null}
{"index":6,"time":700000000,"process":"nemesis","type":"info","f":"start","key":null,"value":{"fault":"kill","targets":["redis"],"persistent":false}}
{"index":7,"time":800000000,"process":"nemesis","type":"info","f":"stop","key":null,"value":{"fault":"kill","targets":["redis"],"persistent":false}}
"#;

#[test]
fn analyze_reports_coverage_of_a_recorded_history_and_can_require_it() {
    let dir = scratch("analyze");
    let path = dir.join("history.jsonl");
    std::fs::write(&path, HISTORY).unwrap();
    let path = path.to_str().unwrap();

    let output = lockcheck(&["analyze", path]);
    assert_eq!(output.status.code(), Some(0), "{}", both(&output));
    assert!(
        stdout(&output).contains(
            "valid, but vacuous: 0 of 1 pauses reached a stall longer than the holder's remaining lease; \
             0 of 1 kills struck while a key was held"
        ),
        "{}",
        both(&output)
    );

    let output = lockcheck(&["analyze", "--require-coverage", path]);
    assert_eq!(output.status.code(), Some(1), "{}", both(&output));

    // JSON carries each fault's coverage.
    let output = lockcheck(&["analyze", "--format", "json", path]);
    let document: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let faults = &document["histories"][0]["coverage"]["faults"];
    assert_eq!(faults[0]["description"], "struck no holder past its lease", "{document}");
    assert_eq!(faults[1]["description"], "no lock was held when it struck", "{document}");
    assert_eq!(faults[1]["reached"], false);
}

#[test]
fn the_simulated_matrix_counts_covered_runs_and_calls_a_pass_that_covered_none_vacuous() {
    let output = lockcheck(&[
        "matrix",
        "--sim",
        "--backends",
        "sim-lease-table",
        "--safe-seeds",
        "2",
        "--violated-within",
        "5",
        "--time-limit",
        "10s",
    ]);
    let text = stdout(&output);
    let row = |faults: &str| -> String {
        text.lines()
            .find(|line| line.split_whitespace().nth(1) == Some(faults))
            .unwrap_or_else(|| panic!("no {faults} row:\n{}", both(&output)))
            .to_string()
    };
    // Without faults: a bare valid, as before.
    let none = row("none");
    assert!(none.contains("valid over 2 seeds") && !none.contains("covered"), "{none}");
    // A client clock skew reaches every lock held while it is on; the lease
    // table keeps time on its server, so the covered runs stay valid.
    let skew = row("skew");
    assert!(
        skew.contains("valid over 2 seeds, covered 2/2") && !skew.contains("vacuous"),
        "{skew}"
    );
    // A client cut that caught no holder whose work outlasted its lease:
    // valid, but vacuous.
    let partition = row("partition");
    assert!(partition.contains("vacuous: valid over 2 seeds, covered 0/2"), "{partition}");
    // The pause that shows the violation reached its window.
    let pause = row("pause");
    assert!(pause.contains("mutual-exclusion at seed 0, covered 1/1"), "{pause}");
    assert_eq!(output.status.code(), Some(0), "{}", both(&output));
}
