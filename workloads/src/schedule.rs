//! The seeded fault schedule both worlds share, Jepsen's: after a quiet
//! start a fault is on, then off for a gap, then the next, and so on; every
//! fault is healed a quiet period before the end, so that the history shows
//! whether the system recovers. Each world says how a fault of a kind is
//! drawn ([`Draws`]) and carries the faults out its own way. A stall is one
//! choice of the schedule, of a client (`pause`) or of the lock server
//! (`sigstop`) when both are on ([`Slot`]).

use std::time::Duration;

use rand::rngs::SmallRng;
use rand::Rng;

use crate::FaultKind;

/// The fault-free stretches at both ends of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quiet {
    /// No fault starts before this.
    pub start: Duration,
    /// Every fault has ended this long before the time limit.
    pub end: Duration,
}

/// When a fault is on: from `start` to `end` after the run began.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub start: Duration,
    pub end: Duration,
}

/// How one world draws its faults. The schedule calls these in a fixed
/// order for each fault ([`schedule`]), so that a seed gives one schedule.
pub trait Draws {
    /// What a fault does, drawn before whom it strikes: enough to know how
    /// long it lasts.
    type Action;
    /// A fault in full, as the world's executors take it.
    type Fault;
    /// Draws what a fault of `kind` does, and how long it lasts.
    fn action(&self, kind: FaultKind, rng: &mut SmallRng) -> (Self::Action, Duration);
    /// Draws whom `action` strikes, once it is known to heal in time.
    fn targets(&self, action: Self::Action, window: Window, rng: &mut SmallRng) -> Self::Fault;
    /// Draws the quiet time after `fault`.
    fn gap(&self, fault: &Self::Fault, rng: &mut SmallRng) -> Duration;
}

/// How often a stall slot with both `pause` and `sigstop` on stalls a
/// client rather than the lock server.
pub const CLIENT_STALL: f64 = 0.7;

/// One choice of the schedule, picked uniformly among a run's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// A fault of this kind.
    One(FaultKind),
    /// `pause` and `sigstop` both on: a stall, of a client or of the lock
    /// server, by a coin ([`CLIENT_STALL`]).
    Stall,
}

impl Slot {
    /// The slots of `kinds`, in their order: one per kind, but `pause` and
    /// `sigstop` share one, where the first of them stands. So a run with
    /// both draws as often from the others as a run with one of them.
    pub fn of(kinds: &[FaultKind]) -> Vec<Slot> {
        let stalls = [FaultKind::Pause, FaultKind::Sigstop];
        let both = stalls.iter().all(|kind| kinds.contains(kind));
        let mut slots = Vec::with_capacity(kinds.len());
        for &kind in kinds {
            let slot = match both && stalls.contains(&kind) {
                true => Slot::Stall,
                false => Slot::One(kind),
            };
            if !slots.contains(&slot) {
                slots.push(slot);
            }
        }
        slots
    }

    /// The kinds it stands for.
    pub fn kinds(self) -> Vec<FaultKind> {
        match self {
            Slot::One(kind) => vec![kind],
            Slot::Stall => vec![FaultKind::Pause, FaultKind::Sigstop],
        }
    }

    /// Draws its fault's kind: a stall's by its coin.
    pub fn draw(self, rng: &mut SmallRng) -> FaultKind {
        match self {
            Slot::One(kind) => kind,
            Slot::Stall if rng.gen_bool(CLIENT_STALL) => FaultKind::Pause,
            Slot::Stall => FaultKind::Sigstop,
        }
    }
}

