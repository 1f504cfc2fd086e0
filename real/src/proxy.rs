//! A fault-injecting TCP proxy: partitions and slow links between real
//! servers on one machine, without root or iptables.
//!
//! Every path of a real test (a client to a lock server, an etcd member to
//! its peers, a Redis replica to its primary) is dialed through a loopback
//! listener of the proxy, so each connection belongs to a *link*
//! `from -> to` between two named nodes (`client-3`, `redis-0`, `etcd-1`).
//! A link's [`LinkState`] decides what happens to the bytes of every
//! connection on it, both ways:
//! * [`LinkState::Pass`] forwards them as they come, half-closes included;
//! * [`LinkState::Hold`] is a partition that drops packets (iptables DROP):
//!   the proxy stops reading, so senders block once the kernel buffers fill,
//!   and nothing is lost or reordered when the hold ends. Dropping bytes
//!   instead would corrupt a Redis or HTTP/2 stream, which no real network
//!   does to a TCP connection;
//! * [`LinkState::Cut`] resets every connection on the link (RST both ways)
//!   and every new one;
//! * [`LinkState::Delay`] is a one-way latency: a chunk read at `t` is
//!   written at `t + d`, in order.
//!
//! A state change reaches the existing connections at once: each follows its
//! link through a `watch` channel, so nothing polls.
//!
//! The proxy runs on its own thread with its own runtime: the callers are
//! sometimes blocking code (an etcd cluster's start waits for its members to
//! elect a leader, over the proxy), and the test driver's runtime is
//! single-threaded. Its API is synchronous and cheap to call from async code.
//!
//! etcd members dial their peers by the URLs the cluster advertises, so one
//! listener per member ([`Proxy::route_peers`]) carries the traffic of every
//! other member: the source of a connection is learned from the
//! `X-Server-From` header (the sender's member id in hex) of its first
//! request, and named through [`Proxy::alias`], which may come after the
//! connection opened (the ids are known only once the cluster runs).

use std::collections::{BTreeMap, HashMap};
use std::future::pending;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::Duration;
use std::{fmt, io};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::{Builder, Handle};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{sleep, sleep_until, timeout, Instant};

use super::RealError;

/// The source of a peer connection that named none (etcd's health probes
/// and version checks, which carry no `X-Server-From` header).
pub const UNKNOWN_SOURCE: &str = "unknown";

/// The most bytes one read takes from a socket.
const CHUNK_BYTES: usize = 16 * 1024;
/// Chunks read but not yet written, per direction of a connection (a delay
/// keeps them): past this the proxy stops reading, so a fast sender on a
/// slow link is held back by TCP instead of filling the proxy's memory.
const QUEUE_CHUNKS: usize = 64;
/// How much of a peer connection's first request is read to find its
/// source, and for how long: an HTTP request head is far smaller, and etcd
/// sends it at once.
const SNIFF_BYTES: usize = 16 * 1024;
const SNIFF_TIMEOUT: Duration = Duration::from_secs(2);
/// The pause after a failed accept (out of file descriptors), so the
/// listener does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(10);

/// How a link treats its traffic, both directions of every connection on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LinkState {
    /// Bytes are forwarded as they come.
    #[default]
    Pass,
    /// Nothing moves, nothing is lost: a partition without resets.
    Hold,
    /// Connections are reset, new ones too.
    Cut,
    /// Every chunk arrives this long after it was sent (one-way latency).
    Delay(Duration),
}

/// What went over one link so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkStats {
    /// The node that dialed the connections (after aliases).
    pub from: String,
    /// The node they reach.
    pub to: String,
    /// Connections `from` opened to `to` (accepted by the proxy).
    pub connections: u64,
    /// Bytes forwarded from `from` to `to`.
    pub bytes_sent: u64,
    /// Bytes forwarded back, from `to` to `from`.
    pub bytes_received: u64,
}

/// A running proxy; clones share it. Dropping the last one stops it: its
/// listeners and connections close and its thread is joined.
#[derive(Debug, Clone)]
pub struct Proxy {
    running: Arc<Running>,
}

