//! `lockcheck check`: run a test against a (simulated) backend and check it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use lockcheck_checker::{write_events, Analysis, CheckOptions, Verdict};
use lockcheck_reports::Analyzed;
use lockcheck_sim::{check_run, run_recorded, shrink, SimOptions, SimRun};
use lockcheck_workloads::{interrupt, HistoryFile};

use crate::args::{CheckArgs, Format};
use crate::exit;
use crate::output::{print, render};
use crate::progress::Progress;
use crate::store::Stored;

pub fn run(args: &CheckArgs) -> anyhow::Result<ExitCode> {
    // Ctrl-C, SIGTERM or SIGHUP at any moment of a check: the servers are
    // stopped, the history so far is kept, the exit code is 128 + the
    // signal (see `interrupt`).
    if let Err(reason) = interrupt::install_cooperative() {
        anyhow::bail!("cannot catch signals: {reason}");
    }
    if let Some(backend) = crate::real::RealBackend::parse(&args.backend) {
        // A replay's masked URLs come from the environment.
        let args = match args.with_secrets() {
            Ok(args) => args,
            Err(message) => {
                eprintln!("lockcheck: {message}");
                return Ok(exit::USAGE.into());
            }
        };
        return crate::real::run(&args, backend);
    }
    let base = match args.sim_options() {
        Ok(options) => options,
        Err(message) => {
            eprintln!("lockcheck: {message}");
            return Ok(exit::USAGE.into());
        }
    };
    if let Err(message) = exit::check_gate(&args.gate) {
        eprintln!("lockcheck: {message}");
        return Ok(exit::USAGE.into());
    }
    let first_seed = args.seed.unwrap_or_else(random_seed);
    let seeds = args.seeds.max(1);
    let mut worst = Verdict::Valid;
    let mut tally: Vec<(u64, Verdict)> = Vec::new();
    // JUnit and Markdown print one document for every seed, at the end.
    let mut collected: Vec<(String, Analysis)> = Vec::new();
    let progress = Progress::count(seeds, "seeds");
    let mut so_far = SoFar::default();
    for seed in first_seed..first_seed.saturating_add(seeds) {
        let options = SimOptions { seed, swarm: seeds > 1 || base.swarm, ..base.clone() };
        if let Some(signal) = interrupt::signal() {
            return Ok(interrupted_at(signal, &seen(&tally, seed, "before seed")));
        }
        progress.suspend(|| eprintln!("seed: {seed}"));
        let stored = match args.no_store {
            true => None,
            false => Some(store_begin(args, &options)?),
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
            sim => sim?,
        };
        hold_before("check");
        progress.message(format!("seed {seed}: checking the history; {}", so_far.describe()));
        let analysis = check(&sim, args.linearizability_timeout)?;
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
            let source = format!("{} seed {seed}", options.backend.name());
            collected.push((source, analysis.clone()));
        }
        let first_failure = analysis.verdict == Verdict::Invalid && worst != Verdict::Invalid;
        so_far.lock_ops += sim.stats.lock_ops;
        so_far.not_valid += u64::from(analysis.verdict != Verdict::Valid);
        if first_failure && !args.no_shrink {
            progress.message(format!("seed {seed}: shrinking the failure; {}", so_far.describe()));
            let shrunk = shrink_failure(args, &options, &sim, &analysis, dir.as_deref(), &progress);
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
        worst = worst.combine(exit::gated(&analysis, &args.gate));
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

pub fn random_seed() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|time| time.as_nanos())
        .unwrap_or_default();
    (nanos as u64) ^ (u64::from(std::process::id()) << 32)
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

fn simulate(
    options: &SimOptions,
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

/// The checkers' options for a simulated run.
pub fn check_options(linearizability_timeout: Duration) -> CheckOptions {
    CheckOptions {
        linearizability_time_limit: Some(linearizability_timeout),
        ..CheckOptions::default()
    }
}

pub fn check(sim: &SimRun, linearizability_timeout: Duration) -> anyhow::Result<Analysis> {
    let options = check_options(linearizability_timeout);
    // A malformed simulated history is a bug in lockcheck, not a verdict.
    check_run(sim, &options).context("the simulator recorded a malformed history")
}

/// Looks for a smaller run that fails the same way, and says how to replay
/// it (and stores its history beside the run's).
fn shrink_failure(
    args: &CheckArgs,
    options: &SimOptions,
    sim: &SimRun,
    analysis: &Analysis,
    dir: Option<&Path>,
    progress: &Progress,
) -> anyhow::Result<()> {
    let check_options = check_options(args.linearizability_timeout);
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
        crate::store::write_file(&dir.join("shrunk-history.jsonl"), |out| {
            Ok(write_events(out, history)?)
        })?;
        crate::store::write_file(&dir.join("shrunk-command"), |out| {
            Ok(out.write_all(command.as_bytes())?)
        })?;
    }
    Ok(())
}

/// Runs a shrink may try.
const SHRINK_BUDGET: u32 = 60;

/// `20261130T113300.123Z`: a store folder's name, sortable, in UTC.
pub fn utc_stamp(time: SystemTime) -> String {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let (days, seconds) = ((since.as_secs() / 86_400) as i64, since.as_secs() % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}.{:03}Z",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60,
        since.subsec_millis()
    )
}

