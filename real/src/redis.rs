//! A single Redis as a lock service, following docs/guide.md#redis to the letter,
//! with the deliberately broken variants the simulator has
//! (`sim/src/client.rs`): the same recipes, outcomes and error strings, so a
//! real history reads like a simulated one.
//!
//! * acquire: `SET lock:<name> <value> NX PX <ttl>` (OK = held, nil = `busy`);
//!   with fencing, `INCR fence:<name>` after the grant (not atomic with it);
//! * release: compare-and-delete in Lua (`not-held` if the value differs);
//! * renew: compare-then-`PEXPIRE` in Lua;
//! * `redis-fenced`: one script sets the lock and `INCR`s its fence, so the
//!   token is atomic with the grant.
//!
//! Every command ends by the operation's deadline. A command whose reply did
//! not come is `info` (`timeout`, `conn-lost`), and its connection is dropped
//! so a late reply can never be read as the answer to the next command; a
//! connection that cannot be opened means nothing was sent: `unavailable`.
//!
//! A client made with [`RedisClient::connect_following`] follows a
//! [`PrimaryUrl`]: each connection it opens goes to wherever the primary is
//! then (the failover fault, `failover.rs`, moves it to a promoted replica),
//! as a client asking Sentinel before each (re)connect would.
//!
//! A lost reply needs a network fault; so that `redis-lost-reply` is found
//! without one, [`RedisClient::lose_replies`] injects lost replies in the
//! client itself.

use std::sync::{Arc, LazyLock, PoisonError, RwLock};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ErrorKind, Script, Value};
use tokio::time::{timeout_at, Instant};

use super::{ClientConfig, RealError};
use lockcheck_workloads::redis_lock::{self, CallError, RedisLock, Variant};
use lockcheck_workloads::{Grant, LockClient, Outcome};
use lockcheck_workloads::{Stall, StallPoint};

/// How long opening a connection may take while setting up a test, before
/// anything is recorded.
const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// The compare-and-delete release of docs/guide.md#redis.
static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end"#,
    )
});

/// The watchdog's renewal: extend only a lock that is still ours.
static RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("pexpire",KEYS[1],ARGV[2]) else return 0 end"#,
    )
});

/// `redis-fenced`: the grant and its token in one atomic step; 0 = busy.
static FENCED_ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"if redis.call("set",KEYS[1],ARGV[1],"NX","PX",ARGV[2]) then return redis.call("incr",KEYS[2]) else return 0 end"#,
    )
});

/// The Redis key of lock `name`.
pub(crate) fn lock_key(name: &str) -> String {
    format!("lock:{name}")
}

/// The Redis key of lock `name`'s fencing counter.
pub(crate) fn fence_key(name: &str) -> String {
    format!("fence:{name}")
}

