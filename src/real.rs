//! `lockcheck check --backend <real>`: the arguments made into the real
//! world's options, the run stored as it is recorded, and its outcome
//! printed and mapped to an exit code. The servers, faults and recipes are
//! `lockcheck_real`'s.

use std::process::ExitCode;

use lockcheck_checker::{Analysis, Event, Verdict};
use lockcheck_real::{execute_recorded, RealBackend, RealError, RealFailure, RealOptions, RealRun};
use lockcheck_reports::Analyzed;
use lockcheck_workloads::{interrupt, FaultKind, Shape, StallPoint};

use crate::args::{CheckArgs, Format};
use crate::exit;
use crate::options::{check_options, random_seed};
use crate::output::{print, render};

/// The real world's options from `check`'s arguments, or what is wrong with
/// them.
pub fn real_options(args: &CheckArgs) -> Result<RealOptions, String> {
    let workload = args.workload()?;
    exit::check_gate(&args.gate)?;
    if args.swarm || args.seeds > 1 {
        return Err("--swarm and --seeds apply to the simulated backends only".to_string());
    }
    if args.aim == Some(false) {
        return Err(
            "--aim=false applies to the simulated backends only: real faults are always aimed"
                .to_string(),
        );
    }
    Ok(RealOptions {
        workload,
        faults: FaultKind::parse_list(args.nemesis.as_deref().unwrap_or("pause"))?,
        partition_shapes: Shape::parse_list(&args.partition_shapes)?,
        clients: args.clients,
        locks: args.locks,
        ttl: args.ttl,
        time_limit: args.time_limit,
        fencing: !args.no_fencing,
        persistent: args.persistent,
        restart_delay: args.restart_delay,
        servers: args.servers.clone(),
        exec: args.exec.clone(),
        postgres_url: args.postgres_url.clone(),
        redis_url: args.redis_url.clone(),
        mysql_url: args.mysql_url.clone(),
        etcd_url: args.etcd_url.clone(),
        checks: check_options(args.linearizability_timeout),
        pause_at: StallPoint::parse_list(&args.pause_at)?,
        storage: args.storage()?,
    })
}

/// Prints why a real test came to no verdict and gives the exit code.
pub fn failure_exit(failure: &RealFailure) -> ExitCode {
    match failure {
        RealFailure::Usage(message) => {
            eprintln!("lockcheck: {message}");
            exit::USAGE.into()
        }
        RealFailure::Server(error) => unavailable(error),
        RealFailure::Internal(error) => {
            eprintln!("lockcheck: internal error: {error}");
            exit::INTERNAL.into()
        }
    }
}

/// `lockcheck check` on a real backend. A replay line's masked URLs are
/// taken from the environment.
pub fn run_check(args: &CheckArgs, backend: RealBackend) -> anyhow::Result<ExitCode> {
    match args.with_secrets() {
        Ok(args) => run(&args, backend),
        Err(message) => {
            eprintln!("lockcheck: {message}");
            Ok(exit::USAGE.into())
        }
    }
}

