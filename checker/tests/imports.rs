//! The importers of other tools' formats (`jepsen-log`, `porcupine-kv`) on
//! small histories of this project's own: what each line becomes, which
//! lines are refused and where, and the verdicts of a tiny corpus laid out as
//! porcupine's test data is (`data/conformance/{jepsen,kv}/VERDICTS.txt`), so
//! that `lockcheck conformance --porcupine` can be tried on it too.

use std::fs;
use std::path::{Path, PathBuf};

use lockcheck_checker::import::{import, Imported, InputFormat, ModelChoice};
use lockcheck_checker::linear::models::{CasRegister, KvCall, RegisterInput, RegisterOutput};
use lockcheck_checker::linear::{check_parts, PartOutcome, SearchLimits};
use lockcheck_checker::{analyze_imported, default_checkers, CheckOptions, ReadError, Verdict};

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/conformance")
}

/// `name verdict` lines, verdict `linearizable` or `not-linearizable`.
fn verdicts(dir: &Path) -> Vec<(String, Verdict)> {
    let text = fs::read_to_string(dir.join("VERDICTS.txt")).expect("VERDICTS.txt");
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let (name, verdict) = line.split_once(' ').expect("name verdict");
            let verdict = match verdict.trim() {
                "linearizable" => Verdict::Valid,
                "not-linearizable" => Verdict::Invalid,
                other => panic!("unknown verdict {other:?}"),
            };
            (name.to_string(), verdict)
        })
        .collect()
}

fn verdict_of(text: &str, format: InputFormat, model: ModelChoice) -> Verdict {
    let imported = import(format, text, "test", model).unwrap_or_else(|error| panic!("{error}"));
    let options = CheckOptions { linearizability_time_limit: None, ..CheckOptions::default() };
    analyze_imported(&imported, &default_checkers(), &options).verdict
}

/// The line a malformed text is refused at, and the message.
fn refusal(format: InputFormat, text: &str) -> (u64, String) {
    match import(format, text, "test", ModelChoice::Auto) {
        Err(ReadError::Malformed { line, message, .. }) => (line, message),
        other => panic!("expected a malformed-input error, got {other:?}"),
    }
}

fn log(lines: &[&str]) -> String {
    lines.iter().map(|line| format!("INFO  jepsen.util - {}\n", line.replace(' ', "\t"))).collect()
}

#[test]
fn every_small_register_log_gets_its_listed_verdict_plain_and_windowed() {
    let dir = corpus().join("jepsen");
    let expected = verdicts(&dir);
    assert_eq!(expected.len(), 4);
    assert!(expected.iter().any(|(_, verdict)| *verdict == Verdict::Valid));
    assert!(expected.iter().any(|(_, verdict)| *verdict == Verdict::Invalid));
    let windowed = SearchLimits { window_from_ops: 0, ..SearchLimits::default() };
    for (name, verdict) in expected {
        let text = fs::read_to_string(dir.join(&name)).unwrap();
        assert_eq!(
            verdict_of(&text, InputFormat::JepsenLog, ModelChoice::CasRegister),
            verdict,
            "{name}"
        );
        let Ok(Imported::Register { operations, .. }) =
            import(InputFormat::JepsenLog, &text, &name, ModelChoice::CasRegister)
        else {
            panic!("{name} does not import as a register history");
        };
        let parts = check_parts(&CasRegister, &operations, &windowed);
        let linearizable = parts.iter().all(|part| part.outcome == PartOutcome::Linearizable);
        assert_eq!(linearizable, verdict == Verdict::Valid, "{name}, windowed");
    }
}

#[test]
fn every_small_kv_history_gets_its_listed_verdict_per_key_and_whole() {
    let dir = corpus().join("kv");
    let expected = verdicts(&dir);
    assert_eq!(expected.len(), 2);
    for (name, verdict) in expected {
        let text = fs::read_to_string(dir.join(&name)).unwrap();
        for model in [ModelChoice::Kv, ModelChoice::KvUnpartitioned] {
            assert_eq!(
                verdict_of(&text, InputFormat::PorcupineKv, model),
                verdict,
                "{name} ({model})"
            );
        }
    }
}

#[test]
fn jepsen_log_lines_become_register_operations() {
    let text = fs::read_to_string(corpus().join("jepsen/cas-timeouts-ok.log")).unwrap();
    let Ok(Imported::Register { cas, operations, events }) =
        import(InputFormat::JepsenLog, &text, "test", ModelChoice::Auto)
    else {
        panic!("not a register history");
    };
    assert!(cas, "the auto model of a Jepsen log is the CAS register");
    // 19 lines: two nemesis lines are not client events; the failed read is
    // dropped (it did not happen), which leaves 8 operations.
    assert_eq!(events, 17);
    assert_eq!(operations.len(), 8);
    let first = &operations[0];
    assert_eq!((first.client, first.input), (0, RegisterInput::Write(1)));
    assert_eq!((first.output, first.call, first.ret), (Some(RegisterOutput::Written), 0, Some(2)));
    let nil_read = &operations[1];
    assert_eq!(nil_read.output, Some(RegisterOutput::Read(None)));
    let failed_cas = operations.iter().find(|op| op.input == RegisterInput::Cas(1, 3)).unwrap();
    assert_eq!(failed_cas.output, Some(RegisterOutput::Cas(false)), "a failed cas did not match");
    let timed_out = operations.iter().find(|op| op.input == RegisterInput::Write(5)).unwrap();
    assert_eq!((timed_out.output, timed_out.ret), (None, None), "info: unknown, no return");
    // The write never completed: unknown, after the completed operations.
    let open = operations.last().unwrap();
    assert_eq!((open.client, open.input), (4, RegisterInput::Write(7)));
    assert_eq!((open.output, open.ret), (None, None));
}

