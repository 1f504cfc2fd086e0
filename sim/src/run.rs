//! One simulated test: the hosts, the clients, the nemesis, and the history.

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockcheck_checker::{Event, EventType, Function};
use lockcheck_workloads::payments::LedgerMode;
use lockcheck_workloads::s3::S3Store;
use lockcheck_workloads::{
    check_sizes, memory, run_client, Catalogue, ClientPlan, HistoryFile, LockClient, Recorder,
    ResourceStore, RunOptions, SharedRecorder, Stall, StallPoint, StorageKind, WorkloadOptions,
    World,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use thiserror::Error;

use crate::aim::{AimedRun, ClientClock, SimAim};
use crate::client::{Backend, ClientSetup, SimClient, Simulator};
use crate::host::{serve, DownHosts, Knobs, Primary};
use crate::nemesis::{schedule, Action, Fault, FaultKind, Rates, Targets};
use crate::payments::{PaymentsServices, SimPayments, PAYMENTS_HOSTS};
use crate::s3::{self, SimObjects};
use crate::server::ServerState;
use crate::service::Hosting;
use crate::services;
use crate::storage::{SimStore, STORAGE_HOST};

pub(crate) use crate::host::TICK;

/// turmoil's own backlog of connection attempts per listening port (and
/// of unread segments per connection); it panics on a connection attempt
/// past it.
const TURMOIL_TCP_CAPACITY: usize = 64;

/// The backlog a simulated server needs so that no connection attempt
/// overflows it: every client has one connection to each host, and retries
/// a connect no sooner than its deadline, at least one tick, the longest a
/// message takes; so at most two of a client's attempts reach a host within
/// one step, and the host's accept loop drains its backlog every step.
/// Runs of up to 32 clients keep turmoil's own size, and so their histories.
fn syn_backlog(clients: u32) -> usize {
    TURMOIL_TCP_CAPACITY.max(2 * clients as usize)
}

/// The most client machines a run has. turmoil links every pair of hosts
/// and visits every link for every host on every step, so a step costs the
/// cube of the hosts: past this many clients, clients share machines
/// (client `i` runs on machine `i` mod this), and a client partition cuts
/// off a machine with every client on it. Up to this many, each client has
/// a machine of its own, named after it.
pub const CLIENT_MACHINES: u32 = 32;

/// Which simulated machine each logical client runs on.
#[derive(Debug, Clone, Copy)]
struct ClientHosts {
    clients: u32,
}

impl ClientHosts {
    fn new(clients: u32) -> ClientHosts {
        ClientHosts { clients }
    }

    fn count(self) -> usize {
        self.clients.min(CLIENT_MACHINES) as usize
    }

    fn of(self, logical: u32) -> usize {
        (logical % CLIENT_MACHINES) as usize
    }

    /// A machine's host name: the client's own name while each client has
    /// a machine of its own.
    fn name(self, host: usize) -> String {
        match self.clients <= CLIENT_MACHINES {
            true => format!("client-{host}"),
            false => format!("clients-{host}"),
        }
    }

    /// The clients that share `logical`'s machine, itself included.
    fn mates(self, logical: u32) -> impl Iterator<Item = u32> {
        let host = self.of(logical);
        (0..self.clients).filter(move |&other| self.of(other) == host)
    }

    /// For clients pinned to their own of `locks` lock hosts (client `i`
    /// to host `i` modulo `locks`, [`crate::service::Started::pinned`]):
    /// the machines and lock hosts that `cuts` among the lock hosts part,
    /// each machine cut off from every host its clients' own is cut off
    /// from. (Past [`CLIENT_MACHINES`] clients, a machine whose clients are
    /// pinned to several hosts is cut off from the far side of each.)
    fn pinned_cuts(self, locks: usize, cuts: &[(u32, u32)]) -> BTreeSet<(usize, usize)> {
        let mut parted = BTreeSet::new();
        for logical in 0..self.clients {
            let own = logical as usize % locks.max(1);
            for &(a, b) in cuts {
                let far = match (a as usize, b as usize) {
                    (a, b) if a == own => b,
                    (a, b) if b == own => a,
                    _ => continue,
                };
                parted.insert((self.of(logical), far));
            }
        }
        parted
    }
}

/// The most clients a simulated run takes: 10,000 clients run at about a
/// fifth of real time on this 2-core machine (`lockcheck bench --only
/// memory`), so that more would be a test nobody waits for.
pub const MAX_CLIENTS: u32 = 10_000;

/// What a run needs whatever its size: the simulator, the checkers and the
/// process itself (measured: 25 to 30 MiB for a run of 5 clients for 5 s).
pub const BASE_BYTES: u64 = 64 << 20;

/// What a run needs per client, whatever its length: its connections,
/// tasks and session state (measured by `lockcheck bench --only memory`: up
/// to about 80 KiB on sim-etcd at 5,000 clients, less on the others).
pub const BYTES_PER_CLIENT: u64 = 128 << 10;

/// What a run needs per client and simulated second, with its check: a
/// client completes about 16 lock operations a simulated second on the
/// Redis backends, fewer on etcd, and each costs about 1 KiB recorded and
/// checked (measured by `lockcheck bench --only memory`: 18 to 24 KiB;
/// this bound leaves room above the largest).
pub const BYTES_PER_CLIENT_SECOND: u64 = 32 << 10;

/// The simulated backends' names, for an error.
fn simulated_names() -> String {
    let names: Vec<&str> = Backend::all_in(World::Simulated).map(Backend::sim_name).collect();
    names.join(", ")
}

/// What the simulator adds to a run's options: whether it can simulate
/// them, and the memory it would take.
pub trait Simulated {
    /// What is wrong with these options, if anything: a fault that cannot
    /// strike the backend, partition shapes that split nothing in it, or
    /// sizes out of range.
    fn check(&self) -> Result<(), String>;
    /// About how much memory the run takes.
    fn memory_estimate(&self) -> u64;
}

impl Simulated for RunOptions {
    fn check(&self) -> Result<(), String> {
        let backend = self.backend;
        if !backend.runs_in(World::Simulated) {
            return Err(format!(
                "{} runs against real servers only: the simulated backends are {}",
                backend.real_name(),
                simulated_names()
            ));
        }
        if let Some(why) = self.faults.iter().find_map(|&kind| Simulator::refuses(backend, kind)) {
            return Err(why);
        }
        if self.partition_shapes.is_empty() {
            return Err("--partition-shapes needs at least one shape".to_string());
        }
        if self.pause_at.is_empty() {
            return Err("--pause-at needs at least one point".to_string());
        }
        if let Some(why) = self.storage.refuses(self.workload) {
            return Err(why);
        }
        if let Some(why) = self.refuses_workload_options() {
            return Err(why);
        }
        let servers = Simulator::lock_hosts(backend).len() as u32;
        if self.faults.contains(&FaultKind::Partition)
            && !self
                .partition_shapes
                .iter()
                .any(|shape| shape.applies(servers, backend.is_consensus()))
        {
            let why = if backend.is_consensus() {
                "ring needs five members (sim-etcd-5)"
            } else {
                "its lock hosts do not talk to each other; use client"
            };
            let shapes: Vec<&str> =
                self.partition_shapes.iter().map(|shape| shape.name()).collect();
            return Err(format!(
                "none of the partition shapes {:?} splits anything in {}: {why}",
                shapes.join(","),
                backend.sim_name(),
            ));
        }
        if self.clients > MAX_CLIENTS {
            return Err(format!(
                "--clients {} is more than the simulator runs: at most {MAX_CLIENTS} clients",
                self.clients
            ));
        }
        check_sizes(self.clients, self.locks, self.ttl_ms(), self.time_limit)
    }

    /// About how much memory the run needs at most, its check included:
    /// [`BASE_BYTES`], [`BYTES_PER_CLIENT`] for each client, and its history,
    /// which grows with its clients and its simulated time
    /// ([`BYTES_PER_CLIENT_SECOND`]).
    fn memory_estimate(&self) -> u64 {
        let client_seconds = f64::from(self.clients) * self.time_limit.as_secs_f64();
        BASE_BYTES
            .saturating_add(u64::from(self.clients) * BYTES_PER_CLIENT)
            .saturating_add((client_seconds * BYTES_PER_CLIENT_SECOND as f64) as u64)
    }
}

/// What a run cost.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SimStats {
    pub simulated_s: f64,
    pub wall_s: f64,
    /// Lock operations completed (acquire, release, renew).
    pub lock_ops: u64,
}

