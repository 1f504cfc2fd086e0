//! History types and checkers for lockcheck.
//!
//! A history (JSON Lines, see `histories/README.md`) is read by [`read_history`]
//! into a [`History`]: each client operation's invoke paired with its
//! completion. Every checker implements [`Checker`] and returns a
//! [`CheckResult`] with a [`Verdict`] per key and the violations that prove an
//! `Invalid`. [`analyze`] runs them all. Start reading at `beliefs.rs`: the
//! notion of who believed they held which lock, when, is what most checkers
//! judge by.

mod analysis;
mod beliefs;
mod capped;
mod coverage;
mod deadlock;
mod election;
mod event;
mod expect;
mod fastline;
mod fence;
pub mod findings;
mod history;
mod idempotency;
pub mod import;
pub mod linear;
mod liveness;
mod lost;
mod mutex;
mod once;
pub mod quote;
mod reader;
mod realtime;
pub mod redact;
mod resource;
pub mod synth;
pub mod synth_hard;
mod verdict;
mod wakeups;

pub use analysis::{
    analyze, analyze_events, analyze_imported, analyze_operations, default_checkers, summarize,
    Analysis, Summary, NOTHING_TO_CHECK,
};
pub use beliefs::{Belief, BeliefEnd, Beliefs};
pub use capped::{LineTooLong, DEFAULT_MAX_LINE_BYTES};
pub use coverage::{coverage, coverage_with, Coverage, FaultCoverage, KindCoverage};
pub use deadlock::Deadlock;
pub use election::ReElection;
pub use event::{Event, EventType, Function, NemesisDetails, PaymentFields, Process, ValueFields};
pub use expect::{CellOutcome, Expect, Judgement};
pub use fence::FenceMonotonicity;
pub use findings::{Cause, Finding};
pub use history::{
    History, HistoryBuilder, HistoryError, KeyId, Moment, NemesisEvent, Op, OpId, Outcome,
    PaymentOp, Step,
};
pub use idempotency::Idempotency;
pub use linear::Linearizability;
pub use liveness::Liveness;
pub use mutex::MutualExclusion;
pub use once::ExactlyOnce;
pub use reader::{
    read_history, read_history_capped, read_history_sized, read_history_tolerant, write_events,
    EventReader, ReadError, MAX_BAD_LINES,
};
pub use redact::redact;
pub use resource::ResourceSafety;
pub use verdict::{
    names, CheckOptions, CheckResult, Checker, KeyVerdict, LinearizationEvidence, Purpose, Subject,
    Verdict, Violation, ViolationKind, Window,
};
pub use wakeups::WakeUps;

/// A moment of the test (nanoseconds since it started) for people: `12.500 s`.
pub fn format_time(ns: u64) -> String {
    format!("{:.3} s", ns as f64 / 1e9)
}

/// A duration for people: `12.500 s`, or `3.2 ms` below a second.
pub fn format_seconds(ns: u64) -> String {
    if ns >= 1_000_000_000 || ns == 0 {
        format!("{:.3} s", ns as f64 / 1e9)
    } else if ns >= 1_000_000 {
        format!("{:.1} ms", ns as f64 / 1e6)
    } else {
        format!("{:.1} µs", ns as f64 / 1e3)
    }
}

/// Whether a failed lock operation was refused by the lock service (someone
/// holds the lock; this client does not), rather than failing for another
/// reason (unreachable, no majority) that says nothing about the lock.
/// Knossos' words for the refusals are accepted too.
pub(crate) fn is_refusal(error: Option<&str>) -> bool {
    match error {
        None => true,
        Some(error) => {
            matches!(error, "busy" | "already-held" | "locked" | "not-held" | "not-found")
        }
    }
}

/// What one scan of a history's operations finds about its keys and
/// clients, which several checkers and the summary need.
#[derive(Debug)]
pub(crate) struct KeyStats {
    /// Keys that some acquire names, in key order, with their count of lock
    /// operations (acquire, release, renew).
    pub lock_keys: Vec<(KeyId, u64)>,
    /// Per key: how many may hold it at once (the most permits an acquire
    /// asked for; 1 when none did).
    pub permits: Vec<u32>,
    /// How many keys are written or read.
    pub resource_keys: usize,
    /// Distinct client processes.
    pub clients: usize,
}

