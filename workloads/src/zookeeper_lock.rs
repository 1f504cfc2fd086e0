//! ZooKeeper's lock, Curator's `InterProcessMutex`, written once for both
//! worlds (docs/guide.md#zookeeper). A client creates an ephemeral
//! sequential znode under the lock's parent; the lowest sequence number
//! holds the lock; every other waiter watches only the znode just before
//! its own, so a release wakes one waiter. The session's heartbeats keep the
//! znode; when the session expires, the server deletes it and the next
//! waiter holds the lock. The token is the lock znode's czxid, the zxid of
//! the transaction that created it: zxids grow with every write to the
//! ensemble, and a lock is granted in the order its znodes were created.
//!
//! Connection states are judged as Curator says: SUSPENDED (the client
//! library lost its connection and has not yet reconnected) means the
//! holder cannot know that it still holds the lock, so it stops acting as
//! the holder; LOST (the session expired) means the lock is gone. A world
//! supplies the transport ([`ZooKeeperSession`]): the simulator's asks its
//! simulated ensemble, the real world's speaks ZooKeeper's protocol.
//!
//! Two broken variants: [`Waiting::Herd`] watches the lock's parent, so
//! every release wakes every waiter; [`Suspension::KeepsActing`] goes on
//! acting as the holder through SUSPENDED, until the session is LOST.

use std::collections::BTreeMap;

pub use crate::etcd_lock::Unanswered;
pub use crate::watch::{WakeUps, Woken};
use crate::{Grant, Outcome};

/// The session's connection, as the client library last learned it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Connection {
    /// Connected, the session alive.
    Connected,
    /// Disconnected, not yet reconnected: the session may be alive or not.
    Suspended,
    /// The session expired (or was closed): its ephemeral znodes are gone.
    Lost,
}

/// A ZooKeeper ensemble, as the lock recipe speaks to it. Paths are
/// absolute (`/lockcheck/lock-0/lock-0000000003`).
#[allow(async_fn_in_trait)]
pub trait ZooKeeperSession {
    /// The client's own clock, in milliseconds.
    fn now_ms(&self) -> u64;
    /// An operation starts: a transport that bounds a whole operation,
    /// rather than each call, starts its clock here.
    fn begin(&mut self) {}
    /// The session's connection as the client library sees it now.
    fn connection(&self) -> Connection;
    /// Creates an ephemeral sequential znode `lock-` under `parent` (which
    /// exists): its path.
    async fn create_sequential(&mut self, parent: &str) -> Result<String, Unanswered>;
    /// The names of `parent`'s children.
    async fn children(&mut self, parent: &str) -> Result<Vec<String>, Unanswered>;
    /// The czxid of `path`, read afresh (a create's own `Stat` is wrong on
    /// servers before 3.8.2: ZOOKEEPER-4026), or `None` if it is gone.
    async fn czxid(&mut self, path: &str) -> Result<Option<u64>, Unanswered>;
    /// Sets a watch on `path` (an `exists` watch) and waits for it to fire,
    /// until the client's clock reads `until_ms`.
    async fn wait_for_delete(&mut self, path: &str, until_ms: u64) -> Result<Woken, Unanswered>;
    /// Sets a watch on `parent`'s children and waits for it to fire, until
    /// `until_ms` (the herd's wait).
    async fn wait_for_children(&mut self, parent: &str, until_ms: u64)
        -> Result<Woken, Unanswered>;
    /// Deletes `path`: `true` if it existed.
    async fn delete(&mut self, path: &str) -> Result<bool, Unanswered>;
    /// Between two commands of the recipe: a pause asked for there
    /// ([`crate::StallPoint::BetweenCommands`]) strikes.
    async fn between_commands(&mut self) {}
}

/// What a waiter watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Waiting {
    /// The znode just before its own: one wake-up per release.
    Predecessor,
    /// (broken) The lock's parent: every waiter wakes on every change.
    Herd,
}

