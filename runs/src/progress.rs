//! Progress on a terminal: one line on standard error, drawn by indicatif,
//! while a check, its seeds or a matrix's cells run: the time gone, what
//! runs, how far it is, the operations so far and, in a real run, the faults
//! active right now.
//!
//! The line fits the terminal's width (`COLUMNS` when set, else the
//! terminal's own, else 80): below [`BAR_FROM`] columns it has no bar, and
//! a real run's message gives up its other parts before the faults active
//! now ([`fit`]).
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

/// The narrowest terminal whose line has a bar: below it, the bar's 27
/// columns go to the message.
pub const BAR_FROM: usize = 120;

/// A progress line on standard error, or nothing when it is not a terminal.
#[derive(Debug)]
pub struct Progress {
    bar: Option<ProgressBar>,
    /// The bar is a real run's time (ms of its time limit), not a count.
    timed: bool,
    /// What the template puts before the message.
    layout: Layout,
}

/// The parts of the line before its message: what [`room`] subtracts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// `[=====>    ] `, 24 columns inside.
    pub bar: bool,
    /// A count's `{pos}/{len} {unit} `: its total and unit.
    pub count: Option<(u64, String)>,
}

impl Layout {
    fn template(&self) -> String {
        let mut template = "{spinner:.green} {elapsed_precise} ".to_string();
        if self.bar {
            template.push_str("[{bar:24.cyan/blue}] ");
        }
        if let Some((_, unit)) = &self.count {
            template.push_str(&format!("{{pos}}/{{len}} {unit} "));
        }
        template.push_str("{wide_msg}");
        template
    }
}

/// The columns left to the message on a terminal `columns` wide, after
/// the spinner, the time gone (`00:01:02`) and what `layout` adds.
pub fn room(columns: usize, layout: &Layout) -> usize {
    let mut taken = 1 + 1 + 8 + 1;
    if layout.bar {
        taken += 26 + 1;
    }
    if let Some((total, unit)) = &layout.count {
        let digits = total.to_string().len();
        taken += 2 * digits + 1 + 1 + unit.chars().count() + 1;
    }
    columns.saturating_sub(taken)
}

/// The terminal's width: `COLUMNS` when it is a number, else what the
/// terminal on standard error says, else 80.
pub fn columns() -> usize {
    let given = std::env::var("COLUMNS").ok().and_then(|columns| columns.trim().parse().ok());
    given
        .filter(|&columns: &usize| columns > 0)
        .or_else(|| console::Term::stderr().size_checked().map(|(_, columns)| usize::from(columns)))
        .unwrap_or(80)
}

impl Progress {
    /// A count of `total` `unit` (`seeds`, `cells`): done out of total.
    pub fn count(total: u64, unit: &str) -> Progress {
        let layout = Layout { bar: columns() >= BAR_FROM, count: Some((total, unit.to_string())) };
        Progress { bar: bar(total, &layout.template(), true), timed: false, layout }
    }

    /// One real run of `time_limit`: the bar is its time. It shows once the
    /// clients start (what is printed while servers start stays whole).
    pub fn timed(time_limit: Duration) -> Progress {
        let total = u64::try_from(time_limit.as_millis()).unwrap_or(u64::MAX).max(1);
        let layout = Layout { bar: columns() >= BAR_FROM, count: None };
        Progress { bar: bar(total, &layout.template(), false), timed: true, layout }
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
                    let room = room(columns(), &self.layout);
                    bar.set_message(seen.describe(label, time_limit, room));
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
    /// client-2 (3 started)`, in at most `width` columns ([`fit`]).
    fn describe(&self, label: &str, time_limit: Duration, width: usize) -> String {
        let Some(started) = self.started else {
            return fit_plain(width, &format!("{label}, starting servers and clients"));
        };
        let limit = time_limit.as_secs_f64();
        let gone = started.elapsed().as_secs_f64().min(limit);
        let ops = self.lock_ops;
        if self.ended {
            return fit_plain(width, &format!("{label}, {ops} lock ops, checking the history"));
        }
        let parts = Parts {
            label: label.to_string(),
            gone: format!("{gone:.0}"),
            limit: format!("{limit:.0}"),
            lock_ops: ops,
            active: self
                .active
                .iter()
                .map(|(fault, targets)| format!("{fault} {}", targets.join(",")).trim().to_string())
                .collect(),
            started: self.faults,
        };
        fit(width, &parts)
    }
}

/// What a real run's progress message says, before it is fitted to a width.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parts {
    /// What runs: `redis --nemesis pause`.
    pub label: String,
    /// Seconds gone and the time limit, as shown.
    pub gone: String,
    pub limit: String,
    /// Completed acquires, releases and renewals.
    pub lock_ops: u64,
    /// The faults active now, each with its targets: `pause client-2`.
    pub active: Vec<String>,
    /// Faults started so far.
    pub started: u64,
}

