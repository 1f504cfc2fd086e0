//! The truth table of docs/truth-table.md, as far as the simulator covers
//! it: each cell is a backend under a fault with the verdict it must get.
//! A violated cell must be found within a number of seeds; a safe cell must
//! stay clean over many.

use std::time::Duration;

pub use lockcheck_checker::Expect;
use lockcheck_checker::{analyze_events, Analysis, CheckOptions, HistoryError, Judgement};

use crate::client::Backend;
use crate::nemesis::{FaultKind, Shape};
use lockcheck_workloads::payments::Protection;
use lockcheck_workloads::provider::Variant;
use lockcheck_workloads::{StallPoint, Workload};

use crate::run::{run, SimError, SimRun};
use lockcheck_workloads::RunOptions;

/// One cell of the simulated table.
pub type Cell = lockcheck_workloads::Cell<Backend>;

use lockcheck_checker::names::DEADLOCK;
use lockcheck_checker::names::EXACTLY_ONCE as ONCE;
use lockcheck_checker::names::FENCE_MONOTONICITY as FENCE;
use lockcheck_checker::names::IDEMPOTENCY;
use lockcheck_checker::names::LINEARIZABILITY as LINEAR;
use lockcheck_checker::names::LIVENESS;
use lockcheck_checker::names::MUTUAL_EXCLUSION as MUTEX;
use lockcheck_checker::names::RESOURCE_SAFETY as RESOURCE;
use lockcheck_checker::names::RE_ELECTION;

const fn cell(
    backend: Backend,
    faults: &'static [FaultKind],
    expect: Expect,
    note: &'static str,
) -> Cell {
    Cell::new(backend, faults, expect, note)
}

const SAFE: Expect = Expect::Safe;

const fn violated(any_of: &'static [&'static str]) -> Expect {
    Expect::Violated { any_of, stays_valid: &[] }
}

