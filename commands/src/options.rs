//! What every run shares, simulated or real: the seed drawn when none is
//! given, and the checkers' options.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lockcheck_checker::CheckOptions;

/// A fresh seed, when none is given: the time and the process id.
pub fn random_seed() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|time| time.as_nanos())
        .unwrap_or_default();
    (nanos as u64) ^ (u64::from(std::process::id()) << 32)
}

/// The checkers' options for a run: the defaults, with this bound on the
/// linearizability search.
pub fn check_options(linearizability_timeout: Duration) -> CheckOptions {
    CheckOptions {
        linearizability_time_limit: Some(linearizability_timeout),
        ..CheckOptions::default()
    }
}
