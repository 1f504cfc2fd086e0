//! Faults, and how the simulator draws them on the schedule both worlds
//! share ([`lockcheck_workloads::schedule`]).

use std::time::Duration;

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::Rng;

use lockcheck_workloads::{Draws, Quiet, StallPoint, Window};
pub use lockcheck_workloads::{FaultKind, Shape};

/// The faults of a default simulated run: every one that strikes the lock
/// service. `pause` and `sigstop` share a slot of the schedule
/// ([`lockcheck_workloads::Slot`]).
pub const DEFAULT_FAULTS: [FaultKind; 6] = lockcheck_workloads::DEFAULT_SIM_FAULTS;

/// Why the simulator cannot carry out `kind`, if it cannot: the faults of
/// real processes, sessions and links.
pub fn refused_in_sim(kind: FaultKind) -> Option<&'static str> {
    match kind {
        FaultKind::SlowClient => Some(
            "slow-client slows one client's links through the real world's proxy: the simulator slows a lock host's (slow-net)",
        ),
        FaultKind::ConnKill => {
            Some("conn-kill ends real SQL sessions: it applies to the postgres-* and mysql-* backends")
        }
        FaultKind::ClientKill => {
            Some("client-kill kills your lock program: it applies to --backend exec")
        }
        _ => None,
    }
}

/// The minority side, and the pairs of lock hosts `shape` cuts apart.
fn split(shape: Shape, servers: u32, rng: &mut SmallRng) -> (Vec<u32>, Vec<(u32, u32)>) {
    let pairs = (0..servers).flat_map(|a| (a + 1..servers).map(move |b| (a, b)));
    let mut minority = match shape {
        Shape::Client | Shape::Ring => Vec::new(),
        Shape::IsolateOne => vec![rng.gen_range(0..servers)],
        Shape::Halves => {
            let mut order: Vec<u32> = (0..servers).collect();
            order.shuffle(rng);
            order.truncate(servers as usize / 2);
            order
        }
    };
    minority.sort_unstable();
    let cuts = match shape {
        Shape::Client => Vec::new(),
        Shape::IsolateOne | Shape::Halves => {
            pairs.filter(|(a, b)| minority.contains(a) != minority.contains(b)).collect()
        }
        Shape::Ring => pairs
            .filter(|&(a, b)| {
                let apart = b - a;
                apart.min(servers - apart) >= 2
            })
            .collect(),
    };
    (minority, cuts)
}

/// One fault switched on at `start` and off at `end`.
#[derive(Debug, Clone, PartialEq)]
pub struct Fault {
    pub start: Duration,
    pub end: Duration,
    pub action: Action,
    /// Which host a server fault strikes: a lock server (Redlock has
    /// five), or past the lock servers a resource's host ([`Targets`])...
    pub server: u32,
    /// ...and how many from there on (a crash may take out several).
    pub spread: u32,
}

/// What a fault does.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Client `client` stalls this long when it next passes point `at`.
    StallClient { client: u32, stall_ms: u64, at: StallPoint },
    /// The lock server reads nothing until `end` (sigstop).
    PauseServer,
    /// The lock server's clock jumps forward by this much at `start`.
    ClockJump { forward_ms: i64 },
    /// The lock server's clock runs this many times as fast until `end`.
    ClockDrift { rate: f64 },
    /// The lock server is down from `start` to `end`.
    Kill,
    /// The lock server's replies, to every client, are each delayed by up
    /// to this much until `end` (slow-net).
    Delay { max_ms: u64 },
    /// Each request or reply is lost with this chance until `end`.
    Loss { probability: f64 },
    /// Client `client`'s clock is off by this much from `start` on.
    SkewClient { client: u32, offset_ms: i64 },
    /// The primary crashes at `start`, losing what it has not shipped, and
    /// its replica takes over; the old primary rejoins as the replica at `end`.
    Failover,
    /// Client `client` cannot reach any lock host until `end` (or, struck
    /// at a resource's host, that host alone).
    IsolateClient { client: u32 },
    /// These pairs of lock hosts cannot reach each other until `end`; the
    /// minority side (none in a ring) is the one cut off.
    SplitServers { shape: Shape, minority: Vec<u32>, cuts: Vec<(u32, u32)> },
}

