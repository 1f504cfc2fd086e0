//! The memory a run may use: the machine's memory, what this process holds
//! now, and the budget a command sets once for the whole process.
//!
//! A run keeps its history in memory until it is checked, so its memory
//! grows with its clients and its length. A command sets the budget
//! ([`set_budget`]: by default three quarters of the machine,
//! [`default_budget`]); a run refuses up front what its estimate says will
//! not fit, and while it runs it asks [`over_budget`] once a simulated
//! second, so that a run that outgrows its estimate stops itself, with its
//! history so far kept, before the kernel has to kill it.

use std::sync::atomic::{AtomicU64, Ordering};

/// The budget in bytes; 0 while none is set.
static BUDGET: AtomicU64 = AtomicU64::new(0);

/// The memory this machine lets the process have, in bytes: its physical
/// memory (`MemTotal`), or less where a cgroup limits it (`memory.max`).
/// `None` where neither can be read (not Linux).
pub fn machine_bytes() -> Option<u64> {
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| kib_field(&text, "MemTotal:"));
    let cgroup = std::fs::read_to_string("/sys/fs/cgroup/memory.max")
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok());
    match (total, cgroup) {
        (Some(total), Some(limit)) => Some(total.min(limit)),
        (total, limit) => total.or(limit),
    }
}

/// Three quarters of [`machine_bytes`]: what a run may use when no
/// `--max-memory` is given.
pub fn default_budget() -> Option<u64> {
    machine_bytes().map(|bytes| bytes / 4 * 3)
}

/// The memory this process holds now (its resident set), in bytes.
pub fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    kib_field(&status, "VmRSS:")
}

/// The most memory this process has held so far (its peak resident set).
pub fn peak_resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    kib_field(&status, "VmHWM:")
}

/// A `Name:   1234 kB` line of a `/proc` file, in bytes.
fn kib_field(text: &str, name: &str) -> Option<u64> {
    let line = text.lines().find(|line| line.starts_with(name))?;
    let kib: u64 = line[name.len()..].trim().trim_end_matches("kB").trim().parse().ok()?;
    kib.checked_mul(1024)
}

/// Sets the process's budget (`None`: no budget).
pub fn set_budget(bytes: Option<u64>) {
    BUDGET.store(bytes.unwrap_or(0), Ordering::SeqCst);
}

/// The process's budget, if one is set.
pub fn budget() -> Option<u64> {
    match BUDGET.load(Ordering::SeqCst) {
        0 => None,
        bytes => Some(bytes),
    }
}

/// What a run found when it outgrew the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverBudget {
    /// The process's resident memory, in bytes.
    pub resident: u64,
    /// The budget, in bytes.
    pub budget: u64,
}

/// The share of the budget a run may fill while it records: the rest is
/// left to checking its history, which needs about as much again as the
/// history itself.
const RECORDING_SHARE_PERCENT: u64 = 60;

/// Whether the process has outgrown the part of its budget that recording
/// may use (60%: the rest is left for checking what was recorded).
pub fn over_budget() -> Option<OverBudget> {
    let budget = budget()?;
    let resident = resident_bytes()?;
    (resident > recording_share(budget)).then_some(OverBudget { resident, budget })
}

/// The part of `budget` that recording may fill.
pub fn recording_share(budget: u64) -> u64 {
    budget / 100 * RECORDING_SHARE_PERCENT
}

/// `4GiB`, `512MiB`, `2G`, `300MB`, `64k` or a plain number of bytes; the
/// units are binary (`G`, `GB` and `GiB` alike are 2^30).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let split = trimmed.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a size: write e.g. 4GiB, 512MiB or 1000000"))?;
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        other => {
            return Err(format!("unknown unit {other:?} in {text:?}: use B, KiB, MiB, GiB or TiB"))
        }
    };
    let bytes = number * scale as f64;
    if !bytes.is_finite() || bytes < 1.0 || bytes >= u64::MAX as f64 {
        return Err(format!("{text:?} is out of range"));
    }
    Ok(bytes as u64)
}

/// `1.5 GiB`, `300 MiB`: a size as people read it.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (name, scale) in UNITS {
        if bytes >= scale {
            let value = bytes as f64 / scale as f64;
            return match value < 10.0 {
                true => format!("{value:.1} {name}"),
                false => format!("{value:.0} {name}"),
            };
        }
    }
    format!("{bytes} B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_binary_units() {
        assert_eq!(parse_size("4GiB"), Ok(4 << 30));
        assert_eq!(parse_size("4G"), Ok(4 << 30));
        assert_eq!(parse_size("512 MiB"), Ok(512 << 20));
        assert_eq!(parse_size("1.5g"), Ok(3 << 29));
        assert_eq!(parse_size("1000"), Ok(1000));
        assert!(parse_size("0").is_err());
        assert!(parse_size("lots").is_err());
        assert!(parse_size("3 parsecs").is_err());
        assert!(parse_size("-1G").is_err());
    }

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(format_size(3 << 29), "1.5 GiB");
        assert_eq!(format_size(300 << 20), "300 MiB");
        assert_eq!(format_size(12), "12 B");
    }

    #[test]
    fn proc_fields_are_read_in_bytes() {
        let text = "MemTotal:       24576000 kB\nMemFree:  1 kB\n";
        assert_eq!(kib_field(text, "MemTotal:"), Some(24_576_000 * 1024));
        assert_eq!(kib_field(text, "VmRSS:"), None);
    }

    #[test]
    fn this_machine_and_process_are_measured() {
        // Linux is where lockcheck runs; elsewhere the budget is unknown.
        let machine = machine_bytes().expect("the machine's memory");
        let resident = resident_bytes().expect("the process's memory");
        assert!(0 < resident && resident < machine, "{resident} of {machine}");
        assert_eq!(default_budget(), Some(machine / 4 * 3));
    }
}
