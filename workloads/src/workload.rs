//! Workloads: what each logical client does, over and over, until time is up.

use std::time::Duration;

use lockcheck_checker::{EventType, Function, Process};
use rand::rngs::SmallRng;
use rand::Rng;
use serde_json::{json, Value};

use crate::client::{Grant, LockClient, Outcome};
use crate::protection::Protection;
use crate::recorder::{record_client, SharedRecorder};
use crate::stall::{Stall, StallPoint};
use crate::storage::ResourceStore;

/// The workloads lockcheck drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Workload {
    /// Contention on a few locks: acquire, hold a while, release.
    Mutex,
    /// Each holder writes to the lock's protected resource with its token:
    /// the double-charge scenario.
    FencedWrite,
    /// Every client is a replica of a service whose scheduler fires a daily
    /// job; each takes a lock named by the day and, if granted, runs the job
    /// (a write); the lock is never released, so a late replica finds it
    /// taken. The job must run exactly once a day.
    Cron,
    /// Broken: as `Cron`, but the lock is released after the run, so a late
    /// replica (clock skew, slow start) runs the job again.
    CronRelease,
    /// No lock at all: every client writes to the resources as it likes,
    /// which is what the storage alone keeps safe (an S3 compare-and-set).
    UnlockedWrite,
    /// Workers take orders from a queue that redelivers and charge each
    /// one, protected as `--protection` says (crate::payments).
    Payments,
    /// Every client takes two locks, always in the same order, and holds
    /// both a while (crate::lock_order): no deadlock can form.
    LockOrder,
    /// Broken: as `LockOrder`, but every other client takes the two locks
    /// in the opposite order, so two of them can each hold what the other
    /// waits for: a deadlock.
    LockOrderOpposite,
    /// Every client is a candidate in a leader election (crate::election):
    /// it campaigns for the lock; the leader renews, and does its work
    /// stamped with its term as the token, until it steps down or dies.
    Election,
}

impl Workload {
    pub const ALL: [Workload; 9] = [
        Workload::Mutex,
        Workload::FencedWrite,
        Workload::Cron,
        Workload::CronRelease,
        Workload::UnlockedWrite,
        Workload::Payments,
        Workload::LockOrder,
        Workload::LockOrderOpposite,
        Workload::Election,
    ];

    pub fn parse(name: &str) -> Option<Workload> {
        Workload::ALL.into_iter().find(|workload| workload.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            Workload::Mutex => "mutex",
            Workload::FencedWrite => "fenced-write",
            Workload::Cron => "cron",
            Workload::CronRelease => "cron-release",
            Workload::UnlockedWrite => "unlocked-write",
            Workload::Payments => "payments",
            Workload::LockOrder => "lock-order",
            Workload::LockOrderOpposite => "lock-order-opposite",
            Workload::Election => "election",
        }
    }
}

/// What is wrong with a test's size, if anything, in either world: no
/// clients or locks, a TTL outside 10 ms to 10 min, a time limit outside
/// 1 ms to 24 h.
pub fn check_sizes(
    clients: u32,
    locks: u32,
    ttl_ms: u64,
    time_limit: Duration,
) -> Result<(), String> {
    if clients == 0 || locks == 0 {
        return Err("--clients and --locks must be at least 1".to_string());
    }
    if !(10..=600_000).contains(&ttl_ms) {
        return Err("--ttl must be between 10ms and 10m".to_string());
    }
    if time_limit < Duration::from_millis(1) || time_limit > Duration::from_secs(24 * 3600) {
        return Err("--time-limit must be between 1ms and 24h".to_string());
    }
    Ok(())
}

/// How every client behaves.
#[derive(Debug, Clone)]
pub struct WorkloadOptions {
    pub workload: Workload,
    /// Lock names; lock `i` protects resource `resources[i]`.
    pub locks: Vec<String>,
    pub resources: Vec<String>,
    pub ttl_ms: u64,
    /// How long a holder keeps a lock (uniform), in ms.
    pub hold_ms: (u64, u64),
    /// Pause between attempts (uniform), in ms.
    pub think_ms: (u64, u64),
    /// Send the grant's token with writes (the storage may then fence).
    pub send_fence: bool,
    /// A semaphore: how many may hold a key at once (recorded with each
    /// acquire); `None` for a lock.
    pub permits: Option<u32>,
    /// How long the service keeps a lock whose holder's session ended from
    /// being taken again (Consul's lock-delay), recorded with each acquire
    /// so that liveness expects the wait. `None` for every other service.
    pub lock_delay_ms: Option<u64>,
    /// A session with a background keepalive (etcd's): the holder works one
    /// long job of `hold_ms` and renews every this many ms through it, then
    /// writes. `None`: a short job after at most one watchdog renewal.
    pub keepalive_ms: Option<u64>,
    /// What the payments workload relies on to charge each order once.
    pub protection: Protection,
}

