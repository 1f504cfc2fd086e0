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
    format_seconds, format_time, Analysis, CheckResult, Event, Verdict, Violation,
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
        checker(&mut out, result, options);
    }
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
    out
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

fn summary(out: &mut String, analysis: &Analysis) {
    let _ = writeln!(out, "  {}", summary_line(analysis));
}

/// What was checked, in one line: `24 events, 11 operations on 1 lock and 1
/// resource by 3 clients, t=0.500 s to t=10.002 s (9.502 s)`.
pub(crate) fn summary_line(analysis: &Analysis) -> String {
    let s = &analysis.summary;
    format!(
        "{}, {} on {} and {} by {}, t={} to t={} ({}){}",
        plural(s.events, "event", "events"),
        plural(s.ops, "operation", "operations"),
        plural(s.lock_keys, "lock", "locks"),
        plural(s.resource_keys, "resource", "resources"),
        plural(s.clients, "client", "clients"),
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

fn checker(out: &mut String, result: &CheckResult, options: &TextOptions<'_>) {
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
