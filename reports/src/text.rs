//! The terminal report: what was checked, a verdict per checker per key, and
//! each violation in one short block that fits on one screen: the paragraph,
//! the clients and the window, the events that prove it and, when there is
//! one, where the HTML timeline is. Keys, values, errors and the passages
//! of a paragraph between quotes are cut at about 80 bytes with `…` and
//! their length ([`lockcheck_checker::quote`], as the errors quote them): a
//! 1 MB key prints as a short line; the HTML and JSON reports keep it whole.

use std::fmt::Write;

use lockcheck_checker::quote::{clip_quoted, display, text};
use lockcheck_checker::{
    format_seconds, format_time, Analysis, CheckResult, Event, Finding, Verdict, Violation,
};

use crate::Analyzed;

/// Proving events listed under a violation; the rest are counted, so that a
/// block stays within about 12 lines.
const EVENTS_LISTED_MAX: usize = 7;

/// Characters of an event's `value` shown; longer values are cut with `…`.
const VALUE_CHARS_MAX: usize = 60;

/// How much the text report shows, and what it can point to.
///
/// The borrowed fields default to `None`, so callers that only have the
/// [`Analysis`] get the report they always had.
#[derive(Debug, Clone, Copy)]
pub struct TextOptions<'a> {
    /// Keys listed one per line when a checker has at most this many; above
    /// it, only the keys that are not valid are listed.
    pub max_keys_listed: usize,
    /// Violations shown per checker; the rest are counted.
    pub max_violations_shown: usize,
    /// The history's events, ascending by index (as read or recorded). With
    /// them, each violation lists its proving operations (time, process,
    /// type, f, key, value) rather than only their indices.
    pub events: Option<&'a [Event]>,
    /// Where the HTML timeline of this history was written; printed under
    /// each violation as `timeline: <path>` so the reader knows where to look
    /// next.
    pub html_report: Option<&'a str>,
}

impl Default for TextOptions<'_> {
    fn default() -> Self {
        TextOptions {
            max_keys_listed: 20,
            max_violations_shown: 5,
            events: None,
            html_report: None,
        }
    }
}

/// Renders one history's analysis.
pub fn render_text(analyzed: &Analyzed<'_>, options: &TextOptions<'_>) -> String {
    let mut out = String::new();
    let analysis = analyzed.analysis;
    let _ = writeln!(out, "{}", analyzed.source);
    summary(&mut out, analysis);
    for warning in &analysis.warnings {
        let _ = writeln!(out, "  warning: {}", clip_quoted(warning));
    }
    out.push('\n');
    for result in &analysis.results {
        checker(&mut out, result, analysis, options);
    }
    findings(&mut out, analysis, options);
    let failing: Vec<&str> = analysis
        .results
        .iter()
        .filter(|result| {
            result.verdict == Some(analysis.verdict) && analysis.verdict != Verdict::Valid
        })
        .map(|result| result.checker)
        .collect();
    let _ = write!(out, "verdict: {}", shout(analysis.verdict));
    if !failing.is_empty() {
        let _ = write!(out, " ({})", failing.join(", "));
    }
    out.push('\n');
    coverage(&mut out, analysis);
    if let Some(line) = options.events.and_then(wake_ups_line) {
        let _ = writeln!(out, "{line}");
    }
    out
}

/// How many waiters a release woke, when clients waited at all: a watch's
/// wake-ups, or a polling recipe's refused polls, per release.
fn wake_ups_line(events: &[lockcheck_checker::Event]) -> Option<String> {
    let wake_ups = lockcheck_checker::WakeUps::of(events);
    if !wake_ups.watched && wake_ups.busy == 0 {
        return None;
    }
    Some(format!("wake-ups: {}", wake_ups.describe()?))
}

/// What the run's faults reached, under the verdict.
fn coverage(out: &mut String, analysis: &Analysis) {
    if let Some(line) = coverage_line(analysis) {
        let _ = writeln!(out, "{line}");
    }
}

/// What the run's faults reached, in one line: a valid run whose faults
/// reached no vulnerable window is "valid, but vacuous", and says why.
/// `None` without faults.
pub(crate) fn coverage_line(analysis: &Analysis) -> Option<String> {
    if analysis.coverage.is_none() {
        return None;
    }
    let line = analysis.coverage.line();
    Some(if analysis.vacuous() {
        format!("valid, but vacuous: {line}")
    } else {
        format!("coverage: {line}")
    })
}