impl WorkloadOptions {
    /// The resources the clients write: every lock's, or for the cron
    /// workload only the job's output, which it writes a unit at a time
    /// (`resource-0:day-3`). A storage prepares these, with their units.
    pub fn resources_in_use(&self) -> &[String] {
        match self.workload {
            Workload::Cron | Workload::CronRelease => {
                &self.resources[..self.resources.len().min(1)]
            }
            Workload::Mutex
            | Workload::FencedWrite
            | Workload::UnlockedWrite
            | Workload::LockOrder
            | Workload::LockOrderOpposite => &self.resources,
            // The leader's work lands in the first lock's resource.
            Workload::Election => &self.resources[..self.resources.len().min(1)],
            // The orders' effects land in the payments services, not here.
            Workload::Payments => &[],
        }
    }
}

/// An acquire's recorded value: the TTL asked for, and a semaphore's
/// permits or a lock-delay when there is one.
pub(crate) fn acquire_value(options: &WorkloadOptions) -> Value {
    let mut value = json!({ "ttl_ms": options.ttl_ms });
    if let Some(permits) = options.permits {
        value["permits"] = json!(permits);
    }
    if let Some(lock_delay_ms) = options.lock_delay_ms {
        value["lock_delay_ms"] = json!(lock_delay_ms);
    }
    value
}

/// One logical client's identity and limits.
#[derive(Debug, Clone)]
pub struct ClientPlan {
    /// 0-based; its first process id is this, and after each `info` it
    /// continues as `logical + n * clients`.
    pub logical: u32,
    pub clients: u32,
    /// Stop starting operations once the test's clock passes this.
    pub until: tokio::time::Instant,
}

/// Sleeps a uniform time from `range`. A range of (0, 0) does not touch the
/// timer at all: even a zero sleep waits for the runtime's next timer tick
/// (a millisecond), which would bound a back-to-back benchmark.
pub(crate) async fn pause(rng: &mut SmallRng, range: (u64, u64)) {
    if range != (0, 0) {
        tokio::time::sleep(uniform(rng, range)).await;
    }
}

/// A holder works a uniform time from `range`, as [`pause`] sleeps, having
/// told its stall point when its work ends: a nemesis that aims at a holder
/// with much of its hold ahead reads it.
pub(crate) async fn work(rng: &mut SmallRng, range: (u64, u64), stall: &Stall) {
    if range == (0, 0) {
        stall.holds_until(tokio::time::Instant::now());
        return;
    }
    let length = uniform(rng, range);
    stall.holds_until(tokio::time::Instant::now() + length);
    tokio::time::sleep(length).await;
}

pub(crate) fn uniform(rng: &mut SmallRng, (low, high): (u64, u64)) -> Duration {
    Duration::from_millis(if high > low { rng.gen_range(low..=high) } else { low })
}

/// The chance that a holder renews its lease before its work.
const RENEW_CHANCE: f64 = 0.3;

/// An outcome with nothing to record on `ok`.
fn unit(outcome: Outcome<()>) -> Outcome<Value> {
    outcome.map(|()| Value::Null)
}

/// A write's outcome, with the version it made on `ok` when the storage
/// counts them (`{"version": 7}`).
pub(crate) fn versioned(outcome: Outcome<Option<u64>>) -> Outcome<Value> {
    outcome.map(|version| version.map_or(Value::Null, |version| json!({ "version": version })))
}

/// `value` (an object, or null) with an acquire's watch wake-ups, when its
/// recipe counts them (`"woken": 2`).
pub(crate) fn with_woken(value: Value, woken: Option<u64>) -> Value {
    let Some(woken) = woken else { return value };
    let mut value = match value {
        Value::Object(fields) => fields,
        _ => serde_json::Map::new(),
    };
    value.insert("woken".to_string(), json!(woken));
    Value::Object(value)
}

pub(crate) fn grant_value(grant: &Grant) -> Value {
    match grant.fence {
        Some(fence) => json!({ "fence": fence }),
        None => Value::Null,
    }
}

