//! etcd's lock, written once for both worlds (docs/guide.md#etcd): a fresh
//! lease with the TTL for each acquisition, the lock key bound to it (its
//! create revision is the fencing token), a keepalive of the lease to renew,
//! and the lease's revocation to release, which deletes the lock key with
//! it. A world supplies the transport ([`EtcdSession`]); the simulator's
//! asks the leader of its simulated members, the real world's speaks gRPC
//! to a real cluster.
//!
//! A renewal is judged as etcd's client library judges its session: a
//! keepalive that gets no answer does not end the session until the
//! library's own deadline, the granted TTL after the last answered grant or
//! keepalive (counted, more carefully than clientv3 does, from when it was
//! sent), has passed. Until then the holder believes it holds the lock: a
//! holder cut off from the cluster goes on working while the cluster revokes
//! its lease (docs/truth-table.md), which only a fencing token makes
//! harmless.

use std::collections::BTreeMap;

use crate::{Grant, Outcome};

/// Why a call has no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unanswered {
    /// Certainly not applied: no member could be reached.
    NotSent,
    /// Sent, and no answer in time or the connection broke: it may have
    /// been applied. The reason is what the history records.
    Unknown(&'static str),
}

/// An etcd cluster, as the lock recipe speaks to it. Lease ids are etcd's
/// (positive).
#[allow(async_fn_in_trait)]
pub trait EtcdSession {
    /// The client's own clock, in milliseconds: what the session's deadline
    /// is measured by.
    fn now_ms(&self) -> u64;
    /// An operation starts: a transport that bounds a whole operation,
    /// rather than each call, starts its clock here.
    fn begin(&mut self) {}
    /// Whether a key is under the lock's prefix (a holder, or a waiter the
    /// holder comes before). A transport whose lock call costs a lease (the
    /// real one) reads it first, so that a busy lock is refused before one
    /// is granted; one whose lock call answers busy by itself need not ask
    /// anyone.
    async fn is_taken(&mut self, name: &str) -> Result<bool, Unanswered>;
    /// Grants a lease of `ttl_ms`: its id and the TTL the cluster granted
    /// (a real etcd grants whole seconds, at least its minimum).
    async fn grant(&mut self, ttl_ms: u64) -> Result<(u64, u64), Unanswered>;
    /// Binds lock `name` to `lease`.
    async fn lock(&mut self, name: &str, lease: u64) -> Result<Bound, Unanswered>;
    /// One keepalive of `lease`: `true` if it was still alive.
    async fn keep_alive(&mut self, lease: u64) -> Result<bool, Unanswered>;
    /// Revokes `lease`, deleting its keys: `true` if it still existed.
    async fn revoke(&mut self, lease: u64) -> Result<bool, Unanswered>;
    /// Between two commands of the recipe: a pause asked for there
    /// ([`crate::StallPoint::BetweenCommands`]) strikes. A transport without
    /// a pause point does nothing.
    async fn between_commands(&mut self) {}
}

/// What binding a lock key to a lease came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// The lease holds the lock: its key's create revision.
    Holds(u64),
    /// Another lease holds the lock, and nothing of this one's was left
    /// behind (a TryLock that puts no key when the lock is taken).
    Refused,
    /// Another lease holds the lock, and this lease's key waits behind it
    /// (etcd's recipe puts the key first and looks second): it becomes the
    /// holder when the keys before it go, unless the lease is revoked first.
    Queued,
}

/// A lock this client holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Held {
    lease: u64,
    granted_ttl_ms: u64,
    /// When the client library ends the session by itself.
    session_deadline_ms: u64,
}

/// One logical client's etcd locks: what it holds, and the leases whose
/// fate it does not know.
#[derive(Debug, Clone, Default)]
pub struct EtcdLock {
    fencing: bool,
    held: BTreeMap<String, Held>,
    /// Leases an operation gave up on (its outcome unknown): whoever ends
    /// the session may revoke them ([`EtcdLock::reset`]).
    abandoned: Vec<u64>,
}

impl EtcdLock {
    /// A client that hands out the lock key's revision as the token when
    /// `fencing`.
    pub fn new(fencing: bool) -> EtcdLock {
        EtcdLock { fencing, ..EtcdLock::default() }
    }

