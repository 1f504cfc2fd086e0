//! The real-server truth table (docs/truth-table.md): each cell a backend
//! under faults, as data, with the verdict it must get, and how a cell is
//! run and judged ([`run_cell`]).

use std::collections::BTreeMap;
use std::time::Duration;

use lockcheck_checker::names::DEADLOCK;
use lockcheck_checker::names::EXACTLY_ONCE as ONCE;
use lockcheck_checker::names::FENCE_MONOTONICITY as FENCE;
use lockcheck_checker::names::IDEMPOTENCY;
use lockcheck_checker::names::LINEARIZABILITY as LINEAR;
use lockcheck_checker::names::MUTUAL_EXCLUSION as MUTEX;
use lockcheck_checker::names::RESOURCE_SAFETY as RESOURCE;
use lockcheck_checker::names::RE_ELECTION;
use lockcheck_checker::{Event, Expect, Function, Judgement, Process};
use lockcheck_workloads::payments::Protection;
use lockcheck_workloads::provider::Variant;
use lockcheck_workloads::queue::QueueKind;
use lockcheck_workloads::{Backend, Replay, RunOptions, SharedRecorder, Workload, World};

use crate::catalogue::RealBackend;
use crate::netfault::Shape;
use crate::plan::plan;
use crate::run::{execute_recorded, RealFailure, RealRun};
use lockcheck_workloads::{Cell, FaultKind, Pooler, StallPoint, DEFAULT_LINEARIZABILITY_TIMEOUT};

/// `backend` under `faults` with a lease of `ttl_ms`: a cell still to be
/// given its time, expectation and note by [`cell`].
fn on(backend: Backend, faults: &'static [FaultKind], ttl_ms: u64) -> RealCell {
    let backend =
        RealBackend::new(backend).expect("a cell of the real matrix runs against real servers");
    Cell::new(backend, faults, SAFE, "").with_ttl_ms(ttl_ms)
}

/// `2s`, `500ms`: as `--ttl` takes it.
fn duration(duration: Duration) -> String {
    let ms = duration.as_millis();
    if ms.is_multiple_of(1000) && ms > 0 {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// One cell of the real table.
pub type RealCell = Cell<RealBackend>;

const SAFE: Expect = Expect::Safe;

const fn violated(any_of: &'static [&'static str]) -> Expect {
    Expect::Violated { any_of, stays_valid: &[] }
}

/// Violated, while the fenced storage rejects every stale write.
const fn fenced(any_of: &'static [&'static str]) -> Expect {
    Expect::Violated { any_of, stays_valid: &[RESOURCE] }
}

fn cell(setup: RealCell, seconds: u64, expect: Expect, note: &'static str) -> RealCell {
    Cell { time_limit: Some(Duration::from_secs(seconds)), expect, note, ..setup }
}

/// The `lockcheck check` arguments of a real cell, without seed and time
/// limit: `--backend redis --nemesis pause --ttl 500ms --no-fencing`.
pub fn check_args(cell: &RealCell) -> String {
    let faults: Vec<&str> = cell.faults.iter().map(|fault| fault.name()).collect();
    let faults = if faults.is_empty() { "none".to_string() } else { faults.join(",") };
    let mut args = format!("--backend {} --nemesis {faults}", cell.backend.name());
    if cell.workload != defaults(cell).workload {
        args.push_str(&format!(" --workload {}", cell.workload.name()));
    }
    if cell.protection != Protection::default() {
        args.push_str(&format!(" --protection {}", cell.protection.name()));
    }
    if cell.provider_variant != Variant::default() {
        args.push_str(&format!(" --provider-variant {}", cell.provider_variant.name()));
    }
    if cell.queue != QueueKind::default() {
        args.push_str(&format!(" --queue {}", cell.queue.name()));
    }
    if cell.shapes != Shape::ALL {
        let shapes: Vec<&str> = cell.shapes.iter().map(|shape| shape.name()).collect();
        args.push_str(&format!(" --partition-shapes {}", shapes.join(",")));
    }
    if cell.faults.contains(&FaultKind::Pause) && cell.pause_at != StallPoint::ALL {
        args.push_str(&format!(" --pause-at {}", StallPoint::list(cell.pause_at)));
    }
    args.push_str(&format!(" --ttl {}", duration(cell.ttl.unwrap_or(defaults(cell).ttl))));
    if let Some(delay) = cell.restart_delay {
        args.push_str(&format!(" --restart-delay {}", duration(delay)));
    }
    if !cell.fencing {
        args.push_str(" --no-fencing");
    }
    if cell.persistent {
        args.push_str(" --persistent");
    }
    if let Some(pooler) = cell.pooler {
        args.push_str(&format!(" --pooler {}", pooler.name()));
    }
    args
}

