//! What a payments run relies on to charge each order once
//! (`--protection`), and how its payments table takes a charge: plain
//! names, apart from the worker ([`crate::payments`]) so that a workload's
//! options can name them without importing the worker.

use serde::{Deserialize, Serialize};

/// What a payments run relies on to charge each order once (`--protection`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Protection {
    /// Nothing: a redelivered job is charged again.
    None,
    /// A lock per order around the charge: a worker that stalls past its
    /// lease charges after another took the lock (the double charge).
    #[default]
    Lock,
    /// A lock per order, and the charge is the order's row in a fenced
    /// payments table: a stale holder's token is refused.
    Fenced,
    /// No lock: the provider dedupes by an idempotency key (the order).
    IdempotencyKey,
    /// No lock: the charge is an insert into a payments table with
    /// `UNIQUE (order_id)`; a second insert fails and counts as done.
    Unique,
    /// No lock: the charge is the order's conditional state change,
    /// `pending → paid`; a second finds the order paid.
    Conditional,
    /// Broken: no lock, and the charge is an insert into a payments table
    /// without a constraint (every insert is a new row).
    Append,
}

impl Protection {
    pub const ALL: [Protection; 7] = [
        Protection::None,
        Protection::Lock,
        Protection::Fenced,
        Protection::IdempotencyKey,
        Protection::Unique,
        Protection::Conditional,
        Protection::Append,
    ];

    /// Its `--protection` name.
    pub fn name(self) -> &'static str {
        match self {
            Protection::None => "none",
            Protection::Lock => "lock",
            Protection::Fenced => "fenced",
            Protection::IdempotencyKey => "idempotency-key",
            Protection::Unique => "unique",
            Protection::Conditional => "conditional",
            Protection::Append => "append",
        }
    }

    pub fn parse(name: &str) -> Option<Protection> {
        Protection::ALL.into_iter().find(|protection| protection.name() == name)
    }

    /// What `--protection` says of a name it does not know.
    pub fn unknown(name: &str) -> String {
        let names: Vec<&str> = Protection::ALL.iter().map(|p| p.name()).collect();
        format!("unknown protection {name:?}: use {}", names.join(", "))
    }

    /// Whether a worker takes the order's lock around the charge.
    pub fn locks(self) -> bool {
        matches!(self, Protection::Lock | Protection::Fenced)
    }

    /// Where the charge lands: the payments table (in this mode), or the
    /// provider (`None`).
    pub fn ledger(self) -> Option<LedgerMode> {
        match self {
            Protection::Fenced => Some(LedgerMode::Fenced),
            Protection::Unique => Some(LedgerMode::Unique),
            Protection::Conditional => Some(LedgerMode::Conditional),
            Protection::Append => Some(LedgerMode::Append),
            Protection::None | Protection::Lock | Protection::IdempotencyKey => None,
        }
    }

    /// Whether a provider charge carries the order as its idempotency key.
    pub fn keyed(self) -> bool {
        self == Protection::IdempotencyKey
    }
}

/// How the payments table takes a charge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LedgerMode {
    /// An upsert of the order's row, refused (`stale-fence`) when its token
    /// is below one the row already took.
    Fenced,
    /// An insert under `UNIQUE (order_id)`: a second one fails `exists`.
    Unique,
    /// `UPDATE … SET state = 'paid' WHERE state = 'pending'`: a second
    /// finds no pending order and fails `not-pending`.
    Conditional,
    /// An insert with no constraint: every charge a new row.
    Append,
}

impl Protection {
    /// Why this protection cannot serve `workload`, if it cannot: the
    /// cron workloads have a lock, no lock, or a table, but no provider.
    pub fn refuses(self, workload: crate::Workload) -> Option<String> {
        let cron = matches!(workload, crate::Workload::Cron | crate::Workload::CronRelease);
        if cron && self == Protection::IdempotencyKey {
            return Some("--protection idempotency-key needs a payment provider: it applies to --workload payments, not the cron workloads (try unique)".to_string());
        }
        let applies = cron || workload == crate::Workload::Payments;
        (!applies && self != Protection::default()).then(|| {
            format!(
                "--protection applies to the payments and cron workloads, not {}",
                workload.name()
            )
        })
    }

    /// Whether a run of `workload` under this protection needs the
    /// payments services (the queue, the provider, the payments table).
    pub fn needs_payments(self, workload: crate::Workload) -> bool {
        match workload {
            crate::Workload::Payments => true,
            crate::Workload::Cron | crate::Workload::CronRelease => {
                matches!(self, Protection::Unique | Protection::Conditional)
            }
            _ => false,
        }
    }
}
