//! Server folders left behind by a run that died without cleaning up
//! (SIGKILL, a power cut): each private server's folder in the temporary
//! directory is named `lockcheck-<kind>-<pid>-<start>-<n>`, after its
//! owner's pid and the owner's start time (field 22 of `/proc/<pid>/stat`,
//! clock ticks since boot, so that another process that got the same pid
//! later is not taken for the owner). The first server a run starts first
//! removes every such folder whose owner is gone, saying so on standard
//! error. A folder whose owner lives, or whose name does not follow the
//! pattern exactly, is never touched.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Once;

use super::ServerKind;

/// The owner a server folder's name gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    pub pid: u32,
    /// Its start time, clock ticks since boot.
    pub start: u64,
}

/// `lockcheck-<kind>-<pid>-<start>-<n>`: the folder of server `n` of kind
/// `kind` that `owner` starts.
pub fn folder_name(kind: &str, owner: Owner, n: u64) -> String {
    format!("lockcheck-{kind}-{}-{}-{n}", owner.pid, owner.start)
}

/// The owner named by a server folder's name; `None` for any other name.
pub fn parse_folder_name(name: &str) -> Option<Owner> {
    let rest = name.strip_prefix("lockcheck-")?;
    let (kind, rest) = rest.split_once('-')?;
    // Only a kind's own name (never an alias), as `folder_name` is given.
    if !ServerKind::ALL.iter().any(|known| known.name() == kind) {
        return None;
    }
    let numbers: Vec<&str> = rest.split('-').collect();
    let [pid, start, n] = numbers.as_slice() else { return None };
    let number = |text: &str| {
        // Digits only: no sign, no space, nothing `parse` would forgive.
        (!text.is_empty() && text.bytes().all(|byte| byte.is_ascii_digit())).then_some(())?;
        text.parse::<u64>().ok()
    };
    let (pid, start) = (u32::try_from(number(pid)?).ok()?, number(start)?);
    number(n)?;
    Some(Owner { pid, start })
}

/// Process `pid`'s start time (field 22 of `/proc/<pid>/stat`), unless it
/// is not running (gone, or a zombie waiting to be reaped).
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name, field 2, is in parentheses and may hold anything:
    // the fields after its last `)` start with field 3, the state.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    if matches!(fields.first(), Some(&("Z" | "X" | "x"))) {
        return None;
    }
    fields.get(22 - 3)?.parse().ok()
}

/// This process, as the owner of the folders it makes.
pub fn this_process() -> Owner {
    let pid = std::process::id();
    Owner { pid, start: start_time(pid).unwrap_or(0) }
}

/// Whether `owner` still runs: its pid runs, and started when it did.
pub fn alive(owner: Owner) -> bool {
    start_time(owner.pid) == Some(owner.start)
}

/// A leftover folder removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removed {
    pub path: PathBuf,
    pub bytes: u64,
    pub owner: Owner,
}

/// Removes the server folders in `root` whose owner is gone; what it
/// removed. Only real directories with a server folder's name are
/// considered (never a symbolic link, never another name); one that
/// cannot be removed is skipped (another run may be removing it).
pub fn sweep(root: &Path) -> Vec<Removed> {
    // Without /proc no owner can be told alive: remove nothing.
    if start_time(std::process::id()).is_none() {
        return Vec::new();
    }
    let Ok(entries) = fs::read_dir(root) else { return Vec::new() };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(owner) = name.to_str().and_then(parse_folder_name) else { continue };
        let path = entry.path();
        let is_dir = fs::symlink_metadata(&path).is_ok_and(|meta| meta.file_type().is_dir());
        if !is_dir || alive(owner) {
            continue;
        }
        let bytes = size(&path);
        if fs::remove_dir_all(&path).is_ok() {
            removed.push(Removed { path, bytes, owner });
        }
    }
    removed.sort_by(|a, b| a.path.cmp(&b.path));
    removed
}

/// The bytes of the files under `path`, symbolic links not followed.
fn size(path: &Path) -> u64 {
    let mut total = 0;
    let mut todo = vec![path.to_path_buf()];
    while let Some(dir) = todo.pop() {
        let Ok(entries) = fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let Ok(meta) = fs::symlink_metadata(entry.path()) else { continue };
            if meta.is_dir() {
                todo.push(entry.path());
            } else {
                total += meta.len();
            }
        }
    }
    total
}