impl KeyStats {
    pub(crate) fn of(history: &History) -> KeyStats {
        let keys = history.key_count();
        let mut counts = vec![0u64; keys];
        let mut acquired = vec![false; keys];
        let mut resource = vec![false; keys];
        let mut permits = vec![1u32; keys];
        // Clients numbered from 0 (the usual) in a table, others hashed.
        let mut small_clients = vec![false; 1 << 16];
        let mut clients = rustc_hash::FxHashSet::default();
        for op in history.ops() {
            match usize::try_from(op.process) {
                Ok(process) if process < small_clients.len() => small_clients[process] = true,
                _ => {
                    clients.insert(op.process);
                }
            }
            let key = op.key as usize;
            match op.f {
                Function::Acquire => {
                    acquired[key] = true;
                    counts[key] += 1;
                    if let Some(asked) = op.permits {
                        permits[key] = permits[key].max(asked);
                    }
                }
                Function::Release | Function::Renew => counts[key] += 1,
                Function::Write | Function::Read => resource[key] = true,
                _ => {}
            }
        }
        KeyStats {
            lock_keys: (0..keys)
                .filter(|&key| acquired[key])
                .map(|key| (key as KeyId, counts[key]))
                .collect(),
            permits,
            resource_keys: resource.into_iter().filter(|&seen| seen).count(),
            clients: clients.len() + small_clients.into_iter().filter(|&seen| seen).count(),
        }
    }
}

/// Builds a history from compact lines `time process type f key [value]`
/// (indices are assigned in order), for the checkers' unit tests. A value
/// `!reason` is an error instead, and `!reason {…}` an error with a value.
#[cfg(test)]
pub(crate) fn history_from(lines: &str) -> History {
    let mut builder = HistoryBuilder::new();
    for (index, line) in lines.lines().map(str::trim).filter(|line| !line.is_empty()).enumerate() {
        let mut words = line.splitn(6, ' ');
        let mut word = || words.next().expect("time process type f key [value]");
        let (time, process, event_type, f, key) = (word(), word(), word(), word(), word());
        let value = words.next().unwrap_or("null");
        let (value, error) = match value.strip_prefix('!') {
            Some(error) => {
                let (error, value) = error.split_once(' ').unwrap_or((error, "null"));
                (value, format!(r#","error":"{error}""#))
            }
            None => (value, String::new()),
        };
        let json = format!(
            r#"{{"index":{index},"time":{time},"process":{process},"type":"{event_type}","f":"{f}","key":"{key}","value":{value}{error}}}"#
        );
        let event: Event = serde_json::from_str(&json).expect("test event parses");
        builder.push(&event).expect("test history is well formed");
    }
    builder.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_scan_finds_lock_keys_permits_resources_and_clients() {
        let history = history_from(
            r#"
            1 0 invoke acquire a
            2 0 ok acquire a
            3 70000 invoke acquire s {"permits":3}
            4 70000 fail acquire s !busy
            5 -3 invoke write r {"data":"x"}
            6 -3 ok write r
            7 0 invoke release a
            8 0 ok release a
            9 5 invoke read q
            10 5 ok read q
            11 9 invoke renew b
            "#,
        );
        let stats = KeyStats::of(&history);
        let names: Vec<(&str, u64)> =
            stats.lock_keys.iter().map(|&(key, ops)| (history.key_name(key), ops)).collect();
        // `b` is renewed but never acquired: not a lock key.
        assert_eq!(names, [("a", 2), ("s", 1)]);
        let permits: Vec<(&str, u32)> = (0..history.key_count())
            .map(|key| (history.key_name(key as KeyId), stats.permits[key]))
            .collect();
        assert_eq!(permits, [("a", 1), ("s", 3), ("r", 1), ("q", 1), ("b", 1)]);
        assert_eq!(stats.resource_keys, 2);
        // Numbered from 0 in the table, the others hashed: 0, 5, 9, 70000, -3.
        assert_eq!(stats.clients, 5);
        assert_eq!(stats.clients, history.clients().len());
    }
}