impl Action {
    /// Whether this fault may strike a resource's host (the queue, the
    /// provider, the payments table) rather than a lock server: every fault
    /// of one server, and a client's partition (cut off from that host
    /// alone). A failover is the lock service's own; a client's stall or
    /// skew and a split among lock servers strike no resource.
    pub fn strikes_resources(&self) -> bool {
        match self {
            Action::PauseServer
            | Action::ClockJump { .. }
            | Action::ClockDrift { .. }
            | Action::Kill
            | Action::Delay { .. }
            | Action::Loss { .. }
            | Action::IsolateClient { .. } => true,
            Action::StallClient { .. }
            | Action::SkewClient { .. }
            | Action::Failover
            | Action::SplitServers { .. } => false,
        }
    }

    pub fn kind(&self) -> FaultKind {
        match self {
            Action::StallClient { .. } => FaultKind::Pause,
            Action::PauseServer => FaultKind::Sigstop,
            Action::ClockJump { .. } | Action::ClockDrift { .. } => FaultKind::Clock,
            Action::Kill => FaultKind::Kill,
            Action::Delay { .. } => FaultKind::SlowNet,
            Action::Loss { .. } => FaultKind::Loss,
            Action::SkewClient { .. } => FaultKind::Skew,
            Action::Failover => FaultKind::Failover,
            Action::IsolateClient { .. } | Action::SplitServers { .. } => FaultKind::Partition,
        }
    }
}

/// How often faults strike: the mean pause between two, and how long one lasts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rates {
    pub gap_ms: (u64, u64),
    pub quiet_start: Duration,
    pub quiet_end: Duration,
}

/// The shape of the system the faults strike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Targets {
    pub clients: u32,
    pub servers: u32,
    pub ttl_ms: u64,
    /// A crashed server stays down at least this long (Redlock's delayed
    /// restart: longer than any lease it may have granted).
    pub min_down_ms: u64,
    /// The lock hosts talk among themselves (a consensus cluster).
    pub cluster: bool,
    /// Hosts of the protected side that a server fault or a client's
    /// partition may strike instead of a lock host: the payments
    /// workload's queue, provider and table. Their indices follow the lock
    /// servers' (`servers..servers + resources`).
    pub resources: u32,
}

/// The faults of one run, on the schedule both worlds share
/// ([`lockcheck_workloads::schedule`]): after a quiet start, a fault is on,
/// then off for a while, and so on; every fault is healed a quiet period
/// before the end.
pub fn schedule(
    kinds: &[FaultKind],
    shapes: &[Shape],
    pause_at: &[StallPoint],
    rates: Rates,
    time_limit: Duration,
    targets: Targets,
    rng: &mut SmallRng,
) -> Vec<Fault> {
    let mut shapes: Vec<Shape> = shapes
        .iter()
        .copied()
        .filter(|shape| shape.applies(targets.servers, targets.cluster))
        .collect();
    shapes.sort();
    shapes.dedup();
    if shapes.is_empty() {
        shapes.push(Shape::Client);
    }
    // The faults of real processes, sessions and links have no simulated
    // executor.
    let kinds: Vec<FaultKind> =
        kinds.iter().copied().filter(|&kind| refused_in_sim(kind).is_none()).collect();
    let quiet = Quiet { start: rates.quiet_start, end: rates.quiet_end };
    let pause_at =
        if pause_at.is_empty() { vec![StallPoint::AfterGrant] } else { pause_at.to_vec() };
    let draws = SimDraws { targets, shapes, pause_at, gap_ms: rates.gap_ms };
    lockcheck_workloads::schedule(&kinds, quiet, time_limit, &draws, rng)
}

/// How the simulator draws each fault. The order of the draws is part of
/// every seed's history: a change here changes the pinned golden runs.
struct SimDraws {
    targets: Targets,
    /// The partition shapes that apply, sorted; at least `client`.
    shapes: Vec<Shape>,
    /// Where a client's stall may strike, sorted; at least one.
    pause_at: Vec<StallPoint>,
    gap_ms: (u64, u64),
}

impl Draws for SimDraws {
    type Action = Action;
    type Fault = Fault;

