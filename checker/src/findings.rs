//! Findings: the violations of every checker grouped by the cause that
//! began them, each with the fault behind it.
//!
//! One stalled holder breaks mutual exclusion once for every grant to
//! another client while it still acts, and its late write is a stale write
//! too; one lock service that lost its counter in a crash repeats every
//! token it had handed out. A person needs the cause, not the hundred
//! violations: a finding is one cause, with how many violations of each
//! checker it explains, the few events that prove it, and the nemesis
//! event behind it, if one was. A violation with no fault behind it is a
//! bug in the lock (or in its use) itself.
//!
//! The checkers name each violation's root ([`Violation::root`]): the grant
//! of the holder that went on too long, the first grant after the tokens
//! started over. Violations without a root join the finding whose root is
//! among their events (the linearizability checker's evidence names the
//! grant that broke the order), else make one of their own.

use std::collections::BTreeMap;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use serde::Serialize;

use crate::beliefs::Beliefs;
use crate::event::Function;
use crate::event::NemesisDetails;
use crate::history::{History, Moment, NemesisEvent, OpId, Outcome};
use crate::verdict::{CheckResult, ViolationKind};
use crate::{format_seconds, format_time};

/// What kind of cause a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Cause {
    /// A holder went on acting after its lock was granted to another.
    StaleHolder,
    /// A lock's fencing tokens started over below those already handed out.
    TokenReset,
    /// Clients each held a lock and waited for one another's: locks taken
    /// in opposite orders, or a longer cycle of waits.
    Deadlock,
    /// A violation of its own kind, not traced to a stale holder or a reset.
    Other(ViolationKind),
}

impl Cause {
    /// For people: `stale holder`, `token reset`, `stuck lock`, …
    pub fn describe(self) -> &'static str {
        match self {
            Cause::StaleHolder => "stale holder",
            Cause::TokenReset => "token reset",
            Cause::Deadlock => "deadlock",
            Cause::Other(kind) => match kind {
                ViolationKind::Overlap => "overlap",
                ViolationKind::DuplicateToken => "duplicate token",
                ViolationKind::BackwardsToken => "backwards token",
                ViolationKind::MixedFencing => "mixed fencing",
                ViolationKind::StaleWrite => "stale write",
                ViolationKind::DoubleCharge => "double charge",
                ViolationKind::StaleRead => "stale read",
                ViolationKind::LostUpdate => "lost update",
                ViolationKind::Stuck => "stuck lock",
                ViolationKind::Deadlock => "deadlock",
                ViolationKind::NotLinearizable => "not linearizable",
                ViolationKind::RanTwice => "ran twice",
                ViolationKind::NeverRan => "never ran",
                ViolationKind::DoneTwice => "done twice",
                ViolationKind::NeverDone => "never done",
                ViolationKind::KeyReused => "idempotency key reused",
                ViolationKind::ReplayDiffers => "replay differs",
                ViolationKind::InFlightNotRefused => "in flight not refused",
                ViolationKind::NoLeader => "no leader",
            },
        }
    }
}

/// The fault a finding is traced to: one nemesis start, and its stop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FaultBehind {
    /// Its `--nemesis` name: `pause`, `kill`, …
    pub fault: String,
    pub targets: Vec<String>,
    pub start_index: u64,
    pub start_ns: u64,
    /// When it stopped (none: it ran to the end of the history).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_ns: Option<u64>,
    /// `pause struck client-2 (process 17) before-release at t=18.820 s for 2.997 s`.
    pub description: String,
}

/// How many violations of one checker a finding explains.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Explained {
    pub checker: &'static str,
    pub violations: u64,
}

/// One cause, and the violations it explains.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// 1, 2, … in the order the causes began; violations carry it.
    pub id: u32,
    pub cause: Cause,
    /// The lock (or resource) it concerns.
    pub key: String,
    /// The client in the wrong, where one is: the stale holder, the one
    /// granted the first repeated token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process: Option<i64>,
    /// The event that began it, and when.
    pub root_index: u64,
    pub root_ns: u64,
    /// Violations it explains in all, and per checker.
    pub violations: u64,
    pub checkers: Vec<Explained>,
    /// The few events that prove it, ascending.
    pub events: Vec<u64>,
    /// One short paragraph for a person.
    pub summary: String,
    /// The explanation of the first violation it explains that was kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub example: Option<String>,
    /// The fault behind it; none: the lock broke with no fault to blame.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fault: Option<FaultBehind>,
}

impl Finding {
    /// `pause`, `kill`, … or `no fault`: what a report groups findings by.
    pub fn fault_name(&self) -> &str {
        self.fault.as_ref().map_or("no fault", |fault| fault.fault.as_str())
    }
}

/// How many operations' events a finding quotes at most (the fault's
/// start comes on top).
const PROOF_EVENTS: usize = 6;

/// A fault from its start to its stop, as the history records it.
#[derive(Debug)]
struct Interval<'h> {
    start: &'h NemesisEvent,
    stop: Option<&'h NemesisEvent>,
    /// The processes it struck, when the record names them.
    processes: Option<Vec<i64>>,
}

