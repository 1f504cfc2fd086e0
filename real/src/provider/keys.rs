//! The real provider's keys and charges, in PostgreSQL: what makes its
//! idempotency real rather than simulated. Concurrent requests meet in the
//! database, so a broken variant's race (two requests with one key both
//! charging) happens for real.
//!
//! Three tables and a sequence, named from a prefix so that concurrent
//! tests do not share rows:
//!
//! * `{prefix}_keys`: one row per key, `key` its primary key. A request
//!   reserves its key with one `INSERT … ON CONFLICT DO NOTHING RETURNING`:
//!   of two requests at once, exactly one gets the row.
//! * `{prefix}_loose_keys`: `check-then-insert`'s keys, with no unique
//!   constraint on `key`: a plain look-up before the charge, an insert
//!   after it, and nothing stops two requests in between.
//! * `{prefix}_charges`: every charge made, its `id` the `N` of `ch_N`.
//! * `{prefix}_tickets`: the reservations' ids, so that a request finishes
//!   or releases only its own reservation, never a newer one that took
//!   the key after its own expired.
//!
//! Every time is the database's (`clock_timestamp()`), so retention is
//! measured on one clock whoever asks.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockcheck_workloads::provider::{Profile, Response, Valid};
use serde_json::Value;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::timeout;
use tokio_postgres::{Client, Statement};

use crate::pg::open;

/// How long any one database step of a request may take before the
/// request is answered 503: a database that hangs must not hang the
/// provider's clients past their own deadlines forever.
const QUERY_TIMEOUT: Duration = Duration::from_secs(10);

/// How many database connections the provider holds at most: requests
/// beyond it wait for one.
const MAX_SESSIONS: usize = 16;

/// Serialises `CREATE TABLE IF NOT EXISTS` across processes, as the
/// protected resources' table does (two creators of one table can collide
/// on its row type). An arbitrary constant key.
const CREATE_LOCK_KEY: i64 = 0x6c_6f63_6b70_7276;

/// How many times a reservation that lost its key's row between the
/// conflict and the read (released or expired meanwhile) tries again
/// before it answers that the key is busy.
const RESERVE_TRIES: usize = 3;

/// Why a database step failed: the request is answered 503.
#[derive(Debug)]
pub(super) enum StoreError {
    Db(tokio_postgres::Error),
    Timeout,
    /// A stored row the provider cannot read back (a body that is not
    /// JSON, a status out of range).
    BadRow(String),
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Db(error) => write!(f, "{error}"),
            StoreError::Timeout => write!(f, "no answer within {QUERY_TIMEOUT:?}"),
            StoreError::BadRow(reason) => write!(f, "a stored row is unreadable: {reason}"),
        }
    }
}

impl From<tokio_postgres::Error> for StoreError {
    fn from(error: tokio_postgres::Error) -> StoreError {
        StoreError::Db(error)
    }
}

/// The tables' names.
#[derive(Debug, Clone)]
pub(super) struct Tables {
    keys: String,
    loose: String,
    charges: String,
    tickets: String,
}

impl Tables {
    /// The tables of `prefix`, which must be a plain lower-case SQL name
    /// (it is written into statements, not passed as a parameter).
    pub(super) fn new(prefix: &str) -> Result<Tables, String> {
        let plain =
            prefix.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        let starts = prefix.chars().next().is_some_and(|c| c.is_ascii_lowercase() || c == '_');
        // PostgreSQL names hold 63 bytes; the longest suffix is 11.
        if !plain || !starts || prefix.len() > 50 {
            return Err(format!(
                "the table prefix {prefix:?} must be 1 to 50 lower-case letters, digits or \
                 underscores, not starting with a digit"
            ));
        }
        Ok(Tables {
            keys: format!("{prefix}_keys"),
            loose: format!("{prefix}_loose_keys"),
            charges: format!("{prefix}_charges"),
            tickets: format!("{prefix}_tickets"),
        })
    }
}

