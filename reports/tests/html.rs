//! The HTML report: what the page says (lanes, violations, faults), that data
//! cannot break out of its script element, that a real browser runs the
//! page's script without an error and draws it, and that its size stays
//! linear in the history.

use std::fs::{self, File};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lockcheck_checker::synth::{self, SynthOptions};
use lockcheck_checker::{analyze, default_checkers, Analysis, CheckOptions, Event, HistoryBuilder};
use lockcheck_reports::{render_html, HtmlInput};

/// Chromium gets this long per page before it is killed.
const CHROMIUM_TIMEOUT: Duration = Duration::from_secs(60);

fn parse(lines: &str) -> Vec<Event> {
    lines
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| serde_json::from_str(line).expect("test event parses"))
        .collect()
}

fn analysis_of(events: &[Event]) -> Analysis {
    let mut builder = HistoryBuilder::with_capacity(events.len());
    for event in events {
        builder.push(event).expect("test history is well formed");
    }
    analyze(&builder.finish(), &default_checkers(), &CheckOptions::default())
}

fn render(title: &str, events: &[Event], command: Option<&str>) -> String {
    let analysis = analysis_of(events);
    render_html(&HtmlInput { title, events, analysis: &analysis, command })
}

/// The example history of histories/README.md §1.6, with the lock named
/// `key`: client 1 stalls (nemesis pause) past its lease, client 2 is granted
/// the lock while client 1 still believes, and client 1's late write is
/// rejected by its token.
fn overlap_history(key: &str) -> Vec<Event> {
    let key = serde_json::to_string(key).unwrap();
    parse(&format!(
        r#"
{{"index":0,"time":1000000000,"process":1,"type":"invoke","f":"acquire","key":{key},"value":{{"ttl_ms":10000}}}}
{{"index":1,"time":1003000000,"process":1,"type":"ok","f":"acquire","key":{key},"value":{{"fence":33}}}}
{{"index":2,"time":2000000000,"process":"nemesis","type":"info","f":"start","key":null,"value":{{"fault":"pause","targets":["client-1"]}}}}
{{"index":3,"time":13000000000,"process":2,"type":"invoke","f":"acquire","key":{key},"value":{{"ttl_ms":10000}}}}
{{"index":4,"time":13002000000,"process":2,"type":"ok","f":"acquire","key":{key},"value":{{"fence":34}}}}
{{"index":5,"time":14000000000,"process":2,"type":"invoke","f":"write","key":"doc-1","value":{{"fence":34,"data":"by 2"}}}}
{{"index":6,"time":14001000000,"process":2,"type":"ok","f":"write","key":"doc-1","value":null}}
{{"index":7,"time":16000000000,"process":"nemesis","type":"info","f":"stop","key":null,"value":{{"fault":"pause","targets":["client-1"]}}}}
{{"index":8,"time":16000500000,"process":1,"type":"invoke","f":"write","key":"doc-1","value":{{"fence":33,"data":"by 1"}}}}
{{"index":9,"time":16001000000,"process":1,"type":"fail","f":"write","key":"doc-1","value":null,"error":"stale-fence"}}
"#
    ))
}

/// The JSON the page embeds, parsed back.
fn embedded_data(html: &str) -> serde_json::Value {
    let open = "<script type=\"application/json\" id=\"lockcheck-data\">";
    let start = html.find(open).expect("the page embeds its data") + open.len();
    let end = start + html[start..].find("</script>").expect("the data element is closed");
    serde_json::from_str(&html[start..end]).expect("the embedded data is JSON")
}

