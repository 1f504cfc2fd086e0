//! The payments workload's queue, provider and table are hosts the
//! simulator's faults strike, as they strike a lock server: each fault of
//! one host (kill, sigstop, clock, slow-net, loss) and a client's partition
//! reach each of the three; a run stays byte-identical for its seed; and
//! with idempotent effects and no lock, no such fault loses or doubles an
//! order.

use std::collections::BTreeSet;
use std::time::Duration;

use lockcheck_checker::{analyze_events, CheckOptions, Event, Function, Process, Verdict};
use lockcheck_sim::{run, FaultKind, RunOptions};
use lockcheck_workloads::payments::Protection;
use lockcheck_workloads::Workload;
use serde_json::Value;

const RESOURCES: [&str; 3] = ["queue", "provider", "payments"];

/// Every fault that strikes one host, and the partition that cuts a client
/// off from one.
const HOST_FAULTS: [FaultKind; 6] = [
    FaultKind::Kill,
    FaultKind::Sigstop,
    FaultKind::Clock,
    FaultKind::SlowNet,
    FaultKind::Loss,
    FaultKind::Partition,
];

fn options(protection: Protection, seed: u64) -> RunOptions {
    RunOptions {
        workload: Workload::Payments,
        protection,
        faults: HOST_FAULTS.to_vec(),
        time_limit: Duration::from_secs(60),
        seed,
        ..RunOptions::default()
    }
}

fn value(event: &Event) -> Value {
    event
        .value
        .as_ref()
        .map_or(Value::Null, |raw| serde_json::from_str(raw.get()).expect("a value is JSON"))
}

/// The (fault, resource host) pairs a run's faults struck: a host fault's
/// target, or where a client's partition cut it off from.
fn struck(events: &[Event]) -> BTreeSet<(String, String)> {
    let mut pairs = BTreeSet::new();
    for event in events {
        if event.process != Process::Nemesis || event.f != Function::Start {
            continue;
        }
        let value = value(event);
        let fault = value["fault"].as_str().unwrap_or_default().to_string();
        let hosts = if fault == "partition" { &value["from"] } else { &value["targets"] };
        for host in hosts.as_array().into_iter().flatten().filter_map(Value::as_str) {
            if RESOURCES.contains(&host) {
                pairs.insert((fault.clone(), host.to_string()));
            }
        }
    }
    pairs
}

#[test]
fn every_host_fault_strikes_the_queue_the_provider_and_the_table() {
    let mut seen = BTreeSet::new();
    let wanted = HOST_FAULTS.len() * RESOURCES.len();
    for seed in 1..=40 {
        let sim = run(&options(Protection::Unique, seed)).expect("the simulation runs");
        let pairs = struck(&sim.events);
        // A resource's fault is recorded as such: a kill keeps its state.
        for event in &sim.events {
            let value = value(event);
            if value["fault"] == "kill" && RESOURCES.iter().any(|host| value["targets"][0] == *host)
            {
                assert_eq!(value["persistent"], true, "{value}");
            }
        }
        seen.extend(pairs);
        if seen.len() == wanted {
            break;
        }
    }
    let missing: Vec<String> = HOST_FAULTS
        .iter()
        .flat_map(|kind| RESOURCES.iter().map(move |host| (kind.name().to_string(), *host)))
        .filter(|(fault, host)| !seen.contains(&(fault.clone(), host.to_string())))
        .map(|(fault, host)| format!("{fault} of {host}"))
        .collect();
    assert!(missing.is_empty(), "never struck in 40 seeds: {missing:?}");
}

#[test]
fn a_payments_run_under_every_host_fault_is_the_same_for_its_seed() {
    let options = options(Protection::IdempotencyKey, 7);
    let bytes = |events: &[Event]| {
        let mut out = Vec::new();
        lockcheck_checker::write_events(&mut out, events).expect("events serialize");
        out
    };
    let first = run(&options).expect("the simulation runs");
    let second = run(&options).expect("the simulation runs");
    assert!(!struck(&first.events).is_empty(), "the seed's faults struck no resource");
    assert_eq!(bytes(&first.events), bytes(&second.events));
}

#[test]
fn idempotent_effects_with_no_lock_lose_and_double_no_order_under_host_faults() {
    // Seeds whose faults strike the resources, each checked whole: no
    // order charged twice, none never charged (a crashed provider's charge
    // in flight is abandoned and its key freed; a charge refused because a
    // host was down leaves its job to come back).
    for protection in [Protection::Unique, Protection::IdempotencyKey, Protection::Conditional] {
        for seed in 1..=8 {
            let options = options(protection, seed);
            let sim = run(&options).expect("the simulation runs");
            assert!(!struck(&sim.events).is_empty(), "seed {seed}: no resource struck");
            let analysis = analyze_events(&sim.events, &CheckOptions::default())
                .expect("a run's events pair up");
            let replay = options.replay();
            assert_eq!(analysis.verdict, Verdict::Valid, "{}", replay.arguments());
        }
    }
}
