//! The search over sets of states (`EitherWay`), which the lock checker uses
//! when a lock's history has crashed operations, reaches the verdict of the
//! plain search on every history; and on hard histories it stays small
//! where branching on every crash did not.

use lockcheck_checker::linear::models::{FencedLease, LockCall, LockInput, LockOutput, Mutex};
use lockcheck_checker::linear::{
    lock_operation, search, EitherWay, Model, Operation, SearchLimits, SearchOutcome,
};
use lockcheck_checker::synth_hard::{generate, HardOptions};
use lockcheck_checker::{CheckOptions, Checker, HistoryBuilder, Linearizability, Verdict};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

type Op = Operation<LockInput, LockOutput>;

/// A random history of a few clients: each operation's outcome is drawn at
/// random, so most histories are not linearizable, and some are.
fn random_history(rng: &mut SmallRng) -> Vec<Op> {
    let clients = rng.gen_range(1..=3);
    let count = rng.gen_range(1..=9);
    let mut free_at = vec![0u64; clients];
    let mut operations = Vec::new();
    for _ in 0..count {
        let client = rng.gen_range(0..clients);
        let call = free_at[client] + rng.gen_range(0..4);
        let ret = call + rng.gen_range(1..6);
        free_at[client] = ret + 1;
        let lock_call = match rng.gen_range(0..3) {
            0 => LockCall::Acquire,
            1 => LockCall::Release { fence: None },
            _ => LockCall::Renew,
        };
        let output = match (lock_call, rng.gen_range(0..5)) {
            (_, 0) => None,
            (LockCall::Acquire, 1 | 2) => {
                Some(LockOutput::Granted { fence: Some(rng.gen_range(1..4)) })
            }
            (LockCall::Acquire, 3) => Some(LockOutput::Busy),
            (_, 1 | 2) => Some(LockOutput::Done),
            (_, 3) => Some(LockOutput::NotHeld),
            _ => Some(LockOutput::NoEffect),
        };
        let client = client as i64;
        operations.push(Operation {
            client,
            input: LockInput { client, call: lock_call },
            ret: output.map(|_| ret),
            output,
            call,
        });
        if output.is_none() {
            // A crashed client never acts again.
            free_at[client as usize] = u64::MAX / 2;
        }
    }
    operations.retain(|operation| operation.call < u64::MAX / 4);
    operations
}

fn linearizable<M: Model<Input = LockInput, Output = LockOutput>>(
    model: &M,
    operations: &[Op],
) -> bool {
    let all: Vec<usize> = (0..operations.len()).collect();
    match search(model, operations, &all, &SearchLimits::default()).0 {
        SearchOutcome::Linearizable => true,
        SearchOutcome::NotLinearizable(_) => false,
        SearchOutcome::Unknown(reason) => panic!("a bound on a tiny history: {reason}"),
    }
}

#[test]
fn sets_of_states_give_the_plain_searchs_verdict() {
    let mut rng = SmallRng::seed_from_u64(17);
    let (mut valid, mut crashed) = (0, 0);
    for _ in 0..20_000 {
        let history = random_history(&mut rng);
        let mutex = linearizable(&Mutex, &history);
        assert_eq!(mutex, linearizable(&EitherWay(Mutex), &history), "mutex: {history:?}");
        let lease = linearizable(&FencedLease, &history);
        assert_eq!(lease, linearizable(&EitherWay(FencedLease), &history), "lease: {history:?}");
        valid += usize::from(mutex) + usize::from(lease);
        crashed += usize::from(history.iter().any(|operation| operation.output.is_none()));
    }
    // Both verdicts, and crashes, are well represented.
    assert!(valid > 4_000 && valid < 36_000, "{valid} valid of 40,000");
    assert!(crashed > 5_000, "{crashed} histories with a crash");
}

#[test]
fn crashed_operations_do_not_blow_the_search_up() {
    // 5,000 operations of 10 clients, 5% crashed: branching on every crash
    // kept millions of configurations (1.3 GB); sets of states keep a few
    // per operation.
    let options = HardOptions { ops: 5_000, clients: 10, info_percent: 5.0, seed: 0 };
    let mut builder = HistoryBuilder::default();
    for event in generate(&options) {
        builder.push(&event).expect("a generated event is well formed");
    }
    let history = builder.finish();
    let result = Linearizability.check(&history, &CheckOptions::default());
    assert_eq!(result.verdict, Some(Verdict::Valid));
    let stats = lockcheck_checker::linear::search(
        &EitherWay(Mutex),
        &history.ops().iter().map(lock_operation).collect::<Vec<_>>(),
        &(0..history.ops().len()).collect::<Vec<_>>(),
        &SearchLimits::default(),
    )
    .1;
    assert!(stats.cached_states < 20 * 5_000, "{} configurations kept", stats.cached_states);
}
