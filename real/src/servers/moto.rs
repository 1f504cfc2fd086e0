//! moto's S3 server (`moto_server`, PyPI `moto[server]`): the S3 of a run
//! with an S3 `--storage` (docs/storage.md), and an S3 an exec program may
//! ask for (`--servers moto`). A Python program that keeps its buckets and
//! objects in memory: it has no data folder, every start is empty, and a
//! restart after a crash has forgotten everything. What is S3's (the
//! run's bucket) is in `crate::moto`.

use std::io::Write;
use std::net::TcpStream;

use super::{read_reply, EnvUrls, Package, ServerKind};

// Named like the other kinds' values, so that callers read the same.
#[allow(non_upper_case_globals)]
impl ServerKind {
    /// moto's S3 server, on one port. libfaketime fakes its clock (Python
    /// reads it through libc), though no S3 request of a run depends on it.
    pub const Moto: ServerKind = ServerKind {
        name: "moto",
        aliases: &[],
        binaries: &["moto_server"],
        package: Package::Python("moto[server]"),
        bin_dir: None,
        root_user: None,
        stop_signal: "TERM",
        ignores_faketime: None,
        ports: 1,
        durable: false,
        data_knows_ports: false,
        several: false,
        pools: false,
        url: |port| format!("http://127.0.0.1:{port}"),
        prepare: |_| Ok(None),
        args: |site| ["-H", "127.0.0.1", "-p", &site.port().to_string()].map(Into::into).into(),
        probe,
        exec_env: &[("LOCKCHECK_S3_ENDPOINT", EnvUrls::First)],
    };
}

/// S3's `ListBuckets` (`GET /`, which moto takes unsigned) answers 200 once
/// every service moto mocks is imported, which takes a second or more.
fn probe(stream: &mut TcpStream, port: u16) -> Result<(), String> {
    let request = format!(
        "GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).map_err(|error| format!("write: {error}"))?;
    let reply = read_reply(stream, 1024, true)?;
    match http_status(&reply) {
        Some(200) => Ok(()),
        Some(code) => Err(format!("GET / answered {code}")),
        None => Err(format!("no HTTP status in {:?}", first_line(&reply))),
    }
}

/// The status code of an HTTP reply's first line (`HTTP/1.1 200 OK`).
pub(crate) fn http_status(reply: &[u8]) -> Option<u16> {
    let line = first_line(reply);
    let mut words = line.split_whitespace();
    words.next().filter(|version| version.starts_with("HTTP/"))?;
    words.next()?.parse().ok()
}

fn first_line(reply: &[u8]) -> String {
    String::from_utf8_lossy(reply).lines().next().unwrap_or_default().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_is_read_from_an_http_first_line_only() {
        assert_eq!(http_status(b"HTTP/1.1 200 OK\r\nServer: x\r\n"), Some(200));
        assert_eq!(http_status(b"HTTP/1.0 409 Conflict\r\n"), Some(409));
        assert_eq!(http_status(b"+PONG\r\n"), None);
        assert_eq!(http_status(b"HTTP/1.1 OK\r\n"), None);
        assert_eq!(http_status(b""), None);
    }
}
