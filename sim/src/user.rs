//! Runs a user's own lock client under the simulator: the client is written
//! against `lockcheck_workloads::user` ([`RedisCommands`]) and
//! [`LockClient`], and [`run_user`] drives it through the workload with
//! the nemesis' faults, against the simulated Redis and fenced storage, as
//! the built-in `sim-redis` recipe is driven. See `docs/rust-api.md`.

use std::time::Duration;

use lockcheck_workloads::user::{RedisCommands, Uncertain};
use lockcheck_workloads::LockClient;

use crate::client::ClientSetup;
use crate::client::{Backend, Simulator};
use crate::host::{Connection, Failure};
use crate::protocol::{Request, Response};
use crate::run::{run_clients, SimError, SimRun};
use crate::storage::SimStore;
use lockcheck_workloads::RunOptions;

/// The simulated Redis, one connection of one client: each command ends
/// within the run's deadline; a lost connection reconnects on the next one.
#[derive(Debug)]
pub struct SimRedis {
    connection: Connection,
}

/// What a user's client factory gets for each logical client of a run.
#[derive(Debug)]
pub struct UserEnv {
    /// The client's number, 0 to `clients - 1`.
    pub logical: u32,
    /// `client-3`: lock values derived from it say in the history who held
    /// what.
    pub name: String,
    pub redis: SimRedis,
    /// Every command's deadline (a quarter of the TTL, as for the built-in
    /// recipes).
    pub deadline: Duration,
}

impl SimRedis {
    /// Drops the connection (a new session): the next command reconnects.
    pub fn reset(&mut self) {
        self.connection.reset();
    }

    async fn call(&mut self, request: Request) -> Result<Response, Uncertain> {
        self.connection.call(&request).await.map_err(uncertain)
    }
}

fn uncertain(failure: Failure) -> Uncertain {
    match failure {
        Failure::NotSent => Uncertain::NotSent,
        Failure::Unknown => Uncertain::Unknown,
    }
}

/// A script's 1 (done) or 0 (not ours).
fn counted(reply: Response) -> Result<bool, Uncertain> {
    match reply {
        Response::Int(1) => Ok(true),
        Response::Int(0) => Ok(false),
        _ => Err(Uncertain::Unknown),
    }
}

impl RedisCommands for SimRedis {
    async fn set_nx_px(&mut self, key: &str, value: &str, ttl_ms: u64) -> Result<bool, Uncertain> {
        match self.call(Request::SetNxPx { key: key.into(), value: value.into(), ttl_ms }).await? {
            Response::Ok => Ok(true),
            Response::Nil => Ok(false),
            _ => Err(Uncertain::Unknown),
        }
    }

    async fn del_if_eq(&mut self, key: &str, value: &str) -> Result<bool, Uncertain> {
        counted(self.call(Request::DelIfEq { key: key.into(), value: value.into() }).await?)
    }

    async fn pexpire_if_eq(
        &mut self,
        key: &str,
        value: &str,
        ttl_ms: u64,
    ) -> Result<bool, Uncertain> {
        let request = Request::PExpireIfEq { key: key.into(), value: value.into(), ttl_ms };
        counted(self.call(request).await?)
    }

    async fn incr(&mut self, key: &str) -> Result<u64, Uncertain> {
        match self.call(Request::Incr { key: key.into() }).await? {
            Response::Int(value) if value > 0 => Ok(value as u64),
            _ => Err(Uncertain::Unknown),
        }
    }

    async fn del(&mut self, key: &str) -> Result<bool, Uncertain> {
        match self.call(Request::Del { key: key.into() }).await? {
            Response::Int(deleted) => Ok(deleted > 0),
            _ => Err(Uncertain::Unknown),
        }
    }
}

/// Runs one simulated test of the user's client: the run `lockcheck check
/// --backend sim-redis` would do with these options (hosts, workload,
/// faults, seed), with each logical client's lock client built by `make`
/// instead of the built-in recipe. The same options and `make` give the
/// same history. `options.backend` must be `sim-redis` (the one simulated
/// Redis the client's [`SimRedis`] talks to); with the failover fault, it
/// follows the replica set's primary.
pub fn run_user<C, F>(options: &RunOptions, make: F) -> Result<SimRun, SimError>
where
    C: LockClient + 'static,
    F: Fn(UserEnv) -> C + Clone + 'static,
{
    if options.backend != Backend::Redis {
        return Err(SimError::Unsupported(format!(
            "run_user runs a user's client against a single simulated Redis: the backend must be {}, not {}",
            Backend::Redis.sim_name(),
            options.backend.sim_name()
        )));
    }
    if options.storage.is_s3() {
        return Err(SimError::Unsupported(format!(
            "run_user writes to the simulated table: the storage must be table, not {}",
            options.storage.name()
        )));
    }
    let lock_host = Simulator::lock_hosts(options.backend)[0];
    run_clients(options, &mut |_| {}, None, move |setup: ClientSetup| {
        let redis = match setup.primary {
            Some(primary) => Connection::to_primary(primary, setup.deadline),
            None => Connection::new(lock_host, setup.deadline).refusing_when_down(&setup.down),
        };
        let store = SimStore::new(setup.deadline);
        let client = make(UserEnv {
            logical: setup.logical,
            name: setup.name,
            redis: SimRedis { connection: redis },
            deadline: setup.deadline,
        });
        (client, store)
    })
}
