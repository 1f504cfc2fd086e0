//! The failover fault against real Redis (docs/guide.md#redis): the primary
//! dies before its async replica received a grant, the replica is promoted,
//! the clients follow it, and it grants the same lock a second time.
//!
//! [`RedisPair`] is two managed `redis-server`s, `redis-0` the primary and
//! `redis-1` its replica, which dials its primary through the [`Proxy`], so
//! that the nemesis can hold the replication link. On loopback replication
//! takes microseconds: without the hold, the replica would have every grant
//! before the primary died, and the failover would lose nothing.
//!
//! One failover ([`run`]) does what an operator or Sentinel does after a
//! primary's death, with a lag before it:
//! 1. hold the replication link, both ways, for `lag`, while the clients
//!    keep using the primary: its grants now never reach the replica;
//! 2. SIGKILL the primary, cut the link (the held bytes go with it);
//! 3. `REPLICAOF NO ONE` on the replica and move the [`PrimaryUrl`] to it;
//!    clients that lost their connection reconnect there;
//! 4. at the fault's end, restart the old primary, heal the link and make it
//!    the new primary's replica. The roles have swapped: the next failover
//!    goes the other way.
//!
//! Server operations block (a restart waits until the server answers), so
//! they run on tokio's blocking pool while the clients go on.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use lockcheck_checker::Function;
use redis::Value;
use serde_json::json;
use tokio::time::Instant;

use super::nemesis::SharedServer;
use super::proxy::{LinkState, Proxy};
pub use super::redis::PrimaryUrl;
use super::servers::{ManagedServer, ServerKind, ServerOptions};
use super::RealError;
use lockcheck_workloads::SharedRecorder;

/// The two servers' names, in histories and on the proxy's links.
pub const NAMES: [&str; 2] = ["redis-0", "redis-1"];

/// How long a replica may take to (re)sync with its primary: a full resync
/// of a few keys on loopback takes milliseconds, then up to a second until
/// the stream starts (see [`streaming`]).
const SYNC_TIMEOUT: Duration = Duration::from_secs(10);
/// One admin command's connect, write and read timeout.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(2);
/// The key the replication probe writes on the primary.
const PROBE_KEY: &str = "lockcheck:replication-probe";
/// How often a replica's link is probed while waiting for it.
const SYNC_POLL: Duration = Duration::from_millis(20);

/// A Redis primary with an async replica that dials it through the proxy.
/// Dropping it (and every clone of its servers) stops both servers.
pub struct RedisPair {
    servers: [SharedServer; 2],
    /// Each server's own URL: where clients and the nemesis reach it.
    urls: [String; 2],
    /// Each server as its peer dials it: the proxy's listener for the link
    /// from the peer to it.
    via_proxy: [SocketAddr; 2],
    proxy: Proxy,
    primary: PrimaryUrl,
    /// Which server is the primary now (0 or 1).
    primary_at: AtomicUsize,
    /// Replication probes written so far.
    probes: AtomicU64,
}

impl std::fmt::Debug for RedisPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisPair")
            .field("urls", &self.urls)
            .field("via_proxy", &self.via_proxy)
            .field("primary", &self.primary_at.load(Ordering::SeqCst))
            .finish()
    }
}

