//! The payments table against the machine's PostgreSQL (at
//! `LOCKCHECK_POSTGRES_URL`, default postgres://postgres@127.0.0.1:5432/test):
//! each mode answers as the pure ledger the simulator serves does.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use lockcheck_real::LedgerTable;
use lockcheck_workloads::payments::{Ledger, LedgerMode};
use lockcheck_workloads::Outcome;

fn postgres_url() -> String {
    std::env::var("LOCKCHECK_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string())
}

/// A table of this test's own, so that concurrent tests never share rows.
fn table(mode: LedgerMode) -> LedgerTable {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    LedgerTable {
        url: postgres_url(),
        table: format!("lockcheck_ledger_test_{}_{n}", std::process::id()),
        mode,
    }
}

/// The same charges, in order, against the real table and the pure
/// ledger: the same answers, and a row for the same order where the pure
/// ledger names the same row. (A sequence's values are not the pure
/// ledger's counts: PostgreSQL spends one on an insert that conflicts.)
async fn same_as_the_pure_ledger(mode: LedgerMode, charges: &[(&str, Option<u64>)]) {
    let table = table(mode);
    table.prepare().await.expect("the machine's PostgreSQL takes the table");
    let mut session = table.session(Duration::from_secs(10));
    let mut pure = Ledger::new(mode);
    // Each pure row's real row.
    let mut rows = std::collections::BTreeMap::new();
    for &(order, fence) in charges {
        let real = session.charge(order, fence).await;
        match (pure.charge(order, fence), real) {
            (Ok(pure_row), Outcome::Ok(real_row)) => {
                let known = rows.entry(pure_row.clone()).or_insert_with(|| real_row.clone());
                assert_eq!(*known, real_row, "{mode:?}: {order} with {fence:?}: {pure_row}");
            }
            (Err(reason), real) => {
                assert_eq!(real, Outcome::Fail(reason.to_string()), "{mode:?}: {order}");
            }
            (Ok(row), real) => panic!("{mode:?}: {order} with {fence:?}: {real:?}, not {row}"),
        }
    }
    // Distinct pure rows are distinct real rows.
    let real: std::collections::BTreeSet<_> = rows.values().collect();
    assert_eq!(real.len(), rows.len(), "{rows:?}");
}

#[tokio::test]
async fn a_unique_table_takes_one_charge_per_order_and_reads_23505_as_exists() {
    let charges = [("order-1", None), ("order-1", None), ("order-2", None), ("order-1", None)];
    same_as_the_pure_ledger(LedgerMode::Unique, &charges).await;
}

#[tokio::test]
async fn a_conditional_table_moves_an_order_from_pending_to_paid_once() {
    let charges = [("order-1", None), ("order-1", None), ("order-2", Some(3))];
    let table = table(LedgerMode::Conditional);
    table.prepare().await.expect("the machine's PostgreSQL takes the table");
    let mut session = table.session(Duration::from_secs(10));
    let mut answers = Vec::new();
    for (order, fence) in charges {
        answers.push(session.charge(order, fence).await);
    }
    // The pending row takes an id of its own before it is paid, so ids
    // are not the pure ledger's: only the answers' kinds are.
    assert!(matches!(answers[0], Outcome::Ok(_)), "{answers:?}");
    assert_eq!(answers[1], Outcome::Fail("not-pending".into()));
    assert!(matches!(answers[2], Outcome::Ok(_)), "{answers:?}");
}

#[tokio::test]
async fn a_fenced_table_keeps_one_row_and_refuses_an_older_token() {
    let charges = [
        ("order-1", Some(5)),
        ("order-1", Some(6)),
        ("order-1", Some(5)),
        ("order-2", Some(1)),
        ("order-1", None),
        ("order-1", Some(6)),
    ];
    same_as_the_pure_ledger(LedgerMode::Fenced, &charges).await;
}

#[tokio::test]
async fn an_append_table_takes_every_charge_as_a_row() {
    let charges = [("order-1", None), ("order-1", None), ("order-2", None)];
    same_as_the_pure_ledger(LedgerMode::Append, &charges).await;
}

#[tokio::test]
async fn an_unreachable_database_is_unavailable_not_unknown() {
    let table = LedgerTable {
        url: "postgres://postgres@127.0.0.1:1/test".to_string(),
        table: "lockcheck_ledger_unreachable".to_string(),
        mode: LedgerMode::Unique,
    };
    assert!(table.prepare().await.is_err());
    let mut session = table.session(Duration::from_secs(2));
    assert_eq!(session.charge("order-1", None).await, Outcome::Fail("unavailable".into()));
}
