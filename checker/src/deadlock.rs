//! Deadlock: clients that each hold a lock and wait for one another's.
//!
//! A process **holds** a lock from the `ok` of its `acquire` until it invokes
//! the `release` of it, or until any of its operations ends in `info` (the
//! process is then gone: what it held is unknown, and it waits for nothing,
//! so it is never part of a cycle). This is the same notion of holding as
//! [`crate::beliefs`]. A process **waits** for a lock while its `acquire`
//! of it is invoked and not yet completed.
//!
//! The wait-for graph has an edge P → Q when P waits for a lock that Q
//! (another process) holds; a semaphore's waiter has an edge to each of
//! its holders. A **deadlock** is a cycle of that graph: P1 → P2 → … → P1,
//! each waiting for a lock the next holds.
//!
//! The check sweeps the history once, keeping the holders of each lock and
//! the acquire each process waits on. A cycle can only be closed by an
//! acquire invoked by a process that holds something: that is the only event
//! that adds an edge out of a process someone may wait for. (An acquire's
//! `ok` adds edges into its process, but a process whose acquire just
//! completed waits for nothing, so no cycle runs through it; a release or an
//! `info` only takes edges away.) At each such invoke a depth-first search
//! from its process, over waiting processes only, looks for a way back to
//! it. A cycle, once formed, lasts until the first of its members' waiting
//! acquires completes (a member can neither release nor end while it
//! waits): that completion is how it broke.
//!
//! Each cycle is one [`Violation`] of kind [`ViolationKind::Deadlock`]:
//! - `processes`: its members in cycle order, each waiting for a lock the
//!   next holds, starting from the one that began waiting first (so the
//!   one whose acquire closed the cycle is last);
//! - `key`: the lock the first member waits for (the verdict of that key
//!   counts it);
//! - `window`: from the acquire invoke that closed the cycle to the
//!   completion that broke it (the end of the history if none did);
//! - `events`: each member's `ok` of the acquire by which it holds the lock
//!   the member before it waits for, each member's waiting acquire invoke,
//!   and the completion that broke the cycle;
//! - `root`: the invoke that closed the cycle, so that it is one finding.
//!
//! The same set of waiting acquires is reported once. One cycle is
//! reported per closing invoke: when a semaphore's several holders make
//! several cycles through it at once, the first one found stands for them.
//!
//! A waiting acquire that fails with the error `deadlock` was refused by a
//! server that detected a deadlock itself (PostgreSQL's `40P01`, MySQL's
//! `1213` or `ER_USER_LOCK_DEADLOCK`). When the history shows no cycle it
//! was part of, it is a violation of its own: its events are that
//! acquire's invoke and completion. An error that is not exactly
//! `deadlock` but names one (`deadlock: ERROR 40P01: deadlock detected`,
//! `ER_USER_LOCK_DEADLOCK`) counts too, and its text is quoted as the
//! server's words.
//!
//! The history as read keeps neither an acquire's `wait_ms` nor the
//! `server` words of a completion's value, so a wait that timed out is
//! described by how long it waited, and the server's words are those of
//! the error, when it carries any.
//!
//! The check applies when some process invoked an acquire while it held a
//! lock (a wait for a second lock), or a server reported a deadlock.

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use crate::event::Function;
use crate::history::{History, KeyId, Op, OpId, Outcome};
use crate::verdict::{
    CheckOptions, CheckResult, Checker, Findings, Subject, Violation, ViolationKind, Window,
};
use crate::{format_seconds, format_time};

/// Finds cycles of clients each waiting for a lock another holds (see the
/// module's documentation).
#[derive(Debug, Default, Clone, Copy)]
pub struct Deadlock;

