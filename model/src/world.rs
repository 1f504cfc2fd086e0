//! The model: clients that each run the recipe's operations (acquire,
//! write to the protected resource with their token, release) against
//! the simulator's server state machines, with time in explicit ticks and
//! a budget of faults. stateright explores every interleaving of their
//! steps, the ticks and the faults within the bounds.
//!
//! Timing assumptions, as a correct deployment makes them: an operation's
//! commands run within one tick, and a holder releases within its lease
//! (`hold_ticks` after its grant). A tick cannot pass while a client that
//! is not paused would break them; a pause lifts them for one client until
//! its next step, which is what a GC stall or a SIGSTOP does.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use lockcheck_sim::modelled::{
    ConsulMachine, EtcdMachine, Failure, Request, Response, ServerState,
};
use lockcheck_workloads::redis_lock::Variant;
use lockcheck_workloads::{Grant, Outcome};
use serde_json::{json, Value};
use stateright::{Model, Property, Representative};

use crate::script::{replay, Answer, Ask, Done, Kind, LockOp, Progress, Recipe, LOCK};

/// The protected resource the holders write to.
pub const RESOURCE: &str = "resource-0";

/// The bounds of one exploration: how many clients, operations, ticks and
/// faults of each kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Clients, each running the recipe.
    pub clients: u8,
    /// Acquire attempts per client (each granted one writes and releases).
    pub ops: u8,
    /// Ticks of time after the start.
    pub ticks: u8,
    /// Process pauses (a client takes no step while ticks pass; at the
    /// recipe's crash point, between `SETNX` and `PEXPIRE`, a pause past
    /// the client's deadline is its crash, as in the simulator).
    pub pauses: u8,
    /// Forward jumps of the lock server's clock, by one lease each.
    pub clock_jumps: u8,
    /// Crashes and restarts of the lock server (its keys lost unless it
    /// persists them).
    pub crashes: u8,
    /// Lost messages: a command that never arrives, or whose reply is lost.
    pub losses: u8,
    /// Jumps of one client's clock ahead by one lease (harmless unless the
    /// recipe sends its clock).
    pub skews: u8,
    /// Renewals each holder makes before its write (a watchdog's).
    pub renewals: u8,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            clients: 2,
            ops: 2,
            ticks: 6,
            pauses: 0,
            clock_jumps: 0,
            crashes: 0,
            losses: 0,
            skews: 0,
            renewals: 0,
        }
    }
}

/// How the recipe and its resource are set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setup {
    pub kind: Kind,
    /// Grants carry a token and writes send it.
    pub fencing: bool,
    /// The resource refuses a token below one it accepted.
    pub fenced_storage: bool,
    /// A lock server's restart keeps its keys (an fsynced append-only file).
    pub persist: bool,
    /// The lease, in ticks.
    pub ttl_ticks: u8,
    /// One tick, in ms.
    pub tick_ms: u64,
}

impl Setup {
    pub fn ttl_ms(&self) -> u64 {
        u64::from(self.ttl_ticks) * self.tick_ms
    }

    /// How long a holder may hold the lock before it releases, in ticks:
    /// less than its lease.
    pub fn hold_ticks(&self) -> u8 {
        self.ttl_ticks.saturating_sub(1).max(1)
    }
}

/// The lock a client believes it holds.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Held {
    value: String,
    fence: Option<u64>,
    /// The tick it was granted at.
    since: u8,
    /// Another client was granted the lock since.
    superseded: bool,
    wrote: bool,
    /// The answers its acquire had, for a recipe whose client keeps state
    /// to its release ([`Kind::keeps_state`]; empty otherwise).
    acquired: Vec<Answer>,
    /// Renewals still to make before the write.
    renews_left: u8,
}

/// What a holder's next step does: renew (while it has renewals to make),
/// write, then release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HoldStep {
    Renew,
    Write,
    Release,
}

impl Held {
    fn next_step(&self) -> HoldStep {
        if self.renews_left > 0 {
            HoldStep::Renew
        } else if !self.wrote {
            HoldStep::Write
        } else {
            HoldStep::Release
        }
    }
}

