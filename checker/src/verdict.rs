//! What a checker concludes, and the evidence it gives.

use serde::Serialize;

use std::ops::Deref;
use std::sync::OnceLock;

use crate::beliefs::Beliefs;
use crate::history::{History, KeyId};
use crate::KeyStats;

/// A checker's conclusion. `Unknown` means it could not decide (a bound was
/// hit, the history lacks what it needs); a checker that could not decide never
/// says `Valid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Valid,
    Unknown,
    Invalid,
}

impl Verdict {
    /// The verdict of several checks together: any invalid makes the whole
    /// invalid, else any unknown makes it unknown.
    pub fn combine(self, other: Verdict) -> Verdict {
        self.max(other)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Valid => "valid",
            Verdict::Invalid => "invalid",
            Verdict::Unknown => "unknown",
        }
    }
}

/// The kinds of violation the checkers find.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ViolationKind {
    /// Two clients believed they held the same lock at the same time.
    Overlap,
    /// Two grants carried the same fencing token.
    DuplicateToken,
    /// A grant carried a token not above one granted before it was asked for.
    BackwardsToken,
    /// Some grants of a lock carried a token and some did not.
    MixedFencing,
    /// The resource accepted a write with a token below one it had accepted.
    StaleWrite,
    /// An unfenced write landed from a client whose lock had been granted to another.
    DoubleCharge,
    /// A read returned something other than the latest accepted write.
    StaleRead,
    /// An acknowledged update was written over by one that had not read it.
    LostUpdate,
    /// A lock stayed unobtainable long after every holder was gone.
    Stuck,
    /// Clients each held a lock and waited for one another's: a cycle of
    /// waits (or a deadlock the server reported).
    Deadlock,
    /// No order of the operations is legal for the model.
    NotLinearizable,
    /// A unit of work that must run once ran twice or more.
    RanTwice,
    /// A unit of work that must run once never ran.
    NeverRan,
    /// A unit of work took effect twice or more: an order charged twice.
    DoneTwice,
    /// A unit enqueued with a bound was not done by then, nor may it have been.
    NeverDone,
    /// A request that reused an idempotency key with another body was
    /// answered with success.
    KeyReused,
    /// A request repeating one whose response had completed, with its key
    /// and body, got another response.
    ReplayDiffers,
    /// Two requests with one idempotency key, in flight at once, both took
    /// effect: one should have been refused (409) or replayed.
    InFlightNotRefused,
    /// A leader's lease ran out (or it resigned) while candidates
    /// campaigned, and no new leader was elected within the stated bound.
    NoLeader,
}

/// A span of the history, as event indices and test times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Window {
    pub start_index: u64,
    pub start_ns: u64,
    /// The first event at which the condition no longer held (one past the
    /// last event when it held to the end).
    pub end_index: u64,
    pub end_ns: u64,
}

impl Window {
    /// The span from one moment of the history to another.
    pub fn between(start: crate::history::Moment, end: crate::history::Moment) -> Window {
        Window {
            start_index: start.index,
            start_ns: start.time_ns,
            end_index: end.index,
            end_ns: end.time_ns,
        }
    }

    pub fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }
}

/// One violation, with the smallest set of events that proves it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    pub kind: ViolationKind,
    /// The lock or resource it concerns.
    pub key: String,
    /// The clients involved, the one in the wrong last where that is clear.
    pub processes: Vec<i64>,
    pub window: Option<Window>,
    /// Indices of the events that prove it, ascending.
    pub events: Vec<u64>,
    /// One short paragraph for a person.
    pub explanation: String,
    /// For `NotLinearizable`: how far the search got.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub linearization: Option<LinearizationEvidence>,
    /// The event that began its cause, where the checker can tell: the
    /// grant of the holder that went on past its lease, the first grant
    /// after the lock's tokens started over. Violations with one root
    /// make one finding.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub root: Option<u64>,
    /// The finding (see [`crate::findings`]) it belongs to, once grouped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finding: Option<u32>,
}

/// Where the search for a linearization got stuck, for reports and timelines.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LinearizationEvidence {
    pub model: &'static str,
    /// The longest linearizable prefix: each operation's invoke index, in
    /// the order they were linearized.
    pub prefix: Vec<u64>,
    /// The invoke index of the operation that could not be placed after it.
    pub blocked: u64,
    /// The model states possible there.
    pub states: Vec<String>,
}

