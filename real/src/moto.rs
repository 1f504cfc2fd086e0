//! moto's S3 server as a run's S3 storage (docs/storage.md). The server is
//! a managed server like the others, [`ServerKind::Moto`](crate::ServerKind::Moto)
//! (`servers/moto.rs`): found on PATH, started on a free loopback port,
//! probed, stopped, cleaned up after a killed run, and its missing binary
//! reported with the package to install. What is S3's is here: the bucket
//! the run's resources live in.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

use crate::servers::{http_status, ManagedServer};
use crate::RealError;

/// How long creating a bucket may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Creates `bucket` on the moto server `server` (S3's `CreateBucket`, which
/// moto takes unsigned), or finds it there.
pub(crate) fn create_bucket(server: &ManagedServer, bucket: &str) -> Result<(), RealError> {
    let failed = |reason: String| RealError::Setup {
        what: "the S3 bucket of the protected resources",
        reason: format!("creating {bucket:?} on {}: {reason}", server.url()),
    };
    match request(server.port(), "PUT", &format!("/{bucket}")).map_err(failed)? {
        200 | 409 => Ok(()),
        code => Err(failed(format!("answered {code}"))),
    }
}

/// One HTTP/1.1 request without a body to the server on `port`; its
/// status code.
pub(crate) fn request(port: u16, method: &str, path: &str) -> Result<u16, String> {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&address, REQUEST_TIMEOUT)
        .map_err(|error| format!("connect: {error}"))?;
    stream
        .set_read_timeout(Some(REQUEST_TIMEOUT))
        .and_then(|()| stream.set_write_timeout(Some(REQUEST_TIMEOUT)))
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
    http_status(&reply).ok_or_else(|| {
        let line = String::from_utf8_lossy(&reply);
        format!("no HTTP status in {:?}", line.lines().next().unwrap_or_default())
    })
}