/// A finished run.
#[derive(Debug, Clone)]
pub struct SimRun {
    pub events: Vec<Event>,
    /// The faults this run had on (a swarm run picks some of those asked for).
    pub faults: Vec<FaultKind>,
    pub stats: SimStats,
}

#[derive(Debug, Error)]
pub enum SimError {
    #[error("the simulation failed: {0}")]
    Turmoil(String),
    /// The options ask for a run this entry point cannot do (`run_user`
    /// drives a user's client against a single simulated Redis only).
    #[error("{0}")]
    Unsupported(String),
    /// Ctrl-C, SIGTERM or SIGHUP stopped the run
    /// ([`lockcheck_workloads::interrupt`]).
    #[error("interrupted by {}", lockcheck_workloads::interrupt::signal_name(*.0))]
    Interrupted(i32),
    /// The process outgrew the share of its memory budget that recording
    /// may fill ([`lockcheck_workloads::memory::over_budget`]).
    #[error(
        "stopped after {:.0} simulated s: the process holds {}, more than the {} of its memory budget of {} that recording may use (the rest is kept for checking the history)",
        .simulated.as_secs_f64(),
        memory::format_size(.over.resident),
        memory::format_size(memory::recording_share(.over.budget)),
        memory::format_size(.over.budget)
    )]
    OverBudget { over: memory::OverBudget, simulated: Duration },
}

