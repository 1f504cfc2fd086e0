//! Clock faults on the servers lockcheck manages: a server started with
//! `faketime` reads its wall clock through libfaketime, and
//! `ManagedServer::set_clock` jumps it while it runs. A forward jump makes
//! Redis expire a lock early (docs/guide.md#redis); PostgreSQL's `now()` (run
//! as the `postgres` user) and MariaDB's move too; the clock nemesis jumps
//! the struck server only; etcd, which ignores libfaketime, is refused.
//! Needs redis-server, postgresql, mariadb-server, etcd-server and
//! faketime: a missing one fails these tests.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lockcheck_real::nemesis::{self, ServerAction, ServerFault, SharedServer};
use lockcheck_real::RealError;
use lockcheck_real::{ManagedServer, ServerKind, ServerOptions};
use lockcheck_workloads::{Holders, Recorder};

fn faked() -> ServerOptions {
    ServerOptions { faketime: true, ..ServerOptions::default() }
}

fn start_faked(kind: ServerKind) -> ManagedServer {
    ManagedServer::start_with(kind, &faked())
        .unwrap_or_else(|error| panic!("{} must start under libfaketime: {error}", kind.name()))
}

/// The host's wall clock, in seconds (this test never runs under
/// libfaketime).
fn host_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_secs_f64()
}

/// One Redis command (as separate words, sent in the inline form) and its
/// whole reply: a status, an integer, a nil, one bulk string, or an array
/// of two bulk strings (`TIME`).
fn redis(port: u16, command: &str) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("redis accepts connections");
    stream.set_read_timeout(Some(Duration::from_secs(5))).expect("a read timeout");
    stream.write_all(format!("{command}\r\n").as_bytes()).expect("send a command");
    let mut reply = Vec::new();
    let mut buffer = [0u8; 512];
    loop {
        let read = stream.read(&mut buffer).expect("a reply");
        reply.extend_from_slice(&buffer[..read]);
        let text = String::from_utf8_lossy(&reply).to_string();
        let lines = text.matches("\r\n").count();
        let complete = match text.chars().next() {
            Some('*') => lines >= 5,
            Some('$') if !text.starts_with("$-1") => lines >= 2,
            _ => lines >= 1,
        };
        if read == 0 || complete {
            return text.trim_end().to_string();
        }
    }
}

/// Redis's `TIME`, in seconds.
fn redis_time(port: u16) -> f64 {
    let reply = redis(port, "TIME");
    let parts: Vec<&str> =
        reply.split("\r\n").filter(|line| !line.starts_with(['*', '$'])).collect();
    match parts.as_slice() {
        [seconds, micros] => {
            let seconds: f64 = seconds.parse().expect("TIME's seconds");
            let micros: f64 = micros.parse().expect("TIME's microseconds");
            seconds + micros / 1e6
        }
        _ => panic!("TIME answered {reply:?}"),
    }
}

/// How far `server_now` is ahead of the host's clock, in seconds, as the
/// range it must lie in: the server read its clock at some instant between
/// two host readings, so the offset is at least `server - after` and at
/// most `server - before`, however long the server took to answer.
#[derive(Debug, Clone, Copy)]
struct Offset {
    low: f64,
    high: f64,
}

fn offset_of(server_now: impl Fn() -> f64) -> Offset {
    let before = host_now();
    let server = server_now();
    let after = host_now();
    Offset { low: server - after, high: server - before }
}

fn assert_offset(what: &str, offset: Offset, expected_s: f64) {
    // A tenth of a second for the clocks' resolution and rounding; the time
    // the server takes to answer is in the range itself, so a loaded machine
    // widens the range instead of failing the test.
    assert!(
        offset.low - 0.1 <= expected_s && expected_s <= offset.high + 0.1,
        "{what}: the clock is {:.3} to {:.3} s off, not {expected_s} s",
        offset.low,
        offset.high
    );
}

