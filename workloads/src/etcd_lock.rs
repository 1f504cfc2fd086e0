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
//!
//! A client that finds the lock taken goes on in one of two ways
//! ([`Waiting`]): refused at once, as etcd's `Mutex.TryLock` does, so that
//! the workload tries again later (it polls); or, as `Mutex.Lock` does, its
//! key stays in line and it watches the key created just before its own,
//! so that a release wakes the one waiter next in line, keeping its lease
//! alive while it waits.

use std::collections::BTreeMap;

use crate::watch::{WakeUps, Woken};
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
    /// Binds lock `name` to `lease`, or answers that another holds it
    /// ([`Bound::Refused`] or [`Bound::Queued`], as the transport's lock
    /// call does).
    async fn lock(&mut self, name: &str, lease: u64) -> Result<Bound, Unanswered>;
    /// Puts `lease`'s key in lock `name`'s line, wherever the line stands:
    /// it holds the lock or is [`Bound::Queued`], never refused while its
    /// lease lives (etcd's `Mutex.Lock` puts its key first).
    async fn join(&mut self, name: &str, lease: u64) -> Result<Bound, Unanswered>;
    /// Where the key created at revision `own` stands in lock `name`'s
    /// line, read linearizably.
    async fn line(&mut self, name: &str, own: u64) -> Result<Line, Unanswered>;
    /// Watches the key `before` for its deletion, from the revision the
    /// read that found it saw, and waits until the client's clock reads
    /// `until_ms`.
    async fn wait_for_delete(
        &mut self,
        before: &Before,
        until_ms: u64,
    ) -> Result<Woken, Unanswered>;
    /// etcd's `Campaign` in election `name` with `lease`: puts the lease's
    /// key in the election's line (finding it again if it is there), and
    /// waits until no key created before it remains (elected,
    /// [`Bound::Holds`] with its create revision, the term) or until the
    /// client's clock reads `until_ms` ([`Bound::Queued`]: still in line, as
    /// far as the answer knows). [`Bound::Refused`]: the lease is gone, and
    /// no key was put.
    async fn campaign(
        &mut self,
        name: &str,
        lease: u64,
        until_ms: u64,
    ) -> Result<Bound, Unanswered>;
    /// etcd's `Resign`: deletes the leader key of election `name` that
    /// `lease` created at revision `own`: `true` if it was still there.
    async fn resign(&mut self, name: &str, lease: u64, own: u64) -> Result<bool, Unanswered>;
    /// One keepalive of `lease`: `true` if it was still alive.
    async fn keep_alive(&mut self, lease: u64) -> Result<bool, Unanswered>;
    /// Revokes `lease`, deleting its keys: `true` if it still existed.
    async fn revoke(&mut self, lease: u64) -> Result<bool, Unanswered>;
    /// Whether `lease`'s key of lock `name` is there, read as `read` says
    /// from the member the client reaches.
    async fn holds(&mut self, name: &str, lease: u64, read: Read) -> Result<bool, Unanswered>;
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
    /// Another lease holds the lock, and this lease's key, created at this
    /// revision, waits behind it (etcd's recipe puts the key first and looks
    /// second): it becomes the holder when the keys before it go, unless the
    /// lease is revoked first.
    Queued(u64),
}

/// Where a key stands in its lock's line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// The key is gone: its lease expired or was revoked.
    Gone,
    /// No key of the lock was created before it: it holds the lock.
    First,
    /// The key created last before it.
    After(Before),
}

/// The key just before one's own in a lock's line: the one to watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Before {
    /// Its name in the store.
    pub key: String,
    /// Its create revision.
    pub created: u64,
    /// The store's revision when it was read: a watch from the next one
    /// misses no deletion.
    pub seen: u64,
}

/// How a read is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    /// Through the leader's quorum (etcd's default): what the cluster has
    /// committed when the read is served.
    Linearizable,
    /// By the member the client reaches, from what it has applied: fast,
    /// and stale on a member behind or cut off from the leader.
    Serializable,
}

