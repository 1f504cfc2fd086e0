//! A real run's faults, every kind drawn from one seeded schedule, the one
//! the simulator draws from too ([`lockcheck_workloads::schedule()`]): a
//! single list of timed faults that never overlap, healed before the quiet
//! end. [`split`] hands it out among the executors, which carry out their
//! parts concurrently: the driver's stalls ([`crate::drive`]), the server
//! faults ([`crate::nemesis`]), the network's ([`crate::netfault`]), the
//! failovers ([`crate::failover`]) and the program kills (`exec.rs`).

use std::time::Duration;

use lockcheck_workloads::{Draws, FaultKind, Quiet, Shape, StallPoint, StallPoints, Window};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::driver::StallFault;
use crate::exec::ProgramKill;
use crate::failover::Failover;
use crate::nemesis::{ServerAction, ServerFault};
use crate::netfault::{NetFault, NetKind};

/// Mixed into the run's seed for its faults, so that their draws are not
/// the clients' (the driver seeds the clients with the run's seed).
const FAULT_SEED: u64 = 0x5e47_e4fa_0175;

/// What a real run's faults strike.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultTargets {
    pub clients: u32,
    pub ttl_ms: u64,
    /// The lock servers lockcheck manages: what sigstop, kill and clock
    /// strike.
    pub lock_servers: usize,
    /// Servers of the protected side lockcheck manages (the payments
    /// workload's PostgreSQL: its queue, its table, the provider's keys),
    /// which sigstop and kill strike too: their indices follow the lock
    /// servers'.
    pub resource_servers: usize,
    /// No client takes a lock (a payments run protected otherwise): a
    /// sigstop or a kill strikes a resource's server, not an idle lock
    /// server.
    pub locks_unused: bool,
    /// A killed server stays down at least this long (Redlock's delayed
    /// restart, or the restart delay asked for).
    pub min_down: Duration,
    /// A kill takes out a majority of the lock servers at once (Redlock).
    pub kills_a_majority: bool,
    /// Cluster members whose peer links go through the proxy
    /// ([`crate::netfault::Topology::members`]).
    pub members: usize,
    /// The partition shapes on; those that split nothing here are left out.
    pub shapes: Vec<Shape>,
    /// The quiet time after a stall, uniform, in ms: the simulator's rates.
    pub stall_gap_ms: (u64, u64),
    /// Where a client's stall may strike (drawn per stall when several).
    pub pause_at: Vec<StallPoint>,
    /// Where the stalls strike in turn, when `pause_at` has more than one
    /// point: stall `i` at `turns[i % turns.len()]` if `pause_at` has it,
    /// else at a point drawn from the rest (`None`: drawn from all but the
    /// turns' points). Empty: every stall's point is drawn. A program's
    /// ([`PROGRAM_TURNS`]) gives every other stall to the point between
    /// two round trips of an operation, which lockcheck reaches only
    /// through the proxy, since it cannot see inside the program.
    pub turns: &'static [Option<StallPoint>],
}

/// The turns of a program's stalls: between commands, before a renewal,
/// between commands, then a point drawn from the rest. A renewal after a
/// stall is where a renewal without a compare shows, and a program's
/// renewals come only when the workload asks.
pub const PROGRAM_TURNS: &[Option<StallPoint>] = &[
    Some(StallPoint::BetweenCommands),
    Some(StallPoint::BeforeRenew),
    Some(StallPoint::BetweenCommands),
    None,
];

impl FaultTargets {
    /// `clients` holding leases of `ttl_ms`, with no lock server to strike
    /// and no partition shape on.
    pub fn clients(clients: u32, ttl_ms: u64) -> FaultTargets {
        FaultTargets {
            clients,
            ttl_ms,
            lock_servers: 0,
            resource_servers: 0,
            locks_unused: false,
            min_down: Duration::ZERO,
            kills_a_majority: false,
            members: 0,
            shapes: Vec::new(),
            stall_gap_ms: (500, 3000),
            pause_at: StallPoint::ALL.to_vec(),
            turns: &[],
        }
    }

