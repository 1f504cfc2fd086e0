//! etcd's lock over `sim-etcd`: the recipe of `lockcheck_workloads::etcd_lock`,
//! which the real world runs too, over the simulator's connections to the
//! members. The simulated TryLock answers busy by itself and never blocks,
//! so no read comes before it. The waiting variant (`Mutex.Lock`) puts its
//! key in line and watches the key before it, a watch the leader answers
//! as a long poll.

use lockcheck_workloads::etcd_lock::{
    Before, Bound, Check, EtcdLock, EtcdSession, Line, Read, Unanswered, Waiting,
};
use lockcheck_workloads::watch::Woken;
use lockcheck_workloads::Grant;

use crate::host::{Caller, Connection, Failure};
use crate::protocol::{Request, Response};
use crate::service::{Link, Pending, SimSession};

/// One client's session of the simulated etcd (`crate::etcd::EtcdCluster`):
/// the locks it holds and their leases.
#[derive(Debug)]
pub(crate) struct EtcdClient {
    fencing: bool,
    waits: bool,
    /// What a holder whose keepalive goes unanswered asks before it goes on.
    check: Check,
    /// A candidate in etcd's election (`Campaign`, `Resign`).
    campaigns: bool,
    /// Made at the first call, when the client's deadline is known (a
    /// waiter waits in line for four of its requests' deadlines, a TTL
    /// with the simulator's deadline of a quarter TTL, watching half a
    /// deadline at a time).
    etcd: Option<EtcdLock>,
}

impl EtcdClient {
    pub(crate) fn new(fencing: bool, waits: bool) -> EtcdClient {
        EtcdClient { fencing, waits, check: Check::Deadline, campaigns: false, etcd: None }
    }

    /// A candidate in etcd's election: it campaigns, waiting in line as a
    /// waiter for the lock does (four of its requests' deadlines, asked
    /// half a deadline at a time).
    pub(crate) fn campaigning(fencing: bool) -> EtcdClient {
        EtcdClient { campaigns: true, ..EtcdClient::new(fencing, true) }
    }

    /// A client whose holder checks as `check` says when its keepalive
    /// goes unanswered.
    pub(crate) fn checking(self, check: Check) -> EtcdClient {
        EtcdClient { check, ..self }
    }

    /// The lock, and the members as `link`'s connections.
    fn parts<'a>(&'a mut self, link: &'a mut Link) -> (&'a mut EtcdLock, Members<'a>) {
        let members = members(link);
        let waiting = match self.waits {
            true => Waiting::Predecessor { wait_ms: members.deadline_ms() * 4 },
            false => Waiting::TryOnce,
        };
        let (fencing, check, campaigns) = (self.fencing, self.check, self.campaigns);
        let etcd = self.etcd.get_or_insert_with(|| match (campaigns, waiting) {
            (true, Waiting::Predecessor { wait_ms }) => EtcdLock::campaigning(fencing, wait_ms),
            _ => EtcdLock::waiting(fencing, waiting).checking(check),
        });
        (etcd, members)
    }
}

/// The members as `link`'s connections, asked first at the client's own
/// (client 3 at member 3, modulo their number).
fn members(link: &mut Link) -> Members<'_> {
    let local = link.number();
    Members::new(&mut link.instances, local)
}

impl SimSession for EtcdClient {
    fn acquire<'a>(
        &'a mut self,
        link: &'a mut Link,
        key: &'a str,
        ttl_ms: u64,
    ) -> Pending<'a, Grant> {
        Box::pin(async move {
            let (etcd, mut members) = self.parts(link);
            etcd.acquire(&mut members, key, ttl_ms).await
        })
    }

    fn release<'a>(
        &'a mut self,
        link: &'a mut Link,
        key: &'a str,
        _: &'a Grant,
    ) -> Pending<'a, ()> {
        Box::pin(async move {
            let (etcd, mut members) = self.parts(link);
            etcd.release(&mut members, key).await
        })
    }

    fn renew<'a>(
        &'a mut self,
        link: &'a mut Link,
        key: &'a str,
        _: &'a Grant,
        _: u64,
    ) -> Pending<'a, ()> {
        Box::pin(async move {
            let (etcd, mut members) = self.parts(link);
            etcd.renew(&mut members, key).await
        })
    }

    fn reset(&mut self) {
        if let Some(etcd) = &mut self.etcd {
            etcd.reset();
        }
    }

    /// A waiter's wake-ups; a client that is refused at once polls instead.
    fn take_wake_ups(&mut self) -> Option<u64> {
        match &mut self.etcd {
            Some(etcd) => etcd.take_woken(),
            None => self.waits.then_some(0),
        }
    }
}

