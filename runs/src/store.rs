//! Stored runs: `store/<test>/<time>-seed-<seed>/` holds `history.jsonl`,
//! `results.json`, `report.html` and `command` (the exact command that runs
//! it again); `store/latest` links the newest. `lockcheck report` renders
//! them again, `lockcheck serve` lists them.
//!
//! A run's folder is made when it starts ([`begin`]), with its `command`,
//! and its `history.jsonl` is written as the events are recorded
//! ([`HistoryFile`]): a run that ends early (an error, a panic, Ctrl-C,
//! SIGTERM, SIGHUP, even SIGKILL) leaves the history it recorded so far.
//! The other files are written once the run is checked ([`finish`]).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use lockcheck_checker::{redact, write_events, Analysis, Event};
use lockcheck_reports::{render_html, render_json, Analyzed, HtmlInput};
use lockcheck_workloads::{interrupt, HistoryFile};

use crate::StoreError;

/// One run to store, checked.
#[derive(Debug, Clone, Copy)]
pub struct Run<'a> {
    pub events: &'a [Event],
    pub analysis: &'a Analysis,
    /// The command that runs it again.
    pub command: &'a str,
    /// How the report names it: `sim-redis seed 3`.
    pub title: &'a str,
}

/// A run's folder, made as the run starts.
#[derive(Debug, Clone)]
pub struct Stored {
    pub dir: PathBuf,
    /// Its `history.jsonl`, written as the run records it.
    pub history: HistoryFile,
    root: PathBuf,
}

impl Stored {
    /// `the history so far is in store/…/history.jsonl (N events)`.
    pub fn so_far(&self) -> String {
        format!(
            "the history so far is in {} ({} events)",
            self.history.path().display(),
            self.history.events()
        )
    }
}

/// Makes a new folder for a run of `test` under `root`,
/// `<test>/<UTC time>-seed-<seed>` (`-2`, `-3`, … appended when a run of the
/// same seed took it in the same millisecond), with `command` and an empty
/// `history.jsonl` for the run to write as it goes.
pub fn begin(root: &Path, test: &str, seed: u64, command: &str) -> Result<Stored, StoreError> {
    let parent = root.join(test);
    fs::create_dir_all(&parent).map_err(StoreError::file("create", &parent))?;
    let name = format!("{}-seed-{seed}", utc_stamp(SystemTime::now()));
    let mut dir = parent.join(&name);
    for suffix in 2.. {
        match fs::create_dir(&dir) {
            Ok(()) => break,
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
                dir = parent.join(format!("{name}-{suffix}"));
            }
            Err(error) => return Err(StoreError::file("create", &dir)(error)),
        }
    }
    let path = dir.join("history.jsonl");
    let history = HistoryFile::create(&path).map_err(StoreError::file("create", &path))?;
    write_file(&dir.join("command"), |out| writeln!(out, "{command}"))?;
    Ok(Stored { dir, history, root: root.to_path_buf() })
}

/// Completes a run's folder once it is checked: its history is already
/// written; `results.json`, `report.html` and `command`, and `latest`
/// pointed at it.
pub fn finish(stored: &Stored, run: &Run<'_>) -> Result<PathBuf, StoreError> {
    let dir = &stored.dir;
    let path = stored.history.path();
    stored.history.result().map_err(StoreError::file("write", path))?;
    if stored.history.events() != run.events.len() as u64 {
        // Not written as recorded (a recorder without the file): whole now.
        write_file(path, |out| write_events(out, run.events))?;
    }
    let source = path.display().to_string();
    let analyzed = Analyzed { source: &source, analysis: run.analysis };
    let json = render_json(run.analysis.verdict, &[analyzed], &[]);
    write_file(&dir.join("results.json"), |out| out.write_all(json.as_bytes()))?;
    write_html(&dir.join("report.html"), run.title, run.events, run.analysis, Some(run.command))?;
    write_file(&dir.join("command"), |out| writeln!(out, "{}", run.command))?;
    point_latest(&stored.root, dir);
    Ok(dir.clone())
}

