//! Coverage: which of the windows where a lock could break a run's faults
//! reached.
//!
//! A valid verdict proves little when no fault struck while the lock was
//! exposed: a pause of a client that held nothing, a cut that ended before
//! any lease ran out. Each fault (a nemesis `start` and its `stop`, matched
//! per fault name and targets in order; a start with no stop runs to the end
//! of the history) is judged against the beliefs (who believed they held
//! which lock, when) and their leases: a belief's lease runs out at x = the
//! invoke time of its grant, or of its latest `ok` renew, plus that
//! operation's `ttl_ms`. A belief with no TTL (a session lock) has no x.
//!
//! The windows, by fault:
//! - pause: the struck process's belief went on past x during the stall;
//! - partition: a cut client's belief (shape `client`) went on past x
//!   during the cut (a renew sent during the cut does not count); a split
//!   of the servers: a belief was live during it;
//! - kill: a belief was live when the server was killed, the kill
//!   persistent or not (whether a persisted key survives is what such a
//!   kill tests; a session lock counts: its session dies);
//! - clock: a jump larger than a live lease's remaining time, or a drift
//!   that made a live lease run out on the server while its holder still
//!   believed;
//! - failover: a belief was live when the primary failed;
//! - conn-kill: a belief was live when the server ended the lock sessions
//!   (a session lock goes with its session; a lease outlives it);
//! - anything else: a belief (of the targeted processes, for a fault aimed
//!   at clients) went on past x during the fault, or a session lock was
//!   held during it.
//!
//! One sweep over the lease intervals and the faults, both sorted by start:
//! O(n log n) in the history's size plus, per fault, the beliefs live when
//! it starts.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap as HashMap;
use serde::Serialize;

use crate::beliefs::Beliefs;
use crate::event::Function;
use crate::history::{History, KeyId, NemesisEvent, Outcome};

/// What a run's faults reached.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Coverage {
    /// Every fault of the run, in the order it started.
    pub faults: Vec<FaultCoverage>,
    /// Per kind of fault, in order of first appearance.
    pub kinds: Vec<KindCoverage>,
}

/// One fault and whether it reached a vulnerable window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FaultCoverage {
    /// The fault's name as the history records it (`pause`, `kill`, ...).
    pub fault: String,
    /// Its kind for the totals (`pause`, `client cut`, `partition`, ...).
    pub kind: String,
    pub targets: Vec<String>,
    pub start_index: u64,
    pub start_ns: u64,
    /// `None`: it never stopped (it ran to the end of the history).
    pub stop_index: Option<u64>,
    pub stop_ns: Option<u64>,
    pub reached: bool,
    /// What it reached, or why it reached nothing.
    pub description: String,
}

/// The faults of one kind: how many reached their window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KindCoverage {
    pub kind: String,
    pub faults: u64,
    pub reached: u64,
    /// The window this kind of fault can reach.
    pub window: String,
    /// For people: "0 of 3 client cuts caught a holder whose work outlasted
    /// its lease".
    pub sentence: String,
}

impl Coverage {
    /// The coverage of a run without faults.
    pub fn none() -> Coverage {
        Coverage::default()
    }

    /// Whether the run had no faults at all.
    pub fn is_none(&self) -> bool {
        self.faults.is_empty()
    }

    /// How many faults reached a vulnerable window.
    pub fn reached(&self) -> usize {
        self.faults.iter().filter(|fault| fault.reached).count()
    }

    /// There were faults, and none reached a vulnerable window: a pass of
    /// such a run proves nothing about them.
    pub fn vacuous(&self) -> bool {
        !self.faults.is_empty() && self.reached() == 0
    }

    /// Why the run is vacuous, or what it reached, in one line:
    /// "0 of 3 client cuts caught a holder whose work outlasted its lease; 0
    /// of 2 kills ..." for a vacuous run, "2 of 5 faults reached a vulnerable
    /// window (pause 2/2: a stall longer than ...; kill 0/3)" otherwise. Empty
    /// without faults.
    pub fn line(&self) -> String {
        if self.is_none() {
            return String::new();
        }
        if self.vacuous() {
            return self
                .kinds
                .iter()
                .map(|kind| kind.sentence.as_str())
                .collect::<Vec<_>>()
                .join("; ");
        }
        let kinds = |windows: bool| -> String {
            let kinds: Vec<String> = self
                .kinds
                .iter()
                .map(|kind| {
                    if windows && kind.reached > 0 {
                        format!("{} {}/{}: {}", kind.kind, kind.reached, kind.faults, kind.window)
                    } else {
                        format!("{} {}/{}", kind.kind, kind.reached, kind.faults)
                    }
                })
                .collect();
            format!(
                "{} of {} faults reached a vulnerable window ({})",
                self.reached(),
                self.faults.len(),
                kinds.join("; ")
            )
        };
        // The windows' names while the line stays short; counts alone after.
        let long = kinds(true);
        if long.chars().count() <= MAX_LINE_CHARS {
            long
        } else {
            kinds(false)
        }
    }
}

/// How long [`Coverage::line`] may grow naming the windows reached.
const MAX_LINE_CHARS: usize = 200;

/// The kinds of fault, each with its window.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    Pause,
    ClientCut,
    Partition,
    Kill,
    Clock,
    Failover,
    /// The SQL server ends the lock sessions (a session lock goes with its
    /// session, whatever its client believes).
    ConnKill,
    Other(String),
}

impl Kind {
    fn of(fault: &str, event: &NemesisEvent) -> Kind {
        match fault {
            "pause" => Kind::Pause,
            "partition" if event.details.shape.as_deref() == Some("client") => Kind::ClientCut,
            "partition" => Kind::Partition,
            "kill" => Kind::Kill,
            // A real server's drift is recorded as `clock-drift`.
            "clock" | "clock-drift" => Kind::Clock,
            "failover" => Kind::Failover,
            "conn-kill" => Kind::ConnKill,
            other => Kind::Other(other.to_string()),
        }
    }

    fn name(&self) -> String {
        match self {
            Kind::Pause => "pause".into(),
            Kind::ClientCut => "client cut".into(),
            Kind::Partition => "partition".into(),
            Kind::Kill => "kill".into(),
            Kind::Clock => "clock".into(),
            Kind::Failover => "failover".into(),
            Kind::ConnKill => "conn-kill".into(),
            Kind::Other(name) => name.clone(),
        }
    }

