//! Consul, simulated: its sessions and KV lock, and the recipe a client
//! runs against them. No Consul binary is packaged for this machine, so
//! this backend lives in the simulator only, in this one file.
//!
//! The model, as Consul documents it:
//! - A session has a TTL. A client renews it; the server invalidates a
//!   session not renewed for its TTL, but may do so up to twice the TTL
//!   late (drawn per renewal here, from the host's seeded randomness). A
//!   restarted server gives every session a fresh 2 × TTL, as a new Consul
//!   leader does.
//! - `PUT /v1/kv/<key>?acquire=<session>` takes a key for a live session if
//!   nobody holds it; `?release=<session>` frees it. The key's `LockIndex`
//!   counts the acquisitions: with the session it is the lock's token.
//! - lock-delay: when a session is invalidated (its TTL ran out, or it was
//!   destroyed), the keys it held cannot be taken for the session's
//!   lock-delay (Consul's default is 15 s, 0 turns it off). A release does
//!   not start one. A holder whose stall is shorter than TTL plus the
//!   lock-delay cannot overlap the next holder; a longer stall can.
//!
//! The recipe: create a session with the run's TTL and the backend's
//! lock-delay, acquire the key with it (`LockIndex` as the token), renew the
//! session, release the key and destroy the session.
//!
//! As a simulated service ([`ConsulServer`]): one host, [`CONSUL_HOST`],
//! listed once in `crate::services`' table. Its requests are
//! `crate::protocol`'s, as every simulated service's; the recipe is written
//! over any [`Caller`], and the servers' state machine ([`Consul`]) takes
//! its randomness as an argument, so that a model checker drives both.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use lockcheck_workloads::{Backend, FaultKind, Grant, Outcome, Recipe, Service};
use turmoil::net::TcpListener;

use crate::host::{serve_requests, Caller, Failure, Knobs, PORT};
use crate::protocol::{Request, Response};
use crate::service::{Hosting, Link, Pending, SimService, SimSession, Started};

/// The Consul server's host name.
const CONSUL_HOST: &str = "consul";

/// Consul as a simulated service: one server on [`CONSUL_HOST`], whose
/// state survives a restart.
pub(crate) struct ConsulServer;

impl SimService for ConsulServer {
    fn keeps(&self, service: Service, _: &[FaultKind]) -> bool {
        service == Service::Consul
    }

    fn lock_hosts(&self, _: Service) -> &'static [&'static str] {
        &[CONSUL_HOST]
    }

    fn start(&self, hosting: &mut Hosting<'_, '_>) -> Started {
        let mut started = Started::on(self.lock_hosts(Service::Consul));
        let state = Rc::new(RefCell::new(Consul::default()));
        let knobs = Knobs::new(hosting.seed(), true);
        hosting.host(&mut started, CONSUL_HOST, knobs, move |knobs| serve(state.clone(), knobs));
        started
    }

    fn session(&self, backend: Backend, _: bool) -> Option<Box<dyn SimSession>> {
        match backend.recipe() {
            Recipe::Consul { lock_delay_ms } => Some(Box::new(ConsulSession { lock_delay_ms })),
            _ => None,
        }
    }
}

/// A client's session of Consul: the lock-delay its Consul sessions ask
/// for. It holds nothing between calls (a grant's lease names its Consul
/// session).
#[derive(Debug, Clone, Copy)]
struct ConsulSession {
    lock_delay_ms: u64,
}

impl SimSession for ConsulSession {
    fn acquire<'a>(
        &'a mut self,
        link: &'a mut Link,
        key: &'a str,
        ttl_ms: u64,
    ) -> Pending<'a, Grant> {
        let (fencing, lock_delay_ms) = (link.fencing, self.lock_delay_ms);
        Box::pin(acquire(&mut link.instances[0], fencing, key, ttl_ms, lock_delay_ms))
    }

    fn release<'a>(
        &'a mut self,
        link: &'a mut Link,
        key: &'a str,
        grant: &'a Grant,
    ) -> Pending<'a, ()> {
        Box::pin(release(&mut link.instances[0], key, grant))
    }

    fn renew<'a>(
        &'a mut self,
        link: &'a mut Link,
        _: &'a str,
        grant: &'a Grant,
        _: u64,
    ) -> Pending<'a, ()> {
        Box::pin(renew(&mut link.instances[0], grant))
    }
}

