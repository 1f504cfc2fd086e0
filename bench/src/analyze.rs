//! `bench --only analyze`: how fast `analyze` checks large synthetic
//! histories, and how much memory it needs. Each measurement runs
//! `lockcheck analyze --stats` in a child process, so the peak memory is
//! that of the analysis alone, not of generating the history.

use std::fs::{self, File};
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::time::Instant;

use lockcheck_checker::synth::{generate, SynthOptions};
use lockcheck_checker::{write_events, Verdict};

use crate::child::{analyze_child, Run};
use crate::{BenchError, BenchOptions, Outcome};

pub fn analyze(options: &BenchOptions) -> Result<Outcome, BenchError> {
    let dir = match &options.dir {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!("lockcheck-bench-{}", std::process::id())),
    };
    fs::create_dir_all(&dir).map_err(BenchError::file("create", &dir))?;
    println!(
        "analyze on synthetic fenced histories: {} clients, {} keys, seed {}, best of {} runs",
        options.clients, options.keys, options.seed, options.runs
    );
    println!(
        "{:>10} {:>10} {:>9} {:>8} {:>8} {:>8} {:>10} {:>9} {:>12}",
        "ops",
        "events",
        "file MB",
        "read s",
        "check s",
        "total s",
        "peak MB",
        "bytes/op",
        "check ops/s"
    );
    for &ops in &options.ops {
        let path = write_history(&dir, options, ops)?;
        let file_mb =
            fs::metadata(&path).map_err(BenchError::file("read", &path))?.len() as f64 / 1e6;
        let mut best: Option<Run> = None;
        for _ in 0..options.runs.max(1) {
            let run = analyze_in_child(options, &path)?;
            if best.is_none_or(|best| run.read_s + run.check_s < best.read_s + best.check_s) {
                best = Some(run);
            }
        }
        let Some(best) = best else { continue };
        println!(
            "{:>10} {:>10} {:>9.1} {:>8.3} {:>8.3} {:>8.3} {:>10.1} {:>9.0} {:>12.0}",
            ops,
            best.events,
            file_mb,
            best.read_s,
            best.check_s,
            best.read_s + best.check_s,
            best.peak_rss_bytes as f64 / 1e6,
            best.peak_rss_bytes as f64 / ops as f64,
            ops as f64 / best.check_s
        );
        if options.dir.is_none() {
            let _ = fs::remove_file(&path);
        }
    }
    if options.dir.is_none() {
        let _ = fs::remove_dir(&dir);
    }
    Ok(Outcome::Valid)
}

fn write_history(dir: &Path, options: &BenchOptions, ops: usize) -> Result<PathBuf, BenchError> {
    let path = dir.join(format!(
        "synth-{ops}-c{}-k{}-s{}.jsonl",
        options.clients, options.keys, options.seed
    ));
    let started = Instant::now();
    let events = generate(&SynthOptions {
        ops,
        clients: options.clients,
        keys: options.keys,
        seed: options.seed,
        ..SynthOptions::default()
    });
    let file = File::create(&path).map_err(BenchError::file("create", &path))?;
    write_events(BufWriter::with_capacity(1 << 20, file), &events)
        .map_err(BenchError::file("write", &path))?;
    eprintln!(
        "generated {} ({} events) in {:.2} s",
        path.display(),
        events.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(path)
}

fn analyze_in_child(options: &BenchOptions, path: &Path) -> Result<Run, BenchError> {
    match analyze_child(options, path, &[])? {
        (Verdict::Valid, run) => Ok(run),
        (verdict, _) => Err(BenchError::Failed(format!(
            "the synthetic history was not found valid (exit {})",
            verdict_exit(verdict)
        ))),
    }
}

/// The exit code `lockcheck analyze` gives a verdict.
fn verdict_exit(verdict: Verdict) -> u8 {
    match verdict {
        Verdict::Valid => 0,
        Verdict::Invalid => 1,
        Verdict::Unknown => 2,
    }
}
