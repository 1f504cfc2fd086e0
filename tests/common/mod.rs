//! What the command-line tests share: running the binary and showing what
//! it printed when an assertion fails.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs `lockcheck ARGS…` to the end.
#[allow(dead_code)] // not every test binary runs it this way
pub fn lockcheck(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lockcheck"))
        .args(args)
        .output()
        .expect("the lockcheck binary runs")
}

/// Both of a run's outputs, for an assertion's message.
#[allow(dead_code)] // not every test binary runs the binary
pub fn both(output: &Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Every regular file under `root` (symbolic links not followed), sorted.
#[allow(dead_code)] // not every test binary looks at files
pub fn files_under(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            match entry.file_type() {
                Ok(kind) if kind.is_dir() => todo.push(entry.path()),
                Ok(kind) if kind.is_file() => found.push(entry.path()),
                _ => {}
            }
        }
    }
    found.sort();
    found
}
