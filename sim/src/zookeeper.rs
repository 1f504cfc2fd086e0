//! `sim-zookeeper`: a ZooKeeper ensemble of three members, its sessions,
//! ephemeral sequential znodes and watches, and the client library that
//! runs Curator's lock (`lockcheck_workloads::zookeeper_lock`, which the
//! real world runs too) over them.
//!
//! What the lock's safety rests on is modelled; the rest is left out:
//! * Every request is a transaction of an ordered log, committed once a
//!   majority of members store it and applied in log order by every
//!   member (ZooKeeper's Zab, modelled by the same leader, terms, votes and
//!   check-quorum as `crate::etcd`'s Raft). A member that cannot reach a
//!   majority commits nothing, so a minority side never grants. Reads and
//!   watches go through the log too: a member that is no longer the
//!   leader, but does not know it yet, answers nothing, so no answer from
//!   it can keep a client believing its session alive. (A real follower
//!   serves reads from its own copy; a stale read can only make a waiter
//!   wait, so the lock's safety does not depend on the difference.)
//! * zxid: one more with every write (a session's creation or end, a
//!   znode's creation or deletion); a znode's czxid is the zxid of its
//!   creation, and the lock's token.
//! * Sessions: the leader times each session by its monotonic clock (a
//!   clock fault moves wall clocks only) and resets the timer with every
//!   request of the session; a session it has not heard from within its
//!   timeout it ends by a transaction of its own, which deletes the
//!   session's ephemeral znodes. A new leader gives every session a whole
//!   timeout again (ZooKeeper's leader does the same), so no session ends
//!   before its client has been silent for its timeout.
//! * Watches are long polls: a request to watch a znode's deletion, or a
//!   parent's children, is answered when the leader applies the change, or
//!   with `TimedOut` when the wait the client asked for has passed. A
//!   watch lives on the leader that set it: a change of leader drops it,
//!   and the client sees its connection close.
//! * The log, the terms and votes and the data tree survive a crash (a
//!   ZooKeeper member's transaction log and snapshots are on disk).
//!
//! The client library keeps its session alive by itself: a heartbeat task
//! pings the ensemble every sixth of the session timeout, between and
//! during the recipe's operations, and every answer counts as hearing from
//! it. A pause of the client stops that task too (the client's
//! [`Freezer`]), as a GC pause stops a JVM's threads. The connection state
//! is Curator's: SUSPENDED once no answer came for 2/5 of the session
//! timeout, LOST once the ensemble said the session expired, or once 7/5
//! of the timeout passed without an answer. A LOST session is given up: the
//! next acquire opens a new one (as Curator does), and the old one is
//! closed if the ensemble can hear it, or else expires.
//!
//! Members talk over UDP on [`PEER_PORT`]; clients over the JSON-lines TCP
//! protocol on [`crate::host::PORT`], through [`serve_requests`] (which
//! applies every fault a host can suffer). A member that is not the leader
//! answers `NotLeader` with the leader it knows; the client asks that one.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use tokio::sync::{oneshot, Notify};
use turmoil::net::{TcpListener, TcpStream, UdpSocket};

use lockcheck_workloads::zookeeper_lock::{
    Connection as State, Unanswered, Variant, Waiting, Woken, ZooKeeperLock, ZooKeeperSession,
};
use lockcheck_workloads::{Backend, FaultKind, Freezer, Grant, Outcome, Recipe, Service, Stall};

use crate::host::{serve_requests, Connection, Failure, Knobs, PORT, TICK};
use crate::service::{Hosting, Link, Pending, SimService, SimSession, Started};

/// The members' hosts; a 3-member ensemble uses the first three.
pub const ZOOKEEPER_HOSTS: [&str; 5] = ["zk-0", "zk-1", "zk-2", "zk-3", "zk-4"];

/// Where members talk to each other.
const PEER_PORT: u16 = 7001;

/// The leader's heartbeat, and the range of election timeouts (as
/// sim-etcd's: ZooKeeper's tick scaled down to the simulator's sub-second
/// session timeouts).
const HEARTBEAT_MS: i64 = 50;
const ELECTION_MS: (i64, i64) = (300, 600);
/// At most this many transactions in one append.
const BATCH: usize = 64;

/// The client library pings the ensemble this many times a session
/// timeout.
const PINGS_PER_TIMEOUT: u64 = 6;

/// ZooKeeper as a simulated service: an ensemble of 3 (or 5) members, as
/// the catalogue's service says, each keeping its disk across a restart.
pub(crate) struct ZooKeeperEnsemble;

impl SimService for ZooKeeperEnsemble {
    fn keeps(&self, service: Service, _: &[FaultKind]) -> bool {
        matches!(service, Service::ZooKeeper { .. })
    }

    fn lock_hosts(&self, service: Service) -> &'static [&'static str] {
        let all: &'static [&'static str] = &ZOOKEEPER_HOSTS;
        match service {
            Service::ZooKeeper { members } => all.get(..members as usize).unwrap_or(all),
            _ => all,
        }
    }

    /// Each member draws its own seed, then its host's knobs theirs.
    fn start(&self, hosting: &mut Hosting<'_, '_>) -> Started {
        start_members(hosting, self.lock_hosts(hosting.backend.service())).0
    }

    fn session(&self, backend: Backend, fencing: bool) -> Option<Box<dyn SimSession>> {
        match backend.recipe() {
            Recipe::ZooKeeper(variant) => Some(Box::new(ZooKeeperClient::new(variant, fencing))),
            _ => None,
        }
    }
}