/// The proxy's thread and what its tasks share.
#[derive(Debug)]
struct Running {
    links: Arc<Links>,
    runtime: Handle,
    /// Dropped to stop the runtime.
    stop: Option<oneshot::Sender<()>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Proxy {
    /// Starts the proxy's thread and runtime.
    pub fn start() -> Result<Proxy, RealError> {
        let runtime = Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|error| setup_error(format!("cannot build its runtime: {error}")))?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = thread::Builder::new()
            .name("lockcheck-proxy".to_string())
            .spawn(move || {
                runtime.block_on(async {
                    let _ = stopped.await;
                });
                // Dropping the runtime drops every listener and connection.
                drop(runtime);
            })
            .map_err(|error| setup_error(format!("cannot start its thread: {error}")))?;
        let running = Running {
            links: Arc::new(Links::new()),
            runtime: handle,
            stop: Some(stop),
            thread: Some(thread),
        };
        Ok(Proxy { running: Arc::new(running) })
    }

    /// A new loopback listener (127.0.0.1, a free port) that forwards every
    /// connection to `target`; its connections are the link `from -> to`.
    pub fn route(&self, from: &str, to: &str, target: SocketAddr) -> Result<SocketAddr, RealError> {
        self.listen(Source::Fixed(from.to_string()), to, target)
    }

    /// A listener for etcd's peer traffic to member `to`: the source of each
    /// connection is the `X-Server-From: <member id in hex>` header of its
    /// first HTTP request (etcd's rafthttp sets it on its stream, pipeline
    /// and snapshot requests), named through [`Proxy::alias`] whenever the
    /// state is looked up. A connection without it comes from
    /// `UNKNOWN_SOURCE`.
    pub fn route_peers(&self, to: &str, target: SocketAddr) -> Result<SocketAddr, RealError> {
        self.listen(Source::Peer, to, target)
    }

    /// Names the source `id` (an etcd member id in hex, any case) `name`,
    /// for the connections already open from it as for new ones.
    pub fn alias(&self, id: &str, name: &str) {
        self.running.links.alias(id, name);
    }

    /// Sets the link `from -> to` (the connections `from` dials to `to`,
    /// both directions of their bytes); existing connections follow at once.
    pub fn set(&self, from: &str, to: &str, state: LinkState) {
        self.running.links.set(from, to, state);
    }

    /// Sets both links between `a` and `b`.
    pub fn set_both(&self, a: &str, b: &str, state: LinkState) {
        self.set(a, b, state);
        self.set(b, a, state);
    }

    /// Holds the links from `from` to each of `to`, both ways, from the
    /// moment a reply reaches `from` on any connection of them after `from`
    /// sent something (so not the rest of an earlier reply, passed on just
    /// as this is called), until [`Proxy::disarm`]: a process that stalls
    /// between two round trips of one operation, after the first reply and
    /// before its next command.
    pub fn hold_after_reply(&self, from: &str, to: &[String]) -> Arc<ReplyHold> {
        let state = Arc::new(ReplyHold::default());
        let trap = Trap { to: to.to_vec(), state: Arc::clone(&state), asked: false };
        let links = &self.running.links;
        let mut traps = lock(&links.traps);
        traps.insert(from.to_string(), trap);
        links.armed.store(true, Ordering::SeqCst);
        state
    }

    /// Drops the hold waiting for a reply to `from`, and lifts the links
    /// from `from` to each of `to` if it struck.
    pub fn disarm(&self, from: &str, to: &[String]) {
        let links = &self.running.links;
        let waiting = {
            let mut traps = lock(&links.traps);
            let waiting = traps.remove(from);
            links.armed.store(!traps.is_empty(), Ordering::SeqCst);
            waiting
        };
        if waiting.is_none() {
            for to in to {
                self.set_both(from, to, LinkState::Pass);
            }
        }
    }

    /// Every link back to [`LinkState::Pass`].
    pub fn heal(&self) {
        self.running.links.heal();
    }

    /// What went over each link so far, sorted by `(from, to)`; a peer
    /// connection's source is named by the aliases known now.
    pub fn stats(&self) -> Vec<LinkStats> {
        self.running.links.stats()
    }

