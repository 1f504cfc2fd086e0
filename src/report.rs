//! `lockcheck report PATH`: renders the HTML report (and a verdict in any
//! format) again, from a stored run's folder or from any history file.

use std::fs::File;
use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use lockcheck_checker::{analyze, default_checkers, Analysis, Event, EventReader, HistoryBuilder};
use lockcheck_reports::{render_html, Analyzed, HtmlInput};

use crate::args::ReportArgs;
use crate::exit;
use crate::options::check_options;
use crate::output::{print, render};
use crate::store::write_file;

/// Where a report's input and output are: a stored run's folder has its
/// history, its command and its report side by side; a history file gets
/// its report beside it (`run.jsonl` → `run.html`).
fn locate(path: &Path) -> (PathBuf, Option<String>, PathBuf) {
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

/// A history read and checked, its HTML report written.
pub struct Reported {
    pub analysis: Analysis,
    pub source: String,
    pub html: PathBuf,
}

/// A history checked, and its HTML report rendered (not yet written).
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
    linearizability_timeout: std::time::Duration,
) -> anyhow::Result<Checked> {
    let (history_path, command, default_output) = locate(path);
    let mut builder = HistoryBuilder::with_capacity(events.len());
    for event in events {
        builder
            .push(event)
            .map_err(|error| anyhow::anyhow!("{}: {error}", history_path.display()))?;
    }
    let analysis =
        analyze(&builder.finish(), &default_checkers(), &check_options(linearizability_timeout));
    let source = history_path.display().to_string();
    let input =
        HtmlInput { title: &source, events, analysis: &analysis, command: command.as_deref() };
    let html = render_html(&input);
    Ok(Checked { analysis, source, html, default_output })
}

/// Checks `events` (read from `args.path`) and writes their HTML report;
/// an error if the history is malformed or the report cannot be written.
pub fn write_report(args: &ReportArgs, events: &[Event]) -> anyhow::Result<Reported> {
    let checked = check_events(&args.path, events, args.linearizability_timeout)?;
    let html = args.output.clone().unwrap_or(checked.default_output);
    write_file(&html, |out| Ok(out.write_all(checked.html.as_bytes())?))?;
    Ok(Reported { analysis: checked.analysis, source: checked.source, html })
}

pub fn run(args: &ReportArgs) -> anyhow::Result<ExitCode> {
    if !args.path.exists() {
        eprintln!(
            "lockcheck: {} does not exist: give a stored run's folder (store/<test>/<time>) or a history file",
            args.path.display()
        );
        return Ok(exit::USAGE.into());
    }
    let (history_path, _, _) = locate(&args.path);
    let events = match read_events(&history_path) {
        Ok(events) => events,
        Err(error) => {
            eprintln!("lockcheck: {error}");
            return Ok(exit::BAD_INPUT.into());
        }
    };
    let reported = match write_report(args, &events) {
        Ok(reported) => reported,
        Err(error) => {
            eprintln!("lockcheck: {error:#}");
            return Ok(exit::BAD_INPUT.into());
        }
    };
    let html = reported.html.display().to_string();
    let analyzed = Analyzed { source: &reported.source, analysis: &reported.analysis };
    let text =
        render(args.format, reported.analysis.verdict, &[analyzed], Some(&events), Some(&html));
    print(&text)?;
    Ok(exit::for_verdict(reported.analysis.verdict).into())
}
