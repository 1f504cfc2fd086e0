//! Redlock over N independent Redis servers (docs/guide.md#redlock), as its
//! description goes and as the simulator drives it (`sim/src/redlock.rs`):
//! the same key and value on every instance, each with a short timeout of
//! its own (asked at once, so that a slow instance costs the grant little of
//! its validity); held if a majority said OK and the time spent is below the
//! TTL, for a validity of TTL − elapsed − drift; otherwise release
//! everywhere and fail with `no-majority`. The workload's random pause
//! between attempts is the random back-off. Redlock issues no fencing token.

use std::time::Duration;

use futures_util::future::join_all;
use redis::Value;
use tokio::time::Instant;

use super::redis::{lock_key, Command, Failure, Instance};
use super::storage::Storage;
use super::{ClientConfig, RealError};
use lockcheck_workloads::{Grant, LockClient, Outcome};

/// Clock drift allowance: Redis' own suggestion, 1% of the TTL plus 2 ms.
fn drift_ms(ttl_ms: u64) -> u64 {
    ttl_ms / 100 + 2
}

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
    storage: Storage,
}

impl RedlockClient {
    /// Connects to every instance (all must be up when a test starts) and
    /// to the storage of `config`.
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
            storage: Storage::connect(config).await?,
        })
    }

    fn majority(&self) -> usize {
        self.instances.len() / 2 + 1
    }

    fn next_value(&mut self) -> String {
        self.grants += 1;
        format!("{}:{:016x}:{}", self.name, self.nonce, self.grants)
    }

    /// Sends `command` to every instance at once, each with its own timeout.
    async fn everywhere(&mut self, command: Command<'_>) -> Vec<Result<Value, Failure>> {
        let until = Instant::now() + self.instance_timeout;
        join_all(self.instances.iter_mut().map(|instance| instance.call(command, until))).await
    }

    fn count(replies: &[Result<Value, Failure>], wanted: impl Fn(&Value) -> bool) -> usize {
        replies.iter().filter(|reply| matches!(reply, Ok(value) if wanted(value))).count()
    }
}

impl LockClient for RedlockClient {
    async fn acquire(&mut self, key: &str, ttl_ms: u64) -> Outcome<Grant> {
        let (lock, value) = (lock_key(key), self.next_value());
        let started = Instant::now();
        let replies = self.everywhere(Command::SetNxPx { key: &lock, value: &value, ttl_ms }).await;
        let granted = Self::count(&replies, |value| *value == Value::Okay);
        let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let validity_ms = ttl_ms.saturating_sub(elapsed_ms).saturating_sub(drift_ms(ttl_ms));
        if granted >= self.majority() && validity_ms > 0 {
            return Outcome::Ok(Grant { fence: None, lease: Some(value) });
        }
        // Failed: unlock every instance, even those that did not answer.
        // A refusal from some instances does not say that anyone holds the
        // lock (it may be a failed attempt's leftover key), so the failure is
        // not recorded as "busy".
        self.everywhere(Command::DelIfEq { key: &lock, value: &value }).await;
        Outcome::Fail("no-majority".into())
    }

    async fn release(&mut self, key: &str, grant: &Grant) -> Outcome<()> {
        let (lock, value) = (lock_key(key), grant.lease.clone().unwrap_or_default());
        // Released if it still held a majority; its leftover keys elsewhere
        // are deleted either way.
        let replies = self.everywhere(Command::DelIfEq { key: &lock, value: &value }).await;
        let deleted = Self::count(&replies, |value| *value == Value::Int(1));
        let unknown =
            replies.iter().filter(|reply| matches!(reply, Err(Failure::Unknown(_)))).count();
        if deleted >= self.majority() {
            Outcome::Ok(())
        } else if deleted + unknown >= self.majority() {
            Outcome::Info("timeout".into())
        } else {
            Outcome::Fail("not-held".into())
        }
    }

    async fn renew(&mut self, key: &str, grant: &Grant, ttl_ms: u64) -> Outcome<()> {
        let (lock, value) = (lock_key(key), grant.lease.clone().unwrap_or_default());
        let started = Instant::now();
        let replies =
            self.everywhere(Command::PExpireIfEq { key: &lock, value: &value, ttl_ms }).await;
        let extended = Self::count(&replies, |value| *value == Value::Int(1));
        let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        // Extended on a majority, with validity left: still held. Otherwise
        // the holder must stop (the watchdog: docs/guide.md#redis).
        if extended >= self.majority() && elapsed_ms + drift_ms(ttl_ms) < ttl_ms {
            Outcome::Ok(())
        } else {
            Outcome::Fail("not-held".into())
        }
    }

    async fn write(&mut self, resource: &str, fence: Option<u64>, data: &str) -> Outcome<()> {
        self.storage.write(resource, fence, data).await
    }

    async fn read(&mut self, resource: &str) -> Outcome<(Option<u64>, Option<String>)> {
        self.storage.read(resource).await
    }

    async fn reset(&mut self) {
        for instance in &mut self.instances {
            instance.disconnect();
        }
        self.storage.reset().await;
    }
}
