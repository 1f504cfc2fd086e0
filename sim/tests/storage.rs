//! The S3 storages' cells (docs/storage.md), in the simulator: a plain PUT
//! by a stalled holder lands; an ETag compare-and-set loses no update, even
//! with no lock at all, where a plain PUT loses some; a create-once effect
//! happens once, even when the lock lets a late replica run the job again.
//! A failure names the seed and the `lockcheck check` flags that replay it.

use std::time::Duration;

use lockcheck_checker::names::{EXACTLY_ONCE, RESOURCE_SAFETY};
use lockcheck_checker::{
    analyze, default_checkers, Analysis, CheckOptions, EventType, Function, HistoryBuilder,
    Verdict, ViolationKind,
};
use lockcheck_sim::{run, Backend, FaultKind, RunOptions, Simulated};
use lockcheck_workloads::{StallPoint, StorageKind, Workload};

/// Seeds a violated cell gets to show its violation in.
const FIND_WITHIN: u64 = 10;

/// Seeds a safe cell must stay valid over.
const SAFE_SEEDS: u64 = 8;

fn options(workload: Workload, storage: StorageKind, faults: &[FaultKind]) -> RunOptions {
    RunOptions {
        backend: Backend::Redis,
        workload,
        storage,
        faults: faults.to_vec(),
        time_limit: Duration::from_secs(20),
        ..RunOptions::default()
    }
}

/// One run, checked; and the line that replays it.
fn checked(options: &RunOptions) -> (Analysis, Vec<lockcheck_checker::Event>, String) {
    let sim =
        run(options).unwrap_or_else(|error| panic!("{}: {error}", options.replay().arguments()));
    let mut builder = HistoryBuilder::new();
    for event in &sim.events {
        builder.push(event).expect("the simulator records well-formed histories");
    }
    let analysis = analyze(&builder.finish(), &default_checkers(), &CheckOptions::default());
    (analysis, sim.events, format!("lockcheck {}", options.replay().arguments()))
}

fn kinds(analysis: &Analysis, checker: &str) -> Vec<ViolationKind> {
    analysis.result_of(checker).map_or(Vec::new(), |result| {
        result.violations.iter().map(|violation| violation.kind).collect()
    })
}

/// The first seed below [`FIND_WITHIN`] whose `checker` finds `kind`.
fn found_within(base: &RunOptions, checker: &str, kind: ViolationKind) -> Option<(u64, Analysis)> {
    (0..FIND_WITHIN).find_map(|seed| {
        let (analysis, _, _) = checked(&RunOptions { seed, ..base.clone() });
        kinds(&analysis, checker).contains(&kind).then_some((seed, analysis))
    })
}

/// Acknowledged writes in `events`.
fn acknowledged_writes(events: &[lockcheck_checker::Event]) -> usize {
    events
        .iter()
        .filter(|event| event.f == Function::Write && event.event_type == EventType::Ok)
        .count()
}

#[test]
fn a_plain_put_by_a_stalled_holder_lands() {
    let base = RunOptions {
        pause_at: vec![StallPoint::AfterGrant],
        ..options(Workload::FencedWrite, StorageKind::S3Put, &[FaultKind::Pause])
    };
    let found = found_within(&base, RESOURCE_SAFETY, ViolationKind::DoubleCharge);
    let (seed, analysis) = found.unwrap_or_else(|| {
        panic!(
            "no stale write landed within {FIND_WITHIN} seeds: lockcheck {}",
            base.replay().arguments()
        )
    });
    assert_eq!(analysis.verdict_of(RESOURCE_SAFETY), Some(Verdict::Invalid), "seed {seed}");
    // The same stalls against the fenced table: the token stops them.
    let fenced = RunOptions { seed, storage: StorageKind::Table, ..base.clone() };
    let (analysis, _, replay) = checked(&fenced);
    assert_eq!(analysis.verdict_of(RESOURCE_SAFETY), Some(Verdict::Valid), "{replay}");
}

#[test]
fn a_compare_and_set_never_loses_an_update_even_with_no_lock() {
    let faults = [FaultKind::Pause];
    let cas = options(Workload::UnlockedWrite, StorageKind::S3Cas, &faults);
    for seed in 0..SAFE_SEEDS {
        let (analysis, events, replay) = checked(&RunOptions { seed, ..cas.clone() });
        assert_eq!(
            analysis.verdict,
            Verdict::Valid,
            "{replay}: {:?}",
            kinds(&analysis, RESOURCE_SAFETY)
        );
        assert_eq!(analysis.verdict_of(RESOURCE_SAFETY), Some(Verdict::Valid), "{replay}");
        assert!(acknowledged_writes(&events) > 100, "{replay}: too few writes to show anything");
    }
    // The same clients with a plain PUT lose updates: the checker sees them.
    let put = RunOptions { storage: StorageKind::S3Put, ..cas };
    let found = found_within(&put, RESOURCE_SAFETY, ViolationKind::LostUpdate);
    assert!(
        found.is_some(),
        "no lost update within {FIND_WITHIN} seeds: lockcheck {}",
        put.replay().arguments()
    );
}

#[test]
fn a_create_once_effect_happens_once() {
    // cron-release lets a late replica take the day's lock again: against
    // the table it runs the job twice (golden run 6); a create-once effect
    // refuses the second (`exists`), so each day's job runs once.
    for faults in [&[][..], &[FaultKind::Pause]] {
        let create = options(Workload::CronRelease, StorageKind::S3Create, faults);
        for seed in 0..SAFE_SEEDS {
            let (analysis, events, replay) = checked(&RunOptions { seed, ..create.clone() });
            assert_eq!(analysis.verdict_of(EXACTLY_ONCE), Some(Verdict::Valid), "{replay}");
            let refused = events
                .iter()
                .filter(|event| {
                    event.f == Function::Run && event.error.as_deref() == Some("exists")
                })
                .count();
            if faults.is_empty() && seed == 6 {
                assert!(refused > 0, "{replay}: no second run was refused");
            }
        }
    }
    let table = RunOptions { seed: 6, ..options(Workload::CronRelease, StorageKind::Table, &[]) };
    let (analysis, _, replay) = checked(&table);
    assert_eq!(analysis.verdict_of(EXACTLY_ONCE), Some(Verdict::Invalid), "{replay}");
}

#[test]
fn a_create_once_storage_needs_units_of_work() {
    let options = options(Workload::FencedWrite, StorageKind::S3Create, &[]);
    let why = options.check().expect_err("refused");
    assert!(why.contains("cron"), "{why}");
    assert!(options.replay().arguments().contains("--storage s3-create"));
}