/// What a holder whose keepalive went unanswered asks before it goes on
/// believing it holds the lock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Check {
    /// Nothing: it believes in its session until the session's deadline,
    /// as etcd's client library does.
    #[default]
    Deadline,
    /// A linearizable read of its key: gone means not held; there, it
    /// believes until the deadline still.
    Linearizable,
    /// (broken) A serializable read of its key, taken for proof that it
    /// holds the lock.
    Serializable,
}

/// What a client that finds the lock taken does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Waiting {
    /// It is refused at once (`Mutex.TryLock`).
    #[default]
    TryOnce,
    /// Its key waits in line, watching the key just before its own, for at
    /// most this many ms (`Mutex.Lock` under a context's deadline).
    Predecessor { wait_ms: u64 },
}

/// A lock this client holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Held {
    lease: u64,
    /// Its key's create revision (an election's leader resigns by it).
    created: u64,
    granted_ttl_ms: u64,
    /// When the client library ends the session by itself.
    session_deadline_ms: u64,
}

impl Held {
    /// When the last answered grant or keepalive of its lease was sent.
    fn renewed_from(&self) -> u64 {
        self.session_deadline_ms.saturating_sub(self.granted_ttl_ms)
    }
}

/// One logical client's etcd locks: what it holds, and the leases whose
/// fate it does not know.
#[derive(Debug, Clone, Default)]
pub struct EtcdLock {
    fencing: bool,
    waiting: Waiting,
    check: Check,
    held: BTreeMap<String, Held>,
    /// A candidate in etcd's election (`Campaign`, `Resign`), waiting in
    /// line for at most this many ms, rather than a lock's holder.
    campaigns: Option<u64>,
    /// Leases an operation gave up on (its outcome unknown): whoever ends
    /// the session may revoke them ([`EtcdLock::reset`]).
    abandoned: Vec<u64>,
    wake_ups: WakeUps,
}

impl EtcdLock {
    /// A client that hands out the lock key's revision as the token when
    /// `fencing`.
    pub fn new(fencing: bool) -> EtcdLock {
        EtcdLock { fencing, ..EtcdLock::default() }
    }

    /// A client that waits as `waiting` says when the lock is taken.
    pub fn waiting(fencing: bool, waiting: Waiting) -> EtcdLock {
        EtcdLock { fencing, waiting, ..EtcdLock::default() }
    }

    /// A candidate in etcd's election: an acquire campaigns (`Campaign`),
    /// waiting in line for at most `wait_ms`, a release resigns
    /// (`Resign`), a renewal is a keepalive of the campaign's lease.
    pub fn campaigning(fencing: bool, wait_ms: u64) -> EtcdLock {
        EtcdLock { fencing, campaigns: Some(wait_ms), ..EtcdLock::default() }
    }

    /// A holder whose keepalive goes unanswered checks as `check` says.
    pub fn checking(self, check: Check) -> EtcdLock {
        EtcdLock { check, ..self }
    }

    /// The wake-ups counted so far.
    pub fn wake_ups(&self) -> WakeUps {
        self.wake_ups
    }

    /// The watches that woke this client since it was last asked, if it
    /// waits on watches; a client refused at once polls instead.
    pub fn take_woken(&mut self) -> Option<u64> {
        match self.waiting {
            Waiting::TryOnce => None,
            Waiting::Predecessor { .. } => Some(self.wake_ups.take_woken()),
        }
    }

