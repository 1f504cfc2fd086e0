//! A lock table kept by a primary and one replica, in the two replication
//! modes that have a primary, each a simulated service of its own
//! ([`Pair`]): shipping asynchronously (`sim-primary-reads`, safe, and
//! `sim-replica-reads`, broken) and synchronously (`sim-sync-replica`).
//!
//! The table holds, per lock, its holder (an owner and a lease's end) and
//! a counter of grants, the token. Time is the hosts' monotonic clock, so
//! a wall-clock fault moves nothing here: what breaks these services is
//! how a write reaches the replica, not time.
//!
//! - Every write goes to the primary, which applies it and ships the whole
//!   table as it left it, numbered, to the replica. The replica keeps the
//!   newest table it was shipped; a replica that restarts starts empty and
//!   catches up with the next shipment.
//! - Asynchronously, a shipment leaves a lag after its write and the primary
//!   answers at once. Synchronously, the primary answers a write only once
//!   the replica has acknowledged it, and takes the next write only then: a
//!   replica that is down stops every write.
//! - An acquire is decided by the primary (take the lock if nobody holds
//!   it), or, in the broken recipe, by the replica: it reads its own copy,
//!   and if that copy says the lock is free it has the primary claim it for
//!   the client, whoever holds it there.
//!
//! The table is durable (a database's): a restarted primary keeps it.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use lockcheck_workloads::{Backend, FaultKind, Grant, Outcome, Recipe, Service};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};
use turmoil::net::TcpListener;

use crate::host::{serve_requests, Connection, Failure, Knobs, PORT, TICK};
use crate::service::{lease_of, Hosting, Link, Pending, SimService, SimSession, Started};

/// The pair's hosts: the primary first, then the replica.
const PAIR_HOSTS: [&str; 2] = ["primary", "replica"];

/// The pair as a simulated service, shipping as it says. Its clients run
/// [`PairSession`]: acquires at the primary, or at the replica.
pub(crate) struct Pair(pub(crate) Shipping);

impl SimService for Pair {
    fn keeps(&self, service: Service, _: &[FaultKind]) -> bool {
        service == Service::PrimaryReplica { sync: self.0 == Shipping::Sync }
    }

    fn lock_hosts(&self, _: Service) -> &'static [&'static str] {
        &PAIR_HOSTS
    }

    fn start(&self, hosting: &mut Hosting<'_, '_>) -> Started {
        start_pair(hosting, self.0)
    }

    fn session(&self, backend: Backend, _: bool) -> Option<Box<dyn SimSession>> {
        match backend.recipe() {
            Recipe::PrimaryReplica { replica_decides } => {
                Some(Box::new(PairSession { replica_decides }))
            }
            _ => None,
        }
    }
}

/// How the primary ships its writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shipping {
    /// Two ticks to a quarter of the TTL after the write; the primary
    /// answers at once.
    Async,
    /// At once; the primary answers once the replica has the write.
    Sync,
}

/// What a client, or the replica, asks.
#[derive(Debug, Clone, Serialize, Deserialize)]
enum Request {
    /// Take `key` for `owner` if nobody holds it (on whichever host is asked).
    Acquire { key: String, owner: String, ttl_ms: u64 },
    /// The replica's claim on the primary: `key` is `owner`'s, whoever
    /// holds it there.
    Claim { key: String, owner: String, ttl_ms: u64 },
    /// Extend `owner`'s lease on `key`, if it still holds it.
    Renew { key: String, owner: String, ttl_ms: u64 },
    /// Free `key`, if `owner` holds it.
    Release { key: String, owner: String },
    /// The primary's table after its write number `seq`.
    Ship { seq: u64, table: Table },
}

/// What a host answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum Reply {
    /// Granted, with the lock's token.
    Granted(u64),
    Busy,
    /// A renew or release: whether it took effect.
    Done(bool),
    Shipped,
}

/// One lock's row.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Lock {
    /// Its holder and when its lease ends, in ms of monotonic time.
    holder: Option<(String, i64)>,
    /// How many times it was granted: the token of the last grant.
    token: u64,
}

/// Every lock's row, as a host keeps it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Table(BTreeMap<String, Lock>);