/// One client's connections to the members, and the member it asks first
/// (an etcd client configured with one endpoint near it).
pub(crate) struct Members<'a, C: Caller = Connection> {
    connections: &'a mut [C],
    local: usize,
}

/// etcd's recipe's transport over any [`Caller`]s, one per member, asked
/// first at `local`: the one the simulator's clients use, for a model
/// checker to drive the same recipe code against the same state machine
/// ([`crate::etcd::EtcdMachine`]).
pub fn etcd_over<C: Caller>(callers: &mut [C], local: usize) -> impl EtcdSession + '_ {
    Members::new(callers, local)
}

fn unanswered(failure: Failure) -> Unanswered {
    match failure {
        Failure::NotSent => Unanswered::NotSent,
        Failure::Unknown => Unanswered::Unknown("timeout"),
    }
}

impl<'a, C: Caller> Members<'a, C> {
    pub(crate) fn new(connections: &'a mut [C], local: usize) -> Members<'a, C> {
        Members { connections, local }
    }

    /// The client's deadline for one request, in ms.
    fn deadline_ms(&self) -> u64 {
        self.connections.first().map_or(1, |connection| connection.deadline_ms())
    }

    /// Sends `request` to the leader, starting at the client's own member: a
    /// `NotLeader` names the member to ask instead, a member that cannot be
    /// reached or does not answer gives way to the next. Every request is
    /// idempotent (TryLock finds its own key again), so asking again after
    /// no answer is safe. At most two rounds of the members.
    async fn ask_leader(&mut self, request: &Request) -> Result<Response, Failure> {
        let members = self.connections.len();
        let mut at = self.local % members;
        let mut unanswered = false;
        for _ in 0..2 * members {
            let outcome = self.connections[at].call(request).await;
            match outcome {
                Ok(Response::NotLeader { leader: Some(leader) })
                    if (leader as usize) < members && leader as usize != at =>
                {
                    at = leader as usize;
                }
                Ok(Response::NotLeader { .. }) | Err(Failure::NotSent) => at = (at + 1) % members,
                Err(Failure::Unknown) => {
                    unanswered = true;
                    at = (at + 1) % members;
                }
                Ok(_) => return outcome,
            }
        }
        // Never applied, unless some member took it and went silent.
        if unanswered {
            Err(Failure::Unknown)
        } else {
            Err(Failure::NotSent)
        }
    }

    /// `request`'s reply is `Int(1)`.
    async fn int_one(&mut self, request: &Request) -> Result<bool, Unanswered> {
        match self.ask_leader(request).await {
            Ok(reply) => Ok(reply == Response::Int(1)),
            Err(failure) => Err(unanswered(failure)),
        }
    }
}

impl<C: Caller> EtcdSession for Members<'_, C> {
    fn now_ms(&self) -> u64 {
        self.connections[self.local % self.connections.len()].now_ms()
    }

    async fn is_taken(&mut self, _name: &str) -> Result<bool, Unanswered> {
        Ok(false)
    }

    /// The simulated cluster grants the TTL asked for.
    async fn grant(&mut self, ttl_ms: u64) -> Result<(u64, u64), Unanswered> {
        match self.ask_leader(&Request::LeaseGrant { ttl_ms }).await {
            Ok(Response::Int(lease)) => Ok((lease as u64, ttl_ms)),
            // Not a lease: nothing holds the lock either way.
            Ok(_) => Err(Unanswered::NotSent),
            Err(failure) => Err(unanswered(failure)),
        }
    }

    async fn lock(&mut self, name: &str, lease: u64) -> Result<Bound, Unanswered> {
        // The simulated TryLock puts no key when the lock is taken.
        match self.ask_leader(&Request::TryLock { name: name.into(), lease }).await {
            Ok(Response::Fence(revision)) => Ok(Bound::Holds(revision)),
            Ok(_) => Ok(Bound::Refused),
            Err(failure) => Err(unanswered(failure)),
        }
    }

