//! `analyze` reads within bounds, from files and standard input alike: a
//! line past the cap, endless garbage and a corrupt last line all end in
//! exit 65 naming the line; a byte-order mark is skipped; and errors say
//! what they found in plain words.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::both;

fn clean() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/clean.jsonl")
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lockcheck-bounds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn analyze(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lockcheck"))
        .arg("analyze")
        .args(args)
        .output()
        .expect("the lockcheck binary runs")
}

/// `analyze -` fed by `feed` on another thread until it stops reading
/// (a broken pipe ends the feeding).
fn analyze_stdin(feed: impl FnOnce(&mut dyn Write) + Send + 'static) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_lockcheck"))
        .args(["analyze", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || feed(&mut stdin));
    let output = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    output
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn an_endless_line_ends_at_the_cap_with_its_line_named() {
    let output = analyze(&["/dev/zero"]);
    assert_eq!(output.status.code(), Some(65), "{}", both(&output));
    assert!(stderr(&output).contains("/dev/zero:1: line longer than 16 MiB"), "{}", both(&output));
    // The same from standard input, for ever.
    let output = analyze_stdin(|stdin| {
        let zeros = vec![0u8; 1 << 16];
        while stdin.write_all(&zeros).is_ok() {}
    });
    assert_eq!(output.status.code(), Some(65), "{}", both(&output));
    assert!(stderr(&output).contains("-:1: line longer than 16 MiB"), "{}", both(&output));
}

#[test]
fn the_cap_is_an_option_and_counts_the_line_it_names() {
    let path = scratch("long.jsonl");
    let mut text = std::fs::read_to_string(clean()).unwrap();
    let lines = text.lines().count();
    text.push_str(&format!("{{\"key\":\"{}\"}}\n", "k".repeat(100_000)));
    std::fs::write(&path, &text).unwrap();
    let output = analyze(&["--max-line-bytes", "64KiB", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(65), "{}", both(&output));
    let said = format!("{}:{}: line longer than 64 KiB", path.display(), lines + 1);
    assert!(stderr(&output).contains(&said), "{}", both(&output));
    // Under the default cap the line is read, and is bad for what it is.
    let output = analyze(&[path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(65), "{}", both(&output));
    assert!(!stderr(&output).contains("longer than"), "{}", both(&output));
    let output = analyze(&["--max-line-bytes", "none", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(64), "{}", both(&output));
}

#[test]
fn endless_garbage_ends_after_enough_bad_lines() {
    let output = analyze_stdin(|stdin| while stdin.write_all(b"garbage\n").is_ok() {});
    assert_eq!(output.status.code(), Some(65), "{}", both(&output));
    let message = stderr(&output);
    assert!(message.contains("-:1: "), "{message}");
    assert!(message.contains("1000 or more lines that are not operations: reading stopped"));
}

#[test]
fn a_corrupt_last_line_with_a_newline_is_bad_and_one_without_is_cut_short() {
    let text = std::fs::read_to_string(clean()).unwrap();
    let lines = text.lines().count();
    let path = scratch("corrupt-last.jsonl");
    std::fs::write(&path, format!("{text}{{\"index\":4,\"time\":5000,\n")).unwrap();
    let output = analyze(&[path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(65), "{}", both(&output));
    assert!(stderr(&output).contains(&format!("{}:{}: ", path.display(), lines + 1)));
    std::fs::write(&path, format!("{text}{{\"index\":4,\"time\":5000,")).unwrap();
    let output = analyze(&[path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{}", both(&output));
    assert!(stderr(&output).contains("truncated final line, ignored"), "{}", both(&output));
    // A lone line of brackets is not a history cut short: 65, not 2.
    std::fs::write(&path, format!("{}\n", "[".repeat(100_000))).unwrap();
    let output = analyze(&[path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(65), "{}", both(&output));
}

#[test]
fn a_byte_order_mark_is_skipped() {
    let path = scratch("bom.jsonl");
    let mut text = b"\xEF\xBB\xBF".to_vec();
    text.extend(std::fs::read(clean()).unwrap());
    std::fs::write(&path, text).unwrap();
    let output = analyze(&[path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{}", both(&output));
}

#[test]
fn integers_past_their_bits_are_said_so_and_no_message_shows_rust() {
    let path = scratch("big.jsonl");
    let event = r#"{"index":0,"time":0,"process":9223372036854775808,"type":"invoke","f":"acquire","key":"a","value":null}"#;
    std::fs::write(&path, format!("{event}\n")).unwrap();
    let output = analyze(&[path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(65), "{}", both(&output));
    assert!(stderr(&output).contains("integer out of range (beyond 63 bits)"), "{}", both(&output));
    let mismatch = concat!(
        r#"{"index":0,"time":0,"process":1,"type":"invoke","f":"acquire","key":"a","value":null}"#,
        "\n",
        r#"{"index":1,"time":1,"process":1,"type":"ok","f":"release","key":"b","value":null}"#,
        "\n",
    );
    std::fs::write(&path, mismatch).unwrap();
    let output = analyze(&[path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(65), "{}", both(&output));
    let message = stderr(&output);
    assert!(message.contains(r#"is release "b", but process 1 invoked acquire "a""#), "{message}");
    assert!(!message.contains("Some("), "{message}");
}
