//! Redlock, written once for both worlds (docs/guide.md#redlock): the same
//! key and value on every instance; held if a majority said OK and the time
//! spent is below the TTL, for a validity of TTL − elapsed − drift;
//! otherwise release everywhere and fail with `no-majority`. The workload's
//! random pause between attempts is the random back-off. Redlock issues no
//! fencing token.
//!
//! A world supplies the transport ([`RedisQuorum`]: a command sent to every
//! instance, and the client's clock); the simulator asks its instances in
//! turn, the real world all at once, each with a timeout of its own.

use crate::user::Uncertain;
use crate::{Grant, Outcome};

/// Clock drift allowance: Redis' own suggestion, 1% of the TTL plus 2 ms.
pub fn drift_ms(ttl_ms: u64) -> u64 {
    ttl_ms / 100 + 2
}

/// Independent Redis instances, as Redlock speaks to them: each command goes
/// to every instance, and each instance's reply (or why there is none)
/// comes back. `Ok(true)`: the command took effect (set, deleted,
/// extended); `Ok(false)`: the instance refused it.
#[allow(async_fn_in_trait)]
pub trait RedisQuorum {
    /// How many instances there are.
    fn instances(&self) -> usize;
    /// The client's own clock, in milliseconds: what the validity is
    /// measured by.
    fn now_ms(&self) -> u64;
    /// `SET key value NX PX ttl` on every instance.
    async fn set_nx_px_everywhere(
        &mut self,
        key: &str,
        value: &str,
        ttl_ms: u64,
    ) -> Vec<Result<bool, Uncertain>>;
    /// The compare-and-delete on every instance.
    async fn del_if_eq_everywhere(
        &mut self,
        key: &str,
        value: &str,
    ) -> Vec<Result<bool, Uncertain>>;
    /// The compare-then-`PEXPIRE` on every instance.
    async fn pexpire_if_eq_everywhere(
        &mut self,
        key: &str,
        value: &str,
        ttl_ms: u64,
    ) -> Vec<Result<bool, Uncertain>>;
}

fn majority(instances: usize) -> usize {
    instances / 2 + 1
}

fn took_effect(replies: &[Result<bool, Uncertain>]) -> usize {
    replies.iter().filter(|reply| matches!(reply, Ok(true))).count()
}

/// Acquires `key` with `value` (unique to this attempt) for `ttl_ms`.
pub async fn acquire<Q: RedisQuorum>(
    quorum: &mut Q,
    key: &str,
    value: String,
    ttl_ms: u64,
) -> Outcome<Grant> {
    let started = quorum.now_ms();
    let replies = quorum.set_nx_px_everywhere(key, &value, ttl_ms).await;
    let granted = took_effect(&replies);
    let elapsed_ms = quorum.now_ms().saturating_sub(started);
    let validity_ms = ttl_ms.saturating_sub(elapsed_ms).saturating_sub(drift_ms(ttl_ms));
    if granted >= majority(quorum.instances()) && validity_ms > 0 {
        return Outcome::Ok(Grant { fence: None, lease: Some(value) });
    }
    // Failed: unlock every instance, even those that did not answer. A
    // refusal from some instances does not say that anyone holds the lock
    // (it may be a failed attempt's leftover key), so the failure is not
    // recorded as "busy".
    quorum.del_if_eq_everywhere(key, &value).await;
    Outcome::Fail("no-majority".into())
}

/// Releases `key` held with `value`: released if it still held a majority;
/// its leftover keys elsewhere are deleted either way.
pub async fn release<Q: RedisQuorum>(quorum: &mut Q, key: &str, value: &str) -> Outcome<()> {
    let replies = quorum.del_if_eq_everywhere(key, value).await;
    let deleted = took_effect(&replies);
    let unknown = replies.iter().filter(|reply| matches!(reply, Err(Uncertain::Unknown))).count();
    let majority = majority(quorum.instances());
    if deleted >= majority {
        Outcome::Ok(())
    } else if deleted + unknown >= majority {
        Outcome::Info("timeout".into())
    } else {
        Outcome::Fail("not-held".into())
    }
}

/// Extends `key` held with `value` to `ttl_ms`: still held if extended on a
/// majority with validity left; otherwise the holder must stop (the
/// watchdog: docs/guide.md#redis).
pub async fn renew<Q: RedisQuorum>(
    quorum: &mut Q,
    key: &str,
    value: &str,
    ttl_ms: u64,
) -> Outcome<()> {
    let started = quorum.now_ms();
    let replies = quorum.pexpire_if_eq_everywhere(key, value, ttl_ms).await;
    let extended = took_effect(&replies);
    let elapsed_ms = quorum.now_ms().saturating_sub(started);
    if extended >= majority(quorum.instances()) && elapsed_ms + drift_ms(ttl_ms) < ttl_ms {
        Outcome::Ok(())
    } else {
        Outcome::Fail("not-held".into())
    }
}

