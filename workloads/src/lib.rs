//! Clients, generators and workloads that drive lock backends and record
//! histories. A backend implements [`LockClient`], a storage
//! [`ResourceStore`]; [`run_client`] drives one
//! logical client through a workload and records every operation into a
//! [`Recorder`] as the history format (`histories/README.md`) wants it. The
//! simulator and the real backends share all of this, and more:
//! - the recipes written once for both worlds, each over a transport trait
//!   of its own: [`redis_lock`] (the single-Redis recipes and their broken
//!   variants), [`redlock`], [`semaphore`], [`lease_table`], [`etcd_lock`], [`zookeeper_lock`];
//!   and [`user`], the transport traits a user-written recipe is generic over;
//! - the storages: [`ResourceStore`], [`StorageKind`], and [`s3`], the S3
//!   storages' recipe over a transport of GETs and PUTs;
//! - [`payments`]: the double charge's worker, written once over the
//!   [`payments::Payments`] transport (a queue that redelivers, a payment
//!   provider, a payments table), and what a run relies on to charge each
//!   order once ([`payments::Protection`]);
//! - the payments workload's services as pure state machines, which the
//!   simulator hosts and the real world's services are tested against:
//!   [`queue`] (an at-least-once queue with a visibility timeout) and
//!   [`provider`] (a payment provider with idempotency keys, correct or
//!   broken);
//! - the fault vocabulary: [`FaultKind`] (every fault's name, in both
//!   worlds) and [`Shape`] (a partition's shapes), and [`schedule()`], the
//!   seeded schedule of faults each world draws its own way ([`Draws`]),
//!   and where a fault aims ([`Holders`]: a holder in the middle of a long
//!   hold, waited for within the fault's [`slack()`]);
//! - the one catalogue of backends for both worlds ([`Backend`], its
//!   [`Entry`], [`Recipe`] and [`Service`]; [`Catalogue`] for one world's
//!   view), and a
//!   truth table's [`Cell`];
//! - [`interrupt`]: Ctrl-C, SIGTERM and SIGHUP for the whole tool.

mod aim;
mod catalogue;
mod cell;
mod client;
mod cron;
mod drive;
mod election;
pub mod etcd_lock;
mod fault;
pub mod interrupt;
pub mod lease_table;
mod lock_order;
pub mod memory;
pub mod payments;
mod protection;
pub mod provider;
pub mod queue;
mod recorder;
pub mod redis_lock;
pub mod redlock;
mod run_options;
pub mod s3;
mod schedule;
pub mod semaphore;
mod stall;
mod storage;
pub mod user;
pub mod watch;
mod workload;
pub mod zookeeper_lock;

pub use aim::{slack, Aim, Aimed, Clocks, Holders};
pub use catalogue::{
    Backend, Catalogue, Entry, Recipe, Service, World, CONSUL_LOCK_DELAY_MS, PERMITS,
    REDLOCK_INSTANCES,
};
pub use cell::Cell;
pub use client::{poll_until_granted, Grant, LockClient, Outcome};
pub use drive::run_client;
pub use fault::{FaultKind, Shape};
pub use recorder::{HistoryFile, Recorder, SharedRecorder};
pub use run_options::{
    Pooler, Replay, RunOptions, Services, UrlService, DEFAULT_LINEARIZABILITY_TIMEOUT,
    DEFAULT_REAL_FAULTS, DEFAULT_SIM_FAULTS,
};
pub use schedule::{schedule, Draws, Quiet, Slot, Window, CLIENT_STALL};
pub use stall::{Freezer, Hold, Stall, StallPoint, StallPoints};
pub use storage::{ResourceStore, StorageKind};
pub use workload::{check_sizes, ClientPlan, Workload, WorkloadOptions};