#[test]
fn page_names_both_clients_the_violation_and_the_fault() {
    let events = overlap_history("report");
    let html = render("example", &events, Some("lockcheck analyze example.jsonl"));
    let data = embedded_data(&html);
    assert_eq!(data["lanes"], serde_json::json!([[1], [2]]), "one lane per client");
    let explanation = "processes 1 and 2 both believed they held &quot;report&quot;";
    assert!(html.contains(explanation), "the violation's explanation is on the page");
    assert!(html.contains("lockcheck analyze example.jsonl"), "the command is on the page");
    assert!(html.contains("mutual-exclusion"));
    let nemesis = data["nemesis"].as_array().expect("fault windows");
    assert_eq!(nemesis.len(), 1, "the pause's start and stop make one window");
    assert_eq!(data["events"][2][6]["fault"], "pause");
    let beliefs = data["beliefs"].as_array().expect("beliefs");
    assert_eq!(beliefs.len(), 2, "both clients believed they held the lock");
    // Client 1's lease: at least until its invoke + 10 s, at most its ok + 10 s.
    assert_eq!(beliefs[0][8], 11_000_000_000u64);
    assert_eq!(beliefs[0][9], 11_003_000_000u64);
}

#[test]
fn data_from_the_history_cannot_break_out_of_the_page() {
    let key = "</script><script>alert(1)</script><!--";
    let events = overlap_history(key);
    let html = render("<b>title</b>", &events, Some("echo '</script>' && rm"));
    // Three script elements of the page's own: the error hook, the data and
    // the drawing code. Any more closing tags came from the data.
    assert_eq!(html.matches("</script>").count(), 3, "no raw </script> from data");
    assert!(!html.contains("<script>alert"));
    assert!(!html.contains("<!--"));
    assert!(!html.contains("<b>title</b>"));
    assert!(html.contains("&lt;b&gt;title&lt;/b&gt;"));
    let data = embedded_data(&html);
    let keys: Vec<&str> =
        data["keys"].as_array().unwrap().iter().filter_map(|key| key.as_str()).collect();
    assert!(keys.contains(&key), "the key survives escaping intact: {keys:?}");
}

#[test]
fn a_history_the_builder_rejects_still_renders() {
    let events = parse(
        r#"{"index":0,"time":10,"process":1,"type":"ok","f":"acquire","key":"l","value":null}"#,
    );
    let analysis = Analysis {
        verdict: lockcheck_checker::Verdict::Unknown,
        summary: lockcheck_checker::Summary {
            events: 1,
            ops: 0,
            lock_keys: 0,
            resource_keys: 0,
            clients: 0,
            nemesis_events: 0,
            start_ns: 10,
            end_ns: 10,
        },
        results: Vec::new(),
        findings: Vec::new(),
        warnings: Vec::new(),
        coverage: lockcheck_checker::Coverage::none(),
    };
    let html = render_html(&HtmlInput {
        title: "bad",
        events: &events,
        analysis: &analysis,
        command: None,
    });
    let data = embedded_data(&html);
    assert!(data["historyError"].as_str().unwrap().contains("no open invoke"));
}

#[test]
fn an_empty_history_renders() {
    let html = render("empty", &[], None);
    assert!(embedded_data(&html)["events"].as_array().unwrap().is_empty());
}

#[test]
fn page_size_is_linear_in_the_history() {
    let mut events =
        synth::generate(&SynthOptions { ops: 50_000, seed: 7, ..SynthOptions::default() });
    synth::inject_overlap(&mut events).expect("an overlap can be injected");
    assert!(events.len() >= 100_000, "{} events", events.len());
    let mut jsonl = Vec::new();
    synth::write_jsonl(&events, &mut jsonl).unwrap();
    let html = render("synthetic", &events, None);
    let ratio = html.len() as f64 / jsonl.len() as f64;
    assert!(ratio < 3.0, "{} bytes of HTML for {} of JSONL ({ratio:.2}x)", html.len(), jsonl.len());
}

// ---- in a browser -----------------------------------------------------------

fn corpus_file(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../histories").join(relative)
}

