//! The fault-injecting proxy: each link state does to real TCP connections
//! what it promises (an echo server behind the proxy), a real Redis answers
//! through it and stalls while its link is held, and a 3-member etcd
//! cluster whose members talk through it loses its isolated member's writes
//! and lets it catch up on heal.
//!
//! Servers: Redis at `LOCKCHECK_REDIS_URL`'s host and port (default
//! 127.0.0.1:6379); etcd started from the `etcd` on PATH. A missing server
//! fails the test: nothing is skipped. Waits that prove nothing arrived are
//! lower bounds (a few hundred ms of silence); no test asserts an upper
//! bound on a duration.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream as StdTcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockcheck_real::{LinkState, LinkStats, Proxy, RealError};
use lockcheck_real::{ManagedServer, ServerOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{sleep, timeout};

/// How long a test waits for something that must happen (a hang guard, not
/// a timing target).
const PATIENCE: Duration = Duration::from_secs(60);
/// How long a test watches for something that must not happen.
const QUIET: Duration = Duration::from_millis(300);

/// What the echo server saw.
#[derive(Debug, Default)]
struct Echoed {
    /// Bytes it received (and sent back).
    bytes: AtomicU64,
    /// Connections that ended (EOF or an error).
    ended: AtomicU64,
}

/// A TCP echo server on a free loopback port: it sends back every byte and
/// half-closes when its client does.
async fn echo_server() -> (SocketAddr, Arc<Echoed>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the echo server");
    let address = listener.local_addr().expect("its address");
    let echoed = Arc::new(Echoed::default());
    let seen = Arc::clone(&echoed);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let seen = Arc::clone(&seen);
            tokio::spawn(async move {
                let mut buffer = [0u8; 8192];
                loop {
                    match stream.read(&mut buffer).await {
                        Ok(0) | Err(_) => break,
                        Ok(read) => {
                            seen.bytes.fetch_add(read as u64, Ordering::SeqCst);
                            if stream.write_all(&buffer[..read]).await.is_err() {
                                break;
                            }
                        }
                    }
                }
                let _ = stream.shutdown().await;
                seen.ended.fetch_add(1, Ordering::SeqCst);
            });
        }
    });
    (address, echoed)
}

fn start_proxy() -> Proxy {
    Proxy::start().unwrap_or_else(|error| panic!("the proxy must start: {error}"))
}

fn route(proxy: &Proxy, from: &str, to: &str, target: SocketAddr) -> SocketAddr {
    proxy.route(from, to, target).unwrap_or_else(|error| panic!("a route: {error}"))
}

async fn connect(address: SocketAddr) -> TcpStream {
    let stream = timeout(PATIENCE, TcpStream::connect(address)).await;
    stream.expect("connect in time").expect("the proxy accepts")
}

/// Reads exactly `length` bytes, or fails the test.
async fn read_exactly(stream: &mut TcpStream, length: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; length];
    let read = timeout(PATIENCE, stream.read_exact(&mut bytes)).await;
    read.expect("the bytes arrive in time").expect("the bytes arrive");
    bytes
}

/// Nothing arrives on `stream` for a while.
async fn stays_silent(stream: &mut TcpStream) -> bool {
    let mut byte = [0u8; 1];
    timeout(QUIET, stream.read(&mut byte)).await.is_err()
}

/// The connection ends (EOF or a reset) in time.
async fn closes(stream: &mut TcpStream) -> bool {
    let mut buffer = [0u8; 64];
    matches!(timeout(PATIENCE, stream.read(&mut buffer)).await, Ok(Ok(0) | Err(_)))
}

async fn eventually(mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + PATIENCE;
    while !condition() {
        if Instant::now() >= deadline {
            return false;
        }
        sleep(Duration::from_millis(10)).await;
    }
    true
}

/// The value of `counter` once it stopped changing for 100 ms.
async fn settled(counter: &AtomicU64) -> u64 {
    let deadline = Instant::now() + PATIENCE;
    let mut last = counter.load(Ordering::SeqCst);
    loop {
        sleep(Duration::from_millis(100)).await;
        let now = counter.load(Ordering::SeqCst);
        if now == last {
            return now;
        }
        assert!(Instant::now() < deadline, "a count still grows after {PATIENCE:?}: {now}");
        last = now;
    }
}

