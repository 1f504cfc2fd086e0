//! Properties of the checkers on synthetic histories: a history from the
//! reference lock is valid for every checker, and each defect injected into it
//! is found by the checker it concerns, and by no other.

use lockcheck_checker::names::{DEADLOCK, EXACTLY_ONCE, IDEMPOTENCY, RE_ELECTION};
use lockcheck_checker::synth::{self, Injection, SynthOptions};
use lockcheck_checker::{
    analyze, default_checkers, read_history, Analysis, CheckOptions, Event, History, Verdict,
    ViolationKind,
};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

use lockcheck_checker::names::FENCE_MONOTONICITY as FENCE;
use lockcheck_checker::names::LINEARIZABILITY;
use lockcheck_checker::names::LIVENESS;
use lockcheck_checker::names::MUTUAL_EXCLUSION as MUTEX;
use lockcheck_checker::names::RESOURCE_SAFETY as RESOURCE;
const CHECKERS: [&str; 4] = [MUTEX, FENCE, RESOURCE, LIVENESS];

fn config() -> ProptestConfig {
    ProptestConfig {
        // A few seconds in debug; PROPTEST_CASES asks for more.
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|cases| cases.parse().ok())
            .unwrap_or(96),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/proptest-regressions/properties.txt"
        )))),
        ..ProptestConfig::default()
    }
}

fn options(fenced: impl Strategy<Value = bool>) -> impl Strategy<Value = SynthOptions> {
    (20usize..400, 1u32..6, 1u32..4, any::<u64>(), 1_000u64..60_000, fenced).prop_map(
        |(ops, clients, keys, seed, ttl_ms, fenced)| SynthOptions {
            ops,
            clients,
            keys,
            seed,
            ttl_ms,
            fenced,
        },
    )
}

