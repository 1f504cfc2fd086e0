//! The ZooKeeper lock against a real ensemble: Curator's recipe
//! (`lockcheck_workloads::zookeeper_lock`) over `zookeeper-client`, a
//! ZooKeeper client in pure Rust. One session per logical client, its
//! timeout the run's TTL; the library keeps it alive with its own
//! heartbeats and reports its state (connected, disconnected, expired),
//! which the recipe reads as Curator's connection states.
//!
//! The heartbeats come from the library, not from the recipe, so a pause
//! of the client must stop them as a GC pause stops a JVM's: the client's
//! links to the ensemble go through the fault-injecting proxy, and a stall
//! holds them ([`LinkFreezer`]) until it ends.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::{timeout, timeout_at, Instant};
use zookeeper_client::{Acls, Client, CreateMode, Error, SessionState};

use super::{ClientConfig, RealError};
use crate::proxy::LinkFreezer;
use lockcheck_workloads::zookeeper_lock::{
    parent_path, Connection, Unanswered, Variant, Woken, ZooKeeperLock, ZooKeeperSession,
};
use lockcheck_workloads::{Grant, LockClient, Outcome, Stall, StallPoint};

/// How long setting up a session and the locks' parents may take.
const SETUP_TIMEOUT: Duration = Duration::from_secs(30);

/// One logical client of the ZooKeeper lock: the recipe's state and its
/// session.
pub struct ZooKeeperClient {
    lock: ZooKeeperLock,
    session: Session,
}

/// One ZooKeeper session: the recipe's transport.
struct Session {
    servers: String,
    session_timeout: Duration,
    deadline: Duration,
    /// `None` once a reset gave the session up and no new one could be
    /// opened yet: every call is refused unsent until one is.
    client: Option<Client>,
    /// When the current operation must be over.
    until: Instant,
    /// The client's clock starts here.
    started: Instant,
    /// Where a pause strikes the client in flight and between commands.
    stall: Stall,
}

impl std::fmt::Debug for ZooKeeperClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZooKeeperClient")
            .field("servers", &self.session.servers)
            .field("state", &self.session.client.as_ref().map(Client::state))
            .field("lock", &self.lock)
            .finish()
    }
}

/// The connect string of `urls` (`zk://127.0.0.1:2181`): `host:port,…`.
fn connect_string(urls: &[String]) -> String {
    let hosts: Vec<&str> =
        urls.iter().map(|url| url.strip_prefix("zk://").unwrap_or(url)).collect();
    hosts.join(",")
}

fn connect_error(servers: &str, reason: impl ToString) -> RealError {
    RealError::Connect { what: "zookeeper", url: servers.to_string(), reason: reason.to_string() }
}

/// A new session of `session_timeout` on `servers`.
async fn open(servers: &str, session_timeout: Duration) -> Result<Client, RealError> {
    let connecting = Client::connector().with_session_timeout(session_timeout).connect(servers);
    match timeout(SETUP_TIMEOUT, connecting).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(error)) => Err(connect_error(servers, error)),
        Err(_) => Err(connect_error(servers, format!("no session within {SETUP_TIMEOUT:?}"))),
    }
}

/// The ceiling of `bench --only real`: `clients` sessions on `urls`, each
/// creating an ephemeral sequential znode under `parent` (which exists) and
/// deleting it, back to back for `run_for`: the writes a second, creates
/// and deletes counted alike, with none of the lock's logic.
pub async fn plain_writes_per_s(
    urls: &[String],
    parent: &str,
    clients: u32,
    run_for: Duration,
) -> Result<f64, RealError> {
    let servers = connect_string(urls);
    let mut sessions = Vec::with_capacity(clients as usize);
    for _ in 0..clients {
        sessions.push(open(&servers, Duration::from_secs(10)).await?);
    }
    let prefix = format!("{parent}/plain-");
    let options = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
    let until = Instant::now() + run_for;
    let started = Instant::now();
    let writes = sessions.iter().map(|client| {
        let (prefix, options) = (&prefix, &options);
        async move {
            let mut writes = 0u64;
            while Instant::now() < until {
                let Ok((_, sequence)) = client.create(prefix, b"", options).await else { break };
                writes += 1;
                if client.delete(&format!("{prefix}{sequence}"), None).await.is_err() {
                    break;
                }
                writes += 1;
            }
            writes
        }
    });
    let writes: u64 = futures_util::future::join_all(writes).await.into_iter().sum();
    Ok(writes as f64 / started.elapsed().as_secs_f64())
}