fn link<'a>(stats: &'a [LinkStats], from: &str, to: &str) -> Option<&'a LinkStats> {
    stats.iter().find(|link| link.from == from && link.to == to)
}

#[tokio::test]
async fn pass_forwards_both_ways_and_propagates_half_close() {
    let (echo, echoed) = echo_server().await;
    let proxy = start_proxy();
    let address = route(&proxy, "client-0", "echo", echo);
    let mut stream = connect(address).await;
    stream.write_all(b"hello").await.unwrap();
    assert_eq!(read_exactly(&mut stream, 5).await, b"hello");
    // Our FIN reaches the server, whose FIN comes back: the end of stream.
    stream.shutdown().await.unwrap();
    let mut rest = Vec::new();
    let read = timeout(PATIENCE, stream.read_to_end(&mut rest)).await;
    assert_eq!(read.expect("the server's FIN in time").expect("a clean end"), 0);
    assert!(eventually(|| echoed.ended.load(Ordering::SeqCst) == 1).await);
    let stats = proxy.stats();
    let counted = link(&stats, "client-0", "echo").expect("the link is counted");
    assert_eq!((counted.connections, counted.bytes_sent, counted.bytes_received), (1, 5, 5));
}

#[tokio::test]
async fn hold_delivers_nothing_until_heal_then_everything_in_order() {
    let (echo, echoed) = echo_server().await;
    let proxy = start_proxy();
    let address = route(&proxy, "client-0", "echo", echo);
    let mut open = connect(address).await;
    open.write_all(b"a").await.unwrap();
    assert_eq!(read_exactly(&mut open, 1).await, b"a");

    proxy.set("client-0", "echo", LinkState::Hold);
    open.write_all(b"bcd").await.unwrap();
    open.write_all(b"efg").await.unwrap();
    // A new connection is accepted but goes nowhere.
    let mut new = connect(address).await;
    new.write_all(b"xyz").await.unwrap();
    assert!(stays_silent(&mut open).await, "a held link delivered bytes");
    assert!(stays_silent(&mut new).await, "a new connection on a held link was served");
    assert_eq!(echoed.bytes.load(Ordering::SeqCst), 1, "the server got bytes while held");

    proxy.heal();
    assert_eq!(read_exactly(&mut open, 6).await, b"bcdefg");
    assert_eq!(read_exactly(&mut new, 3).await, b"xyz");
}

#[tokio::test]
async fn a_hold_after_the_next_reply_lets_that_reply_through_and_holds_the_next_command() {
    let (echo, echoed) = echo_server().await;
    let proxy = start_proxy();
    let address = route(&proxy, "client-0", "echo", echo);
    let echo_node = ["echo".to_string()];
    let mut stream = connect(address).await;
    stream.write_all(b"a").await.unwrap();
    assert_eq!(read_exactly(&mut stream, 1).await, b"a");
    // Armed between operations: nothing moves until a reply comes back.
    let held = proxy.hold_after_reply("client-0", &echo_node);
    assert!(!held.struck());
    stream.write_all(b"b").await.unwrap();
    // The first reply of the operation reaches the client...
    assert_eq!(read_exactly(&mut stream, 1).await, b"b");
    timeout(PATIENCE, held.strikes()).await.expect("it strikes once the reply came");
    assert!(held.struck());
    // ...and its next command waits until the hold is lifted.
    stream.write_all(b"c").await.unwrap();
    assert!(stays_silent(&mut stream).await, "the second command went through the hold");
    assert_eq!(echoed.bytes.load(Ordering::SeqCst), 2);
    proxy.disarm("client-0", &echo_node);
    assert_eq!(read_exactly(&mut stream, 1).await, b"c");
    // A hold disarmed before any reply never strikes.
    let disarmed = proxy.hold_after_reply("client-0", &echo_node);
    proxy.disarm("client-0", &echo_node);
    stream.write_all(b"d").await.unwrap();
    assert_eq!(read_exactly(&mut stream, 1).await, b"d");
    stream.write_all(b"e").await.unwrap();
    assert_eq!(read_exactly(&mut stream, 1).await, b"e");
    assert!(!disarmed.struck());
}

