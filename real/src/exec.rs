//! The exec driver: a lock implemented by any program, spoken to in JSON
//! Lines over its standard input and output (`docs/exec-protocol.md`,
//! version 1). One process per logical client; lockcheck's own storage
//! receives the writes, as for every backend, so the program implements
//! only the lock.
//!
//! Every request ends by the client's deadline. A reply that does not come
//! in time (`timeout`), a process that ends (`exec-exited`) and a line that
//! is not the reply asked for (`exec-garbage`) leave the operation's effect
//! unknown: `info`. The process is killed at once, reported on standard
//! error with the tail of its own standard error (when the workload calls
//! [`LockClient::reset`], so that the report never delays the operation),
//! and a fresh process takes over, as Jepsen's crashed process goes on as a
//! new one.
//!
//! Each process is started through `setpriv --pdeathsig KILL` in its own
//! process group: it cannot outlive lockcheck, and a Ctrl-C at the terminal
//! reaches lockcheck, not the program. The parent-death signal fires when
//! the *thread* that spawned the process ends, so a client must be polled
//! from a thread that lives as long as the test, as [`super::driver::drive`]
//! does (the caller's thread).

use std::collections::VecDeque;
use std::fmt;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::{json, Map, Value};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::task::JoinHandle;
use tokio::time::{timeout, timeout_at, Instant};

use super::proxy::LinkFreezer;
use super::servers::{signal_group, SETPRIV_PACKAGE};
use super::{ClientConfig, RealError};
use lockcheck_workloads::{Grant, LockClient, Outcome};
use lockcheck_workloads::{Stall, StallPoint};

/// The protocol version this driver speaks.
pub const PROTOCOL: u32 = 1;

/// How long a process may take to start and answer `hello`: much longer
/// than an operation's deadline, since an interpreter may be slow to load
/// and nothing is recorded meanwhile.
const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// After a failed restart, the next attempt waits at least this long, so a
/// program that cannot start is not restarted in a tight loop.
const RESPAWN_INTERVAL: Duration = Duration::from_millis(100);

/// How long a program stopped between two round trips stays stopped after
/// its links pass again: long enough for a command it sent before it
/// stopped to be answered on loopback.
const RESUME_AFTER_LIFT: Duration = Duration::from_millis(20);

/// How many of the program's last standard error lines are kept.
const STDERR_LINES: usize = 40;

/// Longer standard error lines are cut into pieces of this many bytes.
const STDERR_LINE_BYTES: u64 = 1024;

/// A reply longer than this is garbage (and is not read any further).
const REPLY_BYTES: u64 = 64 * 1024;

/// How long a report waits for a dying process to exit and close its
/// standard error, so that the tail it shows is complete.
const DRAIN_TIMEOUT: Duration = Duration::from_millis(500);

/// The program under test and its arguments (`python3 redis_lock.py`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecProgram {
    /// The program: a path, or a name looked up on PATH.
    pub program: String,
    pub args: Vec<String>,
}

impl ExecProgram {
    /// `program` with `args`.
    pub fn new<I, S>(program: impl Into<String>, args: I) -> ExecProgram
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ExecProgram { program: program.into(), args: args.into_iter().map(Into::into).collect() }
    }

    /// The words after `--` on the command line; `None` if there are none.
    pub fn from_words(words: &[String]) -> Option<ExecProgram> {
        let (program, args) = words.split_first()?;
        Some(ExecProgram::new(program.clone(), args.iter().cloned()))
    }
}

impl fmt::Display for ExecProgram {
    /// The command as a person would type it (words with blanks quoted).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let words = std::iter::once(&self.program).chain(&self.args);
        for (at, word) in words.enumerate() {
            if at > 0 {
                f.write_str(" ")?;
            }
            if word.is_empty() || word.contains(char::is_whitespace) {
                write!(f, "'{word}'")?;
            } else {
                f.write_str(word)?;
            }
        }
        Ok(())
    }
}

/// What a process is started with: the program, who it is, what it gets.
#[derive(Debug, Clone)]
struct Launch {
    program: ExecProgram,
    /// `client-3`, for messages.
    name: String,
    logical: u32,
    clients: u32,
    deadline: Duration,
    env: Vec<(String, String)>,
}