impl ZooKeeperClient {
    /// Creates the parents of `locks` (`/lockcheck/NAME`), persistent, on
    /// the ensemble at `urls`.
    pub async fn prepare(urls: &[String], locks: &[String]) -> Result<(), RealError> {
        let servers = connect_string(urls);
        let client = open(&servers, Duration::from_secs(10)).await?;
        let options = CreateMode::Persistent.with_acls(Acls::anyone_all());
        for lock in locks {
            let made = timeout(SETUP_TIMEOUT, client.mkdir(&parent_path(lock), &options)).await;
            match made {
                Ok(Ok(())) | Ok(Err(Error::NodeExists)) => {}
                Ok(Err(error)) => return Err(connect_error(&servers, format!("mkdir: {error}"))),
                Err(_) => return Err(connect_error(&servers, "mkdir: no answer")),
            }
        }
        Ok(())
    }

    /// Opens a session of `ttl_ms` on the ensemble at `urls`. Grants carry
    /// the lock znode's czxid as their token when `fencing`; a waiter waits
    /// in line up to half the operation deadline.
    pub async fn connect(
        urls: &[String],
        config: &ClientConfig,
        variant: Variant,
        fencing: bool,
        ttl_ms: u64,
    ) -> Result<ZooKeeperClient, RealError> {
        let servers = connect_string(urls);
        let session_timeout = Duration::from_millis(ttl_ms);
        let client = open(&servers, session_timeout).await?;
        let now = Instant::now();
        let session = Session {
            servers,
            session_timeout,
            deadline: config.deadline,
            client: Some(client),
            until: now,
            started: now,
            stall: Stall::default(),
        };
        let wait_ms = (config.deadline.as_millis() as u64 / 2).max(1);
        Ok(ZooKeeperClient { lock: ZooKeeperLock::new(fencing, variant, wait_ms), session })
    }

    /// Stalls at `stall`'s points in flight and between commands, and
    /// holds the client's links on `proxy` (from `node` to each of `to`)
    /// while it stalls, so that the library's heartbeats stop too.
    pub fn stalling_at(mut self, stall: Stall, links: Option<LinkFreezer>) -> ZooKeeperClient {
        if let Some(links) = links {
            stall.freezing(Arc::new(links));
        }
        self.session.stall = stall;
        self
    }
}

/// What a call that failed comes to: certainly not applied when the
/// library never sent it (no connection), unknown otherwise.
fn unanswered<T>(error: Error) -> Result<T, Unanswered> {
    match error {
        Error::ConnectionLoss => Err(Unanswered::Unknown("conn-lost")),
        Error::SessionExpired | Error::ClientClosed => Err(Unanswered::NotSent),
        _ => Err(Unanswered::Unknown("error")),
    }
}

impl Session {
    /// A pause asked for in flight strikes, before the recipe reads the
    /// reply; the operation's deadline moves on by as much.
    async fn checked<T>(&mut self, call: Result<T, Unanswered>) -> Result<T, Unanswered> {
        self.until += self.stall.strike(StallPoint::InFlight).await;
        call
    }

    /// The session, when it is connected: nothing is sent otherwise.
    fn sendable(&self) -> Result<Client, Unanswered> {
        match (self.connection(), &self.client) {
            (Connection::Connected, Some(client)) => Ok(client.clone()),
            _ => Err(Unanswered::NotSent),
        }
    }

    /// The client's clock reading `ms`, as an instant.
    fn instant(&self, ms: u64) -> Instant {
        self.started + Duration::from_millis(ms)
    }
}

impl ZooKeeperSession for Session {
    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    fn begin(&mut self) {
        self.until = Instant::now() + self.deadline;
    }

    fn connection(&self) -> Connection {
        let Some(client) = &self.client else { return Connection::Lost };
        match client.state() {
            SessionState::SyncConnected | SessionState::ConnectedReadOnly => Connection::Connected,
            SessionState::Disconnected => Connection::Suspended,
            SessionState::Expired | SessionState::Closed | SessionState::AuthFailed => {
                Connection::Lost
            }
        }
    }

    async fn create_sequential(&mut self, parent: &str) -> Result<String, Unanswered> {
        let client = self.sendable()?;
        let options = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
        let prefix = format!("{parent}/lock-");
        let created = match timeout_at(self.until, client.create(&prefix, b"", &options)).await {
            // The path from the sequence; the Stat is not read (ZOOKEEPER-4026).
            Ok(Ok((_, sequence))) => Ok(format!("{prefix}{sequence}")),
            Ok(Err(error)) => unanswered(error),
            Err(_) => Err(Unanswered::Unknown("timeout")),
        };
        self.checked(created).await
    }

