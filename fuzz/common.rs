//! What every target does with its input.

use std::time::Duration;

use lockcheck_checker::import::{import_from, InputFormat, ModelChoice};
use lockcheck_checker::{analyze_imported, default_checkers, CheckOptions};

/// Imports `data` streaming, as `analyze` does; what imports is analyzed
/// with a short linearizability bound (a hard input is `unknown`, not a
/// timeout of the fuzzer).
pub fn import_and_check(format: InputFormat, data: &[u8]) {
    let Ok(import) = import_from(format, data, "fuzz", ModelChoice::Auto, data.len() as u64) else {
        return;
    };
    let options = CheckOptions {
        linearizability_time_limit: Some(Duration::from_millis(200)),
        ..CheckOptions::default()
    };
    let _ = analyze_imported(&import.imported, &default_checkers(), &options);
}
