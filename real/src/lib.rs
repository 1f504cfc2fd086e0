//! The real world: lock backends (docs/guide.md#recipes) over real
//! connections, the protected resources' storage (a PostgreSQL table, or
//! S3 objects), the servers lockcheck starts itself, the fault executors,
//! and the driver that runs a workload's clients against them. The only
//! crate with database and etcd drivers.
//!
//! A map:
//! - A real test: a [`lockcheck_workloads::RunOptions`] in the real world
//!   (what `lockcheck check --backend <real>` asks), [`plan`] (checked once:
//!   the [`Plan`] of its backend and the faults it turns on, or why the
//!   options make no test), [`execute`] / [`execute_recorded`] (servers started, clients
//!   driven, faults struck, history checked: a [`RealRun`] or a
//!   [`RealFailure`]).
//! - The catalogue's real view: [`RealBackend`] (a backend of the one
//!   catalogue that runs against real servers: its [`LockService`], the
//!   real world's own tuning and refusals, and how its clients are built)
//!   and [`RealWorld`] (the view `lockcheck backends` lists).
//! - The truth table: [`matrix`] (typed cells); `bench --only real`:
//!   [`bench`](mod@bench).
//! - The clients, each the transport of a recipe both worlds share (in
//!   `lockcheck_workloads`) or a recipe of the real world's own:
//!   [`RedisClient`] (the single-Redis recipes and `redis-fenced`;
//!   `redis.rs`), [`RedlockClient`], [`RedisSemaphoreClient`],
//!   [`SqlClient`] (advisory locks, `GET_LOCK`, lease tables; `sql.rs`),
//!   [`EtcdClient`], [`ExecClient`] (your own program; `exec.rs`), [`RealRedis`] (a
//!   user-written recipe's Redis; `user.rs`). Each client's `connect` takes
//!   a [`ClientConfig`]; a backend's `prepare` clears a previous run's
//!   keys or makes its tables.
//! - Servers and faults: [`ManagedServer`] (the private servers lockcheck
//!   starts, libfaketime clocks; `servers/`: one file a [`ServerKind`], and
//!   `leftovers.rs` for the folders of killed runs), [`Proxy`] (the fault-injecting TCP proxy; `proxy.rs`),
//!   [`schedule`] (a run's faults, every kind from one seeded schedule,
//!   split among the executors), [`nemesis`] (server faults), [`netfault`] (partitions, slow links),
//!   [`failover`], [`drive`] (clients and client stalls; `driver.rs`), [`Storage`]
//!   (the fenced resources), [`Resources`] (the table or S3 objects, as
//!   `--storage` says; `s3.rs`), whose S3 server is moto's, a managed
//!   server like the others (`servers/moto.rs`; its bucket: `moto.rs`).
//! - The payments workload's queues: [`RealQueue`] (a PostgreSQL table
//!   taken with `SKIP LOCKED`, or RabbitMQ; `queues/`) and its
//!   [`QueueSession`]s.
//! - The payments workload's provider: [`ProviderServer`] (lockcheck's own
//!   HTTP payment provider with idempotency keys in PostgreSQL) and
//!   [`ProviderClient`]; `provider/`.

use std::time::Duration;

mod catalogue;
mod driver;
mod etcd;
mod exec;
mod ledger;
mod moto;
mod payments;
mod pg;
mod plan;
mod provider;
mod provision;
mod proxy;
mod queues;
mod redis;
mod redlock;
mod run;
mod s3;
mod semaphore;
mod servers;
mod sql;
mod storage;
mod user;
mod zookeeper;

pub use catalogue::{LockService, RealBackend, RealWorld};
pub use driver::{drive, drive_paying, drive_recorded, drive_with, DriveOptions, StallFault};
pub use etcd::EtcdClient;
pub use exec::{ExecClient, ExecProgram};
pub use ledger::{LedgerSession, LedgerTable};
pub use payments::{Connected, RealPayments};
pub use plan::{plan, Faults, Plan};
pub use provider::{ProviderClient, ProviderConfig, ProviderServer, DEFAULT_TABLE_PREFIX};
pub use proxy::{LinkFreezer, LinkState, LinkStats, Proxy, ReplyHold};
pub use queues::{QueueConfig, QueueSession, RealQueue, MAX_NAME as MAX_QUEUE_NAME};
pub use redis::{RedisClient, RedisRecipe};
pub use redlock::RedlockClient;
pub use run::{execute, execute_recorded, RealFailure, RealRun};
pub use s3::{Resources, S3Objects};
pub use semaphore::RedisSemaphoreClient;
pub use servers::{stop_all, ManagedServer, Package, ServerKind, ServerOptions, UnknownServer};
pub use sql::{advisory_key, mysql_lock_name, SqlClient, SqlRecipe};
pub use storage::Storage;
pub use user::RealRedis;
pub use zookeeper::ZooKeeperClient;

pub mod bench;
pub mod failover;
pub mod matrix;
pub mod nemesis;
pub mod netfault;
pub mod schedule;

/// Why a real backend, its storage or a managed server could not be used.
#[derive(Debug, thiserror::Error)]
pub enum RealError {
    /// A server could not be reached or refused the session.
    #[error("cannot connect to {what} at {url}: {reason}")]
    Connect { what: &'static str, url: String, reason: String },
    /// Creating the tables, scripts or leases a backend needs failed.
    #[error("setting up {what} failed: {reason}")]
    Setup { what: &'static str, reason: String },
    /// A server binary is not on PATH.
    #[error("`{binary}` is not installed: {}", package.advice())]
    MissingBinary { binary: &'static str, package: Package },
    /// A managed server failed to start or become ready.
    #[error("the {what} server did not start: {reason}")]
    Server { what: &'static str, reason: String },
    /// Ctrl-C, SIGTERM or SIGHUP stopped the test ([`lockcheck_workloads::interrupt`]).
    #[error("interrupted by {}", lockcheck_workloads::interrupt::signal_name(*signal))]
    Interrupted { signal: i32 },
}

impl RealError {
    /// The interrupt, if the tool was interrupted: whatever else went wrong
    /// then (a server that was starting, a lost connection) is the
    /// interrupt's doing.
    pub fn or_interrupted(self) -> RealError {
        match lockcheck_workloads::interrupt::signal() {
            Some(signal) => RealError::Interrupted { signal },
            None => self,
        }
    }
}

/// What every real client of a test shares: where the protected resources
/// live and how long any one operation may take.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientConfig {
    /// This logical client's name (`client-3`): lock values and owners are
    /// derived from it, so a history says who held what.
    pub name: String,
    /// Every operation ends within this, as `info` if its outcome is unknown.
    pub deadline: Duration,
    /// Where the protected resources are: the PostgreSQL URL of their
    /// table, or an S3 storage's (`s3-cas+http://127.0.0.1:PORT/BUCKET`:
    /// its kind, endpoint and bucket; `s3.rs`).
    pub storage_url: String,
    /// The storage rejects writes with a token older than one it accepted.
    pub fenced_storage: bool,
}