/// The last lines a process wrote to its standard error.
#[derive(Debug, Clone, Default)]
struct StderrTail(Arc<Mutex<VecDeque<String>>>);

impl StderrTail {
    fn push(&self, line: String) {
        let mut lines = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if lines.len() == STDERR_LINES {
            lines.pop_front();
        }
        lines.push_back(line);
    }

    /// `its stderr ends with:` and the lines, indented, for a report.
    fn describe(&self) -> String {
        let lines = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if lines.is_empty() {
            return "its stderr is empty".to_string();
        }
        let mut text = "its stderr ends with:".to_string();
        for line in lines.iter() {
            text.push_str("\n  ");
            text.push_str(line);
        }
        text
    }
}

/// Keeps the last lines of `stderr` in `tail` until it closes.
async fn keep_tail(stderr: impl AsyncRead + Unpin, tail: StderrTail) {
    let mut reader = BufReader::new(stderr);
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut reader).take(STDERR_LINE_BYTES).read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                while line.last().is_some_and(|byte| matches!(byte, b'\n' | b'\r')) {
                    line.pop();
                }
                tail.push(String::from_utf8_lossy(&line).into_owned());
            }
        }
    }
}

/// A reply the program gave to the request asked.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Reply {
    /// `ok`, with an acquire's `fence` and `lease` (absent otherwise).
    Ok(Grant),
    Fail(String),
    Info(String),
}

/// How a request ended.
#[derive(Debug)]
enum Answer {
    Reply(Reply),
    /// The request could not be written: the program closed its standard
    /// input, so it never read it.
    NotSent(std::io::Error),
    /// No reply by the deadline.
    Timeout,
    /// Its standard output closed (the process ended) before a whole reply.
    Exited,
    /// A line that is not the reply asked for, and why.
    Garbage(String),
}

/// A garbage line for a message: quoted, cut after 200 characters.
fn excerpt(text: &str) -> String {
    const SHOWN: usize = 200;
    match text.char_indices().nth(SHOWN) {
        Some((at, _)) => format!("{:?}…", &text[..at]),
        None => format!("{text:?}"),
    }
}

/// Reads the reply to request `id` from one line of output.
fn parse_reply(line: &[u8], id: u64) -> Answer {
    let Ok(text) = std::str::from_utf8(line) else {
        return Answer::Garbage("printed a line that is not UTF-8".to_string());
    };
    let text = text.trim_end_matches(['\n', '\r']);
    let not_a_reply = |why: &str| Answer::Garbage(format!("printed {} ({why})", excerpt(text)));
    let Ok(Value::Object(reply)) = serde_json::from_str::<Value>(text) else {
        return not_a_reply("not a JSON object");
    };
    match reply.get("id").map(Value::as_u64) {
        Some(Some(got)) if got == id => {}
        Some(Some(got)) => {
            return Answer::Garbage(format!("replied to id {got} when id {id} was asked"))
        }
        _ => return not_a_reply("no integer id"),
    }
    let error = reply.get("error").and_then(Value::as_str).map(str::to_string);
    let reply = match (reply.get("type").and_then(Value::as_str), error) {
        (Some("ok"), _) => {
            let fence = match reply.get("fence") {
                None | Some(Value::Null) => None,
                Some(fence) => match fence.as_u64() {
                    Some(fence) => Some(fence),
                    None => return not_a_reply("a fence that is not a non-negative integer"),
                },
            };
            let lease = match reply.get("lease") {
                None | Some(Value::Null) => None,
                Some(Value::String(lease)) => Some(lease.clone()),
                Some(_) => return not_a_reply("a lease that is not a string"),
            };
            Reply::Ok(Grant { fence, lease })
        }
        (Some("fail"), Some(error)) => Reply::Fail(error),
        (Some("info"), Some(error)) => Reply::Info(error),
        (Some("fail" | "info"), None) => return not_a_reply("no string error"),
        _ => return not_a_reply("no type ok, fail or info"),
    };
    Answer::Reply(reply)
}

/// Why a process could not be started.
#[derive(Debug)]
enum StartError {
    /// `setpriv` (util-linux) is not installed.
    MissingSetpriv,
    /// Anything else: what happened, with the tail of its standard error.
    Failed(String),
}

