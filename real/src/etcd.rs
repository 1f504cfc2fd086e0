//! etcd's lock against a real etcd (Debian's 3.4 serves everything used
//! here): the recipe of `lockcheck_workloads::etcd_lock`, which the
//! simulator runs too, over a gRPC channel, with the lock key bound to the
//! lease and the key's create revision as the fencing token.
//!
//! * The lock is tried, never waited for: the transport reads the lock's
//!   prefix first (linearizably), and a busy lock is refused at once; a
//!   free one is taken as etcd's `Mutex.TryLock` takes it, the lease's key
//!   put under the prefix in one transaction that also reads the prefix's
//!   first-created key. A holder that came in between the read and the
//!   transaction makes it busy too, at once. (The Lock API's call, which
//!   this replaced, waits in line behind that holder: the acquire ran out
//!   its deadline, an `info`, and the key it left in line held the lock
//!   for nobody until its lease was revoked.) An unanswered transaction
//!   may have taken the lock: the outcome is `info`, and `reset` revokes
//!   the lease, which deletes the lock key.
//! * There is no background keepalive: a real holder's heartbeat stalls
//!   with it (a GC pause stops every thread), so the workload's renewals are
//!   the heartbeats.
//! * Every call of one operation shares the operation's deadline; a call
//!   that gets no answer gives up the channel, and the next opens a new one
//!   (perhaps to another member).
//! * A pause strikes in flight (after a call's reply has come, before the
//!   recipe reads it) and between the recipe's commands (a lease granted,
//!   its lock not yet taken); the stall is the client's own, so the
//!   operation's deadline moves on by as much.
//!
//! etcd's TTLs are whole seconds, and the server raises one below its
//! minimum (1.5 election timeouts' worth of heartbeats, rounded up: 2 s with
//! etcd's default timing, 1 s with `--heartbeat-interval 50
//! --election-timeout 500`). So a TTL in ms is rounded up to whole seconds,
//! and the TTL the server actually granted is kept ([`EtcdClient::granted_ttl_s`]):
//! a holder stall must outlast that one to expire a lease.

use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, LeaderKey, PutOptions,
    ResignOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse, WatchOptions,
};
use tokio::time::{timeout, timeout_at, Instant};

use super::{ClientConfig, RealError};
use lockcheck_workloads::etcd_lock::{
    Before, Bound, Check, EtcdLock, EtcdSession, Line, Read, Unanswered, Waiting,
};
use lockcheck_workloads::watch::Woken;
use lockcheck_workloads::{Grant, LockClient, Outcome, Stall, StallPoint};

/// How long `connect` may take to reach the cluster.
const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// The lock's prefix for lock `key`; its keys are `<name>/<lease in hex>`, as
/// the Lock API's are.
fn lock_name(key: &str) -> String {
    format!("lockcheck/{key}")
}

/// The election's name for lock `key` (its candidates' keys are
/// `<name>/<lease in hex>`, as etcd's election service puts them).
fn election_name(key: &str) -> String {
    format!("lockcheck-election/{key}")
}

/// The whole seconds of a TTL, rounded up, at least 1.
pub fn ttl_seconds(ttl_ms: u64) -> i64 {
    i64::try_from(ttl_ms.div_ceil(1000).max(1)).unwrap_or(i64::MAX)
}

/// One logical client of the etcd lock: the recipe's state, its channel to
/// the cluster, and its connection to the protected resources.
pub struct EtcdClient {
    lock: EtcdLock,
    channel: Channel,
}

/// One gRPC channel (one HTTP/2 connection) to the cluster: the etcd
/// recipe's transport.
struct Channel {
    endpoints: Vec<String>,
    deadline: Duration,
    /// `None` after a call that got no answer: the next use opens a new one.
    client: Option<Client>,
    /// When the current operation must be over.
    until: Instant,
    /// The client's clock starts here.
    started: Instant,
    granted_ttl_s: Option<i64>,
    /// Where a pause strikes the client in flight and between commands.
    stall: Stall,
}