    /// Acquires `name` with a lease of `ttl_ms`.
    pub async fn acquire<S: EtcdSession>(
        &mut self,
        session: &mut S,
        name: &str,
        ttl_ms: u64,
    ) -> Outcome<Grant> {
        if let Some(wait_ms) = self.campaigns {
            return self.campaign(session, name, ttl_ms, wait_ms).await;
        }
        session.begin();
        // The lease's TTL may start as soon as the grant leaves.
        let sent = session.now_ms();
        if self.waiting == Waiting::TryOnce {
            match session.is_taken(name).await {
                Ok(true) => return Outcome::Fail("busy".into()),
                Ok(false) => {}
                // A read changes nothing: the acquire certainly did not happen.
                Err(_) => return Outcome::Fail("unavailable".into()),
            }
        }
        // A lease alone holds nothing: whatever became of it, no lock was
        // taken (one granted unbeknown to us expires by itself).
        let Ok((lease, granted_ttl_ms)) = session.grant(ttl_ms).await else {
            return Outcome::Fail("unavailable".into());
        };
        // The lease's TTL runs from its grant: a pause before the lock is
        // bound to it spends it.
        session.between_commands().await;
        let bound = match self.waiting {
            Waiting::TryOnce => session.lock(name, lease).await,
            Waiting::Predecessor { .. } => session.join(name, lease).await,
        };
        let mut held =
            Held { lease, created: 0, granted_ttl_ms, session_deadline_ms: sent + granted_ttl_ms };
        let revision = match (bound, self.waiting) {
            (Ok(Bound::Holds(revision)), _) => revision,
            (Ok(Bound::Queued(own)), Waiting::Predecessor { wait_ms }) => {
                // The wait runs from when the key joined the line.
                let until_ms = session.now_ms() + wait_ms;
                match self.wait_in_line(session, name, own, &mut held, until_ms).await {
                    Ok(()) => own,
                    Err(outcome) => return outcome,
                }
            }
            (Ok(Bound::Refused), _) => {
                // Busy: give the lease back (it would expire anyway).
                let _ = session.revoke(lease).await;
                return Outcome::Fail("busy".into());
            }
            // Busy, with a key of ours in the queue: only its revocation
            // makes the refusal certain. A key left waiting takes the lock
            // when the holder goes, with nobody believing it holds it, and
            // every acquire until the lease runs out is refused: the
            // acquire's outcome is unknown.
            (Ok(Bound::Queued(_)), Waiting::TryOnce) => {
                return self.withdraw(session, lease, "busy").await
            }
            (Err(Unanswered::NotSent), _) => return Outcome::Fail("unavailable".into()),
            (Err(Unanswered::Unknown(reason)), _) => return self.give_up(lease, reason),
        };
        // A slow grant (an election, a retry, a wait in line) spent part of
        // the lease: the session's keepalive, due every third of the TTL,
        // renews it before the lock is used, or the lock is not taken to be
        // held.
        if let Err(outcome) = self.keep_up(session, &mut held).await {
            return outcome;
        }
        held.created = revision;
        self.held.insert(name.to_string(), held);
        let fence = self.fencing.then_some(revision);
        Outcome::Ok(Grant { fence, lease: Some(lease.to_string()) })
    }

    /// Campaigns in election `name` with a fresh lease of `ttl_ms`: elected
    /// within `wait_ms`, the leader key's create revision is the term; else
    /// the lease is revoked, taking its key out of line (refused, `busy`).
    /// The wait is asked a slice at a time, the lease kept alive between
    /// (a campaign asked again finds its key where it stood).
    async fn campaign<S: EtcdSession>(
        &mut self,
        session: &mut S,
        name: &str,
        ttl_ms: u64,
        wait_ms: u64,
    ) -> Outcome<Grant> {
        session.begin();
        let sent = session.now_ms();
        let Ok((lease, granted_ttl_ms)) = session.grant(ttl_ms).await else {
            return Outcome::Fail("unavailable".into());
        };
        session.between_commands().await;
        let mut held =
            Held { lease, created: 0, granted_ttl_ms, session_deadline_ms: sent + granted_ttl_ms };
        let until_ms = session.now_ms() + wait_ms;
        let mut waited = false;
        let term = loop {
            match session.campaign(name, lease, until_ms).await {
                Ok(Bound::Holds(term)) => break term,
                Ok(Bound::Queued(_)) if session.now_ms() < until_ms => {}
                // Still in line when the wait ran out: out of it.
                Ok(Bound::Queued(_)) => return self.withdraw(session, lease, "busy").await,
                // The lease went before its key was put: nothing is in line.
                Ok(Bound::Refused) if !waited => return Outcome::Fail("expired".into()),
                // Gone while its key waited: it may have led for nobody.
                Ok(Bound::Refused) => return Outcome::Info("expired".into()),
                Err(_) => return self.withdraw(session, lease, "unavailable").await,
            }
            waited = true;
            if let Err(outcome) = self.keep_up(session, &mut held).await {
                return match outcome {
                    // The lease expired with its key in line: unknown.
                    Outcome::Fail(_) => Outcome::Info("expired".into()),
                    outcome => outcome,
                };
            }
        };
        // A campaign that waited spent part of the lease: the keepalive due
        // every third of the TTL renews it before the leader acts; a lease
        // gone with its key, which may have led for nobody, is unknown.
        if let Err(outcome) = self.keep_up(session, &mut held).await {
            return match outcome {
                Outcome::Fail(_) if waited => Outcome::Info("expired".into()),
                outcome => outcome,
            };
        }
        held.created = term;
        self.held.insert(name.to_string(), held);
        let fence = self.fencing.then_some(term);
        Outcome::Ok(Grant { fence, lease: Some(lease.to_string()) })
    }