/// Where a client stands.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Phase {
    Idle,
    /// An acquire in flight, with the largest token granted before it was
    /// invoked.
    Acquiring {
        value: String,
        answers: Vec<Answer>,
        floor: u64,
    },
    Holding(Held),
    /// A renewal in flight (the client goes on believing meanwhile).
    Renewing {
        held: Held,
        answers: Vec<Answer>,
    },
    /// A release in flight (the client stopped believing at its invoke).
    Releasing {
        value: String,
        fence: Option<u64>,
        acquired: Vec<Answer>,
        answers: Vec<Answer>,
    },
}

/// A lock server's state machine, the simulator's own: its Redis and SQL
/// server, or its etcd cluster as one linearizable machine.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Server {
    Kv(ServerState),
    Etcd(EtcdMachine),
    Consul(ConsulMachine),
}

impl Server {
    fn new(kind: Kind) -> Server {
        match kind {
            Kind::Etcd => Server::Etcd(EtcdMachine::default()),
            Kind::Consul { .. } => Server::Consul(ConsulMachine::default()),
            _ => Server::Kv(ServerState::new(false)),
        }
    }

    /// Answers `request` at `now_ms` of the server's clock; a request the
    /// server does not serve goes unanswered.
    fn handle(&mut self, request: Request, now_ms: i64) -> Result<Response, Failure> {
        match self {
            Server::Kv(server) => Ok(server.handle(request, now_ms)),
            Server::Etcd(cluster) => cluster.handle(request, now_ms).ok_or(Failure::Unknown),
            // A session is reaped at the earliest Consul may: its TTL after
            // its last renewal (a later reaping only holds the lock longer).
            Server::Consul(servers) => {
                servers.handle(request, now_ms, |_| 0).ok_or(Failure::Unknown)
            }
        }
    }

    /// A crash and restart at `now_ms`: a key-value server loses its keys
    /// unless it `persist`s them; etcd's members keep theirs on disk, and
    /// the crash of its leader is a leader change.
    fn crash(&mut self, persist: bool, now_ms: i64) {
        match self {
            Server::Kv(server) if !persist => *server = ServerState::new(false),
            Server::Kv(_) => {}
            Server::Etcd(cluster) => cluster.change_leader(now_ms),
            Server::Consul(servers) => servers.restarted(now_ms),
        }
    }

    /// The lock is held with no expiry (etcd's leases always expire).
    fn held_forever(&self) -> bool {
        match self {
            Server::Kv(server) => server.held_forever(LOCK),
            Server::Etcd(_) | Server::Consul(_) => false,
        }
    }

    fn rename_values(&mut self, rename: impl Fn(&str) -> Option<String>) {
        if let Server::Kv(server) = self {
            server.rename_values(rename);
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Client {
    phase: Phase,
    /// Acquire attempts left.
    ops_left: u8,
    /// Attempts made (names each attempt's unique value).
    attempts: u8,
    /// Which process of the history it runs as: a new one after an
    /// unknown outcome.
    generation: u8,
    paused: bool,
    /// How far its clock is ahead of true time, in ms.
    skew_ms: i64,
}

/// Faults left to inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Budget {
    pauses: u8,
    clock_jumps: u8,
    crashes: u8,
    losses: u8,
    skews: u8,
}

/// What the properties have seen broken so far (sticky).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Broken {
    mutex: bool,
    tokens: bool,
    resource: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct State {
    now: u8,
    /// How far each lock server's clock is ahead of true time, in ms.
    offsets: Vec<i64>,
    /// The lock servers (Redlock's instances; one otherwise).
    servers: Vec<Server>,
    /// Per lock server, the tick until which it is down after a crash
    /// (a delayed restart; 0: up).
    down_until: Vec<u8>,
    storage: ServerState,
    clients: Vec<Client>,
    budget: Budget,
    /// Every token granted so far, in grant order.
    tokens: Vec<u64>,
    /// The largest token of a completed grant.
    done_max: u64,
    /// The largest token the resource accepted.
    accepted_max: Option<u64>,
    broken: Broken,
}

/// One step of the exploration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// The client takes its next step: starts an operation, or sends its
    /// next command and takes the reply.
    Step(u8),
    /// As `Step`, but the command's reply is lost (it ran).
    LoseReply(u8),
    /// As `Step`, but the command never arrives.
    LoseRequest(u8),
    /// The client crashes at the recipe's crash point.
    CrashClient(u8),
    /// The client pauses: ticks may pass before its next step.
    Pause(u8),
    /// One tick of time passes.
    Tick,
    /// A lock server's clock jumps forward by one lease.
    ClockJump(u8),
    /// A lock server crashes and restarts (at once, or after a lease and
    /// a tick with a delayed restart).
    CrashServer(u8),
    /// The client's clock jumps ahead by one lease.
    Skew(u8),
}

/// One event of the history a step records.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// The tick it happened in.
    pub tick: u8,
    /// `None`: the nemesis.
    pub process: Option<u64>,
    pub kind: &'static str,
    pub f: &'static str,
    pub key: Option<&'static str>,
    pub value: Value,
    pub error: Option<String>,
}

