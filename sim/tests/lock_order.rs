//! Lock ordering in the simulator: clients that each take two locks never
//! deadlock in one fixed order, and do in opposite orders, which the
//! deadlock checker reports as a cycle of waiting clients, naming them and
//! their locks. On Redis (a refused take asks again until its wait is over)
//! and on etcd.

use std::time::Duration;

use lockcheck_checker::names::{DEADLOCK, MUTUAL_EXCLUSION};
use lockcheck_checker::{analyze_events, Analysis, CheckOptions, Verdict};
use lockcheck_sim::{run, Backend, FaultKind, RunOptions};
use lockcheck_workloads::{Workload, World};

fn options(backend: Backend, workload: Workload, seed: u64) -> RunOptions {
    RunOptions {
        workload,
        faults: Vec::<FaultKind>::new(),
        time_limit: Duration::from_secs(20),
        seed,
        ..RunOptions::new(World::Simulated, backend)
    }
}

fn analysis(options: &RunOptions) -> Analysis {
    let run = run(options).unwrap_or_else(|error| {
        panic!("{error}; replay: cargo run -- {}", options.replay().arguments())
    });
    analyze_events(&run.events, &CheckOptions::default()).expect("well formed")
}

#[test]
fn one_fixed_order_never_deadlocks() {
    for backend in [Backend::Redis, Backend::Etcd] {
        for seed in 0..4 {
            let analysis = analysis(&options(backend, Workload::LockOrder, seed));
            assert_eq!(analysis.verdict, Verdict::Valid, "{backend:?} seed {seed}");
            assert_eq!(
                analysis.verdict_of(DEADLOCK),
                Some(Verdict::Valid),
                "{backend:?} seed {seed}"
            );
        }
    }
}

#[test]
fn opposite_orders_deadlock_and_the_report_names_the_cycle() {
    for backend in [Backend::Redis, Backend::Etcd] {
        let analysis = analysis(&options(backend, Workload::LockOrderOpposite, 0));
        assert_eq!(analysis.verdict_of(DEADLOCK), Some(Verdict::Invalid), "{backend:?}");
        assert_eq!(analysis.verdict_of(MUTUAL_EXCLUSION), Some(Verdict::Valid), "{backend:?}");
        let result = analysis.result_of(DEADLOCK).expect("it ran");
        let violation = &result.violations[0];
        assert!(violation.processes.len() >= 2, "{violation:?}");
        assert!(
            violation.explanation.contains("lock-0") && violation.explanation.contains("lock-1"),
            "{}",
            violation.explanation
        );
        // Every process in the cycle is named.
        for process in &violation.processes {
            assert!(
                violation.explanation.contains(&format!("process {process}")),
                "{}",
                violation.explanation
            );
        }
    }
}