impl Table {
    /// Whether someone holds `key` at `now_ms`.
    fn held(&self, key: &str, now_ms: i64) -> bool {
        self.0
            .get(key)
            .is_some_and(|lock| lock.holder.as_ref().is_some_and(|(_, end)| *end > now_ms))
    }

    /// Gives `key` to `owner`: its next token.
    fn grant(&mut self, key: String, owner: String, ttl_ms: u64, now_ms: i64) -> u64 {
        let lock = self.0.entry(key).or_default();
        lock.token += 1;
        lock.holder = Some((owner, now_ms + ttl_ms as i64));
        lock.token
    }

    /// Applies a write at `now_ms`: the reply, and whether it changed the table.
    fn write(&mut self, request: Request, now_ms: i64) -> (Reply, bool) {
        match request {
            Request::Acquire { key, owner, ttl_ms } => match self.held(&key, now_ms) {
                true => (Reply::Busy, false),
                false => (Reply::Granted(self.grant(key, owner, ttl_ms, now_ms)), true),
            },
            Request::Claim { key, owner, ttl_ms } => {
                (Reply::Granted(self.grant(key, owner, ttl_ms, now_ms)), true)
            }
            Request::Renew { key, owner, ttl_ms } => {
                let held = self.held(&key, now_ms);
                match self.0.get_mut(&key).and_then(|lock| lock.holder.as_mut()) {
                    Some((holder, end)) if held && *holder == owner => {
                        *end = now_ms + ttl_ms as i64;
                        (Reply::Done(true), true)
                    }
                    _ => (Reply::Done(false), false),
                }
            }
            Request::Release { key, owner } => match self.0.get_mut(&key) {
                Some(lock) if lock.holder.as_ref().is_some_and(|(holder, _)| *holder == owner) => {
                    lock.holder = None;
                    (Reply::Done(true), true)
                }
                _ => (Reply::Done(false), false),
            },
            Request::Ship { .. } => (Reply::Shipped, false),
        }
    }
}

/// The hosts' monotonic clock, in ms.
fn monotonic_ms() -> i64 {
    turmoil::sim_elapsed().unwrap_or_default().as_millis() as i64
}

/// What each host of the pair keeps, across restarts.
#[derive(Debug, Default)]
struct Tables {
    /// The primary's table and its last write's number.
    primary: (Table, u64),
    /// The newest table the replica was shipped, and its number.
    replica: (Table, u64),
}

/// Starts the pair on the simulation, shipping as `shipping` says.
fn start_pair(hosting: &mut Hosting<'_, '_>, shipping: Shipping) -> Started {
    let pair = Rc::new(RefCell::new(Tables::default()));
    let ttl_ms = hosting.ttl_ms;
    let deadline = Duration::from_millis((ttl_ms / 4).clamp(20, 2000));
    let lag_ms = match shipping {
        Shipping::Async => {
            (2 * TICK.as_millis() as u64, (ttl_ms / 4).max(2 * TICK.as_millis() as u64))
        }
        Shipping::Sync => (0, 0),
    };
    let mut started = Started::on(&PAIR_HOSTS);
    let (primary, knobs) = (pair.clone(), Knobs::new(hosting.seed(), true));
    hosting.host(&mut started, PAIR_HOSTS[0], knobs, move |knobs| {
        serve_primary(primary.clone(), knobs, shipping, lag_ms, deadline)
    });
    let (replica, knobs) = (pair, Knobs::new(hosting.seed(), true));
    hosting.host(&mut started, PAIR_HOSTS[1], knobs, move |knobs| {
        serve_replica(replica.clone(), knobs, deadline)
    });
    started
}

/// One write waiting to be shipped: when it may leave, and who waits for
/// the replica's acknowledgement (synchronously).
struct Shipment {
    at: tokio::time::Instant,
    seq: u64,
    table: Table,
    acknowledged: Option<oneshot::Sender<()>>,
}

