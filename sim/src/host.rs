//! Simulated servers as turmoil hosts, and the knobs a nemesis turns on them.

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::rc::Rc;
use std::time::Duration;

use lockcheck_workloads::{Outcome, Stall, StallPoint};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use turmoil::net::{TcpListener, TcpStream};

use crate::protocol::{Request, Response};
use crate::server::{KeyChange, ServerState};

/// Simulated time per turmoil step. Every step costs a few microseconds of
/// wall time whatever happens in it, so the tick sets the time compression;
/// 20 ms keeps a round trip (one to two ticks) far below a lease TTL.
pub(crate) const TICK: std::time::Duration = std::time::Duration::from_millis(20);

/// The port every simulated server listens on.
pub const PORT: u16 = 7000;

/// What a nemesis can do to a server host. Shared between the host's
/// software and the driver (everything runs on one thread).
#[derive(Debug)]
pub struct Knobs {
    /// A paused server (SIGSTOP) reads nothing until resumed.
    pub paused: Cell<bool>,
    /// The server's wall clock runs this far ahead of simulated time.
    pub clock_offset_ms: Cell<i64>,
    /// Extra delay before each reply, up to this many ms (uniform).
    pub delay_ms: Cell<u64>,
    /// Chance that a request, or else its reply, is lost.
    pub loss: Cell<f64>,
    /// Whether the state survives a restart.
    pub persistent: bool,
    rng: RefCell<SmallRng>,
}

impl Knobs {
    pub fn new(seed: u64, persistent: bool) -> Rc<Knobs> {
        Rc::new(Knobs {
            paused: Cell::new(false),
            clock_offset_ms: Cell::new(0),
            delay_ms: Cell::new(0),
            loss: Cell::new(0.0),
            persistent,
            rng: RefCell::new(SmallRng::seed_from_u64(seed)),
        })
    }

    /// The server's own clock, in ms.
    pub fn now_ms(&self) -> i64 {
        let elapsed = turmoil::sim_elapsed().unwrap_or_default().as_millis() as i64;
        elapsed + self.clock_offset_ms.get()
    }

    pub(crate) fn chance(&self, probability: f64) -> bool {
        probability > 0.0 && self.rng.borrow_mut().gen_bool(probability.min(1.0))
    }

    /// A uniform draw from `low..=high`, from the host's own randomness.
    pub(crate) fn uniform(&self, low: u64, high: u64) -> u64 {
        self.rng.borrow_mut().gen_range(low..=high.max(low))
    }

    pub(crate) fn delay(&self) -> Duration {
        match self.delay_ms.get() {
            0 => Duration::ZERO,
            max => Duration::from_millis(self.rng.borrow_mut().gen_range(0..=max)),
        }
    }
}

/// The software of a server host: serves `state` on [`PORT`]. Called again
/// on every restart; without persistence the state starts empty.
pub async fn serve(
    state: Rc<RefCell<ServerState>>,
    knobs: Rc<Knobs>,
) -> Result<(), Box<dyn std::error::Error>> {
    if !knobs.persistent {
        let fenced = state.borrow().fenced_storage;
        *state.borrow_mut() = ServerState::new(fenced);
    }
    let listener = TcpListener::bind(("0.0.0.0", PORT)).await?;
    loop {
        let (stream, _) = listener.accept().await?;
        tokio::task::spawn_local(connection(stream, state.clone(), knobs.clone(), None));
    }
}

/// Which of a primary and its replica is the primary now: what the clients
/// ask (Sentinel's answer) before each (re)connect, and what a failover flips.
#[derive(Debug, Clone)]
pub struct Primary {
    pub hosts: [&'static str; 2],
    index: Rc<Cell<usize>>,
}

impl Primary {
    /// The primary's index in `hosts`.
    pub fn index(&self) -> usize {
        self.index.get()
    }

    pub fn host(&self) -> &'static str {
        self.hosts[self.index()]
    }

    /// The replica becomes the primary.
    pub fn promote(&self) {
        self.index.set(1 - self.index());
    }
}

/// A Redis primary and its asynchronous replica: the lock service of a run
/// with the failover fault. The primary applies each write, answers, and
/// ships the key's new state to the replica a replication lag later; a
/// primary that crashes loses what it had not shipped yet.
#[derive(Debug)]
pub struct ReplicaSet {
    pub primary: Primary,
    states: [Rc<RefCell<ServerState>>; 2],
    /// The lag of one write, uniform, in ms (drawn by the primary's knobs).
    lag_ms: (u64, u64),
}

