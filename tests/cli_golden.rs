//! Pinned simulated runs: for a fixed list of (backend, workload, nemesis,
//! seed) runs covering every simulated backend, the history `check` records
//! must stay byte-for-byte the same, and so must every verdict. This guards
//! refactorings that are meant to keep behaviour: a change that moves one
//! byte of one history, or one verdict, fails here and names the run.
//!
//! The expected figures live in `tests/data/golden-runs.txt`: per run, its
//! arguments, the history's line count and FNV-1a 64 hash, the exit code and
//! each checker's verdict. A change that is meant to alter histories
//! rewrites the file with `LOCKCHECK_BLESS=1 cargo test --test cli_golden`,
//! and its commit says which runs changed and why.

mod common;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{both, files_under};

/// The runs, as `check` arguments (each gets `--no-shrink --format json` and
/// its own store).
const RUNS: &[&str] = &[
    "--backend sim-redis --seed 1",
    "--backend sim-redis --workload mutex --nemesis none --seed 2",
    "--backend sim-redis --nemesis kill --persistent --seed 3",
    "--backend sim-redis --nemesis pause,sigstop --no-fencing --seed 4",
    "--backend sim-redis --workload cron --nemesis pause,sigstop --seed 5",
    "--backend sim-redis --workload cron-release --nemesis none --seed 6",
    "--backend sim-redis --nemesis failover --seed 7",
    "--backend sim-redis --nemesis delay,loss --clients 8 --locks 3 --seed 8",
    "--backend sim-redis --swarm --seed 9",
    "--backend sim-redis-del-release --nemesis pause,sigstop --seed 10",
    "--backend sim-redis-setnx-expire --nemesis pause,sigstop,kill --seed 11",
    "--backend sim-redis-lost-reply --nemesis loss --seed 12",
    "--backend sim-lease-table --nemesis pause,sigstop,clock --seed 13",
    "--backend sim-lease-table --workload mutex --nemesis kill --seed 14",
    "--backend sim-lease-table-client-clock --nemesis skew --seed 15",
    "--backend sim-redlock --nemesis kill --seed 16",
    "--backend sim-redlock --workload mutex --nemesis partition --seed 17",
    "--backend sim-redlock-no-delay --nemesis kill --seed 18",
    "--backend sim-redis-semaphore --nemesis pause,sigstop --seed 19",
    "--backend sim-redis-semaphore-client-clock --nemesis skew --seed 20",
    "--backend sim-etcd --nemesis partition --seed 21",
    "--backend sim-etcd --nemesis pause,sigstop,kill --seed 22",
    "--backend sim-etcd-5 --nemesis partition --partition-shapes ring,halves --seed 23",
    "--backend sim-etcd-no-quorum --nemesis partition --seed 24",
    "--backend sim-consul --nemesis pause,sigstop,kill --seed 25",
    "--backend sim-consul-no-delay --nemesis pause --seed 26",
    "--backend sim-redis --workload payments --protection lock --nemesis pause --seed 27",
    "--backend sim-redis --workload payments --protection idempotency-key --provider-variant check-then-insert --nemesis pause --seed 28",
    "--backend sim-redis --workload payments --protection unique --nemesis pause,kill,loss --seed 29",
    "--backend sim-redis --workload cron --protection unique --nemesis pause --seed 30",
];

/// Simulated time per run: long enough for every fault to strike a few
/// times, short enough that the list runs in seconds.
const TIME_LIMIT: &str = "20s";

fn data_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/golden-runs.txt")
}

/// FNV-1a, 64 bits: a fixed hash, the same on every machine and toolchain.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// One run's line in the data file.
fn record(index: usize, args: &str) -> String {
    record_history(index, args, |history| history)
}

/// As [`record`], with the history made over by `edit` before it is counted
/// and hashed.
fn record_history(index: usize, args: &str, edit: impl Fn(Vec<u8>) -> Vec<u8>) -> String {
    let store = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("cli_golden-{}-{index}", std::process::id()));
    let _ = std::fs::remove_dir_all(&store);
    let store_arg = store.display().to_string();
    let mut argv = vec!["check"];
    argv.extend(args.split_whitespace());
    argv.extend(["--time-limit", TIME_LIMIT, "--no-shrink", "--format", "json"]);
    argv.extend(["--store", &store_arg]);
    let output = Command::new(env!("CARGO_BIN_EXE_lockcheck"))
        .args(&argv)
        .output()
        .expect("the lockcheck binary runs");
    let code = output.status.code().unwrap_or(-1);
    assert!(code == 0 || code == 1, "{args}: exit {code}\n{}", both(&output));
    let histories: Vec<PathBuf> = files_under(&store)
        .into_iter()
        .filter(|path| path.file_name().is_some_and(|name| name == "history.jsonl"))
        .collect();
    assert_eq!(histories.len(), 1, "{args}: histories stored: {histories:?}\n{}", both(&output));
    let history = edit(std::fs::read(&histories[0]).unwrap());
    let lines = history.iter().filter(|&&byte| byte == b'\n').count();
    let document: serde_json::Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|error| panic!("{args}: stdout is not JSON ({error})\n{}", both(&output)));
    let mut verdicts = String::new();
    for result in document["histories"][0]["results"].as_array().expect("results") {
        let checker = result["checker"].as_str().expect("checker");
        let verdict = result["verdict"].as_str().unwrap_or("n/a");
        let _ = write!(verdicts, " {checker}={verdict}");
    }
    let _ = std::fs::remove_dir_all(&store);
    format!("{args} | lines {lines} | fnv {:016x} | exit {code} |{verdicts}", fnv1a(&history))
}

