//! Aimed faults in the simulator (`--aim`): an aimed pause strikes a
//! holder just after its grant, before its write, where an unaimed one
//! strikes whom the seed drew; so aiming finds the mutual-exclusion
//! violation of `sim-redis` under `pause` in more seeds; and an aimed run is
//! as deterministic as an unaimed one. That aiming off leaves the
//! histories as they were is the golden test's (tests/cli_golden.rs).

use std::collections::BTreeMap;
use std::time::Duration;

use lockcheck_checker::names::MUTUAL_EXCLUSION;
use lockcheck_checker::{write_events, CheckOptions, Event, EventType, Function, Process, Verdict};
use lockcheck_sim::{check_run, run, Backend, FaultKind, RunOptions};
use serde_json::Value;

/// The seeds both kinds of run get.
const SEEDS: std::ops::Range<u64> = 0..10;

/// Short runs of `sim-redis` under `pause`: one or two pauses each, so a
/// pause that strikes nothing leaves the run without a violation.
fn options(seed: u64, aim: bool) -> RunOptions {
    RunOptions {
        backend: Backend::Redis,
        faults: vec![FaultKind::Pause],
        time_limit: Duration::from_secs(5),
        seed,
        aim,
        ..RunOptions::default()
    }
}

fn value(event: &Event) -> Value {
    event
        .value
        .as_ref()
        .map_or(Value::Null, |raw| serde_json::from_str(raw.get()).expect("a value is JSON"))
}

/// What a logical client last did with a lock, as its history says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Turn {
    /// Granted, and nothing since but a renewal: its work is all ahead.
    JustGranted,
    /// Granted, and at work (writing) under it.
    Working,
    Idle,
}

/// For each pause of `events`, what its target was doing when it started.
fn pause_targets(events: &[Event], clients: u32) -> Vec<Turn> {
    let mut turns: BTreeMap<u32, Turn> = BTreeMap::new();
    let mut struck = Vec::new();
    for event in events {
        match event.process {
            Process::Nemesis if event.f == Function::Start => {
                let value = value(event);
                if value["fault"] != "pause" {
                    continue;
                }
                let target = value["targets"][0].as_str().unwrap_or_default();
                let client: u32 = target.trim_start_matches("client-").parse().expect("a client");
                struck.push(turns.get(&client).copied().unwrap_or(Turn::Idle));
            }
            Process::Client(process) => {
                let client = process.rem_euclid(i64::from(clients)) as u32;
                let turn = turns.entry(client).or_insert(Turn::Idle);
                *turn = match (event.event_type, &event.f) {
                    (EventType::Ok, Function::Acquire) => Turn::JustGranted,
                    (EventType::Invoke, Function::Release) | (EventType::Info, _) => Turn::Idle,
                    (_, Function::Renew) => *turn,
                    (_, Function::Write) if *turn != Turn::Idle => Turn::Working,
                    _ => *turn,
                };
            }
            _ => {}
        }
    }
    struck
}

/// Whether the run of `options` breaks mutual exclusion.
fn violated(options: &RunOptions) -> bool {
    let sim = run(options).unwrap_or_else(|error| panic!("{}: {error}", options.replay().line));
    let analysis = check_run(&sim, &CheckOptions::default()).expect("a well-formed history");
    analysis.verdict_of(MUTUAL_EXCLUSION) == Some(Verdict::Invalid)
}

#[test]
fn an_aimed_pause_strikes_a_holder_just_after_its_grant() {
    let mut just_granted = BTreeMap::new();
    for aim in [false, true] {
        let (mut fresh, mut all) = (0, 0);
        for seed in SEEDS {
            let options = options(seed, aim);
            let sim = run(&options).expect("the simulation runs");
            let turns = pause_targets(&sim.events, options.clients);
            fresh += turns.iter().filter(|&&turn| turn == Turn::JustGranted).count();
            all += turns.len();
        }
        assert!(all >= SEEDS.count(), "a pause or more a run (aim {aim}): {all}");
        just_granted.insert(aim, (fresh, all));
    }
    // Measured on seeds 0..10: 10 of 10 aimed pauses, 0 of 10 unaimed.
    let ((unaimed, _), (aimed, all)) = (just_granted[&false], just_granted[&true]);
    assert!(aimed > unaimed, "{just_granted:?}");
    assert!(aimed * 4 >= all * 3, "most aimed pauses strike a fresh grant: {just_granted:?}");
}

#[test]
fn aiming_finds_the_pause_violation_in_more_seeds() {
    let found =
        |aim: bool| -> Vec<u64> { (0..30).filter(|&seed| violated(&options(seed, aim))).collect() };
    let (unaimed, aimed) = (found(false), found(true));
    // Measured: 22 of seeds 0..30 unaimed, all 30 aimed.
    assert!(aimed.len() > unaimed.len(), "aimed {aimed:?}, unaimed {unaimed:?}");
}

#[test]
fn an_aimed_run_is_the_same_run_twice() {
    for backend in [Backend::Redis, Backend::Etcd] {
        let options = RunOptions {
            backend,
            time_limit: Duration::from_secs(20),
            seed: 3,
            aim: true,
            ..RunOptions::default()
        };
        let history = || {
            let mut bytes = Vec::new();
            write_events(&mut bytes, &run(&options).expect("the simulation runs").events)
                .expect("written to memory");
            bytes
        };
        assert!(history() == history(), "{}", options.replay().line);
        assert!(options.replay().line.ends_with(" --aim"), "{}", options.replay().line);
    }
}
