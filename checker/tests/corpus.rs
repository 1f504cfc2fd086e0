//! Walks the recorded-history corpus in `histories/` and checks that every
//! checker reaches the verdict the tree says it must, with evidence: every
//! violation has an explanation and names, in ascending order, events that are
//! in the history.
//!
//! Layout (see `histories/README.md`):
//! `histories/<recipe>/<fault>/<valid|invalid>/<name>.jsonl`, and next to each
//! file under `invalid/` a sidecar `<name>.expect` naming, one per line, the
//! checkers that must find it invalid. Every other checker must be valid or
//! not applicable. Under `valid/` every checker must be valid or not
//! applicable and the overall verdict must be `Valid`.
//!
//! All mismatches are collected and reported together, so one run shows every
//! file that disagrees.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::BufReader;
use std::path::{Path, PathBuf};

use lockcheck_checker::{
    analyze, default_checkers, read_history, Analysis, CheckOptions, History, Verdict,
};

/// Fewer files than this means the tree was not found or was emptied.
const MIN_FILES: usize = 20;

fn corpus_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../histories")
}

/// Every file under `dir`, recursively, sorted for a stable report.
fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
    let entries =
        fs::read_dir(dir).unwrap_or_else(|error| panic!("cannot list {}: {error}", dir.display()));
    for entry in entries {
        let path =
            entry.unwrap_or_else(|error| panic!("cannot list {}: {error}", dir.display())).path();
        if path.is_dir() {
            walk(&path, files);
        } else {
            files.push(path);
        }
    }
}

fn has_extension(path: &Path, extension: &str) -> bool {
    path.extension().is_some_and(|ext| ext == extension)
}

/// The expected verdict of a history: the name of its parent folder, which
/// must sit at `<recipe>/<fault>/<valid|invalid>/<name>.jsonl`.
fn expected_verdict(relative: &Path) -> Result<Verdict, String> {
    let parts: Vec<&str> =
        relative.components().map(|part| part.as_os_str().to_str().unwrap_or("")).collect();
    if parts.len() != 4 {
        return Err(format!(
            "not at <recipe>/<fault>/<valid|invalid>/<name>.jsonl ({} path components)",
            parts.len()
        ));
    }
    match parts[2] {
        "valid" => Ok(Verdict::Valid),
        "invalid" => Ok(Verdict::Invalid),
        other => {
            Err(format!("its folder is {other:?}; the third level must be `valid` or `invalid`"))
        }
    }
}

/// The checker names listed in a sidecar. Blank lines and lines starting with
/// `#` are ignored; names must be known checkers.
fn read_sidecar(path: &Path, known: &BTreeSet<&str>) -> Result<BTreeSet<String>, String> {
    let text = fs::read_to_string(path)
        .map_err(|error| format!("has no readable sidecar {}: {error}", path.display()))?;
    let mut names = BTreeSet::new();
    let mut unknown = Vec::new();
    for line in text.lines() {
        let name = line.trim();
        if name.is_empty() || name.starts_with('#') {
            continue;
        }
        if !known.contains(name) {
            unknown.push(name.to_string());
        }
        names.insert(name.to_string());
    }
    if !unknown.is_empty() {
        return Err(format!("sidecar names unknown checkers {unknown:?}; known: {known:?}"));
    }
    if names.is_empty() {
        return Err("sidecar lists no checker, but the file is in an `invalid` folder".to_string());
    }
    Ok(names)
}

/// The `index` of every event in the history: client invokes and completions,
/// and nemesis events.
fn event_indices(history: &History) -> BTreeSet<u64> {
    let mut indices: BTreeSet<u64> =
        history.nemesis_events().iter().map(|event| event.at.index).collect();
    for op in history.ops() {
        indices.insert(op.invoke.index);
        indices.extend(op.completion.map(|done| done.index));
    }
    indices
}

/// One line per checker, for failure messages.
fn describe(analysis: &Analysis) -> String {
    let mut text = format!("    overall: {}\n", analysis.verdict.as_str());
    for result in &analysis.results {
        let verdict = result.verdict.map_or("not applicable", Verdict::as_str);
        let _ = write!(text, "    {}: {verdict}", result.checker);
        if let Some(violation) = result.violations.first() {
            let _ = write!(
                text,
                " ({} violations; first: {:?}: {})",
                result.violation_count, violation.kind, violation.explanation
            );
        } else if let Some(reason) = &result.reason {
            let _ = write!(text, " ({reason})");
        }
        text.push('\n');
    }
    text
}