    /// Acquires `name` with a lease of `ttl_ms`.
    pub async fn acquire<S: EtcdSession>(
        &mut self,
        session: &mut S,
        name: &str,
        ttl_ms: u64,
    ) -> Outcome<Grant> {
        session.begin();
        // The lease's TTL may start as soon as the grant leaves.
        let sent = session.now_ms();
        match session.is_taken(name).await {
            Ok(true) => return Outcome::Fail("busy".into()),
            Ok(false) => {}
            // A read changes nothing: the acquire certainly did not happen.
            Err(_) => return Outcome::Fail("unavailable".into()),
        }
        // A lease alone holds nothing: whatever became of it, no lock was
        // taken (one granted unbeknown to us expires by itself).
        let Ok((lease, granted_ttl_ms)) = session.grant(ttl_ms).await else {
            return Outcome::Fail("unavailable".into());
        };
        // The lease's TTL runs from its grant: a pause before the lock is
        // bound to it spends it.
        session.between_commands().await;
        let revision = match session.lock(name, lease).await {
            Ok(Bound::Holds(revision)) => revision,
            Ok(Bound::Refused) => {
                // Busy: give the lease back (it would expire anyway).
                let _ = session.revoke(lease).await;
                return Outcome::Fail("busy".into());
            }
            // Busy, with a key of ours in the queue: only its revocation
            // makes the refusal certain. A key left waiting takes the lock
            // when the holder goes, with nobody believing it holds it, and
            // every acquire until the lease runs out is refused: the
            // acquire's outcome is unknown.
            Ok(Bound::Queued) => {
                return match session.revoke(lease).await {
                    Ok(_) => Outcome::Fail("busy".into()),
                    Err(Unanswered::NotSent) => self.give_up(lease, "unavailable"),
                    Err(Unanswered::Unknown(reason)) => self.give_up(lease, reason),
                };
            }
            Err(Unanswered::NotSent) => return Outcome::Fail("unavailable".into()),
            Err(Unanswered::Unknown(reason)) => return self.give_up(lease, reason),
        };
        let mut held = Held { lease, granted_ttl_ms, session_deadline_ms: sent + granted_ttl_ms };
        // A slow grant (an election, a retry) spent part of the lease: the
        // session's keepalive, due every third of the TTL, renews it before
        // the lock is used, or the lock is not taken to be held.
        if session.now_ms().saturating_sub(sent) >= granted_ttl_ms / 3 {
            let renewed_from = session.now_ms();
            match session.keep_alive(lease).await {
                Ok(true) => held.session_deadline_ms = renewed_from + granted_ttl_ms,
                Ok(false) => return Outcome::Fail("expired".into()),
                Err(Unanswered::NotSent) => return self.give_up(lease, "timeout"),
                Err(Unanswered::Unknown(reason)) => return self.give_up(lease, reason),
            }
        }
        self.held.insert(name.to_string(), held);
        let fence = self.fencing.then_some(revision);
        Outcome::Ok(Grant { fence, lease: Some(lease.to_string()) })
    }

    /// Renews `name` with one keepalive of its lease.
    pub async fn renew<S: EtcdSession>(&mut self, session: &mut S, name: &str) -> Outcome<()> {
        session.begin();
        let Some(held) = self.held.get_mut(name) else {
            return Outcome::Fail("not-held".into());
        };
        let sent = session.now_ms();
        match session.keep_alive(held.lease).await {
            Ok(true) => {
                held.session_deadline_ms = sent + held.granted_ttl_ms;
                Outcome::Ok(())
            }
            // The lease had expired, and its lock key with it.
            Ok(false) => Outcome::Fail("not-held".into()),
            // The library keeps the session until its deadline.
            Err(_) if session.now_ms() < held.session_deadline_ms => Outcome::Ok(()),
            Err(_) => Outcome::Fail("session-expired".into()),
        }
    }

    /// Releases `name` by revoking its lease. A lease that had already
    /// expired took the key with it: the release did not happen.
    pub async fn release<S: EtcdSession>(&mut self, session: &mut S, name: &str) -> Outcome<()> {
        session.begin();
        let Some(held) = self.held.remove(name) else {
            return Outcome::Fail("not-held".into());
        };
        match session.revoke(held.lease).await {
            Ok(true) => Outcome::Ok(()),
            Ok(false) => Outcome::Fail("not-held".into()),
            Err(Unanswered::NotSent) => {
                self.abandoned.push(held.lease);
                Outcome::Fail("unavailable".into())
            }
            Err(Unanswered::Unknown(reason)) => self.give_up(held.lease, reason),
        }
    }

    /// A new session: the locks held are forgotten. The leases whose fate
    /// is unknown come back, for the world to deal with: the real client
    /// revokes them, so that their lock keys do not linger a TTL; a
    /// simulated one lets them expire, as a crashed client's do.
    pub fn reset(&mut self) -> Vec<u64> {
        self.held.clear();
        std::mem::take(&mut self.abandoned)
    }

