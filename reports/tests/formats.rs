//! The CI formats (JUnit XML, Markdown) and the one-screen terminal report,
//! rendered from analyses of small hand-made histories.

use lockcheck_checker::{
    analyze, default_checkers, Analysis, CheckOptions, Event, HistoryBuilder, Verdict,
};
use lockcheck_reports::{render_junit, render_markdown, render_text, Analyzed, TextOptions};
use serde_json::{json, Value};

type Line<'a> = (u64, i64, &'a str, &'a str, &'a str, Value);

/// Events from `(time_ms, process, type, f, key, value)`, indexed in order.
fn events(lines: &[Line<'_>]) -> Vec<Event> {
    lines
        .iter()
        .enumerate()
        .map(|(index, (time_ms, process, event_type, f, key, value))| {
            let json = json!({
                "index": index, "time": time_ms * 1_000_000, "process": process,
                "type": event_type, "f": f, "key": key, "value": value,
            });
            serde_json::from_str(&json.to_string()).unwrap()
        })
        .collect()
}

fn analysis_of(events: &[Event]) -> Analysis {
    let mut builder = HistoryBuilder::new();
    for event in events {
        builder.push(event).unwrap();
    }
    analyze(&builder.finish(), &default_checkers(), &CheckOptions::default())
}

/// Two clients take turns on `report`, each writing the ledger with its token.
fn valid_history() -> Vec<Event> {
    events(&[
        (100, 1, "invoke", "acquire", "report", json!({"ttl_ms": 1000})),
        (110, 1, "ok", "acquire", "report", json!({"fence": 1})),
        (200, 1, "invoke", "write", "ledger", json!({"fence": 1, "data": "a"})),
        (210, 1, "ok", "write", "ledger", json!(null)),
        (300, 1, "invoke", "release", "report", json!(null)),
        (310, 1, "ok", "release", "report", json!(null)),
        (400, 2, "invoke", "acquire", "report", json!({"ttl_ms": 1000})),
        (410, 2, "ok", "acquire", "report", json!({"fence": 2})),
        (500, 2, "invoke", "write", "ledger", json!({"fence": 2, "data": "b"})),
        (510, 2, "ok", "write", "ledger", json!(null)),
        (600, 2, "invoke", "release", "report", json!(null)),
        (610, 2, "ok", "release", "report", json!(null)),
    ])
}

/// Client 1 stalls past its lease on `key`; client 2 is granted it at 1.5 s
/// while 1 still believes it holds it, until 1 releases at 3 s.
fn overlap_history(key: &str) -> Vec<Event> {
    events(&[
        (100, 1, "invoke", "acquire", key, json!({"ttl_ms": 1000})),
        (110, 1, "ok", "acquire", key, json!({"fence": 1})),
        (1400, 2, "invoke", "acquire", key, json!({"ttl_ms": 1000})),
        (1500, 2, "ok", "acquire", key, json!({"fence": 2})),
        (2000, 2, "invoke", "release", key, json!(null)),
        (2010, 2, "ok", "release", key, json!(null)),
        (3000, 1, "invoke", "release", key, json!(null)),
        (3010, 1, "fail", "release", key, json!(null)),
    ])
}

/// The report as `render_text` printed it before events and the timeline
/// path were added: a valid history's output must not change.
const VALID_TEXT: &str = "valid.jsonl\n  12 events, 6 operations on 1 lock and 1 resource by 2 processes (a client whose operation timed out or crashed goes on as a new process), t=0.100 s to t=0.610 s (510.0 ms)\n\nmutual-exclusion     valid    1 key\n  \"report\": valid (4 ops)\nfence-monotonicity   valid    1 key\n  \"report\": valid (2 ops)\nresource-safety      valid    1 key\n  \"ledger\": valid (2 ops)\nliveness             valid    1 key\n  \"report\": valid (2 ops)\n  note: bound: 3.000 s without a holder\ndeadlock             n/a      no client waited for a lock while holding another\nre-election          n/a      no election in this history\nlinearizability      valid    1 key\n  \"report\": valid (4 ops)\nexactly-once         n/a      no run, enqueue or charge operations\nidempotency          n/a      no charge carries an idempotency_key\nverdict: valid\n";

// ---- a minimal XML reader, enough to check the JUnit output's shape ----

#[derive(Debug)]
struct Element {
    name: String,
    attributes: Vec<(String, String)>,
    /// Character data directly inside, unescaped.
    text: String,
}

impl Element {
    fn attribute(&self, name: &str) -> &str {
        let found = self.attributes.iter().find(|(key, _)| key == name);
        &found.unwrap_or_else(|| panic!("{} has no {name}", self.name)).1
    }
}

/// Replaces the five entities and numeric references; panics on a bare `&`.
fn unescape(data: &str) -> String {
    let mut out = String::new();
    let mut rest = data;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        let end = rest[at..].find(';').expect("an entity ends with ;") + at;
        let entity = &rest[at + 1..end];
        let c = match entity {
            "amp" => '&',
            "lt" => '<',
            "gt" => '>',
            "quot" => '"',
            "apos" => '\'',
            _ => {
                let number = entity.strip_prefix('#').expect("a known entity");
                char::from_u32(number.parse().expect("a decimal reference")).unwrap()
            }
        };
        out.push(c);
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

fn parse_attributes(text: &str) -> Vec<(String, String)> {
    let mut attributes = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let (name, after) = rest.split_once("=\"").expect("name=\"value\"");
        let (value, after) = after.split_once('"').expect("a closing quote");
        assert!(!value.contains('<'), "raw < in attribute {name}: {value}");
        attributes.push((name.trim().to_string(), unescape(value)));
        rest = after.trim_start();
    }
    attributes
}

/// Checks that tags balance and data is escaped; returns every element in
/// document order.
fn parse_xml(xml: &str) -> Vec<Element> {
    let body =
        xml.strip_prefix("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n").expect("declaration");
    assert!(!body.chars().any(|c| c < ' ' && !matches!(c, '\t' | '\n' | '\r')));
    let mut elements: Vec<Element> = Vec::new();
    let mut open: Vec<(String, usize)> = Vec::new();
    let mut rest = body;
    while let Some(at) = rest.find('<') {
        let data = &rest[..at];
        assert!(!data.contains('>'), "raw > in data: {data}");
        if let Some((_, element)) = open.last() {
            elements[*element].text.push_str(&unescape(data));
        } else {
            assert!(data.trim().is_empty(), "data outside the root: {data}");
        }
        let end = rest[at..].find('>').expect("a tag ends") + at;
        let tag = &rest[at + 1..end];
        rest = &rest[end + 1..];
        if let Some(name) = tag.strip_prefix('/') {
            let (opened, _) = open.pop().expect("a closing tag has an opening one");
            assert_eq!(opened, name, "tags balance");
            continue;
        }
        let (tag, empty) = match tag.strip_suffix('/') {
            Some(tag) => (tag, true),
            None => (tag, false),
        };
        let (name, attributes) = tag.split_once(' ').unwrap_or((tag, ""));
        elements.push(Element {
            name: name.to_string(),
            attributes: parse_attributes(attributes),
            text: String::new(),
        });
        if !empty {
            open.push((name.to_string(), elements.len() - 1));
        }
    }
    assert!(open.is_empty(), "unclosed: {open:?}");
    assert!(rest.trim().is_empty());
    elements
}

fn named<'a>(elements: &'a [Element], name: &str) -> Vec<&'a Element> {
    elements.iter().filter(|element| element.name == name).collect()
}

