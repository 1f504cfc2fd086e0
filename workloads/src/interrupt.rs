//! Ctrl-C, SIGTERM and SIGHUP: one handler for the whole tool.
//!
//! On the first of those signals the handler thread
//! 1. records it ([`signal`] then answers it, so that every error path of
//!    the main thread can say "interrupted" instead of whatever the
//!    interrupt broke, e.g. a server that was starting);
//! 2. runs what was registered with [`at_exit`]: the managed servers'
//!    `stop_all`, which stops every server, deletes its directory, and
//!    makes any server start under way fail at once;
//! 3. exits with 128 + the signal (130, 143, 129): at once, unless a
//!    command said it winds down by itself ([`install_cooperative`], as
//!    `lockcheck check` does: its recorder stops recording, its driver
//!    stops its clients, and it says where the history so far is). Then
//!    the handler waits up to [`GRACE`] for the main thread to exit through
//!    [`exit`], and exits itself when the main thread is busy elsewhere
//!    (a long check), or at a second signal, after printing what
//!    [`set_last_words`] left.
//!
//! The main thread exits through [`exit`], which runs the same and so waits
//! until the servers are stopped; the two threads never call `exit` at once.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

/// How long a cooperative command may take to wind down after a signal
/// before the handler exits for it.
pub const GRACE: Duration = Duration::from_secs(5);

/// The signal that interrupted the tool; 0 while none did.
static SIGNAL: AtomicI32 = AtomicI32::new(0);
/// The command winds down by itself after a signal.
static COOPERATIVE: AtomicBool = AtomicBool::new(false);
/// What to print when the handler exits for the main thread.
static LAST_WORDS: Mutex<Option<LastWords>> = Mutex::new(None);
/// Held by whichever thread exits the tool.
static EXITING: Mutex<()> = Mutex::new(());
/// The interrupt has been reported on stderr.
static REPORTED: AtomicBool = AtomicBool::new(false);
/// What runs on a signal and before the tool exits ([`at_exit`]).
static AT_EXIT: Mutex<Vec<fn()>> = Mutex::new(Vec::new());

/// Runs `cleanup` on the first signal and when the tool leaves through
/// [`exit`] (the managed servers register their `stop_all`). Each runs
/// every time: a cleanup must be safe to run twice, and from two threads.
pub fn at_exit(cleanup: fn()) {
    AT_EXIT.lock().unwrap_or_else(PoisonError::into_inner).push(cleanup);
}

fn run_at_exit() {
    let cleanups = AT_EXIT.lock().unwrap_or_else(PoisonError::into_inner).clone();
    for cleanup in cleanups {
        cleanup();
    }
}

/// Where the history of the run in progress is written, and how many
/// events it has, for the message of an interrupted run.
pub type LastWords = Box<dyn Fn() -> String + Send>;

/// Installs the handler (once): a signal stops every managed server and
/// exits with 128 + the signal.
pub fn install() -> Result<(), String> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();
    INSTALLED
        .get_or_init(|| {
            let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
                .map_err(|error| error.to_string())?;
            let thread = thread::Builder::new().name("lockcheck-signals".to_string());
            thread
                .spawn(move || {
                    let Some(signal) = signals.forever().next() else { return };
                    SIGNAL.store(signal, Ordering::SeqCst);
                    run_at_exit();
                    if COOPERATIVE.load(Ordering::SeqCst) {
                        let deadline = Instant::now() + GRACE;
                        while Instant::now() < deadline && signals.pending().next().is_none() {
                            thread::sleep(Duration::from_millis(20));
                        }
                        report(signal, last_words().as_deref());
                    }
                    exit(exit_code(signal));
                })
                .map(|_| ())
                .map_err(|error| error.to_string())
        })
        .clone()
}

/// As [`install`], for a command that winds down by itself after a signal
/// (checks [`signal`] and leaves through [`exit`]).
pub fn install_cooperative() -> Result<(), String> {
    COOPERATIVE.store(true, Ordering::SeqCst);
    install()
}

/// The signal that interrupted the tool, if one did.
pub fn signal() -> Option<i32> {
    match SIGNAL.load(Ordering::Relaxed) {
        0 => None,
        signal => Some(signal),
    }
}

/// Whether a signal interrupted the tool.
pub fn requested() -> bool {
    signal().is_some()
}

/// The exit code for `signal`: 128 + its number, as a shell reports it.
pub fn exit_code(signal: i32) -> u8 {
    u8::try_from(128 + signal).unwrap_or(u8::MAX)
}

/// `SIGINT`, `SIGTERM`, `SIGHUP`.
pub fn signal_name(signal: i32) -> String {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    match signal {
        SIGINT => "SIGINT".to_string(),
        SIGTERM => "SIGTERM".to_string(),
        SIGHUP => "SIGHUP".to_string(),
        other => format!("signal {other}"),
    }
}

/// What the handler prints if it has to exit for the main thread: where
/// the history so far is. `None` forgets it.
pub fn set_last_words(words: Option<LastWords>) {
    *LAST_WORDS.lock().unwrap_or_else(PoisonError::into_inner) = words;
}

/// What [`set_last_words`] left, said now: where the history so far is
/// when the run ends on an error or a panic.
pub fn last_words() -> Option<String> {
    LAST_WORDS.lock().unwrap_or_else(PoisonError::into_inner).as_ref().map(|words| words())
}

/// Prints `lockcheck: interrupted by SIGINT` and `detail` on stderr, once
/// per process, whichever thread gets there first.
pub fn report(signal: i32, detail: Option<&str>) {
    if REPORTED.swap(true, Ordering::SeqCst) {
        return;
    }
    match detail {
        Some(detail) => eprintln!("lockcheck: interrupted by {}: {detail}", signal_name(signal)),
        None => eprintln!("lockcheck: interrupted by {}", signal_name(signal)),
    }
}

/// Exits with `code` once what [`at_exit`] registered has run: every
/// managed server stopped and its directory deleted (waiting for the
/// handler if it is stopping them). Never runs
/// beside another thread's exit.
pub fn exit(code: u8) -> ! {
    run_at_exit();
    let _exiting = EXITING.lock().unwrap_or_else(PoisonError::into_inner);
    std::process::exit(i32::from(code))
}

/// For the interrupt tests (`tests/cli_interrupt.rs`): with
/// `LOCKCHECK_TEST_HOLD_BEFORE=check` (or `store`) the run stops before
/// its checkers run (or its files are stored) for up to two minutes, as a
/// long computation would, without looking for an interrupt: a signal then
/// ends the tool through the handler's grace period.
pub fn hold_before(phase: &str) {
    if std::env::var("LOCKCHECK_TEST_HOLD_BEFORE").is_ok_and(|hold| hold == phase) {
        eprintln!("lockcheck: holding before {phase} (LOCKCHECK_TEST_HOLD_BEFORE)");
        let until = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}
