//! A per-tenant counting semaphore on one Redis (docs/guide.md#semaphore): at most
//! `permits` holders of each name at once. It mirrors the simulator's
//! `sim-redis-semaphore` and `sim-redis-semaphore-client-clock`
//! (`sim/src/client.rs`, `Request::Sem*` in `sim/src/server.rs`): the same
//! steps, replies and outcome strings, so a real history reads like a
//! simulated one.
//!
//! Each name is a sorted set `sem:<name>`: member = the holder's unique value,
//! score = its lease expiry in ms.
//!
//! * acquire: one script drops the expired members (`ZREMRANGEBYSCORE -inf
//!   now`), counts the rest (`ZCARD`) and adds the caller (`ZADD`) if below
//!   the limit (1 = held, 0 = `busy`). `now` is the server's own `TIME`
//!   (Redis 7 replicates a script by its effects, so `TIME` is allowed before
//!   a write);
//! * heartbeat (renew): a script that moves the member's expiry with `ZADD
//!   XX` if it is still a member (`not-held` if not);
//! * release: `ZREM` (`not-held` if it was not a member).
//!
//! The broken `client_clock` variant sends the caller's clock as `now`: a
//! caller whose clock runs ahead drops the others' members as expired while
//! they still hold, and the limit is exceeded.
//!
//! No fencing token: a member cannot be ordered. Connections, deadlines and
//! outcomes are those of the single-Redis client ([`super::redis`]).

use std::sync::LazyLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::Script;
use tokio::time::{timeout_at, Instant};

use super::redis::{counted, glob_escape, scan, Command, Instance};
use super::{ClientConfig, RealError};
use lockcheck_workloads::redis_lock::CallError;
use lockcheck_workloads::semaphore::{self, SemaphoreStore};
use lockcheck_workloads::{Grant, LockClient, Outcome};

/// How long preparing a test's keys may take, before anything is recorded.
const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// `now` in ms: the caller's clock if it sent one, else the server's own
/// `TIME`. Shared by both scripts.
const NOW_MS: &str = r#"
local function now_ms(caller_ms)
  if caller_ms then return tonumber(caller_ms) end
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end
"#;

/// KEYS[1] = the set; ARGV = member, ttl_ms, limit[, now_ms]. Drops the
/// expired members, counts, adds if below the limit: 1 = held, 0 = busy.
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{NOW_MS}
local now = now_ms(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
return 1"
    ))
});

/// KEYS[1] = the set; ARGV = member, ttl_ms[, now_ms]. Moves a member's
/// expiry only while it is still a member: 1 = renewed, 0 = lost. Like the
/// simulator, it does not drop expired members: one that lapsed but was not
/// yet dropped has had no successor, and may go on.
static HEARTBEAT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{NOW_MS}
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], 'XX', now_ms(ARGV[3]) + tonumber(ARGV[2]), ARGV[1])
return 1"
    ))
});

/// The Redis key of semaphore `name`.
pub(crate) fn semaphore_key(name: &str) -> String {
    format!("sem:{name}")
}

fn connect_error(url: &str, reason: impl ToString) -> RealError {
    RealError::Connect { what: "Redis", url: url.to_string(), reason: reason.to_string() }
}

impl RedisSemaphoreClient {
    /// Deletes the sets of `names` (and of their per-unit names, `job:day-3` of
    /// `job`) on the Redis at `url`, so a test does not start with a previous
    /// run's holders. Other keys are untouched.
    pub async fn prepare(url: &str, names: &[String]) -> Result<(), RealError> {
        let client = redis::Client::open(url).map_err(|error| connect_error(url, error))?;
        let work = async {
            let mut connection = client
                .get_multiplexed_async_connection()
                .await
                .map_err(|error| connect_error(url, error))?;
            let deleted = async {
                for name in names {
                    let mut keys = vec![semaphore_key(name)];
                    let units = format!("{}:*", semaphore_key(&glob_escape(name)));
                    keys.extend(scan(&mut connection, &units).await?);
                    redis::cmd("DEL").arg(&keys).query_async::<()>(&mut connection).await?;
                }
                Ok::<_, redis::RedisError>(())
            };
            deleted.await.map_err(|error| RealError::Setup {
                what: "the Redis semaphore keys",
                reason: error.to_string(),
            })
        };
        timeout_at(Instant::now() + SETUP_TIMEOUT, work)
            .await
            .map_err(|_| connect_error(url, format!("no answer within {SETUP_TIMEOUT:?}")))?
    }
}