/// What each test case should say, straight from the analysis: one per
/// checker per key, one for a checker without keys.
fn expected_counts(analysis: &Analysis) -> (usize, usize, usize, usize) {
    let (mut tests, mut failures, mut errors, mut skipped) = (0, 0, 0, 0);
    for result in &analysis.results {
        let verdicts: Vec<Option<Verdict>> = if result.verdict.is_none() || result.keys.is_empty() {
            vec![result.verdict]
        } else {
            result.keys.iter().map(|key| Some(key.verdict)).collect()
        };
        for verdict in verdicts {
            tests += 1;
            match verdict {
                None => skipped += 1,
                Some(Verdict::Invalid) => failures += 1,
                Some(Verdict::Unknown) => errors += 1,
                Some(Verdict::Valid) => {}
            }
        }
    }
    (tests, failures, errors, skipped)
}

fn counts_of(element: &Element) -> (usize, usize, usize, usize) {
    let number = |name: &str| element.attribute(name).parse::<usize>().unwrap();
    (number("tests"), number("failures"), number("errors"), number("skipped"))
}

#[test]
fn junit_has_a_case_per_checker_per_key_and_escapes_data() {
    let key = "a<&\">'b";
    let invalid = analysis_of(&overlap_history(key));
    let valid = analysis_of(&valid_history());
    assert_eq!(invalid.verdict, Verdict::Invalid);
    let xml = render_junit(&[
        Analyzed { source: "runs/stall & <pause>.jsonl", analysis: &invalid },
        Analyzed { source: "valid.jsonl", analysis: &valid },
    ]);
    assert!(!xml.contains(key), "the key is escaped:\n{xml}");
    let elements = parse_xml(&xml);
    let suites = named(&elements, "testsuite");
    assert_eq!(suites.len(), 2);
    assert_eq!(suites[0].attribute("name"), "runs/stall & <pause>.jsonl");
    assert_eq!(counts_of(suites[0]), expected_counts(&invalid));
    assert_eq!(counts_of(suites[1]), expected_counts(&valid));
    assert_eq!(counts_of(suites[1]).1, 0);
    let root = &named(&elements, "testsuites")[0];
    let (invalid_counts, valid_counts) = (expected_counts(&invalid), expected_counts(&valid));
    assert_eq!(counts_of(root).0, invalid_counts.0 + valid_counts.0);
    assert_eq!(counts_of(root).1, invalid_counts.1);

    let cases = named(&elements, "testcase");
    let names: Vec<&str> = cases.iter().map(|case| case.attribute("name")).collect();
    assert!(names.contains(&"mutual-exclusion report"), "{names:?}");
    assert!(names.contains(&"exactly-once"), "an n/a checker is one case: {names:?}");
    let mutex = format!("mutual-exclusion {key}");
    assert!(names.contains(&mutex.as_str()), "the key round-trips: {names:?}");
    assert!(cases.iter().all(|case| !case.attribute("classname").is_empty()));

    let failures = named(&elements, "failure");
    assert_eq!(failures.len(), invalid_counts.1);
    let overlap = failures.iter().find(|failure| failure.attribute("type") == "overlap").unwrap();
    let message = overlap.attribute("message");
    assert!(message.contains("processes 1 and 2"), "both clients are named: {message}");
    assert!(overlap.text.contains(&format!("{key:?}")), "{}", overlap.text);
    assert!(overlap.text.contains("clients 1 and 2, window t=1.500 s"), "{}", overlap.text);
    let skipped = named(&elements, "skipped");
    assert!(skipped
        .iter()
        .any(|skip| skip.attribute("message") == "no run, enqueue or charge operations"));
}

