//! Progress on a terminal: one line on standard error, drawn by indicatif,
//! while a check, its seeds or a matrix's cells run: the time gone, what
//! runs, how far it is, the operations so far and, in a real run, the faults
//! active right now.
//!
//! It is drawn only when standard error is a terminal. Otherwise nothing
//! is created and nothing extra is printed: CI logs, pipes and the tests see
//! byte for byte what they saw without it. Anything printed while a bar is
//! up goes through [`Progress::suspend`], so that the bar never garbles it.
//!
//! The libraries know nothing of it. A real run hands its recorder over
//! ([`recording`], from the nemesis it starts beside the clients) and a
//! thread here reads what was recorded so far, holding only a weak
//! reference; the simulator reports through its existing callbacks. Neither
//! changes a history.

use std::borrow::Cow;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use lockcheck_checker::{EventType, Function, Process};
use lockcheck_workloads::{Recorder, SharedRecorder};

/// How often the bar is redrawn even when nothing is reported (the clock
/// and the spinner move), and how often a real run's recorder is read.
const TICK: Duration = Duration::from_millis(200);

/// A progress line on standard error, or nothing when it is not a terminal.
#[derive(Debug)]
pub struct Progress {
    bar: Option<ProgressBar>,
    /// The bar is a real run's time (ms of its time limit), not a count.
    timed: bool,
}

impl Progress {
    /// A count of `total` `unit` (`seeds`, `cells`): done out of total.
    pub fn count(total: u64, unit: &str) -> Progress {
        let template = format!(
            "{{spinner:.green}} {{elapsed_precise}} [{{bar:24.cyan/blue}}] {{pos}}/{{len}} {unit} {{wide_msg}}"
        );
        Progress { bar: bar(total, &template, true), timed: false }
    }

    /// One real run of `time_limit`: the bar is its time. It shows once the
    /// clients start (what is printed while servers start stays whole).
    pub fn timed(time_limit: Duration) -> Progress {
        let total = u64::try_from(time_limit.as_millis()).unwrap_or(u64::MAX).max(1);
        let template = "{spinner:.green} {elapsed_precise} [{bar:24.cyan/blue}] {wide_msg}";
        Progress { bar: bar(total, template, false), timed: true }
    }

    pub fn message(&self, message: impl Into<Cow<'static, str>>) {
        if let Some(bar) = &self.bar {
            bar.set_message(message);
        }
    }

    /// One more seed or cell done.
    pub fn inc(&self) {
        if let Some(bar) = &self.bar {
            bar.inc(1);
        }
    }

    /// Runs `print` with the bar cleared, and draws it again after.
    pub fn suspend<R>(&self, print: impl FnOnce() -> R) -> R {
        match &self.bar {
            Some(bar) => bar.suspend(print),
            None => print(),
        }
    }

    /// Runs one real test (`run`) while a thread shows what it has recorded
    /// so far: `label` (what runs), its time out of `time_limit`, lock
    /// operations completed, and the faults started and not yet stopped.
    pub fn watch<R>(&self, label: &str, time_limit: Duration, run: impl FnOnce() -> R) -> R {
        let Some(bar) = &self.bar else { return run() };
        *watched() = None;
        WATCHING.store(true, Ordering::SeqCst);
        let stop = AtomicBool::new(false);
        let result = std::thread::scope(|scope| {
            let poller = scope.spawn(|| {
                let mut seen = Seen::default();
                while !stop.load(Ordering::SeqCst) {
                    seen.poll();
                    if self.timed && seen.started.is_some() {
                        if bar.is_hidden() {
                            bar.set_draw_target(ProgressDrawTarget::stderr());
                        }
                        let gone = seen.started.map(|at| at.elapsed()).unwrap_or_default();
                        bar.set_position(u64::try_from(gone.as_millis()).unwrap_or(u64::MAX));
                    }
                    bar.set_message(seen.describe(label, time_limit));
                    std::thread::park_timeout(TICK);
                }
            });
            // Stops the thread also when `run` panics.
            let _stop = Stop(&stop, poller.thread().clone());
            run()
        });
        WATCHING.store(false, Ordering::SeqCst);
        *watched() = None;
        result
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// A bar on standard error when it is a terminal, ticking on its own;
/// `shown`: drawn from the start, else once a run's clients start.
fn bar(total: u64, template: &str, shown: bool) -> Option<ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let target = if shown { ProgressDrawTarget::stderr() } else { ProgressDrawTarget::hidden() };
    let bar = ProgressBar::with_draw_target(Some(total), target);
    let style = ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    bar.set_style(style);
    bar.enable_steady_tick(TICK);
    Some(bar)
}

/// Sets the flag and wakes the thread when dropped.
struct Stop<'a>(&'a AtomicBool, std::thread::Thread);

