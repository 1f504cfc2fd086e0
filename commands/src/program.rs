//! The program part of every replay line lockcheck prints or stores: what
//! runs this very binary again from a shell, decided once per process.
//! `lockcheck` only when the `lockcheck` on `PATH` is this binary; `cargo
//! run --release --` (or `cargo run --`) when it was built in a cargo
//! target directory, as `cargo run` leaves it; else its absolute path.
//! The library layer's lines ([`Replay::arguments`]) name no program.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use lockcheck_workloads::Replay;

/// What runs the binary at `exe` from a shell, given where the shell finds
/// `lockcheck` on `PATH` (`on_path`, none when it does not). Both paths are
/// taken as they are: the caller resolves symbolic links.
pub fn program_for(exe: &Path, on_path: Option<&Path>) -> String {
    if on_path == Some(exe) {
        return "lockcheck".to_string();
    }
    let shown = exe.to_string_lossy();
    if shown.contains("/target/release/") {
        return "cargo run --release --".to_string();
    }
    if shown.contains("/target/debug/") {
        return "cargo run --".to_string();
    }
    shell_quoted(&shown)
}

/// `text` as one shell word: as it is when only harmless characters make
/// it, else in single quotes (a quote in it closed, escaped and reopened).
fn shell_quoted(text: &str) -> String {
    let harmless = |c: char| c.is_ascii_alphanumeric() || "/._-+,:=@%".contains(c);
    if !text.is_empty() && text.chars().all(harmless) {
        return text.to_string();
    }
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// The program of this process's replay lines ([`program_for`] of the
/// running binary and of `lockcheck` on `PATH`), found the first time it
/// is asked for.
pub fn program() -> &'static str {
    static PROGRAM: OnceLock<String> = OnceLock::new();
    PROGRAM.get_or_init(|| {
        let exe = std::env::current_exe().ok().map(|exe| exe.canonicalize().unwrap_or(exe));
        match exe {
            Some(exe) => program_for(&exe, on_path().as_deref()),
            None => "lockcheck".to_string(),
        }
    })
}

/// The file a shell runs for `lockcheck`: the first on `PATH`, links
/// resolved.
fn on_path() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("lockcheck"))
        .find(|candidate| candidate.is_file())
        .map(|found| found.canonicalize().unwrap_or(found))
}

/// `replay` as a line that runs as printed: this process's [`program`],
/// then the arguments (and the note on masked passwords).
pub fn replay_line(replay: &Replay) -> String {
    replay.run_by(program())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::{program, program_for};

    #[test]
    fn the_lockcheck_on_path_is_named_plainly() {
        let exe = Path::new("/home/me/.cargo/bin/lockcheck");
        assert_eq!(program_for(exe, Some(exe)), "lockcheck");
        // Installed, but another lockcheck comes first on PATH: the path.
        let other = Path::new("/usr/local/bin/lockcheck");
        assert_eq!(program_for(exe, Some(other)), "/home/me/.cargo/bin/lockcheck");
        // Even a binary in a target directory, when it is the one on PATH.
        let built = Path::new("/src/lockcheck/target/release/lockcheck");
        assert_eq!(program_for(built, Some(built)), "lockcheck");
    }

    #[test]
    fn a_binary_cargo_built_is_run_by_cargo_run() {
        let release = Path::new("/src/lockcheck/target/release/lockcheck");
        assert_eq!(program_for(release, None), "cargo run --release --");
        let debug = Path::new("/src/lockcheck/target/debug/lockcheck");
        assert_eq!(program_for(debug, None), "cargo run --");
        let elsewhere = Path::new("/usr/local/bin/lockcheck");
        assert_eq!(program_for(debug, Some(elsewhere)), "cargo run --");
        // A target directory of another name is not cargo's default: the path.
        let custom = Path::new("/tmp/target-h1/release/lockcheck");
        assert_eq!(program_for(custom, None), "/tmp/target-h1/release/lockcheck");
    }

    #[test]
    fn any_other_binary_is_named_by_its_path_quoted_for_a_shell() {
        assert_eq!(program_for(Path::new("/opt/lc/lockcheck"), None), "/opt/lc/lockcheck");
        assert_eq!(
            program_for(Path::new("/home/me/my tools/lockcheck"), None),
            "'/home/me/my tools/lockcheck'"
        );
        assert_eq!(
            program_for(Path::new("/home/me/it's/lockcheck"), None),
            r"'/home/me/it'\''s/lockcheck'"
        );
    }

    #[test]
    fn this_process_is_given_one_of_the_three_forms() {
        let found = program();
        let allowed = found == "lockcheck"
            || found == "cargo run --release --"
            || found == "cargo run --"
            || found.starts_with('/')
            || found.starts_with("'/");
        assert!(allowed, "{found}");
        assert!(std::ptr::eq(found, program()), "decided once");
    }
}
