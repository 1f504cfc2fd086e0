//! The driver of real tests, against in-memory backends: a correct lease
//! lock with a fence counter and fenced storage, and a broken one that never
//! refuses. Their histories are checked as `lockcheck check` checks them.
//! Most tests run on tokio's paused clock: seconds of workload in
//! milliseconds, the same every run.

mod common;

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use lockcheck_checker::names::{MUTUAL_EXCLUSION, RESOURCE_SAFETY};
use lockcheck_checker::{Analysis, Event, EventType, Function, Process, Verdict};
use lockcheck_real::schedule::{schedule, split, FaultTargets};
use lockcheck_real::RealError;
use lockcheck_real::{drive, DriveOptions, StallFault};
use lockcheck_workloads::{
    FaultKind, Grant, LockClient, Outcome, ResourceStore, Stall, StallPoint, Workload,
    WorkloadOptions,
};
use serde_json::Value;
use tokio::time::Instant;

/// A lease held: by whom, until when.
#[derive(Debug)]
struct Lease {
    id: String,
    expires: Instant,
}

/// The state of the in-memory lock service and storage.
#[derive(Debug, Default)]
struct World {
    leases: HashMap<String, Lease>,
    fence: u64,
    grants: u64,
    /// Per resource: the token of the last accepted write, and its data.
    resources: HashMap<String, (Option<u64>, String)>,
}

/// One session of a client of the in-memory service.
#[derive(Debug)]
struct FakeClient {
    world: Rc<RefCell<World>>,
    name: String,
    /// Grants every acquire, held or not.
    never_refuses: bool,
}

/// Every operation takes a millisecond, as a round trip on loopback might.
async fn round_trip() {
    tokio::time::sleep(Duration::from_millis(1)).await;
}

impl FakeClient {
    /// Whether `lease` still holds `key`.
    fn holds(world: &World, key: &str, lease: Option<&String>) -> bool {
        world
            .leases
            .get(key)
            .is_some_and(|held| Some(&held.id) == lease && held.expires > Instant::now())
    }
}

impl LockClient for FakeClient {
    async fn acquire(&mut self, key: &str, ttl_ms: u64) -> Outcome<Grant> {
        round_trip().await;
        let mut world = self.world.borrow_mut();
        let free = world.leases.get(key).is_none_or(|held| held.expires <= Instant::now());
        if !free && !self.never_refuses {
            return Outcome::Fail("busy".to_string());
        }
        world.fence += 1;
        world.grants += 1;
        let id = format!("{}#{}", self.name, world.grants);
        let expires = Instant::now() + Duration::from_millis(ttl_ms);
        world.leases.insert(key.to_string(), Lease { id: id.clone(), expires });
        Outcome::Ok(Grant { fence: Some(world.fence), lease: Some(id) })
    }

    async fn release(&mut self, key: &str, grant: &Grant) -> Outcome<()> {
        round_trip().await;
        let mut world = self.world.borrow_mut();
        if !FakeClient::holds(&world, key, grant.lease.as_ref()) {
            return Outcome::Fail("not-held".to_string());
        }
        world.leases.remove(key);
        Outcome::Ok(())
    }

    async fn renew(&mut self, key: &str, grant: &Grant, ttl_ms: u64) -> Outcome<()> {
        round_trip().await;
        let mut world = self.world.borrow_mut();
        if !FakeClient::holds(&world, key, grant.lease.as_ref()) {
            return Outcome::Fail("not-held".to_string());
        }
        if let Some(held) = world.leases.get_mut(key) {
            held.expires = Instant::now() + Duration::from_millis(ttl_ms);
        }
        Outcome::Ok(())
    }

    async fn reset(&mut self) {}
}

/// The in-memory storage, fenced.
#[derive(Debug)]
struct FakeStore {
    world: Rc<RefCell<World>>,
}

impl ResourceStore for FakeStore {
    /// Fenced: `UPDATE … WHERE fence <= $t`.
    async fn write(&mut self, resource: &str, fence: Option<u64>, data: &str) -> Outcome<()> {
        round_trip().await;
        let mut world = self.world.borrow_mut();
        let last = world.resources.get(resource).and_then(|(last, _)| *last);
        if let (Some(fence), Some(last)) = (fence, last) {
            if fence < last {
                return Outcome::Fail("stale-fence".to_string());
            }
        }
        world.resources.insert(resource.to_string(), (fence.or(last), data.to_string()));
        Outcome::Ok(())
    }

