//! Ctrl-C (SIGINT), SIGTERM and SIGHUP at every moment of `lockcheck check`:
//! right after it starts, while its private servers start, mid-run, and
//! while it checks or stores the run. Every time it exits with 128 + the
//! signal, leaves no server process nor server folder of its own behind,
//! and keeps the history recorded so far, every complete line of it an
//! event. Each moment is found by watching for something the run does
//! (its handler installed, a server folder made, events written, a line on
//! stderr), never by sleeping a fixed time; nothing here asserts on
//! elapsed time.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;
use common::{both, files_under, lockcheck};

const SIGHUP: i32 = 1;
const SIGINT: i32 = 2;
const SIGTERM: i32 = 15;
const SIGNALS: [i32; 3] = [SIGINT, SIGTERM, SIGHUP];

/// How long any awaited moment may take on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(180);

/// A `lockcheck` run in the background, its standard error collected.
struct Run {
    child: Child,
    stderr: Arc<Mutex<String>>,
    /// Its standard error is closed: `stderr` has every line.
    closed: Arc<std::sync::atomic::AtomicBool>,
    /// Its own store folder.
    store: PathBuf,
}

impl Run {
    fn start(args: &[&str], env: &[(&str, &str)]) -> Run {
        static RUNS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let store =
            std::env::temp_dir().join(format!("interrupt-test-store-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&store);
        let mut command = Command::new(env!("CARGO_BIN_EXE_lockcheck"));
        command.args(args).arg("--store").arg(&store);
        command.envs(env.iter().copied()).stdout(Stdio::null()).stderr(Stdio::piped());
        let mut child = command.spawn().expect("the lockcheck binary runs");
        let stderr = Arc::new(Mutex::new(String::new()));
        let closed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (pipe, collected) = (child.stderr.take().expect("stderr"), stderr.clone());
        let done = closed.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let mut all = collected.lock().unwrap();
                all.push_str(&line);
                all.push('\n');
            }
            done.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        Run { child, stderr, closed, store }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits until `condition` holds, or fails the test saying `what`.
    fn wait_until(&mut self, what: &str, mut condition: impl FnMut(&Run) -> bool) {
        let deadline = Instant::now() + PATIENCE;
        while !condition(self) {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("exited ({status}) before {what}:\n{}", self.stderr());
            }
            assert!(Instant::now() < deadline, "never {what}:\n{}", self.stderr());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn signal(&self, signal: i32) {
        let status = Command::new("kill")
            .args([format!("-{signal}"), self.pid().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{signal} {}", self.pid());
    }

    /// Waits for the exit (lockcheck ends itself once interrupted; a run
    /// that hangs fails the test rather than the test hanging).
    fn wait(&mut self) -> ExitStatus {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.child.try_wait().expect("waited") {
                // Every line is collected once the pipe is closed.
                let deadline = Instant::now() + Duration::from_secs(30);
                while !self.closed.load(std::sync::atomic::Ordering::SeqCst)
                    && Instant::now() < deadline
                {
                    std::thread::sleep(Duration::from_millis(10));
                }
                return status;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                panic!("did not exit after the signal:\n{}", self.stderr());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.store);
    }
}

/// Whether process `pid` catches `signal` (its handler is installed):
/// the `SigCgt` mask of /proc/PID/status.
fn catches(pid: u32, signal: i32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    status
        .lines()
        .find_map(|line| line.strip_prefix("SigCgt:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (signal - 1)) != 0)
}

/// The processes of `pid`'s private servers (and their setup tools):
/// their command lines name the server folder `lockcheck-<kind>-<pid>-<n>`.
fn server_processes(pid: u32) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if ["redis", "postgres", "mariadb", "etcd"]
            .iter()
            .any(|kind| cmdline.contains(&format!("lockcheck-{kind}-{pid}-")))
        {
            found.push(cmdline);
        }
    }
    found
}

/// The server folders of `pid` in the temporary directory.
fn server_dirs(pid: u32) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return Vec::new() };
    entries
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().to_string())
        .filter(|name| name.starts_with("lockcheck-") && name.contains(&format!("-{pid}-")))
        .collect()
}

/// Every `history.jsonl` under `root`.
fn histories(root: &Path) -> Vec<PathBuf> {
    let mut found = files_under(root);
    found.retain(|path| path.file_name().is_some_and(|name| name == "history.jsonl"));
    found
}

/// Complete lines in a file.
fn lines_in(path: &Path) -> usize {
    std::fs::read(path).map(|bytes| bytes.iter().filter(|&&b| b == b'\n').count()).unwrap_or(0)
}

/// Checks what an interrupted run left: the exit code 128 + `signal`, the
/// interrupt said, no server process or folder, and (unless `stored` is
/// false) the history so far where the message says, every complete line
/// an event, as many as it says. Returns the message.
fn assert_interrupted(run: &mut Run, signal: i32, stored: bool) -> String {
    let pid = run.pid();
    let status = run.wait();
    let stderr = run.stderr();
    assert_eq!(
        status.code(),
        Some(128 + signal),
        "exit after signal {signal} ({status}):\n{stderr}"
    );
    let name = match signal {
        SIGINT => "SIGINT",
        SIGTERM => "SIGTERM",
        _ => "SIGHUP",
    };
    let message = stderr
        .lines()
        .find(|line| line.starts_with(&format!("lockcheck: interrupted by {name}")))
        .unwrap_or_else(|| panic!("no interrupt message for {name}:\n{stderr}"))
        .to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !(server_processes(pid).is_empty() && server_dirs(pid).is_empty())
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        server_processes(pid),
        Vec::<String>::new(),
        "servers outlived lockcheck:\n{stderr}"
    );
    assert_eq!(server_dirs(pid), Vec::<String>::new(), "server folders left:\n{stderr}");
    if message.contains("before seed") {
        // Between two seeds of a sweep: nothing of the next was recorded.
        return message;
    }
    if !stored {
        assert!(message.contains("--no-store"), "{message}");
        assert!(histories(&run.store).is_empty(), "--no-store wrote {:?}", histories(&run.store));
        return message;
    }
    // `… the history so far is in PATH (N events)`
    let (_, rest) = message
        .split_once("the history so far is in ")
        .unwrap_or_else(|| panic!("where is the history? {message}"));
    let (path, count) = rest.rsplit_once(" (").expect("a count");
    let count: usize = count.trim_end_matches(" events)").parse().expect("a number of events");
    let path = Path::new(path);
    assert!(path.starts_with(&run.store), "{message}");
    let text = std::fs::read_to_string(path).unwrap_or_else(|error| panic!("{message}: {error}"));
    let complete = text.rfind('\n').map_or("", |end| &text[..=end]);
    for (at, line) in complete.lines().enumerate() {
        let event: lockcheck_checker::Event = serde_json::from_str(line)
            .unwrap_or_else(|error| panic!("{} line {}: {error}: {line}", path.display(), at + 1));
        assert_eq!(event.index, at as u64, "{} line {}", path.display(), at + 1);
    }
    assert_eq!(complete.lines().count(), count, "{message}");
    let dir = path.parent().expect("the run's folder");
    assert!(dir.join("command").is_file(), "no command beside {}", path.display());
    message
}

fn real_check(time_limit: &str) -> Vec<String> {
    ["check", "--backend", "redis", "--nemesis", "pause", "--ttl", "300ms", "--time-limit"]
        .iter()
        .map(|word| word.to_string())
        .chain([time_limit.to_string()])
        .collect()
}

fn words(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

#[test]
fn a_signal_right_after_the_start_exits_with_it() {
    for signal in SIGNALS {
        let args = real_check("60s");
        let mut run = Run::start(&words(&args), &[]);
        // The first moment the tool can catch it.
        run.wait_until("the handler is installed", |run| catches(run.pid(), signal));
        run.signal(signal);
        assert_interrupted(&mut run, signal, true);
    }
}

#[test]
fn a_signal_while_the_servers_start_is_no_missing_server() {
    for signal in SIGNALS {
        let args = real_check("60s");
        let mut run = Run::start(&words(&args), &[]);
        // The storage's PostgreSQL first: its folder exists from before
        // initdb runs until it answers.
        run.wait_until("a server folder appears", |run| !server_dirs(run.pid()).is_empty());
        run.signal(signal);
        let message = assert_interrupted(&mut run, signal, true);
        let stderr = run.stderr();
        assert!(!stderr.contains("did not start"), "reported as a server failure:\n{stderr}");
        assert!(message.contains("at seed"), "{message}");
    }
}

#[test]
fn a_signal_mid_run_keeps_the_events_so_far() {
    for signal in SIGNALS {
        let args = real_check("60s");
        let mut run = Run::start(&words(&args), &[]);
        run.wait_until("events are written", |run| {
            histories(&run.store).first().is_some_and(|path| lines_in(path) >= 50)
        });
        assert!(!server_processes(run.pid()).is_empty(), "the servers are not where this looks");
        run.signal(signal);
        let message = assert_interrupted(&mut run, signal, true);
        let (_, count) = message.rsplit_once(" (").expect("a count");
        let count: usize = count.trim_end_matches(" events)").parse().expect("a number");
        assert!(count >= 50, "{message}");
    }
}

#[test]
fn a_signal_while_a_real_run_is_checked_or_stored_keeps_its_whole_history() {
    for (phase, signal) in [("check", SIGTERM), ("store", SIGINT), ("check", SIGHUP)] {
        let args = real_check("2s");
        let mut run = Run::start(&words(&args), &[("LOCKCHECK_TEST_HOLD_BEFORE", phase)]);
        let holding = format!("holding before {phase}");
        run.wait_until(&holding, |run| run.stderr().contains(&holding));
        run.signal(signal);
        let message = assert_interrupted(&mut run, signal, true);
        assert!(!message.contains("(0 events)"), "the run had recorded events: {message}");
        let path = histories(&run.store).pop().expect("a history");
        assert!(!path.with_file_name("results.json").exists(), "an interrupted run has no results");
    }
}

#[test]
fn a_signal_stops_a_long_simulated_sweep_and_says_where() {
    for (signal, store) in [(SIGINT, true), (SIGTERM, false), (SIGHUP, true)] {
        let mut args = vec!["check", "--seeds", "100000", "--seed", "1", "--time-limit", "5s"];
        if !store {
            args.push("--no-store");
        }
        let mut run = Run::start(&args, &[]);
        run.wait_until("three seeds are done", |run| run.stderr().matches("seed: ").count() >= 4);
        run.signal(signal);
        let message = assert_interrupted(&mut run, signal, store);
        assert!(message.contains("seeds checked before it"), "{message}");
        if store {
            // The seeds before it are stored whole.
            let finished = histories(&run.store)
                .iter()
                .filter(|path| path.with_file_name("results.json").is_file())
                .count();
            assert!(finished >= 3, "{finished} runs stored whole: {message}");
        }
    }
}

#[test]
fn a_signal_while_a_simulated_run_is_checked_exits_through_the_grace() {
    let args = ["check", "--seed", "1", "--time-limit", "5s"];
    let mut run = Run::start(&args, &[("LOCKCHECK_TEST_HOLD_BEFORE", "check")]);
    run.wait_until("holding", |run| run.stderr().contains("holding before check"));
    run.signal(SIGHUP);
    let message = assert_interrupted(&mut run, SIGHUP, true);
    assert!(message.contains("at seed 1"), "{message}");
}

#[test]
fn a_completed_run_has_its_history_whole_beside_its_results() {
    let store = std::env::temp_dir().join(format!("interrupt-test-whole-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&store);
    let store_arg = store.display().to_string();
    let args = ["check", "--seed", "2", "--time-limit", "3s", "--nemesis", "none"];
    let output = lockcheck(&[&args[..], &["--store", &store_arg]].concat());
    assert_eq!(output.status.code(), Some(0), "{}", both(&output));
    let found = histories(&store);
    assert_eq!(found.len(), 1, "{found:?}");
    let dir = found[0].parent().expect("a folder");
    for file in ["results.json", "report.html", "command"] {
        assert!(dir.join(file).is_file(), "{file} missing in {}", dir.display());
    }
    let text = std::fs::read_to_string(&found[0]).expect("read");
    assert!(text.ends_with('\n'), "the last line is whole");
    for (at, line) in text.lines().enumerate() {
        let event: lockcheck_checker::Event = serde_json::from_str(line).expect("an event");
        assert_eq!(event.index, at as u64);
    }
    let _ = std::fs::remove_dir_all(&store);
}

#[test]
fn sigkill_mid_sweep_leaves_every_history_readable() {
    let args = ["check", "--seeds", "100000", "--seed", "1", "--time-limit", "5s"];
    let mut run = Run::start(&args, &[]);
    run.wait_until("a seed is recording", |run| {
        run.stderr().matches("seed: ").count() >= 4
            && histories(&run.store).iter().any(|path| lines_in(path) > 0)
    });
    run.signal(9);
    let status = run.wait();
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9), "{status}");
    let found = histories(&run.store);
    assert!(found.len() >= 4, "{found:?}");
    for path in found {
        let text = std::fs::read_to_string(&path).expect("read");
        // Every line but a last one cut short is an event.
        let complete = text.rfind('\n').map_or("", |end| &text[..=end]);
        for (at, line) in complete.lines().enumerate() {
            let event: lockcheck_checker::Event = serde_json::from_str(line)
                .unwrap_or_else(|error| panic!("{} line {}: {error}", path.display(), at + 1));
            assert_eq!(event.index, at as u64, "{}", path.display());
        }
        assert_analyzable(&path);
    }
}

/// `lockcheck analyze` reads what a killed run left: the exit is a verdict
/// (0, 1 or 2), never bad input; a last line cut short is reported and the
/// rest checked.
fn assert_analyzable(path: &Path) {
    let output = lockcheck(&["analyze", path.to_str().expect("a UTF-8 path")]);
    let code = output.status.code();
    assert!(
        matches!(code, Some(0..=2)),
        "analyze of {} exited {code:?}:\n{}",
        path.display(),
        both(&output)
    );
    let text = std::fs::read(path).expect("read");
    if text.last().is_some_and(|&byte| byte != b'\n') {
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("truncated final line"), "{}", both(&output));
    }
}

#[test]
fn sigkill_at_moments_of_a_real_run_leaves_a_history_analyze_reads() {
    // Moments as counts of events recorded, drawn once at random and fixed
    // here so that a failure repeats: early, mid-run and late.
    for events in [1, 37, 260] {
        let args = real_check("4s");
        let mut run = Run::start(&words(&args), &[]);
        run.wait_until("events recorded", |run| {
            histories(&run.store).iter().any(|path| lines_in(path) >= events)
        });
        run.signal(9);
        let status = run.wait();
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9), "{status}");
        let found = histories(&run.store);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(lines_in(&found[0]) >= events, "{}", found[0].display());
        assert_analyzable(&found[0]);
    }
}
