//! Differential test of the linearizability search: on thousands of small
//! random concurrent histories, lockcheck's search (`linear::search`) and
//! stateright's `LinearizabilityTester` must give the same verdict.
//!
//! Each history comes from a real execution of an atomic object: clients
//! invoke operations, each takes effect at one instant while it is in flight,
//! and then it returns, or its client crashes (Jepsen's `info`: the operation
//! never returns, took effect or not, and that client invokes nothing more).
//! About half the histories then have an output or two replaced at random,
//! which makes many of them not linearizable. The objects: a read/write
//! register, a compare-and-set register and an owner-aware mutex. Stateright
//! checks against its own `Register` spec for the first, and against specs
//! written here from the models' documented semantics for the other two (not
//! by calling lockcheck's models, so that the models are compared as well).
//!
//! Stateright's search has no memoisation: on the rare history where it would
//! take more than `STATERIGHT_BUDGET` steps (well under 1% of them) it is
//! stopped and the history skipped, counted, and the count bounded.
//!
//! `DIFFERENTIAL_CASES` (histories per object), `DIFFERENTIAL_SEED` and
//! `DIFFERENTIAL_BUDGET` ask for other runs, e.g. longer hunts.

use std::cell::Cell;
use std::fmt::Debug;
use std::panic::AssertUnwindSafe;
use std::rc::Rc;
use std::time::{Duration, Instant};

use lockcheck_checker::linear::models::{
    CasRegister, LockCall, LockInput, LockOutput, Mutex, Register, RegisterInput, RegisterOutput,
};
use lockcheck_checker::linear::{search, Model, Operation, SearchLimits, SearchOutcome};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use stateright::semantics::register::{Register as SrRegister, RegisterOp, RegisterRet};
use stateright::semantics::{ConsistencyTester, LinearizabilityTester, SequentialSpec};

/// Histories generated per object unless `DIFFERENTIAL_CASES` says otherwise.
const CASES: usize = 3000;
const MAX_OPERATIONS: usize = 20;
const MAX_CLIENTS: i64 = 5;
/// Register values are drawn from 1..=VALUES, so that reads and CAS often
/// meet the values written.
const VALUES: i64 = 3;
/// Steps (spec invocations) stateright's search may take on one history
/// before the history is skipped, unless `DIFFERENTIAL_BUDGET` says otherwise.
const STATERIGHT_BUDGET: u64 = 200_000;

/// An object under test: how to run it for real, how to spoil an output, and
/// how its operations read in both checkers.
trait Subject {
    const NAME: &'static str;
    type Input: Clone + Debug + Sync;
    type Output: Clone + Debug + PartialEq + Sync;
    type Model: Model<Input = Self::Input, Output = Self::Output>;
    type Spec: SequentialSpec<Op: Clone + Debug, Ret: Clone + Debug> + Clone;
    /// The state of the real (atomic) object.
    type Real;

    fn model() -> Self::Model;
    fn spec() -> Self::Spec;
    fn real() -> Self::Real;
    /// An operation a client might invoke now.
    fn input(rng: &mut SmallRng, client: i64, real: &Self::Real) -> Self::Input;
    /// Takes effect on the real object; the output it returns.
    fn execute(rng: &mut SmallRng, real: &mut Self::Real, input: &Self::Input) -> Self::Output;
    /// A random output for the input, right or wrong.
    fn corrupt(rng: &mut SmallRng, input: &Self::Input) -> Self::Output;
    fn op(input: &Self::Input) -> <Self::Spec as SequentialSpec>::Op;
    fn ret(output: &Self::Output) -> <Self::Spec as SequentialSpec>::Ret;
}

type History<S> = Vec<Operation<<S as Subject>::Input, <S as Subject>::Output>>;

fn value(rng: &mut SmallRng) -> i64 {
    rng.gen_range(1..=VALUES)
}

fn read_value(rng: &mut SmallRng) -> Option<i64> {
    if rng.gen_bool(0.2) {
        None
    } else {
        Some(value(rng))
    }
}

