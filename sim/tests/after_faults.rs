//! Every operation is exercised after every kind of fault: once a fault of
//! each kind has ended, the clients go on acquiring, writing, renewing and
//! releasing; a client whose operation ended unknown (`info`) goes on as a
//! new process and acquires again; a stalled client, once its stall is
//! over, acts again; and a pause struck at each point a backend has.

use std::collections::{BTreeMap, BTreeSet};

use lockcheck_checker::{Event, EventType, Function, Process};
use lockcheck_sim::{run, Backend, FaultKind, RunOptions};
use lockcheck_workloads::StallPoint;
use serde_json::Value;

fn value(event: &Event) -> Value {
    event
        .value
        .as_ref()
        .map_or(Value::Null, |raw| serde_json::from_str(raw.get()).expect("a value is JSON"))
}

fn options(backend: Backend, faults: &[FaultKind], seed: u64) -> RunOptions {
    RunOptions {
        backend,
        faults: faults.to_vec(),
        time_limit: std::time::Duration::from_secs(40),
        seed,
        ..RunOptions::default()
    }
}

/// The client operations invoked after event `after`.
fn invoked_after(events: &[Event], after: usize) -> BTreeSet<String> {
    events[after..]
        .iter()
        .filter(|event| matches!(event.process, Process::Client(_)))
        .filter(|event| event.event_type == EventType::Invoke)
        .map(|event| event.f.to_string())
        .collect()
}

/// Checks one run: after the first end of each kind of fault, every
/// operation the workload has is invoked again; after every `info`, the
/// logical client acquires again (unless the run was about to end).
fn check(options: &RunOptions) -> Vec<String> {
    let sim = run(options).expect("the simulation runs");
    let events = &sim.events;
    let replay = options.replay();
    let replay = replay.arguments();
    let mut problems = Vec::new();
    let mut first_stop: BTreeMap<String, usize> = BTreeMap::new();
    for (at, event) in events.iter().enumerate() {
        if event.process == Process::Nemesis && event.f == Function::Stop {
            let fault = value(event)["fault"].as_str().unwrap_or_default().to_string();
            first_stop.entry(fault).or_insert(at);
        }
    }
    for kind in &options.faults {
        let Some(&stop) = first_stop.get(kind.name()) else {
            problems.push(format!(
                "{}: no {} fault ended; {replay}",
                options.backend.sim_name(),
                kind.name()
            ));
            continue;
        };
        let after = invoked_after(events, stop);
        for f in ["acquire", "write", "renew", "release"] {
            if !after.contains(f) {
                problems.push(format!(
                    "{}: no {f} after the first {} ended; {replay}",
                    options.backend.sim_name(),
                    kind.name()
                ));
            }
        }
    }
    // After an unknown outcome the logical client goes on as a new process
    // and acquires again: unless it was the end of the run.
    let end = events.last().map_or(0, |event| event.time_ns);
    let clients = i64::from(options.clients);
    for (at, event) in events.iter().enumerate() {
        let Process::Client(process) = event.process else { continue };
        if event.event_type != EventType::Info || end - event.time_ns < 5_000_000_000 {
            continue;
        }
        let again = events[at + 1..].iter().any(|later| {
            matches!(later.process, Process::Client(next) if next % clients == process % clients && next > process)
                && later.f == Function::Acquire
                && later.event_type == EventType::Invoke
        });
        if !again {
            problems.push(format!(
                "{}: process {process} ended unknown at event {} and its client never acquired again; {replay}",
                options.backend.sim_name(),
                event.index
            ));
        }
    }
    problems
}

#[test]
fn every_operation_follows_every_kind_of_fault() {
    use FaultKind as F;
    let cases: &[(Backend, &[FaultKind])] = &[
        (Backend::Redis, &[F::Pause, F::Clock, F::Kill, F::SlowNet, F::Loss]),
        (Backend::Redis, &[F::Failover, F::Partition, F::Skew]),
        (Backend::Redlock, &[F::Pause, F::Kill, F::SlowNet, F::Partition]),
        (Backend::LeaseTable, &[F::Pause, F::Kill, F::Loss, F::Skew]),
        (Backend::RedisSemaphore, &[F::Pause, F::Clock, F::Kill]),
        (Backend::Etcd, &[F::Pause, F::Kill, F::Partition, F::SlowNet]),
    ];
    let mut problems = Vec::new();
    for &(backend, faults) in cases {
        problems.extend(check(&options(backend, faults, 1)));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_stalled_client_acts_again_and_every_point_strikes() {
    // Over a few seeds of each backend, a pause strikes at every point the
    // backend's recipe passes (between-commands only where a recipe has
    // several commands), and the stalled client acts again after it.
    let points_of = |backend: Backend| -> Vec<StallPoint> {
        let mut points = StallPoint::ALL.to_vec();
        if matches!(backend, Backend::RedisSemaphore | Backend::LeaseTable) {
            points.retain(|&point| point != StallPoint::BetweenCommands);
        }
        points
    };
    let mut problems = Vec::new();
    for backend in [
        Backend::Redis,
        Backend::Redlock,
        Backend::LeaseTable,
        Backend::RedisSemaphore,
        Backend::Etcd,
    ] {
        let mut struck = BTreeSet::new();
        for seed in 0..4 {
            let options = options(backend, &[FaultKind::Pause], seed);
            let sim = run(&options).expect("the simulation runs");
            let events = &sim.events;
            let end = events.last().map_or(0, |event| event.time_ns);
            for (at, event) in events.iter().enumerate() {
                let value = value(event);
                if event.process != Process::Nemesis
                    || event.f != Function::Stop
                    || value["stall_ms"].is_null()
                {
                    continue;
                }
                let Some(point) = value["struck"].as_str() else { continue };
                struck.insert(point.to_string());
                let client: i64 = value["targets"][0]
                    .as_str()
                    .and_then(|target| target.strip_prefix("client-"))
                    .and_then(|n| n.parse().ok())
                    .expect("a stall names its client");
                let stalled = value["stall_ms"].as_u64().unwrap_or_default() * 1_000_000;
                if end - event.time_ns < stalled + 3_000_000_000 {
                    continue;
                }
                let clients = i64::from(options.clients);
                let acted = events[at + 1..].iter().any(|later| {
                    matches!(later.process, Process::Client(p) if p % clients == client)
                        && later.event_type == EventType::Invoke
                        && later.time_ns > event.time_ns + stalled
                });
                if !acted {
                    problems.push(format!(
                        "{}: client {client} never acted after its stall at {point} (event {}); {}",
                        backend.sim_name(),
                        event.index,
                        options.replay().arguments()
                    ));
                }
            }
        }
        for point in points_of(backend) {
            if !struck.contains(point.name()) {
                problems.push(format!(
                    "{}: no pause struck {} over 4 seeds",
                    backend.sim_name(),
                    point.name()
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