impl Drop for Stop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
        self.1.unpark();
    }
}

/// Whether a [`Progress::watch`] waits for a recorder.
static WATCHING: AtomicBool = AtomicBool::new(false);
/// The recorder of the real run being watched.
static WATCHED: Mutex<Option<Weak<Mutex<Recorder>>>> = Mutex::new(None);

fn watched() -> std::sync::MutexGuard<'static, Option<Weak<Mutex<Recorder>>>> {
    WATCHED.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Hands a real run's recorder to the progress display, when one watches
/// (only a weak reference is kept: the run's history is untouched).
pub fn recording(recorder: &SharedRecorder) {
    if WATCHING.load(Ordering::SeqCst) {
        *watched() = Some(Arc::downgrade(recorder));
    }
}

/// What the watching thread has read of a real run's history so far.
#[derive(Debug, Default)]
struct Seen {
    /// Events read.
    events: usize,
    /// When the recorder was first seen: the clients' start.
    started: Option<Instant>,
    /// The recorder is gone: the clients are done.
    ended: bool,
    /// Completed acquires, releases and renewals.
    lock_ops: u64,
    /// Faults started so far.
    faults: u64,
    /// Faults started and not stopped: the fault and its targets.
    active: Vec<(String, Vec<String>)>,
}

impl Seen {
    /// Reads the events recorded since the last time.
    fn poll(&mut self) {
        let weak = watched().clone();
        let Some(recorder) = weak.as_ref().map(Weak::upgrade) else { return };
        let Some(recorder) = recorder else {
            self.ended = true;
            return;
        };
        self.started.get_or_insert_with(Instant::now);
        let recorder = recorder.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        for event in recorder.events().get(self.events..).unwrap_or_default() {
            match event.process {
                Process::Client(_) => {
                    let lock_op =
                        matches!(event.f, Function::Acquire | Function::Release | Function::Renew);
                    if lock_op && event.event_type != EventType::Invoke {
                        self.lock_ops += 1;
                    }
                }
                Process::Nemesis => {
                    let fields = event.value_fields().unwrap_or_default();
                    let fault = fields.fault.unwrap_or_else(|| "fault".to_string());
                    let targets = fields.targets.unwrap_or_default();
                    match event.f {
                        Function::Start => {
                            self.faults += 1;
                            self.active.push((fault, targets));
                        }
                        // As the HTML report pairs them: the last start of
                        // the same fault and targets, else of the same fault.
                        Function::Stop => {
                            let at = self
                                .active
                                .iter()
                                .rposition(|open| open.0 == fault && open.1 == targets)
                                .or_else(|| self.active.iter().rposition(|open| open.0 == fault));
                            if let Some(at) = at {
                                self.active.remove(at);
                            }
                        }
                        _ => {}
                    }
                }
            }
        }
        self.events = recorder.events().len();
    }

    /// `redis --nemesis pause, 4/10 s, 1234 lock ops, faults now: pause
    /// client-2 (3 started)`.
    fn describe(&self, label: &str, time_limit: Duration) -> String {
        let Some(started) = self.started else {
            return format!("{label}, starting servers and clients");
        };
        let limit = time_limit.as_secs_f64();
        let gone = started.elapsed().as_secs_f64().min(limit);
        let ops = self.lock_ops;
        if self.ended {
            return format!("{label}, {ops} lock ops, checking the history");
        }
        let now = if self.active.is_empty() {
            "none".to_string()
        } else {
            let active: Vec<String> = self
                .active
                .iter()
                .map(|(fault, targets)| format!("{fault} {}", targets.join(",")).trim().to_string())
                .collect();
            active.join("; ")
        };
        format!(
            "{label}, {gone:.0}/{limit:.0} s, {ops} lock ops, faults now: {now} ({} started)",
            self.faults
        )
    }
}
