//! Network faults against real servers, through the proxy ([`crate::Proxy`]):
//! partitions (`partition`) and slow links (`slow-net`, `slow-client`), the
//! network part of the run's one schedule ([`super::schedule`]), each start
//! and stop recorded as a nemesis operation.
//!
//! The shapes of a partition, as the simulator's:
//! * `client`: one client cut off from every lock server (its storage
//!   stays reachable: the stale holder's write still arrives). The client
//!   struck is one in the middle of a long hold, waited for within the
//!   fault's slack (a targeted nemesis, as Jepsen's that partition a
//!   primary; [`Holders`]), else the latest to take a lock it still holds
//!   when the fault starts, if any, else the one the schedule drew;
//! * `isolate-one`: one member of a cluster cut off from the others;
//! * `halves`: a minority of members cut off from the majority (for three
//!   members, the same split as `isolate-one`);
//! * `ring`: each of five or more members reaches only its two neighbours,
//!   so every member sees a majority but no two majorities agree.
//!
//! `slow-net` slows a lock server's links, as the simulator's does: every
//! client's link to one lock server (the one drawn) gets a one-way latency
//! from a tenth of a TTL to a whole TTL, both ways, so requests and replies
//! come late, many after the clients' deadlines. It strikes, as a server
//! fault does, while a holder is in the middle of a long hold (within its
//! slack): its renewals and its release come late. Where the storage is the
//! lock server (the postgres-* backends), its writes are late too.
//!
//! `slow-client` delays every link of one client (aimed as `client` is,
//! else the one drawn), to its lock servers and to its storage, by the same
//! latencies: replies come after the client's deadline, and a write may
//! arrive after the lease it was sent under has ended.
//!
//! A partition holds the links (no resets, nothing lost: a network that
//! drops packets), so a client waits out its deadline as it would on a real
//! partition.

use std::time::Duration;

use lockcheck_checker::{Event, EventType, Function, Process};
use serde_json::json;
use tokio::time::Instant;

use super::proxy::{LinkState, Proxy};
use super::RealError;
use lockcheck_workloads::{Aim, Holders, SharedRecorder};

pub use lockcheck_workloads::Shape;

/// The nodes of a test, by their names in the proxy and the history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    pub clients: u32,
    /// The lock servers clients talk to (`redis-0`, `etcd-2`).
    pub lock_nodes: Vec<String>,
    /// The storage's node, when it is not a lock server.
    pub storage_node: Option<String>,
    /// Cluster members whose peer links go through the proxy (a prefix of
    /// `lock_nodes`); 0 when there is no such cluster.
    pub members: usize,
    /// Each client talks to one member only, its own (client i, member i
    /// modulo their number): a member cut off cuts its clients off too, so
    /// a member partition isolates the member of a holder.
    pub pinned: bool,
}

/// What a network fault does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetKind {
    /// `client` cannot reach any lock server.
    ClientCut { client: u32 },
    /// The members in `minority` cannot reach the others.
    Members { shape: Shape, minority: Vec<usize> },
    /// Every client's link to one lock server, `lock_nodes[server % n]`,
    /// has this one-way latency (slow-net).
    SlowServer { server: u32, delay_ms: u64 },
    /// Every link of `client`, to its lock servers and to its storage, has
    /// this one-way latency (slow-client).
    SlowClient { client: u32, delay_ms: u64 },
}

/// One network fault, from `start` to `end` after the test began.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetFault {
    pub start: Duration,
    pub end: Duration,
    pub kind: NetKind,
    /// How long a fault that strikes a client or a lock server's links may
    /// wait for its aim ([`Holders::aim`]); it is moved on by as long as it
    /// waited.
    pub slack: Duration,
}

/// The lock server whose links `server` (drawn) slows.
fn slowed_node(server: u32, topology: &Topology) -> Option<&String> {
    let nodes = topology.lock_nodes.len().max(1);
    topology.lock_nodes.get(server as usize % nodes)
}

