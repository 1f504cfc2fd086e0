//! A Redis lock for lockcheck's exec driver (docs/exec-protocol.md, version 1),
//! in Rust: the same lock as `examples/python/redis_lock.py`.
//!
//! The Redis recipe of docs/guide.md#redis, with the fencing token taken atomically:
//!
//! * acquire: one Lua script does `SET lock:<key> <value> NX PX <ttl>` and, if
//!   that took the lock, `INCR fence:<key>`; the new count is the fencing token;
//! * release: Lua compare-and-delete (only our own value is deleted);
//! * renew: Lua compare-then-`PEXPIRE` (only our own lock is extended).
//!
//! With `--del-release` it is BROKEN on purpose, like
//! `examples/python/redis_lock_del_release.py`: release is a plain `DEL`, which
//! deletes the lock whoever holds it now. A holder that stalled past its TTL
//! wakes up and deletes the lock another client was granted meanwhile, so a
//! third client takes it while the second still holds it; lockcheck finds this
//! under the `pause` fault (docs/truth-table.md).
//!
//! The value is unique per grant (client, random nonce, counter) and is the
//! lease lockcheck sends back with renew and release. Redis is
//! `LOCKCHECK_REDIS_URL`; key names start with `LOCKCHECK_KEY_PREFIX` (empty by
//! default). A Redis timeout or a lost connection leaves the outcome unknown:
//! the reply is `info`, and lockcheck goes on with a fresh process.
//!
//! Build and run it under lockcheck:
//!
//! ```text
//! cargo build --example redis_lock
//! lockcheck check --backend exec --servers redis --nemesis pause -- target/debug/examples/redis_lock
//! lockcheck check --backend exec --servers redis --nemesis pause -- target/debug/examples/redis_lock --del-release
//! ```

use std::io::{self, BufRead, Write};
use std::process::ExitCode;
use std::time::Duration;

use redis::{Connection, ErrorKind, RedisError, RedisResult, Script};
use serde_json::{json, Value};

const PROTOCOL: u64 = 1;

const ACQUIRE: &str = r#"
if redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
  return redis.call("incr", KEYS[2])
end
return 0
"#;
const RELEASE: &str = r#"
if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) end
return 0
"#;
const RENEW: &str = r#"
if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) end
return 0
"#;

/// The Redis connection, made on the first lock request so that `hello`
/// never waits for Redis.
struct Redis {
    client: redis::Client,
    /// Connect and socket timeout, well inside lockcheck's deadline.
    timeout: Duration,
    connection: Option<Connection>,
}

impl Redis {
    fn connection(&mut self) -> RedisResult<&mut Connection> {
        if self.connection.is_none() {
            let connection = self.client.get_connection_with_timeout(self.timeout)?;
            connection.set_read_timeout(Some(self.timeout))?;
            connection.set_write_timeout(Some(self.timeout))?;
            self.connection = Some(connection);
        }
        Ok(self.connection.as_mut().expect("connected just above"))
    }
}

/// The lock recipe: one method per request of the protocol.
struct Lock {
    redis: Redis,
    prefix: String,
    /// This process's part of every lock value: client number and a nonce.
    name: String,
    grants: u64,
    /// The broken variant: release by plain `DEL`.
    del_release: bool,
    acquire_script: Script,
    release_script: Script,
    renew_script: Script,
}

impl Lock {
    /// The lock as the environment lockcheck sets up describes it.
    fn from_env(del_release: bool) -> Result<Lock, String> {
        let url = std::env::var("LOCKCHECK_REDIS_URL")
            .map_err(|_| "LOCKCHECK_REDIS_URL is not set (run with --servers redis)")?;
        let client = redis::Client::open(url.as_str()).map_err(|e| format!("{url}: {e}"))?;
        // Socket timeouts well inside lockcheck's deadline, so that a slow
        // Redis is our own info reply rather than lockcheck's timeout. A
        // quarter: a request may wait out both the connection's setup (the
        // redis crate does not report a timeout there) and its own command.
        let deadline_ms: u64 = std::env::var("LOCKCHECK_DEADLINE_MS")
            .ok()
            .and_then(|ms| ms.parse().ok())
            .unwrap_or(1000);
        let client_number = std::env::var("LOCKCHECK_CLIENT").unwrap_or_else(|_| "?".into());
        Ok(Lock {
            redis: Redis {
                client,
                timeout: Duration::from_millis((deadline_ms / 4).max(10)),
                connection: None,
            },
            prefix: std::env::var("LOCKCHECK_KEY_PREFIX").unwrap_or_default(),
            name: format!("client-{client_number}:{:016x}", rand::random::<u64>()),
            grants: 0,
            del_release,
            acquire_script: Script::new(ACQUIRE),
            release_script: Script::new(RELEASE),
            renew_script: Script::new(RENEW),
        })
    }