#[test]
fn a_forward_jump_expires_a_redis_lock_early_and_moves_time() {
    let server = start_faked(ServerKind::Redis);
    let port = server.port();
    assert_offset("at start", offset_of(|| redis_time(port)), 0.0);
    // 8 s: seconds more than this test needs on a loaded machine, seconds
    // less than the jump.
    assert_eq!(redis(port, "SET lock holder-1 PX 8000"), "+OK");
    thread::sleep(Duration::from_millis(100));
    assert_eq!(redis(port, "GET lock"), "$8\r\nholder-1", "the lock lives without a jump");

    server.set_clock(10_000).expect("set the clock 10 s ahead");
    // The real 8 s have not passed (a few ms have), yet the key is gone.
    assert_eq!(redis(port, "GET lock"), "$-1", "the lock expired early");
    assert_offset("after +10 s", offset_of(|| redis_time(port)), 10.0);
    // A second holder gets the lock the first still believes it holds.
    assert_eq!(redis(port, "SET lock holder-2 NX PX 3000"), "+OK");

    server.set_clock(0).expect("set the clock back");
    assert_offset("back at 0", offset_of(|| redis_time(port)), 0.0);
    server.set_clock(-5_250).expect("set the clock behind");
    assert_offset("after -5.25 s", offset_of(|| redis_time(port)), -5.25);
    assert_eq!(redis(port, "PING"), "+PONG", "the server still runs");
}

#[test]
fn a_redis_clock_stays_faked_across_a_crash_and_restart() {
    let mut server = start_faked(ServerKind::Redis);
    server.set_clock(20_000).expect("set the clock 20 s ahead");
    let killed = server.pid();
    assert!(!faketime_memory(killed).is_empty(), "libfaketime shares memory under the pid");
    server.crash();
    server.restart().expect("restart");
    assert_offset("after restart", offset_of(|| redis_time(server.port())), 20.0);
    server.set_clock(0).expect("set the clock back");
    assert_offset("back at 0", offset_of(|| redis_time(server.port())), 0.0);
    let restarted = server.pid();
    server.stop();
    for pid in [killed, restarted] {
        assert_eq!(faketime_memory(pid), Vec::<String>::new(), "left behind by server {pid}");
    }
}

/// What libfaketime in process `pid` put in /dev/shm.
fn faketime_memory(pid: u32) -> Vec<String> {
    [format!("sem.faketime_sem_{pid}"), format!("faketime_shm_{pid}")]
        .into_iter()
        .filter(|name| Path::new("/dev/shm").join(name).exists())
        .collect()
}

#[test]
fn set_clock_is_an_error_without_faketime_and_etcd_refuses_faketime() {
    let server = ManagedServer::start(ServerKind::Redis).expect("redis must start");
    let error = server.set_clock(1_000).expect_err("no faketime, no clock to set");
    assert!(error.to_string().contains("faketime"), "{error}");
    // The server's clock is untouched.
    assert_offset("plain redis", offset_of(|| redis_time(server.port())), 0.0);

    assert!(!ServerKind::Etcd.clock_is_fakeable());
    assert!(ServerKind::Redis.clock_is_fakeable() && ServerKind::Postgres.clock_is_fakeable());
    match ManagedServer::start_with(ServerKind::Etcd, &faked()) {
        Err(RealError::Server { what: "etcd", reason }) => {
            assert!(reason.contains("ignores libfaketime"), "{reason}");
        }
        Err(error) => panic!("expected etcd's refusal, got {error}"),
        Ok(server) => panic!("etcd started under faketime in {}", server.dir().display()),
    }
    match ManagedServer::start_etcd_cluster(3, &faked()) {
        Err(error) => assert!(error.to_string().contains("ignores libfaketime"), "{error}"),
        Ok(_) => panic!("an etcd cluster started under faketime"),
    }
}