/// The unlocked-write workload: a client picks a resource and writes to
/// it, with no lock and no token, over and over. After an `info` it goes
/// on as a new process with a new storage session.
pub(crate) async fn run_unlocked<S: ResourceStore>(
    store: &mut S,
    plan: &ClientPlan,
    options: &WorkloadOptions,
    mut rng: SmallRng,
    recorder: &SharedRecorder,
    stall: &Stall,
) {
    let mut process = i64::from(plan.logical);
    stall.set_process(process);
    let mut writes = 0u64;
    let record = |process: i64, event_type, key: &str, value, error: Option<&str>| {
        recorder.lock().expect("the recorder is never poisoned").record(
            Process::Client(process),
            event_type,
            Function::Write,
            Some(key),
            value,
            error,
        );
    };
    while tokio::time::Instant::now() < plan.until {
        pause(&mut rng, options.think_ms).await;
        let resource = &options.resources[rng.gen_range(0..options.resources.len())];
        writes += 1;
        let data = format!("{resource} by {process} #{writes}");
        record(process, EventType::Invoke, resource, json!({ "data": data }), None);
        match versioned(store.write_versioned(resource, None, &data).await) {
            Outcome::Ok(value) => record(process, EventType::Ok, resource, value, None),
            Outcome::Fail(error) => {
                record(process, EventType::Fail, resource, Value::Null, Some(&error))
            }
            Outcome::Info(error) => {
                record(process, EventType::Info, resource, Value::Null, Some(&error));
                process += i64::from(plan.clients);
                stall.set_process(process);
                store.reset().await;
                continue;
            }
        }
        stall.strike(StallPoint::AfterWrite).await;
    }
}

/// After an `Info`: the client goes on as a new process, with new sessions
/// to the lock service and to the storage.
pub(crate) async fn reset<C: LockClient, S: ResourceStore>(client: &mut C, store: &mut S) {
    client.reset().await;
    store.reset().await;
}