impl ReplicaSet {
    /// `hosts[0]` starts as the primary.
    pub fn new(hosts: [&'static str; 2], lag_ms: (u64, u64)) -> Rc<ReplicaSet> {
        Rc::new(ReplicaSet {
            primary: Primary { hosts, index: Rc::new(Cell::new(0)) },
            states: [(); 2].map(|()| Rc::new(RefCell::new(ServerState::new(false)))),
            lag_ms,
        })
    }
}

/// A host of a [`ReplicaSet`] and the stream of writes it has yet to ship.
#[derive(Debug)]
struct Replicating {
    set: Rc<ReplicaSet>,
    /// This host's index in the set.
    me: usize,
    ship: tokio::sync::mpsc::UnboundedSender<(tokio::time::Instant, KeyChange)>,
}

impl Replicating {
    fn is_primary(&self) -> bool {
        self.set.primary.index() == self.me
    }

    /// Queues `change` for the replica, a lag from now.
    fn ship(&self, change: KeyChange, knobs: &Knobs) {
        let (low, high) = self.set.lag_ms;
        let lag = Duration::from_millis(knobs.rng.borrow_mut().gen_range(low..=high.max(low)));
        // Sending fails only once this host's software is gone.
        let _ = self.ship.send((tokio::time::Instant::now() + lag, change));
    }
}

/// The software of host `me` of a replica set. On every (re)start it syncs
/// in full with the other host (Redis' full resynchronisation): a replica
/// copies the primary, and a restarted primary's replica copies it.
pub async fn serve_replicated(
    me: usize,
    set: Rc<ReplicaSet>,
    knobs: Rc<Knobs>,
) -> Result<(), Box<dyn std::error::Error>> {
    let state = set.states[me].clone();
    if !knobs.persistent {
        *state.borrow_mut() = ServerState::new(false);
    }
    let primary = set.primary.index();
    let copy = set.states[primary].borrow().clone();
    *set.states[1 - primary].borrow_mut() = copy;
    // The replication stream lives (and dies) with this host's software. It
    // ships in order: a write whose lag ends first waits for those before it.
    let (ship, mut unshipped) = tokio::sync::mpsc::unbounded_channel();
    let replica = set.states[1 - me].clone();
    tokio::task::spawn_local(async move {
        while let Some((at, change)) = unshipped.recv().await {
            tokio::time::sleep_until(at).await;
            replica.borrow_mut().apply(change);
        }
    });
    let replicating = Rc::new(Replicating { set, me, ship });
    let listener = TcpListener::bind(("0.0.0.0", PORT)).await?;
    loop {
        let (stream, _) = listener.accept().await?;
        let replicating = Some(replicating.clone());
        tokio::task::spawn_local(connection(stream, state.clone(), knobs.clone(), replicating));
    }
}

/// Serves one client connection: each line is a request that `handle`
/// answers (`None`: the connection closes), with the host's knobs applied
/// around it: a pause holds the request, loss drops it or its reply, delay
/// holds the reply. Every service's connections share this loop, so the
/// knobs draw their randomness in the same order everywhere.
pub(crate) async fn serve_requests<Q, A, F, Fut>(stream: TcpStream, knobs: &Knobs, mut handle: F)
where
    Q: DeserializeOwned,
    A: Serialize,
    F: FnMut(Q) -> Fut,
    Fut: std::future::Future<Output = Option<A>>,
{
    let (reader, mut writer) = stream.into_split();
    let mut reader = BufReader::new(reader);
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        while knobs.paused.get() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let Ok(request) = serde_json::from_str::<Q>(&line) else {
            return;
        };
        if knobs.chance(knobs.loss.get() / 2.0) {
            continue; // the request was lost
        }
        let Some(response) = handle(request).await else {
            return;
        };
        let delay = knobs.delay();
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        if knobs.chance(knobs.loss.get() / 2.0) {
            continue; // the reply was lost
        }
        let mut reply = serde_json::to_vec(&response).expect("responses serialize");
        reply.push(b'\n');
        if writer.write_all(&reply).await.is_err() {
            return;
        }
    }
}