/// `12.3 MB`, `4.0 kB`, `17 B`.
pub fn human_size(bytes: u64) -> String {
    match bytes {
        0..1_000 => format!("{bytes} B"),
        1_000..1_000_000 => format!("{:.1} kB", bytes as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1} MB", bytes as f64 / 1e6),
        _ => format!("{:.1} GB", bytes as f64 / 1e9),
    }
}

/// Once per process, before its first server: removes the leftovers in
/// the temporary directory and says what it removed, one line each.
pub fn sweep_once() {
    static SWEPT: Once = Once::new();
    SWEPT.call_once(|| {
        for Removed { path, bytes, owner } in sweep(&std::env::temp_dir()) {
            eprintln!(
                "lockcheck: removed {} ({}), left behind by lockcheck process {} which is gone",
                path.display(),
                human_size(bytes),
                owner.pid
            );
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_nothing_else_parses() {
        let owner = Owner { pid: 4242, start: 987_654 };
        let name = folder_name("postgres", owner, 3);
        assert_eq!(name, "lockcheck-postgres-4242-987654-3");
        assert_eq!(parse_folder_name(&name), Some(owner));
        for kind in ServerKind::ALL {
            let name = folder_name(kind.name(), owner, 0);
            assert_eq!(parse_folder_name(&name), Some(owner), "{name}");
        }
        for other in [
            // The former naming, without the start time: not this pattern.
            "lockcheck-postgres-4242-0",
            // moto's log before it was a managed server: a file, and not
            // this pattern either.
            "lockcheck-moto-4242-0.log",
            "lockcheck-oracle-1-2-3",
            "lockcheck-redis-1-2-3-4",
            "lockcheck-redis-1-2-",
            "lockcheck-redis--2-3",
            "lockcheck-redis-+1-2-3",
            "lockcheck-redis-1-2-x",
            "lockcheck-redis-99999999999-2-3",
            "lockcheck-matrix-1-2.jsonl",
            "lockcheck-store-test-1",
            "lockcheck-",
            "redis-1-2-3",
            "",
        ] {
            assert_eq!(parse_folder_name(other), None, "{other}");
        }
    }

    #[test]
    fn this_process_is_alive_and_its_start_time_is_its_own() {
        let me = this_process();
        assert!(me.start > 0, "{me:?}");
        assert!(alive(me));
        assert!(!alive(Owner { start: me.start + 1, ..me }), "a reused pid is not the owner");
    }

    /// A pid that ran and is gone: a child reaped.
    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().expect("true runs");
        let pid = child.id();
        child.wait().expect("reaped");
        pid
    }

    #[test]
    fn only_folders_of_owners_gone_are_removed() {
        let root =
            std::env::temp_dir().join(format!("lockcheck-sweep-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(&root).expect("made");
        let me = this_process();
        let dead = Owner { pid: dead_pid(), start: 1 };
        let reused = Owner { start: me.start + 1, ..me };
        let gone = root.join(folder_name("postgres", dead, 0));
        let gone_reused = root.join(folder_name("redis", reused, 1));
        let live = root.join(folder_name("redis", me, 2));
        let gone_moto = root.join(folder_name("moto", dead, 3));
        let other = root.join(format!("lockcheck-postgres-{}-0", dead.pid));
        let stranger = root.join("someone-else");
        for dir in [&gone, &gone_reused, &gone_moto, &live, &other, &stranger] {
            fs::create_dir_all(dir.join("data")).expect("made");
            fs::write(dir.join("data").join("file"), vec![0u8; 2_500]).expect("written");
        }
        // A link with the pattern's name is not followed nor removed.
        let link = root.join(folder_name("etcd", dead, 9));
        std::os::unix::fs::symlink(&stranger, &link).expect("linked");
        let removed = sweep(&root);
        let paths: Vec<&PathBuf> = removed.iter().map(|removed| &removed.path).collect();
        assert_eq!(paths, vec![&gone_moto, &gone, &gone_reused], "{removed:?}");
        assert!(removed.iter().all(|removed| removed.bytes == 2_500), "{removed:?}");
        assert!(!gone.exists() && !gone_reused.exists() && !gone_moto.exists());
        for kept in [&live, &other, &stranger] {
            assert!(kept.join("data").join("file").is_file(), "{} removed", kept.display());
        }
        assert!(fs::symlink_metadata(&link).is_ok(), "the link was removed");
        assert_eq!(human_size(2_500), "2.5 kB");
        let _ = fs::remove_dir_all(&root);
    }
}
