//! The single-Redis recipes (`lockcheck_workloads::redis_lock`) and the
//! semaphore (`lockcheck_workloads::semaphore`), which the real world runs
//! too, over the simulator's connection to its Redis: the lock at its own
//! name, its fence counter at `fence:<name>`. The single Redis is a
//! simulated service of its own ([`OneRedis`]).

use lockcheck_workloads::redis_lock::{self, CallError, RedisLock, Variant};
use lockcheck_workloads::semaphore::{self, SemaphoreStore};
use lockcheck_workloads::{Backend, FaultKind, Grant, Outcome, Recipe, Service};

use crate::host::{Caller, Connection, Failure};
use crate::protocol::{Request, Response};
use crate::service::{
    lease_of, start_servers, Hosting, Link, Pending, SimService, SimSession, Started,
};

/// The single Redis of `sim-redis` and its variants and of the
/// semaphores (`crate::server`'s keys on one host). With the failover
/// fault on, the replicated pair keeps them instead
/// (`crate::replicated`).
pub(crate) struct OneRedis;

/// The single Redis' host.
const REDIS_HOST: [&str; 1] = ["redis"];

impl SimService for OneRedis {
    fn keeps(&self, service: Service, faults: &[FaultKind]) -> bool {
        service == Service::Redis { instances: 1 } && !faults.contains(&FaultKind::Failover)
    }

    fn lock_hosts(&self, _: Service) -> &'static [&'static str] {
        &REDIS_HOST
    }

    fn start(&self, hosting: &mut Hosting<'_, '_>) -> Started {
        start_servers(hosting, &REDIS_HOST)
    }

    fn session(&self, backend: Backend, _: bool) -> Option<Box<dyn SimSession>> {
        match backend.recipe() {
            Recipe::Redis(variant) => Some(Box::new(RedisSession::Lock(variant))),
            Recipe::Semaphore { .. } => Some(Box::new(RedisSession::Permits)),
            _ => None,
        }
    }
}

/// A client's session of a single Redis: a lock of some variant, or a
/// semaphore's permits. It holds nothing between calls.
#[derive(Debug, Clone, Copy)]
pub(crate) enum RedisSession {
    Lock(Variant),
    Permits,
}

impl SimSession for RedisSession {
    fn acquire<'a>(
        &'a mut self,
        link: &'a mut Link,
        key: &'a str,
        ttl_ms: u64,
    ) -> Pending<'a, Grant> {
        match *self {
            RedisSession::Lock(variant) => Box::pin(link.acquire_redis(variant, key, ttl_ms)),
            RedisSession::Permits => Box::pin(link.acquire_permit(key, ttl_ms)),
        }
    }

    fn release<'a>(
        &'a mut self,
        link: &'a mut Link,
        key: &'a str,
        grant: &'a Grant,
    ) -> Pending<'a, ()> {
        let value = lease_of(grant);
        match *self {
            RedisSession::Lock(variant) => {
                Box::pin(async move { link.release_redis(variant, key, &value).await })
            }
            RedisSession::Permits => {
                Box::pin(async move { link.release_permit(key, &value).await })
            }
        }
    }

    fn renew<'a>(
        &'a mut self,
        link: &'a mut Link,
        key: &'a str,
        grant: &'a Grant,
        ttl_ms: u64,
    ) -> Pending<'a, ()> {
        let value = lease_of(grant);
        match *self {
            RedisSession::Lock(variant) => {
                Box::pin(async move { link.renew_redis(variant, key, &value, ttl_ms).await })
            }
            RedisSession::Permits => {
                Box::pin(async move { link.renew_permit(key, &value, ttl_ms).await })
            }
        }
    }
}

/// The single-Redis recipes' transport over any [`Caller`]: the one the
/// simulator's clients use, for a model checker to drive the same recipe
/// code against the same server state machine.
pub fn redis_over<C: Caller>(caller: &mut C) -> impl RedisLock + '_ {
    SimRedis { connection: caller }
}

/// One client's connection to the simulated Redis.
struct SimRedis<'a, C: Caller = Connection> {
    connection: &'a mut C,
}

impl<C: Caller> SimRedis<'_, C> {
    /// Sends `request`; what `reply` makes of the answer.
    async fn call<T>(
        &mut self,
        request: &Request,
        reply: impl FnOnce(Response) -> Result<T, CallError>,
    ) -> Result<T, CallError> {
        match self.connection.call(request).await {
            Ok(response) => reply(response),
            Err(Failure::NotSent) => Err(CallError::NotSent),
            Err(Failure::Unknown) => Err(CallError::Unknown("timeout")),
        }
    }
}

