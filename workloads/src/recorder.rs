//! Records operations as history events, in the order they happen.

use std::sync::{Arc, Mutex};

use lockcheck_checker::{Event, EventType, Function, Process};
use serde_json::value::RawValue;
use serde_json::Value;

/// Where a recorder reads the time: nanoseconds since the test started.
pub type Clock = Box<dyn Fn() -> u64 + Send>;

/// The events of one test, with indices and times assigned as they come.
pub struct Recorder {
    events: Vec<Event>,
    clock: Clock,
    last_ns: u64,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder").field("events", &self.events.len()).finish()
    }
}

/// A recorder shared by every client of a test.
pub type SharedRecorder = Arc<Mutex<Recorder>>;

fn raw(value: Value) -> Option<Box<RawValue>> {
    match value {
        Value::Null => None,
        value => RawValue::from_string(value.to_string()).ok(),
    }
}

impl Recorder {
    /// A recorder whose time 0 is now, on tokio's clock.
    pub fn new() -> Self {
        let start = tokio::time::Instant::now();
        Recorder::with_clock(Box::new(move || {
            u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
        }))
    }

    /// A recorder reading its own clock (a simulator's virtual time, say).
    pub fn with_clock(clock: Clock) -> Self {
        Recorder { events: Vec::new(), clock, last_ns: 0 }
    }

    pub fn shared(self) -> SharedRecorder {
        Arc::new(Mutex::new(self))
    }

    /// The clock's time, never before the previous event's: several hosts
    /// or threads may read it, and a history's time never goes backwards.
    fn now_ns(&mut self) -> u64 {
        self.last_ns = self.last_ns.max((self.clock)());
        self.last_ns
    }

    /// Appends one event.
    pub fn record(
        &mut self,
        process: Process,
        event_type: EventType,
        f: Function,
        key: Option<&str>,
        value: Value,
        error: Option<&str>,
    ) {
        let event = Event {
            index: self.events.len() as u64,
            time_ns: self.now_ns(),
            process,
            event_type,
            f,
            key: key.map(str::to_string),
            value: raw(value),
            error: error.map(str::to_string),
            extra: None,
        };
        self.events.push(event);
    }

    /// Appends a fault's start or stop (`f`), with what it did (`value`:
    /// `{"fault":"kill","targets":["redis-0"]}`), as the nemesis.
    pub fn record_nemesis(&mut self, f: Function, value: Value) {
        self.record(Process::Nemesis, EventType::Info, f, None, value, None);
    }

    pub fn events(&self) -> &[Event] {
        &self.events
    }

    pub fn into_events(self) -> Vec<Event> {
        self.events
    }
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new()
    }
}
