//! The lock-ordering workloads: every client takes two locks and holds both
//! a while. Taken in one fixed order (`lock-order`: the lower-numbered lock
//! first), no two clients can each hold what the other waits for. Taken in
//! opposite orders (`lock-order-opposite`: every other client starts with
//! the higher-numbered lock), two clients can: each holds its first lock
//! and waits for the other's, a deadlock that lasts until a wait gives up
//! or the server, which sees both waits, refuses one.
//!
//! Each take is one recorded `acquire` whose invoke says how long it waits
//! (`"wait_ms"`): a third of the TTL; the work lasts at most as long, so
//! that the first lock's lease, taken before the wait, outlives the wait
//! and the work with no renewal. The wait is the
//! recipe's own where its server can wait ([`LockClient::acquire_waiting`]),
//! else asks again until it is over. It ends `fail` `timeout`, or `fail`
//! `deadlock: <the server's words>` when the server found the wait in a
//! deadlock and refused it; either way the client lets go of what it holds
//! and starts its turn again.

use lockcheck_checker::{EventType, Function};
use rand::rngs::SmallRng;
use rand::Rng;
use serde_json::{json, Value};

use crate::client::{Grant, LockClient, Outcome};
use crate::recorder::{record_client, SharedRecorder};
use crate::stall::{Stall, StallPoint};
use crate::workload::{
    acquire_value, grant_value, pause, work, ClientPlan, Workload, WorkloadOptions,
};

/// How long a take waits for its lock: a third of the TTL.
pub fn wait_ms(ttl_ms: u64) -> u64 {
    (ttl_ms / 3).max(1)
}

/// The two locks of a turn, in the order this client takes them: two
/// distinct locks drawn from `count`, the lower first, or the higher first
/// for every other client of the opposite-orders workload.
fn turn_order(rng: &mut SmallRng, count: usize, opposite: bool) -> [usize; 2] {
    let first = rng.gen_range(0..count);
    let mut second = rng.gen_range(0..count - 1);
    if second >= first {
        second += 1;
    }
    let (low, high) = (first.min(second), first.max(second));
    if opposite {
        [high, low]
    } else {
        [low, high]
    }
}

/// Runs one client of `lock-order` or `lock-order-opposite` until
/// `plan.until`. Needs two locks or more (the run's options refuse fewer).
pub(crate) async fn run_lock_order<C: LockClient>(
    client: &mut C,
    plan: &ClientPlan,
    options: &WorkloadOptions,
    mut rng: SmallRng,
    recorder: &SharedRecorder,
    stall: &Stall,
) {
    if options.locks.len() < 2 {
        return;
    }
    let opposite = options.workload == Workload::LockOrderOpposite && plan.logical % 2 == 1;
    let wait_ms = wait_ms(options.ttl_ms);
    let mut invoke_value = acquire_value(options);
    invoke_value["wait_ms"] = json!(wait_ms);
    let mut process = i64::from(plan.logical);
    stall.set_process(process);
    let record = |process: i64, event_type, f, key: &str, value, error: Option<&str>| {
        record_client(recorder, process, event_type, f, key, value, error)
    };
    // Records a completion; true when its outcome is unknown: the process
    // is then finished, and the client goes on as a new one, on a new
    // session, holding nothing it knows of.
    let complete = |process: &mut i64, f: Function, key: &str, outcome: Outcome<Value>| {
        match outcome {
            Outcome::Ok(value) => record(*process, EventType::Ok, f, key, value, None),
            Outcome::Fail(error) => {
                record(*process, EventType::Fail, f, key, Value::Null, Some(&error))
            }
            Outcome::Info(error) => {
                record(*process, EventType::Info, f, key, Value::Null, Some(&error));
                *process += i64::from(plan.clients);
                stall.set_process(*process);
                return true;
            }
        }
        false
    };
    'turns: while tokio::time::Instant::now() < plan.until {
        stall.set_holding(false);
        pause(&mut rng, options.think_ms).await;
        let mut held: Vec<(&str, Grant)> = Vec::with_capacity(2);
        for at in turn_order(&mut rng, options.locks.len(), opposite) {
            let lock = options.locks[at].as_str();
            record(process, EventType::Invoke, Function::Acquire, lock, invoke_value.clone(), None);
            let outcome = client.acquire_waiting(lock, options.ttl_ms, wait_ms).await;
            let grant = match &outcome {
                Outcome::Ok(grant) => Some(grant.clone()),
                _ => None,
            };
            if complete(&mut process, Function::Acquire, lock, outcome.map(|g| grant_value(&g))) {
                client.reset().await;
                continue 'turns;
            }
            // Refused, or given up waiting: let go of what is held.
            let Some(grant) = grant else { break };
            stall.set_holding(true);
            held.push((lock, grant));
        }
        if held.len() == 2 {
            // The classic pause: both locks granted, the work not yet done.
            stall.strike(StallPoint::AfterGrant).await;
            // No renewal in a turn: the work ends within a third of the
            // TTL, so that the first lock's lease outlives wait and work.
            let cap = wait_ms;
            work(&mut rng, (options.hold_ms.0.min(cap), options.hold_ms.1.min(cap)), stall).await;
        }
        // Let go in the reverse order of taking.
        while let Some((lock, grant)) = held.pop() {
            stall.strike(StallPoint::BeforeRelease).await;
            if held.is_empty() {
                stall.set_holding(false);
            }
            record(process, EventType::Invoke, Function::Release, lock, grant_value(&grant), None);
            let outcome = client.release(lock, &grant).await.map(|()| Value::Null);
            if complete(&mut process, Function::Release, lock, outcome) {
                client.reset().await;
                continue 'turns;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn a_turn_takes_two_distinct_locks_in_its_order() {
        let mut rng = SmallRng::seed_from_u64(7);
        for _ in 0..1000 {
            let [first, second] = turn_order(&mut rng, 3, false);
            assert!(first < second && second < 3);
            let [first, second] = turn_order(&mut rng, 3, true);
            assert!(first > second && first < 3);
        }
        assert_eq!(turn_order(&mut rng, 2, false), [0, 1]);
        assert_eq!(turn_order(&mut rng, 2, true), [1, 0]);
    }
}
