//! The etcd lock of docs/guide.md#etcd against a real etcd (Debian's 3.4 serves
//! everything used here): a lease per grant and the v3 Lock API, with the
//! lock key's create revision as the fencing token.
//!
//! * acquire: a linearizable read of the lock's prefix, and `busy` if any
//!   key is there (a holder, or a waiter the holder comes before); else
//!   grant a lease and `Lock(name, lease)`. The Lock call blocks while
//!   another holds the lock, so it is bounded by the deadline; past it the
//!   server may have granted the lock just as the client gave up, so the
//!   outcome is `info`, and `reset` revokes the lease (which deletes the
//!   lock key). Then a `Get` of the lock key reads its create revision.
//! * renew: one keepalive of the lease. There is no background keepalive:
//!   a real holder's heartbeat stalls with it (a GC pause stops every
//!   thread), so the workload's renewals are the heartbeats. A keepalive
//!   that gets no answer is judged as clientv3 judges its session: the
//!   session lives on until its own deadline (the granted TTL after the
//!   last keepalive that was answered, counted from when it was sent), so
//!   the renewal succeeds until then, and fails (`session-expired`) after.
//!   A holder cut off from the cluster thus believes in its lock up to a
//!   TTL after its last heartbeat, while the server expires the lease on
//!   its own clock: the truth table's "holder cut off from the cluster".
//! * release: `Unlock(key)`, then revoke the lease.
//!
//! etcd's TTLs are whole seconds, and the server raises one below its
//! minimum (1.5 election timeouts' worth of heartbeats, rounded up: 2 s with
//! etcd's default timing, 1 s with `--heartbeat-interval 50
//! --election-timeout 500`). So a TTL in ms is rounded up to whole seconds,
//! and the TTL the server actually granted is kept ([`EtcdClient::granted_ttl_s`]):
//! a holder stall must outlast that one to expire a lease.

use std::collections::HashMap;
use std::time::Duration;

use etcd_client::{Client, ConnectOptions, GetOptions, LockOptions};
use tokio::time::{timeout, timeout_at, Instant};

use super::storage::Storage;
use super::{ClientConfig, RealError};
use lockcheck_workloads::{Grant, LockClient, Outcome};

/// How long `connect` may take to reach the cluster.
const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// The Lock API's name for lock `key`; its keys are `<name>/<lease in hex>`.
fn lock_name(key: &str) -> String {
    format!("lockcheck/{key}")
}

/// The whole seconds of a TTL, rounded up, at least 1.
pub fn ttl_seconds(ttl_ms: u64) -> i64 {
    i64::try_from(ttl_ms.div_ceil(1000).max(1)).unwrap_or(i64::MAX)
}

/// A lock this client holds: its lease and the key the Lock API created.
#[derive(Debug, Clone)]
struct Held {
    lease: i64,
    lock_key: Vec<u8>,
    /// The session's deadline: the granted TTL after the last answered
    /// grant or keepalive was sent.
    session_deadline: Instant,
}

/// One logical client of the etcd lock: one gRPC channel (one HTTP/2
/// connection) to the cluster, and its connection to the protected resources.
pub struct EtcdClient {
    endpoints: Vec<String>,
    deadline: Duration,
    /// `None` after an unknown outcome: the next use opens a new channel.
    client: Option<Client>,
    /// The locks this client believes it holds, by name.
    held: HashMap<String, Held>,
    /// Leases whose fate is unknown (an acquire or a release gave up on
    /// them): `reset` revokes them, so their lock keys do not linger a TTL.
    abandoned: Vec<i64>,
    granted_ttl_s: Option<i64>,
    storage: Storage,
}

