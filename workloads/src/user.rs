//! The primitives a user's own Redis lock recipe is written against, free of
//! any transport: the same recipe (a [`crate::LockClient`] generic over
//! [`RedisCommands`]) then runs under the simulator
//! (`lockcheck_sim::run_user`, with its faults) and against a real Redis
//! and PostgreSQL (`real::user`), and lockcheck checks both histories the
//! same way. See `docs/rust-api.md`.

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

/// The protected resource: the one storage trait both worlds implement
/// (see [`crate::storage`]), named here too for recipes written against
/// this module.
pub use crate::storage::ResourceStore;