    /// The outcome is unknown: `lease` may hold the lock.
    fn give_up<T>(&mut self, lease: u64, reason: &str) -> Outcome<T> {
        self.abandoned.push(lease);
        Outcome::Info(reason.into())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::btree_map::Entry;
    use std::collections::BTreeMap;

    use super::{Bound, EtcdLock, EtcdSession, Unanswered};
    use crate::{Grant, Outcome};

    /// One member that applies everything at once; `silent` makes its
    /// calls go unanswered after they were applied, `took_ms` is how long a
    /// grant takes. With `queues`, a lock call on a taken lock leaves its
    /// key waiting, as the real recipe's put does.
    #[derive(Debug, Default)]
    struct Cluster {
        now_ms: u64,
        leases: BTreeMap<u64, bool>,
        locks: BTreeMap<String, u64>,
        revision: u64,
        silent: bool,
        took_ms: u64,
        /// Every lease is gone by its first keepalive.
        lost: bool,
        asked: Vec<&'static str>,
        queues: bool,
        /// Waiting keys: lock name and lease, in the order they were put.
        waiting: Vec<(String, u64)>,
        /// The read before the lock call misses the holder (it came after).
        blind: bool,
        /// Revocations are applied and go unanswered.
        silent_revoke: bool,
    }

    impl Cluster {
        fn answer<T>(&self, value: T) -> Result<T, Unanswered> {
            if self.silent {
                Err(Unanswered::Unknown("timeout"))
            } else {
                Ok(value)
            }
        }
    }

    impl EtcdSession for Cluster {
        fn now_ms(&self) -> u64 {
            self.now_ms
        }

        async fn is_taken(&mut self, name: &str) -> Result<bool, Unanswered> {
            self.asked.push("is_taken");
            let taken = self.locks.contains_key(name) && !self.blind;
            self.answer(taken)
        }

        async fn grant(&mut self, ttl_ms: u64) -> Result<(u64, u64), Unanswered> {
            self.asked.push("grant");
            self.now_ms += self.took_ms;
            let lease = self.leases.len() as u64 + 1;
            self.leases.insert(lease, true);
            self.answer((lease, ttl_ms.max(2000)))
        }

        async fn lock(&mut self, name: &str, lease: u64) -> Result<Bound, Unanswered> {
            self.asked.push("lock");
            self.revision += 1;
            if self.locks.contains_key(name) {
                if self.queues {
                    self.waiting.push((name.to_string(), lease));
                    return self.answer(Bound::Queued);
                }
                return self.answer(Bound::Refused);
            }
            self.locks.insert(name.to_string(), lease);
            let revision = self.revision;
            self.answer(Bound::Holds(revision))
        }

        async fn keep_alive(&mut self, lease: u64) -> Result<bool, Unanswered> {
            self.asked.push("keep_alive");
            let alive = !self.lost && self.leases.get(&lease) == Some(&true);
            self.answer(alive)
        }

        async fn revoke(&mut self, lease: u64) -> Result<bool, Unanswered> {
            self.asked.push("revoke");
            let existed = self.leases.insert(lease, false) == Some(true);
            self.locks.retain(|_, holder| *holder != lease);
            self.waiting.retain(|(_, waiter)| *waiter != lease);
            // The first waiting key of a lock let go holds it.
            for (name, waiter) in std::mem::take(&mut self.waiting) {
                match self.locks.entry(name) {
                    Entry::Occupied(taken) => self.waiting.push((taken.key().clone(), waiter)),
                    Entry::Vacant(free) => {
                        free.insert(waiter);
                    }
                }
            }
            if self.silent_revoke {
                return Err(Unanswered::Unknown("timeout"));
            }
            self.answer(existed)
        }
    }

    #[tokio::test]
    async fn a_lock_is_busy_while_held_and_its_tokens_grow() {
        let mut cluster = Cluster::default();
        let (mut a, mut b) = (EtcdLock::new(true), EtcdLock::new(true));
        let Outcome::Ok(first) = a.acquire(&mut cluster, "l", 1000).await else { panic!() };
        assert_eq!(first, Grant { fence: Some(1), lease: Some("1".into()) });
        assert_eq!(b.acquire(&mut cluster, "l", 1000).await, Outcome::Fail("busy".into()));
        assert_eq!(a.renew(&mut cluster, "l").await, Outcome::Ok(()));
        assert_eq!(b.release(&mut cluster, "l").await, Outcome::Fail("not-held".into()));
        assert_eq!(a.release(&mut cluster, "l").await, Outcome::Ok(()));
        let Outcome::Ok(second) = b.acquire(&mut cluster, "l", 1000).await else { panic!() };
        assert!(second.fence > first.fence, "{first:?} then {second:?}");
        let mut unfenced = EtcdLock::new(false);
        let Outcome::Ok(grant) = unfenced.acquire(&mut cluster, "m", 1000).await else { panic!() };
        assert_eq!(grant.fence, None);
    }

    #[tokio::test]
    async fn a_session_outlives_unanswered_keepalives_until_its_deadline() {
        let mut cluster = Cluster::default();
        let mut lock = EtcdLock::new(true);
        let Outcome::Ok(_) = lock.acquire(&mut cluster, "l", 2000).await else { panic!() };
        cluster.silent = true;
        cluster.now_ms = 1999;
        assert_eq!(lock.renew(&mut cluster, "l").await, Outcome::Ok(()));
        cluster.now_ms = 2000;
        let expired = lock.renew(&mut cluster, "l").await;
        assert_eq!(expired, Outcome::Fail("session-expired".into()));
        // An answered keepalive of an expired lease: not held.
        cluster.silent = false;
        cluster.leases.insert(1, false);
        assert_eq!(lock.renew(&mut cluster, "l").await, Outcome::Fail("not-held".into()));
    }

    #[tokio::test]
    async fn an_unknown_outcome_abandons_the_lease_for_reset() {
        let mut cluster = Cluster { silent: true, ..Cluster::default() };
        let mut lock = EtcdLock::new(true);
        // Unanswered from the start: nothing is held, nothing abandoned.
        let failed = lock.acquire(&mut cluster, "l", 1000).await;
        assert_eq!(failed, Outcome::Fail("unavailable".into()));
        assert_eq!(lock.reset(), Vec::<u64>::new());
        cluster.silent = false;
        let Outcome::Ok(_) = lock.acquire(&mut cluster, "l", 1000).await else { panic!() };
        cluster.silent = true;
        assert_eq!(lock.release(&mut cluster, "l").await, Outcome::Info("timeout".into()));
        assert_eq!(lock.reset(), vec![1]);
        assert_eq!(lock.reset(), Vec::<u64>::new());
    }

    #[tokio::test]
    async fn a_busy_answer_whose_waiting_key_stays_is_unknown() {
        let mut cluster = Cluster { queues: true, blind: true, ..Cluster::default() };
        let (mut a, mut b, mut c) = (EtcdLock::new(true), EtcdLock::new(true), EtcdLock::new(true));
        let Outcome::Ok(_) = a.acquire(&mut cluster, "l", 1000).await else { panic!() };
        // Queued behind a, and withdrawn: certainly refused.
        assert_eq!(b.acquire(&mut cluster, "l", 1000).await, Outcome::Fail("busy".into()));
        assert!(cluster.waiting.is_empty());
        assert_eq!(b.reset(), Vec::<u64>::new());
        // Queued, and the withdrawal unanswered: the key may stay and take
        // the lock when a lets go, so the refusal is not certain.
        cluster.silent_revoke = true;
        assert_eq!(b.acquire(&mut cluster, "l", 1000).await, Outcome::Info("timeout".into()));
        assert_eq!(b.reset(), vec![3]);
        // Here the revocation was applied, so a's release frees the lock.
        cluster.silent_revoke = false;
        assert_eq!(a.release(&mut cluster, "l").await, Outcome::Ok(()));
        cluster.blind = false;
        assert!(matches!(c.acquire(&mut cluster, "l", 1000).await, Outcome::Ok(_)));
    }

    #[tokio::test]
    async fn a_slow_grant_is_renewed_before_the_lock_is_used() {
        let mut cluster = Cluster { took_ms: 700, ..Cluster::default() };
        let mut lock = EtcdLock::new(true);
        let Outcome::Ok(_) = lock.acquire(&mut cluster, "l", 2000).await else { panic!() };
        assert_eq!(cluster.asked, ["is_taken", "grant", "lock", "keep_alive"]);
        // The session runs from the keepalive, not from the grant.
        cluster.silent = true;
        cluster.now_ms = 2699;
        assert_eq!(lock.renew(&mut cluster, "l").await, Outcome::Ok(()));
        // A lease that expired during the grant is no lock.
        let mut expired = Cluster { took_ms: 700, lost: true, ..Cluster::default() };
        let outcome = EtcdLock::new(true).acquire(&mut expired, "l", 2000).await;
        assert_eq!(outcome, Outcome::Fail("expired".into()));
    }
}
