//! `lockcheck check`: run a test against a (simulated) backend and check it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use lockcheck_checker::{write_events, Analysis, Verdict};
use lockcheck_reports::Analyzed;
use lockcheck_sim::{check_run, run_recorded, shrink, RunOptions, SimError, SimRun, Simulated};
use lockcheck_workloads::interrupt::{self, hold_before};
use lockcheck_workloads::memory::{self, format_size};
use lockcheck_workloads::HistoryFile;

use crate::exit;
use crate::output::{print, render, work_done};
use crate::{CheckRequest, Format};
use lockcheck_runs::Progress;
use lockcheck_runs::{interrupted_at, last_words, stored_so_far, Stored};

/// `lockcheck check` on a simulated backend (`main` sends a real one to
/// `crate::real`).
pub fn run(args: &CheckRequest) -> anyhow::Result<ExitCode> {
    let base = args.options.clone();
    if let Err(message) = memory_budget(args.max_memory, &base) {
        eprintln!("lockcheck: {message}");
        return Ok(exit::USAGE.into());
    }
    let first_seed = base.seed;
    let seeds = args.seeds;
    let mut worst = Verdict::Valid;
    let mut tally: Vec<(u64, Verdict)> = Vec::new();
    // JUnit and Markdown print one document for every seed, at the end.
    let mut collected: Vec<(String, Analysis)> = Vec::new();
    let progress = Progress::count(seeds, "seeds");
    let mut so_far = SoFar::default();
    for seed in first_seed..first_seed.saturating_add(seeds) {
        let options = RunOptions { seed, swarm: seeds > 1 || base.swarm, ..base.clone() };
        if let Some(signal) = interrupt::signal() {
            return Ok(interrupted_at(signal, &seen(&tally, seed, "before seed")));
        }
        progress.suspend(|| eprintln!("seed: {seed}"));
        let stored = match &args.store {
            None => None,
            Some(store) => Some(store_begin(store, &options)?),
        };
        last_words(seed, stored.as_ref());
        let history = stored.as_ref().map(|stored| stored.history.clone());
        let stopped = |signal| {
            let detail =
                format!("{}; {}", seen(&tally, seed, "at seed"), stored_so_far(stored.as_ref()));
            Ok(interrupted_at(signal, &detail))
        };
        let sim = match simulate(&options, history, &progress, &so_far) {
            Err(_) if interrupt::requested() => return stopped(interrupt::signal().unwrap_or(0)),
            Err(error) if matches!(error.downcast_ref(), Some(SimError::OverBudget { .. })) => {
                drop(progress);
                let over = error.downcast_ref::<SimError>().map(ToString::to_string);
                eprintln!(
                    "lockcheck: seed {seed}: {}; {}; give fewer --clients or a shorter \
                     --time-limit, or a larger --max-memory",
                    over.unwrap_or_default(),
                    stored_so_far(stored.as_ref())
                );
                interrupt::set_last_words(None);
                return Ok(exit::UNKNOWN.into());
            }
            sim => sim?,
        };
        let recorded_rss = memory::resident_bytes().unwrap_or_default();
        hold_before("check");
        progress.message(format!("seed {seed}: checking the history; {}", so_far.describe()));
        let analysis = check(&sim, &options)?;
        if args.stats {
            progress.suspend(|| {
                eprintln!(
                    "stats: seed={seed} events={} simulated_s={:.3} wall_s={:.3} \
                     recorded_rss_bytes={recorded_rss} peak_rss_bytes={}",
                    sim.events.len(),
                    sim.stats.simulated_s,
                    sim.stats.wall_s,
                    memory::peak_resident_bytes().unwrap_or_default()
                )
            });
        }
        if let Some(signal) = interrupt::signal() {
            return stopped(signal);
        }
        hold_before("store");
        let dir = match &stored {
            Some(stored) => Some(store_finish(&options, &sim, &analysis, stored)?),
            None => None,
        };
        interrupt::set_last_words(None);
        progress.suspend(|| report(args, &options, &sim, &analysis, dir.as_deref()))?;
        if matches!(args.format, Format::Junit | Format::Markdown) {
            let source = format!("{} seed {seed}", options.backend.sim_name());
            collected.push((source, analysis.clone()));
        }
        let first_failure = analysis.verdict == Verdict::Invalid && worst != Verdict::Invalid;
        so_far.lock_ops += sim.stats.lock_ops;
        so_far.not_valid += u64::from(analysis.verdict != Verdict::Valid);
        if first_failure && args.shrink {
            progress.message(format!("seed {seed}: shrinking the failure; {}", so_far.describe()));
            let shrunk = shrink_failure(&options, &sim, &analysis, dir.as_deref(), &progress);
            if let Err(error) = shrunk {
                match interrupt::signal() {
                    Some(signal) => {
                        let detail = format!(
                            "{}, shrinking its failure; {}",
                            seen(&tally, seed, "at seed"),
                            stored_so_far(stored.as_ref())
                        );
                        return Ok(interrupted_at(signal, &detail));
                    }
                    None => return Err(error),
                }
            }
        }
        let gated = exit::gated(&analysis, &base.gate);
        let source = format!("seed {seed}");
        worst =
            worst.combine(exit::require_coverage(&analysis, gated, args.require_coverage, &source));
        tally.push((seed, analysis.verdict));
        progress.inc();
    }
    drop(progress);
    if !collected.is_empty() {
        let analyzed: Vec<Analyzed> =
            collected.iter().map(|(source, analysis)| Analyzed { source, analysis }).collect();
        print(&render(args.format, worst, &analyzed, None, None))?;
    }
    if seeds > 1 {
        let count =
            |wanted: Verdict| tally.iter().filter(|(_, verdict)| *verdict == wanted).count();
        let failing: Vec<String> = tally
            .iter()
            .filter(|(_, verdict)| *verdict != Verdict::Valid)
            .map(|(seed, _)| seed.to_string())
            .collect();
        eprintln!(
            "seeds: {} run, {} valid, {} invalid, {} unknown{}",
            tally.len(),
            count(Verdict::Valid),
            count(Verdict::Invalid),
            count(Verdict::Unknown),
            if failing.is_empty() {
                String::new()
            } else {
                format!("; not valid: {}", failing.join(" "))
            }
        );
    }
    Ok(exit::for_verdict(worst).into())
}

