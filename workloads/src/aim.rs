//! Where a fault aims. The schedule says when a fault is due and draws its
//! targets from the seed; a fault aimed at the window that breaks locks
//! waits, from when it is due and for at most its slack, for the holder it
//! wants ([`Aim`]): a clock jump, a crash or a killed session strikes a
//! holder with most of a long hold's work still ahead, a client cut off a
//! holder whose work outlasts its lease, a stall a holder whose grant has
//! just come back, and a clock drift a holder whose lease it runs out
//! before the holder's work is done, which is when each breaks a lock. The
//! clients' stall points say who holds what ([`crate::Stall::hold`]); a
//! fault that finds no such holder within its slack strikes as drawn.
//!
//! Both worlds aim. The real world always does, waiting in real time
//! ([`Holders::aim`]). The simulator does with `--aim` only, so that the
//! seeds it pins keep their histories (unaimed, its faults strike when and
//! whom the seed drew, a stall at the drawn point the next time the client
//! passes it); it looks once a step, in simulated time
//! ([`Holders::look`]), and reads each hold against the clock of the host
//! its client runs on ([`Clocks`]). The fallbacks are the same in both: a
//! stall strikes a holder all the same ([`Holders::stalled`]), a client cut
//! off the latest holder (the simulator's [`Holders::latest_holder`]; the
//! real world reads it off its history).

use std::time::Duration;

use tokio::time::Instant;

use crate::schedule::Window;
use crate::stall::{Hold, Stall, StallPoint, StallPoints};

/// How often a fault waiting for its aim looks again.
const LOOK_EVERY: Duration = Duration::from_millis(2);

/// Each client's clock now, by its index: the real world reads one clock
/// for all; the simulator reads each client's host's (`None`: not yet
/// readable).
pub type Clocks<'a> = &'a dyn Fn(u32) -> Option<Instant>;

/// The clients a fault may aim at, by their stall points.
#[derive(Debug, Clone, Default)]
pub struct Holders {
    stalls: Vec<Stall>,
    /// A hold with at least this much of its work ahead is a long one.
    long: Duration,
    /// How long a lease lasts from its grant.
    lease: Duration,
}

/// Which holder a fault waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aim {
    /// A holder whose grant has just come back, before its work: every
    /// point of its hold is still ahead of it (what a stall waits for).
    Fresh,
    /// A holder with a long hold's work still ahead (what a clock jump, a
    /// crash, a killed session or a slowed link waits for).
    LongHold,
    /// A holder whose lease, if the lock server's clock runs `pace_percent`
    /// hundredths as fast as real time from now, runs out at least `margin`
    /// before the holder's work ends, so that another client can take the
    /// lock while it still works (what a clock drift waits for). The lease
    /// is taken to run from the grant's reply, a little after it began on
    /// the server, so the holder found is one the drift does break.
    LeaseRunsOut { pace_percent: u32, margin: Duration },
    /// A holder whose work goes on for at least a lease and `margin` from
    /// now: cut off from its lock service now, its lease runs out, unrenewed,
    /// while it still works (what a client cut off waits for). Its last
    /// renewal may have come just before the cut, so a whole lease is
    /// counted from now.
    OutlastsLease { margin: Duration },
}

/// Whom an aimed fault strikes, and how long it waited for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Aimed {
    /// A holder as the fault wanted, if one came within its slack.
    pub client: Option<u32>,
    /// How long the fault waited: it is moved on by as much.
    pub waited: Duration,
}

impl Holders {
    /// The clients whose stall points are `stalls` (client `i` is
    /// `stalls[i]`), whose holders work up to `longest_hold` under leases of
    /// `lease`: a hold with three quarters of that still ahead is a long
    /// one.
    pub fn new(stalls: &[Stall], longest_hold: Duration, lease: Duration) -> Holders {
        Holders { stalls: stalls.to_vec(), long: longest_hold * 3 / 4, lease }
    }

    /// How long a lease lasts from its grant.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// Client `client`'s stall point.
    pub fn stall(&self, client: u32) -> Option<&Stall> {
        self.stalls.get(client as usize)
    }

    /// The clients holding a lock now, in order.
    pub fn holding(&self) -> Vec<u32> {
        self.aimed_at(|_, _| true)
    }

    /// The clients holding a lock now as `aim` wants, in order.
    pub fn wanted(&self, aim: Aim) -> Vec<u32> {
        self.wanted_at(aim, &|_| Some(Instant::now()))
    }