#[test]
fn junit_drops_characters_xml_cannot_hold() {
    let analysis = analysis_of(&overlap_history("bell\u{7}key"));
    let elements = parse_xml(&render_junit(&[Analyzed { source: "x", analysis: &analysis }]));
    let names: Vec<&str> =
        named(&elements, "testcase").iter().map(|c| c.attribute("name")).collect();
    assert!(names.contains(&"mutual-exclusion bellkey"), "{names:?}");
}

#[test]
fn markdown_has_a_row_per_checker_and_escapes_pipes() {
    let invalid = analysis_of(&overlap_history("a|b*c"));
    let valid = analysis_of(&valid_history());
    let markdown = render_markdown(&[
        Analyzed { source: "stall.jsonl", analysis: &invalid },
        Analyzed { source: "valid.jsonl", analysis: &valid },
    ]);
    assert!(markdown.starts_with("## lockcheck: INVALID\n"), "{markdown}");
    assert!(markdown.contains("2 histories: 1 valid, 1 invalid, 0 unknown."), "{markdown}");
    let rows: Vec<&str> = markdown.lines().filter(|line| line.starts_with("| ")).collect();
    let headers = rows.iter().filter(|row| **row == "| checker | verdict | keys | violations |");
    assert_eq!(headers.count(), 2, "one table per history");
    assert_eq!(rows.len(), 2 + invalid.results.len() + valid.results.len(), "{markdown}");
    for row in &rows {
        let cells = row.replace("\\|", "").matches('|').count();
        assert_eq!(cells, 5, "four cells: {row}");
    }
    assert!(rows.iter().any(|row| row.starts_with("| mutual-exclusion | **INVALID** | 1 of 1")));
    assert!(markdown.contains("a\\|b\\*c"), "{markdown}");
    assert!(!markdown.contains("a|b"), "{markdown}");
    assert!(markdown.contains("clients 1 and 2, window t=1.500 s to t=2.000 s"), "{markdown}");
}