/// The primary's software: applies writes, ships them in order, and
/// answers (synchronously, once shipped).
async fn serve_primary(
    pair: Rc<RefCell<Tables>>,
    knobs: Rc<Knobs>,
    shipping: Shipping,
    lag_ms: (u64, u64),
    deadline: Duration,
) -> Result<(), Box<dyn std::error::Error>> {
    // The shipments live (and die) with this host's software; a write not
    // shipped yet when the primary crashes reaches the replica with the
    // next one, which carries the whole table.
    let (ship, unshipped) = mpsc::unbounded_channel();
    tokio::task::spawn_local(shipper(unshipped, deadline));
    // One write at a time: synchronously, the next waits for the replica.
    let writing = Rc::new(tokio::sync::Mutex::new(()));
    let listener = TcpListener::bind(("0.0.0.0", PORT)).await?;
    loop {
        let (stream, _) = listener.accept().await?;
        let (pair, knobs, ship, writing) =
            (pair.clone(), knobs.clone(), ship.clone(), writing.clone());
        tokio::task::spawn_local(async move {
            serve_requests(stream, &knobs.clone(), |request: Request| {
                let (pair, knobs, ship, writing) =
                    (pair.clone(), knobs.clone(), ship.clone(), writing.clone());
                async move {
                    let _one_at_a_time = writing.lock().await;
                    let shipment = {
                        let mut pair = pair.borrow_mut();
                        let (table, seq) = &mut pair.primary;
                        let (reply, changed) = table.write(request, monotonic_ms());
                        if !changed {
                            return Some(reply);
                        }
                        *seq += 1;
                        let lag = Duration::from_millis(knobs.uniform(lag_ms.0, lag_ms.1));
                        (reply, *seq, table.clone(), lag)
                    };
                    let (reply, seq, table, lag) = shipment;
                    let at = tokio::time::Instant::now() + lag;
                    match shipping {
                        Shipping::Async => {
                            let _ = ship.send(Shipment { at, seq, table, acknowledged: None });
                        }
                        Shipping::Sync => {
                            let (acknowledged, shipped) = oneshot::channel();
                            let shipment =
                                Shipment { at, seq, table, acknowledged: Some(acknowledged) };
                            let _ = ship.send(shipment);
                            // Until the replica has it: no answer while it is down.
                            shipped.await.ok()?;
                        }
                    }
                    Some(reply)
                }
            })
            .await
        });
    }
}

/// Ships each write to the replica in order, each when its lag is over,
/// again and again until the replica acknowledges it.
async fn shipper(mut unshipped: mpsc::UnboundedReceiver<Shipment>, deadline: Duration) {
    let mut replica = Connection::new(PAIR_HOSTS[1], deadline);
    while let Some(shipment) = unshipped.recv().await {
        tokio::time::sleep_until(shipment.at).await;
        let request = Request::Ship { seq: shipment.seq, table: shipment.table };
        while !matches!(replica.call_as(&request).await, Ok(Reply::Shipped)) {
            tokio::time::sleep(TICK).await;
        }
        if let Some(acknowledged) = shipment.acknowledged {
            let _ = acknowledged.send(());
        }
    }
}

/// The replica's software: keeps the newest table it was shipped, and
/// (for the broken recipe) decides acquires from it, claiming the lock on
/// the primary for the client when its copy says it is free.
async fn serve_replica(
    pair: Rc<RefCell<Tables>>,
    knobs: Rc<Knobs>,
    deadline: Duration,
) -> Result<(), Box<dyn std::error::Error>> {
    // A restarted replica starts empty and catches up with the next shipment.
    pair.borrow_mut().replica = (Table::default(), 0);
    let listener = TcpListener::bind(("0.0.0.0", PORT)).await?;
    loop {
        let (stream, _) = listener.accept().await?;
        let (pair, knobs) = (pair.clone(), knobs.clone());
        tokio::task::spawn_local(async move {
            let primary = Rc::new(RefCell::new(Some(Connection::new(PAIR_HOSTS[0], deadline))));
            serve_requests(stream, &knobs.clone(), |request: Request| {
                let (pair, primary) = (pair.clone(), primary.clone());
                async move {
                    match request {
                        Request::Ship { seq, table } => {
                            let mut pair = pair.borrow_mut();
                            if seq > pair.replica.1 {
                                pair.replica = (table, seq);
                            }
                            Some(Reply::Shipped)
                        }
                        Request::Acquire { key, owner, ttl_ms } => {
                            if pair.borrow().replica.0.held(&key, monotonic_ms()) {
                                return Some(Reply::Busy);
                            }
                            let claim = Request::Claim { key, owner, ttl_ms };
                            // One request at a time on a client's connection:
                            // its claim is the only one under way.
                            let mut to_primary = primary.borrow_mut().take()?;
                            let claimed = to_primary.call_as(&claim).await.ok();
                            *primary.borrow_mut() = Some(to_primary);
                            claimed
                        }
                        _ => None, // a replica takes no other write
                    }
                }
            })
            .await
        });
    }
}