    fn listen(
        &self,
        source: Source,
        to: &str,
        target: SocketAddr,
    ) -> Result<SocketAddr, RealError> {
        let bound = || -> io::Result<(TcpListener, SocketAddr)> {
            let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
            listener.set_nonblocking(true)?;
            let address = listener.local_addr()?;
            let _context = self.running.runtime.enter();
            Ok((TcpListener::from_std(listener)?, address))
        };
        let (listener, address) = bound().map_err(|error| {
            setup_error(format!("cannot listen for {to} (to {target}): {error}"))
        })?;
        let route = Arc::new(Route { source, to: to.to_string(), target });
        let links = Arc::clone(&self.running.links);
        self.running.runtime.spawn(accept_loop(listener, links, route));
        Ok(address)
    }
}

fn setup_error(reason: String) -> RealError {
    RealError::Setup { what: "the fault-injecting proxy", reason }
}

/// A client's links to its servers through the proxy, held while the
/// client stalls: a process in a GC pause neither sends nor reads.
#[derive(Debug, Clone)]
pub struct LinkFreezer {
    pub proxy: Proxy,
    pub from: String,
    pub to: Vec<String>,
}

impl LinkFreezer {
    /// Holds the links from the next reply on ([`Proxy::hold_after_reply`]).
    pub fn hold_after_reply(&self) -> Arc<ReplyHold> {
        self.proxy.hold_after_reply(&self.from, &self.to)
    }

    /// Drops a hold after a reply, or lifts it if it struck.
    pub fn disarm(&self) {
        self.proxy.disarm(&self.from, &self.to);
    }
}

impl lockcheck_workloads::Freezer for LinkFreezer {
    fn freeze(&self) {
        for to in &self.to {
            self.proxy.set_both(&self.from, to, LinkState::Hold);
        }
    }

    fn thaw(&self) {
        for to in &self.to {
            self.proxy.set_both(&self.from, to, LinkState::Pass);
        }
    }
}

// ---------------------------------------------------------------------------
// Links: their states, the aliases of peer sources, the counters

/// A hold waiting for the next reply to reach its node
/// ([`Proxy::hold_after_reply`]).
#[derive(Debug)]
struct Trap {
    to: Vec<String>,
    state: Arc<ReplyHold>,
    /// Bytes went from the node to its servers since it was armed: only a
    /// reply after them strikes (not the last bytes of an earlier reply,
    /// passed on just before it was armed).
    asked: bool,
}

/// A hold after a reply: whether the reply came, and the hold struck.
#[derive(Debug, Default)]
pub struct ReplyHold {
    struck: AtomicBool,
    notify: tokio::sync::Notify,
}

impl ReplyHold {
    /// The reply came, and the hold struck.
    pub fn struck(&self) -> bool {
        self.struck.load(Ordering::SeqCst)
    }

    /// Waits until it strikes (on any runtime).
    pub async fn strikes(&self) {
        let notified = self.notify.notified();
        if !self.struck() {
            notified.await;
        }
    }
}

/// The links' states, by `(from, to)` after aliases; a link's channel is
/// made on first use and kept, so a connection looks its state up once and
/// then only reads its channel.
struct Links {
    states: Mutex<HashMap<(String, String), watch::Sender<LinkState>>>,
    /// Holds waiting for a reply, by the node the reply goes to.
    traps: Mutex<HashMap<String, Trap>>,
    /// Whether any hold waits: every chunk of a reply asks, so the common
    /// case, none, takes no lock.
    armed: AtomicBool,
    aliases: Mutex<HashMap<String, String>>,
    /// Bumped on every new alias: connections from a peer look their link
    /// up again.
    alias_changes: watch::Sender<u64>,
    /// By `(source as seen, to)`: the stats name sources by the aliases
    /// known when they are read.
    counters: Mutex<BTreeMap<(String, String), Arc<Counters>>>,
}

impl fmt::Debug for Links {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Links")
            .field("links", &lock(&self.states).len())
            .field("aliases", &*lock(&self.aliases))
            .finish()
    }
}

