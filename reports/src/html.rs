//! The self-contained HTML report: one file that opens from `file://` with no
//! network, so a violation can be seen at a glance and the file attached to a
//! bug report.
//!
//! The page has a summary of the checkers' verdicts, the violations in words,
//! a timeline (one lane per logical client: what each believed it held, its
//! lease, its operations and writes, the nemesis' faults, the selected
//! violation and its linearizability evidence) and latency and throughput
//! charts per operation type. Rust lays out what needs the checker's own
//! definitions (operations paired, beliefs per docs/guide.md#beliefs, leases, lanes,
//! fault windows) and embeds it with the events as compact JSON; the inline
//! script draws only what is in view, so the file stays linear in the history
//! and the page usable at 100k events.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;

use lockcheck_checker::{
    format_seconds, format_time, Analysis, Belief, BeliefEnd, Beliefs, CheckResult, Event,
    EventType, Function, History, HistoryBuilder, Op, Outcome, Process, Verdict, Violation,
};

/// The page's style sheet, kept in its own file to be read as CSS.
const STYLE: &str = include_str!("html/report.css");
/// The page's script: draws the timeline and charts from the embedded data.
const SCRIPT: &str = include_str!("html/report.js");

/// Keys listed per checker in the summary before the rest are counted.
const MAX_KEYS_LISTED: usize = 20;

/// What the HTML report shows: one history and its analysis.
#[derive(Debug, Clone, Copy)]
pub struct HtmlInput<'a> {
    /// What the page is about, e.g. `sim-redis seed 1` or the history's path.
    pub title: &'a str,
    /// The history's events, in file order.
    pub events: &'a [Event],
    /// What the checkers concluded about these events.
    pub analysis: &'a Analysis,
    /// The command that reruns the test, shown so a reader can reproduce it.
    pub command: Option<&'a str>,
}

/// Renders the whole page. Pure: the caller decides where it is written.
/// A history the checker's builder rejects still renders (summary, faults and
/// the reason), without lanes.
pub fn render_html(input: &HtmlInput<'_>) -> String {
    let data = page_data(input);
    let mut out = String::with_capacity(data.len() + STYLE.len() + SCRIPT.len() + 16_384);
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    out.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    let _ = writeln!(out, "<title>lockcheck: {}</title>", escape_html(input.title));
    let _ = writeln!(out, "<style>\n{STYLE}</style>\n</head>\n<body>");
    // Installed before anything else runs, so that even a script that fails
    // to parse leaves its error where a test (or a person) can read it.
    out.push_str(
        "<script>window.onerror=function(m,s,l,c){var b=document.body;var e=String(m)+' at '+l+':'+c;\
         b.dataset.errors=b.dataset.errors?b.dataset.errors+'\\n'+e:e;return false;};</script>\n",
    );
    header(&mut out, input);
    summary_section(&mut out, input.analysis);
    out.push_str(TIMELINE_SECTION);
    findings_section(&mut out, input.analysis);
    violations_section(&mut out, input.analysis);
    out.push_str(CHARTS_SECTION);
    out.push_str("<div id=\"tooltip\" class=\"tooltip\" hidden></div>\n");
    out.push_str("<script type=\"application/json\" id=\"lockcheck-data\">");
    out.push_str(&data);
    out.push_str("</script>\n<script>\n");
    out.push_str(SCRIPT);
    out.push_str("</script>\n</body>\n</html>\n");
    out
}

const TIMELINE_SECTION: &str = r#"<section id="timeline-section">
<h2>Timeline</h2>
<div class="toolbar">
<button type="button" data-zoom="in" title="zoom in">+</button>
<button type="button" data-zoom="out" title="zoom out">&minus;</button>
<button type="button" data-zoom="left" title="pan left">&larr;</button>
<button type="button" data-zoom="right" title="pan right">&rarr;</button>
<button type="button" data-zoom="reset" title="show the whole history">whole history</button>
<label>lock <select id="key-filter"><option value="-1">all</option></select></label>
<label><input type="checkbox" id="show-leases" checked> leases</label>
<label><input type="checkbox" id="show-ops" checked> operations</label>
<span id="view-range" class="muted"></span>
</div>
<p class="muted hint">Wheel: zoom at the cursor (shift+wheel pans). Drag across the timeline: zoom to that range. Hover: details. Click a violation (in the list below or a red mark): focus on it.</p>
<div id="history-error" class="warning" hidden></div>
<div id="timeline" class="plot"></div>
<div id="legend" class="legend"></div>
<div id="selection" class="selection" hidden></div>
</section>
"#;

