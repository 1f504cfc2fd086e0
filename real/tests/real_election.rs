//! Leader election with renewals (the `election` workload) against a real
//! etcd: candidates campaign with etcd's election service (`Campaign` on a
//! lease of their own, `Resign` to step down, the lease's keepalive to
//! renew), the leader key's create revision as the term. Under pause, a
//! leader stalled past its lease goes on believing it leads while the next
//! is elected; the term fences its late work, the terms increase, and a new
//! leader comes within the bound each campaign states.
//!
//! lockcheck starts its own etcd (the `etcd` on PATH) and PostgreSQL for
//! the protected resource; a missing server fails the test.

use std::time::Duration;

use lockcheck_checker::names::{
    FENCE_MONOTONICITY, LIVENESS, MUTUAL_EXCLUSION, RESOURCE_SAFETY, RE_ELECTION,
};
use lockcheck_checker::{EventType, Function, Verdict};
use lockcheck_real::{execute, RealRun};
use lockcheck_workloads::{Backend, FaultKind, RunOptions, Workload, World};

fn options(faults: &[FaultKind]) -> RunOptions {
    RunOptions {
        workload: Workload::Election,
        faults: faults.to_vec(),
        ttl: Duration::from_millis(2000),
        time_limit: Duration::from_secs(24),
        linearizability_timeout: Duration::from_secs(60),
        ..RunOptions::new(World::Real, Backend::EtcdElection)
    }
}

fn run(options: &RunOptions, seed: u64) -> RealRun {
    execute(&RunOptions { seed, ..options.clone() }, false)
        .unwrap_or_else(|failure| panic!("seed {seed}: {failure}"))
}

fn count(run: &RealRun, f: Function, event_type: EventType) -> usize {
    run.events.iter().filter(|event| event.f == f && event.event_type == event_type).count()
}

#[test]
fn etcd_election_under_pause_fences_the_stalled_leader_and_re_elects_within_the_bound() {
    let run = run(&options(&[FaultKind::Pause]), 1);
    let analysis = &run.analysis;
    let summary = format!("{:?}", analysis.results);
    for checker in [FENCE_MONOTONICITY, RESOURCE_SAFETY, RE_ELECTION] {
        assert_eq!(analysis.verdict_of(checker), Some(Verdict::Valid), "{checker}: {summary}");
    }
    // Mutual exclusion is no promise of a lease against a stall: judged,
    // either way.
    assert!(analysis.verdict_of(MUTUAL_EXCLUSION).is_some(), "{summary}");
    assert!(analysis.verdict_of(LIVENESS).is_some(), "{summary}");
    // Leaders were elected, renewed and did work; and resigned.
    assert!(count(&run, Function::Acquire, EventType::Ok) >= 2, "{summary}");
    assert!(count(&run, Function::Renew, EventType::Ok) >= 1, "{summary}");
    assert!(count(&run, Function::Write, EventType::Ok) >= 1, "{summary}");
    assert!(count(&run, Function::Release, EventType::Ok) >= 1, "{summary}");
    let campaigns = run
        .events
        .iter()
        .filter(|event| event.f == Function::Acquire && event.event_type == EventType::Invoke);
    for campaign in campaigns {
        let fields = campaign.value_fields().expect("a campaign's value");
        assert_eq!(fields.elect_within_ms, Some(2 * 2000 + 40), "{campaign:?}");
    }
    let handovers = analysis.result_of(RE_ELECTION).map(|result| result.notes.clone());
    assert!(handovers.as_ref().is_some_and(|notes| notes[0].contains("handover")), "{handovers:?}");
}
