//! What a linearizability model is: a sequential specification, small as
//! porcupine's and stateright's `SequentialSpec`.

use std::fmt::Debug;
use std::hash::Hash;

/// One operation of a history, as the search sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operation<I, O> {
    /// The client (Jepsen process) that issued it.
    pub client: i64,
    pub input: I,
    /// `None` when the outcome is unknown (`info`, or never completed).
    pub output: Option<O>,
    /// Where it was invoked: an event index (or any position that orders
    /// invocations and returns in real time, without ties).
    pub call: u64,
    /// Where it returned; `None` when it never did (`info`): such an
    /// operation may take effect at any point after its call, or never.
    pub ret: Option<u64>,
}

/// A sequential specification. `step` says whether an operation with its
/// output is legal in a state, and what state follows.
pub trait Model: Sync {
    type State: Clone + Eq + Hash + Debug + Send;
    type Input: Debug + Sync;
    type Output: Debug + Sync;

    /// A short name: `mutex`, `fenced-lease`, `register`, …
    fn name(&self) -> &'static str;

    fn init(&self) -> Self::State;

    /// The state after the operation took effect, or `None` if it cannot
    /// take effect with this output in this state. An unknown output (`None`)
    /// means the operation took effect with whatever result it would have
    /// had; the search separately allows it never to take effect.
    fn step(
        &self,
        state: &Self::State,
        input: &Self::Input,
        output: Option<&Self::Output>,
    ) -> Option<Self::State>;

    /// Whether the operation, with this output, never changes the state:
    /// wherever `step` accepts it, the state after it is the state before
    /// (a read, an acquire refused as busy, a failed compare-and-set). The
    /// search linearizes such an operation as soon as it is pending and
    /// legal, and never branches on it. Say true only when that holds in
    /// every state: a write of the value already held leaves that state
    /// unchanged, but not the others, so a write is never read-only.
    fn read_only(&self, input: &Self::Input, output: Option<&Self::Output>) -> bool {
        let _ = (input, output);
        false
    }

    /// Splits a history into independent parts (by key, say), each checked
    /// on its own. Each part lists positions in `operations`. The default
    /// is one part.
    fn partition(&self, operations: &[Operation<Self::Input, Self::Output>]) -> Vec<Vec<usize>> {
        vec![(0..operations.len()).collect()]
    }

    /// A label for a part, e.g. its key.
    fn partition_name(
        &self,
        operations: &[Operation<Self::Input, Self::Output>],
        part: &[usize],
    ) -> String {
        let _ = (operations, part);
        String::new()
    }

    fn describe_operation(&self, input: &Self::Input, output: Option<&Self::Output>) -> String {
        match output {
            Some(output) => format!("{input:?} -> {output:?}"),
            None => format!("{input:?} -> ?"),
        }
    }

    fn describe_state(&self, state: &Self::State) -> String {
        format!("{state:?}")
    }

    /// Heap memory a state holds beyond its own size, roughly, for the
    /// search's memory bound. Err on the high side.
    fn state_heap_bytes(&self, state: &Self::State) -> usize {
        let _ = state;
        0
    }
}

/// A model whose step may lead to several states (or whose start is not one
/// state). [`PowerSet`] turns it into a [`Model`] over sets of states, as
/// porcupine does: an operation is legal if it is legal from any state of the
/// set, and the next set is every state it can lead to.
pub trait NondeterministicModel: Sync {
    type State: Clone + Ord + Hash + Debug + Send;
    type Input: Debug + Sync;
    type Output: Debug + Sync;

    fn name(&self) -> &'static str;
    fn init(&self) -> Vec<Self::State>;
    /// Pushes every state the operation can lead to (none if illegal).
    fn step(
        &self,
        state: &Self::State,
        input: &Self::Input,
        output: Option<&Self::Output>,
        next: &mut Vec<Self::State>,
    );
}

