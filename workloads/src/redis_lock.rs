//! The single-Redis lock recipes, written once for both worlds
//! (docs/guide.md#redis): `SET key value NX PX ttl` to acquire, an `INCR` of
//! the key's fence counter for a token, the Lua compare-and-delete to
//! release and compare-then-`PEXPIRE` to renew; and the broken variants
//! lockcheck must catch. A world supplies the transport ([`RedisLock`]);
//! the simulator's speaks to a simulated Redis, the real world's to a real
//! one (`redis-fenced`, whose grant and token come from one script, is the
//! real world's only).

use std::fmt;

use crate::{Grant, Outcome};

/// Which single-Redis recipe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Variant {
    /// The correct one.
    Plain,
    /// Broken: release by plain `DEL`, deleting whoever holds the lock now.
    DelRelease,
    /// Broken: `SETNX` then `PEXPIRE`, two commands: a crash between them
    /// leaves a lock without a TTL.
    SetnxExpire,
    /// Broken: a lost `SET` reply is taken for a refusal (an orphan lock
    /// until its TTL runs out).
    LostReply,
    /// Broken: release by `GET`, a compare in the client, then `DEL`: a
    /// pause between the two deletes the next holder's lock.
    GetDelRelease,
    /// Broken: renew by a plain `PEXPIRE`, without the compare: a watchdog
    /// that resumes after its lease ran out extends the next holder's lock
    /// and believes it still holds.
    BlindRenew,
}

/// Why a command has no usable reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// Certainly not run: no connection.
    NotSent,
    /// Sent, and no reply in time or the connection broke: it may have run.
    Unknown(&'static str),
    /// The server answered with an error.
    Refused(String),
    /// A reply the recipe does not expect.
    BadReply,
}

impl CallError {
    /// What a recipe reports when its command failed so.
    pub fn outcome<T>(self) -> Outcome<T> {
        match self {
            CallError::NotSent => Outcome::Fail("unavailable".into()),
            CallError::Unknown(reason) => Outcome::Info(reason.into()),
            CallError::Refused(code) => Outcome::Fail(format!("redis-error:{code}")),
            CallError::BadReply => Outcome::Info("bad-reply".into()),
        }
    }
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::NotSent => write!(f, "not sent"),
            CallError::Unknown(reason) => write!(f, "unknown: {reason}"),
            CallError::Refused(code) => write!(f, "refused: {code}"),
            CallError::BadReply => write!(f, "unexpected reply"),
        }
    }
}

/// One Redis, as the single-Redis recipes speak to it. `key` is the lock's
/// name: the transport keeps its lock and its fence counter where it likes.
#[allow(async_fn_in_trait)]
pub trait RedisLock {
    /// `SET lock value NX PX ttl`: `true` if set, `false` if held.
    async fn set_nx_px(&mut self, key: &str, value: &str, ttl_ms: u64) -> Result<bool, CallError>;
    /// `SETNX lock value`: `true` if set.
    async fn set_nx(&mut self, key: &str, value: &str) -> Result<bool, CallError>;
    /// `PEXPIRE lock ttl`: `true` if the key exists (whoever holds it).
    async fn pexpire(&mut self, key: &str, ttl_ms: u64) -> Result<bool, CallError>;
    /// `GET lock`: the value it holds, if any.
    async fn get(&mut self, key: &str) -> Result<Option<String>, CallError>;
    /// `INCR` of the lock's fence counter: the new token.
    async fn incr_fence(&mut self, key: &str) -> Result<u64, CallError>;
    /// The compare-and-delete: `true` if the lock held `value` and is gone.
    async fn del_if_eq(&mut self, key: &str, value: &str) -> Result<bool, CallError>;
    /// `DEL lock`, whoever holds it.
    async fn del(&mut self, key: &str) -> Result<(), CallError>;
    /// The compare-then-`PEXPIRE`: `true` if the lock held `value` and was
    /// extended.
    async fn pexpire_if_eq(
        &mut self,
        key: &str,
        value: &str,
        ttl_ms: u64,
    ) -> Result<bool, CallError>;
    /// The stall the nemesis asked for at the two-step recipe's weak point,
    /// if any: waits it out and drops the connection, as a crashed client's
    /// is; `true` if there was one.
    async fn crash_point(&mut self) -> bool;
    /// Between two commands of a recipe: a pause asked for there
    /// ([`crate::StallPoint::BetweenCommands`]) strikes, and the client goes
    /// on when it is over.
    async fn between_commands(&mut self);
}