    fn plural(&self) -> String {
        match self {
            Kind::Pause => "pauses".into(),
            Kind::ClientCut => "client cuts".into(),
            Kind::Partition => "partitions".into(),
            Kind::Kill => "kills".into(),
            Kind::Clock => "clock faults".into(),
            Kind::Failover => "failovers".into(),
            Kind::ConnKill => "session kills".into(),
            Kind::Other(name) => format!("{name} faults"),
        }
    }

    /// The window, as a noun phrase.
    fn window(&self) -> String {
        match self {
            Kind::Pause => "a stall longer than the holder's remaining lease".into(),
            Kind::ClientCut => "a cut holder whose work outlasted its lease".into(),
            Kind::Partition => "a lock held while the servers were split".into(),
            Kind::Kill => "a kill while a key was held".into(),
            Kind::Clock => "a clock jump larger than a live lease's remaining time".into(),
            Kind::Failover => "a failover with a grant not yet replicated".into(),
            Kind::ConnKill => "a killed session that held a lock".into(),
            Kind::Other(name) if name == "skew" => {
                "a lock held while a client's clock was off".into()
            }
            Kind::Other(name) if LOSSY.contains(&name.as_str()) => {
                format!("a holder past its lease, or a lock reply lost, while {name} was on")
            }
            Kind::Other(name) => format!("a holder acting past its lease while {name} was on"),
        }
    }

    /// "N of M <plural> <this>".
    fn verb_phrase(&self) -> &'static str {
        match self {
            Kind::Pause => "reached a stall longer than the holder's remaining lease",
            Kind::ClientCut => "caught a holder whose work outlasted its lease",
            Kind::Partition => "split the servers while a lock was held",
            Kind::Kill => "struck while a key was held",
            Kind::Clock => "outran a live lease's remaining time",
            Kind::Failover => "struck with a grant not yet replicated",
            Kind::ConnKill => "struck a session that held a lock",
            Kind::Other(name) if name == "skew" => "struck while a lock was held",
            Kind::Other(name) if LOSSY.contains(&name.as_str()) => {
                "caught a holder past its lease or lost a lock reply"
            }
            Kind::Other(_) => "caught a holder acting past its lease",
        }
    }
}

/// What kind of interval of a belief an item is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// The whole belief; `session`: it has no TTL.
    Live { session: bool },
    /// The time under one lease (from its grant or renew to the next renew
    /// or the belief's end), with the lease's deadline.
    Lease { deadline: u64 },
    /// The time a belief went on past its lease's deadline (to the next
    /// renew or its end).
    Overdue,
    /// A lock operation whose outcome is unknown (its reply lost).
    Unknown,
}

/// An interval of one belief: [from, to) in ns.
#[derive(Debug, Clone, Copy)]
struct Item {
    from: u64,
    to: u64,
    process: i64,
    key: KeyId,
    class: Class,
}

/// What a fault looks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Want {
    /// A belief past its lease.
    Overdue,
    /// A belief past its lease, or a session lock held.
    OverdueOrSession,
    /// Any belief live at the window's start.
    Live,
    /// A lease live at `at` whose deadline is within `jump` after it.
    Jump { jump_ns: u64 },
    /// A lease that the server, its clock running `micros`/10^6 times fast
    /// over the window, ends before its holder stops believing.
    Drift { micros: u64 },
    /// Nothing can be reached (never struck, persisted).
    Nothing,
}

/// One fault being judged.
#[derive(Debug)]
struct Probe {
    /// The window searched: [from, to], in ns.
    from: u64,
    to: u64,
    want: Want,
    /// The processes it aims at; `None`: any.
    processes: Option<Vec<i64>>,
    /// The item that proved it reached its window.
    found: Option<usize>,
}

impl Probe {
    fn matches(&self, item: &Item) -> bool {
        if item.from > self.to || item.to <= self.from {
            return false;
        }
        if let Some(processes) = &self.processes {
            if !processes.contains(&item.process) {
                return false;
            }
        }
        match (self.want, item.class) {
            (Want::Overdue | Want::OverdueOrSession, Class::Overdue) => true,
            (Want::OverdueOrSession, Class::Live { session: true }) => true,
            (Want::Live, Class::Live { .. }) => true,
            (Want::Jump { jump_ns }, Class::Lease { deadline }) => {
                deadline > self.from && deadline - self.from < jump_ns
            }
            (Want::Drift { micros }, Class::Lease { deadline }) => {
                let at = item.from.max(self.from);
                if micros <= 1_000_000 || deadline <= at || self.to <= at {
                    return false;
                }
                let remaining = (deadline - at) as u128;
                let drifting = (self.to - at) as u128;
                let consumed = drifting * micros as u128 / 1_000_000;
                // When the server's clock reaches the deadline.
                let expiry = if consumed >= remaining {
                    at as u128 + remaining * 1_000_000 / micros as u128
                } else {
                    deadline as u128 - (consumed - drifting)
                };
                expiry < deadline as u128 && (item.to as u128) > expiry
            }
            _ => false,
        }
    }
}

/// What the run's faults reached, from the history alone.
pub fn coverage(history: &History) -> Coverage {
    coverage_with(history, &Beliefs::compute(history))
}

