//! Redlock over five independent simulated Redis: the recipe of
//! `lockcheck_workloads::redlock`, which the real world runs too, over the
//! simulator's connections. The instances are asked in turn, each call
//! ending within the client's deadline. The five instances are a
//! simulated service of their own ([`FiveRedis`]).

use lockcheck_workloads::redlock::{self, RedisQuorum};
use lockcheck_workloads::user::Uncertain;
use lockcheck_workloads::{Backend, FaultKind, Grant, Outcome, Recipe, Service};

use crate::host::{Caller, Connection, Failure};
use crate::protocol::{Request, Response};
use crate::service::{
    lease_of, start_servers, Hosting, Link, Pending, SimService, SimSession, Started,
};

/// The five Redlock instances.
pub const REDLOCK_HOSTS: [&str; 5] = ["redis-0", "redis-1", "redis-2", "redis-3", "redis-4"];

/// Redlock's independent Redis instances (`crate::server`'s keys on each
/// of [`REDLOCK_HOSTS`]); whether a crashed one restarts late is the
/// nemesis' business (`Backend::min_down_ms`).
pub(crate) struct FiveRedis;

impl SimService for FiveRedis {
    fn keeps(&self, service: Service, _: &[FaultKind]) -> bool {
        matches!(service, Service::Redis { instances } if instances > 1)
    }

    fn lock_hosts(&self, _: Service) -> &'static [&'static str] {
        &REDLOCK_HOSTS
    }

    fn start(&self, hosting: &mut Hosting<'_, '_>) -> Started {
        start_servers(hosting, &REDLOCK_HOSTS)
    }

    fn session(&self, backend: Backend, _: bool) -> Option<Box<dyn SimSession>> {
        match backend.recipe() {
            Recipe::Redlock { .. } => Some(Box::new(RedlockSession)),
            _ => None,
        }
    }
}

/// A client's Redlock session: it holds nothing between calls.
#[derive(Debug, Clone, Copy)]
struct RedlockSession;

impl SimSession for RedlockSession {
    fn acquire<'a>(
        &'a mut self,
        link: &'a mut Link,
        key: &'a str,
        ttl_ms: u64,
    ) -> Pending<'a, Grant> {
        Box::pin(link.acquire_redlock(key, ttl_ms))
    }

    fn release<'a>(
        &'a mut self,
        link: &'a mut Link,
        key: &'a str,
        grant: &'a Grant,
    ) -> Pending<'a, ()> {
        let value = lease_of(grant);
        Box::pin(async move { link.release_redlock(key, &value).await })
    }

    fn renew<'a>(
        &'a mut self,
        link: &'a mut Link,
        key: &'a str,
        grant: &'a Grant,
        ttl_ms: u64,
    ) -> Pending<'a, ()> {
        let value = lease_of(grant);
        Box::pin(async move { link.renew_redlock(key, &value, ttl_ms).await })
    }
}

/// Redlock's transport over any [`Caller`]s, one per instance: the one
/// the simulator's clients use, for a model checker to drive the same
/// recipe against the same server state machines.
pub fn redlock_over<C: Caller>(instances: &mut [C]) -> impl RedisQuorum + '_ {
    Instances(instances)
}

/// The simulated instances of one client.
struct Instances<'a, C: Caller = Connection>(&'a mut [C]);

impl<C: Caller> Instances<'_, C> {
    /// Sends `request` to every instance, in turn; whether each took effect
    /// (`effect` of its reply), or why it did not answer.
    async fn everywhere(
        &mut self,
        request: &Request,
        effect: impl Fn(&Response) -> bool,
    ) -> Vec<Result<bool, Uncertain>> {
        let mut replies = Vec::with_capacity(self.0.len());
        for (at, instance) in self.0.iter_mut().enumerate() {
            // The instances are asked in turn: a pause may fall between two.
            if at > 0 {
                instance.between_commands().await;
            }
            replies.push(match instance.call(request).await {
                Ok(response) => Ok(effect(&response)),
                Err(Failure::Unknown) => Err(Uncertain::Unknown),
                Err(Failure::NotSent) => Err(Uncertain::NotSent),
            });
        }
        replies
    }
}

impl<C: Caller> RedisQuorum for Instances<'_, C> {
    fn instances(&self) -> usize {
        self.0.len()
    }

    fn now_ms(&self) -> u64 {
        self.0.first().map_or(0, Caller::now_ms)
    }

    async fn set_nx_px_everywhere(
        &mut self,
        key: &str,
        value: &str,
        ttl_ms: u64,
    ) -> Vec<Result<bool, Uncertain>> {
        let request = Request::SetNxPx { key: key.into(), value: value.into(), ttl_ms };
        self.everywhere(&request, |reply| matches!(reply, Response::Ok)).await
    }

    async fn del_if_eq_everywhere(
        &mut self,
        key: &str,
        value: &str,
    ) -> Vec<Result<bool, Uncertain>> {
        let request = Request::DelIfEq { key: key.into(), value: value.into() };
        self.everywhere(&request, |reply| matches!(reply, Response::Int(1))).await
    }

    async fn pexpire_if_eq_everywhere(
        &mut self,
        key: &str,
        value: &str,
        ttl_ms: u64,
    ) -> Vec<Result<bool, Uncertain>> {
        let request = Request::PExpireIfEq { key: key.into(), value: value.into(), ttl_ms };
        self.everywhere(&request, |reply| matches!(reply, Response::Int(1))).await
    }
}

impl Link {
    pub(crate) async fn acquire_redlock(&mut self, key: &str, ttl_ms: u64) -> Outcome<Grant> {
        let value = self.next_value();
        redlock::acquire(&mut Instances(&mut self.instances), key, value, ttl_ms).await
    }

    pub(crate) async fn release_redlock(&mut self, key: &str, value: &str) -> Outcome<()> {
        redlock::release(&mut Instances(&mut self.instances), key, value).await
    }

    pub(crate) async fn renew_redlock(
        &mut self,
        key: &str,
        value: &str,
        ttl_ms: u64,
    ) -> Outcome<()> {
        redlock::renew(&mut Instances(&mut self.instances), key, value, ttl_ms).await
    }
}