/// The byte at offset `at` of the long stream.
fn pattern(at: u64) -> u8 {
    (at % 251) as u8
}

#[tokio::test]
async fn hold_blocks_a_fast_sender_and_loses_no_byte() {
    const TOTAL: u64 = 64 << 20;
    const PIECE: u64 = 64 << 10;
    let (echo, echoed) = echo_server().await;
    let proxy = start_proxy();
    let address = route(&proxy, "client-0", "echo", echo);
    let (mut reader, mut writer) = connect(address).await.into_split();
    let written = Arc::new(AtomicU64::new(0));
    let progress = Arc::clone(&written);
    let sending = tokio::spawn(async move {
        for start in (0..TOTAL).step_by(PIECE as usize) {
            let piece: Vec<u8> = (start..start + PIECE).map(pattern).collect();
            writer.write_all(&piece).await.unwrap();
            progress.fetch_add(PIECE, Ordering::SeqCst);
        }
        writer
    });
    let mut offset = 0u64;
    let mut buffer = vec![0u8; 256 << 10];
    let receive = |offset: &mut u64, bytes: &[u8]| {
        let intact = bytes.iter().zip(*offset..).all(|(&byte, at)| byte == pattern(at));
        assert!(intact, "the bytes after offset {offset} came back altered or out of order");
        *offset += bytes.len() as u64;
    };
    while offset < 1 << 20 {
        let read = timeout(PATIENCE, reader.read(&mut buffer)).await.unwrap().unwrap();
        assert!(read > 0, "the stream ended early");
        receive(&mut offset, &buffer[..read]);
    }

    proxy.set_both("client-0", "echo", LinkState::Hold);
    // What the proxy wrote before the hold still reaches the server and
    // comes back; then nothing moves. The sender blocks once the buffers
    // before the proxy are full.
    let at_hold = settled(&echoed.bytes).await;
    let deadline = Instant::now() + PATIENCE;
    while let Ok(read) = timeout(QUIET, reader.read(&mut buffer)).await {
        let read = read.unwrap();
        assert!(read > 0 && Instant::now() < deadline, "bytes kept coming over a held link");
        receive(&mut offset, &buffer[..read]);
    }
    settled(&written).await;
    assert!(!sending.is_finished(), "{TOTAL} bytes went through a held link");
    assert_eq!(echoed.bytes.load(Ordering::SeqCst), at_hold, "the server got bytes while held");
    proxy.heal();

    while offset < TOTAL {
        let read = timeout(PATIENCE, reader.read(&mut buffer)).await.unwrap().unwrap();
        assert!(read > 0, "the stream ended at {offset} of {TOTAL} bytes");
        receive(&mut offset, &buffer[..read]);
    }
    drop(timeout(PATIENCE, sending).await.unwrap().unwrap());
}

#[tokio::test]
async fn cut_resets_open_connections_and_new_ones_until_healed() {
    let (echo, echoed) = echo_server().await;
    let proxy = start_proxy();
    let address = route(&proxy, "client-0", "echo", echo);
    let mut open = connect(address).await;
    open.write_all(b"a").await.unwrap();
    assert_eq!(read_exactly(&mut open, 1).await, b"a");

    proxy.set("client-0", "echo", LinkState::Cut);
    assert!(closes(&mut open).await, "an open connection survived a cut");
    assert!(eventually(|| echoed.ended.load(Ordering::SeqCst) == 1).await, "the server side too");
    // The reset may come before the client's connect returns.
    if let Ok(mut new) = timeout(PATIENCE, TcpStream::connect(address)).await.unwrap() {
        assert!(closes(&mut new).await, "a new connection on a cut link was served");
    }
    assert_eq!(echoed.bytes.load(Ordering::SeqCst), 1);

    proxy.set("client-0", "echo", LinkState::Pass);
    let mut healed = connect(address).await;
    healed.write_all(b"b").await.unwrap();
    assert_eq!(read_exactly(&mut healed, 1).await, b"b");
}