#[derive(Debug, Default)]
struct Counters {
    connections: AtomicU64,
    bytes_sent: AtomicU64,
    bytes_received: AtomicU64,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Links {
    fn new() -> Links {
        Links {
            states: Mutex::new(HashMap::new()),
            traps: Mutex::new(HashMap::new()),
            armed: AtomicBool::new(false),
            aliases: Mutex::new(HashMap::new()),
            alias_changes: watch::channel(0).0,
            counters: Mutex::new(BTreeMap::new()),
        }
    }

    /// The name `source` goes by: its alias, else itself.
    fn resolve(&self, source: &str) -> String {
        lock(&self.aliases).get(source).cloned().unwrap_or_else(|| source.to_string())
    }

    /// Follows the state of the link `from -> to` (names after aliases).
    fn subscribe(&self, from: &str, to: &str) -> watch::Receiver<LinkState> {
        let mut states = lock(&self.states);
        let key = (from.to_string(), to.to_string());
        states.entry(key).or_insert_with(|| watch::channel(LinkState::Pass).0).subscribe()
    }

    fn set(&self, from: &str, to: &str, state: LinkState) {
        let mut states = lock(&self.states);
        let key = (from.to_string(), to.to_string());
        let link = states.entry(key).or_insert_with(|| watch::channel(LinkState::Pass).0);
        replace(link, state);
    }

    fn heal(&self) {
        for link in lock(&self.states).values() {
            replace(link, LinkState::Pass);
        }
    }

    /// Bytes went from `source` (before aliases) to a server: a hold waiting
    /// for its next reply may strike from now on.
    fn asked(&self, source: &str) {
        if !self.armed.load(Ordering::SeqCst) {
            return;
        }
        let from = self.resolve(source);
        if let Some(trap) = lock(&self.traps).get_mut(&from) {
            trap.asked = true;
        }
    }

    /// A reply reached `source` (before aliases): the hold waiting for it,
    /// if any, strikes now.
    fn spring(&self, source: &str) {
        if !self.armed.load(Ordering::SeqCst) {
            return;
        }
        let from = self.resolve(source);
        let trap = {
            let mut traps = lock(&self.traps);
            if !traps.get(&from).is_some_and(|trap| trap.asked) {
                return;
            }
            let trap = traps.remove(&from);
            self.armed.store(!traps.is_empty(), Ordering::SeqCst);
            trap
        };
        let Some(trap) = trap else { return };
        let from = from.as_str();
        for to in &trap.to {
            self.set(from, to, LinkState::Hold);
            self.set(to, from, LinkState::Hold);
        }
        trap.state.struck.store(true, Ordering::SeqCst);
        trap.state.notify.notify_waiters();
    }

    fn alias(&self, id: &str, name: &str) {
        lock(&self.aliases).insert(id.trim().to_ascii_lowercase(), name.to_string());
        self.alias_changes.send_modify(|generation| *generation += 1);
    }

    fn counters(&self, source: &str, to: &str) -> Arc<Counters> {
        let mut counters = lock(&self.counters);
        let key = (source.to_string(), to.to_string());
        Arc::clone(counters.entry(key).or_default())
    }

    fn stats(&self) -> Vec<LinkStats> {
        let counters: Vec<((String, String), Arc<Counters>)> = lock(&self.counters)
            .iter()
            .map(|(key, value)| (key.clone(), Arc::clone(value)))
            .collect();
        let mut merged: BTreeMap<(String, String), [u64; 3]> = BTreeMap::new();
        for ((source, to), counter) in counters {
            let sums = merged.entry((self.resolve(&source), to)).or_default();
            sums[0] += counter.connections.load(Ordering::Relaxed);
            sums[1] += counter.bytes_sent.load(Ordering::Relaxed);
            sums[2] += counter.bytes_received.load(Ordering::Relaxed);
        }
        merged
            .into_iter()
            .map(|((from, to), [connections, bytes_sent, bytes_received])| LinkStats {
                from,
                to,
                connections,
                bytes_sent,
                bytes_received,
            })
            .collect()
    }
}

/// Sets a state, waking the connections only if it changed.
fn replace(link: &watch::Sender<LinkState>, state: LinkState) {
    link.send_if_modified(|current| {
        let changed = *current != state;
        *current = state;
        changed
    });
}

// ---------------------------------------------------------------------------
// Listeners and connections

/// Where a listener's connections come from.
#[derive(Debug)]
enum Source {
    /// Every connection is from this node.
    Fixed(String),
    /// Each connection names its source (etcd's `X-Server-From`).
    Peer,
}

#[derive(Debug)]
struct Route {
    source: Source,
    to: String,
    target: SocketAddr,
}

async fn accept_loop(listener: TcpListener, links: Arc<Links>, route: Arc<Route>) {
    loop {
        match listener.accept().await {
            Ok((downstream, _)) => {
                tokio::spawn(serve(downstream, Arc::clone(&links), Arc::clone(&route)));
            }
            Err(_) => sleep(ACCEPT_BACKOFF).await,
        }
    }
}

/// One connection: its source found, its link followed, its bytes
/// forwarded until both sides closed, an error, or a cut.
async fn serve(mut downstream: TcpStream, links: Arc<Links>, route: Arc<Route>) {
    // A proxy must not add Nagle's delay to small writes (Redis commands).
    let _ = downstream.set_nodelay(true);
    let (source, head) = match &route.source {
        Source::Fixed(from) => (from.clone(), Vec::new()),
        Source::Peer => sniff_source(&mut downstream).await,
    };
    let counters = links.counters(&source, &route.to);
    counters.connections.fetch_add(1, Ordering::Relaxed);
    let initial = *links.subscribe(&links.resolve(&source), &route.to).borrow();
    let (effective, state) = watch::channel(initial);
    // A reply reached the source: a hold waiting for it strikes.
    let replied = || links.spring(&source);
    let asked = || links.asked(&source);
    // Biased: a link change is copied into `effective` before the pumps
    // look at it. Polled in random order, a chunk that arrived together with
    // the change (a proxy thread starved on a loaded machine) could be
    // forwarded by the old state, a delay skipped.
    tokio::select! {
        biased;
        () = follow_link(&links, &source, &route.to, &effective) => {}
        () = connect_and_forward(downstream, head, route.target, state, &counters, &asked, &replied) => {}
    }
}

/// Keeps `effective` equal to the state of the link from `source` to `to`,
/// looking the link up again whenever an alias may have renamed `source`.
async fn follow_link(links: &Links, source: &str, to: &str, effective: &watch::Sender<LinkState>) {
    let mut aliases = links.alias_changes.subscribe();
    loop {
        aliases.borrow_and_update();
        let mut link = links.subscribe(&links.resolve(source), to);
        loop {
            replace(effective, *link.borrow_and_update());
            tokio::select! {
                () = changed(&mut link) => {}
                () = changed(&mut aliases) => break,
            }
        }
    }
}

/// The next change of a channel; never, if its sender is gone (the links
/// keep theirs for the proxy's life, so that means the proxy is stopping).
async fn changed<T>(receiver: &mut watch::Receiver<T>) {
    if receiver.changed().await.is_err() {
        pending::<()>().await;
    }
}

/// Connects upstream once the link is not held (a held link's connection is
/// accepted but not connected, as a SYN would not get through), then
/// forwards. A cut link, or a failed connect, resets the connection.
async fn connect_and_forward(
    downstream: TcpStream,
    head: Vec<u8>,
    target: SocketAddr,
    mut state: watch::Receiver<LinkState>,
    counters: &Counters,
    asked: &(dyn Fn() + Sync),
    replied: &(dyn Fn() + Sync),
) {
    let now = state.wait_for(|state| *state != LinkState::Hold).await.map(|state| *state);
    if now.unwrap_or(LinkState::Cut) == LinkState::Cut {
        reset(&downstream);
        return;
    }
    let upstream = tokio::select! {
        connected = TcpStream::connect(target) => connected,
        () = until_cut(state.clone()) => Err(io::ErrorKind::ConnectionAborted.into()),
    };
    match upstream {
        Ok(upstream) => {
            let _ = upstream.set_nodelay(true);
            forward(downstream, upstream, head, state, counters, asked, replied).await;
        }
        Err(_) => reset(&downstream),
    }
}

/// Forwards both directions until both ended cleanly (each side's FIN passed
/// on to the other), or resets both sides on an error or a cut.
async fn forward(
    mut downstream: TcpStream,
    mut upstream: TcpStream,
    head: Vec<u8>,
    state: watch::Receiver<LinkState>,
    counters: &Counters,
    asked: &(dyn Fn() + Sync),
    replied: &(dyn Fn() + Sync),
) {
    let clean = {
        let (down_read, down_write) = downstream.split();
        let (up_read, up_write) = upstream.split();
        let sent = pump(down_read, up_write, head, state.clone(), &counters.bytes_sent, asked);
        let back =
            pump(up_read, down_write, Vec::new(), state.clone(), &counters.bytes_received, replied);
        tokio::select! {
            both = async { tokio::try_join!(sent, back) } => both.is_ok(),
            () = until_cut(state) => false,
        }
    };
    if !clean {
        reset(&downstream);
        reset(&upstream);
    }
}

/// Makes the coming close of `stream` a reset (RST), as a cut link or a
/// failed peer does; the stream is closed when dropped.
fn reset(stream: &TcpStream) {
    let _ = stream.set_zero_linger();
}

async fn until_cut(mut state: watch::Receiver<LinkState>) {
    if state.wait_for(|state| *state == LinkState::Cut).await.is_err() {
        pending::<()>().await;
    }
}

/// A chunk of bytes and when it was read (a delay counts from then).
#[derive(Debug)]
struct Chunk {
    read_at: Instant,
    bytes: Vec<u8>,
}

/// One direction of a connection: reads `source` (after `head`, what was
/// already read of it) into a bounded queue and writes the queue to `sink`
/// as the link allows, then passes the end of the stream on (a half-close).
/// Reading and writing are apart, so a delayed chunk does not stop the
/// next one being read at its own time. `written` is called after each
/// chunk is written.
async fn pump<R, W>(
    source: R,
    mut sink: W,
    head: Vec<u8>,
    state: watch::Receiver<LinkState>,
    forwarded: &AtomicU64,
    written: &(dyn Fn() + Sync),
) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let (queue, mut queued) = mpsc::channel::<Chunk>(QUEUE_CHUNKS);
    let reading = read_chunks(source, head, queue, state.clone());
    let writing = async move {
        let mut state = state;
        while let Some(chunk) = queued.recv().await {
            if chunk.bytes.is_empty() {
                // The end of the stream: held and delayed like the bytes
                // before it.
                until_deliverable(&mut state, chunk.read_at).await;
                return sink.shutdown().await;
            }
            write_chunk(&mut sink, &chunk, &mut state).await?;
            forwarded.fetch_add(chunk.bytes.len() as u64, Ordering::Relaxed);
            written();
        }
        Ok(())
    };
    tokio::try_join!(reading, writing).map(|_| ())
}