    /// The partition shapes on that split something among the members.
    fn shapes_that_apply(&self) -> Vec<Shape> {
        let members = self.members as u32;
        self.shapes.iter().copied().filter(|shape| shape.applies(members, true)).collect()
    }

    /// Whether a fault of `kind` has anything to strike here.
    fn applies(&self, kind: FaultKind) -> bool {
        match kind {
            FaultKind::Pause
            | FaultKind::SlowNet
            | FaultKind::SlowClient
            | FaultKind::ClientKill => self.clients > 0,
            FaultKind::Partition => self.clients > 0 && !self.shapes_that_apply().is_empty(),
            FaultKind::Sigstop | FaultKind::Kill => self.lock_servers + self.resource_servers > 0,
            FaultKind::Clock => self.lock_servers > 0,
            // Sessions are ended on servers given by URL too; a failover
            // strikes the Redis pair, which the plan asks for.
            FaultKind::ConnKill | FaultKind::Failover => true,
            // Simulated only: the plan refuses them.
            FaultKind::Loss | FaultKind::Skew => false,
        }
    }
}

/// One real fault, as its executor takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RealFault {
    /// A client stalls at its next grant (pause).
    Stall(StallFault),
    /// Sigstop, kill, conn-kill, a clock jump or drift.
    Server(ServerFault),
    /// A partition, or slow links (a lock server's, a client's).
    Net(NetFault),
    Failover(Failover),
    /// A client's program killed (client-kill): over as soon as it starts.
    ClientKill(ProgramKill),
}

impl RealFault {
    /// How long the fault may wait for its aim, where it is aimed: a
    /// stall, a server fault, a network fault.
    fn set_slack(&mut self, slack: Duration) {
        match self {
            RealFault::Stall(fault) => fault.slack = slack,
            RealFault::Server(fault) => fault.slack = slack,
            RealFault::Net(fault) => fault.slack = slack,
            RealFault::Failover(_) | RealFault::ClientKill(_) => {}
        }
    }

    /// When the fault is on, from the test's start.
    pub fn window(&self) -> Window {
        let (start, end) = match self {
            RealFault::Stall(fault) => (fault.start, fault.end),
            RealFault::Server(fault) => (fault.start, fault.end),
            RealFault::Net(fault) => (fault.start, fault.end),
            RealFault::Failover(failover) => (failover.start, failover.end),
            RealFault::ClientKill(kill) => (kill.at, kill.at),
        };
        Window { start, end }
    }
}

/// The faults of a run of `time_limit` with `seed`, each of one of `kinds`
/// that has something to strike: after a quiet second (at most a tenth of
/// the run), one fault, a gap, the next; all are over a quiet period (3
/// TTLs, at most a fifth of the run) before the end, so the clients
/// recover while the test runs.
pub fn schedule(
    kinds: &[FaultKind],
    targets: &FaultTargets,
    time_limit: Duration,
    seed: u64,
) -> Vec<RealFault> {
    let kinds: Vec<FaultKind> =
        kinds.iter().copied().filter(|&kind| targets.applies(kind)).collect();
    let quiet = Quiet {
        start: Duration::from_secs(1).min(time_limit / 10),
        end: Duration::from_millis(targets.ttl_ms.saturating_mul(3)).min(time_limit / 5),
    };
    let draws =
        RealDraws { targets, shapes: targets.shapes_that_apply(), stalls: Default::default() };
    let mut rng = SmallRng::seed_from_u64(seed ^ FAULT_SEED);
    let mut faults = lockcheck_workloads::schedule(&kinds, quiet, time_limit, &draws, &mut rng);
    // How long each may wait for its aim: at most two TTLs, and half the
    // gap after it.
    let windows: Vec<Window> = faults.iter().map(RealFault::window).collect();
    let cap = Duration::from_millis(targets.ttl_ms.saturating_mul(2));
    let slack = lockcheck_workloads::slack(&windows, time_limit.saturating_sub(quiet.end), cap);
    for (fault, slack) in faults.iter_mut().zip(slack) {
        fault.set_slack(slack);
    }
    faults
}

