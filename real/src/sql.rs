//! The SQL locks of docs/guide.md (#postgresql, #mysql-and-mariadb), issued
//! against a real PostgreSQL or MySQL/MariaDB: session and transaction
//! advisory locks, `GET_LOCK`, and the lease tables with a fencing token.
//!
//! Each [`SqlClient`] is one logical client on one connection, so a
//! session-bound lock stays on the session that took it. Every operation
//! ends within the client's deadline. When its outcome is unknown (a timeout,
//! a lost connection) it is `info`, and the session is given up: `reset`
//! opens a new one, while the server frees the old one's advisory and
//! `GET_LOCK` locks only when it notices the connection is gone. That gap is
//! the "connection cut: server frees it, client still believes" failure of
//! docs/truth-table.md, and a test kills connections to show it.
//!
//! Advisory locks and `GET_LOCK` issue no fencing token (`Grant::fence` is
//! `None`); the lease tables do (their `fence` column).

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use tokio::task::JoinHandle;
use tokio::time::{timeout_at, Instant};
use tokio_postgres::types::Type;
use tokio_postgres::{NoTls, SimpleQueryMessage, Statement};

use super::{ClientConfig, RealError};
use lockcheck_workloads::lease_table::{self, LeaseStore, Taken};
use lockcheck_workloads::{Grant, LockClient, Outcome, Stall, StallPoint};

/// The SQL lock recipes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SqlRecipe {
    /// `pg_try_advisory_lock(k)` / `pg_advisory_unlock(k)`, bound to the
    /// session; `k` is [`advisory_key`] of the lock's name.
    PostgresAdvisory,
    /// `BEGIN; SELECT pg_try_advisory_xact_lock(k)`, the transaction held
    /// open while the lock is held; `COMMIT` releases it.
    PostgresAdvisoryXact,
    /// The lease table `lockcheck_leases` with a fence column, expiring by
    /// the database's clock (`now()`).
    PostgresLease,
    /// `GET_LOCK(name, 0)` / `RELEASE_LOCK(name)`, bound to the session;
    /// the name is [`mysql_lock_name`] of the lock's.
    MysqlGetLock,
    /// The lease table with `INSERT IGNORE`, `TIMESTAMP(3)`, `NOW(3)`, and the
    /// token set by `fence = LAST_INSERT_ID(fence + 1)` and read back on the
    /// same connection.
    MysqlLease,
}

impl SqlRecipe {
    pub const ALL: [SqlRecipe; 5] = [
        SqlRecipe::PostgresAdvisory,
        SqlRecipe::PostgresAdvisoryXact,
        SqlRecipe::PostgresLease,
        SqlRecipe::MysqlGetLock,
        SqlRecipe::MysqlLease,
    ];

    /// The backend's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            SqlRecipe::PostgresAdvisory => "postgres-advisory",
            SqlRecipe::PostgresAdvisoryXact => "postgres-advisory-xact",
            SqlRecipe::PostgresLease => "postgres-lease",
            SqlRecipe::MysqlGetLock => "mysql-get-lock",
            SqlRecipe::MysqlLease => "mysql-lease",
        }
    }

    pub fn parse(name: &str) -> Option<SqlRecipe> {
        SqlRecipe::ALL.into_iter().find(|recipe| recipe.name() == name)
    }

    /// Spoken to MySQL/MariaDB (else PostgreSQL).
    pub fn is_mysql(self) -> bool {
        matches!(self, SqlRecipe::MysqlGetLock | SqlRecipe::MysqlLease)
    }

    /// Grants carry a fencing token.
    pub fn has_fence(self) -> bool {
        matches!(self, SqlRecipe::PostgresLease | SqlRecipe::MysqlLease)
    }

    fn server(self) -> &'static str {
        if self.is_mysql() {
            "MySQL"
        } else {
            "PostgreSQL"
        }
    }
}

/// The lease table of both databases.
const LEASES: &str = "lockcheck_leases";

/// How long `prepare` and `connect` may take: longer than an operation's
/// deadline, since nothing is recorded yet and a cold server may be slow.
const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// Serialises PostgreSQL's `CREATE TABLE IF NOT EXISTS` across processes
/// (two racing on a missing table can both create its row type, and one
/// fails on `pg_type`'s unique index): an arbitrary constant key.
const CREATE_LOCK_KEY: i64 = 0x6c6f_636b_6c65_6173;

