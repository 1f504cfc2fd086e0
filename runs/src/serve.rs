//! `lockcheck serve`: browse the stored runs on localhost: a list with each
//! run's verdict and command, linking to its HTML report, its history and
//! its results. Loopback only; read only: a report missing from a run (an
//! older one, or one stopped before its end) is rendered for the view and
//! never written. Within bounds: a request line of at most 8 KiB (414
//! past it), a head of at most 32 KiB in 100 lines (431 past it), 32
//! requests at once (503 past them), and files streamed, not held.
//!
//! hyper speaks HTTP, on a tokio runtime of one thread; files are read and
//! reports rendered on its blocking threads. The two bounds on a head that
//! hyper does not keep by itself are kept in front of it: the head is read
//! here first, within them, and then handed to hyper to read again.

use std::convert::Infallible;
use std::fmt::Write as _;
use std::fs;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Bytes, Frame, Incoming, SizeHint};
use hyper::header::{self, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use lockcheck_reports::escape_html;
use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader,
};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};

use crate::report::{check_events, read_events};
use crate::StoreError;

/// The files of a run that may be fetched, with their content types.
const FILES: [(&str, &str); 4] = [
    ("report.html", "text/html; charset=utf-8"),
    ("history.jsonl", "application/x-ndjson; charset=utf-8"),
    ("results.json", "application/json; charset=utf-8"),
    ("command", "text/plain; charset=utf-8"),
];

/// How long a client may take to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest request line (method, target, version): past it, 414.
const MAX_REQUEST_LINE: u64 = 8 << 10;

/// The most the header lines after the request line may hold, and how
/// many there may be: past either, 431.
const MAX_HEAD_BYTES: u64 = 32 << 10;
const MAX_HEAD_LINES: usize = 100;

/// Requests answered at once; one more is answered 503 at once.
const MAX_CONNECTIONS: usize = 32;

/// A file is streamed in pieces of this size, cut at a newline where one
/// is (each piece is redacted on its own: a password never spans lines).
const PIECE_BYTES: usize = 64 << 10;

