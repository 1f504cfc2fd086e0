//! Resource safety: what the protected resource accepted, judged per resource.
//!
//! * Fenced writes: the resource must never accept a write whose token is
//!   below one it had already accepted (the stale holder's write).
//! * Unfenced writes: the storage cannot refuse anything, so count the writes
//!   that landed from a client after its lock had been granted to another
//!   client (the double charge).
//! * Reads must return the latest accepted write.
//! * Writes that record the version they made must lose no acknowledged
//!   update (`lost.rs`).

use rustc_hash::FxHashMap as HashMap;

use crate::beliefs::{Belief, Beliefs};
use crate::event::Function;
use crate::format_time;
use crate::history::{History, KeyId, Op, OpId, Outcome};
use crate::realtime::{largest_preceding, Timed};
use crate::verdict::{
    CheckOptions, CheckResult, Checker, Findings, Subject, Violation, ViolationKind, Window,
};

#[derive(Debug, Default, Clone, Copy)]
pub struct ResourceSafety;

impl Checker for ResourceSafety {
    fn name(&self) -> &'static str {
        crate::verdict::names::RESOURCE_SAFETY
    }

    fn judge(&self, history: &Subject<'_>, options: &CheckOptions) -> CheckResult {
        let mut per_key: Vec<Vec<OpId>> = vec![Vec::new(); history.key_count()];
        for (id, op) in history.ops().iter().enumerate() {
            if matches!(op.f, Function::Write | Function::Read) {
                per_key[op.key as usize].push(id as OpId);
            }
        }
        if per_key.iter().all(Vec::is_empty) {
            return CheckResult::not_applicable(self.name(), "no write or read operations");
        }
        let beliefs = history.beliefs();
        let permits = history.permits();
        let mut findings = Findings::new(self.name(), options);
        let mut unguarded = 0u64;
        let mut lost = crate::lost::lost_updates(history);
        for (key, ops) in per_key.iter().enumerate().filter(|(_, ops)| !ops.is_empty()) {
            let mut violations = stale_writes(history, beliefs, ops);
            violations.append(&mut lost[key]);
            let (double_charges, unguarded_here) = double_charges(history, beliefs, permits, ops);
            violations.extend(double_charges);
            unguarded += unguarded_here;
            violations.extend(ReadCheck::new(history, ops).stale_reads(ops));
            violations.sort_by_key(|violation| violation.events.last().copied());
            findings.key(history.key_name(key as KeyId), ops.len() as u64, violations);
        }
        if unguarded > 0 {
            findings.note(format!(
                "{unguarded} unfenced writes landed from clients that believed they held no lock; they were not judged"
            ));
        }
        findings.finish()
    }
}

fn stale_writes(history: &History, beliefs: &Beliefs, ops: &[OpId]) -> Vec<Violation> {
    let accepted: Vec<OpId> = ops
        .iter()
        .copied()
        .filter(|&id| {
            let op = history.op(id);
            op.f == Function::Write && op.is_ok() && op.fence.is_some()
        })
        .collect();
    let timed: Vec<Timed<u64>> = accepted
        .iter()
        .map(|&id| {
            let op = history.op(id);
            Timed {
                invoke: op.invoke.index,
                completion: history.completion_or_end(op).index,
                value: op.fence.expect("filtered on fence"),
            }
        })
        .collect();
    let mut violations = Vec::new();
    for (at, preceding) in largest_preceding(&timed).into_iter().enumerate() {
        let Some(preceding) = preceding else { continue };
        if timed[preceding].value <= timed[at].value {
            continue;
        }
        let (newer, stale) = (history.op(accepted[preceding]), history.op(accepted[at]));
        let key = history.key_name(stale.key);
        let landed = history.completion_or_end(stale);
        violations.push(Violation {
            root: beliefs.held_at_write(accepted[at]).map(|held| held.start.index).min(),
            finding: None,
            linearization: None,
            kind: ViolationKind::StaleWrite,
            key: key.to_string(),
            processes: vec![newer.process, stale.process],
            window: None,
            events: vec![history.completion_or_end(newer).index, stale.invoke.index, landed.index],
            explanation: format!(
                "{key:?} accepted a stale write: process {} wrote with token {} at index {} (t={}), after the write \
                 with the newer token {} by process {} had been accepted at index {}. Fenced storage must reject it.",
                stale.process,
                stale.fence.unwrap_or_default(),
                landed.index,
                format_time(landed.time_ns),
                newer.fence.unwrap_or_default(),
                newer.process,
                history.completion_or_end(newer).index,
            ),
        });
    }
    violations
}

