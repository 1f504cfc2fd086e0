//! Quick proofs that a lock's history is not linearizable, found before the
//! search. Proving that no order exists is the search's worst case: it must
//! exhaust every order of everything before the offending operation, which
//! on a long faulty history can take minutes. Two common offences can be
//! shown directly from real-time order instead:
//!
//! * tokens that cannot be increasing in any order (fenced-lease only): two
//!   grants with one token, or a grant completed before another was asked
//!   for that carries a token no smaller (a counter lost in a restart);
//! * a successful release by a client after another client's grant that
//!   certainly took effect between its own grant and its release (a release
//!   by plain `DEL` deleting the next holder's lock).

use rustc_hash::FxHashMap;

use super::model::Operation;
use super::models::{LockCall, LockInput, LockOutput};
use crate::realtime::{largest_preceding, Timed};

/// The operations that prove it (positions in `operations`), and why.
pub(crate) struct Refutation {
    pub operations: Vec<usize>,
    pub reason: String,
}

fn granted(operation: &Operation<LockInput, LockOutput>) -> Option<Option<u64>> {
    match (operation.input.call, &operation.output, operation.ret) {
        (LockCall::Acquire, Some(LockOutput::Granted { fence }), Some(_)) => Some(*fence),
        _ => None,
    }
}

pub(crate) fn refute(
    operations: &[Operation<LockInput, LockOutput>],
    leased: bool,
) -> Option<Refutation> {
    (if leased { tokens(operations) } else { None }).or_else(|| stale_release(operations))
}

fn tokens(operations: &[Operation<LockInput, LockOutput>]) -> Option<Refutation> {
    let grants: Vec<(usize, u64)> = operations
        .iter()
        .enumerate()
        .filter_map(|(at, operation)| granted(operation).flatten().map(|fence| (at, fence)))
        .collect();
    let timed: Vec<Timed<u64>> = grants
        .iter()
        .map(|&(at, fence)| Timed {
            invoke: operations[at].call,
            completion: operations[at].ret.expect("granted operations returned"),
            value: fence,
        })
        .collect();
    for (later, earlier) in largest_preceding(&timed).into_iter().enumerate() {
        let Some(earlier) = earlier else { continue };
        if timed[earlier].value >= timed[later].value {
            let (first, second) = (grants[earlier].0, grants[later].0);
            return Some(Refutation {
                operations: vec![first, second],
                reason: format!(
                    "the grant of token {} returned at {} before the grant of token {} was asked for at {}: \
                     in every order the later grant's token would have to be larger",
                    timed[earlier].value, timed[earlier].completion, timed[later].value, timed[later].invoke
                ),
            });
        }
    }
    let mut by_fence: Vec<(u64, usize)> = grants.iter().map(|&(at, fence)| (fence, at)).collect();
    by_fence.sort_unstable();
    by_fence.windows(2).find(|pair| pair[0].0 == pair[1].0).map(|pair| Refutation {
        operations: vec![pair[0].1.min(pair[1].1), pair[0].1.max(pair[1].1)],
        reason: format!(
            "two grants carry token {}: tokens must strictly increase in every order",
            pair[0].0
        ),
    })
}

