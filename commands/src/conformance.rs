//! `lockcheck conformance --porcupine DIR`: lockcheck's linearizability
//! checker on porcupine's own test histories, each verdict compared with the
//! one porcupine's test suite asserts (the corpus' `VERDICTS.txt`). The
//! corpus is not part of this repository: the user (or CI) names where it is.

use std::fs;
use std::path::Path;
use std::process::ExitCode;

use lockcheck_bench::expected_verdicts;
use lockcheck_checker::import::{import, Imported, InputFormat, ModelChoice};
use lockcheck_checker::linear::models::CasRegister;
use lockcheck_checker::linear::{check_parts, PartOutcome, SearchLimits};
use lockcheck_checker::{analyze_imported, default_checkers, CheckOptions, Verdict};

use crate::exit;
use crate::ConformanceRequest;

/// The folder of each corpus part under DIR, and its input format.
const PARTS: [(&str, InputFormat); 2] =
    [("jepsen", InputFormat::JepsenLog), ("kv", InputFormat::PorcupineKv)];

/// The models each file is checked with, as porcupine's tests do: a CAS
/// register for the etcd logs; key-value files per key, and the 1- and
/// 10-client ones whole too (whole, the 50-client ones take far too long).
fn models(format: InputFormat, name: &str) -> Vec<ModelChoice> {
    match format {
        InputFormat::PorcupineKv if name.starts_with("c50") => vec![ModelChoice::Kv],
        InputFormat::PorcupineKv => vec![ModelChoice::Kv, ModelChoice::KvUnpartitioned],
        _ => vec![ModelChoice::CasRegister],
    }
}

fn verdict_word(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Valid => "linearizable",
        Verdict::Invalid => "not-linearizable",
        Verdict::Unknown => "unknown",
    }
}

/// One file under one model: `None` when lockcheck agrees, else what it found.
fn disagreement(
    path: &Path,
    format: InputFormat,
    model: ModelChoice,
    expected: Verdict,
    options: &CheckOptions,
) -> Option<String> {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) => return Some(format!("cannot read it: {error}")),
    };
    let imported = match import(format, &text, &path.display().to_string(), model) {
        Ok(imported) => imported,
        Err(error) => return Some(format!("cannot import it: {error}")),
    };
    let found = analyze_imported(&imported, &default_checkers(), options).verdict;
    if found != expected {
        return Some(format!("lockcheck found {}", verdict_word(found)));
    }
    // The windowed cache, which only long parts use by default, must reach
    // the same verdict on every register history.
    if let Imported::Register { operations, .. } = &imported {
        let limits = SearchLimits { window_from_ops: 0, ..options.search_limits() };
        let parts = check_parts(&CasRegister, operations, &limits);
        let linearizable = parts.iter().all(|part| part.outcome == PartOutcome::Linearizable);
        if linearizable != (expected == Verdict::Valid) {
            return Some(format!(
                "the windowed search found {}",
                if linearizable { "linearizable" } else { "not-linearizable" }
            ));
        }
    }
    None
}

pub fn run(args: &ConformanceRequest) -> anyhow::Result<ExitCode> {
    let root = &args.porcupine;
    let present: Vec<_> = PARTS
        .iter()
        .filter(|(folder, _)| root.join(folder).join("VERDICTS.txt").is_file())
        .collect();
    if present.is_empty() {
        eprintln!(
            "lockcheck: {} holds neither jepsen/VERDICTS.txt nor kv/VERDICTS.txt: give --porcupine the folder of porcupine's test data",
            root.display()
        );
        return Ok(exit::USAGE.into());
    }
    let options = CheckOptions {
        linearizability_time_limit: Some(args.linearizability_timeout),
        ..CheckOptions::default()
    };
    println!("linearizability conformance on porcupine's test histories ({})", root.display());
    let mut disagreements = Vec::new();
    for (folder, format) in present {
        let dir = root.join(folder);
        let expected = match expected_verdicts(&dir) {
            Ok(expected) => expected,
            Err(message) => {
                eprintln!("lockcheck: {message}");
                return Ok(exit::BAD_INPUT.into());
            }
        };
        let (mut checks, mut not_linearizable, mut wrong) = (0, 0, 0);
        for (name, verdict) in &expected {
            not_linearizable += usize::from(*verdict == Verdict::Invalid);
            for model in models(*format, name) {
                checks += 1;
                let path = dir.join(name);
                if let Some(found) = disagreement(&path, *format, model, *verdict, &options) {
                    wrong += 1;
                    disagreements.push(format!(
                        "{folder}/{name} ({model}): VERDICTS.txt says {}, {found}",
                        verdict_word(*verdict)
                    ));
                }
            }
        }
        println!(
            "{folder}: {} files ({not_linearizable} not linearizable), {checks} checks, {}",
            expected.len(),
            if wrong == 0 {
                "every verdict agrees".to_string()
            } else {
                format!("{wrong} DISAGREE")
            }
        );
    }
    for line in &disagreements {
        println!("disagrees: {line}");
    }
    Ok(if disagreements.is_empty() { exit::VALID } else { exit::INVALID }.into())
}
