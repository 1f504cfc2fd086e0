//! `--format markdown`: a job summary for GitHub (`$GITHUB_STEP_SUMMARY`),
//! so a failed CI gate says on the run's page which checker failed, on which
//! lock, between which clients and when, without opening the log.
//!
//! Every piece of data from the history (sources, keys, explanations) is
//! escaped, so that a `|` in a lock name cannot break the table and a `*` or
//! `<` cannot turn into markup, and cut as the terminal report cuts it
//! (keys and quoted passages at about 80 bytes, [`lockcheck_checker::quote`]):
//! GitHub takes at most 1 MiB of a job's summary.

use std::fmt::Write;

use lockcheck_checker::quote::{clip_quoted, text};
use lockcheck_checker::{Analysis, Cause, CheckResult, Verdict, Violation};

use crate::text::{plural, shout, summary_line, who_and_when};
use crate::Analyzed;

/// Violations shown per checker; the rest are counted, so that one bad run
/// cannot bury the summary page.
const VIOLATIONS_SHOWN_MAX: usize = 5;

/// Renders the summary of every history: the verdict over all of them, then
/// per history a table (checker | verdict | keys | violations) and the first
/// violations of each checker.
pub fn render_markdown(analyzed: &[Analyzed<'_>]) -> String {
    let verdict = analyzed
        .iter()
        .map(|one| one.analysis.verdict)
        .reduce(Verdict::combine)
        .unwrap_or(Verdict::Unknown);
    let mut out = format!("## lockcheck: {}\n\n", shout(verdict));
    if analyzed.len() > 1 {
        let count = |wanted: Verdict| {
            analyzed.iter().filter(|one| one.analysis.verdict == wanted).count() as u64
        };
        let _ = writeln!(
            out,
            "{}: {} valid, {} invalid, {} unknown.\n",
            plural(analyzed.len() as u64, "history", "histories"),
            count(Verdict::Valid),
            count(Verdict::Invalid),
            count(Verdict::Unknown)
        );
    }
    for one in analyzed {
        history(&mut out, one);
    }
    out
}

fn history(out: &mut String, analyzed: &Analyzed<'_>) {
    let analysis = analyzed.analysis;
    let _ = writeln!(out, "### {}: {}\n", escape(analyzed.source), shout(analysis.verdict));
    let _ = writeln!(out, "{}\n", escape(&summary_line(analysis)));
    if let Some(line) = crate::text::coverage_line(analysis) {
        let _ = writeln!(out, "{}\n", escape(&line));
    }
    for warning in &analysis.warnings {
        let _ = writeln!(out, "> warning: {}\n", escape(&clip_quoted(warning)));
    }
    table(out, analysis);
    findings(out, analysis);
    for result in &analysis.results {
        details(out, result);
    }
}

/// Findings listed at most; the rest are counted.
const FINDINGS_SHOWN_MAX: usize = 10;

/// One item per finding: its cause, the violations it explains, the fault
/// behind it.
fn findings(out: &mut String, analysis: &Analysis) {
    if analysis.findings.is_empty() {
        return;
    }
    let explained: u64 = analysis.findings.iter().map(|finding| finding.violations).sum();
    let _ = writeln!(
        out,
        "**findings**: {} explain {}\n",
        analysis.findings.len(),
        plural(explained, "violation", "violations")
    );
    for finding in analysis.findings.iter().take(FINDINGS_SHOWN_MAX) {
        // A deadlock is the clients' own lock order, never a fault's doing.
        let none = match finding.cause {
            Cause::Deadlock => "no fault behind it: the clients' lock order",
            _ => "no fault behind it: the lock broke by itself",
        };
        let fault = finding.fault.as_ref().map_or(none, |fault| &fault.description);
        let _ = writeln!(
            out,
            "- **finding {}**: {} on {}, {}; fault: {}  \n  {}",
            finding.id,
            escape(finding.cause.describe()),
            escape(&text(&finding.key)),
            plural(finding.violations, "violation", "violations"),
            escape(&clip_quoted(fault)),
            escape(&clip_quoted(&finding.summary))
        );
    }
    if analysis.findings.len() > FINDINGS_SHOWN_MAX {
        let more = (analysis.findings.len() - FINDINGS_SHOWN_MAX) as u64;
        let _ = writeln!(out, "- … and {}", plural(more, "more finding", "more findings"));
    }
    out.push('\n');
}

fn table(out: &mut String, analysis: &Analysis) {
    out.push_str("| checker | verdict | keys | violations |\n|---|---|---|---|\n");
    for result in &analysis.results {
        let keys = result.keys.len() as u64;
        let bad = result.keys.iter().filter(|key| key.verdict != Verdict::Valid).count() as u64;
        let violations = result.violation_count.to_string();
        let (verdict, keys, violations) = match result.verdict {
            None => {
                let reason = result.reason.as_deref().unwrap_or("does not apply");
                let reason = escape(&clip_quoted(reason));
                (format!("n/a: {reason}"), "–".to_string(), "–".to_string())
            }
            Some(Verdict::Valid) => ("valid".to_string(), keys.to_string(), violations),
            Some(verdict) => (
                format!("**{}**", shout(verdict)),
                format!("{bad} of {keys} not valid"),
                violations,
            ),
        };
        let _ = writeln!(out, "| {} | {verdict} | {keys} | {violations} |", escape(result.checker));
    }
    out.push('\n');
}

/// Below the table: why a checker could not decide, and its first
/// violations.
fn details(out: &mut String, result: &CheckResult) {
    let unknown = result.verdict == Some(Verdict::Unknown);
    if result.violations.is_empty() && !unknown {
        return;
    }
    let _ = writeln!(out, "**{}**\n", escape(result.checker));
    if let Some(reason) = &result.reason {
        let _ = writeln!(out, "{}\n", escape(&clip_quoted(reason)));
    }
    for key in result.keys.iter().filter(|key| key.verdict == Verdict::Unknown) {
        let reason = key.reason.as_deref().unwrap_or("could not decide");
        let key = escape(&text(&key.key));
        let _ = writeln!(out, "- unknown on {key}: {}", escape(&clip_quoted(reason)));
    }
    for violation in result.violations.iter().take(VIOLATIONS_SHOWN_MAX) {
        violation_item(out, violation);
    }
    let shown = result.violations.len().min(VIOLATIONS_SHOWN_MAX) as u64;
    if result.violation_count > shown {
        let more = plural(result.violation_count - shown, "more violation", "more violations");
        let _ = writeln!(out, "- … and {more}");
    }
    out.push('\n');
}

/// `- **overlap** on "report": clients 1 and 2, window …` then the paragraph.
fn violation_item(out: &mut String, violation: &Violation) {
    let kind = serde_json::to_value(violation.kind)
        .ok()
        .and_then(|name| name.as_str().map(str::to_string))
        .unwrap_or_else(|| format!("{:?}", violation.kind));
    let _ = write!(out, "- **{}** on {}", escape(&kind), escape(&text(&violation.key)));
    if let Some(id) = violation.finding {
        let _ = write!(out, " (finding {id})");
    }
    if let Some(line) = who_and_when(violation) {
        let _ = write!(out, ": {}", escape(&line));
    }
    let events: Vec<String> = violation.events.iter().map(u64::to_string).collect();
    let _ = writeln!(
        out,
        "  \n  {} (events {})",
        escape(&clip_quoted(&violation.explanation)),
        events.join(", ")
    );
}

/// Data as literal Markdown text on one line: line breaks become spaces, and
/// the characters that could start markup (emphasis, code, links, HTML,
/// entities, strikethrough, math, table cells) are backslash-escaped, which
/// CommonMark and GitHub allow for any ASCII punctuation.
fn escape(data: &str) -> String {
    let mut out = String::with_capacity(data.len());
    for c in data.chars() {
        match c {
            '\n' | '\r' => out.push(' '),
            '\\' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '|' | '~' | '&' | '$' | '#' | '!' => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_keeps_data_literal_and_on_one_line() {
        assert_eq!(escape("a|b*c\nd<e>"), "a\\|b\\*c d\\<e\\>");
    }
}
