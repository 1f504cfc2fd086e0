//! The state machines of the simulated services. A host runs one of them
//! behind [`crate::host`]; time comes from the host's own clock, which the
//! nemesis can move (Redis expires keys by its wall clock).

use std::collections::BTreeMap;

use crate::protocol::{Request, Response};

/// One Redis key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Entry {
    value: String,
    /// On the server's clock, in ms; `None`: never expires.
    expires_at_ms: Option<i64>,
}

/// One row of the lease table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
struct Lease {
    owner: Option<String>,
    expires_at_ms: i64,
    fence: u64,
}

/// Everything a simulated server stores: Redis keys, the lease table and the
/// protected resources. A host only ever receives the requests of its role.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ServerState {
    keys: BTreeMap<String, Entry>,
    leases: BTreeMap<String, Lease>,
    resources: BTreeMap<String, (Option<u64>, Option<String>)>,
    /// Semaphores: per key, each member's expiry on the clock it was given.
    semaphores: BTreeMap<String, BTreeMap<String, i64>>,
    /// The resource storage rejects stale tokens (`UPDATE … WHERE fence <= $t`).
    pub fenced_storage: bool,
}

/// What a Redis primary ships to its replica after a write: the key's state
/// as the write left it (its expiry stays on the primary's clock, as Redis
/// propagates absolute expiry times).
#[derive(Debug, Clone)]
pub struct KeyChange {
    key: String,
    entry: Option<Entry>,
}

impl ServerState {
    pub fn new(fenced_storage: bool) -> Self {
        ServerState { fenced_storage, ..ServerState::default() }
    }

    /// The Redis key `request` would write, if any.
    pub fn redis_key(request: &Request) -> Option<&str> {
        match request {
            Request::SetNxPx { key, .. }
            | Request::SetNx { key, .. }
            | Request::Expire { key, .. }
            | Request::Del { key }
            | Request::DelIfEq { key, .. }
            | Request::PExpireIfEq { key, .. }
            | Request::Incr { key } => Some(key),
            _ => None,
        }
    }

    /// What a primary ships after answering `response` to a request on
    /// `key`: the key's new state if the request changed it, else nothing
    /// (a refused `SET NX`, a release of someone else's lock).
    pub fn change(&self, key: &str, response: &Response) -> Option<KeyChange> {
        let changed = match response {
            Response::Ok => true,
            Response::Int(n) => *n != 0,
            _ => false,
        };
        changed.then(|| KeyChange { key: key.to_string(), entry: self.keys.get(key).cloned() })
    }

    /// Applies a change shipped by the primary (on a replica).
    pub fn apply(&mut self, change: KeyChange) {
        match change.entry {
            Some(entry) => self.keys.insert(change.key, entry),
            None => self.keys.remove(&change.key),
        };
    }

    /// Rewrites every Redis value, lease owner and semaphore member through
    /// `rename` (`None`: left as it is): a model checker's symmetry
    /// reduction relabels the clients whose attempts those values name.
    pub fn rename_values(&mut self, rename: impl Fn(&str) -> Option<String>) {
        let values = self.keys.values_mut().map(|entry| &mut entry.value);
        let owners = self.leases.values_mut().filter_map(|lease| lease.owner.as_mut());
        for value in values.chain(owners) {
            if let Some(renamed) = rename(value) {
                *value = renamed;
            }
        }
        for members in self.semaphores.values_mut() {
            *members = std::mem::take(members)
                .into_iter()
                .map(|(member, expiry)| (rename(&member).unwrap_or(member), expiry))
                .collect();
        }
    }

    /// Whether the Redis key `key` is set and never expires
    /// (a lock only its holder's release can free).
    pub fn held_forever(&self, key: &str) -> bool {
        matches!(self.keys.get(key), Some(Entry { expires_at_ms: None, .. }))
    }

    /// The live value of a key: an expired key is gone (Redis expires lazily
    /// on access, by its own clock).
    fn live(&mut self, key: &str, now_ms: i64) -> Option<&mut Entry> {
        let expired = matches!(self.keys.get(key), Some(Entry { expires_at_ms: Some(at), .. }) if *at <= now_ms);
        if expired {
            self.keys.remove(key);
        }
        self.keys.get_mut(key)
    }