    async fn read(&mut self, resource: &str) -> Outcome<(Option<u64>, Option<String>)> {
        round_trip().await;
        let world = self.world.borrow();
        let (fence, data) = world.resources.get(resource).cloned().unwrap_or_default();
        Outcome::Ok((fence, (!data.is_empty()).then_some(data)))
    }
}

/// Five clients on two locks for 20 s with 200 ms TTLs, stalled if asked.
fn options(stalled: bool) -> DriveOptions {
    let (clients, ttl_ms, time_limit, seed) = (5, 200, Duration::from_secs(20), 7);
    let stalls =
        if stalled { stall_schedule(clients, ttl_ms, time_limit, seed) } else { Vec::new() };
    DriveOptions {
        workload: WorkloadOptions {
            workload: Workload::FencedWrite,
            locks: vec!["lock-0".to_string(), "lock-1".to_string()],
            resources: vec!["resource-0".to_string(), "resource-1".to_string()],
            ttl_ms,
            hold_ms: (0, 20),
            think_ms: (0, 40),
            send_fence: true,
            permits: None,
            keepalive_ms: None,
            lock_delay_ms: None,
            protection: Default::default(),
        },
        clients,
        time_limit,
        seed,
        stalls,
    }
}

/// The stalls of the one fault schedule of a run with only `pause` on.
fn stall_schedule(clients: u32, ttl_ms: u64, time_limit: Duration, seed: u64) -> Vec<StallFault> {
    let targets = FaultTargets::clients(clients, ttl_ms);
    split(schedule(&[FaultKind::Pause], &targets, time_limit, seed)).stalls
}

/// Drives the in-memory backend on tokio's paused clock.
fn drive_fake(options: &DriveOptions, never_refuses: bool) -> Vec<Event> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    let world = Rc::new(RefCell::new(World::default()));
    let connect = |logical: u32, _stall: Stall| {
        let world = world.clone();
        async move {
            let store = FakeStore { world: world.clone() };
            Ok::<_, RealError>((
                FakeClient { world, name: format!("client-{logical}"), never_refuses },
                store,
            ))
        }
    };
    runtime.block_on(drive(options, connect)).expect("every client connects")
}

fn check(events: &[Event]) -> Analysis {
    common::analyzed(events)
}

fn verdict(analysis: &Analysis, checker: &str) -> Option<Verdict> {
    analysis.verdict_of(checker)
}

fn count(events: &[Event], f: Function, event_type: EventType) -> usize {
    events.iter().filter(|event| event.f == f && event.event_type == event_type).count()
}

fn value(event: &Event) -> Value {
    event
        .value
        .as_ref()
        .map(|raw| serde_json::from_str(raw.get()).expect("JSON"))
        .unwrap_or_default()
}

#[test]
fn a_correct_lock_without_faults_is_valid() {
    let events = drive_fake(&options(false), false);
    assert!(count(&events, Function::Acquire, EventType::Ok) > 100, "the clients got locks");
    assert!(count(&events, Function::Acquire, EventType::Fail) > 0, "and contended for them");
    assert!(count(&events, Function::Write, EventType::Ok) > 100, "and wrote");
    assert!(events.iter().all(|event| event.process != Process::Nemesis));
    let analysis = check(&events);
    assert_eq!(analysis.verdict, Verdict::Valid, "{:#?}", analysis.results);
}

#[test]
fn a_lock_that_never_refuses_breaks_mutual_exclusion() {
    let events = drive_fake(&options(false), true);
    let analysis = check(&events);
    assert_eq!(verdict(&analysis, MUTUAL_EXCLUSION), Some(Verdict::Invalid));
    assert_eq!(analysis.verdict, Verdict::Invalid);
}

