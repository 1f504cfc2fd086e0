//! One place that turns analyses into the format asked for, and prints it.

use std::io::Write;

use lockcheck_checker::{Event, EventType, Function, Verdict};
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

/// What a run did, for its summary line, over `wall_s` of wall time: its
/// completed charges (a payments run) or job runs (cron), then its
/// completed lock operations, the first with its rate: `812 charges
/// (135/s), 1,604 lock operations`. A run with none of them says `0 lock
/// operations`.
pub fn work_done(events: &[Event], wall_s: f64) -> String {
    let completed = |wanted: &[Function]| {
        events
            .iter()
            .filter(|event| event.event_type != EventType::Invoke && wanted.contains(&event.f))
            .count()
    };
    let counts = [
        (completed(&[Function::Charge]), "charges"),
        (completed(&[Function::Run]), "job runs"),
        (completed(&[Function::Acquire, Function::Release, Function::Renew]), "lock operations"),
    ];
    let mut parts: Vec<String> = Vec::new();
    for (count, what) in counts {
        if count == 0 {
            continue;
        }
        match parts.is_empty() {
            true => {
                parts.push(format!("{count} {what} ({:.0}/s)", count as f64 / wall_s.max(1e-9)))
            }
            false => parts.push(format!("{count} {what}")),
        }
    }
    match parts.is_empty() {
        true => "0 lock operations (0/s)".to_string(),
        false => parts.join(", "),
    }
}

#[cfg(test)]
mod tests {
    use lockcheck_checker::{Event, EventType, Function, Process};

    use super::work_done;

    fn event(event_type: EventType, f: Function) -> Event {
        Event {
            index: 0,
            time_ns: 0,
            process: Process::Client(0),
            event_type,
            f,
            key: None,
            value: None,
            error: None,
            extra: None,
        }
    }

    #[test]
    fn a_run_says_what_it_did_its_charges_first() {
        let locks = [
            event(EventType::Invoke, Function::Acquire),
            event(EventType::Ok, Function::Acquire),
            event(EventType::Fail, Function::Release),
        ];
        assert_eq!(work_done(&locks, 2.0), "2 lock operations (1/s)");
        let mut paying = locks.to_vec();
        paying.extend([
            event(EventType::Invoke, Function::Charge),
            event(EventType::Ok, Function::Charge),
            event(EventType::Info, Function::Charge),
        ]);
        assert_eq!(work_done(&paying, 2.0), "2 charges (1/s), 2 lock operations");
        assert_eq!(work_done(&[], 1.0), "0 lock operations (0/s)");
    }
}
