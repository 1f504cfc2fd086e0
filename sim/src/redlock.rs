//! Redlock over five independent simulated Redis, as its description goes:
//! the same key and value on every instance with a short timeout each; held
//! if a majority said OK and the time spent is below the TTL, for a validity
//! of TTL − elapsed − drift; otherwise release everywhere and report failure.
//! The workload's pause between attempts is the random back-off.

use lockcheck_workloads::{Grant, Outcome};

use crate::client::SimClient;
use crate::host::Failure;
use crate::protocol::{Request, Response};

/// Clock drift allowance: Redis' own suggestion, 1% of the TTL plus 2 ms.
fn drift_ms(ttl_ms: u64) -> u64 {
    ttl_ms / 100 + 2
}

fn now_ms() -> u64 {
    turmoil::sim_elapsed().unwrap_or_default().as_millis() as u64
}

impl SimClient {
    fn majority(&self) -> usize {
        self.instances.len() / 2 + 1
    }

    /// Sends `request` to every instance, in turn; the replies (or failures).
    async fn everywhere(&mut self, request: &Request) -> Vec<Result<Response, Failure>> {
        let mut replies = Vec::with_capacity(self.instances.len());
        for instance in &mut self.instances {
            replies.push(instance.call(request).await);
        }
        replies
    }

    pub(crate) async fn acquire_redlock(&mut self, key: &str, ttl_ms: u64) -> Outcome<Grant> {
        let value = self.next_value();
        let started = now_ms();
        let request = Request::SetNxPx { key: key.into(), value: value.clone(), ttl_ms };
        let replies = self.everywhere(&request).await;
        let granted = replies.iter().filter(|reply| matches!(reply, Ok(Response::Ok))).count();
        let elapsed = now_ms().saturating_sub(started);
        let validity = ttl_ms.saturating_sub(elapsed).saturating_sub(drift_ms(ttl_ms));
        if granted >= self.majority() && validity > 0 {
            return Outcome::Ok(Grant { fence: None, lease: Some(value) });
        }
        // Failed: unlock every instance, even those that did not answer.
        // A refusal from some instances does not say that anyone holds the
        // lock (it may be a failed attempt's leftover key), so the failure is
        // not recorded as "busy".
        self.everywhere(&Request::DelIfEq { key: key.into(), value }).await;
        Outcome::Fail("no-majority".into())
    }

    pub(crate) async fn release_redlock(&mut self, key: &str, value: &str) -> Outcome<()> {
        // Released if it still held a majority; its leftover keys elsewhere
        // are deleted either way.
        let replies =
            self.everywhere(&Request::DelIfEq { key: key.into(), value: value.into() }).await;
        let deleted = replies.iter().filter(|reply| matches!(reply, Ok(Response::Int(1)))).count();
        let unknown = replies.iter().filter(|reply| matches!(reply, Err(Failure::Unknown))).count();
        if deleted >= self.majority() {
            Outcome::Ok(())
        } else if deleted + unknown >= self.majority() {
            Outcome::Info("timeout".into())
        } else {
            Outcome::Fail("not-held".into())
        }
    }

    pub(crate) async fn renew_redlock(
        &mut self,
        key: &str,
        value: &str,
        ttl_ms: u64,
    ) -> Outcome<()> {
        let started = now_ms();
        let request = Request::PExpireIfEq { key: key.into(), value: value.into(), ttl_ms };
        let replies = self.everywhere(&request).await;
        let extended = replies.iter().filter(|reply| matches!(reply, Ok(Response::Int(1)))).count();
        let elapsed = now_ms().saturating_sub(started);
        if extended >= self.majority() && elapsed + drift_ms(ttl_ms) < ttl_ms {
            Outcome::Ok(())
        } else {
            Outcome::Fail("not-held".into())
        }
    }
}
