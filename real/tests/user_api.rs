//! The user API (docs/rust-api.md): a lock recipe written by a user against
//! `RedisCommands`, run under the simulator with holder
//! stalls and against the machine's real Redis and PostgreSQL, and checked
//! as `lockcheck check` checks. The correct recipe must be found safe, the
//! broken one (release by plain `DEL`) must be caught.
//!
//! Servers for the real test: Redis at `LOCKCHECK_REDIS_URL` (default
//! redis://127.0.0.1:6379), PostgreSQL at `LOCKCHECK_POSTGRES_URL` (default
//! postgres://postgres@127.0.0.1:5432/test). A server that cannot be reached
//! fails the test: nothing is skipped.

use std::time::Duration;

use lockcheck_checker::names::{LINEARIZABILITY, RESOURCE_SAFETY};
use lockcheck_checker::{write_events, Analysis, CheckOptions, Verdict};
use lockcheck_real::schedule::{schedule, split, FaultTargets};
use lockcheck_real::ClientConfig;
use lockcheck_real::{drive, DriveOptions};
use lockcheck_real::{RealRedis, RedisClient, Storage};
use lockcheck_sim::{check_run, run_user, Backend, FaultKind, RunOptions, SimRun, UserEnv};
use lockcheck_workloads::user::{RedisCommands, Uncertain};
use lockcheck_workloads::{Grant, LockClient, Outcome, Workload, WorkloadOptions};

/// The user's lock: the single-Redis recipe of docs/guide.md#redis. `SET NX PX` with a
/// value unique to this grant, then `INCR` for the fencing token; release
/// by compare-and-delete, renew by compare-and-`PEXPIRE`.
struct MyLock<R> {
    redis: R,
    /// Makes lock values unique: the client's name and a per-process nonce.
    owner: String,
    grants: u64,
    /// The bug under test: release by plain `DEL`, whoever holds the lock.
    release_by_del: bool,
}

impl<R: RedisCommands> MyLock<R> {
    fn new(redis: R, owner: String) -> Self {
        MyLock { redis, owner, grants: 0, release_by_del: false }
    }

    fn broken(self) -> Self {
        MyLock { release_by_del: true, ..self }
    }
}

/// A failed command as the history wants it: certainly not done is a
/// failure, maybe done is unknown.
fn failed<T>(uncertain: Uncertain) -> Outcome<T> {
    match uncertain {
        Uncertain::NotSent => Outcome::Fail("unavailable".into()),
        Uncertain::Unknown => Outcome::Info("timeout".into()),
    }
}

/// A compare-and-something's answer: done, or the lock is not ours.
fn held(reply: Result<bool, Uncertain>) -> Outcome<()> {
    match reply {
        Ok(true) => Outcome::Ok(()),
        Ok(false) => Outcome::Fail("not-held".into()),
        Err(uncertain) => failed(uncertain),
    }
}

impl<R: RedisCommands> LockClient for MyLock<R> {
    async fn acquire(&mut self, key: &str, ttl_ms: u64) -> Outcome<Grant> {
        self.grants += 1;
        let value = format!("{}:{}", self.owner, self.grants);
        match self.redis.set_nx_px(&format!("lock:{key}"), &value, ttl_ms).await {
            Ok(true) => {}
            Ok(false) => return Outcome::Fail("busy".into()),
            Err(uncertain) => return failed(uncertain),
        }
        match self.redis.incr(&format!("fence:{key}")).await {
            Ok(fence) => Outcome::Ok(Grant { fence: Some(fence), lease: Some(value) }),
            // Granted, but the token is unknown: give up, the TTL frees it.
            Err(_) => Outcome::Info("fence-lost".into()),
        }
    }

    async fn release(&mut self, key: &str, grant: &Grant) -> Outcome<()> {
        let (lock, value) = (format!("lock:{key}"), grant.lease.clone().unwrap_or_default());
        if self.release_by_del {
            return match self.redis.del(&lock).await {
                Ok(_) => Outcome::Ok(()),
                Err(uncertain) => failed(uncertain),
            };
        }
        held(self.redis.del_if_eq(&lock, &value).await)
    }

    async fn renew(&mut self, key: &str, grant: &Grant, ttl_ms: u64) -> Outcome<()> {
        let value = grant.lease.clone().unwrap_or_default();
        held(self.redis.pexpire_if_eq(&format!("lock:{key}"), &value, ttl_ms).await)
    }

    async fn reset(&mut self) {}
}

// ---- Simulated ----

fn sim_options(seed: u64) -> RunOptions {
    RunOptions {
        backend: Backend::Redis,
        faults: vec![FaultKind::Pause],
        time_limit: Duration::from_secs(30),
        seed,
        ..RunOptions::default()
    }
}

fn correct(env: UserEnv) -> MyLock<lockcheck_sim::SimRedis> {
    MyLock::new(env.redis, env.name)
}

fn broken(env: UserEnv) -> MyLock<lockcheck_sim::SimRedis> {
    correct(env).broken()
}

fn check(run: &SimRun) -> Analysis {
    let options = CheckOptions {
        linearizability_time_limit: Some(Duration::from_secs(60)),
        ..CheckOptions::default()
    };
    check_run(run, &options).expect("the simulator records well-formed histories")
}

fn verdict(analysis: &Analysis, checker: &str) -> Option<Verdict> {
    analysis.result_of(checker).unwrap_or_else(|| panic!("no {checker} result")).verdict
}

fn history(run: &SimRun) -> Vec<u8> {
    let mut bytes = Vec::new();
    write_events(&mut bytes, &run.events).expect("writing to memory cannot fail");
    bytes
}

