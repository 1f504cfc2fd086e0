//! A stored run's report, rendered again: from a run's folder (its
//! history, its command) or from any history file.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::time::Duration;

use lockcheck_checker::{
    analyze, default_checkers, Analysis, CheckOptions, Event, EventReader, HistoryBuilder,
};
use lockcheck_reports::{render_html, HtmlInput};

use crate::StoreError;

/// Where a report's input and output are: a stored run's folder has its
/// history, its command and its report side by side; a history file gets
/// its report beside it (`run.jsonl` → `run.html`).
pub fn locate(path: &Path) -> (PathBuf, Option<String>, PathBuf) {
    if path.is_dir() {
        let command = std::fs::read_to_string(path.join("command"))
            .ok()
            .map(|command| command.trim().to_string())
            .filter(|command| !command.is_empty());
        (path.join("history.jsonl"), command, path.join("report.html"))
    } else {
        (path.to_path_buf(), None, path.with_extension("html"))
    }
}

/// Every event of the history at `path`, or the reason it cannot be read.
pub fn read_events(path: &Path) -> Result<Vec<Event>, String> {
    let file =
        File::open(path).map_err(|error| format!("cannot open {}: {error}", path.display()))?;
    EventReader::new(BufReader::new(file), path.display().to_string())
        .map(|read| read.map(|(_, event)| event))
        .collect::<Result<Vec<Event>, _>>()
        .map_err(|error| error.to_string())
}

/// A history checked, and its HTML report rendered (not yet written).
#[derive(Debug)]
pub struct Checked {
    pub analysis: Analysis,
    /// The history's path, as the report names it.
    pub source: String,
    /// The page.
    pub html: String,
    /// Where the report goes by default: beside the history.
    pub default_output: PathBuf,
}

/// Checks `events` (read from the run or history at `path`) and renders
/// their HTML report; an error if the history is malformed.
pub fn check_events(
    path: &Path,
    events: &[Event],
    linearizability_timeout: Duration,
) -> Result<Checked, StoreError> {
    let (history_path, command, default_output) = locate(path);
    let mut builder = HistoryBuilder::with_capacity(events.len());
    for event in events {
        builder
            .push(event)
            .map_err(|error| StoreError::History(format!("{}: {error}", history_path.display())))?;
    }
    let options = CheckOptions {
        linearizability_time_limit: Some(linearizability_timeout),
        ..CheckOptions::default()
    };
    let analysis = analyze(&builder.finish(), &default_checkers(), &options);
    let source = history_path.display().to_string();
    let input =
        HtmlInput { title: &source, events, analysis: &analysis, command: command.as_deref() };
    let html = render_html(&input);
    Ok(Checked { analysis, source, html, default_output })
}
