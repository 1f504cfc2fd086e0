//! Clients, generators and workloads that drive lock backends and record
//! histories. A backend implements [`LockClient`]; [`run_client`] drives one
//! logical client through a workload and records every operation into a
//! [`Recorder`] as the history format (`histories/README.md`) wants it. The
//! simulator and the real backends share all of this.

mod cell;
mod client;
mod fault;
pub mod interrupt;
mod recorder;
pub mod redis_lock;
pub mod redlock;
pub mod semaphore;
pub mod user;
mod workload;

pub use cell::Cell;
pub use client::{Grant, LockClient, Outcome};
pub use fault::{FaultKind, Shape};
pub use recorder::{HistoryFile, Recorder, SharedRecorder};
pub use workload::{run_client, ClientPlan, Stall, Workload, WorkloadOptions};