/// 64-bit FNV-1a of `bytes`: tiny, and fixed by its specification, so a
/// lock's key is the same in every build, process and version of lockcheck.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The advisory-lock key of lock `name`: the 64-bit FNV-1a hash of the UTF-8
/// bytes of `lockcheck:<name>`, reinterpreted as a signed `bigint`. The
/// prefix keeps lockcheck's keys apart from an application's; two names that
/// collide share one lock, which can only refuse, never grant, too much.
pub fn advisory_key(name: &str) -> i64 {
    fnv1a(format!("lockcheck:{name}").as_bytes()) as i64
}

/// The `GET_LOCK` name of lock `name`: `lockcheck:<name>`, or, when that is
/// longer than the server's 64 characters, `lockcheck:` and the 16 hex
/// digits of [`advisory_key`]'s hash.
pub fn mysql_lock_name(name: &str) -> String {
    let full = format!("lockcheck:{name}");
    if full.chars().count() <= 64 {
        full
    } else {
        format!("lockcheck:{:016x}", advisory_key(name) as u64)
    }
}

/// Why an operation's statements did not all complete.
enum Failure {
    /// The server answered with an error: the statement did not take effect.
    Refused(String),
    /// The outcome is unknown (the connection broke mid-request).
    Lost(String),
}

impl From<tokio_postgres::Error> for Failure {
    fn from(error: tokio_postgres::Error) -> Self {
        match error.as_db_error() {
            Some(db) => Failure::Refused(format!("db-error:{}", db.code().code())),
            None => Failure::Lost("conn-lost".into()),
        }
    }
}

impl From<mysql_async::Error> for Failure {
    fn from(error: mysql_async::Error) -> Self {
        match error {
            mysql_async::Error::Server(error) => {
                Failure::Refused(format!("db-error:{}", error.code))
            }
            _ => Failure::Lost("conn-lost".into()),
        }
    }
}

type Step<T> = Result<Outcome<T>, Failure>;

fn busy<T>() -> Step<T> {
    Ok(Outcome::Fail("busy".into()))
}

fn not_held<T>() -> Step<T> {
    Ok(Outcome::Fail("not-held".into()))
}

/// One PostgreSQL connection, its prepared statements, and the lock its
/// open transaction holds (the transaction-advisory recipe).
struct PgSession {
    client: tokio_postgres::Client,
    /// Drives the socket; aborted with the session, so a given-up session's
    /// socket closes at once and the server frees its locks.
    connection: JoinHandle<()>,
    statements: HashMap<&'static str, Statement>,
    transaction_holds: Option<String>,
}

impl Drop for PgSession {
    fn drop(&mut self) {
        self.connection.abort();
    }
}

/// Whether this session holds advisory key `k` (bound as its high and low
/// 32 bits, which is how `pg_locks` shows a `bigint` key).
const PG_HOLDS: &str = "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' \
     AND pid = pg_backend_pid() AND granted AND classid = $1 AND objid = $2 AND objsubid = 1)";
const PG_TRY_LOCK: &str = "SELECT pg_try_advisory_lock($1)";
const PG_UNLOCK: &str = "SELECT pg_advisory_unlock($1)";
const PG_LEASE_INSERT: &str =
    "INSERT INTO lockcheck_leases (name) VALUES ($1) ON CONFLICT DO NOTHING";
const PG_LEASE_ACQUIRE: &str = "UPDATE lockcheck_leases \
     SET owner = $2, expires_at = now() + $3::bigint * interval '1 millisecond', fence = fence + 1 \
     WHERE name = $1 AND (owner IS NULL OR expires_at < now()) RETURNING fence";
const PG_LEASE_RELEASE: &str = "UPDATE lockcheck_leases SET owner = NULL, expires_at = NULL \
     WHERE name = $1 AND owner = $2 AND fence = $3";
const PG_LEASE_RENEW: &str = "UPDATE lockcheck_leases \
     SET expires_at = now() + $4::bigint * interval '1 millisecond' \
     WHERE name = $1 AND owner = $2 AND fence = $3 AND expires_at >= now()";

fn key_halves(key: i64) -> (u32, u32) {
    let key = key as u64;
    ((key >> 32) as u32, key as u32)
}

/// A grant's token as the fence column holds it (-1, which no row has, for
/// a grant without one).
fn sql_fence(fence: Option<u64>) -> i64 {
    fence.and_then(|fence| i64::try_from(fence).ok()).unwrap_or(-1)
}

/// The `application_name` of the PostgreSQL sessions that hold locks.
pub const LOCK_SESSION_NAME: &str = "lockcheck-lock";