    /// The keepalive due every third of the TTL, if it is due: the session
    /// runs on from when it was sent. A lease gone is no lock.
    async fn keep_up<S: EtcdSession, T>(
        &mut self,
        session: &mut S,
        held: &mut Held,
    ) -> Result<(), Outcome<T>> {
        if session.now_ms().saturating_sub(held.renewed_from()) < held.granted_ttl_ms / 3 {
            return Ok(());
        }
        let renewed_from = session.now_ms();
        match session.keep_alive(held.lease).await {
            Ok(true) => {
                held.session_deadline_ms = renewed_from + held.granted_ttl_ms;
                Ok(())
            }
            Ok(false) => Err(Outcome::Fail("expired".into())),
            Err(Unanswered::NotSent) => Err(self.give_up(held.lease, "timeout")),
            Err(Unanswered::Unknown(reason)) => Err(self.give_up(held.lease, reason)),
        }
    }

    /// Waits in line until the key created at `own` is first (`Ok`), or
    /// until the client's clock reads `until_ms`: then, as `Mutex.Lock`
    /// under a deadline does, the line is read once more, and the key
    /// withdrawn unless its turn came meanwhile. Each wait watches the key
    /// just before its own, and lasts at most a third of the TTL, when the
    /// lease's keepalive is due.
    async fn wait_in_line<S: EtcdSession>(
        &mut self,
        session: &mut S,
        name: &str,
        own: u64,
        held: &mut Held,
        until_ms: u64,
    ) -> Result<(), Outcome<Grant>> {
        let lease = held.lease;
        let mut woken = false;
        let mut timed_out = false;
        loop {
            let before = match session.line(name, own).await {
                Ok(Line::First) => return Ok(()),
                // The lease went while we waited: its key may have come
                // first before it went, holding the lock for nobody while
                // others were refused: unknown.
                Ok(Line::Gone) => return Err(Outcome::Info("expired".into())),
                Ok(Line::After(before)) => before,
                Err(_) => return Err(self.withdraw(session, lease, "unavailable").await),
            };
            if timed_out {
                return Err(self.withdraw(session, lease, "busy").await);
            }
            if woken {
                self.wake_ups.wasted += 1;
            }
            if let Err(outcome) = self.keep_up(session, held).await {
                return Err(match outcome {
                    // The lease expired with its key in line: unknown.
                    Outcome::Fail(_) => Outcome::Info("expired".into()),
                    outcome => outcome,
                });
            }
            let slice_ms = until_ms.min(held.renewed_from() + held.granted_ttl_ms / 3);
            match session.wait_for_delete(&before, slice_ms).await {
                Ok(wait) => {
                    woken = self.wake_ups.count(wait);
                    timed_out = wait == Woken::TimedOut && session.now_ms() >= until_ms;
                }
                Err(_) => return Err(self.withdraw(session, lease, "unavailable").await),
            }
        }
    }

