//! The S3 storages against moto's S3 server, which lockcheck starts
//! (`moto_server`, `pip install 'moto[server]'`): a plain PUT by a stalled
//! holder lands; a create-once effect happens once; and an ETag
//! compare-and-set with no lock at all either loses nothing or, when moto's
//! own race lets two conditional PUTs through, says so as a finding about
//! moto (docs/storage.md), never as valid. A missing `moto_server` fails
//! every test here with the install line.

mod common;

use std::time::Duration;

use lockcheck_checker::names::{EXACTLY_ONCE, RESOURCE_SAFETY};
use lockcheck_checker::{Analysis, EventType, Function, Verdict, ViolationKind};
use lockcheck_real::{execute, ManagedServer, RealRun, ServerKind};
use lockcheck_workloads::{
    Backend, FaultKind, RunOptions, StallPoint, StorageKind, Workload, World,
};

/// Runs a violated cell gets to show its violation in: a real stall must
/// strike a holder, and its lock go to another, before the stale write.
const FIND_WITHIN: u64 = 5;

/// Acknowledged updates a compare-and-set run needs to contend at all.
const ENOUGH_WRITES: usize = 50;

/// Fails at once, with the install line, when moto's server is missing.
fn require_moto() {
    if let Err(error) = ManagedServer::start(ServerKind::Moto) {
        panic!("these tests need moto's S3 server: {error}");
    }
}

fn options(workload: Workload, storage: StorageKind, faults: &[FaultKind]) -> RunOptions {
    RunOptions {
        workload,
        storage,
        faults: faults.to_vec(),
        ttl: Duration::from_millis(500),
        time_limit: Duration::from_secs(4),
        linearizability_timeout: Duration::from_secs(60),
        ..RunOptions::new(World::Real, Backend::Redis)
    }
}

fn run(options: &RunOptions, seed: u64) -> RealRun {
    execute(&RunOptions { seed, ..options.clone() }, false)
        .unwrap_or_else(|failure| panic!("seed {seed}: {failure}"))
}

fn kinds(analysis: &Analysis, checker: &str) -> Vec<ViolationKind> {
    analysis.result_of(checker).map_or(Vec::new(), |result| {
        result.violations.iter().map(|violation| violation.kind).collect()
    })
}

fn acknowledged_writes(run: &RealRun) -> usize {
    run.events
        .iter()
        .filter(|event| event.f == Function::Write && event.event_type == EventType::Ok)
        .count()
}

#[test]
fn a_plain_put_by_a_stalled_holder_lands() {
    require_moto();
    let options = RunOptions {
        pause_at: vec![StallPoint::AfterGrant],
        ..options(Workload::FencedWrite, StorageKind::S3Put, &[FaultKind::Pause])
    };
    let landed = (1..=FIND_WITHIN).find_map(|seed| {
        let run = run(&options, seed);
        assert!(acknowledged_writes(&run) > 0, "seed {seed}: no write landed at all");
        let kinds = kinds(&run.analysis, RESOURCE_SAFETY);
        eprintln!("seed {seed}: resource-safety {kinds:?}");
        kinds.contains(&ViolationKind::DoubleCharge).then_some(run)
    });
    let run = landed.unwrap_or_else(|| {
        panic!("no stalled holder's plain PUT landed in {FIND_WITHIN} runs of redis, fenced-write, s3-put, pause after-grant")
    });
    assert_eq!(run.analysis.verdict_of(RESOURCE_SAFETY), Some(Verdict::Invalid));
}

#[test]
fn a_compare_and_set_with_no_lock_loses_nothing_or_names_moto() {
    require_moto();
    // Eight writers on one object: contention on every update.
    let options = RunOptions {
        clients: 8,
        locks: 1,
        ..options(Workload::UnlockedWrite, StorageKind::S3Cas, &[])
    };
    // Enough updates to contend: a loaded machine serves moto's Python
    // slowly, so a run that acknowledged too few goes again for longer.
    let run = [4, 8, 16]
        .into_iter()
        .map(|seconds| {
            run(&RunOptions { time_limit: Duration::from_secs(seconds), ..options.clone() }, 1)
        })
        .find(|run| acknowledged_writes(run) >= ENOUGH_WRITES)
        .unwrap_or_else(|| panic!("fewer than {ENOUGH_WRITES} writes in 16 s: nothing to show"));
    let analysis = &run.analysis;
    assert_eq!(common::analyzed(&run.events).verdict, analysis.verdict);
    let refused: usize = run
        .events
        .iter()
        .filter(|event| event.f == Function::Write && event.error.as_deref() == Some("contended"))
        .count();
    eprintln!("{} writes acknowledged, {refused} gave up contended", acknowledged_writes(&run));
    match analysis.verdict {
        Verdict::Valid => assert!(analysis.warnings.is_empty(), "{:?}", analysis.warnings),
        verdict => {
            // moto's race: never valid, never hidden, and named.
            assert_eq!(verdict, Verdict::Invalid);
            let kinds = kinds(analysis, RESOURCE_SAFETY);
            assert!(
                !kinds.is_empty() && kinds.iter().all(|&kind| kind == ViolationKind::LostUpdate),
                "only moto's lost updates may show: {kinds:?}"
            );
            let finding = analysis.warnings.iter().find(|warning| warning.contains("moto"));
            let finding = finding.unwrap_or_else(|| panic!("unnamed: {:?}", analysis.warnings));
            assert!(finding.contains("s3-cas"), "{finding}");
            eprintln!("{finding}");
        }
    }
}

#[test]
fn a_plain_put_with_no_lock_loses_updates() {
    require_moto();
    let options = RunOptions {
        clients: 8,
        locks: 1,
        ..options(Workload::UnlockedWrite, StorageKind::S3Put, &[])
    };
    let run = run(&options, 1);
    assert!(kinds(&run.analysis, RESOURCE_SAFETY).contains(&ViolationKind::LostUpdate));
    // Not the server's finding: a plain PUT promises nothing.
    assert!(run.analysis.warnings.iter().all(|warning| !warning.contains("moto")));
}

#[test]
fn a_create_once_effect_happens_once() {
    require_moto();
    // cron-release frees the day's lock after the job: a late replica
    // takes it again, and only the create-once effect stops its second run.
    let mut options = options(Workload::CronRelease, StorageKind::S3Create, &[FaultKind::Pause]);
    options.time_limit = Duration::from_secs(6);
    let run = run(&options, 1);
    let runs = run.events.iter().filter(|event| event.f == Function::Run).count();
    assert!(runs > 0, "no replica fired");
    assert_eq!(run.analysis.verdict_of(EXACTLY_ONCE), Some(Verdict::Valid), "{:?}", run.analysis);
    let refused = run
        .events
        .iter()
        .filter(|event| event.f == Function::Run && event.error.as_deref() == Some("exists"))
        .count();
    eprintln!("{runs} run events, {refused} second runs refused: exists");
}