/// The server ends every lock session of this test (`pg_terminate_backend`
/// on PostgreSQL, `KILL CONNECTION` on MySQL/MariaDB): the conn-kill fault.
/// Session-bound locks are freed while their clients still believe they
/// hold them. Returns how many sessions were ended.
pub async fn kill_lock_sessions(url: &str, mysql: bool) -> Result<u64, RealError> {
    let failed = |reason: String| RealError::Setup { what: "conn-kill", reason };
    if mysql {
        let opts = mysql_async::Opts::from_url(url).map_err(|error| failed(error.to_string()))?;
        let mut conn =
            mysql_async::Conn::new(opts).await.map_err(|error| failed(error.to_string()))?;
        let ids: Vec<u64> = conn
            .query(
                "SELECT ID FROM information_schema.PROCESSLIST \
                 WHERE ID <> CONNECTION_ID() AND DB = DATABASE() AND COMMAND <> 'Daemon'",
            )
            .await
            .map_err(|error| failed(error.to_string()))?;
        let mut killed = 0;
        for id in ids {
            // Gone already, or not ours to kill: either way not a lock session now.
            if conn.query_drop(format!("KILL CONNECTION {id}")).await.is_ok() {
                killed += 1;
            }
        }
        let _ = conn.disconnect().await;
        return Ok(killed);
    }
    let (client, connection) =
        tokio_postgres::connect(url, NoTls).await.map_err(|error| failed(error.to_string()))?;
    let connection = tokio::spawn(async move {
        let _ = connection.await;
    });
    let rows = client
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE application_name = $1 AND pid <> pg_backend_pid()",
            &[&LOCK_SESSION_NAME],
        )
        .await
        .map_err(|error| failed(error.to_string()));
    drop(client);
    let _ = connection.await;
    Ok(rows?.len() as u64)
}

impl PgSession {
    async fn open(url: &str) -> Result<PgSession, tokio_postgres::Error> {
        let mut config: tokio_postgres::Config = url.parse()?;
        // So that the conn-kill nemesis finds the lock sessions, and only them.
        config.application_name(LOCK_SESSION_NAME);
        let (client, connection) = config.connect(NoTls).await?;
        // The connection's own error surfaces to the pending and next queries.
        let connection = tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(PgSession { client, connection, statements: HashMap::new(), transaction_holds: None })
    }

    /// `sql`, prepared once per session.
    async fn statement(&mut self, sql: &'static str) -> Result<Statement, Failure> {
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.client.prepare(sql).await?;
        self.statements.insert(sql, statement.clone());
        Ok(statement)
    }

    async fn execute(
        &mut self,
        sql: &'static str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<u64, Failure> {
        let statement = self.statement(sql).await?;
        Ok(self.client.execute(&statement, params).await?)
    }

    /// The single boolean that `sql` returns for `params`, as one unnamed
    /// statement with its parameters' types: no prepared statement stays
    /// on the server connection, so it works through a pooler in
    /// transaction mode, where the next statement may run on another one.
    async fn typed_boolean(
        &mut self,
        sql: &'static str,
        params: &[(&(dyn tokio_postgres::types::ToSql + Sync), Type)],
    ) -> Result<bool, Failure> {
        Ok(self.client.query_typed_one(sql, params).await?.try_get(0)?)
    }

    async fn holds(&mut self, key: &str) -> Step<()> {
        let (high, low) = key_halves(advisory_key(key));
        if self.typed_boolean(PG_HOLDS, &[(&high, Type::OID), (&low, Type::OID)]).await? {
            Ok(Outcome::Ok(()))
        } else {
            not_held()
        }
    }

    async fn acquire(
        &mut self,
        recipe: SqlRecipe,
        key: &str,
        ttl_ms: u64,
        owner: &str,
    ) -> Step<Grant> {
        match recipe {
            SqlRecipe::PostgresAdvisoryXact => self.acquire_xact(key).await,
            SqlRecipe::PostgresLease => {
                lease_table::acquire(self, key, owner.to_string(), ttl_ms, None).await
            }
            _ => {
                match self.typed_boolean(PG_TRY_LOCK, &[(&advisory_key(key), Type::INT8)]).await? {
                    true => Ok(Outcome::Ok(Grant::default())),
                    false => busy(),
                }
            }
        }
    }

    /// `pg_advisory_lock(k)` waiting at most `wait_ms` (the session's
    /// `lock_timeout`), in one round trip: granted, or `timeout` (55P03),
    /// or `deadlock` with the server's words when its deadlock detector
    /// (after `deadlock_timeout`, a second by default) chose this wait to
    /// end (40P01). Other recipes ask again until the wait is over.
    async fn acquire_waiting(&mut self, key: &str, wait_ms: u64) -> Step<Grant> {
        let sql = format!(
            "SET lock_timeout = {}; SELECT pg_advisory_lock({})",
            wait_ms.max(1),
            advisory_key(key)
        );
        match self.client.simple_query(&sql).await {
            Ok(_) => Ok(Outcome::Ok(Grant::default())),
            Err(error) => match error.as_db_error() {
                Some(db) if *db.code() == tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE => {
                    Ok(Outcome::Fail("timeout".into()))
                }
                Some(db)
                    if *db.code() == tokio_postgres::error::SqlState::T_R_DEADLOCK_DETECTED =>
                {
                    let detail = db.detail().map(|detail| format!(" {detail}")).unwrap_or_default();
                    Ok(Outcome::Fail(format!(
                        "deadlock: ERROR {}: {}.{}",
                        db.code().code(),
                        db.message(),
                        detail.replace('\n', " ")
                    )))
                }
                _ => Err(error.into()),
            },
        }
    }

