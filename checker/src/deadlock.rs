//! Deadlock: clients that each hold a lock and wait for one another's.
//! (Being written: a stub that applies to nothing yet.)

use crate::verdict::{CheckOptions, CheckResult, Checker, Subject};

#[derive(Debug, Default, Clone, Copy)]
pub struct Deadlock;

impl Checker for Deadlock {
    fn name(&self) -> &'static str {
        crate::verdict::names::DEADLOCK
    }

    fn judge(&self, _history: &Subject<'_>, _options: &CheckOptions) -> CheckResult {
        CheckResult::not_applicable(self.name(), "no client waited for a lock while holding another")
    }
}
