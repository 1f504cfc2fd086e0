//! The deterministic simulator: simulated lock services on turmoil hosts,
//! clients running the shared workloads against them, and a nemesis that
//! pauses, kills, delays and shifts clocks, all driven by one seed.
//!
//! Start at `run.rs`: [`run`] builds a simulation from [`RunOptions`] and
//! returns the recorded history. `service.rs` lists the simulated services,
//! one module each (their hosts, how they start, their clients' sessions);
//! `server.rs` holds the Redis-like state machine, `client.rs` the
//! catalogue ([`Backend`]) and the simulated client, which runs the
//! recipes both worlds share (`lockcheck_workloads::redis_lock`,
//! `redlock`, `semaphore`, `lease_table`, `etcd_lock`, `zookeeper_lock`)
//! over the simulator's connections (`redis_lock.rs`, `redlock.rs`,
//! `lease_table.rs`, `etcd_client.rs`, `zookeeper.rs`); `nemesis.rs` the faults and
//! how they are drawn on the schedule both worlds share, `aim.rs` where
//! they aim with `--aim`; `matrix.rs` the simulated truth
//! table; `shrink.rs` the search for a smaller failing run.

mod aim;
mod client;
mod consul;
mod etcd;
mod etcd_client;
mod host;
mod leaderless;
mod lease_table;
mod nemesis;
mod payments;
mod primary_replica;
mod protocol;
mod redis_lock;
mod redlock;
mod replicated;
mod run;
mod s3;
mod server;
mod service;
mod services;
mod storage;
mod zookeeper;

pub use client::{Backend, SimClient, Simulator};
pub use lockcheck_workloads::RunOptions;
pub use nemesis::{refused_in_sim, Action, Fault, FaultKind, Shape, Targets, DEFAULT_FAULTS};
pub use redlock::REDLOCK_HOSTS;

/// What a model checker needs to drive the simulator's own recipe
/// transports and server state machines step by step, without turmoil.
pub mod modelled {
    pub use crate::consul::{
        acquire as consul_acquire, release as consul_release, renew as consul_renew,
        Consul as ConsulMachine,
    };
    pub use crate::etcd::EtcdMachine;
    pub use crate::etcd_client::etcd_over;
    pub use crate::host::{Caller, Failure};
    pub use crate::lease_table::leases_over;
    pub use crate::protocol::{Request, Response};
    pub use crate::redis_lock::{redis_over, semaphore_over};
    pub use crate::redlock::redlock_over;
    pub use crate::server::ServerState;
}
pub use run::{
    run, run_recorded, run_with_progress, SimError, SimRun, SimStats, Simulated, BASE_BYTES,
    BYTES_PER_CLIENT, BYTES_PER_CLIENT_SECOND, MAX_CLIENTS,
};

mod matrix;
pub use matrix::{
    cells, check_run, run_cell, run_cell_with_progress, seeds_of, sweep_cell, Cell, CellResult,
    Effort, Expect, FalseAlarm, MatrixError,
};

mod shrink;
pub use shrink::{shrink, Shrunk};

pub mod user;
pub use payments::SimPayments;
pub use s3::SimObjects;
pub use storage::SimStore;
pub use user::{run_user, SimRedis, UserEnv};
pub use zookeeper::{wake_ups_per_release, WakeUpCount};
