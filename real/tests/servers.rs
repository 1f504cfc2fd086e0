//! The servers the tool manages: each kind starts and answers, and no server
//! process (nor its temporary directory) outlives the tool, whatever way
//! the tool exits. Needs the server packages (redis-server, postgresql,
//! mariadb-server, etcd-server, and PyPI's moto[server]): a missing one
//! fails these tests.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use lockcheck_real::{stop_all, ManagedServer, Package, ServerKind, ServerOptions};
use lockcheck_real::{RealError, UnknownServer};

/// Selects what a re-executed copy of this test binary does.
const CHILD_MODE: &str = "LOCKCHECK_SERVERS_TEST_CHILD";

fn start(kind: ServerKind) -> ManagedServer {
    ManagedServer::start(kind).unwrap_or_else(|error| panic!("{} must start: {error}", kind.name()))
}

/// Whether a process runs (a zombie has ended and waits only to be reaped).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let state = stat.rsplit_once(')')?.1.trim_start().chars().next()?;
            Some(!matches!(state, 'Z' | 'X' | 'x'))
        })
        .unwrap_or(false)
}

/// The live processes of process group `group`.
fn group_members(group: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().and_then(|stat| {
                // pid (comm) state ppid pgrp …
                let rest = stat.rsplit_once(')')?.1.to_string();
                rest.split_whitespace().nth(2)?.parse::<u32>().ok()
            }) == Some(group)
        })
        .filter(|&pid| alive(pid))
        .collect()
}