/// A client's session of the pair: where it sends its acquires (the
/// primary, or the replica).
#[derive(Debug, Clone, Copy)]
struct PairSession {
    replica_decides: bool,
}

impl SimSession for PairSession {
    fn acquire<'a>(
        &'a mut self,
        link: &'a mut Link,
        key: &'a str,
        ttl_ms: u64,
    ) -> Pending<'a, Grant> {
        let owner = link.next_value();
        let fencing = link.fencing;
        let host = usize::from(self.replica_decides);
        Box::pin(async move {
            let request = Request::Acquire { key: key.into(), owner: owner.clone(), ttl_ms };
            match link.instances[host].call_as(&request).await {
                Ok(Reply::Granted(token)) => {
                    Outcome::Ok(Grant { fence: fencing.then_some(token), lease: Some(owner) })
                }
                Ok(Reply::Busy) => Outcome::Fail("busy".into()),
                Ok(_) => Outcome::Info("bad-reply".into()),
                Err(failure) => failure.outcome(),
            }
        })
    }

    fn release<'a>(
        &'a mut self,
        link: &'a mut Link,
        key: &'a str,
        grant: &'a Grant,
    ) -> Pending<'a, ()> {
        let request = Request::Release { key: key.into(), owner: lease_of(grant) };
        Box::pin(async move { done(link.instances[0].call_as(&request).await) })
    }

    fn renew<'a>(
        &'a mut self,
        link: &'a mut Link,
        key: &'a str,
        grant: &'a Grant,
        ttl_ms: u64,
    ) -> Pending<'a, ()> {
        let request = Request::Renew { key: key.into(), owner: lease_of(grant), ttl_ms };
        Box::pin(async move { done(link.instances[0].call_as(&request).await) })
    }
}

/// A renew's or release's outcome.
fn done(reply: Result<Reply, Failure>) -> Outcome<()> {
    match reply {
        Ok(Reply::Done(true)) => Outcome::Ok(()),
        Ok(Reply::Done(false)) => Outcome::Fail("not-held".into()),
        Ok(_) => Outcome::Info("bad-reply".into()),
        Err(failure) => failure.outcome(),
    }
}

#[cfg(test)]
mod tests {
    use super::{Reply, Request, Table};

    fn acquire(table: &mut Table, owner: &str, now_ms: i64) -> Reply {
        let request = Request::Acquire { key: "k".into(), owner: owner.into(), ttl_ms: 100 };
        table.write(request, now_ms).0
    }

    #[test]
    fn the_primary_grants_a_free_lock_once_and_counts_its_tokens() {
        let mut table = Table::default();
        assert_eq!(acquire(&mut table, "a", 0), Reply::Granted(1));
        assert_eq!(acquire(&mut table, "b", 50), Reply::Busy);
        let renew = Request::Renew { key: "k".into(), owner: "b".into(), ttl_ms: 100 };
        assert_eq!(table.write(renew, 60), (Reply::Done(false), false));
        // The lease ran out: the lock is free again, with the next token.
        assert_eq!(acquire(&mut table, "b", 100), Reply::Granted(2));
        let release = Request::Release { key: "k".into(), owner: "a".into() };
        assert_eq!(table.write(release, 110), (Reply::Done(false), false));
        let release = Request::Release { key: "k".into(), owner: "b".into() };
        assert_eq!(table.write(release, 110), (Reply::Done(true), true));
    }

    #[test]
    fn a_claim_takes_the_lock_whoever_holds_it() {
        let mut table = Table::default();
        assert_eq!(acquire(&mut table, "a", 0), Reply::Granted(1));
        // The replica's copy said free: the primary takes its word.
        let claim = Request::Claim { key: "k".into(), owner: "b".into(), ttl_ms: 100 };
        assert_eq!(table.write(claim, 10), (Reply::Granted(2), true));
        let renew = Request::Renew { key: "k".into(), owner: "a".into(), ttl_ms: 100 };
        assert_eq!(table.write(renew, 20).0, Reply::Done(false));
    }
}
