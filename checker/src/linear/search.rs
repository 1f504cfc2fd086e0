//! The Wing–Gong / Lowe search for a linearization, as porcupine runs it.
//!
//! Calls and returns of one part of the history sit in a doubly linked list in
//! real-time order. The search walks it: at a call it tries to linearize that
//! operation now (the model must accept it); at a return it has reached an
//! operation that must already have taken effect and has not, so it undoes
//! its latest choice and tries the next candidate. A cache of (set of
//! linearized operations, model state) pairs already explored prunes
//! revisits. Operations that never returned have no return entry: they may be
//! linearized anywhere after their call, or never, and the search succeeds
//! once every operation that returned has been linearized.
//!
//! Beyond porcupine: the set of linearized operations is hashed
//! incrementally (one XOR per step, Zobrist-style), so a step costs the same
//! whatever the history's length; and time and memory are bounded, giving
//! `Unknown` rather than a hang or an out-of-memory kill.

use std::collections::BTreeSet;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use rayon::slice::ParallelSliceMut;
use rustc_hash::{FxHashMap, FxHasher};

use super::model::{Model, Operation};

const NIL: u32 = u32::MAX;
/// How often (in steps) the deadline is looked at.
const DEADLINE_EVERY: u64 = 1 << 12;
/// How many configurations of a group `remember` looks at for one that
/// dominates the new one.
const DOMINATION_SCAN: usize = 4;
/// Parts of up to this many operations store their whole linearized set by
/// default: cheaper to compare than a window, and small.
const WINDOW_FROM_OPS: usize = 1024;
/// How many possible states the evidence keeps.
const EVIDENCE_STATES: usize = 8;
/// A forced step (the operation placed was the only one that could be, its
/// return next in line) is remembered once in this many. Remembering is
/// only pruning, so skipping it is sound; a path that reaches a skipped
/// configuration again walks at most this many forced steps before it
/// meets a remembered one. A history of one lock held in turn is all forced
/// steps, and this keeps its cache (and the time spent filling it) small.
const FORCED_REMEMBERED_EVERY: u64 = 64;

/// Bounds on one search.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SearchLimits {
    pub deadline: Option<Instant>,
    /// Memory the cache of explored states may take, approximately.
    pub max_memory_bytes: usize,
    /// Stop every part's search once one part is found not linearizable
    /// (the verdict is settled); the others end as unknown.
    pub stop_at_first_violation: bool,
    /// Parts with more operations than this store each explored
    /// configuration as a window of the linearized set (see `CacheEntry`);
    /// smaller ones store the whole set, which is cheaper to compare.
    pub window_from_ops: usize,
}

impl Default for SearchLimits {
    fn default() -> Self {
        SearchLimits {
            deadline: None,
            max_memory_bytes: 4 << 30,
            stop_at_first_violation: false,
            window_from_ops: WINDOW_FROM_OPS,
        }
    }
}

/// The reason a search gives when another part's violation stopped it.
pub const STOPPED: &str =
    "not finished: the search stopped once another key was found not linearizable";

/// Why a part is not linearizable: the furthest the search got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evidence<S> {
    /// The longest linearizable prefix found: operations (positions in the
    /// history's operations) in the order they were linearized.
    pub prefix: Vec<usize>,
    /// The operation (its position in the history's operations) that had to
    /// have taken effect after that prefix and could not: the
    /// earliest-returning one not linearized.
    pub blocked: usize,
    /// Model states possible after prefixes of that length (a few).
    pub states: Vec<S>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SearchOutcome<S> {
    Linearizable,
    NotLinearizable(Evidence<S>),
    /// A bound was hit; the reason says which.
    Unknown(String),
}

/// What a search cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SearchStats {
    pub steps: u64,
    pub cached_states: u64,
}

/// An explored configuration. The linearized set is kept as a window: every
/// operation that returned and was called before `base * 64` is linearized
/// (the search cannot have passed its return otherwise), so only the words
/// from `base` on are stored, with the unknown operations below the window
/// that are not linearized (few: the search places an operation of unknown
/// outcome as soon as it can, and the model keeps both of its outcomes). Porcupine stores the whole bitset, which makes its
/// memory grow with the square of a part's length; this grows with the
/// concurrency instead.
struct CacheEntry<S> {
    base: u32,
    window: Box<[u64]>,
    /// Sorted.
    old_pending: Box<[u32]>,
    state: S,
    /// The next entry with the same exact key.
    next_exact: u32,
    /// The next entry with the same returned operations and state hash.
    next_group: u32,
}