#[test]
fn markdown_caps_violations_per_checker() {
    // Eight clients each granted `k` while client 0 still believes it holds it.
    let mut lines: Vec<Line<'_>> = vec![
        (100, 0, "invoke", "acquire", "k", json!({"ttl_ms": 100})),
        (110, 0, "ok", "acquire", "k", json!(null)),
    ];
    for client in 1..=8 {
        let at = 1000 * client as u64;
        lines.push((at, client, "invoke", "acquire", "k", json!({"ttl_ms": 100})));
        lines.push((at + 10, client, "ok", "acquire", "k", json!(null)));
        lines.push((at + 20, client, "invoke", "release", "k", json!(null)));
        lines.push((at + 30, client, "ok", "release", "k", json!(null)));
    }
    let analysis = analysis_of(&events(&lines));
    let mutex = &analysis.results[0];
    assert_eq!(mutex.violation_count, 8);
    let markdown = render_markdown(&[Analyzed { source: "many", analysis: &analysis }]);
    assert_eq!(markdown.matches("- **overlap** on").count(), 5, "{markdown}");
    assert!(markdown.contains("- … and 3 more violations"), "{markdown}");
}

/// The lines of each finding block: `finding N: …` and the lines indented
/// under it.
fn finding_blocks(text: &str) -> Vec<Vec<&str>> {
    let mut blocks: Vec<Vec<&str>> = Vec::new();
    for line in text.lines() {
        if line.starts_with("finding ") {
            blocks.push(vec![line]);
        } else if line.starts_with("  ") {
            if let Some(block) = blocks.last_mut() {
                block.push(line);
            }
        } else {
            blocks.push(Vec::new());
        }
    }
    blocks.retain(|block| block.first().is_some_and(|line| line.starts_with("finding ")));
    blocks
}

#[test]
fn text_finding_fits_one_screen_with_operations_and_timeline() {
    let history = overlap_history("report");
    let analysis = analysis_of(&history);
    let options = TextOptions {
        events: Some(&history),
        html_report: Some("store/latest/timeline.html"),
        ..TextOptions::default()
    };
    let text = render_text(&Analyzed { source: "stall.jsonl", analysis: &analysis }, &options);
    let blocks = finding_blocks(&text);
    assert!(!blocks.is_empty(), "{text}");
    for block in &blocks {
        assert!(block.len() <= 12, "{} lines:\n{}", block.len(), block.join("\n"));
    }
    assert!(text.contains("\ntimeline: store/latest/timeline.html\n"), "{text}");
    let mutex = blocks[0].join("\n");
    assert!(mutex.starts_with("finding 1: stale holder on \"report\", process 1"), "{mutex}");
    assert!(mutex.contains("  e.g. processes 1 and 2 both believed they held"), "{mutex}");
    assert!(mutex.contains("      #3 t=1.500 s  2 ok acquire \"report\" {\"fence\":2}"), "{mutex}");
    assert!(mutex.contains("      #0 t=0.100 s  1 invoke acquire \"report\" {\"ttl_ms\":1000}"));
    // The checker's line says which findings explain its violations.
    assert!(text.contains("mutual-exclusion     INVALID  1 violation on 1 of 1 key\n"), "{text}");
    assert!(text.contains("  in finding 1\n"), "{text}");
}

#[test]
fn text_finding_without_events_lists_indices() {
    let analysis = analysis_of(&overlap_history("report"));
    let text = render_text(
        &Analyzed { source: "stall.jsonl", analysis: &analysis },
        &TextOptions::default(),
    );
    let blocks = finding_blocks(&text);
    let mutex = blocks[0].join("\n");
    assert!(mutex.contains("  events: 0, 1, 2, 3, 4"), "{mutex}");
    assert!(!mutex.contains("#3 t="), "{mutex}");
    assert!(!text.contains("timeline:"), "{text}");
}

