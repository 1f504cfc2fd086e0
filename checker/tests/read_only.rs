//! Read-only operations (a refused acquire, a read) are linearized by the
//! search as soon as they are pending and legal, without a branch: the
//! verdict is the one the plain search gives on every history, and a
//! contended lock's refusals no longer make the search exponential.

use lockcheck_checker::linear::models::{
    CasRegister, FencedLease, LockInput, LockOutput, Mutex, Register, RegisterInput, RegisterOutput,
};
use lockcheck_checker::linear::{
    lock_operation, search, EitherWay, Model, Operation, SearchLimits, SearchOutcome,
};
use lockcheck_checker::synth_hard::{generate, HardOptions};
use lockcheck_checker::HistoryBuilder;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// `M` with no operation said to be read-only: the search as it was, which
/// branches on every operation.
struct Plain<M>(M);

impl<M: Model> Model for Plain<M> {
    type State = M::State;
    type Input = M::Input;
    type Output = M::Output;

    fn name(&self) -> &'static str {
        self.0.name()
    }

    fn init(&self) -> M::State {
        self.0.init()
    }

    fn step(
        &self,
        state: &M::State,
        input: &M::Input,
        output: Option<&M::Output>,
    ) -> Option<M::State> {
        self.0.step(state, input, output)
    }
}

fn linearizable<M: Model>(model: &M, operations: &[Operation<M::Input, M::Output>]) -> bool {
    let all: Vec<usize> = (0..operations.len()).collect();
    match search(model, operations, &all, &SearchLimits::default()).0 {
        SearchOutcome::Linearizable => true,
        SearchOutcome::NotLinearizable(_) => false,
        SearchOutcome::Unknown(reason) => panic!("a bound on a small history: {reason}"),
    }
}

fn lock_history(options: &HardOptions) -> Vec<Operation<LockInput, LockOutput>> {
    let mut builder = HistoryBuilder::default();
    for event in generate(options) {
        builder.push(&event).expect("a generated event is well formed");
    }
    builder.finish().ops().iter().map(lock_operation).collect()
}

/// Replaces a few outputs with other legal-looking ones, which makes many
/// histories not linearizable.
fn corrupt_lock(rng: &mut SmallRng, operations: &mut [Operation<LockInput, LockOutput>]) {
    for _ in 0..rng.gen_range(0..=2) {
        let at = rng.gen_range(0..operations.len());
        operations[at].output = match operations[at].output {
            Some(LockOutput::Busy) => Some(LockOutput::Granted { fence: None }),
            Some(LockOutput::Granted { .. }) => Some(LockOutput::Busy),
            Some(LockOutput::Done) => Some(LockOutput::NotHeld),
            Some(LockOutput::NotHeld) => Some(LockOutput::Done),
            other => other,
        };
    }
}

#[test]
fn lock_models_give_the_plain_searchs_verdict() {
    let mut rng = SmallRng::seed_from_u64(5);
    let (mut valid, mut invalid) = (0, 0);
    for case in 0..10_000u64 {
        let options = HardOptions {
            ops: rng.gen_range(4..=24),
            clients: rng.gen_range(2..=5),
            info_percent: [0.0, 10.0, 30.0][case as usize % 3],
            seed: case,
        };
        let mut history = lock_history(&options);
        if rng.gen_bool(0.6) {
            corrupt_lock(&mut rng, &mut history);
        }
        let verdict = linearizable(&Mutex, &history);
        assert_eq!(verdict, linearizable(&Plain(Mutex), &history), "mutex: {history:?}");
        let either = linearizable(&EitherWay(Mutex), &history);
        assert_eq!(either, linearizable(&Plain(EitherWay(Mutex)), &history), "{history:?}");
        let lease = linearizable(&EitherWay(FencedLease), &history);
        let plain = linearizable(&Plain(EitherWay(FencedLease)), &history);
        assert_eq!(lease, plain, "fenced-lease: {history:?}");
        if verdict {
            valid += 1;
        } else {
            invalid += 1;
        }
    }
    assert!(valid > 1_000 && invalid > 1_000, "{valid} valid, {invalid} not");
}

type RegisterOp = Operation<RegisterInput, RegisterOutput>;

