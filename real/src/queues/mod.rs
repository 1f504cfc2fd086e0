//! The payments workload's real queues, one interface over both kinds
//! ([`QueueKind`]): a PostgreSQL jobs table taken with `SKIP LOCKED`
//! (`postgres.rs`) and a RabbitMQ queue (`rabbitmq.rs`). Both are held to
//! the pure at-least-once queue with a visibility timeout
//! (`lockcheck_workloads::queue`): message ids from 1 in enqueue order,
//! the same across redeliveries; oldest first; a delivery not acked within
//! its visibility timeout delivered again, its count one up and
//! `redelivered` set. How each falls short of it, where it does, is said
//! in its file.
//!
//! [`RealQueue::prepare`] sets up a run's fresh, empty queue;
//! [`RealQueue::connect`] gives each worker a [`QueueSession`], whose every
//! call ends within the configured deadline (as `Info("timeout")` when its
//! outcome is unknown); [`RealQueue::remove`] (or dropping the queue)
//! cleans up what was made.

mod postgres;
mod rabbitmq;

use std::time::Duration;

use lockcheck_workloads::queue::{Delivery, QueueKind};
use lockcheck_workloads::Outcome;

use crate::RealError;

/// The RabbitMQ a `--queue rabbitmq` run (and the benchmark) uses unless
/// given one: the machine's own, where the run makes a vhost of its own.
pub const DEFAULT_RABBITMQ_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// Where a run's queue lives and how long its calls may take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueConfig {
    /// The PostgreSQL server of [`QueueKind::Postgres`]'s jobs table.
    pub postgres_url: String,
    /// The RabbitMQ server of [`QueueKind::Rabbitmq`] (`amqp://user:pass@host:port/vhost`).
    pub rabbitmq_url: String,
    /// The run's own name, unique per run (and per test): the table, the
    /// queue and the vhost are named after it. ASCII letters, digits, `-`
    /// and `_`, at most [`MAX_NAME`] of them.
    pub name: String,
    /// Every call of a session ends within this.
    pub deadline: Duration,
}

/// The longest queue name: PostgreSQL's identifiers hold 63 bytes, and the
/// table's prefix takes 15.
pub const MAX_NAME: usize = 48;

/// Why `name` cannot name a queue, if it cannot.
fn bad_name(name: &str) -> Option<String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    if name.is_empty() || name.len() > MAX_NAME || !name.chars().all(allowed) {
        return Some(format!(
            "the queue name `{name}` must be 1 to {MAX_NAME} ASCII letters, digits, `-` or `_`"
        ));
    }
    None
}

/// A run's queue, of either kind.
#[derive(Debug)]
pub struct RealQueue {
    kind: QueueKind,
    queue: Queue,
}

#[derive(Debug)]
enum Queue {
    Postgres(postgres::PgQueue),
    Rabbitmq(rabbitmq::RabbitQueue),
}

impl RealQueue {
    /// Sets up a fresh, empty queue of `kind` named after `config.name`:
    /// the jobs table made anew, or a RabbitMQ vhost of the run's own
    /// (see [`RealQueue::notes`] when none could be made) with the queue in it.
    pub async fn prepare(kind: QueueKind, config: QueueConfig) -> Result<RealQueue, RealError> {
        if let Some(why) = bad_name(&config.name) {
            return Err(RealError::Setup { what: "the queue", reason: why });
        }
        let QueueConfig { postgres_url, rabbitmq_url, name, deadline } = config;
        let queue = match kind {
            QueueKind::Postgres => {
                Queue::Postgres(postgres::PgQueue::prepare(&postgres_url, &name, deadline).await?)
            }
            QueueKind::Rabbitmq => Queue::Rabbitmq(
                rabbitmq::RabbitQueue::prepare(&rabbitmq_url, &name, deadline).await?,
            ),
        };
        Ok(RealQueue { kind, queue })
    }

    pub fn kind(&self) -> QueueKind {
        self.kind
    }

    /// What the caller should tell its user about how the queue was set
    /// up: that RabbitMQ's queue lives in a shared vhost, since
    /// `rabbitmqctl` is missing or was refused.
    pub fn notes(&self) -> &[String] {
        match &self.queue {
            Queue::Postgres(_) => &[],
            Queue::Rabbitmq(queue) => queue.notes(),
        }
    }

    /// A worker's session, its connection open.
    pub async fn connect(&self) -> Result<QueueSession, RealError> {
        let session = match &self.queue {
            Queue::Postgres(queue) => Session::Postgres(queue.connect().await?),
            Queue::Rabbitmq(queue) => Session::Rabbitmq(queue.connect().await?),
        };
        Ok(QueueSession { session })
    }

    /// Deletes what [`RealQueue::prepare`] made: the jobs table, or the
    /// vhost (the queue, in the URL's vhost). Dropping the queue instead
    /// deletes a vhost all the same, without waiting, but leaves a table
    /// (the next run of the name drops it) and a queue in the URL's vhost
    /// (it expires unused).
    pub async fn remove(self) -> Result<(), RealError> {
        match self.queue {
            Queue::Postgres(queue) => queue.remove().await,
            Queue::Rabbitmq(queue) => queue.remove().await,
        }
    }
}

/// One worker's session with a run's queue. Every call ends within the
/// queue's deadline, as `Info("timeout")` when its outcome is unknown;
/// after an `Info`, [`QueueSession::reset`] opens a new connection.
#[derive(Debug)]
pub struct QueueSession {
    session: Session,
}

#[derive(Debug)]
enum Session {
    Postgres(postgres::PgSession),
    Rabbitmq(rabbitmq::RabbitSession),
}

impl QueueSession {
    /// Puts a job on the queue: its message id, from 1 in enqueue order.
    pub async fn enqueue(&mut self, data: &str) -> Outcome<u64> {
        match &mut self.session {
            Session::Postgres(session) => session.enqueue(data).await,
            Session::Rabbitmq(session) => session.enqueue(data).await,
        }
    }

    /// The oldest visible job, hidden from every other session for
    /// `visibility_ms`; `None` when there is none.
    pub async fn deliver(&mut self, visibility_ms: u64) -> Outcome<Option<Delivery>> {
        match &mut self.session {
            Session::Postgres(session) => session.deliver(visibility_ms).await,
            Session::Rabbitmq(session) => session.deliver(visibility_ms).await,
        }
    }

    /// Acknowledges a job: it is never delivered again. `Fail("gone")` when
    /// it was acknowledged before or is no longer this session's to
    /// acknowledge (RabbitMQ, past its visibility timeout).
    pub async fn ack(&mut self, message: u64) -> Outcome<()> {
        match &mut self.session {
            Session::Postgres(session) => session.ack(message).await,
            Session::Rabbitmq(session) => session.ack(message).await,
        }
    }

    /// A new connection for the next call, after an `Info`.
    pub async fn reset(&mut self) {
        match &mut self.session {
            Session::Postgres(session) => session.reset(),
            Session::Rabbitmq(session) => session.reset(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_short_and_plain() {
        assert_eq!(bad_name("run-42_a"), None);
        assert!(bad_name("").is_some());
        assert!(bad_name("a b").is_some());
        assert!(bad_name("a\"; DROP").is_some());
        assert!(bad_name(&"a".repeat(MAX_NAME + 1)).is_some());
        assert_eq!(bad_name(&"a".repeat(MAX_NAME)), None);
    }
}