/// The names of the properties, as the checkers name them.
pub mod names {
    /// Every property, in the order they are checked.
    pub const ALL: [&str; 4] = [MUTUAL_EXCLUSION, RESOURCE_SAFETY, FENCE_MONOTONICITY, LIVENESS];
    pub const MUTUAL_EXCLUSION: &str = "mutual-exclusion";
    pub const RESOURCE_SAFETY: &str = "resource-safety";
    pub const FENCE_MONOTONICITY: &str = "fence-monotonicity";
    pub const LIVENESS: &str = "liveness";
}

/// A recipe under bounds, as stateright explores it.
#[derive(Debug, Clone)]
pub struct LockModel {
    pub setup: Setup,
    pub bounds: Bounds,
    /// Per property, whether a state that breaks it was seen: stateright
    /// keeps the last discovery of a property, not the first, so each
    /// property reports only the first state that breaks it, which breadth
    /// first on one thread is one of the fewest steps.
    first: Arc<[AtomicBool; 4]>,
    /// The properties to check (empty: all): with fewer, the exploration
    /// stops as soon as each has its counterexample.
    pub only: Vec<&'static str>,
}

/// What a step recorded, in order: the history's events and the commands
/// it sent.
#[derive(Debug, Default)]
pub struct Trace {
    pub entries: Vec<Entry>,
}

#[derive(Debug)]
pub enum Entry {
    Event(Event),
    /// A command and its reply.
    Command(String),
}

/// Where a step's events go: nowhere while exploring, into the trace when
/// a counterexample is written out.
type Sink<'a> = Option<&'a mut Trace>;

fn emit(sink: &mut Sink<'_>, event: impl FnOnce() -> Event) {
    if let Some(trace) = sink.as_deref_mut() {
        trace.entries.push(Entry::Event(event()));
    }
}

fn say(sink: &mut Sink<'_>, command: impl FnOnce() -> String) {
    if let Some(trace) = sink.as_deref_mut() {
        trace.entries.push(Entry::Command(command()));
    }
}

impl State {
    /// The tick it is at.
    pub fn tick(&self) -> u8 {
        self.now
    }
}

impl LockModel {
    pub fn new(setup: Setup, bounds: Bounds) -> LockModel {
        LockModel { setup, bounds, first: Arc::default(), only: Vec::new() }
    }

    /// Whether `broken` is the first state seen that breaks property
    /// `at` (see [`LockModel::first`]).
    fn first_break(&self, at: usize, broken: bool) -> bool {
        broken && !self.first[at].swap(true, Ordering::Relaxed)
    }

    fn process(&self, client: usize, state: &State) -> u64 {
        client as u64 + u64::from(state.clients[client].generation) * u64::from(self.bounds.clients)
    }

    /// The time a lock server's leases go by: its wall clock, or for a
    /// recipe whose leases go by monotonic time, true time.
    fn server_now(&self, state: &State, server: usize) -> i64 {
        let offset = if self.setup.kind.wall_clock_leases() { state.offsets[server] } else { 0 };
        self.now_ms(state.now) + offset
    }

    /// A lock server's name, as the simulator's hosts are named.
    fn server_name(&self, server: u8) -> String {
        match self.setup.kind {
            Kind::Redis(_) | Kind::Semaphore { .. } => "redis".into(),
            Kind::LeaseTable { .. } => "db".into(),
            Kind::Redlock { .. } => format!("redis-{server}"),
            Kind::Etcd => format!("etcd-{server}"),
            Kind::Consul { .. } => "consul".into(),
        }
    }