/// `lockcheck check --backend <cell's backend>` with no other option.
fn defaults(cell: &RealCell) -> RunOptions {
    RunOptions::new(World::Real, cell.backend.backend())
}

/// The options of a real cell's runs, from `seed` on.
pub fn cell_options(
    cell: &RealCell,
    time_limit: Duration,
    linearizability_timeout: Duration,
    seed: u64,
) -> RunOptions {
    let defaults = defaults(cell);
    RunOptions {
        workload: cell.workload,
        faults: cell.faults.to_vec(),
        partition_shapes: cell.shapes.to_vec(),
        ttl: cell.ttl.unwrap_or(defaults.ttl),
        time_limit,
        restart_delay: cell.restart_delay,
        fencing: cell.fencing,
        persistent: cell.persistent,
        linearizability_timeout,
        pause_at: cell.pause_at.to_vec(),
        protection: cell.protection,
        provider_variant: cell.provider_variant,
        queue: cell.queue,
        pooler: cell.pooler,
        seed,
        ..defaults
    }
}

/// Runs a violated cell may take when neither the matrix nor the cell
/// names a number.
pub const DEFAULT_VIOLATED_WITHIN: u64 = 3;

/// Runs a safe cell must stay clean over when the matrix names no number:
/// a real run takes seconds of wall time, a safe cell takes all its runs.
pub const DEFAULT_SAFE_RUNS: u64 = 1;

/// Wall time per run of a cell that names none.
pub const DEFAULT_TIME_LIMIT: Duration = Duration::from_secs(8);

/// How hard the real matrix looks: what `lockcheck matrix` was asked. What
/// it leaves out is the cell's own number, else the default.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Effort {
    /// A violated cell must show within this many runs.
    pub violated_within: Option<u64>,
    /// A safe cell must stay clean over this many.
    pub safe_runs: Option<u64>,
    /// Wall time per run.
    pub time_limit: Option<Duration>,
    /// How long a run's linearizability search may take [default: check's].
    pub linearizability_timeout: Option<Duration>,
    /// The seed of a cell's first run.
    pub first_seed: u64,
}

impl Effort {
    /// The runs `cell` may take: a violated cell's own number yields to the
    /// matrix's, a safe cell has none.
    pub fn runs(&self, cell: &RealCell) -> u64 {
        match cell.expect.seeks_violation() {
            true => self.violated_within.or(cell.runs).unwrap_or(DEFAULT_VIOLATED_WITHIN),
            false => self.safe_runs.unwrap_or(DEFAULT_SAFE_RUNS),
        }
        .max(1)
    }

    /// The wall time of each of `cell`'s runs.
    pub fn time_limit(&self, cell: &RealCell) -> Duration {
        self.time_limit.or(cell.time_limit).unwrap_or(DEFAULT_TIME_LIMIT)
    }
}

/// One run of a cell, to be started by a [`run_cell`] caller's progress
/// callback; it hands the run's recorder to the function it is given once
/// the clients start.
pub type Run<'a> = &'a mut dyn FnMut(&dyn Fn(&SharedRecorder)) -> Result<RealRun, RealFailure>;

/// How a real cell came out.
#[derive(Debug)]
pub struct CellResult {
    pub matches: bool,
    /// The runs it took.
    pub runs: u64,
    /// One line for the table.
    pub found: String,
    /// The run that decided the cell (or the first): the `lockcheck check`
    /// command line that runs it again.
    pub replay: Replay,
    /// The run that decided the cell, when one did: what shows why, since
    /// a real run on a loaded machine may not come out the same way twice.
    pub decided: Option<RealRun>,
    /// A violated cell's runs that showed nothing, before the one that
    /// did (all of them, when none did): what a person needs to see why a
    /// run missed.
    pub missed: Vec<Missed>,
}

/// A run of a violated cell that showed none of the violations sought.
#[derive(Debug)]
pub struct Missed {
    /// The run's `lockcheck check` command line.
    pub replay: Replay,
    /// What the run did and found, in one line ([`summary`]).
    pub summary: String,
    /// Its history.
    pub events: Vec<Event>,
}