fn eventually(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// The server `pid` and every process of its group are gone within a few
/// seconds (a killed PostgreSQL's children notice their postmaster died).
fn assert_processes_gone(what: &str, pid: u32) {
    let gone = eventually(Duration::from_secs(60), || !alive(pid) && group_members(pid).is_empty());
    assert!(gone, "{what}: server {pid} or its group {:?} still runs", group_members(pid));
}

fn assert_stopped(what: &str, pid: u32, dir: &Path) {
    assert_processes_gone(what, pid);
    assert!(!dir.exists(), "{what}: {} was not deleted", dir.display());
}

fn connect(port: u16) -> TcpStream {
    let stream = TcpStream::connect(("127.0.0.1", port)).expect("the server accepts connections");
    stream.set_read_timeout(Some(Duration::from_secs(30))).expect("a read timeout");
    stream
}

/// One inline Redis command and its whole reply (a status, an integer, or
/// one bulk string).
fn redis(port: u16, command: &str) -> String {
    let mut stream = connect(port);
    stream.write_all(format!("{command}\r\n").as_bytes()).expect("send a command");
    let mut reply = Vec::new();
    let mut buffer = [0u8; 512];
    loop {
        let read = stream.read(&mut buffer).expect("a reply");
        reply.extend_from_slice(&buffer[..read]);
        let text = String::from_utf8_lossy(&reply).to_string();
        let lines = text.matches("\r\n").count();
        let complete = match text.chars().next() {
            Some('$') if !text.starts_with("$-1") => lines >= 2,
            _ => lines >= 1,
        };
        if read == 0 || complete {
            return text.trim_end().to_string();
        }
    }
}

fn output(command: &mut Command) -> String {
    let output = command.output().unwrap_or_else(|error| panic!("{command:?}: {error}"));
    assert!(
        output.status.success(),
        "{command:?}: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

/// An HTTP/1.1 POST of JSON to etcd's v3 gateway; the response body.
fn etcd_post(port: u16, path: &str, body: &str) -> String {
    let mut stream = connect(port);
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).expect("send a request");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("a response");
    assert!(response.starts_with("HTTP/1.1 200"), "etcd answered {response}");
    response
}

#[test]
fn redis_starts_answers_and_is_gone_after_stop() {
    let server = start(ServerKind::Redis);
    assert_eq!(server.url(), format!("redis://127.0.0.1:{}", server.port()));
    assert_eq!(redis(server.port(), "SET lockcheck hello"), "+OK");
    assert_eq!(redis(server.port(), "GET lockcheck"), "$5\r\nhello");
    let (pid, dir) = (server.pid(), server.dir().to_path_buf());
    assert!(alive(pid));
    assert!(dir.starts_with(std::env::temp_dir()));
    let name = dir.file_name().and_then(|name| name.to_str()).unwrap_or_default().to_string();
    assert!(name.starts_with(&format!("lockcheck-redis-{}-", std::process::id())), "{name}");
    server.stop();
    assert_stopped("redis", pid, &dir);
}

#[test]
fn postgres_starts_answers_and_is_gone_after_stop() {
    let server = start(ServerKind::Postgres);
    let url = server.url();
    assert_eq!(url, format!("postgres://postgres@127.0.0.1:{}/postgres", server.port()));
    let answer = output(Command::new("psql").args(["-X", "-tA", "-c", "SELECT 40 + 2"]).arg(&url));
    assert_eq!(answer, "42");
    let (pid, dir) = (server.pid(), server.dir().to_path_buf());
    drop(server);
    assert_stopped("postgres", pid, &dir);
}

#[test]
fn mariadb_starts_answers_and_is_gone_after_stop() {
    let server = start(ServerKind::Mariadb);
    assert_eq!(server.url(), format!("mysql://root@127.0.0.1:{}/test", server.port()));
    let port = server.port().to_string();
    let answer = output(Command::new("mariadb").args([
        "--protocol=TCP",
        "-h",
        "127.0.0.1",
        "-P",
        &port,
        "-u",
        "root",
        "-N",
        "-B",
        "-e",
        "SELECT 40 + 2",
        "test",
    ]));
    assert_eq!(answer, "42");
    let (pid, dir) = (server.pid(), server.dir().to_path_buf());
    drop(server);
    assert_stopped("mariadb", pid, &dir);
}

#[test]
fn etcd_starts_answers_and_is_gone_after_stop() {
    let server = start(ServerKind::Etcd);
    assert_eq!(server.url(), format!("http://127.0.0.1:{}", server.port()));
    // "lockcheck" and "held", base64-encoded as the gateway wants.
    etcd_post(server.port(), "/v3/kv/put", r#"{"key":"bG9ja2NoZWNr","value":"aGVsZA=="}"#);
    let range = etcd_post(server.port(), "/v3/kv/range", r#"{"key":"bG9ja2NoZWNr"}"#);
    assert!(range.contains("aGVsZA=="), "{range}");
    let (pid, dir) = (server.pid(), server.dir().to_path_buf());
    drop(server);
    assert_stopped("etcd", pid, &dir);
}

/// An HTTP/1.1 request without a body; the status line, and the rest
/// (headers and body).
fn http(port: u16, method: &str, path: &str) -> (String, String) {
    let mut stream = connect(port);
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).expect("send a request");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("a response");
    let (status, rest) = response.split_once("\r\n").unwrap_or((&response, ""));
    (status.to_string(), rest.to_string())
}

/// The year of an HTTP response's `Date` header (`Date: Mon, 07 Dec 2026
/// 15:19:42 GMT`).
fn date_year(headers: &str) -> u32 {
    let date = headers.lines().find_map(|line| line.strip_prefix("Date: "));
    let year = date.and_then(|date| date.split_whitespace().nth(3)?.parse().ok());
    year.unwrap_or_else(|| panic!("no Date header with a year in {headers}"))
}

#[test]
fn moto_starts_answers_and_is_gone_after_stop() {
    let server = start(ServerKind::Moto);
    assert_eq!(server.url(), format!("http://127.0.0.1:{}", server.port()));
    let (status, _) = http(server.port(), "PUT", "/lockcheck-test-bucket");
    assert_eq!(status, "HTTP/1.1 200 OK");
    // S3's ListBuckets, the readiness probe's request, lists it.
    let (status, response) = http(server.port(), "GET", "/");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(response.contains("<Name>lockcheck-test-bucket</Name>"), "{response}");
    let (pid, dir) = (server.pid(), server.dir().to_path_buf());
    let name = dir.file_name().and_then(|name| name.to_str()).unwrap_or_default().to_string();
    assert!(name.starts_with(&format!("lockcheck-moto-{}-", std::process::id())), "{name}");
    assert!(dir.join("server.log").is_file(), "its log is in its folder");
    server.stop();
    assert_stopped("moto", pid, &dir);
}

#[test]
fn moto_runs_under_a_faked_clock() {
    let options = ServerOptions { faketime: true, ..ServerOptions::default() };
    let server = ManagedServer::start_with(ServerKind::Moto, &options)
        .unwrap_or_else(|error| panic!("moto must start under libfaketime: {error}"));
    let real = date_year(&http(server.port(), "GET", "/").1);
    // 400 days ahead: next year at least, whatever today is.
    server.set_clock(400 * 86_400_000).expect("its clock is set");
    let faked = date_year(&http(server.port(), "GET", "/").1);
    assert!(faked > real, "moto's Date says {faked}, real time says {real}");
}

#[test]
fn moto_is_a_server_kind_by_its_name() {
    assert_eq!(ServerKind::parse("moto"), Ok(ServerKind::Moto));
    assert!(ServerKind::ALL.contains(&ServerKind::Moto));
    let unknown = ServerKind::parse("s3").unwrap_err();
    assert_eq!(unknown, UnknownServer { name: "s3".to_string() });
    assert!(unknown.to_string().ends_with("etcd, moto or zookeeper"), "{unknown}");
}

#[test]
fn etcd_cluster_of_three_replicates() {
    let members = ManagedServer::start_etcd_cluster(3, &ServerOptions::default())
        .unwrap_or_else(|error| panic!("a 3-member etcd cluster must start: {error}"));
    assert_eq!(members.len(), 3);
    etcd_post(members[0].port(), "/v3/kv/put", r#"{"key":"bG9ja2NoZWNr","value":"aGVsZA=="}"#);
    // A linearizable read on another member sees the write.
    let range = etcd_post(members[2].port(), "/v3/kv/range", r#"{"key":"bG9ja2NoZWNr"}"#);
    assert!(range.contains("aGVsZA=="), "{range}");
    let stopped: Vec<(u32, PathBuf)> =
        members.iter().map(|member| (member.pid(), member.dir().to_path_buf())).collect();
    drop(members);
    for (pid, dir) in stopped {
        assert_stopped("etcd member", pid, &dir);
    }
}

#[test]
fn five_redis_for_redlock_start_at_once() {
    let servers = ManagedServer::start_many(ServerKind::Redis, 5, &ServerOptions::default())
        .unwrap_or_else(|error| panic!("five redis must start: {error}"));
    let mut ports: Vec<u16> = servers.iter().map(ManagedServer::port).collect();
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), 5, "every instance has its own port");
    for server in &servers {
        assert_eq!(redis(server.port(), "PING"), "+PONG");
    }
    let stopped: Vec<(u32, PathBuf)> =
        servers.iter().map(|server| (server.pid(), server.dir().to_path_buf())).collect();
    drop(servers);
    for (pid, dir) in stopped {
        assert_stopped("redis", pid, &dir);
    }
}

#[test]
fn redis_keeps_its_keys_across_a_crash_only_with_persistence() {
    for persistent in [true, false] {
        let options = ServerOptions { persistent, ..ServerOptions::default() };
        let mut server = ManagedServer::start_with(ServerKind::Redis, &options)
            .unwrap_or_else(|error| panic!("redis must start: {error}"));
        assert_eq!(redis(server.port(), "SET lock:report holder-1"), "+OK");
        let first = server.pid();
        server.crash();
        assert_processes_gone("crashed redis", first);
        assert!(server.dir().exists(), "a crash keeps the data");
        server.restart().unwrap_or_else(|error| panic!("redis must restart: {error}"));
        assert_ne!(server.pid(), first);
        let expected = if persistent { "$8\r\nholder-1" } else { "$-1" };
        assert_eq!(redis(server.port(), "GET lock:report"), expected, "persistent: {persistent}");
    }
}

#[test]
fn a_paused_redis_answers_only_after_resume() {
    let server = start(ServerKind::Redis);
    server.pause().expect("SIGSTOP");
    let mut stream = connect(server.port());
    stream.set_read_timeout(Some(Duration::from_millis(300))).expect("a read timeout");
    stream.write_all(b"PING\r\n").expect("the kernel accepts the request");
    let mut buffer = [0u8; 16];
    assert!(stream.read(&mut buffer).is_err(), "a paused server must not answer");
    server.resume().expect("SIGCONT");
    stream.set_read_timeout(Some(Duration::from_secs(30))).expect("a read timeout");
    let read = stream.read(&mut buffer).expect("the resumed server answers");
    assert_eq!(&buffer[..read], b"+PONG\r\n");
}

/// The ways the tool can end, each run in a copy of this test binary that
/// holds a Redis, a PostgreSQL (started as the `postgres` user when root)
/// and a moto server (a Python program behind pyenv's shell shims, which
/// exec it, so the parent-death signal reaches it): what its exit must look like, and whether the servers'
/// directories are deleted. After SIGKILL, or `exit` without [`stop_all`],
/// no code of the tool runs: the parent-death signal still kills the
/// servers, but their directories stay.
const EXITS: [(&str, Expected, bool); 7] = [
    ("return", Expected::Code(0), true),
    ("panic", Expected::Code(101), true),
    ("sigint", Expected::Code(130), true),
    ("sigterm", Expected::Code(143), true),
    ("stop-all-then-exit", Expected::Code(3), true),
    ("exit", Expected::Code(3), false),
    ("sigkill", Expected::Signal(9), false),
];

#[derive(Debug, Clone, Copy, PartialEq)]
enum Expected {
    Code(i32),
    Signal(i32),
}

#[test]
fn no_server_outlives_any_way_the_tool_exits() {
    if let Ok(mode) = std::env::var(CHILD_MODE) {
        return child_holding_servers(&mode);
    }
    thread::scope(|scope| {
        let runs: Vec<_> = EXITS
            .iter()
            .map(|&(mode, expected, deletes)| {
                scope.spawn(move || exit_and_check(mode, expected, deletes))
            })
            .collect();
        let failures: Vec<String> = runs
            .into_iter()
            .filter_map(|run| match run.join() {
                Ok(()) => None,
                Err(panic) => Some(
                    panic
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| panic.downcast_ref::<&str>().map(|text| text.to_string()))
                        .unwrap_or_default(),
                ),
            })
            .collect();
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    });
}

/// In the child: start the servers, tell the parent, then end as `mode` says.
fn child_holding_servers(mode: &str) {
    let redis = start(ServerKind::Redis);
    let postgres = start(ServerKind::Postgres);
    let moto = start(ServerKind::Moto);
    for server in [&redis, &postgres, &moto] {
        println!("SERVER {} {}", server.pid(), server.dir().display());
    }
    println!("READY");
    std::io::stdout().flush().expect("stdout");
    match mode {
        "return" => {}
        "panic" => panic!("the child panics on purpose while holding servers"),
        "exit" => std::process::exit(3),
        "stop-all-then-exit" => {
            stop_all();
            std::process::exit(3)
        }
        // Wait for the parent's signal, but not forever.
        _ => thread::sleep(Duration::from_secs(120)),
    }
}

fn exit_and_check(mode: &str, expected: Expected, deletes: bool) {
    let executable = std::env::current_exe().expect("the test binary");
    let mut child = Command::new(executable)
        .args(["--exact", "no_server_outlives_any_way_the_tool_exits", "--nocapture"])
        .env(CHILD_MODE, mode)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("re-run this test binary");
    let (lines, inbox) = mpsc::channel();
    let stdout = child.stdout.take().expect("a stdout pipe");
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    let mut stderr = child.stderr.take().expect("a stderr pipe");
    let errors = thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let mut servers: Vec<(u32, PathBuf)> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let timeout = deadline.saturating_duration_since(Instant::now());
        let Ok(line) = inbox.recv_timeout(timeout) else {
            let _ = child.kill();
            panic!("{mode}: the child never said READY: {}", errors_of(errors))
        };
        if line == "READY" {
            break;
        }
        if let Some(server) = line.strip_prefix("SERVER ") {
            let (pid, dir) = server.split_once(' ').expect("SERVER <pid> <dir>");
            servers.push((pid.parse().expect("a pid"), PathBuf::from(dir)));
        }
    }
    assert_eq!(servers.len(), 3, "{mode}: redis, postgres and moto");
    if let Some(signal) = mode.strip_prefix("sig") {
        let sent = Command::new("kill")
            .args(["-s", &signal.to_uppercase(), &child.id().to_string()])
            .status()
            .expect("the kill command");
        assert!(sent.success(), "{mode}: kill failed");
    }
    let status = wait(&mut child, Duration::from_secs(30))
        .unwrap_or_else(|| panic!("{mode}: the child did not exit"));
    let got = match status.code() {
        Some(code) => Expected::Code(code),
        None => Expected::Signal(status.signal().unwrap_or(0)),
    };
    assert_eq!(got, expected, "{mode}: the child exited with {status}: {}", errors_of(errors));
    for (pid, dir) in &servers {
        assert_processes_gone(mode, *pid);
        if deletes {
            assert!(!dir.exists(), "{mode}: {} was not deleted", dir.display());
        } else {
            // Nothing of the tool ran to delete it; clean up after it, and
            // after a killed PostgreSQL, which leaves its small System V
            // shared memory segment behind.
            let _ = std::fs::remove_dir_all(dir);
            remove_shared_memory_of(*pid);
        }
    }
}

/// Removes the System V shared memory segments process `creator` made.
fn remove_shared_memory_of(creator: u32) {
    let Ok(listing) = Command::new("ipcs").args(["-m", "-p"]).output() else { return };
    for line in String::from_utf8_lossy(&listing.stdout).lines() {
        // shmid owner cpid lpid
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() >= 3 && fields[2] == creator.to_string() {
            let _ = Command::new("ipcrm").args(["-m", fields[0]]).status();
        }
    }
}

fn errors_of(errors: thread::JoinHandle<String>) -> String {
    // The child has exited (or been killed), so its stderr is closed.
    errors.join().unwrap_or_default()
}

fn wait(child: &mut std::process::Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            return None;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Starting `kind` fails for want of its binary, named with its package
/// and the command that installs it.
fn assert_missing(kind: ServerKind, binary: &str, package: Package, install: &str) {
    match ManagedServer::start(kind) {
        Err(RealError::MissingBinary { binary: missing, package: named }) => {
            assert_eq!((missing, named), (binary, package));
            let error = RealError::MissingBinary { binary: missing, package: named };
            assert!(error.to_string().contains(install), "{error}");
        }
        Err(error) => panic!("expected a missing {binary}, got {error}"),
        Ok(server) => panic!("{binary} started from {}", server.dir().display()),
    }
}

#[test]
fn a_missing_binary_names_its_package() {
    if std::env::var(CHILD_MODE).as_deref() == Ok("missing") {
        // PATH holds setpriv only.
        let redis = Package::Debian("redis-server");
        assert_missing(ServerKind::Redis, "redis-server", redis, "apt-get install -y redis-server");
        let moto = Package::Python("moto[server]");
        assert_missing(ServerKind::Moto, "moto_server", moto, "pip install 'moto[server]'");
        return;
    }
    let bin = std::env::temp_dir().join(format!("lockcheck-test-path-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&bin);
    std::fs::create_dir(&bin).expect("a directory for PATH");
    let setpriv = ["/usr/bin/setpriv", "/bin/setpriv"]
        .into_iter()
        .find(|path| Path::new(path).exists())
        .expect("setpriv (util-linux) is installed");
    std::os::unix::fs::symlink(setpriv, bin.join("setpriv")).expect("link setpriv");
    let status = Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", "a_missing_binary_names_its_package", "--nocapture"])
        .env(CHILD_MODE, "missing")
        .env("PATH", &bin)
        .stdout(Stdio::null())
        .status()
        .expect("re-run this test binary");
    let _ = std::fs::remove_dir_all(&bin);
    assert!(status.success(), "the child saw no MissingBinary error: {status}");
}