/// What the seeds run so far did, for the progress line.
#[derive(Debug, Default)]
struct SoFar {
    lock_ops: u64,
    not_valid: u64,
}

impl SoFar {
    fn describe(&self) -> String {
        format!("{} lock ops, {} not valid so far", self.lock_ops, self.not_valid)
    }
}

/// Sets the process's memory budget (`--max-memory`, or three quarters of
/// the machine), and refuses a run whose estimate does not fit in it.
fn memory_budget(max_memory: Option<u64>, options: &RunOptions) -> Result<(), String> {
    let machine = memory::machine_bytes();
    if let (Some(asked), Some(machine)) = (max_memory, machine) {
        if asked > machine {
            return Err(format!(
                "--max-memory {} is more than this machine has ({})",
                format_size(asked),
                format_size(machine)
            ));
        }
    }
    let budget = max_memory.or_else(memory::default_budget);
    memory::set_budget(budget);
    let (Some(budget), need) = (budget, options.memory_estimate()) else { return Ok(()) };
    if need <= budget {
        return Ok(());
    }
    let whose = match max_memory {
        Some(_) => "--max-memory".to_string(),
        None => {
            format!("three quarters of this machine's {}", format_size(machine.unwrap_or_default()))
        }
    };
    Err(format!(
        "this run needs about {} ({} clients for {} simulated s: about {} per client and {} \
         per client and simulated second), more than its memory budget of {} ({whose}): give fewer \
         --clients or a shorter --time-limit, or a larger --max-memory",
        format_size(need),
        options.clients,
        options.time_limit.as_secs_f64(),
        format_size(lockcheck_sim::BYTES_PER_CLIENT),
        format_size(lockcheck_sim::BYTES_PER_CLIENT_SECOND),
        format_size(budget),
    ))
}

fn simulate(
    options: &RunOptions,
    history: Option<HistoryFile>,
    progress: &Progress,
    so_far: &SoFar,
) -> anyhow::Result<SimRun> {
    let total = options.time_limit.as_secs_f64();
    let mut report = |now: Duration| {
        progress.message(format!(
            "seed {}: simulated {:.0}/{total:.0} s; {}",
            options.seed,
            now.as_secs_f64(),
            so_far.describe()
        ));
    };
    report(Duration::ZERO);
    run_recorded(options, &mut report, history).context("the simulation failed")
}

/// Checks a simulated run's history as `run` asks.
pub fn check(sim: &SimRun, run: &RunOptions) -> anyhow::Result<Analysis> {
    let options = run.checks();
    // A malformed simulated history is a bug in lockcheck, not a verdict.
    check_run(sim, &options).context("the simulator recorded a malformed history")
}