const CHARTS_SECTION: &str = r#"<section id="charts-section">
<h2>Latency and throughput</h2>
<p class="muted hint">Per operation type, over the timeline's range, with fault windows shaded. Latency: one point per operation (green ok, red fail, orange info) or, when there are many, per time bucket the median line and the 5th to 95th percentile band, log scale. Throughput: operations invoked per second per bucket, stacked by how they ended (ok / fail / info).</p>
<div id="charts" class="plot"></div>
</section>
"#;

fn header(out: &mut String, input: &HtmlInput<'_>) {
    let analysis = input.analysis;
    let verdict = analysis.verdict.as_str();
    let _ = writeln!(
        out,
        "<header><h1>{} <span class=\"verdict verdict-{verdict}\">{verdict}</span></h1>",
        escape_html(input.title)
    );
    let s = &analysis.summary;
    let _ = writeln!(
        out,
        "<p>{} events, {} operations on {} locks and {} resources by {} clients, \
         t={} to t={} ({}), {} nemesis events.</p>",
        s.events,
        s.ops,
        s.lock_keys,
        s.resource_keys,
        s.clients,
        format_time(s.start_ns),
        format_time(s.end_ns),
        format_seconds(s.end_ns.saturating_sub(s.start_ns)),
        s.nemesis_events
    );
    if let Some(command) = input.command {
        let _ = writeln!(
            out,
            "<p class=\"command\">rerun: <code id=\"command\">{}</code> \
             <button type=\"button\" id=\"copy-command\">copy</button></p>",
            escape_html(command)
        );
    }
    for warning in &analysis.warnings {
        let _ = writeln!(out, "<p class=\"warning\">warning: {}</p>", escape_html(warning));
    }
    out.push_str("</header>\n");
}

fn summary_section(out: &mut String, analysis: &Analysis) {
    out.push_str("<section id=\"summary\"><h2>Checkers</h2>\n<table class=\"summary\">\n");
    out.push_str(
        "<thead><tr><th>checker</th><th>verdict</th><th>keys</th><th>violations</th>\
         <th>details</th></tr></thead>\n<tbody>\n",
    );
    for result in &analysis.results {
        checker_row(out, result);
    }
    out.push_str("</tbody></table>\n");
    coverage(out, analysis);
    out.push_str("</section>\n");
}

/// What the run's faults reached: the line the text report prints, and
/// each fault with what it reached or why it reached nothing.
fn coverage(out: &mut String, analysis: &Analysis) {
    let Some(line) = crate::text::coverage_line(analysis) else { return };
    let _ =
        write!(out, "<details class=\"coverage\"><summary>{}</summary><ul>", escape_html(&line));
    for fault in &analysis.coverage.faults {
        let _ = write!(
            out,
            "<li>{} of {} at t={}: {}{}</li>",
            escape_html(&fault.fault),
            escape_html(&fault.targets.join(", ")),
            format_time(fault.start_ns),
            if fault.reached { "reached " } else { "" },
            escape_html(&fault.description)
        );
    }
    out.push_str("</ul></details>\n");
}