    /// As [`Holders::wanted`], with each client's clock read by `now`: the
    /// simulator's clients each run on a host with a clock of its own,
    /// which only the simulator can read. A client whose clock `now`
    /// cannot read is not wanted.
    pub fn wanted_at(&self, aim: Aim, now: Clocks<'_>) -> Vec<u32> {
        match aim {
            Aim::Fresh => self.aimed_at(|_, hold| !hold.has_passed(StallPoint::AfterGrant)),
            Aim::LongHold => self.aimed_at(|client, hold| {
                let Some(now) = now(client) else { return false };
                hold.until.is_some_and(|until| {
                    !self.long.is_zero() && until.saturating_duration_since(now) >= self.long
                })
            }),
            Aim::LeaseRunsOut { pace_percent, margin } => self.aimed_at(|client, hold| {
                let Some(now) = now(client) else { return false };
                let left = (hold.since + self.lease).saturating_duration_since(now);
                let runs_out = now + left * 100 / pace_percent.max(1);
                hold.until.is_some_and(|until| until >= runs_out + margin)
            }),
            Aim::OutlastsLease { margin } => self.aimed_at(|client, hold| {
                let Some(now) = now(client) else { return false };
                hold.until.is_some_and(|until| until >= now + self.lease + margin)
            }),
        }
    }

    fn aimed_at(&self, wanted: impl Fn(u32, &Hold) -> bool) -> Vec<u32> {
        (0u32..)
            .zip(&self.stalls)
            .filter(|(at, stall)| stall.hold().is_some_and(|hold| wanted(*at, &hold)))
            .map(|(at, _)| at)
            .collect()
    }

    /// One look for a holder as `aim` wants, each client's clock read by
    /// `now`: `pick` (drawn from the seed) chooses among several. The real
    /// world looks again and again ([`Holders::aim`]); the simulator once
    /// a step, in simulated time.
    pub fn look(&self, aim: Aim, pick: u32, now: Clocks<'_>) -> Option<u32> {
        let holders = self.wanted_at(aim, now);
        (!holders.is_empty()).then(|| holders[pick as usize % holders.len()])
    }

    /// Whom a stall strikes, in either world: `aimed`, the holder it
    /// waited for if one came; else one of the clients holding a lock now,
    /// chosen by the `drawn` client; else the drawn client, at its next
    /// pass of its point.
    pub fn stalled(&self, aimed: Option<u32>, drawn: u32) -> u32 {
        aimed.unwrap_or_else(|| match self.holding().as_slice() {
            [] => drawn,
            holding => holding[drawn as usize % holding.len()],
        })
    }

    /// The client whose lock was granted latest among those holding one
    /// now, each client's clock read by `now` (the youngest hold): whom a
    /// cut that found no holder as it wanted falls back to.
    pub fn latest_holder(&self, now: Clocks<'_>) -> Option<u32> {
        (0u32..)
            .zip(&self.stalls)
            .filter_map(|(at, stall)| {
                let (hold, now) = (stall.hold()?, now(at)?);
                Some((now.saturating_duration_since(hold.since), at))
            })
            .min()
            .map(|(_, at)| at)
    }

    /// Waits, from now and for at most `slack`, until a client holds a
    /// lock as `aim` wants; `pick` (drawn from the seed) chooses among
    /// several.
    pub async fn aim(&self, aim: Aim, pick: u32, slack: Duration) -> Aimed {
        let from = Instant::now();
        loop {
            let found = self.look(aim, pick, &|_| Some(Instant::now()));
            let waited = from.elapsed();
            if found.is_some() {
                return Aimed { client: found, waited };
            }
            if waited >= slack {
                return Aimed { client: None, waited };
            }
            tokio::time::sleep(LOOK_EVERY.min(slack - waited)).await;
        }
    }