/// What a run did and found, in one line: its faults, counted by kind
/// (a pause by where it struck, or `not taken`), its completed lock
/// operations and each checker's verdict.
pub fn summary(run: &RealRun) -> String {
    // Each fault once, at its end, where a pause says where it struck.
    let mut faults: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    for event in &run.events {
        if event.process != Process::Nemesis || event.f != Function::Stop {
            continue;
        }
        let value: serde_json::Value = event
            .value
            .as_deref()
            .and_then(|raw| serde_json::from_str(raw.get()).ok())
            .unwrap_or_default();
        let fault = value["fault"].as_str().unwrap_or("fault").to_string();
        let struck = match &value["struck"] {
            serde_json::Value::String(point) => point.clone(),
            serde_json::Value::Null if value.get("struck").is_some() => "not taken".to_string(),
            _ => String::new(),
        };
        *faults.entry(fault).or_default().entry(struck).or_default() += 1;
    }
    let faults: Vec<String> = faults
        .iter()
        .map(|(fault, ways)| {
            let count: usize = ways.values().sum();
            let ways: Vec<String> = ways
                .iter()
                .filter(|(way, _)| !way.is_empty())
                .map(|(way, n)| format!("{way} x{n}"))
                .collect();
            match ways.is_empty() {
                true => format!("{fault} x{count}"),
                false => format!("{fault} x{count} ({})", ways.join(", ")),
            }
        })
        .collect();
    let verdicts: Vec<String> = run
        .analysis
        .results
        .iter()
        .map(|result| {
            let verdict = result.verdict.map_or("n/a", |verdict| verdict.as_str());
            format!("{} {verdict}", result.checker)
        })
        .collect();
    format!(
        "faults: {}; {} lock operations; {}",
        if faults.is_empty() { "none".to_string() } else { faults.join(", ") },
        run.lock_ops(),
        verdicts.join(", ")
    )
}