fn checker_row(out: &mut String, result: &CheckResult) {
    let (verdict, class) = match result.verdict {
        Some(verdict) => (verdict.as_str(), verdict.as_str()),
        None => ("n/a", "na"),
    };
    let bad = result.keys.iter().filter(|key| key.verdict != Verdict::Valid).count();
    let _ = write!(
        out,
        "<tr><td>{}</td><td><span class=\"verdict verdict-{class}\">{verdict}</span></td>\
         <td>{}{}</td><td>{}</td><td>",
        escape_html(result.checker),
        result.keys.len(),
        if bad > 0 { format!(" ({bad} not valid)") } else { String::new() },
        result.violation_count,
    );
    if let Some(reason) = &result.reason {
        let _ = write!(out, "<div>{}</div>", escape_html(reason));
    }
    for note in &result.notes {
        let _ = write!(out, "<div class=\"muted\">note: {}</div>", escape_html(note));
    }
    key_table(out, result, bad);
    out.push_str("</td></tr>\n");
}

/// The per-key verdicts, as the text report lists them: every key when there
/// are few, else the keys that are not valid, then a count of the rest.
fn key_table(out: &mut String, result: &CheckResult, bad: usize) {
    if result.keys.is_empty() {
        return;
    }
    let few = result.keys.len() <= MAX_KEYS_LISTED;
    let listed: Vec<String> = result
        .keys
        .iter()
        .filter(|key| few || key.verdict != Verdict::Valid)
        .take(MAX_KEYS_LISTED)
        .map(|key| {
            let violations = match key.violations {
                0 => String::new(),
                1 => ", 1 violation".to_string(),
                count => format!(", {count} violations"),
            };
            let reason = key.reason.as_deref().map(|reason| format!(": {reason}")).unwrap_or_default();
            format!(
                "<span class=\"key\"><code>{}</code> <span class=\"verdict-{v}\">{v}</span> ({} ops{violations}){}</span>",
                escape_html(&key.key),
                key.ops,
                escape_html(&reason),
                v = key.verdict.as_str(),
            )
        })
        .collect();
    let _ = write!(out, "<div class=\"keys\">{}", listed.join(" "));
    let unlisted = result.keys.len() - listed.len();
    if unlisted > 0 {
        let which = if few || bad > MAX_KEYS_LISTED { "more keys" } else { "more keys, all valid" };
        let _ = write!(out, " <span class=\"muted\">… and {unlisted} {which}</span>");
    }
    out.push_str("</div>");
}

/// The findings: one item each, its cause, the fault behind it, and the
/// violations it explains (the list below names each one's finding).
fn findings_section(out: &mut String, analysis: &Analysis) {
    if analysis.findings.is_empty() {
        return;
    }
    out.push_str("<section id=\"findings\"><h2>Findings</h2>\n<ol class=\"findings\">\n");
    for finding in &analysis.findings {
        let fault = match &finding.fault {
            Some(fault) => format!("fault: {}", escape_html(&fault.description)),
            None => "no fault behind it: the lock, or its use, broke by itself".to_string(),
        };
        let explained: Vec<String> = finding
            .checkers
            .iter()
            .map(|explained| format!("{} {}", escape_html(explained.checker), explained.violations))
            .collect();
        let _ = writeln!(
            out,
            "<li class=\"finding\" value=\"{id}\" id=\"finding-{id}\"><span class=\"tag kind\">{}</span> \
             <code>{}</code> ({})<div>{}</div><div class=\"muted\">{fault}</div></li>",
            escape_html(finding.cause.describe()),
            escape_html(&finding.key),
            explained.join(", "),
            escape_html(&finding.summary),
            id = finding.id,
        );
    }
    out.push_str("</ol></section>\n");
}

fn violations_section(out: &mut String, analysis: &Analysis) {
    out.push_str("<section id=\"violations\"><h2>Violations</h2>\n");
    let shown: usize = analysis.results.iter().map(|result| result.violations.len()).sum();
    if shown == 0 {
        out.push_str("<p>None found.</p></section>\n");
        return;
    }
    out.push_str("<ol class=\"violations\">\n");
    let mut position = 0;
    for result in &analysis.results {
        for violation in &result.violations {
            violation_item(out, position, result.checker, violation);
            position += 1;
        }
        let hidden = result.violation_count.saturating_sub(result.violations.len() as u64);
        if hidden > 0 {
            let _ = writeln!(
                out,
                "<li class=\"muted\">… {hidden} more {} violations not kept (all are counted; \
                 raise --max-violations to keep more)</li>",
                escape_html(result.checker)
            );
        }
    }
    out.push_str("</ol></section>\n");
}

