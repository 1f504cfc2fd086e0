//! What the benchmarks share: `lockcheck analyze --stats` of a history
//! file in a child process, so that its peak memory is its own.

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{bail, Context};

use crate::exit;

/// What one `analyze --stats` run reported.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Run {
    pub events: u64,
    pub read_s: f64,
    pub check_s: f64,
    pub peak_rss_bytes: u64,
}

/// `lockcheck analyze --stats PATH` in a child process, so that its peak
/// memory is its own, with `extra` arguments: its exit code (a verdict's:
/// anything else is an error) and the figures it reported.
pub(crate) fn analyze_child(path: &Path, extra: &[String]) -> anyhow::Result<(u8, Run)> {
    let exe = std::env::current_exe().context("cannot find the lockcheck executable")?;
    let output = Command::new(exe)
        .arg("analyze")
        .arg("--stats")
        .arg("--format=json")
        .args(extra)
        .arg(path)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .context("cannot run lockcheck analyze")?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    let code = match output.status.code().map(|code| code as u8) {
        Some(code @ (exit::VALID | exit::INVALID | exit::UNKNOWN)) => code,
        _ => bail!("analyze of {} failed ({}): {stderr}", path.display(), output.status),
    };
    let line = stderr
        .lines()
        .find(|line| line.starts_with("stats: "))
        .with_context(|| format!("analyze printed no stats: {stderr}"))?;
    let field = |name: &str| stats_field(line, name);
    let run = Run {
        events: field("events")? as u64,
        read_s: field("read_s")?,
        check_s: field("check_s")?,
        peak_rss_bytes: field("peak_rss_bytes")? as u64,
    };
    Ok((code, run))
}

/// The figure `name=…` of a `stats:` line.
pub(crate) fn stats_field(line: &str, name: &str) -> anyhow::Result<f64> {
    line.split_whitespace()
        .find_map(|pair| pair.strip_prefix(name).and_then(|rest| rest.strip_prefix('=')))
        .with_context(|| format!("no {name} in {line:?}"))?
        .parse::<f64>()
        .with_context(|| format!("bad {name} in {line:?}"))
}