/// What a holder does once its connection is SUSPENDED.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Suspension {
    /// Stops acting as the holder (Curator's rule).
    StopsActing,
    /// (broken) Acts on until the session is LOST.
    KeepsActing,
}

/// The recipe's variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Variant {
    pub waiting: Waiting,
    pub suspension: Suspension,
}

impl Variant {
    /// Curator's recipe.
    pub const CURATOR: Variant =
        Variant { waiting: Waiting::Predecessor, suspension: Suspension::StopsActing };
}

/// The parent znode of lock `name`.
pub fn parent_path(name: &str) -> String {
    format!("/lockcheck/{name}")
}

/// The sequence number of a sequential znode's name (`lock-0000000042`).
pub fn sequence(name: &str) -> Option<u64> {
    let digits = name.rsplit('/').next()?.strip_prefix("lock-")?;
    (digits.len() == 10).then(|| digits.parse().ok()).flatten()
}

/// One logical client's ZooKeeper locks: the znode of each lock it holds.
#[derive(Debug, Clone)]
pub struct ZooKeeperLock {
    fencing: bool,
    variant: Variant,
    /// How long an acquire waits in line before it gives up (Curator's
    /// `acquire(time, unit)`), in ms.
    wait_ms: u64,
    held: BTreeMap<String, String>,
    wake_ups: WakeUps,
}

impl ZooKeeperLock {
    /// A client that hands out the czxid as the token when `fencing`, and
    /// waits in line at most `wait_ms` for a lock.
    pub fn new(fencing: bool, variant: Variant, wait_ms: u64) -> ZooKeeperLock {
        ZooKeeperLock {
            fencing,
            variant,
            wait_ms,
            held: BTreeMap::new(),
            wake_ups: WakeUps::default(),
        }
    }

    /// The wake-ups counted so far.
    pub fn wake_ups(&self) -> WakeUps {
        self.wake_ups
    }

    /// The watches that woke this client since it was last asked.
    pub fn take_woken(&mut self) -> u64 {
        self.wake_ups.take_woken()
    }

    /// Acquires `name`: joins the line, and waits for its turn up to the
    /// client's wait.
    pub async fn acquire<S: ZooKeeperSession>(
        &mut self,
        session: &mut S,
        name: &str,
    ) -> Outcome<Grant> {
        session.begin();
        match session.connection() {
            Connection::Connected => {}
            Connection::Suspended => return Outcome::Fail("unavailable".into()),
            Connection::Lost => return Outcome::Fail("session-expired".into()),
        }
        let parent = parent_path(name);
        let until = session.now_ms() + self.wait_ms;
        let path = match session.create_sequential(&parent).await {
            Ok(path) => path,
            Err(Unanswered::NotSent) => return Outcome::Fail("unavailable".into()),
            // The znode may exist: only the session's end removes it.
            Err(Unanswered::Unknown(reason)) => return Outcome::Info(reason.into()),
        };
        let Some(own) = sequence(&path) else {
            return Outcome::Info(format!("bad sequential znode {path}"));
        };
        session.between_commands().await;
        let mut woken = false;
        // The wait ran out: as Curator does, the line is read once more,
        // and the lock taken if our turn came meanwhile; else we leave it.
        let mut timed_out = false;
        loop {
            let children = match session.children(&parent).await {
                Ok(children) => children,
                Err(_) => return self.leave(session, &path, "unavailable").await,
            };
            let mut line: Vec<(u64, &str)> = children
                .iter()
                .filter_map(|child| Some((sequence(child)?, child.as_str())))
                .collect();
            line.sort_unstable();
            let Some(at) = line.iter().position(|&(seq, _)| seq == own) else {
                // Our znode is gone: the session expired while we waited.
                // It may have come first before it went, holding the lock
                // for nobody while others were refused: unknown.
                return Outcome::Info("session-expired".into());
            };
            if at == 0 {
                return self.hold(session, name, path).await;
            }
            if timed_out {
                return self.leave(session, &path, "busy").await;
            }
            if woken {
                self.wake_ups.wasted += 1;
            }
            let wait = match self.variant.waiting {
                Waiting::Predecessor => {
                    let before = format!("{parent}/{}", line[at - 1].1);
                    session.wait_for_delete(&before, until).await
                }
                Waiting::Herd => session.wait_for_children(&parent, until).await,
            };
            match wait {
                Ok(wait) => {
                    woken = self.wake_ups.count(wait);
                    timed_out = wait == Woken::TimedOut;
                }
                Err(_) => return self.leave(session, &path, "unavailable").await,
            }
        }
    }