fn violation_item(out: &mut String, position: usize, checker: &str, violation: &Violation) {
    let kind = serde_json::to_value(violation.kind)
        .ok()
        .and_then(|value| value.as_str().map(str::to_string))
        .unwrap_or_default();
    let window = match violation.window {
        Some(window) => format!(
            " t={} to t={} ({})",
            format_time(window.start_ns),
            format_time(window.end_ns),
            format_seconds(window.duration_ns())
        ),
        None => String::new(),
    };
    let events: Vec<String> = violation.events.iter().map(u64::to_string).collect();
    let finding = violation
        .finding
        .map(|id| format!(" <a class=\"tag\" href=\"#finding-{id}\">finding {id}</a>"))
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "<li class=\"violation\" data-violation=\"{position}\" tabindex=\"0\">\
         <span class=\"tag\">{}</span> <span class=\"tag kind\">{}</span>{finding} <code>{}</code>{}\
         <div>{}</div><div class=\"muted\">events: {}</div></li>",
        escape_html(checker),
        escape_html(&kind),
        escape_html(&violation.key),
        escape_html(&window),
        escape_html(&violation.explanation),
        events.join(", "),
    );
}

/// Escapes text for HTML element content and attribute values.
pub fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Makes JSON safe inside `<script type="application/json">`: the HTML parser
/// ends the element at `</script` whatever the type, and `<!--` changes how
/// it scans. In valid JSON a `<` can only stand inside a string, where
/// `\u003c` means the same, so escaping every one is exact.
fn script_safe(json: &str) -> String {
    json.replace('<', "\\u003c")
}

/// Interns strings (keys, function names, errors) so each event refers to
/// them by number.
#[derive(Debug, Default)]
struct Strings {
    ids: HashMap<String, usize>,
    list: Vec<String>,
}

impl Strings {
    fn id(&mut self, text: &str) -> usize {
        if let Some(&id) = self.ids.get(text) {
            return id;
        }
        self.list.push(text.to_string());
        self.ids.insert(text.to_string(), self.list.len() - 1);
        self.list.len() - 1
    }
}

fn json_string(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_else(|_| "\"\"".to_string())
}

fn json_strings(list: &[String]) -> String {
    let items: Vec<String> = list.iter().map(|text| json_string(text)).collect();
    format!("[{}]", items.join(","))
}

fn opt(value: Option<u64>) -> String {
    value.map_or_else(|| "null".to_string(), |value| value.to_string())
}

/// The JSON the script draws from. Arrays rather than objects per event and
/// per operation keep it to a fraction of the JSONL's size.
fn page_data(input: &HtmlInput<'_>) -> String {
    let events = input.events;
    let (mut keys, mut functions, mut errors) =
        (Strings::default(), Strings::default(), Strings::default());
    let mut out = String::with_capacity(events.len() * 64 + 4096);
    out.push_str("{\"events\":[");
    for (position, event) in events.iter().enumerate() {
        if position > 0 {
            out.push(',');
        }
        event_json(&mut out, event, &mut keys, &mut functions, &mut errors);
    }
    out.push(']');
    let start_ns = events.first().map_or(0, |event| event.time_ns);
    let end_ns = events.last().map_or(0, |event| event.time_ns);
    let _ = write!(out, ",\"start\":{start_ns},\"end\":{end_ns}");
    let lanes = Lanes::assign(events);
    lanes.write_json(&mut out);
    match build_history(events) {
        Ok(history) => {
            let positions = Positions::new(events);
            ops_json(&mut out, &history, &positions);
            beliefs_json(&mut out, &history, &mut keys);
            out.push_str(",\"historyError\":null");
        }
        Err(error) => {
            let _ =
                write!(out, ",\"ops\":[],\"beliefs\":[],\"historyError\":{}", json_string(&error));
        }
    }
    nemesis_json(&mut out, events);
    violations_json(&mut out, input.analysis, &mut keys);
    let _ = write!(
        out,
        ",\"keys\":{},\"functions\":{},\"errors\":{}}}",
        json_strings(&keys.list),
        json_strings(&functions.list),
        json_strings(&errors.list)
    );
    script_safe(&out)
}

