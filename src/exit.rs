//! Exit codes: part of the interface, documented in `--help` and tested.

use lockcheck_checker::Verdict;

pub const VALID: u8 = 0;
pub const INVALID: u8 = 1;
pub const UNKNOWN: u8 = 2;
pub const USAGE: u8 = 64;
pub const BAD_INPUT: u8 = 65;
/// A server the test needs is missing or unreachable.
pub const UNAVAILABLE: u8 = 69;
pub const INTERNAL: u8 = 70;

pub fn for_verdict(verdict: Verdict) -> u8 {
    match verdict {
        Verdict::Valid => VALID,
        Verdict::Invalid => INVALID,
        Verdict::Unknown => UNKNOWN,
    }
}