/// Reads chunks into `queue`, then an empty one for the end of the stream;
/// never while the link is held, so the sender's kernel buffers fill and it
/// blocks.
async fn read_chunks<R: AsyncRead + Unpin>(
    mut source: R,
    head: Vec<u8>,
    queue: mpsc::Sender<Chunk>,
    mut state: watch::Receiver<LinkState>,
) -> io::Result<()> {
    if !head.is_empty() && queue.send(Chunk { read_at: Instant::now(), bytes: head }).await.is_err()
    {
        return Ok(());
    }
    let mut buffer = vec![0u8; CHUNK_BYTES];
    loop {
        if state.wait_for(|state| *state != LinkState::Hold).await.is_err() {
            pending::<()>().await;
        }
        let read = source.read(&mut buffer).await?;
        // The queue is closed only when the writer failed: nothing to do.
        let chunk = Chunk { read_at: Instant::now(), bytes: buffer[..read].to_vec() };
        if queue.send(chunk).await.is_err() || read == 0 {
            return Ok(());
        }
    }
}

/// Writes a chunk once the link lets it through; a hold (or a new delay)
/// that starts in the middle stops the rest of it.
async fn write_chunk<W: AsyncWrite + Unpin>(
    sink: &mut W,
    chunk: &Chunk,
    state: &mut watch::Receiver<LinkState>,
) -> io::Result<()> {
    let mut written = 0;
    while written < chunk.bytes.len() {
        until_deliverable(state, chunk.read_at).await;
        // A write not finished when the state changes wrote nothing.
        tokio::select! {
            wrote = sink.write(&chunk.bytes[written..]) => match wrote? {
                0 => return Err(io::ErrorKind::WriteZero.into()),
                wrote => written += wrote,
            },
            () = changed(state) => {}
        }
    }
    Ok(())
}