// (a) A read/write register, against stateright's own `Register` spec over
// `Option<i64>` starting at `None` (lockcheck's register starts empty).

struct RwRegister;

impl Subject for RwRegister {
    const NAME: &'static str = "register";
    type Input = RegisterInput;
    type Output = RegisterOutput;
    type Model = Register;
    type Spec = SrRegister<Option<i64>>;
    type Real = Option<i64>;

    fn model() -> Register {
        Register
    }

    fn spec() -> Self::Spec {
        SrRegister(None)
    }

    fn real() -> Option<i64> {
        None
    }

    fn input(rng: &mut SmallRng, _client: i64, _real: &Option<i64>) -> RegisterInput {
        if rng.gen_bool(0.5) {
            RegisterInput::Read
        } else {
            RegisterInput::Write(value(rng))
        }
    }

    fn execute(
        _rng: &mut SmallRng,
        real: &mut Option<i64>,
        input: &RegisterInput,
    ) -> RegisterOutput {
        match *input {
            RegisterInput::Read => RegisterOutput::Read(*real),
            RegisterInput::Write(written) => {
                *real = Some(written);
                RegisterOutput::Written
            }
            RegisterInput::Cas(..) => unreachable!("no compare-and-set on a plain register"),
        }
    }

    fn corrupt(rng: &mut SmallRng, input: &RegisterInput) -> RegisterOutput {
        // Now and then an output of the wrong kind, which neither accepts.
        if rng.gen_bool(0.03) {
            return match input {
                RegisterInput::Read => RegisterOutput::Written,
                _ => RegisterOutput::Read(read_value(rng)),
            };
        }
        match input {
            RegisterInput::Read => RegisterOutput::Read(read_value(rng)),
            _ => RegisterOutput::Written,
        }
    }

    fn op(input: &RegisterInput) -> RegisterOp<Option<i64>> {
        match *input {
            RegisterInput::Read => RegisterOp::Read,
            RegisterInput::Write(written) => RegisterOp::Write(Some(written)),
            RegisterInput::Cas(..) => unreachable!("no compare-and-set on a plain register"),
        }
    }

    fn ret(output: &RegisterOutput) -> RegisterRet<Option<i64>> {
        match *output {
            RegisterOutput::Read(read) => RegisterRet::ReadOk(read),
            RegisterOutput::Written => RegisterRet::WriteOk,
            RegisterOutput::Cas(_) => unreachable!("no compare-and-set on a plain register"),
        }
    }
}

// (b) A compare-and-set register. The spec: a read returns the value (`None`
// while empty); a write sets it; cas(old, new) succeeds, setting `new`, iff
// the register holds `old`, and otherwise fails and changes nothing.

#[derive(Debug, Clone, Default, PartialEq)]
struct CasSpec(Option<i64>);

impl SequentialSpec for CasSpec {
    type Op = RegisterInput;
    type Ret = RegisterOutput;

    fn invoke(&mut self, op: &RegisterInput) -> RegisterOutput {
        match *op {
            RegisterInput::Read => RegisterOutput::Read(self.0),
            RegisterInput::Write(written) => {
                self.0 = Some(written);
                RegisterOutput::Written
            }
            RegisterInput::Cas(old, new) => {
                let hit = self.0 == Some(old);
                if hit {
                    self.0 = Some(new);
                }
                RegisterOutput::Cas(hit)
            }
        }
    }
}

struct CasRegisterSubject;

impl Subject for CasRegisterSubject {
    const NAME: &'static str = "cas-register";
    type Input = RegisterInput;
    type Output = RegisterOutput;
    type Model = CasRegister;
    type Spec = CasSpec;
    type Real = CasSpec;

    fn model() -> CasRegister {
        CasRegister
    }

    fn spec() -> CasSpec {
        CasSpec(None)
    }

    fn real() -> CasSpec {
        CasSpec(None)
    }

    fn input(rng: &mut SmallRng, _client: i64, _real: &CasSpec) -> RegisterInput {
        match rng.gen_range(0..10) {
            0..=2 => RegisterInput::Read,
            3..=5 => RegisterInput::Write(value(rng)),
            _ => RegisterInput::Cas(value(rng), value(rng)),
        }
    }

