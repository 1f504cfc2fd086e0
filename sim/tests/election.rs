//! The election workload in the simulator: every client a candidate, the
//! leader renewing and working under its term (its grant's token). These
//! hold, over a few seeds each, what the truth table's cells
//! (`sim/src/matrix.rs`) say, and what they do not: determinism, and what
//! the history records.

use lockcheck_checker::names::{
    FENCE_MONOTONICITY as FENCE, MUTUAL_EXCLUSION as MUTEX, RESOURCE_SAFETY as RESOURCE,
    RE_ELECTION,
};
use lockcheck_checker::{analyze_events, write_events, Analysis, CheckOptions, Event, Verdict};
use lockcheck_sim::{run, Backend, FaultKind, RunOptions, SimRun};
use lockcheck_workloads::Workload;

fn options(backend: Backend, faults: &[FaultKind], seed: u64) -> RunOptions {
    RunOptions {
        backend,
        workload: Workload::Election,
        faults: faults.to_vec(),
        seed,
        time_limit: std::time::Duration::from_secs(30),
        ..RunOptions::default()
    }
}

fn simulate(options: &RunOptions) -> SimRun {
    run(options).unwrap_or_else(|error| {
        panic!("{error}; replay: cargo run -- {}", options.replay().arguments())
    })
}

fn analyzed(sim: &SimRun) -> Analysis {
    analyze_events(&sim.events, &CheckOptions::default()).expect("a well-formed history")
}

fn bytes(events: &[Event]) -> Vec<u8> {
    let mut bytes = Vec::new();
    write_events(&mut bytes, events).expect("writing to a Vec cannot fail");
    bytes
}

fn verdicts(analysis: &Analysis, checkers: &[&str]) -> Vec<(String, Option<Verdict>)> {
    checkers.iter().map(|checker| (checker.to_string(), analysis.verdict_of(checker))).collect()
}

#[test]
fn the_same_seed_gives_the_same_election_byte_for_byte() {
    for backend in [Backend::EtcdElection, Backend::Redis] {
        let options = options(backend, &[FaultKind::Pause, FaultKind::Kill], 7);
        let first = bytes(&simulate(&options).events);
        assert!(!first.is_empty());
        assert!(first == bytes(&simulate(&options).events), "{backend:?}: two runs differ");
    }
}

#[test]
fn etcd_campaigns_elect_one_leader_at_a_time_with_growing_terms() {
    for seed in 0..3 {
        let sim = simulate(&options(Backend::EtcdElection, &[], seed));
        let analysis = analyzed(&sim);
        assert_eq!(analysis.verdict, Verdict::Valid, "seed {seed}: {:?}", analysis.results);
        let notes = &analysis.result_of(RE_ELECTION).expect("re-election ran").notes;
        assert!(notes[0].contains("handovers"), "seed {seed}: {notes:?}");
        // Every campaign states the bound: two TTLs and the retry interval.
        let stated = sim
            .events
            .iter()
            .filter(|event| event.f == lockcheck_checker::Function::Acquire)
            .filter_map(|event| event.value_fields().ok()?.elect_within_ms)
            .collect::<Vec<_>>();
        assert!(!stated.is_empty() && stated.iter().all(|&bound| bound == 2040), "{stated:?}");
    }
}

#[test]
fn a_stalled_etcd_leader_is_fenced_and_the_next_elected_within_the_bound() {
    for seed in 0..3 {
        let analysis =
            analyzed(&simulate(&options(Backend::EtcdElection, &[FaultKind::Pause], seed)));
        let found = verdicts(&analysis, &[FENCE, RESOURCE, RE_ELECTION]);
        assert!(
            found.iter().all(|(_, verdict)| *verdict == Some(Verdict::Valid)),
            "seed {seed}: {found:?}"
        );
    }
}

#[test]
fn a_stalled_redis_leader_believes_it_leads_while_fenced_storage_rejects_its_work() {
    let mut overlapped = false;
    for seed in 0..3 {
        let analysis = analyzed(&simulate(&options(Backend::Redis, &[FaultKind::Pause], seed)));
        let found = verdicts(&analysis, &[RESOURCE, RE_ELECTION]);
        assert!(
            found.iter().all(|(_, verdict)| *verdict == Some(Verdict::Valid)),
            "seed {seed}: {found:?}"
        );
        overlapped |= analysis.verdict_of(MUTEX) == Some(Verdict::Invalid);
    }
    assert!(overlapped, "no stalled leader overlapped the next in 3 seeds");
}

#[test]
fn without_fencing_a_deposed_leaders_work_lands() {
    let found = (0..5).any(|seed| {
        let options = RunOptions {
            fencing: false,
            ..options(Backend::LeaseTable, &[FaultKind::Pause], seed)
        };
        analyzed(&simulate(&options)).verdict_of(RESOURCE) == Some(Verdict::Invalid)
    });
    assert!(found, "no deposed leader's work landed in 5 seeds");
}
