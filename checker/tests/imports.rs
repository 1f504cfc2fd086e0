//! The importers of other tools' formats (`jepsen-log`, `porcupine-kv`) on
//! small histories of this project's own: what each line becomes, which
//! lines are refused and where, and the verdicts of a tiny corpus laid out as
//! porcupine's test data is (`data/conformance/{jepsen,kv}/VERDICTS.txt`), so
//! that `lockcheck conformance --porcupine` can be tried on it too.

use std::fs;
use std::path::{Path, PathBuf};

use lockcheck_checker::import::{import, import_from, Imported, InputFormat, ModelChoice};
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

const FORMATS: [InputFormat; 4] =
    [InputFormat::Jsonl, InputFormat::JepsenEdn, InputFormat::JepsenLog, InputFormat::PorcupineKv];

fn notes_of(format: InputFormat, text: &str) -> Vec<String> {
    match import_from(format, text.as_bytes(), "test", ModelChoice::Auto, 0) {
        Ok(import) => import.notes,
        Err(error) => panic!("{error}"),
    }
}

#[test]
fn text_of_no_format_is_refused_by_every_importer_at_its_first_line_with_a_count() {
    let text = "root:x:0:0:root:/root:/bin/bash\n\ndaemon:x:1:1:daemon:/usr/sbin:/bin/sh\n";
    for format in FORMATS {
        let (line, message) = refusal(format, text);
        assert_eq!(line, 1, "{format:?}: {message}");
        assert!(message.contains("the first of"), "{format:?}: {message}");
    }
    // One line that is not an operation, among good ones, is refused too.
    let put = r#"{:process 0, :type :invoke, :f :put, :key "a", :value "1"}"#;
    let (line, message) = refusal(InputFormat::PorcupineKv, &format!("{put}\n[1 2]\n"));
    assert_eq!(line, 2, "{message}");
    assert!(message.contains("expected an operation map"), "{message}");
    let edn = "{:process 0, :type :invoke, :f :read, :value nil}\n\"just a string\"\n";
    let (line, message) = refusal(InputFormat::JepsenEdn, edn);
    assert_eq!(line, 2, "{message}");
    let (line, message) = refusal(InputFormat::JepsenEdn, "{:process 0, :f :read}\n");
    assert_eq!(line, 1, "{message}");
    assert!(message.contains("missing keyword :type"), "{message}");
    let (line, message) = refusal(
        InputFormat::JepsenLog,
        &format!("{}INFO jepsen.core - done\n", log(&["0 :invoke :read nil"])),
    );
    assert_eq!(line, 2, "{message}");
}