    pub fn handle(&mut self, request: Request, now_ms: i64) -> Response {
        match request {
            Request::SetNxPx { key, value, ttl_ms } => {
                if self.live(&key, now_ms).is_some() {
                    return Response::Nil;
                }
                self.keys.insert(key, Entry { value, expires_at_ms: Some(now_ms + ttl_ms as i64) });
                Response::Ok
            }
            Request::SetNx { key, value } => {
                if self.live(&key, now_ms).is_some() {
                    return Response::Int(0);
                }
                self.keys.insert(key, Entry { value, expires_at_ms: None });
                Response::Int(1)
            }
            Request::Expire { key, ttl_ms } => match self.live(&key, now_ms) {
                Some(entry) => {
                    entry.expires_at_ms = Some(now_ms + ttl_ms as i64);
                    Response::Int(1)
                }
                None => Response::Int(0),
            },
            Request::Get { key } => {
                Response::Value(self.live(&key, now_ms).map(|entry| entry.value.clone()))
            }
            Request::Del { key } => {
                let existed = self.live(&key, now_ms).is_some();
                self.keys.remove(&key);
                Response::Int(i64::from(existed))
            }
            Request::DelIfEq { key, value } => match self.live(&key, now_ms) {
                Some(entry) if entry.value == value => {
                    self.keys.remove(&key);
                    Response::Int(1)
                }
                _ => Response::Int(0),
            },
            Request::PExpireIfEq { key, value, ttl_ms } => match self.live(&key, now_ms) {
                Some(entry) if entry.value == value => {
                    entry.expires_at_ms = Some(now_ms + ttl_ms as i64);
                    Response::Int(1)
                }
                _ => Response::Int(0),
            },
            Request::Incr { key } => {
                let entry = self
                    .keys
                    .entry(key)
                    .or_insert(Entry { value: "0".into(), expires_at_ms: None });
                let next = entry.value.parse::<i64>().unwrap_or(0) + 1;
                entry.value = next.to_string();
                Response::Int(next)
            }
            Request::LeaseAcquireAt { name, owner, ttl_ms, now_ms: client_now_ms } => {
                self.handle(Request::LeaseAcquire { name, owner, ttl_ms }, client_now_ms)
            }
            Request::LeaseAcquire { name, owner, ttl_ms } => {
                let lease = self.leases.entry(name).or_default();
                if lease.owner.is_some() && lease.expires_at_ms >= now_ms {
                    return Response::Nil;
                }
                lease.owner = Some(owner);
                lease.expires_at_ms = now_ms + ttl_ms as i64;
                lease.fence += 1;
                Response::Fence(lease.fence)
            }
            Request::LeaseRelease { name, owner, fence } => match self.leases.get_mut(&name) {
                Some(lease) if lease.owner.as_deref() == Some(&owner) && lease.fence == fence => {
                    lease.owner = None;
                    Response::Int(1)
                }
                _ => Response::Int(0),
            },
            Request::LeaseRenew { name, owner, fence, ttl_ms } => {
                match self.leases.get_mut(&name) {
                    Some(lease)
                        if lease.owner.as_deref() == Some(&owner)
                            && lease.fence == fence
                            && lease.expires_at_ms >= now_ms =>
                    {
                        lease.expires_at_ms = now_ms + ttl_ms as i64;
                        Response::Int(1)
                    }
                    _ => Response::Int(0),
                }
            }
            Request::SemAcquire { key, member, ttl_ms, limit, now_ms: at } => {
                let now = at.unwrap_or(now_ms);
                let members = self.semaphores.entry(key).or_default();
                members.retain(|_, expires_at| *expires_at > now);
                if members.len() as u32 >= limit {
                    return Response::Nil;
                }
                members.insert(member, now + ttl_ms as i64);
                Response::Ok
            }
            Request::SemHeartbeat { key, member, ttl_ms, now_ms: at } => {
                let now = at.unwrap_or(now_ms);
                match self.semaphores.get_mut(&key).and_then(|members| members.get_mut(&member)) {
                    Some(expires_at) => {
                        *expires_at = now + ttl_ms as i64;
                        Response::Int(1)
                    }
                    None => Response::Int(0),
                }
            }
            Request::SemRelease { key, member } => {
                let removed =
                    self.semaphores.get_mut(&key).and_then(|members| members.remove(&member));
                Response::Int(i64::from(removed.is_some()))
            }
            Request::Write { key, fence, data } => {
                let stored = self.resources.entry(key).or_default();
                match (self.fenced_storage, fence, stored.0) {
                    (true, Some(token), Some(accepted)) if token < accepted => Response::StaleFence,
                    (true, Some(token), _) => {
                        *stored = (Some(token), Some(data));
                        Response::Ok
                    }
                    _ => {
                        *stored = (stored.0, Some(data));
                        Response::Ok
                    }
                }
            }
            // etcd's requests go to the etcd members (`crate::etcd`),
            // Consul's to its host (`crate::consul`), S3's to an S3 run's
            // storage host (`crate::s3`).
            Request::LeaseGrant { .. }
            | Request::LeaseKeepAlive { .. }
            | Request::LeaseRevoke { .. }
            | Request::TryLock { .. }
            | Request::Lock { .. }
            | Request::LockLine { .. }
            | Request::LockHeld { .. }
            | Request::WatchDelete { .. }
            | Request::Campaign { .. }
            | Request::Resign { .. }
            | Request::ConsulCreate { .. }
            | Request::ConsulRenew { .. }
            | Request::ConsulDestroy { .. }
            | Request::ConsulAcquire { .. }
            | Request::ConsulRelease { .. }
            | Request::ObjectGet { .. }
            | Request::ObjectPut { .. } => Response::Nil,
            Request::Read { key } => {
                let (fence, data) = self.resources.get(&key).cloned().unwrap_or_default();
                Response::Read { fence, data }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(key: &str, value: &str, ttl_ms: u64) -> Request {
        Request::SetNxPx { key: key.into(), value: value.into(), ttl_ms }
    }

    #[test]
    fn keys_expire_by_the_server_clock() {
        let mut state = ServerState::default();
        assert_eq!(state.handle(set("l", "a", 100), 0), Response::Ok);
        assert_eq!(state.handle(set("l", "b", 100), 99), Response::Nil);
        assert_eq!(state.handle(set("l", "b", 100), 100), Response::Ok);
        let release = Request::DelIfEq { key: "l".into(), value: "a".into() };
        assert_eq!(
            state.handle(release, 150),
            Response::Int(0),
            "a's release must not delete b's lock"
        );
    }

    #[test]
    fn fenced_storage_rejects_older_tokens_only() {
        let mut state = ServerState::new(true);
        let write = |fence, data: &str| Request::Write {
            key: "r".into(),
            fence: Some(fence),
            data: data.into(),
        };
        assert_eq!(state.handle(write(5, "x"), 0), Response::Ok);
        assert_eq!(state.handle(write(5, "y"), 0), Response::Ok);
        assert_eq!(state.handle(write(4, "z"), 0), Response::StaleFence);
        assert_eq!(
            state.handle(Request::Read { key: "r".into() }, 0),
            Response::Read { fence: Some(5), data: Some("y".into()) }
        );
    }

    #[test]
    fn the_lease_table_uses_the_database_clock() {
        let mut state = ServerState::default();
        let acquire = |owner: &str| Request::LeaseAcquire {
            name: "l".into(),
            owner: owner.into(),
            ttl_ms: 100,
        };
        assert_eq!(state.handle(acquire("a"), 0), Response::Fence(1));
        assert_eq!(state.handle(acquire("b"), 50), Response::Nil);
        assert_eq!(state.handle(acquire("b"), 101), Response::Fence(2));
        let stale = Request::LeaseRelease { name: "l".into(), owner: "a".into(), fence: 1 };
        assert_eq!(state.handle(stale, 120), Response::Int(0));
    }
}