    fn action(&self, kind: FaultKind, rng: &mut SmallRng) -> (Action, Duration) {
        let (action, length_ms) = self.action_ms(kind, rng);
        (action, Duration::from_millis(length_ms))
    }

    fn targets(&self, action: Action, window: Window, rng: &mut SmallRng) -> Fault {
        let Targets { servers, cluster, resources, .. } = self.targets;
        // A fault that strikes one host may strike a resource's as well as
        // a lock server's; a run without resources draws as it always did.
        let hosts = if action.strikes_resources() { servers + resources } else { servers };
        // Drawn only where there is a choice, so single-server runs keep
        // their histories.
        let server = if hosts > 1 { rng.gen_range(0..hosts) } else { 0 };
        // A crash may take out several servers at once (a rack losing
        // power): up to a majority of independent instances, which is what
        // breaks Redlock, but only a minority of a consensus cluster, which
        // is built to survive fewer than half of its members failing. With a
        // majority of a cluster down, every holder is cut off from it and
        // its lease runs out while it believes (the partition `client`
        // shape's finding, not a crash's: sim-etcd kill seed 1445 once took
        // out two of three members).
        let spread = if servers > 1 && server < servers && action == Action::Kill {
            let most = if cluster { (servers - 1) / 2 } else { servers / 2 + 1 };
            if !cluster && self.targets.min_down_ms == 0 {
                // Aimed where it breaks: independent instances that come
                // back at once, empty, are all a majority needs to forget.
                most
            } else {
                rng.gen_range(1..=most.max(1))
            }
        } else {
            1
        };
        Fault { start: window.start, end: window.end, action, server, spread }
    }

    fn gap(&self, _: &Fault, rng: &mut SmallRng) -> Duration {
        let (low, high) = self.gap_ms;
        Duration::from_millis(rng.gen_range(low..=high.max(low)))
    }
}

impl SimDraws {
    /// A fault of `kind`'s action and length in ms.
    fn action_ms(&self, kind: FaultKind, rng: &mut SmallRng) -> (Action, u64) {
        let Targets { clients, servers, ttl_ms, min_down_ms, .. } = self.targets;
        let ttl = ttl_ms.max(1);
        match kind {
            // With sigstop on too, the schedule's coin chose a client's
            // stall over the server's ([`lockcheck_workloads::Slot`]).
            FaultKind::Pause => {
                let stall_ms = rng.gen_range(ttl * 3 / 2..=ttl * 3);
                let client = rng.gen_range(0..clients.max(1));
                // Drawn only where there is a choice.
                let at = match self.pause_at.as_slice() {
                    [one] => *one,
                    points => points[rng.gen_range(0..points.len())],
                };
                (Action::StallClient { client, stall_ms, at }, stall_ms)
            }
            FaultKind::Sigstop => (Action::PauseServer, rng.gen_range(ttl / 2..=ttl * 2)),
            FaultKind::Clock if rng.gen_bool(0.6) => {
                (Action::ClockJump { forward_ms: rng.gen_range(ttl / 2..=ttl * 2) as i64 }, ttl)
            }
            FaultKind::Clock => {
                (Action::ClockDrift { rate: rng.gen_range(1.5..4.0) }, rng.gen_range(ttl..=ttl * 3))
            }
            FaultKind::Kill if min_down_ms == 0 && servers > 1 => {
                // Restarting at once, having forgotten its keys: Redlock
                // without a delayed restart.
                (Action::Kill, rng.gen_range(ttl / 20..=ttl / 5).max(1))
            }
            FaultKind::Kill => (Action::Kill, rng.gen_range(ttl / 4..=ttl * 2).max(min_down_ms)),
            FaultKind::SlowNet => (
                Action::Delay { max_ms: rng.gen_range(ttl / 10..=ttl / 2).max(1) },
                rng.gen_range(ttl..=ttl * 3),
            ),
            FaultKind::Loss => (
                Action::Loss { probability: rng.gen_range(0.05..0.4) },
                rng.gen_range(ttl..=ttl * 3),
            ),
            FaultKind::Partition => (self.partition(rng), rng.gen_range(ttl..=ttl * 3)),
            // The old primary stays down this long before rejoining.
            FaultKind::Failover => (Action::Failover, rng.gen_range(ttl / 4..=ttl * 2).max(1)),
            FaultKind::ConnKill | FaultKind::ClientKill | FaultKind::SlowClient => {
                unreachable!("left out of the kinds: {kind:?} has no simulated executor")
            }
            FaultKind::Skew => {
                let offset_ms = rng.gen_range(-(ttl as i64) * 5..=ttl as i64 * 5);
                (
                    Action::SkewClient { client: rng.gen_range(0..clients.max(1)), offset_ms },
                    rng.gen_range(ttl..=ttl * 3),
                )
            }
        }
    }

