//! The command line as a user meets it: output, and exit codes (which are part
//! of the interface).

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

fn lockcheck(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lockcheck"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("lockcheck runs")
}

fn data(name: &str) -> String {
    PathBuf::from("tests/data").join(name).display().to_string()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn stalled_holder_is_a_mutual_exclusion_violation_with_both_clients_and_window() {
    let output = lockcheck(&["analyze", &data("stalled-holder-fenced.jsonl")]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.contains("mutual-exclusion     INVALID"), "{text}");
    assert!(
        text.contains("processes 1 and 2 both believed they held \"report\" for 2.999 s, from t=13.002 s to t=16.001 s"),
        "{text}"
    );
    // One finding: the stale holder, traced to the pause that struck it.
    assert!(
        text.contains("1 finding explains all 1 violation: 1 stale holder after a pause"),
        "{text}"
    );
    assert!(text.contains("  fault: pause struck client-1 at t=2.000 s for 14.000 s"), "{text}");
    assert!(text.contains("      #2 t=2.000 s  nemesis info start"), "{text}");
    // Each proving operation, as `check` lists them.
    assert!(text.contains("      #1 t=1.003 s  1 ok acquire \"report\" {\"fence\":33}"), "{text}");
    assert!(text.contains("      #4 t=13.002 s  2 ok acquire \"report\" {\"fence\":34}"), "{text}");
    // The fencing token saved the resource.
    assert!(text.contains("resource-safety      valid"), "{text}");
    assert!(text.contains("verdict: INVALID (mutual-exclusion)"), "{text}");
}

#[test]
fn json_format_is_one_document_with_the_same_findings() {
    let output = lockcheck(&["analyze", "--format", "json", &data("stalled-holder-fenced.jsonl")]);
    assert_eq!(output.status.code(), Some(1));
    let document: serde_json::Value = serde_json::from_slice(&output.stdout).expect("valid JSON");
    assert_eq!(document["verdict"], "invalid");
    let history = &document["histories"][0];
    assert_eq!(history["summary"]["clients"], 2);
    let mutex = &history["results"][0];
    assert_eq!(mutex["checker"], "mutual-exclusion");
    assert_eq!(mutex["verdict"], "invalid");
    let violation = &mutex["violations"][0];
    assert_eq!(violation["kind"], "overlap");
    assert_eq!(violation["processes"], serde_json::json!([1, 2]));
    assert_eq!(violation["window"]["start_ns"], 13_002_000_000u64);
    assert_eq!(violation["window"]["end_ns"], 16_001_000_000u64);
}

#[test]
fn clean_history_is_valid_and_exits_zero() {
    let output = lockcheck(&["analyze", &data("clean.jsonl")]);
    assert_eq!(output.status.code(), Some(0), "{}{}", stdout(&output), stderr(&output));
    assert!(stdout(&output).contains("verdict: valid"));
}

#[test]
fn reads_standard_input() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_lockcheck"))
        .args(["analyze", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let text =
        std::fs::read(format!("{}/tests/data/clean.jsonl", env!("CARGO_MANIFEST_DIR"))).unwrap();
    child.stdin.take().unwrap().write_all(&text).unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0));
    assert!(stdout(&output).starts_with("-\n"));
}

#[test]
fn malformed_input_exits_65_naming_file_line_and_field() {
    let path = data("bad-time.jsonl");
    let output = lockcheck(&["analyze", &path]);
    assert_eq!(output.status.code(), Some(65));
    let message = stderr(&output);
    assert!(message.contains(&format!("{path}:2: field `time`")), "{message}");
    assert!(!message.contains("panicked"), "{message}");
}

#[test]
fn unreadable_file_exits_65_even_beside_a_valid_one() {
    let output = lockcheck(&["analyze", &data("clean.jsonl"), "no/such/file.jsonl"]);
    assert_eq!(output.status.code(), Some(65));
    assert!(stderr(&output).contains("no/such/file.jsonl: cannot read"), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("1 valid, 0 invalid, 0 unknown, 1 unreadable"),
        "{}",
        stdout(&output)
    );
}