/// PostgreSQL's `now()` in seconds, asked with psql (not under faketime).
fn postgres_now(url: &str) -> f64 {
    let output = Command::new("psql")
        .args(["-X", "-tA", "-c", "SELECT extract(epoch FROM now())"])
        .arg(url)
        .output()
        .expect("run psql");
    assert!(output.status.success(), "psql: {}", String::from_utf8_lossy(&output.stderr));
    let text = String::from_utf8_lossy(&output.stdout).trim().to_string();
    text.parse().unwrap_or_else(|error| panic!("now() answered {text:?}: {error}"))
}

#[test]
fn postgres_now_moves_with_set_clock() {
    let server = start_faked(ServerKind::Postgres);
    let url = server.url();
    assert_offset("at start", offset_of(|| postgres_now(&url)), 0.0);
    server.set_clock(30_000).expect("set the clock 30 s ahead");
    // psql takes a few ms to connect: its time is not in the bound.
    assert_offset("after +30 s", offset_of(|| postgres_now(&url)), 30.0);
    server.set_clock(0).expect("set the clock back");
    assert_offset("back at 0", offset_of(|| postgres_now(&url)), 0.0);
}

#[tokio::test]
async fn the_clock_nemesis_jumps_the_struck_server_and_records_the_jump() {
    let servers: Vec<SharedServer> =
        (0..2).map(|_| Arc::new(Mutex::new(start_faked(ServerKind::Redis)))).collect();
    let ports: Vec<u16> = servers.iter().map(|server| server.lock().unwrap().port()).collect();
    let names = vec!["redis-0".to_string(), "redis-1".to_string()];
    // Read at 500 ms, inside a fault that lasts till 3.1 s: a reading late
    // by seconds on a loaded machine still falls inside it.
    let fault = ServerFault {
        start: Duration::from_millis(100),
        end: Duration::from_millis(3_100),
        action: ServerAction::ClockJump,
        servers: vec![1],
        jump_ms: 10_000,
        slack: Duration::ZERO,
    };
    let recorder = Recorder::new().shared();
    let start = tokio::time::Instant::now();
    let offsets = |port| tokio::task::spawn_blocking(move || offset_of(|| redis_time(port)));
    let during = async {
        tokio::time::sleep_until(start + Duration::from_millis(500)).await;
        (offsets(ports[0]).await.unwrap(), offsets(ports[1]).await.unwrap())
    };
    let (faults, nobody) = ([fault], Holders::default());
    let (ran, (spared, struck)) = tokio::join!(
        nemesis::run(&faults, &servers, &names, None, &recorder, start, &nobody),
        during
    );
    ran.expect("the clock fault runs");
    assert_offset("the spared server", spared, 0.0);
    assert_offset("the struck server", struck, 10.0);
    assert_offset("the struck server after the fault", offsets(ports[1]).await.unwrap(), 0.0);

    let values: Vec<serde_json::Value> = recorder
        .lock()
        .unwrap()
        .events()
        .iter()
        .map(|event| serde_json::from_str(event.value.as_ref().expect("a value").get()).unwrap())
        .collect();
    assert_eq!(values.len(), 2, "a start and a stop: {values:?}");
    for value in values {
        assert_eq!(value["fault"], "clock", "{value}");
        assert_eq!(value["jump_ms"], 10_000, "{value}");
        assert_eq!(value["targets"], serde_json::json!(["redis-1"]), "{value}");
    }
}