async fn connection(
    stream: TcpStream,
    state: Rc<RefCell<ServerState>>,
    knobs: Rc<Knobs>,
    replicating: Option<Rc<Replicating>>,
) {
    serve_requests(stream, &knobs, |request| {
        let replicated = replicating.as_deref();
        let response = if replicated.is_some_and(|host| !host.is_primary()) {
            None // a replica takes no writes (and no client asks it)
        } else {
            let key = replicated.and(ServerState::redis_key(&request)).map(str::to_string);
            let response = state.borrow_mut().handle(request, knobs.now_ms());
            if let (Some(host), Some(key)) = (replicated, key) {
                if let Some(change) = state.borrow().change(&key, &response) {
                    host.ship(change, &knobs);
                }
            }
            Some(response)
        };
        std::future::ready(response)
    })
    .await
}

/// What a simulated transport sends its requests through: a connection to
/// a simulated host, or a model checker's script whose every reply is a
/// choice (`crate::modelled`).
#[allow(async_fn_in_trait)]
pub trait Caller {
    /// Sends `request` and waits for its reply.
    async fn call(&mut self, request: &Request) -> Result<Response, Failure>;
    /// Between two commands of one operation: `true` if the client stalled
    /// there (a pause asked for at that point).
    async fn between_commands(&mut self) -> bool;
    /// The client's own clock, in ms since the run began (the simulator's
    /// elapsed time).
    fn now_ms(&self) -> u64 {
        turmoil::sim_elapsed().unwrap_or_default().as_millis() as u64
    }
    /// How long one request may wait for its reply, in ms (a recipe that
    /// waits in line asks for slices of it).
    fn deadline_ms(&self) -> u64;
}

impl Caller for Connection {
    async fn call(&mut self, request: &Request) -> Result<Response, Failure> {
        Connection::call(self, request).await
    }

    fn deadline_ms(&self) -> u64 {
        self.deadline.as_millis() as u64
    }

    async fn between_commands(&mut self) -> bool {
        Connection::between_commands(self).await
    }
}

/// Why a request got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Failure {
    /// Nothing was sent: it certainly did not happen.
    NotSent,
    /// Sent, and then no reply in time or the connection broke: unknown.
    Unknown,
}

impl Failure {
    /// As an operation's outcome: a request not sent failed (`unavailable`),
    /// one without its reply is unknown (`timeout`).
    pub fn outcome<T>(self) -> Outcome<T> {
        match self {
            Failure::NotSent => Outcome::Fail("unavailable".into()),
            Failure::Unknown => Outcome::Info("timeout".into()),
        }
    }
}