/// What a fault's record says of the run beyond the fault itself.
struct FaultWorld<'a> {
    stalls: &'a [Stall],
    persistent: bool,
    /// Each client reaches the lock service through its own host.
    pinned: bool,
}

/// The hosts faults strike: the lock servers, then the resources' hosts
/// (the payments workload's queue, provider and table) in a run that has
/// them.
#[derive(Debug, Clone)]
struct StruckHosts {
    hosts: Vec<&'static str>,
    /// How many of `hosts` are lock servers.
    locks: usize,
}

impl StruckHosts {
    fn locks(&self) -> &[&'static str] {
        &self.hosts[..self.locks]
    }

    /// The hosts a fault at `host` strikes with `spread`: the lock servers
    /// from `host` on, around; a resource's host alone.
    fn spread(&self, host: usize, spread: u32) -> Vec<&'static str> {
        if host >= self.locks {
            return vec![self.hosts[host]];
        }
        (0..spread as usize).map(|at| self.hosts[(host + at) % self.locks]).collect()
    }

    /// The hosts a client's partition at `host` cuts it off from: every
    /// lock server, or the one resource's host.
    fn cut_from(&self, host: usize) -> &[&'static str] {
        if host >= self.locks {
            &self.hosts[host..=host]
        } else {
            self.locks()
        }
    }
}

/// The history's record of `fault`, which struck `hosts.hosts[host]` (and
/// those after it, by its spread).
fn fault_value(
    fault: &Fault,
    hosts: &StruckHosts,
    host: usize,
    client_hosts: ClientHosts,
    world: &FaultWorld<'_>,
) -> Value {
    // The processes a client's fault struck: what the history's client
    // events are numbered by.
    let processes = |clients: &mut dyn Iterator<Item = u32>| -> Vec<i64> {
        clients.filter_map(|client| world.stalls.get(client as usize)?.process()).collect()
    };
    let lock_hosts = hosts.locks();
    let target = hosts.hosts[host];
    match &fault.action {
        Action::StallClient { client, stall_ms, at } => {
            json!({ "fault": "pause", "targets": [format!("client-{client}")], "processes": processes(&mut std::iter::once(*client)), "stall_ms": stall_ms, "at": at.name() })
        }
        Action::PauseServer => json!({ "fault": "sigstop", "targets": [target] }),
        Action::ClockJump { forward_ms } => {
            json!({ "fault": "clock", "targets": [target], "jump_ms": forward_ms })
        }
        Action::ClockDrift { rate } => {
            json!({ "fault": "clock", "targets": [target], "drift_rate": rate })
        }
        Action::Kill => {
            let struck = hosts.spread(host, fault.spread);
            json!({ "fault": "kill", "targets": struck, "persistent": world.persistent || host >= hosts.locks })
        }
        Action::Delay { max_ms } => {
            json!({ "fault": "slow-net", "targets": [target], "max_ms": max_ms })
        }
        Action::Loss { probability } => {
            json!({ "fault": "loss", "targets": [target], "probability": probability })
        }
        Action::SkewClient { client, offset_ms } => {
            json!({ "fault": "skew", "targets": [format!("client-{client}")], "processes": processes(&mut std::iter::once(*client)), "offset_ms": offset_ms })
        }
        Action::Failover => {
            let promoted = lock_hosts[(host + 1) % lock_hosts.len()];
            json!({ "fault": "failover", "targets": [target], "promoted": promoted })
        }
        Action::IsolateClient { client } => {
            let cut: Vec<String> =
                client_hosts.mates(*client).map(|mate| format!("client-{mate}")).collect();
            let processes = processes(&mut client_hosts.mates(*client));
            let from = hosts.cut_from(host);
            json!({ "fault": "partition", "shape": "client", "targets": cut, "processes": processes, "from": from })
        }
        Action::SplitServers { shape, minority, cuts } => {
            let cut_off: Vec<&str> = if minority.is_empty() {
                lock_hosts.to_vec()
            } else {
                minority.iter().map(|&host| lock_hosts[host as usize]).collect()
            };
            let pairs: Vec<[&str; 2]> = cuts
                .iter()
                .map(|&(a, b)| [lock_hosts[a as usize], lock_hosts[b as usize]])
                .collect();
            let mut value = json!({ "fault": "partition", "shape": shape.name(), "targets": cut_off, "cuts": pairs });
            if world.pinned && !minority.is_empty() {
                // The clients pinned to a host of the minority side, cut
                // off with it.
                let with: Vec<String> = (0..client_hosts.clients)
                    .filter(|&client| minority.contains(&(client % lock_hosts.len() as u32)))
                    .map(|client| format!("client-{client}"))
                    .collect();
                value["clients"] = json!(with);
            }
            value
        }
    }
}

