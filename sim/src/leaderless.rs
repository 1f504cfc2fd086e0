//! A leaderless store of three nodes (`sim-leaderless-quorum`), Cassandra's
//! or Dynamo's shape: no leader orders the writes, and a client reads two
//! nodes and writes two (R = W = 2, so R + W > N = 3: every read meets the
//! last acknowledged write). It is not linearizable, and a lock on it
//! is broken.
//!
//! - Each node keeps, per lock, the newest cell it was sent: a version (the
//!   lock's token), the time of the write, the owner and its lease's end.
//!   Newest means the largest version, then the latest write (last write
//!   wins), then the owner's name. A node stores every write it is sent and
//!   acknowledges it, whether or not the write is newer than what it has.
//! - The recipe: read two nodes and take the newest cell. If it has a live
//!   owner, the lock is busy. Else write the version plus one with the
//!   client as owner to every node: two acknowledgements grant the lock,
//!   and that version is the token. A renew or release reads the same way,
//!   and writes the same version again if the client is still the owner.
//!
//! Two clients that read the same version before either writes both write
//! the next one, both get two acknowledgements, and both hold the lock with
//! the same token. A write acknowledged by one node only (its client
//! records an unknown outcome) stays there, for whichever later read
//! happens to meet it. The nodes keep their cells across a restart (a
//! commit log), and time is the hosts' monotonic clock: what breaks this
//! store is the missing order of writes, not time.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use lockcheck_workloads::{Backend, FaultKind, Grant, Outcome, Recipe, Service};
use serde::{Deserialize, Serialize};
use turmoil::net::TcpListener;

use crate::host::{serve_requests, Failure, Knobs, PORT};
use crate::service::{lease_of, Hosting, Link, Pending, SimService, SimSession, Started};

/// The nodes, in the order a fault's target counts them.
const NODES: [&str; 3] = ["node-0", "node-1", "node-2"];

/// How many nodes a read must hear from, and a write be acknowledged by.
const QUORUM: usize = 2;

/// The three nodes as a simulated service.
pub(crate) struct Leaderless;

impl SimService for Leaderless {
    fn keeps(&self, service: Service, _: &[FaultKind]) -> bool {
        service == Service::Leaderless { nodes: NODES.len() as u32 }
    }

    fn lock_hosts(&self, _: Service) -> &'static [&'static str] {
        &NODES
    }

    fn start(&self, hosting: &mut Hosting<'_, '_>) -> Started {
        let mut started = Started::on(&NODES);
        for &node in &NODES {
            let cells = Rc::new(RefCell::new(BTreeMap::new()));
            let knobs = Knobs::new(hosting.seed(), true);
            hosting.host(&mut started, node, knobs, move |knobs| serve(cells.clone(), knobs));
        }
        started
    }

    fn session(&self, backend: Backend, _: bool) -> Option<Box<dyn SimSession>> {
        match backend.recipe() {
            Recipe::Quorum => Some(Box::new(QuorumSession)),
            _ => None,
        }
    }
}

/// One lock's cell, as a node stores it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
struct Cell {
    /// The lock's token: how many grants were written before this one.
    version: u64,
    /// When it was written, in ns of simulated time (last write wins).
    written_ns: u64,
    /// Its owner and when the owner's lease ends (ms); none: released.
    owner: Option<(String, i64)>,
}

impl Cell {
    /// Its owner, if the lease is live at `now_ms`.
    fn live_owner(&self, now_ms: i64) -> Option<&str> {
        self.owner.as_ref().filter(|(_, end)| *end > now_ms).map(|(owner, _)| owner.as_str())
    }
}

/// What a client asks a node.
#[derive(Debug, Clone, Serialize, Deserialize)]
enum Request {
    Read { key: String },
    Write { key: String, cell: Cell },
}

/// What a node answers.
#[derive(Debug, Clone, Serialize, Deserialize)]
enum Reply {
    Cell(Option<Cell>),
    Stored,
}

/// A node's software: keeps the newest cell of each lock (across restarts).
async fn serve(
    cells: Rc<RefCell<BTreeMap<String, Cell>>>,
    knobs: Rc<Knobs>,
) -> Result<(), Box<dyn std::error::Error>> {
    let listener = TcpListener::bind(("0.0.0.0", PORT)).await?;
    loop {
        let (stream, _) = listener.accept().await?;
        let (cells, knobs) = (cells.clone(), knobs.clone());
        tokio::task::spawn_local(async move {
            serve_requests(stream, &knobs, |request: Request| {
                let mut cells = cells.borrow_mut();
                let reply = match request {
                    Request::Read { key } => Reply::Cell(cells.get(&key).cloned()),
                    Request::Write { key, cell } => {
                        let kept = cells.entry(key).or_insert_with(|| cell.clone());
                        if cell > *kept {
                            *kept = cell;
                        }
                        Reply::Stored
                    }
                };
                std::future::ready(Some(reply))
            })
            .await
        });
    }
}

/// Simulated time, in ns, as every host and client reads it.
fn now_ns() -> u64 {
    turmoil::sim_elapsed().unwrap_or_default().as_nanos() as u64
}

