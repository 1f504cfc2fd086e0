//! When each client believed it held each lock.
//!
//! A belief runs from an acquire's `ok` to the first of: the same client's
//! release invoke on that lock; the completion of any of its operations that
//! ended in `info` (the client crashed or gave up, and never acts again); the
//! end of the history. A belief is what the client would act on, so it is what
//! mutual exclusion is judged by, whatever the server thought.

use rustc_hash::FxHashMap as HashMap;

use crate::event::Function;
use crate::history::{History, KeyId, Moment, OpId, Outcome};

/// Why a belief ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BeliefEnd {
    /// The client invoked a release of the lock (this op).
    Released(OpId),
    /// An operation of the client ended in `info` (this op).
    Crashed(OpId),
    /// The client still believed it held the lock when the history ended.
    EndOfHistory,
}

/// One client's belief that it held one lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Belief {
    pub process: i64,
    pub key: KeyId,
    /// The acquire whose `ok` started it.
    pub grant: OpId,
    pub start: Moment,
    pub end: Moment,
    pub end_reason: BeliefEnd,
}

/// The beliefs of a history, per lock, and which beliefs each writer held.
#[derive(Debug, Clone, Default)]
pub struct Beliefs {
    /// Indexed by key; each list is sorted by start.
    by_key: Vec<Vec<Belief>>,
    /// For each write op invoked while its client believed it held locks:
    /// (write op, key, position of the belief in `by_key[key]`), by op.
    held_at_write: Vec<(OpId, KeyId, u32)>,
}

impl Beliefs {
    pub fn compute(history: &History) -> Beliefs {
        let mut by_key: Vec<Vec<Belief>> = vec![Vec::new(); history.key_count()];
        let mut held_at_write = Vec::new();
        // The beliefs each client holds now: (key, position in by_key[key]).
        let mut active: HashMap<i64, Vec<(KeyId, u32)>> = HashMap::default();
        let end = history.end();
        for step in history.steps() {
            let op = history.op(step.op);
            if !step.is_completion {
                match op.f {
                    Function::Release => {
                        if let Some(held) = active.get_mut(&op.process) {
                            if let Some(at) = held.iter().position(|&(key, _)| key == op.key) {
                                let (key, position) = held.swap_remove(at);
                                let belief = &mut by_key[key as usize][position as usize];
                                belief.end = op.invoke;
                                belief.end_reason = BeliefEnd::Released(step.op);
                            }
                        }
                    }
                    Function::Write => {
                        if let Some(held) = active.get(&op.process) {
                            held_at_write.extend(held.iter().map(|&(key, at)| (step.op, key, at)));
                        }
                    }
                    _ => {}
                }
                continue;
            }
            let completion = op.completion.expect("a completion step has a completion");
            match op.outcome {
                Outcome::Ok if op.f == Function::Acquire => {
                    let held = active.entry(op.process).or_default();
                    // A second grant while already believing extends nothing:
                    // the first belief still covers it.
                    if !held.iter().any(|&(key, _)| key == op.key) {
                        let beliefs = &mut by_key[op.key as usize];
                        held.push((op.key, beliefs.len() as u32));
                        beliefs.push(Belief {
                            process: op.process,
                            key: op.key,
                            grant: step.op,
                            start: completion,
                            end,
                            end_reason: BeliefEnd::EndOfHistory,
                        });
                    }
                }
                Outcome::Info => {
                    for (key, position) in active.remove(&op.process).unwrap_or_default() {
                        let belief = &mut by_key[key as usize][position as usize];
                        belief.end = completion;
                        belief.end_reason = BeliefEnd::Crashed(step.op);
                    }
                }
                _ => {}
            }
        }
        held_at_write.sort_unstable_by_key(|&(op, _, _)| op);
        Beliefs { by_key, held_at_write }
    }

    /// The beliefs about one lock, sorted by start.
    pub fn of_key(&self, key: KeyId) -> &[Belief] {
        self.by_key.get(key as usize).map_or(&[], Vec::as_slice)
    }

    /// The beliefs a writer held when it invoked this write.
    pub fn held_at_write(&self, write: OpId) -> impl Iterator<Item = &Belief> + '_ {
        let start = self.held_at_write.partition_point(|&(op, _, _)| op < write);
        self.held_at_write[start..]
            .iter()
            .take_while(move |&&(op, _, _)| op == write)
            .map(|&(_, key, at)| &self.by_key[key as usize][at as usize])
    }
}

impl Belief {
    /// How the belief ended, for a sentence: "until it invoked release at index 12".
    pub fn describe_end(&self, history: &History) -> String {
        match self.end_reason {
            BeliefEnd::Released(_) => format!(
                "until it invoked release at index {} (t={})",
                self.end.index,
                crate::format_time(self.end.time_ns)
            ),
            BeliefEnd::Crashed(op) => format!(
                "until its {} ended in info at index {} (t={})",
                history.op(op).f,
                self.end.index,
                crate::format_time(self.end.time_ns)
            ),
            BeliefEnd::EndOfHistory => "to the end of the history".to_string(),
        }
    }

    /// The event that ended the belief, if one did.
    pub fn end_event(&self) -> Option<u64> {
        match self.end_reason {
            BeliefEnd::EndOfHistory => None,
            _ => Some(self.end.index),
        }
    }
}
