//! What the command-line tests share: running the binary and showing what
//! it printed when an assertion fails.

use std::process::{Command, Output};

/// Runs `lockcheck ARGS…` to the end.
pub fn lockcheck(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lockcheck"))
        .args(args)
        .output()
        .expect("the lockcheck binary runs")
}

/// Both of a run's outputs, for an assertion's message.
pub fn both(output: &Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}