/// Unfenced accepted writes whose writer's lock had been granted to another
/// client after the writer's own grant and before the write was invoked.
fn double_charges(
    history: &History,
    beliefs: &Beliefs,
    permits: &[u32],
    ops: &[OpId],
) -> (Vec<Violation>, u64) {
    let mut violations = Vec::new();
    let mut unguarded = 0;
    for &id in ops {
        let write = history.op(id);
        if write.f != Function::Write || !write.is_ok() || write.fence.is_some() {
            continue;
        }
        let mut held_any = false;
        let mut usurper = None;
        for held in beliefs.held_at_write(id) {
            held_any = true;
            // A semaphore shares its key by design: another grant of it is
            // no sign that this holder is stale.
            if permits[held.key as usize] > 1 {
                continue;
            }
            if let Some(other) = granted_to_another(beliefs, held, write) {
                usurper = Some((held, other));
                break;
            }
        }
        if !held_any {
            unguarded += 1;
        }
        if let Some((held, other)) = usurper {
            violations.push(double_charge(history, write, held, other));
        }
    }
    (violations, unguarded)
}

fn granted_to_another<'a>(beliefs: &'a Beliefs, held: &Belief, write: &Op) -> Option<&'a Belief> {
    // Only a grant that completed before the write was invoked proves the
    // write landed after it; one that fell while the write was in flight may
    // have come after the write had already landed.
    let lock = beliefs.of_key(held.key);
    let after = lock.partition_point(|belief| belief.start.index <= held.start.index);
    lock[after..]
        .iter()
        .take_while(|belief| belief.start.index < write.invoke.index)
        .find(|belief| belief.process != held.process)
}

fn double_charge(history: &History, write: &Op, held: &Belief, other: &Belief) -> Violation {
    let resource = history.key_name(write.key);
    let lock = history.key_name(held.key);
    let landed = history.completion_or_end(write);
    let data = write.data.as_deref().map(|data| format!(" {data:?}")).unwrap_or_default();
    Violation {
        root: Some(held.start.index),
        finding: None,
        linearization: None,
        kind: ViolationKind::DoubleCharge,
        key: resource.to_string(),
        processes: vec![other.process, write.process],
        window: Some(Window::between(other.start, landed)),
        events: vec![held.start.index, other.start.index, write.invoke.index, landed.index],
        explanation: format!(
            "an unfenced write{data} to {resource:?} by process {w} landed at index {li} (t={lt}) from a stale holder: \
             {w} was granted {lock:?} at index {wg}, but {lock:?} was granted to process {o} at index {og} (t={ot}), \
             before the write was sent. Nothing let the storage refuse it.",
            w = write.process,
            li = landed.index,
            lt = format_time(landed.time_ns),
            wg = held.start.index,
            o = other.process,
            og = other.start.index,
            ot = format_time(other.start.time_ns),
        ),
    }
}

/// Which write each read may legally return.
struct ReadCheck<'h> {
    history: &'h History,
    /// Writes that may have landed (ok or info), by the data they wrote.
    by_data: HashMap<&'h str, Vec<OpId>>,
    /// Writes that may have landed, by token (for reads that return no data).
    by_fence: HashMap<u64, Vec<OpId>>,
    /// Accepted writes by completion index, with the running maximum of their
    /// invoke index and the write that has it: a write completed before
    /// `at` whose invoke is after `w`'s completion definitely overwrote `w`.
    completed: Vec<(u64, u64, OpId)>,
}

impl<'h> ReadCheck<'h> {
    fn new(history: &'h History, ops: &[OpId]) -> Self {
        let mut by_data: HashMap<&str, Vec<OpId>> = HashMap::default();
        let mut by_fence: HashMap<u64, Vec<OpId>> = HashMap::default();
        let mut completed = Vec::new();
        for &id in ops {
            let op = history.op(id);
            if op.f != Function::Write || op.outcome == Outcome::Fail {
                continue;
            }
            if let Some(data) = op.data.as_deref() {
                by_data.entry(data).or_default().push(id);
            }
            if let Some(fence) = op.fence {
                by_fence.entry(fence).or_default().push(id);
            }
            if let (Outcome::Ok, Some(done)) = (op.outcome, op.completion) {
                completed.push((done.index, op.invoke.index, id));
            }
        }
        completed.sort_unstable();
        let mut latest: Option<(u64, OpId)> = None;
        for entry in &mut completed {
            if latest.is_none_or(|(invoke, _)| entry.1 > invoke) {
                latest = Some((entry.1, entry.2));
            }
            (entry.1, entry.2) = latest.expect("just set");
        }
        ReadCheck { history, by_data, by_fence, completed }
    }

