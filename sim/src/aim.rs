//! Where a simulated fault aims, with `--aim` ([`crate::RunOptions::aim`]):
//! as a real one does ([`lockcheck_workloads::aim`]), a fault that is due
//! waits, for at most its slack, for the holder whose window it breaks,
//! and is moved on by as long as it waited. Off by default: the pinned
//! seeds' histories are those of faults that strike when and whom the seed
//! drew.
//!
//! The waiting is in simulated time: the driver looks once a step, after
//! the hosts ran, at the holds the clients' stall points report. Each
//! client runs on a host whose clock is its own (a tokio runtime of its
//! own), so a hold's instants are read against that host's clock, known
//! from where it stood when the client started ([`ClientClock`]); the
//! target is chosen among the holders found by what the seed drew. Nothing
//! here reads the wall clock or draws from an RNG, so an aimed run is as
//! deterministic as an unaimed one.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use lockcheck_workloads::{Aim, Holders, Stall, StallPoint, StallPoints, Window};
use tokio::time::Instant;

use crate::nemesis::{Action, Fault};

/// The most a fault waits for its aim, in TTLs (the real world's cap).
const SLACK_TTLS: u32 = 2;

/// One client's host clock, as an offset from the simulation's: where it
/// stood when the simulation's time was zero. The client sets it when it
/// starts, inside its host; the driver then reads the host's time now as
/// that plus the simulation's time.
#[derive(Debug, Clone, Default)]
pub(crate) struct ClientClock(Rc<Cell<Option<Instant>>>);

impl ClientClock {
    /// Reads the host's clock against the simulation's: called inside the
    /// client's host.
    pub(crate) fn start(&self) {
        let elapsed = turmoil::sim_elapsed().unwrap_or_default();
        self.0.set(Instant::now().checked_sub(elapsed));
    }

    /// The host's clock when the simulation's time is `elapsed`, once the
    /// client has started.
    fn at(&self, elapsed: Duration) -> Option<Instant> {
        self.0.get().map(|zero| zero + elapsed)
    }
}

/// What the simulator needs to aim its faults.
pub(crate) struct SimAim {
    holders: Holders,
    /// One per logical client.
    clocks: Vec<ClientClock>,
    /// How long each fault of the schedule may wait, by its index.
    slack: Vec<Duration>,
    /// Where a stall may strike (`--pause-at`).
    pause_points: StallPoints,
    /// A drift's holder must still work this long after its lease runs out
    /// on the drifted clock: a step for the expiry to be seen, one for
    /// another client to be granted.
    drift_margin: Duration,
}

/// The shape of the run a fault is aimed in.
pub(crate) struct AimedRun<'a> {
    /// The clients' stall points, by logical client.
    pub stalls: &'a [Stall],
    pub clocks: Vec<ClientClock>,
    /// The longest hold the workload draws.
    pub longest_hold: Duration,
    pub ttl: Duration,
    pub pause_at: &'a [StallPoint],
    /// When the quiet end begins: every fault is over by then, moved on
    /// or not.
    pub quiet_end: Duration,
    /// The simulator's step.
    pub tick: Duration,
}

impl SimAim {
    /// Aiming for the schedule `faults` (in time order) in `run`: each may
    /// wait half the quiet gap after it, at most two TTLs, as a real fault
    /// ([`lockcheck_workloads::slack`]).
    pub(crate) fn new(faults: &[Fault], run: AimedRun<'_>) -> SimAim {
        let windows: Vec<Window> =
            faults.iter().map(|fault| Window { start: fault.start, end: fault.end }).collect();
        let slack = lockcheck_workloads::slack(&windows, run.quiet_end, run.ttl * SLACK_TTLS);
        SimAim {
            holders: Holders::new(run.stalls, run.longest_hold, run.ttl),
            clocks: run.clocks,
            slack,
            pause_points: StallPoints::of(run.pause_at),
            drift_margin: run.tick * 2,
        }
    }