/// A run's faults, split by executor, each part in time order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Parts {
    pub stalls: Vec<StallFault>,
    pub server: Vec<ServerFault>,
    pub net: Vec<NetFault>,
    pub failovers: Vec<Failover>,
    pub kills: Vec<ProgramKill>,
}

/// Hands `faults` out among their executors.
pub fn split(faults: Vec<RealFault>) -> Parts {
    let mut parts = Parts::default();
    for fault in faults {
        match fault {
            RealFault::Stall(stall) => parts.stalls.push(stall),
            RealFault::Server(fault) => parts.server.push(fault),
            RealFault::Net(fault) => parts.net.push(fault),
            RealFault::Failover(failover) => parts.failovers.push(failover),
            RealFault::ClientKill(kill) => parts.kills.push(kill),
        }
    }
    parts
}

/// What a real fault does, drawn before whom it strikes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Stall {
        stall_ms: u64,
        at: StallPoint,
    },
    /// A clock fault moves the clocks by `jump_ms` (0 for the others).
    Server {
        action: ServerAction,
        jump_ms: u64,
    },
    Partition(Shape),
    /// Every client's links to a lock server (slow-net).
    SlowNet {
        delay_ms: u64,
    },
    /// One client's links (slow-client).
    SlowClient {
        delay_ms: u64,
    },
    Failover {
        lag: Duration,
    },
    ClientKill,
}

/// How the real world draws each fault, in TTLs: a fault must outlast a
/// lease to show what a holder does once its lease is gone.
struct RealDraws<'a> {
    targets: &'a FaultTargets,
    /// The partition shapes that apply.
    shapes: Vec<Shape>,
    /// Stalls drawn so far.
    stalls: std::cell::Cell<u64>,
}