#[test]
fn stalls_longer_than_the_ttl_break_mutual_exclusion_but_not_fenced_storage() {
    // Each stall aimed after a grant, before the write: the stale write.
    let mut options = options(true);
    for stall in &mut options.stalls {
        stall.at = StallPoint::AfterGrant;
    }
    let events = drive_fake(&options, false);
    let faults: Vec<&Event> =
        events.iter().filter(|event| event.process == Process::Nemesis).collect();
    assert!(faults.len() >= 4, "several stalls in 20 s: {}", faults.len());
    for pair in faults.chunks(2) {
        assert_eq!((&pair[0].f, &pair[1].f), (&Function::Start, &Function::Stop));
        // The stop is the start, and says where the stall struck.
        let mut stop = value(pair[1]);
        let struck = stop.as_object_mut().and_then(|stop| stop.remove("struck"));
        assert!(struck.is_some(), "a stop says where it struck: {stop}");
        assert_eq!(value(pair[0]), stop);
    }
    for fault in &faults {
        assert_eq!(fault.event_type, EventType::Info);
        let value = value(fault);
        assert_eq!(value["fault"], "pause");
        let target = value["targets"][0].as_str().expect("a target");
        assert!(target.starts_with("client-"), "{value}");
        let stall_ms = value["stall_ms"].as_u64().expect("stall_ms");
        assert!((300..=600).contains(&stall_ms), "1.5 to 3 TTLs: {value}");
    }
    let analysis = check(&events);
    assert_eq!(verdict(&analysis, MUTUAL_EXCLUSION), Some(Verdict::Invalid));
    assert_eq!(verdict(&analysis, RESOURCE_SAFETY), Some(Verdict::Valid));
    assert!(
        events.iter().any(|event| event.error.as_deref() == Some("stale-fence")),
        "the fenced storage rejected a stalled holder's write"
    );
}

#[test]
fn the_stall_schedule_follows_the_seed_and_stays_inside_the_test() {
    let (clients, ttl_ms, time_limit) = (5, 200, Duration::from_secs(20));
    let schedule = |seed| stall_schedule(clients, ttl_ms, time_limit, seed);
    assert_eq!(schedule(1), schedule(1));
    assert_ne!(schedule(1), schedule(2));
    let faults: Vec<StallFault> = schedule(1);
    assert!(!faults.is_empty());
    let quiet_end = Duration::from_millis(3 * ttl_ms);
    for (at, fault) in faults.iter().enumerate() {
        assert!(fault.client < clients);
        assert_eq!(fault.end - fault.start, Duration::from_millis(fault.stall_ms));
        assert!(fault.end + quiet_end <= time_limit, "{fault:?}");
        if let Some(next) = faults.get(at + 1) {
            assert!(next.start >= fault.end + Duration::from_millis(500), "{next:?}");
        }
    }
    assert!(stall_schedule(clients, ttl_ms, Duration::from_millis(100), 1).is_empty());
}

#[test]
fn a_client_that_cannot_connect_is_an_error_not_a_history() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().expect("rt");
    let world = Rc::new(RefCell::new(World::default()));
    let connect = |logical: u32, _stall: Stall| {
        let world = world.clone();
        async move {
            if logical == 2 {
                return Err(RealError::Connect {
                    what: "fake",
                    url: "fake://nowhere".to_string(),
                    reason: "refused".to_string(),
                });
            }
            let store = FakeStore { world: world.clone() };
            Ok((
                FakeClient { world, name: format!("client-{logical}"), never_refuses: false },
                store,
            ))
        }
    };
    let outcome = runtime.block_on(drive(&options(false), connect));
    assert!(matches!(outcome, Err(RealError::Connect { what: "fake", .. })), "{outcome:?}");
}

#[test]
fn on_the_wall_clock_the_history_takes_real_time() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().expect("rt");
    let world = Rc::new(RefCell::new(World::default()));
    let connect = |logical: u32, _stall: Stall| {
        let world = world.clone();
        async move {
            let store = FakeStore { world: world.clone() };
            Ok::<_, RealError>((
                FakeClient { world, name: format!("client-{logical}"), never_refuses: false },
                store,
            ))
        }
    };
    let options = DriveOptions { time_limit: Duration::from_millis(300), ..options(false) };
    let wall = std::time::Instant::now();
    let events = runtime.block_on(drive(&options, connect)).expect("every client connects");
    let elapsed = wall.elapsed();
    // Real time passed: at least the time limit. The upper bound only
    // guards against a hang; a loaded machine may take far longer than 300 ms.
    assert!(
        elapsed >= Duration::from_millis(300) && elapsed < Duration::from_secs(60),
        "{elapsed:?}"
    );
    let last_ns = events.last().expect("events").time_ns;
    assert!(last_ns >= 250_000_000 && last_ns <= elapsed.as_nanos() as u64, "{last_ns}");
    assert!(events.windows(2).all(|pair| pair[0].time_ns <= pair[1].time_ns));
    assert_eq!(check(&events).verdict, Verdict::Valid);
}