/// Creates the tables if they are missing (under an advisory lock, safe
/// from several processes at once) and empties them: a run starts with no
/// keys, and charge ids count from `ch_1` again.
pub(super) async fn prepare(url: &str, tables: &Tables) -> Result<(), tokio_postgres::Error> {
    let Tables { keys, loose, charges, tickets } = tables;
    let (client, connection) = open(url).await?;
    let prepared = client
        .batch_execute(&format!(
            "BEGIN; SELECT pg_advisory_xact_lock({CREATE_LOCK_KEY}); \
             CREATE TABLE IF NOT EXISTS {keys} (key text PRIMARY KEY, ticket bigint NOT NULL, \
               fingerprint text NOT NULL, \
               state text NOT NULL CHECK (state IN ('in-flight', 'done')), \
               status integer, body jsonb, created_at timestamptz NOT NULL); \
             CREATE TABLE IF NOT EXISTS {loose} (id bigserial PRIMARY KEY, key text NOT NULL, \
               fingerprint text NOT NULL, status integer NOT NULL, body jsonb NOT NULL, \
               created_at timestamptz NOT NULL); \
             CREATE INDEX IF NOT EXISTS {loose}_key ON {loose} (key); \
             CREATE TABLE IF NOT EXISTS {charges} (id bigserial PRIMARY KEY, \
               order_id text NOT NULL, amount numeric NOT NULL, key text, \
               created_at timestamptz NOT NULL DEFAULT clock_timestamp()); \
             CREATE SEQUENCE IF NOT EXISTS {tickets}; \
             COMMIT; \
             TRUNCATE {keys}, {loose}, {charges} RESTART IDENTITY; \
             ALTER SEQUENCE {tickets} RESTART;"
        ))
        .await;
    drop(client);
    connection.abort();
    prepared
}

/// Runs `step` within [`QUERY_TIMEOUT`].
async fn bounded<T>(
    step: impl std::future::Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, StoreError> {
    match timeout(QUERY_TIMEOUT, step).await {
        Ok(result) => Ok(result?),
        Err(_) => Err(StoreError::Timeout),
    }
}

/// A session's prepared statements (see [`Session::open`] for their text).
#[derive(Clone)]
struct Statements {
    expire: Statement,
    reserve: Statement,
    read: Statement,
    done: Statement,
    release: Statement,
    charge: Statement,
    loose_expire: Statement,
    loose_read: Statement,
    loose_insert: Statement,
}

/// One connection and its prepared statements.
struct Session {
    client: Client,
    connection: JoinHandle<()>,
    statements: Statements,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.connection.abort();
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("closed", &self.client.is_closed()).finish()
    }
}

impl Session {
    async fn open(url: &str, tables: &Tables) -> Result<Session, tokio_postgres::Error> {
        let (client, connection) = open(url).await?;
        match Session::prepare(&client, tables).await {
            Ok(statements) => Ok(Session { client, connection, statements }),
            Err(error) => {
                connection.abort();
                Err(error)
            }
        }
    }

    async fn prepare(
        client: &Client,
        tables: &Tables,
    ) -> Result<Statements, tokio_postgres::Error> {
        let Tables { keys, loose, charges, tickets } = tables;
        let older = "created_at <= clock_timestamp() - $2::bigint * interval '1 millisecond'";
        let newer = "created_at > clock_timestamp() - $2::bigint * interval '1 millisecond'";
        let prepare = |text: String| async move { client.prepare(&text).await };
        Ok(Statements {
            expire: prepare(format!("DELETE FROM {keys} WHERE key = $1 AND {older}")).await?,
            reserve: prepare(format!(
                "INSERT INTO {keys} (key, ticket, fingerprint, state, created_at) \
                 VALUES ($1, nextval('{tickets}'), $2, 'in-flight', clock_timestamp()) \
                 ON CONFLICT (key) DO NOTHING RETURNING ticket"
            ))
            .await?,
            read: prepare(format!(
                "SELECT state, fingerprint, status, body::text FROM {keys} \
                 WHERE key = $1 AND {newer}"
            ))
            .await?,
            done: prepare(format!(
                "UPDATE {keys} SET state = 'done', status = $3, body = $4::text::jsonb \
                 WHERE key = $1 AND ticket = $2 AND state = 'in-flight'"
            ))
            .await?,
            release: prepare(format!(
                "DELETE FROM {keys} WHERE key = $1 AND ticket = $2 AND state = 'in-flight'"
            ))
            .await?,
            charge: prepare(format!(
                "INSERT INTO {charges} (order_id, amount, key) \
                 VALUES ($1, $2::text::numeric, $3) RETURNING id"
            ))
            .await?,
            loose_expire: prepare(format!("DELETE FROM {loose} WHERE key = $1 AND {older}"))
                .await?,
            // The latest row stored wins, as the pure provider's last
            // `finish` does; the clock comes back even when no row does.
            loose_read: prepare(format!(
                "SELECT k.fingerprint, k.status, k.body::text, \
                   extract(epoch FROM clock_timestamp())::float8 \
                 FROM (SELECT 1) AS one LEFT JOIN LATERAL (SELECT fingerprint, status, body \
                   FROM {loose} WHERE key = $1 ORDER BY id DESC LIMIT 1) AS k ON true"
            ))
            .await?,
            loose_insert: prepare(format!(
                "INSERT INTO {loose} (key, fingerprint, status, body, created_at) \
                 VALUES ($1, $2, $3, $4::text::jsonb, to_timestamp($5))"
            ))
            .await?,
        })
    }
}