impl<C: Caller> RedisLock for SimRedis<'_, C> {
    async fn set_nx_px(&mut self, key: &str, value: &str, ttl_ms: u64) -> Result<bool, CallError> {
        let request = Request::SetNxPx { key: key.into(), value: value.into(), ttl_ms };
        self.call(&request, |reply| Ok(matches!(reply, Response::Ok))).await
    }

    async fn set_nx(&mut self, key: &str, value: &str) -> Result<bool, CallError> {
        let request = Request::SetNx { key: key.into(), value: value.into() };
        self.call(&request, |reply| Ok(matches!(reply, Response::Int(1)))).await
    }

    async fn pexpire(&mut self, key: &str, ttl_ms: u64) -> Result<bool, CallError> {
        let request = Request::Expire { key: key.into(), ttl_ms };
        self.call(&request, |reply| Ok(matches!(reply, Response::Int(1)))).await
    }

    async fn get(&mut self, key: &str) -> Result<Option<String>, CallError> {
        self.call(&Request::Get { key: key.into() }, |reply| match reply {
            Response::Value(value) => Ok(value),
            _ => Err(CallError::BadReply),
        })
        .await
    }

    async fn incr_fence(&mut self, key: &str) -> Result<u64, CallError> {
        let request = Request::Incr { key: format!("fence:{key}") };
        self.call(&request, |reply| match reply {
            Response::Int(fence) => Ok(fence as u64),
            _ => Err(CallError::BadReply),
        })
        .await
    }

    async fn del_if_eq(&mut self, key: &str, value: &str) -> Result<bool, CallError> {
        let request = Request::DelIfEq { key: key.into(), value: value.into() };
        self.call(&request, |reply| Ok(matches!(reply, Response::Int(1)))).await
    }

    async fn del(&mut self, key: &str) -> Result<(), CallError> {
        self.call(&Request::Del { key: key.into() }, |_| Ok(())).await
    }

    async fn pexpire_if_eq(
        &mut self,
        key: &str,
        value: &str,
        ttl_ms: u64,
    ) -> Result<bool, CallError> {
        let request = Request::PExpireIfEq { key: key.into(), value: value.into(), ttl_ms };
        self.call(&request, |reply| Ok(matches!(reply, Response::Int(1)))).await
    }

    async fn crash_point(&mut self) -> bool {
        self.connection.between_commands().await
    }

    async fn between_commands(&mut self) {
        self.connection.between_commands().await;
    }
}

/// The semaphore recipe's transport over any [`Caller`], as
/// [`redis_over`] is the lock's.
pub fn semaphore_over<C: Caller>(caller: &mut C) -> impl SemaphoreStore + '_ {
    SimRedis { connection: caller }
}

impl<C: Caller> SemaphoreStore for SimRedis<'_, C> {
    async fn try_acquire(
        &mut self,
        key: &str,
        member: &str,
        ttl_ms: u64,
        limit: u32,
        now_ms: Option<i64>,
    ) -> Result<bool, CallError> {
        let request =
            Request::SemAcquire { key: key.into(), member: member.into(), ttl_ms, limit, now_ms };
        self.call(&request, |reply| Ok(matches!(reply, Response::Ok))).await
    }

    async fn heartbeat(
        &mut self,
        key: &str,
        member: &str,
        ttl_ms: u64,
        now_ms: Option<i64>,
    ) -> Result<bool, CallError> {
        let request =
            Request::SemHeartbeat { key: key.into(), member: member.into(), ttl_ms, now_ms };
        self.call(&request, |reply| Ok(matches!(reply, Response::Int(1)))).await
    }

    async fn remove(&mut self, key: &str, member: &str) -> Result<bool, CallError> {
        let request = Request::SemRelease { key: key.into(), member: member.into() };
        self.call(&request, |reply| Ok(matches!(reply, Response::Int(1)))).await
    }
}

impl Link {
    fn redis(&mut self) -> SimRedis<'_> {
        SimRedis { connection: &mut self.instances[0] }
    }

    pub(crate) async fn acquire_redis(
        &mut self,
        variant: Variant,
        key: &str,
        ttl_ms: u64,
    ) -> Outcome<Grant> {
        let value = self.next_value();
        let fencing = self.fencing;
        redis_lock::acquire(&mut self.redis(), variant, fencing, key, value, ttl_ms).await
    }

    pub(crate) async fn release_redis(
        &mut self,
        variant: Variant,
        key: &str,
        value: &str,
    ) -> Outcome<()> {
        redis_lock::release(&mut self.redis(), variant, key, value).await
    }

    pub(crate) async fn renew_redis(
        &mut self,
        variant: Variant,
        key: &str,
        value: &str,
        ttl_ms: u64,
    ) -> Outcome<()> {
        redis_lock::renew(&mut self.redis(), variant, key, value, ttl_ms).await
    }

    pub(crate) async fn acquire_permit(&mut self, key: &str, ttl_ms: u64) -> Outcome<Grant> {
        let member = self.next_value();
        let (limit, now_ms) = (self.backend.permits(), self.caller_now_ms());
        semaphore::acquire(&mut self.redis(), key, member, ttl_ms, limit, now_ms).await
    }

    pub(crate) async fn release_permit(&mut self, key: &str, member: &str) -> Outcome<()> {
        semaphore::release(&mut self.redis(), key, member).await
    }

    pub(crate) async fn renew_permit(
        &mut self,
        key: &str,
        member: &str,
        ttl_ms: u64,
    ) -> Outcome<()> {
        let now_ms = self.caller_now_ms();
        semaphore::renew(&mut self.redis(), key, member, ttl_ms, now_ms).await
    }
}