    /// Where a stall drawn at `drawn` strikes client `client`: there,
    /// unless the client has never passed that point in the run (its recipe
    /// has no such point), or holds a lock whose hold has passed it and
    /// passes it once a hold (after the grant, after the write); then at a
    /// point still ahead, among `points` (the ones asked for), chosen by
    /// `pick`. A release ends every hold, so it is always ahead; a renewal
    /// may come again, and so may a request in flight for a holder that
    /// renews again and again (for any other holder, the grant whose reply
    /// matters is behind it); a step between commands is ahead of a holder
    /// whose grant had none (a release of two commands).
    pub fn point_ahead(
        &self,
        client: u32,
        drawn: StallPoint,
        points: StallPoints,
        pick: u64,
    ) -> StallPoint {
        let Some(stall) = self.stall(client) else { return drawn };
        let hold = stall.hold();
        let ahead = |point: StallPoint| {
            // A release is ahead of every hold, and of a client yet to be
            // granted; not of one that takes jobs without a lock (the
            // payments workload under no lock), which passes a grant's
            // points and never a release.
            let releases = point == StallPoint::BeforeRelease
                && (hold.is_some() || !stall.has_passed(StallPoint::AfterGrant));
            let passes = stall.has_passed(point) || releases;
            let behind = hold.is_some_and(|hold| match point {
                // Once a hold, or, between commands, where this hold's
                // grant had two (its release may have two as well).
                StallPoint::AfterGrant | StallPoint::AfterWrite | StallPoint::BetweenCommands => {
                    hold.has_passed(point)
                }
                // A holder's next call is its release, whose reply comes
                // after the lock is given back, unless it renews again and
                // again (a session's keepalive): its grant's reply, the one
                // that breaks a lock when read late, is behind it.
                StallPoint::InFlight => !hold.has_passed(StallPoint::BeforeRenew),
                _ => false,
            });
            passes && !behind
        };
        if ahead(drawn) {
            return drawn;
        }
        let ahead: Vec<StallPoint> =
            points.points().into_iter().filter(|&point| ahead(point)).collect();
        match ahead.len() {
            0 => drawn,
            n => ahead[(pick % n as u64) as usize],
        }
    }
}