/// The links a fault changes, each as `(from, to)`: a client's links are
/// the ones it dials; members' links are both directions of each pair.
fn links(fault: &NetFault, topology: &Topology) -> Vec<(String, String)> {
    match &fault.kind {
        NetKind::SlowServer { server, .. } => {
            let Some(to) = slowed_node(*server, topology) else { return Vec::new() };
            (0..topology.clients).map(|client| (format!("client-{client}"), to.clone())).collect()
        }
        NetKind::ClientCut { client } => {
            let from = format!("client-{client}");
            topology.lock_nodes.iter().map(|to| (from.clone(), to.clone())).collect()
        }
        NetKind::SlowClient { client, .. } => {
            let from = format!("client-{client}");
            topology
                .lock_nodes
                .iter()
                .chain(&topology.storage_node)
                .map(|to| (from.clone(), to.clone()))
                .collect()
        }
        NetKind::Members { shape: Shape::Ring, .. } => {
            let members = topology.members;
            let mut cuts = Vec::new();
            for a in 0..members {
                for b in (0..members).filter(|&b| b != a) {
                    let apart = a.abs_diff(b);
                    if apart != 1 && apart != members - 1 {
                        cuts.push((topology.lock_nodes[a].clone(), topology.lock_nodes[b].clone()));
                    }
                }
            }
            cuts
        }
        NetKind::Members { minority, .. } => {
            let mut cuts = Vec::new();
            for &inside in minority {
                for outside in (0..topology.members).filter(|at| !minority.contains(at)) {
                    let (a, b) = (&topology.lock_nodes[inside], &topology.lock_nodes[outside]);
                    cuts.push((a.clone(), b.clone()));
                    cuts.push((b.clone(), a.clone()));
                }
            }
            cuts
        }
    }
}

fn record(recorder: &SharedRecorder, fault: &NetFault, topology: &Topology, f: Function) {
    let value = match &fault.kind {
        NetKind::ClientCut { client } => json!({
            "fault": "partition",
            "shape": "client",
            "targets": [format!("client-{client}")],
            "cuts": links(fault, topology),
        }),
        NetKind::Members { shape, minority } => {
            let targets: Vec<&str> =
                minority.iter().map(|&at| topology.lock_nodes[at].as_str()).collect();
            json!({
                "fault": "partition",
                "shape": shape.name(),
                "targets": targets,
                "cuts": links(fault, topology),
            })
        }
        NetKind::SlowServer { server, delay_ms } => json!({
            "fault": "slow-net",
            "targets": slowed_node(*server, topology).into_iter().collect::<Vec<_>>(),
            "delay_ms": delay_ms,
            "links": links(fault, topology),
        }),
        NetKind::SlowClient { client, delay_ms } => json!({
            "fault": "slow-client",
            "targets": [format!("client-{client}")],
            "delay_ms": delay_ms,
            "links": links(fault, topology),
        }),
    };
    recorder.lock().expect("the recorder is never poisoned").record_nemesis(f, value);
}

/// The logical client that took a lock it still holds latest in `events`
/// (an acquire's ok, with no release invoked or operation given up since),
/// among `clients`.
fn current_holder(events: &[Event], clients: u32) -> Option<u32> {
    // Per client: locks held, and the index of its latest grant.
    let mut holding = vec![(0u32, 0usize); clients as usize];
    for event in events {
        let Process::Client(process) = event.process else { continue };
        let Some(logical) = u32::try_from(process.rem_euclid(i64::from(clients.max(1)))).ok()
        else {
            continue;
        };
        let Some((held, latest)) = holding.get_mut(logical as usize) else { continue };
        match (event.event_type, &event.f) {
            (EventType::Ok, Function::Acquire) => {
                *held += 1;
                *latest = event.index as usize;
            }
            (EventType::Invoke, Function::Release) => *held = held.saturating_sub(1),
            (EventType::Info, _) => *held = 0,
            _ => {}
        }
    }
    (0..clients)
        .filter(|&client| holding[client as usize].0 > 0)
        .max_by_key(|&client| holding[client as usize].1)
}