    async fn children(&mut self, parent: &str) -> Result<Vec<String>, Unanswered> {
        let client = self.sendable()?;
        let listed = match timeout_at(self.until, client.list_children(parent)).await {
            Ok(Ok(children)) => Ok(children),
            Ok(Err(error)) => unanswered(error),
            Err(_) => Err(Unanswered::Unknown("timeout")),
        };
        self.checked(listed).await
    }

    async fn czxid(&mut self, path: &str) -> Result<Option<u64>, Unanswered> {
        let client = self.sendable()?;
        let read = match timeout_at(self.until, client.check_stat(path)).await {
            Ok(Ok(stat)) => Ok(stat.map(|stat| u64::try_from(stat.czxid).unwrap_or(0))),
            Ok(Err(error)) => unanswered(error),
            Err(_) => Err(Unanswered::Unknown("timeout")),
        };
        self.checked(read).await
    }

    async fn wait_for_delete(&mut self, path: &str, until_ms: u64) -> Result<Woken, Unanswered> {
        let client = self.sendable()?;
        let until = self.instant(until_ms).min(self.until);
        let watched = match timeout_at(until, client.check_and_watch_stat(path)).await {
            Ok(Ok((None, _))) => return Ok(Woken::Already),
            Ok(Ok((Some(_), watcher))) => watcher,
            Ok(Err(error)) => return unanswered(error),
            Err(_) => return Ok(Woken::TimedOut),
        };
        match timeout_at(until, watched.changed()).await {
            Ok(_) => Ok(Woken::Watch),
            Err(_) => Ok(Woken::TimedOut),
        }
    }

    async fn wait_for_children(
        &mut self,
        parent: &str,
        until_ms: u64,
    ) -> Result<Woken, Unanswered> {
        let client = self.sendable()?;
        let until = self.instant(until_ms).min(self.until);
        let watched = match timeout_at(until, client.get_and_watch_children(parent)).await {
            Ok(Ok((_, _, watcher))) => watcher,
            Ok(Err(error)) => return unanswered(error),
            Err(_) => return Ok(Woken::TimedOut),
        };
        match timeout_at(until, watched.changed()).await {
            Ok(_) => Ok(Woken::Watch),
            Err(_) => Ok(Woken::TimedOut),
        }
    }

    async fn delete(&mut self, path: &str) -> Result<bool, Unanswered> {
        let client = self.sendable()?;
        let deleted = match timeout_at(self.until, client.delete(path, None)).await {
            Ok(Ok(())) => Ok(true),
            Ok(Err(Error::NoNode)) => Ok(false),
            Ok(Err(error)) => unanswered(error),
            Err(_) => Err(Unanswered::Unknown("timeout")),
        };
        self.checked(deleted).await
    }

    async fn between_commands(&mut self) {
        self.until += self.stall.strike(StallPoint::BetweenCommands).await;
    }
}

impl ZooKeeperClient {
    /// Gives the current session up and opens a new one. Dropping the
    /// last handle of a session closes it, which deletes its znodes if the
    /// ensemble hears of it; else they go when it expires. The old session
    /// is never kept, even when no new one opens now: kept alive by the
    /// library's heartbeats, a znode it left in line (an acquire whose
    /// outcome was unknown) would hold the lock for nobody for as long as
    /// the client runs. The next acquire opens one then.
    async fn reopen(&mut self) {
        let session = &mut self.session;
        drop(session.client.take());
        let opened =
            timeout(session.deadline, open(&session.servers, session.session_timeout)).await;
        session.client = opened.ok().and_then(Result::ok);
    }
}

impl LockClient for ZooKeeperClient {
    /// As Curator does once a session expired, a new one is opened first.
    async fn acquire(&mut self, key: &str, _ttl_ms: u64) -> Outcome<Grant> {
        if self.session.connection() == Connection::Lost {
            self.reopen().await;
        }
        self.lock.acquire(&mut self.session, key).await
    }

    async fn release(&mut self, key: &str, _grant: &Grant) -> Outcome<()> {
        self.lock.release(&mut self.session, key).await
    }

    async fn renew(&mut self, key: &str, _grant: &Grant, _ttl_ms: u64) -> Outcome<()> {
        self.lock.renew(&self.session, key)
    }

    /// A new session: the locks held are forgotten, the old session closed.
    async fn reset(&mut self) {
        self.lock.reset();
        self.reopen().await;
    }

    fn take_wake_ups(&mut self) -> Option<u64> {
        Some(self.lock.take_woken())
    }
}