impl RedisPair {
    /// Starts `redis-0` and `redis-1` with `options`, routes both
    /// replication directions through `proxy`, makes `redis-1` the replica
    /// of `redis-0` and waits until it streams the primary's writes.
    /// Blocks: call it before the test's runtime, or on its blocking pool.
    pub fn start(options: &ServerOptions, proxy: &Proxy) -> Result<RedisPair, RealError> {
        let [first, second]: [ManagedServer; 2] =
            ManagedServer::start_many(ServerKind::Redis, 2, options)?
                .try_into()
                .map_err(|_| pair_error("start_many did not start two servers".to_string()))?;
        let urls = [first.url(), second.url()];
        let address =
            |server: &ManagedServer| SocketAddr::from((Ipv4Addr::LOCALHOST, server.port()));
        let via_proxy = [
            proxy.route(NAMES[1], NAMES[0], address(&first))?,
            proxy.route(NAMES[0], NAMES[1], address(&second))?,
        ];
        let primary = PrimaryUrl::new(urls[0].clone());
        let pair = RedisPair {
            servers: [first, second].map(|server| Arc::new(Mutex::new(server))),
            urls,
            via_proxy,
            proxy: proxy.clone(),
            primary,
            primary_at: AtomicUsize::new(0),
            probes: AtomicU64::new(0),
        };
        for at in 0..2 {
            configure(&pair.urls[at]).map_err(|reason| pair.failed(at, "configure", reason))?;
        }
        admin(&pair.urls[1], &pair.replicaof_args(0))
            .map_err(|reason| pair.failed(1, "make the replica of redis-0", reason))?;
        pair.wait_synced_blocking(1, 0)?;
        Ok(pair)
    }

    /// Where the primary is now, moved by each failover: give it to
    /// [`super::redis::RedisClient::connect_following`].
    pub fn primary(&self) -> PrimaryUrl {
        self.primary.clone()
    }

    /// Which server is the primary now: 0 (`redis-0`) or 1 (`redis-1`).
    pub fn primary_index(&self) -> usize {
        self.primary_at.load(Ordering::SeqCst)
    }

    /// Both servers, `redis-0` first, for whoever stops them at the end.
    pub fn servers(&self) -> &[SharedServer] {
        &self.servers
    }

    /// Each server's own URL (not through the proxy), `redis-0` first.
    pub fn urls(&self) -> &[String] {
        &self.urls
    }

    /// The names of the servers, `redis-0` first, as histories name them.
    pub fn names(&self) -> Vec<String> {
        NAMES.iter().map(|name| name.to_string()).collect()
    }

    /// `REPLICAOF` the server `primary`, through the proxy.
    fn replicaof_args(&self, primary: usize) -> Vec<String> {
        let port = self.via_proxy[primary].port().to_string();
        vec!["REPLICAOF".to_string(), "127.0.0.1".to_string(), port]
    }

    fn failed(&self, at: usize, what: &str, reason: String) -> RealError {
        let log = self.servers[at].lock().unwrap_or_else(PoisonError::into_inner).log_tail();
        pair_error(format!(
            "cannot {what} {} ({}): {reason}; its log ends:\n{log}",
            NAMES[at], self.urls[at]
        ))
    }

    fn not_synced(&self, replica: usize, primary: usize, last: &str) -> RealError {
        self.failed(
            replica,
            &format!(
                "sync with its primary {} through the proxy at {}",
                NAMES[primary], self.via_proxy[primary]
            ),
            format!("not streaming within {} s (last: {last})", SYNC_TIMEOUT.as_secs()),
        )
    }

    /// A new value for the replication probe: each wait writes its own, so
    /// a replica that kept an earlier one is not taken for streaming.
    fn next_probe(&self) -> String {
        format!("probe-{}", self.probes.fetch_add(1, Ordering::SeqCst))
    }

    /// Waits until `replica` streams `primary`'s writes, on this thread.
    fn wait_synced_blocking(&self, replica: usize, primary: usize) -> Result<(), RealError> {
        let probe = self.next_probe();
        let deadline = std::time::Instant::now() + SYNC_TIMEOUT;
        loop {
            let last = match streaming(&self.urls[primary], &self.urls[replica], &probe) {
                Ok(None) => return Ok(()),
                Ok(Some(why_not)) => why_not,
                Err(reason) => reason,
            };
            if std::time::Instant::now() >= deadline {
                return Err(self.not_synced(replica, primary, &last));
            }
            std::thread::sleep(SYNC_POLL);
        }
    }