    /// Opens the transaction and tries the lock in one round trip; the
    /// transaction stays open while the lock is held, and is rolled back at
    /// once if the lock is busy.
    async fn acquire_xact(&mut self, key: &str) -> Step<Grant> {
        if self.transaction_holds.is_some() {
            // One transaction, one lock: the workload never asks for two.
            return busy();
        }
        let sql = format!("BEGIN; SELECT pg_try_advisory_xact_lock({})", advisory_key(key));
        let messages = match self.client.simple_query(&sql).await {
            Ok(messages) => messages,
            Err(error) => {
                // A statement refused inside the transaction leaves it
                // aborted: end it, or every later BEGIN here fails too.
                let _ = self.client.batch_execute("ROLLBACK").await;
                return Err(error.into());
            }
        };
        let granted = messages.iter().any(
            |message| matches!(message, SimpleQueryMessage::Row(row) if row.get(0) == Some("t")),
        );
        if granted {
            self.transaction_holds = Some(key.to_string());
            return Ok(Outcome::Ok(Grant::default()));
        }
        self.client.batch_execute("ROLLBACK").await?;
        busy()
    }

    async fn release(&mut self, recipe: SqlRecipe, key: &str, grant: &Grant) -> Step<()> {
        match recipe {
            SqlRecipe::PostgresAdvisoryXact => {
                if self.transaction_holds.as_deref() != Some(key) {
                    return not_held();
                }
                // Whatever COMMIT answers, the transaction is over: even a
                // refused COMMIT rolls back, freeing the lock.
                self.transaction_holds = None;
                self.client.batch_execute("COMMIT").await?;
                Ok(Outcome::Ok(()))
            }
            SqlRecipe::PostgresLease => lease_table::release(self, key, grant).await,
            _ => match self.typed_boolean(PG_UNLOCK, &[(&advisory_key(key), Type::INT8)]).await? {
                true => Ok(Outcome::Ok(())),
                false => not_held(),
            },
        }
    }

    /// A lease's renewal; an advisory lock has no lease, so its renewal
    /// checks that this session still holds it, which a cut connection fails.
    async fn renew(
        &mut self,
        recipe: SqlRecipe,
        key: &str,
        grant: &Grant,
        ttl_ms: u64,
    ) -> Step<()> {
        if recipe != SqlRecipe::PostgresLease {
            return self.holds(key).await;
        }
        lease_table::renew(self, key, grant, ttl_ms).await
    }
}

impl LeaseStore for PgSession {
    type Error = Failure;

    async fn take(
        &mut self,
        name: &str,
        owner: &str,
        ttl_ms: u64,
        _now_ms: Option<i64>,
    ) -> Result<Taken, Failure> {
        let ttl_ms = i64::try_from(ttl_ms).unwrap_or(i64::MAX);
        self.execute(PG_LEASE_INSERT, &[&name]).await?;
        let statement = self.statement(PG_LEASE_ACQUIRE).await?;
        match self.client.query_opt(&statement, &[&name, &owner, &ttl_ms]).await? {
            Some(row) => {
                let fence: i64 = row.try_get(0)?;
                Ok(Taken::Granted(u64::try_from(fence).ok()))
            }
            None => Ok(Taken::Held),
        }
    }

    async fn give_back(
        &mut self,
        name: &str,
        owner: &str,
        fence: Option<u64>,
    ) -> Result<bool, Failure> {
        Ok(self.execute(PG_LEASE_RELEASE, &[&name, &owner, &sql_fence(fence)]).await? == 1)
    }

    async fn extend(
        &mut self,
        name: &str,
        owner: &str,
        fence: Option<u64>,
        ttl_ms: u64,
    ) -> Result<bool, Failure> {
        let ttl_ms = i64::try_from(ttl_ms).unwrap_or(i64::MAX);
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
            [&name, &owner, &sql_fence(fence), &ttl_ms];
        Ok(self.execute(PG_LEASE_RENEW, &params).await? == 1)
    }
}