    /// The holder `action` waits for, and what the seed drew to pick among
    /// several; `None` for a fault that is not aimed (a skew, a failover, a
    /// split among the lock hosts: the real world does not aim those
    /// either, or has none).
    fn aim_of(&self, action: &Action) -> Option<(Aim, u32)> {
        match *action {
            Action::StallClient { client, .. } => Some((Aim::Fresh, client)),
            Action::PauseServer
            | Action::ClockJump { .. }
            | Action::Kill
            | Action::Delay { .. }
            | Action::Loss { .. } => Some((Aim::LongHold, 0)),
            Action::ClockDrift { rate } => {
                let pace_percent = (rate * 100.0).round() as u32;
                Some((Aim::LeaseRunsOut { pace_percent, margin: self.drift_margin }, 0))
            }
            Action::IsolateClient { client } => {
                Some((Aim::OutlastsLease { margin: self.holders.lease() / 4 }, client))
            }
            Action::SkewClient { .. } | Action::Failover | Action::SplitServers { .. } => None,
        }
    }

    /// `fault`, the `index`th of the schedule and due (its start is at or
    /// before `now`), as it strikes now: aimed at the holder it wanted if
    /// one holds now, else as drawn once its slack is gone (a stall at a
    /// holder all the same, a cut at the latest holder), and moved on by
    /// as long as it waited. `None` while it still waits.
    pub(crate) fn strike(&self, index: usize, fault: &Fault, now: Duration) -> Option<Fault> {
        let Some((aim, pick)) = self.aim_of(&fault.action) else { return Some(fault.clone()) };
        let clock = |client: u32| self.clocks.get(client as usize)?.at(now);
        let found = self.holders.look(aim, pick, &clock);
        let waited = now.saturating_sub(fault.start);
        let slack = self.slack.get(index).copied().unwrap_or_default();
        if found.is_none() && waited < slack {
            return None;
        }
        let mut fault = fault.clone();
        (fault.start, fault.end) = (fault.start + waited, fault.end + waited);
        match &mut fault.action {
            Action::StallClient { client, stall_ms, at } => {
                *client = self.holders.stalled(found, *client);
                *at = self.holders.point_ahead(*client, *at, self.pause_points, *stall_ms);
            }
            Action::IsolateClient { client } => {
                *client = found.or_else(|| self.holders.latest_holder(&clock)).unwrap_or(*client);
            }
            _ => {}
        }
        Some(fault)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fault(start_ms: u64, end_ms: u64, action: Action) -> Fault {
        let ms = Duration::from_millis;
        Fault { start: ms(start_ms), end: ms(end_ms), action, server: 0, spread: 1 }
    }

    /// Aiming over `stalls`, whose clocks all stood at `zero` when the
    /// simulation began: holds of up to 400 ms under 1 s leases, every
    /// pause point allowed.
    fn aiming(faults: &[Fault], stalls: &[Stall], zero: Instant) -> SimAim {
        let clocks: Vec<ClientClock> = stalls
            .iter()
            .map(|_| {
                let clock = ClientClock::default();
                clock.0.set(Some(zero));
                clock
            })
            .collect();
        SimAim::new(
            faults,
            AimedRun {
                stalls,
                clocks,
                longest_hold: Duration::from_millis(400),
                ttl: Duration::from_secs(1),
                pause_at: &StallPoint::ALL,
                quiet_end: Duration::from_secs(60),
                tick: Duration::from_millis(20),
            },
        )
    }

    #[tokio::test(start_paused = true)]
    async fn a_stall_waits_for_a_fresh_grant_and_strikes_it_after_the_grant() {
        let zero = Instant::now();
        let stall =
            |client| Action::StallClient { client, stall_ms: 1500, at: StallPoint::BeforeRelease };
        // Due at 1 s, 3 s of quiet after it: 1.5 s of slack (half the gap).
        let faults = [fault(1000, 2500, stall(0)), fault(5500, 7000, stall(0))];
        let stalls: Vec<Stall> = (0..3).map(|_| Stall::default()).collect();
        let aim = aiming(&faults, &stalls, zero);
        // Nobody holds: it waits.
        tokio::time::advance(Duration::from_millis(1020)).await;
        assert_eq!(aim.strike(0, &faults[0], Duration::from_millis(1020)), None);
        // Client 2's grant comes back: the stall strikes it now, moved on
        // by the 40 ms it waited, at its drawn point (still ahead).
        tokio::time::advance(Duration::from_millis(20)).await;
        stalls[2].set_holding(true);
        let struck = aim.strike(0, &faults[0], Duration::from_millis(1040)).expect("aimed");
        assert_eq!(
            struck.action,
            Action::StallClient { client: 2, stall_ms: 1500, at: StallPoint::BeforeRelease }
        );
        assert_eq!(
            (struck.start, struck.end),
            (Duration::from_millis(1040), Duration::from_millis(2540))
        );
        // Past its grant, client 2 is no longer fresh: a stall drawn after
        // the grant goes to a point still ahead of it once the slack is gone.
        stalls[2].take_at(StallPoint::AfterGrant);
        let after_grant =
            Action::StallClient { client: 1, stall_ms: 1500, at: StallPoint::AfterGrant };
        let late = fault(5500, 7000, after_grant);
        assert_eq!(aim.strike(1, &late, Duration::from_millis(6000)), None);
        // Its slack is two TTLs (the quiet gap after it is long).
        assert_eq!(aim.strike(1, &late, Duration::from_millis(7400)), None);
        let struck = aim.strike(1, &late, Duration::from_millis(7500)).expect("slack gone");
        let Action::StallClient { client, at, .. } = struck.action else { panic!("{struck:?}") };
        assert_eq!(client, 2, "the one holder");
        assert_ne!(at, StallPoint::AfterGrant, "a point behind the holder");
        assert_eq!(
            (struck.start, struck.end),
            (Duration::from_millis(7500), Duration::from_millis(9000))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_fault_waits_for_a_long_hold_on_the_holders_own_clock() {
        // Client 1's host clock started 5 s before the simulation's.
        let zero = Instant::now();
        tokio::time::advance(Duration::from_secs(5)).await;
        let faults = [fault(1000, 2000, Action::Kill)];
        let stalls: Vec<Stall> = (0..2).map(|_| Stall::default()).collect();
        let aim = aiming(&faults, &stalls, zero);
        aim.clocks[1].0.set(Some(zero + Duration::from_secs(5)));
        // Client 1 is granted at 1 s (its clock: 6 s) and works 350 ms: a
        // long hold (300 ms ahead) on its clock, which is 5 s ahead.
        tokio::time::advance(Duration::from_secs(1)).await;
        stalls[1].set_holding(true);
        stalls[1].holds_until(Instant::now() + Duration::from_millis(350));
        let struck = aim.strike(0, &faults[0], Duration::from_millis(1000)).expect("aimed");
        assert_eq!(struck.start, Duration::from_millis(1000));
        // Read 100 ms later on the simulation's clock, only 250 ms are left.
        assert_eq!(aim.strike(0, &faults[0], Duration::from_millis(1100)), None);
        // A skew is not aimed: it strikes when due.
        let skew = fault(1000, 2000, Action::SkewClient { client: 0, offset_ms: 300 });
        assert_eq!(aim.strike(0, &skew, Duration::from_millis(1000)), Some(skew.clone()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_cut_strikes_a_holder_whose_work_outlasts_a_lease_else_the_latest_holder() {
        let zero = Instant::now();
        let cut = fault(1000, 3000, Action::IsolateClient { client: 0 });
        let stalls: Vec<Stall> = (0..3).map(|_| Stall::default()).collect();
        let aim = aiming(std::slice::from_ref(&cut), &stalls, zero);
        tokio::time::advance(Duration::from_secs(1)).await;
        // Client 1 holds with 100 ms ahead, client 2 was granted after it
        // with 300 ms ahead: neither outlasts a lease and a quarter.
        stalls[1].set_holding(true);
        stalls[1].holds_until(Instant::now() + Duration::from_millis(100));
        tokio::time::advance(Duration::from_millis(20)).await;
        stalls[2].set_holding(true);
        stalls[2].holds_until(Instant::now() + Duration::from_millis(300));
        assert_eq!(aim.strike(0, &cut, Duration::from_millis(1020)), None);
        // Slack gone: the latest holder is cut off.
        let struck = aim.strike(0, &cut, Duration::from_secs(60)).expect("slack gone");
        assert_eq!(struck.action, Action::IsolateClient { client: 2 });
        // A holder with 1.5 s of work ahead is the one a cut wants.
        stalls[1].holds_until(Instant::now() + Duration::from_millis(1500));
        let struck = aim.strike(0, &cut, Duration::from_millis(1020)).expect("aimed");
        assert_eq!(struck.action, Action::IsolateClient { client: 1 });
    }
}