impl Draws for RealDraws<'_> {
    type Action = Action;
    type Fault = RealFault;

    fn action(&self, kind: FaultKind, rng: &mut SmallRng) -> (Action, Duration) {
        let ttl = self.ttl_ms();
        let ms = Duration::from_millis;
        match kind {
            // A stall outlasts the lease: the holder wakes after another
            // client took the lock.
            FaultKind::Pause => {
                let stall_ms = rng.gen_range(ttl * 3 / 2..=ttl * 3);
                let drawn = self.stalls.replace(self.stalls.get() + 1);
                let points = self.targets.pause_at.as_slice();
                let turns = self.targets.turns;
                let turn = match (points.len() > 1, turns.len()) {
                    (true, count) if count > 0 => turns[(drawn % count as u64) as usize],
                    _ => None,
                };
                // The turns' own points, where the rest are drawn from.
                let others: Vec<StallPoint> = points
                    .iter()
                    .copied()
                    .filter(|point| points.len() < 2 || !turns.contains(&Some(*point)))
                    .collect();
                // Drawn only where there is a choice.
                let at = match (turn.filter(|point| points.contains(point)), others.as_slice()) {
                    (Some(point), _) => point,
                    (None, []) if points.is_empty() => StallPoint::AfterGrant,
                    (None, []) => points[rng.gen_range(0..points.len())],
                    (None, [one]) => *one,
                    (None, others) => others[rng.gen_range(0..others.len())],
                };
                (Action::Stall { stall_ms, at }, ms(stall_ms))
            }
            FaultKind::Sigstop | FaultKind::Kill | FaultKind::ConnKill | FaultKind::Clock => {
                self.server_action(kind, rng)
            }
            // A cut-off holder's lease must run out within the partition.
            FaultKind::Partition => {
                let shape = self.shapes[rng.gen_range(0..self.shapes.len())];
                (Action::Partition(shape), ms(rng.gen_range(ttl..=ttl * 3)))
            }
            // One-way latencies past the clients' deadlines (a quarter TTL).
            FaultKind::SlowNet | FaultKind::SlowClient => {
                let delay_ms = rng.gen_range(ttl / 10..=ttl).max(1);
                let action = match kind {
                    FaultKind::SlowNet => Action::SlowNet { delay_ms },
                    _ => Action::SlowClient { delay_ms },
                };
                (action, ms(rng.gen_range(ttl..=ttl * 3)))
            }
            // The replication link is held for the lag, then the old
            // primary stays down.
            FaultKind::Failover => {
                let lag = ms(rng.gen_range(ttl / 4..=ttl));
                let down = ms(rng.gen_range(ttl / 2..=ttl * 2));
                (Action::Failover { lag }, lag + down)
            }
            // The client restarts its program by itself.
            FaultKind::ClientKill => (Action::ClientKill, Duration::ZERO),
            FaultKind::Loss | FaultKind::Skew => {
                unreachable!("left out of the kinds: {kind:?} has no real executor")
            }
        }
    }

    fn targets(&self, action: Action, window: Window, rng: &mut SmallRng) -> RealFault {
        let Window { start, end } = window;
        match action {
            Action::Stall { stall_ms, at } => {
                let client = self.client(rng);
                let (slack, points) = (Duration::ZERO, StallPoints::of(&self.targets.pause_at));
                RealFault::Stall(StallFault { start, end, client, stall_ms, at, slack, points })
            }
            Action::Server { action, jump_ms } => {
                let servers = self.servers_struck(action, rng);
                let slack = Duration::ZERO;
                RealFault::Server(ServerFault { start, end, action, servers, jump_ms, slack })
            }
            Action::Partition(shape) => {
                let kind = self.partition(shape, rng);
                RealFault::Net(NetFault { start, end, kind, slack: Duration::ZERO })
            }
            Action::SlowNet { delay_ms } => {
                // The lock server struck, among those of the topology.
                let kind = NetKind::SlowServer { server: rng.gen(), delay_ms };
                RealFault::Net(NetFault { start, end, kind, slack: Duration::ZERO })
            }
            Action::SlowClient { delay_ms } => {
                let kind = NetKind::SlowClient { client: self.client(rng), delay_ms };
                RealFault::Net(NetFault { start, end, kind, slack: Duration::ZERO })
            }
            Action::Failover { lag } => RealFault::Failover(Failover { start, lag, end }),
            Action::ClientKill => {
                RealFault::ClientKill(ProgramKill { at: start, client: self.client(rng) })
            }
        }
    }

    fn gap(&self, fault: &RealFault, rng: &mut SmallRng) -> Duration {
        let (low, high) = match fault {
            RealFault::Stall(_) => self.targets.stall_gap_ms,
            _ => (self.ttl_ms(), self.ttl_ms() * 3),
        };
        Duration::from_millis(rng.gen_range(low..=high.max(low)))
    }
}