impl Checker for Deadlock {
    fn name(&self) -> &'static str {
        crate::verdict::names::DEADLOCK
    }

    fn judge(&self, history: &Subject<'_>, options: &CheckOptions) -> CheckResult {
        let sweep = Sweep::run(history);
        if sweep.second_waits == 0 && sweep.found.is_empty() {
            return CheckResult::not_applicable(
                self.name(),
                "no client waited for a lock while holding another",
            );
        }
        let mut by_key: HashMap<KeyId, Vec<Violation>> = HashMap::default();
        let mut cycles = 0u64;
        for found in &sweep.found {
            let (key, violation) = match found {
                Found::Cycle(cycle) => {
                    cycles += 1;
                    (history.op(cycle.members[0].wait).key, describe_cycle(history, cycle))
                }
                Found::Reported(op) => (history.op(*op).key, describe_reported(history, *op)),
            };
            by_key.entry(key).or_default().push(violation);
        }
        let mut findings = Findings::new(self.name(), options);
        for &(key, ops) in history.lock_keys() {
            let violations = by_key.remove(&key).unwrap_or_default();
            findings.key(history.key_name(key), ops, violations);
        }
        let mut result = findings.finish();
        result.reason = Some(sweep.reason(cycles));
        result
    }
}

/// A member of a cycle.
#[derive(Debug, Clone, Copy)]
struct Member {
    process: i64,
    /// The acquire it waits on.
    wait: OpId,
    /// The acquire by which it holds the lock the member before it waits for.
    grant: OpId,
}

/// A cycle found, and what broke it.
#[derive(Debug)]
struct Cycle {
    /// In cycle order, from the one that began waiting first.
    members: Vec<Member>,
    /// The acquire whose invoke closed it.
    closer: OpId,
    /// The first of the members' waiting acquires to complete.
    broken_by: Option<OpId>,
}

#[derive(Debug)]
enum Found {
    Cycle(Cycle),
    /// A server-reported deadlock of this acquire, with no cycle shown.
    Reported(OpId),
}

/// What the sweep keeps of one process.
#[derive(Debug, Default)]
struct Client {
    /// The locks it holds: (key, the acquire that granted it).
    held: Vec<(KeyId, OpId)>,
    /// The acquire it waits on, and the cycles (in `found`) it is part of.
    waiting: Option<(OpId, Vec<u32>)>,
}

/// One pass over the history's events.
struct Sweep<'h> {
    history: &'h History,
    clients: Vec<Client>,
    /// Per key: its holders (client, granting acquire).
    holders: Vec<Vec<(u32, OpId)>>,
    /// Cycles and server-reported deadlocks, in the order they formed.
    found: Vec<Found>,
    /// The waiting acquires of each cycle reported, sorted.
    reported: HashSet<Vec<OpId>>,
    /// Acquires invoked while their process held a lock.
    second_waits: u64,
    /// The longest of them, invoke to completion (or the end).
    longest_ns: u64,
    /// Per client, the search that last visited it.
    visited: Vec<u32>,
    search: u32,
}

