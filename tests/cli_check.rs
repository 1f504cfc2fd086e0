//! `lockcheck check` as a user meets it: the seed printed first, exit codes,
//! determinism, the store, and the replay line.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn lockcheck(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lockcheck"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("lockcheck runs")
}

/// A replay line's arguments, after its program: `lockcheck` when it is the
/// one on PATH, `cargo run --release --` or `cargo run --` when built in a
/// cargo target directory (as these tests usually run it), else the
/// binary's absolute path. Panics when the line starts otherwise.
fn replay_arguments(line: &str) -> &str {
    let line = line.trim();
    for program in ["lockcheck ", "cargo run --release -- ", "cargo run -- "] {
        if let Some(arguments) = line.strip_prefix(program) {
            return arguments;
        }
    }
    let exe = std::fs::canonicalize(env!("CARGO_BIN_EXE_lockcheck")).expect("the binary");
    let exe = format!("{} ", exe.display());
    line.strip_prefix(exe.as_str())
        .unwrap_or_else(|| panic!("{line:?} starts with none of the programs a replay may name"))
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn both(output: &Output) -> String {
    format!("stdout:\n{}\nstderr:\n{}", stdout(output), stderr(output))
}

/// The text report without the line that measures wall time (which differs
/// from run to run: everything else must not).
fn without_wall_time(text: &str) -> String {
    text.lines()
        .filter(|line| !(line.starts_with("simulated ") && line.contains(" wall ")))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A fresh, empty folder for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("cli_check-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn verdicts_of(document: &serde_json::Value) -> (String, Vec<(String, String)>) {
    let history = &document["histories"][0];
    let results = history["results"]
        .as_array()
        .unwrap_or_else(|| panic!("no results in {document}"))
        .iter()
        .map(|result| {
            (result["checker"].as_str().unwrap().to_string(), result["verdict"].to_string())
        })
        .collect();
    (document["verdict"].as_str().unwrap().to_string(), results)
}

/// The default run (sim-redis, fenced-write, pause, clock, kill, delay, loss)
/// with seed 7 finds the GC-pause violation.
#[test]
fn check_prints_the_seed_first_and_exits_1_on_the_default_runs_violation() {
    let output = lockcheck(&["check", "--seed", "7", "--no-store"]);
    assert_eq!(output.status.code(), Some(1), "{}", both(&output));
    assert_eq!(stderr(&output).lines().next(), Some("seed: 7"), "{}", both(&output));
    let text = stdout(&output);
    assert!(text.contains("mutual-exclusion     INVALID"), "{text}");
    assert!(text.contains("both believed they held \"lock-"), "{text}");
    assert!(text.contains("verdict: INVALID"), "{text}");
    let replay = text.lines().find_map(|line| line.strip_prefix("replay: ")).expect("a replay");
    assert!(replay_arguments(replay).starts_with("check --backend sim-redis "), "{text}");
}

/// The binary under another name (a hard link, else a copy), run with `path`
/// as PATH: its replay line.
fn replay_when_run_as(exe: &Path, path: &str) -> String {
    std::fs::create_dir_all(exe.parent().unwrap()).unwrap();
    let _ = std::fs::remove_file(exe);
    let built = env!("CARGO_BIN_EXE_lockcheck");
    if std::fs::hard_link(built, exe).is_err() {
        std::fs::copy(built, exe).unwrap();
    }
    let output = Command::new(exe)
        .args(["check", "--seed", "7", "--no-store", "--no-shrink"])
        .env("PATH", path)
        .output()
        .expect("the binary runs");
    assert_eq!(output.status.code(), Some(1), "{}", both(&output));
    let text = stdout(&output);
    let replay = text.lines().find_map(|line| line.strip_prefix("replay: "));
    replay.unwrap_or_else(|| panic!("no replay line: {text}")).to_string()
}

/// The replay line starts with what runs the binary again from a shell:
/// `lockcheck` when it is the one on PATH, cargo when it lies in a cargo
/// target directory, else its path, quoted when a shell needs it.
#[test]
fn the_replay_line_names_the_program_as_a_shell_finds_it() {
    let dir = scratch("program").canonicalize().unwrap();
    let arguments = "check --backend sim-redis --workload fenced-write";
    let system = "/usr/bin:/bin";

    let release = dir.join("work/target/release/lockcheck");
    let line = replay_when_run_as(&release, system);
    assert!(line.starts_with(&format!("cargo run --release -- {arguments} ")), "{line}");
    let debug = dir.join("work/target/debug/lockcheck");
    let line = replay_when_run_as(&debug, system);
    assert!(line.starts_with(&format!("cargo run -- {arguments} ")), "{line}");

    let bin = dir.join("bin");
    let installed = bin.join("lockcheck");
    let line = replay_when_run_as(&installed, &format!("{}:{system}", bin.display()));
    assert!(line.starts_with(&format!("lockcheck {arguments} ")), "{line}");
    // Another lockcheck first on PATH: this one is named by its path.
    let line = replay_when_run_as(&release, &format!("{}:{system}", bin.display()));
    assert!(line.starts_with("cargo run --release -- "), "{line}");
    let elsewhere = dir.join("opt/lockcheck");
    let line = replay_when_run_as(&elsewhere, &format!("{}:{system}", bin.display()));
    assert!(line.starts_with(&format!("{} {arguments} ", elsewhere.display())), "{line}");

    let spaced = dir.join("my tools/lockcheck");
    let line = replay_when_run_as(&spaced, system);
    assert!(line.starts_with(&format!("'{}' {arguments} ", spaced.display())), "{line}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_same_seed_twice_gives_the_same_output() {
    let json = ["check", "--seed", "7", "--no-store", "--format", "json"];
    let (first, second) = (lockcheck(&json), lockcheck(&json));
    assert_eq!(first.status.code(), Some(1), "{}", both(&first));
    assert!(first.stdout == second.stdout, "two JSON reports of seed 7 differ");
    let document: serde_json::Value = serde_json::from_slice(&first.stdout).expect("valid JSON");
    assert_eq!(document["verdict"], "invalid");

    let text = ["check", "--seed", "7", "--no-store"];
    let (first, second) = (lockcheck(&text), lockcheck(&text));
    assert_eq!(
        without_wall_time(&stdout(&first)),
        without_wall_time(&stdout(&second)),
        "two text reports of seed 7 differ (beyond the wall time)"
    );
    assert_eq!(stderr(&first), stderr(&second));
}

#[test]
fn no_faults_is_valid_and_exits_0() {
    let output = lockcheck(&["check", "--nemesis", "none", "--seed", "3", "--no-store"]);
    assert_eq!(output.status.code(), Some(0), "{}", both(&output));
    assert_eq!(stderr(&output).lines().next(), Some("seed: 3"), "{}", both(&output));
    let text = stdout(&output);
    assert!(text.contains("verdict: valid"), "{text}");
    assert!(text.contains("faults: none"), "{text}");
    assert!(!text.contains("replay:"), "a valid run needs no replay line: {text}");
}

#[test]
fn store_keeps_history_results_and_command_and_analyze_agrees() {
    let store = scratch("store");
    let store_arg = store.display().to_string();
    let output = lockcheck(&["check", "--seed", "7", "--store", &store_arg, "--format", "json"]);
    assert_eq!(output.status.code(), Some(1), "{}", both(&output));
    let latest = store.join("latest");
    for file in ["history.jsonl", "results.json", "command"] {
        assert!(latest.join(file).is_file(), "no {} after --store", latest.join(file).display());
    }
    let command = std::fs::read_to_string(latest.join("command")).unwrap();
    assert!(replay_arguments(&command).starts_with("check "), "{command}");
    assert!(command.contains("--seed 7"), "{command}");

    let stored: serde_json::Value =
        serde_json::from_slice(&std::fs::read(latest.join("results.json")).unwrap())
            .expect("results.json is JSON");
    let printed: serde_json::Value = serde_json::from_slice(&output.stdout).expect("valid JSON");
    assert_eq!(verdicts_of(&stored), verdicts_of(&printed));

    let history = latest.join("history.jsonl").display().to_string();
    let analyzed = lockcheck(&["analyze", "--format", "json", &history]);
    assert_eq!(analyzed.status.code(), output.status.code(), "{}", both(&analyzed));
    let reanalyzed: serde_json::Value =
        serde_json::from_slice(&analyzed.stdout).expect("analyze prints JSON");
    assert_eq!(
        verdicts_of(&reanalyzed),
        verdicts_of(&stored),
        "analyze of the stored history disagrees with check"
    );
    let _ = std::fs::remove_dir_all(&store);
}

/// Runs a failing check, then its `replay:` line with `--no-store`: the same
/// report (but the wall time), the same exit code.
fn replays(args: &[&str]) {
    let output = lockcheck(args);
    assert_eq!(output.status.code(), Some(1), "{args:?} should fail: {}", both(&output));
    let text = stdout(&output);
    let replay = text
        .lines()
        .find_map(|line| line.strip_prefix("replay: "))
        .unwrap_or_else(|| panic!("no replay line: {text}"));
    let mut words: Vec<&str> = replay_arguments(replay).split_whitespace().collect();
    words.push("--no-store");
    let again = lockcheck(&words);
    assert_eq!(again.status.code(), Some(1), "replay {replay:?}: {}", both(&again));
    assert_eq!(
        without_wall_time(&stdout(&again)),
        without_wall_time(&text),
        "the replay {replay:?} of {args:?} reports something else"
    );
}

#[test]
fn the_replay_line_reproduces_the_verdict() {
    replays(&["check", "--seed", "7", "--no-store"]);
    // Every flag that changes the run must reach the replay line.
    replays(&[
        "check",
        "--backend",
        "sim-lease-table-client-clock",
        "--nemesis",
        "skew,delay",
        "--seed",
        "0",
        "--clients",
        "3",
        "--locks",
        "1",
        "--ttl",
        "500ms",
        "--time-limit",
        "20s",
        "--no-fencing",
        "--no-store",
    ]);
    replays(&[
        "check",
        "--backend",
        "sim-etcd-no-quorum",
        "--nemesis",
        "partition",
        "--partition-shapes",
        "halves",
        "--seed",
        "1",
        "--time-limit",
        "15s",
        "--no-store",
    ]);
    // Aimed: seed 2's cut finds the violation only aimed, so a replay
    // without --aim would come out valid.
    replays(&[
        "check",
        "--backend",
        "sim-etcd",
        "--nemesis",
        "partition",
        "--partition-shapes",
        "client",
        "--seed",
        "2",
        "--aim",
        "--no-store",
    ]);
}

/// `--aim` is off by default in the simulator (`--aim=false` is the
/// default, and leaves the replay line as it was), and cannot be turned
/// off against real servers, whose faults are always aimed.
#[test]
fn aiming_is_a_simulator_option_that_real_runs_cannot_turn_off() {
    let unaimed = lockcheck(&["check", "--seed", "7", "--no-store"]);
    let default = lockcheck(&["check", "--seed", "7", "--aim=false", "--no-store"]);
    assert_eq!(without_wall_time(&stdout(&default)), without_wall_time(&stdout(&unaimed)));
    assert!(!stdout(&unaimed).contains("--aim"), "{}", stdout(&unaimed));
    let real = lockcheck(&["check", "--backend", "redis", "--aim=false", "--no-store"]);
    assert_eq!(real.status.code(), Some(64), "{}", both(&real));
    assert!(stderr(&real).contains("real faults are always aimed"), "{}", both(&real));
    let unclear = lockcheck(&["check", "--aim=perhaps", "--no-store"]);
    assert_eq!(unclear.status.code(), Some(64), "{}", both(&unclear));
}

#[test]
fn bad_flags_exit_64() {
    for (args, says) in [
        (&["check", "--backend", "nope", "--no-store"][..], "nope"),
        (&["check", "--nemesis", "nope", "--no-store"][..], "nope"),
        (&["check", "--clients", "0", "--no-store"][..], "--clients"),
        (&["check", "--partition-shapes", "square", "--no-store"][..], "square"),
        (
            &["check", "--nemesis", "partition", "--partition-shapes", "halves", "--no-store"][..],
            "use client",
        ),
        (
            &[
                "check",
                "--backend",
                "sim-etcd",
                "--nemesis",
                "partition",
                "--partition-shapes",
                "ring",
                "--no-store",
            ][..],
            "sim-etcd-5",
        ),
        (
            &["check", "--workload", "payments", "--protection", "locks", "--no-store"][..],
            "idempotency-key",
        ),
        (
            &["check", "--workload", "payments", "--provider", "paypal", "--no-store"][..],
            "ietf or stripe",
        ),
        (
            &["check", "--workload", "payments", "--provider-variant", "racy", "--no-store"][..],
            "check-then-insert",
        ),
        (&["check", "--purpose", "speed", "--no-store"][..], "correctness or efficiency"),
        (
            &["check", "--workload", "payments", "--storage", "s3-put", "--no-store"][..],
            "does not apply",
        ),
        (
            &["check", "--workload", "mutex", "--protection", "unique", "--no-store"][..],
            "payments and cron workloads",
        ),
        (
            &["check", "--workload", "cron", "--protection", "idempotency-key", "--no-store"][..],
            "try unique",
        ),
        (
            &["check", "--backend", "redis", "--queue", "rabbitmq", "--no-store"][..],
            "--queue applies to --workload payments",
        ),
        (
            &["check", "--workload", "payments", "--queue", "kafka", "--no-store"][..],
            "use postgres or rabbitmq",
        ),
    ] {
        let output = lockcheck(args);
        assert_eq!(output.status.code(), Some(64), "{args:?}: {}", both(&output));
        assert!(stderr(&output).contains(says), "{args:?}: {}", both(&output));
        assert!(output.stdout.is_empty(), "{args:?} printed a report: {}", both(&output));
    }
}

#[test]
fn a_failure_is_shrunk_to_a_smaller_run_that_replays_and_still_fails() {
    let dir = scratch("shrink");
    let store = dir.to_str().unwrap();
    let output = lockcheck(&["check", "--seed", "3", "--store", store]);
    assert_eq!(output.status.code(), Some(1), "{}", both(&output));
    let line = stderr(&output)
        .lines()
        .find(|line| line.starts_with("shrink: "))
        .unwrap_or_else(|| panic!("no shrink line: {}", both(&output)))
        .to_string();
    let replay = replay_arguments(line.split("replay: ").nth(1).expect("a replay command"));
    let shrunk = dir.join("latest/shrunk-history.jsonl");
    let analyzed = lockcheck(&["analyze", shrunk.to_str().unwrap()]);
    assert_eq!(analyzed.status.code(), Some(1), "{}", both(&analyzed));
    let original = std::fs::read_to_string(dir.join("latest/history.jsonl")).unwrap();
    let smaller = std::fs::read_to_string(&shrunk).unwrap();
    assert!(smaller.lines().count() < original.lines().count() / 2, "{line}");
    let mut args: Vec<&str> = replay.split_whitespace().collect();
    args.push("--no-store");
    args.push("--no-shrink");
    let replayed = lockcheck(&args);
    assert_eq!(replayed.status.code(), Some(1), "{}", both(&replayed));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The progress line is for a terminal only: with standard error a pipe (CI,
/// tests), it carries exactly what it did before the progress display, no
/// bar, no carriage return, no escape sequence.
#[test]
fn nothing_but_the_usual_lines_on_stderr_when_it_is_not_a_terminal() {
    let output =
        lockcheck(&["check", "--seeds", "3", "--seed", "0", "--nemesis", "none", "--no-store"]);
    assert_eq!(output.status.code(), Some(0), "{}", both(&output));
    assert_eq!(
        stderr(&output),
        "seed: 0\nseed: 1\nseed: 2\nseeds: 3 run, 3 valid, 0 invalid, 0 unknown\n",
        "{}",
        both(&output)
    );
    for text in [stdout(&output), stderr(&output)] {
        assert!(!text.contains(['\r', '\u{1b}']), "terminal control in {text:?}");
        assert!(!text.contains("lock ops"), "a progress line in {text:?}");
    }
}

/// On a terminal (a pseudo-terminal from util-linux's `script`) the progress
/// line is drawn on standard error, while standard output, redirected to a
/// file, stays one clean JSON document.
#[test]
fn a_progress_line_on_a_terminal_and_stdout_stays_clean() {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped: no script(1) to make a terminal");
        return;
    }
    let dir = scratch("progress");
    let json = dir.join("out.json");
    let command = format!(
        "{} check --seeds 3 --seed 0 --nemesis none --no-store --format json > {}",
        env!("CARGO_BIN_EXE_lockcheck"),
        json.display()
    );
    let output = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .env("TERM", "xterm")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(std::process::Stdio::null())
        .output()
        .expect("script runs");
    assert_eq!(output.status.code(), Some(0), "{}", both(&output));
    let terminal = stdout(&output);
    assert!(terminal.contains("/3 seeds"), "no progress line on the terminal: {terminal:?}");
    assert!(terminal.contains("seed: 2"), "{terminal:?}");
    let documents = std::fs::read_to_string(&json).unwrap();
    for document in serde_json::Deserializer::from_str(&documents).into_iter::<serde_json::Value>()
    {
        let document = document.unwrap_or_else(|error| panic!("{error}: {documents:?}"));
        assert_eq!(document["verdict"], "valid", "{documents}");
    }
}

#[test]
fn arguments_are_validated_as_their_errors_say() {
    let cases: [(&[&str], &str); 6] = [
        (&["--time-limit", "1ns"], "between 1ms and 24h"),
        (&["--seeds", "0"], "at least 1"),
        (&["--nemesis", ",,,"], "names no fault"),
        (&["--nemesis", ""], "names no fault"),
        (&["--clients", "10001"], "at most 10000 clients"),
        (&["--max-memory", "100000TiB"], "more than this machine has"),
    ];
    for (args, says) in cases {
        let mut all = vec!["check", "--no-store", "--seed", "1"];
        all.extend_from_slice(args);
        let output = lockcheck(&all);
        assert_eq!(output.status.code(), Some(64), "{args:?}: {}", both(&output));
        let text = stderr(&output);
        assert!(text.contains(says), "{args:?} should say {says:?}: {text}");
        assert!(!text.contains("Some("), "{args:?}: {text}");
    }
}

#[test]
fn a_run_too_large_for_its_memory_is_refused_before_it_starts() {
    let dir = scratch("memory");
    let store = dir.to_string_lossy().into_owned();
    let output = lockcheck(&[
        "check",
        "--clients",
        "100",
        "--time-limit",
        "24h",
        "--max-memory",
        "1GiB",
        "--store",
        &store,
    ]);
    assert_eq!(output.status.code(), Some(64), "{}", both(&output));
    let text = stderr(&output);
    assert!(text.contains("needs about") && text.contains("--max-memory"), "{text}");
    // Nothing was started, so nothing was stored.
    assert!(!dir.join("sim-redis-fenced-write").exists());
    // Without --max-memory the budget is three quarters of the machine,
    // which 10,000 clients for a day exceed on any machine there is.
    let output = lockcheck(&["check", "--clients", "10000", "--time-limit", "24h", "--no-store"]);
    assert_eq!(output.status.code(), Some(64), "{}", both(&output));
    assert!(stderr(&output).contains("three quarters of this machine"), "{}", both(&output));
}

/// The default run as README shows it: its terminal output fits one screen
/// (60 lines), tells its violations by cause, and names every kind of
/// cause the run found (each cause with the fault behind it) that the
/// JSON report lists, among them the pause and the kill.
#[test]
fn the_default_runs_output_fits_one_screen_and_names_every_cause() {
    for seed in ["1", "7"] {
        let output = lockcheck(&["check", "--seed", seed, "--no-store"]);
        assert_eq!(output.status.code(), Some(1), "{}", both(&output));
        let text = stdout(&output);
        let lines = text.lines().count();
        assert!(lines <= 60, "seed {seed}: {lines} lines:\n{text}");
        let json = lockcheck(&["check", "--seed", seed, "--no-store", "--format", "json"]);
        let document: serde_json::Value =
            serde_json::from_slice(&json.stdout).unwrap_or_else(|e| panic!("{e}: {}", both(&json)));
        let findings = document["histories"][0]["findings"].as_array().expect("findings");
        assert!(!findings.is_empty(), "{document}");
        let mut kinds = std::collections::BTreeSet::new();
        for finding in findings {
            let cause = finding["cause"].as_str().map(|cause| cause.replace('-', " "));
            let fault = finding["fault"]["fault"].as_str().unwrap_or("no fault");
            kinds
                .insert((cause.unwrap_or_else(|| finding["cause"].to_string()), fault.to_string()));
        }
        for (cause, fault) in &kinds {
            let named = text.lines().any(|line| {
                line.contains(cause.as_str())
                    && (line.contains(&format!("after a {fault}"))
                        || line.contains(&format!("after {fault}"))
                        || (fault == "no fault" && line.contains("no fault behind")))
            });
            assert!(named, "seed {seed}: {cause} after {fault} is not named:\n{text}");
        }
        let faults: Vec<&str> = kinds.iter().map(|(_, fault)| fault.as_str()).collect();
        assert!(faults.contains(&"pause") && faults.contains(&"kill"), "seed {seed}: {kinds:?}");
        // Every violation is explained by a finding.
        let all: u64 = document["histories"][0]["results"]
            .as_array()
            .expect("results")
            .iter()
            .map(|result| result["violation_count"].as_u64().unwrap_or(0))
            .sum();
        assert!(text.contains(&format!("explain all {all} violations")), "seed {seed}:\n{text}");
    }
}