/// The commands the recipes send (as `sim/src/protocol.rs` names them).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Command<'a> {
    /// `SET key value NX PX ttl`
    SetNxPx { key: &'a str, value: &'a str, ttl_ms: u64 },
    /// `SETNX key value` (the broken two-step recipe)
    SetNx { key: &'a str, value: &'a str },
    /// `PEXPIRE key ttl`
    PExpire { key: &'a str, ttl_ms: u64 },
    /// `GET key` (the broken two-step release)
    Get { key: &'a str },
    /// `DEL key` (the broken release)
    Del { key: &'a str },
    /// The Lua compare-and-delete release.
    DelIfEq { key: &'a str, value: &'a str },
    /// The Lua compare-then-`PEXPIRE` renewal.
    PExpireIfEq { key: &'a str, value: &'a str, ttl_ms: u64 },
    /// `INCR key`
    Incr { key: &'a str },
    /// The `redis-fenced` script: `SET NX PX` and `INCR` of the fence.
    FencedAcquire { key: &'a str, fence_key: &'a str, value: &'a str, ttl_ms: u64 },
    /// Another recipe's script (the semaphore's, `semaphore.rs`).
    Script(&'a redis::ScriptInvocation<'a>),
    /// Another recipe's plain command (the semaphore's `ZREM`).
    Cmd(&'a redis::Cmd),
}

impl Command<'_> {
    async fn send(self, connection: &mut MultiplexedConnection) -> redis::RedisResult<Value> {
        match self {
            Command::SetNxPx { key, value, ttl_ms } => {
                redis::cmd("SET")
                    .arg(key)
                    .arg(value)
                    .arg("NX")
                    .arg("PX")
                    .arg(ttl_ms)
                    .query_async(connection)
                    .await
            }
            Command::SetNx { key, value } => {
                redis::cmd("SETNX").arg(key).arg(value).query_async(connection).await
            }
            Command::PExpire { key, ttl_ms } => {
                redis::cmd("PEXPIRE").arg(key).arg(ttl_ms).query_async(connection).await
            }
            Command::Get { key } => redis::cmd("GET").arg(key).query_async(connection).await,
            Command::Del { key } => redis::cmd("DEL").arg(key).query_async(connection).await,
            Command::DelIfEq { key, value } => {
                RELEASE.key(key).arg(value).invoke_async(connection).await
            }
            Command::PExpireIfEq { key, value, ttl_ms } => {
                RENEW.key(key).arg(value).arg(ttl_ms).invoke_async(connection).await
            }
            Command::Incr { key } => redis::cmd("INCR").arg(key).query_async(connection).await,
            Command::FencedAcquire { key, fence_key, value, ttl_ms } => {
                FENCED_ACQUIRE
                    .key(key)
                    .key(fence_key)
                    .arg(value)
                    .arg(ttl_ms)
                    .invoke_async(connection)
                    .await
            }
            Command::Script(invocation) => invocation.invoke_async(connection).await,
            Command::Cmd(command) => command.query_async(connection).await,
        }
    }
}

/// Why a command has no reply to act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// No connection could be opened: the command was never sent.
    NotSent,
    /// Sent, but the reply did not come (`timeout`, `conn-lost`): it may or
    /// may not have taken effect.
    Unknown(&'static str),
    /// The server answered with an error: it did not take effect.
    Refused(String),
}

/// Where the primary of a replicated Redis is now: shared by the failover
/// nemesis, which moves it when it promotes a replica, and by every client
/// that follows it, which reads it whenever it opens a connection. Clones
/// share the one URL.
#[derive(Debug, Clone)]
pub struct PrimaryUrl(Arc<RwLock<String>>);

impl PrimaryUrl {
    /// A primary at `url` (`redis://127.0.0.1:6379`).
    pub fn new(url: impl Into<String>) -> PrimaryUrl {
        PrimaryUrl(Arc::new(RwLock::new(url.into())))
    }

    /// Where the primary is now.
    pub fn get(&self) -> String {
        self.0.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Moves the primary to `url`: connections opened from now on go there.
    pub fn set(&self, url: impl Into<String>) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = url.into();
    }
}

/// One Redis server and this client's one connection to it.
pub(crate) struct Instance {
    url: String,
    client: redis::Client,
    /// A replicated Redis' moving primary: each new connection goes to where
    /// it is then. `None`: always `url`.
    primary: Option<PrimaryUrl>,
    /// `None` until first use and after a command's reply was given up on.
    connection: Option<MultiplexedConnection>,
}

impl std::fmt::Debug for Instance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instance")
            .field("url", &self.url)
            .field("following", &self.primary.is_some())
            .field("connected", &self.connection.is_some())
            .finish()
    }
}

fn connect_error(url: &str, reason: impl ToString) -> RealError {
    RealError::Connect { what: "Redis", url: url.to_string(), reason: reason.to_string() }
}

impl Instance {
    /// Connects to `url` now, so that a wrong URL or a missing server is a
    /// setup error rather than a history of `unavailable`.
    pub(crate) async fn connect(url: &str) -> Result<Instance, RealError> {
        Instance::connect_to(url, None).await
    }

    /// Connects to where `primary` is now, and later reconnects to where it
    /// is then.
    pub(crate) async fn connect_following(primary: PrimaryUrl) -> Result<Instance, RealError> {
        Instance::connect_to(&primary.get(), Some(primary)).await
    }

    async fn connect_to(url: &str, primary: Option<PrimaryUrl>) -> Result<Instance, RealError> {
        let client = redis::Client::open(url).map_err(|error| connect_error(url, error))?;
        let mut instance = Instance { url: url.to_string(), client, primary, connection: None };
        match timeout_at(Instant::now() + SETUP_TIMEOUT, instance.open()).await {
            Ok(Ok(())) => Ok(instance),
            Ok(Err(error)) => Err(connect_error(url, error)),
            Err(_) => Err(connect_error(url, format!("no answer within {SETUP_TIMEOUT:?}"))),
        }
    }

    async fn open(&mut self) -> redis::RedisResult<()> {
        // A connection to an old primary is only ever dropped (on an error
        // or a timeout), never reused: the new one goes to the primary now.
        if let Some(primary) = &self.primary {
            let url = primary.get();
            if url != self.url {
                self.client = redis::Client::open(url.as_str())?;
                self.url = url;
            }
        }
        // The deadline is ours (`timeout_at` around every command), so the
        // crate's own default timeouts must not cut in first.
        let config =
            AsyncConnectionConfig::new().set_connection_timeout(None).set_response_timeout(None);
        self.connection =
            Some(self.client.get_multiplexed_async_connection_with_config(&config).await?);
        Ok(())
    }

    /// Gives the connection up: the next command opens a new one.
    pub(crate) fn disconnect(&mut self) {
        self.connection = None;
    }

    /// Sends `command` and waits for its reply until `until`.
    pub(crate) async fn call(
        &mut self,
        command: Command<'_>,
        until: Instant,
    ) -> Result<Value, Failure> {
        if self.connection.is_none() && !matches!(timeout_at(until, self.open()).await, Ok(Ok(())))
        {
            self.connection = None;
            return Err(Failure::NotSent);
        }
        let Some(connection) = self.connection.as_mut() else {
            return Err(Failure::NotSent);
        };
        match timeout_at(until, command.send(connection)).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => match error.kind() {
                ErrorKind::Server(_) | ErrorKind::Extension => {
                    Err(Failure::Refused(error.code().unwrap_or("ERR").to_string()))
                }
                // A broken connection, or a reply that could not be parsed:
                // the command may have run.
                _ => {
                    self.connection = None;
                    Err(Failure::Unknown("conn-lost"))
                }
            },
            Err(_) => {
                self.connection = None;
                Err(Failure::Unknown("timeout"))
            }
        }
    }
}

impl RedisClient {
    /// Deletes the keys of `locks` (and of their per-unit locks, `job:day-3` of
    /// `job`), and their fencing counters, on the Redis at `url`: a test must
    /// not start with a previous run's leftovers, such as the never-expiring
    /// key of a crashed `redis-setnx-expire` client. Other keys are untouched.
    pub async fn prepare(url: &str, locks: &[String]) -> Result<(), RealError> {
        let mut instance = Instance::connect(url).await?;
        let Some(connection) = instance.connection.as_mut() else {
            return Err(connect_error(url, "not connected"));
        };
        let work = async {
            for name in locks {
                let mut keys = vec![lock_key(name), fence_key(name)];
                for pattern in [lock_key(&glob_escape(name)), fence_key(&glob_escape(name))] {
                    keys.extend(scan(connection, &format!("{pattern}:*")).await?);
                }
                redis::cmd("DEL").arg(&keys).query_async::<()>(connection).await?;
            }
            Ok::<_, redis::RedisError>(())
        };
        match timeout_at(Instant::now() + SETUP_TIMEOUT, work).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => {
                Err(RealError::Setup { what: "the Redis lock keys", reason: error.to_string() })
            }
            Err(_) => Err(connect_error(url, format!("no answer within {SETUP_TIMEOUT:?}"))),
        }
    }
}

