//! Stored runs: `store/<test>/<time>-seed-<seed>/` holds `history.jsonl`,
//! `results.json`, `report.html` and `command` (the exact command that runs
//! it again); `store/latest` links the newest. `lockcheck report` renders
//! them again, `lockcheck serve` lists them.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::Context;
use lockcheck_checker::{write_events, Analysis, Event};
use lockcheck_reports::{render_html, render_json, Analyzed, HtmlInput};

use crate::check::utc_stamp;

/// One run to store.
#[derive(Debug, Clone, Copy)]
pub struct Run<'a> {
    /// The folder under the store: `sim-redis-fenced-write`.
    pub test: &'a str,
    pub seed: u64,
    pub events: &'a [Event],
    pub analysis: &'a Analysis,
    /// The command that runs it again.
    pub command: &'a str,
    /// How the report names it: `sim-redis seed 3`.
    pub title: &'a str,
}

/// Writes `run` into a new folder under `root` and points `latest` at it.
/// Each file is written aside and renamed into place, so a run stopped
/// halfway never leaves a truncated history that looks complete.
pub fn store(root: &Path, run: &Run<'_>) -> anyhow::Result<PathBuf> {
    let stamp = utc_stamp(SystemTime::now());
    let dir = root.join(run.test).join(format!("{stamp}-seed-{}", run.seed));
    fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    write_file(&dir.join("history.jsonl"), |out| Ok(write_events(out, run.events)?))?;
    let source = dir.join("history.jsonl").display().to_string();
    let analyzed = Analyzed { source: &source, analysis: run.analysis };
    let json = render_json(run.analysis.verdict, &[analyzed], &[]);
    write_file(&dir.join("results.json"), |out| Ok(out.write_all(json.as_bytes())?))?;
    write_html(&dir.join("report.html"), run.title, run.events, run.analysis, Some(run.command))?;
    write_file(&dir.join("command"), |out| Ok(writeln!(out, "{}", run.command)?))?;
    let latest = root.join("latest");
    let _ = fs::remove_file(&latest);
    let target = dir.strip_prefix(root).unwrap_or(&dir).to_path_buf();
    #[cfg(unix)]
    let _ = std::os::unix::fs::symlink(&target, &latest);
    Ok(dir)
}

/// Writes the self-contained HTML report of a history to `path`.
pub fn write_html(
    path: &Path,
    title: &str,
    events: &[Event],
    analysis: &Analysis,
    command: Option<&str>,
) -> anyhow::Result<()> {
    let html = render_html(&HtmlInput { title, events, analysis, command });
    write_file(path, |out| Ok(out.write_all(html.as_bytes())?))
}

/// Writes `path` through `fill`, into a temporary file renamed over it.
fn write_file(
    path: &Path,
    fill: impl FnOnce(&mut std::io::BufWriter<fs::File>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let name = path.file_name().map(|name| name.to_string_lossy()).unwrap_or_default();
    let aside = path.with_file_name(format!(".{name}.partial"));
    let file =
        fs::File::create(&aside).with_context(|| format!("cannot create {}", aside.display()))?;
    let mut out = std::io::BufWriter::new(file);
    fill(&mut out).with_context(|| format!("cannot write {}", aside.display()))?;
    out.flush().with_context(|| format!("cannot write {}", aside.display()))?;
    drop(out);
    fs::rename(&aside, path).with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockcheck_checker::{analyze, default_checkers, CheckOptions, HistoryBuilder};

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
            test: "t",
            seed: 7,
            events: &events,
            analysis: &analysis,
            command: "lockcheck check --seed 7",
            title: "t seed 7",
        };
        let dir = store(&root, &run).expect("stored");
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
        let _ = fs::remove_dir_all(&root);
    }
}
