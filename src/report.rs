//! `lockcheck report PATH`: renders the HTML report (and a verdict in any
//! format) again, from a stored run's folder or from any history file.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use lockcheck_checker::{Analysis, Event};
use lockcheck_reports::Analyzed;
use lockcheck_runs::report::{check_events, locate, read_events};
use lockcheck_runs::write_file;

use crate::args::ReportArgs;
use lockcheck_commands::exit;
use lockcheck_commands::{print, render};

/// A history read and checked, its HTML report written.
pub struct Reported {
    pub analysis: Analysis,
    pub source: String,
    pub html: PathBuf,
}

/// Checks `events` (read from `args.path`) and writes their HTML report;
/// an error if the history is malformed or the report cannot be written.
pub fn write_report(args: &ReportArgs, events: &[Event]) -> anyhow::Result<Reported> {
    let checked = check_events(&args.path, events, args.linearizability_timeout)?;
    let html = args.output.clone().unwrap_or(checked.default_output);
    write_file(&html, |out| out.write_all(checked.html.as_bytes()))?;
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
    let text = render(
        args.format.into(),
        reported.analysis.verdict,
        &[analyzed],
        Some(&events),
        Some(&html),
    );
    print(&text)?;
    Ok(exit::for_verdict(reported.analysis.verdict).into())
}