/// Carries out `faults` on `proxy`'s links from `start`; every link is
/// healed at the end of its fault, and all of them when the schedule ends.
pub async fn run(
    faults: &[NetFault],
    proxy: &Proxy,
    topology: &Topology,
    recorder: &SharedRecorder,
    start: Instant,
    holders: &Holders,
) {
    for fault in faults {
        tokio::time::sleep_until(start + fault.start).await;
        let mut fault = fault.clone();
        let cut = matches!(fault.kind, NetKind::ClientCut { .. });
        if let NetKind::SlowServer { .. } = fault.kind {
            // As a server fault: while a holder is in the middle of a long
            // hold, whose renewals and release then come late.
            let waited = holders.aim(Aim::LongHold, 0, fault.slack).await.waited;
            (fault.start, fault.end) = (fault.start + waited, fault.end + waited);
        }
        if let (NetKind::Members { shape: Shape::IsolateOne, minority }, true) =
            (&mut fault.kind, topology.pinned && topology.members > 0)
        {
            // The member of a holder whose work outlasts its lease by two
            // more: its client hears only what that member has, cut off.
            // If the member led, it answers keepalives until it steps down
            // (up to two election timeouts), and the majority's new leader
            // restarts every lease's TTL.
            let aim = Aim::OutlastsLease { margin: holders.lease() * 2 };
            let aimed = holders.aim(aim, 0, fault.slack).await;
            (fault.start, fault.end) = (fault.start + aimed.waited, fault.end + aimed.waited);
            if let Some(holder) = aimed.client {
                *minority = vec![holder as usize % topology.members];
            }
        }
        if let NetKind::ClientCut { client } | NetKind::SlowClient { client, .. } = &mut fault.kind
        {
            // A cut-off holder's lease runs out, unrenewed, within a lease
            // of the cut; the server takes up to half a second more to
            // revoke it (etcd's expiry check), and the next holder is
            // granted just after. The holder must still work then, or it
            // has let go of the lock by itself.
            let aim = match cut {
                true => Aim::OutlastsLease { margin: holders.lease() / 4 },
                false => Aim::LongHold,
            };
            let aimed = holders.aim(aim, *client, fault.slack).await;
            (fault.start, fault.end) = (fault.start + aimed.waited, fault.end + aimed.waited);
            *client = match aimed.client {
                Some(holder) => holder,
                None if cut => {
                    let recorder = recorder.lock().expect("the recorder is never poisoned");
                    current_holder(recorder.events(), topology.clients).unwrap_or(*client)
                }
                None => *client,
            };
        }
        let fault = &fault;
        let state = match fault.kind {
            NetKind::SlowServer { delay_ms, .. } | NetKind::SlowClient { delay_ms, .. } => {
                LinkState::Delay(Duration::from_millis(delay_ms))
            }
            NetKind::ClientCut { .. } | NetKind::Members { .. } => LinkState::Hold,
        };
        let changed = links(fault, topology);
        for (from, to) in &changed {
            proxy.set(from, to, state);
        }
        record(recorder, fault, topology, Function::Start);
        tokio::time::sleep_until(start + fault.end).await;
        for (from, to) in &changed {
            proxy.set(from, to, LinkState::Pass);
        }
        record(recorder, fault, topology, Function::Stop);
    }
    proxy.heal();
}

/// `url` split around its `host:port`: what comes before, the address, and
/// what comes after (`postgres://postgres@`, `127.0.0.1:5432`, `/postgres`).
/// A URL without a port gets its scheme's usual one.
fn split_url(url: &str) -> Option<(&str, String, &str)> {
    let scheme_end = url.find("://")? + 3;
    let rest = &url[scheme_end..];
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let host_start = authority.rfind('@').map_or(0, |at| at + 1);
    let host_port = &authority[host_start..];
    if host_port.is_empty() {
        return None;
    }
    let prefix = &url[..scheme_end + host_start];
    let suffix = &rest[authority_end..];
    let has_port = host_port.rsplit_once(':').is_some_and(|(_, port)| port.parse::<u16>().is_ok());
    let address = if has_port {
        host_port.to_string()
    } else {
        let port = match &url[..scheme_end - 3] {
            "redis" | "rediss" => 6379,
            "postgres" | "postgresql" => 5432,
            "mysql" | "mariadb" => 3306,
            "http" | "https" => 2379,
            _ => return None,
        };
        format!("{host_port}:{port}")
    };
    Some((prefix, address, suffix))
}

