//! etcd's lock over `sim-etcd`: the recipe of `lockcheck_workloads::etcd_lock`,
//! which the real world runs too, over the simulator's connections to the
//! members. The simulated TryLock answers busy by itself and never blocks,
//! so no read comes before it.

use lockcheck_workloads::etcd_lock::{Bound, EtcdLock, EtcdSession, Unanswered};
use lockcheck_workloads::Grant;

use crate::host::{Connection, Failure};
use crate::protocol::{Request, Response};
use crate::service::{Link, Pending, SimSession};

/// One client's session of the simulated etcd (`crate::etcd::EtcdCluster`):
/// the locks it holds and their leases.
#[derive(Debug)]
pub(crate) struct EtcdClient {
    etcd: EtcdLock,
}

impl EtcdClient {
    pub(crate) fn new(fencing: bool) -> EtcdClient {
        EtcdClient { etcd: EtcdLock::new(fencing) }
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
        Box::pin(async move { self.etcd.acquire(&mut members(link), key, ttl_ms).await })
    }

    fn release<'a>(
        &'a mut self,
        link: &'a mut Link,
        key: &'a str,
        _: &'a Grant,
    ) -> Pending<'a, ()> {
        Box::pin(async move { self.etcd.release(&mut members(link), key).await })
    }

    fn renew<'a>(
        &'a mut self,
        link: &'a mut Link,
        key: &'a str,
        _: &'a Grant,
        _: u64,
    ) -> Pending<'a, ()> {
        Box::pin(async move { self.etcd.renew(&mut members(link), key).await })
    }

    fn reset(&mut self) {
        self.etcd.reset();
    }
}

/// One client's connections to the members, and the member it asks first
/// (an etcd client configured with one endpoint near it).
pub(crate) struct Members<'a> {
    connections: &'a mut [Connection],
    local: usize,
}

fn unanswered(failure: Failure) -> Unanswered {
    match failure {
        Failure::NotSent => Unanswered::NotSent,
        Failure::Unknown => Unanswered::Unknown("timeout"),
    }
}

impl<'a> Members<'a> {
    pub(crate) fn new(connections: &'a mut [Connection], local: usize) -> Members<'a> {
        Members { connections, local }
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

impl EtcdSession for Members<'_> {
    fn now_ms(&self) -> u64 {
        turmoil::sim_elapsed().unwrap_or_default().as_millis() as u64
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

    async fn keep_alive(&mut self, lease: u64) -> Result<bool, Unanswered> {
        self.int_one(&Request::LeaseKeepAlive { lease }).await
    }

    async fn between_commands(&mut self) {
        self.connections[self.local % self.connections.len()].between_commands().await;
    }

    async fn revoke(&mut self, lease: u64) -> Result<bool, Unanswered> {
        self.int_one(&Request::LeaseRevoke { lease }).await
    }
}