/// One event: `[index, time, process (null: nemesis), type (0 invoke, 1 ok,
/// 2 fail, 3 info), function, key (-1: none), value, error (-1: none)]`, then
/// the fields this version does not know, when there are any.
fn event_json(
    out: &mut String,
    event: &Event,
    keys: &mut Strings,
    functions: &mut Strings,
    errors: &mut Strings,
) {
    let process = match event.process {
        Process::Client(id) => id.to_string(),
        Process::Nemesis => "null".to_string(),
    };
    let event_type = match event.event_type {
        EventType::Invoke => 0,
        EventType::Ok => 1,
        EventType::Fail => 2,
        EventType::Info => 3,
    };
    let key = event.key.as_deref().map_or(-1, |key| keys.id(key) as i64);
    let error = event.error.as_deref().map_or(-1, |error| errors.id(error) as i64);
    let value = event.value.as_deref().map_or("null", |value| value.get());
    let _ = write!(
        out,
        "[{},{},{process},{event_type},{},{key},{value},{error}",
        event.index,
        event.time_ns,
        functions.id(event.f.as_str()),
    );
    if let Some(extra) = event.extra.as_deref().filter(|extra| !extra.is_empty()) {
        out.push(',');
        out.push_str(&serde_json::to_string(extra).unwrap_or_else(|_| "{}".to_string()));
    }
    out.push(']');
}

fn build_history(events: &[Event]) -> Result<History, String> {
    let mut builder = HistoryBuilder::with_capacity(events.len());
    for event in events {
        builder.push(event).map_err(|error| error.to_string())?;
    }
    Ok(builder.finish())
}

/// Where each event index sits in the event list.
#[derive(Debug)]
struct Positions {
    indices: Vec<u64>,
}

impl Positions {
    fn new(events: &[Event]) -> Self {
        Positions { indices: events.iter().map(|event| event.index).collect() }
    }

    /// The builder accepted the history, so indices ascend and every index
    /// it hands back is found.
    fn of(&self, index: u64) -> i64 {
        self.indices.binary_search(&index).map_or(-1, |position| position as i64)
    }
}

/// Operations as `[invoke position, completion position (-1: never completed)]`,
/// in invoke order; beliefs refer to them by position in this list.
fn ops_json(out: &mut String, history: &History, positions: &Positions) {
    out.push_str(",\"ops\":[");
    for (id, op) in history.ops().iter().enumerate() {
        if id > 0 {
            out.push(',');
        }
        let completion = op.completion.map_or(-1, |moment| positions.of(moment.index));
        let _ = write!(out, "[{},{completion}]", positions.of(op.invoke.index));
    }
    out.push(']');
}

/// A lease as the test's clock saw it: the server granted (or renewed) it at
/// some moment between the request's invoke and its `ok`, and keeps it `ttl`
/// from then by its own clock. So, if the server's clock runs at the test
/// clock's rate, the lease lasted at least until invoke + ttl (`held_until_ns`)
/// and at most until ok + ttl (`latest_end_ns`). An ok release ends it between
/// its invoke and its ok; a renewal that ended in info counts as if it took
/// effect at its completion.
#[derive(Debug, Clone, Copy)]
struct Lease {
    held_until_ns: u64,
    latest_end_ns: u64,
}

/// The renewals of each process's lock, in invoke order, so that each
/// belief finds its own without a scan of the whole history.
fn renewals_by_holder(history: &History) -> HashMap<(i64, u32), Vec<&Op>> {
    let mut renewals: HashMap<(i64, u32), Vec<&Op>> = HashMap::new();
    for op in history.ops().iter().filter(|op| op.f == Function::Renew) {
        renewals.entry((op.process, op.key)).or_default().push(op);
    }
    renewals
}