/// Waits until what was read at `read_at` may be written: the link is not
/// held (nor cut: the connection is being reset), and its delay has passed
/// since `read_at`. A delay change applies to what is still queued; the
/// queue keeps the order.
async fn until_deliverable(state: &mut watch::Receiver<LinkState>, read_at: Instant) {
    loop {
        let due = match *state.borrow_and_update() {
            LinkState::Pass => return,
            LinkState::Delay(delay) => read_at.checked_add(delay),
            LinkState::Hold | LinkState::Cut => None,
        };
        match due {
            Some(due) if Instant::now() >= due => return,
            Some(due) => tokio::select! {
                () = sleep_until(due) => return,
                () = changed(state) => {}
            },
            None => changed(state).await,
        }
    }
}

/// Reads the head of a peer connection's first HTTP request and finds its
/// source in it; returns the source and every byte read, to be forwarded.
async fn sniff_source(downstream: &mut TcpStream) -> (String, Vec<u8>) {
    let mut head = Vec::new();
    let reading = async {
        let mut buffer = [0u8; 4096];
        while head_end(&head).is_none() && head.len() < SNIFF_BYTES {
            match downstream.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(read) => head.extend_from_slice(&buffer[..read]),
            }
        }
    };
    let _ = timeout(SNIFF_TIMEOUT, reading).await;
    let source = server_from(&head).unwrap_or_else(|| UNKNOWN_SOURCE.to_string());
    (source, head)
}