    /// The operation a client has in flight, and its answers so far.
    fn in_flight(phase: &Phase) -> Option<(LockOp, &[Answer])> {
        match phase {
            Phase::Acquiring { value, answers, .. } => {
                Some((LockOp::Acquire(value.clone()), answers))
            }
            Phase::Releasing { value, fence, acquired, answers } => {
                let op = LockOp::Release {
                    value: value.clone(),
                    fence: *fence,
                    acquired: acquired.clone(),
                };
                Some((op, answers))
            }
            Phase::Renewing { held, answers } => {
                let op = LockOp::Renew {
                    value: held.value.clone(),
                    fence: held.fence,
                    acquired: held.acquired.clone(),
                };
                Some((op, answers))
            }
            _ => None,
        }
    }

    fn replay(
        &self,
        state: &State,
        client: &Client,
        op: &LockOp,
        answers: &[Answer],
    ) -> (Progress, Vec<Answer>) {
        let recipe = Recipe {
            kind: self.setup.kind,
            fencing: self.setup.fencing,
            ttl_ms: self.setup.ttl_ms(),
            caller_now_ms: self.now_ms(state.now) + client.skew_ms,
            deadline_ms: self.setup.tick_ms,
        };
        replay(recipe, op, answers)
    }

    /// What the client's operation in flight asks for next, if one is.
    fn next_ask(&self, state: &State, client: &Client) -> Option<Ask> {
        let (op, answers) = Self::in_flight(&client.phase)?;
        match self.replay(state, client, &op, answers).0 {
            Progress::Asks(ask) => Some(ask),
            Progress::Done(_) => None,
        }
    }

    /// Whether the client may take a step now.
    fn can_step(&self, client: &Client) -> bool {
        match client.phase {
            Phase::Idle => client.ops_left > 0,
            _ => true,
        }
    }

    /// Whether a tick may pass: no client that is not paused is inside an
    /// operation or past its hold.
    fn tick_allowed(&self, state: &State) -> bool {
        state.now < self.bounds.ticks
            && state.clients.iter().all(|client| {
                client.paused
                    || match &client.phase {
                        Phase::Idle => true,
                        Phase::Holding(held) => {
                            state.now + 1 - held.since <= self.setup.hold_ticks()
                        }
                        Phase::Acquiring { .. }
                        | Phase::Renewing { .. }
                        | Phase::Releasing { .. } => false,
                    }
            })
    }

    /// Applies `action` to `state`, recording its events in `sink`.
    pub fn apply(&self, state: &State, action: Action, mut sink: Sink<'_>) -> Option<State> {
        let mut next = state.clone();
        match action {
            Action::Tick => next.now += 1,
            Action::ClockJump(server) => {
                next.budget.clock_jumps -= 1;
                let delta_ms = self.setup.ttl_ms();
                next.offsets[usize::from(server)] += delta_ms as i64;
                let value = json!({ "delta_ms": delta_ms, "targets": [self.server_name(server)] });
                emit(&mut sink, || nemesis(state.now, "start", "clock-jump", value.clone()));
                emit(&mut sink, || nemesis(state.now, "stop", "clock-jump", value));
            }
            Action::Skew(client) => {
                next.budget.skews -= 1;
                let delta_ms = self.setup.ttl_ms();
                next.clients[usize::from(client)].skew_ms += delta_ms as i64;
                let value =
                    json!({ "delta_ms": delta_ms, "targets": [format!("client-{client}")] });
                emit(&mut sink, || nemesis(state.now, "start", "skew", value.clone()));
                emit(&mut sink, || nemesis(state.now, "stop", "skew", value));
            }
            Action::CrashServer(server) => {
                let at = usize::from(server);
                next.budget.crashes -= 1;
                next.servers[at].crash(self.setup.persist, self.server_now(state, at));
                if self.setup.kind == (Kind::Redlock { delayed_restart: true }) {
                    next.down_until[at] = state.now + self.setup.ttl_ticks + 1;
                }
                let value = json!({ "targets": [self.server_name(server)] });
                emit(&mut sink, || nemesis(state.now, "start", "kill", value.clone()));
                emit(&mut sink, || nemesis(state.now, "stop", "kill", value));
            }
            Action::Pause(client) => {
                let at = usize::from(client);
                next.budget.pauses -= 1;
                next.clients[at].paused = true;
                let process = self.process(at, state);
                emit(&mut sink, || pause(state.now, "start", client, process));
            }
            Action::Step(client)
            | Action::LoseReply(client)
            | Action::LoseRequest(client)
            | Action::CrashClient(client) => {
                let at = usize::from(client);
                if next.clients[at].paused {
                    next.clients[at].paused = false;
                    let process = self.process(at, state);
                    emit(&mut sink, || pause(state.now, "stop", client, process));
                }
                match action {
                    Action::LoseReply(_) | Action::LoseRequest(_) => next.budget.losses -= 1,
                    Action::CrashClient(_) => next.budget.pauses -= 1,
                    _ => {}
                }
                // A pause at the crash point outlasts the client's deadline:
                // it crashes there, and goes on as a new process.
                let crash = matches!(action, Action::CrashClient(_));
                let process = self.process(at, state);
                if crash {
                    emit(&mut sink, || pause(state.now, "start", client, process));
                }
                self.step(&mut next, at, action, &mut sink);
                if crash {
                    emit(&mut sink, || pause(state.now, "stop", client, process));
                }
            }
        }
        Some(next)
    }