fn jsonl(events: &[Event]) -> String {
    let mut out = Vec::new();
    synth::write_jsonl(events, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

/// Through JSON Lines text and back, as a recorded history would come.
fn round_trip(events: &[Event]) -> History {
    let text = jsonl(events);
    match read_history(text.as_bytes(), "synth") {
        Ok(history) => history,
        Err(error) => panic!("{error}\n{text}"),
    }
}

fn analysis(events: &[Event]) -> Analysis {
    analyze(&round_trip(events), &default_checkers(), &CheckOptions::default())
}

/// Each checker's verdict, `None` where it did not apply, in `CHECKERS` order.
fn verdicts(analysis: &Analysis) -> Vec<Option<Verdict>> {
    CHECKERS
        .iter()
        .map(|name| {
            let result = analysis.result_of(name);
            result.unwrap_or_else(|| panic!("no {name} result")).verdict
        })
        .collect()
}

fn has_accepted_fenced_write(history: &History) -> bool {
    history
        .ops()
        .iter()
        .any(|op| op.f == lockcheck_checker::Function::Write && op.is_ok() && op.fence.is_some())
}

/// Injects a defect into a valid history and checks that `checker` finds it
/// as one violation of `kind` naming the injected process and events, and
/// that every other checker's verdict is what it was before.
fn check_injection(
    options: &SynthOptions,
    inject: fn(&mut Vec<Event>) -> Option<Injection>,
    checker: &str,
    kind: ViolationKind,
) -> Result<(), TestCaseError> {
    let mut events = synth::generate(options);
    let before = analysis(&events);
    prop_assert_eq!(before.verdict, Verdict::Valid);
    let Some(injection) = inject(&mut events) else {
        // Only a history without accepted fenced writes has no room for a stale one.
        prop_assert_eq!(kind, ViolationKind::StaleWrite);
        prop_assert!(!has_accepted_fenced_write(&round_trip(&events)));
        return Ok(());
    };
    let after = analysis(&events);
    prop_assert_eq!(after.verdict, Verdict::Invalid, "{}", injection.description);
    prop_assert!(after.warnings.is_empty(), "{:?}", after.warnings);
    let (old, new) = (verdicts(&before), verdicts(&after));
    for (at, name) in CHECKERS.iter().enumerate() {
        if *name == checker {
            prop_assert_eq!(new[at], Some(Verdict::Invalid), "{}", injection.description);
        } else {
            prop_assert_eq!(new[at], old[at], "{} turned by: {}", name, injection.description);
        }
    }
    let result = after.result_of(checker).unwrap();
    prop_assert_eq!(
        result.violation_count,
        1,
        "{}: {:?}",
        injection.description,
        result.violations
    );
    let violation = &result.violations[0];
    prop_assert_eq!(violation.kind, kind);
    prop_assert_eq!(&violation.key, &injection.key);
    prop_assert_eq!(violation.processes.last(), Some(&injection.process));
    prop_assert!(
        violation.events.iter().any(|e| injection.events.contains(e)),
        "{:?} names none of the injected events {:?}",
        violation.events,
        injection.events
    );
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn reference_lock_histories_are_valid(options in options(any::<bool>())) {
        let events = synth::generate(&options);
        prop_assert_eq!(events.len(), 2 * options.ops);
        let history = round_trip(&events);
        prop_assert!(history.ops().iter().all(|op| op.completion.is_some()));
        let analysis = analyze(&history, &default_checkers(), &CheckOptions::default());
        prop_assert!(analysis.warnings.is_empty(), "{:?}", analysis.warnings);
        for result in &analysis.results {
            prop_assert!(
                matches!(result.verdict, None | Some(Verdict::Valid)),
                "{} found {:?}\n{}", result.checker, result.violations, jsonl(&events)
            );
        }
        let applies = |name: &str| analysis.verdict_of(name).is_some();
        prop_assert!(applies(MUTEX) && applies(LIVENESS) && applies(LINEARIZABILITY));
        prop_assert_eq!(applies(FENCE), options.fenced);
        prop_assert_eq!(analysis.verdict, Verdict::Valid);
    }

    #[test]
    fn same_options_give_the_same_history(options in options(any::<bool>())) {
        prop_assert_eq!(jsonl(&synth::generate(&options)), jsonl(&synth::generate(&options)));
    }

    #[test]
    fn an_overlapping_grant_breaks_mutual_exclusion(options in options(any::<bool>())) {
        check_injection(&options, synth::inject_overlap, MUTEX, ViolationKind::Overlap)?;
    }

    #[test]
    fn a_duplicate_token_breaks_fence_monotonicity(options in options(Just(true))) {
        check_injection(&options, synth::inject_duplicate_token, FENCE, ViolationKind::DuplicateToken)?;
    }

    #[test]
    fn a_backwards_token_breaks_fence_monotonicity(options in options(Just(true))) {
        check_injection(&options, synth::inject_backwards_token, FENCE, ViolationKind::BackwardsToken)?;
    }

    #[test]
    fn an_accepted_stale_write_breaks_resource_safety(options in options(Just(true))) {
        check_injection(&options, synth::inject_stale_write, RESOURCE, ViolationKind::StaleWrite)?;
    }
}

/// A token that repeats or goes backwards is illegal for the fenced-lease
/// model too: the linearizability search must find it, on the injected lock.
fn check_token_injection_is_not_linearizable(
    options: &SynthOptions,
    inject: fn(&mut Vec<Event>) -> Option<Injection>,
) -> Result<(), TestCaseError> {
    let mut events = synth::generate(options);
    let injection = inject(&mut events).expect("a fenced history has tokens");
    let after = analysis(&events);
    let result = after.results.iter().find(|r| r.checker == LINEARIZABILITY).unwrap();
    prop_assert_eq!(result.verdict, Some(Verdict::Invalid), "{}", injection.description);
    let violation = &result.violations[0];
    prop_assert_eq!(violation.kind, ViolationKind::NotLinearizable);
    prop_assert_eq!(&violation.key, &injection.key);
    let evidence = violation.linearization.as_ref().expect("evidence");
    prop_assert_eq!(evidence.model, "fenced-lease");
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn a_duplicate_token_is_not_linearizable(options in options(Just(true))) {
        check_token_injection_is_not_linearizable(&options, synth::inject_duplicate_token)?;
    }

    #[test]
    fn a_backwards_token_is_not_linearizable(options in options(Just(true))) {
        check_token_injection_is_not_linearizable(&options, synth::inject_backwards_token)?;
    }
}

#[test]
fn fence_injectors_need_tokens() {
    let options = SynthOptions { ops: 200, fenced: false, ..SynthOptions::default() };
    let mut events = synth::generate(&options);
    assert!(synth::inject_duplicate_token(&mut events).is_none());
    assert!(synth::inject_backwards_token(&mut events).is_none());
    assert!(synth::inject_stale_write(&mut events).is_none());
    assert_eq!(events.len(), 400);
}

#[test]
fn default_options_give_a_concurrent_valid_history() {
    let events = synth::generate(&SynthOptions::default());
    assert_eq!(events.len(), 20_000);
    let history = round_trip(&events);
    // Operations of different clients overlap in time.
    let mut open = 0usize;
    let mut most_open = 0;
    for step in history.steps() {
        if step.is_completion {
            open -= 1;
        } else {
            open += 1;
        }
        most_open = most_open.max(open);
    }
    assert!(most_open > 1);
    let outcomes = |f: &str, ok: bool| {
        history.ops().iter().filter(|op| op.f.as_str() == f && op.is_ok() == ok).count()
    };
    assert!(outcomes("acquire", true) > 100 && outcomes("acquire", false) > 100);
    assert!(outcomes("write", true) > 100 && outcomes("read", true) > 100);
    let analysis = analyze(&history, &default_checkers(), &CheckOptions::default());
    assert_eq!(analysis.verdict, Verdict::Valid, "{:#?}", analysis.results);
    // Every lock checker applies and finds it valid (exactly-once and
    // idempotency have no runs or charges to judge here, deadlock no client
    // taking a second lock, re-election no election).
    for result in &analysis.results {
        let work = [EXACTLY_ONCE, IDEMPOTENCY, DEADLOCK, RE_ELECTION].contains(&result.checker);
        let expected = if work { None } else { Some(Verdict::Valid) };
        assert_eq!(result.verdict, expected, "{}", result.checker);
    }
}