/// One live session.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Session {
    ttl_ms: u64,
    lock_delay_ms: u64,
    /// When the server invalidates it, unless renewed before.
    reap_at_ms: i64,
}

/// One key of the KV store.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
struct Key {
    /// The session holding it.
    holder: Option<u64>,
    /// How many times it was acquired.
    lock_index: u64,
    /// Nobody may acquire it before this (a lock-delay).
    delayed_until_ms: i64,
}

/// The state of the Consul servers (kept on disk by their Raft log: it
/// survives a restart).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Consul {
    next_session: u64,
    sessions: BTreeMap<u64, Session>,
    keys: BTreeMap<String, Key>,
}

impl Consul {
    /// When a session renewed at `now_ms` is invalidated: after its TTL,
    /// and `late(ttl)` later (up to another TTL).
    fn reap_at(now_ms: i64, ttl_ms: u64, late: impl FnOnce(u64) -> u64) -> i64 {
        now_ms + (ttl_ms + late(ttl_ms).min(ttl_ms)) as i64
    }

    /// Invalidates every session whose time has come, in the order of their
    /// ids: their keys are freed, each behind its lock-delay.
    fn reap(&mut self, now_ms: i64) {
        let due: Vec<u64> = self
            .sessions
            .iter()
            .filter(|(_, session)| session.reap_at_ms <= now_ms)
            .map(|(&id, _)| id)
            .collect();
        for id in due {
            let at = self.sessions[&id].reap_at_ms;
            self.invalidate(id, at);
        }
    }

    /// Ends session `id` at `at_ms`, freeing its keys behind its lock-delay.
    fn invalidate(&mut self, id: u64, at_ms: i64) -> bool {
        let Some(session) = self.sessions.remove(&id) else {
            return false;
        };
        for key in self.keys.values_mut().filter(|key| key.holder == Some(id)) {
            key.holder = None;
            key.delayed_until_ms = at_ms + session.lock_delay_ms as i64;
        }
        true
    }

    /// Answers `request` at `now_ms` on the servers' monotonic clock; a
    /// session renewed is reaped `late(ttl)` after its TTL (the simulator
    /// draws it from its seed). A request Consul does not serve gets no
    /// answer (`None`).
    pub fn handle(
        &mut self,
        request: Request,
        now_ms: i64,
        late: impl FnOnce(u64) -> u64,
    ) -> Option<Response> {
        self.reap(now_ms);
        let done = |done: bool| Response::Int(i64::from(done));
        Some(match request {
            Request::ConsulCreate { ttl_ms, lock_delay_ms } => {
                self.next_session += 1;
                let reap_at_ms = Consul::reap_at(now_ms, ttl_ms, late);
                let session = Session { ttl_ms, lock_delay_ms, reap_at_ms };
                self.sessions.insert(self.next_session, session);
                Response::Int(self.next_session as i64)
            }
            Request::ConsulRenew { session } => match self.sessions.get_mut(&session) {
                Some(live) => {
                    live.reap_at_ms = Consul::reap_at(now_ms, live.ttl_ms, late);
                    done(true)
                }
                None => done(false),
            },
            Request::ConsulDestroy { session } => done(self.invalidate(session, now_ms)),
            Request::ConsulAcquire { key, session } => {
                if !self.sessions.contains_key(&session) {
                    return Some(Response::Nil);
                }
                let key = self.keys.entry(key).or_default();
                match key.holder {
                    Some(holder) if holder == session => Response::Fence(key.lock_index),
                    Some(_) => Response::Nil,
                    None if now_ms < key.delayed_until_ms => Response::Nil,
                    None => {
                        key.holder = Some(session);
                        key.lock_index += 1;
                        Response::Fence(key.lock_index)
                    }
                }
            }
            Request::ConsulRelease { key, session } => match self.keys.get_mut(&key) {
                Some(held) if held.holder == Some(session) => {
                    held.holder = None;
                    done(true)
                }
                _ => done(false),
            },
            _ => return None,
        })
    }