/// Where an HTTP request's head ends (its blank line), if it was all read.
fn head_end(bytes: &[u8]) -> Option<usize> {
    bytes.windows(4).position(|window| window == b"\r\n\r\n")
}

/// The `X-Server-From` value of a complete request head, lower-cased.
fn server_from(bytes: &[u8]) -> Option<String> {
    let head = String::from_utf8_lossy(&bytes[..head_end(bytes)?]).into_owned();
    head.split("\r\n").skip(1).find_map(|line| {
        let (name, value) = line.split_once(':')?;
        let value = value.trim();
        let named = name.trim().eq_ignore_ascii_case("x-server-from") && !value.is_empty();
        named.then(|| value.to_ascii_lowercase())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_source_is_the_x_server_from_header_of_a_complete_head() {
        let request = b"GET /raft/stream/message/1 HTTP/1.1\r\nHost: x\r\nx-server-from: 8E9E05C52164694D\r\n\r\nbody";
        assert_eq!(server_from(request).as_deref(), Some("8e9e05c52164694d"));
        assert_eq!(server_from(b"GET / HTTP/1.1\r\nX-Server-From: 1f\r\n"), None);
        assert_eq!(server_from(b"GET /version HTTP/1.1\r\nHost: x\r\n\r\n"), None);
        assert_eq!(server_from(b"GET / HTTP/1.1\r\nX-Server-From:\r\n\r\n"), None);
    }

    #[test]
    fn a_hold_after_a_reply_strikes_only_on_a_reply_to_bytes_sent_after_it_was_armed() {
        let proxy = Proxy::start().expect("the proxy starts");
        let links = &proxy.running.links;
        let held = proxy.hold_after_reply("client-0", &["echo".to_string()]);
        // The end of an earlier reply, passed on as the hold was armed.
        links.spring("client-0");
        assert!(!held.struck());
        assert_eq!(*links.subscribe("client-0", "echo").borrow(), LinkState::Pass);
        // A request, then its reply: the hold strikes.
        links.asked("client-0");
        links.spring("client-0");
        assert!(held.struck());
        assert_eq!(*links.subscribe("client-0", "echo").borrow(), LinkState::Hold);
        proxy.disarm("client-0", &["echo".to_string()]);
        assert_eq!(*links.subscribe("client-0", "echo").borrow(), LinkState::Pass);
    }

    #[test]
    fn stats_name_sources_by_their_aliases_and_merge_them() {
        let links = Links::new();
        links.counters("8e9e05c52164694d", "etcd-0").bytes_sent.fetch_add(5, Ordering::Relaxed);
        links.counters("unknown", "etcd-0").connections.fetch_add(1, Ordering::Relaxed);
        links.counters("etcd-1", "etcd-0").bytes_sent.fetch_add(2, Ordering::Relaxed);
        links.alias("8E9E05C52164694D", "etcd-1");
        let stats = links.stats();
        let names: Vec<(&str, &str)> =
            stats.iter().map(|link| (link.from.as_str(), link.to.as_str())).collect();
        assert_eq!(names, [("etcd-1", "etcd-0"), ("unknown", "etcd-0")]);
        assert_eq!(stats[0].bytes_sent, 7);
    }
}