/// [`coverage`], with the beliefs already computed.
pub fn coverage_with(history: &History, beliefs: &Beliefs) -> Coverage {
    let faults = pair_faults(history);
    if faults.is_empty() {
        return Coverage::none();
    }
    let mut items = items(history, beliefs);
    let mut probes: Vec<Probe> = faults.iter().map(|fault| probe(history, fault)).collect();
    sweep(&items, &mut probes);
    for (fault, probe) in faults.iter().zip(probes.iter_mut()) {
        if probe.found.is_some() {
            continue;
        }
        match Kind::of(&fault.name, fault.start) {
            Kind::ClientCut => cut_off_renewals(history, beliefs, probe, &mut items),
            Kind::Other(name) if LOSSY.contains(&name.as_str()) => {
                unknown_outcome(history, probe, &mut items)
            }
            _ => {}
        }
    }
    let mut covered: Vec<FaultCoverage> = Vec::with_capacity(faults.len());
    let mut kinds: Vec<(Kind, u64, u64)> = Vec::new();
    for (fault, probe) in faults.iter().zip(&probes) {
        let kind = Kind::of(&fault.name, fault.start);
        let reached = probe.found.is_some();
        let description = match probe.found {
            Some(item) => reached_description(history, fault, &kind, probe, &items[item]),
            None => missed_description(fault, &kind, probe),
        };
        match kinds.iter_mut().find(|(known, _, _)| *known == kind) {
            Some((_, count, hits)) => {
                *count += 1;
                *hits += u64::from(reached);
            }
            None => kinds.push((kind.clone(), 1, u64::from(reached))),
        }
        covered.push(FaultCoverage {
            fault: fault.name.clone(),
            kind: kind.name(),
            targets: fault.start.targets.clone(),
            start_index: fault.start.at.index,
            start_ns: fault.start.at.time_ns,
            stop_index: fault.stop.map(|stop| stop.at.index),
            stop_ns: fault.stop.map(|stop| stop.at.time_ns),
            reached,
            description,
        });
    }
    let kinds = kinds
        .into_iter()
        .map(|(kind, faults, reached)| KindCoverage {
            kind: kind.name(),
            faults,
            reached,
            window: kind.window(),
            sentence: format!("{reached} of {faults} {} {}", kind.plural(), kind.verb_phrase()),
        })
        .collect();
    Coverage { faults: covered, kinds }
}

/// A fault: its start and, if it stopped, its stop.
struct Fault<'h> {
    name: String,
    start: &'h NemesisEvent,
    stop: Option<&'h NemesisEvent>,
}

impl Fault<'_> {
    /// A field of the fault's details: the stop's if it says, else the
    /// start's.
    fn detail<T: Clone>(
        &self,
        field: impl Fn(&crate::event::NemesisDetails) -> &Option<T>,
    ) -> Option<T> {
        self.stop
            .and_then(|stop| field(&stop.details).clone())
            .or_else(|| field(&self.start.details).clone())
    }

    /// Aimed at clients (by name or by process ids).
    fn aims_at_clients(&self) -> bool {
        self.start.details.processes.is_some()
            || (!self.start.targets.is_empty()
                && self.start.targets.iter().all(|target| target.starts_with("client-")))
    }
}

/// Matches each start with the next stop of the same fault and targets.
fn pair_faults(history: &History) -> Vec<Fault<'_>> {
    let mut faults: Vec<Fault<'_>> = Vec::new();
    let mut open: BTreeMap<(&str, &[String]), std::collections::VecDeque<usize>> = BTreeMap::new();
    for event in history.nemesis_events() {
        let name = event.fault.as_deref().unwrap_or("unknown");
        match event.f {
            Function::Start => {
                open.entry((name, &event.targets)).or_default().push_back(faults.len());
                faults.push(Fault { name: name.to_string(), start: event, stop: None });
            }
            Function::Stop => {
                if let Some(at) =
                    open.get_mut(&(name, &event.targets[..])).and_then(|starts| starts.pop_front())
                {
                    faults[at].stop = Some(event);
                }
            }
            _ => {}
        }
    }
    faults
}

fn ms(ms: u64) -> u64 {
    ms.saturating_mul(1_000_000)
}

/// What a fault looks for, and where.
fn probe(history: &History, fault: &Fault<'_>) -> Probe {
    let start = fault.start.at.time_ns;
    let stop = fault.stop.map_or(history.end().time_ns, |stop| stop.at.time_ns);
    let processes = fault.detail(|details| &details.processes);
    let client_processes = if fault.aims_at_clients() { processes } else { None };
    let span = |want| Probe {
        from: start,
        to: stop,
        want,
        processes: client_processes.clone(),
        found: None,
    };
    let point = |want| Probe {
        from: start,
        to: start,
        want,
        processes: client_processes.clone(),
        found: None,
    };
    match Kind::of(&fault.name, fault.start) {
        Kind::Pause => {
            if fault.detail(|details| &details.struck) == Some(None) {
                return point(Want::Nothing);
            }
            let stall = ms(fault.detail(|details| &details.stall_ms).unwrap_or(0));
            Probe { to: stop.saturating_add(stall), ..span(Want::Overdue) }
        }
        Kind::ClientCut => span(Want::Overdue),
        // A split of the servers tests the service's own agreement: whether
        // a side without a majority still grants or renews. It matters
        // while a lock is held (or taken) during it.
        Kind::Partition => Probe { processes: None, ..span(Want::Live) },
        // A server that persists its keys is struck where it matters too:
        // whether the held keys survive the crash is what its kill tests.
        Kind::Kill => point(Want::Live),
        Kind::Failover | Kind::ConnKill => point(Want::Live),
        Kind::Clock => match (
            fault.detail(|details| &details.jump_ms),
            fault.detail(|details| &details.drift_micros),
        ) {
            (Some(jump), _) => point(Want::Jump { jump_ns: ms(jump) }),
            (None, Some(micros)) => Probe { processes: None, ..span(Want::Drift { micros }) },
            (None, None) => Probe { processes: None, ..span(Want::OverdueOrSession) },
        },
        // A client whose clock is off misjudges leases: its own, and (a
        // lease table's client that compares expiries) everyone else's.
        Kind::Other(name) if name == "skew" => Probe { processes: None, ..span(Want::Live) },
        Kind::Other(_) => span(Want::OverdueOrSession),
    }
}

/// One client's ok renews of one lock, (invoke time, TTL in ns) in order,
/// and how many of them the beliefs before have passed.
type Renews = (Vec<(u64, Option<u64>)>, usize);