fn read_events(path: &Path) -> Vec<Event> {
    let file = File::open(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    BufReader::new(file)
        .lines()
        .map(|line| line.unwrap())
        .filter(|line| !line.trim().is_empty())
        .map(|line| serde_json::from_str(&line).unwrap())
        .collect()
}

/// A fresh directory for one test's files.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lockcheck-html-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

fn chromium() -> &'static str {
    let found = Command::new("chromium")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    assert!(
        found,
        "chromium is not installed: the HTML report's browser tests need it \
         (as root: apt-get install -y chromium)"
    );
    "chromium"
}

/// Runs headless Chromium with these arguments, killed after the timeout;
/// returns its standard output.
fn run_chromium(dir: &Path, args: &[String]) -> String {
    let mut child = Command::new(chromium())
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"])
        .arg(format!("--user-data-dir={}", dir.join("profile").display()))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromium starts");
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        let _ = stdout.read_to_string(&mut out);
        out
    });
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "chromium {args:?} exited with {status}");
            break;
        }
        if started.elapsed() > CHROMIUM_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium {args:?} did not finish within {CHROMIUM_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    reader.join().unwrap()
}

/// Writes the page, loads it in Chromium and returns the DOM after its
/// script ran, having checked that it ran to the end without an error.
fn rendered_dom(dir: &Path, html: &str) -> String {
    let page = dir.join("report.html");
    fs::write(&page, html).unwrap();
    let url = format!("file://{}", page.display());
    let dom = run_chromium(dir, &["--dump-dom".to_string(), url]);
    assert!(!dom.contains("data-errors"), "the page's script failed: {}", errors_of(&dom));
    assert!(dom.contains("data-rendered=\"ok\""), "the page's script did not finish");
    dom
}

fn errors_of(dom: &str) -> &str {
    let start = dom.find("data-errors=\"").map_or(0, |at| at + 13);
    let end = dom[start..].find('"').map_or(dom.len(), |at| start + at);
    &dom[start..end]
}