/// Runs `cell` as `effort` asks until a run decides it. Each run goes
/// through `progress`, with what it is called and its time limit, which
/// starts it and returns what it returned (a progress display shows it
/// meanwhile; without one, `&|_, _, run| run(&|_| {})`).
pub fn run_cell(
    cell: &RealCell,
    effort: &Effort,
    progress: &dyn Fn(&str, Duration, Run<'_>) -> Result<RealRun, RealFailure>,
) -> Result<CellResult, RealFailure> {
    let runs = effort.runs(cell);
    let time_limit = effort.time_limit(cell);
    let timeout = effort.linearizability_timeout.unwrap_or(DEFAULT_LINEARIZABILITY_TIMEOUT);
    let first = effort.first_seed;
    let planned =
        plan(&cell_options(cell, time_limit, timeout, first)).map_err(RealFailure::Usage)?;
    let replay = |seed: u64| planned.seeded(seed).test.replay();
    let args = check_args(cell);
    let what = args.strip_prefix("--backend ").unwrap_or(&args);
    // The runs of a violated cell that decided nothing: they showed nothing.
    let mut missed = Vec::new();
    let outcome = cell.expect.judge_runs_from(
        first,
        runs,
        // A run is named by its seed; what a cell took is counted in runs.
        ("seed", "run"),
        |seed| {
            let label = format!("{what}, run {}/{runs}", seed - first + 1);
            let run = progress(&label, time_limit, &mut |recording| {
                execute_recorded(&planned.seeded(seed), false, None, recording)
            })?;
            let undecided = matches!(cell.expect.judge(&run.analysis, ""), Judgement::Undecided);
            if cell.expect.seeks_violation() && undecided {
                missed.push(Missed {
                    replay: replay(seed),
                    summary: summary(&run),
                    events: run.events.clone(),
                });
            }
            Ok(run)
        },
        |run| &run.analysis,
    )?;
    let seed = outcome.decided.as_ref().map_or(first, |(seed, _)| *seed);
    Ok(CellResult {
        matches: outcome.matches,
        runs: outcome.runs,
        found: outcome.found,
        replay: replay(seed),
        decided: outcome.decided.map(|(_, run)| run),
        missed,
    })
}

/// The real cells, in docs/truth-table.md's order.
pub fn cells() -> Vec<RealCell> {
    use lockcheck_workloads::Backend as B;
    use FaultKind as F;
    vec![
        cell(on(B::Redis, &[], 500), 5, SAFE, "no fault"),
        cell(
            on(B::Redis, &[F::Pause], 500),
            8,
            fenced(&[MUTEX]),
            "holder stall > TTL: two holders; the fenced storage rejects the stale write",
        ),
        cell(
            on(B::Redis, &[F::Pause], 500)
                .without_fencing()
                .with_pause_at(&[StallPoint::AfterGrant]),
            8,
            violated(&[RESOURCE]),
            "holder stall > TTL between its grant and its write, without fencing: the stale write lands",
        ),
        cell(
            on(B::Redis, &[F::Kill], 500),
            8,
            violated(&[MUTEX, FENCE, LINEAR]),
            "restart without persistence: the lock and the fence counter are forgotten",
        ),
        cell(
            on(B::Redis, &[F::Kill], 500).with_persistence(),
            8,
            SAFE,
            "restart with an fsynced append-only file: nothing is forgotten",
        ),
        cell(
            on(B::Redis, &[F::Failover], 500),
            8,
            violated(&[MUTEX, FENCE, LINEAR]),
            "failover to an async replica that never got the grant: two holders",
        ),
        // Half the clock faults are drifts: a drift runs 3 to 10 times fast
        // and clock runs hold up to two thirds of a TTL, so that a drift
        // can expire a fresh lease before its holder's work is done.
        cell(
            on(B::Redis, &[F::Clock], 500),
            8,
            fenced(&[MUTEX]),
            "a forward jump of the server's clock expires locks early",
        ),
        cell(
            on(B::Redis, &[F::SlowNet], 500),
            8,
            SAFE,
            "the lock server's links are slow for every client: replies after the deadline give the lock up, and a late renewal or release frees nothing early",
        ),
        cell(
            on(B::RedisDelRelease, &[F::Pause], 500),
            8,
            violated(&[MUTEX]),
            "release by DEL deletes the next holder's lock",
        ),
        cell(on(B::Redlock, &[], 500), 5, SAFE, "no fault"),
        cell(
            on(B::Redlock, &[F::Pause], 500),
            8,
            violated(&[MUTEX]),
            "holder stall > TTL, no fencing token",
        ),
        cell(
            on(B::Redlock, &[F::Kill], 2000).with_restart_delay_ms(0),
            10,
            violated(&[MUTEX]),
            "instances restart at once without persistence: a majority is free again",
        ),
        cell(
            on(B::Redlock, &[F::Kill], 500),
            10,
            SAFE,
            "delayed restart: an instance stays down longer than any lease it granted",
        ),
        cell(on(B::Etcd, &[], 2000), 6, SAFE, "no fault"),
        // A stall of three to six seconds with its gap takes about six: 24 s
        // hold three. One stall in six is drawn between the lease's grant
        // and its lock, a window the recipe survives, and a stall whose
        // point comes at the end of a long job may be over before it.
        RealCell {
            runs: Some(5),
            ..cell(
                on(B::Etcd, &[F::Pause], 2000),
                24,
                fenced(&[MUTEX]),
                "holder stall > lease TTL: fenced storage rejects the stale write",
            )
        },
        // A cut shows it when it finds a holder whose work outlasts its
        // lease (16 cuts of 17 over four 40 s runs; 10 of 17 when a cut
        // waited for three quarters of the longest hold) and the next
        // holder is granted between etcd's revocation of the lease (within
        // half a second of its expiry) and the holder's renewal giving up (a
        // third of a second after its session's deadline): 10 of the 17
        // (6 of 17 before). At that rate a 40 s run, four cuts or so,
        // misses about once in 40; 60 s hold six or seven, once in 300.
        // Runs needed over 14 matrices of 20 s under load, before the
        // faults were aimed: 1 to 5, once 8; 12 is the budget still.
        RealCell {
            runs: Some(12),
            ..cell(
                on(B::Etcd, &[F::Partition], 2000).with_shapes(&[Shape::Client]),
                60,
                fenced(&[MUTEX]),
                "holder cut off from the cluster: its session outlives its lease",
            )
        },
        // The promise of a partition among members is about grants: the
        // lock stays linearizable, its tokens increase, the storage stays
        // safe. A holder whose own member is cut off from the leader is cut
        // off from the cluster, as in the cell above: its keepalives fail
        // and it may believe past its lease (seen twice in some 20 runs under
        // load; the kept history: a 23 ms overlap), so mutual exclusion is
        // not part of the promise.
        cell(
            on(B::Etcd, &[F::Partition], 2000).with_shapes(&[
                Shape::IsolateOne,
                Shape::Halves,
                Shape::Ring,
            ]),
            20,
            Expect::Keeps { valid: &[LINEAR, FENCE, RESOURCE] },
            "partitions among five members, a majority ring too: the minority side never grants",
        ),
        // A holder pinned to its own member, that member cut off (aimed at
        // a holder's): its keepalives go unanswered once the member stops
        // leading, and it asks whether its key is still there. A
        // linearizable read cannot be answered in the minority; a
        // serializable one is answered from the past. Mutual exclusion is
        // promised by neither: a member that led answers keepalives until
        // it steps down, while the majority's new leader restarts the lease.
        cell(
            on(B::EtcdLinearizableCheck, &[F::Partition], 2000).with_shapes(&[Shape::IsolateOne]),
            20,
            Expect::Keeps { valid: &[LINEAR, FENCE, RESOURCE] },
            "a holder's member cut off: its linearizable read of its key goes unanswered in the minority",
        ),
        cell(
            on(B::EtcdSerializableCheck, &[F::Partition], 2000).with_shapes(&[Shape::IsolateOne]),
            20,
            Expect::Violated { any_of: &[LINEAR], stays_valid: &[RESOURCE] },
            "broken: a holder's member cut off answers its serializable read from the past: the key is there, after the majority revoked its lease",
        ),
        // etcd's Mutex.Lock: a waiter's key stays in line, watching the key
        // just before its own (one wake-up per release).
        cell(on(B::EtcdWaiting, &[], 2000), 6, SAFE, "no fault: waiters in line, each woken by the key before its own"),
        cell(on(B::ZooKeeper, &[], 2000), 6, SAFE, "no fault"),
        // A stall holds the client's links too, so the library's heartbeats
        // stop with it and the session expires after its timeout; the
        // next in line is granted, and the stalled holder acts on.
        RealCell {
            runs: Some(5),
            ..cell(
                on(B::ZooKeeper, &[F::Pause], 2000),
                20,
                fenced(&[MUTEX]),
                "holder stall > session timeout: the czxid fences the stale write",
            )
        },
        // A holder cut off: the library is disconnected after two fifths
        // of the session timeout and the holder's next check (every third
        // of it) sees SUSPENDED: it stops before the ensemble expires its
        // session. The server's wall clock moved besides: sessions expire by
        // its monotonic clock. One cell for both, to keep CI in its time.
        cell(
            on(B::ZooKeeper, &[F::Clock, F::Partition], 2000).with_shapes(&[Shape::Client]),
            20,
            SAFE,
            "holder cut off: SUSPENDED stops it before its session expires; the server's clock moved: sessions expire by its monotonic clock",
        ),
        // An ensemble of three: members stopped, killed (up to two at once)
        // and restarted with their data, or split from the others. Nothing is
        // granted without a quorum: the grants stay fenced. Mutual exclusion
        // is not promised: a follower cut off from the leader goes on
        // answering its clients' heartbeats until it gives the leader up
        // (syncLimit ticks, 2 s here), while the leader, hearing nothing of
        // their sessions, expires them after the session timeout (2 s): a
        // holder behind that follower may act past its session (seen once
        // in CI at seed 0; valid on the runs before).
        cell(
            on(B::ZooKeeper, &[F::Sigstop, F::Kill, F::Partition], 2000)
                .with_shapes(&[Shape::IsolateOne, Shape::Halves]),
            20,
            Expect::Keeps { valid: &[FENCE, RESOURCE] },
            "members stopped, killed and restarted, or split off: the minority side never grants",
        ),
        RealCell {
            runs: Some(5),
            ..cell(
                on(B::ZooKeeperActsSuspended, &[F::Partition], 2000).with_shapes(&[Shape::Client]),
                20,
                fenced(&[MUTEX]),
                "broken: a holder cut off acts through SUSPENDED past its session's expiry",
            )
        },
        cell(on(B::PostgresAdvisory, &[], 500), 5, SAFE, "no fault"),
        // The violation needs another client to reconnect and be granted
        // within what is left of the victim's hold; on a loaded machine a
        // reconnection is slow, and 3 runs once showed none.
        RealCell {
            runs: Some(6),
            ..cell(
                on(B::PostgresAdvisory, &[F::ConnKill], 500),
                8,
                violated(&[MUTEX]),
                "the session is killed: the server frees the lock, the client still believes",
            )
        },
        // Through PgBouncer, which lockcheck starts in front of the same
        // server: with no fault at all, transaction pooling hands a session
        // lock's server connection to other clients' transactions.
        cell(
            on(B::PostgresAdvisory, &[], 500).through(Pooler::Transaction),
            5,
            violated(&[MUTEX]),
            "through PgBouncer in transaction pooling, no fault: a session lock stays with a server connection that other clients' transactions get",
        ),
        cell(
            on(B::PostgresAdvisory, &[], 500).through(Pooler::Session),
            5,
            SAFE,
            "through PgBouncer in session pooling: a client keeps its server connection, and its locks",
        ),
        cell(
            on(B::PostgresAdvisoryXact, &[], 500).through(Pooler::Transaction),
            5,
            SAFE,
            "through PgBouncer in transaction pooling: a transaction's lock stays with its transaction",
        ),
        cell(on(B::PostgresLease, &[], 500), 5, SAFE, "no fault"),
        cell(
            on(B::PostgresLease, &[F::Pause], 500),
            8,
            fenced(&[MUTEX]),
            "holder stall > TTL: fenced storage rejects the stale write",
        ),
        cell(
            on(B::PostgresLease, &[F::ConnKill], 500),
            8,
            SAFE,
            "a lease row outlives its session",
        ),
        cell(on(B::MysqlGetLock, &[], 500), 5, SAFE, "no fault"),
        // The violation needs another client to reconnect and be granted
        // within what is left of the victim's hold; on a loaded machine a
        // reconnection is slow, and 3 runs once showed none.
        RealCell {
            runs: Some(6),
            ..cell(
                on(B::MysqlGetLock, &[F::ConnKill], 500),
                8,
                violated(&[MUTEX]),
                "the session is killed: GET_LOCK is freed while the client believes",
            )
        },
        cell(
            on(B::MysqlLease, &[F::Pause], 500),
            8,
            fenced(&[MUTEX]),
            "holder stall > TTL: fenced storage rejects the stale write",
        ),
        // The double charge against real services: workers take orders
        // from a PostgreSQL SKIP LOCKED queue (or RabbitMQ) whose
        // visibility timeout is the lock's TTL, and charge lockcheck's own
        // HTTP provider or a payments table (docs/payments.md).
        paying(Protection::Lock, violated(&[ONCE]), "a lock per order: a worker stalled past its lease and the job's visibility charges twice"),
        paying(Protection::Lock, violated(&[ONCE]), "the same, the jobs from RabbitMQ: the stalled worker's channel closes, the job is redelivered and charged again")
            .with_queue(QueueKind::Rabbitmq),
        paying(Protection::Fenced, Expect::Keeps { valid: &[ONCE] }, "the lock and a fenced payments table: the stale worker's charge is refused"),
        paying(Protection::IdempotencyKey, SAFE, "the provider dedupes by an idempotency key: one charge per order"),
        paying(Protection::Unique, SAFE, "UNIQUE (order_id): the second insert fails with 23505, counted as done"),
        paying(Protection::Unique, SAFE, "the same, the jobs from RabbitMQ")
            .with_queue(QueueKind::Rabbitmq),
        paying(Protection::Conditional, SAFE, "a conditional pending to paid: the second finds the order paid"),
        // When no lock is needed (docs/payments.md): every fault that
        // reaches the payments services against real servers, on the
        // workers and on the PostgreSQL that holds the queue, the table and
        // the provider's keys. A TTL of a second: the orders are due within
        // eight visibility timeouts, and a killed PostgreSQL takes a while
        // to recover. 20 s: seed 0 stops and kills it once each.
        cell(
            on(B::Redis, &[F::Pause, F::Sigstop, F::Kill], 1000),
            20,
            SAFE,
            "no lock: the SKIP LOCKED queue and a unique insert while workers stall and their PostgreSQL is stopped and killed",
        )
        .with_payments(Protection::Unique),
        paying(Protection::None, violated(&[ONCE]), "the queue alone: a redelivered job is charged again"),
        paying(Protection::IdempotencyKey, violated(&[ONCE, IDEMPOTENCY]), "a provider that ignores keys: charged again")
            .with_provider(Variant::NoDedupe),
        // These two need a redelivered job whose amount was recomputed, or
        // a retry that meets its first request in flight: a pause or two
        // in a run shows it about every other run.
        RealCell {
            runs: Some(6),
            ..paying(Protection::IdempotencyKey, violated(&[IDEMPOTENCY]), "a provider that replays the first charge for another body")
                .with_provider(Variant::ReplayAnyBody)
        },
        RealCell {
            runs: Some(6),
            ..paying(Protection::IdempotencyKey, violated(&[ONCE, IDEMPOTENCY]), "a provider that checks, then inserts: two requests at once both charge")
                .with_provider(Variant::CheckThenInsert)
        },
        // Two locks per client (docs/guide.md#lock-ordering). A TTL of 6 s
        // makes each wait 2 s, past PostgreSQL's deadlock_timeout (1 s),
        // after which its detector ends one wait of a cycle; MariaDB's
        // finds it as the cycle closes.
        RealCell {
            workload: Workload::LockOrder,
            ..cell(on(B::PostgresAdvisory, &[], 6000), 10, SAFE, "lock ordering, one fixed order: no deadlock")
        },
        RealCell {
            workload: Workload::LockOrderOpposite,
            ..cell(on(B::PostgresAdvisory, &[], 6000), 10, violated(&[DEADLOCK]), "lock ordering, opposite orders: a cycle of waits, which PostgreSQL's detector ends (40P01)")
        },
        RealCell {
            workload: Workload::LockOrder,
            ..cell(on(B::MysqlGetLock, &[], 6000), 10, SAFE, "lock ordering, one fixed order: no deadlock")
        },
        RealCell {
            workload: Workload::LockOrderOpposite,
            ..cell(on(B::MysqlGetLock, &[], 6000), 10, violated(&[DEADLOCK]), "lock ordering, opposite orders: a cycle of waits, which MariaDB refuses as it closes (1213)")
        },
        // Leader election with renewals: every client a candidate, the
        // leader working under its term, stalled mid-tenure by the pause.
        RealCell {
            workload: Workload::Election,
            ..cell(
                on(B::EtcdElection, &[F::Pause], 2000),
                24,
                Expect::Keeps { valid: &[FENCE, RESOURCE, RE_ELECTION] },
                "election on etcd's Campaign, a leader stalled past its lease: the next is elected within the bound; the leader key's revision fences the stalled one's work",
            )
        },
        RealCell {
            workload: Workload::Election,
            ..cell(
                on(B::Redis, &[F::Pause], 500),
                8,
                Expect::Violated { any_of: &[MUTEX], stays_valid: &[RESOURCE, RE_ELECTION] },
                "election, a leader stalled past its lease still believes it leads; fenced storage rejects its work; re-elected within the bound",
            )
        },
        RealCell {
            workload: Workload::Election,
            ..cell(
                on(B::PostgresLease, &[F::Pause], 500),
                8,
                Expect::Violated { any_of: &[MUTEX], stays_valid: &[RESOURCE, RE_ELECTION] },
                "election on a PostgreSQL lease table, a leader stalled past its lease: two believe they lead; the fence column's term rejects the stale work",
            )
        },
        RealCell {
            workload: Workload::Cron,
            protection: Protection::None,
            ..cell(on(B::Redis, &[], 500), 5, violated(&[ONCE]), "cron on every replica with no lock: each replica runs the job")
        },
        RealCell {
            workload: Workload::Cron,
            protection: Protection::Unique,
            ..cell(on(B::Redis, &[], 500), 5, SAFE, "cron with no lock and UNIQUE (job, day) in PostgreSQL: one email each")
        },
    ]
}

/// A payments cell against a real Redis, its workers paused.
fn paying(protection: Protection, expect: Expect, note: &'static str) -> RealCell {
    cell(on(lockcheck_workloads::Backend::Redis, &[FaultKind::Pause], 500), 6, expect, note)
        .with_payments(protection)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use lockcheck_checker::CheckOptions;

    use super::cells;
    use crate::plan::plan;

    #[test]
    fn every_cell_is_a_test_plan_accepts() {
        for cell in cells() {
            let options =
                super::cell_options(&cell, Duration::from_secs(8), Duration::from_secs(10), 0);
            if let Err(why) = plan(&options) {
                panic!("{}: {why}", super::check_args(&cell));
            }
        }
    }

    #[test]
    fn a_missed_run_says_its_faults_where_each_pause_struck_and_the_verdicts() {
        use lockcheck_checker::{analyze_events, Event};
        let lines = [
            r#"{"index":0,"time":0,"process":0,"type":"invoke","f":"acquire","key":"l"}"#,
            r#"{"index":1,"time":1,"process":0,"type":"ok","f":"acquire","key":"l"}"#,
            r#"{"index":2,"time":2,"process":"nemesis","type":"info","f":"start","value":{"fault":"pause","struck":null}}"#,
            r#"{"index":3,"time":3,"process":"nemesis","type":"info","f":"stop","value":{"fault":"pause","struck":"in-flight"}}"#,
            r#"{"index":4,"time":4,"process":"nemesis","type":"info","f":"stop","value":{"fault":"pause","struck":null}}"#,
            r#"{"index":5,"time":5,"process":"nemesis","type":"info","f":"stop","value":{"fault":"pause","struck":"in-flight"}}"#,
            r#"{"index":6,"time":6,"process":"nemesis","type":"info","f":"stop","value":{"fault":"clock"}}"#,
            r#"{"index":7,"time":7,"process":0,"type":"invoke","f":"release","key":"l"}"#,
            r#"{"index":8,"time":8,"process":0,"type":"ok","f":"release","key":"l"}"#,
        ];
        let events: Vec<Event> =
            lines.iter().map(|line| serde_json::from_str(line).expect("an event")).collect();
        let analysis = analyze_events(&events, &CheckOptions::default()).expect("a history");
        let run = crate::RealRun { events, analysis, wall_s: 0.0, faults: Default::default() };
        let line = super::summary(&run);
        assert!(
            line.starts_with(
                "faults: clock x1, pause x3 (in-flight x2, not taken x1); 2 lock operations; "
            ),
            "{line}"
        );
        assert!(line.contains("mutual-exclusion valid"), "{line}");
    }

    #[test]
    fn a_cell_reads_as_its_check_arguments() {
        let args: Vec<String> = cells().iter().map(super::check_args).collect();
        for line in [
            "--backend redis --nemesis none --ttl 500ms",
            "--backend redis --nemesis pause --pause-at after-grant --ttl 500ms --no-fencing",
            "--backend redis --nemesis kill --ttl 500ms --persistent",
            "--backend redlock --nemesis kill --ttl 2s --restart-delay 0ms",
            "--backend etcd --nemesis partition --partition-shapes isolate-one,halves,ring --ttl 2s",
            "--backend mysql-get-lock --nemesis conn-kill --ttl 500ms",
        ] {
            assert!(args.iter().any(|arg| arg == line), "no cell reads {line:?}");
        }
        let unique: std::collections::BTreeSet<&String> = args.iter().collect();
        assert_eq!(unique.len(), args.len(), "two cells run the same test");
        assert_eq!(super::duration(Duration::from_millis(1500)), "1500ms");
    }

    #[test]
    fn the_runs_the_matrix_asks_come_before_the_cells_and_the_cells_before_the_default() {
        use super::Effort;
        let cells = cells();
        let find = |keep: &dyn Fn(&super::RealCell) -> bool| cells.iter().find(|cell| keep(cell));
        let safe = find(&|cell| !cell.expect.seeks_violation()).unwrap();
        let violated = find(&|cell| cell.expect.seeks_violation() && cell.runs.is_none()).unwrap();
        let own_runs = find(&|cell| cell.expect.seeks_violation() && cell.runs.is_some()).unwrap();
        let asked = Effort { violated_within: Some(2), safe_runs: Some(4), ..Effort::default() };
        assert_eq!(Effort::default().runs(safe), super::DEFAULT_SAFE_RUNS);
        assert_eq!(Effort::default().runs(violated), super::DEFAULT_VIOLATED_WITHIN);
        assert_eq!(Effort::default().runs(own_runs), own_runs.runs.unwrap());
        assert_eq!([asked.runs(safe), asked.runs(violated), asked.runs(own_runs)], [4, 2, 2]);
        let none = Effort { violated_within: Some(0), safe_runs: Some(0), ..Effort::default() };
        assert_eq!([none.runs(safe), none.runs(violated)], [1, 1], "a cell runs at least once");
    }
}