/// One session of one logical client against a semaphore on a single Redis.
#[derive(Debug)]
pub struct RedisSemaphoreClient {
    /// How many may hold one name at once.
    permits: u32,
    /// Broken: `now` comes from this process's clock, not the server's.
    client_clock: bool,
    /// Moves this client's clock (the skew a test gives it); read only by
    /// the `client_clock` variant.
    clock_offset_ms: i64,
    name: String,
    /// Makes members unique across runs and processes sharing a server.
    nonce: u64,
    grants: u64,
    deadline: Duration,
    instance: Instance,
    /// When the operation under way must end.
    until: Instant,
}

impl RedisSemaphoreClient {
    /// Connects to the Redis at `url`. With
    /// `client_clock`, the scripts take `now` from this process's clock (the
    /// broken `redis-semaphore-client-clock`).
    pub async fn connect(
        url: &str,
        permits: u32,
        client_clock: bool,
        config: &ClientConfig,
    ) -> Result<RedisSemaphoreClient, RealError> {
        if permits == 0 {
            return Err(RealError::Setup {
                what: "the Redis semaphore",
                reason: "permits must be at least 1: nobody could ever hold it".into(),
            });
        }
        let instance = Instance::connect(url).await?;
        Ok(RedisSemaphoreClient {
            permits,
            client_clock,
            clock_offset_ms: 0,
            name: config.name.clone(),
            nonce: rand::random(),
            grants: 0,
            deadline: config.deadline,
            instance,
            until: Instant::now(),
        })
    }

    /// Sets this client's clock `offset_ms` ahead of the machine's (behind if
    /// negative), as the simulator's skew fault does. Only the `client_clock`
    /// variant reads it: the correct one asks the server, so skew is harmless.
    pub fn clock_offset(mut self, offset_ms: i64) -> RedisSemaphoreClient {
        self.clock_offset_ms = offset_ms;
        self
    }

    /// How many may hold one name at once (for `WorkloadOptions::permits`).
    pub fn permits(&self) -> u32 {
        self.permits
    }

    fn next_member(&mut self) -> String {
        self.grants += 1;
        format!("{}:{:016x}:{}", self.name, self.nonce, self.grants)
    }

    /// The caller's clock in ms since the epoch, for the variant that
    /// (wrongly) trusts it; `None`: the scripts read the server's `TIME`.
    fn caller_now_ms(&self) -> Option<i64> {
        self.client_clock.then(|| {
            let since_epoch = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
            i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX) + self.clock_offset_ms
        })
    }
}

impl SemaphoreStore for RedisSemaphoreClient {
    async fn try_acquire(
        &mut self,
        key: &str,
        member: &str,
        ttl_ms: u64,
        limit: u32,
        now_ms: Option<i64>,
    ) -> Result<bool, CallError> {
        let mut invocation = ACQUIRE.key(semaphore_key(key));
        invocation.arg(member).arg(ttl_ms).arg(limit);
        if let Some(now_ms) = now_ms {
            invocation.arg(now_ms);
        }
        counted(self.instance.call(Command::Script(&invocation), self.until).await?)
    }

    async fn heartbeat(
        &mut self,
        key: &str,
        member: &str,
        ttl_ms: u64,
        now_ms: Option<i64>,
    ) -> Result<bool, CallError> {
        let mut invocation = HEARTBEAT.key(semaphore_key(key));
        invocation.arg(member).arg(ttl_ms);
        if let Some(now_ms) = now_ms {
            invocation.arg(now_ms);
        }
        counted(self.instance.call(Command::Script(&invocation), self.until).await?)
    }

    async fn remove(&mut self, key: &str, member: &str) -> Result<bool, CallError> {
        let mut command = redis::cmd("ZREM");
        command.arg(semaphore_key(key)).arg(member);
        counted(self.instance.call(Command::Cmd(&command), self.until).await?)
    }
}

impl LockClient for RedisSemaphoreClient {
    async fn acquire(&mut self, key: &str, ttl_ms: u64) -> Outcome<Grant> {
        self.until = Instant::now() + self.deadline;
        let (member, now_ms, limit) = (self.next_member(), self.caller_now_ms(), self.permits);
        semaphore::acquire(self, key, member, ttl_ms, limit, now_ms).await
    }

    async fn release(&mut self, key: &str, grant: &Grant) -> Outcome<()> {
        self.until = Instant::now() + self.deadline;
        let member = grant.lease.clone().unwrap_or_default();
        semaphore::release(self, key, &member).await
    }

    async fn renew(&mut self, key: &str, grant: &Grant, ttl_ms: u64) -> Outcome<()> {
        self.until = Instant::now() + self.deadline;
        let member = grant.lease.clone().unwrap_or_default();
        let now_ms = self.caller_now_ms();
        semaphore::renew(self, key, &member, ttl_ms, now_ms).await
    }

    async fn reset(&mut self) {
        self.instance.disconnect();
    }
}
