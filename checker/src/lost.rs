//! Lost updates, a part of resource safety. A storage that updates a
//! resource by reading it and writing it back one version up (an S3
//! object, docs/storage.md) records with each acknowledged write the
//! version it made: `{"version": N}` on the write's `ok`. If no update is
//! lost, the acknowledged writes of a resource made distinct versions, and
//! each made a version above every one acknowledged before it was invoked.
//! A write that made a version already made, or a lower one, read the
//! resource without an acknowledged update in it and wrote over it: that
//! update is lost. One sweep of the history, linear in its events.

use rustc_hash::FxHashMap as HashMap;

use crate::event::Function;
use crate::format_time;
use crate::history::{History, KeyId, Op, OpId};
use crate::verdict::{Violation, ViolationKind};

/// The lost updates of every resource, by key.
pub(crate) fn lost_updates(history: &History) -> Vec<Vec<Violation>> {
    let mut found: Vec<Vec<Violation>> = vec![Vec::new(); history.key_count()];
    let versioned = |id: OpId| {
        let op = history.op(id);
        (op.f == Function::Write && op.is_ok()).then_some(op.version).flatten().map(u64::from)
    };
    // Per resource: the acknowledged write with the highest version so far.
    let mut highest: HashMap<KeyId, (u64, OpId)> = HashMap::default();
    // Per versioned write: the highest acknowledged when it was invoked.
    let mut before: HashMap<OpId, (u64, OpId)> = HashMap::default();
    // Per resource and version: the first write acknowledged with it.
    let mut first: HashMap<(KeyId, u64), OpId> = HashMap::default();
    for step in history.steps() {
        let Some(version) = versioned(step.op) else { continue };
        let key = history.op(step.op).key;
        if !step.is_completion {
            if let Some(&highest) = highest.get(&key) {
                before.insert(step.op, highest);
            }
            continue;
        }
        if let Some(&earlier) = first.get(&(key, version)) {
            found[key as usize].push(same_version(history, history.op(earlier), step.op, version));
        } else {
            first.insert((key, version), step.op);
            if let Some(&(seen, earlier)) = before.get(&step.op) {
                if seen > version {
                    found[key as usize].push(lower_version(history, earlier, step.op));
                }
            }
        }
        let entry = highest.entry(key).or_insert((version, step.op));
        if version > entry.0 {
            *entry = (version, step.op);
        }
    }
    found
}

fn acknowledged(history: &History, op: &Op) -> String {
    let done = history.completion_or_end(op);
    let data = op.data.as_deref().map(|data| format!(" {data:?}")).unwrap_or_default();
    format!(
        "process {}'s write{data} (acknowledged at index {}, t={})",
        op.process,
        done.index,
        format_time(done.time_ns)
    )
}

fn events(history: &History, ops: [&Op; 2]) -> Vec<u64> {
    let mut events: Vec<u64> =
        ops.iter().flat_map(|op| [op.invoke.index, history.completion_or_end(op).index]).collect();
    events.sort_unstable();
    events
}

fn same_version(history: &History, earlier: &Op, later: OpId, version: u64) -> Violation {
    let later = history.op(later);
    let key = history.key_name(later.key);
    Violation {
        root: None,
        finding: None,
        kind: ViolationKind::LostUpdate,
        key: key.to_string(),
        processes: vec![earlier.process, later.process],
        window: None,
        events: events(history, [earlier, later]),
        explanation: format!(
            "{key:?} lost an update: {} and {} both made version {version}. Each read the resource \
             and wrote it back one version up, so the one that landed second wrote over the other without \
             having read it. A compare-and-set on what was read refuses the second.",
            acknowledged(history, earlier),
            acknowledged(history, later),
        ),
        linearization: None,
    }
}

fn lower_version(history: &History, earlier: OpId, later: OpId) -> Violation {
    let (earlier, later) = (history.op(earlier), history.op(later));
    let key = history.key_name(later.key);
    Violation {
        root: None,
        finding: None,
        kind: ViolationKind::LostUpdate,
        key: key.to_string(),
        processes: vec![earlier.process, later.process],
        window: None,
        events: events(history, [earlier, later]),
        explanation: format!(
            "{key:?} lost an update: {} made version {}, and {}, invoked after it at index {}, made only \
             version {}: what it read was missing the acknowledged update, which it wrote over.",
            acknowledged(history, earlier),
            earlier.version.map_or(0, u64::from),
            acknowledged(history, later),
            later.invoke.index,
            later.version.map_or(0, u64::from),
        ),
        linearization: None,
    }
}

#[cfg(test)]
mod tests {
    use crate::names::RESOURCE_SAFETY;
    use crate::{history_from, CheckOptions, Checker, ResourceSafety, Verdict, ViolationKind};

    fn check(lines: &str) -> crate::CheckResult {
        ResourceSafety.check(&history_from(lines), &CheckOptions::default())
    }

    #[test]
    fn updates_that_each_read_the_last_lose_nothing() {
        let result = check(
            r#"
            0 1 invoke write r {"data":"a"}
            1 1 ok write r {"version":1}
            2 2 invoke write r {"data":"b"}
            3 3 invoke write r {"data":"c"}
            4 2 ok write r {"version":2}
            5 3 ok write r {"version":3}"#,
        );
        assert_eq!(result.checker, RESOURCE_SAFETY);
        assert_eq!(result.verdict, Some(Verdict::Valid), "{result:?}");
    }

    #[test]
    fn two_writes_of_one_version_lose_an_update() {
        let result = check(
            r#"
            0 1 invoke write r {"data":"a"}
            1 2 invoke write r {"data":"b"}
            2 1 ok write r {"version":4}
            3 2 ok write r {"version":4}"#,
        );
        assert_eq!(result.verdict, Some(Verdict::Invalid));
        assert_eq!(result.violations[0].kind, ViolationKind::LostUpdate);
        assert_eq!(result.violations[0].processes, [1, 2]);
        assert!(result.violations[0].explanation.contains("both made version 4"));
    }

    #[test]
    fn a_write_that_read_an_older_version_loses_an_update() {
        let result = check(
            r#"
            0 1 invoke write r {"data":"a"}
            1 1 ok write r {"version":5}
            2 2 invoke write r {"data":"b"}
            3 2 ok write r {"version":3}"#,
        );
        assert_eq!(result.verdict, Some(Verdict::Invalid));
        assert_eq!(result.violations[0].kind, ViolationKind::LostUpdate);
        assert!(result.violations[0].explanation.contains("made only version 3"));
    }

    #[test]
    fn unacknowledged_and_unversioned_writes_claim_nothing() {
        let result = check(
            r#"
            0 1 invoke write r {"data":"a"}
            1 1 info write r
            2 2 invoke write r {"data":"b"}
            3 2 ok write r {"version":1}
            4 3 invoke write r {"data":"c"}
            5 3 ok write r"#,
        );
        assert_eq!(result.verdict, Some(Verdict::Valid), "{result:?}");
    }
}