/// The verdict as the report prints it: loud when it is not valid.
pub(crate) fn shout(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Valid => "valid",
        Verdict::Invalid => "INVALID",
        Verdict::Unknown => "UNKNOWN",
    }
}

/// `1 key`, `2 keys`.
pub(crate) fn plural(count: u64, one: &str, many: &str) -> String {
    format!("{count} {}", if count == 1 { one } else { many })
}

/// What a summary line's count of processes means.
const PROCESSES: &str = " (a client whose operation timed out or crashed goes on as a new process)";

fn summary(out: &mut String, analysis: &Analysis) {
    let _ = writeln!(out, "  {}", summary_line(analysis));
}

/// What was checked, in one line: `24 events, 11 operations on 1 lock and 1
/// resource by 3 processes (…), t=0.500 s to t=10.002 s (9.502 s)`. A
/// history's processes are not the run's clients: a client whose operation
/// ended unknown goes on as a new process (histories/README.md), so more
/// than one process says so, in words, since the report cannot know how
/// many clients the run had.
pub(crate) fn summary_line(analysis: &Analysis) -> String {
    let s = &analysis.summary;
    format!(
        "{}, {} on {} and {} by {}{}, t={} to t={} ({}){}",
        plural(s.events, "event", "events"),
        plural(s.ops, "operation", "operations"),
        plural(s.lock_keys, "lock", "locks"),
        plural(s.resource_keys, "resource", "resources"),
        plural(s.clients, "process", "processes"),
        if s.clients > 1 { PROCESSES } else { "" },
        format_time(s.start_ns),
        format_time(s.end_ns),
        format_seconds(s.end_ns - s.start_ns.min(s.end_ns)),
        if s.nemesis_events > 0 {
            format!(", {}", plural(s.nemesis_events, "nemesis event", "nemesis events"))
        } else {
            String::new()
        }
    )
}

fn checker(out: &mut String, result: &CheckResult, analysis: &Analysis, options: &TextOptions<'_>) {
    let Some(verdict) = result.verdict else {
        let reason = result.reason.as_deref().unwrap_or("does not apply");
        let _ = writeln!(out, "{:<20} n/a      {}", result.checker, clip_quoted(reason));
        return;
    };
    let keys = result.keys.len() as u64;
    let bad = result.keys.iter().filter(|key| key.verdict != Verdict::Valid).count() as u64;
    let detail = match verdict {
        Verdict::Valid => plural(keys, "key", "keys"),
        _ => format!(
            "{} on {bad} of {}",
            plural(result.violation_count, "violation", "violations"),
            plural(keys, "key", "keys")
        ),
    };
    let _ = writeln!(out, "{:<20} {:<8} {detail}", result.checker, shout(verdict));
    if let Some(reason) = &result.reason {
        let _ = writeln!(out, "  {}", clip_quoted(reason));
    }
    let listed = result
        .keys
        .iter()
        .filter(|key| keys <= options.max_keys_listed as u64 || key.verdict != Verdict::Valid);
    for key in listed.take(options.max_keys_listed) {
        let count = if key.violations > 0 {
            format!(", {}", plural(key.violations, "violation", "violations"))
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "  {}: {} ({}{count})",
            text(&key.key),
            key.verdict.as_str(),
            plural(key.ops, "op", "ops")
        );
    }
    let mut reasons: Vec<(&str, u64)> = Vec::new();
    for reason in result.keys.iter().filter_map(|key| key.reason.as_deref()) {
        match reasons.iter_mut().find(|(seen, _)| *seen == reason) {
            Some((_, count)) => *count += 1,
            None => reasons.push((reason, 1)),
        }
    }
    for (reason, count) in reasons {
        let _ =
            writeln!(out, "  unknown on {}: {}", plural(count, "key", "keys"), clip_quoted(reason));
    }
    if bad > options.max_keys_listed as u64 {
        let _ = writeln!(
            out,
            "  … and {} more keys that are not valid",
            bad - options.max_keys_listed as u64
        );
    }
    if !analysis.findings.is_empty() {
        // Told by cause below: here, which findings explain them.
        let ids: Vec<u32> = analysis
            .findings
            .iter()
            .filter(|finding| finding.checkers.iter().any(|c| c.checker == result.checker))
            .map(|finding| finding.id)
            .collect();
        if !ids.is_empty() {
            let _ = writeln!(out, "  in {}", finding_ids(&ids));
        }
        for note in &result.notes {
            let _ = writeln!(out, "  note: {}", clip_quoted(note));
        }
        return;
    }
    for violation in result.violations.iter().take(options.max_violations_shown) {
        violation_block(out, violation, options);
    }
    let shown = result.violations.len().min(options.max_violations_shown) as u64;
    if result.violation_count > shown {
        let _ = writeln!(
            out,
            "  … {} not shown (all are counted; --format json lists up to --max-violations)",
            plural(result.violation_count - shown, "more violation", "more violations")
        );
    }
    for note in &result.notes {
        let _ = writeln!(out, "  note: {}", clip_quoted(note));
    }
}

