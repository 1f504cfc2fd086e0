//! Lock models: `mutex` (no TTL: advisory locks, Knossos' mutex histories) and
//! `fenced-lease` (a grant may lapse, as a TTL expiry does; tokens increase).

use crate::linear::model::Model;

/// A lock operation, with the client that issued it (the models are
/// owner-aware: only the holder releases).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LockInput {
    pub client: i64,
    pub call: LockCall,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LockCall {
    Acquire,
    /// With the token of the grant being released, when the client sent it.
    Release {
        fence: Option<u64>,
    },
    Renew,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LockOutput {
    /// acquire ok, with the token when the backend issues one.
    Granted { fence: Option<u64> },
    /// acquire failed: someone held the lock.
    Busy,
    /// release or renew ok.
    Done,
    /// release or renew failed: the client did not hold the lock.
    NotHeld,
    /// Failed for another reason (unreachable, refused): it did not happen.
    NoEffect,
}

/// The holder after an acquire of unknown outcome. Its process crashed (an
/// operation without a known outcome is its process's last), so nothing it
/// does can ever tell it apart from any other crashed holder: naming them all
/// alike lets the search treat the order of such grants as one, where
/// porcupine would try every order of every crashed client's acquire.
pub const CRASHED_HOLDER: i64 = i64::MIN;

fn holder_name(holder: i64) -> String {
    if holder == CRASHED_HOLDER {
        "a crashed client".to_string()
    } else {
        format!("process {holder}")
    }
}

fn describe(input: &LockInput, output: Option<&LockOutput>) -> String {
    let call = match input.call {
        LockCall::Acquire => "acquire".to_string(),
        LockCall::Release { fence: Some(fence) } => format!("release (token {fence})"),
        LockCall::Release { fence: None } => "release".to_string(),
        LockCall::Renew => "renew".to_string(),
    };
    let result = match output {
        None => "unknown".to_string(),
        Some(LockOutput::Granted { fence: Some(fence) }) => format!("granted token {fence}"),
        Some(LockOutput::Granted { fence: None }) => "granted".to_string(),
        Some(LockOutput::Busy) => "busy".to_string(),
        Some(LockOutput::Done) => "ok".to_string(),
        Some(LockOutput::NotHeld) => "not held".to_string(),
        Some(LockOutput::NoEffect) => "failed, no effect".to_string(),
    };
    format!("{call} -> {result}")
}

/// Refusals, failures without effect, and renewals change no lock state
/// (a renewal's lease is the mutual-exclusion checker's business).
fn lock_read_only(input: &LockInput, output: Option<&LockOutput>) -> bool {
    matches!(
        (input.call, output),
        (_, Some(LockOutput::Busy | LockOutput::NotHeld | LockOutput::NoEffect))
            | (LockCall::Renew, Some(LockOutput::Done) | None)
    )
}

/// A lock without a TTL: it is free, or held by one client until that client
/// releases it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Mutex;

impl Model for Mutex {
    /// The holder, if any.
    type State = Option<i64>;
    type Input = LockInput;
    type Output = LockOutput;

    fn name(&self) -> &'static str {
        "mutex"
    }

    fn init(&self) -> Self::State {
        None
    }

    fn step(
        &self,
        holder: &Option<i64>,
        input: &LockInput,
        output: Option<&LockOutput>,
    ) -> Option<Option<i64>> {
        let client = input.client;
        match (input.call, output) {
            (_, Some(LockOutput::NoEffect)) => Some(*holder),
            (LockCall::Acquire, Some(LockOutput::Granted { .. }) | None) => {
                holder.is_none().then_some(Some(client))
            }
            (LockCall::Acquire, Some(LockOutput::Busy)) => holder.is_some().then_some(*holder),
            (LockCall::Release { .. } | LockCall::Renew, Some(LockOutput::NotHeld)) => {
                (*holder != Some(client)).then_some(*holder)
            }
            (LockCall::Release { .. }, Some(LockOutput::Done) | None) => {
                (*holder == Some(client)).then_some(None)
            }
            (LockCall::Renew, Some(LockOutput::Done) | None) => {
                (*holder == Some(client)).then_some(*holder)
            }
            _ => None,
        }
    }

    fn read_only(&self, input: &LockInput, output: Option<&LockOutput>) -> bool {
        lock_read_only(input, output)
    }

    fn describe_operation(&self, input: &LockInput, output: Option<&LockOutput>) -> String {
        describe(input, output)
    }

    fn describe_state(&self, holder: &Option<i64>) -> String {
        match holder {
            Some(client) => format!("held by {}", holder_name(*client)),
            None => "free".to_string(),
        }
    }
}

/// A lease: a grant may lapse at any moment without a release (the TTL ran
/// out), so a later grant to another client is legal; but every grant's token
/// is greater than every earlier grant's, only the current holder's release
/// or renewal succeeds, and an acquire refused as busy needs a grant that may
/// still be live. When it lapsed is the mutual-exclusion checker's business.
#[derive(Debug, Clone, Copy, Default)]
pub struct FencedLease;

