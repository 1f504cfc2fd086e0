//! One real test: its servers started, its faults drawn from one seeded
//! schedule and split among the fault executors, its clients driven
//! through the backend's recipe while the executors strike, and its
//! history checked.

use std::time::{Duration, Instant};

use lockcheck_checker::names::RESOURCE_SAFETY;
use lockcheck_checker::{analyze_events, Analysis, Event, EventType, Function, ViolationKind};
use lockcheck_workloads::{
    FaultKind, HistoryFile, Holders, RunOptions, SharedRecorder, StorageKind, UrlService, Workload,
    WorkloadOptions,
};

use crate::catalogue::{Drive, LockService, RealBackend, ETCD_MIN_TTL_S};
use crate::driver::DriveOptions;
use crate::exec::{self, PidSlot};
use crate::ledger::LedgerTable;
use crate::nemesis::{self, ServerAction, ServerFault, SharedServer};
use crate::netfault::{self, NetFault, Topology};
use crate::payments::PaymentsServices;
use crate::plan::{plan, shapes, Faults, Plan};
use crate::provision::Servers;
use crate::queues::{QueueConfig, RealQueue, DEFAULT_RABBITMQ_URL};
use crate::schedule::{self, FaultTargets, RealFault};
use crate::storage::Storage;
use crate::{failover, s3, ClientConfig, RealError};

/// One real test, run and checked.
#[derive(Debug)]
pub struct RealRun {
    pub events: Vec<Event>,
    pub analysis: Analysis,
    /// Wall time from the servers' start to the clients' end.
    pub wall_s: f64,
    /// The faults that were on.
    pub faults: Faults,
}

impl RealRun {
    /// Lock operations (acquire, release, renew) that completed.
    pub fn lock_ops(&self) -> usize {
        lock_ops(&self.events)
    }
}

/// Lock operations (acquire, release, renew) that completed in `events`.
pub(crate) fn lock_ops(events: &[Event]) -> usize {
    events
        .iter()
        .filter(|event| {
            event.event_type != EventType::Invoke
                && matches!(event.f, Function::Acquire | Function::Release | Function::Renew)
        })
        .count()
}

/// Why a real test did not come to a verdict.
#[derive(Debug)]
pub enum RealFailure {
    /// The arguments do not make a test .
    Usage(String),
    /// A server is missing or unreachable, or could not be set up.
    Server(RealError),
    /// A bug in lockcheck.
    Internal(String),
}

impl std::fmt::Display for RealFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RealFailure::Usage(message) => write!(f, "{message}"),
            RealFailure::Server(error) => write!(f, "{error}"),
            RealFailure::Internal(error) => write!(f, "internal error: {error}"),
        }
    }
}

/// Plans and runs one real test and checks its history; `chatty`: say on
/// stderr which servers were started.
pub fn execute(test: &RunOptions, chatty: bool) -> Result<RealRun, RealFailure> {
    let planned = plan(test).map_err(RealFailure::Usage)?;
    execute_recorded(&planned, chatty, None, &|_| {})
}

/// Runs a planned test ([`plan`]), writing each event to `history` as it
/// is recorded, and handing the run's recorder to `watch` (a progress
/// display) when the clients start. An interrupt ends it with
/// [`RealError::Interrupted`], the servers stopped.
pub fn execute_recorded(
    planned: &Plan,
    chatty: bool,
    history: Option<HistoryFile>,
    watch: &dyn Fn(&SharedRecorder),
) -> Result<RealRun, RealFailure> {
    let Plan { test, backend, faults } = planned;
    let (test, backend, faults, seed) = (test, *backend, *faults, test.seed);
    let workload = test.workload;
    let started = Instant::now();
    let servers = Servers::for_backend(test, backend, faults, chatty)
        .map_err(|error| RealFailure::Server(error.or_interrupted()))?;
    // etcd grants whole seconds, and raises short TTLs to its minimum (2 s
    // for Debian's 3.4 defaults): stalls must outlast that.
    let asked_ms = test.ttl_ms();
    let ttl_ms = backend.granted_ttl_ms(asked_ms);
    if ttl_ms != asked_ms && chatty {
        eprintln!(
            "{} leases are whole seconds, at least {ETCD_MIN_TTL_S}: the TTL is {ttl_ms} ms",
            backend.name()
        );
    }
    let topology = servers.topology(backend, test.clients);
    let struck = Struck {
        lock_servers: servers.lock.len(),
        resource_servers: servers.resources.len(),
        topology: &topology,
        ttl_ms,
    };
    let mut parts = schedule::split(planned_faults(test, backend, faults, struck, seed)?);
    if let Some(delay) = test.restart_delay {
        // A restart delay given is the down time itself: 0 restarts a
        // killed server at once, while its clients may still hold a lock.
        // The kill was drawn at least this long, so it still ends in time.
        for fault in parts.server.iter_mut().filter(|fault| fault.action == ServerAction::Kill) {
            fault.end = fault.start + delay;
        }
    }
    let options = DriveOptions {
        workload: WorkloadOptions {
            workload,
            locks: (0..test.locks).map(|lock| format!("lock-{lock}")).collect(),
            resources: (0..test.locks).map(|lock| format!("resource-{lock}")).collect(),
            ttl_ms,
            hold_ms: backend.hold_ms(
                ttl_ms,
                faults.hold_needed_ms(backend, ttl_ms),
                !faults.is_empty(),
            ),
            think_ms: (0, 40),
            send_fence: test.fencing && test.storage.takes_fence(),
            permits: backend.permits(),
            keepalive_ms: backend.keepalive_ms(ttl_ms),
            lock_delay_ms: backend.backend().lock_delay_ms(),
            protection: test.protection,
        },
        clients: test.clients,
        time_limit: test.time_limit,
        seed,
        stalls: std::mem::take(&mut parts.stalls),
    };
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|error| {
            RealFailure::Internal(format!("cannot start the async runtime: {error}"))
        })?;
    let (struck_servers, names) = servers.struck();
    let slots: Vec<PidSlot> = (0..test.clients).map(|_| PidSlot::default()).collect();
    let planned = Planned {
        kills: &parts.kills,
        slots: &slots,
        server: &parts.server,
        names: &names,
        servers: &struck_servers,
        net: &parts.net,
        topology: &topology,
        failovers: &parts.failovers,
    };
    let events = runtime
        .block_on(drive_backend(test, backend, &servers, &options, planned, history, watch))
        .map_err(|error| RealFailure::Server(error.or_interrupted()))?;
    let wall_s = started.elapsed().as_secs_f64();
    drop(servers);
    lockcheck_workloads::interrupt::hold_before("check");
    let mut analysis = analyze_events(&events, &test.checks()).map_err(|error| {
        RealFailure::Internal(format!("the driver recorded a malformed history: {error}"))
    })?;
    if let Some(finding) = moto_finding(test.storage, &analysis) {
        analysis.warnings.push(finding);
    }
    Ok(RealRun { events, analysis, wall_s, faults })
}