impl std::fmt::Debug for EtcdClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdClient")
            .field("endpoints", &self.endpoints)
            .field("connected", &self.client.is_some())
            .field("held", &self.held.keys().collect::<Vec<_>>())
            .field("granted_ttl_s", &self.granted_ttl_s)
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
    /// and checks that it answers, and opens the client's storage session.
    pub async fn connect(
        endpoints: &[String],
        config: &ClientConfig,
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
        Ok(EtcdClient {
            endpoints: endpoints.to_vec(),
            deadline: config.deadline,
            client: Some(client),
            held: HashMap::new(),
            abandoned: Vec::new(),
            granted_ttl_s: None,
            storage: Storage::connect(config).await?,
        })
    }

    /// The TTL, in seconds, that the server granted the last lease: the
    /// requested one rounded up ([`ttl_seconds`]), or the server's minimum.
    pub fn granted_ttl_s(&self) -> Option<i64> {
        self.granted_ttl_s
    }

    /// The TTL the server grants, as a duration (the requested one until a
    /// grant said otherwise).
    fn granted_ttl(&self) -> Duration {
        Duration::from_secs(u64::try_from(self.granted_ttl_s.unwrap_or(1)).unwrap_or(1))
    }

    /// The channel, opened anew if the last one was given up.
    async fn client(&mut self) -> Option<Client> {
        if self.client.is_none() {
            self.client = open(&self.endpoints, self.deadline).await.ok();
        }
        self.client.clone()
    }

    /// Gives up the channel after an unknown outcome, keeping `lease` to revoke.
    fn give_up<T>(&mut self, lease: Option<i64>, reason: &str) -> Outcome<T> {
        self.abandoned.extend(lease);
        self.client = None;
        Outcome::Info(reason.into())
    }

    /// Whether any key is under the lock's prefix: read before taking a
    /// lease, so that a busy lock is refused without blocking in `Lock`.
    async fn is_taken(client: &mut Client, key: &str, until: Instant) -> Option<bool> {
        let prefix = format!("{}/", lock_name(key));
        let options = GetOptions::new().with_prefix().with_count_only();
        match timeout_at(until, client.get(prefix, Some(options))).await {
            Ok(Ok(response)) => Some(response.count() > 0),
            _ => None,
        }
    }

    async fn grant_lease(
        &mut self,
        client: &mut Client,
        ttl_ms: u64,
        until: Instant,
    ) -> Option<i64> {
        match timeout_at(until, client.lease_grant(ttl_seconds(ttl_ms), None)).await {
            Ok(Ok(lease)) => {
                self.granted_ttl_s = Some(lease.ttl());
                Some(lease.id())
            }
            _ => None,
        }
    }

    /// The create revision of the key the Lock API gave us: the token.
    async fn create_revision(client: &mut Client, lock_key: &[u8], until: Instant) -> Option<u64> {
        let response = timeout_at(until, client.get(lock_key, None)).await.ok()?.ok()?;
        let revision = response.kvs().first()?.create_revision();
        u64::try_from(revision).ok()
    }
}

impl LockClient for EtcdClient {
    async fn acquire(&mut self, key: &str, ttl_ms: u64) -> Outcome<Grant> {
        let sent = Instant::now();
        let until = sent + self.deadline;
        let Some(mut client) = self.client().await else {
            return Outcome::Fail("unavailable".into());
        };
        match Self::is_taken(&mut client, key, until).await {
            Some(true) => return Outcome::Fail("busy".into()),
            Some(false) => {}
            // A read changes nothing: the acquire certainly did not happen.
            None => {
                self.client = None;
                return Outcome::Fail("unavailable".into());
            }
        }
        // A lease that was granted unbeknown to us holds no key: harmless,
        // it expires by itself.
        let Some(lease) = self.grant_lease(&mut client, ttl_ms, until).await else {
            self.client = None;
            return Outcome::Fail("unavailable".into());
        };
        let options = LockOptions::new().with_lease(lease);
        let lock_key = match timeout_at(until, client.lock(lock_name(key), Some(options))).await {
            Ok(Ok(response)) => response.key().to_vec(),
            Ok(Err(_)) => return self.give_up(Some(lease), "conn-lost"),
            Err(_) => return self.give_up(Some(lease), "timeout"),
        };
        match Self::create_revision(&mut client, &lock_key, until).await {
            Some(fence) => {
                let grant = Grant { fence: Some(fence), lease: Some(format!("{lease:x}")) };
                let session_deadline = sent + self.granted_ttl();
                self.held.insert(key.to_string(), Held { lease, lock_key, session_deadline });
                Outcome::Ok(grant)
            }
            // Granted, but the token is unknown: the client gives up.
            None => self.give_up(Some(lease), "fence-lost"),
        }
    }

