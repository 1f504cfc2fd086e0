//! Synthetic histories from a reference lock, for benchmarks and tests.
//!
//! [`generate`] runs clients against a correct lock simulated in memory, one
//! event at a time in time order. Lock `lock-<k>` protects resource `res-<k>`.
//! The reference lock takes effect at fixed points inside each operation: a
//! grant at its `ok`, a refusal at its invoke (only while another client
//! believes it holds the lock, so no acquire fails while the lock is free in
//! the eyes of the liveness check), a release at its invoke. An acquire asked
//! for while a grant is on its way waits until that grant's `ok` before it is
//! invoked. So every history it makes is valid for every checker. Leases do
//! not expire: holders keep a lock for milliseconds. The same options give the
//! same history (on one platform: `SmallRng` is not portable across them).
//! The `inject_*` functions then break exactly one property, for tests.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::value::RawValue;

use crate::event::{Event, EventType, Function, Process};

#[derive(Debug, Clone)]
pub struct SynthOptions {
    /// Client operations (invoke and completion pairs).
    pub ops: usize,
    pub clients: u32,
    /// Lock names; each lock protects one resource.
    pub keys: u32,
    pub seed: u64,
    pub ttl_ms: u64,
    /// Grants carry tokens and writes carry them.
    pub fenced: bool,
}