/// Picks the faults and their rates for a seed.
fn plan_faults(options: &RunOptions, rng: &mut SmallRng) -> (Vec<FaultKind>, Rates) {
    let mut kinds = options.faults.clone();
    kinds.sort();
    kinds.dedup();
    // Only the faults the backend takes: a single Redis has a replica to
    // fail over to; the faults of real processes and sessions have no
    // simulated executor.
    kinds.retain(|&kind| Simulator::refuses(options.backend, kind).is_none());
    let mut rates = Rates {
        gap_ms: (500, 3000),
        quiet_start: Duration::from_secs(1).min(options.time_limit / 10),
        quiet_end: Duration::from_millis(options.ttl_ms() * 3).min(options.time_limit / 5),
    };
    if options.swarm && !kinds.is_empty() {
        // A coin per slot of the schedule: pause and sigstop, sharing one,
        // are on or off together.
        use lockcheck_workloads::Slot;
        let slots = Slot::of(&kinds);
        let mut chosen: Vec<Slot> = slots.iter().copied().filter(|_| rng.gen_bool(0.5)).collect();
        if chosen.is_empty() {
            chosen.push(slots[rng.gen_range(0..slots.len())]);
        }
        kinds = chosen.into_iter().flat_map(Slot::kinds).collect();
        kinds.sort();
        let gap = rng.gen_range(100..3000);
        rates.gap_ms = (gap / 2, gap * 2);
    }
    (kinds, rates)
}

/// Carries out the faults: the knobs of the lock server, the clients'
/// stalls and clocks, and crashes; and records each start and stop.
struct Nemesis {
    hosts: StruckHosts,
    /// One per host.
    knobs: Vec<Rc<Knobs>>,
    /// With a replica set (the failover fault), which host is the primary:
    /// every server fault strikes the primary of its start.
    primary: Option<Primary>,
    /// The lock host the fault now on struck (with a replica set).
    struck: usize,
    stalls: Vec<Stall>,
    client_clocks: Vec<Rc<Cell<i64>>>,
    recorder: SharedRecorder,
    down: bool,
    /// Which lock servers are crashed, for the clients' connections.
    down_hosts: DownHosts,
    /// Drift not yet applied, below a millisecond.
    drift_ms: f64,
    /// Which machine each client runs on, for a client partition.
    client_hosts: ClientHosts,
    /// Whether a crashed lock server keeps its keys.
    persistent: bool,
    /// Each client reaches the lock service through its own host: a split
    /// among the hosts takes it to its host's side.
    pinned: bool,
}