    fn lock_key(&self, key: &str) -> String {
        format!("{}lock:{key}", self.prefix)
    }

    fn fence_key(&self, key: &str) -> String {
        format!("{}fence:{key}", self.prefix)
    }

    fn acquire(&mut self, key: &str, ttl_ms: u64) -> RedisResult<Value> {
        self.grants += 1;
        let value = format!("{}:{}", self.name, self.grants);
        let mut invocation = self.acquire_script.key(self.lock_key(key));
        invocation.key(self.fence_key(key)).arg(&value).arg(ttl_ms);
        let fence: i64 = invocation.invoke(self.redis.connection()?)?;
        if fence == 0 {
            return Ok(fail("busy"));
        }
        Ok(json!({"type": "ok", "fence": fence, "lease": value}))
    }

    fn release(&mut self, key: &str, lease: &str) -> RedisResult<Value> {
        if self.del_release {
            // BROKEN: deletes the lock even when it is someone else's by now.
            let lock_key = self.lock_key(key);
            redis::cmd("DEL").arg(lock_key).exec(self.redis.connection()?)?;
            return Ok(json!({"type": "ok"}));
        }
        let mut invocation = self.release_script.key(self.lock_key(key));
        invocation.arg(lease);
        Ok(ok_or_not_held(invocation.invoke(self.redis.connection()?)?))
    }

    fn renew(&mut self, key: &str, lease: &str, ttl_ms: u64) -> RedisResult<Value> {
        let mut invocation = self.renew_script.key(self.lock_key(key));
        invocation.arg(lease).arg(ttl_ms);
        Ok(ok_or_not_held(invocation.invoke(self.redis.connection()?)?))
    }
}

fn ok_or_not_held(count: i64) -> Value {
    if count == 1 {
        json!({"type": "ok"})
    } else {
        fail("not-held")
    }
}

fn fail(error: &str) -> Value {
    json!({"type": "fail", "error": error})
}

/// The reply to one request (without its id).
fn handle(lock: &mut Lock, request: &Value) -> Value {
    let op = request["op"].as_str().unwrap_or_default();
    if op == "hello" {
        if request["protocol"].as_u64() != Some(PROTOCOL) {
            return fail("protocol");
        }
        return json!({"type": "ok"});
    }
    let (Some(key), ttl_ms) = (request["key"].as_str(), request["ttl_ms"].as_u64()) else {
        return fail("unsupported");
    };
    let lease = request["lease"].as_str().unwrap_or_default();
    let result = match (op, ttl_ms) {
        ("acquire", Some(ttl_ms)) => lock.acquire(key, ttl_ms),
        ("renew", Some(ttl_ms)) => lock.renew(key, lease, ttl_ms),
        ("release", _) => lock.release(key, lease),
        _ => return fail("unsupported"),
    };
    result.unwrap_or_else(|error| redis_failure(op, key, &error))
}

/// What a Redis error says about the request's effect.
fn redis_failure(op: &str, key: &str, error: &RedisError) -> Value {
    if let ErrorKind::Server(_) = error.kind() {
        // Redis answered with an error: it did not take effect.
        return json!({"type": "fail", "error": format!("redis-error:{error}")});
    }
    // Sent or not, answered or not: nobody knows whether it took effect.
    eprintln!("{op} {key}: {error}");
    let why = if error.is_timeout() { "timeout" } else { "conn-lost" };
    json!({"type": "info", "error": why})
}

fn run(del_release: bool) -> Result<(), String> {
    let mut lock = Lock::from_env(del_release)?;
    let mut stdout = io::stdout().lock();
    for line in io::stdin().lock().lines() {
        let line = line.map_err(|e| format!("reading a request: {e}"))?;
        let request: Value =
            serde_json::from_str(&line).map_err(|e| format!("request {line:?}: {e}"))?;
        let mut reply = handle(&mut lock, &request);
        reply["id"] = request["id"].clone();
        // One line per reply, flushed at once: a buffered reply is a missing one.
        writeln!(stdout, "{reply}")
            .and_then(|()| stdout.flush())
            .map_err(|e| format!("writing a reply: {e}"))?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let del_release = match args.as_slice() {
        [] => false,
        [flag] if flag == "--del-release" => true,
        _ => {
            eprintln!("usage: redis_lock [--del-release]");
            return ExitCode::from(2);
        }
    };
    match run(del_release) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("redis_lock: {error}");
            ExitCode::FAILURE
        }
    }
}