impl Interval<'_> {
    fn name(&self) -> &str {
        self.start.fault.as_deref().unwrap_or("fault")
    }

    fn start_ns(&self) -> u64 {
        self.start.at.time_ns
    }

    fn stop_ns(&self, history_end: u64) -> u64 {
        self.stop.map_or(history_end, |stop| stop.at.time_ns)
    }

    /// Whether it strikes clients rather than servers.
    fn strikes_clients(&self) -> bool {
        self.processes.is_some() || self.start.targets.iter().any(|t| t.starts_with("client"))
    }

    /// A detail of its record: the stop's, else the start's.
    fn detail<T>(&self, get: impl Fn(&NemesisDetails) -> Option<T>) -> Option<T> {
        self.stop.and_then(|stop| get(&stop.details)).or_else(|| get(&self.start.details))
    }

    fn describe(&self, history_end: u64) -> String {
        let name = self.name();
        let targets = self.start.targets.join(", ");
        let processes = match &self.processes {
            Some(list) if !list.is_empty() => {
                let list: Vec<String> = list.iter().map(i64::to_string).collect();
                let noun = if list.len() == 1 { "process" } else { "processes" };
                format!(" ({noun} {})", list.join(", "))
            }
            _ => String::new(),
        };
        let start = format_time(self.start_ns());
        let stop = self.stop.map(|stop| stop.at.time_ns);
        let length = format_seconds(self.stop_ns(history_end).saturating_sub(self.start_ns()));
        match name {
            "pause" => {
                let struck = self.detail(|details| details.struck.clone().flatten());
                let stall = self.detail(|details| details.stall_ms);
                let at = struck.map(|point| format!(" {point}")).unwrap_or_default();
                let stall = stall
                    .map(|ms| format_seconds(ms * 1_000_000))
                    .unwrap_or_else(|| length.clone());
                format!("pause struck {targets}{processes}{at} at t={start} for {stall}")
            }
            "kill" => {
                let back = stop.map(|ns| format!(" (back at t={})", format_time(ns)));
                let kept = match self.detail(|details| details.persistent) {
                    Some(true) => ", persistent",
                    Some(false) => ", not persistent",
                    None => "",
                };
                format!("kill of {targets} at t={start}{}{kept}", back.unwrap_or_default())
            }
            "clock" | "clock-drift" => {
                let how = match (
                    self.detail(|details| details.jump_ms),
                    self.detail(|details| details.drift_micros),
                ) {
                    (Some(ms), _) => format!(" jumped {} forward", format_seconds(ms * 1_000_000)),
                    (None, Some(micros)) => {
                        format!(" ran {:.2}× fast for {length}", micros as f64 / 1e6)
                    }
                    _ => String::new(),
                };
                format!("clock of {targets}{how} at t={start}")
            }
            _ => {
                let shape = self.detail(|details| details.shape.clone());
                let shape = shape.map(|shape| format!(" ({shape})")).unwrap_or_default();
                format!("{name}{shape} of {targets}{processes} from t={start} for {length}")
            }
        }
    }

    fn behind(&self, history_end: u64) -> FaultBehind {
        FaultBehind {
            fault: self.name().to_string(),
            targets: self.start.targets.clone(),
            start_index: self.start.at.index,
            start_ns: self.start_ns(),
            stop_ns: self.stop.map(|stop| stop.at.time_ns),
            description: self.describe(history_end),
        }
    }
}

/// Pairs each fault's start with its stop: the first open start of the
/// same fault and targets.
fn intervals(history: &History) -> Vec<Interval<'_>> {
    let mut intervals: Vec<Interval<'_>> = Vec::new();
    let mut open: BTreeMap<(Option<&str>, &[String]), Vec<usize>> = BTreeMap::new();
    for event in history.nemesis_events() {
        let pairing = (event.fault.as_deref(), event.targets.as_slice());
        match event.f {
            Function::Stop => {
                if let Some(at) = open
                    .get_mut(&pairing)
                    .and_then(|starts| (!starts.is_empty()).then(|| starts.remove(0)))
                {
                    let interval = &mut intervals[at];
                    interval.stop = Some(event);
                    if let Some(more) = event.details.processes.clone() {
                        let list = interval.processes.get_or_insert_with(Vec::new);
                        list.extend(more);
                        list.sort_unstable();
                        list.dedup();
                    }
                }
            }
            _ => {
                open.entry(pairing).or_default().push(intervals.len());
                let processes = event.details.processes.clone();
                intervals.push(Interval { start: event, stop: None, processes });
            }
        }
    }
    intervals
}

/// Whether a violation is about work done twice or not at all, whose
/// checkers (exactly-once, idempotency) see one cause from two sides.
fn is_work(kind: ViolationKind) -> bool {
    matches!(
        kind,
        ViolationKind::DoneTwice
            | ViolationKind::NeverDone
            | ViolationKind::KeyReused
            | ViolationKind::ReplayDiffers
            | ViolationKind::InFlightNotRefused
    )
}

/// Where a finding's violations are gathered before it is described.
#[derive(Debug, Default)]
struct Group {
    /// Per checker (in results' order): violations explained.
    counts: BTreeMap<usize, u64>,
    /// Kept violations: (result, violation).
    kept: Vec<(usize, usize)>,
    /// Whether the fence checker named the root (a token reset).
    reset: bool,
}

/// Groups the violations of `results` into findings, marks each kept
/// violation with its finding's id, and traces each finding to the fault
/// behind it.
pub fn group(history: &History, beliefs: &Beliefs, results: &mut [CheckResult]) -> Vec<Finding> {
    // Rooted violations, kept or not, by root.
    let mut groups: BTreeMap<(u64, bool), Group> = BTreeMap::new();
    for (at, result) in results.iter().enumerate() {
        let reset = result.checker == crate::verdict::names::FENCE_MONOTONICITY;
        for &(root, count) in &result.roots {
            let group = groups.entry((root, false)).or_default();
            *group.counts.entry(at).or_default() += count;
            group.reset |= reset;
        }
    }
    let roots: HashSet<u64> = groups.keys().map(|&(root, _)| root).collect();
    // The events of the work-done violations grouped so far, by the group
    // they joined: one unit charged twice is seen by exactly-once (the
    // double) and by idempotency (the request that should have been
    // refused or replayed), and is one finding.
    let mut work: HashMap<u64, u64> = HashMap::default();
    for (at, result) in results.iter().enumerate() {
        for (which, violation) in result.violations.iter().enumerate() {
            let group = match violation.root {
                Some(root) => groups.entry((root, false)).or_default(),
                None => {
                    // Joins the finding whose root it names, else its own.
                    let linked = violation.events.iter().find(|index| roots.contains(index));
                    let group = match linked {
                        Some(&root) => groups.entry((root, false)).or_default(),
                        None => {
                            let mut own = violation.events.first().copied().unwrap_or_default();
                            if is_work(violation.kind) {
                                let shared =
                                    violation.events.iter().find_map(|index| work.get(index));
                                own = shared.copied().unwrap_or(own);
                                for &index in &violation.events {
                                    work.entry(index).or_insert(own);
                                }
                            }
                            groups.entry((own, true)).or_default()
                        }
                    };
                    *group.counts.entry(at).or_default() += 1;
                    group
                }
            };
            group.kept.push((at, which));
        }
    }
    // The grants the roots name.
    let mut grants: HashMap<u64, OpId> = HashMap::default();
    for (id, op) in history.ops().iter().enumerate() {
        if op.f == Function::Acquire && op.is_ok() {
            let ok = history.completion_or_end(op).index;
            if roots.contains(&ok) {
                grants.insert(ok, id as OpId);
            }
        }
    }
    let context = Context {
        history,
        beliefs,
        waits: deadlock_waits(history, results),
        faults: intervals(history),
        end: history.end().time_ns,
        writes: writes_by_process(history),
        highest: highest_tokens(history),
    };
    let mut findings = Vec::with_capacity(groups.len());
    for (id, ((root, own), group)) in (1u32..).zip(groups) {
        for &(at, which) in &group.kept {
            results[at].violations[which].finding = Some(id);
        }
        let grant = (!own).then(|| grants.get(&root).copied()).flatten();
        findings.push(describe(&context, results, id, root, grant, &group));
    }
    findings
}