    async fn join(&mut self, name: &str, lease: u64) -> Result<Bound, Unanswered> {
        match self.ask_leader(&Request::Lock { name: name.into(), lease }).await {
            Ok(Response::Line { own: Some(own), before: None }) => Ok(Bound::Holds(own)),
            Ok(Response::Line { own: Some(own), before: Some(_) }) => Ok(Bound::Queued(own)),
            // The lease is gone: no key was put.
            Ok(_) => Ok(Bound::Refused),
            Err(failure) => Err(unanswered(failure)),
        }
    }

    async fn line(&mut self, name: &str, own: u64) -> Result<Line, Unanswered> {
        match self.ask_leader(&Request::LockLine { name: name.into(), own }).await {
            Ok(Response::Line { own: None, .. }) => Ok(Line::Gone),
            Ok(Response::Line { before: None, .. }) => Ok(Line::First),
            Ok(Response::Line { before: Some(created), .. }) => {
                Ok(Line::After(Before { key: name.to_string(), created, seen: 0 }))
            }
            Ok(_) => Err(Unanswered::Unknown("bad-reply")),
            Err(failure) => Err(unanswered(failure)),
        }
    }

    async fn wait_for_delete(
        &mut self,
        before: &Before,
        until_ms: u64,
    ) -> Result<Woken, Unanswered> {
        // One watch is one request: it waits at most half the request's
        // deadline, and the recipe watches again if it has time left.
        let wait_ms = until_ms.saturating_sub(self.now_ms()).min(self.deadline_ms() / 2);
        if wait_ms == 0 {
            return Ok(Woken::TimedOut);
        }
        let watch =
            Request::WatchDelete { name: before.key.clone(), created: before.created, wait_ms };
        match self.ask_leader(&watch).await {
            Ok(Response::Int(2)) => Ok(Woken::Already),
            Ok(Response::Int(1)) => Ok(Woken::Watch),
            Ok(Response::Int(_)) => Ok(Woken::TimedOut),
            Ok(_) => Err(Unanswered::Unknown("bad-reply")),
            Err(failure) => Err(unanswered(failure)),
        }
    }

    /// One campaign request waits at most half the request's deadline; the
    /// recipe asks again while its wait lasts.
    async fn campaign(
        &mut self,
        name: &str,
        lease: u64,
        until_ms: u64,
    ) -> Result<Bound, Unanswered> {
        let wait_ms = until_ms.saturating_sub(self.now_ms()).min(self.deadline_ms() / 2);
        let request = Request::Campaign { name: name.into(), lease, wait_ms };
        match self.ask_leader(&request).await {
            Ok(Response::Line { own: Some(own), before: None }) => Ok(Bound::Holds(own)),
            Ok(Response::Line { own: Some(own), before: Some(_) }) => Ok(Bound::Queued(own)),
            Ok(Response::Line { own: None, .. }) => Ok(Bound::Refused),
            Ok(_) => Err(Unanswered::Unknown("bad-reply")),
            Err(failure) => Err(unanswered(failure)),
        }
    }

    async fn resign(&mut self, name: &str, lease: u64, own: u64) -> Result<bool, Unanswered> {
        self.int_one(&Request::Resign { name: name.into(), lease, own }).await
    }

    async fn keep_alive(&mut self, lease: u64) -> Result<bool, Unanswered> {
        self.int_one(&Request::LeaseKeepAlive { lease }).await
    }

    /// A linearizable read goes through the leader's log; a serializable
    /// one is answered by the client's own member from what it applied.
    async fn holds(&mut self, name: &str, lease: u64, read: Read) -> Result<bool, Unanswered> {
        let request = Request::LockHeld {
            name: name.into(),
            lease,
            serializable: read == Read::Serializable,
        };
        let answer = match read {
            Read::Linearizable => self.ask_leader(&request).await,
            Read::Serializable => {
                let local = self.local % self.connections.len();
                self.connections[local].call(&request).await
            }
        };
        match answer {
            Ok(Response::Int(held)) => Ok(held == 1),
            Ok(_) => Err(Unanswered::Unknown("bad-reply")),
            Err(failure) => Err(unanswered(failure)),
        }
    }

    async fn between_commands(&mut self) {
        self.connections[self.local % self.connections.len()].between_commands().await;
    }

    async fn revoke(&mut self, lease: u64) -> Result<bool, Unanswered> {
        self.int_one(&Request::LeaseRevoke { lease }).await
    }
}