/// `url` with its server reached through `proxy`, on the link `from -> to`.
pub fn proxied_url(proxy: &Proxy, from: &str, to: &str, url: &str) -> Result<String, RealError> {
    use std::net::ToSocketAddrs;
    let bad = |reason: String| RealError::Setup { what: "the fault-injecting proxy", reason };
    let (prefix, address, suffix) =
        split_url(url).ok_or_else(|| bad(format!("cannot find the server's address in {url}")))?;
    let target = address
        .to_socket_addrs()
        .map_err(|error| bad(format!("cannot resolve {address} of {url}: {error}")))?
        .next()
        .ok_or_else(|| bad(format!("{address} of {url} resolves to nothing")))?;
    let listener = proxy.route(from, to, target)?;
    Ok(format!("{prefix}{listener}{suffix}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topology(members: usize) -> Topology {
        Topology {
            pinned: false,
            clients: 4,
            lock_nodes: (0..members.max(1)).map(|at| format!("etcd-{at}")).collect(),
            storage_node: Some("storage".to_string()),
            members,
        }
    }

    #[test]
    fn urls_are_split_around_their_server_address() {
        assert_eq!(
            split_url("postgres://postgres@127.0.0.1:5432/postgres"),
            Some(("postgres://postgres@", "127.0.0.1:5432".to_string(), "/postgres"))
        );
        assert_eq!(
            split_url("redis://127.0.0.1:6380"),
            Some(("redis://", "127.0.0.1:6380".to_string(), ""))
        );
        assert_eq!(
            split_url("mysql://root:pw@localhost/test?x=1"),
            Some(("mysql://root:pw@", "localhost:3306".to_string(), "/test?x=1"))
        );
        assert_eq!(split_url("http://[::1]:2379"), Some(("http://", "[::1]:2379".to_string(), "")));
        assert_eq!(split_url("127.0.0.1:6379"), None);
        assert_eq!(split_url("ftp://host/x"), None);
    }

    #[test]
    fn a_members_split_cuts_both_directions_of_every_pair_across_it() {
        let fault = NetFault {
            start: Duration::ZERO,
            end: Duration::from_secs(1),
            kind: NetKind::Members { shape: Shape::IsolateOne, minority: vec![2] },
            slack: Duration::ZERO,
        };
        let ring = NetFault {
            kind: NetKind::Members { shape: Shape::Ring, minority: Vec::new() },
            ..fault.clone()
        };
        let ring_cuts = links(&ring, &topology(5));
        // Five members: each misses the two that are not its neighbours.
        assert_eq!(ring_cuts.len(), 10);
        assert!(ring_cuts.contains(&("etcd-0".into(), "etcd-2".into())));
        assert!(!ring_cuts.contains(&("etcd-0".into(), "etcd-4".into())));
        assert!(!ring_cuts.contains(&("etcd-3".into(), "etcd-4".into())));
        let cuts = links(&fault, &topology(3));
        let expected: Vec<(String, String)> = [
            ("etcd-2", "etcd-0"),
            ("etcd-0", "etcd-2"),
            ("etcd-2", "etcd-1"),
            ("etcd-1", "etcd-2"),
        ]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        assert_eq!(cuts, expected);
        let slow = NetFault { kind: NetKind::SlowClient { client: 1, delay_ms: 100 }, ..fault };
        assert_eq!(links(&slow, &topology(3)).last(), Some(&("client-1".into(), "storage".into())));
        // slow-net: every client's link to the lock server drawn, and no
        // other (the storage's, members' among themselves).
        let server = NetFault { kind: NetKind::SlowServer { server: 4, delay_ms: 100 }, ..slow };
        let expected: Vec<(String, String)> =
            (0..4).map(|client| (format!("client-{client}"), "etcd-1".to_string())).collect();
        assert_eq!(links(&server, &topology(3)), expected);
    }
}
