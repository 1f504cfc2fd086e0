//! What every lock backend offers a workload.

/// A granted lock: the token (when the backend issues one) and the backend's
/// own lease handle (the random value of a Redis lock, a lease id).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Grant {
    pub fence: Option<u64>,
    pub lease: Option<String>,
}

/// How an operation ended, as the history records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome<T> {
    /// It took effect.
    Ok(T),
    /// It definitely did not take effect; the reason (`busy`, `not-held`,
    /// `stale-fence`, …).
    Fail(String),
    /// Unknown: a timeout or a lost connection. The client must not act on
    /// any lock after this; it continues as a new process after `reset`.
    Info(String),
}

/// A backend's client: one session of one logical client. It takes,
/// renews and releases locks; the protected resources are a
/// [`crate::ResourceStore`]'s. Every operation
/// must end within the backend's deadline, as `Info` if its outcome is
/// unknown, never hang.
#[allow(async_fn_in_trait)]
pub trait LockClient {
    async fn acquire(&mut self, key: &str, ttl_ms: u64) -> Outcome<Grant>;
    async fn release(&mut self, key: &str, grant: &Grant) -> Outcome<()>;
    async fn renew(&mut self, key: &str, grant: &Grant, ttl_ms: u64) -> Outcome<()>;
    /// Starts a new session after an `Info` (the old one may hold locks the
    /// backend will free by itself).
    async fn reset(&mut self);
    /// Acquires `key`, waiting up to `wait_ms` while it is taken, as a
    /// client blocked on a lock does: `Fail("timeout")` once the wait is
    /// over, and `Fail("deadlock: <the server's words>")` when the server
    /// found this wait in a deadlock and refused it. The default asks
    /// [`LockClient::acquire`] again until then ([`poll_until_granted`]);
    /// a recipe whose server can wait (an advisory lock, `GET_LOCK` with a
    /// timeout) waits there, and its server can then see a deadlock.
    async fn acquire_waiting(&mut self, key: &str, ttl_ms: u64, wait_ms: u64) -> Outcome<Grant> {
        poll_until_granted(self, key, ttl_ms, wait_ms).await
    }
    /// How many times a watch woke this client while it waited in line
    /// since it was last asked, for a recipe whose waiters wait on a watch
    /// (ZooKeeper's); `None` for one that polls or does not wait. The
    /// workload asks after every acquire and records it with the acquire's
    /// completion (`"woken"`), whence the wake-ups per release.
    fn take_wake_ups(&mut self) -> Option<u64> {
        None
    }
}

/// Asks for `key` until it is granted or `wait_ms` have passed since the
/// first ask: a refusal (`busy`) waits a twentieth of the wait, at least a
/// millisecond, and asks again; any other outcome ends the wait with it.
pub async fn poll_until_granted<C: LockClient + ?Sized>(
    client: &mut C,
    key: &str,
    ttl_ms: u64,
    wait_ms: u64,
) -> Outcome<Grant> {
    let until = tokio::time::Instant::now() + std::time::Duration::from_millis(wait_ms);
    let retry = std::time::Duration::from_millis((wait_ms / 20).max(1));
    loop {
        match client.acquire(key, ttl_ms).await {
            Outcome::Fail(error) if error == "busy" => {}
            outcome => return outcome,
        }
        if tokio::time::Instant::now() + retry >= until {
            return Outcome::Fail("timeout".into());
        }
        tokio::time::sleep(retry).await;
    }
}

impl<T> Outcome<T> {
    /// The same outcome with its success value dropped.
    pub fn map_unit(self) -> Outcome<()> {
        self.map(|_| ())
    }

    /// The same outcome with its success value mapped by `f`.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Outcome<U> {
        match self {
            Outcome::Ok(value) => Outcome::Ok(f(value)),
            Outcome::Fail(error) => Outcome::Fail(error),
            Outcome::Info(error) => Outcome::Info(error),
        }
    }
}
