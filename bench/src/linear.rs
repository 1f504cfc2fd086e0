//! `bench --only porcupine,lease`: the linearizability checker on
//! porcupine's own test histories, and on a large fenced-lease history.

use std::fs;
use std::path::Path;
use std::time::Instant;

use lockcheck_checker::import::{import, Imported, InputFormat, ModelChoice};
use lockcheck_checker::synth::{generate, SynthOptions};
use lockcheck_checker::{
    analyze, analyze_imported, default_checkers, CheckOptions, Checker, HistoryBuilder,
    Linearizability, Verdict,
};

use crate::{BenchError, BenchOptions, Outcome};

/// The best of `runs` timings of `work`, in seconds, and its last result.
fn best_of<T>(runs: u32, mut work: impl FnMut() -> T) -> (f64, T) {
    let mut best = f64::INFINITY;
    let mut result = None;
    for _ in 0..runs.max(1) {
        let started = Instant::now();
        let value = work();
        best = best.min(started.elapsed().as_secs_f64());
        result = Some(value);
    }
    (best, result.expect("at least one run"))
}

/// A `VERDICTS.txt` of porcupine's test data: `name verdict` lines,
/// verdict `linearizable` or `not-linearizable`; blank lines are skipped.
pub fn expected_verdicts(dir: &Path) -> Result<Vec<(String, Verdict)>, String> {
    let path = dir.join("VERDICTS.txt");
    let text = fs::read_to_string(&path)
        .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
    let mut verdicts = Vec::new();
    for (number, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |why: &str| format!("{}:{}: {why}: {line:?}", path.display(), number + 1);
        let (name, verdict) =
            line.split_once(char::is_whitespace).ok_or_else(|| bad("expected `file verdict`"))?;
        let verdict = match verdict.trim() {
            "linearizable" => Verdict::Valid,
            "not-linearizable" => Verdict::Invalid,
            _ => return Err(bad("the verdict must be linearizable or not-linearizable")),
        };
        verdicts.push((name.to_string(), verdict));
    }
    Ok(verdicts)
}

/// Totals over a set of files: parse+check seconds, check-only seconds, and
/// verdicts that disagree with the expected ones.
#[derive(Default)]
struct Totals {
    total_s: f64,
    check_s: f64,
    files: usize,
    ops: usize,
    wrong: Vec<String>,
}

fn measure(
    path: &Path,
    format: InputFormat,
    model: ModelChoice,
    expected: Verdict,
    runs: u32,
    totals: &mut Totals,
) -> Result<(usize, f64, f64, Verdict), BenchError> {
    let text = fs::read_to_string(path).map_err(BenchError::file("read", path))?;
    let source = path.display().to_string();
    let options = CheckOptions { linearizability_time_limit: None, ..CheckOptions::default() };
    let checkers = default_checkers();
    let parse = || import(format, &text, &source, model);
    let imported = parse().map_err(|error| BenchError::Failed(error.to_string()))?;
    let ops = match &imported {
        Imported::Register { operations, .. } => operations.len(),
        Imported::Kv { operations, .. } => operations.len(),
        Imported::Locks(history) => history.ops().len(),
    };
    let (check_s, verdict) =
        best_of(runs, || analyze_imported(&imported, &checkers, &options).verdict);
    let (total_s, _) = best_of(runs, || {
        let imported = parse().expect("parsed once already");
        analyze_imported(&imported, &checkers, &options).verdict
    });
    totals.total_s += total_s;
    totals.check_s += check_s;
    totals.files += 1;
    totals.ops += ops;
    if verdict != expected {
        totals.wrong.push(format!("{}: expected {expected:?}, found {verdict:?}", path.display()));
    }
    Ok((ops, total_s, check_s, verdict))
}