/// The faults of a run of `time_limit`, each of one of `kinds`: for each,
/// its slot (picked uniformly, [`Slot::of`]) and the slot's kind, then its
/// action and length; a fault that would end inside the quiet end ends the
/// schedule; then its targets, then the gap after it. Nothing when no kind
/// is on or the run is too short for its quiet periods.
pub fn schedule<D: Draws>(
    kinds: &[FaultKind],
    quiet: Quiet,
    time_limit: Duration,
    draws: &D,
    rng: &mut SmallRng,
) -> Vec<D::Fault> {
    let mut faults = Vec::new();
    let slots = Slot::of(kinds);
    if slots.is_empty() || time_limit <= quiet.start + quiet.end {
        return faults;
    }
    let last = time_limit - quiet.end;
    let mut at = quiet.start;
    loop {
        let kind = slots[rng.gen_range(0..slots.len())].draw(rng);
        let (action, length) = draws.action(kind, rng);
        let end = at + length;
        if end > last {
            break;
        }
        let fault = draws.targets(action, Window { start: at, end }, rng);
        at = end + draws.gap(&fault, rng);
        faults.push(fault);
    }
    faults
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    /// Faults of 100 to 300 ms on one of four targets, 50 to 150 ms apart.
    struct Toy;

    impl Draws for Toy {
        type Action = FaultKind;
        type Fault = (FaultKind, Window, u32);

        fn action(&self, kind: FaultKind, rng: &mut SmallRng) -> (FaultKind, Duration) {
            (kind, Duration::from_millis(rng.gen_range(100..=300)))
        }

        fn targets(&self, kind: FaultKind, window: Window, rng: &mut SmallRng) -> Self::Fault {
            (kind, window, rng.gen_range(0..4))
        }

        fn gap(&self, _: &Self::Fault, rng: &mut SmallRng) -> Duration {
            Duration::from_millis(rng.gen_range(50..=150))
        }
    }

    const QUIET: Quiet = Quiet { start: Duration::from_secs(1), end: Duration::from_secs(2) };

    fn plan(kinds: &[FaultKind], time_limit: Duration, seed: u64) -> Vec<(FaultKind, Window, u32)> {
        schedule(kinds, QUIET, time_limit, &Toy, &mut SmallRng::seed_from_u64(seed))
    }

    #[test]
    fn every_fault_is_inside_the_quiet_periods_and_apart_from_the_next() {
        let kinds = [FaultKind::Pause, FaultKind::Kill];
        let faults = plan(&kinds, Duration::from_secs(20), 1);
        assert!(faults.len() > 20, "{faults:?}");
        for (at, (kind, window, target)) in faults.iter().enumerate() {
            assert!(kinds.contains(kind) && *target < 4, "{window:?}");
            assert!(window.start >= QUIET.start, "{window:?}");
            assert!(window.end <= Duration::from_secs(18), "healed before the end: {window:?}");
            let length = window.end - window.start;
            assert!(length >= Duration::from_millis(100), "{window:?}");
            if let Some((_, next, _)) = faults.get(at + 1) {
                assert!(next.start >= window.end + Duration::from_millis(50), "{next:?}");
            }
        }
        let drawn: Vec<FaultKind> = faults.iter().map(|(kind, ..)| *kind).collect();
        assert!(kinds.iter().all(|kind| drawn.contains(kind)), "each kind is drawn: {drawn:?}");
    }

    #[test]
    fn the_schedule_follows_the_seed() {
        let kinds = [FaultKind::Pause, FaultKind::Kill];
        let time_limit = Duration::from_secs(20);
        assert_eq!(plan(&kinds, time_limit, 7), plan(&kinds, time_limit, 7));
        assert_ne!(plan(&kinds, time_limit, 7), plan(&kinds, time_limit, 8));
    }

    #[test]
    fn pause_and_sigstop_share_one_slot_where_the_first_of_them_stands() {
        use FaultKind::{Clock, Kill, Pause, Sigstop};
        assert_eq!(Slot::of(&[Pause, Clock, Sigstop]), [Slot::Stall, Slot::One(Clock)]);
        assert_eq!(Slot::of(&[Kill, Sigstop, Pause]), [Slot::One(Kill), Slot::Stall]);
        assert_eq!(Slot::of(&[Sigstop, Kill]), [Slot::One(Sigstop), Slot::One(Kill)]);
        assert_eq!(Slot::of(&[Pause]), [Slot::One(Pause)]);
        assert_eq!(Slot::Stall.kinds(), [Pause, Sigstop]);
        // One of them alone is drawn with no coin: the draws after it are
        // those of a slot of any other kind.
        let mut rng = SmallRng::seed_from_u64(3);
        assert_eq!(Slot::One(Sigstop).draw(&mut rng), Sigstop);
        assert_eq!(rng.gen::<u64>(), SmallRng::seed_from_u64(3).gen::<u64>());
        // Both: a slot as often as kill's, a client's stall more often
        // than the server's.
        let faults = plan(&[Pause, Sigstop, Kill], Duration::from_secs(600), 1);
        let count = |kind| faults.iter().filter(|(drawn, ..)| *drawn == kind).count();
        let (pauses, sigstops, kills) = (count(Pause), count(Sigstop), count(Kill));
        assert!(sigstops > 0 && pauses > 2 * sigstops, "{pauses} {sigstops}");
        let stalls = pauses + sigstops;
        assert!(stalls * 4 > kills * 3 && kills * 4 > stalls * 3, "{stalls} {kills}");
    }

    #[test]
    fn nothing_is_drawn_without_a_kind_or_the_time_for_the_quiet_periods() {
        assert!(plan(&[], Duration::from_secs(20), 1).is_empty());
        assert!(plan(&[FaultKind::Kill], Duration::from_secs(3), 1).is_empty());
        // Room for the quiet periods but not for the shortest fault.
        assert!(plan(&[FaultKind::Kill], Duration::from_millis(3_050), 1).is_empty());
    }
}