/// The mutex and fenced-write workloads.
pub(crate) async fn run_locking<C: LockClient, S: ResourceStore>(
    client: &mut C,
    store: &mut S,
    plan: &ClientPlan,
    options: &WorkloadOptions,
    mut rng: SmallRng,
    recorder: &SharedRecorder,
    stall: &Stall,
) {
    let mut process = i64::from(plan.logical);
    stall.set_process(process);
    let mut writes = 0u64;
    let record = |process: i64, event_type, f, key: &str, value, error: Option<&str>| {
        record_client(recorder, process, event_type, f, key, value, error)
    };
    // Records a completion, with `note` as the value of a `fail` or `info`;
    // on `info` the process is finished and the client goes on as a new one.
    let complete_noting = |process: &mut i64,
                           f: Function,
                           key: &str,
                           outcome: Outcome<Value>,
                           note: Value|
     -> Option<Value> {
        match outcome {
            Outcome::Ok(value) => {
                record(*process, EventType::Ok, f, key, value.clone(), None);
                Some(value)
            }
            Outcome::Fail(error) => {
                record(*process, EventType::Fail, f, key, note, Some(&error));
                None
            }
            Outcome::Info(error) => {
                record(*process, EventType::Info, f, key, note, Some(&error));
                *process += i64::from(plan.clients);
                stall.set_process(*process);
                None
            }
        }
    };
    let complete = |process: &mut i64, f: Function, key: &str, outcome: Outcome<Value>| {
        complete_noting(process, f, key, outcome, Value::Null)
    };
    'ops: while tokio::time::Instant::now() < plan.until {
        // Whatever ended the last turn, nothing is held between turns.
        stall.set_holding(false);
        pause(&mut rng, options.think_ms).await;
        let at = rng.gen_range(0..options.locks.len());
        let (lock, resource) = (&options.locks[at], &options.resources[at]);
        record(process, EventType::Invoke, Function::Acquire, lock, acquire_value(options), None);
        let outcome = client.acquire(lock, options.ttl_ms).await;
        // A recipe whose waiters wait on a watch says how often this
        // acquire's woke: recorded with its completion, whatever it was.
        let woken = client.take_wake_ups();
        let before = process;
        let note = with_woken(Value::Null, woken);
        let grant = match outcome {
            Outcome::Ok(grant) => {
                let value = Outcome::Ok(with_woken(grant_value(&grant), woken));
                complete_noting(&mut process, Function::Acquire, lock, value, note);
                stall.set_holding(true);
                stall.holds_key(lock);
                grant
            }
            Outcome::Fail(error) => {
                complete_noting(&mut process, Function::Acquire, lock, Outcome::Fail(error), note);
                continue;
            }
            Outcome::Info(error) => {
                complete_noting(&mut process, Function::Acquire, lock, Outcome::Info(error), note);
                reset(client, store).await;
                continue;
            }
        };
        debug_assert_eq!(before, process);
        // One renewal, recorded; a lost lease ends the turn with a release,
        // an unknown outcome with a new process.
        macro_rules! renew_or_stop {
            ($ops:lifetime) => {
                    // A stall here: the watchdog resumes with the process
                    // and renews late.
                    stall.strike(StallPoint::BeforeRenew).await;
                    record(
                        process,
                        EventType::Invoke,
                        Function::Renew,
                        lock,
                        json!({ "ttl_ms": options.ttl_ms }),
                        None,
                    );
                    let outcome = unit(client.renew(lock, &grant, options.ttl_ms).await);
                    let (lost, crashed) =
                        (matches!(outcome, Outcome::Fail(_)), matches!(outcome, Outcome::Info(_)));
                    complete(&mut process, Function::Renew, lock, outcome);
                    if crashed {
                        reset(client, store).await;
                        continue $ops;
                    }
                    if lost {
                        // The lease is gone: stop, and say so with a release.
                        stall.strike(StallPoint::BeforeRelease).await;
                        record(
                            process,
                            EventType::Invoke,
                            Function::Release,
                            lock,
                            grant_value(&grant),
                            None,
                        );
                        let outcome = unit(client.release(lock, &grant).await);
                        let crashed = matches!(outcome, Outcome::Info(_));
                        complete(&mut process, Function::Release, lock, outcome);
                        if crashed {
                            reset(client, store).await;
                        }
                        continue $ops;
                    }
            };
        }
        // A watchdog renewal now and then, and always when a pause is to
        // strike before one. It cannot save a holder whose stall falls
        // after it, before the work (docs/guide.md#leases-and-fencing), and
        // the workload keeps it that way.
        if options.keepalive_ms.is_none()
            && (rng.gen_bool(RENEW_CHANCE) || stall.is_pending_at(StallPoint::BeforeRenew))
        {
            renew_or_stop!('ops);
        }
        // The classic GC pause: after the grant, before the work.
        stall.strike(StallPoint::AfterGrant).await;
        // The long job of a session holder, its keepalive renewing the lease
        // all along (and, cut off from the service, still believing in it
        // until its own deadline: the client library's view, docs/guide.md#etcd).
        if let Some(every) = options.keepalive_ms {
            let job_end = tokio::time::Instant::now() + uniform(&mut rng, options.hold_ms);
            stall.holds_until(job_end);
            loop {
                let next = tokio::time::Instant::now() + Duration::from_millis(every.max(1));
                if next >= job_end {
                    tokio::time::sleep_until(job_end).await;
                    break;
                }
                tokio::time::sleep_until(next).await;
                renew_or_stop!('ops);
            }
        }
        match options.workload {
            Workload::Mutex
            | Workload::Cron
            | Workload::CronRelease
            | Workload::UnlockedWrite
            | Workload::Payments
            | Workload::LockOrder
            | Workload::LockOrderOpposite
            | Workload::Election => {
                if options.keepalive_ms.is_none() {
                    work(&mut rng, options.hold_ms, stall).await
                }
            }
            Workload::FencedWrite => {
                writes += 1;
                let data = format!("{lock} by {process} #{writes}");
                let fence = if options.send_fence { grant.fence } else { None };
                let value = match fence {
                    Some(fence) => json!({ "fence": fence, "data": data }),
                    None => json!({ "data": data }),
                };
                record(process, EventType::Invoke, Function::Write, resource, value, None);
                let outcome = versioned(store.write_versioned(resource, fence, &data).await);
                let crashed = matches!(outcome, Outcome::Info(_));
                complete(&mut process, Function::Write, resource, outcome);
                if crashed {
                    reset(client, store).await;
                    continue;
                }
                stall.strike(StallPoint::AfterWrite).await;
                if options.keepalive_ms.is_none() {
                    work(&mut rng, options.hold_ms, stall).await;
                }
            }
        }
        stall.strike(StallPoint::BeforeRelease).await;
        stall.set_holding(false);
        record(process, EventType::Invoke, Function::Release, lock, grant_value(&grant), None);
        let outcome = unit(client.release(lock, &grant).await);
        let crashed = matches!(outcome, Outcome::Info(_));
        complete(&mut process, Function::Release, lock, outcome);
        if crashed {
            reset(client, store).await;
        }
    }
}