impl Nemesis {
    fn world(&self) -> FaultWorld<'_> {
        FaultWorld { stalls: &self.stalls, persistent: self.persistent, pinned: self.pinned }
    }

    fn record(&self, fault: &Fault, f: Function) {
        let world = self.world();
        let value = fault_value(fault, &self.hosts, self.host(fault), self.client_hosts, &world);
        self.recorder.lock().expect("the recorder is never poisoned").record_nemesis(f, value);
    }

    /// The index in `hosts` of the host `fault` strikes: a resource's
    /// host when drawn past the lock servers, else a lock server (with a
    /// replica set, the primary of the fault's start).
    fn host(&self, fault: &Fault) -> usize {
        let drawn = fault.server as usize;
        if drawn >= self.hosts.locks && drawn < self.hosts.hosts.len() {
            return drawn;
        }
        match self.primary {
            Some(_) => self.struck,
            None => drawn % self.hosts.locks,
        }
    }

    fn start(&mut self, sim: &mut turmoil::Sim<'_>, fault: &Fault) {
        if let Some(primary) = &self.primary {
            self.struck = primary.index();
        }
        let host = self.host(fault);
        let knobs = &self.knobs[host];
        match fault.action {
            Action::StallClient { client, stall_ms, at } => {
                self.stalls[client as usize].request_at(stall_ms, at)
            }
            Action::PauseServer => knobs.paused.set(true),
            Action::ClockJump { forward_ms } => {
                knobs.clock_offset_ms.set(knobs.clock_offset_ms.get() + forward_ms)
            }
            Action::ClockDrift { .. } => {}
            Action::Kill if !self.down => {
                for crashed in self.hosts.spread(host, fault.spread) {
                    sim.crash(crashed);
                    self.down_hosts.set(crashed, true);
                }
                self.down = true;
            }
            Action::Kill => {}
            Action::Delay { max_ms } => knobs.delay_ms.set(max_ms),
            Action::Loss { probability } => knobs.loss.set(probability),
            Action::SkewClient { client, offset_ms } => {
                self.client_clocks[client as usize].set(offset_ms)
            }
            // The primary dies with its unshipped writes, and the clients'
            // next connections go to the replica.
            Action::Failover if !self.down => {
                if let Some(primary) = &self.primary {
                    sim.crash(self.hosts.hosts[host]);
                    self.down_hosts.set(self.hosts.hosts[host], true);
                    primary.promote();
                    self.down = true;
                }
            }
            Action::Failover => {}
            Action::IsolateClient { client } => {
                let machine = self.client_hosts.name(self.client_hosts.of(client));
                for server in self.hosts.cut_from(host) {
                    sim.partition(machine.as_str(), *server);
                }
            }
            Action::SplitServers { ref cuts, .. } => {
                let locks = self.hosts.locks();
                for &(a, b) in cuts {
                    sim.partition(locks[a as usize], locks[b as usize]);
                }
                if self.pinned {
                    for (machine, far) in self.client_hosts.pinned_cuts(locks.len(), cuts) {
                        sim.partition(self.client_hosts.name(machine).as_str(), locks[far]);
                    }
                }
            }
        }
        self.record(fault, Function::Start);
    }

    fn stop(&mut self, sim: &mut turmoil::Sim<'_>, fault: &Fault) {
        let host = self.host(fault);
        let knobs = &self.knobs[host];
        let mut struck = None;
        match fault.action {
            Action::StallClient { client, .. } => {
                // Where it struck, if the client passed its point at all.
                struck = Some(self.stalls[client as usize].clear().map(StallPoint::name));
            }
            Action::PauseServer => knobs.paused.set(false),
            Action::Kill => {
                for restarted in self.hosts.spread(host, fault.spread) {
                    sim.bounce(restarted);
                    self.down_hosts.set(restarted, false);
                }
                self.down = false;
            }
            Action::Delay { .. } => knobs.delay_ms.set(0),
            Action::Loss { .. } => knobs.loss.set(0.0),
            Action::SkewClient { client, .. } => self.client_clocks[client as usize].set(0),
            // The old primary rejoins as the replica (and resyncs).
            Action::Failover => {
                if self.primary.is_some() && self.down {
                    sim.bounce(self.hosts.hosts[host]);
                    self.down_hosts.set(self.hosts.hosts[host], false);
                    self.down = false;
                }
            }
            Action::IsolateClient { client } => {
                let machine = self.client_hosts.name(self.client_hosts.of(client));
                for server in self.hosts.cut_from(host) {
                    sim.repair(machine.as_str(), *server);
                }
            }
            Action::SplitServers { ref cuts, .. } => {
                let locks = self.hosts.locks();
                for &(a, b) in cuts {
                    sim.repair(locks[a as usize], locks[b as usize]);
                }
                if self.pinned {
                    for (machine, far) in self.client_hosts.pinned_cuts(locks.len(), cuts) {
                        sim.repair(self.client_hosts.name(machine).as_str(), locks[far]);
                    }
                }
            }
            Action::ClockJump { .. } | Action::ClockDrift { .. } => {}
        }
        match struck {
            Some(struck) => {
                let world = self.world();
                let mut value =
                    fault_value(fault, &self.hosts, self.host(fault), self.client_hosts, &world);
                value["struck"] = json!(struck);
                let mut recorder = self.recorder.lock().expect("the recorder is never poisoned");
                recorder.record_nemesis(Function::Stop, value);
            }
            None => self.record(fault, Function::Stop),
        }
    }

    /// Moves the lock servers' clocks on by the active drifts over one step.
    fn drift(&mut self, active: &[Fault], step_ms: f64) {
        for fault in active {
            if let Action::ClockDrift { rate } = fault.action {
                self.drift_ms += (rate - 1.0) * step_ms;
                let whole = self.drift_ms.trunc();
                let knobs = &self.knobs[self.host(fault)];
                knobs.clock_offset_ms.set(knobs.clock_offset_ms.get() + whole as i64);
                self.drift_ms -= whole;
            }
        }
    }
}

