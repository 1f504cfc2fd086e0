//! `lockcheck serve`: browse the stored runs on localhost: a list with each
//! run's verdict and command, linking to its HTML report, its history and
//! its results. Loopback only; read only; a report missing from an older
//! run is rendered on first view.

use std::fmt::Write as _;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use lockcheck_reports::escape_html;

use crate::args::ServeArgs;
use crate::exit;

/// The files of a run that may be fetched, with their content types.
const FILES: [(&str, &str); 4] = [
    ("report.html", "text/html; charset=utf-8"),
    ("history.jsonl", "application/x-ndjson; charset=utf-8"),
    ("results.json", "application/json; charset=utf-8"),
    ("command", "text/plain; charset=utf-8"),
];

/// How long a client may take to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// One stored run, as the list shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Listed {
    test: String,
    run: String,
    verdict: String,
    command: String,
}

/// Whether `path` is a directory (`want_dir`) or a regular file, and not a
/// symbolic link: nothing is served or listed through a link, so a link
/// planted in the store cannot reach a file outside it.
fn plain(path: &Path, want_dir: bool) -> bool {
    fs::symlink_metadata(path).is_ok_and(|meta| {
        let kind = meta.file_type();
        !kind.is_symlink() && if want_dir { kind.is_dir() } else { kind.is_file() }
    })
}

/// A file of a run, read only when it is a regular file.
fn read_plain(path: &Path) -> Option<Vec<u8>> {
    plain(path, false).then(|| fs::read(path).ok()).flatten()
}

/// Every run under `store` (`<test>/<run>/history.jsonl`), newest first.
fn runs(store: &Path) -> Vec<Listed> {
    let mut runs = Vec::new();
    let Ok(tests) = fs::read_dir(store) else { return runs };
    for test in tests.filter_map(Result::ok) {
        let test_name = test.file_name().to_string_lossy().to_string();
        if test_name == "latest" || !plain(&test.path(), true) {
            continue;
        }
        let Ok(dirs) = fs::read_dir(test.path()) else { continue };
        for run in dirs.filter_map(Result::ok) {
            let dir = run.path();
            if !plain(&dir, true) || !plain(&dir.join("history.jsonl"), false) {
                continue;
            }
            let verdict = read_plain(&dir.join("results.json"))
                .and_then(|json| serde_json::from_slice::<serde_json::Value>(&json).ok())
                .and_then(|json| json["verdict"].as_str().map(str::to_string))
                .unwrap_or_else(|| "?".to_string());
            let command = read_plain(&dir.join("command"))
                .map(|bytes| String::from_utf8_lossy(&bytes).trim().to_string())
                .unwrap_or_default();
            runs.push(Listed {
                test: test_name.clone(),
                run: run.file_name().to_string_lossy().to_string(),
                verdict,
                command,
            });
        }
    }
    // Run folders start with their UTC time: newest first across tests.
    runs.sort_by(|a, b| b.run.cmp(&a.run).then(a.test.cmp(&b.test)));
    runs
}

