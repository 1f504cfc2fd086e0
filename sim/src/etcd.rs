//! `sim-etcd`: a cluster of 3 or 5 members that agree by Raft, serving
//! etcd's leases and its TryLock.
//!
//! What etcd's safety rests on is modelled faithfully; the rest is left out:
//! * Every change (lease grant, keepalive, revoke, lock) is a log entry,
//!   committed once a majority of members store it, and applied in log
//!   order by every member. A member that cannot reach a majority never
//!   commits, so a minority side never grants.
//! * Elections: a member that hears no leader for a random timeout stands
//!   for a new term; a vote goes only to a candidate whose log is at least
//!   as up to date, so a new leader holds every committed entry. A leader
//!   commits only entries of its own term (the old ones with them), and
//!   steps down when it has not heard from a majority for an election
//!   timeout (etcd's check-quorum).
//! * Leases expire by the leader's monotonic clock (a clock jump does not
//!   move it). Only the leader times them; it proposes the revocation of an
//!   expired lease, and a new leader restarts every lease's TTL (etcd's
//!   lessor promotion), so no lease ends before a holder's TTL has passed.
//! * The term, the vote, the log and the store survive a crash (etcd's WAL
//!   and backend are on disk and fsynced).
//! * Reads of whether a lease's key is there: a linearizable one is a log
//!   entry like any change, answered once a majority committed it; a
//!   serializable one is answered at once by the member asked, from what it
//!   has applied, leader or not. An old leader cut off from the others
//!   answers it from its own state, without confirming that it still leads,
//!   exactly as a follower that has fallen behind does: a key the majority
//!   has since deleted is still there.
//!
//! The clients of the recipes that check their key with a read
//! (`sim-etcd-linearizable-check`, `sim-etcd-serializable-check`) each
//! reach the cluster through one member of their own, as a client given one
//! endpoint does: a partition among the members takes a member's clients
//! to its side ([`Started::pinned`]), and a serializable read is answered
//! by that member.
//!
//! Members talk over UDP on [`PEER_PORT`], so partitions and crashes drop
//! their messages; clients over the JSON-lines TCP protocol on
//! [`crate::host::PORT`]. A follower answers `NotLeader` with the leader it
//! knows; it does not forward.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use tokio::sync::{oneshot, Notify};
use turmoil::net::{TcpListener, TcpStream, UdpSocket};

use lockcheck_workloads::etcd_lock::Check;
use lockcheck_workloads::{Backend, FaultKind, Recipe, Service};

use crate::etcd_client::EtcdClient;
use crate::host::{serve_requests, Knobs, PORT};
use crate::protocol::{Request, Response};
use crate::service::{Hosting, SimService, SimSession, Started};

/// The members' hosts; a 3-member cluster uses the first three.
pub const ETCD_HOSTS: [&str; 5] = ["etcd-0", "etcd-1", "etcd-2", "etcd-3", "etcd-4"];

/// etcd as a simulated service: a cluster of 3 or 5 members (as the
/// catalogue's service says) on the first of [`ETCD_HOSTS`], each keeping
/// its disk across a restart.
pub(crate) struct EtcdCluster;

impl SimService for EtcdCluster {
    fn keeps(&self, service: Service, _: &[FaultKind]) -> bool {
        matches!(service, Service::Etcd { .. })
    }

    fn lock_hosts(&self, service: Service) -> &'static [&'static str] {
        let all: &'static [&'static str] = &ETCD_HOSTS;
        match service {
            Service::Etcd { members } => all.get(..members as usize).unwrap_or(all),
            _ => all,
        }
    }

    /// Each member draws its own seed, then its host's knobs theirs.
    fn start(&self, hosting: &mut Hosting<'_, '_>) -> Started {
        let hosts = self.lock_hosts(hosting.backend.service());
        let mut started = Started::on(hosts);
        // A holder that checks with a read talks to its own member only, as
        // a client given one endpoint does: the read is that member's, and
        // the rest reaches the leader through it.
        started.pinned = match hosting.backend.recipe() {
            Recipe::Etcd { check, .. } => check != Check::Deadline,
            _ => false,
        };
        let quorum = hosting.backend.commits_alone().then_some(1);
        for (me, &host) in hosts.iter().enumerate() {
            let member = Member::new(me, hosts.len(), quorum, hosting.seed());
            let member = Rc::new(RefCell::new(member));
            let knobs = Knobs::new(hosting.seed(), true);
            hosting
                .host(&mut started, host, knobs, move |knobs| serve(member.clone(), hosts, knobs));
        }
        started
    }

    fn session(&self, backend: Backend, fencing: bool) -> Option<Box<dyn SimSession>> {
        match backend.recipe() {
            Recipe::Etcd { waits, check, .. } => {
                Some(Box::new(EtcdClient::new(fencing, waits).checking(check)))
            }
            Recipe::EtcdElection => Some(Box::new(EtcdClient::campaigning(fencing))),
            _ => None,
        }
    }
}

/// Where members talk Raft to each other.
pub const PEER_PORT: u16 = 7001;

/// The leader's heartbeat, and the range of election timeouts (etcd's
/// defaults scaled down to the simulator's sub-second TTLs).
const HEARTBEAT_MS: i64 = 50;
const ELECTION_MS: (i64, i64) = (300, 600);
/// At most this many entries in one append.
const BATCH: usize = 64;