/// Every key matching `pattern`.
pub(crate) async fn scan(
    connection: &mut MultiplexedConnection,
    pattern: &str,
) -> redis::RedisResult<Vec<String>> {
    let (mut cursor, mut keys) = (0u64, Vec::new());
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(connection)
            .await?;
        keys.extend(batch);
        if next == 0 {
            return Ok(keys);
        }
        cursor = next;
    }
}

/// `name` with Redis glob's special characters escaped.
pub(crate) fn glob_escape(name: &str) -> String {
    let mut escaped = String::with_capacity(name.len());
    for c in name.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// The single-Redis recipes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RedisRecipe {
    /// `SET NX PX`, Lua release and renew; with fencing, `INCR` after the
    /// grant.
    Plain,
    /// `redis-fenced`: one script grants and `INCR`s the fence atomically.
    Fenced,
    /// Broken: release by plain `DEL` (deletes someone else's lock).
    DelRelease,
    /// Broken: `SETNX` then `PEXPIRE` as two commands; a stall between them
    /// is a crash (`crashed-before-expire`) that leaves a lock without TTL.
    SetnxExpire,
    /// Broken: a lost `SET` reply is taken for `busy` (an orphan lock until
    /// its TTL runs out).
    LostReply,
    /// Broken: release by `GET`, a compare in the client, then `DEL`.
    GetDelRelease,
    /// Broken: renew by plain `PEXPIRE`, without the compare.
    BlindRenew,
}