/// Every simulated cell.
pub fn cells() -> Vec<Cell> {
    use Backend as B;
    use FaultKind as F;
    use StallPoint as P;
    vec![
        cell(B::Redis, &[], SAFE, "no fault: safe"),
        cell(
            B::Redis,
            &[F::Pause],
            Expect::Violated { any_of: &[MUTEX], stays_valid: &[RESOURCE] },
            "holder stall > TTL: two holders; fenced storage rejects the stale write",
        ),
        Cell {
            fencing: false,
            ..cell(
                B::Redis,
                &[F::Pause],
                violated(&[RESOURCE]),
                "without fencing the stale write lands",
            )
        },
        cell(B::Redis, &[F::Clock], violated(&[MUTEX]), "forward clock jump: early expiry"),
        cell(
            B::Redis,
            &[F::Kill],
            violated(&[MUTEX, FENCE]),
            "restart without persistence: keys and INCR lost",
        ),
        Cell {
            persistent: true,
            ..cell(B::Redis, &[F::Kill], SAFE, "restart with persistence: safe")
        },
        cell(
            B::RedisDelRelease,
            &[F::Pause],
            violated(&[MUTEX]),
            "release by DEL deletes another's lock",
        ),
        cell(
            B::RedisSetnxExpire,
            &[F::Pause],
            violated(&[LIVENESS]),
            "crash between SETNX and EXPIRE: stuck",
        ),
        cell(B::RedisLostReply, &[F::Loss], violated(&[LINEAR]), "lost reply taken for busy"),
        cell(
            B::Redis,
            &[F::Failover],
            violated(&[MUTEX]),
            "failover to an async replica that never saw the key: two holders",
        ),
        cell(
            B::Redis,
            &[F::Partition],
            SAFE,
            "a cut-off client's operations time out (info) before its lease ends: no false positive",
        ),
        cell(B::Redlock, &[], SAFE, "no fault: safe"),
        cell(
            B::Redlock,
            &[F::Pause],
            violated(&[MUTEX]),
            "holder stall > TTL: two holders, no token",
        ),
        cell(B::Redlock, &[F::Kill], SAFE, "delayed restart: safe"),
        cell(
            B::RedlockNoDelay,
            &[F::Kill],
            violated(&[MUTEX]),
            "restart without persistence: two majorities",
        ),
        cell(B::LeaseTable, &[], SAFE, "no fault: safe"),
        cell(
            B::LeaseTable,
            &[F::Pause],
            Expect::Violated { any_of: &[MUTEX], stays_valid: &[RESOURCE] },
            "holder stall > TTL: two holders; fenced storage rejects the stale write",
        ),
        cell(B::LeaseTable, &[F::Skew], SAFE, "database clock: client clock skew is harmless"),
        cell(B::LeaseTable, &[F::Partition], SAFE, "a cut-off client's operations time out: no false positive"),
        cell(
            B::LeaseTableClientClock,
            &[F::Skew],
            violated(&[MUTEX]),
            "expiry by the client's clock",
        ),
        cell(B::RedisSemaphore, &[], SAFE, "semaphore, 2 permits: no fault, at most 2 holders"),
        cell(B::RedisSemaphore, &[F::Skew], SAFE, "TIME inside the script: client clock skew is harmless"),
        cell(
            B::RedisSemaphore,
            &[F::Pause],
            violated(&[MUTEX]),
            "a holder that stops heartbeating loses its slot while still running: over the limit",
        ),
        cell(B::RedisSemaphoreClientClock, &[F::Skew], violated(&[MUTEX]), "now from the caller's clock: over the limit"),
        cell(B::Etcd, &[], SAFE, "no fault: safe"),
        cell(
            B::Etcd,
            &[F::Pause],
            Expect::Violated { any_of: &[MUTEX], stays_valid: &[RESOURCE] },
            "holder stall > TTL: its lease is revoked; the revision fences the stale write",
        ),
        Cell {
            shapes: &[Shape::Client],
            ..cell(
                B::Etcd,
                &[F::Partition],
                Expect::Violated { any_of: &[MUTEX], stays_valid: &[RESOURCE] },
                "holder cut off from the cluster: its session outlives its lease; fenced storage safe",
            )
        },
        Cell {
            shapes: &[Shape::IsolateOne, Shape::Halves],
            ..cell(B::Etcd, &[F::Partition], SAFE, "partition among members: the minority side never grants")
        },
        Cell {
            shapes: &[Shape::IsolateOne, Shape::Halves, Shape::Ring],
            ..cell(B::Etcd5, &[F::Partition], SAFE, "five members, a majority ring too: the minority never grants")
        },
        cell(B::Etcd, &[F::Kill], SAFE, "a minority of members crash and restart from their WAL: safe"),
        cell(B::Etcd, &[F::Clock], SAFE, "leases expire by the leader's monotonic clock: a jump is harmless"),
        Cell {
            shapes: &[Shape::IsolateOne, Shape::Halves],
            ..cell(
                B::EtcdNoQuorum,
                &[F::Partition],
                violated(&[MUTEX]),
                "a leader that commits without a majority goes on granting in the minority",
            )
        },
        // etcd's Mutex.Lock: a client that finds the lock taken waits in
        // line, watching the key just before its own.
        Cell {
            runs: Some(ETCD_WAITING_SAFE_SEEDS),
            ..cell(B::EtcdWaiting, &[], SAFE, "waiters in line, each woken by the key before its own: safe")
        },
        cell(
            B::EtcdWaiting,
            &[F::Pause],
            Expect::Violated { any_of: &[MUTEX], stays_valid: &[RESOURCE] },
            "holder stall > TTL: its lease is revoked and the next in line holds; the revision fences the stale write",
        ),
        Cell {
            shapes: &[Shape::IsolateOne, Shape::Halves],
            runs: Some(ETCD_WAITING_SAFE_SEEDS),
            ..cell(B::EtcdWaiting, &[F::Partition], SAFE, "partition among members: the minority side never grants, a waiter there times out")
        },
        // A holder whose keepalive goes unanswered reads its key from its
        // own member, the one it talks to: a partition among members takes
        // the member's clients with it. A linearizable read cannot be
        // answered in the minority; a serializable one is answered there
        // from the past. Mutual exclusion is promised by neither: a holder
        // cut off from the leader works on until its session's deadline,
        // and past it until its next renewal, as a holder cut off from the
        // whole cluster does (the `client` cell above).
        Cell {
            shapes: &[Shape::IsolateOne, Shape::Halves],
            runs: Some(ETCD_CHECK_SAFE_SEEDS),
            ..cell(
                B::EtcdLinearizableCheck,
                &[F::Partition],
                Expect::Keeps { valid: &[LINEAR, FENCE, RESOURCE] },
                "a holder's member cut off: its linearizable read of its key goes unanswered in the minority; a renewal never outlives the lease",
            )
        },
        Cell {
            shapes: &[Shape::IsolateOne, Shape::Halves],
            ..cell(
                B::EtcdSerializableCheck,
                &[F::Partition],
                Expect::Violated { any_of: &[LINEAR], stays_valid: &[RESOURCE] },
                "a holder's member cut off answers its serializable read from the past: a renewal succeeds after the majority revoked the lease and granted the lock again; the revision fences",
            )
        },
        // ZooKeeper: Curator's lock on a simulated ensemble, the session
        // timeout the TTL, the czxid the token. A run costs several times a
        // Redis run, so a safe cell stays clean over fewer seeds.
        zookeeper(cell(B::ZooKeeper, &[], SAFE, "no fault: safe")),
        cell(
            B::ZooKeeper,
            &[F::Pause],
            Expect::Violated { any_of: &[MUTEX], stays_valid: &[RESOURCE] },
            "holder stall > session timeout: its heartbeats stall with it, the session expires and the next waiter holds; the czxid fences the stale write",
        ),
        zookeeper(Cell {
            shapes: &[Shape::Client],
            ..cell(
                B::ZooKeeper,
                &[F::Partition],
                SAFE,
                "holder cut off: SUSPENDED at 2/5 of the session timeout stops it before the ensemble ends its session (Curator's rule)",
            )
        }),
        zookeeper(Cell {
            shapes: &[Shape::IsolateOne, Shape::Halves],
            ..cell(B::ZooKeeper, &[F::Partition], SAFE, "partition among members: the minority side never grants")
        }),
        zookeeper(cell(B::ZooKeeper, &[F::Kill], SAFE, "a minority of members crash and restart from their transaction log: safe")),
        zookeeper(cell(B::ZooKeeper, &[F::Clock], SAFE, "sessions expire by the leader's monotonic clock: a jump is harmless")),
        Cell {
            shapes: &[Shape::Client],
            ..cell(
                B::ZooKeeperActsSuspended,
                &[F::Partition],
                Expect::Violated { any_of: &[MUTEX], stays_valid: &[RESOURCE] },
                "holder cut off acts on through SUSPENDED until LOST (7/5 of the timeout): its session ends first; the czxid fences",
            )
        },
        zookeeper(cell(B::ZooKeeperHerd, &[], SAFE, "every waiter watches the parent: each release wakes them all, slow but safe")),
        // Consul: its lock-delay against a holder's stall (1.5 to 3 TTLs).
        cell(
            B::ConsulNoDelay,
            &[F::Pause],
            Expect::Violated { any_of: &[MUTEX], stays_valid: &[RESOURCE] },
            "lock-delay 0: a stalled holder's reaped session frees its key at once; LockIndex fences the stale write",
        ),
        cell(
            B::Consul,
            &[F::Pause],
            SAFE,
            "lock-delay 15 s outlasts a stall of 1.5 to 3 s: no overlap (liveness allows the delay)",
        ),
        cell(
            B::Consul,
            &[F::Clock],
            SAFE,
            "sessions and lock-delays run on Go's monotonic clock: a wall-clock jump is harmless",
        ),
        Cell {
            time_limit: Some(Duration::from_secs(300)),
            ..cell(
                B::Consul,
                &[F::Pause],
                Expect::Violated { any_of: &[MUTEX], stays_valid: &[RESOURCE] },
                "TTL 10 s: a stall of 15 to 30 s outlasts reaping and the 15 s lock-delay; LockIndex fences",
            )
            .with_ttl_ms(10_000)
        },
        // The replication table: how the copies of a lock service's state
        // disagree, each mode beside a safe counterpart (consensus is sim-etcd).
        replication(cell(
            B::PrimaryReads,
            &[],
            SAFE,
            "the primary decides every acquire: its async replica's lag is harmless",
        )),
        replication(cell(
            B::PrimaryReads,
            &[F::Kill],
            SAFE,
            "a crashed primary keeps its table and its replica decides nothing: safe",
        )),
        cell(
            B::ReplicaReads,
            &[],
            Expect::Violated { any_of: &[MUTEX], stays_valid: &[RESOURCE] },
            "no fault: the replica decides from a copy a lag behind, a grant it has not seen looks free: two holders; the primary's token fences",
        ),
        replication(cell(
            B::SyncReplica,
            &[],
            SAFE,
            "the primary answers a write once its replica has it: safe",
        )),
        replication(cell(
            B::SyncReplica,
            &[F::Kill],
            SAFE,
            "a replica down stops every write, so no grant until it is back (liveness notes the unavailability as expected); never two holders",
        )),
        cell(
            B::LeaderlessQuorum,
            &[],
            violated(&[FENCE]),
            "no fault: two clients read the same version on overlapping quorums and both write the next: a repeated token",
        ),
        cell(
            B::LeaderlessQuorum,
            &[],
            violated(&[LINEAR]),
            "no fault: W + R > N without an order of writes is not linearizable: two grants of one lock at once",
        ),
        // The pause at one point of a client's life at a time: a recipe
        // that breaks in that window, and a correct one keeping its promise
        // there.
        cell(
            B::Redis,
            &[F::Pause],
            violated(&[RESOURCE]),
            "in flight: a grant read after its lease ran out, the stale write lands",
        )
        .without_fencing()
        .with_pause_at(&[P::InFlight]),
        cell(
            B::Redis,
            &[F::Pause],
            Expect::Keeps { valid: &[RESOURCE] },
            "in flight: the fenced storage rejects the stale write (a SET read late takes its INCR late: not linearizable)",
        )
        .with_pause_at(&[P::InFlight]),
        cell(
            B::Redis,
            &[F::Pause],
            violated(&[LINEAR]),
            "between SET and the fence's separate INCR: the stalled holder gets a newer token than the next one",
        )
        .with_pause_at(&[P::BetweenCommands]),
        cell(
            B::Etcd,
            &[F::Pause],
            SAFE,
            "between a lease's grant and the lock: nothing is locked on a lease that ran out",
        )
        .with_pause_at(&[P::BetweenCommands]),
        cell(
            B::RedisGetDelRelease,
            &[F::Pause],
            violated(&[LINEAR]),
            "between GET and DEL of a release: the next holder's lock is deleted",
        )
        .with_pause_at(&[P::BetweenCommands]),
        cell(
            B::Redis,
            &[F::Pause],
            Expect::Keeps { valid: &[LINEAR, RESOURCE] },
            "before a release: the late compare-and-delete leaves the next holder's lock alone",
        )
        .with_pause_at(&[P::BeforeRelease]),
        cell(
            B::RedisDelRelease,
            &[F::Pause],
            violated(&[LINEAR]),
            "before a release by DEL: the next holder's lock is deleted",
        )
        .with_pause_at(&[P::BeforeRelease]),
        cell(
            B::Redis,
            &[F::Pause],
            Expect::Keeps { valid: &[LINEAR, RESOURCE] },
            "before a renewal: the late compare-then-PEXPIRE finds the lease gone, the holder stops",
        )
        .with_pause_at(&[P::BeforeRenew]),
        cell(
            B::RedisBlindRenew,
            &[F::Pause],
            violated(&[LINEAR]),
            "before a renewal by plain PEXPIRE: the late watchdog extends the next holder's lock",
        )
        .with_pause_at(&[P::BeforeRenew]),
        // Leader election with renewals (crate::election of the workloads):
        // every client a candidate, the leader working under its term.
        election(cell(B::EtcdElection, &[], SAFE, "election on etcd's Campaign: one leader at a time, terms increase, a new leader within the bound")),
        election(cell(
            B::EtcdElection,
            &[F::Pause],
            Expect::Keeps { valid: &[FENCE, RESOURCE, RE_ELECTION] },
            "election on etcd's Campaign, a leader stalled past its lease: the next is elected within the bound while the stalled one still believes it leads (no lease promises otherwise); the term fences its work",
        )),
        Cell {
            workload: Workload::Election,
            ..cell(
                B::Redis,
                &[F::Pause],
                Expect::Violated { any_of: &[MUTEX], stays_valid: &[RESOURCE, RE_ELECTION] },
                "election, a leader stalled past its lease still believes it leads; fenced storage rejects its work; re-elected within the bound",
            )
        },
        Cell {
            workload: Workload::Election,
            ..cell(
                B::LeaseTable,
                &[F::Pause],
                Expect::Violated { any_of: &[MUTEX], stays_valid: &[RESOURCE, RE_ELECTION] },
                "election on the lease table, a leader stalled past its lease: two leaders believe; the fence column's term rejects the stale work",
            )
        },
        Cell {
            workload: Workload::Election,
            ..cell(
                B::LeaseTable,
                &[F::Pause],
                violated(&[RESOURCE]),
                "election without fencing: a deposed leader's work lands",
            )
            .without_fencing()
        },
        Cell {
            workload: Workload::Election,
            ..cell(
                B::RedisSetnxExpire,
                &[F::Pause],
                violated(&[RE_ELECTION]),
                "election on SETNX then EXPIRE: a candidate that dies between the two leaves a key that never expires, and no leader is elected again",
            )
        },
        Cell { workload: Workload::Cron, ..cell(B::Redis, &[], SAFE, "cron, a lock per day never released: once a day") },
        Cell {
            workload: Workload::CronRelease,
            ..cell(B::Redis, &[], violated(&[ONCE]), "cron, lock released after the run: a late replica runs it again")
        },
        Cell {
            workload: Workload::Cron,
            ..cell(B::Redis, &[F::Kill], violated(&[ONCE]), "cron while the lock service is down: the job never runs")
        },
        Cell {
            workload: Workload::Cron,
            protection: Protection::None,
            ..cell(B::Redis, &[], violated(&[ONCE]), "cron on every replica with no lock: each replica runs the job (three pods, three emails)")
        },
        Cell {
            workload: Workload::Cron,
            protection: Protection::Unique,
            ..cell(B::Redis, &[], SAFE, "cron with no lock and UNIQUE (job, day): one replica's insert wins, the others find it taken")
        },
        // Two locks per client (docs/guide.md#lock-ordering).
        // A fixed order has no fault to draw: 50 seeds are as many kinds
        // of run as 200.
        Cell { workload: Workload::LockOrder, runs: Some(LOCK_ORDER_SAFE_SEEDS), ..cell(B::Redis, &[], SAFE, "lock ordering, one fixed order: no cycle of waits can form") },
        Cell {
            workload: Workload::LockOrderOpposite,
            ..cell(B::Redis, &[], violated(&[DEADLOCK]), "lock ordering, opposite orders: two clients each hold the lock the other waits for")
        },
        Cell { workload: Workload::LockOrder, runs: Some(LOCK_ORDER_SAFE_SEEDS), ..cell(B::Etcd, &[], SAFE, "lock ordering on consensus, one fixed order: no deadlock") },
        Cell {
            workload: Workload::LockOrderOpposite,
            ..cell(B::Etcd, &[], violated(&[DEADLOCK]), "lock ordering on consensus, opposite orders: a deadlock, whatever the lock service")
        },
        // The double charge: workers take orders from a queue that
        // redelivers a job not acknowledged within its visibility timeout
        // (the lock's TTL), and charge each (docs/payments.md).
        cell(B::Redis, &[F::Pause], violated(&[ONCE]), "payments, a lock per order: a worker stalled past its lease and the job's visibility charges twice")
            .with_payments(Protection::Lock),
        cell(B::Redis, &[F::Pause], Expect::Keeps { valid: &[ONCE] }, "payments, the lock and a fenced payments table: the stale worker's charge is refused")
            .with_payments(Protection::Fenced),
        cell(B::Redis, &[F::Pause], SAFE, "payments, the provider dedupes by an idempotency key: one charge per order")
            .with_payments(Protection::IdempotencyKey),
        cell(B::Redis, &[F::Pause], SAFE, "payments, UNIQUE (order_id): the second insert fails, counted as done")
            .with_payments(Protection::Unique),
        cell(B::Redis, &[F::Pause], SAFE, "payments, a conditional pending to paid: the second finds the order paid")
            .with_payments(Protection::Conditional),
        cell(B::Redis, &[F::Pause], violated(&[ONCE]), "payments, the queue alone: a redelivered job is charged again")
            .with_payments(Protection::None),
        cell(B::Redis, &[F::Pause], violated(&[ONCE]), "payments, an insert with no constraint: every redelivery a new row")
            .with_payments(Protection::Append),
        cell(B::Redis, &[F::Pause], violated(&[ONCE, IDEMPOTENCY]), "payments, a provider that ignores keys: charged again")
            .with_payments(Protection::IdempotencyKey)
            .with_provider(Variant::NoDedupe),
        cell(B::Redis, &[F::Pause], violated(&[IDEMPOTENCY]), "payments, a provider that replays the first charge for another body")
            .with_payments(Protection::IdempotencyKey)
            .with_provider(Variant::ReplayAnyBody),
        cell(B::Redis, &[F::Pause], violated(&[ONCE, IDEMPOTENCY]), "payments, a provider that checks, then inserts: two requests at once both charge")
            .with_payments(Protection::IdempotencyKey)
            .with_provider(Variant::CheckThenInsert),
        // With no lock, the queue and idempotent effects are safe under
        // every fault the simulator has (docs/payments.md: when no lock is
        // needed).
        cell(B::Redis, &DEFAULT_FAULTS_AND_PARTITION, SAFE, "payments, no lock: the queue and a unique insert under every simulated fault, on the workers, the queue, the provider and the table")
            .with_payments(Protection::Unique),
        cell(B::Redis, &DEFAULT_FAULTS_AND_PARTITION, SAFE, "payments, no lock: the queue and the provider's idempotency keys under every simulated fault, a crashed provider's charge in flight abandoned")
            .with_payments(Protection::IdempotencyKey),
    ]
}

