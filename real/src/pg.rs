//! What every PostgreSQL client of the real world shares (the resources'
//! table, the payments table, the jobs queue, the provider's keys): opening
//! a connection, the bound on setting up, and how a failed query reads.

use std::future::Future;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_postgres::{Client, NoTls};

use lockcheck_workloads::Outcome;

use crate::RealError;

/// How long setting up (a table made or emptied, the first connection)
/// may take: longer than an operation's deadline, since nothing is recorded
/// yet and a cold server may be slow to answer.
pub(crate) const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// Opens a connection and spawns the task that drives it. The connection's
/// own error (a reset socket) surfaces to the client's pending and next
/// queries; nothing else needs it.
pub(crate) async fn open(url: &str) -> Result<(Client, JoinHandle<()>), tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await?;
    let connection = tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok((client, connection))
}

/// A server at `url` that could not be reached or set up, and why.
pub(crate) fn connect_error(url: &str, reason: impl ToString) -> RealError {
    RealError::Connect { what: "PostgreSQL", url: url.to_string(), reason: reason.to_string() }
}

/// Runs `work` within [`SETUP_TIMEOUT`]; past it, the error `late` makes
/// of the reason.
pub(crate) async fn within_setup<T>(
    work: impl Future<Output = Result<T, RealError>>,
    late: impl FnOnce(String) -> RealError,
) -> Result<T, RealError> {
    tokio::time::timeout(SETUP_TIMEOUT, work)
        .await
        .unwrap_or_else(|_| Err(late(format!("no answer within {SETUP_TIMEOUT:?}"))))
}

/// Why a query failed, as an outcome, and whether the session must be
/// opened anew: an answer from the server (a SQL error) means the
/// single-statement transaction did not commit; anything else (a reset
/// connection) leaves it unknown.
pub(crate) fn query_failure<T>(error: &tokio_postgres::Error) -> (Outcome<T>, bool) {
    match error.as_db_error() {
        Some(db) => (Outcome::Fail(format!("db-error:{}", db.code().code())), false),
        None => (Outcome::Info("conn-lost".into()), true),
    }
}