    fn execute(_rng: &mut SmallRng, real: &mut CasSpec, input: &RegisterInput) -> RegisterOutput {
        real.invoke(input)
    }

    fn corrupt(rng: &mut SmallRng, input: &RegisterInput) -> RegisterOutput {
        if rng.gen_bool(0.03) {
            return match input {
                RegisterInput::Read => RegisterOutput::Cas(rng.gen()),
                RegisterInput::Write(_) => RegisterOutput::Read(read_value(rng)),
                RegisterInput::Cas(..) => RegisterOutput::Written,
            };
        }
        match input {
            RegisterInput::Read => RegisterOutput::Read(read_value(rng)),
            RegisterInput::Write(_) => RegisterOutput::Written,
            RegisterInput::Cas(..) => RegisterOutput::Cas(rng.gen()),
        }
    }

    fn op(input: &RegisterInput) -> RegisterInput {
        *input
    }

    fn ret(output: &RegisterOutput) -> RegisterOutput {
        *output
    }
}

// (c) An owner-aware mutex, as lock.rs's `Mutex` documents it: the lock is
// free or held by one client. acquire: granted (with any token) iff free, the
// caller then holds it; busy iff held (by anyone), nothing changes. release:
// ok iff the caller holds it, which frees it; not-held iff the caller does not
// hold it, nothing changes. renew: ok iff the caller holds it; not-held iff
// not; nothing changes. Any operation may fail with no effect. An operation
// in flight at the end takes its natural effect (or none).

#[derive(Debug, Clone, Default, PartialEq)]
struct MutexSpec {
    holder: Option<i64>,
}

impl SequentialSpec for MutexSpec {
    type Op = LockInput;
    type Ret = LockOutput;

    fn invoke(&mut self, op: &LockInput) -> LockOutput {
        let holds = self.holder == Some(op.client);
        match op.call {
            LockCall::Acquire if self.holder.is_none() => {
                self.holder = Some(op.client);
                LockOutput::Granted { fence: None }
            }
            LockCall::Acquire => LockOutput::Busy,
            LockCall::Release { .. } if holds => {
                self.holder = None;
                LockOutput::Done
            }
            LockCall::Renew if holds => LockOutput::Done,
            LockCall::Release { .. } | LockCall::Renew => LockOutput::NotHeld,
        }
    }

    fn is_valid_step(&mut self, op: &LockInput, ret: &LockOutput) -> bool {
        match (op.call, ret) {
            (_, LockOutput::NoEffect) => true,
            // Tokens do not matter to a mutex.
            (LockCall::Acquire, LockOutput::Granted { .. }) => {
                self.invoke(op) == LockOutput::Granted { fence: None }
            }
            _ => self.invoke(op) == *ret,
        }
    }
}

struct MutexSubject;

/// The real lock, with the tokens it has issued.
#[derive(Debug, Default)]
struct RealLock {
    holder: Option<i64>,
    fence: u64,
}

impl Subject for MutexSubject {
    const NAME: &'static str = "mutex";
    type Input = LockInput;
    type Output = LockOutput;
    type Model = Mutex;
    type Spec = MutexSpec;
    type Real = RealLock;

    fn model() -> Mutex {
        Mutex
    }

    fn spec() -> MutexSpec {
        MutexSpec::default()
    }

    fn real() -> RealLock {
        RealLock::default()
    }

    fn input(rng: &mut SmallRng, client: i64, real: &RealLock) -> LockInput {
        // Mostly what a client would do: acquire when it does not hold the
        // lock, release when it does; sometimes not.
        let holds = real.holder == Some(client);
        let roll = rng.gen_range(0..10);
        let call = match (holds, roll) {
            (true, 0..=5) | (false, 7..=8) => {
                LockCall::Release { fence: rng.gen_bool(0.5).then(|| rng.gen_range(1..=5)) }
            }
            (true, 6..=7) | (false, 9) => LockCall::Renew,
            _ => LockCall::Acquire,
        };
        LockInput { client, call }
    }

