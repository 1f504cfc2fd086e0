//! The protected resources of a real test, in PostgreSQL: the storage that
//! receives a lock holder's writes (docs/guide.md#leases-and-fencing). One table serves both
//! kinds of storage; only the write differs:
//!
//! * fenced: `… SET fence=$t, data=$d WHERE fence IS NULL OR fence <= $t`,
//!   so a write whose token is below one already accepted matches no row and
//!   fails with `stale-fence`;
//! * unfenced (or a write without a token): `… SET data=$d`, whatever token
//!   the holder had.
//!
//! Both are upserts, because the simulator's storage (`sim/src/server.rs`,
//! `Request::Write`) starts every resource empty and creates it on first
//! write: the cron workload writes to a resource per day (`report:day-3`),
//! whose names are not known in advance. A read of a resource never written
//! is `(None, None)`, as in the simulator, so real and simulated histories
//! look the same.

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::{timeout_at, Instant};
use tokio_postgres::{Client, Statement};

use super::{ClientConfig, RealError};
use crate::pg::{connect_error, open, query_failure, within_setup};
use lockcheck_workloads::{Outcome, ResourceStore};

/// The table of protected resources.
const TABLE: &str = "lockcheck_resources";

/// Serialises `CREATE TABLE IF NOT EXISTS` across processes: two of them
/// racing on a missing table can both try to create its row type, and one
/// fails with a unique violation on `pg_type`. An arbitrary constant key.
const CREATE_LOCK_KEY: i64 = 0x6c_6f63_6b63_686b;

/// One connection and its prepared statements.
struct Session {
    client: Client,
    /// Drives the socket; aborted with the session so an abandoned query's
    /// late reply can never reach anyone.
    connection: JoinHandle<()>,
    write_fenced: Statement,
    write_unfenced: Statement,
    read: Statement,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.connection.abort();
    }
}

/// One logical client's connection to the protected resources.
pub struct Storage {
    url: String,
    deadline: Duration,
    fenced: bool,
    /// `None` after a timeout or a lost connection: the next operation opens
    /// a new one.
    session: Option<Session>,
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Storage")
            .field("url", &self.url)
            .field("deadline", &self.deadline)
            .field("fenced", &self.fenced)
            .field("connected", &self.session.is_some())
            .finish()
    }
}

fn setup_error(reason: impl ToString) -> RealError {
    RealError::Setup { what: "the protected resources' table", reason: reason.to_string() }
}

impl Session {
    async fn open(url: &str) -> Result<Session, tokio_postgres::Error> {
        let (client, connection) = open(url).await?;
        // If preparing fails, dropping the handle would leave the task
        // running with its socket; abort it.
        let prepared = async {
            let write_fenced = client
                .prepare(&format!(
                    "INSERT INTO {TABLE} AS r (name, fence, data) VALUES ($1, $2, $3) \
                     ON CONFLICT (name) DO UPDATE SET fence = EXCLUDED.fence, data = EXCLUDED.data \
                     WHERE r.fence IS NULL OR r.fence <= EXCLUDED.fence"
                ))
                .await?;
            let write_unfenced = client
                .prepare(&format!(
                    "INSERT INTO {TABLE} AS r (name, fence, data) VALUES ($1, NULL, $2) \
                     ON CONFLICT (name) DO UPDATE SET data = EXCLUDED.data"
                ))
                .await?;
            let read =
                client.prepare(&format!("SELECT fence, data FROM {TABLE} WHERE name = $1")).await?;
            Ok::<_, tokio_postgres::Error>((write_fenced, write_unfenced, read))
        }
        .await;
        match prepared {
            Ok((write_fenced, write_unfenced, read)) => {
                Ok(Session { client, connection, write_fenced, write_unfenced, read })
            }
            Err(error) => {
                connection.abort();
                Err(error)
            }
        }
    }
}

/// Creates the table (idempotent, safe from several processes at once) and
/// deletes the rows of `resources`, and of their per-unit resources
/// (`report:day-3` of `report`), so a test starts from empty resources.
async fn prepare_table(client: &Client, resources: &[String]) -> Result<(), tokio_postgres::Error> {
    client
        .batch_execute(&format!(
            "BEGIN; SELECT pg_advisory_xact_lock({CREATE_LOCK_KEY}); \
             CREATE TABLE IF NOT EXISTS {TABLE} (name text PRIMARY KEY, fence bigint, data text); \
             COMMIT;"
        ))
        .await?;
    client
        .execute(
            &format!(
                "DELETE FROM {TABLE} t USING unnest($1::text[]) AS r(name) \
                 WHERE t.name = r.name OR left(t.name, length(r.name) + 1) = r.name || ':'"
            ),
            &[&resources],
        )
        .await?;
    Ok(())
}

