//! The exec driver: a lock implemented by any program, spoken to in JSON
//! Lines over its standard input and output (`docs/exec-protocol.md`,
//! version 1). One process per logical client; lockcheck's own fenced
//! storage receives the writes, exactly as for [`super::redis::RedisClient`],
//! so the program implements only the lock.
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

use super::storage::Storage;
use super::{ClientConfig, RealError};
use crate::client::{Grant, LockClient, Outcome};

/// The protocol version this driver speaks.
pub const PROTOCOL: u32 = 1;

/// How long a process may take to start and answer `hello`: much longer
/// than an operation's deadline, since an interpreter may be slow to load
/// and nothing is recorded meanwhile.
const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// After a failed restart, the next attempt waits at least this long, so a
/// program that cannot start is not restarted in a tight loop.
const RESPAWN_INTERVAL: Duration = Duration::from_millis(100);

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
                f.write str(" ")?;
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
