//! The truth table of docs/truth-table.md, as the simulator and the checkers
//! reproduce it: every "safe" cell stays valid over many seeds, and every
//! "violated" cell is found within a handful, by the checker that should find
//! it. A failure names the seed and the `lockcheck check` flags that replay it.

use std::time::{Duration, Instant};

use lockcheck_checker::{
    analyze, default_checkers, write_events, Analysis, CheckOptions, Checker, EventType, Function,
    HistoryBuilder, Verdict, ViolationKind,
};
use lockcheck_sim::{run, Backend, FaultKind, RunOptions, Shape, SimRun};

use lockcheck_checker::names::FENCE_MONOTONICITY as FENCE;
use lockcheck_checker::names::LINEARIZABILITY as LINEAR;
use lockcheck_checker::names::LIVENESS;
use lockcheck_checker::names::MUTUAL_EXCLUSION as MUTEX;
use lockcheck_checker::names::RESOURCE_SAFETY as RESOURCE;
const CHECKERS: [&str; 5] = [MUTEX, FENCE, RESOURCE, LIVENESS, LINEAR];

/// Seeds a "violated" cell gets to show its violation in.
const FIND_WITHIN: u64 = 20;

/// One simulated run and what the default checkers said about it.
struct Checked {
    options: RunOptions,
    sim: SimRun,
    analysis: Analysis,
}

impl Checked {
    fn verdict(&self, checker: &str) -> Option<Verdict> {
        self.analysis
            .result_of(checker)
            .unwrap_or_else(|| panic!("no {checker} result; {}", self.context()))
            .verdict
    }

    fn is(&self, checker: &str, verdict: Verdict) -> bool {
        self.verdict(checker) == Some(verdict)
    }

    fn violation_kinds(&self, checker: &str) -> Vec<ViolationKind> {
        self.analysis
            .results
            .iter()
            .filter(|result| result.checker == checker)
            .flat_map(|result| result.violations.iter().map(|violation| violation.kind))
            .collect()
    }

    fn expect_kind(&self, checker: &str, kind: ViolationKind) {
        let kinds = self.violation_kinds(checker);
        assert!(
            kinds.contains(&kind),
            "{checker}: expected a {kind:?} among {kinds:?}; {}",
            self.context()
        );
    }

    /// Writes that the storage refused for a stale token.
    fn stale_fence_writes(&self) -> usize {
        self.sim
            .events
            .iter()
            .filter(|event| {
                event.event_type == EventType::Fail
                    && event.f == Function::Write
                    && event.error.as_deref() == Some("stale-fence")
            })
            .count()
    }

    /// Nemesis starts of a fault (by the history's `fault` field).
    fn fault_starts(&self, fault: &str) -> usize {
        self.sim
            .events
            .iter()
            .filter(|event| {
                event.event_type == EventType::Info
                    && event.f == Function::Start
                    && event.value.as_ref().is_some_and(|value| {
                        value.get().contains(&format!("\"fault\":\"{fault}\""))
                    })
            })
            .count()
    }

