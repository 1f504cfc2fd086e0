//! The protected side: what a holder does with its lock is not the lock
//! client's business. A [`ResourceStore`] receives the holder's writes
//! (with its token, when it has one) and answers reads; each world builds
//! one per logical client beside its lock client, and [`crate::run_client`]
//! drives both. The fenced table, a plain store and object storage are each
//! one implementation.

use crate::Outcome;

/// The protected resources, which the history records writes to and reads
/// of. Every call ends within the implementation's deadline, as `Info` if
/// its outcome is unknown, never hangs.
#[allow(async_fn_in_trait)]
pub trait ResourceStore {
    /// Writes `data`, sending the token when there is one; a fenced store
    /// refuses a token older than one it accepted (`Fail("stale-fence")`).
    async fn write(&mut self, resource: &str, fence: Option<u64>, data: &str) -> Outcome<()>;
    /// The resource's token and data (`(None, None)` if never written).
    async fn read(&mut self, resource: &str) -> Outcome<(Option<u64>, Option<String>)>;
    /// Starts a new session after an `Info`, as the lock client does.
    async fn reset(&mut self) {}
}
