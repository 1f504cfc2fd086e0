//! `--format junit`: JUnit XML, the one test-report format every CI system
//! reads (Jenkins, GitLab, GitHub actions). A CI gate then shows which checker
//! failed on which key, with the violation paragraph as the failure text.
//!
//! The shape: one `<testsuite>` per analysed history (named by its source),
//! one `<testcase>` per checker per key (`name="<checker> <key>"`), taken from
//! [`CheckResult::keys`]: every checker lists each key it judged, valid or
//! not. A checker that judged no key (it could not decide at all, or the
//! history had nothing for it) is one test case named by the checker alone; a
//! checker that did not apply is one skipped test case with its reason.

use std::fmt::Write;

use lockcheck_checker::{CheckResult, Finding, KeyVerdict, Verdict, Violation, ViolationKind};

use crate::text::who_and_when;
use crate::Analyzed;

/// Renders every history's results as one `<testsuites>` document, with an
/// XML declaration and a trailing newline.
pub fn render_junit(analyzed: &[Analyzed<'_>]) -> String {
    let suites: Vec<Suite<'_>> = analyzed.iter().map(suite).collect();
    let total = suites.iter().fold(Counts::default(), |all, suite| all.add(suite.counts()));
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(out, "<testsuites name=\"lockcheck\" {}>", total.attributes());
    for suite in &suites {
        write_suite(&mut out, suite);
    }
    out.push_str("</testsuites>\n");
    out
}

/// One history's test cases.
struct Suite<'a> {
    source: &'a str,
    cases: Vec<Case>,
    warnings: &'a [String],
    /// What the run's faults reached (a property of the suite).
    coverage: Option<String>,
}

impl Suite<'_> {
    fn counts(&self) -> Counts {
        self.cases.iter().fold(Counts::default(), |all, case| all.add(case.outcome.counts()))
    }
}

/// One checker on one key.
struct Case {
    name: String,
    outcome: Outcome,
}

/// What a test case says, in JUnit's four words.
enum Outcome {
    Passed,
    /// Invalid: a violation was found.
    Failure {
        message: String,
        kind: String,
        body: String,
    },
    /// Unknown: the checker could not decide.
    Error {
        message: String,
    },
    /// The checker does not apply to this history.
    Skipped {
        message: String,
    },
}

impl Outcome {
    fn counts(&self) -> Counts {
        let mut counts = Counts { tests: 1, ..Counts::default() };
        match self {
            Outcome::Passed => {}
            Outcome::Failure { .. } => counts.failures = 1,
            Outcome::Error { .. } => counts.errors = 1,
            Outcome::Skipped { .. } => counts.skipped = 1,
        }
        counts
    }
}

/// The counts JUnit puts on `<testsuites>` and `<testsuite>`.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    tests: u64,
    failures: u64,
    errors: u64,
    skipped: u64,
}

impl Counts {
    fn add(self, other: Counts) -> Counts {
        Counts {
            tests: self.tests + other.tests,
            failures: self.failures + other.failures,
            errors: self.errors + other.errors,
            skipped: self.skipped + other.skipped,
        }
    }

    /// The checkers' run time is not recorded, so `time` is 0: the
    /// attribute is there because some parsers require it.
    fn attributes(self) -> String {
        format!(
            "tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"0\"",
            self.tests, self.failures, self.errors, self.skipped
        )
    }
}

fn suite<'a>(analyzed: &Analyzed<'a>) -> Suite<'a> {
    let findings = &analyzed.analysis.findings;
    let cases =
        analyzed.analysis.results.iter().flat_map(|result| cases(result, findings)).collect();
    Suite {
        source: analyzed.source,
        cases,
        warnings: &analyzed.analysis.warnings,
        coverage: crate::text::coverage_line(analyzed.analysis),
    }
}

/// A checker's test cases: one per key it judged, or one for the checker.
fn cases(result: &CheckResult, findings: &[Finding]) -> Vec<Case> {
    let Some(verdict) = result.verdict else {
        let message = result.reason.clone().unwrap_or_else(|| "does not apply".to_string());
        return vec![Case {
            name: result.checker.to_string(),
            outcome: Outcome::Skipped { message },
        }];
    };
    if result.keys.is_empty() {
        let violations: Vec<&Violation> = result.violations.iter().collect();
        let count = result.violation_count;
        let outcome = outcome(verdict, &violations, count, result.reason.as_deref(), findings);
        return vec![Case { name: result.checker.to_string(), outcome }];
    }
    let mut cases: Vec<Case> =
        result.keys.iter().map(|key| key_case(result, key, findings)).collect();
    let orphans: Vec<&Violation> = result
        .violations
        .iter()
        .filter(|violation| !result.keys.iter().any(|key| key.key == violation.key))
        .collect();
    if !orphans.is_empty() {
        let count = orphans.len() as u64;
        let outcome = outcome(Verdict::Invalid, &orphans, count, None, findings);
        cases.push(Case { name: result.checker.to_string(), outcome });
    }
    cases
}

fn key_case(result: &CheckResult, key: &KeyVerdict, findings: &[Finding]) -> Case {
    let violations: Vec<&Violation> =
        result.violations.iter().filter(|violation| violation.key == key.key).collect();
    let reason = key.reason.as_deref().or(result.reason.as_deref());
    Case {
        name: format!("{} {}", result.checker, key.key),
        outcome: outcome(key.verdict, &violations, key.violations, reason, findings),
    }
}

