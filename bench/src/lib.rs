//! lockcheck's benchmarks, printed as tables on standard output: how fast
//! `analyze` checks large synthetic histories and with how much memory
//! ([`Part::Analyze`]), the linearizability checker on porcupine's
//! histories and on a large lease history, the simulator's speed and
//! memory, real servers' throughput, and long and hard histories of one
//! lock. `lockcheck bench` gives the options and runs the parts it is asked
//! for. A part that measures memory runs `lockcheck analyze --stats` or
//! `lockcheck check --stats` in a child process ([`BenchOptions::program`]),
//! so that each peak is that run's own.

/// `println!`, redacted: what a benchmark prints (a path, a command's
/// output) goes through [`lockcheck_checker::redact`], as all the
/// `lockcheck` command prints does. Defined before the modules, it
/// replaces the standard macro in every one of them.
macro_rules! println {
    () => {
        ::std::println!()
    };
    ($($arg:tt)*) => {
        ::std::println!("{}", ::lockcheck_checker::redact(&format!($($arg)*)))
    };
}

/// `eprintln!`, redacted as [`println!`] is.
macro_rules! eprintln {
    ($($arg:tt)*) => {
        ::std::eprintln!("{}", ::lockcheck_checker::redact(&format!($($arg)*)))
    };
}

mod analyze;
mod child;
mod hard;
mod linear;
mod memory;
mod model;
mod real;
mod sim;

use std::path::PathBuf;
use std::time::Duration;

pub use linear::expected_verdicts;

/// A benchmark, as `bench --only` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// `analyze` on synthetic fenced histories of [`BenchOptions::ops`]
    /// operations: time and peak memory.
    Analyze,
    /// The linearizability checker on porcupine's test histories.
    Porcupine,
    /// The linearizability checker on a large fenced-lease history.
    Lease,
    /// The simulator: the default `check` run over several seeds.
    Sim,
    /// The simulator's memory per client and simulated second.
    Memory,
    /// Real servers, started for the run: lock operations per second.
    Real,
    /// Long histories of a single lock.
    OneLock,
    /// Hard mutex histories of one lock, with crashed operations.
    Hard,
    /// The model checker: states per second, time to a counterexample
    /// and to a proof within bounds.
    Model,
}

/// How a benchmark came out, worst last: several together come out as
/// the worst of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    /// What it measured is as it should be: every verdict as expected,
    /// the memory within its estimate.
    Valid,
    /// A verdict not as expected, or a peak past its estimate.
    Invalid,
    /// A history it could not decide within its bound.
    Unknown,
    /// Options it cannot run with (an unknown backend), said on standard
    /// error.
    Refused,
}

/// What the benchmarks measure, and with what.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// The `lockcheck` executable that the child runs start.
    pub program: PathBuf,
    /// porcupine's test data (folders jepsen/ and kv/, each with a
    /// VERDICTS.txt); without it [`Part::Porcupine`] is skipped.
    pub porcupine: Option<PathBuf>,
    /// Seeds of the default `check` run that [`Part::Sim`] measures.
    pub sim_seeds: u64,
    /// Backends that [`Part::Sim`] and [`Part::Memory`] measure.
    pub sim_backends: Vec<String>,
    /// Size of the [`Part::Lease`] history, in client operations.
    pub lease_ops: usize,
    /// History sizes for [`Part::Analyze`], in client operations.
    pub ops: Vec<usize>,
    pub clients: u32,
    pub keys: u32,
    pub seed: u64,
    /// Runs per size; the fastest is reported.
    pub runs: u32,
    /// Folder for the generated histories, kept; without it a temporary
    /// one, removed.
    pub dir: Option<PathBuf>,
    /// History sizes for [`Part::OneLock`], in client operations.
    pub one_lock_ops: Vec<usize>,
    /// The linearizability bound of each [`Part::OneLock`] and
    /// [`Part::Hard`] check.
    pub hard_timeout: Duration,
    /// Another checker run beside lockcheck on each one-lock and hard
    /// history: a shell command, given the file as its last argument.
    pub compare_with: Option<String>,
}

impl BenchOptions {
    /// What is wrong with the options, if anything.
    pub fn validate(&self) -> Result<(), BenchError> {
        if self.ops.is_empty() || self.runs == 0 || self.clients == 0 || self.keys == 0 {
            return Err(BenchError::Usage(
                "--ops, --runs, --clients and --keys must each be at least 1".to_string(),
            ));
        }
        Ok(())
    }
}

/// Why a benchmark could not run or measure.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Options no benchmark can run with: the message says which.
    #[error("{0}")]
    Usage(String),
    /// A file or folder that cannot be made, written or read.
    #[error("cannot {action} {}", path.display())]
    File {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A child `lockcheck` that cannot be started.
    #[error("cannot run lockcheck {command}")]
    Spawn {
        command: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// A measurement that failed: the message says which and why.
    #[error("{0}")]
    Failed(String),
    #[error(transparent)]
    Sim(#[from] lockcheck_sim::SimError),
    /// A simulated history the checkers cannot read: a bug in lockcheck.
    #[error("the simulator recorded a malformed history")]
    Malformed(#[source] lockcheck_checker::HistoryError),
}

impl BenchError {
    /// `cannot {action} {path}`, with the reason as its source.
    fn file(action: &'static str, path: &std::path::Path) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.to_path_buf();
        move |source| BenchError::File { action, path, source }
    }
}

/// Runs one benchmark, printing its table, and says how it came out.
pub fn run(part: Part, options: &BenchOptions) -> Result<Outcome, BenchError> {
    match part {
        Part::Analyze => analyze::analyze(options),
        Part::Porcupine => linear::porcupine(options),
        Part::Lease => linear::lease(options),
        Part::Sim => sim::sim(options),
        Part::Memory => memory::memory(options),
        Part::Real => real::real(options),
        Part::OneLock => hard::one_lock(options),
        Part::Hard => hard::hard(options),
        Part::Model => model::model(options),
    }
}
