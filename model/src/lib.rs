//! Exhaustive model checking of the lock recipes (docs/model-checking.md).
//!
//! A model runs a recipe's own code (`lockcheck_workloads`' recipes over
//! the simulator's transports, [`script`]) against the simulator's own
//! server state machines ([`lockcheck_sim::modelled`]), with time in
//! explicit ticks and a budget of faults ([`world`]). stateright explores
//! every interleaving within the bounds, breadth first, so the first
//! counterexample of a property is a shortest one; [`trace`] turns it into
//! a step list and a history that `lockcheck analyze` reads.

mod script;
pub mod trace;
pub mod world;

use std::time::{Duration, Instant};

use lockcheck_workloads::redis_lock::Variant;
use lockcheck_workloads::CONSUL_LOCK_DELAY_MS;
use stateright::{Checker, Model};

pub use script::Kind;
pub use trace::Step;
pub use world::{names, Bounds, LockModel, Setup};

/// A recipe the model checker knows: its name, what it is, and how it is
/// set up.
#[derive(Debug, Clone, Copy)]
pub struct Recipe {
    pub name: &'static str,
    pub about: &'static str,
    pub kind: Kind,
    /// The simulated backend that runs the same recipe.
    pub backend: &'static str,
}

/// Every recipe the model checker knows, one line each.
pub const RECIPES: &[Recipe] = &[
    Recipe {
        name: "redis",
        about: "SET NX PX, INCR fence, compare-and-delete release",
        kind: Kind::Redis(Variant::Plain),
        backend: "sim-redis",
    },
    Recipe {
        name: "redis-del-release",
        about: "broken: release by plain DEL",
        kind: Kind::Redis(Variant::DelRelease),
        backend: "sim-redis-del-release",
    },
    Recipe {
        name: "redis-get-del-release",
        about: "broken: release by GET, compare in the client, DEL",
        kind: Kind::Redis(Variant::GetDelRelease),
        backend: "sim-redis-get-del-release",
    },
    Recipe {
        name: "redis-setnx-expire",
        about: "broken: SETNX then PEXPIRE, two commands",
        kind: Kind::Redis(Variant::SetnxExpire),
        backend: "sim-redis-setnx-expire",
    },
    Recipe {
        name: "redis-lost-reply",
        about: "broken: a lost SET reply taken for a refusal",
        kind: Kind::Redis(Variant::LostReply),
        backend: "sim-redis-lost-reply",
    },
    Recipe {
        name: "redis-blind-renew",
        about: "broken: renewal by plain PEXPIRE, extending whoever holds the lock now",
        kind: Kind::Redis(Variant::BlindRenew),
        backend: "sim-redis-blind-renew",
    },
    Recipe {
        name: "redlock",
        about: "SET NX PX on a majority of independent instances, within the validity; a crashed instance restarts after a lease",
        kind: Kind::Redlock { delayed_restart: true },
        backend: "sim-redlock",
    },
    Recipe {
        name: "redlock-no-delay",
        about: "broken: a crashed instance restarts at once, without its keys",
        kind: Kind::Redlock { delayed_restart: false },
        backend: "sim-redlock-no-delay",
    },
    Recipe {
        name: "lease-table",
        about: "SQL lease row: owner, expiry by the database's clock, fence column",
        kind: Kind::LeaseTable { client_clock: false },
        backend: "sim-lease-table",
    },
    Recipe {
        name: "lease-table-client-clock",
        about: "broken: the lease row expires by the caller's clock",
        kind: Kind::LeaseTable { client_clock: true },
        backend: "sim-lease-table-client-clock",
    },
    Recipe {
        name: "redis-semaphore",
        about: "a sorted set of holders scored by expiry, one script drops the expired, counts and adds, by the server's TIME; 2 permits",
        kind: Kind::Semaphore { client_clock: false },
        backend: "sim-redis-semaphore",
    },
    Recipe {
        name: "redis-semaphore-client-clock",
        about: "broken: the script is given the caller's clock",
        kind: Kind::Semaphore { client_clock: true },
        backend: "sim-redis-semaphore-client-clock",
    },
    Recipe {
        name: "etcd",
        about: "a lease per acquisition, the lock key bound to it (its revision the token), TryLock, revoke to release; leases by the leader's monotonic clock, kill is a leader change",
        kind: Kind::Etcd,
        backend: "sim-etcd",
    },
    Recipe {
        name: "consul",
        about: "a session per acquisition, KV acquire with it (LockIndex the token), a lock-delay of 15 s; sessions by the servers' monotonic clock, kill is a leader change",
        kind: Kind::Consul { lock_delay_ms: CONSUL_LOCK_DELAY_MS },
        backend: "sim-consul",
    },
    Recipe {
        name: "consul-no-delay",
        about: "broken: lock-delay 0, an invalidated session's key is free at once",
        kind: Kind::Consul { lock_delay_ms: 0 },
        backend: "sim-consul-no-delay",
    },
];

/// The property called `name`, or an error that lists those there are.
pub fn property(name: &str) -> Result<&'static str, String> {
    names::ALL.iter().copied().find(|known| *known == name).ok_or_else(|| {
        format!("unknown property {name:?}: the properties are {}", names::ALL.join(", "))
    })
}

/// The recipe called `name`, or an error that lists those there are.
pub fn recipe(name: &str) -> Result<&'static Recipe, String> {
    RECIPES.iter().find(|recipe| recipe.name == name).ok_or_else(|| {
        let known: Vec<&str> = RECIPES.iter().map(|recipe| recipe.name).collect();
        format!("unknown recipe {name:?}: the recipes are {}", known.join(", "))
    })
}