/// The outcome of a verdict, with the violations kept for it and how many
/// there were in all (the checker keeps only the first few).
fn outcome(
    verdict: Verdict,
    violations: &[&Violation],
    count: u64,
    reason: Option<&str>,
    findings: &[Finding],
) -> Outcome {
    match verdict {
        Verdict::Valid => Outcome::Passed,
        Verdict::Unknown => {
            Outcome::Error { message: reason.unwrap_or("the checker could not decide").to_string() }
        }
        Verdict::Invalid => failure(violations, count, findings),
    }
}

fn failure(violations: &[&Violation], count: u64, findings: &[Finding]) -> Outcome {
    let Some(first) = violations.first() else {
        let message = format!("{count} violations; none kept as evidence (see --max-violations)");
        return Outcome::Failure { body: message.clone(), message, kind: "invalid".to_string() };
    };
    let message = first.explanation.lines().next().unwrap_or_default().to_string();
    let mut paragraphs: Vec<String> =
        violations.iter().map(|violation| paragraph(violation, findings)).collect();
    let kept = violations.len() as u64;
    if count > kept {
        paragraphs.push(format!("… {} more violations not kept as evidence", count - kept));
    }
    Outcome::Failure { message, kind: kind_name(first.kind), body: paragraphs.join("\n\n") }
}

/// A violation as a person reads it: the checker's paragraph, then who,
/// when, and the events that prove it.
fn paragraph(violation: &Violation, findings: &[Finding]) -> String {
    let mut text = violation.explanation.clone();
    if let Some(line) = who_and_when(violation) {
        let _ = write!(text, "\n{line}");
    }
    let events: Vec<String> = violation.events.iter().map(u64::to_string).collect();
    let _ = write!(text, "\nevents: {}", events.join(", "));
    let finding = violation.finding.and_then(|id| findings.iter().find(|f| f.id == id));
    if let Some(finding) = finding {
        let _ = write!(
            text,
            "\nfinding {}: {} ({} in all)",
            finding.id,
            finding.cause.describe(),
            crate::text::plural(finding.violations, "violation", "violations")
        );
        // A deadlock is the clients' own lock order, never a fault's doing.
        let none = match finding.cause {
            lockcheck_checker::Cause::Deadlock => "none: the clients' lock order",
            _ => "none: the lock broke by itself",
        };
        let fault = finding.fault.as_ref().map_or(none, |fault| fault.description.as_str());
        let _ = write!(text, "\nfault: {fault}");
    }
    text
}

/// The kind's name as the JSON report spells it (`overlap`, `stale-write`).
fn kind_name(kind: ViolationKind) -> String {
    match serde_json::to_value(kind) {
        Ok(serde_json::Value::String(name)) => name,
        _ => format!("{kind:?}"),
    }
}

fn write_suite(out: &mut String, suite: &Suite<'_>) {
    let _ = writeln!(
        out,
        "  <testsuite name=\"{}\" {}>",
        attribute(suite.source),
        suite.counts().attributes()
    );
    if let Some(coverage) = &suite.coverage {
        let _ = writeln!(
            out,
            "    <properties><property name=\"coverage\" value=\"{}\"/></properties>",
            attribute(coverage)
        );
    }
    for case in &suite.cases {
        write_case(out, suite.source, case);
    }
    if !suite.warnings.is_empty() {
        let _ = writeln!(out, "    <system-err>{}</system-err>", text(&suite.warnings.join("\n")));
    }
    out.push_str("  </testsuite>\n");
}

fn write_case(out: &mut String, source: &str, case: &Case) {
    let _ = write!(
        out,
        "    <testcase classname=\"{}\" name=\"{}\" time=\"0\"",
        attribute(source),
        attribute(&case.name)
    );
    match &case.outcome {
        Outcome::Passed => out.push_str("/>\n"),
        Outcome::Failure { message, kind, body } => {
            let _ = writeln!(
                out,
                ">\n      <failure message=\"{}\" type=\"{}\">{}</failure>\n    </testcase>",
                attribute(message),
                attribute(kind),
                text(body)
            );
        }
        Outcome::Error { message } => {
            let _ = writeln!(
                out,
                ">\n      <error message=\"{}\" type=\"unknown\">{}</error>\n    </testcase>",
                attribute(message),
                text(message)
            );
        }
        Outcome::Skipped { message } => {
            let _ = writeln!(
                out,
                ">\n      <skipped message=\"{}\"/>\n    </testcase>",
                attribute(message)
            );
        }
    }
}

/// Whether XML 1.0 allows the character at all (§2.2 `Char`); the others
/// (most C0 controls, U+FFFE, U+FFFF) cannot be written even escaped.
fn allowed(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r') || (c >= ' ' && c != '\u{FFFE}' && c != '\u{FFFF}')
}

/// Character data: `&`, `<` and `>` escaped, forbidden characters dropped.
fn text(data: &str) -> String {
    let mut out = String::with_capacity(data.len());
    for c in data.chars().filter(|&c| allowed(c)) {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

/// An attribute value in double quotes: quotes escaped too, and tabs and
/// line breaks as character references, which attribute normalisation would
/// otherwise turn into spaces.
fn attribute(data: &str) -> String {
    let mut out = String::with_capacity(data.len());
    for c in data.chars().filter(|&c| allowed(c)) {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' => out.push_str("&#9;"),
            '\n' => out.push_str("&#10;"),
            '\r' => out.push_str("&#13;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_drops_forbidden_characters() {
        assert_eq!(text("a<&>b\u{1}\u{FFFF}\tc"), "a&lt;&amp;&gt;b\tc");
        assert_eq!(attribute("\"x'\n\u{0}"), "&quot;x&apos;&#10;");
    }
}
