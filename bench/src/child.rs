//! What the benchmarks share: `lockcheck analyze --stats` of a history
//! file in a child process, so that its peak memory is its own.

use std::path::Path;
use std::process::{Command, Stdio};

use lockcheck_checker::Verdict;

use crate::{BenchError, BenchOptions};

/// What one `analyze --stats` run reported.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Run {
    pub events: u64,
    pub read_s: f64,
    pub check_s: f64,
    pub peak_rss_bytes: u64,
}

/// `lockcheck analyze --stats PATH` in a child process, so that its peak
/// memory is its own, with `extra` arguments: the verdict its exit code
/// gives (any other exit is an error) and the figures it reported.
pub(crate) fn analyze_child(
    options: &BenchOptions,
    path: &Path,
    extra: &[String],
) -> Result<(Verdict, Run), BenchError> {
    let output = Command::new(&options.program)
        .arg("analyze")
        .arg("--stats")
        .arg("--format=json")
        .args(extra)
        .arg(path)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|source| BenchError::Spawn { command: "analyze", source })?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    let verdict = match output.status.code() {
        Some(0) => Verdict::Valid,
        Some(1) => Verdict::Invalid,
        Some(2) => Verdict::Unknown,
        _ => {
            return Err(BenchError::Failed(format!(
                "analyze of {} failed ({}): {stderr}",
                path.display(),
                output.status
            )))
        }
    };
    let line = stderr
        .lines()
        .find(|line| line.starts_with("stats: "))
        .ok_or_else(|| BenchError::Failed(format!("analyze printed no stats: {stderr}")))?;
    let field = |name: &str| stats_field(line, name);
    let run = Run {
        events: field("events")? as u64,
        read_s: field("read_s")?,
        check_s: field("check_s")?,
        peak_rss_bytes: field("peak_rss_bytes")? as u64,
    };
    Ok((verdict, run))
}

/// The figure `name=…` of a `stats:` line.
pub(crate) fn stats_field(line: &str, name: &str) -> Result<f64, BenchError> {
    let value = line
        .split_whitespace()
        .find_map(|pair| pair.strip_prefix(name).and_then(|rest| rest.strip_prefix('=')))
        .ok_or_else(|| BenchError::Failed(format!("no {name} in {line:?}")))?;
    value
        .parse::<f64>()
        .map_err(|error| BenchError::Failed(format!("bad {name} in {line:?}: {error}")))
}