const MY_GET_LOCK: &str = "SELECT GET_LOCK(?, 0)";
const MY_GET_LOCK_WAITING: &str = "SELECT GET_LOCK(?, ?)";
/// The server found a deadlock among lock waits: MariaDB's `ER_LOCK_DEADLOCK`
/// for `GET_LOCK`, MySQL's `ER_USER_LOCK_DEADLOCK`.
const MY_DEADLOCK_CODES: [u16; 2] = [1213, 3058];
const MY_RELEASE_LOCK: &str = "SELECT RELEASE_LOCK(?)";
const MY_HOLDS: &str = "SELECT IS_USED_LOCK(?) = CONNECTION_ID()";
const MY_LEASE_INSERT: &str = "INSERT IGNORE INTO lockcheck_leases (name) VALUES (?)";
const MY_LEASE_ACQUIRE: &str = "UPDATE lockcheck_leases \
     SET owner = ?, expires_at = NOW(3) + INTERVAL ? MICROSECOND, fence = LAST_INSERT_ID(fence + 1) \
     WHERE name = ? AND (owner IS NULL OR expires_at < NOW(3))";
const MY_LEASE_RELEASE: &str = "UPDATE lockcheck_leases SET owner = NULL, expires_at = NULL \
     WHERE name = ? AND owner = ? AND fence = ?";
const MY_LEASE_RENEW: &str = "UPDATE lockcheck_leases \
     SET expires_at = NOW(3) + INTERVAL ? MICROSECOND \
     WHERE name = ? AND owner = ? AND fence = ? AND expires_at >= NOW(3)";

/// One MySQL/MariaDB connection.
struct MySession {
    conn: mysql_async::Conn,
}

fn micros(ttl_ms: u64) -> u64 {
    ttl_ms.saturating_mul(1000)
}

impl MySession {
    async fn open(url: &str) -> Result<MySession, String> {
        let opts = mysql_async::Opts::from_url(url).map_err(|error| error.to_string())?;
        // Found rows, not changed rows: a renewal that sets the same expiry
        // (within one millisecond of the last) still counts as held.
        let opts = mysql_async::OptsBuilder::from_opts(opts).client_found_rows(true);
        let conn = mysql_async::Conn::new(opts).await.map_err(|error| error.to_string())?;
        Ok(MySession { conn })
    }

    async fn number(&mut self, sql: &'static str, name: &str) -> Result<Option<i64>, Failure> {
        let row: Option<Option<i64>> = self.conn.exec_first(sql, (name,)).await?;
        Ok(row.flatten())
    }

    async fn acquire(
        &mut self,
        recipe: SqlRecipe,
        key: &str,
        ttl_ms: u64,
        owner: &str,
    ) -> Step<Grant> {
        if recipe == SqlRecipe::MysqlGetLock {
            // 1: held; 0: busy; NULL: an error (the session was killed, say).
            return match self.number(MY_GET_LOCK, &mysql_lock_name(key)).await? {
                Some(1) => Ok(Outcome::Ok(Grant::default())),
                Some(_) => busy(),
                None => Err(Failure::Refused("get-lock-null".into())),
            };
        }
        lease_table::acquire(self, key, owner.to_string(), ttl_ms, None).await
    }

    /// `GET_LOCK(name, wait)`, waiting at most `wait_ms`: 1 granted, 0
    /// `timeout`; a deadlock the server found among the waits refuses it
    /// at once (`deadlock`, with the server's words).
    async fn acquire_waiting(&mut self, key: &str, wait_ms: u64) -> Step<Grant> {
        let wait_s = wait_ms.max(1) as f64 / 1000.0;
        let row: Result<Option<Option<i64>>, mysql_async::Error> =
            self.conn.exec_first(MY_GET_LOCK_WAITING, (mysql_lock_name(key), wait_s)).await;
        match row {
            Ok(row) => match row.flatten() {
                Some(1) => Ok(Outcome::Ok(Grant::default())),
                Some(_) => Ok(Outcome::Fail("timeout".into())),
                None => Err(Failure::Refused("get-lock-null".into())),
            },
            Err(mysql_async::Error::Server(error)) if MY_DEADLOCK_CODES.contains(&error.code) => {
                Ok(Outcome::Fail(format!(
                    "deadlock: ERROR {} ({}): {}",
                    error.code, error.state, error.message
                )))
            }
            Err(error) => Err(error.into()),
        }
    }

    async fn release(&mut self, recipe: SqlRecipe, key: &str, grant: &Grant) -> Step<()> {
        if recipe == SqlRecipe::MysqlGetLock {
            // 1: released; 0: someone else's; NULL: nobody's.
            return match self.number(MY_RELEASE_LOCK, &mysql_lock_name(key)).await? {
                Some(1) => Ok(Outcome::Ok(())),
                _ => not_held(),
            };
        }
        lease_table::release(self, key, grant).await
    }

