//! moto's S3 server (`moto_server`, PyPI `moto[server]`), the S3 of a real
//! run with an S3 `--storage` (docs/storage.md): started by lockcheck on a
//! free loopback port, probed until it answers, and stopped when dropped,
//! as the servers of `servers.rs` are. It keeps its objects in memory, so
//! every run starts from an empty server.
//!
//! Like them it dies with the tool: it is started through `setpriv
//! --pdeathsig KILL` in a process group of its own, and a Ctrl-C, SIGTERM
//! or SIGHUP stops every live one ([`lockcheck_workloads::interrupt`]).

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::servers::signal_group;
use crate::RealError;

/// The server's program.
pub const BINARY: &str = "moto_server";

/// How to install it.
pub const INSTALL: &str = "pip install 'moto[server]'";

/// How long it may take to answer after its start: a Python server that
/// imports every AWS service it mocks takes a few seconds on a busy machine.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// How long one probe, or one setup request, may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long it has to stop after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(3);

/// Starts tried on another port when the last one was taken meanwhile.
const PORT_ATTEMPTS: usize = 3;

const POLL: Duration = Duration::from_millis(50);

/// The live servers' process groups, for the interrupt handler.
static LIVE: Mutex<BTreeSet<u32>> = Mutex::new(BTreeSet::new());
static NEXT: AtomicU64 = AtomicU64::new(0);

/// Stops every live moto server: for the interrupt handler.
fn stop_all() {
    let live = std::mem::take(&mut *LIVE.lock().unwrap_or_else(PoisonError::into_inner));
    for leader in live {
        signal_group(leader, "KILL");
    }
}

/// A moto server this tool started, stopped when dropped.
#[derive(Debug)]
pub struct MotoServer {
    child: Child,
    port: u16,
    log: PathBuf,
}

fn error(reason: impl ToString) -> RealError {
    RealError::Server { what: "moto S3", reason: reason.to_string() }
}

/// The program on PATH, if it is there.
fn find_binary() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(BINARY)).find(|candidate| candidate.is_file())
}

/// A free loopback port, from the kernel; another process may take it
/// before the server binds it (the start then tries another).
fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?.local_addr()?.port())
}

/// The last lines of the server's log, for an error message.
fn log_tail(log: &Path) -> String {
    let text = fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(10)..].join("\n")
}

/// One HTTP/1.1 request to the server, without a body; its status code.
fn request(port: u16, method: &str, path: &str) -> Result<u16, String> {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&address, PROBE_TIMEOUT)
        .map_err(|error| format!("connect: {error}"))?;
    stream
        .set_read_timeout(Some(PROBE_TIMEOUT))
        .and_then(|()| stream.set_write_timeout(Some(PROBE_TIMEOUT)))
        .map_err(|error| error.to_string())?;
    let text = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(text.as_bytes()).map_err(|error| format!("send: {error}"))?;
    let mut reply = Vec::new();
    let mut buffer = [0u8; 512];
    while !reply.windows(2).any(|pair| pair == b"\r\n") {
        match stream.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => reply.extend_from_slice(&buffer[..read]),
            Err(error) => return Err(format!("read: {error}")),
        }
    }
    let line = String::from_utf8_lossy(&reply);
    line.split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("no HTTP status in {:?}", line.lines().next().unwrap_or("")))
}

impl MotoServer {
    /// Starts `moto_server` on a free loopback port and waits until it
    /// answers S3's `ListBuckets` (`GET /`).
    pub fn start() -> Result<MotoServer, RealError> {
        let Some(binary) = find_binary() else {
            return Err(error(format!("`{BINARY}` is not on PATH: install it with {INSTALL}")));
        };
        lockcheck_workloads::interrupt::install()
            .map_err(|reason| error(format!("cannot catch signals: {reason}")))?;
        static STOP_AT_EXIT: std::sync::Once = std::sync::Once::new();
        STOP_AT_EXIT.call_once(|| lockcheck_workloads::interrupt::at_exit(stop_all));
        if lockcheck_workloads::interrupt::requested() {
            return Err(error("the tool is exiting"));
        }
        let mut last = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port().map_err(|reason| error(format!("no free port: {reason}")))?;
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let log =
                std::env::temp_dir().join(format!("lockcheck-moto-{}-{n}.log", std::process::id()));
            let file = File::create(&log)
                .map_err(|reason| error(format!("cannot make {}: {reason}", log.display())))?;
            let mut command = Command::new("setpriv");
            command.args(["--pdeathsig", "KILL", "--"]).arg(&binary);
            command.args(["-H", "127.0.0.1", "-p", &port.to_string()]);
            let stderr = file.try_clone().map_err(error)?;
            command.stdin(Stdio::null()).stdout(file).stderr(stderr).process_group(0);
            let child = command
                .spawn()
                .map_err(|reason| error(format!("cannot run setpriv {BINARY}: {reason}")))?;
            LIVE.lock().unwrap_or_else(PoisonError::into_inner).insert(child.id());
            let mut server = MotoServer { child, port, log };
            match server.wait_ready() {
                Ok(()) => return Ok(server),
                Err((reason, port_taken)) if port_taken => last = reason,
                Err((reason, _)) => return Err(error(reason)),
            }
        }
        Err(error(format!("no free port after {PORT_ATTEMPTS} tries: {last}")))
    }

    /// Probes until it answers, it exits, or the time is up; on an error,
    /// why, and whether its port was taken.
    fn wait_ready(&mut self) -> Result<(), (String, bool)> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                let tail = log_tail(&self.log);
                let taken = tail.to_lowercase().contains("already in use");
                return Err((
                    format!("{BINARY} exited with {status}; its log ends:\n{tail}"),
                    taken,
                ));
            }
            let last = match request(self.port, "GET", "/") {
                Ok(200) => return Ok(()),
                Ok(code) => format!("GET / answered {code}"),
                Err(reason) => reason,
            };
            if Instant::now() >= deadline {
                return Err((
                    format!(
                        "{BINARY} did not answer within {} s (last probe: {last}); its log ends:\n{}",
                        READY_TIMEOUT.as_secs(),
                        log_tail(&self.log)
                    ),
                    false,
                ));
            }
            std::thread::sleep(POLL);
        }
    }

    /// Its S3 endpoint, `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Creates `bucket` (S3's `CreateBucket`; moto takes it unsigned), or
    /// finds it there.
    pub fn create_bucket(&self, bucket: &str) -> Result<(), RealError> {
        match request(self.port, "PUT", &format!("/{bucket}")) {
            Ok(200 | 409) => Ok(()),
            Ok(code) => Err(error(format!("creating the bucket {bucket:?} answered {code}"))),
            Err(reason) => Err(error(format!("creating the bucket {bucket:?}: {reason}"))),
        }
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        let leader = self.child.id();
        signal_group(leader, "TERM");
        let deadline = Instant::now() + STOP_GRACE;
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(POLL);
        }
        signal_group(leader, "KILL");
        let _ = self.child.wait();
        LIVE.lock().unwrap_or_else(PoisonError::into_inner).remove(&leader);
        let _ = fs::remove_file(&self.log);
    }
}