/// Every fault a simulated Redis takes, for the cell that shows when no
/// lock is needed.
const DEFAULT_FAULTS_AND_PARTITION: [FaultKind; 8] = [
    FaultKind::Pause,
    FaultKind::Sigstop,
    FaultKind::Clock,
    FaultKind::Kill,
    FaultKind::SlowNet,
    FaultKind::Loss,
    FaultKind::Partition,
    FaultKind::Skew,
];

/// A simulated run's history, checked as `lockcheck check` checks it.
pub fn check_run(sim: &SimRun, options: &CheckOptions) -> Result<Analysis, HistoryError> {
    analyze_events(&sim.events, options)
}

/// How a cell came out.
#[derive(Debug, Clone, PartialEq)]
pub struct CellResult {
    pub matches: bool,
    /// Seeds run.
    pub seeds: u64,
    /// The seed that showed the violation, or broke a safe cell.
    pub seed: Option<u64>,
    /// One line for the table.
    pub found: String,
    /// The options of the telling seed (or the first), for a replay command.
    pub options: RunOptions,
}

/// How hard to look.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Effort {
    /// A violated cell must show within this many seeds.
    pub violated_within: u64,
    /// A safe cell must stay clean over this many.
    pub safe_seeds: u64,
    pub time_limit: Duration,
    pub linearizability_timeout: Duration,
    /// The first seed of a cell's runs.
    pub first_seed: u64,
}