    /// A lease's renewal; `GET_LOCK` has no lease, so its renewal checks
    /// that this session still holds the lock.
    async fn renew(
        &mut self,
        recipe: SqlRecipe,
        key: &str,
        grant: &Grant,
        ttl_ms: u64,
    ) -> Step<()> {
        if recipe == SqlRecipe::MysqlGetLock {
            return match self.number(MY_HOLDS, &mysql_lock_name(key)).await? {
                Some(1) => Ok(Outcome::Ok(())),
                _ => not_held(),
            };
        }
        lease_table::renew(self, key, grant, ttl_ms).await
    }
}

impl LeaseStore for MySession {
    type Error = Failure;

    async fn take(
        &mut self,
        name: &str,
        owner: &str,
        ttl_ms: u64,
        _now_ms: Option<i64>,
    ) -> Result<Taken, Failure> {
        self.conn.exec_drop(MY_LEASE_INSERT, (name,)).await?;
        self.conn.exec_drop(MY_LEASE_ACQUIRE, (owner, micros(ttl_ms), name)).await?;
        if self.conn.affected_rows() != 1 {
            return Ok(Taken::Held);
        }
        // The token is the insert id of this very statement, on this very
        // connection: the OK packet carries it; ask again if it did not.
        let fence = match self.conn.last_insert_id() {
            Some(fence) => Some(fence),
            None => self.conn.query_first::<u64, _>("SELECT LAST_INSERT_ID()").await?,
        };
        match fence {
            Some(fence) => Ok(Taken::Granted(Some(fence))),
            // Granted, but the token is unknown: give up the session.
            None => Err(Failure::Lost("fence-lost".into())),
        }
    }

    async fn give_back(
        &mut self,
        name: &str,
        owner: &str,
        fence: Option<u64>,
    ) -> Result<bool, Failure> {
        self.conn.exec_drop(MY_LEASE_RELEASE, (name, owner, sql_fence(fence))).await?;
        Ok(self.conn.affected_rows() == 1)
    }

    async fn extend(
        &mut self,
        name: &str,
        owner: &str,
        fence: Option<u64>,
        ttl_ms: u64,
    ) -> Result<bool, Failure> {
        let params = (micros(ttl_ms), name, owner, sql_fence(fence));
        self.conn.exec_drop(MY_LEASE_RENEW, params).await?;
        Ok(self.conn.affected_rows() == 1)
    }
}

/// A PostgreSQL session is boxed: it is far larger than a MySQL one.
enum Session {
    Postgres(Box<PgSession>),
    Mysql(MySession),
}

impl Session {
    async fn open(recipe: SqlRecipe, url: &str) -> Result<Session, String> {
        if recipe.is_mysql() {
            MySession::open(url).await.map(Session::Mysql)
        } else {
            PgSession::open(url)
                .await
                .map(|session| Session::Postgres(Box::new(session)))
                .map_err(|error| error.to_string())
        }
    }

    /// The server said the connection is gone (PostgreSQL reports it).
    fn is_closed(&self) -> bool {
        match self {
            Session::Postgres(session) => session.client.is_closed(),
            Session::Mysql(session) => session.conn.is_disconnected(),
        }
    }
}

fn connect_error(recipe: SqlRecipe, url: &str, reason: impl ToString) -> RealError {
    RealError::Connect { what: recipe.server(), url: url.to_string(), reason: reason.to_string() }
}

/// Runs `work` within `SETUP_TIMEOUT`, a timeout being a connect error.
async fn in_setup_time<T>(
    recipe: SqlRecipe,
    url: &str,
    work: impl Future<Output = Result<T, RealError>>,
) -> Result<T, RealError> {
    tokio::time::timeout(SETUP_TIMEOUT, work).await.unwrap_or_else(|_| {
        Err(connect_error(recipe, url, format!("no answer within {SETUP_TIMEOUT:?}")))
    })
}

/// Creates the lease table on PostgreSQL (the columns of docs/guide.md#postgresql),
/// under an advisory lock so that concurrent preparers do not collide.
async fn create_pg_leases(session: &PgSession) -> Result<(), tokio_postgres::Error> {
    session
        .client
        .batch_execute(&format!(
            "BEGIN; SELECT pg_advisory_xact_lock({CREATE_LOCK_KEY}); \
             CREATE TABLE IF NOT EXISTS {LEASES} (name VARCHAR(100) PRIMARY KEY, \
             owner VARCHAR(64), expires_at TIMESTAMPTZ, fence BIGINT NOT NULL DEFAULT 0); COMMIT;"
        ))
        .await
}