impl std::fmt::Debug for EtcdClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdClient")
            .field("endpoints", &self.channel.endpoints)
            .field("connected", &self.channel.client.is_some())
            .field("lock", &self.lock)
            .field("granted_ttl_s", &self.channel.granted_ttl_s)
            .finish()
    }
}

fn connect_error(endpoints: &[String], reason: impl ToString) -> RealError {
    RealError::Connect { what: "etcd", url: endpoints.join(","), reason: reason.to_string() }
}

/// A client of the cluster. The channel connects on first use.
async fn open(endpoints: &[String], deadline: Duration) -> Result<Client, etcd_client::Error> {
    let options = ConnectOptions::new().with_connect_timeout(deadline).with_timeout(deadline);
    Client::connect(endpoints, Some(options)).await
}

/// Whether a gRPC error says the lease does not exist (expired or revoked).
fn lease_not_found(error: &etcd_client::Error) -> bool {
    matches!(error, etcd_client::Error::GRpcStatus(status)
        if status.message().contains("lease not found"))
}

impl EtcdClient {
    /// Opens a channel to the cluster at `endpoints` (`http://127.0.0.1:2379`)
    /// and checks that it answers.
    /// Grants carry the lock key's revision as their token when `fencing`.
    /// With `waits`, a client that finds the lock taken waits in line for
    /// half its deadline, watching the key before its own (`Mutex.Lock`);
    /// else it is refused at once (`Mutex.TryLock`).
    pub async fn connect(
        endpoints: &[String],
        config: &ClientConfig,
        fencing: bool,
        waits: bool,
    ) -> Result<EtcdClient, RealError> {
        let reached = timeout(SETUP_TIMEOUT, async {
            let mut client = open(endpoints, config.deadline).await?;
            client.status().await?;
            Ok::<_, etcd_client::Error>(client)
        })
        .await;
        let client = match reached {
            Ok(Ok(client)) => client,
            Ok(Err(error)) => return Err(connect_error(endpoints, error)),
            Err(_) => {
                return Err(connect_error(endpoints, format!("no answer within {SETUP_TIMEOUT:?}")))
            }
        };
        let now = Instant::now();
        let channel = Channel {
            endpoints: endpoints.to_vec(),
            deadline: config.deadline,
            client: Some(client),
            until: now,
            started: now,
            granted_ttl_s: None,
            stall: Stall::default(),
        };
        let waiting = match waits {
            true => {
                Waiting::Predecessor { wait_ms: (config.deadline.as_millis() as u64 / 2).max(1) }
            }
            false => Waiting::TryOnce,
        };
        Ok(EtcdClient { lock: EtcdLock::waiting(fencing, waiting), channel })
    }

    /// A candidate in etcd's election instead: an acquire is a `Campaign`
    /// that waits in line for at most half the client's deadline (the
    /// server takes the key back when the call is given up, and the recipe
    /// revokes its lease), a release a `Resign`.
    pub fn campaigning(mut self, config: &ClientConfig, fencing: bool) -> EtcdClient {
        let wait_ms = (config.deadline.as_millis() as u64 / 2).max(1);
        self.lock = EtcdLock::campaigning(fencing, wait_ms);
        self
    }

    /// A holder whose keepalive goes unanswered checks as `check` says.
    pub fn checking(mut self, check: Check) -> EtcdClient {
        self.lock = self.lock.checking(check);
        self
    }

    /// Stalls at `stall`'s points in flight and between commands, when a
    /// pause asks for them there.
    pub fn stalling_at(mut self, stall: Stall) -> EtcdClient {
        self.channel.stall = stall;
        self
    }

    /// The TTL, in seconds, that the server granted the last lease: the
    /// requested one rounded up (`ttl_seconds`), or the server's minimum.
    pub fn granted_ttl_s(&self) -> Option<i64> {
        self.channel.granted_ttl_s
    }
}