/// A session taken from the pool; it goes back when dropped, unless a step
/// failed on it (its state is then unknown, and it is closed).
struct Pooled {
    session: Option<Session>,
    idle: Arc<Mutex<Vec<Session>>>,
    broken: bool,
    _permit: OwnedSemaphorePermit,
}

impl Pooled {
    fn session(&mut self) -> &mut Session {
        self.session.as_mut().expect("a pooled session is held until dropped")
    }

    /// `result`, marking the session broken if it is an error.
    fn check<T>(&mut self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        self.broken |= result.is_err();
        result
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        let Some(session) = self.session.take() else { return };
        if self.broken || session.client.is_closed() {
            return;
        }
        if let Ok(mut idle) = self.idle.lock() {
            idle.push(session);
        }
    }
}

/// What a key's reservation found.
#[derive(Debug)]
pub(super) enum Reservation {
    /// The key is this request's now, under this ticket.
    Reserved(i64),
    /// Another request holds it and has not finished.
    InFlight,
    /// Its request finished: the body's fingerprint and the response.
    Done { fingerprint: String, response: Response },
}

/// Where a charge's response is kept, in the transaction that makes it.
#[derive(Debug)]
pub(super) enum Keep<'a> {
    /// Nowhere: no key, or `no-dedupe`.
    Nothing,
    /// In the key's row, if the reservation `ticket` still holds it.
    Reservation { key: &'a str, ticket: i64 },
    /// As a new row of the loose keys (`check-then-insert`), created when
    /// its look-up ran (`begun`, seconds since the epoch).
    Append { key: &'a str, begun: f64 },
}

/// The provider's database: a pool of sessions over the tables.
#[derive(Debug)]
pub(super) struct Store {
    url: String,
    tables: Tables,
    idle: Arc<Mutex<Vec<Session>>>,
    permits: Arc<Semaphore>,
}

/// A stored status and body as a response.
fn stored(status: Option<i32>, body: Option<String>) -> Result<Response, StoreError> {
    let status = status
        .and_then(|status| u16::try_from(status).ok())
        .ok_or_else(|| StoreError::BadRow(format!("status {status:?}")))?;
    let body = body.ok_or_else(|| StoreError::BadRow("no body".into()))?;
    let body: Value =
        serde_json::from_str(&body).map_err(|error| StoreError::BadRow(error.to_string()))?;
    Ok(Response { status, body, replayed: false })
}

impl Store {
    pub(super) fn new(url: &str, tables: Tables) -> Store {
        Store {
            url: url.to_string(),
            tables,
            idle: Arc::new(Mutex::new(Vec::new())),
            permits: Arc::new(Semaphore::new(MAX_SESSIONS)),
        }
    }

    /// Opens `count` sessions ahead of the first requests, so that they
    /// do not wait for a connection (nor, preparing their statements, for
    /// a lock on the tables that a charge would not have waited for yet).
    pub(super) async fn warm(&self, count: usize) -> Result<(), StoreError> {
        let mut opened = Vec::with_capacity(count);
        for _ in 0..count.min(MAX_SESSIONS) {
            opened.push(bounded(Session::open(&self.url, &self.tables)).await?);
        }
        if let Ok(mut idle) = self.idle.lock() {
            idle.extend(opened);
        }
        Ok(())
    }

    /// An idle session, or a new one.
    async fn session(&self) -> Result<Pooled, StoreError> {
        let permit = match timeout(QUERY_TIMEOUT, self.permits.clone().acquire_owned()).await {
            Ok(Ok(permit)) => permit,
            // The semaphore is never closed; a timeout is a busy pool.
            _ => return Err(StoreError::Timeout),
        };
        let idle = self.idle.lock().ok().and_then(|mut idle| idle.pop());
        let session = match idle {
            Some(session) => session,
            None => bounded(Session::open(&self.url, &self.tables)).await?,
        };
        Ok(Pooled {
            session: Some(session),
            idle: self.idle.clone(),
            broken: false,
            _permit: permit,
        })
    }

    /// Reserves `key` for a request whose body has `fingerprint`, after
    /// forgetting it if it is `retention_ms` old; or says who has it.
    pub(super) async fn reserve(
        &self,
        key: &str,
        fingerprint: &str,
        retention_ms: i64,
    ) -> Result<Reservation, StoreError> {
        let mut pooled = self.session().await?;
        let result = reserve_on(pooled.session(), key, fingerprint, retention_ms).await;
        pooled.check(result)
    }

    /// Frees the reservation `ticket` of `key` (its charge failed), unless
    /// it finished after all.
    pub(super) async fn release(&self, key: &str, ticket: i64) -> Result<(), StoreError> {
        let mut pooled = self.session().await?;
        let session = pooled.session();
        let release = &session.statements.release;
        let result = bounded(session.client.execute(release, &[&key, &ticket])).await.map(|_| ());
        pooled.check(result)
    }

    /// `check-then-insert`'s look-up: the latest stored fingerprint and
    /// response of `key` (after forgetting the rows `retention_ms` old),
    /// and the database's time now, in seconds.
    pub(super) async fn look_up(
        &self,
        key: &str,
        retention_ms: i64,
    ) -> Result<(Option<(String, Response)>, f64), StoreError> {
        let mut pooled = self.session().await?;
        let result = look_up_on(pooled.session(), key, retention_ms).await;
        pooled.check(result)
    }

    /// Charges `request` (or declines it) and keeps the response as `keep`
    /// says, in one transaction: the charge and its key's response commit
    /// together or not at all.
    pub(super) async fn charge(
        &self,
        profile: Profile,
        request: &Valid,
        keep: Keep<'_>,
    ) -> Result<Response, StoreError> {
        let mut pooled = self.session().await?;
        let result = charge_on(pooled.session(), profile, request, keep).await;
        pooled.check(result)
    }
}

async fn reserve_on(
    session: &Session,
    key: &str,
    fingerprint: &str,
    retention_ms: i64,
) -> Result<Reservation, StoreError> {
    let (client, statements) = (&session.client, &session.statements);
    for _ in 0..RESERVE_TRIES {
        bounded(client.execute(&statements.expire, &[&key, &retention_ms])).await?;
        let reserved =
            bounded(client.query_opt(&statements.reserve, &[&key, &fingerprint])).await?;
        if let Some(row) = reserved {
            return Ok(Reservation::Reserved(row.try_get(0)?));
        }
        let Some(row) = bounded(client.query_opt(&statements.read, &[&key, &retention_ms])).await?
        else {
            // Released or expired since the conflict: try again.
            continue;
        };
        let state: String = row.try_get(0)?;
        if state != "done" {
            return Ok(Reservation::InFlight);
        }
        let response = stored(row.try_get(2)?, row.try_get(3)?)?;
        return Ok(Reservation::Done { fingerprint: row.try_get(1)?, response });
    }
    Ok(Reservation::InFlight)
}

async fn look_up_on(
    session: &Session,
    key: &str,
    retention_ms: i64,
) -> Result<(Option<(String, Response)>, f64), StoreError> {
    let (client, statements) = (&session.client, &session.statements);
    bounded(client.execute(&statements.loose_expire, &[&key, &retention_ms])).await?;
    let row = bounded(client.query_one(&statements.loose_read, &[&key])).await?;
    let now: f64 = row.try_get(3)?;
    let found = match row.try_get::<_, Option<String>>(0)? {
        Some(fingerprint) => Some((fingerprint, stored(row.try_get(1)?, row.try_get(2)?)?)),
        None => None,
    };
    Ok((found, now))
}

async fn charge_on(
    session: &mut Session,
    profile: Profile,
    request: &Valid,
    keep: Keep<'_>,
) -> Result<Response, StoreError> {
    let Statements { charge, done, loose_insert, .. } = session.statements.clone();
    let transaction = bounded(session.client.transaction()).await?;
    let response = if request.declined {
        profile.declined()
    } else {
        let amount = request.amount.to_string();
        let key = request.key.as_deref();
        let row = bounded(transaction.query_one(&charge, &[&request.order, &amount, &key])).await?;
        let id: i64 = row.try_get(0)?;
        Response::created(&format!("ch_{id}"), &request.order, request.amount)
    };
    let status = i32::from(response.status);
    let body = response.body.to_string();
    match keep {
        Keep::Nothing => {}
        Keep::Reservation { key, ticket } => {
            // No row updated: the reservation expired and another request
            // took the key; the charge stands, its response is not kept.
            bounded(transaction.execute(&done, &[&key, &ticket, &status, &body])).await?;
        }
        Keep::Append { key, begun } => {
            let fingerprint = request.fingerprint();
            let values: [&(dyn tokio_postgres::types::ToSql + Sync); 5] =
                [&key, &fingerprint, &status, &body, &begun];
            bounded(transaction.execute(&loose_insert, &values)).await?;
        }
    }
    bounded(transaction.commit()).await?;
    Ok(response)
}