/// One running process of the program and its pipes.
#[derive(Debug)]
struct Process {
    /// Killed when dropped.
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    tail: StderrTail,
    /// Fills `tail`; aborted with the process.
    stderr_task: JoinHandle<()>,
    /// The id of the next request (`hello` is 0).
    next_id: u64,
}

impl Drop for Process {
    fn drop(&mut self) {
        self.stderr_task.abort();
    }
}

impl Process {
    /// Starts the program and exchanges `hello` with it.
    async fn start(launch: &Launch) -> Result<Process, StartError> {
        let mut process = Process::spawn(launch)?;
        let hello =
            json!({ "protocol": PROTOCOL, "client": launch.logical, "clients": launch.clients });
        let until = Instant::now() + SETUP_TIMEOUT;
        let answer = process.request("hello", hello, until).await;
        let ended = matches!(answer, Answer::Exited | Answer::NotSent(_));
        let trouble = match answer {
            Answer::Reply(Reply::Ok(_)) => return Ok(process),
            Answer::Reply(Reply::Fail(error)) if error == "protocol" => format!(
                "speaks another version of the protocol than {PROTOCOL} (it replied fail: protocol to hello)"
            ),
            Answer::Reply(Reply::Fail(error)) => format!("replied fail ({error}) to hello"),
            Answer::Reply(Reply::Info(error)) => format!("replied info ({error}) to hello"),
            Answer::NotSent(error) => format!("did not read hello ({error})"),
            Answer::Timeout => format!("did not answer hello within {SETUP_TIMEOUT:?}"),
            Answer::Exited => "exited before answering hello".to_string(),
            Answer::Garbage(why) => format!("{why} in reply to hello"),
        };
        Err(StartError::Failed(process.finish(&trouble, ended).await))
    }

    /// Spawns the program under `setpriv --pdeathsig KILL`, in its own
    /// process group, its standard error kept by a task.
    fn spawn(launch: &Launch) -> Result<Process, StartError> {
        let mut command = Command::new("setpriv");
        command.args(["--pdeathsig", "KILL", "--"]);
        command.arg(&launch.program.program).args(&launch.program.args);
        command.envs(launch.env.iter().map(|(name, value)| (name, value)));
        command
            .env("LOCKCHECK_PROTOCOL", PROTOCOL.to_string())
            .env("LOCKCHECK_CLIENT", launch.logical.to_string())
            .env("LOCKCHECK_CLIENTS", launch.clients.to_string())
            .env("LOCKCHECK_DEADLINE_MS", launch.deadline.as_millis().to_string());
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        command.kill_on_drop(true).process_group(0);
        let mut child = command.spawn().map_err(|error| match error.kind() {
            std::io::ErrorKind::NotFound => StartError::MissingSetpriv,
            _ => StartError::Failed(format!("could not be started: {error}")),
        })?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(StartError::Failed("was started without its pipes".to_string()));
        };
        let tail = StderrTail::default();
        let stderr_task = tokio::spawn(keep_tail(stderr, tail.clone()));
        Ok(Process { child, stdin, stdout: BufReader::new(stdout), tail, stderr_task, next_id: 0 })
    }

    /// Sends request `op` with `fields` and reads its reply, until `until`.
    async fn request(&mut self, op: &str, fields: Value, until: Instant) -> Answer {
        let id = self.next_id;
        self.next_id += 1;
        let mut request = Map::new();
        request.insert("id".to_string(), id.into());
        request.insert("op".to_string(), op.into());
        if let Value::Object(fields) = fields {
            request.extend(fields);
        }
        let mut line = Value::Object(request).to_string();
        line.push('\n');
        let written = async {
            self.stdin.write_all(line.as_bytes()).await?;
            self.stdin.flush().await
        };
        match timeout_at(until, written).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => return Answer::NotSent(error),
            Err(_) => return Answer::Timeout,
        }
        let mut reply = Vec::new();
        let mut limited = (&mut self.stdout).take(REPLY_BYTES);
        match timeout_at(until, limited.read_until(b'\n', &mut reply)).await {
            Err(_) => Answer::Timeout,
            // A broken pipe is an ended process.
            Ok(Err(_) | Ok(0)) => Answer::Exited,
            Ok(Ok(_)) if reply.ends_with(b"\n") => parse_reply(&reply, id),
            Ok(Ok(_)) if reply.len() as u64 >= REPLY_BYTES => {
                Answer::Garbage(format!("printed a line longer than {REPLY_BYTES} bytes"))
            }
            // Part of a line, then the end of its output.
            Ok(Ok(_)) => Answer::Exited,
        }
    }

    /// Ends the process and says what happened: `what`, its exit status
    /// when it ended by itself (`let_it_exit`: it is given a moment to),
    /// and the tail of its standard error.
    async fn finish(mut self, what: &str, let_it_exit: bool) -> String {
        if !let_it_exit {
            let _ = self.child.start_kill();
        }
        let status: Option<ExitStatus> =
            timeout(DRAIN_TIMEOUT, self.child.wait()).await.ok().and_then(Result::ok);
        if status.is_none() {
            let _ = self.child.start_kill();
        }
        // Its standard error closes when it has gone (unless a child of its
        // own keeps it open): the tail is then complete.
        let _ = timeout(DRAIN_TIMEOUT, &mut self.stderr_task).await;
        let status = match status {
            Some(status) if let_it_exit => format!(" ({status})"),
            _ => String::new(),
        };
        format!("{what}{status}; {}", self.tail.describe())
    }
}

