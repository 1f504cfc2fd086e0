//! What simulated clients and servers say to each other: one JSON object per
//! line over turmoil's simulated TCP.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Request {
    /// `SET key value NX PX ttl`
    SetNxPx {
        key: String,
        value: String,
        ttl_ms: u64,
    },
    /// `SETNX key value` (no expiry: the broken two-step recipe)
    SetNx {
        key: String,
        value: String,
    },
    /// `PEXPIRE key ttl`
    Expire {
        key: String,
        ttl_ms: u64,
    },
    /// `DEL key`
    Del {
        key: String,
    },
    /// The Lua compare-and-delete release.
    DelIfEq {
        key: String,
        value: String,
    },
    /// The Lua compare-then-PEXPIRE renewal.
    PExpireIfEq {
        key: String,
        value: String,
        ttl_ms: u64,
    },
    /// `INCR key`
    Incr {
        key: String,
    },
    /// The lease table's conditional UPDATE … RETURNING fence.
    LeaseAcquire {
        name: String,
        owner: String,
        ttl_ms: u64,
    },
    /// The broken lease table: the client sends its own `now`.
    LeaseAcquireAt {
        name: String,
        owner: String,
        ttl_ms: u64,
        now_ms: i64,
    },
    LeaseRelease {
        name: String,
        owner: String,
        fence: u64,
    },
    LeaseRenew {
        name: String,
        owner: String,
        fence: u64,
        ttl_ms: u64,
    },
    /// The semaphore script: drop expired members, count, add if below the
    /// limit. `now_ms`: the caller's clock (`None`: the server's own TIME).
    SemAcquire {
        key: String,
        member: String,
        ttl_ms: u64,
        limit: u32,
        now_ms: Option<i64>,
    },
    /// `ZADD XX`: a holder's heartbeat, if it still has its slot.
    SemHeartbeat {
        key: String,
        member: String,
        ttl_ms: u64,
        now_ms: Option<i64>,
    },
    /// `ZREM`
    SemRelease {
        key: String,
        member: String,
    },
    /// etcd: grant a lease of this TTL; the reply is its id.
    LeaseGrant {
        ttl_ms: u64,
    },
    /// etcd: one keepalive of a lease (1: extended, 0: gone or expired).
    LeaseKeepAlive {
        lease: u64,
    },
    /// etcd: revoke a lease, deleting its keys (1: it existed).
    LeaseRevoke {
        lease: u64,
    },
    /// etcd's TryLock: create the lock key bound to the lease unless a key
    /// exists; the reply is the key's create revision, or nil if held.
    TryLock {
        name: String,
        lease: u64,
    },
    /// etcd's `Mutex.Lock`: put the lock key bound to the lease whatever
    /// the line holds; the reply is a [`Response::Line`] (no key: the lease
    /// is gone).
    Lock {
        name: String,
        lease: u64,
    },
    /// etcd: where the lock key created at revision `own` stands in its
    /// line, as a [`Response::Line`].
    LockLine {
        name: String,
        own: u64,
    },
    /// etcd: whether `lease`'s key of lock `name` is there (`Int(1)`),
    /// through the leader's log, or, `serializable`, from what the member
    /// asked has applied.
    LockHeld {
        name: String,
        lease: u64,
        serializable: bool,
    },
    /// etcd: watch the lock key created at revision `created` for its
    /// deletion, for at most `wait_ms`: `Int(2)` gone already, `Int(1)`
    /// deleted while watched, `Int(0)` still there.
    WatchDelete {
        name: String,
        created: u64,
        wait_ms: u64,
    },
    /// etcd's `Campaign`: put the candidate's key, bound to the lease, in
    /// election `name`'s line, and answer once it is first (elected) or
    /// after `wait_ms`, as a [`Response::Line`] (no key: the lease is gone).
    Campaign {
        name: String,
        lease: u64,
        wait_ms: u64,
    },
    /// etcd's `Resign`: delete the leader's key of election `name`, created
    /// at `own` and bound to `lease`, if it is still there (`Int(1)`).
    Resign {
        name: String,
        lease: u64,
        own: u64,
    },
    /// Consul: `PUT /v1/session/create` with a TTL and a lock-delay; the
    /// reply is the session's id (`Int`).
    ConsulCreate {
        ttl_ms: u64,
        lock_delay_ms: u64,
    },
    /// Consul: `PUT /v1/session/renew/<id>` (`Int(1)`: renewed).
    ConsulRenew {
        session: u64,
    },
    /// Consul: `PUT /v1/session/destroy/<id>` (`Int(1)`: it was live).
    ConsulDestroy {
        session: u64,
    },
    /// Consul: `PUT /v1/kv/<key>?acquire=<session>`: the key's `LockIndex`
    /// (`Fence`), or `Nil` if it was not taken.
    ConsulAcquire {
        key: String,
        session: u64,
    },
    /// Consul: `PUT /v1/kv/<key>?release=<session>` (`Int(1)`: released).
    ConsulRelease {
        key: String,
        session: u64,
    },
    /// A write to the protected resource, with the token when there is one.
    Write {
        key: String,
        fence: Option<u64>,
        data: String,
    },
    Read {
        key: String,
    },
    /// `GET key`
    Get {
        key: String,
    },
    /// S3: `GET` an object (the storage host of an S3 run, `crate::s3`).
    ObjectGet {
        key: String,
    },
    /// S3: `PUT` an object, `If-Match` the ETag given, or `If-None-Match: *`
    /// when `absent`.
    ObjectPut {
        key: String,
        body: String,
        if_match: Option<String>,
        absent: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Response {
    Ok,
    /// Redis nil, or an UPDATE that matched no row.
    Nil,
    Int(i64),
    /// A lease granted, with its token.
    Fence(u64),
    /// The resource's state.
    Read {
        fence: Option<u64>,
        data: Option<String>,
    },
    /// The fenced storage refused a token older than one it accepted.
    StaleFence,
    /// An etcd member that is not the leader: ask this one instead.
    NotLeader {
        leader: Option<u32>,
    },
    /// A Redis key's value, or nil.
    Value(Option<String>),
    /// An S3 object's ETag and body, or none (404).
    Object(Option<(String, String)>),
    /// An S3 `PUT`: done, or refused because its condition did not hold (412).
    Put {
        done: bool,
    },
    /// etcd: a lock key's place in its line: its create revision (none:
    /// gone), and the create revision of the key just before it (none: it
    /// is first, the holder).
    Line {
        own: Option<u64>,
        before: Option<u64>,
    },
}