    /// Our znode is first in line: the lock is ours once its czxid is read
    /// (which also proves the znode, and the session, still there).
    async fn hold<S: ZooKeeperSession>(
        &mut self,
        session: &mut S,
        name: &str,
        path: String,
    ) -> Outcome<Grant> {
        match session.czxid(&path).await {
            Ok(Some(czxid)) => {
                self.held.insert(name.to_string(), path.clone());
                let fence = self.fencing.then_some(czxid);
                Outcome::Ok(Grant { fence, lease: Some(path) })
            }
            Ok(None) => Outcome::Fail("session-expired".into()),
            Err(_) => self.leave(session, &path, "unavailable").await,
        }
    }

    /// Gives up waiting: deletes our znode, so that it cannot take the lock
    /// with nobody believing it holds it. If the delete goes unanswered,
    /// the znode may stay until the session ends; if it was gone already,
    /// its session ended, and it may have held the lock before it went:
    /// either way the outcome is unknown.
    async fn leave<S: ZooKeeperSession>(
        &mut self,
        session: &mut S,
        path: &str,
        reason: &str,
    ) -> Outcome<Grant> {
        match session.delete(path).await {
            Ok(true) => Outcome::Fail(reason.into()),
            // Gone before we deleted it, with its session: it may have come
            // first meanwhile, holding the lock for nobody, so the refusal
            // is not certain.
            Ok(false) => Outcome::Info("session-expired".into()),
            Err(Unanswered::NotSent) if session.connection() == Connection::Lost => {
                Outcome::Info("session-expired".into())
            }
            Err(Unanswered::NotSent) => Outcome::Info("unavailable".into()),
            Err(Unanswered::Unknown(why)) => Outcome::Info(why.into()),
        }
    }

    /// A holder's check of its lock (ZooKeeper has no lease to renew: the
    /// library's heartbeats keep the session): the lock is still to be
    /// acted on while connected, not once SUSPENDED (Curator's rule), and
    /// never once LOST.
    pub fn renew<S: ZooKeeperSession>(&mut self, session: &S, name: &str) -> Outcome<()> {
        if !self.held.contains_key(name) {
            return Outcome::Fail("not-held".into());
        }
        match (session.connection(), self.variant.suspension) {
            (Connection::Connected, _) | (Connection::Suspended, Suspension::KeepsActing) => {
                Outcome::Ok(())
            }
            (Connection::Suspended, Suspension::StopsActing) => Outcome::Fail("suspended".into()),
            (Connection::Lost, _) => Outcome::Fail("session-expired".into()),
        }
    }

    /// Releases `name` by deleting its znode. A znode already gone (its
    /// session expired) was no lock to release.
    pub async fn release<S: ZooKeeperSession>(
        &mut self,
        session: &mut S,
        name: &str,
    ) -> Outcome<()> {
        session.begin();
        let Some(path) = self.held.remove(name) else {
            return Outcome::Fail("not-held".into());
        };
        if session.connection() == Connection::Lost {
            return Outcome::Fail("not-held".into());
        }
        match session.delete(&path).await {
            Ok(true) => Outcome::Ok(()),
            Ok(false) => Outcome::Fail("not-held".into()),
            // Unsent while suspended: the znode stays until the session
            // ends, which a new session (the workload's reset) brings.
            Err(Unanswered::NotSent) => Outcome::Info("unavailable".into()),
            Err(Unanswered::Unknown(reason)) => Outcome::Info(reason.into()),
        }
    }