#[test]
fn pinned_simulated_runs_record_the_same_histories_and_verdicts() {
    let found: Vec<String> = RUNS.iter().enumerate().map(|(i, args)| record(i, args)).collect();
    let mut text = String::from(
        "# Pinned simulated runs (tests/cli_golden.rs): arguments | history lines | FNV-1a 64 of\n\
         # the history | exit code | verdicts. Rewrite with LOCKCHECK_BLESS=1.\n",
    );
    for line in &found {
        text.push_str(line);
        text.push('\n');
    }
    if std::env::var_os("LOCKCHECK_BLESS").is_some() {
        std::fs::write(data_file(), text).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(data_file()).expect("tests/data/golden-runs.txt");
    let expected: Vec<&str> = expected.lines().filter(|line| !line.starts_with('#')).collect();
    assert_eq!(expected.len(), RUNS.len(), "the data file lists other runs than RUNS; rebless");
    let changed: Vec<String> = expected
        .iter()
        .zip(&found)
        .filter(|(want, got)| want != got)
        .map(|(want, got)| format!("  was: {want}\n  now: {got}"))
        .collect();
    assert!(
        changed.is_empty(),
        "{} of {} runs changed:\n{}",
        changed.len(),
        RUNS.len(),
        changed.join("\n")
    );
}

/// The same run twice gives the same line: the pinning is of something
/// deterministic, not of one lucky run.
#[test]
fn a_pinned_run_repeats_itself() {
    assert_eq!(record(1000, RUNS[0]), record(1001, RUNS[0]));
}

/// The runs of [`RUNS`] with a pause, as they were before a pause could
/// strike anywhere but after a grant (`tests/data/golden-pause-after-grant.txt`,
/// their lines from before): pinned to `--pause-at after-grant`, each
/// records the same history but for where its stalls were aimed and struck,
/// and the same verdicts. Not `sim-redis-setnx-expire`: its crash point
/// between SETNX and PEXPIRE took any stall before, and takes only one aimed
/// there now.
#[test]
fn a_pause_aimed_after_the_grant_is_the_pause_from_before() {
    let data =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/golden-pause-after-grant.txt");
    let text = std::fs::read_to_string(&data).expect("tests/data/golden-pause-after-grant.txt");
    let expected: Vec<&str> = text.lines().filter(|line| !line.starts_with('#')).collect();
    assert!(expected.len() >= 8, "{expected:?}");
    let mut changed = Vec::new();
    let mut blessed: Vec<String> =
        text.lines().filter(|line| line.starts_with('#')).map(String::from).collect();
    for (index, want) in expected.iter().enumerate() {
        let args = want.split(" | ").next().expect("arguments");
        let found =
            record_history(100 + index, &format!("{args} --pause-at after-grant"), |history| {
                strip_pause_points(&history)
            });
        let found = found.replacen(" --pause-at after-grant", "", 1);
        if &found != want {
            changed.push(format!("  was: {want}\n  now: {found}"));
        }
        blessed.push(found);
    }
    if std::env::var_os("LOCKCHECK_BLESS").is_some() {
        std::fs::write(data, blessed.join("\n") + "\n").unwrap();
        return;
    }
    assert!(changed.is_empty(), "{} runs changed:\n{}", changed.len(), changed.join("\n"));
}

/// A history without the pause's `"at"` and `"struck"` fields.
fn strip_pause_points(history: &[u8]) -> Vec<u8> {
    let text = String::from_utf8(history.to_vec()).expect("a history is UTF-8");
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let mut line = line.replace(",\"at\":\"after-grant\"", "");
        if let Some(at) = line.find(",\"struck\":") {
            let rest = &line[at + ",\"struck\":".len()..];
            let end = if rest.starts_with("null") {
                "null".len()
            } else {
                rest[1..].find('"').map_or(0, |quote| quote + 2)
            };
            line.replace_range(at..at + ",\"struck\":".len() + end, "");
        }
        out.push_str(&line);
    }
    out.into_bytes()
}