/// What describing a finding looks up, gathered once for all of them.
struct Context<'h> {
    history: &'h History,
    beliefs: &'h Beliefs,
    faults: Vec<Interval<'h>>,
    end: u64,
    /// Each process's writes, in invoke order.
    writes: HashMap<i64, Vec<OpId>>,
    /// Per key: each fenced grant (by op id) and the highest token granted
    /// up to it.
    highest: HashMap<crate::history::KeyId, Vec<(OpId, u64)>>,
    /// The acquires the kept deadlocks name, by their invoke's index.
    waits: HashMap<u64, OpId>,
}

/// The acquires whose invoke a kept deadlock names among its events (its
/// members' waits), by that index; empty (and no scan) without deadlocks.
fn deadlock_waits(history: &History, results: &[CheckResult]) -> HashMap<u64, OpId> {
    let named: HashSet<u64> = results
        .iter()
        .flat_map(|result| &result.violations)
        .filter(|violation| violation.kind == ViolationKind::Deadlock)
        .flat_map(|violation| violation.events.iter().copied())
        .collect();
    if named.is_empty() {
        return HashMap::default();
    }
    history
        .ops()
        .iter()
        .enumerate()
        .filter(|(_, op)| op.f == Function::Acquire && named.contains(&op.invoke.index))
        .map(|(id, op)| (op.invoke.index, id as OpId))
        .collect()
}

/// A deadlock's root cause in a sentence: `locks taken in opposite
/// orders: …`, or `a cycle of 3 clients each waiting for a lock another
/// holds: …`. A deadlock the server reported with no cycle shown is told
/// as the checker told it.
fn deadlock(context: &Context<'_>, violation: &crate::verdict::Violation) -> String {
    let history = context.history;
    // Each member's wait: the acquire of that process among the events.
    let waited: Option<Vec<&str>> = violation
        .processes
        .iter()
        .map(|&process| {
            violation.events.iter().find_map(|index| {
                let op = history.op(*context.waits.get(index)?);
                (op.process == process).then(|| history.key_name(op.key))
            })
        })
        .collect();
    let (Some(waited), true) = (waited, violation.processes.len() > 1) else {
        return violation.explanation.clone();
    };
    let during = violation
        .window
        .map(|window| {
            format!(
                " from t={} for {}",
                format_time(window.start_ns),
                format_seconds(window.duration_ns())
            )
        })
        .unwrap_or_default();
    let processes = &violation.processes;
    match waited.as_slice() {
        &[first, second] if first != second => format!(
            "locks taken in opposite orders: process {a} took {second:?} then {first:?}, \
             process {b} {first:?} then {second:?}; each held its first and waited for the \
             other's{during}.",
            a = processes[0],
            b = processes[1],
        ),
        keys => {
            let names: Vec<String> = processes.iter().map(i64::to_string).collect();
            let keys: Vec<String> = keys.iter().map(|key| format!("{key:?}")).collect();
            format!(
                "a cycle of {n} clients each waiting for a lock another holds: processes {names} \
                 waited for {keys} in turn{during}.",
                n = processes.len(),
                names = and_list(&names),
                keys = and_list(&keys),
            )
        }
    }
}

