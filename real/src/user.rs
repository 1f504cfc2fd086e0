//! The real side of the user API (`crate::user`): [`RealRedis`], the
//! primitives over one connection to a real Redis, so that a user's own
//! recipe runs against real servers with the driver (`driver::drive`)
//! exactly as lockcheck's own clients do, beside the same storage
//! ([`super::storage::Storage`]).

use std::time::Duration;

use redis::Value;
use tokio::time::Instant;

use super::redis::{Command, Failure, Instance};
use super::RealError;
use lockcheck_workloads::user::{RedisCommands, Uncertain};

/// One connection to a real Redis, speaking [`RedisCommands`] with a
/// deadline per command (as lockcheck's own clients do: a quarter of the
/// TTL), so that no operation of the user's recipe can hang.
#[derive(Debug)]
pub struct RealRedis {
    instance: Instance,
    deadline: Duration,
}

impl RealRedis {
    /// Connects to the Redis at `url` (`redis://127.0.0.1:6379`) now, so
    /// that a wrong URL is a setup error rather than a history of
    /// `unavailable`; each command later gets `deadline`.
    pub async fn connect(url: &str, deadline: Duration) -> Result<RealRedis, RealError> {
        Ok(RealRedis { instance: Instance::connect(url).await?, deadline })
    }

    /// Drops the connection (a new session, as after a crash): the next
    /// command opens a new one.
    pub fn disconnect(&mut self) {
        self.instance.disconnect();
    }

    async fn call(&mut self, command: Command<'_>) -> Result<Value, Uncertain> {
        let until = Instant::now() + self.deadline;
        self.instance.call(command, until).await.map_err(uncertain)
    }
}

/// A refusal by the server did not take effect either: only a lost reply
/// is unknown.
fn uncertain(failure: Failure) -> Uncertain {
    match failure {
        Failure::NotSent | Failure::Refused(_) => Uncertain::NotSent,
        Failure::Unknown(_) => Uncertain::Unknown,
    }
}

/// A script's 1 (done) or 0 (not ours); anything else is a reply the
/// recipe cannot act on.
fn counted(reply: Value) -> Result<bool, Uncertain> {
    match reply {
        Value::Int(1) => Ok(true),
        Value::Int(0) => Ok(false),
        _ => Err(Uncertain::Unknown),
    }
}

impl RedisCommands for RealRedis {
    async fn set_nx_px(&mut self, key: &str, value: &str, ttl_ms: u64) -> Result<bool, Uncertain> {
        match self.call(Command::SetNxPx { key, value, ttl_ms }).await? {
            Value::Okay => Ok(true),
            Value::Nil => Ok(false),
            _ => Err(Uncertain::Unknown),
        }
    }

    async fn del_if_eq(&mut self, key: &str, value: &str) -> Result<bool, Uncertain> {
        counted(self.call(Command::DelIfEq { key, value }).await?)
    }

    async fn pexpire_if_eq(
        &mut self,
        key: &str,
        value: &str,
        ttl_ms: u64,
    ) -> Result<bool, Uncertain> {
        counted(self.call(Command::PExpireIfEq { key, value, ttl_ms }).await?)
    }

    async fn incr(&mut self, key: &str) -> Result<u64, Uncertain> {
        match self.call(Command::Incr { key }).await? {
            Value::Int(value) if value > 0 => Ok(value as u64),
            _ => Err(Uncertain::Unknown),
        }
    }

    async fn del(&mut self, key: &str) -> Result<bool, Uncertain> {
        match self.call(Command::Del { key }).await? {
            Value::Int(deleted) => Ok(deleted > 0),
            _ => Err(Uncertain::Unknown),
        }
    }
}
