//! `lockcheck serve` as a client meets it over TCP: a flood of header is
//! cut off with 431 while the server stays small, and it goes on serving.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

/// A server on a free port over an empty store; killed when dropped.
struct Server {
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve() -> Server {
    let store = std::env::temp_dir().join(format!("lockcheck-cli-serve-{}", std::process::id()));
    std::fs::create_dir_all(&store).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_lockcheck"))
        .args(["serve", "--port", "0", "--store", store.to_str().unwrap()])
        .stdout(Stdio::piped())
        .spawn()
        .expect("the lockcheck binary runs");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let port = line
        .rsplit_once("http://127.0.0.1:")
        .and_then(|(_, rest)| rest.split('/').next())
        .and_then(|port| port.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    Server { child, port }
}

/// The status line of what the server answers to `head`, then `flood`
/// bytes of one header line, sent on another thread while this one reads.
fn status_of(port: u16, head: &'static [u8], flood: usize) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut writer = stream.try_clone().unwrap();
    let sender = std::thread::spawn(move || {
        if writer.write_all(head).is_err() {
            return;
        }
        let block = vec![b'x'; 1 << 20];
        let mut sent = 0;
        while sent < flood && writer.write_all(&block).is_ok() {
            sent += block.len();
        }
        let _ = writer.write_all(b"\r\n\r\n");
    });
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let _ = stream.shutdown(std::net::Shutdown::Both);
    sender.join().unwrap();
    let answer = String::from_utf8_lossy(&answer);
    answer.lines().next().unwrap_or_default().to_string()
}

/// The peak resident memory of process `pid`, in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|line| line.starts_with("VmHWM:")).unwrap().to_string();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

#[test]
fn a_header_flood_is_cut_off_and_the_server_stays_small() {
    let server = serve();
    let ok = status_of(server.port, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 0);
    assert_eq!(ok, "HTTP/1.1 200 OK");
    // 300 MB of one header line: refused after 32 KiB.
    let flood =
        status_of(server.port, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Flood: ", 300 << 20);
    assert_eq!(flood, "HTTP/1.1 431 Request Header Fields Too Large");
    // A request line of 300 MB: refused after 8 KiB.
    let long = status_of(server.port, b"GET /", 300 << 20);
    assert_eq!(long, "HTTP/1.1 414 URI Too Long");
    // Still serving, and never holding the flood.
    let ok = status_of(server.port, b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n", 0);
    assert_eq!(ok, "HTTP/1.1 200 OK");
    let peak = peak_rss(server.child.id());
    assert!(peak < 100 << 20, "the server peaked at {peak} bytes");
    let not_http = status_of(server.port, b"\r\n", 0);
    assert_eq!(not_http, "HTTP/1.1 400 Bad Request");
}