    /// A restarted server (a new leader) gives every session a fresh two
    /// TTLs before it may invalidate it.
    pub fn restarted(&mut self, now_ms: i64) {
        for session in self.sessions.values_mut() {
            session.reap_at_ms = session.reap_at_ms.max(now_ms + 2 * session.ttl_ms as i64);
        }
    }
}

/// The time on the servers' monotonic clock, in ms. Consul is written in
/// Go, whose timers and time comparisons run on the monotonic clock: a jump
/// or drift of the wall clock (the `clock` fault, which moves the host's
/// knobs) neither reaps a session early nor shortens a lock-delay.
fn monotonic_ms() -> i64 {
    turmoil::sim_elapsed().unwrap_or_default().as_millis() as i64
}

/// The software of the Consul host: serves `state` on [`PORT`]. Called
/// again on every restart; the state survives it.
async fn serve(
    state: Rc<RefCell<Consul>>,
    knobs: Rc<Knobs>,
) -> Result<(), Box<dyn std::error::Error>> {
    state.borrow_mut().restarted(monotonic_ms());
    let listener = TcpListener::bind(("0.0.0.0", PORT)).await?;
    loop {
        let (stream, _) = listener.accept().await?;
        let (state, knobs) = (state.clone(), knobs.clone());
        tokio::task::spawn_local(async move {
            serve_requests(stream, &knobs, |request: Request| {
                let late = |ttl_ms| knobs.uniform(0, ttl_ms);
                let reply = state.borrow_mut().handle(request, monotonic_ms(), late);
                std::future::ready(reply)
            })
            .await
        });
    }
}

/// The session a grant was made with.
fn session_of(grant: &Grant) -> u64 {
    grant.lease.as_deref().and_then(|lease| lease.parse().ok()).unwrap_or_default()
}

/// Creates a session and acquires `key` with it: the key's `LockIndex` is
/// the token (when `fencing`). The recipe, over a client's [`Caller`] to the
/// Consul host: one session per grant, its id the grant's lease.
pub async fn acquire<C: Caller>(
    consul: &mut C,
    fencing: bool,
    key: &str,
    ttl_ms: u64,
    lock_delay_ms: u64,
) -> Outcome<Grant> {
    let session = match consul.call(&Request::ConsulCreate { ttl_ms, lock_delay_ms }).await {
        Ok(Response::Int(session)) => session as u64,
        Ok(_) => return Outcome::Info("bad-reply".into()),
        Err(failure) => return failure.outcome(),
    };
    consul.between_commands().await;
    match consul.call(&Request::ConsulAcquire { key: key.into(), session }).await {
        Ok(Response::Fence(lock_index)) => Outcome::Ok(Grant {
            fence: fencing.then_some(lock_index),
            lease: Some(session.to_string()),
        }),
        Ok(Response::Nil) => {
            // Not taken: the session is given up (if that is lost, its TTL
            // ends it).
            let _ = consul.call(&Request::ConsulDestroy { session }).await;
            Outcome::Fail("busy".into())
        }
        Ok(_) => Outcome::Info("bad-reply".into()),
        Err(failure) => failure.outcome(),
    }
}

/// Whether a `Done` reply says it took effect.
fn done(reply: Result<Response, Failure>) -> Outcome<()> {
    match reply {
        Ok(Response::Int(1)) => Outcome::Ok(()),
        Ok(Response::Int(0)) => Outcome::Fail("not-held".into()),
        Ok(_) => Outcome::Info("bad-reply".into()),
        Err(failure) => failure.outcome(),
    }
}

/// Renews the grant's session.
pub async fn renew<C: Caller>(consul: &mut C, grant: &Grant) -> Outcome<()> {
    done(consul.call(&Request::ConsulRenew { session: session_of(grant) }).await)
}

