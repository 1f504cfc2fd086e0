//! The simulated protected resources: the `storage` host (a
//! [`crate::server::ServerState`], fenced when the run's `fencing` is on)
//! and one client's connection to it, the [`ResourceStore`] every
//! simulated run drives beside its lock client.

use std::time::Duration;

use lockcheck_workloads::{Outcome, ResourceStore, Stall};

use crate::host::Connection;
use crate::protocol::{Request, Response};

/// The storage's host name.
pub(crate) const STORAGE_HOST: &str = "storage";

/// One client's connection to the simulated protected resources.
#[derive(Debug)]
pub struct SimStore {
    connection: Connection,
}

impl SimStore {
    /// A connection whose every request ends within `deadline`.
    pub(crate) fn new(deadline: Duration) -> SimStore {
        SimStore { connection: Connection::new(STORAGE_HOST, deadline) }
    }

    /// Stalls in flight when the client's pause asks for it, as the
    /// client's lock connections do.
    pub(crate) fn stalling(self, stall: &Stall) -> SimStore {
        SimStore { connection: self.connection.stalling(stall) }
    }
}

impl ResourceStore for SimStore {
    async fn write(&mut self, resource: &str, fence: Option<u64>, data: &str) -> Outcome<()> {
        let request = Request::Write { key: resource.into(), fence, data: data.into() };
        match self.connection.call(&request).await {
            Ok(Response::StaleFence) => Outcome::Fail("stale-fence".into()),
            Ok(_) => Outcome::Ok(()),
            Err(failure) => failure.outcome(),
        }
    }

    async fn read(&mut self, resource: &str) -> Outcome<(Option<u64>, Option<String>)> {
        match self.connection.call(&Request::Read { key: resource.into() }).await {
            Ok(Response::Read { fence, data }) => Outcome::Ok((fence, data)),
            Ok(_) => Outcome::Info("bad-reply".into()),
            Err(failure) => failure.outcome(),
        }
    }

    /// Drops the connection (a new session): the next request reconnects.
    async fn reset(&mut self) {
        self.connection.reset();
    }
}
