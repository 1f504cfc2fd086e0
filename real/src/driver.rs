//! Runs one real test: connects every logical client to the backend, drives
//! them all at once through the workload until the time limit, stalling
//! holders on the stalls it is given (the pause fault), and returns the
//! history recorded on the wall clock.
//!
//! The clients run concurrently on the caller's thread (a backend's client
//! futures need not be `Send`), so `drive` is awaited inside a tokio runtime,
//! current-thread or not, never spawned onto one.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{join, join_all};
use lockcheck_checker::{Event, Function};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use tokio::time::Instant;

use super::RealError;
use lockcheck_workloads::payments::{NoPayments, Payments};
use lockcheck_workloads::{
    run_client, Aim, ClientPlan, HistoryFile, Holders, LockClient, Recorder, ResourceStore,
    SharedRecorder, Stall, StallPoint, StallPoints, WorkloadOptions,
};

/// One real test.
#[derive(Debug, Clone)]
pub struct DriveOptions {
    pub workload: WorkloadOptions,
    pub clients: u32,
    /// How long clients start operations for.
    pub time_limit: Duration,
    /// Each client's random choices come from it.
    pub seed: u64,
    /// The clients' stalls (`--nemesis pause`, the stall part of the run's
    /// one schedule, [`crate::schedule`]); none for a fault-free run.
    pub stalls: Vec<StallFault>,
}

/// One stall: from `start` on, client `client` stalls for `stall_ms` when
/// it next passes point `at` (a GC pause longer than the TTL, so that
/// another client takes the lock while it still believes it holds it,
/// docs/guide.md#leases-and-fencing); at `end` a stall not yet taken is
/// dropped. The stall is aimed: it waits up to `slack` for a client whose
/// grant has just come back and strikes it instead, at a point among
/// `points` still ahead in its hold ([`Holders`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StallFault {
    pub start: Duration,
    pub end: Duration,
    pub client: u32,
    pub stall_ms: u64,
    pub at: StallPoint,
    /// How long the stall may wait for its aim (moved on by as much).
    pub slack: Duration,
    /// The points it may be moved to (`--pause-at`).
    pub points: StallPoints,
}

/// Runs a test: connects client 0, 1, … with `connect`, given the client's
/// stall point: its lock client and its storage (one session each; a
/// failure to connect is an error, not a history of failures), then runs
/// every client and the nemesis until `options.time_limit`, and returns the
/// history. Time 0 is when every client is connected.
pub async fn drive<C, S, F, Fut>(
    options: &DriveOptions,
    connect: F,
) -> Result<Vec<Event>, RealError>
where
    C: LockClient,
    S: ResourceStore,
    F: Fn(u32, Stall) -> Fut,
    Fut: Future<Output = Result<(C, S), RealError>>,
{
    drive_with(options, connect, |_, _, _| async { Ok(()) }).await
}

/// As [`drive`], with another nemesis running beside the clients (the
/// server faults of `nemesis.rs`), given the recorder, the test's start and
/// the clients' holds to aim at.
/// Its error ends the test with that error.
pub async fn drive_with<C, S, F, Fut, N, NFut>(
    options: &DriveOptions,
    connect: F,
    nemesis: N,
) -> Result<Vec<Event>, RealError>
where
    C: LockClient,
    S: ResourceStore,
    F: Fn(u32, Stall) -> Fut,
    Fut: Future<Output = Result<(C, S), RealError>>,
    N: FnOnce(SharedRecorder, Instant, Holders) -> NFut,
    NFut: Future<Output = Result<(), RealError>>,
{
    drive_recorded(options, None, connect, nemesis).await
}

/// How often a running test looks whether the tool was interrupted.
const INTERRUPT_POLL: Duration = Duration::from_millis(20);

/// As [`drive_with`], writing each event to `history` as it is recorded.
/// A Ctrl-C, SIGTERM or SIGHUP ([`lockcheck_workloads::interrupt`]) ends the test at
/// once with [`RealError::Interrupted`]: its clients are dropped where
/// they are, and `history` keeps what was recorded until then.
pub async fn drive_recorded<C, S, F, Fut, N, NFut>(
    options: &DriveOptions,
    history: Option<HistoryFile>,
    connect: F,
    nemesis: N,
) -> Result<Vec<Event>, RealError>
where
    C: LockClient,
    S: ResourceStore,
    F: Fn(u32, Stall) -> Fut,
    Fut: Future<Output = Result<(C, S), RealError>>,
    N: FnOnce(SharedRecorder, Instant, Holders) -> NFut,
    NFut: Future<Output = Result<(), RealError>>,
{
    let connect = |logical: u32, stall: Stall| {
        let connected = connect(logical, stall);
        async move {
            let (client, store) = connected.await?;
            Ok((client, store, NoPayments))
        }
    };
    drive_paying(options, history, connect, nemesis).await
}

/// As [`drive_recorded`], each client also given its way to the payments
/// services (the queue, the provider, the payments table) by `connect`.
pub async fn drive_paying<C, S, P, F, Fut, N, NFut>(
    options: &DriveOptions,
    history: Option<HistoryFile>,
    connect: F,
    nemesis: N,
) -> Result<Vec<Event>, RealError>
where
    C: LockClient,
    S: ResourceStore,
    P: Payments,
    F: Fn(u32, Stall) -> Fut,
    Fut: Future<Output = Result<(C, S, P), RealError>>,
    N: FnOnce(SharedRecorder, Instant, Holders) -> NFut,
    NFut: Future<Output = Result<(), RealError>>,
{
    let interrupted = async {
        loop {
            if let Some(signal) = lockcheck_workloads::interrupt::signal() {
                return RealError::Interrupted { signal };
            }
            tokio::time::sleep(INTERRUPT_POLL).await;
        }
    };
    tokio::select! {
        biased;
        error = interrupted => Err(error),
        driven = drive_inner(options, history, connect, nemesis) => {
            driven.map_err(RealError::or_interrupted)
        }
    }
}

