//! The seeded fault schedule both worlds share, Jepsen's: after a quiet
//! start a fault is on, then off for a gap, then the next, and so on; every
//! fault is healed a quiet period before the end, so that the history shows
//! whether the system recovers. Each world says how a fault of a kind is
//! drawn ([`Draws`]) and carries the faults out its own way.

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

/// The faults of a run of `time_limit`, each of one of `kinds` (picked
/// uniformly): for each, the kind, then its action and length; a fault that
/// would end inside the quiet end ends the schedule; then its targets, then
/// the gap after it. Nothing when no kind is on or the run is too short for
/// its quiet periods.
pub fn schedule<D: Draws>(
    kinds: &[FaultKind],
    quiet: Quiet,
    time_limit: Duration,
    draws: &D,
    rng: &mut SmallRng,
) -> Vec<D::Fault> {
    let mut faults = Vec::new();
    if kinds.is_empty() || time_limit <= quiet.start + quiet.end {
        return faults;
    }
    let last = time_limit - quiet.end;
    let mut at = quiet.start;
    loop {
        let kind = kinds[rng.gen_range(0..kinds.len())];
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
    fn nothing_is_drawn_without_a_kind_or_the_time_for_the_quiet_periods() {
        assert!(plan(&[], Duration::from_secs(20), 1).is_empty());
        assert!(plan(&[FaultKind::Kill], Duration::from_secs(3), 1).is_empty());
        // Room for the quiet periods but not for the shortest fault.
        assert!(plan(&[FaultKind::Kill], Duration::from_millis(3_050), 1).is_empty());
    }
}