/// Runs one simulated test.
pub fn run(options: &RunOptions) -> Result<SimRun, SimError> {
    run_with_progress(options, &mut |_| {})
}

/// As [`run`], calling `progress` with the simulated time now and then.
pub fn run_with_progress(
    options: &RunOptions,
    progress: &mut dyn FnMut(Duration),
) -> Result<SimRun, SimError> {
    run_recorded(options, progress, None)
}

/// As [`run_with_progress`], writing each event to `history` as it is
/// recorded (the same bytes as [`lockcheck_checker::write_events`] of the
/// run's events). A Ctrl-C, SIGTERM or SIGHUP
/// ([`lockcheck_workloads::interrupt`]) ends the run with
/// [`SimError::Interrupted`]; `history` keeps what was recorded until then.
pub fn run_recorded(
    options: &RunOptions,
    progress: &mut dyn FnMut(Duration),
    history: Option<HistoryFile>,
) -> Result<SimRun, SimError> {
    let (backend, fencing) = (options.backend, options.fencing);
    match options.storage {
        StorageKind::Table => run_clients(options, progress, history, move |setup| {
            let store = SimStore::new(setup.deadline).stalling(&setup.stall);
            (SimClient::new(backend, fencing, setup), store)
        }),
        kind => run_clients(options, progress, history, move |setup| {
            let store = S3Store::new(kind, SimObjects::new(setup.deadline, &setup.stall));
            (SimClient::new(backend, fencing, setup), store)
        }),
    }
}