/// A change to the store, as the log carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum Command {
    /// A new leader's first entry: it commits the entries of earlier terms.
    Noop,
    Grant {
        ttl_ms: u64,
    },
    KeepAlive {
        lease: u64,
    },
    Revoke {
        lease: u64,
    },
    TryLock {
        name: String,
        lease: u64,
    },
    Lock {
        name: String,
        lease: u64,
    },
    /// A linearizable read of a key's place in its line.
    Line {
        name: String,
        own: u64,
    },
    /// A linearizable read of whether a lease's key of a lock is there.
    Held {
        name: String,
        lease: u64,
    },
    /// An election's leader steps down: its key (created at `own`, bound
    /// to `lease`) is deleted, if it is still there.
    Resign {
        name: String,
        lease: u64,
        own: u64,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Entry {
    term: u64,
    command: Command,
}

/// Raft's messages between members.
#[derive(Debug, Clone, Serialize, Deserialize)]
enum Peer {
    Vote {
        term: u64,
        candidate: usize,
        last_index: u64,
        last_term: u64,
    },
    VoteReply {
        term: u64,
        from: usize,
        granted: bool,
    },
    Append {
        term: u64,
        leader: usize,
        prev_index: u64,
        prev_term: u64,
        entries: Vec<Entry>,
        commit: u64,
    },
    /// `matched`: on success, the follower's log matches up to here; on
    /// failure, where the leader should look next (its last index).
    AppendReply {
        term: u64,
        from: usize,
        success: bool,
        matched: u64,
    },
}

/// The replicated state machine: leases and the lock keys bound to them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
struct Store {
    /// etcd's revision: one more with every change to a key.
    revision: u64,
    next_lease: u64,
    /// Lease id → its TTL.
    leases: BTreeMap<u64, u64>,
    /// Lock name → its line: each key's create revision and the lease it
    /// is bound to. The first key holds the lock; a lock with no key has no
    /// line.
    locks: BTreeMap<String, BTreeMap<u64, u64>>,
}

impl Store {
    /// Applies one committed command; the reply is computed later by the
    /// leader, which alone knows the lease timers.
    fn apply(&mut self, command: &Command) -> Response {
        match command {
            Command::Noop => Response::Ok,
            Command::Grant { ttl_ms } => {
                self.next_lease += 1;
                self.leases.insert(self.next_lease, *ttl_ms);
                Response::Int(self.next_lease as i64)
            }
            Command::KeepAlive { lease } => {
                Response::Int(i64::from(self.leases.contains_key(lease)))
            }
            Command::Revoke { lease } => {
                if self.leases.remove(lease).is_none() {
                    return Response::Int(0);
                }
                let mut deleted = false;
                for line in self.locks.values_mut() {
                    let before = line.len();
                    line.retain(|_, bound| bound != lease);
                    deleted |= line.len() != before;
                }
                self.locks.retain(|_, line| !line.is_empty());
                if deleted {
                    self.revision += 1;
                }
                Response::Int(1)
            }
            Command::TryLock { name, lease } => {
                // Ours already (a retried request): the same key, as etcd's
                // Lock finds the key its session put.
                if let Some((&revision, bound)) = self.first(name) {
                    if bound == *lease {
                        return Response::Fence(revision);
                    }
                }
                if !self.leases.contains_key(lease) || self.locks.contains_key(name) {
                    return Response::Nil;
                }
                self.revision += 1;
                self.locks.entry(name.clone()).or_default().insert(self.revision, *lease);
                Response::Fence(self.revision)
            }
            Command::Lock { name, lease } => {
                // Ours already (a retried request): the key put before.
                let own = self.locks.get(name).and_then(|line| {
                    line.iter().find(|&(_, bound)| bound == lease).map(|(&created, _)| created)
                });
                let own = match own {
                    Some(own) => own,
                    None if self.leases.contains_key(lease) => {
                        self.revision += 1;
                        self.locks.entry(name.clone()).or_default().insert(self.revision, *lease);
                        self.revision
                    }
                    None => return Response::Line { own: None, before: None },
                };
                self.line(name, own)
            }
            Command::Line { name, own } => self.line(name, *own),
            Command::Held { name, lease } => Response::Int(i64::from(self.holds(name, *lease))),
            Command::Resign { name, lease, own } => {
                let Some(line) = self.locks.get_mut(name) else { return Response::Int(0) };
                if line.get(own) != Some(lease) {
                    return Response::Int(0);
                }
                line.remove(own);
                if line.is_empty() {
                    self.locks.remove(name);
                }
                self.revision += 1;
                Response::Int(1)
            }
        }
    }

    /// The key that holds lock `name`: its create revision and lease.
    fn first(&self, name: &str) -> Option<(&u64, u64)> {
        self.locks.get(name)?.iter().next().map(|(created, &lease)| (created, lease))
    }

    /// Where the key created at `own` stands in lock `name`'s line.
    fn line(&self, name: &str, own: u64) -> Response {
        let line = self.locks.get(name);
        if !line.is_some_and(|line| line.contains_key(&own)) {
            return Response::Line { own: None, before: None };
        }
        let before =
            line.and_then(|line| line.range(..own).next_back()).map(|(&created, _)| created);
        Response::Line { own: Some(own), before }
    }

    /// Whether `lease` has a key in lock `name`'s line.
    fn holds(&self, name: &str, lease: u64) -> bool {
        self.locks.get(name).is_some_and(|line| line.values().any(|&bound| bound == lease))
    }

    /// Whether the lock key created at `created` is still there.
    fn has_key(&self, name: &str, created: u64) -> bool {
        self.locks.get(name).is_some_and(|line| line.contains_key(&created))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Follower,
    Candidate,
    Leader,
}

/// One member. Everything but the role and the leader's bookkeeping is on
/// disk: it survives a crash.
#[derive(Debug)]
pub struct Member {
    me: usize,
    members: usize,
    /// How many members must store an entry before it commits: a majority,
    /// or 1 for the broken cluster that commits on the leader alone.
    quorum: usize,
    // On disk.
    term: u64,
    voted_for: Option<usize>,
    /// `log[0]` is a sentinel of term 0; entries are indexed from 1.
    log: Vec<Entry>,
    commit: u64,
    applied: u64,
    store: Store,
    // In memory.
    role: Role,
    leader: Option<usize>,
    election_at: i64,
    heartbeat_at: i64,
    votes: BTreeSet<usize>,
    next_index: Vec<u64>,
    match_index: Vec<u64>,
    /// When each member last answered this leader.
    heard_at: Vec<i64>,
    /// The leader's lease timers: lease → expiry, in ms of monotonic time.
    expiry: BTreeMap<u64, i64>,
    /// Leases whose revocation this leader has proposed.
    revoking: BTreeSet<u64>,
    /// Proposals waiting for their entry to apply: index → (term, reply).
    waiting: BTreeMap<u64, (u64, oneshot::Sender<Response>)>,
    /// Told whenever entries apply: what a watch waits on.
    applied_some: Rc<Notify>,
    rng: SmallRng,
}

/// Monotonic time, in ms: what etcd's timers read. The nemesis' clock
/// faults move wall clocks only.
fn now_ms() -> i64 {
    turmoil::sim_elapsed().unwrap_or_default().as_millis() as i64
}

impl Member {
    /// Member `me` of `members`; `quorum`: see [`Member`] (`None`: a majority).
    pub fn new(me: usize, members: usize, quorum: Option<usize>, seed: u64) -> Member {
        Member {
            me,
            members,
            quorum: quorum.unwrap_or(members / 2 + 1),
            term: 0,
            voted_for: None,
            log: vec![Entry { term: 0, command: Command::Noop }],
            commit: 0,
            applied: 0,
            store: Store::default(),
            role: Role::Follower,
            leader: None,
            election_at: 0,
            heartbeat_at: 0,
            votes: BTreeSet::new(),
            next_index: vec![1; members],
            match_index: vec![0; members],
            heard_at: vec![0; members],
            expiry: BTreeMap::new(),
            revoking: BTreeSet::new(),
            waiting: BTreeMap::new(),
            applied_some: Rc::new(Notify::new()),
            rng: SmallRng::seed_from_u64(seed),
        }
    }

    /// After a (re)start: a follower that knows no leader yet.
    fn restart(&mut self) {
        self.role = Role::Follower;
        self.leader = None;
        self.votes.clear();
        self.expiry.clear();
        self.revoking.clear();
        self.waiting.clear();
        self.reset_election();
    }

    fn majority(&self) -> usize {
        self.members / 2 + 1
    }

    fn last_index(&self) -> u64 {
        self.log.len() as u64 - 1
    }

    fn term_at(&self, index: u64) -> Option<u64> {
        self.log.get(index as usize).map(|entry| entry.term)
    }

    fn reset_election(&mut self) {
        self.election_at = now_ms() + self.rng.gen_range(ELECTION_MS.0..=ELECTION_MS.1);
    }

    fn become_follower(&mut self, term: u64, leader: Option<usize>) {
        if term > self.term {
            self.term = term;
            self.voted_for = None;
        }
        if self.role == Role::Leader {
            // Proposals not yet applied may be lost or may commit under the
            // next leader: their clients time out (an unknown outcome).
            self.waiting.clear();
            self.expiry.clear();
            self.revoking.clear();
        }
        self.role = Role::Follower;
        self.leader = leader;
    }

    fn become_leader(&mut self, out: &mut Vec<(usize, Peer)>) {
        self.role = Role::Leader;
        self.leader = Some(self.me);
        let now = now_ms();
        self.next_index = vec![self.last_index() + 1; self.members];
        self.match_index = vec![0; self.members];
        self.heard_at = vec![now; self.members];
        self.expiry = promoted(&self.store, now);
        self.revoking.clear();
        self.log.push(Entry { term: self.term, command: Command::Noop });
        self.match_index[self.me] = self.last_index();
        self.broadcast(out);
    }

    /// A serializable read, answered from this member's own store, leader
    /// or not, without asking the others (`None`: not such a read). An old
    /// leader cut off from the others answers it from what it applied
    /// before the cut, as a follower that has fallen behind does.
    fn read_locally(&self, request: &Request) -> Option<Response> {
        match request {
            Request::LockHeld { name, lease, serializable: true } => {
                Some(Response::Int(i64::from(self.store.holds(name, *lease))))
            }
            _ => None,
        }
    }

    /// A client's request, on the leader: appended to the log; the reply
    /// comes when it applies.
    fn propose(&mut self, command: Command) -> Result<oneshot::Receiver<Response>, Response> {
        if self.role != Role::Leader {
            return Err(Response::NotLeader { leader: self.leader.map(|at| at as u32) });
        }
        self.log.push(Entry { term: self.term, command });
        let index = self.last_index();
        self.match_index[self.me] = index;
        let (reply, answer) = oneshot::channel();
        self.waiting.insert(index, (self.term, reply));
        // (Commits at once only where the leader alone is a quorum.)
        self.advance_commit();
        Ok(answer)
    }

    fn append_for(&self, to: usize) -> Peer {
        let prev_index = self.next_index[to].saturating_sub(1).min(self.last_index());
        let from = prev_index as usize + 1;
        let to_index = (from + BATCH).min(self.log.len());
        Peer::Append {
            term: self.term,
            leader: self.me,
            prev_index,
            prev_term: self.term_at(prev_index).unwrap_or(0),
            entries: self.log[from..to_index].to_vec(),
            commit: self.commit,
        }
    }

    fn broadcast(&mut self, out: &mut Vec<(usize, Peer)>) {
        for to in (0..self.members).filter(|&to| to != self.me) {
            out.push((to, self.append_for(to)));
        }
        self.heartbeat_at = now_ms() + HEARTBEAT_MS;
    }

    /// Applies what is committed; the leader answers the waiting clients.
    fn apply(&mut self) {
        let now = now_ms();
        if self.applied < self.commit {
            self.applied_some.notify_waiters();
        }
        while self.applied < self.commit {
            self.applied += 1;
            let entry = self.log[self.applied as usize].clone();
            let mut response = self.store.apply(&entry.command);
            if self.role == Role::Leader {
                response = self.time_lease(&entry.command, response, now);
            }
            if let Some((term, reply)) = self.waiting.remove(&self.applied) {
                if term == entry.term {
                    let _ = reply.send(response);
                }
            }
        }
    }

    /// The leader's lease timers move with what applies.
    fn time_lease(&mut self, command: &Command, response: Response, now: i64) -> Response {
        if let Command::Revoke { lease } = command {
            self.revoking.remove(lease);
        }
        time_lease(&mut self.expiry, &self.store, command, response, now)
    }

    fn advance_commit(&mut self) {
        let mut index = self.last_index();
        while index > self.commit {
            // Only an entry of the leader's own term commits by counting.
            if self.term_at(index) == Some(self.term) {
                let stored = self.match_index.iter().filter(|&&matched| matched >= index).count();
                if stored >= self.quorum {
                    self.commit = index;
                    self.apply();
                    return;
                }
            } else {
                return;
            }
            index -= 1;
        }
    }

    /// One message from a peer; what to send in return goes to `out`.
    fn receive(&mut self, message: Peer, out: &mut Vec<(usize, Peer)>) {
        let term = match &message {
            Peer::Vote { term, .. }
            | Peer::VoteReply { term, .. }
            | Peer::Append { term, .. }
            | Peer::AppendReply { term, .. } => *term,
        };
        if term > self.term {
            self.become_follower(term, None);
        }
        match message {
            Peer::Vote { term, candidate, last_index, last_term } => {
                let up_to_date = (last_term, last_index)
                    >= (self.term_at(self.last_index()).unwrap_or(0), self.last_index());
                let granted = term == self.term
                    && self.voted_for.is_none_or(|voted| voted == candidate)
                    && up_to_date;
                if granted {
                    self.voted_for = Some(candidate);
                    self.reset_election();
                }
                out.push((candidate, Peer::VoteReply { term: self.term, from: self.me, granted }));
            }
            Peer::VoteReply { term, from, granted } => {
                if self.role == Role::Candidate && term == self.term && granted {
                    self.votes.insert(from);
                    if self.votes.len() >= self.majority() {
                        self.become_leader(out);
                    }
                }
            }
            Peer::Append { term, leader, prev_index, prev_term, entries, commit } => {
                if term < self.term {
                    let reply = Peer::AppendReply {
                        term: self.term,
                        from: self.me,
                        success: false,
                        matched: self.last_index(),
                    };
                    out.push((leader, reply));
                    return;
                }
                self.become_follower(term, Some(leader));
                self.reset_election();
                if self.term_at(prev_index) != Some(prev_term) {
                    let matched = self.last_index().min(prev_index.saturating_sub(1));
                    let reply = Peer::AppendReply {
                        term: self.term,
                        from: self.me,
                        success: false,
                        matched,
                    };
                    out.push((leader, reply));
                    return;
                }
                let mut index = prev_index;
                for entry in entries {
                    index += 1;
                    match self.term_at(index) {
                        Some(existing) if existing == entry.term => {}
                        Some(_) => {
                            // A conflict: everything from here on was never
                            // committed; the leader's entries replace it.
                            self.log.truncate(index as usize);
                            self.log.push(entry);
                        }
                        None => self.log.push(entry),
                    }
                }
                if commit > self.commit {
                    self.commit = commit.min(index);
                    self.apply();
                }
                let reply = Peer::AppendReply {
                    term: self.term,
                    from: self.me,
                    success: true,
                    matched: index,
                };
                out.push((leader, reply));
            }
            Peer::AppendReply { term, from, success, matched } => {
                if self.role != Role::Leader || term != self.term {
                    return;
                }
                self.heard_at[from] = now_ms();
                if success {
                    self.match_index[from] = self.match_index[from].max(matched);
                    self.next_index[from] = self.match_index[from] + 1;
                    self.advance_commit();
                } else {
                    self.next_index[from] =
                        (matched + 1).min(self.next_index[from].saturating_sub(1)).max(1);
                    out.push((from, self.append_for(from)));
                }
            }
        }
    }

    /// Stands for leader in a new term.
    fn campaign(&mut self, out: &mut Vec<(usize, Peer)>) {
        self.role = Role::Candidate;
        self.term += 1;
        self.voted_for = Some(self.me);
        self.leader = None;
        self.votes = BTreeSet::from([self.me]);
        self.reset_election();
        let (last_index, last_term) =
            (self.last_index(), self.term_at(self.last_index()).unwrap_or(0));
        for to in (0..self.members).filter(|&to| to != self.me) {
            let vote = Peer::Vote { term: self.term, candidate: self.me, last_index, last_term };
            out.push((to, vote));
        }
    }

    /// The timers: heartbeats, elections, check-quorum, lease expiry.
    fn tick(&mut self, out: &mut Vec<(usize, Peer)>) {
        let now = now_ms();
        match self.role {
            Role::Leader => {
                let mut heard: Vec<i64> = (0..self.members)
                    .map(|at| if at == self.me { now } else { self.heard_at[at] })
                    .collect();
                heard.sort_unstable_by(|a, b| b.cmp(a));
                if now - heard[self.quorum - 1] > ELECTION_MS.1 {
                    // Cut off from a quorum: step down (check-quorum).
                    self.become_follower(self.term, None);
                    self.reset_election();
                    return;
                }
                let expired: Vec<u64> = self
                    .expiry
                    .iter()
                    .filter(|&(lease, &at)| at <= now && !self.revoking.contains(lease))
                    .map(|(&lease, _)| lease)
                    .collect();
                for lease in expired {
                    self.revoking.insert(lease);
                    self.log.push(Entry { term: self.term, command: Command::Revoke { lease } });
                    self.match_index[self.me] = self.last_index();
                }
                self.advance_commit();
                if now >= self.heartbeat_at {
                    self.broadcast(out);
                }
            }
            Role::Follower | Role::Candidate if now >= self.election_at => self.campaign(out),
            Role::Follower | Role::Candidate => {}
        }
    }
}

/// The leader's lease timers (lease → expiry, in ms of monotonic time)
/// move with what applies: a grant starts one, a keepalive of a lease not
/// yet expired restarts it, a revocation ends it. An expired lease awaits
/// its revocation: a keepalive does not renew it.
fn time_lease(
    expiry: &mut BTreeMap<u64, i64>,
    store: &Store,
    command: &Command,
    response: Response,
    now: i64,
) -> Response {
    match (command, &response) {
        (Command::Grant { ttl_ms }, Response::Int(id)) => {
            expiry.insert(*id as u64, now + *ttl_ms as i64);
            response
        }
        (Command::KeepAlive { lease }, Response::Int(1)) => match expiry.get_mut(lease) {
            Some(at) if *at > now => {
                let ttl = store.leases.get(lease).copied().unwrap_or(0);
                *at = now + ttl as i64;
                response
            }
            _ => Response::Int(0),
        },
        (Command::Revoke { lease }, _) => {
            expiry.remove(lease);
            response
        }
        _ => response,
    }
}

/// A new leader's lease timers: every lease gets its whole TTL again from
/// now (etcd's lessor promotion). The old leader's timers are lost, and a
/// lease must not end early.
fn promoted(store: &Store, now: i64) -> BTreeMap<u64, i64> {
    store.leases.iter().map(|(&id, &ttl)| (id, now + ttl as i64)).collect()
}

/// The cluster as one linearizable state machine, for a model checker:
/// the store every member applies and the leader's lease timers, with the
/// members' own code for both ([`Store::apply`], the lease timers of
/// [`Member`]). What Raft adds (a minority that never commits, a follower
/// behind) is left out: every request is a committed entry, every read
/// linearizable. A lease expires by monotonic time: the caller passes
/// that, not a wall clock.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct EtcdMachine {
    store: Store,
    expiry: BTreeMap<u64, i64>,
}

impl EtcdMachine {
    /// Answers `request` at `now` (ms of the leader's monotonic clock), as
    /// the leader answers once its entry applies; an expired lease is
    /// revoked first, as the leader's timer does. A request etcd does not
    /// serve gets no answer (`None`), as a member gives none.
    pub fn handle(&mut self, request: Request, now: i64) -> Option<Response> {
        self.expire(now);
        let request = match request {
            // Every read goes through the log here.
            Request::LockHeld { name, lease, .. } => {
                Request::LockHeld { name, lease, serializable: false }
            }
            request => request,
        };
        let command = command(request)?;
        let response = self.store.apply(&command);
        Some(time_lease(&mut self.expiry, &self.store, &command, response, now))
    }

    /// Revokes every lease expired at `now`, with its keys.
    pub fn expire(&mut self, now: i64) {
        let expired: Vec<u64> =
            self.expiry.iter().filter(|&(_, &at)| at <= now).map(|(&lease, _)| lease).collect();
        for lease in expired {
            let revoke = Command::Revoke { lease };
            let response = self.store.apply(&revoke);
            time_lease(&mut self.expiry, &self.store, &revoke, response, now);
        }
    }

    /// A new leader at `now` (the old one crashed): the leases expired
    /// under the old one are revoked, and every other gets its whole TTL
    /// again.
    pub fn change_leader(&mut self, now: i64) {
        self.expire(now);
        self.expiry = promoted(&self.store, now);
    }
}

fn command(request: Request) -> Option<Command> {
    Some(match request {
        Request::LeaseGrant { ttl_ms } => Command::Grant { ttl_ms },
        Request::LeaseKeepAlive { lease } => Command::KeepAlive { lease },
        Request::LeaseRevoke { lease } => Command::Revoke { lease },
        Request::TryLock { name, lease } => Command::TryLock { name, lease },
        Request::Lock { name, lease } => Command::Lock { name, lease },
        Request::LockLine { name, own } => Command::Line { name, own },
        Request::LockHeld { name, lease, serializable: false } => Command::Held { name, lease },
        Request::Resign { name, lease, own } => {
            Command::Resign { name: election_line(&name), lease, own }
        }
        _ => return None,
    })
}

/// The software of one member: Raft over UDP, clients over TCP. Called
/// again on every restart, with the member's disk as it was.
pub async fn serve(
    member: Rc<RefCell<Member>>,
    hosts: &'static [&'static str],
    knobs: Rc<Knobs>,
) -> Result<(), Box<dyn std::error::Error>> {
    member.borrow_mut().restart();
    let socket = Rc::new(UdpSocket::bind(("0.0.0.0", PEER_PORT)).await?);
    let listener = TcpListener::bind(("0.0.0.0", PORT)).await?;
    let wake = Rc::new(Notify::new());
    {
        let (member, wake, knobs) = (member.clone(), wake.clone(), knobs.clone());
        tokio::task::spawn_local(async move {
            loop {
                let (stream, _) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(_) => return,
                };
                let (member, wake, knobs) = (member.clone(), wake.clone(), knobs.clone());
                tokio::task::spawn_local(client_connection(stream, member, wake, knobs));
            }
        });
    }
    let mut buffer = vec![0u8; 1 << 20];
    // A deadline that survives the loop's turns, so a steady stream of
    // messages cannot starve the timers.
    let mut tick_at = tokio::time::Instant::now();
    loop {
        let mut out = Vec::new();
        tokio::select! {
            biased;
            () = tokio::time::sleep_until(tick_at) => {
                tick_at = tokio::time::Instant::now() + Duration::from_millis(10);
                while knobs.paused.get() {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                member.borrow_mut().tick(&mut out);
            }
            received = socket.recv_from(&mut buffer) => {
                let Ok((length, _)) = received else { continue };
                while knobs.paused.get() {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                if let Ok(message) = serde_json::from_slice::<Peer>(&buffer[..length]) {
                    member.borrow_mut().receive(message, &mut out);
                }
            }
            () = wake.notified() => {
                let mut member = member.borrow_mut();
                if member.role == Role::Leader {
                    member.broadcast(&mut out);
                }
            }
        }
        for (to, message) in out {
            if knobs.chance(knobs.loss.get() / 2.0) {
                continue;
            }
            let bytes = serde_json::to_vec(&message).expect("peer messages serialize");
            // A member that is down or cut off simply never hears it.
            let _ = socket.send_to(&bytes, (hosts[to], PEER_PORT)).await;
        }
    }
}

async fn client_connection(
    stream: TcpStream,
    member: Rc<RefCell<Member>>,
    wake: Rc<Notify>,
    knobs: Rc<Knobs>,
) {
    serve_requests(stream, &knobs, |request| {
        let (member, wake) = (member.clone(), wake.clone());
        async move {
            if let Request::WatchDelete { name, created, wait_ms } = request {
                return Some(watch_delete(&member, &name, created, wait_ms).await);
            }
            if let Request::Campaign { name, lease, wait_ms } = request {
                return campaign(&member, &wake, &name, lease, wait_ms).await;
            }
            if let Some(read) = member.borrow().read_locally(&request) {
                return Some(read);
            }
            let proposed = member.borrow_mut().propose(command(request)?);
            match proposed {
                Ok(answer) => {
                    wake.notify_one();
                    // Leadership lost before it applied (an error): the
                    // outcome is unknown, and the client times out.
                    answer.await.ok()
                }
                Err(not_leader) => Some(not_leader),
            }
        }
    })
    .await
}

/// The line of keys of election `name`: its candidates' keys, apart from
/// the locks' (etcd's election keys live under the election's own prefix).
fn election_line(name: &str) -> String {
    format!("election/{name}")
}

/// etcd's `Campaign`, served by the leader: the candidate's key is put in
/// the election's line, bound to `lease` (the same key again if it is
/// there: a campaign asked again), as `Mutex.Lock` puts a lock's; the
/// answer comes once no key created before it remains (a
/// [`Response::Line`] without one before: elected, its create revision the
/// term), or after `wait_ms` with the key still in line behind another (or
/// once the member stopped leading: the client asks again). No key (the
/// lease is gone): `Line` without `own`.
async fn campaign(
    member: &Rc<RefCell<Member>>,
    wake: &Rc<Notify>,
    name: &str,
    lease: u64,
    wait_ms: u64,
) -> Option<Response> {
    let until = tokio::time::Instant::now() + Duration::from_millis(wait_ms);
    let line = election_line(name);
    let proposed = member.borrow_mut().propose(Command::Lock { name: line.clone(), lease });
    let put = match proposed {
        Ok(answer) => {
            wake.notify_one();
            // Leadership lost before it applied: unknown, the client times out.
            answer.await.ok()?
        }
        Err(not_leader) => return Some(not_leader),
    };
    let Response::Line { own: Some(own), before: Some(_) } = put else { return Some(put) };
    loop {
        let (applied_some, now) = {
            let member = member.borrow();
            if member.role != Role::Leader {
                return Some(Response::Line { own: Some(own), before: Some(0) });
            }
            (member.applied_some.clone(), member.store.line(&line, own))
        };
        match now {
            Response::Line { own: Some(_), before: Some(_) } => {}
            elected_or_gone => return Some(elected_or_gone),
        }
        if tokio::time::timeout_at(until, applied_some.notified()).await.is_err() {
            return Some(Response::Line { own: Some(own), before: Some(0) });
        }
    }
}

/// A watch of the lock key created at `created`, served by the leader from
/// what it has applied: `Int(2)` if the key is gone already, `Int(1)` once
/// it is deleted, `Int(0)` if it is still there after `wait_ms` (or the
/// member stopped leading meanwhile: the client reads its line again).
async fn watch_delete(
    member: &Rc<RefCell<Member>>,
    name: &str,
    created: u64,
    wait_ms: u64,
) -> Response {
    let until = tokio::time::Instant::now() + Duration::from_millis(wait_ms);
    let mut first = true;
    loop {
        let (applied_some, present) = {
            let member = member.borrow();
            if member.role != Role::Leader {
                if first {
                    return Response::NotLeader { leader: member.leader.map(|at| at as u32) };
                }
                return Response::Int(0);
            }
            (member.applied_some.clone(), member.store.has_key(name, created))
        };
        if !present {
            return Response::Int(if first { 2 } else { 1 });
        }
        first = false;
        if tokio::time::timeout_at(until, applied_some.notified()).await.is_err() {
            return Response::Int(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Delivers messages among the members in `reachable` until none is
    /// left; those to or from anyone else are lost.
    fn deliver(members: &mut [Member], reachable: &[usize], mut queue: Vec<(usize, usize, Peer)>) {
        while let Some((from, to, message)) = queue.pop() {
            if !(reachable.contains(&from) && reachable.contains(&to)) {
                continue;
            }
            let mut out = Vec::new();
            members[to].receive(message, &mut out);
            queue.extend(out.into_iter().map(|(next, reply)| (to, next, reply)));
        }
    }

    fn from(me: usize, out: Vec<(usize, Peer)>) -> Vec<(usize, usize, Peer)> {
        out.into_iter().map(|(to, message)| (me, to, message)).collect()
    }

    fn campaign(members: &mut [Member], me: usize, reachable: &[usize]) {
        let mut out = Vec::new();
        members[me].campaign(&mut out);
        deliver(members, reachable, from(me, out));
    }

    /// Proposes on `leader` and replicates to `reachable`; whether it applied.
    fn propose(
        members: &mut [Member],
        leader: usize,
        reachable: &[usize],
        command: Command,
    ) -> Option<Response> {
        let mut answer = members[leader].propose(command).ok()?;
        let mut out = Vec::new();
        members[leader].broadcast(&mut out);
        deliver(members, reachable, from(leader, out));
        answer.try_recv().ok()
    }

    fn cluster(quorum: Option<usize>) -> Vec<Member> {
        (0..3).map(|me| Member::new(me, 3, quorum, me as u64)).collect()
    }

    #[test]
    fn a_leader_cut_off_from_the_majority_grants_nothing_and_the_next_has_every_commit() {
        let all = [0, 1, 2];
        let mut members = cluster(None);
        campaign(&mut members, 0, &all);
        assert_eq!(members[0].role, Role::Leader);
        let lease = propose(&mut members, 0, &all, Command::Grant { ttl_ms: 1000 });
        assert_eq!(lease, Some(Response::Int(1)));
        let lock = |lease| Command::TryLock { name: "l".into(), lease };
        assert!(matches!(propose(&mut members, 0, &all, lock(1)), Some(Response::Fence(_))));
        propose(&mut members, 0, &all, Command::Revoke { lease: 1 });

        // Member 0 is cut off: it still believes it leads, but cannot commit.
        propose(&mut members, 0, &all, Command::Grant { ttl_ms: 1000 });
        assert_eq!(propose(&mut members, 0, &[0], lock(2)), None, "a minority granted");
        let committed = members[0].commit;

        // The majority elects member 1, which holds every committed entry.
        campaign(&mut members, 1, &[1, 2]);
        assert_eq!(members[1].role, Role::Leader);
        assert!(members[1].log.len() as u64 > committed);
        assert_eq!(&members[1].log[..=committed as usize], &members[0].log[..=committed as usize]);
        let granted = propose(&mut members, 1, &[1, 2], lock(2));
        assert!(matches!(granted, Some(Response::Fence(_))), "the majority could not grant");

        // Healed: the old leader's uncommitted entry gives way.
        let mut out = Vec::new();
        members[1].broadcast(&mut out);
        deliver(&mut members, &all, from(1, out));
        assert_eq!(members[0].role, Role::Follower);
        assert_eq!(members[0].log, members[1].log);
        assert_eq!(members[0].store.locks, members[1].store.locks);
    }

    #[test]
    fn a_cut_off_old_leader_answers_a_serializable_read_stale_and_a_linearizable_one_never() {
        let all = [0, 1, 2];
        let mut members = cluster(None);
        campaign(&mut members, 0, &all);
        propose(&mut members, 0, &all, Command::Grant { ttl_ms: 1000 });
        let lock = |lease| Command::TryLock { name: "l".into(), lease };
        assert!(matches!(propose(&mut members, 0, &all, lock(1)), Some(Response::Fence(_))));
        let held = |serializable| Request::LockHeld { name: "l".into(), lease: 1, serializable };

        // Member 0 is cut off; the majority elects member 1, which revokes
        // lease 1 (its timer ran out) and grants the lock to lease 2.
        campaign(&mut members, 1, &[1, 2]);
        assert_eq!(members[1].role, Role::Leader);
        let revoked = propose(&mut members, 1, &[1, 2], Command::Revoke { lease: 1 });
        assert_eq!(revoked, Some(Response::Int(1)));
        propose(&mut members, 1, &[1, 2], Command::Grant { ttl_ms: 1000 });
        assert!(matches!(propose(&mut members, 1, &[1, 2], lock(2)), Some(Response::Fence(_))));
        let linearizable = command(held(false)).expect("a linearizable read is a command");
        assert_eq!(propose(&mut members, 1, &[1, 2], linearizable.clone()), Some(Response::Int(0)));

        // The old leader still believes it leads: its serializable answer
        // is the key as it was before the cut, held...
        assert_eq!(members[0].role, Role::Leader);
        assert_eq!(members[0].read_locally(&held(true)), Some(Response::Int(1)), "not stale");
        // ...while a linearizable read goes through its log, and a log
        // that cannot reach a majority never answers.
        assert_eq!(members[0].read_locally(&held(false)), None);
        assert_eq!(propose(&mut members, 0, &[0], linearizable), None, "the minority answered");
        // The majority's members answer the serializable read as it is.
        assert_eq!(members[2].read_locally(&held(true)), Some(Response::Int(0)));
    }

    #[test]
    fn a_leader_that_commits_alone_grants_in_the_minority() {
        let all = [0, 1, 2];
        let mut members = cluster(Some(1));
        campaign(&mut members, 0, &all);
        propose(&mut members, 0, &all, Command::Grant { ttl_ms: 1000 });
        let lock = Command::TryLock { name: "l".into(), lease: 1 };
        assert!(matches!(propose(&mut members, 0, &[0], lock), Some(Response::Fence(_))));
    }

    #[test]
    fn a_lock_needs_a_live_lease_and_a_free_name() {
        let mut store = Store::default();
        assert_eq!(store.apply(&Command::Grant { ttl_ms: 100 }), Response::Int(1));
        assert_eq!(store.apply(&Command::Grant { ttl_ms: 100 }), Response::Int(2));
        let lock = |lease| Command::TryLock { name: "l".into(), lease };
        assert_eq!(store.apply(&lock(1)), Response::Fence(1));
        assert_eq!(store.apply(&lock(2)), Response::Nil, "held by lease 1");
        assert_eq!(store.apply(&Command::Revoke { lease: 1 }), Response::Int(1));
        assert_eq!(store.apply(&lock(9)), Response::Nil, "no such lease");
        assert_eq!(
            store.apply(&lock(2)),
            Response::Fence(3),
            "the revision rose with the revocation's delete"
        );
    }

    #[test]
    fn a_held_read_says_whether_a_leases_key_is_in_the_line() {
        let mut store = Store::default();
        assert_eq!(store.apply(&Command::Grant { ttl_ms: 100 }), Response::Int(1));
        assert_eq!(store.apply(&Command::Grant { ttl_ms: 100 }), Response::Int(2));
        let lock = |lease| Command::Lock { name: "l".into(), lease };
        let held = |lease| Command::Held { name: "l".into(), lease };
        assert_eq!(store.apply(&lock(1)), Response::Line { own: Some(1), before: None });
        assert_eq!(store.apply(&lock(2)), Response::Line { own: Some(2), before: Some(1) });
        // A key waiting in line is there too: the read says nothing of turns.
        assert_eq!(store.apply(&held(1)), Response::Int(1));
        assert_eq!(store.apply(&held(2)), Response::Int(1));
        assert_eq!(store.apply(&Command::Revoke { lease: 1 }), Response::Int(1));
        assert_eq!(store.apply(&held(1)), Response::Int(0));
        assert_eq!(
            store.apply(&Command::Line { name: "l".into(), own: 2 }),
            Response::Line { own: Some(2), before: None }
        );
    }
}
