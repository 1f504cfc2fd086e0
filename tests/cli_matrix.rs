//! `lockcheck matrix` against real servers the tool starts itself: every
//! violated cell of docs/truth-table.md is found within its runs and every safe cell
//! stays clean. A test binary of its own, so that no other test competes
//! with its servers for the machine's two cores: a client starved of CPU
//! longer than a lease would be a real stall, and a safe cell would fail.

use std::process::Command;

/// The cells CI runs: every lock cell but the etcd cut-off one (its runs
/// take 60 s, and it may need several), both cron cells (not the
/// lock-ordering and election ones: real/tests/real_sql.rs runs the
/// lock-ordering cells' runs, real/tests/real_election.rs etcd's election), and of the
/// payments cells a sample (a lock per order and a unique insert, on both
/// queues, and the unique insert under every fault) that keeps the whole CI run within its time; `lockcheck matrix`
/// runs them all (docs/truth-table.md).
const SAMPLE: [&[&str]; 2] = [
    &["--workloads", "fenced-write,mutex,cron,cron-release,unlocked-write", "--longest-run", "30s"],
    &["--workloads", "payments", "--protections", "lock,unique"],
];

#[test]
fn the_real_matrix_finds_every_violated_cell_and_no_false_one() {
    let mut rows = 0;
    for args in SAMPLE {
        rows += judge(args);
    }
    assert!(rows >= 30, "a row per cell: {rows}");
}

/// Runs `matrix` on the cells `args` select and checks each row; the
/// number of rows.
fn judge(args: &[&str]) -> usize {
    let output = Command::new(env!("CARGO_BIN_EXE_lockcheck"))
        .arg("matrix")
        .args(args)
        .output()
        .expect("the lockcheck binary runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let rows: Vec<&str> = stdout.lines().filter(|line| line.starts_with("--backend")).collect();
    assert!(rows.len() >= 4, "a row per cell:\n{stdout}\n{stderr}");
    for row in &rows {
        assert!(row.contains(" ok ("), "a cell that does not match:\n{row}\n\n{stdout}\n{stderr}");
        // No cell with faults passes bare: it counts the runs whose faults
        // reached a vulnerable window, and one that reached none is vacuous.
        if row.contains("valid over") && !row.contains("--nemesis none") {
            assert!(row.contains(", covered "), "a bare valid cell:\n{row}\n\n{stdout}");
            let vacuous = row.contains(", covered 0/");
            assert_eq!(vacuous, row.contains("vacuous: "), "{row}");
        }
    }
    // The cells that must be found and the ones that must stay clean are
    // both there, and their verdicts come from runs, not from the table.
    let found = |needle: &str, verdict: &str| {
        rows.iter().any(|row| row.contains(needle) && row.contains(verdict))
    };
    if args.contains(&"payments") {
        assert!(found("--queue rabbitmq", "exactly-once at seed"), "{stdout}");
        assert!(found("--protection unique --queue rabbitmq", "valid over 1 run"), "{stdout}");
        assert!(
            found("--nemesis pause,sigstop,kill --workload payments", "valid over 1"),
            "{stdout}"
        );
    } else {
        assert!(found("--nemesis conn-kill", "mutual-exclusion at seed"), "{stdout}");
        assert!(found("--persistent", "valid over 1 run"), "{stdout}");
        assert!(found("--workload cron --protection none", "exactly-once at seed"), "{stdout}");
    }
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{stderr}");
    rows.len()
}
