//! `lockcheck analyze FILE…`

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{self, BufReader, Write};
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use lockcheck_checker::import::{import_capped, Import, InputFormat, ModelChoice};
use lockcheck_checker::names::LINEARIZABILITY;
use lockcheck_checker::{
    analyze_imported, default_checkers, Analysis, CheckOptions, Event, EventReader, ReadError,
    Verdict, NOTHING_TO_CHECK,
};
use lockcheck_reports::{render_json, render_text, Analyzed, TextOptions};

use crate::exit;
use crate::{AnalyzeRequest, Format};

/// `lockcheck analyze`; the binary has made sure the model fits the
/// input format.
pub fn run(args: &AnalyzeRequest) -> anyhow::Result<ExitCode> {
    let (format, model) = (args.input_format, args.model);
    let options = CheckOptions {
        liveness_bound_ns: args
            .liveness_bound
            .map(|bound| bound.as_nanos().min(u64::MAX as u128) as u64),
        max_violations: args.max_violations,
        linearizability_time_limit: Some(args.linearizability_timeout),
        linearizability_memory_bytes: args.linearizability_memory.saturating_mul(1 << 20),
        linearizability_all_keys: args.all_keys,
        lock_model: model,
        purpose: args.purpose,
    };
    let mut checkers = default_checkers();
    if args.no_linearizability {
        checkers.retain(|checker| checker.name() != LINEARIZABILITY);
    }
    let mut analyses: Vec<(String, Analysis)> = Vec::new();
    let mut errors: Vec<(String, String)> = Vec::new();
    let mut provings: Vec<Vec<Event>> = Vec::new();
    for path in &args.files {
        let source = path.display().to_string();
        let started = Instant::now();
        let Import { imported, notes } =
            match load(path, &source, format, model, args.max_line_bytes) {
                Ok(import) => import,
                Err(error) => {
                    eprintln!("lockcheck: {error}");
                    errors.push((source, error.to_string()));
                    continue;
                }
            };
        let read_s = started.elapsed().as_secs_f64();
        let started = Instant::now();
        let mut analysis = analyze_imported(&imported, &checkers, &options);
        let check_s = started.elapsed().as_secs_f64();
        // What was skipped or ignored goes to stderr and into the report.
        for note in &notes {
            eprintln!("lockcheck: {note}");
        }
        if analysis.warnings.iter().any(|warning| warning == NOTHING_TO_CHECK) {
            eprintln!("lockcheck: {source}: {NOTHING_TO_CHECK}");
        }
        analysis.warnings.splice(0..0, notes);
        if args.stats {
            eprintln!(
                "stats: source={source} events={} ops={} read_s={read_s:.3} check_s={check_s:.3} peak_rss_bytes={}",
                analysis.summary.events,
                analysis.summary.ops,
                peak_rss_bytes().unwrap_or(0)
            );
        }
        drop(imported);
        // The text report lists each violation's operations, as `check`'s
        // does: a second pass keeps only the events the violations name.
        let proving = match (args.format, format) {
            (Format::Text, InputFormat::Jsonl) => proving_events(path, &analysis),
            _ => Vec::new(),
        };
        analyses.push((source, analysis));
        provings.push(proving);
    }
    let verdict = analyses
        .iter()
        .map(|(_, analysis)| analysis.verdict)
        .reduce(Verdict::combine)
        .unwrap_or(Verdict::Unknown);
    // What the exit code follows: with --require-coverage, a vacuous pass
    // fails.
    let gated = analyses
        .iter()
        .map(|(source, analysis)| {
            exit::require_coverage(analysis, analysis.verdict, args.require_coverage, source)
        })
        .reduce(Verdict::combine)
        .unwrap_or(Verdict::Unknown);
    let analyzed: Vec<Analyzed<'_>> =
        analyses.iter().map(|(source, analysis)| Analyzed { source, analysis }).collect();
    let mut htmls: Vec<Option<String>> = Vec::with_capacity(analyses.len());
    for (source, analysis) in &analyses {
        htmls.push(match &args.html_dir {
            Some(dir) => match html_report(dir, source, analysis, format) {
                Ok(path) => Some(path),
                Err(error) => {
                    eprintln!("lockcheck: no HTML report for {source}: {error:#}");
                    None
                }
            },
            None => None,
        });
    }
    let text = match args.format {
        Format::Json => {
            let errors: Vec<(&str, &str)> =
                errors.iter().map(|(s, e)| (s.as_str(), e.as_str())).collect();
            render_json(verdict, &analyzed, &errors)
        }
        Format::Junit => lockcheck_reports::render_junit(&analyzed),
        Format::Markdown => lockcheck_reports::render_markdown(&analyzed),
        Format::Text => text_report(&analyzed, errors.len(), &htmls, &provings),
    };
    print(&text)?;
    // Unreadable input outranks any verdict: the verdict did not cover it.
    let code = if errors.is_empty() { exit::for_verdict(gated) } else { exit::BAD_INPUT };
    Ok(code.into())
}

