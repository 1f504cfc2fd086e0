//! Hard mutex histories of one lock, for the linearizability benchmarks.
//!
//! [`generate`] plays `clients` clients against one correct mutex. Every
//! operation takes effect at one instant, chosen at random inside its
//! interval, and the intervals of concurrent clients overlap freely, so the
//! search cannot read the order off the events. A share of the operations
//! crash (`info`): a crashed acquire never took effect, a crashed release did,
//! and the client goes on as a new process, as a Jepsen client does. Every
//! history it makes is linearizable; how long a checker takes to say so is
//! what the benchmark measures. The same options give the same history.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::event::{Event, EventType, Function, Process};

#[derive(Debug, Clone, PartialEq)]
pub struct HardOptions {
    /// Client operations (invoke and completion pairs).
    pub ops: usize,
    pub clients: u32,
    /// The share of operations that crash, in percent.
    pub info_percent: f64,
    pub seed: u64,
}

impl Default for HardOptions {
    fn default() -> Self {
        HardOptions { ops: 20_000, clients: 10, info_percent: 0.0, seed: 0 }
    }
}

/// The lock every generated history uses.
pub const KEY: &str = "lock";

/// Mean nanoseconds between two operations' effects.
const GAP_NS: u64 = 1_000_000;

struct Slot {
    process: i64,
    /// When its latest operation completed: the next is invoked after it.
    idle_from: u64,
    holds: bool,
}

/// A linearizable mutex history of `options.ops` operations on [`KEY`].
pub fn generate(options: &HardOptions) -> Vec<Event> {
    let clients = options.clients.max(1) as usize;
    let mut rng = SmallRng::seed_from_u64(options.seed);
    let mut slots: Vec<Slot> = (0..clients)
        .map(|slot| Slot { process: slot as i64, idle_from: 0, holds: false })
        .collect();
    let mut next_process = clients as i64;
    // An operation lasts up to as long as every client's turn in a row, so
    // that about `clients` of them are in flight at any instant.
    let span = GAP_NS * clients as u64;
    let crash = (options.info_percent / 100.0).clamp(0.0, 1.0);
    let mut held = false;
    let mut now = span;
    // (time, process, type, function): sorted by time at the end.
    let mut raw: Vec<(u64, i64, EventType, Function)> = Vec::with_capacity(options.ops * 2);
    let mut ops = 0;
    while ops < options.ops {
        now += rng.gen_range(1..=2 * GAP_NS);
        let ready: Vec<usize> = (0..clients).filter(|&at| slots[at].idle_from < now).collect();
        if ready.is_empty() {
            continue;
        }
        let at = ready[rng.gen_range(0..ready.len())];
        let slot = &mut slots[at];
        let invoke = rng.gen_range(slot.idle_from.max(now.saturating_sub(span)) + 1..=now);
        let complete = now + rng.gen_range(1..=span);
        let crashed = rng.gen_bool(crash);
        let (f, outcome) = if slot.holds {
            // The release takes effect, crashed or not.
            held = false;
            slot.holds = false;
            (Function::Release, EventType::Ok)
        } else if held {
            (Function::Acquire, EventType::Fail)
        } else if crashed {
            // A crashed acquire never took effect.
            (Function::Acquire, EventType::Ok)
        } else {
            held = true;
            slot.holds = true;
            (Function::Acquire, EventType::Ok)
        };
        let outcome = if crashed { EventType::Info } else { outcome };
        raw.push((invoke, slot.process, EventType::Invoke, f.clone()));
        raw.push((complete, slot.process, outcome, f));
        slot.idle_from = complete;
        if crashed {
            slot.process = next_process;
            next_process += 1;
        }
        ops += 1;
    }
    raw.sort_by_key(|&(time, process, event_type, _)| {
        (time, process, event_type != EventType::Invoke)
    });
    raw.into_iter()
        .enumerate()
        .map(|(index, (time_ns, process, event_type, f))| Event {
            index: index as u64,
            time_ns,
            process: Process::Client(process),
            event_type,
            f,
            key: Some(KEY.to_string()),
            value: None,
            error: (event_type == EventType::Fail).then(|| "busy".to_string()),
            extra: None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{analyze, default_checkers, CheckOptions, HistoryBuilder, Verdict};

    fn check(options: &HardOptions) -> Verdict {
        let mut builder = HistoryBuilder::default();
        for event in generate(options) {
            builder.push(&event).expect("a generated event is well formed");
        }
        analyze(&builder.finish(), &default_checkers(), &CheckOptions::default()).verdict
    }

    #[test]
    fn the_histories_are_valid_with_and_without_crashes() {
        for info_percent in [0.0, 5.0, 30.0] {
            for seed in 0..3 {
                let options = HardOptions { ops: 600, clients: 6, info_percent, seed };
                assert_eq!(check(&options), Verdict::Valid, "{options:?}");
            }
        }
    }

    #[test]
    fn the_same_options_give_the_same_history_and_crashes_change_processes() {
        let options = HardOptions { ops: 500, clients: 4, info_percent: 10.0, seed: 7 };
        let (first, second) = (generate(&options), generate(&options));
        assert_eq!(first.len(), 1000);
        assert!(first.iter().zip(&second).all(|(a, b)| a.time_ns == b.time_ns
            && a.process == b.process
            && a.event_type == b.event_type));
        let infos = first.iter().filter(|event| event.event_type == EventType::Info).count();
        assert!((20..=80).contains(&infos), "{infos} crashed of 500");
        let processes: std::collections::BTreeSet<String> =
            first.iter().map(|event| event.process.to_string()).collect();
        assert_eq!(processes.len(), 4 + infos);
    }
}