/// A client's session: it holds nothing between calls (a grant's lease is
/// its owner's name).
#[derive(Debug, Clone, Copy)]
struct QuorumSession;

/// The nodes in the order a client asks them: its own first.
fn order(link: &Link) -> impl Iterator<Item = usize> {
    let first = link.number();
    (0..NODES.len()).map(move |step| (first + step) % NODES.len())
}

/// The newest cell of `key` on a quorum of nodes (none: no node has one),
/// or the outcome of a read that heard from too few.
async fn read<T>(link: &mut Link, key: &str) -> Result<Option<Cell>, Outcome<T>> {
    let mut heard = 0;
    let mut newest: Option<Cell> = None;
    for node in order(link).collect::<Vec<_>>() {
        let request = Request::Read { key: key.into() };
        if let Ok(Reply::Cell(cell)) = link.instances[node].call_as(&request).await {
            heard += 1;
            newest = newest.max(cell);
            if heard == QUORUM {
                return Ok(newest);
            }
        }
    }
    // A read changes nothing: too few answers is a plain failure.
    Err(Outcome::Fail("unavailable".into()))
}

/// Writes `cell` to every node: granted by a quorum of acknowledgements;
/// otherwise unknown if any node may have stored it.
async fn write(link: &mut Link, key: &str, cell: Cell) -> Outcome<()> {
    link.instances[link.number() % NODES.len()].between_commands().await;
    let (mut acknowledged, mut maybe) = (0, false);
    for node in order(link).collect::<Vec<_>>() {
        let request = Request::Write { key: key.into(), cell: cell.clone() };
        match link.instances[node].call_as(&request).await {
            Ok(Reply::Stored) => acknowledged += 1,
            Ok(Reply::Cell(_)) | Err(Failure::Unknown) => maybe = true,
            Err(Failure::NotSent) => {}
        }
    }
    match acknowledged {
        n if n >= QUORUM => Outcome::Ok(()),
        0 if !maybe => Outcome::Fail("unavailable".into()),
        // Stored on fewer nodes than a quorum: there it stays.
        _ => Outcome::Info("no-quorum".into()),
    }
}

impl SimSession for QuorumSession {
    fn acquire<'a>(
        &'a mut self,
        link: &'a mut Link,
        key: &'a str,
        ttl_ms: u64,
    ) -> Pending<'a, Grant> {
        let owner = link.next_value();
        Box::pin(async move {
            let newest = match read(link, key).await {
                Ok(newest) => newest,
                Err(failed) => return failed,
            };
            let now_ms = (now_ns() / 1_000_000) as i64;
            if newest.as_ref().and_then(|cell| cell.live_owner(now_ms)).is_some() {
                return Outcome::Fail("busy".into());
            }
            let version = newest.map_or(0, |cell| cell.version) + 1;
            let owned = Some((owner.clone(), now_ms + ttl_ms as i64));
            let cell = Cell { version, written_ns: now_ns(), owner: owned };
            let fence = link.fencing.then_some(version);
            write(link, key, cell).await.map(|()| Grant { fence, lease: Some(owner) })
        })
    }

    fn release<'a>(
        &'a mut self,
        link: &'a mut Link,
        key: &'a str,
        grant: &'a Grant,
    ) -> Pending<'a, ()> {
        Box::pin(rewrite(link, key, lease_of(grant), None))
    }

    fn renew<'a>(
        &'a mut self,
        link: &'a mut Link,
        key: &'a str,
        grant: &'a Grant,
        ttl_ms: u64,
    ) -> Pending<'a, ()> {
        Box::pin(rewrite(link, key, lease_of(grant), Some(ttl_ms)))
    }
}

/// Renews (a TTL) or releases (none) `owner`'s lock: the same version again,
/// if a quorum's newest cell still names `owner` with a live lease.
async fn rewrite(link: &mut Link, key: &str, owner: String, ttl_ms: Option<u64>) -> Outcome<()> {
    let newest = match read(link, key).await {
        Ok(newest) => newest,
        Err(failed) => return failed,
    };
    let now_ms = (now_ns() / 1_000_000) as i64;
    let Some(cell) = newest.filter(|cell| cell.live_owner(now_ms) == Some(owner.as_str())) else {
        return Outcome::Fail("not-held".into());
    };
    let owned = ttl_ms.map(|ttl_ms| (owner, now_ms + ttl_ms as i64));
    write(link, key, Cell { version: cell.version, written_ns: now_ns(), owner: owned }).await
}

#[cfg(test)]
mod tests {
    use super::Cell;

    #[test]
    fn the_newest_cell_is_the_largest_version_then_the_latest_write() {
        let cell = |version, written_ns, owner: &str| Cell {
            version,
            written_ns,
            owner: Some((owner.to_string(), 1_000)),
        };
        assert!(cell(2, 0, "a") > cell(1, 9, "b"));
        assert!(cell(1, 9, "a") > cell(1, 5, "b"));
        let released = Cell { version: 1, written_ns: 6, owner: None };
        assert!(released > cell(1, 5, "b"));
        assert_eq!(cell(1, 0, "a").live_owner(999), Some("a"));
        assert_eq!(cell(1, 0, "a").live_owner(1_000), None);
    }
}