#[test]
fn text_tells_one_block_per_kind_of_finding_and_counts_the_rest() {
    // Ten clients hold a two-permit semaphore at once: eight grants over
    // the limit, each the cause of its own violation, all of one kind.
    let mut lines: Vec<Line<'_>> = Vec::new();
    for client in 0..10 {
        let at = 100 + 10 * client as u64;
        lines.push((at, client, "invoke", "acquire", "s", json!({"ttl_ms": 10_000, "permits": 2})));
    }
    for client in 0..10 {
        let at = 300 + 10 * client as u64;
        lines.push((at, client, "ok", "acquire", "s", json!(null)));
    }
    let history = events(&lines);
    let analysis = analysis_of(&history);
    let options = TextOptions {
        events: Some(&history),
        html_report: Some("timeline.html"),
        max_violations_shown: 10,
        ..TextOptions::default()
    };
    let text = render_text(&Analyzed { source: "semaphore", analysis: &analysis }, &options);
    let blocks = finding_blocks(&text);
    assert_eq!(blocks.len(), 1, "{text}");
    assert!(blocks[0].len() <= 12, "{} lines:\n{}", blocks[0].len(), blocks[0].join("\n"));
    let findings = analysis.findings.len();
    assert!(findings >= 1, "{text}");
    let explained: u64 = analysis.findings.iter().map(|finding| finding.violations).sum();
    assert_eq!(explained, analysis.results[0].violation_count, "{text}");
}

#[test]
fn text_for_a_valid_history_is_unchanged() {
    let history = valid_history();
    let analysis = analysis_of(&history);
    let analyzed = Analyzed { source: "valid.jsonl", analysis: &analysis };
    assert_eq!(render_text(&analyzed, &TextOptions::default()), VALID_TEXT);
    let options = TextOptions {
        events: Some(&history),
        html_report: Some("timeline.html"),
        ..TextOptions::default()
    };
    assert_eq!(render_text(&analyzed, &options), VALID_TEXT);
}

#[test]
fn text_and_markdown_quote_a_huge_key_short_json_and_html_keep_it_whole() {
    let key = "k".repeat(1_000_000);
    let history = overlap_history(&key);
    let analysis = analysis_of(&history);
    assert_eq!(analysis.verdict, Verdict::Invalid);
    let analyzed = Analyzed { source: "huge.jsonl", analysis: &analysis };
    let options = TextOptions { events: Some(&history), ..TextOptions::default() };
    let text = render_text(&analyzed, &options);
    assert!(text.len() < 16 * 1024, "{} bytes:\n{}", text.len(), &text[..4096]);
    let cut = format!("\"{}\"… (1000000 bytes)", "k".repeat(80));
    assert!(text.contains(&format!("  {cut}: invalid")), "{text}");
    assert!(text.contains(&format!("1 invoke acquire {cut} {{\"ttl_ms\":1000}}")), "{text}");
    let explanation = text.lines().find(|line| line.starts_with("  e.g. ")).unwrap_or_default();
    assert!(explanation.contains(&format!("{}…\" (1000000 bytes)", "k".repeat(80))), "{text}");
    let markdown = render_markdown(&[analyzed]);
    assert!(markdown.len() < 16 * 1024, "{} bytes", markdown.len());
    assert!(markdown.contains("(1000000 bytes)"), "{markdown}");
    let json = lockcheck_reports::render_json(analysis.verdict, &[analyzed], &[]);
    let parsed: Value = serde_json::from_str(&json).unwrap();
    let keys = &parsed["histories"][0]["results"][0]["keys"];
    assert_eq!(keys[0]["key"].as_str().map(str::len), Some(1_000_000), "{keys}");
    let html = lockcheck_reports::render_html(&lockcheck_reports::HtmlInput {
        title: "huge",
        events: &history,
        analysis: &analysis,
        command: None,
    });
    assert!(html.contains(&key), "the HTML report keeps the key whole");
}