/// `1, 2 and 3`.
fn and_list(items: &[String]) -> String {
    match items.split_last() {
        None => String::new(),
        Some((only, [])) => only.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

fn writes_by_process(history: &History) -> HashMap<i64, Vec<OpId>> {
    let mut writes: HashMap<i64, Vec<OpId>> = HashMap::default();
    for (id, op) in history.ops().iter().enumerate() {
        if op.f == Function::Write {
            writes.entry(op.process).or_default().push(id as OpId);
        }
    }
    writes
}

fn highest_tokens(history: &History) -> HashMap<crate::history::KeyId, Vec<(OpId, u64)>> {
    let mut highest: HashMap<crate::history::KeyId, Vec<(OpId, u64)>> = HashMap::default();
    for (id, op) in history.ops().iter().enumerate() {
        if let (Function::Acquire, Some(fence)) = (&op.f, op.fence) {
            let list = highest.entry(op.key).or_default();
            let reached = list.last().map_or(fence, |&(_, top)| top.max(fence));
            list.push((id as OpId, reached));
        }
    }
    highest
}

/// Describes one group as a finding.
fn describe(
    context: &Context<'_>,
    results: &[CheckResult],
    id: u32,
    root: u64,
    grant: Option<OpId>,
    group: &Group,
) -> Finding {
    let (history, faults, end) = (context.history, &context.faults, context.end);
    let checkers: Vec<Explained> = group
        .counts
        .iter()
        .map(|(&at, &violations)| Explained { checker: results[at].checker, violations })
        .collect();
    let violations = checkers.iter().map(|explained| explained.violations).sum();
    let first = group.kept.first().map(|&(at, which)| &results[at].violations[which]);
    // The proof: the root's events, then the first kept violation's.
    let mut events: Vec<u64> = Vec::new();
    if let Some(grant) = grant {
        let op = history.op(grant);
        events.extend([op.invoke.index, root]);
    }
    for &index in first.map_or(&[][..], |violation| violation.events.as_slice()) {
        if events.len() >= PROOF_EVENTS {
            break;
        }
        if !events.contains(&index) {
            events.push(index);
        }
    }
    let root_ns = match grant {
        Some(grant) => history.completion_or_end(history.op(grant)).time_ns,
        None => first.and_then(|violation| violation.window).map_or(0, |window| window.start_ns),
    };
    let (cause, key, process, summary, fault) = match grant {
        Some(grant) if group.reset => {
            let (summary, fault) = token_reset(context, grant, violations);
            let op = history.op(grant);
            (Cause::TokenReset, history.key_name(op.key), Some(op.process), summary, fault)
        }
        Some(grant) => {
            let (summary, fault) = stale_holder(context, grant, group, results);
            let op = history.op(grant);
            (Cause::StaleHolder, history.key_name(op.key), Some(op.process), summary, fault)
        }
        None if first.is_some_and(|violation| violation.kind == ViolationKind::Deadlock) => {
            // A deadlock is the clients' own lock order: no fault is behind
            // it, whatever faults were on while it lasted.
            let violation = first.expect("checked");
            let summary = deadlock(context, violation);
            let process = violation.processes.last().copied();
            (Cause::Deadlock, violation.key.as_str(), process, summary, None)
        }
        // Violations counted past those kept in full (`max_violations`),
        // whose root names no grant: deadlocks, rooted at the invoke that
        // closed their cycle. Described from that invoke.
        None if first.is_none() => {
            let closer = history.ops().iter().find(|op| op.invoke.index == root);
            let key = closer.map_or("", |op| history.key_name(op.key));
            let process = closer.map(|op| op.process);
            let summary = format!(
                "{violations} more violation{} of {} rooted at index {root}, past those kept in full",
                if violations == 1 { "" } else { "s" },
                checkers.iter().map(|explained| explained.checker).collect::<Vec<_>>().join(", ")
            );
            let deadlock = checkers
                .iter()
                .all(|explained| explained.checker == crate::verdict::names::DEADLOCK);
            let cause = match deadlock {
                true => Cause::Deadlock,
                false => Cause::Other(ViolationKind::NotLinearizable),
            };
            (cause, key, process, summary, None)
        }
        None => {
            let violation = first.expect("a group without a root grant has a kept violation");
            // A history with no order of its operations has no window of
            // its own: the operations that prove it span one.
            let linear = violation.kind == ViolationKind::NotLinearizable;
            let window = match (violation.window, linear) {
                (None, true) => span_of(history, &violation.events).map(|span| {
                    held_since(history, &violation.events, violation.processes.last().copied())
                        .map_or(span, |since| (span.0.min(since), span.1))
                }),
                (window, _) => window.map(|window| (window.start_ns, window.end_ns)),
            };
            // Work done twice names last the worker behind it, the one whose
            // job outlived its visibility timeout: a fault that struck it (a
            // stall) is behind the double. The operation no order admits is
            // named last too: a stall of its client may be behind it.
            let struck =
                violation.processes.last().copied().filter(|_| is_work(violation.kind) || linear);
            let fault = window
                .and_then(|(start_ns, end_ns)| during(faults, end, start_ns, end_ns, struck))
                .map(|interval| interval.behind(end));
            let summary = violation.explanation.clone();
            let process = violation.processes.last().copied();
            (Cause::Other(violation.kind), violation.key.as_str(), process, summary, fault)
        }
    };
    // The fault's start is part of the proof.
    if let Some(fault) = &fault {
        events.push(fault.start_index);
    }
    events.sort_unstable();
    events.dedup();
    Finding {
        id,
        cause,
        key: key.to_string(),
        process,
        root_index: root,
        root_ns,
        violations,
        checkers,
        events,
        example: first.map(|violation| violation.explanation.clone()),
        summary,
        fault,
    }
}

/// A holder that went on acting while its lock was granted to others.
fn stale_holder(
    context: &Context<'_>,
    grant: OpId,
    group: &Group,
    results: &[CheckResult],
) -> (String, Option<FaultBehind>) {
    let (history, faults, end) = (context.history, &context.faults, context.end);
    let op = history.op(grant);
    let granted = history.completion_or_end(op);
    let key = history.key_name(op.key);
    // Its belief: until its release, its crash or the end.
    let beliefs = context.beliefs.of_key(op.key);
    let at = beliefs.partition_point(|belief| belief.start.index < granted.index);
    let acted_until = beliefs
        .get(at)
        .filter(|belief| belief.grant == grant)
        .map_or(end, |belief| belief.end.time_ns);
    let lease = op
        .ttl_ms
        .map(|ttl| format!(" with a {} lease", format_seconds(ttl * 1_000_000)))
        .unwrap_or_default();
    // Grants to others while it still acted: one overlap each.
    let overlaps: u64 = group
        .counts
        .iter()
        .filter(|(&at, _)| results[at].checker == crate::verdict::names::MUTUAL_EXCLUSION)
        .map(|(_, &count)| count)
        .sum();
    let others = if overlaps > 0 {
        format!("; {} to others overlapped it", plural(overlaps, "grant", "grants"))
    } else {
        String::new()
    };
    let writes = context.writes.get(&op.process).map_or(&[][..], Vec::as_slice);
    let storage = storage_outcome(history, writes, granted, acted_until);
    let past = op
        .ttl_ms
        .map(|ttl| acted_until.saturating_sub(op.invoke.time_ns + ttl * 1_000_000))
        .filter(|&past| past > 0)
        .map(|past| format!(", {} past its lease", format_seconds(past)))
        .unwrap_or_default();
    let summary = format!(
        "process {p} was granted {key:?} at t={at}{lease} and acted as its holder until t={until}{past}{others}{storage}.",
        p = op.process,
        at = format_time(granted.time_ns),
        until = format_time(acted_until),
    );
    // The fault: one that struck this process while it held the lock,
    // else a server's fault while it did.
    let fault = during(faults, end, op.invoke.time_ns, acted_until, Some(op.process))
        .map(|interval| interval.behind(end));
    (summary, fault)
}

/// What became of the stale holder's writes: `; the storage refused its
/// write (stale-fence)`.
fn storage_outcome(history: &History, writes: &[OpId], from: Moment, until: u64) -> String {
    let first = writes.partition_point(|&id| history.op(id).invoke.index <= from.index);
    let writes = writes[first..]
        .iter()
        .map(|&id| history.op(id))
        .take_while(|write| write.invoke.time_ns <= until);
    let (mut refused, mut landed) = (0u64, 0u64);
    for write in writes {
        match write.outcome {
            crate::history::Outcome::Ok => landed += 1,
            crate::history::Outcome::Fail if write.error.as_deref() == Some("stale-fence") => {
                refused += 1
            }
            _ => {}
        }
    }
    match (refused, landed) {
        (0, 0) => String::new(),
        (refused, 0) => {
            format!("; the fenced storage refused {}", plural(refused, "write", "writes"))
        }
        (0, landed) => format!("; the storage accepted {}", plural(landed, "write", "writes")),
        (refused, landed) => format!(
            "; the storage refused {} and accepted {}",
            plural(refused, "write", "writes"),
            plural(landed, "write", "writes")
        ),
    }
}

/// A lock's tokens started over.
fn token_reset(
    context: &Context<'_>,
    grant: OpId,
    violations: u64,
) -> (String, Option<FaultBehind>) {
    let (history, faults, end) = (context.history, &context.faults, context.end);
    let op = history.op(grant);
    let granted = history.completion_or_end(op);
    let key = history.key_name(op.key);
    let highest = context.highest.get(&op.key).and_then(|list| {
        let at = list.partition_point(|&(id, _)| id < grant);
        at.checked_sub(1).map(|before| list[before].1)
    });
    let token = op.fence.map(|fence| format!(" token {fence}")).unwrap_or_default();
    let highest =
        highest.map(|highest| format!(" after tokens up to {highest}")).unwrap_or_default();
    let summary = format!(
        "the tokens of {key:?} started over: process {p} was granted{token} at t={at}{highest}; \
         {n} repeat or undercut tokens already handed out, so fenced storage cannot tell old holders from new.",
        p = op.process,
        at = format_time(granted.time_ns),
        n = plural(violations, "violation", "violations"),
    );
    // The crash (or failover) that lost the counter: the last before it.
    let fault = faults
        .iter()
        .filter(|interval| matches!(interval.name(), "kill" | "failover"))
        .rfind(|interval| interval.start_ns() <= granted.time_ns)
        .map(|interval| interval.behind(end));
    (summary, fault)
}

/// The fault behind something that happened from `from` to `until`: one
/// that struck `process` in that span first (a client's fault names the
/// process), else a fault of the servers' active in it (the latest to
/// start), else a client's fault whose record names no process.
fn during<'a, 'h>(
    faults: &'a [Interval<'h>],
    end: u64,
    from: u64,
    until: u64,
    process: Option<i64>,
) -> Option<&'a Interval<'h>> {
    let active =
        |interval: &&Interval<'_>| interval.start_ns() <= until && interval.stop_ns(end) >= from;
    let on_process = |interval: &&Interval<'_>| match (&interval.processes, process) {
        (Some(list), Some(process)) => list.contains(&process),
        _ => false,
    };
    let active = |interval: &&Interval<'_>, wanted: &dyn Fn(&Interval<'_>) -> bool| {
        active(interval) && wanted(interval)
    };
    let latest = |wanted: &dyn Fn(&Interval<'_>) -> bool| {
        faults.iter().rfind(|interval| active(interval, wanted))
    };
    latest(&|interval| on_process(&interval))
        .or_else(|| latest(&|interval| !interval.strikes_clients()))
        .or_else(|| latest(&|interval| interval.strikes_clients() && interval.processes.is_none()))
}