/// The findings: how many causes explain the violations, then one block
/// for the largest finding of each kind of cause and fault (a stale holder
/// after a pause, a token reset after a kill, a stale holder with no fault
/// behind it …), and one line for the rest of each kind.
fn findings(out: &mut String, analysis: &Analysis, options: &TextOptions<'_>) {
    let findings = &analysis.findings;
    if findings.is_empty() {
        return;
    }
    let all: u64 = analysis.results.iter().map(|result| result.violation_count).sum();
    let explained: u64 = findings.iter().map(|finding| finding.violations).sum();
    // Kinds in the order they first happened.
    let mut kinds: Vec<((&str, &str), Vec<&Finding>)> = Vec::new();
    for finding in findings {
        let kind = (finding.cause.describe(), finding.fault_name());
        match kinds.iter_mut().find(|(seen, _)| *seen == kind) {
            Some((_, list)) => list.push(finding),
            None => kinds.push((kind, vec![finding])),
        }
    }
    let causes: Vec<String> =
        kinds.iter().map(|((cause, fault), list)| kind_name(cause, fault, list.len())).collect();
    let explains = if explained >= all {
        format!("all {}", plural(all, "violation", "violations"))
    } else {
        format!("{explained} of {}", plural(all, "violation", "violations"))
    };
    let _ = writeln!(
        out,
        "\n{} {} {explains}: {}",
        plural(findings.len() as u64, "finding", "findings"),
        if findings.len() == 1 { "explains" } else { "explain" },
        causes.join("; ")
    );
    for ((cause, fault), list) in kinds.iter().take(FINDING_KINDS_SHOWN) {
        let largest = list
            .iter()
            .max_by_key(|finding| (finding.violations, std::cmp::Reverse(finding.id)))
            .expect("a kind has a finding");
        finding_block(out, largest, options);
        if list.len() > 1 {
            let others: Vec<u32> =
                list.iter().map(|finding| finding.id).filter(|&id| id != largest.id).collect();
            let _ = writeln!(
                out,
                "  and {} like it: {}",
                kind_name(cause, fault, others.len()),
                finding_ids(&others)
            );
        }
    }
    for ((cause, fault), list) in kinds.iter().skip(FINDING_KINDS_SHOWN) {
        let ids: Vec<u32> = list.iter().map(|finding| finding.id).collect();
        let _ = writeln!(out, "{}: {}", kind_name(cause, fault, list.len()), finding_ids(&ids));
    }
    if let Some(path) = options.html_report {
        let _ = writeln!(out, "timeline: {path}");
    }
    if explained < all {
        let _ = writeln!(
            out,
            "({} beyond the --max-violations kept per checker are counted, not grouped)",
            plural(all - explained, "violation", "violations"),
        );
    }
}

/// Kinds of finding shown as a block each; the rest get a line.
const FINDING_KINDS_SHOWN: usize = 4;

/// `3 stale holders after pauses`, `1 token reset after a kill`,
/// `2 stale holders with no fault behind them`.
fn kind_name(cause: &str, fault: &str, count: usize) -> String {
    let many = count != 1;
    let cause = if many { format!("{count} {cause}s") } else { format!("1 {cause}") };
    match fault {
        "no fault" if many => format!("{cause} with no fault behind them"),
        "no fault" => format!("{cause} with no fault behind it"),
        fault if many => format!("{cause} after {}", fault_plural(fault)),
        fault => format!("{cause} after a {fault}"),
    }
}

fn fault_plural(fault: &str) -> String {
    match fault {
        "pause" => "pauses".to_string(),
        "slow-net" | "slow-client" | "loss" | "clock" | "skew" | "conn-kill" | "client-kill" => {
            format!("{fault} faults")
        }
        fault => format!("{fault}s"),
    }
}