    /// Takes `lease`'s key out of line by revoking the lease: refused for
    /// `reason` if that is certain. A lease already gone may have held the
    /// lock for nobody before it went, and an unanswered revocation may
    /// leave the key in line: either way the outcome is unknown.
    async fn withdraw<S: EtcdSession>(
        &mut self,
        session: &mut S,
        lease: u64,
        reason: &str,
    ) -> Outcome<Grant> {
        match session.revoke(lease).await {
            Ok(true) => Outcome::Fail(reason.into()),
            Ok(false) => Outcome::Info("expired".into()),
            Err(Unanswered::NotSent) => self.give_up(lease, "unavailable"),
            Err(Unanswered::Unknown(reason)) => self.give_up(lease, reason),
        }
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
                return Outcome::Ok(());
            }
            // The lease had expired, and its lock key with it.
            Ok(false) => return Outcome::Fail("not-held".into()),
            Err(_) => {}
        }
        // Unanswered: the holder asks whether its key is still there, as
        // its variant says, before it goes on believing: a call of its own,
        // with a deadline of its own.
        let (lease, deadline_ms) = (held.lease, held.session_deadline_ms);
        if self.check != Check::Deadline {
            session.begin();
        }
        let read = match self.check {
            Check::Deadline => None,
            Check::Linearizable => Some(session.holds(name, lease, Read::Linearizable).await),
            Check::Serializable => Some(session.holds(name, lease, Read::Serializable).await),
        };
        match read {
            // Gone: the lease expired or was revoked, taking the key.
            Some(Ok(false)) => Outcome::Fail("not-held".into()),
            // (broken) A member said the key is there: believed, whatever
            // the session's deadline, though a member cut off from the
            // leader answers from what it applied before the cut.
            Some(Ok(true)) if self.check == Check::Serializable => Outcome::Ok(()),
            // The library keeps the session until its deadline: a key seen
            // by a linearizable read proves the lease lived at the read,
            // not for how long after.
            _ if session.now_ms() < deadline_ms => Outcome::Ok(()),
            _ => Outcome::Fail("session-expired".into()),
        }
    }

    /// Releases `name` by revoking its lease. A lease that had already
    /// expired took the key with it: the release did not happen.
    pub async fn release<S: EtcdSession>(&mut self, session: &mut S, name: &str) -> Outcome<()> {
        session.begin();
        let Some(held) = self.held.remove(name) else {
            return Outcome::Fail("not-held".into());
        };
        if self.campaigns.is_some() {
            return self.resign(session, name, held).await;
        }
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

    /// An election's leader resigns (`Resign`, its key deleted), then gives
    /// its lease back (what becomes of that changes nothing: the lease
    /// holds no key).
    async fn resign<S: EtcdSession>(
        &mut self,
        session: &mut S,
        name: &str,
        held: Held,
    ) -> Outcome<()> {
        let resigned = match session.resign(name, held.lease, held.created).await {
            Ok(true) => Outcome::Ok(()),
            // Its key was gone: its lease had expired, or was revoked.
            Ok(false) => Outcome::Fail("not-held".into()),
            Err(Unanswered::NotSent) => {
                self.abandoned.push(held.lease);
                return Outcome::Fail("unavailable".into());
            }
            Err(Unanswered::Unknown(reason)) => return self.give_up(held.lease, reason),
        };
        let _ = session.revoke(held.lease).await;
        resigned
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
    use std::collections::BTreeMap;

    use super::{Before, Bound, Check, EtcdLock, EtcdSession, Line, Read, Unanswered, Waiting};
    use crate::watch::Woken;
    use crate::{Grant, Outcome};

    /// One member that applies everything at once; `silent` makes its
    /// calls go unanswered after they were applied, `took_ms` is how long a
    /// grant takes. With `queues`, a lock call on a taken lock leaves its
    /// key waiting, as the real recipe's put does.
    #[derive(Debug, Default)]
    struct Cluster {
        now_ms: u64,
        leases: BTreeMap<u64, bool>,
        /// Each lock's line: its keys' create revisions and leases; the
        /// first holds the lock.
        keys: BTreeMap<String, BTreeMap<u64, u64>>,
        revision: u64,
        silent: bool,
        took_ms: u64,
        /// Every lease is gone by its first keepalive.
        lost: bool,
        asked: Vec<&'static str>,
        queues: bool,
        /// The read before the lock call misses the holder (it came after).
        blind: bool,
        /// Revocations are applied and go unanswered.
        silent_revoke: bool,
        /// A wait for a key's deletion sees the lease holding that key
        /// revoked (its holder let go) after this many ms; else it runs out.
        released_after_ms: Option<u64>,
        /// The member a serializable read reaches is cut off: it still has
        /// every key it had.
        stale_member: bool,
        /// Keepalives alone go unanswered.
        silent_keepalive: bool,
    }

    impl Cluster {
        fn answer<T>(&self, value: T) -> Result<T, Unanswered> {
            if self.silent {
                Err(Unanswered::Unknown("timeout"))
            } else {
                Ok(value)
            }
        }

        fn held(&self, name: &str) -> bool {
            self.keys.get(name).is_some_and(|line| !line.is_empty())
        }

        fn put(&mut self, name: &str, lease: u64) -> Bound {
            self.revision += 1;
            let line = self.keys.entry(name.to_string()).or_default();
            line.insert(self.revision, lease);
            match line.keys().next() {
                Some(&first) if first == self.revision => Bound::Holds(first),
                _ => Bound::Queued(self.revision),
            }
        }

        fn drop_lease(&mut self, lease: u64) -> bool {
            let existed = self.leases.insert(lease, false) == Some(true);
            for line in self.keys.values_mut() {
                line.retain(|_, bound| *bound != lease);
            }
            existed
        }
    }

    impl EtcdSession for Cluster {
        fn now_ms(&self) -> u64 {
            self.now_ms
        }

        async fn is_taken(&mut self, name: &str) -> Result<bool, Unanswered> {
            self.asked.push("is_taken");
            let taken = self.held(name) && !self.blind;
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
            if self.held(name) && !self.queues {
                self.revision += 1;
                return self.answer(Bound::Refused);
            }
            let bound = self.put(name, lease);
            self.answer(bound)
        }

        async fn join(&mut self, name: &str, lease: u64) -> Result<Bound, Unanswered> {
            self.asked.push("join");
            let bound = self.put(name, lease);
            self.answer(bound)
        }

        async fn line(&mut self, name: &str, own: u64) -> Result<Line, Unanswered> {
            self.asked.push("line");
            let line = self.keys.get(name).cloned().unwrap_or_default();
            let answer = if !line.contains_key(&own) {
                Line::Gone
            } else {
                match line.range(..own).next_back() {
                    None => Line::First,
                    Some((&created, _)) => Line::After(Before {
                        key: format!("{name}/{created}"),
                        created,
                        seen: self.revision,
                    }),
                }
            };
            self.answer(answer)
        }

        async fn wait_for_delete(
            &mut self,
            before: &Before,
            until_ms: u64,
        ) -> Result<Woken, Unanswered> {
            self.asked.push("wait");
            let (name, _) = before.key.rsplit_once('/').expect("name/revision");
            let holder = self.keys.get(name).and_then(|line| line.get(&before.created)).copied();
            let Some(holder) = holder else { return self.answer(Woken::Already) };
            match self.released_after_ms {
                Some(after) if self.now_ms + after < until_ms => {
                    self.now_ms += after;
                    self.drop_lease(holder);
                    self.answer(Woken::Watch)
                }
                _ => {
                    self.now_ms = self.now_ms.max(until_ms);
                    self.answer(Woken::TimedOut)
                }
            }
        }

        async fn campaign(
            &mut self,
            name: &str,
            lease: u64,
            until_ms: u64,
        ) -> Result<Bound, Unanswered> {
            self.asked.push("campaign");
            if self.leases.get(&lease) != Some(&true) {
                return self.answer(Bound::Refused);
            }
            let line = format!("election/{name}");
            let own = self
                .keys
                .get(&line)
                .and_then(|keys| keys.iter().find(|&(_, &l)| l == lease).map(|(&own, _)| own));
            let bound = match own {
                Some(own) if self.keys[&line].keys().next() == Some(&own) => Bound::Holds(own),
                Some(own) => Bound::Queued(own),
                None => self.put(&line, lease),
            };
            if let Bound::Queued(_) = bound {
                self.now_ms = self.now_ms.max(until_ms);
            }
            self.answer(bound)
        }

        async fn resign(&mut self, name: &str, lease: u64, own: u64) -> Result<bool, Unanswered> {
            self.asked.push("resign");
            let line = self.keys.entry(format!("election/{name}")).or_default();
            let there = line.get(&own) == Some(&lease);
            if there {
                line.remove(&own);
            }
            self.answer(there)
        }

        async fn keep_alive(&mut self, lease: u64) -> Result<bool, Unanswered> {
            self.asked.push("keep_alive");
            if self.silent_keepalive {
                return Err(Unanswered::Unknown("timeout"));
            }
            let alive = !self.lost && self.leases.get(&lease) == Some(&true);
            self.answer(alive)
        }

        async fn holds(&mut self, name: &str, lease: u64, read: Read) -> Result<bool, Unanswered> {
            self.asked.push(match read {
                Read::Linearizable => "linearizable",
                Read::Serializable => "serializable",
            });
            let there = self.keys.get(name).is_some_and(|line| line.values().any(|&l| l == lease));
            match (read, self.silent) {
                // A member answers from what it has: the key as it was.
                (Read::Serializable, _) => Ok(there || self.stale_member),
                (Read::Linearizable, true) => Err(Unanswered::Unknown("timeout")),
                (Read::Linearizable, false) => Ok(there),
            }
        }

        async fn revoke(&mut self, lease: u64) -> Result<bool, Unanswered> {
            self.asked.push("revoke");
            let existed = self.drop_lease(lease);
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
        assert_eq!(cluster.keys["l"].len(), 1);
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

    fn waiter(wait_ms: u64) -> EtcdLock {
        EtcdLock::waiting(true, Waiting::Predecessor { wait_ms })
    }

    #[tokio::test]
    async fn a_waiter_wakes_once_when_the_key_before_it_goes_and_gets_a_larger_token() {
        let mut cluster = Cluster { released_after_ms: Some(100), ..Cluster::default() };
        let mut holder = EtcdLock::new(true);
        let Outcome::Ok(first) = holder.acquire(&mut cluster, "l", 2000).await else { panic!() };
        cluster.asked.clear();
        let mut next = waiter(1000);
        let Outcome::Ok(second) = next.acquire(&mut cluster, "l", 2000).await else { panic!() };
        assert!(second.fence > first.fence, "{first:?} then {second:?}");
        // No read before the put: the key joins the line at once.
        assert_eq!(cluster.asked, ["grant", "join", "line", "wait", "line"]);
        assert_eq!(next.wake_ups().woken, 1);
        assert_eq!(next.wake_ups().wasted, 0);
        assert_eq!(next.take_woken(), Some(1));
        assert_eq!(next.take_woken(), Some(0));
        assert_eq!(holder.take_woken(), None, "a client refused at once polls");
        // The old holder's lease went with its release: it holds nothing.
        assert_eq!(holder.renew(&mut cluster, "l").await, Outcome::Fail("not-held".into()));
        assert_eq!(next.renew(&mut cluster, "l").await, Outcome::Ok(()));
    }

    #[tokio::test]
    async fn a_wait_that_runs_out_reads_the_line_once_more_then_withdraws() {
        let mut cluster = Cluster::default();
        let Outcome::Ok(_) = EtcdLock::new(true).acquire(&mut cluster, "l", 2000).await else {
            panic!()
        };
        cluster.asked.clear();
        let mut next = waiter(500);
        assert_eq!(next.acquire(&mut cluster, "l", 2000).await, Outcome::Fail("busy".into()));
        assert_eq!(cluster.asked, ["grant", "join", "line", "wait", "line", "revoke"]);
        assert_eq!(cluster.keys["l"].len(), 1, "the waiter's key left the line");
        assert_eq!(next.wake_ups().woken, 0);
        // Withdrawn for certain: nothing is left for a reset to revoke.
        assert_eq!(next.reset(), Vec::<u64>::new());
    }

    #[tokio::test]
    async fn a_long_wait_keeps_its_lease_alive_a_third_of_the_ttl_at_a_time() {
        let mut cluster = Cluster::default();
        let Outcome::Ok(_) = EtcdLock::new(true).acquire(&mut cluster, "l", 2000).await else {
            panic!()
        };
        cluster.asked.clear();
        let mut next = waiter(3000);
        assert_eq!(next.acquire(&mut cluster, "l", 2000).await, Outcome::Fail("busy".into()));
        let keepalives = cluster.asked.iter().filter(|&&asked| asked == "keep_alive").count();
        let waits = cluster.asked.iter().filter(|&&asked| asked == "wait").count();
        // 3000 ms in slices of 666: five waits, a keepalive before each but
        // the first.
        assert_eq!((waits, keepalives), (5, 4), "{:?}", cluster.asked);
        // A lease that expired while its key waited: the key may have held
        // the lock for nobody before it went.
        cluster.lost = true;
        let outcome = waiter(3000).acquire(&mut cluster, "l", 2000).await;
        assert_eq!(outcome, Outcome::Info("expired".into()));
    }

    #[tokio::test]
    async fn an_unanswered_withdrawal_leaves_the_outcome_unknown() {
        let mut cluster = Cluster { silent_revoke: true, ..Cluster::default() };
        let Outcome::Ok(_) = EtcdLock::new(true).acquire(&mut cluster, "l", 2000).await else {
            panic!()
        };
        let mut next = waiter(500);
        // The key may stay in line and take the lock for nobody.
        let outcome = next.acquire(&mut cluster, "l", 2000).await;
        assert_eq!(outcome, Outcome::Info("timeout".into()));
        assert_eq!(next.reset(), vec![2]);
    }

    #[tokio::test]
    async fn a_holder_cut_off_believes_a_serializable_read_past_its_deadline() {
        for (check, after_deadline) in [
            (Check::Deadline, Outcome::Fail("session-expired".into())),
            (Check::Linearizable, Outcome::Fail("session-expired".into())),
            (Check::Serializable, Outcome::Ok(())),
        ] {
            let mut cluster = Cluster::default();
            let mut lock = EtcdLock::new(true).checking(check);
            let Outcome::Ok(_) = lock.acquire(&mut cluster, "l", 2000).await else { panic!() };
            // Cut off: keepalives and linearizable reads go unanswered, and
            // the cluster revokes the lease; the member the client reaches
            // still has the key.
            cluster.silent = true;
            cluster.stale_member = true;
            cluster.leases.insert(1, false);
            cluster.keys.clear();
            cluster.now_ms = 1999;
            assert_eq!(lock.renew(&mut cluster, "l").await, Outcome::Ok(()), "{check:?}");
            cluster.now_ms = 2500;
            assert_eq!(lock.renew(&mut cluster, "l").await, after_deadline, "{check:?}");
        }
        // Answered, a linearizable read of a key gone ends the belief early.
        let mut cluster = Cluster::default();
        let mut lock = EtcdLock::new(true).checking(Check::Linearizable);
        let Outcome::Ok(_) = lock.acquire(&mut cluster, "l", 2000).await else { panic!() };
        cluster.keys.clear();
        cluster.lost = true;
        cluster.silent_keepalive = true;
        assert_eq!(lock.renew(&mut cluster, "l").await, Outcome::Fail("not-held".into()));
    }

    #[tokio::test]
    async fn a_candidate_campaigns_leads_with_its_key_revision_and_resigns() {
        let mut cluster = Cluster::default();
        let (mut a, mut b) = (EtcdLock::campaigning(true, 500), EtcdLock::campaigning(true, 500));
        let Outcome::Ok(first) = a.acquire(&mut cluster, "e", 2000).await else { panic!() };
        assert_eq!(first.fence, Some(1));
        // b waits in line for its wait, then takes its key out of line.
        assert_eq!(b.acquire(&mut cluster, "e", 2000).await, Outcome::Fail("busy".into()));
        assert_eq!(cluster.keys["election/e"].len(), 1, "b's key left the line");
        assert_eq!(a.renew(&mut cluster, "e").await, Outcome::Ok(()));
        assert_eq!(a.release(&mut cluster, "e").await, Outcome::Ok(()));
        assert!(cluster.asked.ends_with(&["resign", "revoke"]), "{:?}", cluster.asked);
        let Outcome::Ok(second) = b.acquire(&mut cluster, "e", 2000).await else { panic!() };
        assert!(second.fence > first.fence, "{first:?} then {second:?}");
        // A leader whose key is gone resigns nothing.
        cluster.keys.clear();
        assert_eq!(b.release(&mut cluster, "e").await, Outcome::Fail("not-held".into()));
    }
}
