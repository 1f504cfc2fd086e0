//! The payments queue as a PostgreSQL table, taken as River, pgmq and Oban
//! take theirs: a worker claims the oldest visible job with
//! `FOR UPDATE SKIP LOCKED` and, in the same statement, hides it until
//! `now + visibility` by the server's clock. A job whose worker does not
//! acknowledge (delete) it by then is visible again and delivered anew,
//! with its delivery count one up: the stalled job's rescue.
//!
//! The table is the pure queue (`lockcheck_workloads::queue`) in SQL:
//! `visible_at` is when the job last became visible (its insert, or the end
//! of its last delivery's timeout), and delivery goes by `(visible_at, id)`
//! as the pure queue's does. An ack deletes by id whoever holds the job, as
//! pgmq's delete does: a stalled worker's late ack still deletes it.

use std::time::Duration;

use lockcheck_workloads::queue::Delivery;
use lockcheck_workloads::Outcome;
use tokio::task::JoinHandle;
use tokio::time::{timeout_at, Instant};
use tokio_postgres::{Client, Statement};

use crate::pg::{self, connect_error, open, query_failure};
use crate::RealError;

/// One run's jobs table, made fresh and empty by [`PgQueue::prepare`].
#[derive(Debug)]
pub(super) struct PgQueue {
    url: String,
    /// The table's quoted name.
    table: String,
    deadline: Duration,
}

/// One connection and its prepared statements.
struct Connected {
    client: Client,
    /// Drives the socket; aborted with the session so an abandoned query's
    /// late reply can never reach anyone.
    connection: JoinHandle<()>,
    enqueue: Statement,
    deliver: Statement,
    ack: Statement,
}

impl Drop for Connected {
    fn drop(&mut self) {
        self.connection.abort();
    }
}

/// One worker's way to the jobs table.
pub(super) struct PgSession {
    url: String,
    table: String,
    deadline: Duration,
    /// `None` after a timeout or a lost connection: the next call opens a
    /// new one.
    connected: Option<Connected>,
}

impl std::fmt::Debug for PgSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgSession")
            .field("table", &self.table)
            .field("deadline", &self.deadline)
            .field("connected", &self.connected.is_some())
            .finish()
    }
}

fn setup_error(reason: impl ToString) -> RealError {
    RealError::Setup { what: "the PostgreSQL jobs table", reason: reason.to_string() }
}

/// Runs `work` within the setup's bound, as a connection error past it.
async fn within_setup<T>(
    url: &str,
    work: impl std::future::Future<Output = Result<T, RealError>>,
) -> Result<T, RealError> {
    pg::within_setup(work, |why| connect_error(url, why)).await
}

impl Connected {
    async fn open(url: &str, table: &str) -> Result<Connected, tokio_postgres::Error> {
        let (client, connection) = open(url).await?;
        let prepared = async {
            let enqueue = client
                .prepare(&format!("INSERT INTO {table} (data) VALUES ($1) RETURNING id"))
                .await?;
            // The subquery is an InitPlan, run once: it locks the oldest
            // visible job no one else has locked, and the update hides it.
            let deliver = client
                .prepare(&format!(
                    "UPDATE {table} SET deliveries = deliveries + 1, \
                     visible_at = clock_timestamp() + $1::bigint * interval '1 millisecond' \
                     WHERE id = (SELECT id FROM {table} WHERE visible_at <= clock_timestamp() \
                     ORDER BY visible_at, id LIMIT 1 FOR UPDATE SKIP LOCKED) \
                     RETURNING id, data, deliveries"
                ))
                .await?;
            let ack = client.prepare(&format!("DELETE FROM {table} WHERE id = $1")).await?;
            Ok::<_, tokio_postgres::Error>((enqueue, deliver, ack))
        }
        .await;
        match prepared {
            Ok((enqueue, deliver, ack)) => {
                Ok(Connected { client, connection, enqueue, deliver, ack })
            }
            Err(error) => {
                connection.abort();
                Err(error)
            }
        }
    }
}

impl PgQueue {
    /// Drops the run's table if a previous run left it, and makes it anew:
    /// ids count from 1 again.
    pub(super) async fn prepare(
        url: &str,
        name: &str,
        deadline: Duration,
    ) -> Result<PgQueue, RealError> {
        let table = format!("\"lockcheck_jobs_{name}\"");
        within_setup(url, async {
            let (client, connection) = open(url).await.map_err(|e| connect_error(url, e))?;
            let made = client
                .batch_execute(&format!(
                    "DROP TABLE IF EXISTS {table}; \
                     CREATE TABLE {table} (id bigserial PRIMARY KEY, data text NOT NULL, \
                     deliveries int NOT NULL DEFAULT 0, \
                     visible_at timestamptz NOT NULL DEFAULT clock_timestamp()); \
                     CREATE INDEX ON {table} (visible_at, id);"
                ))
                .await
                .map_err(setup_error);
            drop(client);
            let _ = connection.await;
            made
        })
        .await?;
        Ok(PgQueue { url: url.to_string(), table, deadline })
    }