/// The deterministic [`Model`] over sets of states of a nondeterministic one.
#[derive(Debug, Clone, Copy)]
pub struct PowerSet<M>(pub M);

impl<M: NondeterministicModel> Model for PowerSet<M> {
    /// Sorted and without duplicates, so equal sets compare equal.
    type State = Vec<M::State>;
    type Input = M::Input;
    type Output = M::Output;

    fn name(&self) -> &'static str {
        self.0.name()
    }

    fn init(&self) -> Self::State {
        let mut states = self.0.init();
        states.sort_unstable();
        states.dedup();
        states
    }

    fn step(
        &self,
        states: &Self::State,
        input: &Self::Input,
        output: Option<&Self::Output>,
    ) -> Option<Self::State> {
        let mut next = Vec::new();
        for state in states {
            self.0.step(state, input, output, &mut next);
        }
        next.sort_unstable();
        next.dedup();
        (!next.is_empty()).then_some(next)
    }

    fn state_heap_bytes(&self, states: &Self::State) -> usize {
        states.capacity() * std::mem::size_of::<M::State>()
    }
}

/// A model over sets of states of `M`, for parts with operations of unknown
/// outcome: such an operation, once placed, either took effect or had none,
/// and both states go on in one set, as porcupine's power-set models do.
/// Without it the search must branch on every crashed operation, placing it
/// and not, and keep every subset of them it has placed: on a history of
/// one lock with 5% crashed operations that is exponential. An operation of
/// unknown outcome can still be placed later or never (the search leaves
/// it pending), so nothing is lost.
///
/// A set is kept in the order of its states' hashes, so that one set
/// reached by two paths is one cache entry (a collision only costs a miss).
#[derive(Debug, Clone, Copy)]
pub struct EitherWay<M>(pub M);

fn hash_of<S: Hash>(state: &S) -> u64 {
    let mut hasher = rustc_hash::FxHasher::default();
    state.hash(&mut hasher);
    std::hash::Hasher::finish(&hasher)
}

impl<M: Model> Model for EitherWay<M> {
    type State = Vec<M::State>;
    type Input = M::Input;
    type Output = M::Output;

    fn name(&self) -> &'static str {
        self.0.name()
    }

    fn init(&self) -> Self::State {
        vec![self.0.init()]
    }

    fn step(
        &self,
        states: &Self::State,
        input: &Self::Input,
        output: Option<&Self::Output>,
    ) -> Option<Self::State> {
        let mut next: Vec<M::State> = Vec::with_capacity(states.len() * 2);
        let mut push = |state: M::State| {
            if !next.contains(&state) {
                next.push(state);
            }
        };
        for state in states {
            if output.is_none() {
                push(state.clone());
            }
            if let Some(after) = self.0.step(state, input, output) {
                push(after);
            }
        }
        if next.is_empty() {
            return None;
        }
        if next.len() > 1 {
            next.sort_by_cached_key(hash_of);
        }
        Some(next)
    }

    /// An operation read-only in `M` keeps, of a set, the states in which it
    /// is legal: a set no larger, and every operation legal from a set is
    /// legal from any larger one. So it can be taken out of a linearization
    /// without making one that follows illegal, which is what `read_only`
    /// promises the search.
    fn read_only(&self, input: &Self::Input, output: Option<&Self::Output>) -> bool {
        self.0.read_only(input, output)
    }

    fn describe_operation(&self, input: &Self::Input, output: Option<&Self::Output>) -> String {
        self.0.describe_operation(input, output)
    }

    fn describe_state(&self, states: &Self::State) -> String {
        let described: Vec<String> =
            states.iter().map(|state| self.0.describe_state(state)).collect();
        described.join(" or ")
    }

    fn state_heap_bytes(&self, states: &Self::State) -> usize {
        states.capacity() * std::mem::size_of::<M::State>()
            + states.iter().map(|state| self.0.state_heap_bytes(state)).sum::<usize>()
    }
}