#[test]
fn a_real_pause_strikes_at_each_point_of_the_workload_and_the_client_goes_on() {
    // The real schedule aims each stall at one point; the shared workload
    // passes the four of its own (the fake client has no transport, so no
    // stall strikes in flight or between commands), and a stalled client
    // acts again when its stall is over.
    let mut struck = std::collections::BTreeSet::new();
    for seed in 0..3 {
        let mut options = options(true);
        options.seed = seed;
        options.stalls = stall_schedule(5, 200, Duration::from_secs(20), seed);
        assert!(options.stalls.iter().any(|stall| stall.at != StallPoint::AfterGrant));
        let events = drive_fake(&options, false);
        for (at, event) in events.iter().enumerate() {
            let value = value(event);
            if event.process != Process::Nemesis || event.f != Function::Stop {
                continue;
            }
            let Some(point) = value["struck"].as_str() else { continue };
            struck.insert(point.to_string());
            assert!(
                ["after-grant", "after-write", "before-renew", "before-release"].contains(&point),
                "struck at {point}, which the fake client does not pass"
            );
            let client: i64 = value["targets"][0].as_str().unwrap()[7..].parse().unwrap();
            let resumed = event.time_ns + value["stall_ms"].as_u64().unwrap() * 1_000_000;
            let end = events.last().unwrap().time_ns;
            if end > resumed + 2_000_000_000 {
                assert!(
                    events[at..].iter().any(|later| {
                        matches!(later.process, Process::Client(p) if p % 5 == client)
                            && later.event_type == EventType::Invoke
                            && later.time_ns > resumed
                    }),
                    "client {client} never acted after its stall at {point}, seed {seed}"
                );
            }
        }
    }
    assert_eq!(
        struck.into_iter().collect::<Vec<_>>(),
        ["after-grant", "after-write", "before-release", "before-renew"],
        "every point of the workload struck over three seeds"
    );
}

#[test]
fn a_real_stall_waits_for_a_fresh_grant_and_strikes_that_holder() {
    // Each stall may wait up to its slack for a client whose grant has just
    // come back: its start is recorded right after that client's grant,
    // before its work, and no later than its slack after it was due.
    let options = options(true);
    let slack: Vec<Duration> = options.stalls.iter().map(|stall| stall.slack).collect();
    assert!(slack.iter().all(|slack| !slack.is_zero()), "{slack:?}");
    let events = drive_fake(&options, false);
    let starts: Vec<usize> = (0..events.len())
        .filter(|&at| events[at].process == Process::Nemesis && events[at].f == Function::Start)
        .collect();
    assert_eq!(starts.len(), options.stalls.len());
    for (&at, (planned, slack)) in starts.iter().zip(options.stalls.iter().zip(&slack)) {
        let value = value(&events[at]);
        let client: i64 = value["targets"][0].as_str().unwrap()[7..].parse().unwrap();
        // Since its latest grant, at most a watchdog renewal (which comes
        // before the work): no write, no release.
        let since: Vec<&Event> = events[..at]
            .iter()
            .rev()
            .filter(|event| matches!(event.process, Process::Client(p) if p % 5 == client))
            .take_while(|event| {
                !(event.f == Function::Acquire && event.event_type == EventType::Ok)
            })
            .collect();
        assert!(
            since.iter().all(|event| event.f == Function::Renew),
            "stall {value} struck client {client}, who since its grant did {since:?}"
        );
        let due = planned.start.as_nanos() as u64;
        let started = events[at].time_ns;
        assert!(started + 1_000_000 >= due && started <= due + slack.as_nanos() as u64 + 2_000_000);
    }
}