/// From the first invoke among `events` to the latest completion of the
/// operations they invoke: the time the operations that prove a violation
/// took, in ns. `None` when no event is an invoke.
fn span_of(history: &History, events: &[u64]) -> Option<(u64, u64)> {
    let ops = history.ops();
    let mut span: Option<(u64, u64)> = None;
    for &index in events {
        let at = ops.partition_point(|op| op.invoke.index < index);
        let Some(op) = ops.get(at).filter(|op| op.invoke.index == index) else { continue };
        let (start, end) = (op.invoke.time_ns, history.completion_or_end(op).time_ns);
        span = Some(span.map_or((start, end), |(low, high)| (low.min(start), high.max(end))));
    }
    span
}

/// When the operation no order admits is `process`'s own on a lock it
/// was granted (a late renewal or release), the time of the invoke of
/// that grant: a stall that struck while it held the lock, and ended just
/// before the operation, is behind it too.
fn held_since(history: &History, events: &[u64], process: Option<i64>) -> Option<u64> {
    let process = process?;
    let ops = history.ops();
    let blocked = events.iter().rev().find_map(|&index| {
        let at = ops.partition_point(|op| op.invoke.index < index);
        ops.get(at).filter(|op| op.invoke.index == index && op.process == process).map(|_| at)
    })?;
    let key = ops[blocked].key;
    // The process's own operations back to its last acquire or release of
    // this lock, past its renewals (a bounded look: a holder does a few between its grant and its end).
    let last = ops[..blocked]
        .iter()
        .rev()
        .filter(|op| op.process == process)
        .take(LOOK_BACK)
        .find(|op| op.key == key && op.f != Function::Renew)?;
    (last.f == Function::Acquire && last.outcome == Outcome::Ok).then_some(last.invoke.time_ns)
}

/// How many of a process's operations [`held_since`] looks back over.
const LOOK_BACK: usize = 64;