/// The ceiling of `bench --only real`: `clients` clients of the same
/// library on `endpoints`, each putting a plain key of its own and
/// deleting it, back to back for `run_for`: the writes a second, puts and
/// deletes counted alike, with none of the lock's logic (no lease, no
/// transaction).
pub async fn plain_writes_per_s(
    endpoints: &[String],
    clients: u32,
    run_for: Duration,
) -> Result<f64, RealError> {
    let mut connected = Vec::with_capacity(clients as usize);
    for _ in 0..clients {
        let client = open(endpoints, SETUP_TIMEOUT)
            .await
            .map_err(|error| connect_error(endpoints, error))?;
        connected.push(client);
    }
    let until = Instant::now() + run_for;
    let started = Instant::now();
    let writes = connected.into_iter().enumerate().map(|(at, mut client)| async move {
        let key = format!("lockcheck-plain/{at}");
        let mut writes = 0u64;
        while Instant::now() < until {
            if client.put(key.clone(), "", None).await.is_err() {
                break;
            }
            writes += 1;
            if client.delete(key.clone(), None).await.is_err() {
                break;
            }
            writes += 1;
        }
        writes
    });
    let writes: u64 = futures_util::future::join_all(writes).await.into_iter().sum();
    Ok(writes as f64 / started.elapsed().as_secs_f64())
}

/// What a call that got no answer in time, or whose channel broke, comes to.
fn unanswered<T>(timed_out: bool) -> Result<T, Unanswered> {
    Err(Unanswered::Unknown(if timed_out { "timeout" } else { "conn-lost" }))
}

impl Channel {
    /// The channel, opened anew if the last one was given up.
    async fn client(&mut self) -> Result<Client, Unanswered> {
        if self.client.is_none() {
            self.client = open(&self.endpoints, self.deadline).await.ok();
        }
        self.client.clone().ok_or(Unanswered::NotSent)
    }

    /// Gives up the channel after `call` failed; else a pause asked for in
    /// flight strikes, before the recipe reads the reply.
    async fn checked<T>(&mut self, call: Result<T, Unanswered>) -> Result<T, Unanswered> {
        if call.is_err() {
            self.client = None;
        }
        // The stall is the client's own: the operation's deadline moves on
        // by as much.
        self.until += self.stall.strike(StallPoint::InFlight).await;
        call
    }

    /// Tries the lock once, as etcd's own `Mutex.TryLock` does: one
    /// transaction puts this lease's key under the lock's prefix (unless it
    /// is there) and reads it back with the prefix's first-created key.
    /// The lease holds the lock if its key is that first one: the key's
    /// create revision is the token. Else another came first: the key
    /// waits in the queue ([`Bound::Queued`]) until the recipe revokes the
    /// lease, which deletes it. Nothing here
    /// waits for a holder, as the Lock API's call would.
    async fn take(&mut self, name: &str, lease: u64) -> Result<Bound, Unanswered> {
        let mut client = self.client().await?;
        let lease_id = i64::try_from(lease).map_err(|_| Unanswered::NotSent)?;
        let prefix = format!("{}/", lock_name(name));
        let key = format!("{prefix}{lease:x}");
        let first_created = || {
            let options = GetOptions::new()
                .with_prefix()
                .with_sort(SortTarget::Create, SortOrder::Ascend)
                .with_limit(1);
            TxnOp::get(prefix.clone(), Some(options))
        };
        let put = PutOptions::new().with_lease(lease_id);
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([
                TxnOp::put(key.clone(), "", Some(put)),
                TxnOp::get(key.clone(), None),
                first_created(),
            ])
            .or_else([TxnOp::get(key.clone(), None), first_created()]);
        let response = match timeout_at(self.until, client.txn(txn)).await {
            Ok(Ok(response)) => response,
            Ok(Err(_)) => return unanswered(false),
            Err(_) => return unanswered(true),
        };
        let created = |response: &TxnOpResponse| match response {
            TxnOpResponse::Get(get) => get.kvs().first().map(|kv| kv.create_revision()),
            _ => None,
        };
        let responses = response.op_responses();
        let (own, first) = match responses.as_slice() {
            [.., own, first] => (created(own), created(first)),
            _ => (None, None),
        };
        // Applied, but with the token unknown: the client gives up.
        let Some(own) = own.and_then(|revision| u64::try_from(revision).ok()) else {
            return Err(Unanswered::Unknown("fence-lost"));
        };
        match first.and_then(|revision| u64::try_from(revision).ok()) {
            Some(first) if first == own => Ok(Bound::Holds(own)),
            Some(_) => Ok(Bound::Queued(own)),
            None => Err(Unanswered::Unknown("fence-lost")),
        }
    }