    fn execute(rng: &mut SmallRng, real: &mut RealLock, input: &LockInput) -> LockOutput {
        if rng.gen_bool(0.05) {
            return LockOutput::NoEffect;
        }
        let holds = real.holder == Some(input.client);
        match input.call {
            LockCall::Acquire if real.holder.is_none() => {
                real.holder = Some(input.client);
                real.fence += 1;
                LockOutput::Granted { fence: rng.gen_bool(0.5).then_some(real.fence) }
            }
            LockCall::Acquire => LockOutput::Busy,
            LockCall::Release { .. } if holds => {
                real.holder = None;
                LockOutput::Done
            }
            LockCall::Renew if holds => LockOutput::Done,
            LockCall::Release { .. } | LockCall::Renew => LockOutput::NotHeld,
        }
    }

    fn corrupt(rng: &mut SmallRng, input: &LockInput) -> LockOutput {
        if rng.gen_bool(0.03) {
            return match input.call {
                LockCall::Acquire => LockOutput::Done,
                _ => LockOutput::Busy,
            };
        }
        match (input.call, rng.gen_range(0..10)) {
            (_, 0) => LockOutput::NoEffect,
            (LockCall::Acquire, 1..=5) => {
                LockOutput::Granted { fence: rng.gen_bool(0.5).then(|| rng.gen_range(1..=5)) }
            }
            (LockCall::Acquire, _) => LockOutput::Busy,
            (_, 1..=5) => LockOutput::Done,
            (_, _) => LockOutput::NotHeld,
        }
    }

    fn op(input: &LockInput) -> LockInput {
        *input
    }

    fn ret(output: &LockOutput) -> LockOutput {
        *output
    }
}

#[derive(Debug, Clone, Copy)]
enum Status {
    Idle,
    /// In flight; whether it has taken effect on the real object.
    Pending {
        op: usize,
        effected: bool,
    },
    /// Its last operation never returned: it invokes nothing more.
    Crashed,
}

/// A history of a real execution, some outputs then spoiled.
fn generate<S: Subject>(rng: &mut SmallRng) -> History<S> {
    let clients = rng.gen_range(1..=MAX_CLIENTS);
    let wanted = rng.gen_range(1..=MAX_OPERATIONS);
    let crash_chance = [0.0, 0.05, 0.15][rng.gen_range(0..3)];
    let mut status = vec![Status::Idle; clients as usize];
    let mut real = S::real();
    let mut ops: History<S> = Vec::new();
    let mut outputs: Vec<Option<S::Output>> = Vec::new();
    let mut position = 0u64;
    loop {
        let idle: Vec<usize> =
            (0..status.len()).filter(|&c| matches!(status[c], Status::Idle)).collect();
        let pending: Vec<usize> =
            (0..status.len()).filter(|&c| matches!(status[c], Status::Pending { .. })).collect();
        let can_invoke = ops.len() < wanted && !idle.is_empty();
        if !can_invoke && pending.is_empty() {
            break;
        }
        if can_invoke && (pending.is_empty() || rng.gen_bool(0.4)) {
            let client = idle[rng.gen_range(0..idle.len())];
            let input = S::input(rng, client as i64, &real);
            status[client] = Status::Pending { op: ops.len(), effected: false };
            ops.push(Operation {
                client: client as i64,
                input,
                output: None,
                call: position,
                ret: None,
            });
            outputs.push(None);
            position += 1;
            continue;
        }
        let client = pending[rng.gen_range(0..pending.len())];
        let Status::Pending { op, effected } = status[client] else { unreachable!() };
        if rng.gen_bool(crash_chance) {
            // Never returns, whether or not it took effect.
            status[client] = Status::Crashed;
        } else if !effected {
            outputs[op] = Some(S::execute(rng, &mut real, &ops[op].input));
            status[client] = Status::Pending { op, effected: true };
        } else {
            ops[op].output = outputs[op].take();
            ops[op].ret = Some(position);
            position += 1;
            status[client] = Status::Idle;
        }
    }
    if rng.gen_bool(0.5) {
        let returned: Vec<usize> = (0..ops.len()).filter(|&op| ops[op].ret.is_some()).collect();
        if !returned.is_empty() {
            // One or two outputs changed, where a few tries find any that
            // can change (a plain write's cannot).
            let mut changes = rng.gen_range(1..=2);
            for _ in 0..12 {
                let op = returned[rng.gen_range(0..returned.len())];
                let output = Some(S::corrupt(rng, &ops[op].input));
                if output != ops[op].output {
                    ops[op].output = output;
                    changes -= 1;
                    if changes == 0 {
                        break;
                    }
                }
            }
        }
    }
    ops
}