    /// Waits until `replica` streams `primary`'s writes, on tokio's time.
    async fn wait_synced(&self, replica: usize, primary: usize) -> Result<(), RealError> {
        let probe = self.next_probe();
        let deadline = Instant::now() + SYNC_TIMEOUT;
        loop {
            let (from, to, value) =
                (self.urls[primary].clone(), self.urls[replica].clone(), probe.clone());
            let last = match blocking(move || streaming(&from, &to, &value)).await {
                Ok(None) => return Ok(()),
                Ok(Some(why_not)) => why_not,
                Err(reason) => reason,
            };
            if Instant::now() >= deadline {
                return Err(self.not_synced(replica, primary, &last));
            }
            tokio::time::sleep(SYNC_POLL).await;
        }
    }
}

fn pair_error(reason: String) -> RealError {
    RealError::Server { what: "redis", reason }
}

/// One failover: the replication link is held from `start` (after the test
/// began) for `lag`, then the primary is killed and its replica promoted; at
/// `end` the old primary comes back as the new one's replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failover {
    /// When the replication link is held, from the test's start.
    pub start: Duration,
    /// How long clients use the primary while its replica hears nothing.
    pub lag: Duration,
    /// When the old primary is restarted, from the test's start.
    pub end: Duration,
}

/// Carries out `failovers` on `pair` from `start`, each recorded as a
/// nemesis start (once the replica is promoted) and stop (once the old
/// primary replicates the new one):
/// `{"fault":"failover","targets":["redis-0"],"promoted":"redis-1","lag_ms":…}`.
/// A server that cannot be killed, promoted, restarted or made a replica
/// ends the test with an error: the history would no longer say what
/// happened.
pub async fn run(
    pair: &RedisPair,
    failovers: &[Failover],
    recorder: &SharedRecorder,
    start: Instant,
) -> Result<(), RealError> {
    for failover in failovers {
        let old = pair.primary_index();
        let new = 1 - old;
        tokio::time::sleep_until(start + failover.start).await;
        pair.proxy.set_both(NAMES[old], NAMES[new], LinkState::Hold);
        tokio::time::sleep_until(start + failover.start + failover.lag).await;
        promote(pair, old, new).await?;
        let value = json!({
            "fault": "failover",
            "targets": [NAMES[old]],
            "promoted": NAMES[new],
            "lag_ms": failover.lag.as_millis() as u64,
        });
        record(recorder, Function::Start, value.clone());
        tokio::time::sleep_until(start + failover.end).await;
        rejoin(pair, old, new).await?;
        record(recorder, Function::Stop, value);
    }
    Ok(())
}

/// Kills the primary `old`, cuts its link, promotes `new` and points the
/// clients at it.
async fn promote(pair: &RedisPair, old: usize, new: usize) -> Result<(), RealError> {
    on_server(pair.servers[old].clone(), |server| {
        server.crash();
        Ok(())
    })
    .await?;
    pair.proxy.set_both(NAMES[old], NAMES[new], LinkState::Cut);
    let url = pair.urls[new].clone();
    let args = vec!["REPLICAOF".to_string(), "NO".to_string(), "ONE".to_string()];
    blocking(move || admin(&url, &args))
        .await
        .map_err(|reason| pair.failed(new, "promote", reason))?;
    // Only now: the replica refuses writes (`READONLY`) until promoted.
    pair.primary.set(pair.urls[new].clone());
    pair.primary_at.store(new, Ordering::SeqCst);
    Ok(())
}

/// Restarts the old primary `old`, heals its link and makes it the replica
/// of `new`, waiting until it has synced.
async fn rejoin(pair: &RedisPair, old: usize, new: usize) -> Result<(), RealError> {
    on_server(pair.servers[old].clone(), ManagedServer::restart).await?;
    let url = pair.urls[old].clone();
    blocking(move || configure(&url))
        .await
        .map_err(|reason| pair.failed(old, "configure", reason))?;
    pair.proxy.set_both(NAMES[old], NAMES[new], LinkState::Pass);
    let (url, args) = (pair.urls[old].clone(), pair.replicaof_args(new));
    blocking(move || admin(&url, &args)).await.map_err(|reason| {
        pair.failed(old, &format!("make the replica of {}", NAMES[new]), reason)
    })?;
    pair.wait_synced(old, new).await
}