impl Default for SynthOptions {
    fn default() -> Self {
        SynthOptions { ops: 10_000, clients: 8, keys: 4, seed: 0, ttl_ms: 10_000, fenced: true }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum LockState {
    Free,
    /// Granted to an acquire whose `ok` comes at this time.
    Granting(u64),
    Held,
}

struct Lock {
    state: LockState,
    next_fence: u64,
    /// Its resource's state: the last accepted write's token and data number.
    last_write: Option<(u64, u64)>,
}

#[derive(Default)]
struct Client {
    /// The open operation, its key, whether it succeeds, the data it writes.
    open: Option<(Function, usize, bool, u64)>,
    /// The lock it believes it holds, with its token.
    held: Option<(usize, u64)>,
    /// Operations left before it releases; its first is a write.
    left: u32,
    wrote: bool,
}

fn raw(text: String) -> Option<Box<RawValue>> {
    Some(RawValue::from_string(text).expect("generated values are valid JSON"))
}

/// A history of `options.ops` operations, the same for the same options.
pub fn generate(options: &SynthOptions) -> Vec<Event> {
    let (client_count, key_count) = (options.clients.max(1) as usize, options.keys.max(1) as usize);
    let mut rng = SmallRng::seed_from_u64(options.seed);
    let lock_names: Vec<String> = (0..key_count).map(|k| format!("lock-{k}")).collect();
    let resource_names: Vec<String> = (0..key_count).map(|k| format!("res-{k}")).collect();
    let ttl = raw(format!("{{\"ttl_ms\":{}}}", options.ttl_ms));
    let fenced = options.fenced;
    let fence_value = |fence| fenced.then(|| raw(format!("{{\"fence\":{fence}}}"))).flatten();
    let data_value = |fence, data| match fenced {
        true => raw(format!("{{\"fence\":{fence},\"data\":\"w{data}\"}}")),
        false => raw(format!("{{\"data\":\"w{data}\"}}")),
    };
    let mut locks: Vec<Lock> = (0..key_count)
        .map(|_| Lock { state: LockState::Free, next_fence: 1, last_write: None })
        .collect();
    let mut clients: Vec<Client> = (0..client_count).map(|_| Client::default()).collect();
    let mut events: Vec<Event> = Vec::with_capacity(options.ops.saturating_mul(2));
    // (time, sequence, client): each client's next event, in time order.
    let mut queue = BinaryHeap::with_capacity(client_count);
    for client in 0..client_count {
        queue.push(Reverse((1_000_000 + rng.gen_range(0..1_000_000), client as u64, client)));
    }
    let (mut sequence, mut invoked, mut writes) = (client_count as u64, 0, 0);
    while let Some(Reverse((now, _, c))) = queue.pop() {
        let client = &mut clients[c];
        let (f, k, event_type, value, delay) = match client.open.take() {
            Some((f, k, succeeds, data)) => {
                let lock = &mut locks[k];
                let value = match f {
                    Function::Acquire if succeeds => {
                        let fence = lock.next_fence;
                        (lock.next_fence, lock.state) = (fence + 1, LockState::Held);
                        (client.held, client.left) = (Some((k, fence)), rng.gen_range(1..=4));
                        client.wrote = false;
                        fence_value(fence)
                    }
                    Function::Write => {
                        lock.last_write = client.held.map(|(_, fence)| (fence, data));
                        None
                    }
                    Function::Read => {
                        lock.last_write.and_then(|(fence, data)| data_value(fence, data))
                    }
                    _ => None,
                };
                let event_type = if succeeds { EventType::Ok } else { EventType::Fail };
                let think = if client.held.is_some() { 100_000 } else { 1_000_000 };
                (f, k, event_type, value, rng.gen_range(0..think))
            }
            None if invoked == options.ops => continue,
            None => {
                let latency = rng.gen_range(20_000..2_000_000);
                let (f, k, succeeds, data, value) = match client.held {
                    Some((k, fence)) if client.left == 0 => {
                        (client.held, locks[k].state) = (None, LockState::Free);
                        (Function::Release, k, true, 0, fence_value(fence))
                    }
                    Some((k, fence)) => {
                        client.left -= 1;
                        let choice = if client.wrote { rng.gen_range(0..100) } else { 0 };
                        client.wrote = true;
                        match choice {
                            0..60 => {
                                writes += 1;
                                (Function::Write, k, true, writes, data_value(fence, writes))
                            }
                            60..85 => (Function::Read, k, true, 0, None),
                            _ => (Function::Renew, k, true, 0, ttl.clone()),
                        }
                    }
                    None => {
                        let k = rng.gen_range(0..key_count);
                        let granted = match locks[k].state {
                            // Ask again once the grant on its way has landed.
                            LockState::Granting(at) => {
                                sequence += 1;
                                queue.push(Reverse((at + 1, sequence, c)));
                                continue;
                            }
                            LockState::Held => false,
                            LockState::Free => {
                                locks[k].state = LockState::Granting(now + latency);
                                true
                            }
                        };
                        (Function::Acquire, k, granted, 0, ttl.clone())
                    }
                };
                invoked += 1;
                client.open = Some((f.clone(), k, succeeds, data));
                (f, k, EventType::Invoke, value, latency)
            }
        };
        let names = match f {
            Function::Write | Function::Read => &resource_names,
            _ => &lock_names,
        };
        events.push(Event {
            index: events.len() as u64,
            time_ns: now,
            process: Process::Client(c as i64),
            event_type,
            f,
            key: Some(names[k].clone()),
            value,
            error: (event_type == EventType::Fail).then(|| "busy".to_string()),
            extra: None,
        });
        sequence += 1;
        queue.push(Reverse((now + delay, sequence, c)));
    }
    events
}

/// Writes events as JSON Lines.
pub fn write_jsonl(events: &[Event], out: impl std::io::Write) -> std::io::Result<()> {
    crate::write_events(out, events)
}

/// What an `inject_*` function put into a history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Injection {
    pub description: String,
    /// The lock or resource concerned.
    pub key: String,
    /// The process in the wrong: the second holder, the bad grant, the stale writer.
    pub process: i64,
    /// Indices of the injected events, ascending.
    pub events: Vec<u64>,
}

/// A lock `lock-<k>` and its resource `res-<k>`, as they stand just after the
/// last event on either (`pos`), where the injectors insert.
struct Scan {
    lock: String,
    resource: String,
    pos: usize,
    /// Who believes it holds the lock at `pos`, and whether it could release
    /// it there (no operation open, no later events).
    holder: Option<(i64, bool)>,
    /// The lowest and highest tokens granted.
    tokens: Option<(u64, u64)>,
    /// The highest token of a write the resource accepted.
    written: Option<u64>,
    ttl: Option<Box<RawValue>>,
}

fn client_id(event: &Event) -> Option<i64> {
    match event.process {
        Process::Client(id) => Some(id),
        Process::Nemesis => None,
    }
}

fn fence_of(event: &Event) -> Option<u64> {
    event.value_fields().ok().and_then(|fields| fields.fence)
}

/// The locks, the one whose last event comes earliest first.
fn scan(events: &[Event]) -> Vec<Scan> {
    let mut locks: Vec<&str> = Vec::new();
    for event in events.iter().filter(|e| e.f == Function::Acquire) {
        if let Some(key) = event.key.as_deref().filter(|key| !locks.contains(key)) {
            locks.push(key);
        }
    }
    let mut scans: Vec<Scan> = locks
        .into_iter()
        .map(|lock| {
            let resource = format!("res-{}", lock.strip_prefix("lock-").unwrap_or(lock));
            let touches = |e: &Event| e.key.as_deref().is_some_and(|k| k == lock || *k == resource);
            let pos = events.iter().rposition(touches).map_or(0, |at| at + 1);
            let (mut holder, mut tokens, mut written, mut ttl) =
                (None, None::<(u64, u64)>, None, None);
            let mut writing: BTreeMap<i64, Option<u64>> = BTreeMap::new();
            for event in &events[..pos] {
                let process = client_id(event);
                if event.event_type == EventType::Info && holder == process {
                    holder = None;
                }
                if !touches(event) {
                    continue;
                }
                match (event.event_type, &event.f) {
                    (EventType::Invoke, Function::Acquire) if ttl.is_none() => {
                        ttl = event.value.clone()
                    }
                    (EventType::Ok, Function::Acquire) => {
                        holder = process;
                        if let Some(t) = fence_of(event) {
                            tokens = Some(tokens.map_or((t, t), |(lo, hi)| (lo.min(t), hi.max(t))));
                        }
                    }
                    (EventType::Invoke, Function::Release) if holder == process => holder = None,
                    (EventType::Invoke, Function::Write) => {
                        if let Some(p) = process {
                            writing.insert(p, fence_of(event));
                        }
                    }
                    (completion, Function::Write) => {
                        let t = process.and_then(|p| writing.remove(&p)).flatten();
                        if completion == EventType::Ok {
                            written = written.max(t);
                        }
                    }
                    _ => {}
                }
            }
            let holder = holder.map(|h| {
                let last = events[..pos].iter().rev().find(|e| client_id(e) == Some(h));
                let idle = last.is_some_and(|e| e.event_type != EventType::Invoke);
                (h, idle && !events[pos..].iter().any(|e| client_id(e) == Some(h)))
            });
            Scan { lock: lock.to_string(), resource, pos, holder, tokens, written, ttl }
        })
        .collect();
    scans.sort_by_key(|scan| scan.pos);
    scans
}

/// Events to insert: process, function, invoke value, ok value.
type Pairs = Vec<(i64, Function, Option<Box<RawValue>>, Option<Box<RawValue>>)>;

fn fence_json(fence: Option<u64>) -> Option<Box<RawValue>> {
    fence.and_then(|fence| raw(format!("{{\"fence\":{fence}}}")))
}

/// Inserts each pair as an invoke and its `ok` at `pos`, 1 µs apart, delays
/// later events by as much, and renumbers every index. Returns the indices of
/// the new events.
fn insert(events: &mut Vec<Event>, pos: usize, key: &str, pairs: Pairs) -> Vec<u64> {
    let (base, step, count) =
        (events[..pos].last().map_or(0, |e| e.time_ns), 1_000, 2 * pairs.len() as u64);
    for event in &mut events[pos..] {
        event.time_ns += count * step;
    }
    let new = pairs.into_iter().flat_map(|(process, f, invoke, ok)| {
        [(process, EventType::Invoke, f.clone(), invoke), (process, EventType::Ok, f, ok)]
    });
    let new = new.zip(1..).map(|((process, event_type, f, value), n)| Event {
        index: 0,
        time_ns: base + n * step,
        process: Process::Client(process),
        event_type,
        f,
        key: Some(key.to_string()),
        value,
        error: None,
        extra: None,
    });
    events.splice(pos..pos, new);
    for (index, event) in events.iter_mut().enumerate() {
        event.index = index as u64;
    }
    (pos as u64..pos as u64 + count).collect()
}

fn fresh_process(events: &[Event]) -> i64 {
    events.iter().filter_map(client_id).max().map_or(0, |max| max + 1)
}

/// A new client is granted the lock whose last event comes first while
/// another still believes it holds it: its holder then, or else a first new
/// client granted it just before. Tokens still increase, so this breaks
/// mutual exclusion only.
pub fn inject_overlap(events: &mut Vec<Event>) -> Option<Injection> {
    let fenced = events.iter().any(|e| e.f == Function::Acquire && fence_of(e).is_some());
    let scan = scan(events).into_iter().next()?;
    let next = scan.tokens.map_or(1, |(_, highest)| highest + 1);
    let (fresh, mut pairs) = (fresh_process(events), Pairs::new());
    let grant = |process, token: u64| {
        (process, Function::Acquire, scan.ttl.clone(), fence_json(fenced.then_some(token)))
    };
    let release = |process, token: u64| {
        (process, Function::Release, fence_json(fenced.then_some(token)), None)
    };
    let (first, second, token) = match scan.holder {
        Some((holder, _)) => (holder, fresh, next),
        None => (fresh, fresh + 1, next + 1),
    };
    if first == fresh {
        pairs.push(grant(first, next));
    }
    pairs.extend([grant(second, token), release(second, token)]);
    if first == fresh {
        pairs.push(release(first, next));
    }
    let injected = insert(events, scan.pos, &scan.lock, pairs);
    let ok = injected[if first == fresh { 3 } else { 1 }];
    Some(Injection {
        description: format!("process {second} was granted {:?} at index {ok} while process {first} still believed it held it", scan.lock),
        key: scan.lock,
        process: second,
        events: injected,
    })
}

/// Once the last holder of a lock with tokens has released it, a new client is
/// granted it, and gives it up, with `token(lowest, highest)`.
fn inject_grant(
    events: &mut Vec<Event>,
    token: fn(u64, u64) -> Option<u64>,
    what: &str,
) -> Option<Injection> {
    let (scan, fence) = scan(events).into_iter().find_map(|scan| {
        let fence = scan.tokens.and_then(|(lowest, highest)| token(lowest, highest))?;
        scan.holder.is_none_or(|(_, idle)| idle).then_some((scan, fence))
    })?;
    let (process, mut pairs) = (fresh_process(events), Pairs::new());
    if let Some((holder, _)) = scan.holder {
        let highest = scan.tokens.map(|(_, highest)| highest);
        pairs.push((holder, Function::Release, fence_json(highest), None));
    }
    pairs.push((process, Function::Acquire, scan.ttl.clone(), fence_json(Some(fence))));
    pairs.push((process, Function::Release, fence_json(Some(fence)), None));
    let injected = insert(events, scan.pos, &scan.lock, pairs);
    let ok = injected[injected.len() - 3];
    Some(Injection {
        description: format!(
            "process {process} was granted {:?} at index {ok} with {what} token {fence}",
            scan.lock
        ),
        key: scan.lock,
        process,
        events: injected,
    })
}

/// A grant carries the same token as the grant before it. Breaks fence
/// monotonicity only (`None` without tokens).
pub fn inject_duplicate_token(events: &mut Vec<Event>) -> Option<Injection> {
    inject_grant(events, |_, highest| Some(highest), "the previous grant's")
}

/// A grant carries a token below all earlier ones. Breaks fence monotonicity
/// only (`None` without tokens, or when a token is 0).
pub fn inject_backwards_token(events: &mut Vec<Event>) -> Option<Injection> {
    inject_grant(events, |lowest, _| lowest.checked_sub(1), "a backwards")
}

/// After a resource's last operation, it accepts a new client's write with a
/// token one below the highest it had accepted. Breaks resource safety only
/// (`None` when no fenced write with a token above 0 was accepted).
pub fn inject_stale_write(events: &mut Vec<Event>) -> Option<Injection> {
    let (scan, stale) = scan(events).into_iter().find_map(|scan| {
        let stale = scan.written?.checked_sub(1)?;
        Some((scan, stale))
    })?;
    let process = fresh_process(events);
    let value = raw(format!("{{\"fence\":{stale},\"data\":\"stale-{process}\"}}"));
    let injected =
        insert(events, scan.pos, &scan.resource, vec![(process, Function::Write, value, None)]);
    Some(Injection {
        description: format!(
            "{:?} accepted process {process}'s write with token {stale} at index {} after one with token {}",
            scan.resource, injected[1], stale + 1
        ),
        key: scan.resource,
        process,
        events: injected,
    })
}
