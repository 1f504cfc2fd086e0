//! The terminal report: what was checked, a verdict per checker per key, and
//! each violation in one short paragraph.

use std::fmt::Write;

use lockcheck_checker::{format_seconds, format_time, Analysis, CheckResult, Verdict};

use crate::Analyzed;

/// How much the text report shows.
#[derive(Debug, Clone, Copy)]
pub struct TextOptions {
    /// Keys listed one per line when a checker has at most this many; above
    /// it, only the keys that are not valid are listed.
    pub max_keys_listed: usize,
    /// Violations shown per checker; the rest are counted.
    pub max_violations_shown: usize,
}

impl Default for TextOptions {
    fn default() -> Self {
        TextOptions { max_keys_listed: 20, max_violations_shown: 5 }
    }
}

/// Renders one history's analysis.
pub fn render_text(analyzed: &Analyzed<'_>, options: &TextOptions) -> String {
    let mut out = String::new();
    let analysis = analyzed.analysis;
    let _ = writeln!(out, "{}", analyzed.source);
    summary(&mut out, analysis);
    for warning in &analysis.warnings {
        let _ = writeln!(out, "  warning: {warning}");
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
    out
}

fn shout(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Valid => "valid",
        Verdict::Invalid => "INVALID",
        Verdict::Unknown => "UNKNOWN",
    }
}

fn plural(count: u64, one: &str, many: &str) -> String {
    format!("{count} {}", if count == 1 { one } else { many })
}

fn summary(out: &mut String, analysis: &Analysis) {
    let s = &analysis.summary;
    let _ = writeln!(
        out,
        "  {}, {} on {} and {} by {}, t={} to t={} ({}){}",
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
    );
}

fn checker(out: &mut String, result: &CheckResult, options: &TextOptions) {
    let Some(verdict) = result.verdict else {
        let reason = result.reason.as_deref().unwrap_or("does not apply");
        let _ = writeln!(out, "{:<20} n/a      {reason}", result.checker);
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
        let _ = writeln!(out, "  {reason}");
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
            "  {:?}: {} ({}{count})",
            key.key,
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
        let _ = writeln!(out, "  unknown on {}: {reason}", plural(count, "key", "keys"));
    }
    if bad > options.max_keys_listed as u64 {
        let _ = writeln!(
            out,
            "  … and {} more keys that are not valid",
            bad - options.max_keys_listed as u64
        );
    }
    for violation in result.violations.iter().take(options.max_violations_shown) {
        let events: Vec<String> = violation.events.iter().map(u64::to_string).collect();
        let _ = writeln!(out, "  - {}", violation.explanation);
        let _ = writeln!(out, "    events: {}", events.join(", "));
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
        let _ = writeln!(out, "  note: {note}");
    }
}
