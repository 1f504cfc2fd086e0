//! The protected side: what a holder does with its lock is not the lock
//! client's business. A [`ResourceStore`] receives the holder's writes
//! (with its token, when it has one) and answers reads; each world builds
//! one per logical client beside its lock client, and [`crate::run_client`]
//! drives both. The fenced table, a plain store and object storage are each
//! one implementation; [`StorageKind`] names the one a run uses.

use crate::{Outcome, Workload};

/// The protected resources, which the history records writes to and reads
/// of. Every call ends within the implementation's deadline, as `Info` if
/// its outcome is unknown, never hangs.
#[allow(async_fn_in_trait)]
pub trait ResourceStore {
    /// Writes `data`, sending the token when there is one; a fenced store
    /// refuses a token older than one it accepted (`Fail("stale-fence")`).
    async fn write(&mut self, resource: &str, fence: Option<u64>, data: &str) -> Outcome<()>;
    /// The resource's token and data (`(None, None)` if never written).
    async fn read(&mut self, resource: &str) -> Outcome<(Option<u64>, Option<String>)>;
    /// Starts a new session after an `Info`, as the lock client does.
    async fn reset(&mut self) {}
    /// As [`ResourceStore::write`], and the version of the resource the
    /// write made, for a store that updates a resource by reading it and
    /// writing it back (an S3 object); `None` for the others. The history
    /// records it with the write's `ok` (histories/README.md).
    async fn write_versioned(
        &mut self,
        resource: &str,
        fence: Option<u64>,
        data: &str,
    ) -> Outcome<Option<u64>> {
        self.write(resource, fence, data).await.map(|()| None)
    }
}

/// Which storage holds the protected resources (`--storage`), in both
/// worlds. Each S3 kind keeps one object per resource (docs/storage.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum StorageKind {
    /// A table (PostgreSQL's, or the simulated `storage` host): a write
    /// lands unless, fenced, its token is below one already accepted.
    #[default]
    Table,
    /// Read-modify-write with a plain PUT: the last writer wins, so a
    /// stalled holder's write lands, and two updates at once lose one.
    S3Put,
    /// Read-modify-write with a conditional PUT (`If-Match` on the ETag
    /// read): a write in between refuses it (412), and the update reads
    /// again and retries, a bounded number of times.
    S3Cas,
    /// Write-once effects: a write creates its object only if it is absent
    /// (`If-None-Match: *`); a second one fails `exists`.
    S3Create,
}

impl StorageKind {
    pub const ALL: [StorageKind; 4] =
        [StorageKind::Table, StorageKind::S3Put, StorageKind::S3Cas, StorageKind::S3Create];

    /// Its `--storage` name.
    pub fn name(self) -> &'static str {
        match self {
            StorageKind::Table => "table",
            StorageKind::S3Put => "s3-put",
            StorageKind::S3Cas => "s3-cas",
            StorageKind::S3Create => "s3-create",
        }
    }

    pub fn parse(name: &str) -> Option<StorageKind> {
        StorageKind::ALL.into_iter().find(|kind| kind.name() == name)
    }

    /// What `--storage` says of a name it does not know.
    pub fn unknown(name: &str) -> String {
        let names: Vec<&str> = StorageKind::ALL.iter().map(|kind| kind.name()).collect();
        format!("unknown storage {name:?}: use {}", names.join(", "))
    }

    /// An S3 object per resource.
    pub fn is_s3(self) -> bool {
        self != StorageKind::Table
    }

    /// Whether a write sends the holder's token: only the table takes one
    /// (S3 has no place to compare it).
    pub fn takes_fence(self) -> bool {
        self == StorageKind::Table
    }

    /// Why this storage cannot serve `workload`, if it cannot: write-once
    /// effects need units of work that every replica names alike.
    pub fn refuses(self, workload: Workload) -> Option<String> {
        if workload == Workload::Payments && self != StorageKind::Table {
            return Some(format!(
                "--workload payments keeps its charges in its own provider and payments table (--protection): --storage {} does not apply",
                self.name()
            ));
        }
        let units = matches!(workload, Workload::Cron | Workload::CronRelease);
        (self == StorageKind::S3Create && !units).then(|| {
            format!(
                "--storage s3-create writes each unit of work's effect once: it needs a workload of units (cron, cron-release), not {}",
                workload.name()
            )
        })
    }
}