pub fn run(args: &CheckArgs, backend: RealBackend) -> anyhow::Result<ExitCode> {
    let seed = args.seed.unwrap_or_else(random_seed);
    eprintln!("seed: {seed}");
    let test = match real_options(args)
        .and_then(|test| lockcheck_real::plan(&test, backend).map(|_| test))
    {
        Ok(test) => test,
        Err(message) => return Ok(failure_exit(&RealFailure::Usage(message))),
    };
    let rerun = rerun_command(args, backend, seed);
    // The run's folder first: its history is written as it is recorded.
    let stored = match args.no_store {
        true => None,
        false => {
            let test = format!("{}-{}", backend.name(), args.workload);
            Some(lockcheck_runs::begin(&args.store, &test, seed, &rerun)?)
        }
    };
    lockcheck_runs::last_words(seed, stored.as_ref());
    let history = stored.as_ref().map(|stored| stored.history.clone());
    let progress = lockcheck_runs::Progress::timed(args.time_limit);
    let label =
        format!("{} --nemesis {}", backend.name(), args.nemesis.as_deref().unwrap_or("pause"));
    let outcome = progress.watch(&label, args.time_limit, || {
        execute_recorded(&test, backend, seed, true, history, &lockcheck_runs::progress::recording)
    });
    drop(progress);
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(failure) => {
            if let Some(signal) = interrupt::signal() {
                return Ok(lockcheck_runs::interrupted(signal, seed, stored.as_ref()));
            }
            let code = failure_exit(&failure);
            match &stored {
                // Nothing recorded (a server missing, say): nothing to keep.
                Some(stored) if stored.history.events() == 0 => {
                    let _ = std::fs::remove_dir_all(&stored.dir);
                }
                Some(stored) => eprintln!("lockcheck: {}", stored.so_far()),
                None => {}
            }
            return Ok(code);
        }
    };
    if let Some(signal) = interrupt::signal() {
        return Ok(lockcheck_runs::interrupted(signal, seed, stored.as_ref()));
    }
    let RealRun { events, analysis, wall_s, faults, .. } = &outcome;
    interrupt::hold_before("store");
    let dir = match &stored {
        Some(stored) => Some(finish_store(backend, seed, stored, events, analysis, &rerun)?),
        None => None,
    };
    interrupt::set_last_words(None);
    let source = format!("{} seed {seed}", backend.name());
    let analyzed = Analyzed { source: &source, analysis };
    let html = dir.as_ref().map(|dir| dir.join("report.html").display().to_string());
    let mut text =
        render(args.format, analysis.verdict, &[analyzed], Some(events), html.as_deref());
    if args.format == Format::Text {
        let lock_ops = outcome.lock_ops();
        text.push_str(&format!(
            "ran {wall_s:.1} s against real servers, {lock_ops} lock operations ({:.0}/s); faults: {}\n",
            lock_ops as f64 / wall_s.max(1e-9),
            faults.names(),
        ));
        if let Some(dir) = &dir {
            text.push_str(&format!("stored in {}\n", dir.display()));
        }
        if analysis.verdict != Verdict::Valid {
            // Real servers' timing is not the seed's: a rerun draws the
            // same schedule, not always the same history.
            text.push_str(&format!("rerun: {rerun}\n"));
        }
    }
    print(&text)?;
    Ok(exit::for_verdict(exit::gated(analysis, &args.gate)).into())
}

/// Exit 69 with the reason: a server is missing or cannot be reached.
fn unavailable(error: &RealError) -> ExitCode {
    if let RealError::Interrupted { signal } = error {
        interrupt::report(*signal, None);
        return interrupt::exit_code(*signal).into();
    }
    eprintln!("lockcheck: {error}");
    match error {
        // A lock program that does not start or speak the protocol is the
        // user's to fix, as a missing server is.
        RealError::Setup { what: "the exec program", .. } => exit::UNAVAILABLE.into(),
        RealError::Setup { .. } => exit::INTERNAL.into(),
        _ => exit::UNAVAILABLE.into(),
    }
}