#[test]
fn a_history_without_operations_is_unknown_with_nothing_to_check_in_every_format() {
    let nemesis_only = [
        (InputFormat::Jsonl, r#"{"index":0,"time":1,"process":"nemesis","type":"info","f":"start","key":null,"value":null}"#.to_string()),
        (InputFormat::JepsenEdn, "{:process :nemesis, :type :info, :f :start, :value nil}".to_string()),
        (InputFormat::JepsenLog, log(&[":nemesis :info :start nil"])),
        (InputFormat::PorcupineKv, "{:process :nemesis, :type :info, :f :start}".to_string()),
    ];
    let options = CheckOptions::default();
    for (format, text) in nemesis_only {
        for text in ["", "\n\n", text.as_str()] {
            let imported = import(format, text, "test", ModelChoice::Auto)
                .unwrap_or_else(|error| panic!("{format:?} {text:?}: {error}"));
            let analysis = analyze_imported(&imported, &default_checkers(), &options);
            assert_eq!(analysis.verdict, Verdict::Unknown, "{format:?} {text:?}");
            assert!(
                analysis.warnings.iter().any(|warning| warning.contains("nothing to check")),
                "{format:?} {text:?}: {:?}",
                analysis.warnings
            );
        }
    }
}

#[test]
fn nemesis_events_are_skipped_and_counted_and_other_processes_refused() {
    let text = log(&[
        ":nemesis :info :start nil",
        "0 :invoke :write 1",
        "0 :ok :write 1",
        ":nemesis :info :stop nil",
    ]);
    assert_eq!(
        notes_of(InputFormat::JepsenLog, &text),
        ["test: skipped 2 nemesis events (not operations to check)"]
    );
    let (line, message) =
        refusal(InputFormat::JepsenLog, &log(&["0 :invoke :read nil", "x :ok :read nil"]));
    assert_eq!(line, 2, "{message}");
    assert!(message.contains("integer or :nemesis"), "{message}");
    let edn = "{:process :nemesis, :type :info, :f :start}\n{:process 0, :type :invoke, :f :read}\n{:process 0, :type :ok, :f :read, :value nil}\n";
    assert_eq!(
        notes_of(InputFormat::JepsenEdn, edn),
        ["test: skipped 1 nemesis event (not an operation to check)"]
    );
    for bad in [":client", "\"0\"", "nil"] {
        let text = format!(
            "{{:process 0, :type :invoke, :f :read}}\n{{:process {bad}, :type :ok, :f :read}}\n"
        );
        let (line, message) = refusal(InputFormat::JepsenEdn, &text);
        assert_eq!(line, 2, "{bad}: {message}");
        assert!(message.contains(":process must be an integer or :nemesis"), "{bad}: {message}");
        let text = format!("{{:process 0, :type :invoke, :f :get, :key \"a\"}}\n{{:process {bad}, :type :ok, :f :get}}\n");
        let (line, message) = refusal(InputFormat::PorcupineKv, &text);
        assert_eq!(line, 2, "{bad}: {message}");
        assert!(message.contains(":process must be an integer or :nemesis"), "{bad}: {message}");
    }
    let kv = "{:process :nemesis, :type :info, :f :start}\n";
    assert_eq!(
        notes_of(InputFormat::PorcupineKv, kv),
        ["test: skipped 1 nemesis event (not an operation to check)"]
    );
    // A lock history keeps the nemesis' events: nothing is skipped.
    let locks =
        "{:process :nemesis, :type :info, :f :start}\n{:process 0, :type :invoke, :f :acquire}\n";
    assert!(notes_of(InputFormat::JepsenEdn, locks).is_empty());
}

#[test]
fn errors_quote_at_most_about_80_characters_of_a_value_and_its_length() {
    let long = "x".repeat(1_000_000);
    let cases = [
        (
            InputFormat::Jsonl,
            format!(
                r#"{{"index":0,"time":"{long}","process":1,"type":"invoke","f":"acquire","key":"a","value":null}}"#
            ),
        ),
        (
            InputFormat::Jsonl,
            format!(
                r#"{{"index":0,"time":0,"process":1,"type":"{long}","f":"acquire","key":"a","value":null}}"#
            ),
        ),
        (
            InputFormat::Jsonl,
            format!(
                r#"{{"index":0,"time":0,"process":1,"type":"invoke","f":"acquire","key":"a","value":{{"fence":"{long}"}}}}"#
            ),
        ),
        (InputFormat::JepsenEdn, format!("{{:process \"{long}\", :type :invoke, :f :read}}")),
        (
            InputFormat::JepsenEdn,
            format!("{{:process 0, :type :invoke, :f :write, :value \"{long}\"}}"),
        ),
        (InputFormat::JepsenEdn, format!("{{:process 0, :type :invoke, :f :{long}}}")),
        (InputFormat::JepsenEdn, long.clone()),
        (InputFormat::JepsenLog, format!("INFO jepsen.util - 0 :invoke :write {long}")),
        (InputFormat::JepsenLog, long.clone()),
        (
            InputFormat::PorcupineKv,
            format!("{{:process 0, :type :invoke, :f :put, :key \"a\", :value {long}}}"),
        ),
        (
            InputFormat::PorcupineKv,
            format!("{{:process 0, :type :invoke, :f :{long}, :key \"a\"}}"),
        ),
    ];
    for (format, text) in cases {
        let (line, message) = refusal(format, &text);
        assert_eq!(line, 1, "{format:?}");
        assert!(message.len() < 300, "{format:?}: {} bytes: {}", message.len(), &message[..300]);
        assert!(message.contains("…") && message.contains("bytes)"), "{format:?}: {message}");
    }
}

#[test]
fn errors_in_a_top_level_edn_vector_name_the_line_the_bad_element_starts() {
    let text = "[{:process 0, :type :invoke, :f :write, :value 1}\n {:process 0, :type :ok, :f :write, :value 1}\n {:process 0, :type :invoke,\n  :f :write, :value :one}\n {:process 1, :type :invoke, :f :read}\n]\n";
    let (line, message) = refusal(InputFormat::JepsenEdn, text);
    assert_eq!(line, 3, "{message}");
    assert!(message.contains("expected an integer"), "{message}");
    let text =
        "[{:process 0, :type :invoke, :f :read}\n :oops\n {:process 0, :type :ok, :f :read}]";
    assert_eq!(refusal(InputFormat::JepsenEdn, text).0, 2);
}

#[test]
fn integers_of_2_to_the_64_and_more_are_out_of_range_not_floats() {
    let big = "18446744073709551616";
    let cases = [
        (
            InputFormat::Jsonl,
            format!(
                r#"{{"index":{big},"time":0,"process":1,"type":"invoke","f":"acquire","key":"a","value":null}}"#
            ),
        ),
        (
            InputFormat::Jsonl,
            format!(
                r#"{{"index":0,"time":0,"process":1,"type":"invoke","f":"acquire","key":"a","value":{{"ttl_ms":{big}}}}}"#
            ),
        ),
        (InputFormat::JepsenEdn, format!("{{:process 0, :type :invoke, :f :write, :value {big}}}")),
        (
            InputFormat::JepsenEdn,
            format!("{{:process 0, :type :invoke, :f :cas, :value [1 {big}]}}"),
        ),
        (InputFormat::JepsenEdn, format!("{{:process {big}, :type :invoke, :f :read}}")),
        (InputFormat::JepsenLog, format!("INFO jepsen.util - 0 :invoke :write {big}")),
        (InputFormat::JepsenLog, format!("INFO jepsen.util - {big} :invoke :read nil")),
        (
            InputFormat::PorcupineKv,
            format!("{{:process {big}, :type :invoke, :f :get, :key \"a\"}}"),
        ),
    ];
    for (format, text) in cases {
        let (line, message) = refusal(format, &text);
        assert_eq!(line, 1, "{format:?}");
        assert!(message.contains("integer out of range"), "{format:?}: {message}");
        assert!(!message.contains("float"), "{format:?}: {message}");
    }
}

#[test]
fn importers_stream_through_a_reader_of_any_buffer_size() {
    let inputs = [
        (InputFormat::JepsenLog, fs::read_to_string(corpus().join("jepsen/cas-timeouts-ok.log")).unwrap()),
        (InputFormat::PorcupineKv, fs::read_to_string(corpus().join("kv/two-keys-ok.txt")).unwrap()),
        (InputFormat::JepsenEdn, "[{:process 0, :type :invoke, :f :write, :value 1}\n {:process 0, :type :ok, :f :write, :value 1}\n {:process 1, :type :invoke, :f :read}\n {:process 1, :type :ok, :f :read, :value 1}]".to_string()),
    ];
    for (format, text) in inputs {
        let whole = format!("{:?}", import(format, &text, "test", ModelChoice::Auto).unwrap());
        let tiny = std::io::BufReader::with_capacity(1, text.as_bytes());
        let streamed = import_from(format, tiny, "test", ModelChoice::Auto, 0).unwrap();
        assert_eq!(format!("{:?}", streamed.imported), whole, "{format:?}");
    }
}

#[test]
fn a_truncated_final_json_line_is_ignored_with_a_note_and_any_other_refused() {
    let lines = [
        r#"{"index":0,"time":1,"process":1,"type":"invoke","f":"acquire","key":"a","value":null}"#,
        r#"{"index":1,"time":2,"process":1,"type":"ok","f":"acquire","key":"a","value":null}"#,
    ];
    let cut = r#"{"index":2,"time":3,"process":1,"ty"#;
    let text = format!("{}\n{}\n{cut}", lines[0], lines[1]);
    assert_eq!(notes_of(InputFormat::Jsonl, &text), ["test:3: truncated final line, ignored"]);
    let Ok(Imported::Locks(history)) = import(InputFormat::Jsonl, &text, "test", ModelChoice::Auto)
    else {
        panic!("not read");
    };
    assert_eq!(history.event_count(), 2);
    // Cut short in the middle: still an error, as is a final line that is not cut JSON.
    let (line, _) = refusal(InputFormat::Jsonl, &format!("{}\n{cut}\n{}\n", lines[0], lines[1]));
    assert_eq!(line, 2);
    let (line, _) = refusal(InputFormat::Jsonl, &format!("{}\n{}\nnot json\n", lines[0], lines[1]));
    assert_eq!(line, 3);
    // The strict reader still refuses it.
    assert!(lockcheck_checker::read_history(text.as_bytes(), "test").is_err());
}
