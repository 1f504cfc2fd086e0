//! Redlock over N independent Redis servers (docs/guide.md#redlock): the
//! recipe of `lockcheck_workloads::redlock`, which the simulator runs too,
//! over real connections. Every instance is asked at once, each with a short
//! timeout of its own, so that a slow instance costs the grant little of its
//! validity.

use std::time::Duration;

use futures_util::future::join_all;
use redis::Value;
use tokio::time::Instant;

use super::redis::{lock_key, Command, Failure, Instance};
use super::{ClientConfig, RealError};
use lockcheck_workloads::redlock::{self, RedisQuorum};
use lockcheck_workloads::user::Uncertain;
use lockcheck_workloads::{Grant, LockClient, Outcome, Stall, StallPoint};

/// One session of one logical client against every Redlock instance.
#[derive(Debug)]
pub struct RedlockClient {
    instances: Vec<Instance>,
    name: String,
    /// Makes lock values unique across runs and processes sharing servers.
    nonce: u64,
    grants: u64,
    /// Each instance's own timeout. Half the deadline, so that an acquire
    /// that fails can still release everywhere within the deadline.
    instance_timeout: Duration,
    /// The client's own clock, which a grant's validity is measured by.
    clock: Instant,
    /// Where a pause strikes the client in flight.
    stall: Stall,
}

impl RedlockClient {
    /// Connects to every instance (all must be up when a test starts).
    pub async fn connect(
        urls: &[String],
        config: &ClientConfig,
    ) -> Result<RedlockClient, RealError> {
        if urls.is_empty() {
            return Err(RealError::Setup {
                what: "Redlock",
                reason: "no Redis instance given".to_string(),
            });
        }
        let mut instances = Vec::with_capacity(urls.len());
        for url in urls {
            instances.push(Instance::connect(url).await?);
        }
        Ok(RedlockClient {
            instances,
            name: config.name.clone(),
            nonce: rand::random(),
            grants: 0,
            instance_timeout: config.deadline / 2,
            clock: Instant::now(),
            stall: Stall::default(),
        })
    }

    /// Stalls at `stall`'s point in flight (every instance's reply has
    /// come, the recipe has not read them) when a pause asks for it there:
    /// the recipe then measures the grant's validity after the stall, as
    /// Redlock's client must.
    pub fn stalling_at(mut self, stall: Stall) -> RedlockClient {
        self.stall = stall;
        self
    }

    fn next_value(&mut self) -> String {
        self.grants += 1;
        format!("{}:{:016x}:{}", self.name, self.nonce, self.grants)
    }

    /// Sends `command` to every instance at once, each with its own timeout;
    /// whether each took effect (its reply is `effect`), or why it did not
    /// answer.
    async fn everywhere(
        &mut self,
        command: Command<'_>,
        effect: Value,
    ) -> Vec<Result<bool, Uncertain>> {
        let until = Instant::now() + self.instance_timeout;
        let replies =
            join_all(self.instances.iter_mut().map(|instance| instance.call(command, until))).await;
        self.stall.strike(StallPoint::InFlight).await;
        replies
            .into_iter()
            .map(|reply| match reply {
                Ok(value) => Ok(value == effect),
                Err(Failure::Unknown(_)) => Err(Uncertain::Unknown),
                Err(_) => Err(Uncertain::NotSent),
            })
            .collect()
    }
}

impl RedisQuorum for RedlockClient {
    fn instances(&self) -> usize {
        self.instances.len()
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.clock.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    async fn set_nx_px_everywhere(
        &mut self,
        key: &str,
        value: &str,
        ttl_ms: u64,
    ) -> Vec<Result<bool, Uncertain>> {
        self.everywhere(Command::SetNxPx { key, value, ttl_ms }, Value::Okay).await
    }

    async fn del_if_eq_everywhere(
        &mut self,
        key: &str,
        value: &str,
    ) -> Vec<Result<bool, Uncertain>> {
        self.everywhere(Command::DelIfEq { key, value }, Value::Int(1)).await
    }

    async fn pexpire_if_eq_everywhere(
        &mut self,
        key: &str,
        value: &str,
        ttl_ms: u64,
    ) -> Vec<Result<bool, Uncertain>> {
        self.everywhere(Command::PExpireIfEq { key, value, ttl_ms }, Value::Int(1)).await
    }
}

impl LockClient for RedlockClient {
    async fn acquire(&mut self, key: &str, ttl_ms: u64) -> Outcome<Grant> {
        let value = self.next_value();
        redlock::acquire(self, &lock_key(key), value, ttl_ms).await
    }

    async fn release(&mut self, key: &str, grant: &Grant) -> Outcome<()> {
        let value = grant.lease.clone().unwrap_or_default();
        redlock::release(self, &lock_key(key), &value).await
    }

    async fn renew(&mut self, key: &str, grant: &Grant, ttl_ms: u64) -> Outcome<()> {
        let value = grant.lease.clone().unwrap_or_default();
        redlock::renew(self, &lock_key(key), &value, ttl_ms).await
    }

    async fn reset(&mut self) {
        for instance in &mut self.instances {
            instance.disconnect();
        }
    }
}
