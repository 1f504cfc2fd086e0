//! Wake-ups per release: how many waiting clients a release wakes. A lock
//! whose waiters each watch only the one before them (ZooKeeper's and
//! etcd's recipes) wakes one; waiters that all watch the lock (the herd)
//! wake every one of them, all but one to go back to sleep; waiters that
//! poll wake on their own clock, whether or not anything was released. No
//! safety question: the cost of a recipe under contention.
//!
//! A recipe that waits on a watch records, with each acquire's completion,
//! how often a watch woke it (`"woken": 2` in the value), and a waiter that
//! gives up (`busy`) leaves the line as a release does; one that polls
//! records nothing, and its wake-ups are its refused tries (`busy`).

use serde::Deserialize;

use crate::{Event, EventType, Function};

/// What a history says of its waiters' wake-ups.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WakeUps {
    /// Watches that woke a waiting acquire, summed over every acquire that
    /// says (`woken`).
    pub woken: u64,
    /// Whether any acquire says: its waiters wait on watches.
    pub watched: bool,
    /// Acquires refused `busy`: a poll that found the lock taken (or a
    /// waiter that gave up).
    pub busy: u64,
    /// Releases that took effect.
    pub releases: u64,
}

#[derive(Deserialize)]
struct Woken {
    woken: Option<u64>,
}

impl WakeUps {
    /// Counts them in `events`, in one pass.
    pub fn of(events: &[Event]) -> WakeUps {
        let mut counts = WakeUps::default();
        for event in events {
            match (&event.f, event.event_type) {
                (&Function::Release, EventType::Ok) => counts.releases += 1,
                (&Function::Acquire, EventType::Invoke) => {}
                (&Function::Acquire, event_type) => {
                    if event_type == EventType::Fail && event.error.as_deref() == Some("busy") {
                        counts.busy += 1;
                    }
                    let woken = event
                        .value
                        .as_deref()
                        .and_then(|value| serde_json::from_str::<Woken>(value.get()).ok())
                        .and_then(|value| value.woken);
                    if let Some(woken) = woken {
                        counts.watched = true;
                        counts.woken += woken;
                    }
                }
                _ => {}
            }
        }
        counts
    }

    /// Wake-ups per release: watches that fired, or for a polling recipe
    /// its refused polls; `None` with no release. A waiter on a watch that
    /// gives up (`busy`) leaves the line as a releasing holder does, and
    /// wakes whoever watches it: it counts as a release.
    pub fn per_release(&self) -> Option<f64> {
        let (wakes, releases) = match self.watched {
            true => (self.woken, self.releases + self.busy),
            false => (self.busy, self.releases),
        };
        (releases > 0).then(|| wakes as f64 / releases as f64)
    }

    /// One line for a run's summary: `1.00 per release (41 watch
    /// wake-ups, 41 releases)`, or none without a release.
    pub fn describe(&self) -> Option<String> {
        let per = self.per_release()?;
        Some(match self.watched {
            true => format!(
                "{per:.2} per release ({} watch wake-ups; {} releases and {} waits given up)",
                self.woken, self.releases, self.busy
            ),
            false => format!(
                "{per:.2} per release ({} polls refused busy, {} releases): waiters poll",
                self.busy, self.releases
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::WakeUps;
    use crate::Event;

    #[test]
    fn watched_wake_ups_are_summed_and_polls_counted_per_release() {
        let history = r#"{"index":0,"time":0,"process":1,"type":"invoke","f":"acquire","key":"l","value":null}
{"index":1,"time":1,"process":1,"type":"ok","f":"acquire","key":"l","value":{"fence":3,"woken":2}}
{"index":2,"time":2,"process":2,"type":"invoke","f":"acquire","key":"l","value":null}
{"index":3,"time":3,"process":2,"type":"fail","f":"acquire","key":"l","value":{"woken":1},"error":"busy"}
{"index":4,"time":4,"process":1,"type":"invoke","f":"release","key":"l","value":null}
{"index":5,"time":5,"process":1,"type":"ok","f":"release","key":"l","value":null}
"#;
        let events: Vec<Event> =
            history.lines().map(|line| serde_json::from_str(line).expect("an event")).collect();
        let counts = WakeUps::of(&events);
        assert_eq!(counts, WakeUps { woken: 3, watched: true, busy: 1, releases: 1 });
        assert_eq!(counts.per_release(), Some(1.5));
        let line = counts.describe().unwrap();
        assert!(line.contains("3 watch wake-ups; 1 releases and 1 waits given up"), "{line}");
        let polled = WakeUps { busy: 6, releases: 3, ..WakeUps::default() };
        assert_eq!(polled.per_release(), Some(2.0));
        assert!(polled.describe().unwrap().ends_with("waiters poll"));
        assert_eq!(WakeUps::default().describe(), None);
    }
}