fn load(
    path: &Path,
    source: &str,
    format: InputFormat,
    model: ModelChoice,
    max_line_bytes: u64,
) -> Result<Import, ReadError> {
    let io_error = |error| ReadError::Io { source_name: source.to_string(), error };
    if path.as_os_str() == "-" {
        let stdin = io::stdin().lock();
        return import_capped(format, stdin, source, model, 0, max_line_bytes);
    }
    let file = File::open(path).map_err(io_error)?;
    let size_bytes = file.metadata().map(|metadata| metadata.len()).unwrap_or(0);
    let input = BufReader::with_capacity(1 << 20, file);
    import_capped(format, input, source, model, size_bytes, max_line_bytes)
}

/// Writes the HTML report of the history at `source` into `dir`, named
/// after it (`runs/a.jsonl` → `dir/a.html`), and gives its path. The
/// history is read a second time, as events: the analysis did not keep them.
fn html_report(
    dir: &Path,
    source: &str,
    analysis: &Analysis,
    format: InputFormat,
) -> anyhow::Result<String> {
    if format != InputFormat::Jsonl || source == "-" {
        anyhow::bail!("HTML reports are drawn from JSON Lines files (not standard input, not imported formats)");
    }
    let events =
        lockcheck_runs::report::read_events(Path::new(source)).map_err(anyhow::Error::msg)?;
    std::fs::create_dir_all(dir)?;
    let stem = Path::new(source).file_stem().map(|stem| stem.to_string_lossy().to_string());
    let path = dir.join(format!("{}.html", stem.unwrap_or_else(|| "history".to_string())));
    lockcheck_runs::write_html(&path, source, &events, analysis, None)?;
    Ok(path.display().to_string())
}

fn text_report(
    analyzed: &[Analyzed<'_>],
    unreadable: usize,
    htmls: &[Option<String>],
    provings: &[Vec<Event>],
) -> String {
    let mut text: Vec<String> = analyzed
        .iter()
        .zip(htmls)
        .zip(provings)
        .map(|((one, html), proving)| {
            let events = (!proving.is_empty()).then_some(proving.as_slice());
            let options =
                TextOptions { html_report: html.as_deref(), events, ..TextOptions::default() };
            render_text(one, &options)
        })
        .collect();
    if analyzed.len() + unreadable > 1 {
        let count =
            |wanted: Verdict| analyzed.iter().filter(|one| one.analysis.verdict == wanted).count();
        text.push(format!(
            "all: {} valid, {} invalid, {} unknown, {} unreadable\n",
            count(Verdict::Valid),
            count(Verdict::Invalid),
            count(Verdict::Unknown),
            unreadable
        ));
    }
    text.join("\n")
}

/// The events of the history at `path` that `analysis`'s violations and
/// findings name,
/// in index order: read again, keeping only those, so that memory stays
/// what the violations kept. Standard input, read once, gives none, and so
/// does a file that cannot be read again (its report lists indices only).
fn proving_events(path: &Path, analysis: &Analysis) -> Vec<Event> {
    let wanted: BTreeSet<u64> = analysis
        .results
        .iter()
        .flat_map(|result| &result.violations)
        .flat_map(|violation| violation.events.iter().copied())
        .chain(analysis.findings.iter().flat_map(|finding| finding.events.iter().copied()))
        .collect();
    if wanted.is_empty() || path.as_os_str() == "-" {
        return Vec::new();
    }
    let Ok(file) = File::open(path) else { return Vec::new() };
    let reader =
        EventReader::new(BufReader::with_capacity(1 << 20, file), path.display().to_string());
    let mut events: Vec<Event> = reader
        .filter_map(Result::ok)
        .map(|(_, event)| event)
        .filter(|event| wanted.contains(&event.index))
        .collect();
    events.sort_by_key(|event| event.index);
    events
}

/// Writes to standard output; a closed pipe (`| head`) is not an error.
fn print(text: &str) -> anyhow::Result<()> {
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(error) if error.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

/// The process's peak resident set size (Linux `VmHWM`).
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
