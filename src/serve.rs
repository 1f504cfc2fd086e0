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

/// Every run under `store` (`<test>/<run>/history.jsonl`), newest first.
fn runs(store: &Path) -> Vec<Listed> {
    let mut runs = Vec::new();
    let Ok(tests) = fs::read_dir(store) else { return runs };
    for test in tests.filter_map(Result::ok) {
        let test_name = test.file_name().to_string_lossy().to_string();
        if test_name == "latest" || !test.path().is_dir() {
            continue;
        }
        let Ok(dirs) = fs::read_dir(test.path()) else { continue };
        for run in dirs.filter_map(Result::ok) {
            let dir = run.path();
            if !dir.join("history.jsonl").is_file() {
                continue;
            }
            let verdict = fs::read_to_string(dir.join("results.json"))
                .ok()
                .and_then(|json| serde_json::from_str::<serde_json::Value>(&json).ok())
                .and_then(|json| json["verdict"].as_str().map(str::to_string))
                .unwrap_or_else(|| "?".to_string());
            let command =
                fs::read_to_string(dir.join("command")).unwrap_or_default().trim().to_string();
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

/// The answer to `GET target`: status, content type, body.
fn answer(store: &Path, target: &str) -> (u16, &'static str, Vec<u8>) {
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
    if !dir.join("history.jsonl").is_file() {
        return (404, "text/plain; charset=utf-8", b"no such run\n".to_vec());
    }
    if name == "report.html" && !dir.join(name).is_file() {
        // An older run, stored before reports were: render it now.
        if let Err(error) = render_report(&dir) {
            let body = format!("cannot render the report: {error:#}\n");
            return (500, "text/plain; charset=utf-8", body.into_bytes());
        }
    }
    match fs::read(dir.join(name)) {
        Ok(body) => (200, kind, body),
        Err(_) => (404, "text/plain; charset=utf-8", b"not found\n".to_vec()),
    }
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

fn respond(mut stream: TcpStream, store: &Path) {
    let _ = stream.set_read_timeout(Some(READ_TIMEOUT));
    let mut reader = BufReader::new(match stream.try_clone() {
        Ok(clone) => clone,
        Err(_) => return,
    });
    let mut request = String::new();
    if reader.read_line(&mut request).is_err() {
        return;
    }
    // The rest of the head is read and ignored.
    let mut line = String::new();
    while reader.read_line(&mut line).is_ok_and(|read| read > 2) {
        line.clear();
    }
    let mut words = request.split_whitespace();
    let (status, kind, body) = match (words.next(), words.next()) {
        (Some("GET" | "HEAD"), Some(target)) => answer(store, target),
        _ => (405, "text/plain; charset=utf-8", b"only GET\n".to_vec()),
    };
    let reason = match status {
        200 => "OK",
        404 => "Not Found",
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
        std::thread::spawn(move || respond(stream, &store));
    }
    Ok(exit::VALID.into())
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