/// The verdict for one key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyVerdict {
    pub key: String,
    pub verdict: Verdict,
    /// Operations on this key the checker looked at.
    pub ops: u64,
    pub violations: u64,
    /// Why the verdict is unknown, when it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// What one checker found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckResult {
    pub checker: &'static str,
    /// `None` when the checker did not apply to this history (see `reason`).
    pub verdict: Option<Verdict>,
    /// Why it did not apply, or why it could not decide.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Per key, in first-seen order.
    pub keys: Vec<KeyVerdict>,
    /// Violations found in all, which may exceed `violations.len()`.
    pub violation_count: u64,
    /// The first violations, bounded by [`CheckOptions::max_violations`].
    pub violations: Vec<Violation>,
    /// Things a person should know that are not violations.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Every violation's root (kept or not), with how many violations it
    /// began, in root order: what findings count.
    #[serde(skip)]
    pub roots: Vec<(u64, u64)>,
}

impl CheckResult {
    pub fn not_applicable(checker: &'static str, reason: impl Into<String>) -> Self {
        CheckResult {
            checker,
            verdict: None,
            reason: Some(reason.into()),
            keys: Vec::new(),
            violation_count: 0,
            violations: Vec::new(),
            notes: Vec::new(),
            roots: Vec::new(),
        }
    }
}

/// What the lock under test is for, which decides whether work done twice
/// fails it. A lock for correctness must never let a unit be done twice; a
/// lock for efficiency only saves work, and a unit done twice is a cost to
/// count, not a failure. Work never done fails either.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Purpose {
    #[default]
    Correctness,
    Efficiency,
}

impl Purpose {
    /// Every purpose, in the order the command line lists them.
    pub const ALL: [Purpose; 2] = [Purpose::Correctness, Purpose::Efficiency];

    /// Its name on the command line: `correctness`, `efficiency`.
    pub fn name(self) -> &'static str {
        match self {
            Purpose::Correctness => "correctness",
            Purpose::Efficiency => "efficiency",
        }
    }

    /// A purpose by its name; `None` for any other text.
    pub fn parse(name: &str) -> Option<Purpose> {
        Purpose::ALL.into_iter().find(|purpose| purpose.name() == name)
    }
}

impl std::fmt::Display for Purpose {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Options shared by the checkers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckOptions {
    /// How long a lock may stay unobtainable with no believed holder before the
    /// liveness checker calls it stuck. `None`: 3 × the largest TTL seen.
    pub liveness_bound_ns: Option<u64>,
    /// How many violations each checker keeps as evidence; all are counted.
    pub max_violations: usize,
    /// How long the linearizability search may run in all, per history.
    pub linearizability_time_limit: Option<std::time::Duration>,
    /// Memory each linearizability search may use for its cache.
    pub linearizability_memory_bytes: usize,
    /// Keep checking every key for linearizability after one is found not
    /// linearizable (by default the others stop, as unknown: the verdict is
    /// settled).
    pub linearizability_all_keys: bool,
    /// The model for lock histories: `Auto` picks per lock (fenced-lease
    /// when grants carry a TTL or a token, else mutex).
    pub lock_model: crate::import::ModelChoice,
    /// What the lock is for: under `Efficiency`, `exactly-once` counts a
    /// unit done twice as a cost (a note) rather than a violation.
    pub purpose: Purpose,
}

impl CheckOptions {
    /// The bounds of one linearizability check, starting now.
    pub fn search_limits(&self) -> crate::linear::SearchLimits {
        crate::linear::SearchLimits {
            deadline: self
                .linearizability_time_limit
                .map(|limit| std::time::Instant::now() + limit),
            max_memory_bytes: self.linearizability_memory_bytes,
            stop_at_first_violation: !self.linearizability_all_keys,
            ..crate::linear::SearchLimits::default()
        }
    }
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            liveness_bound_ns: None,
            max_violations: 100,
            linearizability_time_limit: Some(std::time::Duration::from_secs(60)),
            linearizability_memory_bytes: 2 << 30,
            linearizability_all_keys: false,
            lock_model: crate::import::ModelChoice::Auto,
            purpose: Purpose::Correctness,
        }
    }
}

/// Each checker's name, as results, reports, JUnit cases, `--gate` and the
/// truth tables spell it.
pub mod names {
    pub const MUTUAL_EXCLUSION: &str = "mutual-exclusion";
    pub const FENCE_MONOTONICITY: &str = "fence-monotonicity";
    pub const RESOURCE_SAFETY: &str = "resource-safety";
    pub const LIVENESS: &str = "liveness";
    pub const DEADLOCK: &str = "deadlock";
    pub const RE_ELECTION: &str = "re-election";
    pub const LINEARIZABILITY: &str = "linearizability";
    pub const EXACTLY_ONCE: &str = "exactly-once";
    pub const IDEMPOTENCY: &str = "idempotency";
}