    /// A new session: the locks held are forgotten (the world closes the
    /// old session, which deletes its znodes, or lets it expire).
    pub fn reset(&mut self) {
        self.held.clear();
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::{
        sequence, Connection, Suspension, Unanswered, Variant, Waiting, Woken, ZooKeeperLock,
        ZooKeeperSession,
    };
    use crate::Outcome;

    /// One server applying everything at once, shared by several sessions
    /// through `session`: znodes with their owner and czxid.
    #[derive(Debug, Default)]
    struct Ensemble {
        zxid: u64,
        next_seq: BTreeMap<String, u64>,
        /// path -> (session, czxid)
        znodes: BTreeMap<String, (u32, u64)>,
    }

    /// One client's session on the ensemble: deletes made by the others
    /// are seen when it waits (a watch fires if its target is gone by
    /// then, else it times out), which is enough for one thread.
    struct Client<'a> {
        ensemble: &'a mut Ensemble,
        id: u32,
        state: Connection,
        now_ms: u64,
        silent: bool,
    }

    impl ZooKeeperSession for Client<'_> {
        fn now_ms(&self) -> u64 {
            self.now_ms
        }

        fn connection(&self) -> Connection {
            self.state
        }

        async fn create_sequential(&mut self, parent: &str) -> Result<String, Unanswered> {
            if self.silent {
                return Err(Unanswered::Unknown("timeout"));
            }
            let seq = self.ensemble.next_seq.entry(parent.to_string()).or_default();
            let path = format!("{parent}/lock-{seq:010}");
            *seq += 1;
            self.ensemble.zxid += 1;
            self.ensemble.znodes.insert(path.clone(), (self.id, self.ensemble.zxid));
            Ok(path)
        }

        async fn children(&mut self, parent: &str) -> Result<Vec<String>, Unanswered> {
            let prefix = format!("{parent}/");
            Ok(self
                .ensemble
                .znodes
                .keys()
                .filter_map(|path| path.strip_prefix(&prefix).map(str::to_string))
                .collect())
        }

        async fn czxid(&mut self, path: &str) -> Result<Option<u64>, Unanswered> {
            Ok(self.ensemble.znodes.get(path).map(|&(_, czxid)| czxid))
        }

        async fn wait_for_delete(
            &mut self,
            path: &str,
            until_ms: u64,
        ) -> Result<Woken, Unanswered> {
            match self.ensemble.znodes.contains_key(path) {
                true => {
                    self.now_ms = until_ms;
                    Ok(Woken::TimedOut)
                }
                false => Ok(Woken::Already),
            }
        }

        async fn wait_for_children(&mut self, _: &str, until_ms: u64) -> Result<Woken, Unanswered> {
            self.now_ms = until_ms;
            Ok(Woken::TimedOut)
        }