fn lockcheck_verdict<S: Subject>(ops: &History<S>) -> bool {
    let all: Vec<usize> = (0..ops.len()).collect();
    let verdict = |limits: &SearchLimits| match search(&S::model(), ops, &all, limits).0 {
        SearchOutcome::Linearizable => true,
        SearchOutcome::NotLinearizable(_) => false,
        SearchOutcome::Unknown(reason) => {
            panic!("{}: lockcheck gave unknown ({reason}) on\n{}", S::NAME, describe::<S>(ops))
        }
    };
    let whole = verdict(&SearchLimits::default());
    // The windowed cache (used by default only for long parts) must agree.
    let windowed = verdict(&SearchLimits { window_from_ops: 0, ..SearchLimits::default() });
    assert_eq!(
        whole,
        windowed,
        "{}: windowed search disagrees on\n{}",
        S::NAME,
        describe::<S>(ops)
    );
    whole
}

/// A spec that counts the steps stateright's search takes, and gives up
/// (unwinding, without a panic message) past a budget: its search has no
/// memoisation, and a rare history costs it seconds.
#[derive(Debug, Clone)]
struct Budgeted<T> {
    spec: T,
    steps: Rc<Cell<u64>>,
    budget: u64,
}

/// The payload of the unwind that ends an over-budget search.
struct OverBudget;

impl<T> Budgeted<T> {
    fn count(&self) {
        self.steps.set(self.steps.get() + 1);
        if self.steps.get() > self.budget {
            std::panic::resume_unwind(Box::new(OverBudget));
        }
    }
}

impl<T: SequentialSpec> SequentialSpec for Budgeted<T> {
    type Op = T::Op;
    type Ret = T::Ret;

    fn invoke(&mut self, op: &T::Op) -> T::Ret {
        self.count();
        self.spec.invoke(op)
    }

    fn is_valid_step(&mut self, op: &T::Op, ret: &T::Ret) -> bool {
        self.count();
        self.spec.is_valid_step(op, ret)
    }
}

/// Stateright's verdict, replaying the history's calls and returns in
/// real-time order; `None` if its search went over `budget` steps. With the
/// steps taken.
fn stateright_verdict<S: Subject>(ops: &History<S>, budget: u64) -> (Option<bool>, u64) {
    let mut events: Vec<(u64, bool, usize)> = Vec::new();
    for (at, op) in ops.iter().enumerate() {
        events.push((op.call, true, at));
        if let Some(ret) = op.ret {
            events.push((ret, false, at));
        }
    }
    events.sort_unstable();
    let steps = Rc::new(Cell::new(0));
    let mut tester =
        LinearizabilityTester::new(Budgeted { spec: S::spec(), steps: steps.clone(), budget });
    for (_, is_call, at) in events {
        let op = &ops[at];
        let fed = if is_call {
            tester.on_invoke(op.client, S::op(&op.input)).map(|_| ())
        } else {
            let output = op.output.as_ref().expect("an operation that returned has an output");
            tester.on_return(op.client, S::ret(output)).map(|_| ())
        };
        if let Err(error) = fed {
            panic!(
                "{}: stateright refused the history ({error}):\n{}",
                S::NAME,
                describe::<S>(ops)
            );
        }
    }
    match std::panic::catch_unwind(AssertUnwindSafe(|| tester.is_consistent())) {
        Ok(consistent) => (Some(consistent), steps.get()),
        Err(payload) if payload.is::<OverBudget>() => (None, steps.get()),
        Err(payload) => std::panic::resume_unwind(payload),
    }
}