    /// The accepted write invoked latest among those completed before `index`.
    fn latest_before(&self, index: u64) -> Option<(u64, OpId)> {
        let count = self.completed.partition_point(|&(done, _, _)| done < index);
        count.checked_sub(1).map(|last| (self.completed[last].1, self.completed[last].2))
    }

    fn stale_reads(&self, ops: &[OpId]) -> Vec<Violation> {
        ops.iter()
            .map(|&id| self.history.op(id))
            .filter(|op| op.f == Function::Read && op.is_ok())
            .filter_map(|read| self.judge(read))
            .collect()
    }

    fn judge(&self, read: &Op) -> Option<Violation> {
        let latest = self.latest_before(read.invoke.index);
        let candidates: &[OpId] = match (read.data.as_deref(), read.fence) {
            (None, None) => {
                let (_, overwriting) = latest?;
                return Some(self.stale_read(read, None, overwriting));
            }
            (Some(data), _) => self.by_data.get(data).map_or(&[], Vec::as_slice),
            (None, Some(fence)) => self.by_fence.get(&fence).map_or(&[], Vec::as_slice),
        };
        let read_done = self.history.completion_or_end(read).index;
        let mut returned = None;
        for &id in candidates {
            let write = self.history.op(id);
            let fence_matches =
                read.fence.is_none() || write.fence.is_none() || read.fence == write.fence;
            if write.invoke.index >= read_done || !fence_matches {
                continue;
            }
            let overwritten_by = match (write.outcome, write.completion, latest) {
                (Outcome::Ok, Some(done), Some((invoke, by))) if invoke > done.index => Some(by),
                _ => None,
            };
            match overwritten_by {
                None => return None,
                Some(by) => returned = Some((id, by)),
            }
        }
        Some(match returned {
            Some((write, overwriting)) => self.stale_read(read, Some(write), overwriting),
            None => self.phantom_read(read),
        })
    }

    fn read_summary(&self, read: &Op) -> String {
        let done = self.history.completion_or_end(read);
        format!(
            "process {}'s read of {:?} at index {} (t={})",
            read.process,
            self.history.key_name(read.key),
            done.index,
            format_time(done.time_ns)
        )
    }

    fn stale_read(&self, read: &Op, returned: Option<OpId>, overwriting: OpId) -> Violation {
        let newer = self.history.op(overwriting);
        let newer_done = self.history.completion_or_end(newer).index;
        let what = match returned {
            Some(write) => {
                format!("the write invoked at index {}", self.history.op(write).invoke.index)
            }
            None => "the initial, empty state".to_string(),
        };
        let mut events: Vec<u64> =
            returned.map(|w| self.history.op(w).invoke.index).into_iter().collect();
        events.extend([
            newer.invoke.index,
            newer_done,
            read.invoke.index,
            self.history.completion_or_end(read).index,
        ]);
        events.sort_unstable();
        Violation {
            root: None,
            finding: None,
            linearization: None,
            kind: ViolationKind::StaleRead,
            key: self.history.key_name(read.key).to_string(),
            processes: vec![newer.process, read.process],
            window: None,
            events,
            explanation: format!(
                "{} returned {what}, but process {}'s write invoked at index {} had overwritten it and was accepted at \
                 index {newer_done}, before the read was invoked.",
                self.read_summary(read),
                newer.process,
                newer.invoke.index,
            ),
        }
    }

    fn phantom_read(&self, read: &Op) -> Violation {
        let returned = match (read.data.as_deref(), read.fence) {
            (Some(data), Some(fence)) => format!("{data:?} with token {fence}"),
            (Some(data), None) => format!("{data:?}"),
            (None, fence) => format!("token {}", fence.unwrap_or_default()),
        };
        Violation {
            root: None,
            finding: None,
            linearization: None,
            kind: ViolationKind::StaleRead,
            key: self.history.key_name(read.key).to_string(),
            processes: vec![read.process],
            window: None,
            events: vec![read.invoke.index, self.history.completion_or_end(read).index],
            explanation: format!(
                "{} returned {returned}, which no write that may have been accepted before the read ended had written.",
                self.read_summary(read)
            ),
        }
    }
}
