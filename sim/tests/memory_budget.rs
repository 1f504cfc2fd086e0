//! A run that outgrows its memory budget stops itself, with its history so
//! far kept, instead of growing until the kernel kills it. (Its own test
//! binary: the budget is the process's.)

use std::time::Duration;

use lockcheck_sim::{run_recorded, RunOptions, SimError};
use lockcheck_workloads::{memory, HistoryFile};

#[test]
fn a_run_over_its_budget_stops_with_its_history_so_far() {
    let resident = memory::resident_bytes().expect("this process's memory");
    // A budget whose recording share this process already exceeds.
    memory::set_budget(Some(resident));
    let dir = std::env::temp_dir().join(format!("lockcheck-budget-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a folder");
    let path = dir.join("history.jsonl");
    let _ = std::fs::remove_file(&path);
    let history = HistoryFile::create(&path).expect("a history file");
    let options = RunOptions {
        clients: 20,
        time_limit: Duration::from_secs(30),
        seed: 1,
        ..RunOptions::default()
    };
    let result = run_recorded(&options, &mut |_| {}, Some(history));
    memory::set_budget(None);
    let error = result.expect_err("stopped");
    let SimError::OverBudget { over, simulated } = &error else {
        panic!("another error: {error}");
    };
    assert_eq!(over.budget, resident);
    assert!(*simulated < options.time_limit, "{simulated:?}");
    assert!(error.to_string().contains("memory budget"), "{error}");
    // What was recorded until then is in the file, line by line.
    let kept = std::fs::read_to_string(&path).expect("the history so far");
    assert!(kept.lines().count() > 0);
    assert!(kept.lines().all(|line| line.starts_with('{') && line.ends_with('}')));
    std::fs::remove_dir_all(&dir).expect("removed");
}