/// The largest bounds the command accepts: past them the state space is
/// beyond any machine, whatever `--max-states` says.
pub const MAX_CLIENTS: u8 = 6;
pub const MAX_OPS: u8 = 4;
pub const MAX_TICKS: u8 = 64;
pub const MAX_RENEWALS: u8 = 3;

/// Refuses bounds past the limits, saying which and why.
pub fn check_bounds(bounds: &Bounds) -> Result<(), String> {
    let over = |what: &str, value: u8, max: u8| {
        Err(format!(
            "{what} {value} is past the model checker's limit of {max}: every interleaving of that many is more states than any machine holds (lower it, or sample such runs with `check --seeds`)"
        ))
    };
    if bounds.clients == 0 {
        return Err("clients must be at least 1".into());
    }
    if bounds.clients > MAX_CLIENTS {
        return over("clients", bounds.clients, MAX_CLIENTS);
    }
    if bounds.ops == 0 {
        return Err("ops must be at least 1".into());
    }
    if bounds.ops > MAX_OPS {
        return over("ops", bounds.ops, MAX_OPS);
    }
    if bounds.ticks > MAX_TICKS {
        return over("ticks", bounds.ticks, MAX_TICKS);
    }
    if bounds.renewals > MAX_RENEWALS {
        return over("renewals", bounds.renewals, MAX_RENEWALS);
    }
    Ok(())
}

/// What the exploration found for one property.
#[derive(Debug, Clone)]
pub enum Verdict {
    /// No reachable state within the bounds breaks it.
    Holds,
    /// A shortest path to a state that breaks it.
    Violated(Counterexample),
    /// The exploration stopped at `--max-states` before it was done.
    Unknown,
}

/// A shortest counterexample.
#[derive(Debug, Clone)]
pub struct Counterexample {
    /// The path's steps, then those that only show it to the checkers
    /// (a stuck lock's retries, past the bounds).
    pub steps: Vec<Step>,
    /// How many of `steps` are the path's.
    pub length: usize,
    /// The history's JSON lines.
    pub history: Vec<String>,
}

/// One property's result.
#[derive(Debug, Clone)]
pub struct PropertyResult {
    pub name: &'static str,
    pub verdict: Verdict,
}

/// The result of one exploration.
#[derive(Debug, Clone)]
pub struct Exploration {
    /// Distinct states reached.
    pub states: usize,
    /// States generated, repeats included.
    pub generated: usize,
    /// The longest path explored.
    pub depth: usize,
    pub elapsed: Duration,
    /// Whether every reachable state was explored (not stopped at
    /// `max_states` generated).
    pub complete: bool,
    pub properties: Vec<PropertyResult>,
}

/// What follows a stuck lock in its counterexample, past the bounds: every
/// client tries to acquire once a tick, refused each time, for longer
/// than the liveness checker's bound (3 leases), so that the history shows
/// the lock that never frees as the checker judges it.
fn retries(model: &LockModel) -> Vec<world::Action> {
    let rounds = 3 * u32::from(model.setup.ttl_ticks) + 2;
    (0..rounds)
        .flat_map(|_| {
            (0..model.bounds.clients).map(world::Action::Step).chain([world::Action::Tick])
        })
        .collect()
}

/// Explores `model` breadth first on one thread, stopping once it has
/// generated `max_states` states (repeats included).
pub fn explore(
    setup: Setup,
    bounds: Bounds,
    only: &[&'static str],
    max_states: usize,
) -> Exploration {
    explore_with(setup, bounds, only, max_states, Search::BreadthFirst)
}

/// How the state space is searched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Search {
    /// Breadth first: a counterexample is a shortest one.
    BreadthFirst,
    /// Depth first, with symmetry reduction over clients (stateright
    /// reduces symmetry only depth first): fewer states for a proof, and
    /// a counterexample that need not be the shortest.
    Symmetric,
}

/// [`explore`], searching as `search` says.
pub fn explore_with(
    setup: Setup,
    bounds: Bounds,
    only: &[&'static str],
    max_states: usize,
    search: Search,
) -> Exploration {
    let mut model = LockModel::new(setup, bounds);
    model.only = only.to_vec();
    let model = &model;
    let start = Instant::now();
    let builder = model.clone().checker().threads(1).target_state_count(max_states);
    match search {
        Search::BreadthFirst => summary(model, &builder.spawn_bfs().join(), start, max_states),
        Search::Symmetric => {
            summary(model, &builder.symmetry().spawn_dfs().join(), start, max_states)
        }
    }
}

/// What a finished checker found, property by property.
fn summary(
    model: &LockModel,
    checker: &impl Checker<LockModel>,
    start: Instant,
    max_states: usize,
) -> Exploration {
    let elapsed = start.elapsed();
    let states = checker.unique_state_count();
    // stateright stops at its target by states generated (repeats
    // included), and says nothing else of why it stopped: an exploration
    // that generated as many is taken as cut short, even if it happened
    // to end there.
    let complete = checker.state_count() < max_states;
    let properties = model
        .properties()
        .iter()
        .map(|property| {
            let verdict = match checker.discovery(property.name) {
                Some(path) => {
                    let mut actions = path.into_actions();
                    let length = actions.len();
                    if property.name == names::LIVENESS {
                        actions.extend(retries(model));
                    }
                    let (steps, history) = trace::replay_path(model, &actions);
                    Verdict::Violated(Counterexample { steps, length, history })
                }
                None if complete => Verdict::Holds,
                None => Verdict::Unknown,
            };
            PropertyResult { name: property.name, verdict }
        })
        .collect();
    Exploration {
        states,
        generated: checker.state_count(),
        depth: checker.max_depth(),
        elapsed,
        complete,
        properties,
    }
}