    /// One client's step.
    fn step(&self, state: &mut State, at: usize, action: Action, sink: &mut Sink<'_>) {
        let process = self.process(at, state);
        let now = state.now;
        let fence_value = |fence: Option<u64>| match fence {
            Some(fence) => json!({ "fence": fence }),
            None => Value::Null,
        };
        match state.clients[at].phase.clone() {
            Phase::Idle => {
                let client = &mut state.clients[at];
                client.attempts += 1;
                let value = format!("{at}.{}", client.attempts);
                client.phase =
                    Phase::Acquiring { value, answers: Vec::new(), floor: state.done_max };
                let mut value = json!({ "ttl_ms": self.setup.ttl_ms() });
                if let Some(permits) = self.setup.kind.permits() {
                    value["permits"] = json!(permits);
                }
                emit(sink, || op_event(now, process, "invoke", "acquire", LOCK, value));
            }
            Phase::Holding(held) if held.next_step() == HoldStep::Renew => {
                let ttl_ms = self.setup.ttl_ms();
                state.clients[at].phase = Phase::Renewing { held, answers: Vec::new() };
                emit(sink, || {
                    op_event(now, process, "invoke", "renew", LOCK, json!({ "ttl_ms": ttl_ms }))
                });
            }
            Phase::Holding(held) if held.next_step() == HoldStep::Write => {
                let fence = if self.setup.fencing { held.fence } else { None };
                let data = format!("{process}");
                let mut value = json!({ "data": data });
                if let Some(fence) = fence {
                    value["fence"] = json!(fence);
                }
                emit(sink, || op_event(now, process, "invoke", "write", RESOURCE, value));
                // The resource keeps no writer's name: states that differ
                // only in which client wrote are one under symmetry.
                let request = Request::Write { key: RESOURCE.into(), fence, data: "w".into() };
                let asked = sink.is_some().then(|| format!("storage {request:?}"));
                let reply = state.storage.handle(request, self.now_ms(now));
                say(sink, || format!("{} -> {reply:?}", asked.unwrap_or_default()));
                let landed = reply != Response::StaleFence;
                if landed {
                    let stale = match fence {
                        Some(fence) => state.accepted_max.is_some_and(|max| fence < max),
                        None => held.superseded,
                    };
                    state.broken.resource |= stale;
                    if let Some(fence) = fence {
                        state.accepted_max =
                            Some(state.accepted_max.map_or(fence, |max| max.max(fence)));
                    }
                    emit(sink, || op_event(now, process, "ok", "write", RESOURCE, Value::Null));
                } else {
                    emit(sink, || {
                        let mut event =
                            op_event(now, process, "fail", "write", RESOURCE, Value::Null);
                        event.error = Some("stale-fence".into());
                        event
                    });
                }
                if let Phase::Holding(held) = &mut state.clients[at].phase {
                    held.wrote = true;
                }
                return;
            }
            Phase::Holding(held) => {
                state.clients[at].phase = Phase::Releasing {
                    value: held.value.clone(),
                    fence: held.fence,
                    acquired: held.acquired.clone(),
                    answers: Vec::new(),
                };
                emit(sink, || {
                    op_event(now, process, "invoke", "release", LOCK, fence_value(held.fence))
                });
            }
            Phase::Acquiring { .. } | Phase::Renewing { .. } | Phase::Releasing { .. } => {}
        }
        // The operation in flight: pass a stall point, or send one command.
        let (op, answers) =
            Self::in_flight(&state.clients[at].phase).expect("an operation is in flight");
        let mut answers = answers.to_vec();
        let mut sent = false;
        let done = loop {
            let (progress, read) = self.replay(state, &state.clients[at], &op, &answers);
            answers.extend(read);
            match progress {
                Progress::Done(done) => break Some(done),
                Progress::Asks(Ask::Between) if !sent => {
                    answers.push(Answer::Stalled(action == Action::CrashClient(at as u8)));
                }
                Progress::Asks(Ask::Call(server, request)) if !sent => {
                    let now_ms = self.server_now(state, server);
                    let asked = sink.is_some().then(|| {
                        let name = self.server_name(server as u8);
                        format!("{name}: {request:?}")
                    });
                    let down = state.now < state.down_until[server];
                    let reply = match action {
                        // A crashed server refuses the connection at once.
                        _ if down => Err(Failure::NotSent),
                        Action::LoseRequest(_) => Err(Failure::Unknown),
                        Action::LoseReply(_) => {
                            let _ = state.servers[server].handle(request, now_ms);
                            Err(Failure::Unknown)
                        }
                        _ => state.servers[server].handle(request, now_ms),
                    };
                    say(sink, || format!("{} -> {reply:?}", asked.unwrap_or_default()));
                    answers.push(Answer::Reply(reply));
                    sent = true;
                }
                Progress::Asks(_) => break None,
            }
        };
        // Kept whether or not it finished: a finished acquire's answers, all
        // of them, are what its release replays it from.
        match &mut state.clients[at].phase {
            Phase::Acquiring { answers: kept, .. }
            | Phase::Renewing { answers: kept, .. }
            | Phase::Releasing { answers: kept, .. } => *kept = answers,
            _ => unreachable!("an operation is in flight"),
        }
        let Some(done) = done else { return };
        match done {
            Done::Acquire(outcome) => self.acquired(state, at, outcome, sink),
            Done::Unit(outcome) if matches!(state.clients[at].phase, Phase::Renewing { .. }) => {
                self.renewed(state, at, outcome, sink)
            }
            Done::Unit(outcome) => {
                let client = &mut state.clients[at];
                client.ops_left = client.ops_left.saturating_sub(1);
                client.phase = Phase::Idle;
                let event = completion(now, process, "release", LOCK, &outcome, Value::Null);
                if matches!(outcome, Outcome::Info(_)) {
                    client.generation += 1;
                }
                emit(sink, || event);
            }
        }
    }