/// Points `root/latest` at `dir`, atomically: a new link is made aside and
/// renamed over the old one, so `latest` always names a whole run, even
/// while two runs finish at once. A store that cannot hold the link keeps
/// its runs all the same.
fn point_latest(root: &Path, dir: &Path) {
    let target = dir.strip_prefix(root).unwrap_or(dir).to_path_buf();
    let aside = root.join(format!(".latest-{}-{}", std::process::id(), unique_suffix()));
    #[cfg(unix)]
    if std::os::unix::fs::symlink(&target, &aside).is_ok()
        && fs::rename(&aside, root.join("latest")).is_err()
    {
        let _ = fs::remove_file(&aside);
    }
}

/// A number no other call in this process returns.
fn unique_suffix() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Writes `run` of `test` with `seed`, recorded already, into a new
/// folder under `root` and points `latest` at it.
#[cfg(test)]
fn store(root: &Path, test: &str, seed: u64, run: &Run<'_>) -> Result<PathBuf, StoreError> {
    let stored = begin(root, test, seed, run.command)?;
    for event in run.events {
        stored.history.append(event);
    }
    finish(&stored, run)
}

/// Writes the self-contained HTML report of a history to `path`.
pub fn write_html(
    path: &Path,
    title: &str,
    events: &[Event],
    analysis: &Analysis,
    command: Option<&str>,
) -> Result<(), StoreError> {
    let html = render_html(&HtmlInput { title, events, analysis, command });
    write_file(path, |out| out.write_all(html.as_bytes()))
}

/// Writes `path` through `fill`, into a temporary file renamed over it, so
/// that a run stopped halfway never leaves a truncated file that looks
/// complete. What `fill` writes is redacted ([`redact`]: no password of a
/// URL or setting reaches the file), and the file is its owner's only
/// (mode 0600): a stored file may hold a command line.
pub fn write_file(
    path: &Path,
    fill: impl FnOnce(&mut Vec<u8>) -> std::io::Result<()>,
) -> Result<(), StoreError> {
    let name = path.file_name().map(|name| name.to_string_lossy()).unwrap_or_default();
    let aside = path.with_file_name(format!(".{name}.partial"));
    let mut content = Vec::new();
    fill(&mut content).map_err(StoreError::file("write", &aside))?;
    let content = match String::from_utf8(content) {
        Ok(text) => redact(&text).into_bytes(),
        Err(error) => error.into_bytes(),
    };
    let _ = fs::remove_file(&aside);
    let mut file = private_file(&aside)?;
    file.write_all(&content).map_err(StoreError::file("write", &aside))?;
    drop(file);
    fs::rename(&aside, path).map_err(StoreError::file("write", path))
}

/// Creates `path` anew, readable and writable by its owner only.
fn private_file(path: &Path) -> Result<fs::File, StoreError> {
    use std::os::unix::fs::OpenOptionsExt;
    fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(StoreError::file("create", path))
}

/// Where the history so far of an interrupted run is.
pub fn stored_so_far(stored: Option<&Stored>) -> String {
    match stored {
        Some(stored) => stored.so_far(),
        None => "--no-store: its history was not kept".to_string(),
    }
}

/// Says on stderr that `signal` stopped the check, and where; the exit
/// code 128 + the signal. `main` exits with it once every server is
/// stopped.
pub fn interrupted_at(signal: i32, detail: &str) -> ExitCode {
    interrupt::report(signal, Some(detail));
    interrupt::exit_code(signal).into()
}

/// As [`interrupted_at`], for a run of one seed.
pub fn interrupted(signal: i32, seed: u64, stored: Option<&Stored>) -> ExitCode {
    interrupted_at(signal, &format!("at seed {seed}; {}", stored_so_far(stored)))
}

