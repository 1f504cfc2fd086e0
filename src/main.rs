//! The `lockcheck` command: parses arguments, builds checkers and reports from
//! the libraries, prints, and maps outcomes to exit codes.

/// `eprintln!`, redacted: whatever the tool says on standard error (a
/// driver's connection error quoting its URL, say) goes through
/// [`lockcheck_checker::redact`], which masks passwords. Defined before
/// the modules, it replaces the standard macro in every one of them.
macro_rules! eprintln {
    () => {
        ::std::eprintln!()
    };
    ($($arg:tt)*) => {
        ::std::eprintln!("{}", ::lockcheck_checker::redact(&format!($($arg)*)))
    };
}

/// `println!`, redacted as [`eprintln!`] is.
macro_rules! println {
    () => {
        ::std::println!()
    };
    ($($arg:tt)*) => {
        ::std::println!("{}", ::lockcheck_checker::redact(&format!($($arg)*)))
    };
}

mod args;
mod backends;
mod bench;
mod report;
mod serve;
mod synth;

use std::process::ExitCode;

use clap::Parser;
use lockcheck_commands::{analyze, check, conformance, exit, matrix_real, matrix_sim, model, real};
use lockcheck_workloads::{interrupt, World};

use crate::args::{Cli, Command};

/// Reading a history allocates a few small objects per event on several
/// threads; glibc's allocator spent more time on that than the parsing did.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            let _ = error.print();
            return if error.use_stderr() { exit::USAGE.into() } else { exit::VALID.into() };
        }
    };
    // A panic is a bug in lockcheck: the hook has printed it; exit 70 so that
    // a CI gate never mistakes it for a verdict.
    let outcome = std::panic::catch_unwind(|| run(cli));
    // Interrupted (Ctrl-C, SIGTERM, SIGHUP): whatever the run made of it, the
    // exit code is 128 + the signal, once every server is stopped.
    if let Some(signal) = interrupt::signal() {
        interrupt::report(signal, None);
        interrupt::exit(interrupt::exit_code(signal));
    }
    let code = match outcome {
        Ok(Ok(code)) => return code,
        Ok(Err(error)) => {
            eprintln!("lockcheck: internal error: {error:#}");
            exit::INTERNAL
        }
        Err(_) => exit::INTERNAL,
    };
    // A check that failed halfway: its history so far is on disk.
    if let Some(words) = interrupt::last_words() {
        eprintln!("lockcheck: {words}");
    }
    code.into()
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Analyze(args) => match args.request() {
            Ok(request) => analyze::run(&request),
            Err(message) => usage(&message),
        },
        Command::Check(args) => {
            // Ctrl-C, SIGTERM or SIGHUP at any moment of a check: the
            // servers are stopped, the history so far is kept, the exit code
            // is 128 + the signal (see `interrupt`).
            if let Err(reason) = lockcheck_workloads::interrupt::install_cooperative() {
                anyhow::bail!("cannot catch signals: {reason}");
            }
            let request = match args.request() {
                Ok(request) => request,
                Err(message) => return usage(&message),
            };
            match request.options.world {
                World::Real => real::run(&request),
                World::Simulated => check::run(&request),
            }
        }
        Command::Matrix(args) if args.sim => matrix_sim::run(&args.request()),
        Command::Matrix(args) => matrix_real::run(&args.request()),
        Command::Backends(args) => backends::run(&args),
        Command::Report(args) => report::run(&args),
        Command::Serve(args) => serve::run(&args),
        Command::Synth(args) => synth::run(&args),
        Command::Bench(args) => bench::run(&args),
        Command::Conformance(args) => conformance::run(&args.request()),
        Command::Model(args) => model::run(&args.request()),
    }
}

/// Says what is wrong with the arguments: exit 64.
fn usage(message: &str) -> anyhow::Result<ExitCode> {
    eprintln!("lockcheck: {message}");
    Ok(exit::USAGE.into())
}