/// A payments history (deliveries, charges, acks, no lock at all) draws
/// without a script error, its double charge among the violations.
#[test]
fn browser_draws_a_payments_history_without_errors() {
    let path = corpus_file(
        "payments/gc-pause/invalid/visibility-timeout-redelivers-and-charges-twice.jsonl",
    );
    let events = read_events(&path);
    let analysis = analysis_of(&events);
    let title = path.display().to_string();
    let html = render_html(&HtmlInput {
        title: &title,
        events: &events,
        analysis: &analysis,
        command: None,
    });
    let dir = temp_dir("payments");
    let dom = rendered_dom(&dir, &html);
    for drawn in ["process 1", "process 2", "ch_206", "done-twice"] {
        assert!(dom.to_lowercase().contains(&drawn.to_lowercase()), "the page shows {drawn:?}");
    }
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn browser_draws_a_recorded_history_without_errors() {
    let path = corpus_file(
        "redis-del-release/contention-pause/invalid/del-release-deletes-next-holders-lock.jsonl",
    );
    let events = read_events(&path);
    let analysis = analysis_of(&events);
    let title = path.display().to_string();
    let html = render_html(&HtmlInput {
        title: &title,
        events: &events,
        analysis: &analysis,
        command: Some("lockcheck analyze del-release-deletes-next-holders-lock.jsonl"),
    });
    let dir = temp_dir("corpus");
    let dom = rendered_dom(&dir, &html);
    for drawn in ["process 1", "process 2", "process 3", ">pause", "linearizability evidence"] {
        assert!(dom.to_lowercase().contains(&drawn.to_lowercase()), "the page shows {drawn:?}");
    }
    let screenshot = dir.join("report.png");
    let url = format!("file://{}", dir.join("report.html").display());
    run_chromium(
        &dir,
        &[
            format!("--screenshot={}", screenshot.display()),
            "--window-size=1400,1000".to_string(),
            url,
        ],
    );
    let size = fs::metadata(&screenshot).map(|meta| meta.len()).unwrap_or(0);
    assert!(size > 10_000, "the screenshot is {size} bytes");
    let _ = fs::remove_dir_all(&dir);
}

/// Drives the page as a reader would: hovers over the whole timeline, zooms
/// with the wheel, pans, drags a range, clicks every violation, the buttons
/// and the filters. Appended to the page under test only.
const PROBE: &str = r#"<script>
(function () {
  var body = document.body, timeline = document.getElementById("timeline");
  var box = timeline.querySelector("svg").getBoundingClientRect();
  function mouse(type, x, y) {
    return new MouseEvent(type, { clientX: box.left + x, clientY: box.top + y, bubbles: true, button: 0 });
  }
  var hovers = 0, tip = document.getElementById("tooltip");
  for (var x = 175; x < box.width - 10; x += 23) {
    for (var y = 5; y < box.height; y += 4) {
      timeline.dispatchEvent(mouse("mousemove", x, y));
      if (!tip.hidden) hovers++;
    }
  }
  body.dataset.hovers = String(hovers);
  function wheel(deltaY, shiftKey) {
    timeline.dispatchEvent(new WheelEvent("wheel", { clientX: box.left + 400, clientY: box.top + 60,
      deltaY: deltaY, shiftKey: shiftKey, bubbles: true, cancelable: true }));
  }
  wheel(-400, false); wheel(120, true);
  timeline.dispatchEvent(mouse("mousedown", 300, 60));
  timeline.dispatchEvent(mouse("mousemove", 520, 60));
  window.dispatchEvent(mouse("mouseup", 520, 60));
  document.querySelectorAll("li.violation").forEach(function (li) { li.click(); });
  document.querySelectorAll("[data-zoom]").forEach(function (button) { button.click(); });
  ["show-leases", "show-ops"].forEach(function (id) { document.getElementById(id).click(); });
  var filter = document.getElementById("key-filter");
  filter.selectedIndex = filter.options.length - 1;
  filter.dispatchEvent(new Event("change"));
  document.querySelector("[data-zoom=in]").click();
  setTimeout(function () { body.dataset.probed = "done"; }, 300);
})();
</script>"#;

#[test]
fn browser_survives_hover_zoom_and_clicks() {
    let path =
        corpus_file("redlock/restart-no-persistence/invalid/restarted-instance-forgets-key.jsonl");
    let events = read_events(&path);
    let html = render("redlock", &events, None).replace("</body>", &format!("{PROBE}</body>"));
    let dir = temp_dir("probe");
    let page = dir.join("report.html");
    fs::write(&page, html).unwrap();
    let url = format!("file://{}", page.display());
    // Virtual time lets the renders scheduled for the next frames run
    // before the DOM is dumped.
    let dom = run_chromium(
        &dir,
        &["--virtual-time-budget=3000".to_string(), "--dump-dom".to_string(), url],
    );
    assert!(!dom.contains("data-errors"), "the page's script failed: {}", errors_of(&dom));
    assert!(dom.contains("data-probed=\"done\""), "the probe did not finish");
    let hovers = dom
        .split("data-hovers=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .and_then(|count| count.parse::<u32>().ok())
        .unwrap_or(0);
    assert!(hovers > 20, "hovering showed details only {hovers} times");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn browser_draws_the_hand_made_example() {
    let events = overlap_history("report");
    let html = render("example", &events, None);
    let dir = temp_dir("example");
    let dom = rendered_dom(&dir, &html);
    assert!(dom.contains("process 1") && dom.contains("process 2"), "both lanes are drawn");
    assert!(dom.contains("pause client-1"), "the fault window is labelled");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn browser_draws_a_large_history_without_errors() {
    let mut events =
        synth::generate(&SynthOptions { ops: 20_000, seed: 3, ..SynthOptions::default() });
    synth::inject_overlap(&mut events).expect("an overlap can be injected");
    let html = render("synthetic 40k events", &events, None);
    let dir = temp_dir("large");
    let dom = rendered_dom(&dir, &html);
    assert!(dom.contains("mutual-exclusion"));
    let _ = fs::remove_dir_all(&dir);
}
