//! What every run shares, simulated or real: the seed drawn when none is
//! given.

use std::time::{SystemTime, UNIX_EPOCH};

/// A fresh seed, when none is given: the time and the process id.
pub fn random_seed() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|time| time.as_nanos())
        .unwrap_or_default();
    (nanos as u64) ^ (u64::from(std::process::id()) << 32)
}