/// Releases `key` and destroys the grant's session.
pub async fn release<C: Caller>(consul: &mut C, key: &str, grant: &Grant) -> Outcome<()> {
    let session = session_of(grant);
    let released = match consul.call(&Request::ConsulRelease { key: key.into(), session }).await {
        Ok(Response::Int(1)) => Outcome::Ok(()),
        Ok(Response::Int(0)) => Outcome::Fail("not-held".into()),
        Ok(_) => return Outcome::Info("bad-reply".into()),
        Err(failure) => return failure.outcome(),
    };
    // The session is done with: destroying it frees nothing more, the key
    // is free already (if the destroy is lost, its TTL ends it).
    let _ = consul.call(&Request::ConsulDestroy { session }).await;
    released
}

#[cfg(test)]
mod tests {
    use super::Consul;
    use crate::host::Knobs;
    use crate::protocol::{Request, Response};

    fn create(consul: &mut Consul, knobs: &Knobs, lock_delay_ms: u64) -> u64 {
        let create = Request::ConsulCreate { ttl_ms: 1000, lock_delay_ms };
        match consul.handle(create, 0, |ttl| knobs.uniform(0, ttl)) {
            Some(Response::Int(session)) => session as u64,
            other => panic!("{other:?}"),
        }
    }

    fn acquire(consul: &mut Consul, now_ms: i64, knobs: &Knobs, session: u64) -> Response {
        let acquire = Request::ConsulAcquire { key: "k".into(), session };
        consul.handle(acquire, now_ms, |ttl| knobs.uniform(0, ttl)).expect("a Consul request")
    }

    fn handle(consul: &mut Consul, request: Request, now_ms: i64, knobs: &Knobs) -> Response {
        consul.handle(request, now_ms, |ttl| knobs.uniform(0, ttl)).expect("a Consul request")
    }

    #[test]
    fn an_invalidated_session_frees_its_key_behind_the_lock_delay_and_the_index_grows() {
        let knobs = Knobs::new(1, true);
        let mut consul = Consul::default();
        let (a, b) = (create(&mut consul, &knobs, 500), create(&mut consul, &knobs, 500));
        assert_eq!(acquire(&mut consul, 0, &knobs, a), Response::Fence(1));
        assert_eq!(acquire(&mut consul, 0, &knobs, b), Response::Nil);
        // Destroyed at 0 ms: the key stays locked for the lock-delay.
        let destroy = Request::ConsulDestroy { session: a };
        assert_eq!(handle(&mut consul, destroy, 0, &knobs), Response::Int(1));
        assert_eq!(acquire(&mut consul, 499, &knobs, b), Response::Nil);
        assert_eq!(acquire(&mut consul, 500, &knobs, b), Response::Fence(2));
        // A release starts no lock-delay.
        let release = Request::ConsulRelease { key: "k".into(), session: b };
        assert_eq!(handle(&mut consul, release, 500, &knobs), Response::Int(1));
        let c = create(&mut consul, &knobs, 500);
        assert_eq!(acquire(&mut consul, 500, &knobs, c), Response::Fence(3));
    }

    #[test]
    fn a_session_not_renewed_is_reaped_between_one_and_two_ttls_by_the_monotonic_clock() {
        for seed in 0..20 {
            let knobs = Knobs::new(seed, true);
            let mut consul = Consul::default();
            let a = create(&mut consul, &knobs, 0);
            assert_eq!(acquire(&mut consul, 0, &knobs, a), Response::Fence(1));
            // A wall-clock jump moves nothing: the servers time by the
            // monotonic clock they are given.
            knobs.clock_offset_ms.set(60_000);
            let renew = Request::ConsulRenew { session: a };
            assert_eq!(handle(&mut consul, renew, 999, &knobs), Response::Int(1));
            // Renewed at 999 ms: alive until 1,999 ms at least, gone at 2,999.
            consul.reap(1998);
            assert!(consul.sessions.contains_key(&a), "seed {seed}: reaped before its TTL");
            consul.reap(2999);
            assert!(!consul.sessions.contains_key(&a), "seed {seed}: alive past two TTLs");
            assert_eq!(consul.keys["k"].holder, None);
        }
    }
}
