//! The payments table of a real payments run, in PostgreSQL: where a
//! worker records an order as paid when the run's protection relies on a
//! table of its own rather than the provider's keys. The same four modes
//! as the pure [`lockcheck_workloads::payments::Ledger`] the simulator
//! serves, each the SQL a team would write:
//!
//! * fenced: one row per order, upserted only with a token at least the
//!   highest it took (`… ON CONFLICT DO UPDATE … WHERE fence <= $t`); a
//!   stale holder's charge matches no row and fails `stale-fence`;
//! * unique: a plain `INSERT` against `UNIQUE (order_id)`; the second
//!   fails with SQLSTATE 23505, read as `exists` (already done);
//! * conditional: the order's row moves `pending → paid` in one
//!   `UPDATE … WHERE state = 'pending'`; a second finds it paid and fails
//!   `not-pending`;
//! * append: an `INSERT` into a table with no constraint: every charge is
//!   a row, the mistake the others fix.
//!
//! A row's id is `row-N`, `N` from the table's sequence, as the pure
//! ledger names them.

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::{timeout_at, Instant};
use tokio_postgres::{Client, Statement};

use lockcheck_workloads::payments::LedgerMode;
use lockcheck_workloads::Outcome;

use super::RealError;
use crate::pg::{open, query_failure, within_setup};

/// The SQLSTATE of a unique violation.
const UNIQUE_VIOLATION: &str = "23505";

/// One connection and its statements.
struct Session {
    client: Client,
    connection: JoinHandle<()>,
    /// The charge: its one statement, or (conditional) the update after
    /// `pending`.
    charge: Statement,
    /// Conditional only: creates the order's row as `pending` if missing.
    pending: Option<Statement>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.connection.abort();
    }
}

/// The payments table of one run: its name and mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerTable {
    pub url: String,
    pub table: String,
    pub mode: LedgerMode,
}

/// One worker's session to the payments table.
pub struct LedgerSession {
    table: LedgerTable,
    deadline: Duration,
    session: Option<Session>,
}

impl std::fmt::Debug for LedgerSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LedgerSession")
            .field("table", &self.table)
            .field("connected", &self.session.is_some())
            .finish()
    }
}

fn setup_error(reason: impl ToString) -> RealError {
    RealError::Setup { what: "the payments table", reason: reason.to_string() }
}

impl LedgerTable {
    /// The table's definition for its mode: only an append table goes
    /// without a constraint on the order.
    fn create(&self) -> String {
        let table = &self.table;
        let order = match self.mode {
            LedgerMode::Append => "order_id text NOT NULL",
            _ => "order_id text NOT NULL UNIQUE",
        };
        format!(
            "DROP TABLE IF EXISTS {table}; \
             CREATE TABLE {table} (id bigserial PRIMARY KEY, {order}, \
             state text NOT NULL DEFAULT 'paid', fence bigint)"
        )
    }

    /// Creates the table afresh (a run starts with no payments).
    pub async fn prepare(&self) -> Result<(), RealError> {
        let work = async {
            let (client, connection) = open(&self.url).await.map_err(setup_error)?;
            let done = client.batch_execute(&self.create()).await.map_err(setup_error);
            drop(client);
            let _ = connection.await;
            done
        };
        within_setup(work, setup_error).await
    }

    /// A worker's session; it connects on first use.
    pub fn session(&self, deadline: Duration) -> LedgerSession {
        LedgerSession { table: self.clone(), deadline, session: None }
    }
}

impl Session {
    async fn open(table: &LedgerTable) -> Result<Session, tokio_postgres::Error> {
        let (client, connection) = open(&table.url).await?;
        let name = &table.table;
        let prepared = async {
            let charge = match table.mode {
                LedgerMode::Fenced => {
                    format!(
                        "INSERT INTO {name} AS p (order_id, fence) VALUES ($1, $2) \
                         ON CONFLICT (order_id) DO UPDATE SET fence = GREATEST(p.fence, EXCLUDED.fence) \
                         WHERE p.fence IS NULL OR EXCLUDED.fence IS NULL OR p.fence <= EXCLUDED.fence \
                         RETURNING id"
                    )
                }
                LedgerMode::Unique | LedgerMode::Append => {
                    format!("INSERT INTO {name} (order_id, fence) VALUES ($1, $2) RETURNING id")
                }
                LedgerMode::Conditional => format!(
                    "UPDATE {name} SET state = 'paid', fence = $2 \
                     WHERE order_id = $1 AND state = 'pending' RETURNING id"
                ),
            };
            let charge = client.prepare(&charge).await?;
            let pending = match table.mode {
                LedgerMode::Conditional => Some(
                    client
                        .prepare(&format!(
                            "INSERT INTO {name} (order_id, state) VALUES ($1, 'pending') \
                             ON CONFLICT (order_id) DO NOTHING"
                        ))
                        .await?,
                ),
                _ => None,
            };
            Ok::<_, tokio_postgres::Error>((charge, pending))
        }
        .await;
        match prepared {
            Ok((charge, pending)) => Ok(Session { client, connection, charge, pending }),
            Err(error) => {
                connection.abort();
                Err(error)
            }
        }
    }
}

impl LedgerSession {
    /// Records `order` as paid: the row's id, or why not (`stale-fence`,
    /// `exists`, `not-pending`); `info` past the deadline.
    pub async fn charge(&mut self, order: &str, fence: Option<u64>) -> Outcome<String> {
        let until = Instant::now() + self.deadline;
        let token = match fence.map(i64::try_from) {
            Some(Ok(token)) => Some(token),
            Some(Err(_)) => return Outcome::Fail("bad-fence".into()),
            None => None,
        };
        if self.session.is_none() {
            if let Ok(Ok(session)) = timeout_at(until, Session::open(&self.table)).await {
                self.session = Some(session);
            }
        }
        let Some(session) = self.session.as_ref() else {
            return Outcome::Fail("unavailable".into());
        };
        let mode = self.table.mode;
        let query = async {
            if let Some(pending) = &session.pending {
                session.client.execute(pending, &[&order]).await?;
            }
            session.client.query_opt(&session.charge, &[&order, &token]).await
        };
        let (outcome, lost) = match timeout_at(until, query).await {
            Ok(Ok(Some(row))) => match row.try_get::<_, i64>(0) {
                Ok(id) => (Outcome::Ok(format!("row-{id}")), false),
                Err(_) => (Outcome::Info("bad-reply".into()), false),
            },
            Ok(Ok(None)) => (
                Outcome::Fail(
                    if mode == LedgerMode::Conditional { "not-pending" } else { "stale-fence" }
                        .into(),
                ),
                false,
            ),
            Ok(Err(error)) => match error.as_db_error() {
                Some(db) if db.code().code() == UNIQUE_VIOLATION => {
                    (Outcome::Fail("exists".into()), false)
                }
                _ => query_failure(&error),
            },
            Err(_) => (Outcome::Info("timeout".into()), true),
        };
        if lost {
            self.session = None;
        }
        outcome
    }

    /// A new connection on next use.
    pub fn reset(&mut self) {
        self.session = None;
    }
}