/// Looks for a smaller run that fails the same way, and says how to replay
/// it (and stores its history beside the run's).
fn shrink_failure(
    options: &RunOptions,
    sim: &SimRun,
    analysis: &Analysis,
    dir: Option<&Path>,
    progress: &Progress,
) -> anyhow::Result<()> {
    let check_options = options.checks();
    let shrunk = shrink(options, analysis, sim.events.len(), &check_options, SHRINK_BUDGET)?;
    if shrunk.options == *options {
        progress.suspend(|| {
            eprintln!("shrink: no smaller run fails the same way ({} tried)", shrunk.attempts)
        });
        return Ok(());
    }
    progress.suspend(|| {
        eprintln!(
            "shrink: {} events instead of {} ({} runs tried); replay: {}",
            shrunk.events,
            sim.events.len(),
            shrunk.attempts,
            replay_command(&shrunk.options)
        )
    });
    if let (Some(dir), Some(history)) = (dir, &shrunk.history) {
        let command = format!("{}\n", replay_command(&shrunk.options));
        lockcheck_runs::write_file(&dir.join("shrunk-history.jsonl"), |out| {
            write_events(out, history)
        })?;
        lockcheck_runs::write_file(&dir.join("shrunk-command"), |out| {
            out.write_all(command.as_bytes())
        })?;
    }
    Ok(())
}

/// Runs a shrink may try.
const SHRINK_BUDGET: u32 = 60;

/// The command that replays this run exactly.
fn replay_command(options: &RunOptions) -> String {
    crate::program::replay_line(&options.replay())
}

/// Makes the seed's store folder, for its history to be written as the
/// simulation records it.
fn store_begin(store: &Path, options: &RunOptions) -> anyhow::Result<Stored> {
    let test = format!("{}-{}", options.backend.sim_name(), options.workload.name());
    Ok(lockcheck_runs::begin(store, &test, options.seed, &replay_command(options))?)
}

fn store_finish(
    options: &RunOptions,
    sim: &SimRun,
    analysis: &Analysis,
    stored: &Stored,
) -> anyhow::Result<PathBuf> {
    let title = format!("{} seed {}", options.backend.sim_name(), options.seed);
    Ok(lockcheck_runs::finish(
        stored,
        &lockcheck_runs::Run {
            events: &sim.events,
            analysis,
            command: &replay_command(options),
            title: &title,
        },
    )?)
}

/// `at seed 17 (16 seeds checked before it: 14 valid, 2 invalid, 0 unknown)`.
fn seen(tally: &[(u64, Verdict)], seed: u64, at: &str) -> String {
    if tally.is_empty() {
        return format!("{at} {seed}");
    }
    let count = |wanted: Verdict| tally.iter().filter(|(_, verdict)| *verdict == wanted).count();
    format!(
        "{at} {seed} ({} seeds checked before it: {} valid, {} invalid, {} unknown)",
        tally.len(),
        count(Verdict::Valid),
        count(Verdict::Invalid),
        count(Verdict::Unknown)
    )
}

/// Prints one seed's report: the text and JSON formats per seed; JUnit and
/// Markdown once for all seeds, by `run`, so that the document stays whole.
fn report(
    args: &CheckRequest,
    options: &RunOptions,
    sim: &SimRun,
    analysis: &Analysis,
    dir: Option<&Path>,
) -> anyhow::Result<()> {
    if matches!(args.format, Format::Junit | Format::Markdown) {
        return Ok(());
    }
    let source = format!("{} seed {}", options.backend.sim_name(), options.seed);
    let analyzed = Analyzed { source: &source, analysis };
    let html = dir.map(|dir| dir.join("report.html").display().to_string());
    let mut text =
        render(args.format, analysis.verdict, &[analyzed], Some(&sim.events), html.as_deref());
    if args.format == Format::Text {
        let faults: Vec<&str> = sim.faults.iter().map(|kind| kind.name()).collect();
        text.push_str(&format!(
            "simulated {:.1} s in {:.2} s wall ({:.0}x), {}; faults: {}\n",
            sim.stats.simulated_s,
            sim.stats.wall_s,
            sim.stats.simulated_s / sim.stats.wall_s.max(1e-9),
            work_done(&sim.events, sim.stats.wall_s),
            if faults.is_empty() { "none".to_string() } else { faults.join(", ") },
        ));
        if let Some(dir) = dir {
            text.push_str(&format!("stored in {}\n", dir.display()));
        }
        if analysis.verdict != Verdict::Valid {
            text.push_str(&format!("replay: {}\n", replay_command(options)));
        }
    }
    print(&text)
}