/// Creates the lease table on MySQL/MariaDB. `NULL DEFAULT NULL` matters:
/// without it an old server makes the first `TIMESTAMP` column
/// `ON UPDATE CURRENT_TIMESTAMP`, which would move the expiry on every update.
async fn create_my_leases(session: &mut MySession) -> Result<(), mysql_async::Error> {
    session
        .conn
        .query_drop(format!(
            "CREATE TABLE IF NOT EXISTS {LEASES} (name VARCHAR(100) PRIMARY KEY, \
             owner VARCHAR(64), expires_at TIMESTAMP(3) NULL DEFAULT NULL, \
             fence BIGINT NOT NULL DEFAULT 0)"
        ))
        .await
}

/// One logical client of a SQL lock: its lock session and its connection to
/// the protected resources.
pub struct SqlClient {
    recipe: SqlRecipe,
    url: String,
    name: String,
    deadline: Duration,
    grants: u64,
    /// `None` when it could not be opened: the next operation tries again.
    session: Option<Session>,
    /// The last operation's outcome was unknown: the session is given up at
    /// the next `reset` (or use). It stays open until then, so that its
    /// locks outlive the operation's `info`, as a real client's would.
    broken: bool,
    /// Where a pause strikes the client in flight.
    stall: Stall,
}

impl std::fmt::Debug for SqlClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlClient")
            .field("recipe", &self.recipe)
            .field("url", &self.url)
            .field("name", &self.name)
            .field("connected", &self.session.is_some())
            .field("broken", &self.broken)
            .finish()
    }
}

impl SqlClient {
    /// Creates the recipe's lease table if it has one (idempotent, safe from
    /// several processes at once); for the others, checks the server answers.
    /// Call it once per test, before any client connects.
    pub async fn prepare(url: &str, recipe: SqlRecipe) -> Result<(), RealError> {
        let setup = |reason: String| RealError::Setup { what: "the lease table", reason };
        let work = async {
            let session = Session::open(recipe, url)
                .await
                .map_err(|reason| connect_error(recipe, url, reason))?;
            match (recipe, session) {
                (SqlRecipe::PostgresLease, Session::Postgres(session)) => {
                    create_pg_leases(&session).await.map_err(|error| setup(error.to_string()))
                }
                (SqlRecipe::MysqlLease, Session::Mysql(mut session)) => {
                    create_my_leases(&mut session).await.map_err(|error| setup(error.to_string()))
                }
                _ => Ok(()),
            }
        };
        in_setup_time(recipe, url, work).await
    }

    /// Opens the lock session at `url`.
    pub async fn connect(
        url: &str,
        recipe: SqlRecipe,
        config: &ClientConfig,
    ) -> Result<SqlClient, RealError> {
        let session = in_setup_time(recipe, url, async {
            Session::open(recipe, url).await.map_err(|reason| connect_error(recipe, url, reason))
        })
        .await?;
        Ok(SqlClient {
            recipe,
            url: url.to_string(),
            name: config.name.clone(),
            deadline: config.deadline,
            grants: 0,
            session: Some(session),
            broken: false,
            stall: Stall::default(),
        })
    }

    /// Stalls at `stall`'s point in flight (the statements' reply has
    /// come, the recipe has not read it) when a pause asks for it there.
    pub fn stalling_at(mut self, stall: Stall) -> SqlClient {
        self.stall = stall;
        self
    }

    pub fn recipe(&self) -> SqlRecipe {
        self.recipe
    }

    /// A lease owner unique to this grant: `<client>:<n>`.
    fn next_owner(&mut self) -> String {
        self.grants += 1;
        format!("{}:{}", self.name, self.grants)
    }

    /// The lock session, replaced first if it was given up; `None` if no
    /// session can be opened by `until` (nothing was sent, so the operation
    /// fails `unavailable`).
    async fn session(&mut self, until: Instant) -> Option<&mut Session> {
        if self.broken || self.session.as_ref().is_some_and(Session::is_closed) {
            self.session = None;
            self.broken = false;
        }
        if self.session.is_none() {
            if let Ok(Ok(session)) = timeout_at(until, Session::open(self.recipe, &self.url)).await
            {
                self.session = Some(session);
            }
        }
        self.session.as_mut()
    }