impl Storage {
    /// Creates the table if it is missing and empties `resources` (see
    /// `prepare_table`). Call it once per test, before any client runs.
    pub async fn prepare(url: &str, resources: &[String]) -> Result<(), RealError> {
        let work = async {
            let (client, connection) = open(url).await.map_err(|e| connect_error(url, e))?;
            let prepared = prepare_table(&client, resources).await.map_err(setup_error);
            drop(client);
            let _ = connection.await;
            prepared
        };
        within_setup(work, |why| connect_error(url, why)).await
    }

    /// Opens this client's session: the table must exist (see [`Storage::prepare`]).
    pub async fn connect(config: &ClientConfig) -> Result<Storage, RealError> {
        let url = &config.storage_url;
        let opened = async { Session::open(url).await.map_err(|e| connect_error(url, e)) };
        let session = within_setup(opened, |why| connect_error(url, why)).await?;
        Ok(Storage {
            url: url.clone(),
            deadline: config.deadline,
            fenced: config.fenced_storage,
            session: Some(session),
        })
    }

    /// The session, opened anew if the last one was given up; `None` if it
    /// cannot be opened by `until`. Nothing of the operation has been sent
    /// then, so the operation fails `unavailable`.
    async fn session(&mut self, until: Instant) -> Option<&Session> {
        if self.session.is_none() {
            if let Ok(Ok(session)) = timeout_at(until, Session::open(&self.url)).await {
                self.session = Some(session);
            }
        }
        self.session.as_ref()
    }

    /// Writes `data` to `resource`. With fenced storage and a token, the write
    /// is refused (`stale-fence`) if the resource already accepted a larger
    /// token; otherwise it always lands. Past the deadline the outcome is
    /// unknown (`info`), and the connection is replaced on the next use.
    pub async fn write(&mut self, resource: &str, fence: Option<u64>, data: &str) -> Outcome<()> {
        let until = Instant::now() + self.deadline;
        let fenced = self.fenced;
        let token = match fence.map(i64::try_from) {
            Some(Ok(token)) if fenced => Some(token),
            // A token PostgreSQL's bigint cannot hold: nothing is sent.
            Some(Err(_)) if fenced => return Outcome::Fail("bad-fence".into()),
            _ => None,
        };
        let Some(session) = self.session(until).await else {
            return Outcome::Fail("unavailable".into());
        };
        let query = async {
            match token {
                Some(token) => {
                    session.client.execute(&session.write_fenced, &[&resource, &token, &data]).await
                }
                None => session.client.execute(&session.write_unfenced, &[&resource, &data]).await,
            }
        };
        let (outcome, lost) = match timeout_at(until, query).await {
            Ok(Ok(0)) => (Outcome::Fail("stale-fence".into()), false),
            Ok(Ok(_)) => (Outcome::Ok(()), false),
            Ok(Err(error)) => query_failure(&error),
            Err(_) => (Outcome::Info("timeout".into()), true),
        };
        if lost {
            self.session = None;
        }
        outcome
    }

    /// Reads `resource`'s token and data; `(None, None)` if never written.
    pub async fn read(&mut self, resource: &str) -> Outcome<(Option<u64>, Option<String>)> {
        let until = Instant::now() + self.deadline;
        let Some(session) = self.session(until).await else {
            return Outcome::Fail("unavailable".into());
        };
        let query = async { session.client.query_opt(&session.read, &[&resource]).await };
        let (outcome, lost) = match timeout_at(until, query).await {
            Ok(Ok(None)) => (Outcome::Ok((None, None)), false),
            Ok(Ok(Some(row))) => match (row.try_get::<_, Option<i64>>(0), row.try_get(1)) {
                (Ok(fence), Ok(data)) => {
                    (Outcome::Ok((fence.and_then(|f| u64::try_from(f).ok()), data)), false)
                }
                _ => (Outcome::Info("bad-reply".into()), false),
            },
            Ok(Err(error)) => query_failure(&error),
            Err(_) => (Outcome::Info("timeout".into()), true),
        };
        if lost {
            self.session = None;
        }
        outcome
    }

    /// Starts a new session: the next operation opens a new connection.
    pub async fn reset(&mut self) {
        self.session = None;
    }
}

/// The real protected resources, fenced or not as the client's
/// [`ClientConfig`] says.
impl ResourceStore for Storage {
    async fn write(&mut self, resource: &str, fence: Option<u64>, data: &str) -> Outcome<()> {
        Storage::write(self, resource, fence, data).await
    }

    async fn read(&mut self, resource: &str) -> Outcome<(Option<u64>, Option<String>)> {
        Storage::read(self, resource).await
    }

    async fn reset(&mut self) {
        Storage::reset(self).await
    }
}
