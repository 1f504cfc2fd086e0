//! The model checker against the simulated truth table: for each recipe
//! and fault of the table that the model covers, the properties it finds
//! violated within the default bounds; and every counterexample, written
//! as a history, is judged the same by the checkers `analyze` runs.

use std::collections::BTreeSet;

use lockcheck_checker::{analyze, default_checkers, read_history, CheckOptions, Verdict as Judged};
use lockcheck_model::{explore, explore_with, names, recipe, Bounds, Search, Setup, Verdict};

const MUTEX: &str = names::MUTUAL_EXCLUSION;
const RESOURCE: &str = names::RESOURCE_SAFETY;
const FENCE: &str = names::FENCE_MONOTONICITY;
const LIVENESS: &str = names::LIVENESS;

struct Cell {
    recipe: &'static str,
    /// pause, clock, kill, loss, skew: one of each named (`loss=2`: two).
    faults: &'static [&'static str],
    no_fencing: bool,
    persistent: bool,
    /// One tick in ms (250 but where a longer one matters).
    tick_ms: u64,
    /// Clients (2, but 3 for a semaphore of 2 permits).
    clients: u8,
    /// Renewals each holder makes before its write.
    renewals: u8,
    /// Acquire attempts per client (2, but 1 where two faults make too
    /// many states for a test).
    ops: u8,
    violated: &'static [&'static str],
}

const fn cell(
    recipe: &'static str,
    faults: &'static [&'static str],
    violated: &'static [&'static str],
) -> Cell {
    Cell {
        recipe,
        faults,
        no_fencing: false,
        persistent: false,
        tick_ms: 250,
        clients: 2,
        renewals: 0,
        ops: 2,
        violated,
    }
}

/// The rows of the simulated truth table the model covers, with what the
/// model finds. Mutual exclusion is belief overlap, as the checker defines
/// it: any stall past the lease breaks it, fenced or not.
const CELLS: &[Cell] = &[
    cell("redis", &[], &[]),
    cell("redis", &["pause"], &[MUTEX]),
    Cell { no_fencing: true, ..cell("redis", &["pause"], &[MUTEX, RESOURCE]) },
    cell("redis", &["clock"], &[MUTEX]),
    cell("redis", &["kill"], &[MUTEX, FENCE]),
    Cell { persistent: true, ..cell("redis", &["kill"], &[]) },
    cell("redis", &["loss"], &[]),
    cell("redis-del-release", &[], &[]),
    cell("redis-del-release", &["pause"], &[MUTEX]),
    cell("redis-get-del-release", &["pause"], &[MUTEX]),
    cell("redis-setnx-expire", &[], &[]),
    cell("redis-setnx-expire", &["pause"], &[MUTEX, LIVENESS]),
    // The simulator finds this one by linearizability (a refusal with no
    // holder), which the model does not check: the four properties hold.
    cell("redis-lost-reply", &["loss"], &[]),
    // Redlock carries no token: a stale holder's write lands.
    cell("redlock", &[], &[]),
    cell("redlock", &["pause"], &[MUTEX, RESOURCE]),
    cell("redlock", &["kill"], &[]),
    // No cell in the simulated table: one instance's clock jumps ahead.
    cell("redlock", &["clock"], &[MUTEX, RESOURCE]),
    cell("redlock-no-delay", &["kill"], &[MUTEX, RESOURCE]),
    cell("lease-table", &[], &[]),
    cell("lease-table", &["pause"], &[MUTEX]),
    Cell { no_fencing: true, ..cell("lease-table", &["pause"], &[MUTEX, RESOURCE]) },
    cell("lease-table", &["skew"], &[]),
    cell("lease-table-client-clock", &["skew"], &[MUTEX]),
    // Renewals, before the write as a watchdog's. A late renewal by plain
    // PEXPIRE extends the next holder's lock: the simulator finds that by
    // linearizability, which the model does not check; the pause alone
    // breaks mutual exclusion either way.
    Cell { renewals: 1, ..cell("redis", &["pause"], &[MUTEX]) },
    Cell { renewals: 1, ..cell("redis-blind-renew", &["pause"], &[MUTEX]) },
    Cell { renewals: 1, ..cell("redis", &["loss"], &[]) },
    Cell { renewals: 1, ..cell("lease-table", &["loss"], &[]) },
    // etcd's holder whose keepalives go unanswered believes until its
    // session's deadline, then works its hold past it: the simulated
    // `client` partition cell, with no pause at all.
    Cell { renewals: 1, ops: 1, ..cell("etcd", &["loss=2"], &[MUTEX]) },
    Cell { renewals: 1, ..cell("etcd", &["loss"], &[]) },
    // Two permits: three clients, to be one too many.
    Cell { clients: 3, ..cell("redis-semaphore", &[], &[]) },
    Cell { clients: 3, ..cell("redis-semaphore", &["pause"], &[MUTEX]) },
    Cell { clients: 3, ..cell("redis-semaphore", &["skew"], &[]) },
    Cell { clients: 3, ..cell("redis-semaphore-client-clock", &["skew"], &[MUTEX]) },
    cell("etcd", &[], &[]),
    // The lease is revoked under the stalled holder; its revision fences.
    cell("etcd", &["pause"], &[MUTEX]),
    Cell { no_fencing: true, ..cell("etcd", &["pause"], &[MUTEX, RESOURCE]) },
    // The leader's crash: the next leader gives every lease its TTL again.
    cell("etcd", &["kill"], &[]),
    // Leases go by the leader's monotonic clock.
    cell("etcd", &["clock"], &[]),
    cell("etcd", &["loss"], &[]),
    // The stalled holder's session is reaped, and its key held back for
    // the lock-delay (15 s), past the bounds: nobody takes it meanwhile.
    cell("consul", &[], &[]),
    cell("consul", &["pause"], &[]),
    // Ticks of 5 s: the lock-delay is 3 ticks, and a stall outlasts the
    // session and the delay within 6 (the simulated `--ttl 10s` cell).
    Cell { tick_ms: 5000, ..cell("consul", &["pause"], &[MUTEX]) },
    cell("consul", &["kill"], &[]),
    cell("consul", &["clock"], &[]),
    cell("consul-no-delay", &["pause"], &[MUTEX]),
    Cell { no_fencing: true, ..cell("consul-no-delay", &["pause"], &[MUTEX, RESOURCE]) },
];