/// A register's history from a real execution: each operation takes effect
/// at an instant inside its interval; some clients crash (no return), and a
/// few outputs are then changed.
fn register_history(rng: &mut SmallRng) -> Vec<RegisterOp> {
    let clients = rng.gen_range(1..=4);
    let count = rng.gen_range(1..=14);
    // (effect instant, client, input): effects in order, intervals around them.
    let mut value: Option<i64> = None;
    let mut free_from = vec![0u64; clients];
    let mut crashed = vec![false; clients];
    let mut operations = Vec::new();
    let mut now = 0u64;
    for _ in 0..count {
        now += rng.gen_range(1..=4);
        let client = rng.gen_range(0..clients);
        if crashed[client] || free_from[client] >= now {
            continue;
        }
        let input = match rng.gen_range(0..3) {
            0 => RegisterInput::Read,
            1 => RegisterInput::Write(rng.gen_range(0..3)),
            _ => RegisterInput::Cas(rng.gen_range(0..3), rng.gen_range(0..3)),
        };
        let output = match input {
            RegisterInput::Read => RegisterOutput::Read(value),
            RegisterInput::Write(new) => {
                value = Some(new);
                RegisterOutput::Written
            }
            RegisterInput::Cas(old, new) => {
                let done = value == Some(old);
                if done {
                    value = Some(new);
                }
                RegisterOutput::Cas(done)
            }
        };
        let call = rng.gen_range(free_from[client] + 1..=now);
        let ret = now + rng.gen_range(0..=6);
        free_from[client] = ret;
        let crash = rng.gen_bool(0.1);
        crashed[client] = crash;
        operations.push(Operation {
            client: client as i64,
            input,
            output: (!crash).then_some(output),
            call: call * 2,
            ret: (!crash).then_some(ret * 2 + 1),
        });
    }
    for _ in 0..rng.gen_range(0..=1) {
        if operations.is_empty() {
            break;
        }
        let at = rng.gen_range(0..operations.len());
        operations[at].output = match operations[at].output {
            Some(RegisterOutput::Read(_)) => Some(RegisterOutput::Read(Some(rng.gen_range(0..3)))),
            Some(RegisterOutput::Cas(done)) => Some(RegisterOutput::Cas(!done)),
            other => other,
        };
    }
    operations
}

#[test]
fn register_models_give_the_plain_searchs_verdict() {
    let mut rng = SmallRng::seed_from_u64(11);
    let (mut valid, mut invalid) = (0, 0);
    for _ in 0..20_000 {
        let history = register_history(&mut rng);
        let verdict = linearizable(&CasRegister, &history);
        assert_eq!(verdict, linearizable(&Plain(CasRegister), &history), "cas: {history:?}");
        let plain: Vec<RegisterOp> = history
            .iter()
            .filter(|operation| !matches!(operation.input, RegisterInput::Cas(..)))
            .cloned()
            .collect();
        let register = linearizable(&Register, &plain);
        assert_eq!(register, linearizable(&Plain(Register), &plain), "register: {plain:?}");
        if verdict {
            valid += 1;
        } else {
            invalid += 1;
        }
    }
    assert!(valid > 2_000 && invalid > 2_000, "{valid} valid, {invalid} not");
}

#[test]
fn a_contended_lock_does_not_blow_the_search_up() {
    // 30 clients on one lock: most operations in flight at any moment are
    // acquires refused as busy. Branching on each of them kept millions of
    // configurations on a history of 20,000 operations; linearized at once,
    // they leave a few per operation.
    let options = HardOptions { ops: 20_000, clients: 30, info_percent: 0.0, seed: 1 };
    let mut builder = HistoryBuilder::default();
    for event in generate(&options) {
        builder.push(&event).expect("a generated event is well formed");
    }
    let history = builder.finish();
    let operations: Vec<_> = history.ops().iter().map(lock_operation).collect();
    let all: Vec<usize> = (0..operations.len()).collect();
    // A memory bound, so that a search that blows up ends (as unknown)
    // rather than running for hours.
    let limits = SearchLimits { max_memory_bytes: 256 << 20, ..SearchLimits::default() };
    let (outcome, stats) = search(&Mutex, &operations, &all, &limits);
    assert_eq!(outcome, SearchOutcome::Linearizable);
    assert!(stats.cached_states < 4 * 20_000, "{} configurations kept", stats.cached_states);
}