fn lease(history: &History, belief: &Belief, renewals: &[&Op]) -> Option<Lease> {
    let grant = history.op(belief.grant);
    let ttl_ns = grant.ttl_ms?.saturating_mul(1_000_000);
    let mut lease = Lease {
        held_until_ns: grant.invoke.time_ns.saturating_add(ttl_ns),
        latest_end_ns: history.completion_or_end(grant).time_ns.saturating_add(ttl_ns),
    };
    let first = renewals.partition_point(|op| op.invoke.index <= belief.start.index);
    let during = renewals[first..].iter().take_while(|op| op.invoke.index < belief.end.index);
    for renewal in during {
        let ttl_ns = renewal.ttl_ms.map_or(ttl_ns, |ttl_ms| ttl_ms.saturating_mul(1_000_000));
        let completed = history.completion_or_end(renewal).time_ns.saturating_add(ttl_ns);
        match renewal.outcome {
            Outcome::Ok => {
                lease.held_until_ns =
                    lease.held_until_ns.max(renewal.invoke.time_ns.saturating_add(ttl_ns));
                lease.latest_end_ns = lease.latest_end_ns.max(completed);
            }
            Outcome::Info => lease.latest_end_ns = lease.latest_end_ns.max(completed),
            Outcome::Fail => {}
        }
    }
    if let BeliefEnd::Released(release) = belief.end_reason {
        let release = history.op(release);
        if let (Outcome::Ok, Some(done)) = (release.outcome, release.completion) {
            lease.held_until_ns = lease.held_until_ns.min(release.invoke.time_ns);
            lease.latest_end_ns = lease.latest_end_ns.min(done.time_ns);
        }
    }
    Some(lease)
}

/// Beliefs as `[key, process, grant op, start time, start index, end time,
/// end index, end (0 released, 1 info, 2 end of history), lease held until,
/// lease latest end]`; the lease fields are null when the grant asked no TTL.
fn beliefs_json(out: &mut String, history: &History, keys: &mut Strings) {
    out.push_str(",\"beliefs\":[");
    let renewals = renewals_by_holder(history);
    let beliefs = Beliefs::compute(history);
    let mut first = true;
    for key in 0..history.key_count() as u32 {
        let key_id = keys.id(history.key_name(key));
        for belief in beliefs.of_key(key) {
            let end_reason = match belief.end_reason {
                BeliefEnd::Released(_) => 0,
                BeliefEnd::Crashed(_) => 1,
                BeliefEnd::EndOfHistory => 2,
            };
            let own = renewals.get(&(belief.process, key)).map_or(&[][..], Vec::as_slice);
            let lease = lease(history, belief, own);
            if !first {
                out.push(',');
            }
            first = false;
            let _ = write!(
                out,
                "[{key_id},{},{},{},{},{},{},{end_reason},{},{}]",
                belief.process,
                belief.grant,
                belief.start.time_ns,
                belief.start.index,
                belief.end.time_ns,
                belief.end.index,
                opt(lease.map(|lease| lease.held_until_ns)),
                opt(lease.map(|lease| lease.latest_end_ns)),
            );
        }
    }
    out.push(']');
}

/// Which lane (logical client) each process is drawn in.
///
/// A process whose operation ended in `info` never acts again; its client
/// goes on under a new process id. So a new process takes over the lane of
/// a process that has crashed: first one whose id it continues in Jepsen's
/// numbering (new = old + n × the number of processes that started before
/// the first `info`), else the lane freed longest ago, else a new lane.
/// Any choice is safe to draw (a crashed process has no more events); the
/// numbering only makes the lane match the logical client.
#[derive(Debug, Default)]
struct Lanes {
    /// The processes of each lane, in the order they took it over.
    lanes: Vec<Vec<i64>>,
    of_process: BTreeMap<i64, usize>,
}