/// The command that runs the same test again (the same schedule of
/// faults; the servers' timing may differ).
fn rerun_command(args: &CheckArgs, backend: RealBackend, seed: u64) -> String {
    let mut command = format!(
        "lockcheck check --backend {} --workload {} --nemesis {} --time-limit {}s --clients {} --locks {} --ttl {}ms --seed {seed}",
        backend.name(),
        args.workload,
        args.nemesis.as_deref().unwrap_or("pause"),
        args.time_limit.as_secs_f64(),
        args.clients,
        args.locks,
        args.ttl.as_millis(),
    );
    // A URL's password is never printed nor stored: the line shows it
    // masked, and says where a replay finds it.
    let mut secrets = Vec::new();
    for ((flag, variable), urls) in crate::args::URL_VARIABLES.iter().zip([
        args.postgres_url.as_slice(),
        args.redis_url.as_slice(),
        args.mysql_url.as_slice(),
        args.etcd_url.as_slice(),
    ]) {
        if urls.is_empty() {
            continue;
        }
        let shown = lockcheck_checker::redact(&urls.join(","));
        if shown == urls.join(",") {
            command.push_str(&format!(" {flag} {shown}"));
        } else {
            command.push_str(&format!(" {flag} '{shown}'"));
            secrets.push(*variable);
        }
    }
    if args.partition_shapes != crate::args::DEFAULT_PARTITION_SHAPES {
        command.push_str(&format!(" --partition-shapes {}", args.partition_shapes));
    }
    if args.pause_at != crate::args::DEFAULT_PAUSE_AT {
        command.push_str(&format!(" --pause-at {}", args.pause_at));
    }
    if args.linearizability_timeout != crate::args::DEFAULT_LINEARIZABILITY_TIMEOUT {
        command.push_str(&format!(
            " --linearizability-timeout {}ms",
            args.linearizability_timeout.as_millis()
        ));
    }
    if args.storage != "table" {
        command.push_str(&format!(" --storage {}", args.storage));
    }
    if args.no_fencing {
        command.push_str(" --no-fencing");
    }
    if args.persistent {
        command.push_str(" --persistent");
    }
    if let Some(delay) = args.restart_delay {
        command.push_str(&format!(" --restart-delay {}ms", delay.as_millis()));
    }
    if !args.gate.is_empty() {
        command.push_str(&format!(" --gate {}", args.gate.join(",")));
    }
    if !args.servers.is_empty() {
        command.push_str(&format!(" --servers {}", args.servers.join(",")));
    }
    if !args.exec.is_empty() {
        command.push_str(&format!(" -- {}", args.exec.join(" ")));
    }
    if !secrets.is_empty() {
        // A shell comment: the line still runs as it is.
        command.push_str(&format!("  # password redacted: pass the URL in {}", secrets.join(", ")));
    }
    lockcheck_checker::redact(&command)
}

fn finish_store(
    backend: RealBackend,
    seed: u64,
    stored: &lockcheck_runs::Stored,
    events: &[Event],
    analysis: &Analysis,
    rerun: &str,
) -> anyhow::Result<std::path::PathBuf> {
    let title = format!("{} seed {seed}", backend.name());
    Ok(lockcheck_runs::finish(
        stored,
        &lockcheck_runs::Run { events, analysis, command: rerun, title: &title },
    )?)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::args::{CheckArgs, Cli, Command};

    fn check_args(line: &str) -> CheckArgs {
        let words = ["lockcheck", "check"].into_iter().chain(line.split_whitespace());
        match Cli::try_parse_from(words) {
            Ok(Cli { command: Command::Check(check) }) => *check,
            other => panic!("{line}: {other:?}"),
        }
    }

    /// A rerun line runs the test it was printed for: every option that
    /// shapes the run comes back the same.
    #[test]
    fn a_rerun_line_replays_the_same_options() {
        for line in [
            "--backend redis",
            "--backend etcd --nemesis partition --partition-shapes client --ttl 2s",
            "--backend redis --nemesis pause,kill --clients 3 --locks 1 --time-limit 2500ms --no-fencing --persistent --restart-delay 0ms --gate mutual-exclusion",
            "--backend redlock --nemesis kill --linearizability-timeout 3s --workload mutex",
            "--backend exec --servers redis*5 -- python3 lock.py --flag",
        ] {
            let backend = lockcheck_real::RealBackend::parse(
                line.split_whitespace().nth(1).expect("a backend"),
            )
            .expect("a real backend");
            let args = check_args(line);
            let rerun = super::rerun_command(&args, backend, 7);
            let replayed = check_args(rerun.strip_prefix("lockcheck check ").expect("a check line"));
            assert_eq!(
                super::real_options(&replayed),
                super::real_options(&args),
                "{line}\nreplays as {rerun}"
            );
            assert_eq!(replayed.seed, Some(7), "{rerun}");
            assert_eq!(replayed.gate, args.gate, "{rerun}");
        }
    }
}