fn setup_of(cell: &Cell) -> (Setup, Bounds) {
    let recipe = recipe(cell.recipe).expect("a known recipe");
    let setup = Setup {
        kind: recipe.kind,
        fencing: !cell.no_fencing,
        fenced_storage: !cell.no_fencing,
        persist: cell.persistent,
        ttl_ticks: 3,
        tick_ms: cell.tick_ms,
    };
    let mut bounds = Bounds { clients: cell.clients, ..Bounds::default() };
    bounds.renewals = cell.renewals;
    bounds.ops = cell.ops;
    for fault in cell.faults {
        let (name, count) = fault.split_once('=').unwrap_or((fault, "1"));
        let count = count.parse().expect("a count");
        match name {
            "pause" => bounds.pauses = count,
            "clock" => bounds.clock_jumps = count,
            "kill" => bounds.crashes = count,
            "loss" => bounds.losses = count,
            "skew" => bounds.skews = count,
            other => panic!("no fault {other}"),
        }
    }
    (setup, bounds)
}

/// Each cell's violated properties are the table's, and `analyze`'s
/// checkers find each counterexample's history invalid for the same
/// property.
#[test]
fn the_model_agrees_with_the_simulated_truth_table_and_the_checkers_with_it() {
    let mut confirmed = 0;
    for cell in CELLS {
        let (setup, bounds) = setup_of(cell);
        let exploration = explore(setup, bounds, &[], 2_000_000);
        assert!(exploration.complete, "{} {:?}: stopped early", cell.recipe, cell.faults);
        let mut violated = BTreeSet::new();
        for property in exploration.properties {
            let Verdict::Violated(counterexample) = property.verdict else { continue };
            violated.insert(property.name);
            let text = counterexample.history.join("\n") + "\n";
            let history = read_history(text.as_bytes(), "model").expect("the history reads");
            let analysis = analyze(&history, &default_checkers(), &CheckOptions::default());
            assert_eq!(
                analysis.verdict_of(property.name),
                Some(Judged::Invalid),
                "{} {:?}: the checkers do not confirm {}:\n{text}",
                cell.recipe,
                cell.faults,
                property.name
            );
            confirmed += 1;
        }
        let expected: BTreeSet<&str> = cell.violated.iter().copied().collect();
        assert_eq!(violated, expected, "{} {:?}", cell.recipe, cell.faults);
    }
    let violated: usize = CELLS.iter().map(|cell| cell.violated.len()).sum();
    assert_eq!(confirmed, violated, "every violated cell's counterexamples");
}