/// The list of call and return entries, with "dancing links" removal.
struct Entries {
    next: Vec<u32>,
    prev: Vec<u32>,
    op: Vec<u32>,
    is_call: Vec<bool>,
    /// The return entry of each operation, `NIL` for one that never returned.
    return_of: Vec<u32>,
    head: u32,
}

impl Entries {
    /// `part` is in call order (ties in their order in `part`).
    fn new<I, O>(operations: &[Operation<I, O>], part: &[u32]) -> Entries {
        // Calls come in part order; returns are sorted apart and merged in.
        // Calls sort before returns at the same position: concurrent, the
        // permissive reading, so a tie can never make a false Invalid.
        let mut returns: Vec<(u64, u32)> = part
            .iter()
            .enumerate()
            .filter_map(|(local, &global)| {
                let operation = &operations[global as usize];
                operation.ret.map(|ret| (ret.max(operation.call), local as u32))
            })
            .collect();
        returns.par_sort_unstable();
        let count = part.len() + returns.len();
        let mut entries = Entries {
            next: Vec::with_capacity(count + 1),
            prev: Vec::with_capacity(count + 1),
            op: Vec::with_capacity(count),
            is_call: Vec::with_capacity(count),
            return_of: vec![NIL; part.len()],
            head: count as u32,
        };
        let mut push = |is_call: bool, op: u32| {
            let at = entries.op.len() as u32;
            entries.op.push(op);
            entries.is_call.push(is_call);
            if !is_call {
                entries.return_of[op as usize] = at;
            }
        };
        let mut pending = returns.iter().peekable();
        for (local, &global) in part.iter().enumerate() {
            let call = operations[global as usize].call;
            while let Some(&(_, op)) = pending.next_if(|&&(ret, _)| ret < call) {
                push(false, op);
            }
            push(true, local as u32);
        }
        for &(_, op) in pending {
            push(false, op);
        }
        drop(returns);
        // A list in array order, from the head (at `count`) to NIL.
        let count = count as u32;
        let first = if count == 0 { NIL } else { 0 };
        entries.next.extend((0..count).map(|at| if at + 1 < count { at + 1 } else { NIL }));
        entries.next.push(first);
        entries.prev.extend((0..count).map(|at| at.checked_sub(1).unwrap_or(count)));
        entries.prev.push(NIL);
        entries
    }

    fn unlink(&mut self, entry: u32) {
        let (prev, next) = (self.prev[entry as usize], self.next[entry as usize]);
        self.next[prev as usize] = next;
        if next != NIL {
            self.prev[next as usize] = prev;
        }
    }

    fn relink(&mut self, entry: u32) {
        let (prev, next) = (self.prev[entry as usize], self.next[entry as usize]);
        self.next[prev as usize] = entry;
        if next != NIL {
            self.prev[next as usize] = entry;
        }
    }

    /// Removes a call and its return.
    fn lift(&mut self, call: u32) {
        self.unlink(call);
        let ret = self.return_of[self.op[call as usize] as usize];
        if ret != NIL {
            self.unlink(ret);
        }
    }

    /// Undoes the latest `lift`, which must have been of this call.
    fn unlift(&mut self, call: u32) {
        let ret = self.return_of[self.op[call as usize] as usize];
        if ret != NIL {
            self.relink(ret);
        }
        self.relink(call);
    }
}