/// Starts a member on each of `hosts`: the hosts, and the members (which a
/// test reads).
fn start_members(
    hosting: &mut Hosting<'_, '_>,
    hosts: &'static [&'static str],
) -> (Started, Vec<Rc<RefCell<Member>>>) {
    let mut started = Started::on(hosts);
    let mut members = Vec::with_capacity(hosts.len());
    for (me, &host) in hosts.iter().enumerate() {
        let member = Rc::new(RefCell::new(Member::new(me, hosts.len(), hosting.seed())));
        members.push(member.clone());
        let knobs = Knobs::new(hosting.seed(), true);
        hosting.host(&mut started, host, knobs, move |knobs| serve(member.clone(), hosts, knobs));
    }
    (started, members)
}

// ---- The protocol ----

/// What a client asks of the ensemble. Every request but a session's
/// creation names its session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum Request {
    CreateSession {
        timeout_ms: u64,
    },
    /// The library's heartbeat.
    Ping {
        session: u64,
    },
    CloseSession {
        session: u64,
    },
    /// An ephemeral sequential znode `lock-` under `parent`.
    Create {
        session: u64,
        parent: String,
    },
    Children {
        session: u64,
        parent: String,
    },
    /// `exists`' Stat: the czxid.
    Czxid {
        session: u64,
        path: String,
    },
    /// `exists` with a watch, waited on for at most `wait_ms`.
    WatchDelete {
        session: u64,
        path: String,
        wait_ms: u64,
    },
    /// `getChildren` with a watch, waited on for at most `wait_ms`.
    WatchChildren {
        session: u64,
        parent: String,
        wait_ms: u64,
    },
    Delete {
        session: u64,
        path: String,
    },
}

impl Request {
    fn session(&self) -> Option<u64> {
        match self {
            Request::CreateSession { .. } => None,
            Request::Ping { session }
            | Request::CloseSession { session }
            | Request::Create { session, .. }
            | Request::Children { session, .. }
            | Request::Czxid { session, .. }
            | Request::WatchDelete { session, .. }
            | Request::WatchChildren { session, .. }
            | Request::Delete { session, .. } => Some(*session),
        }
    }

    /// How long a watch waits, for a watch.
    fn wait_ms(&self) -> Option<u64> {
        match self {
            Request::WatchDelete { wait_ms, .. } | Request::WatchChildren { wait_ms, .. } => {
                Some(*wait_ms)
            }
            _ => None,
        }
    }
}

/// What the ensemble answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum Reply {
    /// Not the leader: ask this one (if known).
    NotLeader {
        leader: Option<usize>,
    },
    /// A session created: its id.
    Session(u64),
    Ok,
    /// The session is gone (ZooKeeper's SESSIONEXPIRED).
    Expired,
    Created(String),
    Children(Vec<String>),
    Czxid(Option<u64>),
    Woke(Woke),
    Deleted(bool),
    /// (Between the log and the leader's watches, never sent:) a watch set.
    Watching,
}

/// How a watch's wait ended, as the protocol carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum Woke {
    Already,
    Watch,
    TimedOut,
}

impl From<Woke> for Woken {
    fn from(woke: Woke) -> Woken {
        match woke {
            Woke::Already => Woken::Already,
            Woke::Watch => Woken::Watch,
            Woke::TimedOut => Woken::TimedOut,
        }
    }
}

// ---- The data tree, the replicated state ----

/// A transaction of the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum Command {
    /// A new leader's first entry: it commits the entries of earlier terms.
    Noop,
    /// A client's request.
    Client(Request),
    /// The leader ends a session it has not heard from within its timeout.
    Expire { session: u64 },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Entry {
    term: u64,
    command: Command,
}

/// A znode of the tree: the lock's ephemeral sequential ones.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Znode {
    /// The session it lives and dies with.
    owner: u64,
    czxid: u64,
}

/// What applying a transaction changed, for the watches.
#[derive(Debug, Default)]
struct Changes {
    deleted: Vec<String>,
    /// Parents whose children changed.
    parents: Vec<String>,
}

/// The parent of `path`.
fn parent_of(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(parent, _)| parent)
}

/// The state every member applies the log to.
#[derive(Debug, Clone, Default)]
struct Tree {
    /// The last write's zxid.
    zxid: u64,
    next_session: u64,
    /// Live sessions and their timeouts.
    sessions: BTreeMap<u64, u64>,
    /// The next sequence number under each parent.
    sequences: BTreeMap<String, u64>,
    znodes: BTreeMap<String, Znode>,
}

impl Tree {
    /// Ends `session`, deleting its ephemeral znodes.
    fn end_session(&mut self, session: u64, changes: &mut Changes) -> Reply {
        if self.sessions.remove(&session).is_none() {
            return Reply::Expired;
        }
        self.zxid += 1;
        let owned: Vec<String> = self
            .znodes
            .iter()
            .filter(|(_, znode)| znode.owner == session)
            .map(|(path, _)| path.clone())
            .collect();
        for path in owned {
            self.znodes.remove(&path);
            changes.parents.push(parent_of(&path).to_string());
            changes.deleted.push(path);
        }
        Reply::Ok
    }

