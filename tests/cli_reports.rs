//! Reports people and CI read: stored runs with their HTML report,
//! `lockcheck report`, `lockcheck serve`, and the JUnit and Markdown formats.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

mod common;
use common::{both, lockcheck};

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lockcheck-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temp dir");
    dir
}

/// The one run stored under `store`.
fn stored_run(store: &Path) -> PathBuf {
    let test = std::fs::read_dir(store)
        .expect("the store")
        .filter_map(Result::ok)
        .find(|entry| entry.file_name() != "latest")
        .expect("a test folder")
        .path();
    std::fs::read_dir(test).expect("runs").filter_map(Result::ok).next().expect("a run").path()
}

#[test]
fn a_stored_run_has_its_report_and_report_renders_it_again() {
    let store = temp_dir("reports-store");
    let store_arg = store.display().to_string();
    let output = lockcheck(&["check", "--seed", "1", "--no-shrink", "--store", &store_arg]);
    assert_eq!(output.status.code(), Some(1), "{}", both(&output));
    let run = stored_run(&store);
    for file in ["history.jsonl", "results.json", "report.html", "command"] {
        assert!(run.join(file).is_file(), "{file} missing in {}", run.display());
    }
    let html = std::fs::read_to_string(run.join("report.html")).expect("the report");
    assert!(html.contains("mutual-exclusion"), "the report names the checkers");
    // The terminal report points at the timeline.
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("report.html"), "{}", both(&output));

    std::fs::remove_file(run.join("report.html")).expect("removed");
    let again = lockcheck(&["report", &run.display().to_string()]);
    assert_eq!(again.status.code(), Some(1), "{}", both(&again));
    assert!(run.join("report.html").is_file(), "report writes it back");
    let command = std::fs::read_to_string(run.join("command")).expect("the command");
    let html = std::fs::read_to_string(run.join("report.html")).expect("the report");
    assert!(html.contains(command.split_whitespace().last().unwrap_or("?")));

    let elsewhere = store.join("elsewhere.html");
    let history = run.join("history.jsonl").display().to_string();
    let from_file = lockcheck(&[
        "report",
        &history,
        "-o",
        &elsewhere.display().to_string(),
        "--format",
        "json",
    ]);
    assert_eq!(from_file.status.code(), Some(1), "{}", both(&from_file));
    assert!(elsewhere.is_file());
    let json: serde_json::Value = serde_json::from_slice(&from_file.stdout).expect("JSON");
    assert_eq!(json["verdict"], "invalid");

    let missing = lockcheck(&["report", "/nonexistent/run"]);
    assert_eq!(missing.status.code(), Some(64), "{}", both(&missing));
    let garbage = store.join("garbage.jsonl");
    std::fs::write(&garbage, "{not json\n").expect("written");
    let unreadable = lockcheck(&["report", &garbage.display().to_string()]);
    assert_eq!(unreadable.status.code(), Some(65), "{}", both(&unreadable));
    let _ = std::fs::remove_dir_all(&store);
}

#[test]
fn junit_has_a_testsuite_per_seed_and_markdown_a_table() {
    let output =
        lockcheck(&["check", "--seed", "1", "--seeds", "2", "--no-store", "--format", "junit"]);
    assert_eq!(output.status.code(), Some(1), "{}", both(&output));
    let xml = String::from_utf8_lossy(&output.stdout);
    assert_eq!(xml.matches("<testsuites").count(), 1, "one document:\n{xml}");
    assert_eq!(xml.matches("<testsuite ").count(), 2, "a suite per seed:\n{xml}");
    assert!(xml.contains("<failure"), "{xml}");

    let corpus = "histories/redis/gc-pause/invalid";
    let file = std::fs::read_dir(corpus)
        .expect("the corpus")
        .filter_map(Result::ok)
        .map(|entry| entry.path().display().to_string())
        .find(|path| path.ends_with(".jsonl"))
        .expect("an invalid history");
    let output = lockcheck(&["analyze", "--format", "markdown", &file]);
    assert_eq!(output.status.code(), Some(1), "{}", both(&output));
    let markdown = String::from_utf8_lossy(&output.stdout);
    assert!(markdown.contains("| mutual-exclusion |"), "{markdown}");

    let dir = temp_dir("reports-html-dir");
    let output = lockcheck(&["analyze", "--html-dir", &dir.display().to_string(), &file]);
    assert_eq!(output.status.code(), Some(1), "{}", both(&output));
    let stem = Path::new(&file).file_stem().expect("a stem").to_string_lossy().to_string();
    assert!(dir.join(format!("{stem}.html")).is_file(), "{}", both(&output));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `GET path` from the server at `address`: status line and body.
fn get(address: &str, path: &str) -> (String, String) {
    get_as(address, address, path)
}

/// `GET path` from the server at `address`, naming it `host`.
fn get_as(address: &str, host: &str, path: &str) -> (String, String) {
    let mut stream = TcpStream::connect(address).expect("the server answers");
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n").expect("sent");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read");
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    (head.lines().next().unwrap_or_default().to_string(), body.to_string())
}

#[test]
fn serve_lists_stored_runs_and_serves_their_reports_only() {
    let store = temp_dir("reports-serve");
    let store_arg = store.display().to_string();
    let output = lockcheck(&["check", "--seed", "1", "--no-shrink", "--store", &store_arg]);
    assert_eq!(output.status.code(), Some(1), "{}", both(&output));
    let run = stored_run(&store);
    let mut server = Command::new(env!("CARGO_BIN_EXE_lockcheck"))
        .args(["serve", "--store", &store_arg, "--port", "0"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("serve starts");
    let mut line = String::new();
    BufReader::new(server.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the address line");
    let address = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_default()
        .to_string();
    let (status, index) = get(&address, "/");
    let test = run.parent().and_then(Path::file_name).expect("test").to_string_lossy().to_string();
    let name = run.file_name().expect("run").to_string_lossy().to_string();
    let (report_status, report) = get(&address, &format!("/runs/{test}/{name}/report.html"));
    let (escape_status, _) = get(&address, &format!("/runs/{test}/../../etc/passwd"));
    // DNS rebinding: a page of attacker.example that resolves to 127.0.0.1.
    let (rebound_status, rebound) = get_as(&address, "attacker.example", "/");
    let port = address.rsplit(':').next().unwrap_or_default();
    let (localhost_status, _) = get_as(&address, &format!("localhost:{port}"), "/");
    let _ = server.kill();
    let _ = server.wait();
    assert!(status.contains("200"), "{status}");
    assert!(index.contains(&name) && index.contains("invalid"), "{index}");
    assert!(report_status.contains("200"), "{report_status}");
    assert!(report.contains("<html") || report.contains("<!doctype"), "{report}");
    assert!(escape_status.contains("404"), "{escape_status}");
    assert!(rebound_status.contains("421"), "{rebound_status}");
    assert!(!rebound.contains(&name), "{rebound}");
    assert!(localhost_status.contains("200"), "{localhost_status}");
    let _ = std::fs::remove_dir_all(&store);
}