/// A fixed pseudo-random 64-bit value per operation (splitmix64), so that the
/// hash of a set of operations is the XOR of its members' values.
fn zobrist(op: u32) -> u64 {
    let mut z = (op as u64).wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn state_hash<S: Hash>(state: &S) -> u64 {
    let mut hasher = FxHasher::default();
    state.hash(&mut hasher);
    hasher.finish()
}

/// Searches for a linearization of one part of a history.
pub fn search<M: Model>(
    model: &M,
    operations: &[Operation<M::Input, M::Output>],
    part: &[usize],
    limits: &SearchLimits,
) -> (SearchOutcome<M::State>, SearchStats) {
    search_until(model, operations, part, limits, &AtomicBool::new(false))
}

/// As [`search_until`], of every operation: one part.
pub(crate) fn search_all_until<M: Model>(
    model: &M,
    operations: &[Operation<M::Input, M::Output>],
    limits: &SearchLimits,
    stop: &AtomicBool,
) -> (SearchOutcome<M::State>, SearchStats) {
    let all = (0..operations.len() as u32).collect();
    Search::with_part(model, operations, all, limits, stop).run()
}

/// As [`search`], giving up as unknown once `stop` is set (by another part).
pub fn search_until<M: Model>(
    model: &M,
    operations: &[Operation<M::Input, M::Output>],
    part: &[usize],
    limits: &SearchLimits,
    stop: &AtomicBool,
) -> (SearchOutcome<M::State>, SearchStats) {
    Search::new(model, operations, part, limits, stop).run()
}

struct Search<'a, M: Model> {
    model: &'a M,
    operations: &'a [Operation<M::Input, M::Output>],
    /// The part's operations (positions in `operations`) in call order:
    /// an operation's rank here is its bit in the linearized set.
    part: Vec<u32>,
    limits: &'a SearchLimits,
    stop: &'a AtomicBool,
    entries: Entries,
    linearized: Vec<u64>,
    /// The operations that never returned, as a bitset like `linearized`.
    unknown: Vec<u64>,
    /// The first rank that is neither linearized nor unknown (kept at 0 for
    /// parts short enough that the whole set is cheaper to store).
    low: u32,
    windowed: bool,
    /// The unknown operations not linearized (kept for windowed parts).
    pending_unknown: BTreeSet<u32>,
    /// One past the highest rank linearized, after each linearization in
    /// turn (operations are undone in the reverse order).
    high: Vec<u32>,
    linearized_hash: u64,
    /// Hash of (linearized set, state) to the latest entry with it.
    exact_index: FxHashMap<u64, u32>,
    /// Hash of (returned operations linearized, state) to the latest entry.
    group_index: FxHashMap<u64, u32>,
    /// The hash of the returned operations linearized.
    returned_hash: u64,
    has_unknown: bool,
    cache: Vec<CacheEntry<M::State>>,
    cache_bytes: usize,
    stats: SearchStats,
    /// Forced steps taken, to remember one in `FORCED_REMEMBERED_EVERY`.
    forced: u64,
    /// The deepest dead end met, its prefix left empty: that is kept in
    /// `best_prefix`, which is updated in place (a copy of the whole stack
    /// at each deeper dead end would cost the square of its depth).
    best: Option<Evidence<M::State>>,
    best_prefix: Vec<usize>,
    /// How many calls at the bottom of the stack `best_prefix` still shares.
    best_common: usize,
}

impl<'a, M: Model> Search<'a, M> {
    fn new(
        model: &'a M,
        operations: &'a [Operation<M::Input, M::Output>],
        part: &[usize],
        limits: &'a SearchLimits,
        stop: &'a AtomicBool,
    ) -> Self {
        let part: Vec<u32> = part.iter().map(|&global| global as u32).collect();
        Self::with_part(model, operations, part, limits, stop)
    }

    /// As `new`, with the part's positions given as a vector to keep.
    fn with_part(
        model: &'a M,
        operations: &'a [Operation<M::Input, M::Output>],
        mut part: Vec<u32>,
        limits: &'a SearchLimits,
        stop: &'a AtomicBool,
    ) -> Self {
        // Positions are kept in 32 bits.
        assert!(operations.len() <= u32::MAX as usize, "at most 2^32 operations");
        if !part.is_sorted_by_key(|&global| operations[global as usize].call) {
            part.sort_by_key(|&global| operations[global as usize].call);
        }
        let words = part.len().div_ceil(64);
        let mut unknown = vec![0; words];
        for (rank, &global) in part.iter().enumerate() {
            if operations[global as usize].ret.is_none() {
                unknown[rank / 64] |= 1u64 << (rank % 64);
            }
        }
        let has_unknown = unknown.iter().any(|&word| word != 0);
        let windowed = words * 64 > limits.window_from_ops;
        let pending_unknown = if windowed {
            (0..part.len() as u32)
                .filter(|&rank| operations[part[rank as usize] as usize].ret.is_none())
                .collect()
        } else {
            BTreeSet::new()
        };
        let mut search = Search {
            model,
            operations,
            entries: Entries::new(operations, &part),
            part,
            limits,
            stop,
            unknown,
            low: 0,
            windowed,
            pending_unknown,
            high: Vec::with_capacity(if windowed { words * 64 } else { 0 }),
            linearized: vec![0; words],
            linearized_hash: 0,
            exact_index: FxHashMap::default(),
            group_index: FxHashMap::default(),
            returned_hash: 0,
            has_unknown,
            cache: Vec::new(),
            cache_bytes: 0,
            stats: SearchStats::default(),
            forced: 0,
            best: None,
            best_prefix: Vec::new(),
            best_common: 0,
        };
        search.advance_low();
        search
    }

