//! The Redis semaphore, written once for both worlds
//! (docs/guide.md#semaphore): a sorted set per key, member = holder, score =
//! lease expiry; one script drops expired members, counts, and adds the
//! caller if below the limit; holders heartbeat to keep their slot and
//! remove themselves to release. The correct recipe reads the time inside
//! the script (the server's `TIME`); the broken one passes the caller's
//! clock. A world supplies the transport ([`SemaphoreStore`]).

use crate::redis_lock::CallError;
use crate::{Grant, Outcome};

/// One Redis holding semaphores, as the recipe speaks to it. `now_ms`:
/// the caller's clock for the broken variant; `None`, the server's own.
#[allow(async_fn_in_trait)]
pub trait SemaphoreStore {
    /// The acquire script: `true` if `member` took one of `limit` slots.
    async fn try_acquire(
        &mut self,
        key: &str,
        member: &str,
        ttl_ms: u64,
        limit: u32,
        now_ms: Option<i64>,
    ) -> Result<bool, CallError>;
    /// The heartbeat script: `true` if `member` still had its slot, now
    /// extended.
    async fn heartbeat(
        &mut self,
        key: &str,
        member: &str,
        ttl_ms: u64,
        now_ms: Option<i64>,
    ) -> Result<bool, CallError>;
    /// `ZREM`: `true` if `member` had a slot.
    async fn remove(&mut self, key: &str, member: &str) -> Result<bool, CallError>;
}

/// Takes a slot of `key` for `member` (unique to this attempt).
pub async fn acquire<S: SemaphoreStore>(
    store: &mut S,
    key: &str,
    member: String,
    ttl_ms: u64,
    limit: u32,
    now_ms: Option<i64>,
) -> Outcome<Grant> {
    match store.try_acquire(key, &member, ttl_ms, limit, now_ms).await {
        Ok(true) => Outcome::Ok(Grant { fence: None, lease: Some(member) }),
        Ok(false) => Outcome::Fail("busy".into()),
        Err(error) => error.outcome(),
    }
}

/// Gives `member`'s slot back.
pub async fn release<S: SemaphoreStore>(store: &mut S, key: &str, member: &str) -> Outcome<()> {
    counted(store.remove(key, member).await)
}

/// Extends `member`'s slot to `ttl_ms` from now.
pub async fn renew<S: SemaphoreStore>(
    store: &mut S,
    key: &str,
    member: &str,
    ttl_ms: u64,
    now_ms: Option<i64>,
) -> Outcome<()> {
    counted(store.heartbeat(key, member, ttl_ms, now_ms).await)
}

/// A heartbeat's or release's outcome: done, or the slot is lost.
fn counted(reply: Result<bool, CallError>) -> Outcome<()> {
    match reply {
        Ok(true) => Outcome::Ok(()),
        Ok(false) => Outcome::Fail("not-held".into()),
        Err(error) => error.outcome(),
    }
}
