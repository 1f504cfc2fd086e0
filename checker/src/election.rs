//! Re-election: a new leader within the stated bound after the leader dies.
//! (Being written: a stub that applies to nothing yet.)

use crate::verdict::{CheckOptions, CheckResult, Checker, Subject};

#[derive(Debug, Default, Clone, Copy)]
pub struct ReElection;

impl Checker for ReElection {
    fn name(&self) -> &'static str {
        crate::verdict::names::RE_ELECTION
    }

    fn judge(&self, _history: &Subject<'_>, _options: &CheckOptions) -> CheckResult {
        CheckResult::not_applicable(self.name(), "no election")
    }
}