/// One stored run, as the list shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Listed {
    test: String,
    run: String,
    verdict: String,
    command: String,
    /// Whether the run has its `results.json` (one stopped before its end
    /// has not).
    has_results: bool,
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
            let has_results = plain(&dir.join("results.json"), false);
            let verdict = read_plain(&dir.join("results.json"))
                .and_then(|json| serde_json::from_slice::<serde_json::Value>(&json).ok())
                .and_then(|json| json["verdict"].as_str().map(str::to_string))
                .unwrap_or_else(|| if has_results { "?" } else { "incomplete" }.to_string());
            let command = read_plain(&dir.join("command"))
                .map(|bytes| String::from_utf8_lossy(&bytes).trim().to_string())
                .unwrap_or_default();
            runs.push(Listed {
                test: test_name.clone(),
                run: run.file_name().to_string_lossy().to_string(),
                verdict,
                command,
                has_results,
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
        // The report is there or rendered for the view; results only if the
        // run wrote them.
        let results = match run.has_results {
            true => format!(" <a href=\"{base}/results.json\">results</a>"),
            false => String::new(),
        };
        let _ = write!(
            html,
            "<tr><td><a href=\"{base}/report.html\">{}</a></td><td>{}</td><td class=\"{}\">{}</td>\
             <td><a href=\"{base}/history.jsonl\">history</a>{results}</td>\
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

/// What a response carries.
#[derive(Debug, PartialEq, Eq)]
enum Body {
    /// Text made for the answer, its passwords masked already.
    Text(Vec<u8>),
    /// A stored file, streamed and masked as it goes.
    File(PathBuf),
}

impl Body {
    fn text(text: &str) -> Body {
        Body::Text(text.as_bytes().to_vec())
    }

    /// The whole body, for a test.
    #[cfg(test)]
    fn bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            Body::Text(text) => out.extend_from_slice(text),
            Body::File(path) => {
                let file = fs::File::open(path).expect("a file to serve");
                copy_redacted(file, &mut out).expect("read");
            }
        }
        out
    }
}

const TEXT: &str = "text/plain; charset=utf-8";

/// The answer to `GET target`: status, content type and body, its
/// passwords masked ([`lockcheck_checker::redact`]), even those of a run
/// stored by an older lockcheck that wrote them.
fn answer(store: &Path, target: &str) -> (u16, &'static str, Body) {
    let path = target.split(['?', '#']).next().unwrap_or("/");
    if path == "/" || path == "/index.html" {
        return (200, "text/html; charset=utf-8", Body::Text(masked(index(store))));
    }
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let found = match segments.as_slice() {
        ["runs", test, run, file] => folder(test).zip(folder(run)).and_then(|(test, run)| {
            FILES.iter().find(|(name, _)| name == file).map(|&(name, kind)| (test, run, name, kind))
        }),
        _ => None,
    };
    let Some((test, run, name, kind)) = found else {
        return (404, TEXT, Body::text("not found\n"));
    };
    let dir: PathBuf = store.join(test).join(run);
    if !plain(&store.join(test), true)
        || !plain(&dir, true)
        || !plain(&dir.join("history.jsonl"), false)
    {
        return (404, TEXT, Body::text("no such run\n"));
    }
    if name == "report.html" && fs::symlink_metadata(dir.join(name)).is_err() {
        // A run without its report (an older one, or one stopped before its
        // end): rendered for this view, and never written into the store.
        return match render_report(&dir) {
            Ok(html) => (200, kind, Body::Text(masked(html))),
            Err(error) => {
                let body = masked(format!("cannot render the report: {error:#}\n"));
                (500, TEXT, Body::Text(body))
            }
        };
    }
    match plain(&dir.join(name), false) {
        true => (200, kind, Body::File(dir.join(name))),
        false => (404, TEXT, Body::text("not found\n")),
    }
}

fn masked(text: String) -> Vec<u8> {
    lockcheck_checker::redact(&text).into_bytes()
}

/// Copies `from` to `to` a piece at a time, each piece cut at its last
/// newline (or at [`PIECE_BYTES`] × 16 in a line that long) and masked.
fn copy_redacted(mut from: impl Read, to: &mut impl Write) -> io::Result<()> {
    let mut pending = Vec::with_capacity(2 * PIECE_BYTES);
    let mut block = vec![0; PIECE_BYTES];
    loop {
        let read = match from.read(&mut block) {
            Ok(0) => break,
            Ok(read) => read,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        };
        pending.extend_from_slice(&block[..read]);
        let cut = match pending.iter().rposition(|&byte| byte == b'\n') {
            Some(at) => at + 1,
            None if pending.len() >= 16 * PIECE_BYTES => pending.len(),
            None => continue,
        };
        write_masked(&pending[..cut], to)?;
        pending.drain(..cut);
    }
    write_masked(&pending, to)
}

fn write_masked(piece: &[u8], to: &mut impl Write) -> io::Result<()> {
    match std::str::from_utf8(piece) {
        Ok(text) => to.write_all(lockcheck_checker::redact(text).as_bytes()),
        Err(_) => to.write_all(piece),
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

/// A run's report, rendered from its history for one view.
fn render_report(dir: &Path) -> Result<String, StoreError> {
    let events = read_events(&dir.join("history.jsonl")).map_err(StoreError::History)?;
    Ok(check_events(dir, &events, Duration::from_secs(10))?.html)
}

/// A request's head, as far as it was read.
#[derive(Debug, PartialEq, Eq)]
enum Head {
    Request {
        line: String,
        host: Option<String>,
    },
    /// Past a bound: the status that says which (414 or 431).
    TooLarge(u16),
    /// The client went away, or never finished its head.
    Gone,
}

/// Reads a request's head within its bounds, keeping its bytes in `raw`
/// for hyper to read again: never more than [`MAX_REQUEST_LINE`] and
/// [`MAX_HEAD_BYTES`] are held.
async fn read_head(reader: &mut (impl AsyncBufRead + Unpin), raw: &mut Vec<u8>) -> Head {
    let mut line = Vec::new();
    match (&mut *reader).take(MAX_REQUEST_LINE + 1).read_until(b'\n', &mut line).await {
        Ok(0) | Err(_) => return Head::Gone,
        Ok(_) if !line.ends_with(b"\n") => {
            return match line.len() as u64 > MAX_REQUEST_LINE {
                true => Head::TooLarge(414),
                false => Head::Gone,
            }
        }
        Ok(_) => {}
    }
    raw.extend_from_slice(&line);
    let line = String::from_utf8_lossy(&line).trim_end().to_string();
    // Of the rest of the head only Host matters here.
    let mut host = None;
    let mut budget = MAX_HEAD_BYTES;
    let mut header = Vec::new();
    for _ in 0..=MAX_HEAD_LINES {
        header.clear();
        match (&mut *reader).take(budget).read_until(b'\n', &mut header).await {
            Ok(0) | Err(_) => return Head::Gone,
            Ok(read) => budget -= read as u64,
        }
        if !header.ends_with(b"\n") {
            return if budget == 0 { Head::TooLarge(431) } else { Head::Gone };
        }
        raw.extend_from_slice(&header);
        if header.trim_ascii().is_empty() {
            return Head::Request { line, host };
        }
        let header = String::from_utf8_lossy(&header);
        if let Some((name, value)) = header.split_once(':') {
            if name.trim().eq_ignore_ascii_case("host") {
                host = Some(value.trim().to_string());
            }
        }
    }
    Head::TooLarge(431)
}

/// One connection. Its head is read here first, within the bounds hyper
/// does not keep by itself (a request line of 8 KiB, a head of 32 KiB),
/// and a head past them, or one that is no request, is refused at once.
/// A head within them is handed to hyper, which reads it again and
/// answers.
async fn connection(stream: TcpStream, store: Arc<Path>, port: u16) {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    let mut raw = Vec::new();
    let head = tokio::time::timeout(READ_TIMEOUT, read_head(&mut reader, &mut raw)).await;
    let host = match head {
        Ok(Head::Request { line, host }) if line.split_whitespace().nth(1).is_some() => host,
        Ok(Head::Request { .. }) => return refuse(&mut write, 400, "not an HTTP request\n").await,
        Ok(Head::TooLarge(status)) => {
            let why = match status {
                414 => "the request line is longer than 8 KiB\n",
                _ => "the request's header is larger than 32 KiB or 100 lines\n",
            };
            return refuse(&mut write, status, why).await;
        }
        Ok(Head::Gone) | Err(_) => return,
    };
    let replayed = AsyncReadExt::chain(std::io::Cursor::new(raw), reader);
    let io = TokioIo::new(tokio::io::join(replayed, write));
    let service = service_fn(move |request| respond(request, store.clone(), host.clone(), port));
    let _ = http1::Builder::new().keep_alive(false).serve_connection(io, service).await;
}

/// Answers a request hyper has read: 421 to a name that is not this
/// server's, 405 to anything but GET and HEAD.
async fn respond(
    request: Request<Incoming>,
    store: Arc<Path>,
    host: Option<String>,
    port: u16,
) -> Result<Response<Outgoing>, Infallible> {
    let head_only = request.method() == Method::HEAD;
    let (status, kind, body) = if !host_allowed(host.as_deref(), port) {
        (421, TEXT, Body::text("this server answers only to its loopback name\n"))
    } else if head_only || request.method() == Method::GET {
        // Files are read, and a report rendered, away from the runtime.
        let target = request.uri().to_string();
        tokio::task::spawn_blocking(move || answer(&store, &target))
            .await
            .unwrap_or_else(|_| (500, TEXT, Body::text("the answer failed\n")))
    } else {
        (405, TEXT, Body::text("only GET\n"))
    };
    let body = match body {
        Body::Text(text) => Outgoing::Text(Some(Bytes::from(text))),
        Body::File(_) if head_only => Outgoing::Pieces(mpsc::channel(1).1),
        Body::File(path) => stream_file(path),
    };
    let mut response = Response::new(body);
    *response.status_mut() =
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    Ok(response)
}

/// Refuses a request hyper never sees, and closes the connection.
async fn refuse(stream: &mut (impl AsyncWrite + Unpin), status: u16, why: &str) {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let head = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: {TEXT}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or_default(),
        why.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(why.as_bytes()).await;
    let _ = stream.flush().await;
}

/// A response's body: text made for the answer, or the pieces of a file
/// as a blocking thread reads and masks them.
#[derive(Debug)]
enum Outgoing {
    Text(Option<Bytes>),
    Pieces(mpsc::Receiver<io::Result<Bytes>>),
}

impl hyper::body::Body for Outgoing {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
    ) -> Poll<Option<io::Result<Frame<Bytes>>>> {
        match self.get_mut() {
            Outgoing::Text(text) => Poll::Ready(text.take().map(|text| Ok(Frame::data(text)))),
            Outgoing::Pieces(pieces) => {
                pieces.poll_recv(context).map(|piece| piece.map(|piece| piece.map(Frame::data)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, Outgoing::Text(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Outgoing::Text(text) => {
                SizeHint::with_exact(text.as_ref().map_or(0, |text| text.len() as u64))
            }
            Outgoing::Pieces(_) => SizeHint::default(),
        }
    }
}

/// A file's body: a blocking thread reads it and masks it piece by piece
/// ([`copy_redacted`]), one piece at a time in flight; it stops when the
/// client goes away.
fn stream_file(path: PathBuf) -> Outgoing {
    let (sender, receiver) = mpsc::channel(1);
    tokio::task::spawn_blocking(move || {
        let mut pieces = Pieces(sender.clone());
        if let Err(error) = fs::File::open(path).and_then(|file| copy_redacted(file, &mut pieces)) {
            let _ = sender.blocking_send(Err(error));
        }
    });
    Outgoing::Pieces(receiver)
}

/// Sends what is written to it, a piece at a time, to a response's body.
struct Pieces(mpsc::Sender<io::Result<Bytes>>);

impl Write for Pieces {
    fn write(&mut self, piece: &[u8]) -> io::Result<usize> {
        match self.0.blocking_send(Ok(Bytes::copy_from_slice(piece))) {
            Ok(()) => Ok(piece.len()),
            Err(_) => Err(io::ErrorKind::BrokenPipe.into()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The web view of a store, listening on loopback.
#[derive(Debug)]
pub struct Server {
    listener: std::net::TcpListener,
    store: PathBuf,
}

impl Server {
    /// Listens on 127.0.0.1:`port` (0: a free port) for the runs in `store`.
    pub fn bind(store: &Path, port: u16) -> io::Result<Server> {
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port))?;
        listener.set_nonblocking(true)?;
        Ok(Server { listener, store: store.to_path_buf() })
    }

    /// Where it listens.
    pub fn address(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Answers requests, [`MAX_CONNECTIONS`] at once, until the process
    /// ends; one more is answered 503 at once.
    pub fn run(self) -> Result<(), StoreError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(StoreError::Serve)?;
        runtime.block_on(async {
            let port = self.address().map_err(StoreError::Serve)?.port();
            let listener = TcpListener::from_std(self.listener).map_err(StoreError::Serve)?;
            let store: Arc<Path> = Arc::from(self.store);
            let open = Arc::new(Semaphore::new(MAX_CONNECTIONS));
            loop {
                let Ok((mut stream, _)) = listener.accept().await else { continue };
                match open.clone().try_acquire_owned() {
                    Ok(permit) => {
                        let store = store.clone();
                        tokio::spawn(async move {
                            connection(stream, store, port).await;
                            drop(permit);
                        });
                    }
                    Err(_) => refuse(&mut stream, 503, "busy: try again\n").await,
                }
            }
        })
    }
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
            let body = String::from_utf8(body.bytes()).expect("utf-8");
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
        let body = String::from_utf8(body.bytes()).expect("utf-8");
        assert!(body.contains("20261130T000000.000Z-seed-1"), "{body}");
        assert!(body.contains("class=\"invalid\""), "{body}");
        assert!(body.contains("lockcheck check --seed 1"), "{body}");
        let (status, kind, body) =
            answer(&store, "/runs/sim-redis-fenced-write/20261130T000000.000Z-seed-1/command");
        assert_eq!(
            (status, kind, body.bytes()),
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
        let index = String::from_utf8(answer(&store, "/").2.bytes()).expect("utf-8");
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
            assert_eq!(status, 404, "{path}: {}", String::from_utf8_lossy(&body.bytes()));
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

    fn head(text: &[u8]) -> Head {
        let runtime = tokio::runtime::Builder::new_current_thread().build().expect("a runtime");
        runtime.block_on(read_head(&mut BufReader::new(text), &mut Vec::new()))
    }

    #[test]
    fn a_head_is_read_within_its_bounds() {
        let request = |line: &str| Head::Request { line: line.to_string(), host: None };
        assert_eq!(
            head(b"GET / HTTP/1.1\r\nHost: 127.0.0.1:80\r\nAccept: */*\r\n\r\n"),
            Head::Request { line: "GET / HTTP/1.1".into(), host: Some("127.0.0.1:80".into()) }
        );
        assert_eq!(head(b"GET / HTTP/1.0\n\n"), request("GET / HTTP/1.0"));
        // A request line of 8 KiB is served, one longer is 414.
        let target = "a".repeat(8 << 10);
        let long = format!("GET /{target} HTTP/1.1\r\n\r\n");
        assert_eq!(head(long.as_bytes()), Head::TooLarge(414));
        let fits = format!("GET /{} HTTP/1.1\r\n\r\n", &target[..8000]);
        assert!(matches!(head(fits.as_bytes()), Head::Request { .. }));
        // A header past 32 KiB, in one line or many, and 101 lines: 431.
        let big = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "x".repeat(40 << 10));
        assert_eq!(head(big.as_bytes()), Head::TooLarge(431));
        let many = format!("GET / HTTP/1.1\r\n{}\r\n", "X: 1234567890\r\n".repeat(3000));
        assert_eq!(head(many.as_bytes()), Head::TooLarge(431));
        let lines = format!("GET / HTTP/1.1\r\n{}\r\n", "X: 1\r\n".repeat(101));
        assert_eq!(head(lines.as_bytes()), Head::TooLarge(431));
        let lines = format!("GET / HTTP/1.1\r\n{}\r\n", "X: 1\r\n".repeat(100));
        assert!(matches!(head(lines.as_bytes()), Head::Request { .. }));
        // A head the client never finished.
        assert_eq!(head(b"GET / HTTP/1.1\r\nHost: x"), Head::Gone);
        assert_eq!(head(b""), Head::Gone);
    }

    #[test]
    fn a_run_without_its_report_or_results_is_viewed_and_never_written() {
        let store =
            std::env::temp_dir().join(format!("lockcheck-serve-killed-{}", std::process::id()));
        let _ = fs::remove_dir_all(&store);
        let run = store.join("sim-redis-mutex").join("20261130T000000.000Z-seed-1");
        fs::create_dir_all(&run).expect("made");
        let history = concat!(
            r#"{"index":0,"time":0,"process":1,"type":"invoke","f":"acquire","key":"a","value":{"ttl_ms":1000}}"#,
            "\n",
            r#"{"index":1,"time":1000,"process":1,"type":"ok","f":"acquire","key":"a","value":null}"#,
            "\n",
        );
        fs::write(run.join("history.jsonl"), history).expect("written");
        fs::write(run.join("command"), "lockcheck check --seed 1\n").expect("written");
        let index = String::from_utf8(answer(&store, "/").2.bytes()).expect("utf-8");
        assert!(index.contains("report.html") && index.contains("history.jsonl"), "{index}");
        assert!(!index.contains("results.json"), "a link to a file that is not there: {index}");
        assert!(index.contains("incomplete"), "{index}");
        let (status, kind, body) =
            answer(&store, "/runs/sim-redis-mutex/20261130T000000.000Z-seed-1/report.html");
        assert_eq!((status, kind), (200, "text/html; charset=utf-8"));
        assert!(String::from_utf8(body.bytes()).expect("utf-8").contains("<html"));
        let mut names: Vec<String> = fs::read_dir(&run)
            .expect("listed")
            .map(|entry| entry.expect("entry").file_name().to_string_lossy().to_string())
            .collect();
        names.sort();
        assert_eq!(names, ["command", "history.jsonl"], "a GET wrote into the store");
        let _ = fs::remove_dir_all(&store);
    }

    #[test]
    fn a_file_is_masked_piece_by_piece_however_it_is_cut() {
        let line = "connect postgres://u:hunter2@h/db\n";
        let text = line.repeat(10_000);
        let mut out = Vec::new();
        copy_redacted(text.as_bytes(), &mut out).expect("copied");
        let out = String::from_utf8(out).expect("utf-8");
        assert_eq!(out.lines().count(), 10_000);
        assert!(!out.contains("hunter2"), "a password got through");
        // A line longer than any piece is passed in pieces, whole.
        let long = "x".repeat(3 << 20);
        let mut out = Vec::new();
        copy_redacted(long.as_bytes(), &mut out).expect("copied");
        assert_eq!(out.len(), long.len());
    }

    /// What the server answers to `request`, whole.
    fn exchange(address: SocketAddr, request: &str) -> String {
        let mut stream = std::net::TcpStream::connect(address).expect("connected");
        stream.write_all(request.as_bytes()).expect("sent");
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).expect("read");
        String::from_utf8(answer).expect("utf-8")
    }

    #[test]
    fn a_stored_file_is_served_through_hyper_masked_and_a_head_without_it() {
        let store =
            std::env::temp_dir().join(format!("lockcheck-serve-hyper-{}", std::process::id()));
        let _ = fs::remove_dir_all(&store);
        let run = store.join("sim-redis-mutex").join("20261130T000000.000Z-seed-1");
        fs::create_dir_all(&run).expect("made");
        fs::write(run.join("history.jsonl"), "").expect("written");
        let line = "lockcheck check --postgres-url postgres://u:hunter2@h/db\n";
        fs::write(run.join("command"), line.repeat(20_000)).expect("written");
        let server = Server::bind(&store, 0).expect("bound");
        let address = server.address().expect("an address");
        // It serves until the test process ends.
        std::thread::spawn(move || server.run());
        let target = "/runs/sim-redis-mutex/20261130T000000.000Z-seed-1/command";
        let get = exchange(address, &format!("GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
        assert!(get.starts_with("HTTP/1.1 200 OK\r\n"), "{}", &get[..200.min(get.len())]);
        assert!(!get.contains("hunter2"), "a password got through");
        assert_eq!(get.matches("postgres://u:***@h/db").count(), 20_000);
        let head = exchange(address, &format!("HEAD {target} HTTP/1.1\r\nHost: localhost\r\n\r\n"));
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(head.ends_with("\r\n\r\n"), "a HEAD answered with a body: {head}");
        let refused = exchange(address, "\r\n\r\n");
        assert!(refused.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{refused}");
        let elsewhere = exchange(address, "GET / HTTP/1.1\r\nHost: attacker.example\r\n\r\n");
        assert!(elsewhere.starts_with("HTTP/1.1 421 Misdirected Request\r\n"), "{elsewhere}");
        let posted = exchange(address, "POST / HTTP/1.1\r\nHost: localhost\r\n\r\n");
        assert!(posted.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"), "{posted}");
        let _ = fs::remove_dir_all(&store);
    }
}