#[tokio::test]
async fn a_drifting_clock_gains_in_proportion_to_the_time_gone_then_steps_back() {
    let servers: Vec<SharedServer> = vec![Arc::new(Mutex::new(start_faked(ServerKind::Redis)))];
    let port = servers[0].lock().unwrap().port();
    let names = vec!["redis-0".to_string()];
    // Four seconds that gain eight: the clock runs at three times real speed.
    let fault = ServerFault {
        start: Duration::from_millis(100),
        end: Duration::from_millis(4_100),
        action: ServerAction::ClockDrift,
        servers: vec![0],
        jump_ms: 8_000,
        slack: Duration::ZERO,
    };
    let recorder = Recorder::new().shared();
    let start = tokio::time::Instant::now();
    let offset = || tokio::task::spawn_blocking(move || offset_of(|| redis_time(port)));
    // The gain due at `at`, in seconds: two for each second of the drift.
    let drift_start = start + fault.start;
    let due = |at: tokio::time::Instant| {
        (2.0 * at.saturating_duration_since(drift_start).as_secs_f64()).min(8.0)
    };
    // Read 1.5 s and 3 s in (about 3 s and 6 s gained), each reading with
    // the gains due just before and just after it, however late it came.
    let during = async {
        let mut readings = Vec::new();
        for at_ms in [1_600, 3_100] {
            tokio::time::sleep_until(start + Duration::from_millis(at_ms)).await;
            let before = tokio::time::Instant::now();
            let read = offset().await.unwrap();
            readings.push((due(before), read, due(tokio::time::Instant::now())));
        }
        readings
    };
    let (faults, nobody) = ([fault], Holders::default());
    let (ran, readings) = tokio::join!(
        nemesis::run(&faults, &servers, &names, None, &recorder, start, &nobody),
        during
    );
    ran.expect("the drift runs");
    // Never more than is due by the reading's end. At least a quarter of
    // what was due at its start: the reading and the drift's step share a
    // runtime, so a reading may come before a step that a stall of the
    // process delayed (one of 0.6 s was seen, with the machine loaded), and
    // such a stall is bounded by nothing but the load. A clock that did not
    // drift, or jumped the whole gain at once, is out of both ranges.
    for (what, (due_before, read, due_after)) in ["1.5 s in", "3 s in"].into_iter().zip(readings) {
        assert!(due_after < 8.0, "{what}: read after the drift's end");
        assert!(
            read.low - 0.1 <= due_after && due_before / 4.0 <= read.high + 0.1,
            "{what} the drift: the clock is {:.3} to {:.3} s ahead, {due_before:.3} to \
             {due_after:.3} s were due",
            read.low,
            read.high
        );
    }
    assert_offset("after the drift", offset().await.unwrap(), 0.0);
    let values: Vec<serde_json::Value> = recorder
        .lock()
        .unwrap()
        .events()
        .iter()
        .map(|event| serde_json::from_str(event.value.as_ref().expect("a value").get()).unwrap())
        .collect();
    assert_eq!(values.len(), 2, "a start and a stop: {values:?}");
    assert_eq!(values[0]["fault"], "clock-drift");
    assert_eq!(values[0]["gain_ms"], 8_000);
    assert_eq!(values[0]["rate"], 3.0);
}

/// MariaDB's `NOW(6)` in seconds, asked with the mariadb client.
fn mariadb_now(port: u16) -> f64 {
    let port = port.to_string();
    let output = Command::new("mariadb")
        .args(["--protocol=TCP", "-h", "127.0.0.1", "-P", &port, "-u", "root", "-N", "-B"])
        .args(["-e", "SELECT UNIX_TIMESTAMP(NOW(6))", "test"])
        .output()
        .expect("run mariadb");
    assert!(output.status.success(), "mariadb: {}", String::from_utf8_lossy(&output.stderr));
    let text = String::from_utf8_lossy(&output.stdout).trim().to_string();
    text.parse().unwrap_or_else(|error| panic!("NOW(6) answered {text:?}: {error}"))
}

#[test]
fn mariadb_now_moves_with_set_clock() {
    let server = start_faked(ServerKind::Mariadb);
    let port = server.port();
    assert_offset("at start", offset_of(|| mariadb_now(port)), 0.0);
    server.set_clock(30_000).expect("set the clock 30 s ahead");
    assert_offset("after +30 s", offset_of(|| mariadb_now(port)), 30.0);
    server.set_clock(0).expect("set the clock back");
    assert_offset("back at 0", offset_of(|| mariadb_now(port)), 0.0);
}