/// Every belief's intervals: live, under each lease, past each lease.
fn items(history: &History, beliefs: &Beliefs) -> Vec<Item> {
    // The ok renews of each client on each lock: (invoke time, TTL), in
    // invoke order (ops are numbered as they are invoked).
    let mut renews: HashMap<(i64, KeyId), Renews> = HashMap::default();
    for op in history.ops() {
        if op.f == Function::Renew && op.outcome == Outcome::Ok {
            renews
                .entry((op.process, op.key))
                .or_default()
                .0
                .push((op.invoke.time_ns, op.ttl_ms.map(ms)));
        }
    }
    let mut items = Vec::new();
    // A unit of work that must run once (the cron workloads) holds its
    // day's lock inside the run: a run in flight is a lock held.
    for op in history.ops().iter().filter(|op| op.f == Function::Run) {
        items.push(Item {
            from: op.invoke.time_ns,
            to: history.completion_or_end(op).time_ns,
            process: op.process,
            key: op.key,
            class: Class::Live { session: false },
        });
    }
    jobs(history, &mut items);
    for key in 0..history.key_count() as KeyId {
        for belief in beliefs.of_key(key) {
            let (from, to) = (belief.start.time_ns, belief.end.time_ns);
            let grant = history.op(belief.grant);
            let Some(ttl) = grant.ttl_ms.map(ms) else {
                items.push(Item {
                    from,
                    to,
                    process: belief.process,
                    key,
                    class: Class::Live { session: true },
                });
                continue;
            };
            let process = belief.process;
            items.push(Item { from, to, process, key, class: Class::Live { session: false } });
            let (mut lease_from, mut ttl, mut deadline) =
                (from, ttl, grant.invoke.time_ns.saturating_add(ttl));
            let lease = |lease_from: u64, lease_to: u64, deadline: u64, items: &mut Vec<Item>| {
                if lease_to > lease_from {
                    items.push(Item {
                        from: lease_from,
                        to: lease_to,
                        process,
                        key,
                        class: Class::Lease { deadline },
                    });
                }
                if lease_to > deadline {
                    items.push(Item {
                        from: deadline.max(lease_from),
                        to: lease_to,
                        process,
                        key,
                        class: Class::Overdue,
                    });
                }
            };
            if let Some((list, next)) = renews.get_mut(&(process, key)) {
                while *next < list.len() && list[*next].0 < from {
                    *next += 1;
                }
                while *next < list.len() && list[*next].0 < to {
                    let (at, renewed_ttl) = list[*next];
                    lease(lease_from, at, deadline, &mut items);
                    ttl = renewed_ttl.unwrap_or(ttl);
                    (lease_from, deadline) = (at, at.saturating_add(ttl));
                    *next += 1;
                }
            }
            lease(lease_from, to, deadline, &mut items);
        }
    }
    items
}

/// A job a worker took from a queue is held as a lease is: from its
/// delivery's invoke (the queue may hand it over from then on) to the
/// worker's ack of it (or its next delivery, or its end), and it may be
/// handed to another once the visibility timeout asked for has run from
/// the invoke. A worker that goes on past it is overdue, as a holder past
/// its lease: a stall then is what redelivers a job that is still being
/// worked on (the double charge).
fn jobs(history: &History, items: &mut Vec<Item>) {
    // Per process: the job it holds (from, deadline, message, queue).
    let mut held: HashMap<i64, (u64, Option<u64>, Option<u64>, KeyId)> = HashMap::default();
    let close = |items: &mut Vec<Item>,
                 process: i64,
                 job: (u64, Option<u64>, Option<u64>, KeyId),
                 to: u64| {
        let (from, deadline, _, key) = job;
        items.push(Item { from, to, process, key, class: Class::Live { session: false } });
        if let Some(deadline) = deadline.filter(|&deadline| to > deadline) {
            items.push(Item { from: deadline.max(from), to, process, key, class: Class::Overdue });
        }
    };
    for op in history.payment_ops() {
        match op.f {
            Function::Deliver => {
                if let Some(job) = held.remove(&op.process) {
                    close(items, op.process, job, op.invoke.time_ns);
                }
                if op.outcome == Outcome::Ok {
                    let deadline = op
                        .fields
                        .visibility_ms
                        .map(|ttl| op.invoke.time_ns.saturating_add(ms(ttl)));
                    held.insert(
                        op.process,
                        (op.invoke.time_ns, deadline, op.fields.message, op.key),
                    );
                }
            }
            Function::Ack if op.outcome != Outcome::Info => {
                let acked = held.get(&op.process).is_some_and(|job| job.2 == op.fields.message);
                if acked {
                    let job = held.remove(&op.process).expect("held above");
                    close(items, op.process, job, history.completion_or_end(&op).time_ns);
                }
            }
            _ => {}
        }
        // A process that ended (`info`) holds nothing more.
        if op.outcome == Outcome::Info {
            if let Some(job) = held.remove(&op.process) {
                close(items, op.process, job, history.completion_or_end(&op).time_ns);
            }
        }
    }
    let mut open: Vec<_> = held.into_iter().collect();
    open.sort_unstable_by_key(|&(process, _)| process);
    for (process, job) in open {
        close(items, process, job, history.end().time_ns);
    }
}

/// The faults of the network that lose or delay replies.
const LOSSY: [&str; 3] = ["loss", "slow-net", "slow-client"];

/// A fault that loses or delays replies also reaches a lock operation
/// whose outcome it left unknown (`info`: a timeout, a lost reply): the
/// service may have granted or released without the client knowing, which
/// is where a recipe that retries or assumes breaks. Found, the operation
/// is added to `items` as the probe's evidence.
fn unknown_outcome(history: &History, probe: &mut Probe, items: &mut Vec<Item>) {
    let ops = history.ops();
    // Ops are numbered as they are invoked: those invoked before the fault
    // ended, from a minute before it began (lock operations time out well
    // within that: a reply still awaited when it began).
    let since = probe.from.saturating_sub(60_000_000_000);
    let first = ops.partition_point(|op| op.invoke.time_ns < since);
    for op in ops[first..].iter().take_while(|op| op.invoke.time_ns <= probe.to) {
        let lock_op = matches!(op.f, Function::Acquire | Function::Release | Function::Renew);
        let aimed = probe.processes.as_ref().is_none_or(|aimed| aimed.contains(&op.process));
        let Some(done) = op.completion else { continue };
        if lock_op
            && aimed
            && op.outcome == Outcome::Info
            && (probe.from..=probe.to).contains(&done.time_ns)
        {
            items.push(Item {
                from: op.invoke.time_ns,
                to: done.time_ns,
                process: op.process,
                key: op.key,
                class: Class::Unknown,
            });
            probe.found = Some(items.len() - 1);
            return;
        }
    }
}

