//! Runs of many clients: every simulated backend takes 1,000 clients under
//! its default faults without a panic (each host's backlog of connection
//! attempts is sized to the clients, and clients past 32 share machines),
//! and a run past the documented limit is refused, not started.

use std::collections::BTreeSet;
use std::time::Duration;

use lockcheck_checker::{EventType, Process};
use lockcheck_sim::{run, Backend, RunOptions, Simulated, MAX_CLIENTS};

#[test]
fn every_backend_runs_a_thousand_clients_under_its_default_faults() {
    for backend in Backend::all_in(lockcheck_workloads::World::Simulated) {
        let options = RunOptions {
            backend,
            clients: 1000,
            time_limit: Duration::from_secs(2),
            seed: 3,
            ..RunOptions::default()
        };
        options.check().unwrap_or_else(|why| panic!("{}: {why}", backend.sim_name()));
        let sim = run(&options).unwrap_or_else(|error| panic!("{}: {error}", backend.sim_name()));
        // Nearly every logical client acted (a process continues as
        // `logical + n * clients` after an unknown outcome).
        let invoking: BTreeSet<i64> = sim
            .events
            .iter()
            .filter(|event| event.event_type == EventType::Invoke)
            .filter_map(|event| match event.process {
                Process::Client(id) => Some(id % 1000),
                Process::Nemesis => None,
            })
            .collect();
        assert!(
            invoking.len() >= 900,
            "{}: only {} of 1000 clients invoked anything",
            backend.sim_name(),
            invoking.len()
        );
    }
}

#[test]
fn a_run_past_the_client_limit_is_refused() {
    let options = RunOptions { clients: MAX_CLIENTS + 1, ..RunOptions::default() };
    let why = options.check().expect_err("refused");
    assert!(why.contains(&MAX_CLIENTS.to_string()), "{why}");
    assert_eq!(RunOptions { clients: MAX_CLIENTS, ..options }.check(), Ok(()));
}

#[test]
fn a_time_limit_below_a_millisecond_is_refused() {
    let options = RunOptions { time_limit: Duration::from_nanos(1), ..RunOptions::default() };
    let why = options.check().expect_err("refused");
    assert!(why.contains("1ms"), "{why}");
}

#[test]
fn the_memory_estimate_grows_with_clients_and_time() {
    let small = RunOptions::default();
    let more_clients = RunOptions { clients: 50, ..small.clone() };
    let longer = RunOptions { time_limit: small.time_limit * 10, ..small.clone() };
    assert!(small.memory_estimate() < more_clients.memory_estimate());
    assert!(small.memory_estimate() < longer.memory_estimate());
    // The default run fits in far less than a small machine.
    assert!(small.memory_estimate() < 256 << 20, "{}", small.memory_estimate());
}
