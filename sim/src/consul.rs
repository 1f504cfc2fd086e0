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
//! listed once in `crate::services`' table.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use lockcheck_workloads::{Backend, FaultKind, Grant, Outcome, Recipe, Service};
use serde::{Deserialize, Serialize};
use turmoil::net::TcpListener;

use crate::host::{serve_requests, Connection, Failure, Knobs, PORT};
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

/// What a client asks of Consul.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum Request {
    /// `PUT /v1/session/create` with a TTL and a lock-delay.
    Create { ttl_ms: u64, lock_delay_ms: u64 },
    /// `PUT /v1/session/renew/<id>`.
    Renew { session: u64 },
    /// `PUT /v1/session/destroy/<id>`.
    Destroy { session: u64 },
    /// `PUT /v1/kv/<key>?acquire=<session>`.
    Acquire { key: String, session: u64 },
    /// `PUT /v1/kv/<key>?release=<session>`.
    Release { key: String, session: u64 },
}

/// What Consul answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum Reply {
    /// A session created: its id.
    Session(u64),
    /// An acquire: the key's `LockIndex`, or none if it was not taken.
    Acquired(Option<u64>),
    /// A renew, destroy or release: whether it took effect.
    Done(bool),
}

/// One live session.
#[derive(Debug, Clone)]
struct Session {
    ttl_ms: u64,
    lock_delay_ms: u64,
    /// When the server invalidates it, unless renewed before.
    reap_at_ms: i64,
}

/// One key of the KV store.
#[derive(Debug, Clone, Default)]
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
#[derive(Debug, Default)]
struct Consul {
    next_session: u64,
    sessions: BTreeMap<u64, Session>,
    keys: BTreeMap<String, Key>,
}

impl Consul {
    /// When a session renewed at `now_ms` is invalidated: after its TTL,
    /// and up to another TTL late.
    fn reap_at(now_ms: i64, ttl_ms: u64, knobs: &Knobs) -> i64 {
        now_ms + (ttl_ms + knobs.uniform(0, ttl_ms)) as i64
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

    /// Answers `request` at `now_ms` on the servers' monotonic clock.
    fn handle(&mut self, request: Request, now_ms: i64, knobs: &Knobs) -> Reply {
        self.reap(now_ms);
        match request {
            Request::Create { ttl_ms, lock_delay_ms } => {
                self.next_session += 1;
                let reap_at_ms = Consul::reap_at(now_ms, ttl_ms, knobs);
                let session = Session { ttl_ms, lock_delay_ms, reap_at_ms };
                self.sessions.insert(self.next_session, session);
                Reply::Session(self.next_session)
            }
            Request::Renew { session } => match self.sessions.get_mut(&session) {
                Some(live) => {
                    live.reap_at_ms = Consul::reap_at(now_ms, live.ttl_ms, knobs);
                    Reply::Done(true)
                }
                None => Reply::Done(false),
            },
            Request::Destroy { session } => Reply::Done(self.invalidate(session, now_ms)),
            Request::Acquire { key, session } => {
                if !self.sessions.contains_key(&session) {
                    return Reply::Acquired(None);
                }
                let key = self.keys.entry(key).or_default();
                match key.holder {
                    Some(holder) if holder == session => Reply::Acquired(Some(key.lock_index)),
                    Some(_) => Reply::Acquired(None),
                    None if now_ms < key.delayed_until_ms => Reply::Acquired(None),
                    None => {
                        key.holder = Some(session);
                        key.lock_index += 1;
                        Reply::Acquired(Some(key.lock_index))
                    }
                }
            }
            Request::Release { key, session } => match self.keys.get_mut(&key) {
                Some(held) if held.holder == Some(session) => {
                    held.holder = None;
                    Reply::Done(true)
                }
                _ => Reply::Done(false),
            },
        }
    }

    /// A restarted server (a new leader) gives every session a fresh two
    /// TTLs before it may invalidate it.
    fn restarted(&mut self, now_ms: i64) {
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
                let reply = state.borrow_mut().handle(request, monotonic_ms(), &knobs);
                std::future::ready(Some(reply))
            })
            .await
        });
    }
}

/// The session a grant was made with.
fn session_of(grant: &Grant) -> u64 {
    grant.lease.as_deref().and_then(|lease| lease.parse().ok()).unwrap_or_default()
}

/// The recipe, over a client's connection to the Consul host: one
/// session per grant, its id the grant's lease.
async fn call(consul: &mut Connection, request: &Request) -> Result<Reply, Failure> {
    consul.call_as(request).await
}