impl RedisRecipe {
    /// The backend's name on the command line (`--backend redis-fenced`).
    pub fn name(self) -> &'static str {
        match self {
            RedisRecipe::Plain => "redis",
            RedisRecipe::Fenced => "redis-fenced",
            RedisRecipe::DelRelease => "redis-del-release",
            RedisRecipe::SetnxExpire => "redis-setnx-expire",
            RedisRecipe::LostReply => "redis-lost-reply",
            RedisRecipe::GetDelRelease => "redis-get-del-release",
            RedisRecipe::BlindRenew => "redis-blind-renew",
        }
    }
}

/// One session of one logical client against a single Redis.
#[derive(Debug)]
pub struct RedisClient {
    recipe: RedisRecipe,
    /// Take a token with each grant (`INCR`); `redis-fenced` always does.
    fencing: bool,
    name: String,
    /// Makes lock values unique across runs and processes sharing a server.
    nonce: u64,
    grants: u64,
    deadline: Duration,
    /// The client's pause point, for the points inside its recipe.
    stall: Stall,
    instance: Instance,
    /// The lost-reply injector: the chance that a reply is thrown away.
    lose_replies: f64,
    rng: SmallRng,
    /// When the operation under way must end.
    until: Instant,
}

impl RedisClient {
    /// Connects to the Redis at `url`.
    pub async fn connect(
        url: &str,
        recipe: RedisRecipe,
        fencing: bool,
        stall: Stall,
        config: &ClientConfig,
    ) -> Result<RedisClient, RealError> {
        let instance = Instance::connect(url).await?;
        RedisClient::with_instance(instance, recipe, fencing, stall, config).await
    }

    /// Connects to wherever `primary` is now. Each connection it opens later (after an error or a
    /// timeout dropped the last one) goes to where the primary is then, so
    /// after a failover it finds the promoted replica.
    pub async fn connect_following(
        primary: PrimaryUrl,
        recipe: RedisRecipe,
        fencing: bool,
        stall: Stall,
        config: &ClientConfig,
    ) -> Result<RedisClient, RealError> {
        let instance = Instance::connect_following(primary).await?;
        RedisClient::with_instance(instance, recipe, fencing, stall, config).await
    }

    async fn with_instance(
        instance: Instance,
        recipe: RedisRecipe,
        fencing: bool,
        stall: Stall,
        config: &ClientConfig,
    ) -> Result<RedisClient, RealError> {
        Ok(RedisClient {
            recipe,
            fencing,
            name: config.name.clone(),
            nonce: rand::random(),
            grants: 0,
            deadline: config.deadline,
            stall,
            instance,
            lose_replies: 0.0,
            rng: SmallRng::seed_from_u64(0),
            until: Instant::now(),
        })
    }