/// What went wrong with a process, for its report.
#[derive(Debug)]
enum Trouble {
    Timeout,
    Exited,
    NotSent(std::io::Error),
    Garbage(String),
}

impl Trouble {
    fn describe(&self, deadline: Duration) -> String {
        match self {
            Trouble::Timeout => format!("did not answer within {deadline:?}"),
            Trouble::Exited => "exited".to_string(),
            Trouble::NotSent(error) => format!("stopped reading its requests ({error})"),
            Trouble::Garbage(why) => why.clone(),
        }
    }

    /// Whether the process ended by itself (its exit status is worth
    /// waiting a moment for).
    fn ended(&self) -> bool {
        matches!(self, Trouble::Exited | Trouble::NotSent(_))
    }
}

/// One logical client whose lock is a program speaking the exec protocol
/// (`docs/exec-protocol.md`): one process at a time, a fresh one after
/// every `info`.
#[derive(Debug)]
pub struct ExecClient {
    launch: Launch,
    /// `None` after a failure until the next restart.
    process: Option<Process>,
    /// A process that went wrong, not yet reported (see [`ExecClient::reset`]).
    failed: Option<(Process, Trouble)>,
    /// After a failed restart: no new attempt before this.
    retry_at: Option<Instant>,
    /// A failed restart was reported, and none has succeeded since.
    restart_reported: bool,
    /// The pause nemesis' stall point, when the program is to be frozen
    /// with its holder ([`ExecClient::freeze_on_stall`]).
    stall: Option<Stall>,
    /// Where the client-kill fault finds the running program.
    pid_slot: Option<PidSlot>,
    /// The program's links to its servers through the proxy: a pause
    /// between commands holds them from the first reply of an operation
    /// ([`ExecClient::holding_links`]).
    links: Option<LinkFreezer>,
}

/// A client's running program's process id, 0 when none runs: shared
/// between the client and the client-kill fault.
pub type PidSlot = Arc<std::sync::atomic::AtomicU32>;

/// One client-kill: at `at`, the program of `client` is killed (SIGKILL of
/// its process group).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProgramKill {
    pub at: Duration,
    pub client: u32,
}

/// Carries out `kills` from `start`: each kills the client's program as it
/// runs then (nothing when none does), recorded as a nemesis operation
/// `{"fault":"client-kill","targets":["client-2"],"pid":…}` (a start and a
/// stop at once: the client restarts its program by itself).
pub async fn kill_programs(
    kills: &[ProgramKill],
    slots: &[PidSlot],
    recorder: &lockcheck_workloads::SharedRecorder,
    start: Instant,
) {
    for kill in kills {
        tokio::time::sleep_until(start + kill.at).await;
        let Some(slot) = slots.get(kill.client as usize) else { continue };
        let pid = slot.load(std::sync::atomic::Ordering::Relaxed);
        if pid == 0 {
            continue;
        }
        let _ = signal_group(pid, "KILL");
        let value = json!({
            "fault": "client-kill",
            "targets": [format!("client-{}", kill.client)],
            "pid": pid,
        });
        let mut recorder = recorder.lock().expect("the recorder is never poisoned");
        recorder.record_nemesis(lockcheck_checker::Function::Start, value.clone());
        recorder.record_nemesis(lockcheck_checker::Function::Stop, value);
    }
}