/// A path segment safe to put in a URL: store folder names are
/// `[A-Za-z0-9._-]`, anything else is escaped.
fn url_segment(segment: &str) -> String {
    let mut out = String::new();
    for byte in segment.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-') {
            out.push(byte as char);
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

fn index(store: &Path) -> String {
    let runs = runs(store);
    let mut html = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>lockcheck runs</title><style>\
         body{font:14px system-ui,sans-serif;margin:2em}table{border-collapse:collapse}\
         td,th{padding:.3em .8em;border-bottom:1px solid #ddd;text-align:left}\
         .valid{color:#17702b}.invalid{color:#b00020;font-weight:bold}.unknown{color:#8a6d00}\
         code{font-size:12px}</style></head><body>",
    );
    let _ = write!(
        html,
        "<h1>lockcheck runs</h1><p>{} runs in <code>{}</code>, newest first.</p>",
        runs.len(),
        escape_html(&store.display().to_string())
    );
    html.push_str(
        "<table><tr><th>run</th><th>test</th><th>verdict</th><th>files</th><th>command</th></tr>",
    );
    for run in &runs {
        let base = format!("/runs/{}/{}", url_segment(&run.test), url_segment(&run.run));
        let _ = write!(
            html,
            "<tr><td><a href=\"{base}/report.html\">{}</a></td><td>{}</td><td class=\"{}\">{}</td>\
             <td><a href=\"{base}/history.jsonl\">history</a> <a href=\"{base}/results.json\">results</a></td>\
             <td><code>{}</code></td></tr>",
            escape_html(&run.run),
            escape_html(&run.test),
            escape_html(&run.verdict),
            escape_html(&run.verdict),
            escape_html(&run.command)
        );
    }
    html.push_str("</table></body></html>");
    html
}

/// A store folder name from a URL segment, if it is one: no separators, no
/// `..`, no escapes (the names lockcheck writes need none).
fn folder(segment: &str) -> Option<&str> {
    let plain = !segment.is_empty()
        && segment != "."
        && segment != ".."
        && segment
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-'));
    plain.then_some(segment)
}

/// The answer to `GET target`: status, content type, body, its passwords
/// masked ([`lockcheck_checker::redact`]), even those of a run stored by
/// an older lockcheck that wrote them.
fn answer(store: &Path, target: &str) -> (u16, &'static str, Vec<u8>) {
    let (status, kind, body) = unredacted_answer(store, target);
    match String::from_utf8(body) {
        Ok(text) => (status, kind, lockcheck_checker::redact(&text).into_bytes()),
        Err(error) => (status, kind, error.into_bytes()),
    }
}

fn unredacted_answer(store: &Path, target: &str) -> (u16, &'static str, Vec<u8>) {
    let path = target.split(['?', '#']).next().unwrap_or("/");
    if path == "/" || path == "/index.html" {
        return (200, "text/html; charset=utf-8", index(store).into_bytes());
    }
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let found = match segments.as_slice() {
        ["runs", test, run, file] => folder(test).zip(folder(run)).and_then(|(test, run)| {
            FILES.iter().find(|(name, _)| name == file).map(|&(name, kind)| (test, run, name, kind))
        }),
        _ => None,
    };
    let Some((test, run, name, kind)) = found else {
        return (404, "text/plain; charset=utf-8", b"not found\n".to_vec());
    };
    let dir: PathBuf = store.join(test).join(run);
    if !plain(&store.join(test), true)
        || !plain(&dir, true)
        || !plain(&dir.join("history.jsonl"), false)
    {
        return (404, "text/plain; charset=utf-8", b"no such run\n".to_vec());
    }
    if name == "report.html" && fs::symlink_metadata(dir.join(name)).is_err() {
        // An older run, stored before reports were: render it now.
        if let Err(error) = render_report(&dir) {
            let body = format!("cannot render the report: {error:#}\n");
            return (500, "text/plain; charset=utf-8", body.into_bytes());
        }
    }
    match read_plain(&dir.join(name)) {
        Some(body) => (200, kind, body),
        None => (404, "text/plain; charset=utf-8", b"not found\n".to_vec()),
    }
}

/// Whether a request's `Host` header names this server: a loopback name or
/// address, with or without the port it listens on. A page on another site
/// that makes its own name resolve to 127.0.0.1 (DNS rebinding) sends its
/// own name here, and is refused.
fn host_allowed(host: Option<&str>, port: u16) -> bool {
    let Some(host) = host.map(str::trim) else { return false };
    let (name, given_port) = match host.rsplit_once(':') {
        Some((name, given)) if !name.ends_with(':') && !given.contains(']') => (name, Some(given)),
        _ => (host, None),
    };
    let port_ok = given_port.is_none_or(|given| given.parse::<u16>() == Ok(port));
    let name = name.to_ascii_lowercase();
    let loopback = name == "localhost"
        || name == "[::1]"
        || name.parse::<Ipv4Addr>().is_ok_and(|address| address.is_loopback());
    port_ok && loopback
}

/// Writes a run's missing `report.html` from its history.
fn render_report(dir: &Path) -> anyhow::Result<()> {
    let args = crate::args::ReportArgs {
        path: dir.to_path_buf(),
        output: None,
        format: crate::args::Format::Json,
        linearizability_timeout: Duration::from_secs(10),
    };
    let events =
        crate::report::read_events(&dir.join("history.jsonl")).map_err(anyhow::Error::msg)?;
    crate::report::write_report(&args, &events).map(|_| ())
}

fn respond(mut stream: TcpStream, store: &Path, port: u16) {
    let _ = stream.set_read_timeout(Some(READ_TIMEOUT));
    let mut reader = BufReader::new(match stream.try_clone() {
        Ok(clone) => clone,
        Err(_) => return,
    });
    let mut request = String::new();
    if reader.read_line(&mut request).is_err() {
        return;
    }
    // Of the rest of the head only Host matters; a head of more than 100
    // lines is cut off there.
    let mut host = None;
    let mut line = String::new();
    for _ in 0..100 {
        line.clear();
        if !reader.read_line(&mut line).is_ok_and(|read| read > 2) {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.trim().eq_ignore_ascii_case("host") {
                host = Some(value.trim().to_string());
            }
        }
    }
    let mut words = request.split_whitespace();
    let (status, kind, body) = match (words.next(), words.next()) {
        _ if !host_allowed(host.as_deref(), port) => (
            421,
            "text/plain; charset=utf-8",
            b"this server answers only to its loopback name\n".to_vec(),
        ),
        (Some("GET" | "HEAD"), Some(target)) => answer(store, target),
        _ => (405, "text/plain; charset=utf-8", b"only GET\n".to_vec()),
    };
    let reason = match status {
        200 => "OK",
        404 => "Not Found",
        421 => "Misdirected Request",
        405 => "Method Not Allowed",
        _ => "Internal Server Error",
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes());
    if !request.starts_with("HEAD") {
        let _ = stream.write_all(&body);
    }
}

pub fn run(args: &ServeArgs) -> anyhow::Result<ExitCode> {
    let listener = match TcpListener::bind((Ipv4Addr::LOCALHOST, args.port)) {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("lockcheck: cannot listen on 127.0.0.1:{}: {error}", args.port);
            return Ok(exit::UNAVAILABLE.into());
        }
    };
    let address = listener.local_addr()?;
    println!("serving the runs in {} at http://{address}/ (Ctrl-C stops)", args.store.display());
    let _ = std::io::stdout().flush();
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let store = args.store.clone();
        std::thread::spawn(move || respond(stream, &store, address.port()));
    }
    Ok(exit::VALID.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_stored_by_an_older_run_are_not_served() {
        let store =
            std::env::temp_dir().join(format!("lockcheck-serve-secret-{}", std::process::id()));
        let _ = fs::remove_dir_all(&store);
        let run = store.join("postgres-lease-fenced-write").join("20261130T000000.000Z-seed-1");
        fs::create_dir_all(&run).expect("made");
        let command = "lockcheck check --postgres-url postgres://u:hunter2@h/db --mysql-url mysql://root:hunter2@[::1]:3306/t\n";
        fs::write(run.join("history.jsonl"), "").expect("written");
        fs::write(
            run.join("results.json"),
            r#"{"verdict":"valid","source":"host=h password=hunter2"}"#,
        )
        .expect("written");
        fs::write(run.join("command"), command).expect("written");
        for path in [
            "/",
            "/runs/postgres-lease-fenced-write/20261130T000000.000Z-seed-1/command",
            "/runs/postgres-lease-fenced-write/20261130T000000.000Z-seed-1/results.json",
        ] {
            let (status, _, body) = answer(&store, path);
            let body = String::from_utf8(body).expect("utf-8");
            assert_eq!(status, 200, "{path}: {body}");
            assert!(!body.contains("hunter2"), "{path}: {body}");
            assert!(body.contains(":***@") || body.contains("password=***"), "{path}: {body}");
        }
        let _ = fs::remove_dir_all(&store);
    }

    #[test]
    fn only_store_folders_and_known_files_are_served() {
        let store =
            std::env::temp_dir().join(format!("lockcheck-serve-test-{}", std::process::id()));
        let run = store.join("sim-redis-fenced-write").join("20261130T000000.000Z-seed-1");
        fs::create_dir_all(&run).expect("made");
        fs::write(run.join("history.jsonl"), "").expect("written");
        fs::write(run.join("results.json"), r#"{"verdict":"invalid"}"#).expect("written");
        fs::write(run.join("command"), "lockcheck check --seed 1\n").expect("written");
        fs::write(store.join("secret"), "no").expect("written");
        let (status, _, body) = answer(&store, "/");
        assert_eq!(status, 200);
        let body = String::from_utf8(body).expect("utf-8");
        assert!(body.contains("20261130T000000.000Z-seed-1"), "{body}");
        assert!(body.contains("class=\"invalid\""), "{body}");
        assert!(body.contains("lockcheck check --seed 1"), "{body}");
        let (status, kind, body) =
            answer(&store, "/runs/sim-redis-fenced-write/20261130T000000.000Z-seed-1/command");
        assert_eq!(
            (status, kind, body),
            (200, "text/plain; charset=utf-8", b"lockcheck check --seed 1\n".to_vec())
        );
        for bad in [
            "/runs/../secret/x/command",
            "/runs/sim-redis-fenced-write/..%2F..%2Fsecret/command",
            "/runs/sim-redis-fenced-write/20261130T000000.000Z-seed-1/../../secret",
            "/runs/sim-redis-fenced-write/20261130T000000.000Z-seed-1/secret",
            "/etc/passwd",
        ] {
            assert_eq!(answer(&store, bad).0, 404, "{bad}");
        }
        let _ = fs::remove_dir_all(&store);
    }

    #[test]
    fn nothing_is_served_or_listed_through_a_symbolic_link() {
        let store =
            std::env::temp_dir().join(format!("lockcheck-serve-links-{}", std::process::id()));
        let _ = fs::remove_dir_all(&store);
        let outside = store.with_extension("outside");
        fs::create_dir_all(&outside).expect("made");
        fs::write(outside.join("secret"), "password=hunter2\n").expect("written");
        let test = store.join("sim-redis-fenced-write");
        // A run whose files are links to a file outside the store.
        let linked = test.join("20261130T000000.000Z-seed-1");
        fs::create_dir_all(&linked).expect("made");
        for name in ["history.jsonl", "command", "results.json", "report.html"] {
            std::os::unix::fs::symlink(outside.join("secret"), linked.join(name)).expect("linked");
        }
        // A run folder that is itself a link, and a test folder that is one.
        std::os::unix::fs::symlink(&outside, test.join("20261130T000000.000Z-seed-2"))
            .expect("linked");
        fs::write(outside.join("history.jsonl"), "").expect("written");
        fs::write(outside.join("command"), "password=hunter2\n").expect("written");
        std::os::unix::fs::symlink(&outside, store.join("linked-test")).expect("linked");
        let index = String::from_utf8(answer(&store, "/").2).expect("utf-8");
        assert!(index.contains("0 runs"), "{index}");
        assert!(!index.contains("hunter2"), "{index}");
        for path in [
            "/runs/sim-redis-fenced-write/20261130T000000.000Z-seed-1/history.jsonl",
            "/runs/sim-redis-fenced-write/20261130T000000.000Z-seed-1/command",
            "/runs/sim-redis-fenced-write/20261130T000000.000Z-seed-1/report.html",
            "/runs/sim-redis-fenced-write/20261130T000000.000Z-seed-2/command",
            "/runs/linked-test/seed/command",
        ] {
            let (status, _, body) = answer(&store, path);
            assert_eq!(status, 404, "{path}: {}", String::from_utf8_lossy(&body));
        }
        assert_eq!(
            fs::read_to_string(outside.join("secret")).expect("kept"),
            "password=hunter2\n",
            "a report is never rendered through a link"
        );
        let _ = fs::remove_dir_all(&store);
        let _ = fs::remove_dir_all(&outside);
    }

    #[test]
    fn only_loopback_host_names_are_answered() {
        for host in
            ["127.0.0.1:8080", "127.0.0.1", "localhost:8080", "LOCALHOST", "[::1]:8080", "[::1]"]
        {
            assert!(host_allowed(Some(host), 8080), "{host}");
        }
        for host in [
            "attacker.example",
            "attacker.example:8080",
            "127.0.0.1:8081",
            "localhost.attacker.example",
            "10.0.0.1:8080",
            "",
            "127.0.0.1:8080:8080",
        ] {
            assert!(!host_allowed(Some(host), 8080), "{host}");
        }
        assert!(!host_allowed(None, 8080), "a request without Host");
    }
}