/// The servers that are crashed right now, as the kill nemesis leaves them.
///
/// The kill fault is a process crash (SIGKILL), not a machine's: the
/// machine's kernel still answers, so a connection to the dead server is
/// refused at once, as it is against a real one. turmoil's crashed host
/// swallows the connection attempt instead, which would make every client
/// that dials it wait out its whole deadline: a member crash would look like
/// a partition, and an etcd holder retrying its dead member would outlive its
/// session (a false alarm in a safe cell, sim-etcd under kill at seed 288).
#[derive(Debug, Clone, Default)]
pub struct DownHosts(Rc<RefCell<BTreeSet<&'static str>>>);

impl DownHosts {
    pub fn set(&self, host: &'static str, down: bool) {
        let mut hosts = self.0.borrow_mut();
        if down {
            hosts.insert(host);
        } else {
            hosts.remove(host);
        }
    }

    pub fn contains(&self, host: &str) -> bool {
        self.0.borrow().contains(host)
    }
}

/// How long a refused connection takes: a round trip to a live kernel.
const REFUSED_AFTER: Duration = Duration::from_millis(1);

/// A client's connection to one server, opened on first use and again after
/// a failure.
#[derive(Debug)]
pub struct Connection {
    host: &'static str,
    /// Connect to whichever host is the primary instead.
    follow: Option<Primary>,
    deadline: Duration,
    stream:
        Option<(BufReader<turmoil::net::tcp::OwnedReadHalf>, turmoil::net::tcp::OwnedWriteHalf)>,
    down: DownHosts,
    /// The client's pause point: a pause asked for in flight strikes
    /// between a request and the reading of its reply.
    stall: Option<Stall>,
}

impl Connection {
    pub fn new(host: &'static str, deadline: Duration) -> Self {
        Connection {
            host,
            follow: None,
            deadline,
            stream: None,
            down: DownHosts::default(),
            stall: None,
        }
    }

    /// Stalls in flight when the client's pause asks for it.
    pub fn stalling(mut self, stall: &Stall) -> Self {
        self.stall = Some(stall.clone());
        self
    }

    /// Refuses at once to connect to a host while it is down.
    pub fn refusing_when_down(mut self, down: &DownHosts) -> Self {
        self.down = down.clone();
        self
    }

    /// A connection to a replica set's primary, whichever host that is when
    /// it (re)connects: a failover breaks it, and the next call finds the
    /// promoted replica.
    pub fn to_primary(primary: Primary, deadline: Duration) -> Self {
        Connection {
            host: primary.host(),
            follow: Some(primary),
            deadline,
            stream: None,
            down: DownHosts::default(),
            stall: None,
        }
    }

    /// Its deadline for one request.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// A connection of its own to the same host, with the same deadline,
    /// refusals and primary to follow, but no pause point: what a client
    /// library's background thread (ZooKeeper's heartbeats) talks over. A
    /// pause stops that thread by the client's freezer instead.
    pub fn unstalled(&self) -> Connection {
        Connection {
            host: self.host,
            follow: self.follow.clone(),
            deadline: self.deadline,
            stream: None,
            down: self.down.clone(),
            stall: None,
        }
    }

    /// Between two commands of a recipe: a pause asked for there strikes
    /// (`true` if it did).
    pub async fn between_commands(&self) -> bool {
        match &self.stall {
            Some(stall) => !stall.strike(StallPoint::BetweenCommands).await.is_zero(),
            None => false,
        }
    }

    /// Drops the connection, as a crashed client's session ends.
    pub fn reset(&mut self) {
        self.stream = None;
    }

    /// Sends one request and waits for its reply, within the deadline.
    pub async fn call(&mut self, request: &Request) -> Result<Response, Failure> {
        self.call_as(request).await
    }

    /// As [`Connection::call`], for a service that speaks requests and
    /// replies of its own.
    pub async fn call_as<Q: Serialize, A: DeserializeOwned>(
        &mut self,
        request: &Q,
    ) -> Result<A, Failure> {
        if self.stream.is_none() {
            if let Some(primary) = &self.follow {
                self.host = primary.host();
            }
            if self.down.contains(self.host) {
                tokio::time::sleep(REFUSED_AFTER).await;
                return Err(Failure::NotSent);
            }
            let connect = TcpStream::connect((self.host, PORT));
            match tokio::time::timeout(self.deadline, connect).await {
                Ok(Ok(stream)) => {
                    let (reader, writer) = stream.into_split();
                    self.stream = Some((BufReader::new(reader), writer));
                }
                _ => return Err(Failure::NotSent),
            }
        }
        let (reader, writer) = self.stream.as_mut().expect("connected above");
        let mut line = serde_json::to_vec(request).expect("requests serialize");
        line.push(b'\n');
        let in_flight =
            self.stall.as_ref().filter(|stall| stall.is_pending_at(StallPoint::InFlight)).cloned();
        if let Some(stall) = in_flight {
            // Sent, then the client stalls before it reads the reply: the
            // stall is its own, not the server's, so the deadline starts
            // again when it resumes.
            let sent = tokio::time::timeout(self.deadline, writer.write_all(&line)).await;
            if !matches!(sent, Ok(Ok(()))) {
                self.stream = None;
                return Err(Failure::Unknown);
            }
            stall.strike(StallPoint::InFlight).await;
            let (reader, _) = self.stream.as_mut().expect("connected above");
            let read = async {
                let mut reply = String::new();
                if reader.read_line(&mut reply).await? == 0 {
                    return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
                }
                Ok::<_, std::io::Error>(reply)
            };
            let reply = tokio::time::timeout(self.deadline, read).await;
            return self.answer(reply);
        }
        let exchange = async {
            writer.write_all(&line).await?;
            let mut reply = String::new();
            if reader.read_line(&mut reply).await? == 0 {
                return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
            }
            Ok::<_, std::io::Error>(reply)
        };
        let reply = tokio::time::timeout(self.deadline, exchange).await;
        self.answer(reply)
    }

    /// The response in `reply`, read within the deadline or not.
    fn answer<A: DeserializeOwned>(
        &mut self,
        reply: Result<std::io::Result<String>, tokio::time::error::Elapsed>,
    ) -> Result<A, Failure> {
        match reply {
            Ok(Ok(reply)) => match serde_json::from_str(&reply) {
                Ok(response) => Ok(response),
                Err(_) => {
                    self.stream = None;
                    Err(Failure::Unknown)
                }
            },
            _ => {
                // A reply may still be on its way: never read it as the
                // answer to the next request.
                self.stream = None;
                Err(Failure::Unknown)
            }
        }
    }
}