impl ExecClient {
    /// Connects logical client `logical` of `clients`: starts `program`
    /// with the protocol's environment (see `docs/exec-protocol.md`) plus
    /// `env` (the servers' URLs), and exchanges `hello` with it. A program that cannot start or fails
    /// `hello` is a [`RealError::Setup`] naming the command, with the tail of
    /// its standard error; a missing `setpriv` is [`RealError::MissingBinary`].
    pub async fn connect(
        program: &ExecProgram,
        logical: u32,
        clients: u32,
        env: &[(String, String)],
        config: &ClientConfig,
    ) -> Result<ExecClient, RealError> {
        let launch = Launch {
            program: program.clone(),
            name: config.name.clone(),
            logical,
            clients,
            deadline: config.deadline,
            env: env.to_vec(),
        };
        let process = Process::start(&launch).await.map_err(|error| match error {
            StartError::MissingSetpriv => {
                RealError::MissingBinary { binary: "setpriv", package: SETPRIV_PACKAGE }
            }
            StartError::Failed(reason) => RealError::Setup {
                what: "the exec program",
                reason: format!("`{program}` ({}) {reason}", launch.name),
            },
        })?;
        Ok(ExecClient {
            launch,
            process: Some(process),
            failed: None,
            retry_at: None,
            restart_reported: false,
            stall: None,
            pid_slot: None,
            links: None,
        })
    }

    /// The pause nemesis freezes the program too, wherever it strikes:
    /// the program is stopped (SIGSTOP of its process group) for as long as
    /// the stall lasts, so that its own threads (a lease watchdog, a
    /// heartbeat) stop as a whole application's do in a GC pause, then
    /// continues (SIGCONT). A stall in flight stops it while a request is
    /// outstanding ([`ExecClient::request`]).
    pub fn freeze_on_stall(mut self, stall: Stall) -> ExecClient {
        let slot = self.pid_slot.get_or_insert_with(PidSlot::default).clone();
        self.publish_pid();
        stall.freezing(Arc::new(GroupFreezer(slot)));
        self.stall = Some(stall);
        self
    }

    /// Stalls the program between two round trips of one operation at the
    /// pause's `between-commands` point: from the moment the first reply of
    /// the operation reaches it, its links to its servers are held and the
    /// program is stopped, for the stall's length, so that its next command
    /// reaches the server that late, as if the process had stopped after
    /// reading that reply.
    /// lockcheck cannot see inside the program; the proxy sees its traffic.
    pub fn holding_links(mut self, links: Option<LinkFreezer>) -> ExecClient {
        self.links = links;
        self
    }

