//! One place that turns analyses into the format asked for, and prints it.

use std::io::Write;

use lockcheck_checker::{Event, Verdict};
use lockcheck_reports::{
    render_json, render_junit, render_markdown, render_text, Analyzed, TextOptions,
};

/// How a report is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// A report for people.
    Text,
    /// One JSON document with every verdict and violation.
    Json,
    /// JUnit XML: a test case per checker per key, for CI test reports.
    Junit,
    /// A Markdown summary, for a CI job summary.
    Markdown,
}

/// `analyzed` in `format`; the text report gets each violation's operations
/// from `events` (one history's) and names the HTML report `html`.
pub fn render(
    format: Format,
    verdict: Verdict,
    analyzed: &[Analyzed<'_>],
    events: Option<&[Event]>,
    html: Option<&str>,
) -> String {
    match format {
        Format::Json => render_json(verdict, analyzed, &[]),
        Format::Junit => render_junit(analyzed),
        Format::Markdown => render_markdown(analyzed),
        Format::Text => {
            let options = TextOptions { events, html_report: html, ..TextOptions::default() };
            analyzed.iter().map(|one| render_text(one, &options)).collect()
        }
    }
}

/// Prints `text` to standard output, redacted ([`lockcheck_checker::redact`]); a reader that went away (`| head`)
/// is not an error.
pub fn print(text: &str) -> anyhow::Result<()> {
    // Every report and listing on standard output, passwords masked.
    let text = lockcheck_checker::redact(text);
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}