/// How long each of `windows` (a schedule's faults, in time order) may be
/// moved on while it waits for its aim, at most `cap`: half the quiet gap
/// after it, the last one's gap running to `last` (the quiet end's start),
/// so that the faults still never overlap and each is still over before
/// the quiet end.
pub fn slack(windows: &[Window], last: Duration, cap: Duration) -> Vec<Duration> {
    windows
        .iter()
        .enumerate()
        .map(|(at, window)| {
            let next = windows.get(at + 1).map_or(last, |next| next.start);
            (next.saturating_sub(window.end) / 2).min(cap)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(start: u64, end: u64) -> Window {
        Window { start: Duration::from_millis(start), end: Duration::from_millis(end) }
    }

    #[test]
    fn slack_is_half_the_gap_after_and_never_past_the_cap() {
        let windows = [window(1000, 1500), window(2500, 3000), window(3100, 3200)];
        let ms = |ms| Duration::from_millis(ms);
        assert_eq!(slack(&windows, ms(5000), ms(400)), [ms(400), ms(50), ms(400)]);
        assert_eq!(slack(&windows, ms(3300), ms(400)), [ms(400), ms(50), ms(50)]);
        assert_eq!(slack(&[], ms(3300), ms(400)), Vec::<Duration>::new());
        // Moved on by their slack, no two faults overlap and the last ends
        // before the quiet end.
        let moved: Vec<Window> = windows
            .iter()
            .zip(slack(&windows, ms(3300), ms(400)))
            .map(|(window, slack)| Window { start: window.start + slack, end: window.end + slack })
            .collect();
        for pair in moved.windows(2) {
            assert!(pair[0].end < pair[1].start, "{moved:?}");
        }
        assert!(moved[2].end <= ms(3300));
    }

    #[tokio::test(start_paused = true)]
    async fn a_fault_waits_for_the_holder_it_wants_and_no_longer_than_its_slack() {
        let stalls: Vec<Stall> = (0..3).map(|_| Stall::default()).collect();
        let holders = Holders::new(&stalls, Duration::from_millis(400), Duration::from_millis(500));
        // Nobody holds: the fault waits its whole slack, and strikes as drawn.
        let aimed = holders.aim(Aim::LongHold, 1, Duration::from_millis(50)).await;
        assert_eq!(aimed, Aimed { client: None, waited: Duration::from_millis(50) });
        // Client 1 holds with 100 ms of work ahead: not a long hold (300 ms),
        // and no longer fresh once past its grant.
        stalls[1].set_holding(true);
        assert_eq!(holders.wanted(Aim::Fresh), [1]);
        stalls[1].take_at(StallPoint::AfterGrant);
        stalls[1].holds_until(Instant::now() + Duration::from_millis(100));
        assert_eq!(holders.holding(), [1]);
        assert!(holders.wanted(Aim::LongHold).is_empty());
        assert!(holders.wanted(Aim::Fresh).is_empty());
        // Client 2 is granted 30 ms from now and works 350 ms.
        let grant = async {
            tokio::time::sleep(Duration::from_millis(30)).await;
            stalls[2].set_holding(true);
            stalls[2].holds_until(Instant::now() + Duration::from_millis(350));
        };
        let (aimed, ()) =
            tokio::join!(holders.aim(Aim::LongHold, 7, Duration::from_millis(200)), grant);
        assert_eq!(aimed.client, Some(2));
        assert!(aimed.waited >= Duration::from_millis(30));
        assert!(aimed.waited < Duration::from_millis(40));
        // Once less than a long hold is left, it is not one any more.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(holders.wanted(Aim::LongHold).is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_cut_waits_for_a_holder_whose_work_outlasts_a_lease_from_now() {
        let ms = Duration::from_millis;
        let stalls: Vec<Stall> = (0..3).map(|_| Stall::default()).collect();
        // Holds of up to 4 s under leases of 2 s: a long hold is 3 s.
        let holders = Holders::new(&stalls, ms(4000), ms(2000));
        let cut = Aim::OutlastsLease { margin: ms(500) };
        // Client 0 works 2.6 s more: not a long hold, but it outlasts a
        // lease and the margin from now.
        stalls[0].set_holding(true);
        stalls[0].holds_until(Instant::now() + ms(2600));
        // Client 1 works 2.4 s more: its lease, unrenewed from now, runs
        // out 400 ms before its work ends, less than the margin.
        stalls[1].set_holding(true);
        stalls[1].holds_until(Instant::now() + ms(2400));
        // Client 2 holds, but has not drawn its work yet.
        stalls[2].set_holding(true);
        assert_eq!(holders.wanted(cut), [0]);
        assert!(holders.wanted(Aim::LongHold).is_empty());
        // A lease counts from now, not from the grant: 200 ms on, client 0
        // has 2.4 s left, too little.
        tokio::time::advance(ms(200)).await;
        assert!(holders.wanted(cut).is_empty());
        let aimed = holders.aim(cut, 0, ms(100)).await;
        assert_eq!(aimed, Aimed { client: None, waited: ms(100) });
    }

    #[tokio::test(start_paused = true)]
    async fn a_drift_waits_for_a_holder_whose_lease_it_runs_out_before_the_work_ends() {
        let ms = Duration::from_millis;
        let stalls: Vec<Stall> = (0..3).map(|_| Stall::default()).collect();
        let holders = Holders::new(&stalls, ms(333), ms(500));
        let drift = |pace_percent| Aim::LeaseRunsOut { pace_percent, margin: ms(50) };
        // Client 0 was granted 100 ms ago and works 160 ms more: its lease
        // has 400 ms left, 100 ms at 4 times fast, 160 - 100 >= 50.
        stalls[0].set_holding(true);
        tokio::time::advance(ms(100)).await;
        stalls[0].holds_until(Instant::now() + ms(160));
        // Client 1 is granted now and works 290 ms: its 500 ms run out
        // after 125 ms at 4 times fast, after 250 ms at twice.
        stalls[1].set_holding(true);
        stalls[1].holds_until(Instant::now() + ms(290));
        // Client 2 holds, but has not drawn its work yet: no end to aim at.
        stalls[2].set_holding(true);
        assert_eq!(holders.wanted(drift(400)), [0, 1]);
        assert_eq!(holders.wanted(drift(200)), Vec::<u32>::new());
        assert_eq!(holders.wanted(drift(1000)), [0, 1]);
        // As the work goes on, what is left of it shrinks faster than the
        // lease's drifted life: client 1 at 4 times fast, 100 ms on, has
        // 190 ms of work and 400 / 4 = 100 ms of lease; client 0 has 60
        // ms of work and 300 / 4 = 75 ms of lease.
        tokio::time::advance(ms(100)).await;
        assert_eq!(holders.wanted(drift(400)), [1]);
        // Client 1's lease seen by a clock as slow as real time: never.
        assert!(holders.wanted(drift(100)).is_empty());
        // The fault waits for such a holder, within its slack.
        stalls[1].set_holding(false);
        let grant = async {
            tokio::time::sleep(ms(20)).await;
            stalls[0].set_holding(false);
            stalls[0].set_holding(true);
            stalls[0].holds_until(Instant::now() + ms(320));
        };
        let (aimed, ()) = tokio::join!(holders.aim(drift(300), 0, ms(100)), grant);
        assert_eq!(aimed.client, Some(0));
        assert!(aimed.waited >= ms(20) && aimed.waited < ms(30), "{aimed:?}");
    }

    #[test]
    fn a_stall_goes_to_a_point_still_ahead_in_the_hold() {
        use StallPoint as P;
        let stalls: Vec<Stall> = (0..2).map(|_| Stall::default()).collect();
        let holders = Holders::new(&stalls, Duration::from_millis(400), Duration::from_millis(500));
        // Client 0 passed every workload point in an earlier hold, never a
        // request in flight or a point between commands.
        for point in [P::AfterGrant, P::AfterWrite, P::BeforeRenew, P::BeforeRelease] {
            stalls[0].take_at(point);
        }
        let all = StallPoints::ALL;
        // Not holding: as drawn, unless its recipe never passes the point.
        assert_eq!(holders.point_ahead(0, P::AfterGrant, all, 0), P::AfterGrant);
        assert_ne!(holders.point_ahead(0, P::InFlight, all, 0), P::InFlight);
        // A new turn: nothing held, then a grant.
        stalls[0].set_holding(false);
        stalls[0].set_holding(true);
        stalls[0].take_at(P::AfterGrant);
        // After its grant: that point is behind it, and the points its
        // recipe never passes are nowhere.
        let ahead: Vec<P> =
            (0..12).map(|pick| holders.point_ahead(0, P::AfterGrant, all, pick)).collect();
        for point in [P::AfterWrite, P::BeforeRenew, P::BeforeRelease] {
            assert!(ahead.contains(&point), "{ahead:?}");
        }
        let nowhere = [P::AfterGrant, P::InFlight, P::BetweenCommands];
        assert!(!ahead.iter().any(|point| nowhere.contains(point)), "{ahead:?}");
        let two = StallPoints::of(&[P::InFlight, P::BeforeRelease]);
        assert_eq!(holders.point_ahead(0, P::InFlight, two, 0), P::BeforeRelease);
        // A point still ahead stays; with only passed points asked for, the
        // drawn one stays (it strikes at the next grant).
        assert_eq!(holders.point_ahead(0, P::AfterWrite, all, 3), P::AfterWrite);
        let after_grant = StallPoints::of(&[P::AfterGrant]);
        assert_eq!(holders.point_ahead(0, P::AfterGrant, after_grant, 3), P::AfterGrant);
        // Between commands: ahead of a holder whose grant had none (its
        // release may), behind one whose grant had two.
        stalls[0].set_holding(false);
        stalls[0].take_at(P::BetweenCommands);
        stalls[0].set_holding(false);
        stalls[0].set_holding(true);
        assert_eq!(holders.point_ahead(0, P::BetweenCommands, all, 0), P::BetweenCommands);
        // An acquire of two commands: the hold it grants has passed them.
        stalls[0].set_holding(false);
        stalls[0].take_at(P::BetweenCommands);
        stalls[0].set_holding(true);
        assert_ne!(holders.point_ahead(0, P::BetweenCommands, all, 0), P::BetweenCommands);
        // A point that comes again stays, once passed in this hold too.
        stalls[0].take_at(P::BeforeRenew);
        assert_eq!(holders.point_ahead(0, P::BeforeRenew, all, 0), P::BeforeRenew);
        // A request in flight is ahead of a holder that renews again and
        // again, and of a client about to be granted; not of the others.
        stalls[1].take_at(P::InFlight);
        assert_eq!(holders.point_ahead(1, P::InFlight, all, 0), P::InFlight);
        stalls[1].set_holding(true);
        stalls[1].take_at(P::InFlight);
        assert_eq!(holders.point_ahead(1, P::InFlight, all, 0), P::BeforeRelease);
        stalls[1].take_at(P::BeforeRenew);
        assert_eq!(holders.point_ahead(1, P::InFlight, all, 0), P::InFlight);
    }

    #[test]
    fn a_release_is_not_ahead_of_a_worker_that_never_locks() {
        use StallPoint as P;
        let stalls: Vec<Stall> = (0..2).map(|_| Stall::default()).collect();
        let holders = Holders::new(&stalls, Duration::from_secs(1), Duration::from_secs(1));
        let all = StallPoints::ALL;
        // Before any grant, a release is ahead, as for a lock's client.
        assert_eq!(holders.point_ahead(0, P::BeforeRelease, all, 0), P::BeforeRelease);
        // A worker that took jobs and charged them with no lock: the
        // points it passes, never a release.
        stalls[0].take_at(P::AfterGrant);
        stalls[0].take_at(P::AfterWrite);
        assert_ne!(holders.point_ahead(0, P::BeforeRelease, all, 0), P::BeforeRelease);
        assert_eq!(holders.point_ahead(0, P::BeforeRelease, all, 1), P::AfterWrite);
    }
}