    /// A fault injector in the client, so that the `redis-lost-reply` bug
    /// shows without a network fault: each reply to a grant command (`SET NX
    /// PX`, `SETNX`, the `redis-fenced` script) is thrown away with
    /// probability `chance` (drawn from an RNG seeded with `seed`), after the
    /// command ran on the server, exactly as if the network had lost it. The
    /// client then sees a timeout, and drops its connection as it does on a
    /// real one. A correct recipe records `info`; `redis-lost-reply` takes a
    /// lost `OK` for `busy`, leaving an orphan lock nobody believes it holds.
    ///
    /// Only grant replies are lost: every lost reply of another command is
    /// an `info` operation, which the checkers must allow to take effect at
    /// any later time, and enough of them would explain the orphan locks
    /// away.
    pub fn lose_replies(mut self, chance: f64, seed: u64) -> RedisClient {
        self.lose_replies = if chance.is_nan() { 0.0 } else { chance.clamp(0.0, 1.0) };
        self.rng = SmallRng::seed_from_u64(seed);
        self
    }

    fn next_value(&mut self) -> String {
        self.grants += 1;
        format!("{}:{:016x}:{}", self.name, self.nonce, self.grants)
    }

    /// Sends `command` to the lock server, through the lost-reply injector,
    /// which strikes only the grant commands.
    ///
    /// A pause asked for in flight strikes once the reply is in, before the
    /// client reads it: the command ran, and the client acts on its reply
    /// only when it resumes. The stall is the client's own: the operation's
    /// deadline moves on by as much.
    async fn call(&mut self, command: Command<'_>, until: Instant) -> Result<Value, Failure> {
        let reply = self.instance.call(command, until).await;
        self.until += self.stall.strike(StallPoint::InFlight).await;
        let grant = matches!(
            command,
            Command::SetNxPx { .. } | Command::SetNx { .. } | Command::FencedAcquire { .. }
        );
        if grant && reply.is_ok() && self.lose_replies > 0.0 && self.rng.gen_bool(self.lose_replies)
        {
            self.instance.disconnect();
            return Err(Failure::Unknown("timeout"));
        }
        reply
    }

    async fn acquire_fenced(&mut self, key: &str, ttl_ms: u64, until: Instant) -> Outcome<Grant> {
        let value = self.next_value();
        let (lock, fence) = (lock_key(key), fence_key(key));
        let command =
            Command::FencedAcquire { key: &lock, fence_key: &fence, value: &value, ttl_ms };
        match self.call(command, until).await {
            Ok(Value::Int(0)) => Outcome::Fail("busy".into()),
            Ok(Value::Int(token)) if token > 0 => {
                Outcome::Ok(Grant { fence: Some(token as u64), lease: Some(value) })
            }
            Ok(_) => Outcome::Info("bad-reply".into()),
            Err(failure) => CallError::from(failure).outcome(),
        }
    }
}

impl From<Failure> for CallError {
    fn from(failure: Failure) -> CallError {
        match failure {
            Failure::NotSent => CallError::NotSent,
            Failure::Unknown(reason) => CallError::Unknown(reason),
            Failure::Refused(code) => CallError::Refused(code),
        }
    }
}

impl RedisLock for RedisClient {
    async fn set_nx_px(&mut self, key: &str, value: &str, ttl_ms: u64) -> Result<bool, CallError> {
        let lock = lock_key(key);
        match self.call(Command::SetNxPx { key: &lock, value, ttl_ms }, self.until).await? {
            Value::Okay => Ok(true),
            Value::Nil => Ok(false),
            _ => Err(CallError::BadReply),
        }
    }

    async fn set_nx(&mut self, key: &str, value: &str) -> Result<bool, CallError> {
        let lock = lock_key(key);
        match self.call(Command::SetNx { key: &lock, value }, self.until).await? {
            Value::Int(1) => Ok(true),
            Value::Int(0) => Ok(false),
            _ => Err(CallError::BadReply),
        }
    }

    async fn pexpire(&mut self, key: &str, ttl_ms: u64) -> Result<bool, CallError> {
        let lock = lock_key(key);
        counted(self.call(Command::PExpire { key: &lock, ttl_ms }, self.until).await?)
    }

