//! Exactly once: a unit of work (a cron job's run for one day) must run once,
//! not twice and not zero times.
//!
//! Every replica that fires records a `run` of the unit (`data`): `ok` when
//! it ran the job, `fail` when it skipped it (another replica had it).
//! Two `ok` runs of one unit are a double run. A unit every replica skipped,
//! with no run of unknown outcome, never ran. An `info` run may have run.

use std::collections::BTreeMap;

use crate::event::Function;
use crate::format_time;
use crate::history::{History, KeyId, Op, Outcome};
use crate::verdict::{
    CheckOptions, CheckResult, Checker, Findings, Subject, Violation, ViolationKind,
};

#[derive(Debug, Default, Clone, Copy)]
pub struct ExactlyOnce;

impl Checker for ExactlyOnce {
    fn name(&self) -> &'static str {
        crate::verdict::names::EXACTLY_ONCE
    }

    fn judge(&self, history: &Subject<'_>, options: &CheckOptions) -> CheckResult {
        // Per job, per unit: the runs, in history order.
        let mut jobs: BTreeMap<KeyId, BTreeMap<&str, Vec<&Op>>> = BTreeMap::new();
        for op in history.ops().iter().filter(|op| op.f == Function::Run) {
            let unit = op.data.as_deref().unwrap_or("");
            jobs.entry(op.key).or_default().entry(unit).or_default().push(op);
        }
        if jobs.is_empty() {
            return CheckResult::not_applicable(self.name(), "no run operations");
        }
        let mut findings = Findings::new(self.name(), options);
        for (key, units) in &jobs {
            let job = history.key_name(*key);
            let mut violations = Vec::new();
            let mut ops = 0;
            for (unit, runs) in units {
                ops += runs.len() as u64;
                violations.extend(judge(history, job, unit, runs));
            }
            findings.key(job, ops, violations);
        }
        findings.finish()
    }
}

fn judge(history: &History, job: &str, unit: &str, runs: &[&Op]) -> Option<Violation> {
    let ran: Vec<&Op> = runs.iter().copied().filter(|op| op.outcome == Outcome::Ok).collect();
    let unknown = runs.iter().any(|op| op.outcome == Outcome::Info);
    let at = |op: &Op| {
        let done = history.completion_or_end(op);
        format!("process {} at index {} (t={})", op.process, done.index, format_time(done.time_ns))
    };
    let events = |ops: &[&Op]| {
        let mut events: Vec<u64> =
            ops.iter().map(|op| history.completion_or_end(op).index).collect();
        events.sort_unstable();
        events
    };
    if ran.len() >= 2 {
        let who: Vec<String> = ran.iter().map(|op| at(op)).collect();
        return Some(Violation {
            root: None,
            finding: None,
            kind: ViolationKind::RanTwice,
            key: job.to_string(),
            processes: ran.iter().map(|op| op.process).collect(),
            window: None,
            events: events(&ran),
            explanation: format!(
                "{job:?} ran {} times for {unit:?}: by {}.",
                ran.len(),
                who.join(", ")
            ),
            linearization: None,
        });
    }
    if ran.is_empty() && !unknown {
        let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
        for op in runs {
            *reasons.entry(op.error.as_deref().unwrap_or("failed")).or_default() += 1;
        }
        let reasons: Vec<String> =
            reasons.iter().map(|(reason, count)| format!("{reason} ×{count}")).collect();
        return Some(Violation {
            root: None,
            finding: None,
            kind: ViolationKind::NeverRan,
            key: job.to_string(),
            processes: runs.iter().map(|op| op.process).collect(),
            window: None,
            events: events(runs),
            explanation: format!(
                "{job:?} never ran for {unit:?}: none of the {} replicas that fired ran it ({}), the last {}.",
                runs.len(),
                reasons.join(", "),
                at(runs[runs.len() - 1])
            ),
            linearization: None,
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{history_from, Verdict};

    fn verdict(lines: &str) -> Option<Verdict> {
        ExactlyOnce.check(&history_from(lines), &CheckOptions::default()).verdict
    }

    #[test]
    fn once_twice_and_never() {
        let once = r#"
            0 1 invoke run report {"data":"day-1"}
            1 2 invoke run report {"data":"day-1"}
            2 1 ok run report
            3 2 fail run report"#;
        assert_eq!(verdict(once), Some(Verdict::Valid));
        let twice = r#"
            0 1 invoke run report {"data":"day-1"}
            1 1 ok run report
            2 2 invoke run report {"data":"day-1"}
            3 2 ok run report"#;
        assert_eq!(verdict(twice), Some(Verdict::Invalid));
        let never = r#"
            0 1 invoke run report {"data":"day-1"}
            1 1 fail run report
            2 2 invoke run report {"data":"day-1"}
            3 2 fail run report"#;
        assert_eq!(verdict(never), Some(Verdict::Invalid));
        // A run of unknown outcome may have been the one.
        let maybe = r#"
            0 1 invoke run report {"data":"day-1"}
            1 1 info run report
            2 2 invoke run report {"data":"day-1"}
            3 2 fail run report"#;
        assert_eq!(verdict(maybe), Some(Verdict::Valid));
    }
}
