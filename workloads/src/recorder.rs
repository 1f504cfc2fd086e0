//! Records operations as history events, in the order they happen, and
//! writes them to a history file as they come when asked to.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use lockcheck_checker::{redact, Event, EventType, Function, Process};
use serde_json::value::RawValue;
use serde_json::Value;

/// Where a recorder reads the time: nanoseconds since the test started.
pub type Clock = Box<dyn Fn() -> u64 + Send>;

/// The events of one test, with indices and times assigned as they come.
pub struct Recorder {
    events: Vec<Event>,
    clock: Clock,
    last_ns: u64,
    /// Where each event is also written as it is recorded.
    file: Option<HistoryFile>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder").field("events", &self.events.len()).finish()
    }
}

/// A recorder shared by every client of a test.
pub type SharedRecorder = Arc<Mutex<Recorder>>;

/// Records one event of client process `process` on `key` into the
/// shared recorder: what every workload's clients record.
pub(crate) fn record_client(
    recorder: &SharedRecorder,
    process: i64,
    event_type: EventType,
    f: Function,
    key: &str,
    value: Value,
    error: Option<&str>,
) {
    recorder.lock().expect("the recorder is never poisoned").record(
        Process::Client(process),
        event_type,
        f,
        Some(key),
        value,
        error,
    );
}

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
        Recorder { events: Vec::new(), clock, last_ns: 0, file: None }
    }

    /// Writes every event to `file` too, as it is recorded.
    pub fn writing_to(mut self, file: HistoryFile) -> Self {
        self.file = Some(file);
        self
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

    /// Appends one event (and writes it to the history file, if any). Once
    /// the tool is interrupted ([`crate::interrupt`]) nothing more is
    /// recorded: what follows a Ctrl-C is the tool winding down, not the
    /// test.
    pub fn record(
        &mut self,
        process: Process,
        event_type: EventType,
        f: Function,
        key: Option<&str>,
        value: Value,
        error: Option<&str>,
    ) {
        if crate::interrupt::requested() {
            return;
        }
        let event = Event {
            index: self.events.len() as u64,
            time_ns: self.now_ns(),
            process,
            event_type,
            f,
            key: key.map(str::to_string),
            value: raw(value),
            // A driver's error may quote a URL: never its password.
            error: error.map(redact),
            extra: None,
        };
        if let Some(file) = &self.file {
            file.append(&event);
        }
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

/// A history written as it is recorded: each event appended as one JSON
/// line, exactly as [`lockcheck_checker::write_events`] writes it, and
/// handed to the kernel at once (no buffer in the tool). However the tool
/// ends (an error, a panic, a signal, SIGKILL), the file holds every event
/// recorded so far, at most its last line cut short. Clones share the file.
#[derive(Debug, Clone)]
pub struct HistoryFile {
    inner: Arc<HistoryInner>,
}

#[derive(Debug)]
struct HistoryInner {
    path: PathBuf,
    writer: Mutex<HistoryWriter>,
    /// Events written whole.
    events: AtomicU64,
}

#[derive(Debug)]
struct HistoryWriter {
    file: File,
    /// One event's line, reused.
    line: Vec<u8>,
    /// The first write that failed: nothing more is written after it.
    error: Option<io::Error>,
}

impl HistoryFile {
    /// Creates `path` (it must not exist) for a history to be written.
    pub fn create(path: &Path) -> io::Result<HistoryFile> {
        // Only its owner reads it: an error recorded may name a server.
        let file = OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
        let writer = HistoryWriter { file, line: Vec::with_capacity(256), error: None };
        let inner =
            HistoryInner { path: path.to_path_buf(), writer: Mutex::new(writer), events: 0.into() };
        Ok(HistoryFile { inner: Arc::new(inner) })
    }

    /// Appends `event` as one line, as it is: [`Recorder::record`], the
    /// writer of every run's history, has redacted its error already.
    pub fn append(&self, event: &Event) {
        let mut writer = self.inner.writer.lock().unwrap_or_else(PoisonError::into_inner);
        let HistoryWriter { file, line, error } = &mut *writer;
        if error.is_some() {
            return;
        }
        line.clear();
        let written =
            serde_json::to_writer(&mut *line, event).map_err(io::Error::from).and_then(|()| {
                line.push(b'\n');
                file.write_all(line)
            });
        match written {
            Ok(()) => {
                self.inner.events.fetch_add(1, Ordering::SeqCst);
            }
            Err(failed) => *error = Some(failed),
        }
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// How many events the file holds.
    pub fn events(&self) -> u64 {
        self.inner.events.load(Ordering::SeqCst)
    }

    /// Whether every event was written; the first failure if not.
    pub fn result(&self) -> io::Result<()> {
        let writer = self.inner.writer.lock().unwrap_or_else(PoisonError::into_inner);
        match &writer.error {
            None => Ok(()),
            Some(error) => Err(io::Error::new(error.kind(), error.to_string())),
        }
    }
}
