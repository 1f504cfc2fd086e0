//! The etcd lock recipe of docs/guide.md#etcd, as a client of `sim-etcd`: a fresh
//! lease with the TTL for each acquisition, TryLock with it, the lock key's
//! create revision as the fencing token, a keepalive to renew, and a revoke
//! to release.
//!
//! A renewal is judged as etcd's client library judges its session: a
//! keepalive that gets no answer does not end the session until the
//! library's own deadline, a TTL after the last answered keepalive (counted,
//! more carefully than etcd's client does, from when it was sent), has
//! passed. Until then the holder believes it holds the lock: a holder cut off
//! from the cluster goes on working while the cluster revokes its lease
//! (docs/truth-table.md), which only a fencing token makes harmless.

use lockcheck_workloads::{Grant, Outcome};

use crate::client::SimClient;
use crate::host::Failure;
use crate::protocol::{Request, Response};

fn now_ms() -> i64 {
    turmoil::sim_elapsed().unwrap_or_default().as_millis() as i64
}

impl SimClient {
    /// Sends `request` to the leader, starting at this client's own member
    /// (an etcd client configured with one endpoint near it): a `NotLeader`
    /// names the member to ask instead, a member that cannot be reached or
    /// does not answer gives way to the next. Every request is idempotent
    /// (TryLock finds its own key again), so asking again after no answer is
    /// safe. At most two rounds of the members.
    async fn ask_leader(&mut self, request: &Request) -> Result<Response, Failure> {
        let members = self.instances.len();
        let mut at = self.local_member % members;
        let mut unanswered = false;
        for _ in 0..2 * members {
            let outcome = self.instances[at].call(request).await;
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

    pub(crate) async fn acquire_etcd(&mut self, key: &str, ttl_ms: u64) -> Outcome<Grant> {
        // The lease's TTL may start as soon as the request leaves.
        let sent = now_ms();
        let lease = match self.ask_leader(&Request::LeaseGrant { ttl_ms }).await {
            Ok(Response::Int(lease)) => lease as u64,
            // A lease alone holds nothing: whatever became of it, no lock
            // was taken.
            _ => return Outcome::Fail("unavailable".into()),
        };
        let revision = match self.ask_leader(&Request::TryLock { name: key.into(), lease }).await {
            Ok(Response::Fence(revision)) => revision,
            Ok(_) => {
                // Busy: give the lease back (it would expire anyway).
                let _ = self.ask_leader(&Request::LeaseRevoke { lease }).await;
                return Outcome::Fail("busy".into());
            }
            Err(Failure::NotSent) => return Outcome::Fail("unavailable".into()),
            Err(Failure::Unknown) => return Outcome::Info("timeout".into()),
        };
        self.session_deadline_ms = sent + ttl_ms as i64;
        // A slow grant (an election, a retry) spent part of the lease: the
        // session's keepalive, due every third of the TTL, renews it before
        // the lock is used, or the lock is not taken to be held.
        if now_ms() - sent >= ttl_ms as i64 / 3 {
            let renewed_from = now_ms();
            match self.ask_leader(&Request::LeaseKeepAlive { lease }).await {
                Ok(Response::Int(1)) => self.session_deadline_ms = renewed_from + ttl_ms as i64,
                Ok(_) => return Outcome::Fail("expired".into()),
                Err(_) => return Outcome::Info("timeout".into()),
            }
        }
        let fence = self.fencing.then_some(revision);
        Outcome::Ok(Grant { fence, lease: Some(lease.to_string()) })
    }

    pub(crate) async fn renew_etcd(&mut self, grant: &Grant, ttl_ms: u64) -> Outcome<()> {
        let Some(lease) = grant.lease.as_deref().and_then(|lease| lease.parse().ok()) else {
            return Outcome::Fail("not-held".into());
        };
        let sent = now_ms();
        match self.ask_leader(&Request::LeaseKeepAlive { lease }).await {
            Ok(Response::Int(1)) => {
                self.session_deadline_ms = sent + ttl_ms as i64;
                Outcome::Ok(())
            }
            Ok(_) => Outcome::Fail("not-held".into()),
            // The library keeps the session until its deadline.
            Err(_) if now_ms() < self.session_deadline_ms => Outcome::Ok(()),
            Err(_) => Outcome::Fail("session-expired".into()),
        }
    }

    pub(crate) async fn release_etcd(&mut self, grant: &Grant) -> Outcome<()> {
        let Some(lease) = grant.lease.as_deref().and_then(|lease| lease.parse().ok()) else {
            return Outcome::Fail("not-held".into());
        };
        match self.ask_leader(&Request::LeaseRevoke { lease }).await {
            Ok(Response::Int(1)) => Outcome::Ok(()),
            Ok(_) => Outcome::Fail("not-held".into()),
            Err(Failure::NotSent) => Outcome::Fail("unavailable".into()),
            Err(Failure::Unknown) => Outcome::Info("timeout".into()),
        }
    }
}