fn violated(setup: Setup, bounds: Bounds, search: Search) -> (BTreeSet<&'static str>, usize) {
    let exploration = explore_with(setup, bounds, &[], 2_000_000, search);
    assert!(exploration.complete, "stopped early");
    let violated = exploration
        .properties
        .iter()
        .filter(|property| matches!(property.verdict, Verdict::Violated(_)))
        .map(|property| property.name)
        .collect();
    (violated, exploration.states)
}

/// Symmetry reduction over clients changes how many states are explored,
/// never a verdict; with three clients it explores fewer.
#[test]
fn symmetry_reduction_keeps_every_verdict_with_fewer_states() {
    for cell in CELLS {
        let (setup, bounds) = setup_of(cell);
        let (plain, _) = violated(setup, bounds, Search::BreadthFirst);
        let (symmetric, _) = violated(setup, bounds, Search::Symmetric);
        assert_eq!(plain, symmetric, "{} {:?}", cell.recipe, cell.faults);
    }
    let (setup, mut bounds) = setup_of(&cell("lease-table", &["pause"], &[MUTEX]));
    bounds.clients = 3;
    let (_, plain) = violated(setup, bounds, Search::BreadthFirst);
    let (_, symmetric) = violated(setup, bounds, Search::Symmetric);
    assert!(symmetric * 2 < plain, "{symmetric} states with symmetry, {plain} without");
}

/// Breadth first, the first counterexample is a shortest one: a stall past
/// the lease needs its grant (two commands), the pause, three ticks, and
/// the next grant (two commands).
#[test]
fn the_counterexample_is_a_shortest_one() {
    let (setup, bounds) = setup_of(&cell("redis", &["pause"], &[MUTEX]));
    let exploration = explore(setup, bounds, &[MUTEX], 2_000_000);
    let Verdict::Violated(counterexample) = &exploration.properties[0].verdict else {
        panic!("mutual exclusion holds under pause")
    };
    assert_eq!(counterexample.length, 8, "{:#?}", counterexample.steps);
    // A stuck lock: SETNX, then the crash before PEXPIRE.
    let (setup, bounds) = setup_of(&cell("redis-setnx-expire", &["pause"], &[]));
    let exploration = explore(setup, bounds, &[LIVENESS], 2_000_000);
    let Verdict::Violated(counterexample) = &exploration.properties[0].verdict else {
        panic!("liveness holds")
    };
    assert_eq!(counterexample.length, 2, "{:#?}", counterexample.steps);
}

/// A state limit reached before the exploration is done gives unknown
/// for a property without a counterexample by then, never holds.
#[test]
fn a_state_limit_gives_unknown_not_holds() {
    let (setup, mut bounds) = setup_of(&cell("redis", &["pause"], &[MUTEX]));
    bounds.clients = 3;
    let exploration = explore(setup, bounds, &[], 1000);
    assert!(!exploration.complete);
    let verdicts: Vec<&Verdict> = exploration.properties.iter().map(|p| &p.verdict).collect();
    assert!(verdicts.iter().all(|verdict| !matches!(verdict, Verdict::Holds)), "{verdicts:?}");
    assert!(verdicts.iter().any(|verdict| matches!(verdict, Verdict::Unknown)), "{verdicts:?}");
}
