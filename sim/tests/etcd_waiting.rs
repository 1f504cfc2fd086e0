//! sim-etcd-waiting: etcd's `Mutex.Lock` on the simulated cluster, where a
//! client that finds the lock taken puts its key in line and watches the
//! key just before its own. These tests hold what the truth table's cells
//! (`sim/src/matrix.rs`) do not: determinism, and the cost of waiting, one
//! wake-up per release, against the TryLock recipe's polls.

use lockcheck_checker::{analyze_events, write_events, CheckOptions, Event, Verdict, WakeUps};
use lockcheck_sim::{run, Backend, FaultKind, RunOptions, SimRun};

use lockcheck_checker::names::MUTUAL_EXCLUSION as MUTEX;
use lockcheck_checker::names::RESOURCE_SAFETY as RESOURCE;

fn options(backend: Backend, faults: &[FaultKind], seed: u64) -> RunOptions {
    RunOptions { backend, faults: faults.to_vec(), seed, ..RunOptions::default() }
}

fn simulate(options: &RunOptions) -> SimRun {
    run(options).unwrap_or_else(|error| {
        panic!("{error}; replay: cargo run -- {}", options.replay().arguments())
    })
}

fn bytes(events: &[Event]) -> Vec<u8> {
    let mut bytes = Vec::new();
    write_events(&mut bytes, events).expect("writing to a Vec cannot fail");
    bytes
}

#[test]
fn the_same_seed_gives_the_same_history_byte_for_byte() {
    let faults = [FaultKind::Pause, FaultKind::Partition, FaultKind::Kill];
    let options = options(Backend::EtcdWaiting, &faults, 11);
    let first = bytes(&simulate(&options).events);
    assert!(!first.is_empty());
    assert!(first == bytes(&simulate(&options).events), "two runs differ");
    let other = RunOptions { seed: 12, ..options };
    assert!(first != bytes(&simulate(&other).events), "the seed does not reach the run");
}

#[test]
fn waiters_in_line_wake_once_a_release_where_trylock_polls() {
    for seed in 0..3 {
        let waiting = simulate(&options(Backend::EtcdWaiting, &[], seed));
        let analysis = analyze_events(&waiting.events, &CheckOptions::default())
            .expect("a well-formed history");
        assert_eq!(analysis.verdict_of(MUTEX), Some(Verdict::Valid), "seed {seed}");
        assert_eq!(analysis.verdict_of(RESOURCE), Some(Verdict::Valid), "seed {seed}");
        let line = WakeUps::of(&waiting.events);
        assert!(line.watched, "seed {seed}: the waiters say how often they woke");
        assert!(line.woken > 0, "seed {seed}: nobody waited in line: {line:?}");
        // Each release (or a waiter giving up) wakes at most the one
        // waiter that watched it.
        let per_release = line.per_release().expect("releases");
        assert!(per_release <= 1.0, "seed {seed}: {per_release} wake-ups per release: {line:?}");
        // The same clients on TryLock are refused and poll.
        let trying = simulate(&options(Backend::Etcd, &[], seed));
        let polls = WakeUps::of(&trying.events);
        assert!(!polls.watched && polls.woken == 0, "seed {seed}: {polls:?}");
        assert!(polls.busy > 0, "seed {seed}: no poll found the lock taken: {polls:?}");
    }
}
