//! What the real-world tests share: checking a recorded history as
//! `lockcheck check` does.

use std::time::Duration;

use lockcheck_checker::{analyze_events, Analysis, CheckOptions, Event};

/// The checkers' options of a real test: the CLI's linearizability bound
/// (a shorter one turns a slow check on a loaded machine into `unknown`).
pub fn check_options() -> CheckOptions {
    CheckOptions {
        linearizability_time_limit: Some(Duration::from_secs(60)),
        ..CheckOptions::default()
    }
}

/// Every default checker's verdict on `events`, which the recorder must
/// have written well formed.
pub fn analyzed(events: &[Event]) -> Analysis {
    analyze_events(events, &check_options())
        .unwrap_or_else(|error| panic!("the recorder wrote a malformed history: {error}"))
}