    /// The outcome of an operation's statements run until its deadline; an
    /// unknown one gives up the session. A pause asked for in flight
    /// strikes first: the reply has come, the recipe reads it after the
    /// stall (the client's own, so no deadline counts it).
    async fn settle<T>(
        &mut self,
        result: Result<Step<T>, tokio::time::error::Elapsed>,
    ) -> Outcome<T> {
        self.stall.strike(StallPoint::InFlight).await;
        match result {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(Failure::Refused(reason))) => Outcome::Fail(reason),
            Ok(Err(Failure::Lost(reason))) => {
                self.broken = true;
                Outcome::Info(reason)
            }
            Err(_) => {
                self.broken = true;
                Outcome::Info("timeout".into())
            }
        }
    }
}

impl LockClient for SqlClient {
    async fn acquire(&mut self, key: &str, ttl_ms: u64) -> Outcome<Grant> {
        let until = Instant::now() + self.deadline;
        let (recipe, owner) = (self.recipe, self.next_owner());
        let result = match self.session(until).await {
            None => return Outcome::Fail("unavailable".into()),
            Some(Session::Postgres(session)) => {
                timeout_at(until, session.acquire(recipe, key, ttl_ms, &owner)).await
            }
            Some(Session::Mysql(session)) => {
                timeout_at(until, session.acquire(recipe, key, ttl_ms, &owner)).await
            }
        };
        self.settle(result).await
    }

    /// A session lock waits on its server, which sees a deadlock among
    /// the waits; the other recipes ask again until the wait is over.
    async fn acquire_waiting(&mut self, key: &str, ttl_ms: u64, wait_ms: u64) -> Outcome<Grant> {
        if !matches!(self.recipe, SqlRecipe::PostgresAdvisory | SqlRecipe::MysqlGetLock) {
            return lockcheck_workloads::poll_until_granted(self, key, ttl_ms, wait_ms).await;
        }
        let until = Instant::now() + std::time::Duration::from_millis(wait_ms) + self.deadline;
        let result = match self.session(until).await {
            None => return Outcome::Fail("unavailable".into()),
            Some(Session::Postgres(session)) => {
                timeout_at(until, session.acquire_waiting(key, wait_ms)).await
            }
            Some(Session::Mysql(session)) => {
                timeout_at(until, session.acquire_waiting(key, wait_ms)).await
            }
        };
        self.settle(result).await
    }

    async fn release(&mut self, key: &str, grant: &Grant) -> Outcome<()> {
        let until = Instant::now() + self.deadline;
        let recipe = self.recipe;
        let result = match self.session(until).await {
            None => return Outcome::Fail("unavailable".into()),
            Some(Session::Postgres(session)) => {
                timeout_at(until, session.release(recipe, key, grant)).await
            }
            Some(Session::Mysql(session)) => {
                timeout_at(until, session.release(recipe, key, grant)).await
            }
        };
        self.settle(result).await
    }

    async fn renew(&mut self, key: &str, grant: &Grant, ttl_ms: u64) -> Outcome<()> {
        let until = Instant::now() + self.deadline;
        let recipe = self.recipe;
        let result = match self.session(until).await {
            None => return Outcome::Fail("unavailable".into()),
            Some(Session::Postgres(session)) => {
                timeout_at(until, session.renew(recipe, key, grant, ttl_ms)).await
            }
            Some(Session::Mysql(session)) => {
                timeout_at(until, session.renew(recipe, key, grant, ttl_ms)).await
            }
        };
        self.settle(result).await
    }

    /// Gives up the lock session (its socket closes; the server frees its
    /// session locks when it notices) and opens a new one, within the
    /// deadline; if that fails, the next operation tries again.
    async fn reset(&mut self) {
        self.session = None;
        self.broken = false;
        let until = Instant::now() + self.deadline;
        if let Ok(Ok(session)) = timeout_at(until, Session::open(self.recipe, &self.url)).await {
            self.session = Some(session);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_the_reference_vectors() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn advisory_keys_are_stable_and_distinct() {
        assert_eq!(advisory_key("lock-0"), fnv1a(b"lockcheck:lock-0") as i64);
        assert_ne!(advisory_key("lock-0"), advisory_key("lock-1"));
    }

    #[test]
    fn key_halves_are_how_pg_locks_shows_a_bigint_key() {
        assert_eq!(key_halves(-1), (u32::MAX, u32::MAX));
        assert_eq!(key_halves(0x0000_0001_0000_0002), (1, 2));
    }

    #[test]
    fn long_names_are_hashed_to_fit_get_lock() {
        assert_eq!(mysql_lock_name("report"), "lockcheck:report");
        let long = "x".repeat(80);
        let name = mysql_lock_name(&long);
        assert_eq!(name.len(), 26);
        assert_eq!(name, mysql_lock_name(&long));
    }

    #[test]
    fn recipes_round_trip_their_names() {
        for recipe in SqlRecipe::ALL {
            assert_eq!(SqlRecipe::parse(recipe.name()), Some(recipe));
        }
    }
}
