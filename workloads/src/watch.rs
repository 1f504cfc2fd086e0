//! What waiting on a watch comes to, for every recipe whose waiters watch
//! something (etcd's and ZooKeeper's locks): how one wait ended, and the
//! wake-ups a client counted, whence the wake-ups per release.

/// How a wait for a watch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Woken {
    /// What the watch was for had happened before the watch was set: no
    /// wait.
    Already,
    /// The watch fired: a wake-up.
    Watch,
    /// The wait's deadline passed first.
    TimedOut,
}

/// Waits counted by a recipe: how many waiters woke, for the wake-ups
/// per release.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WakeUps {
    /// Watches that fired while the client waited for the lock.
    pub woken: u64,
    /// Of those, wake-ups after which the client still could not take the
    /// lock (a herd's wasted ones).
    pub wasted: u64,
    /// The wake-ups [`WakeUps::take_woken`] has handed out.
    reported: u64,
}

impl WakeUps {
    /// One wait ended as `woken` says: `true` if a watch fired.
    pub fn count(&mut self, woken: Woken) -> bool {
        let fired = woken == Woken::Watch;
        self.woken += u64::from(fired);
        fired
    }

    /// The watches that fired since this was last asked.
    pub fn take_woken(&mut self) -> u64 {
        let woken = self.woken - self.reported;
        self.reported = self.woken;
        woken
    }
}

#[cfg(test)]
mod tests {
    use super::{WakeUps, Woken};

    #[test]
    fn only_a_fired_watch_counts_and_each_is_handed_out_once() {
        let mut wake_ups = WakeUps::default();
        assert!(!wake_ups.count(Woken::Already));
        assert!(!wake_ups.count(Woken::TimedOut));
        assert!(wake_ups.count(Woken::Watch));
        assert!(wake_ups.count(Woken::Watch));
        assert_eq!(wake_ups.take_woken(), 2);
        assert_eq!(wake_ups.take_woken(), 0);
        assert!(wake_ups.count(Woken::Watch));
        assert_eq!((wake_ups.woken, wake_ups.take_woken()), (3, 1));
    }
}