async fn drive_inner<C, S, P, F, Fut, N, NFut>(
    options: &DriveOptions,
    history: Option<HistoryFile>,
    connect: F,
    nemesis: N,
) -> Result<Vec<Event>, RealError>
where
    C: LockClient,
    S: ResourceStore,
    P: Payments,
    F: Fn(u32, Stall) -> Fut,
    Fut: Future<Output = Result<(C, S, P), RealError>>,
    N: FnOnce(SharedRecorder, Instant, Holders) -> NFut,
    NFut: Future<Output = Result<(), RealError>>,
{
    let mut rng = SmallRng::seed_from_u64(options.seed);
    // Each client's stall point, shared with its backend client too: a
    // recipe with a step inside (SETNX, then EXPIRE) stalls there.
    let stalls: Vec<Stall> = (0..options.clients).map(|_| Stall::default()).collect();
    Stall::share_board(&stalls);
    let holders = Holders::new(
        &stalls,
        Duration::from_millis(options.workload.hold_ms.1),
        Duration::from_millis(options.workload.ttl_ms),
    );
    let mut clients = Vec::with_capacity(options.clients as usize);
    for logical in 0..options.clients {
        clients.push(connect(logical, stalls[logical as usize].clone()).await?);
    }
    let recorder = match history {
        Some(file) => Recorder::new().writing_to(file),
        None => Recorder::new(),
    }
    .shared();
    let start = Instant::now();
    let until = start + options.time_limit;
    let runs = (0u32..).zip(clients).map(|(logical, (mut client, mut store, mut payments))| {
        let plan = ClientPlan { logical, clients: options.clients, until };
        let client_rng = SmallRng::seed_from_u64(rng.gen());
        let (recorder, stall) = (&recorder, &stalls[logical as usize]);
        async move {
            run_client(
                &mut client,
                &mut store,
                &mut payments,
                &plan,
                &options.workload,
                client_rng,
                recorder,
                stall,
            )
            .await;
        }
    });
    let server_faults = nemesis(recorder.clone(), start, holders.clone());
    let ((_, ()), faulted) = join(
        join(join_all(runs), stall_clients(&options.stalls, &holders, &recorder, start)),
        server_faults,
    )
    .await;
    faulted?;
    Ok(events(recorder))
}

/// Carries out the stalls, recording each start and stop as the simulator
/// does: `{"fault":"pause","targets":["client-3"],"stall_ms":…}`. The real
/// world's stalls are aimed where they break locks (the simulator's only
/// with `--aim`, so that its pinned seeds keep their histories): each
/// waits, within its slack, for a client whose grant has just come back,
/// with its whole hold ahead, else strikes a client holding a lock when it
/// starts, if any does; and it is moved to a point still ahead in the
/// holder's hold when the drawn one is behind it or one its recipe never
/// passes.
async fn stall_clients(
    faults: &[StallFault],
    holders: &Holders,
    recorder: &SharedRecorder,
    start: Instant,
) {
    for fault in faults {
        tokio::time::sleep_until(start + fault.start).await;
        let aimed = holders.aim(Aim::Fresh, fault.client, fault.slack).await;
        // The drawn client picks among the holders.
        let client = holders.stalled(aimed.client, fault.client);
        let at = holders.point_ahead(client, fault.at, fault.points, fault.stall_ms);
        let (start_at, end) = (fault.start + aimed.waited, fault.end + aimed.waited);
        let fault = StallFault { client, at, start: start_at, end, ..*fault };
        let Some(stall) = holders.stall(client) else { continue };
        stall.request_at(fault.stall_ms, fault.at);
        record_fault(recorder, &fault, stall.process(), Function::Start, None);
        tokio::time::sleep_until(start + fault.end).await;
        let struck = stall.clear();
        record_fault(recorder, &fault, stall.process(), Function::Stop, Some(struck));
    }
}

/// A stall's record; its stop says where it struck (`null`: the client
/// never passed its point while it was on).
fn record_fault(
    recorder: &SharedRecorder,
    fault: &StallFault,
    process: Option<i64>,
    f: Function,
    struck: Option<Option<StallPoint>>,
) {
    let mut value = json!({
        "fault": "pause",
        "targets": [format!("client-{}", fault.client)],
        "processes": process.into_iter().collect::<Vec<_>>(),
        "stall_ms": fault.stall_ms,
        "at": fault.at.name(),
    });
    if let Some(struck) = struck {
        value["struck"] = json!(struck.map(StallPoint::name));
    }
    recorder.lock().expect("the recorder is never poisoned").record_nemesis(f, value);
}

/// The recorded history (every client is done with the recorder).
fn events(recorder: SharedRecorder) -> Vec<Event> {
    Arc::try_unwrap(recorder)
        .map(|recorder| {
            recorder.into_inner().expect("the recorder is never poisoned").into_events()
        })
        .unwrap_or_else(|shared| {
            shared.lock().expect("the recorder is never poisoned").events().to_vec()
        })
}
