//! The primitives a user's own Redis lock recipe is written against, free of
//! any transport: the same recipe (a [`crate::LockClient`] generic over
//! [`RedisCommands`] and [`ResourceStore`]) then runs under the simulator
//! (`lockcheck_sim::run_user`, with its faults) and against a real Redis
//! and PostgreSQL (`real::user`), and lockcheck checks both histories the
//! same way. See `docs/rust-api.md`.

use crate::Outcome;

/// How a command failed. A recipe must tell the two apart: after `NotSent`
/// nothing happened and it may report `Fail`; after `Unknown` the command
/// may have run, so it must report `Info` (and hold no lock on that belief).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Uncertain {
    /// Certainly not run: no connection, or the server refused it.
    NotSent,
    /// Unknown: a timeout or a lost connection after sending.
    Unknown,
}

/// The Redis commands of the recipes in docs/guide.md#redis. Every call ends within the
/// implementation's deadline, with `Err(Uncertain::Unknown)` if the reply
/// did not come, never hangs.
#[allow(async_fn_in_trait)]
pub trait RedisCommands {
    /// `SET key value NX PX ttl`: `true` if set, `false` if the key exists.
    async fn set_nx_px(&mut self, key: &str, value: &str, ttl_ms: u64) -> Result<bool, Uncertain>;
    /// The Lua compare-and-delete: deletes `key` only if it holds `value`;
    /// `true` if it did.
    async fn del_if_eq(&mut self, key: &str, value: &str) -> Result<bool, Uncertain>;
    /// The Lua compare-then-`PEXPIRE`: sets the TTL only if `key` holds
    /// `value`; `true` if it did.
    async fn pexpire_if_eq(
        &mut self,
        key: &str,
        value: &str,
        ttl_ms: u64,
    ) -> Result<bool, Uncertain>;
    /// `INCR key`: the new value (a fencing token).
    async fn incr(&mut self, key: &str) -> Result<u64, Uncertain>;
    /// `DEL key`, whoever holds it: `true` if a key was deleted.
    async fn del(&mut self, key: &str) -> Result<bool, Uncertain>;
}

/// The protected resource (lockcheck's fenced storage), which the history
/// records writes to and reads of: what [`crate::LockClient::write`] and
/// [`crate::LockClient::read`] delegate to.
#[allow(async_fn_in_trait)]
pub trait ResourceStore {
    /// Writes `data`, sending the token when there is one; a fenced store
    /// refuses a token older than one it accepted (`Fail("stale-fence")`).
    async fn write(&mut self, resource: &str, fence: Option<u64>, data: &str) -> Outcome<()>;
    /// The resource's token and data.
    async fn read(&mut self, resource: &str) -> Outcome<(Option<u64>, Option<String>)>;
}