    /// A renewal ended: renewed, the holder works a hold from now; refused,
    /// it stops and says so with a release (its next step), as the
    /// workloads' holders do; unknown, it goes on as a new process.
    fn renewed(&self, state: &mut State, at: usize, outcome: Outcome<()>, sink: &mut Sink<'_>) {
        let process = self.process(at, state);
        let now = state.now;
        let client = &mut state.clients[at];
        let Phase::Renewing { held, .. } = client.phase.clone() else {
            unreachable!("a renewal is in flight")
        };
        let event = completion(now, process, "renew", LOCK, &outcome, Value::Null);
        emit(sink, || event);
        let renews_left = held.renews_left - 1;
        client.phase = match outcome {
            Outcome::Ok(()) => Phase::Holding(Held { since: now, renews_left, ..held }),
            Outcome::Fail(_) => Phase::Holding(Held { renews_left: 0, wrote: true, ..held }),
            Outcome::Info(_) => {
                client.ops_left = client.ops_left.saturating_sub(1);
                client.generation += 1;
                Phase::Idle
            }
        };
    }

    fn now_ms(&self, tick: u8) -> i64 {
        i64::from(tick) * self.setup.tick_ms as i64
    }

    /// An acquire ended: the properties see the grant.
    fn acquired(&self, state: &mut State, at: usize, outcome: Outcome<Grant>, sink: &mut Sink<'_>) {
        let process = self.process(at, state);
        let now = state.now;
        let Phase::Acquiring { value, floor, answers } = state.clients[at].phase.clone() else {
            unreachable!("an acquire is in flight")
        };
        let grant_value = match &outcome {
            Outcome::Ok(Grant { fence: Some(fence), .. }) => json!({ "fence": fence }),
            _ => Value::Null,
        };
        let event = completion(now, process, "acquire", LOCK, &outcome, grant_value);
        emit(sink, || event);
        let client = &mut state.clients[at];
        match outcome {
            Outcome::Ok(grant) => {
                client.phase = Phase::Holding(Held {
                    value,
                    fence: grant.fence,
                    since: now,
                    superseded: false,
                    // A semaphore's holders protect no resource.
                    wrote: self.setup.kind.permits().is_some(),
                    acquired: if self.setup.kind.keeps_state() { answers } else { Vec::new() },
                    renews_left: self.bounds.renewals,
                });
                if let Some(fence) = grant.fence {
                    state.broken.tokens |= fence <= floor || state.tokens.contains(&fence);
                    state.tokens.push(fence);
                    state.done_max = state.done_max.max(fence);
                }
                let mut others = 0;
                for (other, client) in state.clients.iter_mut().enumerate() {
                    if let (true, Phase::Holding(held)) = (other != at, &mut client.phase) {
                        others += 1;
                        held.superseded = true;
                    }
                }
                // More holders than the lock has permits (one, but for a
                // semaphore).
                state.broken.mutex |= others >= self.setup.kind.permits().unwrap_or(1);
            }
            Outcome::Fail(_) => {
                client.ops_left = client.ops_left.saturating_sub(1);
                client.phase = Phase::Idle;
            }
            Outcome::Info(_) => {
                client.ops_left = client.ops_left.saturating_sub(1);
                client.phase = Phase::Idle;
                client.generation += 1;
            }
        }
    }
}

