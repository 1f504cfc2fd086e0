//! The SQL lease table (`lockcheck_workloads::lease_table`, which the real
//! world runs against PostgreSQL and MariaDB too) over the simulator's
//! connection to its database.

use lockcheck_workloads::lease_table::{self, LeaseStore, Taken};
use lockcheck_workloads::{Grant, Outcome};

use crate::client::SimClient;
use crate::host::{Connection, Failure};
use crate::protocol::{Request, Response};

/// One client's connection to the simulated database.
struct SimLeases<'a>(&'a mut Connection);

impl LeaseStore for SimLeases<'_> {
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

impl SimClient {
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