impl Lanes {
    fn assign(events: &[Event]) -> Lanes {
        let first_info = events
            .iter()
            .position(|event| {
                event.event_type == EventType::Info && matches!(event.process, Process::Client(_))
            })
            .unwrap_or(events.len());
        let mut starters: Vec<i64> = events[..first_info]
            .iter()
            .filter_map(|event| match event.process {
                Process::Client(id) => Some(id),
                Process::Nemesis => None,
            })
            .collect();
        starters.sort_unstable();
        starters.dedup();
        let stride = starters.len().max(1) as i64;
        let mut lanes = Lanes::default();
        // Lanes whose current process has crashed, oldest first.
        let mut free: Vec<usize> = Vec::new();
        for event in events {
            let Process::Client(process) = event.process else { continue };
            let lane = match lanes.of_process.get(&process) {
                Some(&lane) => lane,
                None => lanes.take_lane(process, stride, &mut free),
            };
            if event.event_type == EventType::Info && !free.contains(&lane) {
                free.push(lane);
            }
        }
        lanes
    }

    fn take_lane(&mut self, process: i64, stride: i64, free: &mut Vec<usize>) -> usize {
        let successor = free.iter().position(|&lane| {
            let previous = *self.lanes[lane].last().unwrap_or(&process);
            process > previous && (process - previous) % stride == 0
        });
        let lane = match successor.or((!free.is_empty()).then_some(0)) {
            Some(at) => {
                let lane = free.remove(at);
                self.lanes[lane].push(process);
                lane
            }
            None => {
                self.lanes.push(vec![process]);
                self.lanes.len() - 1
            }
        };
        self.of_process.insert(process, lane);
        lane
    }

    fn write_json(&self, out: &mut String) {
        let lanes: Vec<String> = self
            .lanes
            .iter()
            .map(|processes| {
                let ids: Vec<String> = processes.iter().map(i64::to_string).collect();
                format!("[{}]", ids.join(","))
            })
            .collect();
        let _ = write!(out, ",\"lanes\":[{}]", lanes.join(","));
    }
}

/// Fault windows: `[start position, stop position (-1: never stopped)]` in the
/// event list, a start paired with the next stop of the same fault and
/// targets (else of the same fault). Other nemesis events, and a stop with no
/// start, are instants: both positions the same.
fn nemesis_json(out: &mut String, events: &[Event]) {
    let mut open: Vec<(usize, Option<String>, Option<Vec<String>>)> = Vec::new();
    let mut windows: Vec<(usize, i64)> = Vec::new();
    for (position, event) in events.iter().enumerate() {
        if event.process != Process::Nemesis {
            continue;
        }
        let fields = event.value_fields().unwrap_or_default();
        match event.f {
            Function::Start => open.push((position, fields.fault, fields.targets)),
            Function::Stop => {
                let same = |(_, fault, targets): &&(usize, Option<String>, Option<Vec<String>>)| {
                    *fault == fields.fault && *targets == fields.targets
                };
                let at = open
                    .iter()
                    .rposition(|window| same(&window))
                    .or_else(|| open.iter().rposition(|(_, fault, _)| *fault == fields.fault));
                match at {
                    Some(at) => windows.push((open.remove(at).0, position as i64)),
                    None => windows.push((position, position as i64)),
                }
            }
            _ => windows.push((position, position as i64)),
        }
    }
    windows.extend(open.into_iter().map(|(start, _, _)| (start, -1)));
    windows.sort_unstable();
    let items: Vec<String> =
        windows.iter().map(|(start, stop)| format!("[{start},{stop}]")).collect();
    let _ = write!(out, ",\"nemesis\":[{}]", items.join(","));
}

/// Every kept violation, in the order the page lists them, with its checker
/// and its key's number in the key table.
fn violations_json(out: &mut String, analysis: &Analysis, keys: &mut Strings) {
    out.push_str(",\"violations\":[");
    let mut first = true;
    for result in &analysis.results {
        for violation in &result.violations {
            if !first {
                out.push(',');
            }
            first = false;
            let body = serde_json::to_string(violation).unwrap_or_else(|_| "null".to_string());
            let _ = write!(
                out,
                "{{\"checker\":{},\"keyId\":{},\"violation\":{body}}}",
                json_string(result.checker),
                keys.id(&violation.key)
            );
        }
    }
    out.push(']');
}