impl Default for Effort {
    /// What `lockcheck matrix --sim` runs with no options, and what its test
    /// asserts: the table a user runs is the table CI checks.
    fn default() -> Self {
        Effort {
            violated_within: 50,
            safe_seeds: 200,
            time_limit: Duration::from_secs(30),
            linearizability_timeout: Duration::from_secs(10),
            first_seed: 0,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum MatrixError {
    #[error(transparent)]
    Sim(#[from] SimError),
    #[error("seed {seed}: the simulator recorded a malformed history: {error}")]
    History { seed: u64, error: Box<HistoryError> },
}

/// A seed that broke a safe cell, found by [`sweep_cell`].
#[derive(Debug, Clone, PartialEq)]
pub struct FalseAlarm {
    pub seed: u64,
    /// What it found, in one line.
    pub found: String,
    /// The options of that seed's run, for a replay command.
    pub options: RunOptions,
}

/// Runs a safe (or kept) cell over `seeds`, on `threads` threads, and
/// returns every seed that broke it, in seed order. A violated cell has
/// nothing to sweep: it gives no seeds.
pub fn sweep_cell(
    cell: &Cell,
    effort: &Effort,
    seeds: std::ops::Range<u64>,
    threads: usize,
) -> Result<Vec<FalseAlarm>, MatrixError> {
    if cell.expect.seeks_violation() {
        return Ok(Vec::new());
    }
    let next = std::sync::atomic::AtomicU64::new(seeds.start);
    let base = cell_options(cell, effort);
    let check_options = base.checks();
    let results = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..threads.max(1) {
            scope.spawn(|| loop {
                let seed = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if seed >= seeds.end {
                    break;
                }
                let options = RunOptions { seed, ..base.clone() };
                let outcome = run(&options).map_err(MatrixError::from).and_then(|sim| {
                    check_run(&sim, &check_options)
                        .map_err(|error| MatrixError::History { seed, error: Box::new(error) })
                });
                let alarm = outcome.map(|analysis| {
                    match cell.expect.judge(&analysis, &format!("seed {seed}")) {
                        Judgement::Decided { matches: false, found } => {
                            Some(FalseAlarm { seed, found, options })
                        }
                        _ => None,
                    }
                });
                results.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push((seed, alarm));
            });
        }
    });
    let mut results = results.into_inner().unwrap_or_else(|poisoned| poisoned.into_inner());
    results.sort_unstable_by_key(|(seed, _)| *seed);
    let mut alarms = Vec::new();
    for (_, alarm) in results {
        alarms.extend(alarm?);
    }
    Ok(alarms)
}

/// The options of one cell's runs, with the checkers' bound on the
/// linearizability search ([`RunOptions::checks`]).
fn cell_options(cell: &Cell, effort: &Effort) -> RunOptions {
    RunOptions {
        backend: cell.backend,
        workload: cell.workload,
        faults: cell.faults.to_vec(),
        partition_shapes: cell.shapes.to_vec(),
        pause_at: cell.pause_at.to_vec(),
        fencing: cell.fencing,
        persistent: cell.persistent,
        time_limit: cell.time_limit.unwrap_or(effort.time_limit),
        ttl: cell.ttl.unwrap_or(RunOptions::default().ttl),
        linearizability_timeout: effort.linearizability_timeout,
        protection: cell.protection,
        provider_variant: cell.provider_variant,
        ..RunOptions::default()
    }
}

/// Runs one cell.
pub fn run_cell(cell: &Cell, effort: &Effort) -> Result<CellResult, MatrixError> {
    run_cell_with_progress(cell, effort, &mut |_, _| {})
}

/// The seeds a safe cell of the simulated ZooKeeper stays clean over.
const ZOOKEEPER_SAFE_SEEDS: u64 = 20;

/// The seeds a safe cell of etcd's waiting recipe stays clean over: its
/// waiters' watches and line reads make a run cost twice a TryLock run's.
const ETCD_WAITING_SAFE_SEEDS: u64 = 50;

/// The seeds the kept cell of etcd's holders that check with a linearizable
/// read stays clean over (as many as the waiting recipe's).
const ETCD_CHECK_SAFE_SEEDS: u64 = 50;

/// How many seeds a safe cell of the replication table stays clean over:
/// the pair's faults are few (none, or a crash of one host), and their
/// runs many lock operations each.
const REPLICATION_SAFE_SEEDS: u64 = 50;

/// A safe `cell` of the replication table: [`REPLICATION_SAFE_SEEDS`].
const fn replication(cell: Cell) -> Cell {
    Cell { runs: Some(REPLICATION_SAFE_SEEDS), ..cell }
}

/// The seeds a safe lock-ordering cell stays clean over: it has no fault.
const LOCK_ORDER_SAFE_SEEDS: u64 = 50;

/// The seeds a kept or safe cell of the election workload stays clean over.
const ELECTION_SAFE_SEEDS: u64 = 50;

/// `cell` as an election ([`ELECTION_SAFE_SEEDS`] when safe or kept).
const fn election(cell: Cell) -> Cell {
    Cell { workload: Workload::Election, runs: Some(ELECTION_SAFE_SEEDS), ..cell }
}

/// `cell` of the simulated ZooKeeper: [`ZOOKEEPER_SAFE_SEEDS`] when safe.
fn zookeeper(cell: Cell) -> Cell {
    Cell { runs: Some(ZOOKEEPER_SAFE_SEEDS), ..cell }
}

/// How many seeds `cell` runs: a violated cell up to the effort's bound; a
/// safe one the effort's count, or fewer where the cell says (`runs`: a
/// simulated ensemble whose runs cost several times a Redis run's).
pub fn seeds_of(cell: &Cell, effort: &Effort) -> u64 {
    match cell.expect.seeks_violation() {
        true => effort.violated_within,
        false => cell.runs.map_or(effort.safe_seeds, |runs| runs.min(effort.safe_seeds)),
    }
}

/// As [`run_cell`], calling `progress` with each seed and its run once the
/// seed is run (before it is checked).
pub fn run_cell_with_progress(
    cell: &Cell,
    effort: &Effort,
    progress: &mut dyn FnMut(u64, &SimRun),
) -> Result<CellResult, MatrixError> {
    let base = cell_options(cell, effort);
    let check_options = base.checks();
    let seeds = seeds_of(cell, effort);
    let outcome = cell.expect.judge_runs_from(
        effort.first_seed,
        seeds,
        ("seed", "seed"),
        |seed| {
            let sim = run(&RunOptions { seed, ..base.clone() })?;
            progress(seed, &sim);
            check_run(&sim, &check_options)
                .map_err(|error| MatrixError::History { seed, error: Box::new(error) })
        },
        |analysis| analysis,
    )?;
    let seed = outcome.decided.map(|(seed, _)| seed);
    Ok(CellResult {
        matches: outcome.matches,
        seeds: outcome.runs,
        seed,
        found: outcome.found,
        options: RunOptions { seed: seed.unwrap_or(effort.first_seed), ..base },
    })
}