/// What a lost update under `s3-cas` says about the S3 server: a
/// conditional PUT must refuse a write the client had not read, so one
/// that let two through is the server's race (moto checks the ETag and
/// writes with no lock between, docs/storage.md), not the lock's failing.
/// The verdict stays invalid: this only names who lost the update.
fn moto_finding(storage: StorageKind, analysis: &Analysis) -> Option<String> {
    let lost = analysis
        .result_of(RESOURCE_SAFETY)?
        .violations
        .iter()
        .filter(|violation| violation.kind == ViolationKind::LostUpdate)
        .count();
    (storage == StorageKind::S3Cas && lost > 0).then(|| {
        format!(
            "finding about the S3 server, not the lock: moto's S3 server lost {lost} update(s) under --storage s3-cas, \
             letting two conditional PUTs (If-Match the same ETag) both succeed; it checks the ETag and writes with no \
             lock between (docs/storage.md)"
        )
    })
}

/// What a run's faults strike: the lock servers lockcheck manages, the
/// network, and leases of `ttl_ms`.
#[derive(Debug, Clone, Copy)]
struct Struck<'a> {
    lock_servers: usize,
    /// A payments run's PostgreSQL, struck after the lock servers.
    resource_servers: usize,
    topology: &'a Topology,
    ttl_ms: u64,
}

/// Every fault of the run, from the one schedule its seed draws: the
/// faults on, striking what `struck` says.
fn planned_faults(
    test: &RunOptions,
    backend: RealBackend,
    faults: Faults,
    struck: Struck<'_>,
    seed: u64,
) -> Result<Vec<RealFault>, RealFailure> {
    let Struck { lock_servers, resource_servers, topology, ttl_ms } = struck;
    let kinds: Vec<FaultKind> =
        FaultKind::ALL.into_iter().filter(|&kind| faults.has(kind)).collect();
    let shapes = if faults.has(FaultKind::Partition) {
        shapes(test, backend).map_err(RealFailure::Usage)?
    } else {
        Vec::new()
    };
    let targets = FaultTargets {
        lock_servers,
        resource_servers,
        // A payments run whose workers take no lock: its server faults
        // strike what it uses.
        locks_unused: !test.protection.locks(),
        min_down: test.restart_delay.unwrap_or(Duration::from_millis(backend.min_down_ms(ttl_ms))),
        kills_a_majority: backend.kills_a_majority(),
        members: topology.members,
        shapes,
        pause_at: test.pause_at.clone(),
        turns: match backend.backend().is_program() {
            true => schedule::PROGRAM_TURNS,
            false => &[],
        },
        ..FaultTargets::clients(test.clients, ttl_ms)
    };
    Ok(schedule::schedule(&kinds, &targets, test.time_limit, seed))
}

/// The faults a run's nemeses carry out.
#[derive(Debug, Clone, Copy)]
struct Planned<'a> {
    server: &'a [ServerFault],
    /// The servers the server faults strike (the lock servers, then a
    /// payments run's PostgreSQL), and their names in the history.
    servers: &'a [SharedServer],
    names: &'a [String],
    net: &'a [NetFault],
    topology: &'a Topology,
    failovers: &'a [failover::Failover],
    /// The exec backend's program kills, and where each client's program is.
    kills: &'a [exec::ProgramKill],
    slots: &'a [PidSlot],
}