    /// Applies one committed transaction: the same on every member. What
    /// it changed goes to `changes`.
    fn apply(&mut self, command: &Command, changes: &mut Changes) -> Reply {
        let request = match command {
            Command::Noop => return Reply::Ok,
            Command::Expire { session } => return self.end_session(*session, changes),
            Command::Client(request) => request,
        };
        if let Request::CreateSession { timeout_ms } = request {
            self.zxid += 1;
            self.next_session += 1;
            self.sessions.insert(self.next_session, *timeout_ms);
            return Reply::Session(self.next_session);
        }
        if request.session().is_none_or(|session| !self.sessions.contains_key(&session)) {
            return Reply::Expired;
        }
        match request {
            Request::CreateSession { .. } | Request::Ping { .. } => Reply::Ok,
            Request::CloseSession { session } => self.end_session(*session, changes),
            Request::Create { session, parent } => {
                self.zxid += 1;
                let sequence = self.sequences.entry(parent.clone()).or_default();
                let path = format!("{parent}/lock-{sequence:010}");
                *sequence += 1;
                self.znodes.insert(path.clone(), Znode { owner: *session, czxid: self.zxid });
                changes.parents.push(parent.clone());
                Reply::Created(path)
            }
            Request::Children { parent, .. } => Reply::Children(self.children(parent)),
            Request::Czxid { path, .. } => {
                Reply::Czxid(self.znodes.get(path).map(|znode| znode.czxid))
            }
            Request::WatchDelete { path, .. } if !self.znodes.contains_key(path) => {
                Reply::Woke(Woke::Already)
            }
            Request::WatchDelete { .. } | Request::WatchChildren { .. } => Reply::Watching,
            Request::Delete { path, .. } => match self.znodes.remove(path) {
                Some(_) => {
                    self.zxid += 1;
                    changes.parents.push(parent_of(path).to_string());
                    changes.deleted.push(path.clone());
                    Reply::Deleted(true)
                }
                None => Reply::Deleted(false),
            },
        }
    }

    /// The names of `parent`'s children, in order.
    fn children(&self, parent: &str) -> Vec<String> {
        let prefix = format!("{parent}/");
        self.znodes
            .range(prefix.clone()..)
            .map(|(path, _)| path)
            .take_while(|path| path.starts_with(&prefix))
            .filter_map(|path| path.strip_prefix(&prefix))
            .filter(|name| !name.contains('/'))
            .map(str::to_string)
            .collect()
    }
}

// ---- A member: the log, elections, the leader's timers and watches ----

/// Messages between members (Raft's, as `crate::etcd` speaks them).
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
    /// failure, where the leader should look next.
    AppendReply {
        term: u64,
        from: usize,
        success: bool,
        matched: u64,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Follower,
    Candidate,
    Leader,
}

/// Clients waiting for a change, on the leader that set their watch.
type Watchers = BTreeMap<String, Vec<oneshot::Sender<Reply>>>;

/// One member. The term, the vote, the log and the tree are on disk: they
/// survive a crash; the rest is the leader's memory.
#[derive(Debug)]
struct Member {
    me: usize,
    members: usize,
    // On disk.
    term: u64,
    voted_for: Option<usize>,
    /// `log[0]` is a sentinel of term 0; entries are indexed from 1.
    log: Vec<Entry>,
    commit: u64,
    applied: u64,
    tree: Tree,
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
    /// The leader's session timers: session → when it expires, in ms of
    /// monotonic time.
    expiry: BTreeMap<u64, i64>,
    /// Sessions whose end this leader has proposed.
    expiring: BTreeSet<u64>,
    /// Requests waiting for their transaction to apply: index → (term, reply).
    waiting: BTreeMap<u64, (u64, oneshot::Sender<Reply>)>,
    /// Watches on a znode's deletion, and on a parent's children.
    on_delete: Watchers,
    on_children: Watchers,
    /// Watch notifications delivered, over the member's life.
    fired: u64,
    rng: SmallRng,
}

/// Monotonic time, in ms: what ZooKeeper's session tracker reads (Java's
/// `nanoTime`). The nemesis' clock faults move wall clocks only.
fn now_ms() -> i64 {
    turmoil::sim_elapsed().unwrap_or_default().as_millis() as i64
}

impl Member {
    fn new(me: usize, members: usize, seed: u64) -> Member {
        Member {
            me,
            members,
            term: 0,
            voted_for: None,
            log: vec![Entry { term: 0, command: Command::Noop }],
            commit: 0,
            applied: 0,
            tree: Tree::default(),
            role: Role::Follower,
            leader: None,
            election_at: 0,
            heartbeat_at: 0,
            votes: BTreeSet::new(),
            next_index: vec![1; members],
            match_index: vec![0; members],
            heard_at: vec![0; members],
            expiry: BTreeMap::new(),
            expiring: BTreeSet::new(),
            waiting: BTreeMap::new(),
            on_delete: BTreeMap::new(),
            on_children: BTreeMap::new(),
            fired: 0,
            rng: SmallRng::seed_from_u64(seed),
        }
    }

    /// After a (re)start: a follower that knows no leader yet.
    fn restart(&mut self) {
        self.role = Role::Follower;
        self.leader = None;
        self.votes.clear();
        self.forget_leading();
        self.reset_election();
    }

    /// What only a leader keeps in memory is gone: requests not yet
    /// applied (their clients time out: an unknown outcome) and watches
    /// (their connections close).
    fn forget_leading(&mut self) {
        self.waiting.clear();
        self.expiry.clear();
        self.expiring.clear();
        self.on_delete.clear();
        self.on_children.clear();
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
            self.forget_leading();
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
        // Every session gets its whole timeout again from now: the old
        // leader's timers are lost, and a session must not end early.
        self.expiry = self
            .tree
            .sessions
            .iter()
            .map(|(&session, &timeout)| (session, now + timeout as i64))
            .collect();
        self.expiring.clear();
        self.log.push(Entry { term: self.term, command: Command::Noop });
        self.match_index[self.me] = self.last_index();
        self.broadcast(out);
    }