    /// A partition's action: its shape, then whom it cuts off.
    fn partition(&self, rng: &mut SmallRng) -> Action {
        let Targets { clients, servers, .. } = self.targets;
        // Drawn only where there is a choice, so the histories of
        // single-server runs stay as they were.
        let shape = if self.shapes.len() > 1 {
            self.shapes[rng.gen_range(0..self.shapes.len())]
        } else {
            self.shapes[0]
        };
        match shape {
            Shape::Client => Action::IsolateClient { client: rng.gen_range(0..clients.max(1)) },
            shape => {
                let (minority, cuts) = split(shape, servers, rng);
                Action::SplitServers { shape, minority, cuts }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;
    use crate::run::run;
    use lockcheck_workloads::RunOptions;

    fn actions(kinds: &[FaultKind], seed: u64) -> Vec<Action> {
        let rates = Rates {
            gap_ms: (500, 3000),
            quiet_start: Duration::from_secs(1),
            quiet_end: Duration::from_secs(3),
        };
        let targets = Targets {
            clients: 5,
            servers: 1,
            ttl_ms: 1000,
            min_down_ms: 0,
            cluster: false,
            resources: 0,
        };
        let time_limit = Duration::from_secs(300);
        let mut rng = SmallRng::seed_from_u64(seed);
        schedule(kinds, &[], &[], rates, time_limit, targets, &mut rng)
            .into_iter()
            .map(|fault| fault.action)
            .collect()
    }

    #[test]
    fn pause_stalls_a_client_and_sigstop_the_lock_server() {
        let client = |action: &Action| matches!(action, Action::StallClient { .. });
        let pauses = actions(&[FaultKind::Pause], 1);
        assert!(!pauses.is_empty() && pauses.iter().all(client), "{pauses:?}");
        let sigstops = actions(&[FaultKind::Sigstop], 1);
        assert!(!sigstops.is_empty(), "{sigstops:?}");
        assert!(sigstops.iter().all(|action| *action == Action::PauseServer), "{sigstops:?}");
        // Both on: one slot, a client's stall more often than the server's.
        let both = actions(&[FaultKind::Pause, FaultKind::Sigstop], 1);
        let clients = both.iter().filter(|action| client(action)).count();
        let servers = both.iter().filter(|action| **action == Action::PauseServer).count();
        assert_eq!(clients + servers, both.len());
        assert!(servers > 0 && clients > servers, "{clients} {servers}");
        assert_eq!(Action::PauseServer.kind(), FaultKind::Sigstop);
        assert_eq!(pauses[0].kind(), FaultKind::Pause);
        assert!(refused_in_sim(FaultKind::Sigstop).is_none());
        assert!(refused_in_sim(FaultKind::SlowClient).is_some_and(|why| why.contains("slow-net")));
    }

    #[test]
    fn a_run_names_the_fault_that_struck() {
        let options = RunOptions {
            faults: vec![FaultKind::Sigstop, FaultKind::Pause],
            time_limit: Duration::from_secs(30),
            seed: 4,
            ..RunOptions::default()
        };
        let sim = run(&options).expect("the simulation runs");
        let mut named = std::collections::BTreeMap::new();
        for event in &sim.events {
            let Some(value) = &event.value else { continue };
            let value: serde_json::Value = serde_json::from_str(value.get()).unwrap();
            if let Some(fault) = value["fault"].as_str() {
                let client = value["targets"][0].as_str().unwrap_or("").starts_with("client-");
                named.insert((fault.to_string(), client), ());
            }
        }
        let named: Vec<(String, bool)> = named.into_keys().collect();
        assert_eq!(named, [("pause".to_string(), true), ("sigstop".to_string(), false)]);
    }
}