impl RealDraws<'_> {
    /// The TTL the draws scale, at least 4 ms so that a quarter of it is
    /// not 0.
    fn ttl_ms(&self) -> u64 {
        self.targets.ttl_ms.max(4)
    }

    fn client(&self, rng: &mut SmallRng) -> u32 {
        rng.gen_range(0..self.targets.clients)
    }

    /// A server fault lasts half a TTL to two TTLs (a kill at least the
    /// minimum down time); a clock fault moves the clocks one to three TTLs
    /// ahead, beyond any lease still running: a jump at once, a drift over
    /// a third to half a TTL, running 3 to 10 times fast (a slower one
    /// expires a fresh lease only after its holder's work is done).
    fn server_action(&self, kind: FaultKind, rng: &mut SmallRng) -> (Action, Duration) {
        let ttl = self.ttl_ms();
        let action = match kind {
            FaultKind::Sigstop => ServerAction::Pause,
            FaultKind::Kill => ServerAction::Kill,
            FaultKind::ConnKill => ServerAction::ConnKill,
            _ if rng.gen_bool(0.5) => ServerAction::ClockJump,
            _ => ServerAction::ClockDrift,
        };
        let mut length = Duration::from_millis(match action {
            ServerAction::ClockDrift => rng.gen_range(ttl / 3..=ttl / 2),
            _ => rng.gen_range(ttl / 2..=ttl * 2),
        });
        if action == ServerAction::Kill {
            length = length.max(self.targets.min_down);
        }
        let jump_ms = match action {
            ServerAction::ClockJump | ServerAction::ClockDrift => rng.gen_range(ttl..=ttl * 3),
            _ => 0,
        };
        (Action::Server { action, jump_ms }, length)
    }

    /// The lock servers `action` strikes, from a random one on: none for
    /// conn-kill (the SQL server ends the sessions); a kill takes out up to
    /// a majority at once (always a majority where the backend asks: a
    /// Redlock lock is held on a majority); a clock fault a minority.
    ///
    /// A sigstop or a kill may strike a resource's server instead, alone
    /// (drawn only in a run that has one, so that the others keep their
    /// draws).
    fn servers_struck(&self, action: ServerAction, rng: &mut SmallRng) -> Vec<usize> {
        let servers = self.targets.lock_servers;
        if action == ServerAction::ConnKill {
            return Vec::new();
        }
        let resources = match action {
            ServerAction::Pause | ServerAction::Kill => self.targets.resource_servers,
            _ => 0,
        };
        let first = match resources {
            0 => rng.gen_range(0..servers),
            _ if self.targets.locks_unused => servers + rng.gen_range(0..resources),
            _ => rng.gen_range(0..servers + resources),
        };
        if first >= servers {
            return vec![first];
        }
        let spread = match action {
            ServerAction::Kill if self.targets.kills_a_majority => servers / 2 + 1,
            ServerAction::Kill if servers > 1 => rng.gen_range(1..=servers / 2 + 1),
            ServerAction::ClockJump | ServerAction::ClockDrift if servers > 4 => {
                rng.gen_range(1..=(servers - 1) / 2)
            }
            _ => 1,
        };
        (0..spread).map(|at| (first + at) % servers).collect()
    }

    /// Whom a partition of `shape` cuts off: a client, or a minority of the
    /// members (none in a ring, where every member misses two others).
    fn partition(&self, shape: Shape, rng: &mut SmallRng) -> NetKind {
        let members = self.targets.members;
        match shape {
            Shape::Client => NetKind::ClientCut { client: self.client(rng) },
            Shape::Ring => NetKind::Members { shape, minority: Vec::new() },
            Shape::IsolateOne | Shape::Halves => {
                let size = match shape {
                    Shape::IsolateOne => 1,
                    _ => rng.gen_range(1..=(members - 1) / 2),
                };
                let first = rng.gen_range(0..members);
                let minority = (0..size).map(|at| (first + at) % members).collect();
                NetKind::Members { shape, minority }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: Duration = Duration::from_secs(30);
    /// 30 s less the quiet end of 3 TTLs of 500 ms.
    const LAST: Duration = Duration::from_millis(30_000 - 1_500);

    fn servers(lock_servers: usize, min_down_ms: u64) -> FaultTargets {
        FaultTargets {
            lock_servers,
            min_down: Duration::from_millis(min_down_ms),
            ..FaultTargets::clients(4, 500)
        }
    }

    fn cluster(members: usize) -> FaultTargets {
        FaultTargets { members, shapes: Shape::ALL.to_vec(), ..FaultTargets::clients(4, 500) }
    }

    fn server_faults(kinds: &[FaultKind], targets: &FaultTargets, seed: u64) -> Vec<ServerFault> {
        split(schedule(kinds, targets, LIMIT, seed)).server
    }

    #[test]
    fn a_programs_stalls_take_their_turns_and_the_rest_are_drawn_as_before() {
        let points = |targets: &FaultTargets, seed| -> Vec<StallPoint> {
            let stalls = split(schedule(&[FaultKind::Pause], targets, LIMIT, seed)).stalls;
            stalls.iter().map(|stall| stall.at).collect()
        };
        let program = FaultTargets { turns: PROGRAM_TURNS, ..FaultTargets::clients(4, 500) };
        let turns = [StallPoint::BetweenCommands, StallPoint::BeforeRenew];
        for seed in 0..20 {
            let drawn = points(&program, seed);
            assert!(drawn.len() >= 4, "seed {seed}: {drawn:?}");
            for (at, point) in drawn.iter().enumerate() {
                match at % 4 {
                    0 | 2 => assert_eq!(*point, StallPoint::BetweenCommands, "seed {seed}"),
                    1 => assert_eq!(*point, StallPoint::BeforeRenew, "seed {seed}"),
                    _ => assert!(!turns.contains(point), "drawn from the rest: {drawn:?}"),
                }
            }
            // Asked for one point, or for points without the turns': as
            // drawn with no turns.
            let one = FaultTargets { pause_at: vec![StallPoint::AfterGrant], ..program.clone() };
            assert!(points(&one, seed).iter().all(|&point| point == StallPoint::AfterGrant));
            let without = FaultTargets {
                pause_at: vec![StallPoint::AfterGrant, StallPoint::InFlight],
                ..program.clone()
            };
            let plain = FaultTargets { turns: &[], ..without.clone() };
            assert_eq!(points(&without, seed), points(&plain, seed), "seed {seed}");
        }
    }

    #[test]
    fn a_sigstop_or_kill_strikes_a_resource_server_alone_and_only_it_when_no_lock_is_taken() {
        let kinds = [FaultKind::Sigstop, FaultKind::Kill, FaultKind::Clock];
        let with = FaultTargets { resource_servers: 1, ..servers(3, 0) };
        let mut struck = std::collections::BTreeSet::new();
        for seed in 1..=10 {
            for fault in server_faults(&kinds, &with, seed) {
                if fault.servers.contains(&3) {
                    // The resource's server, alone, by a stop or a kill.
                    assert_eq!(fault.servers, vec![3], "{fault:?}");
                    assert!(matches!(fault.action, ServerAction::Pause | ServerAction::Kill));
                }
                struck.extend(fault.servers);
            }
        }
        assert_eq!(struck.into_iter().collect::<Vec<_>>(), [0, 1, 2, 3]);
        // With no lock taken, the idle lock servers are left alone.
        let unused = FaultTargets { locks_unused: true, ..with.clone() };
        let faults = server_faults(&[FaultKind::Sigstop, FaultKind::Kill], &unused, 1);
        assert!(!faults.is_empty() && faults.iter().all(|fault| fault.servers == [3]));
        // A run without one draws as it did.
        let without = FaultTargets { locks_unused: true, ..servers(3, 0) };
        assert_eq!(server_faults(&kinds, &without, 1), server_faults(&kinds, &servers(3, 0), 1));
    }

    #[test]
    fn the_schedule_follows_the_seed_heals_before_the_end_and_keeps_kills_down() {
        let kinds = [FaultKind::Sigstop, FaultKind::Kill];
        let plan = |seed| server_faults(&kinds, &servers(5, 750), seed);
        let faults = plan(1);
        assert_eq!(faults, plan(1));
        assert_ne!(faults, plan(2));
        assert!(faults.len() > 5, "{faults:?}");
        for fault in &faults {
            assert!(fault.start >= Duration::from_secs(1) && fault.end <= LAST, "{fault:?}");
            assert!(fault.servers.len() <= 3 && !fault.servers.is_empty(), "{fault:?}");
            if fault.action == ServerAction::Kill {
                assert!(fault.end - fault.start >= Duration::from_millis(750), "{fault:?}");
            }
            assert_eq!(fault.jump_ms, 0, "{fault:?}");
        }
        let sessions = server_faults(&[FaultKind::ConnKill], &servers(0, 0), 1);
        assert!(!sessions.is_empty(), "conn-kill needs no managed server");
        assert!(sessions.iter().all(|fault| fault.servers.is_empty()));
        let majority = server_faults(
            &[FaultKind::Kill],
            &FaultTargets { kills_a_majority: true, ..servers(5, 750) },
            1,
        );
        assert!(!majority.is_empty() && majority.iter().all(|fault| fault.servers.len() == 3));
    }

    #[test]
    fn clock_faults_strike_a_minority_by_one_to_three_ttls_drifts_three_to_ten_times_fast() {
        let plan = |lock_servers, seed| {
            server_faults(&[FaultKind::Clock], &servers(lock_servers, 0), seed)
        };
        let faults = plan(1, 7);
        assert_eq!(faults, plan(1, 7));
        assert_ne!(faults, plan(1, 8));
        assert!(faults.len() > 5, "{faults:?}");
        let mut jumps = Vec::new();
        for fault in &faults {
            assert!(
                matches!(fault.action, ServerAction::ClockJump | ServerAction::ClockDrift),
                "{fault:?}"
            );
            assert_eq!(fault.servers, vec![0], "{fault:?}");
            assert!((500..=1_500).contains(&fault.jump_ms), "{fault:?}");
            assert!(fault.end <= LAST, "{fault:?}");
            // A drift runs 3 to 10 times fast (TTL / 3 is 166 ms).
            if fault.action == ServerAction::ClockDrift {
                assert!((300..=1_004).contains(&fault.pace_percent()), "{fault:?}");
            }
            jumps.push(fault.jump_ms);
        }
        jumps.dedup();
        assert!(jumps.len() > 1, "the jump is drawn for each fault: {jumps:?}");
        let actions: Vec<ServerAction> = faults.iter().map(|fault| fault.action).collect();
        assert!(actions.contains(&ServerAction::ClockJump), "{actions:?}");
        assert!(actions.contains(&ServerAction::ClockDrift), "{actions:?}");
        for lock_servers in [3, 5, 7] {
            for fault in plan(lock_servers, 7) {
                let minority = (lock_servers - 1) / 2;
                assert!((1..=minority).contains(&fault.servers.len()), "{fault:?}");
                assert!(fault.servers.iter().all(|&at| at < lock_servers), "{fault:?}");
            }
        }
    }

    #[test]
    fn network_faults_follow_the_seed_and_heal_before_the_end() {
        let kinds = [FaultKind::Partition, FaultKind::SlowNet, FaultKind::SlowClient];
        let plan = |seed| split(schedule(&kinds, &cluster(3), LIMIT, seed)).net;
        let faults = plan(3);
        assert_eq!(faults, plan(3));
        assert_ne!(faults, plan(4));
        assert!(faults.len() > 5, "{faults:?}");
        let mut drawn = Vec::new();
        for fault in &faults {
            assert!(fault.end <= LAST, "{fault:?}");
            assert!(fault.end - fault.start >= Duration::from_millis(500), "{fault:?}");
            drawn.push(match &fault.kind {
                NetKind::Members { minority, .. } => {
                    assert_eq!(minority.len(), 1, "{fault:?}");
                    "members"
                }
                NetKind::SlowServer { delay_ms, .. } => {
                    assert!((50..=500).contains(delay_ms), "{fault:?}");
                    "slow-net"
                }
                NetKind::SlowClient { client, delay_ms } => {
                    assert!(*client < 4 && (50..=500).contains(delay_ms), "{fault:?}");
                    "slow-client"
                }
                NetKind::ClientCut { client } => {
                    assert!(*client < 4, "{fault:?}");
                    "client"
                }
            });
        }
        for kind in ["client", "members", "slow-net", "slow-client"] {
            assert!(drawn.contains(&kind), "{drawn:?}");
        }
    }

    #[test]
    fn member_shapes_need_a_cluster_and_nothing_on_draws_nothing() {
        let members_only =
            FaultTargets { shapes: vec![Shape::IsolateOne, Shape::Halves], ..cluster(0) };
        assert!(schedule(&[FaultKind::Partition], &members_only, LIMIT, 1).is_empty());
        assert!(schedule(&[], &cluster(3), LIMIT, 1).is_empty());
        let nobody = FaultTargets::clients(0, 500);
        assert!(schedule(&[FaultKind::Pause, FaultKind::ClientKill], &nobody, LIMIT, 1).is_empty());
    }

    #[test]
    fn failovers_follow_the_seed_and_end_before_the_quiet_end() {
        let plan =
            |seed| split(schedule(&[FaultKind::Failover], &cluster(0), LIMIT, seed)).failovers;
        let failovers = plan(1);
        assert_eq!(failovers, plan(1));
        assert_ne!(failovers, plan(2));
        assert!(failovers.len() > 5, "{failovers:?}");
        let mut previous_end = Duration::ZERO;
        for failover in &failovers {
            assert!(failover.start >= Duration::from_secs(1), "{failover:?}");
            assert!(failover.start >= previous_end + Duration::from_millis(500), "{failover:?}");
            assert!((125..=500).contains(&failover.lag.as_millis()), "{failover:?}");
            let down = failover.end - failover.start - failover.lag;
            assert!((250..=1000).contains(&down.as_millis()), "{failover:?}");
            assert!(failover.end <= LAST, "{failover:?}");
            previous_end = failover.end;
        }
        let short = schedule(&[FaultKind::Failover], &cluster(0), Duration::from_secs(1), 1);
        assert!(short.is_empty());
    }

    #[test]
    fn each_fault_may_wait_for_its_aim_without_reaching_the_next_or_the_quiet_end() {
        let kinds = [FaultKind::Pause, FaultKind::Clock, FaultKind::Partition, FaultKind::Failover];
        let targets = FaultTargets { lock_servers: 1, ..cluster(3) };
        let faults = schedule(&kinds, &targets, LIMIT, 9);
        assert!(faults.len() > 10, "{faults:?}");
        let slack = |fault: &RealFault| match fault {
            RealFault::Stall(stall) => Some(stall.slack),
            RealFault::Server(server) => Some(server.slack),
            RealFault::Net(net) => Some(net.slack),
            RealFault::Failover(_) | RealFault::ClientKill(_) => None,
        };
        // Each moved on by all its slack: still apart, still before the
        // quiet end; a failover is not aimed.
        let moved: Vec<Window> = faults
            .iter()
            .map(|fault| {
                let by = slack(fault).unwrap_or(Duration::ZERO);
                assert!(by <= Duration::from_millis(1_000), "two TTLs at most: {fault:?}");
                let Window { start, end } = fault.window();
                Window { start: start + by, end: end + by }
            })
            .collect();
        for pair in moved.windows(2) {
            assert!(pair[1].start > pair[0].end, "{pair:?}");
        }
        assert!(moved.last().unwrap().end <= LAST);
        assert!(faults.iter().filter_map(slack).any(|slack| slack > Duration::ZERO));
        assert!(faults.iter().any(|fault| matches!(fault, RealFault::Failover(_))));
        for fault in &faults {
            if let RealFault::Stall(stall) = fault {
                assert_eq!(stall.points, lockcheck_workloads::StallPoints::ALL, "{stall:?}");
            }
        }
    }

    #[test]
    fn every_kind_shares_one_schedule_whose_faults_never_overlap() {
        let kinds = [
            FaultKind::Pause,
            FaultKind::Sigstop,
            FaultKind::Kill,
            FaultKind::Clock,
            FaultKind::Partition,
            FaultKind::SlowNet,
            FaultKind::Failover,
            FaultKind::ClientKill,
        ];
        let targets = FaultTargets { lock_servers: 3, ..cluster(3) };
        let faults = schedule(&kinds, &targets, Duration::from_secs(120), 5);
        assert!(faults.len() > 20, "{faults:?}");
        for pair in faults.windows(2) {
            let (this, next) = (pair[0].window(), pair[1].window());
            assert!(next.start > this.end, "{pair:?}");
        }
        let last = faults.last().expect("faults").window();
        assert!(last.end <= Duration::from_millis(120_000 - 1_500), "{last:?}");
        let parts = split(faults);
        assert!(!parts.stalls.is_empty() && !parts.server.is_empty() && !parts.net.is_empty());
        assert!(!parts.failovers.is_empty() && !parts.kills.is_empty());
        for stall in &parts.stalls {
            assert!((750..=1_500).contains(&stall.stall_ms), "1.5 to 3 TTLs: {stall:?}");
            assert_eq!(stall.end - stall.start, Duration::from_millis(stall.stall_ms));
        }
        assert!(parts.kills.iter().all(|kill| kill.client < 4));
    }
}