fn op_event(
    tick: u8,
    process: u64,
    kind: &'static str,
    f: &'static str,
    key: &'static str,
    value: Value,
) -> Event {
    Event { tick, process: Some(process), kind, f, key: Some(key), value, error: None }
}

fn completion<T>(
    tick: u8,
    process: u64,
    f: &'static str,
    key: &'static str,
    outcome: &Outcome<T>,
    ok: Value,
) -> Event {
    match outcome {
        Outcome::Ok(_) => op_event(tick, process, "ok", f, key, ok),
        Outcome::Fail(error) | Outcome::Info(error) => {
            let kind = if matches!(outcome, Outcome::Fail(_)) { "fail" } else { "info" };
            let mut event = op_event(tick, process, kind, f, key, Value::Null);
            event.error = Some(error.clone());
            event
        }
    }
}

fn nemesis(tick: u8, f: &'static str, fault: &str, mut value: Value) -> Event {
    value["fault"] = json!(fault);
    Event { tick, process: None, kind: "info", f, key: None, value, error: None }
}

fn pause(tick: u8, f: &'static str, client: u8, process: u64) -> Event {
    let value = json!({ "targets": [format!("client-{client}")], "processes": [process] });
    nemesis(tick, f, "pause", value)
}

impl Model for LockModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let bounds = &self.bounds;
        let client = Client {
            phase: Phase::Idle,
            ops_left: bounds.ops,
            attempts: 0,
            generation: 0,
            paused: false,
            skew_ms: 0,
        };
        vec![State {
            now: 0,
            offsets: vec![0; self.setup.kind.servers()],
            servers: vec![Server::new(self.setup.kind); self.setup.kind.servers()],
            down_until: vec![0; self.setup.kind.servers()],
            storage: ServerState::new(self.setup.fenced_storage),
            clients: vec![client; usize::from(bounds.clients)],
            budget: Budget {
                pauses: bounds.pauses,
                clock_jumps: bounds.clock_jumps,
                crashes: bounds.crashes,
                losses: bounds.losses,
                skews: bounds.skews,
            },
            tokens: Vec::new(),
            done_max: 0,
            accepted_max: None,
            broken: Broken::default(),
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        for (at, client) in state.clients.iter().enumerate() {
            let id = at as u8;
            if !self.can_step(client) {
                continue;
            }
            actions.push(Action::Step(id));
            // A lost message strikes the command the step sends: an idle
            // client's step sends its acquire's first, one inside an
            // operation its next.
            let ask = self.next_ask(state, client);
            // A holder's step sends a command when it starts its renewal
            // or its release (not when it writes).
            let sends = match &client.phase {
                Phase::Idle => true,
                Phase::Holding(held) => held.next_step() != HoldStep::Write,
                _ => ask.is_some(),
            };
            if state.budget.losses > 0 && sends {
                actions.push(Action::LoseReply(id));
                actions.push(Action::LoseRequest(id));
            }
            let crash_point =
                self.setup.kind == Kind::Redis(Variant::SetnxExpire) && ask == Some(Ask::Between);
            if state.budget.pauses > 0 && crash_point {
                actions.push(Action::CrashClient(id));
            }
            if state.budget.pauses > 0 && !client.paused && !matches!(client.phase, Phase::Idle) {
                actions.push(Action::Pause(id));
            }
            if state.budget.skews > 0 && client.skew_ms == 0 {
                actions.push(Action::Skew(id));
            }
        }
        if self.tick_allowed(state) {
            actions.push(Action::Tick);
        }
        for server in 0..self.setup.kind.servers() as u8 {
            if state.budget.clock_jumps > 0 {
                actions.push(Action::ClockJump(server));
            }
            if state.budget.crashes > 0 {
                actions.push(Action::CrashServer(server));
            }
        }
    }

    fn next_state(&self, state: &State, action: Action) -> Option<State> {
        self.apply(state, action, None)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = vec![
            Property::always(names::MUTUAL_EXCLUSION, |model: &LockModel, state: &State| {
                !model.first_break(0, state.broken.mutex)
            }),
            Property::always(names::RESOURCE_SAFETY, |model: &LockModel, state: &State| {
                !model.first_break(1, state.broken.resource)
            }),
            Property::always(names::FENCE_MONOTONICITY, |model: &LockModel, state: &State| {
                !model.first_break(2, state.broken.tokens)
            }),
            Property::always(names::LIVENESS, |model: &LockModel, state: &State| {
                !model.first_break(3, stuck(state))
            }),
        ];
        properties.retain(|property| self.only.is_empty() || self.only.contains(&property.name));
        properties
    }
}