    /// A client's request, on the leader: appended to the log; the reply
    /// comes when it applies.
    fn propose(&mut self, request: Request) -> Result<oneshot::Receiver<Reply>, Reply> {
        if self.role != Role::Leader {
            return Err(Reply::NotLeader { leader: self.leader });
        }
        self.log.push(Entry { term: self.term, command: Command::Client(request) });
        let index = self.last_index();
        self.match_index[self.me] = index;
        let (reply, answer) = oneshot::channel();
        self.waiting.insert(index, (self.term, reply));
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

    /// Applies what is committed; the leader answers the waiting clients,
    /// sets their watches and fires those the changes trigger.
    fn apply(&mut self) {
        let now = now_ms();
        while self.applied < self.commit {
            self.applied += 1;
            let entry = self.log[self.applied as usize].clone();
            let mut changes = Changes::default();
            let mut reply = self.tree.apply(&entry.command, &mut changes);
            if self.role != Role::Leader {
                continue;
            }
            reply = self.time_session(&entry.command, reply, now);
            self.fire(&changes);
            let Some((term, sender)) = self.waiting.remove(&self.applied) else { continue };
            if term != entry.term {
                continue;
            }
            let watchers = match (&reply, &entry.command) {
                (Reply::Watching, Command::Client(Request::WatchDelete { path, .. })) => {
                    self.on_delete.entry(path.clone()).or_default()
                }
                (Reply::Watching, Command::Client(Request::WatchChildren { parent, .. })) => {
                    self.on_children.entry(parent.clone()).or_default()
                }
                _ => {
                    let _ = sender.send(reply);
                    continue;
                }
            };
            // Those who stopped waiting need no notice.
            watchers.retain(|watcher| !watcher.is_closed());
            watchers.push(sender);
        }
    }

    /// Notifies the watches `changes` trigger (each fires once).
    fn fire(&mut self, changes: &Changes) {
        let mut fired = Vec::new();
        for path in &changes.deleted {
            fired.extend(self.on_delete.remove(path).unwrap_or_default());
        }
        for parent in &changes.parents {
            fired.extend(self.on_children.remove(parent).unwrap_or_default());
        }
        for watcher in fired {
            if watcher.send(Reply::Woke(Woke::Watch)).is_ok() {
                self.fired += 1;
            }
        }
    }

    /// The leader's session timers move with what applies: a request of a
    /// live session resets its timer; one whose timer ran out, or of a
    /// session gone, is answered `Expired` (its end is on its way).
    fn time_session(&mut self, command: &Command, reply: Reply, now: i64) -> Reply {
        match (command, &reply) {
            (Command::Client(Request::CreateSession { timeout_ms }), Reply::Session(session)) => {
                self.expiry.insert(*session, now + *timeout_ms as i64);
                reply
            }
            (Command::Expire { session }, _)
            | (Command::Client(Request::CloseSession { session }), _) => {
                self.expiry.remove(session);
                self.expiring.remove(session);
                reply
            }
            (Command::Client(request), _) => {
                let Some(session) = request.session() else { return reply };
                let timeout = self.tree.sessions.get(&session).copied();
                match (self.expiry.get_mut(&session), timeout) {
                    (Some(at), Some(timeout)) if *at > now => {
                        *at = now + timeout as i64;
                        reply
                    }
                    _ => Reply::Expired,
                }
            }
            (Command::Noop, _) => reply,
        }
    }

    fn advance_commit(&mut self) {
        let mut index = self.last_index();
        while index > self.commit {
            // Only an entry of the leader's own term commits by counting.
            if self.term_at(index) != Some(self.term) {
                return;
            }
            let stored = self.match_index.iter().filter(|&&matched| matched >= index).count();
            if stored >= self.majority() {
                self.commit = index;
                self.apply();
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
                let refuse = |member: &Member, matched| Peer::AppendReply {
                    term: member.term,
                    from: member.me,
                    success: false,
                    matched,
                };
                if term < self.term {
                    out.push((leader, refuse(self, self.last_index())));
                    return;
                }
                self.become_follower(term, Some(leader));
                self.reset_election();
                if self.term_at(prev_index) != Some(prev_term) {
                    let matched = self.last_index().min(prev_index.saturating_sub(1));
                    out.push((leader, refuse(self, matched)));
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

    /// The timers: heartbeats, elections, check-quorum, session expiry.
    fn tick(&mut self, out: &mut Vec<(usize, Peer)>) {
        let now = now_ms();
        match self.role {
            Role::Leader => {
                let mut heard: Vec<i64> = (0..self.members)
                    .map(|at| if at == self.me { now } else { self.heard_at[at] })
                    .collect();
                heard.sort_unstable_by(|a, b| b.cmp(a));
                if now - heard[self.majority() - 1] > ELECTION_MS.1 {
                    // Cut off from a majority: step down (check-quorum), so
                    // that no client hears from a leader that cannot commit.
                    self.become_follower(self.term, None);
                    self.reset_election();
                    return;
                }
                let expired: Vec<u64> = self
                    .expiry
                    .iter()
                    .filter(|&(session, &at)| at <= now && !self.expiring.contains(session))
                    .map(|(&session, _)| session)
                    .collect();
                for session in expired {
                    self.expiring.insert(session);
                    self.log.push(Entry { term: self.term, command: Command::Expire { session } });
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

/// The software of one member: the log over UDP, clients over TCP. Called
/// again on every restart, with the member's disk as it was.
async fn serve(
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
            while let Ok((stream, _)) = listener.accept().await {
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
            let Ok(bytes) = serde_json::to_vec(&message) else { continue };
            // A member that is down or cut off simply never hears it.
            let _ = socket.send_to(&bytes, (hosts[to], PEER_PORT)).await;
        }
    }
}

/// One client connection to a member: each request is proposed, and
/// answered once it applies; a watch is answered when it fires or its wait
/// is over. A request the leader loses (it stepped down, or a watch it
/// held) closes the connection: the client's outcome is unknown.
async fn client_connection(
    stream: TcpStream,
    member: Rc<RefCell<Member>>,
    wake: Rc<Notify>,
    knobs: Rc<Knobs>,
) {
    serve_requests(stream, &knobs, |request: Request| {
        let (member, wake) = (member.clone(), wake.clone());
        async move {
            let wait_ms = request.wait_ms();
            let proposed = member.borrow_mut().propose(request);
            let answer = match proposed {
                Ok(answer) => answer,
                Err(not_leader) => return Some(not_leader),
            };
            wake.notify_one();
            match wait_ms {
                None => answer.await.ok(),
                Some(wait_ms) => {
                    match tokio::time::timeout(Duration::from_millis(wait_ms), answer).await {
                        Ok(reply) => reply.ok(),
                        Err(_) => Some(Reply::Woke(Woke::TimedOut)),
                    }
                }
            }
        }
    })
    .await
}

// ---- The client library ----

/// What a client's library knows of its session, shared between the
/// recipe's calls and the library's heartbeat task.
#[derive(Debug, Default)]
struct Library {
    session: Cell<Option<u64>>,
    timeout_ms: Cell<u64>,
    /// When an answer from the ensemble last came, on the client's
    /// monotonic clock.
    last_answer_ms: Cell<u64>,
    /// The session is known gone, or given up for silence.
    lost: Cell<bool>,
    /// One more with every session: the heartbeat of an older one closes
    /// it and stops.
    generation: Cell<u64>,
    /// The client stalls (a GC pause): the heartbeat task stops too.
    frozen: Arc<AtomicBool>,
}

/// The client's monotonic clock, in ms.
fn client_ms() -> u64 {
    turmoil::sim_elapsed().unwrap_or_default().as_millis() as u64
}

impl Library {
    /// The connection state now, as Curator reports it.
    fn state(&self) -> State {
        self.state_at(client_ms())
    }

    /// The connection state at `now_ms`.
    fn state_at(&self, now_ms: u64) -> State {
        if self.lost.get() || self.session.get().is_none() {
            return State::Lost;
        }
        let silent = now_ms.saturating_sub(self.last_answer_ms.get());
        let timeout = self.timeout_ms.get();
        if silent * 5 >= timeout * 7 {
            // No answer for 7/5 of the timeout: the session is surely
            // gone, and is given up.
            self.lost.set(true);
            State::Lost
        } else if silent * 5 >= timeout * 2 {
            State::Suspended
        } else {
            State::Connected
        }
    }

    fn heard(&self) {
        self.last_answer_ms.set(client_ms());
    }

    /// Gives the session up: its heartbeat closes it and stops.
    fn give_up(&self) {
        self.generation.set(self.generation.get() + 1);
        self.session.set(None);
    }

    /// Waits while the client stalls.
    async fn thawed(&self) {
        while self.frozen.load(Ordering::Relaxed) {
            tokio::time::sleep(TICK).await;
        }
    }
}

/// Stops a client's library threads while the client stalls.
#[derive(Debug)]
struct Freeze(Arc<AtomicBool>);

impl Freezer for Freeze {
    fn freeze(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    fn thaw(&self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

/// Sends `request` to the leader, from the member the client is connected
/// to (`at`): a `NotLeader` names the member to ask instead, a member that
/// cannot be reached gives way to the next. A request sent and not
/// answered is not sent again (a create is not idempotent): its outcome is
/// unknown, and the next request goes to the next member (ZooKeeper's
/// client reconnects elsewhere after a connection loss).
async fn ask_leader(
    connections: &mut [Connection],
    at: &mut usize,
    request: &Request,
) -> Result<Reply, Failure> {
    let members = connections.len();
    if members == 0 {
        return Err(Failure::NotSent);
    }
    *at %= members;
    for _ in 0..2 * members {
        match connections[*at].call_as::<Request, Reply>(request).await {
            Ok(Reply::NotLeader { leader: Some(leader) }) if leader < members && leader != *at => {
                *at = leader;
            }
            Ok(Reply::NotLeader { .. }) | Err(Failure::NotSent) => *at = (*at + 1) % members,
            Err(Failure::Unknown) => {
                *at = (*at + 1) % members;
                return Err(Failure::Unknown);
            }
            Ok(reply) => return Ok(reply),
        }
    }
    Err(Failure::NotSent)
}

/// The library's heartbeat task for session `session` of `generation`: a
/// ping every sixth of the session timeout (sooner again after one goes
/// unanswered), over connections of its own. It stops while the client
/// stalls, and an answer that comes meanwhile is read when the client
/// resumes. Once the session is given up or lost, it closes it (if the
/// ensemble hears it; else the session expires) and ends.
async fn heartbeat(
    library: Rc<Library>,
    generation: u64,
    session: u64,
    mut connections: Vec<Connection>,
    mut at: usize,
) {
    let period = Duration::from_millis((library.timeout_ms.get() / PINGS_PER_TIMEOUT).max(1));
    let mut pause = period;
    loop {
        tokio::time::sleep(pause).await;
        library.thawed().await;
        if library.generation.get() != generation || library.state() == State::Lost {
            let _ = ask_leader(&mut connections, &mut at, &Request::CloseSession { session }).await;
            return;
        }
        let reply = ask_leader(&mut connections, &mut at, &Request::Ping { session }).await;
        library.thawed().await;
        if library.generation.get() != generation {
            continue;
        }
        pause = match reply {
            Ok(Reply::Ok) => {
                library.heard();
                period
            }
            Ok(Reply::Expired) => {
                library.lost.set(true);
                period
            }
            _ => TICK,
        };
    }
}

/// Opens a new session of `timeout_ms` over `connections` (the old one, if
/// any, given up), and starts its heartbeat.
async fn open_session(
    library: &Rc<Library>,
    connections: &mut [Connection],
    at: &mut usize,
    timeout_ms: u64,
) -> Result<(), Failure> {
    library.give_up();
    let generation = library.generation.get();
    match ask_leader(connections, at, &Request::CreateSession { timeout_ms }).await? {
        Reply::Session(session) => {
            library.session.set(Some(session));
            library.timeout_ms.set(timeout_ms);
            library.lost.set(false);
            library.heard();
            let own: Vec<Connection> = connections.iter().map(Connection::unstalled).collect();
            tokio::task::spawn_local(heartbeat(library.clone(), generation, session, own, *at));
            Ok(())
        }
        // No session: nothing holds anything either way.
        _ => Err(Failure::NotSent),
    }
}

/// The recipe's transport over one client's connections to the members
/// ([`ZooKeeperSession`]).
struct Ensemble<'a> {
    connections: &'a mut [Connection],
    /// The member the client is connected to.
    at: &'a mut usize,
    library: &'a Library,
    /// When the current operation must be over, in ms of the client's clock.
    until_ms: u64,
    deadline_ms: u64,
}

fn unanswered(failure: Failure) -> Unanswered {
    match failure {
        Failure::NotSent => Unanswered::NotSent,
        Failure::Unknown => Unanswered::Unknown("timeout"),
    }
}

impl Ensemble<'_> {
    /// One request of the session, sent only while connected; an answer
    /// counts as hearing from the ensemble, `Expired` loses the session.
    async fn call(&mut self, request: impl FnOnce(u64) -> Request) -> Result<Reply, Unanswered> {
        let session = match (self.library.state(), self.library.session.get()) {
            (State::Connected, Some(session)) => session,
            _ => return Err(Unanswered::NotSent),
        };
        match ask_leader(self.connections, self.at, &request(session)).await {
            Ok(Reply::Expired) => {
                self.library.lost.set(true);
                Err(Unanswered::NotSent)
            }
            Ok(reply) => {
                self.library.heard();
                Ok(reply)
            }
            Err(failure) => Err(unanswered(failure)),
        }
    }

    /// How long a watch set now may wait: to `until_ms`, within the
    /// operation's deadline.
    fn wait_ms(&self, until_ms: u64) -> u64 {
        until_ms.min(self.until_ms).saturating_sub(client_ms())
    }
}

const BAD_REPLY: Unanswered = Unanswered::Unknown("bad-reply");

impl ZooKeeperSession for Ensemble<'_> {
    fn now_ms(&self) -> u64 {
        client_ms()
    }

    fn begin(&mut self) {
        self.until_ms = client_ms() + self.deadline_ms;
    }

    fn connection(&self) -> State {
        self.library.state()
    }

    async fn create_sequential(&mut self, parent: &str) -> Result<String, Unanswered> {
        let parent = parent.to_string();
        match self.call(|session| Request::Create { session, parent }).await? {
            Reply::Created(path) => Ok(path),
            _ => Err(BAD_REPLY),
        }
    }

    async fn children(&mut self, parent: &str) -> Result<Vec<String>, Unanswered> {
        let parent = parent.to_string();
        match self.call(|session| Request::Children { session, parent }).await? {
            Reply::Children(children) => Ok(children),
            _ => Err(BAD_REPLY),
        }
    }

    async fn czxid(&mut self, path: &str) -> Result<Option<u64>, Unanswered> {
        let path = path.to_string();
        match self.call(|session| Request::Czxid { session, path }).await? {
            Reply::Czxid(czxid) => Ok(czxid),
            _ => Err(BAD_REPLY),
        }
    }

    async fn wait_for_delete(&mut self, path: &str, until_ms: u64) -> Result<Woken, Unanswered> {
        let (path, wait_ms) = (path.to_string(), self.wait_ms(until_ms));
        if wait_ms == 0 {
            return Ok(Woken::TimedOut);
        }
        match self.call(|session| Request::WatchDelete { session, path, wait_ms }).await? {
            Reply::Woke(woke) => Ok(woke.into()),
            _ => Err(BAD_REPLY),
        }
    }

    async fn wait_for_children(
        &mut self,
        parent: &str,
        until_ms: u64,
    ) -> Result<Woken, Unanswered> {
        let (parent, wait_ms) = (parent.to_string(), self.wait_ms(until_ms));
        if wait_ms == 0 {
            return Ok(Woken::TimedOut);
        }
        match self.call(|session| Request::WatchChildren { session, parent, wait_ms }).await? {
            Reply::Woke(woke) => Ok(woke.into()),
            _ => Err(BAD_REPLY),
        }
    }

    async fn delete(&mut self, path: &str) -> Result<bool, Unanswered> {
        let path = path.to_string();
        match self.call(|session| Request::Delete { session, path }).await? {
            Reply::Deleted(existed) => Ok(existed),
            _ => Err(BAD_REPLY),
        }
    }

    async fn between_commands(&mut self) {
        if let Some(connection) = self.connections.get(*self.at) {
            connection.between_commands().await;
        }
    }
}

/// One client's session of the simulated ensemble: Curator's recipe, and
/// the library under it.
#[derive(Debug)]
struct ZooKeeperClient {
    variant: Variant,
    fencing: bool,
    /// The recipe, made at the first acquire (its wait in line is half the
    /// client's deadline, as the real client's).
    lock: Option<ZooKeeperLock>,
    library: Rc<Library>,
    /// The member the client is connected to.
    at: Option<usize>,
    /// Whether the client's stall stops the library's heartbeat yet.
    freezing: bool,
}

impl ZooKeeperClient {
    fn new(variant: Variant, fencing: bool) -> ZooKeeperClient {
        ZooKeeperClient {
            variant,
            fencing,
            lock: None,
            library: Rc::default(),
            at: None,
            freezing: false,
        }
    }

    /// The client's deadline for one request, in ms.
    fn deadline_ms(link: &Link) -> u64 {
        link.instances.first().map_or(1, |connection| connection.deadline().as_millis() as u64)
    }

    /// Ready to run: the stall stops the heartbeat, the recipe is made.
    fn prepare(&mut self, link: &mut Link) {
        if !self.freezing {
            freeze_with(&link.stall, &self.library);
            self.freezing = true;
        }
        if self.lock.is_none() {
            let wait_ms = (Self::deadline_ms(link) / 2).max(1);
            self.lock = Some(ZooKeeperLock::new(self.fencing, self.variant, wait_ms));
        }
    }
}

/// Stops `library`'s heartbeat whenever `stall` stalls the client.
fn freeze_with(stall: &Stall, library: &Library) {
    stall.freezing(Arc::new(Freeze(library.frozen.clone())));
}

impl SimSession for ZooKeeperClient {
    /// As Curator does once a session is lost, a new one is opened first.
    fn acquire<'a>(
        &'a mut self,
        link: &'a mut Link,
        key: &'a str,
        ttl_ms: u64,
    ) -> Pending<'a, Grant> {
        Box::pin(async move {
            self.prepare(link);
            let deadline_ms = Self::deadline_ms(link);
            let at = self.at.get_or_insert(link.number());
            if self.library.state() == State::Lost {
                let opened = open_session(&self.library, &mut link.instances, at, ttl_ms).await;
                if opened.is_err() {
                    return Outcome::Fail("unavailable".into());
                }
                if let Some(lock) = &mut self.lock {
                    lock.reset();
                }
            }
            let Some(lock) = &mut self.lock else { return Outcome::Fail("unavailable".into()) };
            let mut ensemble = Ensemble {
                connections: &mut link.instances,
                at,
                library: &self.library,
                until_ms: 0,
                deadline_ms,
            };
            lock.acquire(&mut ensemble, key).await
        })
    }

    fn release<'a>(
        &'a mut self,
        link: &'a mut Link,
        key: &'a str,
        _: &'a Grant,
    ) -> Pending<'a, ()> {
        Box::pin(async move {
            let deadline_ms = Self::deadline_ms(link);
            let at = self.at.get_or_insert(link.number());
            let Some(lock) = &mut self.lock else { return Outcome::Fail("not-held".into()) };
            let mut ensemble = Ensemble {
                connections: &mut link.instances,
                at,
                library: &self.library,
                until_ms: 0,
                deadline_ms,
            };
            lock.release(&mut ensemble, key).await
        })
    }

    /// ZooKeeper has no lease to renew: the holder checks its connection.
    fn renew<'a>(
        &'a mut self,
        link: &'a mut Link,
        key: &'a str,
        _: &'a Grant,
        _: u64,
    ) -> Pending<'a, ()> {
        Box::pin(async move {
            let deadline_ms = Self::deadline_ms(link);
            let at = self.at.get_or_insert(link.number());
            let Some(lock) = &mut self.lock else { return Outcome::Fail("not-held".into()) };
            let ensemble = Ensemble {
                connections: &mut link.instances,
                at,
                library: &self.library,
                until_ms: 0,
                deadline_ms,
            };
            lock.renew(&ensemble, key)
        })
    }

    /// A new session at the next acquire; the old one is closed by its
    /// heartbeat, or expires.
    fn reset(&mut self) {
        if let Some(lock) = &mut self.lock {
            lock.reset();
        }
        self.library.give_up();
    }

    fn take_wake_ups(&mut self) -> Option<u64> {
        Some(self.lock.as_mut().map_or(0, ZooKeeperLock::take_woken))
    }
}

// ---- Wake-ups per release, measured ----

/// What a line of waiters on one lock costs the ensemble:
/// [`wake_ups_per_release`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WakeUpCount {
    /// The watches that fired after each release, in the order of the
    /// releases (the ensemble's own count).
    pub per_release: Vec<u64>,
    /// The wake-ups the clients' recipes counted, in all (the joins of the
    /// line included), and of those the wasted ones.
    pub woken: u64,
    pub wasted: u64,
}

/// `clients` clients of `waiting`'s recipe line up on one lock of a
/// simulated ensemble (the first one holding it), one after another, each
/// waiting as long as it takes; once all are in line, each holder releases
/// in turn, half a second after its grant. What the releases woke: with
/// the predecessor's watch one waiter each, with the herd's every waiter
/// still in line. Deterministic for a `seed`.
pub fn wake_ups_per_release(
    waiting: Waiting,
    clients: u32,
    seed: u64,
) -> Result<WakeUpCount, String> {
    const STEP: Duration = Duration::from_millis(300);
    const HOLD: Duration = Duration::from_millis(500);
    let ttl_ms = 1000;
    let mut sim = turmoil::Builder::new()
        .simulation_duration(Duration::from_secs(30) + (STEP + HOLD) * clients * 2)
        .tick_duration(TICK)
        .min_message_latency(Duration::from_micros(100))
        .max_message_latency(TICK)
        .rng_seed(seed)
        .build();
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut hosting = Hosting {
        sim: &mut sim,
        rng: &mut rng,
        backend: Backend::ZooKeeper,
        persistent: true,
        ttl_ms,
    };
    let hosts = ZooKeeperEnsemble.lock_hosts(Service::ZooKeeper { members: 3 });
    let (_, members) = start_members(&mut hosting, hosts);
    let variant = Variant { waiting, ..Variant::CURATOR };
    // The release times, and the wake-ups each client's recipe counted.
    let releases: Rc<RefCell<Vec<Duration>>> = Rc::default();
    let counted: Rc<RefCell<Vec<(u64, u64)>>> = Rc::default();
    // Everyone is in line by then (the first release comes after it).
    let lined_up = STEP * (clients + 2);
    for client in 0..clients {
        let (releases, counted) = (releases.clone(), counted.clone());
        sim.client(format!("client-{client}"), async move {
            // Deadlines longer than any wait: the line waits as long as it takes.
            let mut connections: Vec<Connection> =
                hosts.iter().map(|host| Connection::new(host, Duration::from_secs(60))).collect();
            let library = Rc::new(Library::default());
            let mut at = client as usize;
            tokio::time::sleep(STEP * (client + 1)).await;
            if open_session(&library, &mut connections, &mut at, ttl_ms).await.is_err() {
                return Err(format!("client-{client} opened no session").into());
            }
            let mut lock = ZooKeeperLock::new(false, variant, 60_000);
            let mut ensemble = Ensemble {
                connections: &mut connections,
                at: &mut at,
                library: &library,
                until_ms: 0,
                deadline_ms: 60_000,
            };
            let granted = lock.acquire(&mut ensemble, "lock-0").await;
            if !matches!(granted, Outcome::Ok(_)) {
                return Err(format!("client-{client}: {granted:?}").into());
            }
            let release_at = if client == 0 {
                lined_up
            } else {
                turmoil::sim_elapsed().unwrap_or_default() + HOLD
            };
            let now = turmoil::sim_elapsed().unwrap_or_default();
            tokio::time::sleep(release_at.saturating_sub(now)).await;
            releases.borrow_mut().push(turmoil::sim_elapsed().unwrap_or_default());
            let released = lock.release(&mut ensemble, "lock-0").await;
            if released != Outcome::Ok(()) {
                return Err(format!("client-{client} release: {released:?}").into());
            }
            let wake_ups = lock.wake_ups();
            counted.borrow_mut().push((wake_ups.woken, wake_ups.wasted));
            library.give_up();
            Ok(())
        });
    }
    let fired = || members.iter().map(|member| member.borrow().fired).sum::<u64>();
    // The watches fired by the time of each release.
    let mut at_release = Vec::new();
    loop {
        let done = sim.step().map_err(|error| error.to_string())?;
        let released = releases.borrow().len();
        while at_release.len() < released {
            at_release.push(fired());
        }
        if done {
            break;
        }
    }
    at_release.push(fired());
    let per_release = at_release.windows(2).map(|pair| pair[1] - pair[0]).collect();
    let counted = counted.borrow();
    let woken = counted.iter().map(|&(woken, _)| woken).sum();
    let wasted = counted.iter().map(|&(_, wasted)| wasted).sum();
    Ok(WakeUpCount { per_release, woken, wasted })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(tree: &mut Tree, request: Request) -> (Reply, Changes) {
        let mut changes = Changes::default();
        let reply = tree.apply(&Command::Client(request), &mut changes);
        (reply, changes)
    }

    fn create(tree: &mut Tree, session: u64) -> String {
        match apply(tree, Request::Create { session, parent: "/lockcheck/l".into() }).0 {
            Reply::Created(path) => path,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn sequential_znodes_grow_and_die_with_their_session_and_every_write_takes_a_zxid() {
        let mut tree = Tree::default();
        assert_eq!(
            apply(&mut tree, Request::CreateSession { timeout_ms: 1000 }).0,
            Reply::Session(1)
        );
        assert_eq!(
            apply(&mut tree, Request::CreateSession { timeout_ms: 1000 }).0,
            Reply::Session(2)
        );
        let first = create(&mut tree, 1);
        let second = create(&mut tree, 2);
        assert_eq!(first, "/lockcheck/l/lock-0000000000");
        assert_eq!(second, "/lockcheck/l/lock-0000000001");
        let czxid = |tree: &mut Tree, path: &str| match apply(
            tree,
            Request::Czxid { session: 2, path: path.into() },
        )
        .0
        {
            Reply::Czxid(czxid) => czxid,
            other => panic!("{other:?}"),
        };
        let (a, b) = (czxid(&mut tree, &first), czxid(&mut tree, &second));
        assert!(a < b, "{a:?} {b:?}");
        let children = Reply::Children(vec!["lock-0000000000".into(), "lock-0000000001".into()]);
        assert_eq!(
            apply(&mut tree, Request::Children { session: 2, parent: "/lockcheck/l".into() }).0,
            children
        );
        // Session 1 ends: its znode is deleted, the parent's children change.
        let mut changes = Changes::default();
        assert_eq!(tree.apply(&Command::Expire { session: 1 }, &mut changes), Reply::Ok);
        assert_eq!(changes.deleted, [first.as_str()]);
        assert_eq!(changes.parents, ["/lockcheck/l"]);
        assert_eq!(czxid(&mut tree, &first), None);
        // A request of the ended session is refused.
        let refused =
            apply(&mut tree, Request::Create { session: 1, parent: "/lockcheck/l".into() });
        assert_eq!(refused.0, Reply::Expired);
        // A watch on a znode already gone needs no wait; one that exists waits.
        let watch =
            |path: &str| Request::WatchDelete { session: 2, path: path.into(), wait_ms: 10 };
        assert_eq!(apply(&mut tree, watch(&first)).0, Reply::Woke(Woke::Already));
        assert_eq!(apply(&mut tree, watch(&second)).0, Reply::Watching);
        let third = create(&mut tree, 2);
        assert!(czxid(&mut tree, &third) > b, "the zxid grew with the session's end");
    }

    #[test]
    fn connection_states_follow_the_silence_as_curator_counts_it() {
        let library = Library::default();
        assert_eq!(library.state_at(0), State::Lost, "no session yet");
        library.session.set(Some(1));
        library.timeout_ms.set(1000);
        library.last_answer_ms.set(5000);
        assert_eq!(library.state_at(5399), State::Connected);
        assert_eq!(library.state_at(5400), State::Suspended, "2/5 of the timeout silent");
        assert_eq!(library.state_at(6399), State::Suspended);
        // An answer brings it back.
        library.last_answer_ms.set(6000);
        assert_eq!(library.state_at(6399), State::Connected);
        assert_eq!(library.state_at(7400), State::Lost, "7/5 of the timeout silent");
        // Lost is for good: the session is given up.
        assert_eq!(library.state_at(6000), State::Lost);
        library.lost.set(false);
        library.give_up();
        assert_eq!(library.state_at(6000), State::Lost);
    }
}