/// A stale holder struck by a pause: every format names the finding each
/// violation belongs to, and the fault behind it.
#[test]
fn every_format_names_each_violations_finding_and_its_fault() {
    let mut history = overlap_history("report");
    // The pause that struck process 1 after its grant, recorded as the
    // simulator records it (indices follow the history's).
    let pause = |time: u64, f: &str| -> Event {
        let event = json!({
            "index": 0, "time": time, "process": "nemesis", "type": "info", "f": f,
            "key": null,
            "value": {"fault": "pause", "targets": ["client-1"], "processes": [1], "stall_ms": 2800},
        });
        serde_json::from_str(&event.to_string()).unwrap()
    };
    history.push(pause(3_020_000_000, "stop"));
    history.insert(2, pause(200_000_000, "start"));
    for (at, event) in history.iter_mut().enumerate() {
        event.index = at as u64;
    }
    let analysis = analysis_of(&history);
    assert_eq!(analysis.findings.len(), 1, "{:#?}", analysis.findings);
    let analyzed = Analyzed { source: "paused", analysis: &analysis };
    let fault = "pause struck client-1 (process 1) at t=0.200 s for 2.800 s";
    let json = lockcheck_reports::render_json(analysis.verdict, &[analyzed], &[]);
    let parsed: Value = serde_json::from_str(&json).unwrap();
    let history_json = &parsed["histories"][0];
    assert_eq!(history_json["results"][0]["violations"][0]["finding"], json!(1), "{json}");
    assert_eq!(history_json["findings"][0]["fault"]["description"], json!(fault), "{json}");
    let junit = render_junit(&[analyzed]);
    assert!(junit.contains("finding 1: stale holder (1 violation in all)"), "{junit}");
    assert!(junit.contains(&format!("fault: {fault}")), "{junit}");
    let markdown = render_markdown(&[analyzed]);
    assert!(markdown.contains("- **finding 1**: stale holder on"), "{markdown}");
    assert!(markdown.contains(&format!("fault: {fault}")), "{markdown}");
    assert!(markdown.contains("- **overlap** on \"report\" (finding 1)"), "{markdown}");
    let html = lockcheck_reports::render_html(&lockcheck_reports::HtmlInput {
        title: "paused",
        events: &history,
        analysis: &analysis,
        command: None,
    });
    assert!(html.contains("id=\"finding-1\""), "{html}");
    assert!(html.contains(&format!("fault: {fault}")), "the HTML names the fault");
    assert!(html.contains("href=\"#finding-1\">finding 1</a>"), "violations link their finding");
    // And what the pause reached, as the text says it.
    let coverage = "coverage: 1 of 1 faults reached a vulnerable window (pause 1/1: a stall longer";
    assert!(html.contains(&format!("<details class=\"coverage\"><summary>{coverage}")), "{html}");
}

/// `valid_history` with a fault around each of its two holders: a slow
/// network while client 1 holds within its lease, and a kill (not
/// persisted) while client 2 holds, when `kill` is set.
fn with_faults(kill: bool) -> Vec<Event> {
    let nemesis = |index: usize, time_ms: u64, f: &str, value: Value| -> Event {
        let json = json!({
            "index": index, "time": time_ms * 1_000_000, "process": "nemesis",
            "type": "info", "f": f, "key": null, "value": value,
        });
        serde_json::from_str(&json.to_string()).unwrap()
    };
    let mut events = valid_history();
    let slow = json!({"fault": "slow-net", "targets": ["redis"]});
    let killed = json!({"fault": "kill", "targets": ["redis"], "persistent": false});
    let mut faults = vec![(150, "start", slow.clone()), (250, "stop", slow)];
    if kill {
        faults.extend([(450, "start", killed.clone()), (460, "stop", killed)]);
    }
    for (time_ms, f, value) in faults {
        let at = events.partition_point(|event| event.time_ns <= time_ms * 1_000_000);
        events.insert(at, nemesis(0, time_ms, f, value));
    }
    for (index, event) in events.iter_mut().enumerate() {
        event.index = index as u64;
    }
    events
}

#[test]
fn every_format_says_what_the_faults_reached() {
    let vacuous = analysis_of(&with_faults(false));
    assert!(vacuous.vacuous());
    let analyzed = Analyzed { source: "slow.jsonl", analysis: &vacuous };
    let line = "valid, but vacuous: 0 of 1 slow-net faults caught a holder past its lease or lost a lock reply";
    let text = render_text(&analyzed, &TextOptions::default());
    assert!(text.ends_with(&format!("verdict: valid\n{line}\n")), "{text}");
    assert!(render_markdown(&[analyzed]).contains(&format!("\n{line}\n")));
    let junit = render_junit(&[analyzed]);
    assert!(junit.contains(&format!("<property name=\"coverage\" value=\"{line}\"/>")), "{junit}");

    let covered = analysis_of(&with_faults(true));
    assert!(!covered.vacuous());
    let analyzed = Analyzed { source: "kill.jsonl", analysis: &covered };
    let text = render_text(&analyzed, &TextOptions::default());
    assert!(
        text.ends_with(
            "verdict: valid\ncoverage: 1 of 2 faults reached a vulnerable window (slow-net 0/1; \
             kill 1/1: a kill while a key was held)\n"
        ),
        "{text}"
    );
    // A history without faults reads as before.
    assert!(!render_text(
        &Analyzed { source: "v", analysis: &analysis_of(&valid_history()) },
        &TextOptions::default()
    )
    .contains("coverage"));
}