/// The lock is held with no expiry and nobody believes it holds it or has
/// an operation in flight: only a release could free it, and none will.
fn stuck(state: &State) -> bool {
    state.servers.iter().any(Server::held_forever)
        && state.clients.iter().all(|client| matches!(client.phase, Phase::Idle))
}

/// An attempt's value names its client and the attempt (`client.attempt`):
/// the same value with the client renumbered by `new_of`.
fn renumbered(value: &str, new_of: &[usize]) -> Option<String> {
    let (client, attempt) = value.split_once('.')?;
    let new = new_of.get(client.parse::<usize>().ok()?)?;
    Some(format!("{new}.{attempt}"))
}

impl Phase {
    fn renumber(&mut self, new_of: &[usize]) {
        let value = match self {
            Phase::Idle => return,
            Phase::Acquiring { value, .. } | Phase::Releasing { value, .. } => value,
            Phase::Holding(held) | Phase::Renewing { held, .. } => &mut held.value,
        };
        if let Some(renamed) = renumbered(value, new_of) {
            *value = renamed;
        }
    }
}

impl Client {
    /// The client as it would be anyone's: its attempts' values without
    /// the client's number, for ordering clients.
    fn anonymous(&self) -> Client {
        let mut client = self.clone();
        client.phase.renumber(&[]);
        let value = match &mut client.phase {
            Phase::Idle => None,
            Phase::Acquiring { value, .. } | Phase::Releasing { value, .. } => Some(value),
            Phase::Holding(held) | Phase::Renewing { held, .. } => Some(&mut held.value),
        };
        if let Some(value) = value {
            *value = value.split_once('.').map_or(String::new(), |(_, attempt)| attempt.into());
        }
        client
    }
}

/// Symmetry over clients: the clients sorted by what they are, not by
/// their number, and every value that names a client renumbered to match
/// (in the clients' phases and in the servers' state). Clients alike in
/// everything but their number keep their order, so two states that
/// differ only by such a swap may stay two: less reduction, never a wrong
/// one.
impl Representative for State {
    fn representative(&self) -> State {
        let mut order: Vec<usize> = (0..self.clients.len()).collect();
        let keys: Vec<String> =
            self.clients.iter().map(|client| format!("{:?}", client.anonymous())).collect();
        order.sort_by(|&a, &b| keys[a].cmp(&keys[b]).then(a.cmp(&b)));
        if order.iter().enumerate().all(|(new, &old)| new == old) {
            return self.clone();
        }
        let mut new_of = vec![0; order.len()];
        for (new, &old) in order.iter().enumerate() {
            new_of[old] = new;
        }
        let mut state = self.clone();
        state.clients = order.iter().map(|&old| self.clients[old].clone()).collect();
        for client in &mut state.clients {
            client.phase.renumber(&new_of);
        }
        for server in &mut state.servers {
            server.rename_values(|value| renumbered(value, &new_of));
        }
        state
    }
}