pub fn porcupine(args: &BenchOptions) -> Result<Outcome, BenchError> {
    let Some(corpus) = &args.porcupine else {
        println!(
            "porcupine: skipped (give --porcupine DIR, a copy of porcupine's test data: see docs/analyze.md)"
        );
        return Ok(Outcome::Valid);
    };
    let runs = args.runs.max(5);
    println!(
        "linearizability on porcupine's test histories ({}), best of {runs} runs per file",
        corpus.display()
    );
    println!(
        "{:<28} {:>6} {:>16} {:>12} {:>12}",
        "file (model)", "ops", "verdict", "parse+check", "check"
    );
    let mut etcd = Totals::default();
    let etcd_dir = corpus.join("jepsen");
    for (name, expected) in expected_verdicts(&etcd_dir).map_err(BenchError::Failed)? {
        let (ops, total_s, check_s, verdict) = measure(
            &etcd_dir.join(&name),
            InputFormat::JepsenLog,
            ModelChoice::CasRegister,
            expected,
            runs,
            &mut etcd,
        )?;
        if total_s > 0.001 {
            println!(
                "{:<28} {ops:>6} {:>16} {:>10.2}ms {:>10.2}ms",
                name,
                verdict_name(verdict),
                total_s * 1e3,
                check_s * 1e3
            );
        }
    }
    println!("(files under 1 ms not listed)");
    let mut kv = Totals::default();
    let kv_dir = corpus.join("kv");
    for (name, expected) in expected_verdicts(&kv_dir).map_err(BenchError::Failed)? {
        // As porcupine's tests: every file per key, the 1- and 10-client files whole too.
        let mut models = vec![ModelChoice::Kv];
        if !name.starts_with("c50") {
            models.push(ModelChoice::KvUnpartitioned);
        }
        for model in models {
            let (ops, total_s, check_s, verdict) = measure(
                &kv_dir.join(&name),
                InputFormat::PorcupineKv,
                model,
                expected,
                runs,
                &mut kv,
            )?;
            let label = format!("{name} ({model})");
            println!(
                "{:<28} {ops:>6} {:>16} {:>10.2}ms {:>10.2}ms",
                label,
                verdict_name(verdict),
                total_s * 1e3,
                check_s * 1e3
            );
        }
    }
    for (label, totals) in [("etcd", &etcd), ("kv", &kv)] {
        println!(
            "total {label}: {} checks, {} ops, parse+check {:.3} s, check only {:.3} s, verdicts {}",
            totals.files,
            totals.ops,
            totals.total_s,
            totals.check_s,
            if totals.wrong.is_empty() { "all as expected".to_string() } else { format!("{} WRONG", totals.wrong.len()) }
        );
        for wrong in &totals.wrong {
            println!("  wrong: {wrong}");
        }
    }
    Ok(if etcd.wrong.is_empty() && kv.wrong.is_empty() { Outcome::Valid } else { Outcome::Invalid })
}

fn verdict_name(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Valid => "linearizable",
        Verdict::Invalid => "not linearizable",
        Verdict::Unknown => "unknown",
    }
}

pub fn lease(args: &BenchOptions) -> Result<Outcome, BenchError> {
    let options = SynthOptions {
        ops: args.lease_ops,
        clients: args.clients,
        keys: args.keys,
        seed: args.seed,
        ..SynthOptions::default()
    };
    println!(
        "linearizability on a fenced-lease history: {} ops, {} clients, {} keys, seed {}, best of {} runs",
        options.ops, options.clients, options.keys, options.seed, args.runs
    );
    let events = generate(&options);
    let mut builder = HistoryBuilder::with_capacity(events.len());
    for event in &events {
        builder
            .push(event)
            .map_err(|error| BenchError::Failed(format!("synthetic history: {error}")))?;
    }
    drop(events);
    let history = builder.finish();
    let check_options =
        CheckOptions { linearizability_time_limit: None, ..CheckOptions::default() };
    let (lin_s, result) = best_of(args.runs, || Linearizability.check(&history, &check_options));
    let (all_s, analysis) =
        best_of(args.runs, || analyze(&history, &default_checkers(), &check_options));
    println!(
        "linearizability: {:.3} s ({:.0} ops/s), verdict {}; all checkers: {:.3} s, verdict {}",
        lin_s,
        history.ops().len() as f64 / lin_s,
        result.verdict.map_or("n/a", Verdict::as_str),
        all_s,
        analysis.verdict.as_str()
    );
    Ok(if analysis.verdict == Verdict::Valid { Outcome::Valid } else { Outcome::Invalid })
}