    /// Reads, in one transaction (one revision), whether the key created at
    /// `own` is still under the lock's prefix and which key was created
    /// last before it (`Mutex.Lock`'s `waitDeletes` reads the same).
    async fn read_line(&mut self, name: &str, own: u64) -> Result<Line, Unanswered> {
        let mut client = self.client().await?;
        let own = i64::try_from(own).map_err(|_| Unanswered::NotSent)?;
        let prefix = format!("{}/", lock_name(name));
        let ours = GetOptions::new()
            .with_prefix()
            .with_min_create_revision(own)
            .with_max_create_revision(own)
            .with_count_only();
        let before = GetOptions::new()
            .with_prefix()
            .with_max_create_revision(own - 1)
            .with_sort(SortTarget::Create, SortOrder::Descend)
            .with_limit(1);
        let txn = Txn::new()
            .and_then([TxnOp::get(prefix.clone(), Some(ours)), TxnOp::get(prefix, Some(before))]);
        let response = match timeout_at(self.until, client.txn(txn)).await {
            Ok(Ok(response)) => response,
            Ok(Err(_)) => return unanswered(false),
            Err(_) => return unanswered(true),
        };
        let seen = response.header().map_or(0, |header| header.revision());
        let seen = u64::try_from(seen).unwrap_or(0);
        let responses = response.op_responses();
        let (TxnOpResponse::Get(ours), TxnOpResponse::Get(before)) = (&responses[0], &responses[1])
        else {
            return Err(Unanswered::Unknown("bad-reply"));
        };
        if ours.count() == 0 {
            return Ok(Line::Gone);
        }
        Ok(match before.kvs().first() {
            None => Line::First,
            Some(kv) => Line::After(Before {
                key: String::from_utf8_lossy(kv.key()).into_owned(),
                created: u64::try_from(kv.create_revision()).unwrap_or(0),
                seen,
            }),
        })
    }

    /// Watches `before`'s key from the revision after the read that found
    /// it, until a deletion comes or `until` passes.
    async fn watch_delete(&mut self, before: &Before, until: Instant) -> Result<Woken, Unanswered> {
        let mut client = self.client().await?;
        let start = i64::try_from(before.seen + 1).map_err(|_| Unanswered::NotSent)?;
        let options = WatchOptions::new().with_start_revision(start);
        let watched = async {
            let mut stream = client.watch(before.key.clone(), Some(options)).await?;
            while let Some(response) = stream.message().await? {
                // Cancelled (its revision compacted away): the line is read
                // again.
                if response.canceled() {
                    return Ok(Woken::Already);
                }
                if response.events().iter().any(|event| event.event_type() == EventType::Delete) {
                    return Ok(Woken::Watch);
                }
            }
            Err(etcd_client::Error::WatchError("the watch ended".into()))
        };
        match timeout_at(until.min(self.until), watched).await {
            Ok(Ok(woken)) => Ok(woken),
            Ok(Err(_)) => unanswered(false),
            // The wait's own end, or the operation's.
            Err(_) if until <= self.until => Ok(Woken::TimedOut),
            Err(_) => unanswered(true),
        }
    }
}

impl EtcdSession for Channel {
    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    fn begin(&mut self) {
        self.until = Instant::now() + self.deadline;
    }