    /// Every checker's verdict, for failure messages.
    fn verdicts(&self) -> String {
        self.analysis
            .results
            .iter()
            .map(|result| {
                format!("{}={}", result.checker, result.verdict.map_or("n/a", Verdict::as_str))
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The seed, the replay flags and the verdicts.
    fn context(&self) -> String {
        format!(
            "seed {}; replay: {}; overall {}; {}",
            self.options.seed,
            replay(&self.options),
            self.analysis.verdict.as_str(),
            self.verdicts()
        )
    }

    fn expect(&self, checker: &str, verdict: Verdict, why: &str) {
        assert!(
            self.is(checker, verdict),
            "{why}: expected {checker} {}, got {}; {}",
            verdict.as_str(),
            self.verdict(checker).map_or("n/a", Verdict::as_str),
            self.context()
        );
    }

    /// Every checker applies and finds the run safe.
    fn expect_all_valid(&self, why: &str) {
        for checker in CHECKERS {
            self.expect(checker, Verdict::Valid, why);
        }
        assert_eq!(self.analysis.verdict, Verdict::Valid, "{why}; {}", self.context());
    }
}

/// The `lockcheck check` command line that replays `options`.
fn replay(options: &RunOptions) -> String {
    format!("cargo run --release -- {}", options.replay().arguments())
}

/// The options of `lockcheck check --backend B --nemesis F`.
fn options(backend: Backend, faults: &[FaultKind]) -> RunOptions {
    RunOptions { backend, faults: faults.to_vec(), ..RunOptions::default() }
}

fn simulate(options: &RunOptions) -> SimRun {
    run(options).unwrap_or_else(|error| {
        panic!("seed {}: {error}; replay: {}", options.seed, replay(options))
    })
}

/// Runs `options` with `seed` and checks the history as `lockcheck check` does.
fn check(options: &RunOptions, seed: u64) -> Checked {
    check_with(options, seed, &default_checkers())
}

/// As [`check`], without the linearizability search: for a scenario that
/// asserts nothing of it, over seeds whose histories (pauses between a
/// grant and its fence) make that search the whole of the test's time.
fn check_without_linearizability(options: &RunOptions, seed: u64) -> Checked {
    let mut checkers = default_checkers();
    checkers.retain(|checker| checker.name() != LINEAR);
    check_with(options, seed, &checkers)
}

fn check_with(options: &RunOptions, seed: u64, checkers: &[Box<dyn Checker>]) -> Checked {
    let options = RunOptions { seed, ..options.clone() };
    let sim = simulate(&options);
    let mut builder = HistoryBuilder::with_capacity(sim.events.len());
    for event in &sim.events {
        builder.push(event).unwrap_or_else(|error| {
            panic!(
                "seed {seed}: the simulator recorded a malformed history: {error}; replay: {}",
                replay(&options)
            )
        });
    }
    let history = builder.finish();
    let check_options = CheckOptions {
        // The CLI's default, 60 s: a wall-clock limit, so a tighter one could
        // run out on a loaded machine, and `unknown` fails every assertion
        // below that wants a verdict from it.
        linearizability_time_limit: Some(Duration::from_secs(60)),
        ..CheckOptions::default()
    };
    let analysis = analyze(&history, checkers, &check_options);
    Checked { options, sim, analysis }
}

/// The first seed in `0..FIND_WITHIN` whose run `shows` the violation.
fn find(options: &RunOptions, what: &str, shows: impl Fn(&Checked) -> bool) -> Checked {
    let mut seen = Vec::new();
    for seed in 0..FIND_WITHIN {
        let checked = check(options, seed);
        if shows(&checked) {
            eprintln!("{what}: found at seed {seed} ({})", checked.verdicts());
            return checked;
        }
        seen.push(format!("  seed {seed}: {}", checked.verdicts()));
    }
    panic!(
        "{what}: not found in seeds 0..{FIND_WITHIN} (the tool is blind to this cell); replay: {}\n{}",
        replay(&RunOptions { seed: 0, ..options.clone() }),
        seen.join("\n")
    );
}

fn events_bytes(sim: &SimRun) -> Vec<u8> {
    let mut bytes = Vec::new();
    write_events(&mut bytes, &sim.events).expect("writing to a Vec cannot fail");
    bytes
}

// 1. Determinism.

#[test]
fn the_same_options_and_seed_give_the_same_history_byte_for_byte() {
    let all_faults = FaultKind::ALL;
    for backend in Backend::all_in(lockcheck_workloads::World::Simulated) {
        let options = RunOptions { seed: 7, ..options(backend, &all_faults) };
        let first = events_bytes(&simulate(&options));
        let second = events_bytes(&simulate(&options));
        assert!(!first.is_empty(), "seed 7: an empty history; replay: {}", replay(&options));
        assert!(
            first == second,
            "seed 7: two runs of the same options differ ({} and {} bytes); replay: {}",
            first.len(),
            second.len(),
            replay(&options)
        );
        let other = RunOptions { seed: 8, ..options.clone() };
        assert!(
            events_bytes(&simulate(&other)) != first,
            "seeds 7 and 8 gave the same history: the seed does not reach the run; replay: {}",
            replay(&other)
        );
    }
    // And the default run, as `lockcheck check` does it.
    let default = RunOptions { seed: 7, ..RunOptions::default() };
    assert_eq!(events_bytes(&simulate(&default)), events_bytes(&simulate(&default)));
}

// 2, 3. Redis `SET NX PX` + Lua release, holder stall > TTL.

#[test]
fn redis_under_pause_violates_mutual_exclusion_but_fenced_storage_rejects_the_stale_write() {
    let options = options(Backend::Redis, &[FaultKind::Pause]);
    let mut found = None;
    for seed in 0..FIND_WITHIN {
        let checked = check_without_linearizability(&options, seed);
        // Fenced storage: whatever the lock did, no stale write lands, in every seed.
        checked.expect(RESOURCE, Verdict::Valid, "fenced storage let a stale write land");
        checked.expect(FENCE, Verdict::Valid, "INCR fence tokens went backwards");
        if found.is_none()
            && checked.is(MUTEX, Verdict::Invalid)
            && checked.stale_fence_writes() > 0
        {
            eprintln!(
                "sim-redis pause fenced: found at seed {seed} ({} stale-fence writes; {})",
                checked.stale_fence_writes(),
                checked.verdicts()
            );
            found = Some(checked);
        }
    }
    let checked = found.unwrap_or_else(|| {
        panic!(
            "sim-redis under pause: no seed in 0..{FIND_WITHIN} showed both a mutual-exclusion \
             violation and a write refused with stale-fence; replay: {}",
            replay(&options)
        )
    });
    checked.expect_kind(MUTEX, ViolationKind::Overlap);
    assert_eq!(checked.analysis.verdict, Verdict::Invalid, "{}", checked.context());
}

#[test]
fn redis_under_pause_without_fencing_lets_the_stale_write_land() {
    let options = RunOptions { fencing: false, ..options(Backend::Redis, &[FaultKind::Pause]) };
    let checked = find(&options, "sim-redis pause unfenced", |checked| {
        checked.is(MUTEX, Verdict::Invalid) && checked.is(RESOURCE, Verdict::Invalid)
    });
    checked.expect_kind(RESOURCE, ViolationKind::DoubleCharge);
    assert_eq!(
        checked.stale_fence_writes(),
        0,
        "unfenced storage refused a write; {}",
        checked.context()
    );
    // No tokens, nothing to be monotonic.
    assert_eq!(checked.verdict(FENCE), None, "{}", checked.context());
}

// 4. No fault: safe.

#[test]
fn redis_without_faults_stays_valid_over_200_seeds() {
    let options =
        RunOptions { time_limit: Duration::from_secs(10), ..options(Backend::Redis, &[]) };
    let started = Instant::now();
    let mut lock_ops = 0;
    for seed in 0..200 {
        let checked = check(&options, seed);
        checked.expect_all_valid("sim-redis with no fault: a false positive");
        lock_ops += checked.sim.stats.lock_ops;
    }
    eprintln!(
        "sim-redis, no faults: 200 seeds x {} s simulated ({lock_ops} lock operations) simulated and checked in {:.2} s",
        options.time_limit.as_secs(),
        started.elapsed().as_secs_f64()
    );
    assert!(lock_ops > 200 * 100, "too few lock operations to mean anything: {lock_ops}");
}

// 5. The broken recipes, each found by the checker that should find it.

#[test]
fn redis_release_by_del_violates_mutual_exclusion_under_pause() {
    let options = options(Backend::RedisDelRelease, &[FaultKind::Pause]);
    let checked = find(&options, "sim-redis-del-release pause", |checked| {
        checked.is(MUTEX, Verdict::Invalid)
    });
    checked.expect_kind(MUTEX, ViolationKind::Overlap);
}

#[test]
fn redis_setnx_then_expire_leaves_a_stuck_lock_under_pause() {
    let options = options(Backend::RedisSetnxExpire, &[FaultKind::Pause]);
    let checked = find(&options, "sim-redis-setnx-expire pause", |checked| {
        checked.is(LIVENESS, Verdict::Invalid)
    });
    checked.expect_kind(LIVENESS, ViolationKind::Stuck);
}

#[test]
fn redis_taking_a_lost_reply_for_busy_is_not_linearizable_under_loss() {
    let options = options(Backend::RedisLostReply, &[FaultKind::Loss]);
    let checked =
        find(&options, "sim-redis-lost-reply loss", |checked| checked.is(LINEAR, Verdict::Invalid));
    checked.expect_kind(LINEAR, ViolationKind::NotLinearizable);
    // Reading a lost reply as "busy" does not by itself put two holders in
    // one lock: the orphaned key just expires.
    checked.expect(MUTEX, Verdict::Valid, "a lost reply alone made two holders");
}

#[test]
fn lease_table_by_the_clients_clock_violates_mutual_exclusion_under_skew() {
    let options = options(Backend::LeaseTableClientClock, &[FaultKind::Skew]);
    let checked = find(&options, "sim-lease-table-client-clock skew", |checked| {
        checked.is(MUTEX, Verdict::Invalid)
    });
    checked.expect_kind(MUTEX, ViolationKind::Overlap);
}

// 6. The lease table: the database's clock makes client skew harmless.

#[test]
fn lease_table_by_the_database_clock_is_safe_under_client_skew() {
    let options = options(Backend::LeaseTable, &[FaultKind::Skew]);
    let started = Instant::now();
    for seed in 0..50 {
        let checked = check(&options, seed);
        assert!(checked.fault_starts("skew") > 0, "no skew struck; {}", checked.context());
        checked.expect_all_valid("sim-lease-table under client skew: a false positive");
    }
    eprintln!("sim-lease-table, skew: 50 seeds in {:.2} s", started.elapsed().as_secs_f64());

    // The same skew (the fault schedule depends only on the seed) breaks the
    // recipe that trusts the client's clock: the valid runs above had teeth.
    let broken = RunOptions { backend: Backend::LeaseTableClientClock, ..options.clone() };
    let caught = find(&broken, "sim-lease-table-client-clock skew", |checked| {
        checked.is(MUTEX, Verdict::Invalid)
    });
    let same_seed = check(&options, caught.options.seed);
    assert_eq!(
        same_seed.fault_starts("skew"),
        caught.fault_starts("skew"),
        "the two backends did not get the same skew schedule; {} / {}",
        same_seed.context(),
        caught.context()
    );
    same_seed
        .expect_all_valid("sim-lease-table under the skew that breaks the client-clock variant");
}

#[test]
fn lease_table_under_pause_violates_mutual_exclusion_but_fenced_storage_is_safe() {
    let options = options(Backend::LeaseTable, &[FaultKind::Pause]);
    let mut found = None;
    for seed in 0..FIND_WITHIN {
        let checked = check(&options, seed);
        checked.expect(RESOURCE, Verdict::Valid, "the lease table's fence let a stale write land");
        checked.expect(FENCE, Verdict::Valid, "the lease table's fence column went backwards");
        if found.is_none()
            && checked.is(MUTEX, Verdict::Invalid)
            && checked.stale_fence_writes() > 0
        {
            eprintln!(
                "sim-lease-table pause: found at seed {seed} ({} stale-fence writes; {})",
                checked.stale_fence_writes(),
                checked.verdicts()
            );
            found = Some(checked);
        }
    }
    assert!(
        found.is_some(),
        "sim-lease-table under pause: no seed in 0..{FIND_WITHIN} showed both a mutual-exclusion \
         violation and a write refused with stale-fence; replay: {}",
        replay(&options)
    );
}

// 7. A lock server restart: safe only if the keys (and the INCR fence
// counters) survive it.

#[test]
fn redis_restart_is_safe_with_persistence_and_violated_without() {
    let persistent = RunOptions { persistent: true, ..options(Backend::Redis, &[FaultKind::Kill]) };
    for seed in 0..FIND_WITHIN {
        let checked = check(&persistent, seed);
        assert!(checked.fault_starts("kill") > 0, "no kill struck; {}", checked.context());
        checked.expect_all_valid("sim-redis --persistent under kill: a false positive");
    }
    let volatile = RunOptions { persistent: false, ..persistent };
    let checked = find(&volatile, "sim-redis kill without persistence", |checked| {
        checked.is(MUTEX, Verdict::Invalid) || checked.is(FENCE, Verdict::Invalid)
    });
    assert_eq!(checked.analysis.verdict, Verdict::Invalid, "{}", checked.context());
}

// Redlock (five instances, no fencing token).

#[test]
fn redlock_is_safe_without_faults_and_with_a_delayed_restart() {
    for (faults, what) in [(&[][..], "none"), (&[FaultKind::Kill][..], "kill")] {
        let options = options(Backend::Redlock, faults);
        for seed in 0..FIND_WITHIN {
            let checked = check(&options, seed);
            if !faults.is_empty() {
                assert!(checked.fault_starts("kill") > 0, "no kill struck; {}", checked.context());
            }
            assert_eq!(
                checked.analysis.verdict,
                Verdict::Valid,
                "sim-redlock {what}: a false positive; {}",
                checked.context()
            );
        }
    }
}

#[test]
fn redlock_restarting_at_once_without_its_keys_violates_mutual_exclusion() {
    let options = options(Backend::RedlockNoDelay, &[FaultKind::Kill]);
    let checked =
        find(&options, "sim-redlock-no-delay kill", |checked| checked.is(MUTEX, Verdict::Invalid));
    checked.expect_kind(MUTEX, ViolationKind::Overlap);
}

#[test]
fn redlock_under_pause_violates_mutual_exclusion_and_the_unfenced_write_lands() {
    let options = options(Backend::Redlock, &[FaultKind::Pause]);
    let checked = find(&options, "sim-redlock pause", |checked| {
        checked.is(MUTEX, Verdict::Invalid) && checked.is(RESOURCE, Verdict::Invalid)
    });
    checked.expect_kind(RESOURCE, ViolationKind::DoubleCharge);
}

// 8. Failover to an async replica (docs/guide.md#replication): the primary dies before
// shipping the grant, the promoted replica grants the same lock again.

/// The indices of the history's `failover` starts.
fn failover_starts(checked: &Checked) -> Vec<u64> {
    checked
        .sim
        .events
        .iter()
        .filter(|event| {
            event.event_type == EventType::Info
                && event.f == Function::Start
                && event.value.as_ref().is_some_and(|value| value.get().contains("\"failover\""))
        })
        .map(|event| event.index)
        .collect()
}

#[test]
fn redis_failover_to_a_replica_without_the_key_violates_mutual_exclusion() {
    let options = options(Backend::Redis, &[FaultKind::Failover]);
    let started = Instant::now();
    let checked =
        find(&options, "sim-redis failover", |checked| checked.is(MUTEX, Verdict::Invalid));
    eprintln!("sim-redis failover: found in {:.2} s", started.elapsed().as_secs_f64());
    checked.expect_kind(MUTEX, ViolationKind::Overlap);
    assert_eq!(checked.sim.faults, [FaultKind::Failover], "{}", checked.context());
    // The two holders straddle a failover: the first was granted by the old
    // primary, the second by the promoted replica, before the first let go.
    let failovers = failover_starts(&checked);
    let straddled = checked
        .analysis
        .results
        .iter()
        .filter(|result| result.checker == MUTEX)
        .flat_map(|result| &result.violations)
        .filter(|violation| violation.kind == ViolationKind::Overlap)
        .any(|violation| {
            let (first, last) = (violation.events[0], violation.events[violation.events.len() - 1]);
            failovers.iter().any(|&failover| first < failover && failover < last)
        });
    assert!(
        straddled,
        "no overlap spans a failover (failovers at {failovers:?}); {}",
        checked.context()
    );
}

#[test]
fn failover_asked_of_a_backend_without_a_replica_changes_nothing() {
    // Only a single Redis has a replica to fail over to; everyone else runs
    // as if failover had not been asked for, byte for byte.
    for backend in Backend::all_in(lockcheck_workloads::World::Simulated) {
        let without = RunOptions { seed: 3, ..options(backend, &lockcheck_sim::DEFAULT_FAULTS) };
        let mut faults = lockcheck_sim::DEFAULT_FAULTS.to_vec();
        faults.push(FaultKind::Failover);
        let with = RunOptions { faults, ..without.clone() };
        let (without_run, with_run) = (simulate(&without), simulate(&with));
        let same = events_bytes(&without_run) == events_bytes(&with_run);
        let can_fail_over = backend.fails_over();
        assert_eq!(
            can_fail_over,
            backend.sim_name().starts_with("sim-redis")
                && !backend.sim_name().contains("semaphore")
        );
        assert_eq!(same, !can_fail_over, "{}: replay: {}", backend.sim_name(), replay(&with));
        assert_eq!(with_run.faults.contains(&FaultKind::Failover), can_fail_over);
    }
}

/// FNV-1a, 64 bits: a digest that stays the same across Rust versions.
fn digest(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[test]
fn histories_without_failover_are_the_ones_from_before_it() {
    // Adding the replica and the failover fault left every run without it
    // byte for byte as it was: these digests were taken before. A change to
    // the simulator that is meant to change histories updates them (and
    // says so); one that is not must leave them alone. The three with kill
    // changed when a killed server began refusing connections at once
    // (clients retry a dead server quickly instead of waiting out their
    // deadline); the fault-free one did not. The two with the default
    // faults changed when the simulator began recording a delay fault as
    // slow-net, its name in both worlds (30 bytes: the name, nothing else).
    // The two with pause changed again when a pause began to strike at any
    // point of a client's life (`RunOptions::pause_at`); aimed after the
    // grant alone, a pause records what it did before (tests/cli_golden.rs).
    // The Redlock one changed once more when a kill of instances that come
    // back at once, empty, began to take out a majority every time. The
    // default one changed when a server's pause began to be recorded as
    // sigstop, its name in both worlds (4 bytes: the name of two events,
    // nothing else; the default faults gained sigstop, which shares
    // pause's draws). The three with faults changed when a pause, skew or
    // client cut began to record the processes it struck and a kill whether
    // its server persists ("processes", "persistent": with those fields
    // taken out, each history is byte for byte the one from before).
    let pinned: [(RunOptions, usize, u64); 4] = [
        (RunOptions { seed: 42, ..RunOptions::default() }, 1_152_233, 0x1c12_1c77_4150_046b),
        (RunOptions { seed: 5, ..options(Backend::Redis, &[]) }, 1_297_954, 0x21d6_3eaf_9510_ad85),
        (
            RunOptions { seed: 7, persistent: true, ..options(Backend::Redis, &[FaultKind::Kill]) },
            2_104_074,
            0x11af_7ae1_a100_12eb,
        ),
        (
            RunOptions {
                seed: 7,
                ..options(Backend::RedlockNoDelay, &lockcheck_sim::DEFAULT_FAULTS)
            },
            231_929,
            0x50a3_e821_d343_f349,
        ),
    ];
    for (options, len, hash) in pinned {
        let bytes = events_bytes(&simulate(&options));
        eprintln!("{} bytes, digest {:#018x}: {}", bytes.len(), digest(&bytes), replay(&options));
        assert_eq!(
            (bytes.len(), digest(&bytes)),
            (len, hash),
            "the history changed; replay: {}",
            replay(&options)
        );
    }
}

// etcd (docs/guide.md#etcd): a Raft cluster, a lease per acquisition, the lock
// key's create revision as the token.

fn partition_options(backend: Backend, shapes: &[Shape]) -> RunOptions {
    RunOptions { partition_shapes: shapes.to_vec(), ..options(backend, &[FaultKind::Partition]) }
}

#[test]
fn etcd_under_pause_violates_mutual_exclusion_and_the_revision_fences_the_stale_write() {
    let options = options(Backend::Etcd, &[FaultKind::Pause]);
    let checked = find(&options, "sim-etcd pause", |checked| {
        checked.is(MUTEX, Verdict::Invalid) && checked.stale_fence_writes() > 0
    });
    checked.expect_kind(MUTEX, ViolationKind::Overlap);
    checked.expect(RESOURCE, Verdict::Valid, "the storage must reject every stale token");
    checked.expect(FENCE, Verdict::Valid, "revisions only grow");
}

#[test]
fn etcd_holder_cut_off_from_the_cluster_outlives_its_lease_but_fenced_storage_is_safe() {
    let options = partition_options(Backend::Etcd, &[Shape::Client]);
    let checked =
        find(&options, "sim-etcd client cut off", |checked| checked.is(MUTEX, Verdict::Invalid));
    checked.expect(RESOURCE, Verdict::Valid, "the storage must reject every stale token");
}

#[test]
fn etcd_partitions_among_members_never_let_a_minority_grant() {
    for (backend, shapes) in [
        (Backend::Etcd, &[Shape::IsolateOne, Shape::Halves][..]),
        (Backend::Etcd5, &[Shape::IsolateOne, Shape::Halves, Shape::Ring][..]),
    ] {
        let options = partition_options(backend, shapes);
        for seed in 0..FIND_WITHIN {
            let checked = check(&options, seed);
            assert!(checked.fault_starts("partition") > 0, "no partition; {}", checked.context());
            checked.expect_all_valid("a minority side granted, or a new leader lost a commit");
        }
    }
    // The same partitions find a cluster whose leader commits alone.
    let broken = partition_options(Backend::EtcdNoQuorum, &[Shape::IsolateOne, Shape::Halves]);
    find(&broken, "sim-etcd-no-quorum partition", |checked| checked.is(MUTEX, Verdict::Invalid));
}

#[test]
fn etcd_member_crash_refuses_connections_at_once_so_no_holder_outlives_its_session() {
    // Seeds 288 and 1819 under kill once gave two holders: the holder's own
    // member was the one killed, and every keepalive first waited out its
    // whole deadline dialling the dead member (a crashed turmoil host
    // swallows the connection), until the holder believed past its
    // session. A SIGKILLed process's port is refused at once. Seed 1445
    // killed two of three members at once: a cluster's crash now takes out
    // a minority, since a majority down cuts every holder off (the
    // partition `client` cell's finding).
    for seed in [288, 1445, 1819] {
        check(&options(Backend::Etcd, &[FaultKind::Kill]), seed)
            .expect_all_valid("members crash and restart: safe");
    }
}