    /// A worker's session, its connection open.
    pub(super) async fn connect(&self) -> Result<PgSession, RealError> {
        let url = &self.url;
        let connected = within_setup(url, async {
            Connected::open(url, &self.table).await.map_err(|e| connect_error(url, e))
        })
        .await?;
        Ok(PgSession {
            url: url.clone(),
            table: self.table.clone(),
            deadline: self.deadline,
            connected: Some(connected),
        })
    }

    /// Drops the table.
    pub(super) async fn remove(&self) -> Result<(), RealError> {
        let url = &self.url;
        within_setup(url, async {
            let (client, connection) = open(url).await.map_err(|e| connect_error(url, e))?;
            let dropped = client
                .batch_execute(&format!("DROP TABLE IF EXISTS {}", self.table))
                .await
                .map_err(setup_error);
            drop(client);
            let _ = connection.await;
            dropped
        })
        .await
    }
}

impl PgSession {
    /// The connection, opened anew if the last one was given up; `None` if
    /// it cannot be opened by `until`. Nothing of the call has been sent
    /// then, so the call fails `unavailable`.
    async fn connected(&mut self, until: Instant) -> Option<&Connected> {
        if self.connected.is_none() {
            if let Ok(Ok(connected)) =
                timeout_at(until, Connected::open(&self.url, &self.table)).await
            {
                self.connected = Some(connected);
            }
        }
        self.connected.as_ref()
    }

    /// Ends a call: a lost connection is given up.
    fn settle<T>(&mut self, (outcome, lost): (Outcome<T>, bool)) -> Outcome<T> {
        if lost {
            self.connected = None;
        }
        outcome
    }

    pub(super) async fn enqueue(&mut self, data: &str) -> Outcome<u64> {
        let until = Instant::now() + self.deadline;
        let Some(connected) = self.connected(until).await else {
            return Outcome::Fail("unavailable".into());
        };
        let query = async { connected.client.query_one(&connected.enqueue, &[&data]).await };
        let ended = match timeout_at(until, query).await {
            Ok(Ok(row)) => match row.try_get::<_, i64>(0).map(u64::try_from) {
                Ok(Ok(id)) => (Outcome::Ok(id), false),
                _ => (Outcome::Info("bad-reply".into()), false),
            },
            Ok(Err(error)) => query_failure(&error),
            Err(_) => (Outcome::Info("timeout".into()), true),
        };
        self.settle(ended)
    }

    pub(super) async fn deliver(&mut self, visibility_ms: u64) -> Outcome<Option<Delivery>> {
        let until = Instant::now() + self.deadline;
        // A timeout PostgreSQL's bigint cannot hold: nothing is sent.
        let Ok(visibility_ms) = i64::try_from(visibility_ms) else {
            return Outcome::Fail("bad-visibility".into());
        };
        let Some(connected) = self.connected(until).await else {
            return Outcome::Fail("unavailable".into());
        };
        let query =
            async { connected.client.query_opt(&connected.deliver, &[&visibility_ms]).await };
        let ended = match timeout_at(until, query).await {
            Ok(Ok(None)) => (Outcome::Ok(None), false),
            Ok(Ok(Some(row))) => match delivery(&row) {
                Some(delivery) => (Outcome::Ok(Some(delivery)), false),
                None => (Outcome::Info("bad-reply".into()), false),
            },
            Ok(Err(error)) => query_failure(&error),
            Err(_) => (Outcome::Info("timeout".into()), true),
        };
        self.settle(ended)
    }

    /// Deletes the job: `gone` when no row has its id (acked before).
    pub(super) async fn ack(&mut self, message: u64) -> Outcome<()> {
        let until = Instant::now() + self.deadline;
        // No job has an id past bigint's range.
        let Ok(id) = i64::try_from(message) else {
            return Outcome::Fail("gone".into());
        };
        let Some(connected) = self.connected(until).await else {
            return Outcome::Fail("unavailable".into());
        };
        let query = async { connected.client.execute(&connected.ack, &[&id]).await };
        let ended = match timeout_at(until, query).await {
            Ok(Ok(0)) => (Outcome::Fail("gone".into()), false),
            Ok(Ok(_)) => (Outcome::Ok(()), false),
            Ok(Err(error)) => query_failure(&error),
            Err(_) => (Outcome::Info("timeout".into()), true),
        };
        self.settle(ended)
    }

    /// The next call opens a new connection.
    pub(super) fn reset(&mut self) {
        self.connected = None;
    }
}

/// A delivered row (`id, data, deliveries`) as a [`Delivery`].
fn delivery(row: &tokio_postgres::Row) -> Option<Delivery> {
    let message = u64::try_from(row.try_get::<_, i64>(0).ok()?).ok()?;
    let data: String = row.try_get(1).ok()?;
    let delivery = u32::try_from(row.try_get::<_, i32>(2).ok()?).ok()?;
    Some(Delivery { message, data, delivery, redelivered: delivery > 1 })
}