/// `parts` in at most `width` columns: the whole message when it fits,
/// else the first of ever shorter forms that does (the count of faults
/// started, then words, the lock operations, the time and the label are
/// given up, in that order), and the faults active now last of all, cut
/// with `…` only when even they alone do not fit.
pub fn fit(width: usize, parts: &Parts) -> String {
    let Parts { label, gone, limit, lock_ops: ops, active, started } = parts;
    let now = if active.is_empty() { "none".to_string() } else { active.join("; ") };
    let forms = [
        format!("{label}, {gone}/{limit} s, {ops} lock ops, faults now: {now} ({started} started)"),
        format!("{label}, {gone}/{limit} s, {ops} lock ops, faults now: {now}"),
        format!("{label}, {gone}/{limit}s, {ops} ops, now: {now}"),
        format!("{label}, {gone}/{limit}s, now: {now}"),
        format!("{label}, now: {now}"),
    ];
    if let Some(form) = forms.into_iter().find(|form| form.chars().count() <= width) {
        return form;
    }
    // The label cut short, while it keeps a few characters of its own.
    let tail = format!(", now: {now}");
    let left = width.saturating_sub(tail.chars().count());
    if left >= 6 {
        return format!("{}{tail}", fit_plain(left, label));
    }
    fit_plain(width, &format!("now: {now}"))
}

/// `text` in at most `width` columns: cut with `…` when longer.
fn fit_plain(width: usize, text: &str) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    let kept: String = text.chars().take(width.saturating_sub(1)).collect();
    if width == 0 {
        return String::new();
    }
    format!("{kept}…")
}

#[cfg(test)]
mod tests {
    use super::{fit, room, Layout, Parts, BAR_FROM};

    fn parts(active: &[&str]) -> Parts {
        Parts {
            label: "redis --nemesis pause,partition".to_string(),
            gone: "4".to_string(),
            limit: "10".to_string(),
            lock_ops: 1234,
            active: active.iter().map(ToString::to_string).collect(),
            started: 3,
        }
    }

    /// The message on a terminal `columns` wide, as a real run shows it.
    fn line(columns: usize, parts: &Parts) -> String {
        let layout = Layout { bar: columns >= BAR_FROM, count: None };
        let message = fit(room(columns, &layout), parts);
        assert!(room(columns, &layout) + 11 + if layout.bar { 27 } else { 0 } <= columns.max(38));
        message
    }

    #[test]
    fn a_wide_terminal_shows_everything() {
        let parts = parts(&["pause client-2", "partition halves"]);
        assert_eq!(
            line(200, &parts),
            "redis --nemesis pause,partition, 4/10 s, 1234 lock ops, faults now: \
             pause client-2; partition halves (3 started)"
        );
    }

    #[test]
    fn eighty_columns_give_up_the_rest_before_the_active_faults() {
        let parts = parts(&["pause client-2", "partition halves"]);
        let message = line(80, &parts);
        assert_eq!(
            message,
            "redis --nemesis pause,partiti…, now: pause client-2; partition halves"
        );
        assert_eq!(message.chars().count(), 80 - 11);
        let one = line(80, &self::parts(&["pause client-2"]));
        assert_eq!(one, "redis --nemesis pause,partition, 4/10s, 1234 ops, now: pause client-2");
        let quiet = line(80, &self::parts(&[]));
        assert_eq!(quiet, "redis --nemesis pause,partition, 4/10s, 1234 ops, now: none");
    }

    #[test]
    fn forty_columns_cut_the_label_then_the_faults() {
        let one = line(40, &parts(&["pause client-2"]));
        assert_eq!(one, "redis -…, now: pause client-2");
        assert!(one.chars().count() <= 40 - 11);
        let two = line(40, &parts(&["pause client-2", "partition halves"]));
        assert_eq!(two, "now: pause client-2; partiti…");
        assert_eq!(two.chars().count(), 40 - 11);
    }

    #[test]
    fn a_message_never_passes_its_width() {
        let parts = parts(&["pause client-2", "kill redis-1"]);
        for width in 0..150 {
            let message = fit(width, &parts);
            assert!(message.chars().count() <= width, "{width}: {message}");
            if width >= 40 {
                assert!(message.contains("pause client-2; kill redis-1"), "{width}: {message}");
            }
        }
    }

    #[test]
    fn a_count_leaves_its_total_and_unit_room() {
        let counted = Layout { bar: false, count: Some((12, "cells".to_string())) };
        // `⠁ 00:00:01 ` and `10/12 cells `.
        assert_eq!(room(80, &counted), 80 - 11 - 12);
        let barred = Layout { bar: true, ..counted.clone() };
        assert_eq!(room(200, &barred), 200 - 11 - 27 - 12);
        assert_eq!(room(10, &barred), 0);
        assert_eq!(
            barred.template(),
            "{spinner:.green} {elapsed_precise} [{bar:24.cyan/blue}] {pos}/{len} cells {wide_msg}"
        );
    }
}