    async fn is_taken(&mut self, name: &str) -> Result<bool, Unanswered> {
        let mut client = self.client().await?;
        let prefix = format!("{}/", lock_name(name));
        let options = GetOptions::new().with_prefix().with_count_only();
        let read = match timeout_at(self.until, client.get(prefix, Some(options))).await {
            Ok(Ok(response)) => Ok(response.count() > 0),
            Ok(Err(_)) => unanswered(false),
            Err(_) => unanswered(true),
        };
        self.checked(read).await
    }

    async fn grant(&mut self, ttl_ms: u64) -> Result<(u64, u64), Unanswered> {
        let mut client = self.client().await?;
        let granted = match timeout_at(self.until, client.lease_grant(ttl_seconds(ttl_ms), None))
            .await
        {
            Ok(Ok(lease)) => {
                self.granted_ttl_s = Some(lease.ttl());
                let ttl_ms = u64::try_from(lease.ttl()).unwrap_or(0) * 1000;
                u64::try_from(lease.id()).map(|id| (id, ttl_ms)).map_err(|_| Unanswered::NotSent)
            }
            Ok(Err(_)) => unanswered(false),
            Err(_) => unanswered(true),
        };
        self.checked(granted).await
    }

    async fn lock(&mut self, name: &str, lease: u64) -> Result<Bound, Unanswered> {
        let taken = self.take(name, lease).await;
        self.checked(taken).await
    }

    async fn holds(&mut self, name: &str, lease: u64, read: Read) -> Result<bool, Unanswered> {
        let mut client = self.client().await?;
        let key = format!("{}/{lease:x}", lock_name(name));
        let mut options = GetOptions::new().with_count_only();
        if read == Read::Serializable {
            options = options.with_serializable();
        }
        let answer = match timeout_at(self.until, client.get(key, Some(options))).await {
            Ok(Ok(response)) => Ok(response.count() > 0),
            Ok(Err(_)) => unanswered(false),
            Err(_) => unanswered(true),
        };
        self.checked(answer).await
    }

    /// The real lock call puts the key in line either way.
    async fn join(&mut self, name: &str, lease: u64) -> Result<Bound, Unanswered> {
        self.lock(name, lease).await
    }

    async fn line(&mut self, name: &str, own: u64) -> Result<Line, Unanswered> {
        let line = self.read_line(name, own).await;
        self.checked(line).await
    }

    async fn wait_for_delete(
        &mut self,
        before: &Before,
        until_ms: u64,
    ) -> Result<Woken, Unanswered> {
        let until = self.started + Duration::from_millis(until_ms);
        let woken = self.watch_delete(before, until).await;
        self.checked(woken).await
    }

    /// One `Campaign` call, given up when the wait runs out (etcd's server
    /// then resigns the key it put, and the recipe revokes the lease).
    async fn campaign(
        &mut self,
        name: &str,
        lease: u64,
        until_ms: u64,
    ) -> Result<Bound, Unanswered> {
        let client = self.client().await?;
        let mut election = client.election_client();
        let lease = i64::try_from(lease).map_err(|_| Unanswered::NotSent)?;
        let wait_until = self.started + Duration::from_millis(until_ms);
        let call = election.campaign(election_name(name), "", lease);
        let campaigned = match timeout_at(wait_until.min(self.until), call).await {
            Ok(Ok(response)) => match response.leader() {
                Some(leader) => u64::try_from(leader.rev())
                    .map(Bound::Holds)
                    .map_err(|_| Unanswered::Unknown("bad-reply")),
                None => Err(Unanswered::Unknown("bad-reply")),
            },
            Ok(Err(error)) if lease_not_found(&error) => Ok(Bound::Refused),
            Ok(Err(_)) => unanswered(false),
            // The wait's own end: still in line, as far as we know.
            Err(_) if wait_until <= self.until => Ok(Bound::Queued(0)),
            Err(_) => unanswered(true),
        };
        self.checked(campaigned).await
    }