/// Acquires `key` with `value` (unique to this attempt); with `fencing`, a
/// token from the fence counter.
pub async fn acquire<R: RedisLock>(
    redis: &mut R,
    variant: Variant,
    fencing: bool,
    key: &str,
    value: String,
    ttl_ms: u64,
) -> Outcome<Grant> {
    if variant == Variant::SetnxExpire {
        match redis.set_nx(key, &value).await {
            Ok(true) => {}
            Ok(false) => return Outcome::Fail("busy".into()),
            Err(error) => return error.outcome(),
        }
        // A stall here, longer than the deadline, is a crash between the
        // two commands: the key is left without a TTL.
        if redis.crash_point().await {
            return Outcome::Info("crashed-before-expire".into());
        }
        return match redis.pexpire(key, ttl_ms).await {
            Ok(_) => fence(redis, fencing, key, value).await,
            Err(CallError::Unknown(reason)) => Outcome::Info(reason.into()),
            // Held, without a TTL: as unknown as a crash.
            Err(_) => Outcome::Info("expire-failed".into()),
        };
    }
    match redis.set_nx_px(key, &value, ttl_ms).await {
        Ok(true) => fence(redis, fencing, key, value).await,
        Ok(false) => Outcome::Fail("busy".into()),
        // The bug: an `OK` that was lost is taken for a refusal.
        Err(CallError::Unknown(_)) if variant == Variant::LostReply => Outcome::Fail("busy".into()),
        Err(error) => error.outcome(),
    }
}

/// The grant of `value`, with a token if fencing.
async fn fence<R: RedisLock>(
    redis: &mut R,
    fencing: bool,
    key: &str,
    value: String,
) -> Outcome<Grant> {
    if !fencing {
        return Outcome::Ok(Grant { fence: None, lease: Some(value) });
    }
    // The token is a second command, not atomic with the grant: a pause
    // here hands a holder whose lease ran out a newer token than the next
    // holder's.
    redis.between_commands().await;
    match redis.incr_fence(key).await {
        Ok(fence) => Outcome::Ok(Grant { fence: Some(fence), lease: Some(value) }),
        // Granted, but the token is unknown: the client gives up (the lock
        // expires by its TTL).
        Err(_) => Outcome::Info("fence-lost".into()),
    }
}

/// Releases `key` held with `value`.
pub async fn release<R: RedisLock>(
    redis: &mut R,
    variant: Variant,
    key: &str,
    value: &str,
) -> Outcome<()> {
    if variant == Variant::DelRelease {
        // The bug: deletes the key whoever holds it now.
        return match redis.del(key).await {
            Ok(()) => Outcome::Ok(()),
            Err(error) => error.outcome(),
        };
    }
    if variant == Variant::GetDelRelease {
        // The bug: the compare and the delete are two commands.
        match redis.get(key).await {
            Ok(Some(held)) if held == value => {}
            Ok(_) => return Outcome::Fail("not-held".into()),
            Err(error) => return error.outcome(),
        }
        redis.between_commands().await;
        return match redis.del(key).await {
            Ok(()) => Outcome::Ok(()),
            Err(error) => error.outcome(),
        };
    }
    counted(redis.del_if_eq(key, value).await)
}

/// Extends `key` held with `value` to `ttl_ms`.
pub async fn renew<R: RedisLock>(
    redis: &mut R,
    variant: Variant,
    key: &str,
    value: &str,
    ttl_ms: u64,
) -> Outcome<()> {
    if variant == Variant::BlindRenew {
        // The bug: extends the key whoever holds it now.
        return counted(redis.pexpire(key, ttl_ms).await);
    }
    counted(redis.pexpire_if_eq(key, value, ttl_ms).await)
}

/// The outcome of a compare-and-something script.
fn counted(reply: Result<bool, CallError>) -> Outcome<()> {
    match reply {
        Ok(true) => Outcome::Ok(()),
        Ok(false) => Outcome::Fail("not-held".into()),
        Err(error) => error.outcome(),
    }
}