/// A client cut also reaches a holder whose renewals it cut off: a renew
/// sent while its client was cut off from the servers cannot have reached
/// them, whatever its reply said (a client library may answer a renewal
/// from what it last heard), so the lease runs from the last renew sent
/// before the cut. Found, the stretch past that lease is added to `items`
/// as the probe's evidence. Client cuts are few: each looks at the beliefs
/// live during it.
fn cut_off_renewals(
    history: &History,
    beliefs: &Beliefs,
    probe: &mut Probe,
    items: &mut Vec<Item>,
) {
    for key in 0..history.key_count() as KeyId {
        let list = beliefs.of_key(key);
        let live = list.partition_point(|belief| belief.start.time_ns <= probe.to);
        for belief in &list[..live] {
            let cut = probe.processes.as_ref().is_none_or(|cut| cut.contains(&belief.process));
            if !cut || belief.end.time_ns <= probe.from {
                continue;
            }
            let grant = history.op(belief.grant);
            let Some(mut ttl) = grant.ttl_ms.map(ms) else { continue };
            let mut deadline = grant.invoke.time_ns.saturating_add(ttl);
            // The renewals sent before the cut, in order (ops are numbered as
            // they are invoked).
            let sent_before = probe.from.min(belief.end.time_ns);
            let since_grant = history.ops()[belief.grant as usize..].iter();
            for renew in since_grant.take_while(|op| op.invoke.time_ns < sent_before).filter(|op| {
                op.process == belief.process
                    && op.key == key
                    && op.f == Function::Renew
                    && op.outcome == Outcome::Ok
            }) {
                ttl = renew.ttl_ms.map(ms).unwrap_or(ttl);
                deadline = renew.invoke.time_ns.saturating_add(ttl);
            }
            if deadline < belief.end.time_ns && deadline <= probe.to {
                items.push(Item {
                    from: deadline.max(probe.from),
                    to: belief.end.time_ns,
                    process: belief.process,
                    key,
                    class: Class::Overdue,
                });
                probe.found = Some(items.len() - 1);
                return;
            }
        }
    }
}

/// Finds, for each probe, one item it matches: a sweep over the items and
/// the probes by start, each checked against those still open when it
/// starts.
fn sweep(items: &[Item], probes: &mut [Probe]) {
    let mut item_order: Vec<usize> = (0..items.len()).collect();
    item_order.sort_by_key(|&at| (items[at].from, at));
    let mut probe_order: Vec<usize> = (0..probes.len()).collect();
    probe_order.sort_by_key(|&at| (probes[at].from, at));
    let (mut next_item, mut next_probe) = (0, 0);
    let mut open_items: Vec<usize> = Vec::new();
    let mut open_probes: Vec<usize> = Vec::new();
    while next_probe < probe_order.len()
        || (next_item < item_order.len() && !open_probes.is_empty())
    {
        let probe_first = next_probe < probe_order.len()
            && (next_item == item_order.len()
                || probes[probe_order[next_probe]].from <= items[item_order[next_item]].from);
        if probe_first {
            let at = probe_order[next_probe];
            next_probe += 1;
            let from = probes[at].from;
            open_items.retain(|&item| items[item].to > from);
            let probe = &mut probes[at];
            if probe.want != Want::Nothing {
                probe.found = open_items.iter().copied().find(|&item| probe.matches(&items[item]));
                if probe.found.is_none() {
                    open_probes.push(at);
                }
            }
        } else {
            let item = item_order[next_item];
            next_item += 1;
            let from = items[item].from;
            open_probes.retain(|&at| probes[at].to >= from && probes[at].found.is_none());
            for &at in &open_probes {
                if probes[at].matches(&items[item]) {
                    probes[at].found = Some(item);
                }
            }
            open_items.push(item);
        }
    }
}

