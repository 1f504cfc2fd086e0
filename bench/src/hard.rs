//! `bench --only one-lock,hard`: long histories of a single lock,
//! sequential and contended, and hard mutex histories with crashed
//! operations (`info`). Each history is written to a file and checked by a
//! child `lockcheck analyze`, so that its peak memory is its own; with
//! `--compare-with CMD` another checker (porcupine, say) runs on the same
//! files beside it.

use std::fs::{self, File};
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use lockcheck_checker::synth_hard::{generate, HardOptions};
use lockcheck_checker::{write_events, Verdict};

use crate::child::analyze_child;
use crate::{BenchError, BenchOptions, Outcome};

/// The rows of the hard table: operations, clients, percent crashed.
const HARD_ROWS: [(usize, u32, f64); 8] = [
    (20_000, 10, 0.0),
    (20_000, 30, 0.0),
    (2_000, 10, 5.0),
    (5_000, 10, 1.0),
    (5_000, 10, 5.0),
    (20_000, 10, 1.0),
    (20_000, 10, 5.0),
    (100_000, 10, 5.0),
];

fn folder(args: &BenchOptions) -> Result<PathBuf, BenchError> {
    let dir = match &args.dir {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!("lockcheck-bench-hard-{}", std::process::id())),
    };
    fs::create_dir_all(&dir).map_err(BenchError::file("create", &dir))?;
    Ok(dir)
}

fn write(dir: &Path, options: &HardOptions) -> Result<PathBuf, BenchError> {
    let path = dir.join(format!(
        "mutex-{}-c{}-info{}-s{}.jsonl",
        options.ops, options.clients, options.info_percent, options.seed
    ));
    let events = generate(options);
    let file = File::create(&path).map_err(BenchError::file("create", &path))?;
    write_events(BufWriter::with_capacity(1 << 20, file), &events)
        .map_err(BenchError::file("write", &path))?;
    Ok(path)
}

/// `--compare-with CMD FILE` through the shell: its wall time and the first
/// line it printed.
fn compare(command: &str, path: &Path) -> String {
    let started = Instant::now();
    let output = Command::new("sh")
        .arg("-c")
        .arg(format!("{command} \"$1\""))
        .arg("sh")
        .arg(path)
        .stdin(Stdio::null())
        .output();
    let wall = started.elapsed().as_secs_f64();
    match output {
        Ok(output) => {
            let stdout = String::from_utf8_lossy(&output.stdout);
            let said = stdout.lines().next().unwrap_or("").trim().to_string();
            format!("{wall:.2} s, exit {}, {said:?}", output.status.code().unwrap_or(-1))
        }
        Err(error) => format!("cannot run: {error}"),
    }
}

fn row(
    args: &BenchOptions,
    dir: &Path,
    options: &HardOptions,
    label: &str,
) -> Result<bool, BenchError> {
    let path = write(dir, options)?;
    let bound = format!("--linearizability-timeout={}ms", args.hard_timeout.as_millis());
    let (found, checked) = analyze_child(args, &path, &[bound])?;
    let verdict = match found {
        Verdict::Valid => "valid",
        Verdict::Invalid => "INVALID",
        Verdict::Unknown => "unknown",
    };
    let mut line = format!(
        "{:>10} ops {:>3} clients {:>4}% info {label:<10}: {:<7} read {:.2} s, check {:.2} s, peak {:.0} MB",
        options.ops,
        options.clients,
        options.info_percent,
        verdict,
        checked.read_s,
        checked.check_s,
        checked.peak_rss_bytes as f64 / (1 << 20) as f64
    );
    if let Some(command) = &args.compare_with {
        line.push_str(&format!("; {command}: {}", compare(command, &path)));
    }
    println!("{line}");
    if args.dir.is_none() {
        let _ = fs::remove_file(&path);
    }
    Ok(found == Verdict::Valid)
}

fn finish(args: &BenchOptions, dir: &Path, all_valid: bool) -> Outcome {
    if args.dir.is_none() {
        let _ = fs::remove_dir(dir);
    } else {
        println!("the histories are in {}", dir.display());
    }
    if all_valid {
        Outcome::Valid
    } else {
        Outcome::Unknown
    }
}

/// Long histories of one lock: one client (sequential) and 8 (contended).
pub fn one_lock(args: &BenchOptions) -> Result<Outcome, BenchError> {
    let dir = folder(args)?;
    println!(
        "one lock, long histories (every one linearizable), bound {} s",
        args.hard_timeout.as_secs()
    );
    let mut all_valid = true;
    for &ops in &args.one_lock_ops {
        for (label, clients) in [("sequential", 1), ("contended", 8)] {
            let options = HardOptions { ops, clients, info_percent: 0.0, seed: args.seed };
            all_valid &= row(args, &dir, &options, label)?;
        }
    }
    Ok(finish(args, &dir, all_valid))
}

/// Hard mutex histories: many clients, effects at random instants, crashes.
pub fn hard(args: &BenchOptions) -> Result<Outcome, BenchError> {
    let dir = folder(args)?;
    println!(
        "hard mutex histories of one lock (every one linearizable), bound {} s",
        args.hard_timeout.as_secs()
    );
    let mut all_valid = true;
    for (ops, clients, info_percent) in HARD_ROWS {
        let options = HardOptions { ops, clients, info_percent, seed: args.seed };
        all_valid &= row(args, &dir, &options, "hard")?;
    }
    Ok(finish(args, &dir, all_valid))
}