    async fn release(&mut self, key: &str, _grant: &Grant) -> Outcome<()> {
        let until = Instant::now() + self.deadline;
        let Some(held) = self.held.remove(key) else {
            return Outcome::Fail("not-held".into());
        };
        let Some(mut client) = self.client().await else {
            self.abandoned.push(held.lease);
            return Outcome::Fail("unavailable".into());
        };
        match timeout_at(until, client.unlock(held.lock_key)).await {
            Ok(Ok(_)) => {}
            Ok(Err(_)) => return self.give_up(Some(held.lease), "conn-lost"),
            Err(_) => return self.give_up(Some(held.lease), "timeout"),
        }
        // The key is gone now; revoking the lease says whether it was still
        // ours: a lease already expired took the key with it, so the unlock
        // deleted nothing and the release did not happen.
        match timeout_at(until, client.lease_revoke(held.lease)).await {
            Ok(Err(error)) if lease_not_found(&error) => Outcome::Fail("not-held".into()),
            Ok(Ok(_)) => Outcome::Ok(()),
            _ => {
                self.abandoned.push(held.lease);
                Outcome::Ok(())
            }
        }
    }

    async fn renew(&mut self, key: &str, _grant: &Grant, _ttl_ms: u64) -> Outcome<()> {
        let sent = Instant::now();
        let until = sent + self.deadline;
        let Some((lease, session_deadline)) =
            self.held.get(key).map(|held| (held.lease, held.session_deadline))
        else {
            return Outcome::Fail("not-held".into());
        };
        let answered = match self.client().await {
            Some(mut client) => {
                let keepalive = async {
                    let (mut keeper, mut stream) = client.lease_keep_alive(lease).await?;
                    keeper.keep_alive().await?;
                    stream.message().await
                };
                match timeout_at(until, keepalive).await {
                    Ok(Ok(Some(response))) => Some(response.ttl()),
                    _ => None,
                }
            }
            None => None,
        };
        match answered {
            // TTL 0: the lease had expired, and its lock key with it.
            Some(ttl) if ttl <= 0 => {
                self.held.remove(key);
                Outcome::Fail("not-held".into())
            }
            Some(ttl) => {
                let ttl = Duration::from_secs(u64::try_from(ttl).unwrap_or(0));
                if let Some(held) = self.held.get_mut(key) {
                    held.session_deadline = sent + ttl;
                }
                Outcome::Ok(())
            }
            // No answer: a new channel next time (perhaps to another
            // member); the session lives on until its deadline.
            None => {
                self.client = None;
                if Instant::now() < session_deadline {
                    Outcome::Ok(())
                } else {
                    if let Some(held) = self.held.remove(key) {
                        self.abandoned.push(held.lease);
                    }
                    Outcome::Fail("session-expired".into())
                }
            }
        }
    }

    async fn write(&mut self, resource: &str, fence: Option<u64>, data: &str) -> Outcome<()> {
        self.storage.write(resource, fence, data).await
    }

    async fn read(&mut self, resource: &str) -> Outcome<(Option<u64>, Option<String>)> {
        self.storage.read(resource).await
    }

    /// A new session: forgets the locks held, revokes the leases whose
    /// outcome was unknown (best effort, within the deadline), and opens a
    /// new channel.
    async fn reset(&mut self) {
        self.held.clear();
        self.client = None;
        let abandoned = std::mem::take(&mut self.abandoned);
        if let Some(mut client) = self.client().await {
            let until = Instant::now() + self.deadline;
            for lease in abandoned {
                let _ = timeout_at(until, client.lease_revoke(lease)).await;
            }
        }
        self.storage.reset().await;
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