fn process_note(fault: &Fault<'_>, probe: &Probe) -> &'static str {
    if fault.aims_at_clients() && probe.processes.is_none() {
        " (the history names no processes for its clients: any client's belief counted)"
    } else {
        ""
    }
}

fn reached_description(
    history: &History,
    fault: &Fault<'_>,
    kind: &Kind,
    probe: &Probe,
    item: &Item,
) -> String {
    let key = crate::quote::text(history.key_name(item.key));
    let who = format!("process {} held {key}", item.process);
    let detail = match (probe.want, item.class) {
        (Want::Jump { jump_ns }, Class::Lease { deadline }) => format!(
            "a {} jump; {who} with {} of its lease left",
            crate::format_seconds(jump_ns),
            crate::format_seconds(deadline - probe.from)
        ),
        (Want::Drift { micros }, _) => format!(
            "the server clock ran {:.2}x fast, ending the lease {who} under before it let go",
            micros as f64 / 1e6
        ),
        (Want::Live, _) => {
            let at = crate::format_time(probe.from);
            match (kind, fault.detail(|details| &details.persistent)) {
                (Kind::Kill, None) => {
                    format!("{who} at t={at} (the history does not say whether it persisted)")
                }
                (Kind::Kill, Some(true)) => format!(
                    "{who} at t={at}; the server persists its keys: the kill tests that they survive"
                ),
                (Kind::Kill, Some(false)) => format!("{who} at t={at}, not persisted"),
                _ => format!("{who} at t={at}"),
            }
        }
        (_, Class::Unknown) => {
            let op = format!("process {}'s lock operation on {key}", item.process);
            return format!(
                "a lock operation whose reply it lost: {op} ended unknown at t={}{}",
                crate::format_time(item.to),
                process_note(fault, probe)
            );
        }
        (_, Class::Live { session: true }) => {
            format!("{who} on a session (no TTL) during it")
        }
        _ => format!("{who} past its lease from t={}", crate::format_time(item.from)),
    };
    let window = match kind {
        Kind::Clock if matches!(probe.want, Want::Drift { .. }) => {
            "a clock drift that ran out a live lease early".to_string()
        }
        _ => kind.window(),
    };
    format!("{window}: {detail}{}", process_note(fault, probe))
}

fn missed_description(fault: &Fault<'_>, kind: &Kind, probe: &Probe) -> String {
    let text = match (kind, probe.want) {
        (Kind::Pause, Want::Nothing) => "never struck",
        (Kind::Pause, _) => "struck no holder past its lease",
        (_, Want::Live) => "no lock was held when it struck",
        (_, Want::Jump { .. }) => "no live lease had less time left than the jump",
        (_, Want::Drift { .. }) => "no live lease ran out early enough to matter",
        _ => "no holder past its lease",
    };
    format!("{text}{}", process_note(fault, probe))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Event;
    use crate::history::HistoryBuilder;

    /// A history from lines `time_ms process type f key value`; process `n`
    /// is the nemesis (its key is null).
    fn history(lines: &str) -> History {
        let mut builder = HistoryBuilder::new();
        for (index, line) in lines.lines().map(str::trim).filter(|l| !l.is_empty()).enumerate() {
            let mut words = line.splitn(6, ' ');
            let mut word = || words.next().expect("time process type f key [value]");
            let (time, process, event_type, f, key) = (word(), word(), word(), word(), word());
            let value = words.next().unwrap_or("null");
            // `!reason`: an error instead of a value.
            let (value, error) = match value.strip_prefix('!') {
                Some(error) => ("null", format!(r#","error":"{error}""#)),
                None => (value, String::new()),
            };
            let time: u64 = time.parse().expect("time in ms");
            let (process, key) = match process {
                "n" => ("\"nemesis\"".to_string(), "null".to_string()),
                id => (id.to_string(), format!("\"{key}\"")),
            };
            let json = format!(
                r#"{{"index":{index},"time":{},"process":{process},"type":"{event_type}","f":"{f}","key":{key},"value":{value}{error}}}"#,
                time * 1_000_000
            );
            let event: Event = serde_json::from_str(&json).expect("test event parses");
            builder.push(&event).expect("test history is well formed");
        }
        builder.finish()
    }

    /// Process 1 holds "l" with a 1 s lease from t=0.1 s and releases at
    /// `release_ms`.
    fn holder(release_ms: u64) -> String {
        format!(
            "100 1 invoke acquire l {{\"ttl_ms\":1000}}\n110 1 ok acquire l {{\"fence\":1}}\n\
             {release_ms} 1 invoke release l\n{} 1 ok release l\n",
            release_ms + 5
        )
    }

    fn merged(parts: &[&str]) -> History {
        let mut lines: Vec<&str> =
            parts.iter().flat_map(|part| part.lines()).filter(|l| !l.trim().is_empty()).collect();
        lines.sort_by_key(|line| line.trim().split(' ').next().unwrap().parse::<u64>().unwrap());
        history(&lines.join("\n"))
    }

    #[test]
    fn no_faults_is_none_and_not_vacuous() {
        let coverage = coverage(&history(&holder(500)));
        assert!(coverage.is_none());
        assert!(!coverage.vacuous());
        assert_eq!(coverage.line(), "");
    }

    #[test]
    fn a_pause_of_the_holder_past_its_lease_is_reached_and_one_within_it_is_not() {
        let pause = r#"
            200 n info start - {"fault":"pause","targets":["client-1"],"processes":[1],"stall_ms":2000,"at":"after-grant"}
            2200 n info stop - {"fault":"pause","targets":["client-1"],"processes":[1],"stall_ms":2000,"at":"after-grant","struck":"after-grant"}
        "#;
        // Held to 2.5 s on a lease that ran out at 1.1 s: reached.
        let reached = coverage(&merged(&[&holder(2500), pause]));
        assert_eq!(reached.reached(), 1, "{reached:?}");
        assert!(reached.faults[0].description.starts_with("a stall longer than"));
        assert!(reached.faults[0].description.contains("process 1 held \"l\""));
        assert!(!reached.vacuous());
        assert_eq!(
            reached.line(),
            "1 of 1 faults reached a vulnerable window (pause 1/1: a stall longer than the holder's remaining lease)"
        );
        // Released at 0.9 s, within its lease: nothing reached.
        let missed = coverage(&merged(&[&holder(900), pause]));
        assert!(missed.vacuous());
        assert_eq!(missed.faults[0].description, "struck no holder past its lease");
        assert_eq!(
            missed.line(),
            "0 of 1 pauses reached a stall longer than the holder's remaining lease"
        );
        // The same pause aimed at another process reaches nothing.
        let other = pause.replace("[1]", "[2]");
        assert!(coverage(&merged(&[&holder(2500), &other])).vacuous());
    }

    #[test]
    fn a_pause_that_never_struck_reaches_nothing() {
        let pause = r#"
            200 n info start - {"fault":"pause","targets":["client-1"],"processes":[1],"stall_ms":2000}
            2200 n info stop - {"fault":"pause","targets":["client-1"],"processes":[1],"stall_ms":2000,"struck":null}
        "#;
        let coverage = coverage(&merged(&[&holder(2500), pause]));
        assert!(coverage.vacuous());
        assert_eq!(coverage.faults[0].description, "never struck");
    }

    #[test]
    fn without_processes_a_client_fault_matches_any_client_and_says_so() {
        let pause = r#"
            200 n info start - {"fault":"pause","targets":["client-7"],"stall_ms":2000}
            2200 n info stop - {"fault":"pause","targets":["client-7"],"stall_ms":2000,"struck":"after-grant"}
        "#;
        let coverage = coverage(&merged(&[&holder(2500), pause]));
        assert_eq!(coverage.reached(), 1);
        assert!(coverage.faults[0].description.contains("any client's belief counted"));
    }

    #[test]
    fn a_renew_moves_the_deadline() {
        // Renewed at 0.9 s for 1 s: the lease runs to 1.9 s, past the 1.5 s
        // release; the cut ends nothing.
        let renewed = r#"
            900 1 invoke renew l {"ttl_ms":1000}
            910 1 ok renew l
        "#;
        let cut = r#"
            950 n info start - {"fault":"partition","shape":"client","targets":["client-1"],"processes":[1]}
            1700 n info stop - {"fault":"partition","shape":"client","targets":["client-1"],"processes":[1]}
        "#;
        let covered = coverage(&merged(&[&holder(1500), renewed, cut]));
        assert!(covered.vacuous(), "{covered:?}");
        assert_eq!(
            covered.line(),
            "0 of 1 client cuts caught a holder whose work outlasted its lease"
        );
        // Without the renew, the holder went on past 1.1 s inside the cut.
        let bare = coverage(&merged(&[&holder(1500), cut]));
        assert_eq!(bare.reached(), 1);
        assert_eq!(bare.kinds[0].kind, "client cut");
        // A renew sent while the cut was on cannot have reached the
        // servers, whatever its reply said: the lease ran out at 1.1 s.
        let early_cut = r#"
            200 n info start - {"fault":"partition","shape":"client","targets":["client-1"],"processes":[1]}
            1700 n info stop - {"fault":"partition","shape":"client","targets":["client-1"],"processes":[1]}
        "#;
        let cut_off = coverage(&merged(&[&holder(1500), renewed, early_cut]));
        assert_eq!(cut_off.reached(), 1, "{cut_off:?}");
    }

    /// A session kill reaches a lock held then, though its lease (the
    /// workload records one) has time left: the session lock goes with
    /// its session.
    #[test]
    fn a_session_kill_reaches_a_lock_held_when_it_struck() {
        let kill = "300 n info start - {\"fault\":\"conn-kill\",\"targets\":[],\"sessions\":5}\n\
                    400 n info stop - {\"fault\":\"conn-kill\",\"targets\":[]}\n";
        let held = coverage(&merged(&[&holder(500), kill]));
        assert_eq!(held.reached(), 1, "{held:?}");
        assert!(held.faults[0].description.starts_with("a killed session that held a lock"));
        let idle = coverage(&merged(&[&holder(200), kill]));
        assert!(idle.vacuous());
        assert_eq!(idle.line(), "0 of 1 session kills struck a session that held a lock");
    }

    #[test]
    fn a_kill_reaches_a_held_key_persisted_or_not() {
        let kill = |persistent: &str| {
            format!(
                "300 n info start - {{\"fault\":\"kill\",\"targets\":[\"redis\"]{persistent}}}\n\
                 400 n info stop - {{\"fault\":\"kill\",\"targets\":[\"redis\"]{persistent}}}\n"
            )
        };
        let volatile = coverage(&merged(&[&holder(500), &kill(r#","persistent":false"#)]));
        assert_eq!(volatile.reached(), 1);
        assert!(volatile.faults[0].description.starts_with("a kill while a key was held"));
        // A server that persists is struck where it matters as well: the
        // kill tests that the held key survives.
        let persisted = coverage(&merged(&[&holder(500), &kill(r#","persistent":true"#)]));
        assert_eq!(persisted.reached(), 1);
        assert!(persisted.faults[0].description.contains("persists its keys"), "{persisted:?}");
        let unknown = coverage(&merged(&[&holder(500), &kill("")]));
        assert_eq!(unknown.reached(), 1);
        assert!(unknown.faults[0].description.contains("does not say whether it persisted"));
        // Nothing held at the kill (released at 0.2 s).
        let idle = coverage(&merged(&[&holder(200), &kill("")]));
        assert_eq!(idle.faults[0].description, "no lock was held when it struck");
    }

    #[test]
    fn a_session_lock_counts_for_a_kill_and_a_slow_network() {
        let session = "100 1 invoke acquire l\n110 1 ok acquire l\n2000 1 invoke release l\n2010 1 ok release l\n";
        let faults = r#"
            300 n info start - {"fault":"kill","targets":["mysql"]}
            400 n info stop - {"fault":"kill","targets":["mysql"]}
            500 n info start - {"fault":"slow-net","targets":["mysql"],"max_ms":100}
            600 n info stop - {"fault":"slow-net","targets":["mysql"],"max_ms":100}
        "#;
        let coverage = coverage(&merged(&[session, faults]));
        assert_eq!(coverage.reached(), 2, "{coverage:?}");
        assert!(coverage.faults[1].description.contains("session"));
    }

    #[test]
    fn a_clock_jump_reaches_a_lease_with_less_time_left() {
        // At 0.6 s the lease (to 1.1 s) has 0.5 s left.
        let jump = |ms: u64| {
            format!(
                "600 n info start - {{\"fault\":\"clock\",\"targets\":[\"redis\"],\"jump_ms\":{ms}}}\n\
                 700 n info stop - {{\"fault\":\"clock\",\"targets\":[\"redis\"],\"jump_ms\":{ms}}}\n"
            )
        };
        let big = coverage(&merged(&[&holder(900), &jump(800)]));
        assert_eq!(big.reached(), 1, "{big:?}");
        assert!(big.faults[0].description.contains("500.0 ms of its lease left"));
        let small = coverage(&merged(&[&holder(900), &jump(300)]));
        assert!(small.vacuous());
        assert_eq!(
            small.kinds[0].sentence,
            "0 of 1 clock faults outran a live lease's remaining time"
        );
    }

    #[test]
    fn a_drift_reaches_a_lease_it_ends_before_its_holder_lets_go() {
        // Drift 3x from 0.2 s to 1.0 s: the lease (to 1.1 s, 0.9 s left at
        // 0.2 s) ends on the server at 0.5 s; the holder lets go at 0.9 s.
        let drift = |rate: &str| {
            format!(
                "200 n info start - {{\"fault\":\"clock\",\"targets\":[\"redis\"],\"drift_rate\":{rate}}}\n\
                 1000 n info stop - {{\"fault\":\"clock\",\"targets\":[\"redis\"],\"drift_rate\":{rate}}}\n"
            )
        };
        assert_eq!(coverage(&merged(&[&holder(900), &drift("3.0")])).reached(), 1);
        // A real server's drift: `clock-drift` with its `rate`.
        let real =
            drift("3.0").replace(r#""clock""#, r#""clock-drift""#).replace("drift_rate", "rate");
        let real = coverage(&merged(&[&holder(900), &real]));
        assert_eq!((real.reached(), real.kinds[0].kind.as_str()), (1, "clock"));
        // 1.1x: the server gains 0.08 s, ending the lease at 1.02 s: after
        // the release.
        assert!(coverage(&merged(&[&holder(900), &drift("1.1")])).vacuous());
    }

    /// A client's skewed clock misjudges anyone's lease (a lease table's
    /// client compares expiries): any lock held during it is reached.
    #[test]
    fn a_skewed_client_clock_reaches_any_lock_held_during_it() {
        let skew = r#"
            300 n info start - {"fault":"skew","targets":["client-2"],"processes":[2],"offset_ms":900}
            450 n info stop - {"fault":"skew","targets":["client-2"],"processes":[2],"offset_ms":900}
        "#;
        assert_eq!(coverage(&merged(&[&holder(500), skew])).reached(), 1);
        assert_eq!(
            coverage(&merged(&[&holder(200), skew])).line(),
            "0 of 1 skew faults struck while a lock was held"
        );
    }

    /// Lost replies reach a lock operation whose outcome they left unknown.
    #[test]
    fn a_lost_reply_reaches_a_lock_operation_left_unknown() {
        let loss = r#"
            600 n info start - {"fault":"loss","targets":["redis"],"probability":0.3}
            900 n info stop - {"fault":"loss","targets":["redis"],"probability":0.3}
        "#;
        let lost = r#"
            650 2 invoke acquire l {"ttl_ms":1000}
            800 2 info acquire l !timeout
        "#;
        let reached = coverage(&merged(&[&holder(500), loss, lost]));
        assert_eq!(reached.reached(), 1, "{reached:?}");
        assert!(
            reached.faults[0]
                .description
                .starts_with("a lock operation whose reply it lost: process 2"),
            "{}",
            reached.faults[0].description
        );
        assert!(coverage(&merged(&[&holder(500), loss])).vacuous());
    }

    /// A job's run holds its day's lock: a kill while one is in flight is
    /// a kill while a key was held.
    #[test]
    fn a_run_in_flight_is_a_lock_held() {
        let run = "100 1 invoke run job {\"data\":\"day-0\"}\n500 1 ok run job\n";
        let kill = "300 n info start - {\"fault\":\"kill\",\"targets\":[\"redis\"]}\n\
                    400 n info stop - {\"fault\":\"kill\",\"targets\":[\"redis\"]}\n";
        assert_eq!(coverage(&merged(&[run, kill])).reached(), 1);
    }

    #[test]
    fn a_split_of_the_servers_reaches_a_lock_held_during_it() {
        let split = r#"
            300 n info start - {"fault":"partition","shape":"halves","targets":["etcd-0"]}
            450 n info stop - {"fault":"partition","shape":"halves","targets":["etcd-0"]}
        "#;
        let held = coverage(&merged(&[&holder(500), split]));
        assert_eq!(held.reached(), 1, "{held:?}");
        assert!(held.faults[0].description.starts_with("a lock held while the servers were split"));
        assert!(coverage(&merged(&[&holder(200), split])).vacuous());
    }

    #[test]
    fn a_failover_reaches_a_live_grant_and_totals_count_per_kind() {
        let faults = r#"
            300 n info start - {"fault":"failover","targets":["redis-0"]}
            350 n info stop - {"fault":"failover","targets":["redis-0"]}
            700 n info start - {"fault":"failover","targets":["redis-0"]}
            750 n info stop - {"fault":"failover","targets":["redis-0"]}
            800 n info start - {"fault":"partition","shape":"halves","targets":["redis-0"]}
        "#;
        let coverage = coverage(&merged(&[&holder(500), faults]));
        let reached: Vec<bool> = coverage.faults.iter().map(|fault| fault.reached).collect();
        assert_eq!(reached, [true, false, false]);
        // The partition never stopped: it runs to the end of the history.
        assert_eq!(coverage.faults[2].stop_index, None);
        let kinds: Vec<(&str, u64, u64)> =
            coverage.kinds.iter().map(|k| (k.kind.as_str(), k.faults, k.reached)).collect();
        assert_eq!(kinds, [("failover", 2, 1), ("partition", 1, 0)]);
        assert_eq!(
            coverage.line(),
            "1 of 3 faults reached a vulnerable window (failover 1/2: a failover with a grant not yet replicated; partition 0/1)"
        );
    }

    #[test]
    fn a_line_with_many_kinds_gives_counts_alone() {
        let mut faults = String::new();
        for (at, name) in ["kill", "failover", "sigstop", "loss", "conn-kill"].iter().enumerate() {
            let time = 300 + at as u64 * 10;
            faults.push_str(&format!(
                "{time} n info start - {{\"fault\":\"{name}\",\"targets\":[\"s\"]}}\n"
            ));
        }
        let coverage = coverage(&merged(&[&holder(2000), &faults]));
        assert_eq!(
            coverage.line(),
            "5 of 5 faults reached a vulnerable window (kill 1/1; failover 1/1; sigstop 1/1; loss 1/1; conn-kill 1/1)"
        );
    }

    #[test]
    fn starts_and_stops_pair_per_fault_and_targets_in_order() {
        let faults = r#"
            200 n info start - {"fault":"slow-net","targets":["a"]}
            210 n info start - {"fault":"slow-net","targets":["b"]}
            300 n info stop - {"fault":"slow-net","targets":["b"]}
            1500 n info stop - {"fault":"slow-net","targets":["a"]}
            1600 n info stop - {"fault":"loss","targets":["a"]}
        "#;
        let coverage = coverage(&merged(&[&holder(2000), faults]));
        let spans: Vec<(u64, Option<u64>, bool)> = coverage
            .faults
            .iter()
            .map(|fault| {
                (fault.start_ns / 1_000_000, fault.stop_ns.map(|ns| ns / 1_000_000), fault.reached)
            })
            .collect();
        // Only the one on `a` lasted past the lease's end at 1.1 s; the
        // stray stop of loss is ignored.
        assert_eq!(spans, [(200, Some(1500), true), (210, Some(300), false)]);
    }

    #[test]
    fn odd_nemesis_fields_are_left_out_not_errors() {
        let faults = r#"
            200 n info start - {"fault":"pause","targets":["client-1"],"processes":"x","stall_ms":-3,"persistent":"yes","drift_rate":"fast"}
        "#;
        let coverage = coverage(&merged(&[&holder(2500), faults]));
        assert_eq!(coverage.faults.len(), 1);
        assert!(coverage.faults[0].reached);
    }
}
