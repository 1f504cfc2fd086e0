//! The replication table's services: a primary and its replica
//! (sim-primary-reads, sim-replica-reads, sim-sync-replica) and a
//! leaderless quorum (sim-leaderless-quorum). These tests hold what the
//! truth table's cells (`sim/src/matrix.rs`) do not: determinism, that a
//! synchronous replica that is down stops every grant while an asynchronous
//! one stops none, that the liveness report calls that unavailability
//! expected, and what the broken ones break.

use std::collections::BTreeMap;

use lockcheck_checker::{
    analyze_events, write_events, CheckOptions, Event, EventType, Function, Process, Verdict,
};
use lockcheck_sim::{run, Backend, FaultKind, RunOptions, SimRun};

use lockcheck_checker::names::FENCE_MONOTONICITY as FENCE;
use lockcheck_checker::names::LINEARIZABILITY as LINEAR;
use lockcheck_checker::names::LIVENESS;
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
    let backends = [
        Backend::PrimaryReads,
        Backend::ReplicaReads,
        Backend::SyncReplica,
        Backend::LeaderlessQuorum,
    ];
    for backend in backends {
        let options = options(backend, &[FaultKind::Kill, FaultKind::Pause], 7);
        let first = bytes(&simulate(&options).events);
        assert!(!first.is_empty());
        assert!(
            first == bytes(&simulate(&options).events),
            "{}: two runs differ",
            backend.sim_name()
        );
        let other = RunOptions { seed: 8, ..options };
        assert!(
            first != bytes(&simulate(&other).events),
            "{}: the seed does not reach the run",
            backend.sim_name()
        );
    }
}

/// The windows in which the kill nemesis had the replica alone down, as
/// (start, stop) times in ns.
fn replica_down(events: &[Event]) -> Vec<(u64, u64)> {
    let mut windows = Vec::new();
    let mut since = None;
    for event in events.iter().filter(|event| event.process == Process::Nemesis) {
        let value: serde_json::Value =
            serde_json::from_str(event.value.as_ref().map_or("null", |value| value.get()))
                .expect("a nemesis value is JSON");
        if value["fault"] != "kill" || value["targets"] != serde_json::json!(["replica"]) {
            continue;
        }
        match event.f {
            Function::Start => since = Some(event.time_ns),
            Function::Stop => windows.extend(since.take().map(|start| (start, event.time_ns))),
            _ => {}
        }
    }
    windows
}

/// How many acquires invoked inside `window` were granted before it ended,
/// and how many were invoked there at all.
fn granted_within(events: &[Event], (start, stop): (u64, u64)) -> (usize, usize) {
    let mut invoked: BTreeMap<i64, u64> = BTreeMap::new();
    let (mut granted, mut attempts) = (0, 0);
    for event in events.iter().filter(|event| event.f == Function::Acquire) {
        let Process::Client(process) = event.process else { continue };
        match event.event_type {
            EventType::Invoke => {
                invoked.insert(process, event.time_ns);
            }
            completion => {
                let Some(at) = invoked.remove(&process) else { continue };
                if at > start && at < stop {
                    attempts += 1;
                    if completion == EventType::Ok && event.time_ns < stop {
                        granted += 1;
                    }
                }
            }
        }
    }
    (granted, attempts)
}

#[test]
fn a_synchronous_replica_down_stops_every_grant_and_an_asynchronous_one_stops_none() {
    let (mut windows, mut attempts, mut async_grants) = (0, 0, 0);
    for seed in 0..6 {
        let sync = simulate(&options(Backend::SyncReplica, &[FaultKind::Kill], seed));
        for window in replica_down(&sync.events) {
            let (granted, tried) = granted_within(&sync.events, window);
            assert_eq!(
                granted, 0,
                "seed {seed}: granted while the sync replica was down {window:?}"
            );
            windows += 1;
            attempts += tried;
        }
        let analysis = analyze_events(&sync.events, &CheckOptions::default()).expect("well formed");
        for checker in [MUTEX, FENCE, RESOURCE, LIVENESS] {
            assert_eq!(
                analysis.verdict_of(checker),
                Some(Verdict::Valid),
                "seed {seed}: {checker}"
            );
        }
        // The liveness report names the unavailability and calls it expected.
        let notes = &analysis.result_of(LIVENESS).expect("liveness ran").notes;
        assert!(
            notes.iter().any(|note| note.starts_with("unavailable for ")
                && note.contains("kill (")
                && note.contains("expected")),
            "seed {seed}: {notes:?}"
        );
        let asynchronous = simulate(&options(Backend::PrimaryReads, &[FaultKind::Kill], seed));
        for window in replica_down(&asynchronous.events) {
            async_grants += granted_within(&asynchronous.events, window).0;
        }
    }
    assert!(windows > 0 && attempts > 0, "no acquire met a replica down: {windows} windows");
    assert!(async_grants > 0, "the async primary stopped granting with its replica down");
}

#[test]
fn the_replica_deciding_from_its_lagging_copy_grants_a_held_lock() {
    let broken = simulate(&options(Backend::ReplicaReads, &[], 0));
    let analysis = analyze_events(&broken.events, &CheckOptions::default()).expect("well formed");
    assert_eq!(analysis.verdict_of(MUTEX), Some(Verdict::Invalid));
    // Every grant's token is the primary's: the fenced storage holds.
    assert_eq!(analysis.verdict_of(RESOURCE), Some(Verdict::Valid));
    assert_eq!(analysis.verdict_of(FENCE), Some(Verdict::Valid));
    let safe = simulate(&options(Backend::PrimaryReads, &[], 0));
    let analysis = analyze_events(&safe.events, &CheckOptions::default()).expect("well formed");
    assert_eq!(analysis.verdict_of(MUTEX), Some(Verdict::Valid));
    assert_eq!(analysis.verdict_of(LINEAR), Some(Verdict::Valid));
}

#[test]
fn a_leaderless_quorum_hands_one_token_to_two_clients_and_is_not_linearizable() {
    let run = simulate(&options(Backend::LeaderlessQuorum, &[], 0));
    let mut granted: BTreeMap<(String, u64), usize> = BTreeMap::new();
    for event in &run.events {
        if event.f == Function::Acquire && event.event_type == EventType::Ok {
            let fence = event.value_fields().expect("fields").fence.expect("a token");
            *granted.entry((event.key.clone().unwrap_or_default(), fence)).or_default() += 1;
        }
    }
    assert!(granted.values().any(|&grants| grants > 1), "no token was handed out twice");
    let analysis = analyze_events(&run.events, &CheckOptions::default()).expect("well formed");
    assert_eq!(analysis.verdict_of(FENCE), Some(Verdict::Invalid));
    assert_eq!(analysis.verdict_of(LINEAR), Some(Verdict::Invalid));
}