impl<'h> Sweep<'h> {
    fn run(history: &'h History) -> Sweep<'h> {
        let mut sweep = Sweep {
            history,
            clients: Vec::new(),
            holders: vec![Vec::new(); history.key_count()],
            found: Vec::new(),
            reported: HashSet::default(),
            second_waits: 0,
            longest_ns: 0,
            visited: Vec::new(),
            search: 0,
        };
        let mut ids: HashMap<i64, u32> = HashMap::default();
        for step in history.steps() {
            let op = history.op(step.op);
            let next = ids.len() as u32;
            let client = *ids.entry(op.process).or_insert(next);
            if client == next {
                sweep.clients.push(Client::default());
                sweep.visited.push(0);
            }
            if step.is_completion {
                sweep.complete(client, step.op, op);
            } else {
                sweep.invoke(client, step.op, op);
            }
        }
        sweep
    }

    fn invoke(&mut self, client: u32, id: OpId, op: &Op) {
        match op.f {
            Function::Acquire => {
                let holds = !self.clients[client as usize].held.is_empty();
                self.clients[client as usize].waiting = Some((id, Vec::new()));
                if holds {
                    self.second_waits += 1;
                    let waited = self
                        .history
                        .completion_or_end(op)
                        .time_ns
                        .saturating_sub(op.invoke.time_ns);
                    self.longest_ns = self.longest_ns.max(waited);
                    self.close(client, id);
                }
            }
            Function::Release => {
                let held = &mut self.clients[client as usize].held;
                if let Some(at) = held.iter().position(|&(key, _)| key == op.key) {
                    held.remove(at);
                    let holders = &mut self.holders[op.key as usize];
                    if let Some(at) = holders.iter().position(|&(holder, _)| holder == client) {
                        holders.swap_remove(at);
                    }
                }
            }
            _ => {}
        }
    }

    fn complete(&mut self, client: u32, id: OpId, op: &Op) {
        if op.f == Function::Acquire {
            if let Some((_, cycles)) = self.clients[client as usize].waiting.take() {
                for &cycle in &cycles {
                    if let Found::Cycle(cycle) = &mut self.found[cycle as usize] {
                        cycle.broken_by.get_or_insert(id);
                    }
                }
                if cycles.is_empty()
                    && op.outcome == Outcome::Fail
                    && server_deadlock(op.error.as_deref()).is_some()
                {
                    self.found.push(Found::Reported(id));
                }
            }
            if op.outcome == Outcome::Ok {
                self.clients[client as usize].held.push((op.key, id));
                self.holders[op.key as usize].push((client, id));
            }
        }
        if op.outcome == Outcome::Info {
            // The process is gone: it holds nothing we know of, and waits for nothing.
            let gone = std::mem::take(&mut self.clients[client as usize]);
            for (key, _) in gone.held {
                self.holders[key as usize].retain(|&(holder, _)| holder != client);
            }
        }
    }

    /// Looks for a cycle through `start`, which has just begun waiting on
    /// `closer`, and records the first one found.
    fn close(&mut self, start: u32, closer: OpId) {
        let Some(path) = self.search_from(start) else { return };
        let mut members: Vec<Member> = path
            .iter()
            .map(|&(client, grant)| {
                let (wait, _) = self.clients[client as usize].waiting.as_ref().expect("waits");
                Member { process: self.history.op(*wait).process, wait: *wait, grant }
            })
            .collect();
        let mut waits: Vec<OpId> = members.iter().map(|member| member.wait).collect();
        waits.sort_unstable();
        if !self.reported.insert(waits) {
            return;
        }
        let first = (0..members.len())
            .min_by_key(|&at| self.history.op(members[at].wait).invoke.index)
            .unwrap_or(0);
        members.rotate_left(first);
        let id = self.found.len() as u32;
        for &(client, _) in &path {
            if let Some((_, cycles)) = self.clients[client as usize].waiting.as_mut() {
                cycles.push(id);
            }
        }
        self.found.push(Found::Cycle(Cycle { members, closer, broken_by: None }));
    }

    /// A depth-first search over waiting processes for a way from `start`
    /// back to it: the path's clients from `start`, each with the acquire
    /// by which it holds the lock the one before it (for `start`, the last)
    /// waits for.
    fn search_from(&mut self, start: u32) -> Option<Vec<(u32, OpId)>> {
        self.search += 1;
        let search = self.search;
        self.visited[start as usize] = search;
        // (client, the grant by which it holds its predecessor's lock, next holder to try)
        let mut stack: Vec<(u32, OpId, usize)> = vec![(start, OpId::MAX, 0)];
        while let Some(&mut (client, _, ref mut next)) = stack.last_mut() {
            let (wait, _) = self.clients[client as usize].waiting.as_ref().expect("on the path");
            let key = self.history.op(*wait).key;
            let Some(&(holder, grant)) = self.holders[key as usize].get(*next) else {
                stack.pop();
                continue;
            };
            *next += 1;
            if holder == client {
                continue;
            }
            if holder == start {
                stack[0].1 = grant;
                return Some(stack.iter().map(|&(client, grant, _)| (client, grant)).collect());
            }
            if self.visited[holder as usize] == search
                || self.clients[holder as usize].waiting.is_none()
            {
                continue;
            }
            self.visited[holder as usize] = search;
            stack.push((holder, grant, 0));
        }
        None
    }

    /// The verdict's reason: `412 waits for a second lock, none in a
    /// cycle; the longest 351.0 ms`.
    fn reason(&self, cycles: u64) -> String {
        let waits = match self.second_waits {
            0 => "no waits for a second lock".to_string(),
            1 => "1 wait for a second lock".to_string(),
            many => format!("{many} waits for a second lock"),
        };
        let cycles = match cycles {
            0 => "none in a cycle".to_string(),
            1 => "1 cycle".to_string(),
            many => format!("{many} cycles"),
        };
        let reported =
            self.found.iter().filter(|found| matches!(found, Found::Reported(_))).count();
        let reported = match reported {
            0 => String::new(),
            1 => ", 1 deadlock reported by the server alone".to_string(),
            many => format!(", {many} deadlocks reported by the server alone"),
        };
        let longest = match self.second_waits {
            0 => String::new(),
            _ => format!("; the longest {}", format_seconds(self.longest_ns)),
        };
        format!("{waits}, {cycles}{reported}{longest}")
    }
}

/// Whether an error says the server refused the wait as a deadlock, and the
/// server's words when it gives any: `Some(None)` for plain `deadlock`.
fn server_deadlock(error: Option<&str>) -> Option<Option<&str>> {
    let error = error?;
    if error == "deadlock" {
        return Some(None);
    }
    if let Some(words) = error.strip_prefix("deadlock:") {
        let words = words.trim();
        return Some((!words.is_empty()).then_some(words));
    }
    error.to_ascii_lowercase().contains("deadlock").then_some(Some(error))
}

/// `the server detected it and refused process 2's wait: ERROR 40P01: …`.
fn how_it_broke(history: &History, op: &Op) -> String {
    let p = op.process;
    let waited =
        format_seconds(history.completion_or_end(op).time_ns.saturating_sub(op.invoke.time_ns));
    match op.outcome {
        Outcome::Ok => format!("process {p} got the lock (its holder's lease ran out)"),
        Outcome::Info => format!("process {p}'s wait ended unknown"),
        Outcome::Fail => match (server_deadlock(op.error.as_deref()), op.error.as_deref()) {
            (Some(Some(words)), _) => {
                format!("the server detected it and refused process {p}'s wait: {words}")
            }
            (Some(None), _) => {
                format!(
                    "the server detected it and refused process {p}'s wait (error \"deadlock\")"
                )
            }
            (None, Some("timeout")) => {
                format!("process {p} gave up after waiting {waited}, its wait limit")
            }
            (None, Some(error)) => format!("process {p}'s wait failed ({error:?}) after {waited}"),
            (None, None) => format!("process {p}'s wait was refused after {waited}"),
        },
    }
}

fn describe_cycle(history: &History, cycle: &Cycle) -> Violation {
    let members = &cycle.members;
    let closer = history.op(cycle.closer);
    let (end, until) = match cycle.broken_by.map(|id| history.op(id)) {
        Some(op) => {
            (history.completion_or_end(op), format!(", until {}", how_it_broke(history, op)))
        }
        None => (history.end(), ", still waiting when the history ends".to_string()),
    };
    let window = Window::between(closer.invoke, end);
    let mut steps = Vec::with_capacity(members.len());
    let mut events = Vec::with_capacity(2 * members.len() + 1);
    for (at, member) in members.iter().enumerate() {
        let wait = history.op(member.wait);
        let grant = history.op(member.grant);
        events.extend([wait.invoke.index, history.completion_or_end(grant).index]);
        let mut step = format!(
            "process {} holds {:?} and waits for {:?}",
            member.process,
            history.key_name(grant.key),
            history.key_name(wait.key),
        );
        if let Some(next) = members.get(at + 1) {
            step.push_str(&format!(", which process {} holds", next.process));
        }
        steps.push(step);
    }
    if cycle.broken_by.is_some() {
        events.push(end.index);
    }
    events.sort_unstable();
    events.dedup();
    Violation {
        kind: ViolationKind::Deadlock,
        key: history.key_name(history.op(members[0].wait).key).to_string(),
        processes: members.iter().map(|member| member.process).collect(),
        window: Some(window),
        events,
        explanation: format!(
            "deadlock: {}: a cycle of {} waiting clients from t={} for {}{until}. \
             Clients that take several locks must take them in one fixed order.",
            steps.join("; "),
            members.len(),
            format_time(window.start_ns),
            format_seconds(window.duration_ns()),
        ),
        linearization: None,
        root: Some(closer.invoke.index),
        finding: None,
    }
}

fn describe_reported(history: &History, id: OpId) -> Violation {
    let op = history.op(id);
    let end = history.completion_or_end(op);
    let window = Window::between(op.invoke, end);
    let words = match server_deadlock(op.error.as_deref()).flatten() {
        Some(words) => format!(": {words}"),
        None => " (error \"deadlock\")".to_string(),
    };
    Violation {
        kind: ViolationKind::Deadlock,
        key: history.key_name(op.key).to_string(),
        processes: vec![op.process],
        window: Some(window),
        events: vec![op.invoke.index, end.index],
        explanation: format!(
            "the server reported a deadlock: it refused process {p}'s wait for {key:?} at t={at}, \
             after {waited}{words}. The history shows no cycle of waiting clients behind it: \
             a client or a lock outside the history may have been part of it.",
            p = op.process,
            key = history.key_name(op.key),
            at = format_time(end.time_ns),
            waited = format_seconds(window.duration_ns()),
        ),
        linearization: None,
        root: Some(op.invoke.index),
        finding: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{history_from, read_history, Verdict};

    fn check(lines: &str) -> CheckResult {
        Deadlock.check(&history_from(lines), &CheckOptions::default())
    }

    /// A history from JSON lines without their `index` (given in order).
    fn from_json(lines: &[&str]) -> History {
        let text: String = lines
            .iter()
            .enumerate()
            .map(|(index, line)| format!("{{\"index\":{index},{line}}}\n"))
            .collect();
        read_history(text.as_bytes(), "test").expect("test history reads")
    }

    /// Clients 1 and 2 take "a" then "b"; 3 takes "b" then "a" and closes
    /// a cycle with 1 at index 5 (t=3.201 s); `ending` breaks it at t=4.205 s.
    fn opposite(ending: &str) -> String {
        format!(
            r#"
            1000000000 1 invoke acquire a {{"ttl_ms":5000}}
            1000000001 1 ok acquire a
            2000000000 3 invoke acquire b {{"ttl_ms":5000}}
            2000000001 3 ok acquire b
            3000000000 1 invoke acquire b {{"ttl_ms":5000,"wait_ms":1000}}
            3201000000 3 invoke acquire a {{"ttl_ms":5000,"wait_ms":1000}}
            {ending}"#
        )
    }

    #[test]
    fn one_fixed_order_never_deadlocks_however_long_the_waits() {
        let result = check(
            r#"
            0 1 invoke acquire a
            1 1 ok acquire a
            2 1 invoke acquire b {"wait_ms":60000}
            3 2 invoke acquire a {"wait_ms":60000}
            4 3 invoke acquire b
            5 3 ok acquire b
            9000000000 3 invoke release b
            9000000001 3 ok release b
            9000000002 1 ok acquire b
            9000000003 1 invoke release b
            9000000004 1 ok release b
            9000000005 1 invoke release a
            9000000006 1 ok release a
            9000000007 2 ok acquire a
            9000000008 2 invoke acquire b {"wait_ms":60000}
            9000000009 2 ok acquire b"#,
        );
        assert_eq!(result.verdict, Some(Verdict::Valid), "{result:#?}");
        assert_eq!(result.violation_count, 0);
        assert_eq!(
            result.reason.as_deref(),
            Some("2 waits for a second lock, none in a cycle; the longest 9.000 s")
        );
        let keys: Vec<(&str, Verdict)> =
            result.keys.iter().map(|key| (key.key.as_str(), key.verdict)).collect();
        assert_eq!(keys, [("a", Verdict::Valid), ("b", Verdict::Valid)]);
    }

    #[test]
    fn opposite_orders_make_a_cycle_until_a_wait_times_out() {
        let result = check(&opposite(
            "4205000000 1 fail acquire b !timeout
             4205000001 1 invoke release a
             4205000002 1 ok release a
             4205000003 3 ok acquire a",
        ));
        assert_eq!(result.verdict, Some(Verdict::Invalid), "{result:#?}");
        assert_eq!(result.violation_count, 1);
        let violation = &result.violations[0];
        assert_eq!(violation.kind, ViolationKind::Deadlock);
        // 1 began waiting first; 3 closed the cycle.
        assert_eq!(violation.processes, [1, 3]);
        assert_eq!(violation.key, "b");
        let window = violation.window.expect("a window");
        assert_eq!((window.start_index, window.end_index), (5, 6));
        assert_eq!((window.start_ns, window.end_ns), (3_201_000_000, 4_205_000_000));
        // The grants of a and b, both waits, and the timeout.
        assert_eq!(violation.events, [1, 3, 4, 5, 6]);
        assert_eq!(violation.root, Some(5));
        assert_eq!(
            violation.explanation,
            "deadlock: process 1 holds \"a\" and waits for \"b\", which process 3 holds; \
             process 3 holds \"b\" and waits for \"a\": a cycle of 2 waiting clients from \
             t=3.201 s for 1.004 s, until process 1 gave up after waiting 1.205 s, its wait \
             limit. Clients that take several locks must take them in one fixed order."
        );
        let keys: Vec<(&str, Verdict, u64)> =
            result.keys.iter().map(|key| (key.key.as_str(), key.verdict, key.violations)).collect();
        assert_eq!(keys, [("a", Verdict::Valid, 0), ("b", Verdict::Invalid, 1)]);
        assert_eq!(
            result.reason.as_deref(),
            Some("2 waits for a second lock, 1 cycle; the longest 1.205 s")
        );
    }

    #[test]
    fn the_server_refusing_a_wait_as_a_deadlock_breaks_the_cycle() {
        let result = check(&opposite(
            r#"4205000000 3 fail acquire a !deadlock {"server":"ERROR 40P01: deadlock detected"}
               4205000001 1 ok acquire b"#,
        ));
        let violation = &result.violations[0];
        assert_eq!(violation.events, [1, 3, 4, 5, 6]);
        assert!(
            violation.explanation.contains(
                "until the server detected it and refused process 3's wait (error \"deadlock\")"
            ),
            "{}",
            violation.explanation
        );
        // The server's words, where the error carries them.
        let history = from_json(&[
            r#""time":0,"process":1,"type":"invoke","f":"acquire","key":"a","value":null"#,
            r#""time":1,"process":1,"type":"ok","f":"acquire","key":"a","value":null"#,
            r#""time":2,"process":2,"type":"invoke","f":"acquire","key":"b","value":null"#,
            r#""time":3,"process":2,"type":"ok","f":"acquire","key":"b","value":null"#,
            r#""time":4,"process":1,"type":"invoke","f":"acquire","key":"b","value":{"wait_ms":1000}"#,
            r#""time":5,"process":2,"type":"invoke","f":"acquire","key":"a","value":{"wait_ms":1000}"#,
            r#""time":6,"process":2,"type":"fail","f":"acquire","key":"a","value":{"server":"ERROR 40P01: deadlock detected"},"error":"deadlock: ERROR 40P01: deadlock detected""#,
        ]);
        let result = Deadlock.check(&history, &CheckOptions::default());
        let explanation = &result.violations[0].explanation;
        assert!(
            explanation.contains(
                "until the server detected it and refused process 2's wait: ERROR 40P01: deadlock detected."
            ),
            "{explanation}"
        );
    }

    #[test]
    fn how_a_cycle_broke_is_told() {
        let cases = [
            (
                "4205000000 1 ok acquire b",
                "until process 1 got the lock (its holder's lease ran out)",
            ),
            ("4205000000 3 info acquire a", "until process 3's wait ended unknown"),
            ("4205000000 3 fail acquire a !busy", "until process 3's wait failed (\"busy\") after"),
            (
                "4205000000 3 fail acquire a !ER_USER_LOCK_DEADLOCK",
                "refused process 3's wait: ER_USER_LOCK_DEADLOCK.",
            ),
            ("", "for 0.000 s, still waiting when the history ends."),
        ];
        for (ending, told) in cases {
            let result = check(&opposite(ending));
            assert_eq!(result.violation_count, 1, "{ending}");
            let explanation = &result.violations[0].explanation;
            assert!(explanation.contains(told), "{ending}: {explanation}");
        }
    }

    #[test]
    fn three_clients_in_a_ring() {
        let result = check(
            "0 1 invoke acquire a
             1 1 ok acquire a
             2 2 invoke acquire b
             3 2 ok acquire b
             4 3 invoke acquire c
             5 3 ok acquire c
             6 2 invoke acquire c
             7 3 invoke acquire a
             8 1 invoke acquire b
             9 3 fail acquire a !timeout",
        );
        assert_eq!(result.verdict, Some(Verdict::Invalid));
        assert_eq!(result.violation_count, 1);
        let violation = &result.violations[0];
        // From the first to wait (2), each waiting for what the next holds.
        assert_eq!(violation.processes, [2, 3, 1]);
        assert_eq!(violation.key, "c");
        assert_eq!(violation.root, Some(8));
        assert_eq!(violation.events, [1, 3, 5, 6, 7, 8, 9]);
        assert!(violation.explanation.contains("a cycle of 3 waiting clients"));
    }

    #[test]
    fn a_waiter_whose_lock_is_held_by_one_not_waiting_is_no_deadlock() {
        // 2 waits for a, held by 1, which waits for b, held by 3, which works.
        let result = check(
            "0 1 invoke acquire a
             1 1 ok acquire a
             2 3 invoke acquire b
             3 3 ok acquire b
             4 2 invoke acquire c
             5 2 ok acquire c
             6 1 invoke acquire b
             7 2 invoke acquire a
             8 3 invoke write r
             9 3 ok write r",
        );
        assert_eq!(result.verdict, Some(Verdict::Valid), "{result:#?}");
    }

    #[test]
    fn a_holder_that_ended_unknown_is_in_no_cycle() {
        // 1 held a and waited for b; its wait ended in info: it is gone.
        let result = check(
            "0 1 invoke acquire a
             1 1 ok acquire a
             2 2 invoke acquire b
             3 2 ok acquire b
             4 1 invoke acquire b
             5 1 info acquire b
             6 2 invoke acquire a",
        );
        assert_eq!(result.verdict, Some(Verdict::Valid), "{result:#?}");
        assert_eq!(result.violation_count, 0);
    }

    #[test]
    fn a_semaphores_waiter_waits_for_every_holder() {
        // s has two holders, 2 and 3; 1 holds a and waits for s; 3 waits for a.
        let result = check(
            r#"
            0 2 invoke acquire s {"permits":2}
            1 2 ok acquire s
            2 3 invoke acquire s {"permits":2}
            3 3 ok acquire s
            4 1 invoke acquire a
            5 1 ok acquire a
            6 1 invoke acquire s {"permits":2}
            7 3 invoke acquire a"#,
        );
        assert_eq!(result.violation_count, 1, "{result:#?}");
        let violation = &result.violations[0];
        assert_eq!(violation.processes, [1, 3]);
        assert_eq!(violation.events, [3, 5, 6, 7]);
    }

    #[test]
    fn a_deadlock_the_server_reports_without_a_cycle_is_still_one() {
        let result = check(
            "0 1 invoke acquire a
             1 1 ok acquire a
             2 1 invoke acquire b
             3 1 fail acquire b !deadlock",
        );
        assert_eq!(result.verdict, Some(Verdict::Invalid), "{result:#?}");
        let violation = &result.violations[0];
        assert_eq!(
            (violation.processes.as_slice(), violation.events.as_slice()),
            (&[1][..], &[2, 3][..])
        );
        assert!(violation.explanation.starts_with("the server reported a deadlock"));
        // Refused in a cycle the history shows: only the cycle counts.
        let result = check(&opposite("4205000000 3 fail acquire a !deadlock"));
        assert_eq!(result.violation_count, 1);
    }

    #[test]
    fn a_mutex_history_does_not_apply() {
        let result = check(
            "0 1 invoke acquire l
             1 2 invoke acquire l
             2 1 ok acquire l
             3 1 invoke release l
             4 1 ok release l
             5 2 ok acquire l",
        );
        assert_eq!(result.verdict, None);
        assert_eq!(
            result.reason.as_deref(),
            Some("no client waited for a lock while holding another")
        );
    }

    #[test]
    fn a_deadlock_is_one_finding_with_its_root_cause_and_no_fault() {
        let mut lines = opposite("4205000000 1 fail acquire b !timeout");
        // A fault on meanwhile is not behind it.
        lines.push_str(
            "\n4300000000 \"nemesis\" info start null {\"fault\":\"pause\",\"targets\":[\"client-3\"]}",
        );
        let history = history_from(&lines);
        let analysis =
            crate::analyze(&history, &crate::default_checkers(), &CheckOptions::default());
        let findings: Vec<&crate::Finding> = analysis
            .findings
            .iter()
            .filter(|finding| finding.cause == crate::Cause::Deadlock)
            .collect();
        assert_eq!(findings.len(), 1, "{:#?}", analysis.findings);
        let finding = findings[0];
        assert_eq!(
            (finding.root_index, finding.process, finding.fault.as_ref()),
            (5, Some(3), None)
        );
        assert_eq!(
            finding.summary,
            "locks taken in opposite orders: process 1 took \"a\" then \"b\", process 3 \"b\" \
             then \"a\"; each held its first and waited for the other's from t=3.201 s for 1.004 s."
        );
        assert_eq!(analysis.verdict_of(crate::names::DEADLOCK), Some(Verdict::Invalid));
    }

    #[test]
    fn deadlocks_past_the_ones_kept_in_full_are_findings_too() {
        // A recorded run with three cycles, of which one is kept in full: the
        // other two are still findings, described from the invoke that
        // closed each (a MariaDB run once panicked here).
        let history = crate::read_history(
            include_str!(
                "../../histories/redis/lock-order/invalid/two-locks-opposite-orders-deadlock.jsonl"
            )
            .as_bytes(),
            "two-locks-opposite-orders-deadlock.jsonl",
        )
        .expect("the corpus history reads");
        let options = CheckOptions { max_violations: 1, ..CheckOptions::default() };
        let analysis = crate::analyze(&history, &crate::default_checkers(), &options);
        let result = analysis.result_of(crate::names::DEADLOCK).expect("it ran");
        assert_eq!((result.violation_count, result.violations.len()), (3, 1));
        let deadlocks =
            analysis.findings.iter().filter(|finding| finding.cause == crate::Cause::Deadlock);
        assert_eq!(deadlocks.count(), 3, "{:#?}", analysis.findings);
    }
}
