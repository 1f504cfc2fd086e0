//! The real backends: each recipe's name, and the sizes and seeds every
//! real run of it shares.

use crate::redis::RedisRecipe;
use crate::sql::SqlRecipe;

/// A real lock backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RealBackend {
    Redis(RedisRecipe),
    /// The sorted-set semaphore of docs/guide.md#semaphore, by the server's `TIME`, or
    /// (broken) by the caller's clock.
    Semaphore {
        client_clock: bool,
    },
    Redlock,
    Etcd,
    Sql(SqlRecipe),
    /// The user's program speaking the exec protocol (docs/exec-protocol.md).
    Exec,
}

/// Mixed into the seed for the server faults' schedule, so that it is not
/// the client stalls' schedule.
pub(crate) const SERVER_FAULT_SEED: u64 = 0x5e47_e4fa_0175;

/// A semaphore's permits, as the simulator's.
pub(crate) const PERMITS: u32 = 2;

/// Redlock's instances.
pub(crate) const REDLOCK_INSTANCES: usize = 5;

/// The etcd cluster a partition among members splits.
pub(crate) const ETCD_MEMBERS: usize = 3;
/// The etcd cluster of a ring partition: each member sees two of four.
pub(crate) const ETCD_RING_MEMBERS: usize = 5;

/// Mixed into the seed for the exec program kills' schedule.
pub(crate) const CLIENT_KILL_SEED: u64 = 0xc1_1e47_c1a5;

/// Mixed into the seed for the failovers' schedule.
pub(crate) const FAILOVER_SEED: u64 = 0xfa11_0ee5;

/// Mixed into the seed for the network faults' schedule.
pub(crate) const NET_FAULT_SEED: u64 = 0x0e7_fa17_5eed;

/// The shortest lease Debian's etcd 3.4 grants with its default timing.
pub(crate) const ETCD_MIN_TTL_S: u64 = 2;

/// The chance that `redis-lost-reply` loses a grant's reply: its bug needs a
/// lost reply to show, and the client injects them itself.
pub(crate) const LOST_REPLY_CHANCE: f64 = 0.1;

impl RealBackend {
    pub fn parse(name: &str) -> Option<RealBackend> {
        match name {
            "redlock" => Some(RealBackend::Redlock),
            "redis-semaphore" => Some(RealBackend::Semaphore { client_clock: false }),
            "redis-semaphore-client-clock" => Some(RealBackend::Semaphore { client_clock: true }),
            "etcd" => Some(RealBackend::Etcd),
            "exec" => Some(RealBackend::Exec),
            _ => RedisRecipe::parse(name)
                .map(RealBackend::Redis)
                .or_else(|| SqlRecipe::parse(name).map(RealBackend::Sql)),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            RealBackend::Redis(recipe) => recipe.name(),
            RealBackend::Semaphore { client_clock: false } => "redis-semaphore",
            RealBackend::Semaphore { client_clock: true } => "redis-semaphore-client-clock",
            RealBackend::Redlock => "redlock",
            RealBackend::Etcd => "etcd",
            RealBackend::Sql(recipe) => recipe.name(),
            RealBackend::Exec => "exec",
        }
    }
}
