//! PgBouncer, lockcheck's own, in front of its own PostgreSQL: a session
//! advisory lock through transaction pooling is no lock at all, with no
//! fault, while session pooling and a transaction's lock hold
//! (docs/guide.md#pgbouncer). Debian's `pgbouncer` must be installed; the
//! test fails, naming the package, without it.

use std::time::Duration;

use lockcheck_real::{
    ClientConfig, ManagedServer, ServerKind, ServerOptions, SqlClient, SqlRecipe,
};
use lockcheck_workloads::{Grant, LockClient, Outcome, Pooler};

fn config(client: u32, storage: &str) -> ClientConfig {
    ClientConfig {
        name: format!("client-{client}"),
        deadline: Duration::from_secs(5),
        storage_url: storage.to_string(),
        fenced_storage: true,
    }
}

/// A private PostgreSQL and a PgBouncer pooling it as `pooler` says.
fn pooled(pooler: Pooler) -> (ManagedServer, ManagedServer) {
    let postgres = ManagedServer::start(ServerKind::Postgres)
        .unwrap_or_else(|error| panic!("this test needs PostgreSQL: {error}"));
    let options =
        ServerOptions { upstream: Some((postgres.port(), pooler)), ..ServerOptions::default() };
    let bouncer = ManagedServer::start_with(ServerKind::PgBouncer, &options)
        .unwrap_or_else(|error| panic!("this test needs pgbouncer: {error}"));
    (postgres, bouncer)
}

/// Two clients through `url` try the same lock, one after the other, the
/// first still holding it: what the second is told.
async fn second_try(url: &str, recipe: SqlRecipe, storage: &str) -> Outcome<Grant> {
    let mut first = SqlClient::connect(url, recipe, &config(0, storage)).await.expect("client 0");
    let mut second = SqlClient::connect(url, recipe, &config(1, storage)).await.expect("client 1");
    let Outcome::Ok(_) = first.acquire("pooled", 10_000).await else { panic!("the first acquire") };
    let told = second.acquire("pooled", 10_000).await;
    if let Outcome::Ok(grant) = &told {
        let _ = second.release("pooled", grant).await;
    }
    told
}

#[tokio::test]
async fn a_session_lock_through_transaction_pooling_is_granted_twice() {
    let (postgres, bouncer) = pooled(Pooler::Transaction);
    let told = second_try(&bouncer.url(), SqlRecipe::PostgresAdvisory, &postgres.url()).await;
    // The second client's statement ran on the server connection the first
    // took the lock on (the pool reuses its last), which holds it already.
    assert!(matches!(told, Outcome::Ok(_)), "a second holder was refused: {told:?}");
}

#[tokio::test]
async fn session_pooling_and_a_transactions_lock_refuse_the_second() {
    let (postgres, bouncer) = pooled(Pooler::Session);
    let told = second_try(&bouncer.url(), SqlRecipe::PostgresAdvisory, &postgres.url()).await;
    assert_eq!(told, Outcome::Fail("busy".into()));
    drop((postgres, bouncer));
    let (postgres, bouncer) = pooled(Pooler::Transaction);
    let told = second_try(&bouncer.url(), SqlRecipe::PostgresAdvisoryXact, &postgres.url()).await;
    assert_eq!(told, Outcome::Fail("busy".into()));
}