fn stale_release(operations: &[Operation<LockInput, LockOutput>]) -> Option<Refutation> {
    // One sweep in call order (the order a history's operations are in
    // already; others are sorted first).
    let sorted = operations.is_sorted_by_key(|operation| operation.call);
    let mut order: Vec<usize> = Vec::new();
    if !sorted {
        order.extend(0..operations.len());
        order.sort_by_key(|&at| operations[at].call);
    }
    // The grants so far, in call order, and their calls side by side, so
    // that a bisection reads one small array rather than scattered
    // operations; each client's latest grant so far.
    let mut grants: Vec<u32> = Vec::new();
    let mut grant_calls: Vec<u64> = Vec::new();
    let mut latest: FxHashMap<i64, usize> = FxHashMap::default();
    let positions = (0..operations.len()).map(|position| match sorted {
        true => position,
        false => order[position],
    });
    for at in positions {
        let release = &operations[at];
        if granted(release).is_some() {
            grants.push(at as u32);
            grant_calls.push(release.call);
            latest.insert(release.client, at);
            continue;
        }
        if !matches!(
            (release.input.call, &release.output),
            (LockCall::Release { .. }, Some(LockOutput::Done))
        ) {
            continue;
        }
        // The releasing client's own latest grant before its release, and a
        // grant to another client between that grant's return and the
        // release (every grant so far was called before the release).
        let Some(&own) = latest.get(&release.client) else { continue };
        let own_ret = operations[own].ret.expect("granted operations returned");
        let start = grant_calls.partition_point(|&call| call <= own_ret);
        let usurper = grants[start..].iter().map(|&grant| grant as usize).find(|&grant| {
            operations[grant].client != release.client
                && operations[grant].ret.is_some_and(|ret| ret < release.call)
        });
        if let Some(usurper) = usurper {
            return Some(Refutation {
                operations: vec![own, usurper, at],
                reason: format!(
                    "process {}'s release at {} succeeded, but process {} was granted the lock at {}, after process {}'s \
                     own grant returned at {} and before that release: in every order the lock was not process {}'s \
                     to release",
                    release.client,
                    release.call,
                    operations[usurper].client,
                    operations[usurper].ret.unwrap_or_default(),
                    release.client,
                    own_ret,
                    release.client,
                ),
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linear::models::{FencedLease, Mutex};
    use crate::linear::{search, SearchLimits, SearchOutcome};

    fn op(
        client: i64,
        call: LockCall,
        output: LockOutput,
        at: u64,
        ret: u64,
    ) -> Operation<LockInput, LockOutput> {
        Operation {
            client,
            input: LockInput { client, call },
            output: Some(output),
            call: at,
            ret: Some(ret),
        }
    }

    fn grant(client: i64, fence: u64, at: u64, ret: u64) -> Operation<LockInput, LockOutput> {
        op(client, LockCall::Acquire, LockOutput::Granted { fence: Some(fence) }, at, ret)
    }

    fn release(client: i64, at: u64, ret: u64) -> Operation<LockInput, LockOutput> {
        op(client, LockCall::Release { fence: None }, LockOutput::Done, at, ret)
    }

    /// Whatever `refute` proves, the full search must find too.
    fn agrees(operations: &[Operation<LockInput, LockOutput>], leased: bool) -> bool {
        let all: Vec<usize> = (0..operations.len()).collect();
        let limits = SearchLimits::default();
        let outcome = if leased {
            matches!(
                search(&FencedLease, operations, &all, &limits).0,
                SearchOutcome::NotLinearizable(_)
            )
        } else {
            matches!(search(&Mutex, operations, &all, &limits).0, SearchOutcome::NotLinearizable(_))
        };
        let refuted = refute(operations, leased).is_some();
        assert!(!refuted || outcome, "refuted, but the search found an order");
        refuted
    }

    #[test]
    fn a_token_counter_reset_is_refuted() {
        let history = [grant(1, 7, 0, 1), release(1, 2, 3), grant(2, 1, 4, 5)];
        assert!(agrees(&history, true));
        let duplicate = [grant(1, 7, 0, 3), grant(2, 7, 1, 2)];
        assert!(agrees(&duplicate, true));
        // Concurrent grants may come back in either order.
        let concurrent = [grant(1, 8, 0, 3), grant(2, 7, 1, 2)];
        assert!(!agrees(&concurrent, true));
    }

    #[test]
    fn a_release_after_another_clients_grant_is_refuted() {
        // 1 holds; its lease lapses; 2 is granted; 1's DEL release succeeds.
        let history = [grant(1, 1, 0, 1), grant(2, 2, 2, 3), release(1, 4, 5)];
        assert!(agrees(&history, true));
        assert!(agrees(&[grant(1, 1, 0, 1), grant(2, 2, 2, 3), release(1, 4, 5)], false));
        // Operations out of call order are swept in call order all the same.
        let mut reversed = history;
        reversed.reverse();
        assert!(agrees(&reversed, true));
        // If 2's grant may have come after 1's release, nothing is proved.
        let overlapping = [grant(1, 1, 0, 1), grant(2, 2, 2, 6), release(1, 4, 5)];
        assert!(!agrees(&overlapping, true));
    }
}