#[allow(clippy::too_many_arguments)]
async fn drive_backend(
    test: &RunOptions,
    backend: RealBackend,
    servers: &Servers,
    options: &DriveOptions,
    planned: Planned<'_>,
    history: Option<HistoryFile>,
    watch: &dyn Fn(&SharedRecorder),
) -> Result<Vec<Event>, RealError> {
    let sessions = match backend.service() {
        LockService::Mariadb => servers.urls.url(UrlService::Mysql).map(|url| (url, true)),
        LockService::Postgres => Some((servers.postgres(), false)),
        _ => None,
    };
    let proxy = servers.proxy.as_ref();
    let pair = servers.pair.as_ref();
    let nemesis = |recorder: SharedRecorder, start, holders: Holders| async move {
        watch(&recorder);
        let holders = &holders;
        let net = async {
            if let Some(proxy) = proxy {
                netfault::run(planned.net, proxy, planned.topology, &recorder, start, holders)
                    .await;
            }
        };
        let failovers = async {
            match pair {
                Some(pair) => failover::run(pair, planned.failovers, &recorder, start).await,
                None => Ok(()),
            }
        };
        let servers = nemesis::run(
            planned.server,
            planned.servers,
            planned.names,
            sessions,
            &recorder,
            start,
            holders,
        );
        let kills = exec::kill_programs(planned.kills, planned.slots, &recorder, start);
        let (done, (), failed_over, ()) = tokio::join!(servers, net, failovers, kills);
        done.and(failed_over)
    };
    let workload = &options.workload;
    // Every operation of a client ends within this, its queue's too.
    let deadline = Duration::from_millis((workload.ttl_ms / 4).clamp(20, 2000));
    let payments = prepare_payments(test, servers, deadline).await?;
    match &servers.s3 {
        Some(bucket) => {
            s3::prepare(&bucket.endpoint, s3::BUCKET, workload.resources_in_use()).await?
        }
        None => Storage::prepare(servers.postgres(), workload.resources_in_use()).await?,
    }
    let config = |logical: u32| ClientConfig {
        name: format!("client-{logical}"),
        deadline,
        storage_url: servers.routes[logical as usize].1.clone(),
        fenced_storage: test.fencing,
    };
    let exec_env = |logical: u32| servers.exec_env(logical);
    let lock_urls = servers.lock_urls(backend);
    let lock_nodes = servers.lock_nodes(backend);
    let driven = backend
        .drive(Drive {
            options,
            history,
            nemesis: Box::new(move |recorder, start, holders| {
                Box::pin(nemesis(recorder, start, holders))
            }),
            config: &config,
            routes: &servers.routes,
            lock_urls: &lock_urls,
            pair,
            fencing: test.fencing,
            program: &test.exec,
            exec_env: &exec_env,
            slots: planned.slots,
            proxy,
            lock_nodes: &lock_nodes,
            payments: payments.as_ref(),
        })
        .await;
    if let Some(queue) = payments.and_then(|payments| payments.queue) {
        // What could be left behind is only this run's vhost or table.
        let _ = queue.remove().await;
    }
    driven
}

/// The table charges land in (a fenced, unique, conditional or append
/// protection's), in the run's PostgreSQL.
const PAYMENTS_TABLE: &str = "lockcheck_payments";

/// Sets up the payments services a run's workload uses: the queue and the
/// provider (started with the servers) for the payments workload, the
/// payments table when its protection records charges in one; none for
/// other workloads.
async fn prepare_payments(
    test: &RunOptions,
    servers: &Servers,
    deadline: Duration,
) -> Result<Option<PaymentsServices>, RealError> {
    if !test.protection.needs_payments(test.workload) {
        return Ok(None);
    }
    let postgres = servers.postgres().to_string();
    let ledger = match test.protection.ledger() {
        Some(mode) => {
            let table =
                LedgerTable { url: postgres.clone(), table: PAYMENTS_TABLE.to_string(), mode };
            table.prepare().await?;
            Some(table)
        }
        None => None,
    };
    let queue = match test.workload {
        Workload::Payments => {
            let config = QueueConfig {
                postgres_url: postgres,
                rabbitmq_url: servers
                    .urls
                    .url(UrlService::Rabbitmq)
                    .unwrap_or(DEFAULT_RABBITMQ_URL)
                    .to_string(),
                name: format!("lockcheck-orders-{}-{}", std::process::id(), test.seed),
                deadline,
            };
            let queue = RealQueue::prepare(test.queue, config).await?;
            if servers.chatty {
                for note in queue.notes() {
                    eprintln!("{note}");
                }
            }
            Some(queue)
        }
        _ => None,
    };
    let provider = servers.provider.as_ref().map(|provider| provider.url());
    Ok(Some(PaymentsServices { queue, provider, ledger }))
}
