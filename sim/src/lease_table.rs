//! The SQL lease table (`lockcheck_workloads::lease_table`, which the real
//! world runs against PostgreSQL and MariaDB too) over the simulator's
//! connection to its database. The database is a simulated service of
//! its own ([`LeaseDatabase`]).

use lockcheck_workloads::lease_table::{self, LeaseStore, Taken};
use lockcheck_workloads::{Backend, FaultKind, Grant, Outcome, Recipe, Service};

use crate::host::{Caller, Connection, Failure};
use crate::protocol::{Request, Response};
use crate::service::{start_servers, Hosting, Link, Pending, SimService, SimSession, Started};

/// The database that holds the lease table (`crate::server`'s leases on
/// the `db` host), standing for PostgreSQL and MariaDB alike. A database
/// keeps its tables across a restart (`Backend::is_durable`).
pub(crate) struct LeaseDatabase;

/// The database's host.
const DB_HOST: [&str; 1] = ["db"];

impl SimService for LeaseDatabase {
    fn keeps(&self, service: Service, _: &[FaultKind]) -> bool {
        service.is_sql()
    }

    fn lock_hosts(&self, _: Service) -> &'static [&'static str] {
        &DB_HOST
    }

    fn start(&self, hosting: &mut Hosting<'_, '_>) -> Started {
        start_servers(hosting, &DB_HOST)
    }

    fn session(&self, backend: Backend, _: bool) -> Option<Box<dyn SimSession>> {
        match backend.recipe() {
            Recipe::LeaseTable { .. } => Some(Box::new(LeaseSession)),
            _ => None,
        }
    }
}

/// A client's session of the lease table: it holds nothing between calls.
#[derive(Debug, Clone, Copy)]
struct LeaseSession;

impl SimSession for LeaseSession {
    fn acquire<'a>(
        &'a mut self,
        link: &'a mut Link,
        key: &'a str,
        ttl_ms: u64,
    ) -> Pending<'a, Grant> {
        Box::pin(link.acquire_lease(key, ttl_ms))
    }

    fn release<'a>(
        &'a mut self,
        link: &'a mut Link,
        key: &'a str,
        grant: &'a Grant,
    ) -> Pending<'a, ()> {
        Box::pin(link.release_lease(key, grant))
    }

    fn renew<'a>(
        &'a mut self,
        link: &'a mut Link,
        key: &'a str,
        grant: &'a Grant,
        ttl_ms: u64,
    ) -> Pending<'a, ()> {
        Box::pin(link.renew_lease(key, grant, ttl_ms))
    }
}

/// The lease table's transport over any [`Caller`]: the one the
/// simulator's clients use, for a model checker to drive the same recipe
/// against the same server state machine.
pub fn leases_over<C: Caller>(caller: &mut C) -> impl LeaseStore<Error = Failure> + '_ {
    SimLeases(caller)
}

/// One client's connection to the simulated database.
struct SimLeases<'a, C: Caller = Connection>(&'a mut C);

impl<C: Caller> LeaseStore for SimLeases<'_, C> {
    type Error = Failure;

    async fn take(
        &mut self,
        name: &str,
        owner: &str,
        ttl_ms: u64,
        now_ms: Option<i64>,
    ) -> Result<Taken, Failure> {
        let (name, owner) = (name.to_string(), owner.to_string());
        let request = match now_ms {
            Some(now_ms) => Request::LeaseAcquireAt { name, owner, ttl_ms, now_ms },
            None => Request::LeaseAcquire { name, owner, ttl_ms },
        };
        Ok(match self.0.call(&request).await? {
            Response::Fence(fence) => Taken::Granted(Some(fence)),
            _ => Taken::Held,
        })
    }

    async fn give_back(
        &mut self,
        name: &str,
        owner: &str,
        fence: Option<u64>,
    ) -> Result<bool, Failure> {
        let request = Request::LeaseRelease {
            name: name.into(),
            owner: owner.into(),
            fence: fence.unwrap_or_default(),
        };
        Ok(matches!(self.0.call(&request).await?, Response::Int(1)))
    }

    async fn extend(
        &mut self,
        name: &str,
        owner: &str,
        fence: Option<u64>,
        ttl_ms: u64,
    ) -> Result<bool, Failure> {
        let request = Request::LeaseRenew {
            name: name.into(),
            owner: owner.into(),
            fence: fence.unwrap_or_default(),
            ttl_ms,
        };
        Ok(matches!(self.0.call(&request).await?, Response::Int(1)))
    }
}

impl Link {
    pub(crate) async fn acquire_lease(&mut self, key: &str, ttl_ms: u64) -> Outcome<Grant> {
        let owner = self.next_value();
        // The broken variant expires leases by the client's clock.
        let now_ms = self.caller_now_ms();
        let mut leases = SimLeases(&mut self.instances[0]);
        lease_table::acquire(&mut leases, key, owner, ttl_ms, now_ms)
            .await
            .unwrap_or_else(Failure::outcome)
    }

    pub(crate) async fn release_lease(&mut self, key: &str, grant: &Grant) -> Outcome<()> {
        let mut leases = SimLeases(&mut self.instances[0]);
        lease_table::release(&mut leases, key, grant).await.unwrap_or_else(Failure::outcome)
    }

    pub(crate) async fn renew_lease(
        &mut self,
        key: &str,
        grant: &Grant,
        ttl_ms: u64,
    ) -> Outcome<()> {
        let mut leases = SimLeases(&mut self.instances[0]);
        lease_table::renew(&mut leases, key, grant, ttl_ms).await.unwrap_or_else(Failure::outcome)
    }
}