/// The command that replays this run exactly.
fn replay_command(options: &SimOptions) -> String {
    format!("lockcheck {}", options.check_arguments())
}

/// Makes the seed's store folder, for its history to be written as the
/// simulation records it.
fn store_begin(args: &CheckArgs, options: &SimOptions) -> anyhow::Result<Stored> {
    let test = format!("{}-{}", options.backend.name(), options.workload.name());
    crate::store::begin(&args.store, &test, options.seed, &replay_command(options))
}

fn store_finish(
    options: &SimOptions,
    sim: &SimRun,
    analysis: &Analysis,
    stored: &Stored,
) -> anyhow::Result<PathBuf> {
    let title = format!("{} seed {}", options.backend.name(), options.seed);
    crate::store::finish(
        stored,
        &crate::store::Run {
            events: &sim.events,
            analysis,
            command: &replay_command(options),
            title: &title,
        },
    )
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

/// Where the history so far of an interrupted run is.
fn stored_so_far(stored: Option<&Stored>) -> String {
    match stored {
        Some(stored) => stored.so_far(),
        None => "--no-store: its history was not kept".to_string(),
    }
}

/// Says on stderr that `signal` stopped the check, and where; the exit
/// code 128 + the signal. `main` exits with it once every server is
/// stopped.
fn interrupted_at(signal: i32, detail: &str) -> ExitCode {
    interrupt::report(signal, Some(detail));
    interrupt::exit_code(signal).into()
}

/// As [`interrupted_at`], for a run of one seed.
pub fn interrupted(signal: i32, seed: u64, stored: Option<&Stored>) -> ExitCode {
    interrupted_at(signal, &format!("at seed {seed}; {}", stored_so_far(stored)))
}

/// What the signal handler says if it exits while the run of `seed` is
/// busy (checking a long history, say): where its history so far is.
pub fn last_words(seed: u64, stored: Option<&Stored>) {
    let stored = stored.cloned();
    let words = move || format!("at seed {seed}; {}", stored_so_far(stored.as_ref()));
    interrupt::set_last_words(Some(Box::new(words)));
}

/// For the interrupt tests (`tests/cli_interrupt.rs`): with
/// `LOCKCHECK_TEST_HOLD_BEFORE=check` (or `store`) the run stops before
/// its checkers run (or its files are stored) for up to two minutes, as a
/// long computation would, without looking for an interrupt: a signal then
/// ends the tool through the handler's grace period.
pub fn hold_before(phase: &str) {
    if std::env::var("LOCKCHECK_TEST_HOLD_BEFORE").is_ok_and(|hold| hold == phase) {
        eprintln!("lockcheck: holding before {phase} (LOCKCHECK_TEST_HOLD_BEFORE)");
        let until = std::time::Instant::now() + Duration::from_secs(120);
        while std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Prints one seed's report: the text and JSON formats per seed; JUnit and
/// Markdown once for all seeds, by `run`, so that the document stays whole.
fn report(
    args: &CheckArgs,
    options: &SimOptions,
    sim: &SimRun,
    analysis: &Analysis,
    dir: Option<&Path>,
) -> anyhow::Result<()> {
    if matches!(args.format, Format::Junit | Format::Markdown) {
        return Ok(());
    }
    let source = format!("{} seed {}", options.backend.name(), options.seed);
    let analyzed = Analyzed { source: &source, analysis };
    let html = dir.map(|dir| dir.join("report.html").display().to_string());
    let mut text =
        render(args.format, analysis.verdict, &[analyzed], Some(&sim.events), html.as_deref());
    if args.format == Format::Text {
        let faults: Vec<&str> = sim.faults.iter().map(|kind| kind.name()).collect();
        text.push_str(&format!(
            "simulated {:.1} s in {:.2} s wall ({:.0}x), {} lock operations ({:.0}/s); faults: {}\n",
            sim.stats.simulated_s,
            sim.stats.wall_s,
            sim.stats.simulated_s / sim.stats.wall_s.max(1e-9),
            sim.stats.lock_ops,
            sim.stats.lock_ops as f64 / sim.stats.wall_s.max(1e-9),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_folders_are_named_by_utc_time() {
        let time = UNIX_EPOCH + Duration::from_millis(1_796_038_385_290);
        assert_eq!(utc_stamp(time), "20261130T113305.290Z");
        assert_eq!(utc_stamp(UNIX_EPOCH), "19700101T000000.000Z");
    }
}