fn describe<S: Subject>(ops: &History<S>) -> String {
    let model = S::model();
    let mut lines: Vec<String> = ops
        .iter()
        .map(|op| {
            let ret = op.ret.map_or("never".to_string(), |ret| ret.to_string());
            let what = model.describe_operation(&op.input, op.output.as_ref());
            format!("  [{:>2} .. {ret:>5}] client {}: {what}", op.call, op.client)
        })
        .collect();
    lines.push(format!("  as data: {ops:?}"));
    lines.join("\n")
}

/// The history with operations removed, one at a time, while the checkers
/// still disagree. Removing an operation keeps every client's operations
/// sequential, and an `info` one still last.
fn shrink<S: Subject>(mut ops: History<S>, budget: u64) -> History<S> {
    let disagree = |ops: &History<S>| match stateright_verdict::<S>(ops, budget).0 {
        Some(stateright) => stateright != lockcheck_verdict::<S>(ops),
        None => false,
    };
    'outer: loop {
        for at in 0..ops.len() {
            let mut fewer = ops.clone();
            fewer.remove(at);
            if disagree(&fewer) {
                ops = fewer;
                continue 'outer;
            }
        }
        return ops;
    }
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|value| value.parse().ok()).unwrap_or(default)
}

fn differential<S: Subject>(seed_offset: u64) {
    let cases = env_or("DIFFERENTIAL_CASES", CASES);
    let seed = env_or("DIFFERENTIAL_SEED", 0x10c_c4ec_u64) ^ seed_offset;
    let budget = env_or("DIFFERENTIAL_BUDGET", STATERIGHT_BUDGET);
    let mut rng = SmallRng::seed_from_u64(seed);
    let (mut linearizable, mut not_linearizable, mut with_info, mut skipped) = (0, 0, 0, 0);
    let (mut lockcheck_time, mut stateright_time) = (Duration::ZERO, Duration::ZERO);
    let mut steps_taken: Vec<u64> = Vec::with_capacity(cases);
    for case in 0..cases {
        let ops = generate::<S>(&mut rng);
        let clock = Instant::now();
        let lockcheck = lockcheck_verdict::<S>(&ops);
        lockcheck_time += clock.elapsed();
        let clock = Instant::now();
        let (stateright, steps) = stateright_verdict::<S>(&ops, budget);
        stateright_time += clock.elapsed();
        steps_taken.push(steps);
        let Some(stateright) = stateright else {
            skipped += 1;
            continue;
        };
        if lockcheck != stateright {
            let small = shrink::<S>(ops.clone(), budget);
            panic!(
                "{}: case {case} (seed {seed:#x}): lockcheck says linearizable={lockcheck}, \
                 stateright says linearizable={stateright}\nhistory:\n{}\nshrunk to:\n{}\n\
                 (shrunk: lockcheck linearizable={}, stateright linearizable={:?})",
                S::NAME,
                describe::<S>(&ops),
                describe::<S>(&small),
                lockcheck_verdict::<S>(&small),
                stateright_verdict::<S>(&small, budget).0,
            );
        }
        if lockcheck {
            linearizable += 1;
        } else {
            not_linearizable += 1;
        }
        if ops.iter().any(|op| op.ret.is_none()) {
            with_info += 1;
        }
    }
    steps_taken.sort_unstable();
    let compared = linearizable + not_linearizable;
    eprintln!(
        "{}: {compared} of {cases} histories compared, all agree: {linearizable} linearizable, \
         {not_linearizable} not linearizable, {with_info} with operations that never returned; \
         {skipped} skipped, stateright's search over {budget} steps on them; stateright's steps \
         median {}, 99th percentile {}; time in lockcheck {lockcheck_time:.2?}, in stateright \
         {stateright_time:.2?}",
        S::NAME,
        steps_taken[cases / 2],
        steps_taken[cases * 99 / 100],
    );
    for (class, count) in [("linearizable", linearizable), ("not linearizable", not_linearizable)] {
        assert!(
            count * 5 >= cases,
            "{}: only {count} of {cases} histories were {class}: the generator needs tuning",
            S::NAME
        );
    }
    assert!(
        with_info * 10 >= cases,
        "{}: only {with_info} of {cases} histories had info operations",
        S::NAME
    );
    assert!(
        skipped * 100 <= cases,
        "{}: {skipped} of {cases} histories were over stateright's budget: the generator needs tuning",
        S::NAME
    );
}