/// The latest grant, which may or may not have lapsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeaseState {
    /// Holder of the latest grant, until it is released or known lapsed.
    pub holder: Option<i64>,
    /// The largest token granted so far.
    pub fence: Option<u64>,
}

impl Model for FencedLease {
    type State = LeaseState;
    type Input = LockInput;
    type Output = LockOutput;

    fn name(&self) -> &'static str {
        "fenced-lease"
    }

    fn init(&self) -> LeaseState {
        LeaseState { holder: None, fence: None }
    }

    fn step(
        &self,
        state: &LeaseState,
        input: &LockInput,
        output: Option<&LockOutput>,
    ) -> Option<LeaseState> {
        let client = input.client;
        let holds = state.holder == Some(client);
        let lapsed = LeaseState { holder: None, ..*state };
        match (input.call, output) {
            (_, Some(LockOutput::NoEffect)) => Some(*state),
            (LockCall::Acquire, Some(LockOutput::Granted { fence })) => {
                match (fence, state.fence) {
                    (Some(new), Some(old)) if *new <= old => None,
                    (Some(new), _) => Some(LeaseState { holder: Some(client), fence: Some(*new) }),
                    (None, _) => Some(LeaseState { holder: Some(client), ..*state }),
                }
            }
            // Granted with a token nobody saw: later tokens are only known to
            // exceed the ones seen.
            (LockCall::Acquire, None) => {
                Some(LeaseState { holder: Some(CRASHED_HOLDER), ..*state })
            }
            (LockCall::Acquire, Some(LockOutput::Busy)) => state.holder.is_some().then_some(*state),
            // Failing to release or renew says the lease lapsed, which
            // changes nothing here: a lapsed grant is still the latest, and
            // a release that ignores the clock (the lease table's does) may
            // still succeed until another client is granted the lock.
            (LockCall::Release { .. } | LockCall::Renew, Some(LockOutput::NotHeld)) => Some(*state),
            (LockCall::Release { fence }, Some(LockOutput::Done) | None) => {
                let same_grant = fence.is_none() || state.fence.is_none() || fence == state.fence;
                (holds && same_grant).then_some(lapsed)
            }
            (LockCall::Renew, Some(LockOutput::Done) | None) => holds.then_some(*state),
            _ => None,
        }
    }

    fn read_only(&self, input: &LockInput, output: Option<&LockOutput>) -> bool {
        lock_read_only(input, output)
    }

    fn describe_operation(&self, input: &LockInput, output: Option<&LockOutput>) -> String {
        describe(input, output)
    }

    fn describe_state(&self, state: &LeaseState) -> String {
        let fence = state.fence.map(|fence| format!(", largest token {fence}")).unwrap_or_default();
        match state.holder {
            Some(client) => format!("last granted to {}{fence}", holder_name(client)),
            None => format!("free{fence}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(client: i64, call: LockCall) -> LockInput {
        LockInput { client, call }
    }

    #[test]
    fn mutex_is_owner_aware() {
        let held = Mutex.step(
            &None,
            &op(1, LockCall::Acquire),
            Some(&LockOutput::Granted { fence: None }),
        );
        assert_eq!(held, Some(Some(1)));
        let release = op(2, LockCall::Release { fence: None });
        assert_eq!(Mutex.step(&Some(1), &release, Some(&LockOutput::Done)), None);
        assert_eq!(Mutex.step(&Some(1), &release, Some(&LockOutput::NotHeld)), Some(Some(1)));
        let busy = Mutex.step(&None, &op(2, LockCall::Acquire), Some(&LockOutput::Busy));
        assert_eq!(busy, None, "busy needs a holder");
    }

    #[test]
    fn lease_grants_may_lapse_but_tokens_only_grow() {
        let held = LeaseState { holder: Some(1), fence: Some(5) };
        let acquire = op(2, LockCall::Acquire);
        let newer =
            FencedLease.step(&held, &acquire, Some(&LockOutput::Granted { fence: Some(6) }));
        assert_eq!(newer, Some(LeaseState { holder: Some(2), fence: Some(6) }));
        assert_eq!(
            FencedLease.step(&held, &acquire, Some(&LockOutput::Granted { fence: Some(5) })),
            None
        );
        let release = op(1, LockCall::Release { fence: Some(5) });
        let after = newer.unwrap();
        assert_eq!(FencedLease.step(&after, &release, Some(&LockOutput::Done)), None);
        assert_eq!(FencedLease.step(&after, &release, Some(&LockOutput::NotHeld)), Some(after));
        let free = LeaseState { holder: None, fence: Some(6) };
        assert_eq!(FencedLease.step(&free, &acquire, Some(&LockOutput::Busy)), None);
    }
}