#[test]
fn the_correct_recipe_keeps_the_resource_safe_under_holder_stalls() {
    for seed in 0..5 {
        let run = run_user(&sim_options(seed), correct).expect("the simulation runs");
        assert!(run.stats.lock_ops > 100, "seed {seed}: only {} lock ops", run.stats.lock_ops);
        let analysis = check(&run);
        assert_eq!(
            verdict(&analysis, RESOURCE_SAFETY),
            Some(Verdict::Valid),
            "seed {seed}: the fenced storage must reject every stale write"
        );
        assert_eq!(
            verdict(&analysis, LINEARIZABILITY),
            Some(Verdict::Valid),
            "seed {seed}: the correct recipe is a linearizable lease"
        );
    }
}

#[test]
fn the_release_by_del_recipe_is_caught() {
    let caught = (0..10).find(|&seed| {
        let run = run_user(&sim_options(seed), broken).expect("the simulation runs");
        let analysis = check(&run);
        verdict(&analysis, LINEARIZABILITY) == Some(Verdict::Invalid)
    });
    assert!(caught.is_some(), "release by DEL must be found not linearizable within 10 seeds");
    eprintln!("release by DEL: not linearizable at seed {caught:?}");
}

#[test]
fn the_same_seed_gives_the_same_history() {
    let first = run_user(&sim_options(3), correct).expect("the simulation runs");
    let second = run_user(&sim_options(3), correct).expect("the simulation runs");
    assert!(!first.events.is_empty());
    assert_eq!(history(&first), history(&second));
}

#[test]
fn run_user_refuses_a_backend_other_than_sim_redis() {
    let options = RunOptions { backend: Backend::Redlock, ..sim_options(0) };
    let error = run_user(&options, correct).expect_err("sim-redlock is refused");
    assert!(error.to_string().contains("sim-redis"), "{error}");
}

// ---- Real ----

fn redis_url() -> String {
    std::env::var("LOCKCHECK_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_string())
}

fn postgres_url() -> String {
    std::env::var("LOCKCHECK_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string())
}

#[tokio::test]
async fn the_correct_recipe_keeps_real_fenced_storage_safe_under_holder_stalls() {
    // Names unique to this process, so that concurrent runs do not meet.
    let prefix = format!("user-api-{}", std::process::id());
    let locks: Vec<String> = (0..2).map(|lock| format!("{prefix}-lock-{lock}")).collect();
    let resources: Vec<String> = (0..2).map(|lock| format!("{prefix}-resource-{lock}")).collect();
    let (redis, postgres) = (redis_url(), postgres_url());
    RedisClient::prepare(&redis, &locks)
        .await
        .unwrap_or_else(|error| panic!("Redis must be reachable at {redis}: {error}"));
    Storage::prepare(&postgres, &resources)
        .await
        .unwrap_or_else(|error| panic!("PostgreSQL must be reachable at {postgres}: {error}"));
    let ttl_ms = 400;
    let deadline = Duration::from_millis(ttl_ms / 4);
    let time_limit = Duration::from_secs(4);
    // Stalls closer together than a run's, for several in 4 s.
    let stalls = FaultTargets { stall_gap_ms: (100, 400), ..FaultTargets::clients(4, ttl_ms) };
    let stalls = split(schedule(&[FaultKind::Pause], &stalls, time_limit, 1)).stalls;
    let options = DriveOptions {
        workload: WorkloadOptions {
            workload: Workload::FencedWrite,
            locks: locks.clone(),
            resources,
            ttl_ms,
            hold_ms: (0, 20),
            think_ms: (0, 40),
            send_fence: true,
            permits: None,
            keepalive_ms: None,
            lock_delay_ms: None,
            protection: Default::default(),
        },
        clients: 4,
        time_limit,
        seed: 1,
        stalls,
    };
    let connect = |logical: u32, _stall| {
        let (redis, postgres) = (redis.clone(), postgres.clone());
        async move {
            let name = format!("client-{logical}");
            let config = ClientConfig {
                name: name.clone(),
                deadline,
                storage_url: postgres,
                fenced_storage: true,
            };
            let store = Storage::connect(&config).await?;
            let redis = RealRedis::connect(&redis, deadline).await?;
            // A nonce keeps lock values unique across processes.
            Ok((MyLock::new(redis, format!("{name}:{}", std::process::id())), store))
        }
    };
    let events = drive(&options, connect).await;
    let cleaned = RedisClient::prepare(&redis, &locks).await;
    let events = events.expect("every client connects");
    cleaned.expect("the test's Redis keys are deleted");
    let options = CheckOptions {
        linearizability_time_limit: Some(Duration::from_secs(60)),
        ..CheckOptions::default()
    };
    let analysis = lockcheck_checker::analyze_events(&events, &options)
        .expect("the recorder writes well-formed histories");
    let writes =
        events.iter().filter(|event| event.f == lockcheck_checker::Function::Write).count();
    assert!(writes > 20, "only {writes} write events: the recipe hardly ran");
    let stalls =
        events.iter().filter(|event| event.process == lockcheck_checker::Process::Nemesis).count();
    assert!(stalls > 0, "the stall nemesis never struck");
    let stale = events.iter().filter(|event| event.error.as_deref() == Some("stale-fence")).count();
    eprintln!("real: {writes} write events, {stalls} stall events, {stale} stale writes refused");
    assert_eq!(
        verdict(&analysis, RESOURCE_SAFETY),
        Some(Verdict::Valid),
        "the fenced storage must reject every stale write: {:?}",
        analysis.results
    );
}