    fn operation(&self, op: u32) -> &'a Operation<M::Input, M::Output> {
        &self.operations[self.part[op as usize] as usize]
    }

    /// Moves `low` past every rank that is linearized or unknown.
    fn advance_low(&mut self) {
        if !self.windowed {
            return;
        }
        let count = self.part.len() as u32;
        while self.low < count {
            let word = self.low as usize / 64;
            let done = (self.linearized[word] | self.unknown[word]) >> (self.low % 64);
            let run = done.trailing_ones();
            if run == 0 {
                return;
            }
            self.low = (self.low + run).min(count);
        }
    }

    #[inline]
    fn toggle(&mut self, op: u32) {
        let (word, bit) = (op as usize / 64, 1u64 << (op % 64));
        self.linearized[word] ^= bit;
        self.linearized_hash ^= zobrist(op);
        let unknown = self.unknown[word] & bit != 0;
        if !unknown {
            self.returned_hash ^= zobrist(op);
        }
        if self.windowed {
            self.track_window(op, unknown, self.linearized[word] & bit != 0);
        }
    }

    /// Keeps `low`, `high` and the pending unknown operations up to date for
    /// a windowed part. Operations are undone in the reverse order they were
    /// linearized, so `high` is a stack.
    fn track_window(&mut self, op: u32, unknown: bool, now_linearized: bool) {
        if now_linearized {
            let high = self.high.last().copied().unwrap_or(0).max(op + 1);
            self.high.push(high);
        } else {
            self.high.pop();
        }
        if unknown {
            if now_linearized {
                self.pending_unknown.remove(&op);
            } else {
                self.pending_unknown.insert(op);
            }
        } else if now_linearized && op == self.low {
            self.advance_low();
        } else if !now_linearized && op < self.low {
            self.low = op;
        }
    }

    /// The words of the linearized set the window holds: from the word of
    /// `low` to the word of the highest linearized rank.
    fn window_words(&self) -> (usize, usize) {
        if !self.windowed {
            return (0, self.linearized.len());
        }
        let base = self.low as usize / 64;
        let high = self.high.last().copied().unwrap_or(0) as usize;
        (base, high.div_ceil(64).max(base))
    }

    /// The stored form of the current linearized set.
    fn snapshot(&self) -> (u32, Box<[u64]>, Box<[u32]>) {
        let (base, end) = self.window_words();
        let window: Box<[u64]> = self.linearized[base..end].into();
        let floor = (base * 64) as u32;
        let old_pending: Box<[u32]> = self.pending_unknown.range(..floor).copied().collect();
        (base as u32, window, old_pending)
    }

    fn same_set(&self, entry: &CacheEntry<M::State>, (base, end): (usize, usize)) -> bool {
        let current = &self.linearized[base..end];
        if entry.base as usize != base
            || entry.window.len() != current.len()
            || entry.window.iter().zip(current).any(|(old, now)| old != now)
        {
            return false;
        }
        if base == 0 {
            return true;
        }
        let floor = (base * 64) as u32;
        self.pending_unknown.range(..floor).eq(entry.old_pending.iter())
    }

    /// Whether `entry` has every operation linearized now, and the ones it
    /// lacks are all unknown.
    fn dominated_by(&self, entry: &CacheEntry<M::State>, (base, end): (usize, usize)) -> bool {
        if entry.base as usize != base {
            return false;
        }
        let current = &self.linearized[base..end];
        let unknown = &self.unknown[base..end];
        let covers =
            |old: u64, now: u64, unknown: u64| old & !now == 0 && (now & !old) & !unknown == 0;
        let window_ok = if entry.window.len() == current.len() {
            entry
                .window
                .iter()
                .zip(current)
                .zip(unknown)
                .all(|((&old, &now), &unknown)| covers(old, now, unknown))
        } else {
            let words = current.len().max(entry.window.len());
            (0..words).all(|index| {
                let old = entry.window.get(index).copied().unwrap_or(0);
                covers(
                    old,
                    current.get(index).copied().unwrap_or(0),
                    unknown.get(index).copied().unwrap_or(0),
                )
            })
        };
        // Below the window only unknown operations can differ; the entry
        // must have left pending every one pending now.
        let floor = (base * 64) as u32;
        window_ok
            && self
                .pending_unknown
                .range(..floor)
                .all(|op| entry.old_pending.binary_search(op).is_ok())
    }

    /// Records (linearized set, state) as explored; false if it, or a
    /// configuration that dominates it, already was.
    ///
    /// Beyond porcupine's exact match: an explored configuration with the
    /// same state and the same returned operations linearized, but only a
    /// subset of the unknown ones, dominates this one. Every continuation
    /// from here is open from there too (the extra unknown operations may
    /// simply never take effect), so if that configuration led nowhere, so
    /// does this. With many unknown operations (crashed clients) this prunes
    /// much of the search; the scan for a dominating configuration looks at
    /// the most recent few of its group only, which keeps a step cheap (any
    /// subset of explored configurations is sound to prune by).
    fn remember(&mut self, state: &M::State) -> bool {
        let state_hash = state_hash(state).rotate_left(17);
        let window = self.window_words();
        let exact_key = self.linearized_hash ^ state_hash;
        let mut at = self.exact_index.get(&exact_key).copied().unwrap_or(NIL);
        let exact_first = at;
        while at != NIL {
            let entry = &self.cache[at as usize];
            if entry.state == *state && self.same_set(entry, window) {
                return false;
            }
            at = entry.next_exact;
        }
        let group_key = self.returned_hash ^ state_hash;
        let group_first = if self.has_unknown {
            let first = self.group_index.get(&group_key).copied().unwrap_or(NIL);
            let mut at = first;
            let mut scanned = 0;
            while at != NIL && scanned < DOMINATION_SCAN {
                let entry = &self.cache[at as usize];
                if entry.state == *state && self.dominated_by(entry, window) {
                    return false;
                }
                at = entry.next_group;
                scanned += 1;
            }
            first
        } else {
            NIL
        };
        let (base, window, old_pending) = self.snapshot();
        self.cache_bytes += window.len() * 8
            + old_pending.len() * 4
            + std::mem::size_of::<CacheEntry<M::State>>()
            + self.model.state_heap_bytes(state)
            + 48;
        let index = self.cache.len() as u32;
        self.cache.push(CacheEntry {
            base,
            window,
            old_pending,
            state: state.clone(),
            next_exact: exact_first,
            next_group: group_first,
        });
        self.exact_index.insert(exact_key, index);
        if self.has_unknown {
            self.group_index.insert(group_key, index);
        }
        true
    }

    /// Notes how far this branch got before it had to backtrack.
    fn note_dead_end(&mut self, calls: &[(u32, M::State, bool)], state: &M::State, blocked: u32) {
        let depth = calls.len();
        match &mut self.best {
            Some(_) if self.best_prefix.len() > depth => {}
            Some(best) if self.best_prefix.len() == depth => {
                if best.states.len() < EVIDENCE_STATES && !best.states.contains(state) {
                    best.states.push(state.clone());
                }
            }
            _ => {
                self.best_prefix.truncate(self.best_common);
                let (part, entries) = (&self.part, &self.entries);
                self.best_prefix.extend(
                    calls[self.best_common..]
                        .iter()
                        .map(|&(call, _, _)| part[entries.op[call as usize] as usize] as usize),
                );
                self.best_common = depth;
                self.best = Some(Evidence {
                    prefix: Vec::new(),
                    blocked: self.part[blocked as usize] as usize,
                    states: vec![state.clone()],
                });
            }
        }
    }

    fn over_bounds(&self) -> Option<String> {
        if self.cache_bytes > self.limits.max_memory_bytes {
            return Some(format!(
                "the search reached its memory bound ({} MB) after {} states",
                self.limits.max_memory_bytes >> 20,
                self.cache.len()
            ));
        }
        if self.stats.steps % DEADLINE_EVERY == 0 {
            if self.stop.load(Ordering::Relaxed) {
                return Some(STOPPED.to_string());
            }
            if let Some(deadline) = self.limits.deadline {
                if Instant::now() >= deadline {
                    return Some(format!(
                        "the search ran out of time after {} steps and {} states",
                        self.stats.steps,
                        self.cache.len()
                    ));
                }
            }
        }
        None
    }

    /// Linearizes at once every pending read-only operation (see
    /// [`Model::read_only`]) that the model accepts in `state` without
    /// changing it: an acquire refused as busy while the lock is held, a
    /// release refused as not held, a read of the value held. Taking one
    /// costs nothing. Any order that completes the history from here places
    /// it somewhere; taken out of there, it changes no state, so the same
    /// order without it completes the history after it. So the configuration
    /// with it linearized succeeds exactly when the one without does, and the
    /// search never branches on it. Without this, a contended lock's refused
    /// acquires in flight are tried in every order and subset, which is
    /// exponential in the number of clients.
    fn absorb(
        &mut self,
        state: &M::State,
        calls: &mut Vec<(u32, M::State, bool)>,
        remaining_returns: &mut usize,
    ) {
        let mut entry = self.entries.next[self.entries.head as usize];
        while entry != NIL && self.entries.is_call[entry as usize] {
            let op = self.entries.op[entry as usize];
            let operation = self.operation(op);
            let (input, output) = (&operation.input, operation.output.as_ref());
            let unchanged = self.model.read_only(input, output)
                && self.model.step(state, input, output).is_some_and(|next| next == *state);
            if !unchanged {
                entry = self.entries.next[entry as usize];
                continue;
            }
            self.toggle(op);
            if self.entries.return_of[op as usize] != NIL {
                *remaining_returns -= 1;
            }
            self.entries.lift(entry);
            calls.push((entry, state.clone(), true));
            // The entry's own links still name its neighbours; its return
            // may have been the next entry, so go on from the one before.
            entry = self.entries.next[self.entries.prev[entry as usize] as usize];
        }
    }

    fn run(mut self) -> (SearchOutcome<M::State>, SearchStats) {
        let mut remaining_returns = self.entries.return_of.iter().filter(|&&r| r != NIL).count();
        let mut state = self.model.init();
        // The calls linearized so far, with the state before each, and
        // whether each was absorbed (see `absorb`) rather than chosen.
        // At most one per operation: reserved (untouched pages cost only
        // address space) so that a long history never copies it to grow.
        let mut calls: Vec<(u32, M::State, bool)> = Vec::with_capacity(self.part.len());
        self.absorb(&state, &mut calls, &mut remaining_returns);
        let mut entry = self.entries.next[self.entries.head as usize];
        let outcome = loop {
            if remaining_returns == 0 {
                break SearchOutcome::Linearizable;
            }
            self.stats.steps += 1;
            if let Some(reason) = self.over_bounds() {
                break SearchOutcome::Unknown(reason);
            }
            let op = if entry == NIL { NIL } else { self.entries.op[entry as usize] };
            if entry != NIL && self.entries.is_call[entry as usize] {
                let operation = self.operation(op);
                let next_state =
                    self.model.step(&state, &operation.input, operation.output.as_ref());
                if let Some(next_state) = next_state {
                    self.toggle(op);
                    let return_entry = self.entries.return_of[op as usize];
                    let forced = return_entry != NIL
                        && entry == self.entries.next[self.entries.head as usize]
                        && self.entries.next[entry as usize] == return_entry;
                    let skip = forced && {
                        self.forced += 1;
                        self.forced % FORCED_REMEMBERED_EVERY != 0
                    };
                    if skip || self.remember(&next_state) {
                        calls.push((entry, std::mem::replace(&mut state, next_state), false));
                        if self.entries.return_of[op as usize] != NIL {
                            remaining_returns -= 1;
                        }
                        self.entries.lift(entry);
                        self.absorb(&state, &mut calls, &mut remaining_returns);
                        entry = self.entries.next[self.entries.head as usize];
                        continue;
                    }
                    self.toggle(op);
                }
                entry = self.entries.next[entry as usize];
                continue;
            }
            // A return whose operation has not taken effect: undo the latest choice.
            if op != NIL {
                self.note_dead_end(&calls, &state, op);
            }
            // Absorbed operations are undone on the way: the configuration
            // before each fails exactly when the one after it does.
            let call = loop {
                let Some((call, previous, absorbed)) = calls.pop() else {
                    break None;
                };
                let undone = self.entries.op[call as usize];
                state = previous;
                self.toggle(undone);
                if self.entries.return_of[undone as usize] != NIL {
                    remaining_returns += 1;
                }
                self.entries.unlift(call);
                if !absorbed {
                    break Some(call);
                }
            };
            self.best_common = self.best_common.min(calls.len());
            let Some(call) = call else {
                let mut evidence = self.best.take().expect("a failed search has met a dead end");
                evidence.prefix = std::mem::take(&mut self.best_prefix);
                break SearchOutcome::NotLinearizable(evidence);
            };
            entry = self.entries.next[call as usize];
        };
        self.stats.cached_states = self.cache.len() as u64;
        (outcome, self.stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linear::models::{CasRegister, RegisterInput as In, RegisterOutput as Out};

    type Op = Operation<In, Out>;

    fn op(client: i64, input: In, output: Option<Out>, call: u64, ret: Option<u64>) -> Op {
        Operation { client, input, output, call, ret }
    }

    fn check(operations: &[Op]) -> SearchOutcome<Option<i64>> {
        let all: Vec<usize> = (0..operations.len()).collect();
        search(&CasRegister, operations, &all, &SearchLimits::default()).0
    }

    #[test]
    fn concurrent_write_may_take_effect_before_a_read() {
        let history = [
            op(1, In::Write(1), Some(Out::Written), 0, Some(3)),
            op(2, In::Read, Some(Out::Read(Some(1))), 1, Some(2)),
        ];
        assert_eq!(check(&history), SearchOutcome::Linearizable);
    }

    #[test]
    fn read_of_an_overwritten_value_is_not_linearizable() {
        let history = [
            op(1, In::Write(1), Some(Out::Written), 0, Some(1)),
            op(1, In::Write(2), Some(Out::Written), 2, Some(3)),
            op(2, In::Read, Some(Out::Read(Some(1))), 4, Some(5)),
        ];
        let SearchOutcome::NotLinearizable(evidence) = check(&history) else {
            panic!("linearizable?")
        };
        assert_eq!(evidence.prefix, [0, 1]);
        assert_eq!(evidence.blocked, 2);
        assert_eq!(evidence.states, [Some(2)]);
    }

    #[test]
    fn an_unknown_write_may_take_effect_late_or_never() {
        let late = [
            op(1, In::Write(7), None, 0, None),
            op(2, In::Read, Some(Out::Read(None)), 1, Some(2)),
            op(2, In::Read, Some(Out::Read(Some(7))), 3, Some(4)),
        ];
        assert_eq!(check(&late), SearchOutcome::Linearizable);
        let never = [
            op(1, In::Write(7), None, 0, None),
            op(2, In::Read, Some(Out::Read(None)), 5, Some(6)),
        ];
        assert_eq!(check(&never), SearchOutcome::Linearizable);
        // But once seen, it cannot be unseen.
        let flicker = [
            op(1, In::Write(7), None, 0, None),
            op(2, In::Read, Some(Out::Read(Some(7))), 1, Some(2)),
            op(2, In::Read, Some(Out::Read(None)), 3, Some(4)),
        ];
        assert!(matches!(check(&flicker), SearchOutcome::NotLinearizable(_)));
    }

    #[test]
    fn a_bound_gives_unknown_not_a_verdict() {
        let history: Vec<Op> =
            (0..20).map(|i| op(i, In::Write(i), Some(Out::Written), i as u64, Some(100))).collect();
        let all: Vec<usize> = (0..history.len()).collect();
        let limits = SearchLimits { max_memory_bytes: 1, ..SearchLimits::default() };
        let (outcome, _) = search(&CasRegister, &history, &all, &limits);
        assert!(matches!(outcome, SearchOutcome::Unknown(reason) if reason.contains("memory")));
    }
}