#[test]
fn garbage_never_panics() {
    let dir = std::env::temp_dir().join(format!("lockcheck-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let inputs: [&[u8]; 6] = [
        b"\xff\xfe not utf8\n",
        b"[1,2,3]\n",
        b"{\"index\":0}\n",
        b"{\"index\":0,\"time\":0,\"process\":1,\"type\":\"ok\",\"f\":\"acquire\",\"key\":\"a\",\"value\":null}\n",
        b"{\"index\":18446744073709551615,\"time\":0,\"process\":-9223372036854775808,\"type\":\"invoke\",\"f\":\"x\",\"key\":null,\"value\":[]}\n",
        b"{\"index\":0,\"time\":0,\"process\":1,\"type\":\"invoke\",\"f\":\"acquire\",\"key\":\"a\",\"value\":{\"ttl_ms\":1e400}}\n",
    ];
    for (n, input) in inputs.iter().enumerate() {
        let path = dir.join(format!("garbage-{n}.jsonl"));
        std::fs::write(&path, input).unwrap();
        let output = lockcheck(&["analyze", path.to_str().unwrap()]);
        let code = output.status.code();
        assert!(matches!(code, Some(2) | Some(65)), "input {n}: {code:?} {}", stderr(&output));
        assert!(!stderr(&output).contains("panicked"), "input {n}: {}", stderr(&output));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn empty_history_is_unknown() {
    let output = lockcheck(&["analyze", "-"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stdout(&output).contains("verdict: UNKNOWN"), "{}", stdout(&output));
}

#[test]
fn usage_errors_exit_64_and_help_documents_exit_codes() {
    assert_eq!(lockcheck(&["analyze"]).status.code(), Some(64));
    assert_eq!(lockcheck(&["analyze", "--format", "yaml", "x"]).status.code(), Some(64));
    assert_eq!(lockcheck(&["analyze", "--liveness-bound", "soon", "x"]).status.code(), Some(64));
    assert_eq!(lockcheck(&["frobnicate"]).status.code(), Some(64));
    let help = lockcheck(&["analyze", "--help"]);
    assert_eq!(help.status.code(), Some(0));
    for line in
        ["0   valid", "1   invalid", "2   unknown", "64  usage", "65  bad input", "70  internal"]
    {
        assert!(stdout(&help).contains(line), "help lacks {line:?}");
    }
}

#[test]
fn synthetic_history_round_trips_through_analyze_as_valid() {
    let synth =
        lockcheck(&["synth", "--ops", "2000", "--clients", "5", "--keys", "3", "--seed", "7"]);
    assert_eq!(synth.status.code(), Some(0), "{}", stderr(&synth));
    let mut child = Command::new(env!("CARGO_BIN_EXE_lockcheck"))
        .args(["analyze", "--format", "json", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&synth.stdout).unwrap();
    let output = child.wait_with_output().unwrap();
    let document: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(document["verdict"], "valid", "{document:#}");
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(document["histories"][0]["summary"]["ops"], 2000);
}

#[test]
fn jepsen_edn_mutex_history_with_no_overlap_is_found_not_linearizable() {
    let output = lockcheck(&[
        "analyze",
        "--input-format",
        "jepsen-edn",
        &data("mutex-no-overlap-not-linearizable.edn"),
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.contains("mutual-exclusion     valid"), "{text}");
    assert!(text.contains("linearizability      INVALID"), "{text}");
    assert!(text.contains("process 2's acquire -> busy"), "{text}");
    assert!(text.contains("(free)"), "{text}");
    // Skipping the search leaves nothing to find.
    let skipped = lockcheck(&[
        "analyze",
        "--no-linearizability",
        "--input-format",
        "jepsen-edn",
        &data("mutex-no-overlap-not-linearizable.edn"),
    ]);
    assert_eq!(skipped.status.code(), Some(0), "{}", stdout(&skipped));
}

#[test]
fn jepsen_log_cas_register_with_an_unknown_write_is_linearizable() {
    let output = lockcheck(&["analyze", "--input-format", "jepsen-log", &data("cas-register.log")]);
    assert_eq!(output.status.code(), Some(0), "{}{}", stdout(&output), stderr(&output));
    // A plain register has no compare-and-set: that is the user's mistake, not a verdict.
    let output = lockcheck(&[
        "analyze",
        "--input-format",
        "jepsen-log",
        "--model",
        "register",
        &data("cas-register.log"),
    ]);
    assert_eq!(output.status.code(), Some(65), "{}", stdout(&output));
    assert!(stderr(&output).contains("register model does not fit"), "{}", stderr(&output));
}

#[test]
fn porcupine_kv_stale_get_is_evidence_with_prefix_and_states() {
    let output = lockcheck(&[
        "analyze",
        "--format",
        "json",
        "--input-format",
        "porcupine-kv",
        &data("kv-stale-get.txt"),
    ]);
    assert_eq!(output.status.code(), Some(1));
    let document: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let violation = &document["histories"][0]["results"][0]["violations"][0];
    assert_eq!(violation["kind"], "not-linearizable");
    assert_eq!(violation["key"], "a");
    assert_eq!(violation["linearization"]["model"], "kv");
    assert_eq!(violation["linearization"]["prefix"], serde_json::json!([0, 4]));
    assert_eq!(violation["linearization"]["blocked"], 6);
    assert_eq!(violation["linearization"]["states"], serde_json::json!(["{\"a\": \"2\"}"]));
}

#[test]
fn a_model_that_does_not_fit_the_format_is_a_usage_error() {
    let output = lockcheck(&[
        "analyze",
        "--input-format",
        "porcupine-kv",
        "--model",
        "mutex",
        &data("kv-stale-get.txt"),
    ]);
    assert_eq!(output.status.code(), Some(64));
    assert!(stderr(&output).contains("does not fit"), "{}", stderr(&output));
    let output = lockcheck(&["analyze", "--input-format", "jepsen-log", &data("clean.jsonl")]);
    assert_eq!(output.status.code(), Some(65), "{}", stderr(&output));
}

#[test]
fn a_search_bound_gives_unknown_and_exit_2() {
    let output = lockcheck(&[
        "analyze",
        "--input-format",
        "jepsen-log",
        "--linearizability-memory",
        "0",
        &data("cas-register.log"),
    ]);
    assert_eq!(output.status.code(), Some(2), "{}", stdout(&output));
    assert!(stdout(&output).contains("memory bound"), "{}", stdout(&output));
}

#[test]
fn a_matrix_whose_runs_are_all_longer_than_asked_leaves_no_cell() {
    // etcd's real cells run 6 to 60 s each: none is left at 5 s, and the
    // error says which selection left none (nothing was started).
    let output = lockcheck(&["matrix", "--backends", "etcd", "--longest-run", "5s"]);
    assert_eq!(output.status.code(), Some(64), "{}", stderr(&output));
    assert!(stderr(&output).contains("runs of at most 5s"), "{}", stderr(&output));
    let output = lockcheck(&["matrix", "--longest-run", "soon"]);
    assert_eq!(output.status.code(), Some(64), "{}", stderr(&output));
}

#[test]
fn a_matrix_of_no_known_backend_is_a_usage_error() {
    for args in
        [&["matrix", "--backends", "nosuch"][..], &["matrix", "--sim", "--backends", "redis"]]
    {
        let output = lockcheck(args);
        assert_eq!(output.status.code(), Some(64), "{args:?}");
        assert!(stderr(&output).contains("no "), "{}", stderr(&output));
    }
}

/// A small corpus laid out as porcupine's test data is (the checker's own
/// test inputs): every verdict agrees.
const CONFORMANCE: &str = "checker/tests/data/conformance";

#[test]
fn conformance_agrees_with_every_verdict_of_a_corpus() {
    let output = lockcheck(&["conformance", "--porcupine", CONFORMANCE]);
    assert_eq!(output.status.code(), Some(0), "{}{}", stdout(&output), stderr(&output));
    let text = stdout(&output);
    assert!(
        text.contains("jepsen: 4 files (2 not linearizable), 4 checks, every verdict agrees"),
        "{text}"
    );
    assert!(
        text.contains("kv: 2 files (1 not linearizable), 4 checks, every verdict agrees"),
        "{text}"
    );
    assert!(!text.contains("disagrees"), "{text}");
}

#[test]
fn conformance_lists_every_file_that_disagrees_and_exits_1() {
    let dir = std::env::temp_dir().join(format!("lockcheck-conformance-{}", std::process::id()));
    let jepsen = dir.join("jepsen");
    std::fs::create_dir_all(&jepsen).unwrap();
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(CONFORMANCE).join("jepsen");
    for name in ["cas-timeouts-ok.log", "read-of-overwritten-value-bad.log"] {
        std::fs::copy(source.join(name), jepsen.join(name)).unwrap();
    }
    // Both verdicts swapped: two disagreements.
    std::fs::write(
        jepsen.join("VERDICTS.txt"),
        "cas-timeouts-ok.log not-linearizable\nread-of-overwritten-value-bad.log linearizable\n",
    )
    .unwrap();
    let output = lockcheck(&["conformance", "--porcupine", dir.to_str().unwrap()]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "{text}{}", stderr(&output));
    assert!(text.contains("jepsen: 2 files (1 not linearizable), 2 checks, 2 DISAGREE"), "{text}");
    assert!(
        text.contains("disagrees: jepsen/cas-timeouts-ok.log (cas-register): VERDICTS.txt says not-linearizable, lockcheck found linearizable"),
        "{text}"
    );
    assert!(text.contains("disagrees: jepsen/read-of-overwritten-value-bad.log"), "{text}");
    std::fs::write(jepsen.join("VERDICTS.txt"), "cas-timeouts-ok.log maybe\n").unwrap();
    let output = lockcheck(&["conformance", "--porcupine", dir.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(65), "{}", stderr(&output));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn conformance_needs_a_folder_with_a_corpus() {
    assert_eq!(lockcheck(&["conformance"]).status.code(), Some(64));
    let output = lockcheck(&["conformance", "--porcupine", "tests/data"]);
    assert_eq!(output.status.code(), Some(64));
    assert!(
        stderr(&output).contains("neither jepsen/VERDICTS.txt nor kv/VERDICTS.txt"),
        "{}",
        stderr(&output)
    );
    let help = lockcheck(&["conformance", "--help"]);
    assert!(stdout(&help).contains("1 a file disagrees"), "{}", stdout(&help));
}

/// A file of `text` in a fresh temporary folder, for one test.
fn temp_file(test: &str, name: &str, text: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lockcheck-cli-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

const INPUT_FORMATS: [&str; 4] = ["jsonl", "jepsen-edn", "jepsen-log", "porcupine-kv"];

#[test]
fn text_of_no_format_exits_65_naming_file_and_line_in_every_format() {
    let path = temp_file("passwd", "passwd", b"root:x:0:0:root:/root:/bin/bash\nbin:x:2:2::/:\n");
    let path = path.to_str().unwrap();
    for format in INPUT_FORMATS {
        let output = lockcheck(&["analyze", "--input-format", format, path]);
        assert_eq!(output.status.code(), Some(65), "{format}: {}", stdout(&output));
        assert!(stderr(&output).contains(&format!("{path}:1: ")), "{format}: {}", stderr(&output));
        assert!(stderr(&output).contains("the first of 2"), "{format}: {}", stderr(&output));
    }
}

#[test]
fn an_empty_history_exits_2_with_nothing_to_check_in_every_format() {
    let path = temp_file("empty", "empty", b"\n");
    for format in INPUT_FORMATS {
        let output = lockcheck(&["analyze", "--input-format", format, path.to_str().unwrap()]);
        assert_eq!(output.status.code(), Some(2), "{format}: {}", stdout(&output));
        assert!(stderr(&output).contains("nothing to check"), "{format}: {}", stderr(&output));
        assert!(stdout(&output).contains("nothing to check"), "{format}: {}", stdout(&output));
    }
}

#[test]
fn skipped_nemesis_events_are_counted_on_stderr() {
    let log = "INFO  jepsen.util - :nemesis\t:info\t:start\tnil\nINFO  jepsen.util - 0\t:invoke\t:write\t1\nINFO  jepsen.util - 0\t:ok\t:write\t1\n";
    let path = temp_file("nemesis", "n.log", log.as_bytes());
    let output = lockcheck(&["analyze", "--input-format", "jepsen-log", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(stderr(&output).contains("skipped 1 nemesis event"), "{}", stderr(&output));
}

#[test]
fn a_huge_bad_value_is_quoted_short() {
    let text =
        format!("{{:process 0, :type :invoke, :f :write, :value \"{}\"}}\n", "v".repeat(5 << 20));
    let path = temp_file("huge", "huge.edn", text.as_bytes());
    let output = lockcheck(&["analyze", "--input-format", "jepsen-edn", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(65));
    assert!(output.stderr.len() < 400, "{} bytes on stderr", output.stderr.len());
    assert!(stderr(&output).contains("bytes)"), "{}", stderr(&output));
}

#[test]
fn a_truncated_final_line_is_reported_and_the_rest_checked() {
    let clean = std::fs::read_to_string(data("clean.jsonl")).unwrap();
    let lines = clean.lines().count();
    let cut = format!("{clean}{{\"index\":999,\"time\":99");
    let path = temp_file("truncated", "cut.jsonl", cut.as_bytes());
    let path = path.to_str().unwrap();
    let output = lockcheck(&["analyze", path]);
    assert_eq!(output.status.code(), Some(0), "{}{}", stdout(&output), stderr(&output));
    let expected = format!("{path}:{}: truncated final line, ignored", lines + 1);
    assert!(stderr(&output).contains(&expected), "{}", stderr(&output));
    // Cut short anywhere else, the history is refused.
    let (first, rest) = clean.split_once('\n').unwrap();
    let middle = format!("{first}\n{{\"index\":999,\"time\":99\n{rest}");
    let path = temp_file("truncated", "middle.jsonl", middle.as_bytes());
    let output = lockcheck(&["analyze", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(65), "{}", stderr(&output));
    assert!(stderr(&output).contains(":2: "), "{}", stderr(&output));
}

#[test]
fn readme_and_help_list_the_exit_codes_of_the_signals() {
    let help = stdout(&lockcheck(&["analyze", "--help"]));
    assert!(help.contains("130, 143, 129"), "{help}");
    let readme =
        std::fs::read_to_string(format!("{}/README.md", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let section = readme.split("## Exit codes").nth(1).expect("an exit codes section");
    for code in ["| 130, 143, 129 |", "SIGINT", "SIGTERM", "SIGHUP"] {
        assert!(section.contains(code), "README's exit codes lack {code:?}");
    }
}

#[test]
fn backends_lists_both_worlds_and_says_why_a_fault_is_refused() {
    let output = lockcheck(&["backends"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = stdout(&output);
    for name in ["sim-redis", "sim-etcd-no-quorum", "redis-fenced", "postgres-lease", "exec"] {
        assert!(text.lines().any(|line| line.trim_start().starts_with(name)), "{name}: {text}");
    }
    assert!(
        text.contains("faults: pause, clock, kill, slow-net, partition, sigstop, conn-kill"),
        "{text}"
    );

    // One backend: every fault, and the reason `check` gives for a refusal.
    let output = lockcheck(&["backends", "sim-etcd"]);
    let text = stdout(&output);
    assert!(text.contains("failover     refused: sim-etcd has no replica"), "{text}");
    assert!(text.contains("partition    applies"), "{text}");
    let check = lockcheck(&["check", "--backend", "sim-etcd", "--nemesis", "failover"]);
    assert_eq!(check.status.code(), Some(64));
    assert!(
        stderr(&check).contains("sim-etcd has no replica to fail over to"),
        "{}",
        stderr(&check)
    );

    let output = lockcheck(&["backends", "redis"]);
    let text = stdout(&output);
    assert!(text.contains("conn-kill    refused: conn-kill ends SQL sessions"), "{text}");
    assert!(text.contains("loss         refused: loss is simulated only"), "{text}");
    let check = lockcheck(&["check", "--backend", "redis", "--nemesis", "loss"]);
    assert_eq!(check.status.code(), Some(64));
    assert!(stderr(&check).contains("loss is simulated only"), "{}", stderr(&check));

    // ZooKeeper: the JVM's clock moves under libfaketime, so clock applies.
    let output = lockcheck(&["backends", "zookeeper"]);
    let text = stdout(&output);
    assert!(text.contains("clock        applies"), "{text}");
    assert!(text.contains("conn-kill    refused: conn-kill ends SQL sessions"), "{text}");

    let output = lockcheck(&["backends", "chubby"]);
    assert_eq!(output.status.code(), Some(64));
    assert!(stderr(&output).contains("unknown backend \"chubby\""), "{}", stderr(&output));

    // A mistyped name: what it may have meant, from both worlds.
    let typo = lockcheck(&["check", "--backend", "postgres"]);
    assert_eq!(typo.status.code(), Some(64));
    let said = stderr(&typo);
    assert!(said.contains("did you mean postgres-advisory"), "{said}");
    assert!(said.contains("the real ones are redis"), "{said}");
    let typo = lockcheck(&["backends", "reddis"]);
    assert!(stderr(&typo).contains("(did you mean redis"), "{}", stderr(&typo));
}

#[test]
fn a_simulated_backend_is_sim_and_the_real_name() {
    // Every real backend with a simulated twin is reached by `sim-` and its
    // name; the lease table by both of its databases' names.
    for (alias, name) in [
        ("sim-postgres-lease", "sim-lease-table"),
        ("sim-mysql-lease", "sim-lease-table"),
        ("sim-redlock", "sim-redlock"),
    ] {
        let output = lockcheck(&[
            "check",
            "--backend",
            alias,
            "--nemesis",
            "none",
            "--time-limit",
            "2s",
            "--seed",
            "1",
            "--no-store",
        ]);
        assert_eq!(output.status.code(), Some(0), "{alias}: {}", stderr(&output));
        assert!(stdout(&output).contains(name), "{alias} runs {name}: {}", stdout(&output));
    }
}

#[test]
fn a_pooler_is_refused_with_its_reason_before_any_server_starts() {
    let cases: [(&[&str], &str); 4] = [
        (
            &["check", "--backend", "sim-redis", "--pooler", "transaction"],
            "the simulator has no pooler",
        ),
        (
            &["check", "--backend", "postgres-advisory", "--pooler", "statement"],
            "unknown pooler \"statement\": use transaction or session",
        ),
        (
            &["check", "--backend", "redis", "--pooler", "session"],
            "postgres-advisory and postgres-advisory-xact",
        ),
        (
            &[
                "check",
                "--backend",
                "postgres-advisory",
                "--pooler",
                "transaction",
                "--nemesis",
                "conn-kill",
            ],
            "belong to no one client",
        ),
    ];
    for (args, reason) in cases {
        let output = lockcheck(args);
        assert_eq!(output.status.code(), Some(64), "{args:?}: {}", stderr(&output));
        assert!(stderr(&output).contains(reason), "{args:?}: {}", stderr(&output));
    }
}