/// `finding 4`, `findings 1, 4 and 11`, `findings 1–9, 12 …` (at most a
/// line's worth).
fn finding_ids(ids: &[u32]) -> String {
    let mut runs: Vec<String> = Vec::new();
    let mut at = 0;
    while at < ids.len() {
        let mut end = at;
        while end + 1 < ids.len() && ids[end + 1] == ids[end] + 1 {
            end += 1;
        }
        runs.push(match end - at {
            0 => ids[at].to_string(),
            1 => format!("{}, {}", ids[at], ids[end]),
            _ => format!("{}–{}", ids[at], ids[end]),
        });
        at = end + 1;
    }
    const SHOWN: usize = 12;
    let more = runs.len().saturating_sub(SHOWN);
    runs.truncate(SHOWN);
    let noun = if ids.len() == 1 { "finding" } else { "findings" };
    let mut text = format!("{noun} {}", runs.join(", "));
    if more > 0 {
        let _ = write!(text, " …");
    }
    text
}

/// One finding: what it is and how many violations it explains, the
/// cause in a sentence, the fault behind it, one violation it explains,
/// and the events that prove it.
fn finding_block(out: &mut String, finding: &Finding, options: &TextOptions<'_>) {
    let per_checker: Vec<String> = finding
        .checkers
        .iter()
        .map(|explained| format!("{} {}", explained.checker, explained.violations))
        .collect();
    let who = finding.process.map(|process| format!(", process {process}")).unwrap_or_default();
    let _ = writeln!(
        out,
        "finding {}: {} on {}{who} ({}: {})",
        finding.id,
        finding.cause.describe(),
        text(&finding.key),
        plural(finding.violations, "violation", "violations"),
        per_checker.join(", ")
    );
    let _ = writeln!(out, "  {}", clip_quoted(&finding.summary));
    match &finding.fault {
        Some(fault) => {
            let _ = writeln!(out, "  fault: {}", clip_quoted(&fault.description));
        }
        None => {
            let _ = writeln!(
                out,
                "  fault: none struck it: the lock, or the way it is used, broke by itself"
            );
        }
    }
    let example = analysis_example(finding, options);
    if let Some(example) = example {
        let _ = writeln!(out, "  e.g. {}", clip_quoted(example));
    }
    match options.events {
        Some(events) => proving_events(out, &finding.events, events),
        None => {
            let indices: Vec<String> = finding.events.iter().map(u64::to_string).collect();
            let _ = writeln!(out, "  events: {}", indices.join(", "));
        }
    }
}

/// The explanation of the finding's first violation, when it is not the
/// finding's own summary.
fn analysis_example<'a>(finding: &'a Finding, _options: &TextOptions<'_>) -> Option<&'a str> {
    finding.example.as_deref().filter(|example| *example != finding.summary)
}

/// One violation in at most about 12 lines: the paragraph, who and when, the
/// proving events (listed when the events are at hand), and the timeline.
fn violation_block(out: &mut String, violation: &Violation, options: &TextOptions<'_>) {
    let _ = writeln!(out, "  - {}", clip_quoted(&violation.explanation));
    if let Some(line) = who_and_when(violation) {
        let _ = writeln!(out, "    {line}");
    }
    let indices: Vec<String> = violation.events.iter().map(u64::to_string).collect();
    let _ = writeln!(out, "    events: {}", indices.join(", "));
    if let Some(events) = options.events {
        proving_events(out, &violation.events, events);
    }
    if let Some(path) = options.html_report {
        let _ = writeln!(out, "    timeline: {path}");
    }
}

/// `clients 1 and 2, window t=6.150 s to t=6.500 s (350.0 ms)`: the two
/// facts a reader looks for first, whatever the checker's paragraph says;
/// `None` when the violation has neither.
pub(crate) fn who_and_when(violation: &Violation) -> Option<String> {
    let mut parts = Vec::new();
    if !violation.processes.is_empty() {
        parts.push(clients(&violation.processes));
    }
    if let Some(window) = violation.window {
        parts.push(format!(
            "window t={} to t={} ({})",
            format_time(window.start_ns),
            format_time(window.end_ns),
            format_seconds(window.duration_ns())
        ));
    }
    (!parts.is_empty()).then(|| parts.join(", "))
}

/// `clients 1 and 2`, `clients 1, 2 and 3`, `client 4`: each client
/// once, in the order the violation names them.
fn clients(processes: &[i64]) -> String {
    let mut names: Vec<String> = Vec::with_capacity(processes.len());
    for process in processes.iter().map(i64::to_string) {
        if !names.contains(&process) {
            names.push(process);
        }
    }
    match names.split_last() {
        None => "no clients".to_string(),
        Some((only, [])) => format!("client {only}"),
        Some((last, rest)) => format!("clients {} and {last}", rest.join(", ")),
    }
}

