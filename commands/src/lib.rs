//! What each `lockcheck` command does, its options given as plain data
//! (the binary reads them from the command line and does nothing else):
//! [`check`] runs a test in the simulator ([`check::run`]) or against real
//! servers ([`real::run`]) and stores and reports it; [`matrix`] runs a
//! truth table in either world ([`matrix_sim`], [`matrix_real`]);
//! [`analyze`] checks recorded histories; [`conformance`] checks
//! porcupine's corpus. Each returns the process's exit code ([`exit`]).

/// `eprintln!`, redacted: whatever a command says on standard error (a
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

pub mod analyze;
pub mod check;
pub mod conformance;
pub mod exit;
pub mod matrix;
pub mod matrix_real;
pub mod matrix_sim;
pub mod model;
pub mod options;
pub mod output;
pub mod program;
pub mod real;

use std::path::PathBuf;
use std::time::Duration;

use lockcheck_checker::import::{InputFormat, ModelChoice};
use lockcheck_workloads::RunOptions;

pub use output::{print, render, Format};

/// `lockcheck check`: the run, and what to do around it.
#[derive(Debug, Clone)]
pub struct CheckRequest {
    /// The run; its seed is the first of `seeds`.
    pub options: RunOptions,
    /// Simulated runs: how many seeds, from the first.
    pub seeds: u64,
    pub format: Format,
    /// Where runs are stored (none: not stored).
    pub store: Option<PathBuf>,
    /// Look for a smaller run that fails the same way.
    pub shrink: bool,
    /// Print each simulated seed's sizes and memory.
    pub stats: bool,
    /// A simulated run's memory budget [default: three quarters of the
    /// machine's].
    pub max_memory: Option<u64>,
    /// A valid run whose faults reached no vulnerable window fails
    /// (`--require-coverage`).
    pub require_coverage: bool,
}

/// `lockcheck matrix`: which cells, and how hard to look.
#[derive(Debug, Clone, Default)]
pub struct MatrixRequest {
    /// The backends whose cells run (none: every cell).
    pub backends: Vec<String>,
    /// The workloads whose cells run (none: every workload's).
    pub workloads: Vec<String>,
    /// The protections whose cells run (none: every one's).
    pub protections: Vec<String>,
    /// Leave out the cells whose runs each take longer than this.
    pub longest_run: Option<Duration>,
    pub violated_within: Option<u64>,
    pub safe_seeds: Option<u64>,
    pub time_limit: Option<Duration>,
    pub linearizability_timeout: Option<Duration>,
    /// Instead of a verdict, how many runs each cell needs to show its
    /// violation, over this many samples.
    pub runs_needed: Option<u64>,
}

impl MatrixRequest {
    /// The cells it names.
    pub fn selection(&self) -> matrix::Selection<'_> {
        matrix::Selection {
            backends: &self.backends,
            workloads: &self.workloads,
            protections: &self.protections,
            longest_run: self.longest_run,
        }
    }
}

/// `lockcheck analyze`: the histories and how to check them.
#[derive(Debug, Clone)]
pub struct AnalyzeRequest {
    pub files: Vec<PathBuf>,
    pub format: Format,
    pub html_dir: Option<PathBuf>,
    pub input_format: InputFormat,
    pub model: ModelChoice,
    pub liveness_bound: Option<Duration>,
    pub no_linearizability: bool,
    pub linearizability_timeout: Duration,
    pub all_keys: bool,
    /// The linearizability search's cache, in MiB.
    pub linearizability_memory: usize,
    pub max_violations: usize,
    pub stats: bool,
    pub max_line_bytes: u64,
    /// A valid history whose faults reached no vulnerable window fails
    /// (`--require-coverage`).
    pub require_coverage: bool,
    /// Whether work done twice fails a history or counts as cost.
    pub purpose: lockcheck_checker::Purpose,
}

/// `lockcheck conformance`: porcupine's corpus, and the search's bound.
#[derive(Debug, Clone)]
pub struct ConformanceRequest {
    pub porcupine: PathBuf,
    pub linearizability_timeout: Duration,
}