/// A property of histories. The linearizability checker implements this too.
pub trait Checker: Sync {
    /// A short kebab-case name, e.g. `mutual-exclusion`.
    fn name(&self) -> &'static str;
    /// Judges a history, sharing with the other checkers what is derived
    /// from it (see [`Subject`]).
    fn judge(&self, subject: &Subject<'_>, options: &CheckOptions) -> CheckResult;

    /// Judges one history on its own.
    fn check(&self, history: &History, options: &CheckOptions) -> CheckResult {
        self.judge(&Subject::new(history), options)
    }
}

/// What the checkers judge: a history (the data), and what is derived from
/// it once for every checker that needs it: who believed they held which
/// lock. It reads as the history it wraps.
#[derive(Debug)]
pub struct Subject<'a> {
    history: &'a History,
    beliefs: OnceLock<Beliefs>,
    key_stats: OnceLock<KeyStats>,
}

impl<'a> Subject<'a> {
    pub fn new(history: &'a History) -> Self {
        Subject { history, beliefs: OnceLock::new(), key_stats: OnceLock::new() }
    }

    /// The keys and clients, from one scan of the operations (on first use).
    pub(crate) fn key_stats(&self) -> &KeyStats {
        self.key_stats.get_or_init(|| KeyStats::of(self.history))
    }

    /// Keys that some acquire names, with their count of lock operations.
    pub(crate) fn lock_keys(&self) -> &[(KeyId, u64)] {
        &self.key_stats().lock_keys
    }

    /// Per key: how many may hold it at once.
    pub(crate) fn permits(&self) -> &[u32] {
        &self.key_stats().permits
    }

    /// Who believed they held which lock, when (computed on first use).
    pub fn beliefs(&self) -> &Beliefs {
        self.beliefs.get_or_init(|| Beliefs::compute(self.history))
    }
}

impl Deref for Subject<'_> {
    type Target = History;

    fn deref(&self) -> &History {
        self.history
    }
}

/// Collects a checker's per-key verdicts and its bounded list of violations.
#[derive(Debug)]
pub(crate) struct Findings {
    checker: &'static str,
    max_violations: usize,
    keys: Vec<KeyVerdict>,
    violation_count: u64,
    violations: Vec<Violation>,
    notes: Vec<String>,
    roots: std::collections::BTreeMap<u64, u64>,
}

impl Findings {
    pub(crate) fn new(checker: &'static str, options: &CheckOptions) -> Self {
        Findings {
            checker,
            max_violations: options.max_violations,
            keys: Vec::new(),
            violation_count: 0,
            violations: Vec::new(),
            notes: Vec::new(),
            roots: std::collections::BTreeMap::new(),
        }
    }

    /// Records the verdict for one key, with the violations found on it.
    pub(crate) fn key(&mut self, key: &str, ops: u64, violations: Vec<Violation>) {
        let count = violations.len() as u64;
        let verdict = if count == 0 { Verdict::Valid } else { Verdict::Invalid };
        self.keys.push(KeyVerdict {
            key: key.to_string(),
            verdict,
            ops,
            violations: count,
            reason: None,
        });
        self.violation_count += count;
        for root in violations.iter().filter_map(|violation| violation.root) {
            *self.roots.entry(root).or_default() += 1;
        }
        let room = self.max_violations.saturating_sub(self.violations.len());
        self.violations.extend(violations.into_iter().take(room));
    }

    /// Records a key the checker could not decide.
    pub(crate) fn key_unknown(&mut self, key: &str, ops: u64, reason: String) {
        let verdict = Verdict::Unknown;
        self.keys.push(KeyVerdict {
            key: key.to_string(),
            verdict,
            ops,
            violations: 0,
            reason: Some(reason),
        });
    }

    pub(crate) fn note(&mut self, note: String) {
        self.notes.push(note);
    }

    pub(crate) fn finish(self) -> CheckResult {
        let verdict = self.keys.iter().fold(Verdict::Valid, |all, key| all.combine(key.verdict));
        CheckResult {
            checker: self.checker,
            verdict: Some(verdict),
            reason: None,
            keys: self.keys,
            violation_count: self.violation_count,
            violations: self.violations,
            notes: self.notes,
            roots: self.roots.into_iter().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn purposes_read_back_by_name() {
        for purpose in Purpose::ALL {
            assert_eq!(Purpose::parse(purpose.name()), Some(purpose));
            assert_eq!(purpose.to_string(), purpose.name());
        }
        assert_eq!(Purpose::parse("efficiency"), Some(Purpose::Efficiency));
        assert_eq!(Purpose::parse("Efficiency"), None);
        assert_eq!(CheckOptions::default().purpose, Purpose::Correctness);
    }
}