/// Checks one history against its folder and sidecar; returns what is wrong.
fn check_file(
    root: &Path,
    path: &Path,
    known: &BTreeSet<&str>,
    checkers: &[Box<dyn lockcheck_checker::Checker>],
) -> Result<(Verdict, Analysis), Vec<String>> {
    let relative = path.strip_prefix(root).unwrap_or(path);
    let expected = expected_verdict(relative).map_err(|problem| vec![problem])?;
    let expect_invalid: BTreeSet<String> = match expected {
        Verdict::Invalid => {
            read_sidecar(&path.with_extension("expect"), known).map_err(|problem| vec![problem])?
        }
        _ => BTreeSet::new(),
    };
    let file = File::open(path).map_err(|error| vec![format!("cannot open: {error}")])?;
    let history = read_history(BufReader::new(file), &relative.display().to_string())
        .map_err(|error| vec![format!("cannot be read: {error}")])?;
    let analysis = analyze(&history, checkers, &CheckOptions::default());
    let event_indices = event_indices(&history);

    let mut problems = Vec::new();
    if analysis.verdict != expected {
        problems.push(format!(
            "overall verdict is {}, the folder says {}",
            analysis.verdict.as_str(),
            expected.as_str()
        ));
    }
    for result in &analysis.results {
        let must_be_invalid = expect_invalid.contains(result.checker);
        match (must_be_invalid, result.verdict) {
            (true, Some(Verdict::Invalid)) | (false, Some(Verdict::Valid) | None) => {}
            (true, verdict) => problems.push(format!(
                "{} must be invalid, but is {}",
                result.checker,
                verdict.map_or("not applicable", Verdict::as_str)
            )),
            (false, Some(verdict)) => problems.push(format!(
                "{} must be valid or not applicable, but is {}",
                result.checker,
                verdict.as_str()
            )),
        }
        if result.verdict == Some(Verdict::Invalid) {
            if result.violations.is_empty() {
                problems.push(format!(
                    "{} is invalid but gives no violation as evidence",
                    result.checker
                ));
            }
            for violation in &result.violations {
                if violation.explanation.trim().is_empty() || violation.events.is_empty() {
                    problems.push(format!(
                        "{}: a {:?} violation lacks an explanation or events: {violation:?}",
                        result.checker, violation.kind
                    ));
                }
                if !violation.events.windows(2).all(|pair| pair[0] < pair[1]) {
                    problems.push(format!(
                        "{}: a {:?} violation's events {:?} are not ascending",
                        result.checker, violation.kind, violation.events
                    ));
                }
                let strangers: Vec<u64> = violation
                    .events
                    .iter()
                    .copied()
                    .filter(|index| !event_indices.contains(index))
                    .collect();
                if !strangers.is_empty() {
                    problems.push(format!(
                        "{}: a {:?} violation names events {strangers:?} that are not in the history",
                        result.checker, violation.kind
                    ));
                }
            }
        }
    }
    if problems.is_empty() {
        Ok((expected, analysis))
    } else {
        problems.push(format!("what the checkers said:\n{}", describe(&analysis)));
        Err(problems)
    }
}

#[test]
fn every_recorded_history_gets_the_verdict_its_folder_names() {
    let root = corpus_root();
    assert!(root.is_dir(), "the corpus {} is missing", root.display());
    let checkers = default_checkers();
    let known: BTreeSet<&str> = checkers.iter().map(|checker| checker.name()).collect();

    let mut files = Vec::new();
    walk(&root, &mut files);
    files.sort();

    let mut failures: Vec<String> = Vec::new();
    let mut checked = 0usize;
    let mut summary = String::new();
    for path in &files {
        let relative = path.strip_prefix(&root).unwrap_or(path).to_path_buf();
        if has_extension(path, "expect") {
            let history = path.with_extension("jsonl");
            if !history.is_file() {
                failures.push(format!(
                    "{}: sidecar without a history {}",
                    relative.display(),
                    history.file_name().unwrap_or_default().to_string_lossy()
                ));
            } else if expected_verdict(history.strip_prefix(&root).unwrap_or(&history))
                != Ok(Verdict::Invalid)
            {
                failures.push(format!(
                    "{}: sidecar next to a history that is not in an `invalid` folder",
                    relative.display()
                ));
            }
            continue;
        }
        if !has_extension(path, "jsonl") {
            continue; // README.md and the like
        }
        checked += 1;
        match check_file(&root, path, &known, &checkers) {
            Ok((expected, analysis)) => {
                let invalid: Vec<&str> = analysis
                    .results
                    .iter()
                    .filter(|result| result.verdict == Some(Verdict::Invalid))
                    .map(|result| result.checker)
                    .collect();
                let _ = writeln!(
                    summary,
                    "ok  {:<7} {}{}",
                    expected.as_str(),
                    relative.display(),
                    if invalid.is_empty() {
                        String::new()
                    } else {
                        format!("  [{}]", invalid.join(", "))
                    }
                );
            }
            Err(problems) => {
                let _ = writeln!(summary, "BAD         {}", relative.display());
                failures.push(format!("{}:\n  - {}", relative.display(), problems.join("\n  - ")));
            }
        }
    }
    println!("{summary}");

    assert!(
        checked >= MIN_FILES,
        "only {checked} histories found under {}; the corpus must hold at least {MIN_FILES}",
        root.display()
    );
    if !failures.is_empty() {
        panic!(
            "{} of {checked} corpus files disagree with their expected verdicts:\n\n{}\n",
            failures.len(),
            failures.join("\n\n")
        );
    }
}