/// The first few proving events, one line each; the rest counted.
fn proving_events(out: &mut String, indices: &[u64], events: &[Event]) {
    let found: Vec<&Event> = indices.iter().filter_map(|&index| event_at(events, index)).collect();
    for event in found.iter().take(EVENTS_LISTED_MAX) {
        let _ = writeln!(out, "      {}", event_line(event));
    }
    let more = found.len().saturating_sub(EVENTS_LISTED_MAX) as u64;
    let missing = (indices.len() - found.len()) as u64;
    let mut rest = Vec::new();
    if more > 0 {
        rest.push(plural(more, "more event", "more events"));
    }
    if missing > 0 {
        rest.push(format!("{} not among the events given", plural(missing, "event", "events")));
    }
    if !rest.is_empty() {
        let _ = writeln!(out, "      … {}", rest.join(", "));
    }
}

/// The event with this index: at its position when indices run from 0
/// without gaps (the usual case), else by binary search (indices ascend).
fn event_at(events: &[Event], index: u64) -> Option<&Event> {
    let direct = usize::try_from(index).ok().and_then(|position| events.get(position));
    match direct {
        Some(event) if event.index == index => Some(event),
        _ => events
            .binary_search_by_key(&index, |event| event.index)
            .ok()
            .map(|position| &events[position]),
    }
}

/// `#8 t=6.150 s  2 ok acquire "compaction" {"fence":1051}`.
fn event_line(event: &Event) -> String {
    let mut line = format!(
        "#{} t={}  {} {} {}",
        event.index,
        format_time(event.time_ns),
        event.process,
        event.event_type.as_str(),
        display(&event.f)
    );
    if let Some(key) = &event.key {
        let _ = write!(line, " {}", text(key));
    }
    if let Some(value) = &event.value {
        let one_line = value.get().replace(['\n', '\r'], " ");
        let _ = write!(line, " {}", shorten(&one_line, VALUE_CHARS_MAX));
    }
    if let Some(error) = &event.error {
        let _ = write!(line, " error={}", text(error));
    }
    line
}

/// The text cut to at most `max_chars` characters, with `…` when cut.
fn shorten(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_processes(clients: u64) -> Analysis {
        Analysis {
            verdict: Verdict::Valid,
            summary: lockcheck_checker::Summary {
                events: 24,
                ops: 11,
                lock_keys: 1,
                resource_keys: 1,
                clients,
                nemesis_events: 0,
                start_ns: 500_000_000,
                end_ns: 10_002_000_000,
            },
            results: Vec::new(),
            findings: Vec::new(),
            warnings: Vec::new(),
            coverage: lockcheck_checker::Coverage::none(),
        }
    }

    #[test]
    fn the_summary_says_processes_and_what_more_of_them_than_clients_means() {
        assert_eq!(
            summary_line(&with_processes(102)),
            "24 events, 11 operations on 1 lock and 1 resource by 102 processes (a client \
             whose operation timed out or crashed goes on as a new process), t=0.500 s to \
             t=10.002 s (9.502 s)"
        );
        assert_eq!(
            summary_line(&with_processes(1)),
            "24 events, 11 operations on 1 lock and 1 resource by 1 process, t=0.500 s to \
             t=10.002 s (9.502 s)"
        );
        assert!(!summary_line(&with_processes(5)).contains("clients"));
    }

    #[test]
    fn a_client_is_named_once() {
        assert_eq!(clients(&[1, 2, 1]), "clients 1 and 2");
        assert_eq!(clients(&[3, 3]), "client 3");
        assert_eq!(clients(&[4, 0, 7]), "clients 4, 0 and 7");
        assert_eq!(clients(&[]), "no clients");
    }

    #[test]
    fn an_event_line_quotes_its_key_operation_and_error_short() {
        let long = |c: char| c.to_string().repeat(1_000_000);
        let json = serde_json::json!({
            "index": 3, "time": 5, "process": 1, "type": "fail", "f": long('f'),
            "key": long('k'), "value": {"data": long('v')}, "error": long('e'),
        });
        let event: Event = serde_json::from_str(&json.to_string()).expect("an event");
        let line = event_line(&event);
        assert!(line.len() < 1024, "{} bytes: {}", line.len(), &line[..1024]);
        for c in ['k', 'e'] {
            let cut = format!("\"{}\"… (1000000 bytes)", c.to_string().repeat(80));
            assert!(line.contains(&cut), "{c}: {line}");
        }
        assert!(line.contains(&format!("{}… (1000000 bytes)", "f".repeat(80))), "{line}");
    }
}