fn plural(count: u64, one: &str, many: &str) -> String {
    format!("{count} {}", if count == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{analyze, default_checkers, read_history, CheckOptions};

    fn history(lines: &[&str]) -> History {
        let text: String = lines
            .iter()
            .enumerate()
            .map(|(index, line)| format!("{{\"index\":{index},{line}}}\n"))
            .collect();
        read_history(text.as_bytes(), "test").expect("test history reads")
    }

    /// Client 1 stalls past its lease (a pause names its process); 2 and 3
    /// are granted the lock while it still acts: one finding, two
    /// violations of mutual exclusion, traced to the pause.
    #[test]
    fn overlaps_with_one_stale_holder_are_one_finding_traced_to_its_pause() {
        let history = history(&[
            r#""time":0,"process":1,"type":"invoke","f":"acquire","key":"l","value":{"ttl_ms":1000}"#,
            r#""time":10,"process":1,"type":"ok","f":"acquire","key":"l","value":null"#,
            r#""time":20,"process":"nemesis","type":"info","f":"start","key":null,"value":{"fault":"pause","targets":["client-1"],"processes":[1],"stall_ms":3000,"at":"after-grant"}"#,
            r#""time":1500000000,"process":2,"type":"invoke","f":"acquire","key":"l","value":{"ttl_ms":1000}"#,
            r#""time":1500000010,"process":2,"type":"ok","f":"acquire","key":"l","value":null"#,
            r#""time":1600000000,"process":2,"type":"invoke","f":"release","key":"l","value":null"#,
            r#""time":1600000010,"process":2,"type":"ok","f":"release","key":"l","value":null"#,
            r#""time":1700000000,"process":3,"type":"invoke","f":"acquire","key":"l","value":{"ttl_ms":1000}"#,
            r#""time":1700000010,"process":3,"type":"ok","f":"acquire","key":"l","value":null"#,
            r#""time":1800000000,"process":3,"type":"invoke","f":"release","key":"l","value":null"#,
            r#""time":1800000010,"process":3,"type":"ok","f":"release","key":"l","value":null"#,
            r#""time":3000000020,"process":"nemesis","type":"info","f":"stop","key":null,"value":{"fault":"pause","targets":["client-1"],"processes":[1],"stall_ms":3000,"at":"after-grant","struck":"after-grant"}"#,
            r#""time":3000000030,"process":1,"type":"invoke","f":"release","key":"l","value":null"#,
            r#""time":3000000040,"process":1,"type":"fail","f":"release","key":"l","value":null,"error":"not-held""#,
        ]);
        let analysis = analyze(&history, &default_checkers(), &CheckOptions::default());
        let findings = &analysis.findings;
        let stale: Vec<&Finding> =
            findings.iter().filter(|finding| finding.cause == Cause::StaleHolder).collect();
        assert_eq!(stale.len(), 1, "{findings:#?}");
        let finding = stale[0];
        assert_eq!((finding.process, finding.root_index), (Some(1), 1));
        let overlaps = finding.checkers.iter().find(|c| c.checker == "mutual-exclusion");
        assert_eq!(overlaps.map(|c| c.violations), Some(2));
        assert!(
            finding.summary.contains("2 grants to others overlapped it"),
            "{}",
            finding.summary
        );
        let fault = finding.fault.as_ref().expect("the pause is behind it");
        assert_eq!(fault.fault, "pause");
        assert!(
            fault.description.starts_with(
                "pause struck client-1 (process 1) after-grant at t=0.000 s for 3.000 s"
            ),
            "{}",
            fault.description
        );
        // Every kept violation names its finding.
        let mutex = analysis.result_of("mutual-exclusion").expect("ran");
        assert!(mutex.violations.iter().all(|violation| violation.finding == Some(finding.id)));
    }

    /// A lock refused as busy while nobody holds it (a reply lost in a
    /// partition, the key orphaned): no order of the operations is legal,
    /// and the partition on while they ran is the fault behind it.
    #[test]
    fn a_history_with_no_order_is_traced_to_the_fault_on_while_its_operations_ran() {
        let history = history(&[
            r#""time":0,"process":1,"type":"invoke","f":"acquire","key":"l","value":null"#,
            r#""time":10,"process":1,"type":"ok","f":"acquire","key":"l","value":null"#,
            r#""time":20,"process":1,"type":"invoke","f":"release","key":"l","value":null"#,
            r#""time":30,"process":1,"type":"ok","f":"release","key":"l","value":null"#,
            r#""time":40,"process":"nemesis","type":"info","f":"start","key":null,"value":{"fault":"partition","targets":["redis"]}"#,
            r#""time":50,"process":2,"type":"invoke","f":"acquire","key":"l","value":null"#,
            r#""time":60,"process":2,"type":"fail","f":"acquire","key":"l","value":null,"error":"busy""#,
            r#""time":70,"process":"nemesis","type":"info","f":"stop","key":null,"value":{"fault":"partition","targets":["redis"]}"#,
        ]);
        let analysis = analyze(&history, &default_checkers(), &CheckOptions::default());
        assert_eq!(analysis.verdict_of("linearizability"), Some(crate::Verdict::Invalid));
        let finding = analysis
            .findings
            .iter()
            .find(|finding| finding.cause == Cause::Other(ViolationKind::NotLinearizable))
            .expect("a finding for it");
        let fault = finding.fault.as_ref().expect("the partition is behind it");
        assert_eq!(fault.fault, "partition");
    }

    /// A holder stalls before its renewal past its lease; another is
    /// granted the lock; the stall ends and the late renewal is ok (a
    /// renewal without a compare). The operations no order admits ran
    /// after the stall ended, but the stall struck while their client held
    /// the lock: it is the fault behind them.
    #[test]
    fn a_late_renewal_is_traced_to_the_stall_that_struck_its_hold() {
        let history = history(&[
            r#""time":0,"process":"nemesis","type":"info","f":"start","key":null,"value":{"fault":"pause","targets":["client-1"],"processes":[1],"stall_ms":2000,"at":"before-renew"}"#,
            r#""time":10,"process":1,"type":"invoke","f":"acquire","key":"l","value":{"ttl_ms":1000}"#,
            r#""time":20,"process":1,"type":"ok","f":"acquire","key":"l","value":{"fence":1}"#,
            r#""time":1500000000,"process":2,"type":"invoke","f":"acquire","key":"l","value":{"ttl_ms":1000}"#,
            r#""time":1500000010,"process":2,"type":"ok","f":"acquire","key":"l","value":{"fence":2}"#,
            r#""time":1600000000,"process":2,"type":"invoke","f":"release","key":"l","value":{"fence":2}"#,
            r#""time":1600000010,"process":2,"type":"ok","f":"release","key":"l","value":null"#,
            r#""time":2000000030,"process":"nemesis","type":"info","f":"stop","key":null,"value":{"fault":"pause","targets":["client-1"],"processes":[1],"stall_ms":2000,"at":"before-renew","struck":"before-renew"}"#,
            r#""time":2050000000,"process":3,"type":"invoke","f":"acquire","key":"l","value":{"ttl_ms":1000}"#,
            r#""time":2050000010,"process":3,"type":"ok","f":"acquire","key":"l","value":{"fence":3}"#,
            r#""time":2060000000,"process":3,"type":"invoke","f":"release","key":"l","value":{"fence":3}"#,
            r#""time":2060000010,"process":3,"type":"ok","f":"release","key":"l","value":null"#,
            r#""time":2070000000,"process":4,"type":"invoke","f":"acquire","key":"l","value":{"ttl_ms":1000}"#,
            r#""time":2070000010,"process":4,"type":"ok","f":"acquire","key":"l","value":{"fence":4}"#,
            r#""time":2100000000,"process":1,"type":"invoke","f":"renew","key":"l","value":{"ttl_ms":1000}"#,
            r#""time":2100000010,"process":1,"type":"ok","f":"renew","key":"l","value":null"#,
        ]);
        let analysis = analyze(&history, &default_checkers(), &CheckOptions::default());
        assert_eq!(analysis.verdict_of("linearizability"), Some(crate::Verdict::Invalid));
        let finding = analysis
            .findings
            .iter()
            .find(|finding| finding.cause == Cause::Other(ViolationKind::NotLinearizable))
            .expect("a finding for it");
        let fault = finding.fault.as_ref().expect("the stall is behind it");
        assert!(fault.description.starts_with("pause struck client-1 (process 1)"), "{fault:?}");
    }

    /// A crash loses the token counter: every later grant repeats a token.
    /// One finding, traced to the kill, however many repeats follow.
    #[test]
    fn repeated_tokens_after_a_crash_are_one_token_reset_traced_to_the_kill() {
        let mut lines = Vec::new();
        let mut time = 0u64;
        let grant = |lines: &mut Vec<String>, process: u32, fence: u32, time: &mut u64| {
            for (kind, f, value) in [
                ("invoke", "acquire", r#"{"ttl_ms":1000}"#.to_string()),
                ("ok", "acquire", format!(r#"{{"fence":{fence}}}"#)),
                ("invoke", "release", "null".to_string()),
                ("ok", "release", "null".to_string()),
            ] {
                *time += 10;
                lines.push(format!(
                    r#""time":{time},"process":{process},"type":"{kind}","f":"{f}","key":"l","value":{value}"#
                ));
            }
        };
        for fence in 1..=5 {
            grant(&mut lines, fence % 2, fence, &mut time);
        }
        time += 10;
        lines.push(format!(r#""time":{time},"process":"nemesis","type":"info","f":"start","key":null,"value":{{"fault":"kill","targets":["redis"],"persistent":false}}"#));
        time += 10;
        lines.push(format!(r#""time":{time},"process":"nemesis","type":"info","f":"stop","key":null,"value":{{"fault":"kill","targets":["redis"],"persistent":false}}"#));
        for fence in 1..=4 {
            grant(&mut lines, 2 + fence % 2, fence, &mut time);
        }
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        let history = history(&lines);
        let analysis = analyze(&history, &default_checkers(), &CheckOptions::default());
        let fence = analysis.result_of("fence-monotonicity").expect("ran");
        assert!(fence.violation_count >= 4, "{fence:#?}");
        let resets: Vec<&Finding> =
            analysis.findings.iter().filter(|finding| finding.cause == Cause::TokenReset).collect();
        assert_eq!(resets.len(), 1, "{:#?}", analysis.findings);
        let reset = resets[0];
        let fence_count = reset.checkers.iter().find(|c| c.checker == "fence-monotonicity");
        assert_eq!(fence_count.map(|c| c.violations), Some(fence.violation_count));
        let fault = reset.fault.as_ref().expect("the kill is behind it");
        assert!(fault.description.starts_with("kill of redis at t="), "{}", fault.description);
        assert!(fault.description.ends_with("not persistent"), "{}", fault.description);
        // The linearizability violation the reset causes joins it.
        if let Some(linear) = analysis.result_of("linearizability") {
            for violation in &linear.violations {
                assert_eq!(violation.finding, Some(reset.id), "{violation:#?}");
            }
        }
    }

    /// A grant that came back after its lease ran out (the client stalled
    /// between its request and the reply) makes its holder the stale one,
    /// though it was granted last.
    #[test]
    fn a_grant_back_after_its_lease_ran_out_is_the_stale_holder() {
        let history = history(&[
            r#""time":0,"process":1,"type":"invoke","f":"acquire","key":"l","value":{"ttl_ms":1000}"#,
            r#""time":10,"process":"nemesis","type":"info","f":"start","key":null,"value":{"fault":"pause","targets":["client-1"],"processes":[1],"stall_ms":2900}"#,
            r#""time":1500000000,"process":2,"type":"invoke","f":"acquire","key":"l","value":{"ttl_ms":1000}"#,
            r#""time":1500000010,"process":2,"type":"ok","f":"acquire","key":"l","value":null"#,
            r#""time":2900000010,"process":"nemesis","type":"info","f":"stop","key":null,"value":{"fault":"pause","targets":["client-1"],"processes":[1],"stall_ms":2900,"struck":"in-flight"}"#,
            r#""time":3000000000,"process":1,"type":"ok","f":"acquire","key":"l","value":null"#,
            r#""time":3100000000,"process":2,"type":"invoke","f":"release","key":"l","value":null"#,
            r#""time":3100000010,"process":2,"type":"ok","f":"release","key":"l","value":null"#,
            r#""time":3200000000,"process":1,"type":"invoke","f":"release","key":"l","value":null"#,
            r#""time":3200000010,"process":1,"type":"ok","f":"release","key":"l","value":null"#,
        ]);
        let analysis = analyze(&history, &default_checkers(), &CheckOptions::default());
        let finding = analysis
            .findings
            .iter()
            .find(|finding| finding.cause == Cause::StaleHolder)
            .expect("a stale holder");
        assert_eq!(finding.process, Some(1), "{finding:#?}");
        assert_eq!(finding.fault.as_ref().map(|fault| fault.fault.as_str()), Some("pause"));
    }

    /// A holder that went on past its lease with no fault struck: no fault
    /// is named, because the bug is the lock's own.
    #[test]
    fn a_stale_holder_with_no_fault_behind_it_names_none() {
        let history = history(&[
            r#""time":0,"process":1,"type":"invoke","f":"acquire","key":"l","value":{"ttl_ms":1000}"#,
            r#""time":10,"process":1,"type":"ok","f":"acquire","key":"l","value":null"#,
            r#""time":1500000000,"process":2,"type":"invoke","f":"acquire","key":"l","value":{"ttl_ms":1000}"#,
            r#""time":1500000010,"process":2,"type":"ok","f":"acquire","key":"l","value":null"#,
            r#""time":3000000030,"process":1,"type":"invoke","f":"release","key":"l","value":null"#,
            r#""time":3000000040,"process":1,"type":"ok","f":"release","key":"l","value":null"#,
        ]);
        let analysis = analyze(&history, &default_checkers(), &CheckOptions::default());
        let finding = analysis
            .findings
            .iter()
            .find(|finding| finding.cause == Cause::StaleHolder)
            .expect("a stale holder");
        assert_eq!(finding.fault, None);
        assert_eq!(finding.fault_name(), "no fault");
        assert!(finding.summary.contains("past its lease"), "{}", finding.summary);
    }

    /// Two workers handed one order at once both charge it with the same
    /// key, and the provider takes both: exactly-once sees the double,
    /// idempotency the request that should have been refused. One cause,
    /// one finding; a second order's double is another.
    #[test]
    fn a_double_charge_seen_by_two_checkers_is_one_finding() {
        let mut lines = Vec::new();
        for (order, base) in [("order-1", 0u64), ("order-2", 10_000_000_000)] {
            let at = |offset: u64| base + offset;
            for line in [
                format!(
                    r#""time":{},"process":1,"type":"invoke","f":"enqueue","key":"orders","value":{{"data":"{order}","due_ms":20000}}"#,
                    at(0)
                ),
                format!(
                    r#""time":{},"process":1,"type":"ok","f":"enqueue","key":"orders","value":{{"message":1}}"#,
                    at(1)
                ),
                format!(
                    r#""time":{},"process":2,"type":"invoke","f":"deliver","key":"orders","value":null"#,
                    at(10)
                ),
                format!(
                    r#""time":{},"process":2,"type":"ok","f":"deliver","key":"orders","value":{{"data":"{order}","message":1,"delivery":1}}"#,
                    at(11)
                ),
                format!(
                    r#""time":{},"process":3,"type":"invoke","f":"deliver","key":"orders","value":null"#,
                    at(12)
                ),
                format!(
                    r#""time":{},"process":3,"type":"ok","f":"deliver","key":"orders","value":{{"data":"{order}","message":1,"delivery":2,"redelivered":true}}"#,
                    at(13)
                ),
                format!(
                    r#""time":{},"process":2,"type":"invoke","f":"charge","key":"provider","value":{{"data":"{order}","idempotency_key":"{order}","body":"b"}}"#,
                    at(20)
                ),
                format!(
                    r#""time":{},"process":3,"type":"invoke","f":"charge","key":"provider","value":{{"data":"{order}","idempotency_key":"{order}","body":"b"}}"#,
                    at(21)
                ),
                format!(
                    r#""time":{},"process":2,"type":"ok","f":"charge","key":"provider","value":{{"charge":"ch_{order}_a","status":201}}"#,
                    at(30)
                ),
                format!(
                    r#""time":{},"process":3,"type":"ok","f":"charge","key":"provider","value":{{"charge":"ch_{order}_b","status":201}}"#,
                    at(31)
                ),
            ] {
                lines.push(line);
            }
        }
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        let history = history(&lines);
        let analysis = analyze(&history, &default_checkers(), &CheckOptions::default());
        assert_eq!(analysis.verdict_of("exactly-once"), Some(crate::Verdict::Invalid));
        assert_eq!(analysis.verdict_of("idempotency"), Some(crate::Verdict::Invalid));
        assert_eq!(analysis.findings.len(), 2, "{:#?}", analysis.findings);
        for finding in &analysis.findings {
            assert_eq!(finding.cause, Cause::Other(ViolationKind::DoneTwice));
            let counts: Vec<(&str, u64)> =
                finding.checkers.iter().map(|c| (c.checker, c.violations)).collect();
            assert_eq!(counts, [("exactly-once", 1), ("idempotency", 1)], "{finding:#?}");
        }
    }

    /// A worker stalled while its charge was in flight: its message was
    /// handed to another, and both charges landed. The pause that struck
    /// the worker that charged second is behind the double.
    #[test]
    fn a_double_is_traced_to_the_pause_of_the_worker_that_charged_second() {
        let history = history(&[
            r#""time":0,"process":0,"type":"invoke","f":"enqueue","key":"orders","value":{"data":"order-7","due_ms":30000}"#,
            r#""time":1,"process":0,"type":"ok","f":"enqueue","key":"orders","value":{"message":7}"#,
            r#""time":10,"process":1,"type":"invoke","f":"deliver","key":"orders","value":{"visibility_ms":3000}"#,
            r#""time":11,"process":1,"type":"ok","f":"deliver","key":"orders","value":{"data":"order-7","message":7,"delivery":1}"#,
            r#""time":20,"process":1,"type":"invoke","f":"charge","key":"provider","value":{"data":"order-7"}"#,
            r#""time":30,"process":"nemesis","type":"info","f":"start","key":null,"value":{"fault":"pause","targets":["client-1"],"processes":[1],"stall_ms":4000}"#,
            r#""time":3000000000,"process":2,"type":"invoke","f":"deliver","key":"orders","value":{"visibility_ms":3000}"#,
            r#""time":3000000001,"process":2,"type":"ok","f":"deliver","key":"orders","value":{"data":"order-7","message":7,"delivery":2,"redelivered":true}"#,
            r#""time":3000000010,"process":2,"type":"invoke","f":"charge","key":"provider","value":{"data":"order-7"}"#,
            r#""time":3100000000,"process":2,"type":"ok","f":"charge","key":"provider","value":{"charge":"ch_2"}"#,
            r#""time":4000000030,"process":"nemesis","type":"info","f":"stop","key":null,"value":{"fault":"pause","targets":["client-1"],"processes":[1],"stall_ms":4000}"#,
            r#""time":4000000040,"process":1,"type":"ok","f":"charge","key":"provider","value":{"charge":"ch_1"}"#,
        ]);
        let analysis = analyze(&history, &default_checkers(), &CheckOptions::default());
        assert_eq!(analysis.findings.len(), 1, "{:#?}", analysis.findings);
        let finding = &analysis.findings[0];
        assert_eq!(
            (finding.cause, finding.process),
            (Cause::Other(ViolationKind::DoneTwice), Some(1))
        );
        assert_eq!(finding.fault.as_ref().map(|fault| fault.fault.as_str()), Some("pause"));
    }
}