/// What the signal handler says if it exits while the run of `seed` is
/// busy (checking a long history, say): where its history so far is.
pub fn last_words(seed: u64, stored: Option<&Stored>) {
    let stored = stored.cloned();
    let words = move || format!("at seed {seed}; {}", stored_so_far(stored.as_ref()));
    interrupt::set_last_words(Some(Box::new(words)));
}

/// `20261130T113300.123Z`: a store folder's name, sortable, in UTC.
fn utc_stamp(time: SystemTime) -> String {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let (days, seconds) = ((since.as_secs() / 86_400) as i64, since.as_secs() % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}.{:03}Z",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60,
        since.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockcheck_checker::{analyze, default_checkers, CheckOptions, HistoryBuilder};

    #[test]
    fn store_folders_are_named_by_utc_time() {
        let time = UNIX_EPOCH + std::time::Duration::from_millis(1_796_038_385_290);
        assert_eq!(utc_stamp(time), "20261130T113305.290Z");
        assert_eq!(utc_stamp(UNIX_EPOCH), "19700101T000000.000Z");
    }

    #[test]
    fn a_stored_run_has_every_file_and_latest_points_at_it() {
        let root =
            std::env::temp_dir().join(format!("lockcheck-store-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let events: Vec<Event> = [
            r#"{"index":0,"time":0,"process":0,"type":"invoke","f":"acquire","key":"l"}"#,
            r#"{"index":1,"time":5,"process":0,"type":"ok","f":"acquire","key":"l"}"#,
        ]
        .iter()
        .map(|line| serde_json::from_str(line).expect("an event"))
        .collect();
        let mut builder = HistoryBuilder::new();
        for event in &events {
            builder.push(event).expect("pushed");
        }
        let analysis = analyze(&builder.finish(), &default_checkers(), &CheckOptions::default());
        let run = Run {
            events: &events,
            analysis: &analysis,
            command: "lockcheck check --seed 7",
            title: "t seed 7",
        };
        let dir = store(&root, "t", 7, &run).expect("stored");
        for file in ["history.jsonl", "results.json", "report.html", "command"] {
            assert!(dir.join(file).is_file(), "{file} missing in {}", dir.display());
        }
        assert_eq!(
            fs::read_to_string(dir.join("command")).expect("read"),
            "lockcheck check --seed 7\n"
        );
        assert_eq!(fs::canonicalize(root.join("latest")).ok(), fs::canonicalize(&dir).ok());
        let leftovers: Vec<_> = fs::read_dir(&dir)
            .expect("listed")
            .filter_map(Result::ok)
            .filter(|entry| entry.file_name().to_string_lossy().ends_with(".partial"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
        // A second run takes `latest` over, by a rename that leaves no link aside.
        let second = store(&root, "t", 8, &run).expect("stored");
        assert_eq!(fs::canonicalize(root.join("latest")).ok(), fs::canonicalize(&second).ok());
        let aside: Vec<_> = fs::read_dir(&root)
            .expect("listed")
            .filter_map(Result::ok)
            .filter(|entry| entry.file_name().to_string_lossy().starts_with(".latest"))
            .collect();
        assert!(aside.is_empty(), "{aside:?}");
        let _ = fs::remove_dir_all(&root);
    }

    #[test]
    fn runs_of_one_seed_begun_at_once_get_folders_of_their_own() {
        let root =
            std::env::temp_dir().join(format!("lockcheck-store-unique-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        // Far more than a millisecond holds: some share their time stamp.
        let dirs: Vec<PathBuf> = (0..50)
            .map(|_| begin(&root, "t", 3, "lockcheck check --seed 3").expect("begun").dir)
            .collect();
        let unique: std::collections::BTreeSet<&PathBuf> = dirs.iter().collect();
        assert_eq!(unique.len(), dirs.len(), "{dirs:?}");
        for dir in &dirs {
            assert!(dir.join("history.jsonl").is_file(), "{}", dir.display());
            assert!(dir.join("command").is_file(), "{}", dir.display());
        }
        let _ = fs::remove_dir_all(&root);
    }
}