/// Creates a session and acquires `key` with it: the key's `LockIndex` is
/// the token (when `fencing`).
async fn acquire(
    consul: &mut Connection,
    fencing: bool,
    key: &str,
    ttl_ms: u64,
    lock_delay_ms: u64,
) -> Outcome<Grant> {
    let session = match call(consul, &Request::Create { ttl_ms, lock_delay_ms }).await {
        Ok(Reply::Session(session)) => session,
        Ok(_) => return Outcome::Info("bad-reply".into()),
        Err(failure) => return failure.outcome(),
    };
    consul.between_commands().await;
    match call(consul, &Request::Acquire { key: key.into(), session }).await {
        Ok(Reply::Acquired(Some(lock_index))) => Outcome::Ok(Grant {
            fence: fencing.then_some(lock_index),
            lease: Some(session.to_string()),
        }),
        Ok(Reply::Acquired(None)) => {
            // Not taken: the session is given up (if that is lost, its TTL
            // ends it).
            let _ = call(consul, &Request::Destroy { session }).await;
            Outcome::Fail("busy".into())
        }
        Ok(_) => Outcome::Info("bad-reply".into()),
        Err(failure) => failure.outcome(),
    }
}

/// Renews the grant's session.
async fn renew(consul: &mut Connection, grant: &Grant) -> Outcome<()> {
    match call(consul, &Request::Renew { session: session_of(grant) }).await {
        Ok(Reply::Done(true)) => Outcome::Ok(()),
        Ok(Reply::Done(false)) => Outcome::Fail("not-held".into()),
        Ok(_) => Outcome::Info("bad-reply".into()),
        Err(failure) => failure.outcome(),
    }
}

/// Releases `key` and destroys the grant's session.
async fn release(consul: &mut Connection, key: &str, grant: &Grant) -> Outcome<()> {
    let session = session_of(grant);
    let released = match call(consul, &Request::Release { key: key.into(), session }).await {
        Ok(Reply::Done(true)) => Outcome::Ok(()),
        Ok(Reply::Done(false)) => Outcome::Fail("not-held".into()),
        Ok(_) => return Outcome::Info("bad-reply".into()),
        Err(failure) => return failure.outcome(),
    };
    // The session is done with: destroying it frees nothing more, the key
    // is free already (if the destroy is lost, its TTL ends it).
    let _ = call(consul, &Request::Destroy { session }).await;
    released
}

#[cfg(test)]
mod tests {
    use super::{Consul, Reply, Request};
    use crate::host::Knobs;

    fn create(consul: &mut Consul, knobs: &Knobs, lock_delay_ms: u64) -> u64 {
        match consul.handle(Request::Create { ttl_ms: 1000, lock_delay_ms }, 0, knobs) {
            Reply::Session(session) => session,
            other => panic!("{other:?}"),
        }
    }

    fn acquire(consul: &mut Consul, now_ms: i64, knobs: &Knobs, session: u64) -> Reply {
        consul.handle(Request::Acquire { key: "k".into(), session }, now_ms, knobs)
    }

    #[test]
    fn an_invalidated_session_frees_its_key_behind_the_lock_delay_and_the_index_grows() {
        let knobs = Knobs::new(1, true);
        let mut consul = Consul::default();
        let (a, b) = (create(&mut consul, &knobs, 500), create(&mut consul, &knobs, 500));
        assert_eq!(acquire(&mut consul, 0, &knobs, a), Reply::Acquired(Some(1)));
        assert_eq!(acquire(&mut consul, 0, &knobs, b), Reply::Acquired(None));
        // Destroyed at 0 ms: the key stays locked for the lock-delay.
        let destroy = Request::Destroy { session: a };
        assert_eq!(consul.handle(destroy, 0, &knobs), Reply::Done(true));
        assert_eq!(acquire(&mut consul, 499, &knobs, b), Reply::Acquired(None));
        assert_eq!(acquire(&mut consul, 500, &knobs, b), Reply::Acquired(Some(2)));
        // A release starts no lock-delay.
        let release = Request::Release { key: "k".into(), session: b };
        assert_eq!(consul.handle(release, 500, &knobs), Reply::Done(true));
        let c = create(&mut consul, &knobs, 500);
        assert_eq!(acquire(&mut consul, 500, &knobs, c), Reply::Acquired(Some(3)));
    }

    #[test]
    fn a_session_not_renewed_is_reaped_between_one_and_two_ttls_by_the_monotonic_clock() {
        for seed in 0..20 {
            let knobs = Knobs::new(seed, true);
            let mut consul = Consul::default();
            let a = create(&mut consul, &knobs, 0);
            assert_eq!(acquire(&mut consul, 0, &knobs, a), Reply::Acquired(Some(1)));
            // A wall-clock jump moves nothing: the servers time by the
            // monotonic clock they are given.
            knobs.clock_offset_ms.set(60_000);
            let renew = Request::Renew { session: a };
            assert_eq!(consul.handle(renew, 999, &knobs), Reply::Done(true));
            // Renewed at 999 ms: alive until 1,999 ms at least, gone at 2,999.
            consul.reap(1998);
            assert!(consul.sessions.contains_key(&a), "seed {seed}: reaped before its TTL");
            consul.reap(2999);
            assert!(!consul.sessions.contains_key(&a), "seed {seed}: alive past two TTLs");
            assert_eq!(consul.keys["k"].holder, None);
        }
    }
}