#[cfg(test)]
mod tests {
    use super::{acquire, release, renew, RedisQuorum};
    use crate::user::Uncertain;
    use crate::{Grant, Outcome};

    /// Five instances whose replies are set by the test; the clock moves by
    /// `takes_ms` during each command.
    struct Fake {
        replies: Vec<Result<bool, Uncertain>>,
        now_ms: std::cell::Cell<u64>,
        takes_ms: u64,
        sent: Vec<&'static str>,
    }

    impl Fake {
        fn new(replies: &[Result<bool, Uncertain>], takes_ms: u64) -> Fake {
            Fake { replies: replies.to_vec(), now_ms: 0.into(), takes_ms, sent: Vec::new() }
        }

        fn reply(&mut self, command: &'static str) -> Vec<Result<bool, Uncertain>> {
            self.sent.push(command);
            self.now_ms.set(self.now_ms.get() + self.takes_ms);
            self.replies.clone()
        }
    }

    impl RedisQuorum for Fake {
        fn instances(&self) -> usize {
            self.replies.len()
        }
        fn now_ms(&self) -> u64 {
            self.now_ms.get()
        }
        async fn set_nx_px_everywhere(
            &mut self,
            _: &str,
            _: &str,
            _: u64,
        ) -> Vec<Result<bool, Uncertain>> {
            self.reply("set")
        }
        async fn del_if_eq_everywhere(&mut self, _: &str, _: &str) -> Vec<Result<bool, Uncertain>> {
            self.reply("del")
        }
        async fn pexpire_if_eq_everywhere(
            &mut self,
            _: &str,
            _: &str,
            _: u64,
        ) -> Vec<Result<bool, Uncertain>> {
            self.reply("pexpire")
        }
    }

    const YES: Result<bool, Uncertain> = Ok(true);
    const NO: Result<bool, Uncertain> = Ok(false);
    const LOST: Result<bool, Uncertain> = Err(Uncertain::Unknown);
    const DOWN: Result<bool, Uncertain> = Err(Uncertain::NotSent);

    #[tokio::test]
    async fn a_majority_in_time_holds_and_anything_less_releases_everywhere() {
        let mut three = Fake::new(&[YES, YES, YES, NO, DOWN], 10);
        let held = acquire(&mut three, "k", "v".into(), 1000).await;
        assert_eq!(held, Outcome::Ok(Grant { fence: None, lease: Some("v".into()) }));
        assert_eq!(three.sent, ["set"]);
        let mut two = Fake::new(&[YES, YES, NO, LOST, DOWN], 10);
        assert_eq!(
            acquire(&mut two, "k", "v".into(), 1000).await,
            Outcome::Fail("no-majority".into())
        );
        assert_eq!(two.sent, ["set", "del"], "a failed attempt unlocks every instance");
        // A majority, but the time spent leaves no validity (TTL 100 ms:
        // drift 3 ms; 97 ms spent).
        let mut slow = Fake::new(&[YES; 5], 97);
        assert_eq!(
            acquire(&mut slow, "k", "v".into(), 100).await,
            Outcome::Fail("no-majority".into())
        );
    }

    #[tokio::test]
    async fn a_release_is_unknown_when_the_lost_replies_could_make_a_majority() {
        assert_eq!(
            release(&mut Fake::new(&[YES, YES, YES, NO, NO], 1), "k", "v").await,
            Outcome::Ok(())
        );
        assert_eq!(
            release(&mut Fake::new(&[YES, YES, LOST, NO, DOWN], 1), "k", "v").await,
            Outcome::Info("timeout".into())
        );
        assert_eq!(
            release(&mut Fake::new(&[YES, LOST, NO, NO, DOWN], 1), "k", "v").await,
            Outcome::Fail("not-held".into())
        );
    }

    #[tokio::test]
    async fn a_renewal_needs_a_majority_and_validity_left() {
        assert_eq!(
            renew(&mut Fake::new(&[YES, YES, YES, NO, NO], 5), "k", "v", 1000).await,
            Outcome::Ok(())
        );
        assert_eq!(
            renew(&mut Fake::new(&[YES, YES, NO, NO, NO], 5), "k", "v", 1000).await,
            Outcome::Fail("not-held".into())
        );
        assert_eq!(
            renew(&mut Fake::new(&[YES; 5], 990), "k", "v", 1000).await,
            Outcome::Fail("not-held".into())
        );
    }
}
