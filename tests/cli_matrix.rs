//! `lockcheck matrix` against real servers the tool starts itself: every
//! violated cell of docs/truth-table.md is found within its runs and every safe cell
//! stays clean. A test binary of its own, so that no other test competes
//! with its servers for the machine's two cores: a client starved of CPU
//! longer than a lease would be a real stall, and a safe cell would fail.

use std::process::Command;

#[test]
fn the_real_matrix_finds_every_violated_cell_and_no_false_one() {
    let output = Command::new(env!("CARGO_BIN_EXE_lockcheck"))
        .arg("matrix")
        .output()
        .expect("the lockcheck binary runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let rows: Vec<&str> = stdout.lines().filter(|line| line.starts_with("--backend")).collect();
    assert!(rows.len() >= 20, "a row per cell:\n{stdout}\n{stderr}");
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
    assert!(
        rows.iter()
            .any(|row| row.contains("--nemesis conn-kill")
                && row.contains("mutual-exclusion at seed"))
    );
    assert!(rows
        .iter()
        .any(|row| row.contains("--persistent") && row.contains("valid over 1 run")));
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{stderr}");
}