#[test]
fn a_plain_register_refuses_a_log_with_cas() {
    let text = log(&["0 :invoke :cas [1 2]", "0 :fail :cas [1 2]"]);
    let error = import(InputFormat::JepsenLog, &text, "test", ModelChoice::Register).unwrap_err();
    assert!(matches!(error, ReadError::ModelMismatch { .. }), "{error}");
    let text =
        log(&["0 :invoke :write 1", "0 :ok :write 1", "1 :invoke :read nil", "1 :ok :read 2"]);
    assert_eq!(verdict_of(&text, InputFormat::JepsenLog, ModelChoice::Register), Verdict::Invalid);
}

#[test]
fn malformed_jepsen_log_lines_are_refused_with_their_line() {
    let cases: [(&[&str], u64, &str); 6] = [
        (&["0 :invoke :read nil", "0 :invoke :read nil"], 2, "still open"),
        (&["0 :ok :read nil"], 1, "never invoked"),
        (&["0 :invoke :increment 1"], 1, "unknown operation"),
        (&["0 :invoke :write nil"], 1, "needs a value"),
        (&["0 :invoke :cas [1]"], 1, "[old new]"),
        (&["0 :invoke :read nil", "0 :done :read nil"], 2, "unknown type"),
    ];
    for (lines, line, message) in cases {
        let (found_line, found) = refusal(InputFormat::JepsenLog, &log(lines));
        assert_eq!(found_line, line, "{lines:?}: {found}");
        assert!(found.contains(message), "{lines:?}: {found}");
    }
    let (line, message) = refusal(InputFormat::JepsenLog, "\n{:process 0}\n");
    assert_eq!(line, 2);
    assert!(message.contains("jepsen.util"), "{message}");
}

#[test]
fn porcupine_kv_lines_become_key_value_operations() {
    let text = fs::read_to_string(corpus().join("kv/two-keys-ok.txt")).unwrap();
    let Ok(Imported::Kv { model, operations, events }) =
        import(InputFormat::PorcupineKv, &text, "test", ModelChoice::Auto)
    else {
        panic!("not a key-value history");
    };
    assert_eq!(model.keys, ["a", "b"]);
    assert!(model.partitioned, "the auto model checks per key");
    // 18 lines: the nemesis line is no client event; the failed put is
    // dropped; the last append never completed.
    assert_eq!(events, 17);
    assert_eq!(operations.len(), 8);
    let append = &operations[2];
    assert_eq!(
        (append.input.call, append.input.key, append.input.value.as_str()),
        (KvCall::Append, 0, " 2")
    );
    let get = operations.iter().find(|op| op.input.call == KvCall::Get && op.call == 10).unwrap();
    assert_eq!(get.output.as_ref().map(|output| output.value.as_str()), Some("1 2"));
    let timed_out = operations.iter().find(|op| op.client == 1 && op.input.key == 1).unwrap();
    assert!(timed_out.output.is_none() && timed_out.ret.is_none(), "info: unknown");
    let open = operations.last().unwrap();
    assert_eq!((open.client, open.input.value.as_str(), open.ret.is_none()), (3, " 3", true));
    let Ok(Imported::Kv { model, .. }) =
        import(InputFormat::PorcupineKv, &text, "test", ModelChoice::KvUnpartitioned)
    else {
        panic!("not a key-value history");
    };
    assert!(!model.partitioned);
}

#[test]
fn malformed_porcupine_kv_lines_are_refused_with_their_line() {
    let put = r#"{:process 0, :type :invoke, :f :put, :key "a", :value "1"}"#;
    let cases: [(String, u64, &str); 5] = [
        (format!("{put}\n{put}"), 2, "still open"),
        (
            r#"{:process 0, :type :ok, :f :get, :key "a", :value "1"}"#.to_string(),
            1,
            "never invoked",
        ),
        (
            r#"{:process 0, :type :invoke, :f :cas, :key "a", :value "1"}"#.to_string(),
            1,
            "unknown :f",
        ),
        (r#"{:process 0, :type :invoke, :f :get, :key 7, :value nil}"#.to_string(), 1, ":key"),
        (format!("{put}\n{{:process 0, :f :put}}"), 2, "missing :type"),
    ];
    for (text, line, message) in cases {
        let (found_line, found) = refusal(InputFormat::PorcupineKv, &text);
        assert_eq!(found_line, line, "{text}: {found}");
        assert!(found.contains(message), "{text}: {found}");
    }
}