#[test]
fn register_agrees_with_stateright() {
    differential::<RwRegister>(1);
}

#[test]
fn cas_register_agrees_with_stateright() {
    differential::<CasRegisterSubject>(2);
}

#[test]
fn mutex_agrees_with_stateright() {
    differential::<MutexSubject>(3);
}

/// The mapping itself, on histories whose verdicts are known.
#[test]
fn both_checkers_agree_on_known_histories() {
    fn op<I, O>(
        client: i64,
        input: I,
        output: Option<O>,
        call: u64,
        ret: Option<u64>,
    ) -> Operation<I, O> {
        Operation { client, input, output, call, ret }
    }
    use RegisterInput::{Cas, Read, Write};
    use RegisterOutput as Out;
    // A write that never returned may be seen late, or never, but once seen
    // it cannot be unseen.
    let late: History<CasRegisterSubject> = vec![
        op(1, Write(7), None, 0, None),
        op(2, Read, Some(Out::Read(None)), 1, Some(2)),
        op(2, Read, Some(Out::Read(Some(7))), 3, Some(4)),
    ];
    let flicker: History<CasRegisterSubject> = vec![
        op(1, Write(7), None, 0, None),
        op(2, Read, Some(Out::Read(Some(7))), 1, Some(2)),
        op(2, Read, Some(Out::Read(None)), 3, Some(4)),
    ];
    // A failed CAS needs the register not to hold its old value.
    let failed_cas: History<CasRegisterSubject> = vec![
        op(1, Write(1), Some(Out::Written), 0, Some(1)),
        op(2, Cas(1, 2), Some(Out::Cas(false)), 2, Some(3)),
    ];
    for (ops, expected) in [(late, true), (flicker, false), (failed_cas, false)] {
        assert_eq!(
            lockcheck_verdict::<CasRegisterSubject>(&ops),
            expected,
            "{}",
            describe::<CasRegisterSubject>(&ops)
        );
        assert_eq!(
            stateright_verdict::<CasRegisterSubject>(&ops, u64::MAX).0,
            Some(expected),
            "{}",
            describe::<CasRegisterSubject>(&ops)
        );
    }
    // Only the holder releases.
    let lock = |client, call| LockInput { client, call };
    let release = LockCall::Release { fence: None };
    let stolen: History<MutexSubject> = vec![
        op(1, lock(1, LockCall::Acquire), Some(LockOutput::Granted { fence: Some(1) }), 0, Some(1)),
        op(2, lock(2, release), Some(LockOutput::Done), 2, Some(3)),
    ];
    let refused: History<MutexSubject> = vec![
        op(1, lock(1, LockCall::Acquire), Some(LockOutput::Granted { fence: None }), 0, Some(1)),
        op(2, lock(2, release), Some(LockOutput::NotHeld), 2, Some(3)),
        op(2, lock(2, LockCall::Acquire), Some(LockOutput::Busy), 4, Some(5)),
    ];
    for (ops, expected) in [(stolen, false), (refused, true)] {
        assert_eq!(
            lockcheck_verdict::<MutexSubject>(&ops),
            expected,
            "{}",
            describe::<MutexSubject>(&ops)
        );
        assert_eq!(
            stateright_verdict::<MutexSubject>(&ops, u64::MAX).0,
            Some(expected),
            "{}",
            describe::<MutexSubject>(&ops)
        );
    }
}