    async fn get(&mut self, key: &str) -> Result<Option<String>, CallError> {
        let lock = lock_key(key);
        match self.call(Command::Get { key: &lock }, self.until).await? {
            Value::Nil => Ok(None),
            Value::BulkString(bytes) => Ok(Some(String::from_utf8_lossy(&bytes).into_owned())),
            Value::SimpleString(text) => Ok(Some(text)),
            _ => Err(CallError::BadReply),
        }
    }

    async fn incr_fence(&mut self, key: &str) -> Result<u64, CallError> {
        let fence = fence_key(key);
        match self.call(Command::Incr { key: &fence }, self.until).await? {
            Value::Int(token) if token > 0 => Ok(token as u64),
            _ => Err(CallError::BadReply),
        }
    }

    async fn del_if_eq(&mut self, key: &str, value: &str) -> Result<bool, CallError> {
        let lock = lock_key(key);
        counted(self.call(Command::DelIfEq { key: &lock, value }, self.until).await?)
    }

    async fn del(&mut self, key: &str) -> Result<(), CallError> {
        let lock = lock_key(key);
        self.call(Command::Del { key: &lock }, self.until).await?;
        Ok(())
    }

    async fn pexpire_if_eq(
        &mut self,
        key: &str,
        value: &str,
        ttl_ms: u64,
    ) -> Result<bool, CallError> {
        let lock = lock_key(key);
        counted(self.call(Command::PExpireIfEq { key: &lock, value, ttl_ms }, self.until).await?)
    }

    async fn crash_point(&mut self) -> bool {
        let stalled = !self.stall.strike(StallPoint::BetweenCommands).await.is_zero();
        if stalled {
            self.instance.disconnect();
        }
        stalled
    }

    async fn between_commands(&mut self) {
        self.until += self.stall.strike(StallPoint::BetweenCommands).await;
    }
}

/// A compare-and-something script's reply (or `ZREM`'s): 1 = done, 0 = the
/// lock or slot is not ours.
pub(crate) fn counted(reply: Value) -> Result<bool, CallError> {
    match reply {
        Value::Int(1) => Ok(true),
        Value::Int(0) => Ok(false),
        _ => Err(CallError::BadReply),
    }
}

impl RedisRecipe {
    /// The recipe both worlds share, for all but `redis-fenced` (whose
    /// grant is one script: the real world's only), which releases and
    /// renews as the plain one.
    fn variant(self) -> Variant {
        match self {
            RedisRecipe::Plain | RedisRecipe::Fenced => Variant::Plain,
            RedisRecipe::DelRelease => Variant::DelRelease,
            RedisRecipe::SetnxExpire => Variant::SetnxExpire,
            RedisRecipe::LostReply => Variant::LostReply,
            RedisRecipe::GetDelRelease => Variant::GetDelRelease,
            RedisRecipe::BlindRenew => Variant::BlindRenew,
        }
    }
}

impl LockClient for RedisClient {
    async fn acquire(&mut self, key: &str, ttl_ms: u64) -> Outcome<Grant> {
        self.until = Instant::now() + self.deadline;
        if self.recipe == RedisRecipe::Fenced {
            return self.acquire_fenced(key, ttl_ms, self.until).await;
        }
        let (value, fencing) = (self.next_value(), self.fencing);
        redis_lock::acquire(self, self.recipe.variant(), fencing, key, value, ttl_ms).await
    }

    async fn release(&mut self, key: &str, grant: &Grant) -> Outcome<()> {
        self.until = Instant::now() + self.deadline;
        let value = grant.lease.clone().unwrap_or_default();
        redis_lock::release(self, self.recipe.variant(), key, &value).await
    }

    async fn renew(&mut self, key: &str, grant: &Grant, ttl_ms: u64) -> Outcome<()> {
        self.until = Instant::now() + self.deadline;
        let value = grant.lease.clone().unwrap_or_default();
        redis_lock::renew(self, self.recipe.variant(), key, &value, ttl_ms).await
    }

    async fn reset(&mut self) {
        self.instance.disconnect();
    }
}
