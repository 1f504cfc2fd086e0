//! No leftovers: a run SIGKILLed while its private servers run leaves their
//! folders in the temporary directory (nothing of it runs to remove them),
//! but none of its server processes (each dies with it: parent-death
//! signal); the next run that starts servers removes those folders and
//! says so on standard error, one line each with its size.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{both, lockcheck};

/// How long any awaited moment may take on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(180);

/// `pid`'s server folders in the temporary directory:
/// `lockcheck-<kind>-<pid>-<start>-<n>`.
fn server_dirs(pid: u32) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return Vec::new() };
    let mut found: Vec<PathBuf> = entries
        .flatten()
        .filter(|entry| {
            let name = entry.file_name().to_string_lossy().to_string();
            ["redis", "postgres", "mariadb", "etcd"]
                .iter()
                .any(|kind| name.starts_with(&format!("lockcheck-{kind}-{pid}-")))
        })
        .map(|entry| entry.path())
        .collect();
    found.sort();
    found
}

/// The processes that run in one of `dirs` or name one on their command
/// line (a server, its setup tool, a PostgreSQL backend): `(pid, cmdline)`.
fn processes_in(dirs: &[PathBuf]) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else { return found };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|name| name.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let cwd = std::fs::read_link(entry.path().join("cwd")).unwrap_or_default();
        let state = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let zombie =
            state.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
        if zombie {
            continue;
        }
        if dirs.iter().any(|dir| cwd.starts_with(dir) || cmdline.contains(&*dir.to_string_lossy()))
        {
            found.push((pid, cmdline));
        }
    }
    found
}

fn history_events(store: &Path) -> usize {
    common::files_under(store)
        .iter()
        .find(|path| path.ends_with("history.jsonl"))
        .map_or(0, |path| std::fs::read_to_string(path).unwrap_or_default().lines().count())
}

#[test]
fn folders_of_a_sigkilled_run_are_removed_by_the_next_and_reported() {
    let store = std::env::temp_dir().join(format!("leftovers-test-store-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&store);
    let mut child = Command::new(env!("CARGO_BIN_EXE_lockcheck"))
        .args(["check", "--backend", "redis", "--nemesis", "pause", "--ttl", "300ms"])
        .args(["--time-limit", "120s", "--store"])
        .arg(&store)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the lockcheck binary runs");
    let pid = child.id();
    // Its servers answer once its clients record events.
    let deadline = Instant::now() + PATIENCE;
    while history_events(&store) == 0 {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("exited ({status}) before recording");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("never recorded an event");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let dirs = server_dirs(pid);
    assert!(dirs.len() >= 2, "a PostgreSQL and a Redis folder: {dirs:?}");
    assert!(!processes_in(&dirs).is_empty(), "no server runs in {dirs:?}");
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    // Its servers die with it (the parent-death signal; PostgreSQL's
    // backends on their postmaster's death). Any that would not is killed
    // here, and the test fails saying so.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut left = processes_in(&dirs);
    while !left.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        left = processes_in(&dirs);
    }
    for (orphan, _) in &left {
        let _ = Command::new("kill").args(["-KILL", &orphan.to_string()]).status();
    }
    assert!(left.is_empty(), "server processes outlived lockcheck (killed now): {left:?}");
    // Nothing of the dead run removed its folders.
    for dir in &dirs {
        assert!(dir.is_dir(), "{} is gone already", dir.display());
    }
    // The next run that starts servers removes them, one line each.
    let output = lockcheck(&[
        "check",
        "--backend",
        "redis",
        "--nemesis",
        "none",
        "--time-limit",
        "1s",
        "--no-store",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", both(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    for dir in &dirs {
        assert!(!dir.exists(), "{} is left:\n{}", dir.display(), both(&output));
        let line = stderr
            .lines()
            .find(|line| line.contains(&format!("removed {} (", dir.display())))
            .unwrap_or_else(|| panic!("{} not reported:\n{stderr}", dir.display()));
        assert!(
            [" B)", " kB)", " MB)", " GB)"].iter().any(|unit| line.contains(unit)),
            "no size: {line}"
        );
        assert!(line.contains(&format!("process {pid} ")), "{line}");
    }
    assert!(server_dirs(pid).is_empty());
    let _ = std::fs::remove_dir_all(&store);
}
