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

/// The verdict a CI gate acts on: the whole analysis', or with `gate`, only
/// those checkers' (a checker that does not apply counts as valid).
pub fn gated(analysis: &lockcheck_checker::Analysis, gate: &[String]) -> Verdict {
    if gate.is_empty() {
        return analysis.verdict;
    }
    analysis
        .results
        .iter()
        .filter(|result| gate.iter().any(|name| name == result.checker))
        .map(|result| result.verdict.unwrap_or(Verdict::Valid))
        .fold(Verdict::Valid, Verdict::combine)
}

/// With `--require-coverage`, a pass whose faults reached no vulnerable
/// window fails the gate as a violation does (the reason goes to stderr);
/// otherwise, or when the gated verdict is not valid, the verdict as is.
pub fn require_coverage(
    analysis: &lockcheck_checker::Analysis,
    gated: Verdict,
    required: bool,
    source: &str,
) -> Verdict {
    if !vacuous_failure(analysis, gated, required) {
        return gated;
    }
    eprintln!(
        "lockcheck: {source}: --require-coverage: valid, but vacuous: {}; exit {INVALID}",
        analysis.coverage.line()
    );
    Verdict::Invalid
}

/// Whether `--require-coverage` fails this pass: the gated verdict is
/// valid and the run had faults, none of which reached a vulnerable window.
pub fn vacuous_failure(
    analysis: &lockcheck_checker::Analysis,
    gated: Verdict,
    required: bool,
) -> bool {
    required && gated == Verdict::Valid && analysis.coverage.vacuous()
}

/// What is wrong with a `--gate` list, if anything.
pub fn check_gate(gate: &[String]) -> Result<(), String> {
    let known: Vec<&str> =
        lockcheck_checker::default_checkers().iter().map(|checker| checker.name()).collect();
    match gate.iter().find(|name| !known.contains(&name.as_str())) {
        Some(name) => Err(format!(
            "--gate: no checker is called {name:?}; the checkers: {}",
            known.join(", ")
        )),
        None => Ok(()),
    }
}