    async fn resign(&mut self, name: &str, lease: u64, own: u64) -> Result<bool, Unanswered> {
        let client = self.client().await?;
        let mut election = client.election_client();
        let name = election_name(name);
        let leader = LeaderKey::new()
            .with_key(format!("{name}/{lease:x}"))
            .with_name(name)
            .with_rev(i64::try_from(own).map_err(|_| Unanswered::NotSent)?)
            .with_lease(i64::try_from(lease).map_err(|_| Unanswered::NotSent)?);
        let options = ResignOptions::new().with_leader(leader);
        let resigned = match timeout_at(self.until, election.resign(Some(options))).await {
            Ok(Ok(_)) => Ok(true),
            // The key was gone (etcd's `election: not leader`).
            Ok(Err(etcd_client::Error::GRpcStatus(status)))
                if status.message().contains("not leader") =>
            {
                Ok(false)
            }
            Ok(Err(_)) => unanswered(false),
            Err(_) => unanswered(true),
        };
        self.checked(resigned).await
    }

    async fn keep_alive(&mut self, lease: u64) -> Result<bool, Unanswered> {
        let mut client = self.client().await?;
        let lease = i64::try_from(lease).map_err(|_| Unanswered::NotSent)?;
        let keepalive = async {
            let (mut keeper, mut stream) = client.lease_keep_alive(lease).await?;
            keeper.keep_alive().await?;
            stream.message().await
        };
        let answered = match timeout_at(self.until, keepalive).await {
            // TTL 0: the lease had expired, and its lock key with it.
            Ok(Ok(Some(response))) => Ok(response.ttl() > 0),
            Ok(Ok(None)) | Ok(Err(_)) => unanswered(false),
            Err(_) => unanswered(true),
        };
        self.checked(answered).await
    }

    async fn revoke(&mut self, lease: u64) -> Result<bool, Unanswered> {
        let mut client = self.client().await?;
        let lease = i64::try_from(lease).map_err(|_| Unanswered::NotSent)?;
        let revoked = match timeout_at(self.until, client.lease_revoke(lease)).await {
            Ok(Ok(_)) => Ok(true),
            Ok(Err(error)) if lease_not_found(&error) => Ok(false),
            Ok(Err(_)) => unanswered(false),
            Err(_) => unanswered(true),
        };
        self.checked(revoked).await
    }

    async fn between_commands(&mut self) {
        self.until += self.stall.strike(StallPoint::BetweenCommands).await;
    }
}

impl LockClient for EtcdClient {
    async fn acquire(&mut self, key: &str, ttl_ms: u64) -> Outcome<Grant> {
        self.lock.acquire(&mut self.channel, key, ttl_ms).await
    }

    async fn release(&mut self, key: &str, _grant: &Grant) -> Outcome<()> {
        self.lock.release(&mut self.channel, key).await
    }

    async fn renew(&mut self, key: &str, _grant: &Grant, _ttl_ms: u64) -> Outcome<()> {
        self.lock.renew(&mut self.channel, key).await
    }

    /// A waiter's wake-ups; a client refused at once polls instead.
    fn take_wake_ups(&mut self) -> Option<u64> {
        self.lock.take_woken()
    }

    /// A new session: forgets the locks held, revokes the leases whose
    /// outcome was unknown (best effort, within the deadline), so that
    /// their lock keys do not linger a TTL, and opens a new channel.
    async fn reset(&mut self) {
        let abandoned = self.lock.reset();
        self.channel.client = None;
        self.channel.begin();
        for lease in abandoned {
            if self.channel.revoke(lease).await.is_err() {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_round_up_to_whole_seconds() {
        assert_eq!(ttl_seconds(0), 1);
        assert_eq!(ttl_seconds(1), 1);
        assert_eq!(ttl_seconds(1000), 1);
        assert_eq!(ttl_seconds(1001), 2);
        assert_eq!(ttl_seconds(2500), 3);
    }
}