        async fn delete(&mut self, path: &str) -> Result<bool, Unanswered> {
            if self.silent {
                return Err(Unanswered::Unknown("timeout"));
            }
            self.ensemble.zxid += 1;
            Ok(self.ensemble.znodes.remove(path).is_some())
        }
    }

    fn client(ensemble: &mut Ensemble, id: u32) -> Client<'_> {
        Client { ensemble, id, state: Connection::Connected, now_ms: 0, silent: false }
    }

    #[test]
    fn sequence_numbers_read_from_ten_digits() {
        assert_eq!(sequence("/lockcheck/l/lock-0000000042"), Some(42));
        assert_eq!(sequence("lock-0000000000"), Some(0));
        assert_eq!(sequence("lock-42"), None);
        assert_eq!(sequence("other-0000000001"), None);
    }

    #[tokio::test]
    async fn a_waiter_gives_up_its_place_and_tokens_grow() {
        let mut ensemble = Ensemble::default();
        let (mut a, mut b) = (
            ZooKeeperLock::new(true, Variant::CURATOR, 500),
            ZooKeeperLock::new(true, Variant::CURATOR, 500),
        );
        let Outcome::Ok(first) = a.acquire(&mut client(&mut ensemble, 1), "l").await else {
            panic!()
        };
        assert_eq!(first.fence, Some(1));
        // b waits behind a, times out, and takes its znode back.
        assert_eq!(
            b.acquire(&mut client(&mut ensemble, 2), "l").await,
            Outcome::Fail("busy".into())
        );
        assert_eq!(ensemble.znodes.len(), 1);
        assert_eq!(a.renew(&client(&mut ensemble, 1), "l"), Outcome::Ok(()));
        assert_eq!(
            b.release(&mut client(&mut ensemble, 2), "l").await,
            Outcome::Fail("not-held".into())
        );
        assert_eq!(a.release(&mut client(&mut ensemble, 1), "l").await, Outcome::Ok(()));
        let Outcome::Ok(second) = b.acquire(&mut client(&mut ensemble, 2), "l").await else {
            panic!()
        };
        assert!(second.fence > first.fence, "{first:?} then {second:?}");
        let mut unfenced = ZooKeeperLock::new(false, Variant::CURATOR, 500);
        let Outcome::Ok(grant) = unfenced.acquire(&mut client(&mut ensemble, 3), "m").await else {
            panic!()
        };
        assert_eq!(grant.fence, None);
    }

    #[tokio::test]
    async fn suspended_stops_the_holder_unless_it_is_the_broken_variant() {
        let mut ensemble = Ensemble::default();
        let broken = Variant { suspension: Suspension::KeepsActing, ..Variant::CURATOR };
        let (mut curator, mut acting) = (
            ZooKeeperLock::new(true, Variant::CURATOR, 500),
            ZooKeeperLock::new(true, broken, 500),
        );
        let Outcome::Ok(_) = curator.acquire(&mut client(&mut ensemble, 1), "l").await else {
            panic!()
        };
        let Outcome::Ok(_) = acting.acquire(&mut client(&mut ensemble, 2), "m").await else {
            panic!()
        };
        let mut suspended = client(&mut ensemble, 1);
        suspended.state = Connection::Suspended;
        assert_eq!(curator.renew(&suspended, "l"), Outcome::Fail("suspended".into()));
        assert_eq!(acting.renew(&suspended, "m"), Outcome::Ok(()));
        suspended.state = Connection::Lost;
        assert_eq!(acting.renew(&suspended, "m"), Outcome::Fail("session-expired".into()));
        // A lost session's znode is gone: nothing to release.
        assert_eq!(acting.release(&mut suspended, "m").await, Outcome::Fail("not-held".into()));
        // No acquire is tried while suspended.
        suspended.state = Connection::Suspended;
        assert_eq!(curator.acquire(&mut suspended, "n").await, Outcome::Fail("unavailable".into()));
    }

    #[tokio::test]
    async fn an_unanswered_create_or_withdrawal_is_unknown() {
        let mut ensemble = Ensemble::default();
        let mut silent = client(&mut ensemble, 1);
        silent.silent = true;
        let mut lock = ZooKeeperLock::new(true, Variant::CURATOR, 500);
        assert_eq!(lock.acquire(&mut silent, "l").await, Outcome::Info("timeout".into()));
        let mut herd =
            ZooKeeperLock::new(true, Variant { waiting: Waiting::Herd, ..Variant::CURATOR }, 500);
        let Outcome::Ok(_) = herd.acquire(&mut client(&mut ensemble, 2), "m").await else {
            panic!()
        };
        assert_eq!(herd.wake_ups().woken, 0);
    }
}