fn record(recorder: &SharedRecorder, f: Function, value: serde_json::Value) {
    recorder.lock().expect("the recorder is never poisoned").record_nemesis(f, value);
}

/// Does `action` to a server, off the runtime's thread.
async fn on_server(
    server: SharedServer,
    action: impl FnOnce(&mut ManagedServer) -> Result<(), RealError> + Send + 'static,
) -> Result<(), RealError> {
    let done = tokio::task::spawn_blocking(move || {
        action(&mut server.lock().unwrap_or_else(PoisonError::into_inner))
    })
    .await;
    done.unwrap_or_else(|error| Err(pair_error(format!("the failover's task failed: {error}"))))
}

/// Runs `work` on tokio's blocking pool.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|error| Err(format!("the failover's task failed: {error}")))
}

/// One admin command (`REPLICAOF`, `INFO`, `CONFIG SET`) on its own short
/// connection, bounded by [`ADMIN_TIMEOUT`]. Blocks.
fn admin(url: &str, args: &[String]) -> Result<Value, String> {
    let client = redis::Client::open(url).map_err(|error| error.to_string())?;
    let mut connection =
        client.get_connection_with_timeout(ADMIN_TIMEOUT).map_err(|error| error.to_string())?;
    connection
        .set_read_timeout(Some(ADMIN_TIMEOUT))
        .and_then(|()| connection.set_write_timeout(Some(ADMIN_TIMEOUT)))
        .map_err(|error| error.to_string())?;
    let mut command = redis::cmd(&args[0]);
    for arg in &args[1..] {
        command.arg(arg);
    }
    command.query(&mut connection).map_err(|error| format!("{}: {error}", args.join(" ")))
}

/// Redis 7 waits 5 s (`repl-diskless-sync-delay`) before a full sync, for
/// more replicas to join it: with one replica that is only a 5 s outage of
/// replication after every rejoin. Set on every (re)start, since a restart
/// forgets it.
fn configure(url: &str) -> Result<(), String> {
    let args = ["CONFIG", "SET", "repl-diskless-sync-delay", "0"].map(String::from);
    admin(url, &args).map(|_| ())
}

/// `None` once `replica` has its link to `primary` up and has received the
/// write of `probe` (written here, again each time), else why not yet.
///
/// The link's status is not enough: after a diskless full sync, Redis 7
/// streams writes only once the replica acknowledges the snapshot, and an
/// acknowledgement that arrives before the primary has noted the snapshot
/// sent is ignored; the next comes a second later. A hold in that second
/// would leave the replica without anything written since the sync, a
/// bigger loss than the failover means to show.
fn streaming(primary: &str, replica: &str, probe: &str) -> Result<Option<String>, String> {
    let status = link_status(replica)?;
    if status != "up" {
        return Ok(Some(format!("master_link_status:{status}")));
    }
    admin(primary, &["SET", PROBE_KEY, probe].map(String::from))?;
    let received = match admin(replica, &["GET", PROBE_KEY].map(String::from))? {
        Value::BulkString(bytes) => bytes == probe.as_bytes(),
        _ => false,
    };
    Ok((!received).then(|| "the link is up, but no write has arrived yet".to_string()))
}

/// The replica's `master_link_status` (`up`, `down`), from `INFO replication`.
fn link_status(url: &str) -> Result<String, String> {
    let args = ["INFO", "replication"].map(String::from);
    let info = match admin(url, &args)? {
        Value::BulkString(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Value::VerbatimString { text, .. } => text,
        other => return Err(format!("INFO answered {other:?}")),
    };
    let status = info.lines().find_map(|line| line.trim().strip_prefix("master_link_status:"));
    Ok(status.unwrap_or("none (not a replica)").to_string())
}