    /// The process id of the running program (also its process group's),
    /// for client-side faults: SIGSTOP pauses it as a GC pause would. `None`
    /// between a failure and the restart.
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().and_then(|process| process.child.id())
    }

    /// Sends request `op` and maps its answer to an outcome; a process that
    /// went wrong is put aside for its report, and the next request goes to
    /// a fresh one.
    async fn request(&mut self, op: &str, fields: Value) -> Outcome<Grant> {
        // A program that died since the last request (killed by the
        // client-kill fault) crashed with whatever it held: this client
        // learns it now, as an application learns its lock library died.
        if let Some(process) = self.process.as_mut() {
            if !matches!(process.child.try_wait(), Ok(None)) {
                self.put_aside(Trouble::Exited);
                return Outcome::Info("exec-exited".into());
            }
        }
        if !self.ensure_process().await {
            return Outcome::Fail("unavailable".to_string());
        }
        self.publish_pid();
        let Some(process) = self.process.as_mut() else {
            return Outcome::Fail("unavailable".to_string());
        };
        // A pause in flight: the program is stopped a moment after the
        // request leaves (in the middle of its commands, when it has
        // several), for the stall's length. The stall is the program's own,
        // so the reply's deadline moves on by as much: the call just takes
        // longer, as a paused application's call does.
        let stall_ms = self.stall.as_ref().map_or(0, |stall| stall.take_at(StallPoint::InFlight));
        // A pause between commands: the program's links are held from the
        // operation's first reply on, and the stall is taken only then (an
        // operation of one round trip leaves it waiting for the next). The
        // stall is the program's own too.
        let between_ms = match (&self.links, &self.stall) {
            (Some(_), Some(stall)) if stall_ms == 0 => {
                stall.reaches(StallPoint::BetweenCommands);
                stall.pending_at(StallPoint::BetweenCommands)
            }
            _ => 0,
        };
        let held =
            self.links.as_ref().filter(|_| between_ms > 0).map(LinkFreezer::hold_after_reply);
        // Between the commands of an acquire, the stall goes on after its
        // length until no other client holds the lock asked for, at most a
        // TTL more: a program that took something before the grant (its
        // token) then resumes to a lock it can take, which is where taking
        // it early shows.
        let free_wait = match (op, held.is_some()) {
            ("acquire", true) => fields.get("key").and_then(Value::as_str).map(|key| {
                (key.to_string(), fields.get("ttl_ms").and_then(Value::as_u64).unwrap_or(0))
            }),
            _ => None,
        };
        let extra_ms = free_wait.as_ref().map_or(0, |(_, ttl_ms)| *ttl_ms);
        let until = Instant::now()
            + self.launch.deadline
            + Duration::from_millis(stall_ms + between_ms + extra_ms);
        let pid = process.child.id();
        let freeze = async {
            if stall_ms == 0 {
                return;
            }
            let Some(pid) = pid else { return };
            tokio::time::sleep(Duration::from_micros(IN_FLIGHT_AFTER_US[stall_ms as usize % 3]))
                .await;
            let _ = signal_group(pid, "STOP");
            tokio::time::sleep(Duration::from_millis(stall_ms)).await;
            let _ = signal_group(pid, "CONT");
        };
        let answer = match (held, &self.links, &self.stall) {
            (Some(held), Some(links), Some(stall)) => {
                let request = process.request(op, fields, until);
                tokio::pin!(request);
                tokio::select! {
                    biased;
                    // Answered before a second round trip: the operation
                    // had one command. No stall between commands took
                    // place: the links pass again, and the stall waits for
                    // the next operation.
                    answer = &mut request => {
                        links.disarm();
                        answer
                    }
                    // The first reply reached the program: it stops where
                    // it is, its links held, for the stall. Its links pass
                    // again a moment before it resumes, so that a command
                    // it sent before it stopped is answered by then, and
                    // its own socket timeouts do not count the stall.
                    () = held.strikes() => {
                        stall.take_at(StallPoint::BetweenCommands);
                        let stopped = pid.is_some_and(|pid| signal_group(pid, "STOP"));
                        tokio::time::sleep(Duration::from_millis(between_ms)).await;
                        if let Some((key, ttl_ms)) = &free_wait {
                            let cap = Instant::now() + Duration::from_millis(*ttl_ms);
                            while stall.held_by_another(key) && Instant::now() < cap {
                                tokio::time::sleep(FREE_POLL).await;
                            }
                        }
                        links.disarm();
                        if stopped {
                            tokio::time::sleep(RESUME_AFTER_LIFT).await;
                            if let Some(pid) = pid {
                                let _ = signal_group(pid, "CONT");
                            }
                        }
                        request.await
                    }
                }
            }
            _ => tokio::join!(process.request(op, fields, until), freeze).0,
        };
        let (outcome, trouble) = match answer {
            Answer::Reply(Reply::Ok(grant)) => return Outcome::Ok(grant),
            Answer::Reply(Reply::Fail(error)) => return Outcome::Fail(error),
            Answer::Reply(Reply::Info(error)) => {
                // Its own word: nothing to report, but it goes on as new.
                self.process = None;
                return Outcome::Info(error);
            }
            // Never read: it certainly did not take effect.
            Answer::NotSent(error) => {
                (Outcome::Fail("unavailable".into()), Trouble::NotSent(error))
            }
            Answer::Timeout => (Outcome::Info("timeout".into()), Trouble::Timeout),
            Answer::Exited => (Outcome::Info("exec-exited".into()), Trouble::Exited),
            Answer::Garbage(why) => (Outcome::Info("exec-garbage".into()), Trouble::Garbage(why)),
        };
        self.put_aside(trouble);
        outcome
    }

    /// Tells the client-kill fault which process is this client's now.
    fn publish_pid(&self) {
        if let Some(slot) = &self.pid_slot {
            slot.store(self.pid().unwrap_or(0), std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Shares this client's program's process id (0: none running) with the
    /// client-kill fault (`kill_programs`).
    pub fn share_pid(mut self, slot: PidSlot) -> ExecClient {
        self.pid_slot = Some(slot);
        self.publish_pid();
        self
    }

    /// Stops using the process (killing it now unless it ended by itself)
    /// and keeps it for its report.
    fn put_aside(&mut self, trouble: Trouble) {
        if let Some(mut process) = self.process.take() {
            if !trouble.ended() {
                let _ = process.child.start_kill();
            }
            self.failed = Some((process, trouble));
        }
    }

    /// Prints the report of the process put aside, if any.
    async fn report(&mut self) {
        let Some((process, trouble)) = self.failed.take() else {
            return;
        };
        let what = trouble.describe(self.launch.deadline);
        let text = process.finish(&what, trouble.ended()).await;
        let text = lockcheck_checker::redact(&text);
        eprintln!("lockcheck: {}'s program ({}) {text}", self.launch.name, self.launch.program);
    }

    /// A running process to send the next request to: the current one if
    /// it is still alive, else a fresh one (at most one attempt per
    /// `RESPAWN_INTERVAL`). `false`: none could be started.
    async fn ensure_process(&mut self) -> bool {
        self.report().await;
        if let Some(process) = self.process.as_mut() {
            if matches!(process.child.try_wait(), Ok(None)) {
                return true;
            }
            // It ended between two requests.
            self.put_aside(Trouble::Exited);
            self.report().await;
        }
        self.restart().await
    }

    /// Starts a fresh process, unless the last attempt failed too recently.
    async fn restart(&mut self) -> bool {
        if self.retry_at.is_some_and(|at| Instant::now() < at) {
            return false;
        }
        match Process::start(&self.launch).await {
            Ok(process) => {
                self.process = Some(process);
                self.retry_at = None;
                self.restart_reported = false;
                true
            }
            Err(error) => {
                self.retry_at = Some(Instant::now() + RESPAWN_INTERVAL);
                if !self.restart_reported {
                    self.restart_reported = true;
                    let why = match error {
                        StartError::MissingSetpriv => "could not be started: no setpriv".into(),
                        StartError::Failed(why) => why,
                    };
                    let Launch { name, program, .. } = &self.launch;
                    let line = format!(
                        "lockcheck: {name}'s program ({program}) could not be restarted: {why}"
                    );
                    eprintln!("{}", lockcheck_checker::redact(&line));
                }
                false
            }
        }
    }

    /// The `fence` and `lease` fields of a grant, as the program gave them.
    fn grant_fields(fields: &mut Map<String, Value>, grant: &Grant) {
        if let Some(fence) = grant.fence {
            fields.insert("fence".to_string(), fence.into());
        }
        if let Some(lease) = &grant.lease {
            fields.insert("lease".to_string(), lease.clone().into());
        }
    }
}

/// How long after a request leaves a pause in flight stops the program, in
/// microseconds: at once, or a moment into its work (its first command sent,
/// say), picked by the stall's length.
const IN_FLIGHT_AFTER_US: [u64; 3] = [0, 500, 2_000];

/// Stops and continues the process group of whichever program a client
/// runs now.
#[derive(Debug)]
struct GroupFreezer(PidSlot);

impl lockcheck_workloads::Freezer for GroupFreezer {
    fn freeze(&self) {
        let pid = self.0.load(std::sync::atomic::Ordering::Relaxed);
        if pid != 0 {
            let _ = signal_group(pid, "STOP");
        }
    }

    fn thaw(&self) {
        let pid = self.0.load(std::sync::atomic::Ordering::Relaxed);
        if pid != 0 {
            let _ = signal_group(pid, "CONT");
        }
    }
}

/// How often a stall between an acquire's commands looks whether the lock
/// asked for is free yet.
const FREE_POLL: Duration = Duration::from_millis(2);

impl LockClient for ExecClient {
    async fn acquire(&mut self, key: &str, ttl_ms: u64) -> Outcome<Grant> {
        self.request("acquire", json!({ "key": key, "ttl_ms": ttl_ms })).await
    }

    async fn release(&mut self, key: &str, grant: &Grant) -> Outcome<()> {
        let mut fields = Map::new();
        fields.insert("key".to_string(), key.into());
        ExecClient::grant_fields(&mut fields, grant);
        self.request("release", Value::Object(fields)).await.map_unit()
    }

    async fn renew(&mut self, key: &str, grant: &Grant, ttl_ms: u64) -> Outcome<()> {
        let mut fields = Map::new();
        fields.insert("key".to_string(), key.into());
        fields.insert("ttl_ms".to_string(), ttl_ms.into());
        ExecClient::grant_fields(&mut fields, grant);
        self.request("renew", Value::Object(fields)).await.map_unit()
    }

    /// Reports the process that went wrong (its standard error's tail) and
    /// starts a fresh one; if that fails, operations fail `unavailable`
    /// and each tries again (at most every `RESPAWN_INTERVAL`).
    async fn reset(&mut self) {
        self.report().await;
        // After the program's own `info` it is still running: a new one.
        self.process = None;
        self.restart().await;
        self.publish_pid();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(line: &str, id: u64) -> Result<Reply, String> {
        match parse_reply(line.as_bytes(), id) {
            Answer::Reply(reply) => Ok(reply),
            Answer::Garbage(why) => Err(why),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn replies_are_read_as_the_protocol_says() {
        let grant = Grant { fence: Some(34), lease: Some("a1b2".into()) };
        let ok = r#"{"id":1,"type":"ok","fence":34,"lease":"a1b2"}"#;
        assert_eq!(reply(&format!("{ok}\n"), 1), Ok(Reply::Ok(grant)));
        let bare = r#"{"type":"ok","id":2,"fence":null}"#;
        assert_eq!(reply(bare, 2), Ok(Reply::Ok(Grant::default())));
        let busy = r#"{"id":3,"type":"fail","error":"busy"}"#;
        assert_eq!(reply(busy, 3), Ok(Reply::Fail("busy".into())));
        let unknown = r#"{"id":4,"type":"info","error":"timeout"}"#;
        assert_eq!(reply(unknown, 4), Ok(Reply::Info("timeout".into())));
    }

    #[test]
    fn anything_else_is_garbage_and_says_why() {
        let garbage = |line: &str| reply(line, 5).expect_err(line);
        assert!(garbage("starting up...").contains("not a JSON object"));
        assert!(garbage("[5]").contains("not a JSON object"));
        assert!(garbage(r#"{"type":"ok"}"#).contains("no integer id"));
        assert!(garbage(r#"{"id":4,"type":"ok"}"#).contains("replied to id 4 when id 5"));
        assert!(garbage(r#"{"id":5,"type":"maybe"}"#).contains("no type"));
        assert!(garbage(r#"{"id":5,"type":"fail"}"#).contains("no string error"));
        assert!(garbage(r#"{"id":5,"type":"ok","fence":-1}"#).contains("fence"));
        assert!(garbage(r#"{"id":5,"type":"ok","lease":7}"#).contains("lease"));
        let long = "x".repeat(1000);
        assert!(garbage(&long).chars().count() < 300, "long lines are cut");
        assert!(matches!(parse_reply(b"\xff\n", 5), Answer::Garbage(_)));
    }

    #[test]
    fn commands_are_shown_as_typed() {
        let program = ExecProgram::new("python3", ["lock.py", "my lock", ""]);
        assert_eq!(program.to_string(), "python3 lock.py 'my lock' ''");
        let words = ["sh".to_string(), "-c".to_string(), "true".to_string()];
        assert_eq!(ExecProgram::from_words(&words), Some(ExecProgram::new("sh", ["-c", "true"])));
        assert_eq!(ExecProgram::from_words(&[]), None);
    }

    #[test]
    fn the_stderr_tail_keeps_the_last_lines() {
        let tail = StderrTail::default();
        assert_eq!(tail.describe(), "its stderr is empty");
        for line in 0..100 {
            tail.push(format!("line {line}"));
        }
        let text = tail.describe();
        assert!(text.starts_with("its stderr ends with:\n  line 60\n"), "{text}");
        assert!(text.ends_with("\n  line 99"), "{text}");
    }
}