#[tokio::test]
async fn delay_adds_its_latency_each_way_and_keeps_order_when_changed() {
    let (echo, _) = echo_server().await;
    let proxy = start_proxy();
    let address = route(&proxy, "client-0", "echo", echo);
    let mut stream = connect(address).await;
    let delay = Duration::from_millis(150);
    proxy.set("client-0", "echo", LinkState::Delay(delay));
    let started = Instant::now();
    stream.write_all(b"ping").await.unwrap();
    assert_eq!(read_exactly(&mut stream, 4).await, b"ping");
    let round_trip = started.elapsed();
    assert!(round_trip >= 2 * delay, "an echo took {round_trip:?} under a {delay:?} delay");

    // Chunks sent under a long delay, then the delay dropped: the later
    // chunks, due at once, must not overtake the earlier ones.
    proxy.set("client-0", "echo", LinkState::Delay(Duration::from_millis(400)));
    let mut expected = Vec::new();
    for at in 0..20u8 {
        if at == 10 {
            proxy.set("client-0", "echo", LinkState::Pass);
        }
        stream.write_all(&[at; 3]).await.unwrap();
        expected.extend([at; 3]);
        sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(read_exactly(&mut stream, expected.len()).await, expected);
}

#[tokio::test]
async fn a_failed_upstream_connect_closes_the_client_and_drop_stops_the_proxy() {
    // A port nobody listens on.
    let vacant = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
    let (echo, echoed) = echo_server().await;
    let proxy = start_proxy();
    let nowhere = route(&proxy, "client-0", "nowhere", vacant);
    // The reset may come before the client's connect returns.
    if let Ok(mut refused) = timeout(PATIENCE, TcpStream::connect(nowhere)).await.unwrap() {
        assert!(closes(&mut refused).await, "the proxy kept a connection it could not forward");
    }

    let address = route(&proxy, "client-0", "echo", echo);
    let mut open = connect(address).await;
    open.write_all(b"a").await.unwrap();
    assert_eq!(read_exactly(&mut open, 1).await, b"a");
    let copy = proxy.clone();
    drop(proxy);
    // A clone keeps it running.
    open.write_all(b"b").await.unwrap();
    assert_eq!(read_exactly(&mut open, 1).await, b"b");
    drop(copy);
    assert!(closes(&mut open).await, "a connection outlived the proxy");
    assert!(eventually(|| echoed.ended.load(Ordering::SeqCst) == 1).await);
    // Nothing listens there any more: the connect is refused. On a busy
    // machine the freed port may meanwhile be another program's (or this
    // connect's own, a self-connect): then what answers must not be this
    // proxy, which would forward the byte to the echo server.
    if let Ok(mut stranger) = TcpStream::connect(address).await {
        let ends = (stranger.local_addr().ok(), stranger.peer_addr().ok());
        let _ = stranger.write_all(b"c").await;
        sleep(QUIET).await;
        let heard = echoed.bytes.load(Ordering::SeqCst);
        assert_eq!(heard, 2, "a listener outlived the proxy: {ends:?} forwarded a byte");
    }
}

/// The head of an etcd raft stream request from member `id`.
fn stream_request(id: Option<&str>) -> Vec<u8> {
    let from = id.map(|id| format!("X-Server-From: {id}\r\n")).unwrap_or_default();
    format!("GET /raft/stream/message/1 HTTP/1.1\r\nHost: 127.0.0.1\r\n{from}\r\n").into_bytes()
}

#[tokio::test]
async fn peer_connections_are_links_from_the_member_their_header_names() {
    let (echo, _) = echo_server().await;
    let proxy = start_proxy();
    let address = proxy.route_peers("etcd-0", echo).expect("a peer listener");
    let mut named = connect(address).await;
    let mut other = connect(address).await;
    let mut anonymous = connect(address).await;
    let heads = [
        stream_request(Some("8e9e05c52164694d")),
        stream_request(Some("1f")),
        stream_request(None),
    ];
    for (stream, head) in [&mut named, &mut other, &mut anonymous].into_iter().zip(&heads) {
        stream.write_all(head).await.unwrap();
        assert_eq!(&read_exactly(stream, head.len()).await, head);
    }

    // Named after the connection opened, as a cluster's ids are known only
    // once it runs.
    proxy.alias("8e9e05c52164694d", "etcd-1");
    proxy.alias("1f", "etcd-2");
    proxy.set("etcd-1", "etcd-0", LinkState::Hold);
    for stream in [&mut named, &mut other, &mut anonymous] {
        stream.write_all(b"ping").await.unwrap();
    }
    assert!(stays_silent(&mut named).await, "the held source's link delivered");
    assert_eq!(read_exactly(&mut other, 4).await, b"ping");
    assert_eq!(read_exactly(&mut anonymous, 4).await, b"ping");

    proxy.set("unknown", "etcd-0", LinkState::Hold);
    anonymous.write_all(b"pong").await.unwrap();
    assert!(stays_silent(&mut anonymous).await, "the unknown source's link delivered");
    proxy.heal();
    assert_eq!(read_exactly(&mut named, 4).await, b"ping");
    assert_eq!(read_exactly(&mut anonymous, 4).await, b"pong");

    let stats = proxy.stats();
    let sources: Vec<&str> = stats.iter().map(|link| link.from.as_str()).collect();
    assert_eq!(sources, ["etcd-1", "etcd-2", "unknown"]);
    assert!(stats.iter().all(|link| link.to == "etcd-0" && link.connections == 1));
    let named = link(&stats, "etcd-1", "etcd-0").unwrap();
    assert_eq!(named.bytes_sent, heads[0].len() as u64 + 4);
}

fn redis_address() -> String {
    let url = std::env::var("LOCKCHECK_REDIS_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_string());
    let rest = url.split_once("://").map_or(url.as_str(), |(_, rest)| rest);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    rest.split('/').next().unwrap_or(rest).to_string()
}

#[tokio::test]
async fn redis_answers_through_the_proxy_and_stalls_while_held() {
    let target: SocketAddr = redis_address().parse().expect("Redis at an IP address and port");
    let proxy = start_proxy();
    let address = route(&proxy, "client-0", "redis-0", target);
    let client = redis::Client::open(format!("redis://{address}")).unwrap();
    // The crate's own timeouts off: the test decides how long to wait.
    let config =
        redis::AsyncConnectionConfig::new().set_connection_timeout(None).set_response_timeout(None);
    let connecting = client.get_multiplexed_async_connection_with_config(&config);
    let mut connection = timeout(PATIENCE, connecting)
        .await
        .expect("connect in time")
        .unwrap_or_else(|error| panic!("Redis must answer at {target} through the proxy: {error}"));
    let pong: String = redis::cmd("PING").query_async(&mut connection).await.unwrap();
    assert_eq!(pong, "PONG");

    proxy.set("client-0", "redis-0", LinkState::Hold);
    let mut command = redis::cmd("PING");
    let mut ping = Box::pin(command.arg("held").query_async::<String>(&mut connection));
    assert!(timeout(QUIET, &mut ping).await.is_err(), "Redis answered over a held link");
    proxy.heal();
    let answer = timeout(PATIENCE, ping).await.expect("the answer after heal");
    assert_eq!(answer.unwrap(), "held");
}

// ---------------------------------------------------------------------------
// An etcd cluster whose members talk through the proxy

/// An HTTP/1.1 POST of JSON to etcd's v3 gateway: the response, or why none
/// came within `wait`.
fn etcd_post(url: &str, path: &str, body: &str, wait: Duration) -> Result<String, String> {
    let host = url.trim_start_matches("http://");
    let mut stream = StdTcpStream::connect(host).map_err(|error| error.to_string())?;
    stream.set_read_timeout(Some(wait)).map_err(|error| error.to_string())?;
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).map_err(|error| error.to_string())?;
    let mut response = String::new();
    stream.read_to_string(&mut response).map_err(|error| error.to_string())?;
    Ok(response)
}

/// `key` = `value` (both base64, as the gateway wants) committed through
/// `url`; `Err` with the last answer if not within `wait`.
fn put(url: &str, key: &str, value: &str, wait: Duration) -> Result<(), String> {
    let body = format!(r#"{{"key":"{key}","value":"{value}"}}"#);
    let response = etcd_post(url, "/v3/kv/put", &body, wait)?;
    match response.starts_with("HTTP/1.1 200") && response.contains("\"header\"") {
        true => Ok(()),
        false => Err(response),
    }
}

/// Retries `attempt` until it succeeds or `PATIENCE` passes.
fn retry(what: &str, mut attempt: impl FnMut() -> Result<(), String>) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        match attempt() {
            Ok(()) => return,
            Err(last) if Instant::now() >= deadline => panic!("{what}: {last}"),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

#[test]
fn an_isolated_etcd_member_cannot_commit_and_catches_up_on_heal() {
    let proxy = start_proxy();
    let members = ManagedServer::start_etcd_cluster_behind(3, &ServerOptions::default(), &proxy)
        .unwrap_or_else(|error| {
            panic!("a 3-member etcd cluster must start behind the proxy: {error}")
        });
    let urls: Vec<String> = members.iter().map(ManagedServer::url).collect();
    let clients = route_clients(&proxy, 1, &members).expect("client routes");
    // "k1" = "v1", "k2" = "v2", "k3" = "v3", base64-encoded.
    retry("a put through client-0's route to etcd-0", || {
        put(&clients[0][0], "azE=", "djE=", Duration::from_secs(5))
    });

    proxy.set_both("etcd-2", "etcd-0", LinkState::Hold);
    proxy.set_both("etcd-2", "etcd-1", LinkState::Hold);
    let minority = put(&urls[2], "azM=", "djM=", Duration::from_secs(3));
    assert!(minority.is_err(), "the isolated member committed a write alone");
    // The majority elects a leader among itself if it must, and commits.
    retry("a put through etcd-0", || put(&urls[0], "azI=", "djI=", Duration::from_secs(5)));

    proxy.heal();
    retry("etcd-2 catching up", || {
        let range =
            etcd_post(&urls[2], "/v3/kv/range", r#"{"key":"azI="}"#, Duration::from_secs(5))?;
        match range.contains("djI=") {
            true => Ok(()),
            false => Err(range),
        }
    });

    // Every member's raft streams to every other are on their named link
    // (a start retried on new ports would also leave its first members'
    // ids in the stats).
    let stats = proxy.stats();
    let names = ["etcd-0", "etcd-1", "etcd-2"];
    for from in names {
        for to in names.into_iter().filter(|&to| to != from) {
            let peer =
                link(&stats, from, to).unwrap_or_else(|| panic!("no {from} -> {to} in {stats:?}"));
            assert!(
                peer.connections > 0 && peer.bytes_sent > 0 && peer.bytes_received > 0,
                "{peer:?}"
            );
        }
    }
    let client = link(&stats, "client-0", "etcd-0").expect("the client's route is counted");
    assert!(client.connections > 0 && client.bytes_received > 0, "{client:?}");
}

/// For each client `client-c` (`c` in `0..clients`), its own listener to
/// each of `members`, as `http://127.0.0.1:<port>` URLs (etcd's client URLs;
/// the host and port are what a Redis URL needs too): `urls[c][i]` is the
/// link `client-c -> <kind>-i`, `etcd-1` for the second etcd member. One
/// listener per client and member, so a partition can cut one client off
/// from one member while the others still reach it.
pub fn route_clients(
    proxy: &Proxy,
    clients: u32,
    members: &[ManagedServer],
) -> Result<Vec<Vec<String>>, RealError> {
    (0..clients)
        .map(|client| {
            let from = format!("client-{client}");
            members
                .iter()
                .enumerate()
                .map(|(at, member)| {
                    let to = format!("{}-{at}", member.kind().name());
                    let target = SocketAddr::from((Ipv4Addr::LOCALHOST, member.port()));
                    proxy.route(&from, &to, target).map(|address| format!("http://{address}"))
                })
                .collect()
        })
        .collect()
}