/// The body of every run: as [`run_with_progress`], with each logical
/// client's lock client built by `make` (inside its simulated host).
pub(crate) fn run_clients<C, S, F>(
    options: &RunOptions,
    progress: &mut dyn FnMut(Duration),
    history: Option<HistoryFile>,
    make: F,
) -> Result<SimRun, SimError>
where
    C: LockClient + 'static,
    S: ResourceStore + 'static,
    F: Fn(ClientSetup) -> (C, S) + Clone + 'static,
{
    let wall = Instant::now();
    let mut rng = SmallRng::seed_from_u64(options.seed);
    let (kinds, rates) = plan_faults(options, &mut rng);
    let not_simulated = || {
        SimError::Unsupported(format!(
            "{} has no simulated service: the simulated backends are {}",
            options.backend.sim_name(),
            simulated_names()
        ))
    };
    let service = services::keeping(options.backend.service(), &kinds).ok_or_else(not_simulated)?;
    let lock_hosts = service.lock_hosts(options.backend.service());
    // The payments workload's queue, provider and table, which faults
    // strike too (no other run has them, nor draws their seeds).
    let payments = options.protection.needs_payments(options.workload);
    let resource_hosts: &[&'static str] = if payments { &PAYMENTS_HOSTS } else { &[] };
    let targets = Targets {
        clients: options.clients,
        servers: lock_hosts.len() as u32,
        ttl_ms: options.ttl_ms(),
        // Redlock's delayed restart: down longer than any lease it granted.
        // (A consensus member's restart keeps its disk: any length will do.)
        min_down_ms: match options.backend {
            backend if backend.delays_restart() => backend.min_down_ms(options.ttl_ms()),
            backend if backend.is_consensus() || backend.replicates() => 1,
            _ => 0,
        },
        cluster: options.backend.is_consensus(),
        resources: resource_hosts.len() as u32,
    };
    let mut pause_at = options.pause_at.clone();
    pause_at.sort();
    pause_at.dedup();
    let faults = schedule(
        &kinds,
        &options.partition_shapes,
        &pause_at,
        rates,
        options.time_limit,
        targets,
        &mut rng,
    );

    let mut sim = turmoil::Builder::new()
        .simulation_duration(options.time_limit + Duration::from_secs(120))
        .tcp_capacity(syn_backlog(options.clients))
        .tick_duration(TICK)
        .min_message_latency(Duration::from_micros(100))
        .max_message_latency(TICK)
        .rng_seed(options.seed)
        .build();

    // A database keeps its tables across a restart; Redis keeps its keys only
    // with persistence configured.
    let persistent = options.persistent || options.backend.is_durable();
    let started = service.start(&mut Hosting {
        sim: &mut sim,
        rng: &mut rng,
        backend: options.backend,
        persistent,
        ttl_ms: options.ttl_ms(),
    });
    let primary = started.primary.clone();
    let storage_knobs = Knobs::new(rng.gen(), true);
    match options.storage {
        StorageKind::Table => {
            let storage_state = Rc::new(RefCell::new(ServerState::new(options.fencing)));
            sim.host(STORAGE_HOST, move || serve(storage_state.clone(), storage_knobs.clone()));
        }
        _ => {
            let objects = Arc::new(object_store::memory::InMemory::new());
            sim.host(STORAGE_HOST, move || s3::serve(objects.clone(), storage_knobs.clone()));
        }
    }
    let mut knobs = started.knobs;
    if payments {
        let ledger = options.protection.ledger().unwrap_or(LedgerMode::Append);
        let services = PaymentsServices::new(options.provider, options.provider_variant, ledger);
        let payments_knobs = [(); 3].map(|()| Knobs::new(rng.gen(), true));
        knobs.extend(payments_knobs.iter().cloned());
        services.host(&mut sim, payments_knobs);
    }

    // Outside a host (the nemesis), events take the driver's time.
    let driver_ns = Arc::new(AtomicU64::new(0));
    let clock_ns = driver_ns.clone();
    let recorder = Recorder::with_clock(Box::new(move || {
        turmoil::sim_elapsed()
            .map(|elapsed| elapsed.as_nanos() as u64)
            .unwrap_or_else(|| clock_ns.load(Ordering::Relaxed))
    }));
    let recorder: SharedRecorder = match history {
        Some(file) => recorder.writing_to(file),
        None => recorder,
    }
    .shared();
    let workload = WorkloadOptions {
        workload: options.workload,
        locks: (0..options.locks).map(|lock| format!("lock-{lock}")).collect(),
        resources: (0..options.locks).map(|lock| format!("resource-{lock}")).collect(),
        ttl_ms: options.ttl_ms(),
        // Redlock's holds last long enough for a crash and restart of its
        // instances to fall inside one (the failure it is known for), and so
        // do a replicated Redis' for a failover.
        hold_ms: if options.backend.is_consensus() {
            // An etcd session's holder works a long job under its keepalive.
            (0, options.ttl_ms() * 2)
        } else if options.backend.is_independent() || primary.is_some() {
            (0, options.ttl_ms() / 3)
        } else {
            (0, 20)
        },
        think_ms: (0, 40),
        send_fence: options.fencing && options.storage.takes_fence(),
        permits: options.backend.semaphore_permits(),
        keepalive_ms: options.backend.keepalive_ms(options.ttl_ms()),
        lock_delay_ms: options.backend.lock_delay_ms(),
        protection: options.protection,
    };
    let deadline = Duration::from_millis((options.ttl_ms() / 4).clamp(20, 2000));
    let down_hosts = DownHosts::default();
    let stalls: Vec<Stall> = (0..options.clients).map(|_| Stall::default()).collect();
    let client_clocks: Vec<Rc<Cell<i64>>> =
        (0..options.clients).map(|_| Rc::new(Cell::new(0))).collect();
    // Each client's host clock, for aiming (read, never changed).
    let aim_clocks: Vec<ClientClock> =
        (0..options.clients).map(|_| ClientClock::default()).collect();
    let hosts = ClientHosts::new(options.clients);
    let mut on_host: Vec<Vec<Pin<Box<dyn Future<Output = ()>>>>> =
        (0..hosts.count()).map(|_| Vec::new()).collect();
    for logical in 0..options.clients {
        let (recorder, workload, stall) =
            (recorder.clone(), workload.clone(), stalls[logical as usize].clone());
        let clock = client_clocks[logical as usize].clone();
        let aim_clock = aim_clocks[logical as usize].clone();
        let client_rng = SmallRng::seed_from_u64(rng.gen());
        let (clients, time_limit) = (options.clients, options.time_limit);
        let (primary, make, down) = (primary.clone(), make.clone(), down_hosts.clone());
        let resources_down = down.clone();
        let session =
            service.session(options.backend, options.fencing).ok_or_else(not_simulated)?;
        on_host[hosts.of(logical)].push(Box::pin(async move {
            aim_clock.start();
            let name = format!("client-{logical}");
            let stall_hook = stall.clone();
            let (mut client, mut store) = make(ClientSetup {
                logical,
                name,
                deadline,
                stall: stall_hook,
                clock,
                primary,
                down,
                session,
            });
            let plan =
                ClientPlan { logical, clients, until: tokio::time::Instant::now() + time_limit };
            let mut payments = SimPayments::new(deadline, &stall, &resources_down);
            run_client(
                &mut client,
                &mut store,
                &mut payments,
                &plan,
                &workload,
                client_rng,
                &recorder,
                &stall,
            )
            .await;
        }));
    }
    for (host, mut processes) in on_host.into_iter().enumerate() {
        let name = hosts.name(host);
        if processes.len() == 1 {
            let process = processes.pop().expect("one process");
            sim.client(name, async move {
                process.await;
                Ok(())
            });
            continue;
        }
        // Several client processes on one machine, each its own task.
        sim.client(name, async move {
            let tasks: Vec<_> = processes.into_iter().map(tokio::task::spawn_local).collect();
            for task in tasks {
                task.await?;
            }
            Ok(())
        });
    }

    let aim = options.aim.then(|| {
        let run = AimedRun {
            stalls: &stalls,
            clocks: aim_clocks,
            longest_hold: Duration::from_millis(workload.hold_ms.1),
            ttl: Duration::from_millis(options.ttl_ms()),
            pause_at: &pause_at,
            quiet_end: options.time_limit.saturating_sub(rates.quiet_end),
            tick: TICK,
        };
        SimAim::new(&faults, run)
    });
    let struck_hosts = [started.hosts, resource_hosts].concat();
    let mut nemesis = Nemesis {
        hosts: StruckHosts { hosts: struck_hosts, locks: started.hosts.len() },
        knobs,
        primary,
        struck: 0,
        stalls,
        client_clocks,
        recorder: recorder.clone(),
        down: false,
        down_hosts,
        drift_ms: 0.0,
        client_hosts: hosts,
        persistent,
        pinned: started.pinned,
    };
    let mut pending = faults.iter().enumerate().peekable();
    // Due, and waiting for its aim (with `aim` on).
    let mut due: Option<(usize, &Fault)> = None;
    let mut active: Vec<Fault> = Vec::new();
    let mut last = Duration::ZERO;
    loop {
        if let Some(signal) = lockcheck_workloads::interrupt::signal() {
            return Err(SimError::Interrupted(signal));
        }
        let done = sim.step().map_err(|error| SimError::Turmoil(error.to_string()))?;
        let now = sim.elapsed();
        driver_ns.store(now.as_nanos() as u64, Ordering::Relaxed);
        if now.as_millis() % 1000 < TICK.as_millis() {
            progress(now);
            if let Some(over) = memory::over_budget() {
                return Err(SimError::OverBudget { over, simulated: now });
            }
        }
        nemesis.drift(&active, (now - last).as_secs_f64() * 1e3);
        last = now;
        // End what is over, and everything once the clients are done.
        let (over, still): (Vec<Fault>, Vec<Fault>) =
            active.into_iter().partition(|fault| done || fault.end <= now);
        active = still;
        for fault in &over {
            nemesis.stop(&mut sim, fault);
        }
        if done {
            break;
        }
        // Each fault strikes when due, or, aimed, once its holder comes or
        // its slack is gone.
        while let Some((index, fault)) =
            due.take().or_else(|| pending.next_if(|(_, fault)| fault.start <= now))
        {
            let struck = match &aim {
                Some(aim) => aim.strike(index, fault, now),
                None => Some(fault.clone()),
            };
            let Some(struck) = struck else {
                due = Some((index, fault));
                break;
            };
            nemesis.start(&mut sim, &struck);
            active.push(struck);
        }
    }
    drop(sim);
    let events = Arc::try_unwrap(recorder)
        .map(|recorder| {
            recorder.into_inner().expect("the recorder is never poisoned").into_events()
        })
        .unwrap_or_else(|shared| {
            shared.lock().expect("the recorder is never poisoned").events().to_vec()
        });
    let lock_ops = events
        .iter()
        .filter(|event| {
            event.event_type != EventType::Invoke
                && matches!(event.f, Function::Acquire | Function::Release | Function::Renew)
        })
        .count() as u64;
    let stats = SimStats {
        simulated_s: last.as_secs_f64(),
        wall_s: wall.elapsed().as_secs_f64(),
        lock_ops,
    };
    Ok(SimRun { events, faults: kinds, stats })
}
