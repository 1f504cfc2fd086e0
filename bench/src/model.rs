//! `bench --only model`: the model checker (`lockcheck model`) on one
//! core: distinct states per second, the time to a counterexample, and
//! the time to prove a property within bounds, each beside its goal.

use std::time::Instant;

use lockcheck_model::{explore_with, names, recipe, Bounds, Search, Setup, Verdict};

use crate::{BenchError, BenchOptions, Outcome};

/// One measured exploration.
struct Case {
    what: &'static str,
    recipe: &'static str,
    clients: u8,
    ticks: u8,
    pauses: u8,
    properties: &'static [&'static str],
    /// The goal, in wall seconds, and what must come out.
    goal_s: Option<f64>,
    expect_violated: bool,
    search: Search,
}

const CASES: &[Case] = &[
    Case {
        what: "counterexample: redis, pause, mutual exclusion",
        recipe: "redis",
        clients: 3,
        ticks: 6,
        pauses: 1,
        properties: &[names::MUTUAL_EXCLUSION],
        goal_s: Some(1.0),
        expect_violated: true,
        search: Search::BreadthFirst,
    },
    Case {
        what: "every state: redis, pause, all four properties",
        recipe: "redis",
        clients: 3,
        ticks: 6,
        pauses: 1,
        properties: &[],
        goal_s: None,
        expect_violated: true,
        search: Search::BreadthFirst,
    },
    Case {
        what: "proof: lease table, pause, 20 ticks, resource and tokens",
        recipe: "lease-table",
        clients: 3,
        ticks: 20,
        pauses: 1,
        properties: &[names::RESOURCE_SAFETY, names::FENCE_MONOTONICITY],
        goal_s: Some(60.0),
        expect_violated: false,
        search: Search::BreadthFirst,
    },
    Case {
        what: "the same proof, depth first with symmetry over clients",
        recipe: "lease-table",
        clients: 3,
        ticks: 20,
        pauses: 1,
        properties: &[names::RESOURCE_SAFETY, names::FENCE_MONOTONICITY],
        goal_s: Some(60.0),
        expect_violated: false,
        search: Search::Symmetric,
    },
];

pub fn model(_: &BenchOptions) -> Result<Outcome, BenchError> {
    println!("model checker: breadth first on one core, 2 ops per client, lease 3 ticks");
    println!(
        "{:<58} {:>7} {:>5} {:>10} {:>8} {:>12} {:>9} {:>8}",
        "exploration", "clients", "ticks", "states", "wall s", "states/s", "verdict", "goal s"
    );
    let mut outcome = Outcome::Valid;
    for case in CASES {
        let recipe = recipe(case.recipe).expect("a known recipe");
        let setup = Setup {
            kind: recipe.kind,
            fencing: true,
            fenced_storage: true,
            persist: false,
            ttl_ticks: 3,
            tick_ms: 250,
        };
        let bounds = Bounds {
            clients: case.clients,
            ticks: case.ticks,
            pauses: case.pauses,
            ..Bounds::default()
        };
        let started = Instant::now();
        let exploration = explore_with(setup, bounds, case.properties, 50_000_000, case.search);
        let wall_s = started.elapsed().as_secs_f64();
        let violated = exploration
            .properties
            .iter()
            .any(|property| matches!(property.verdict, Verdict::Violated(_)));
        let unknown = !exploration.complete
            && exploration
                .properties
                .iter()
                .any(|property| matches!(property.verdict, Verdict::Unknown));
        let verdict = match (unknown, violated) {
            (true, _) => "unknown",
            (false, true) => "violated",
            (false, false) => "holds",
        };
        if unknown || violated != case.expect_violated {
            outcome = outcome.max(Outcome::Invalid);
        }
        println!(
            "{:<58} {:>7} {:>5} {:>10} {:>8.3} {:>12.0} {:>9} {:>8}",
            case.what,
            case.clients,
            case.ticks,
            exploration.states,
            wall_s,
            exploration.states as f64 / wall_s.max(1e-9),
            verdict,
            case.goal_s.map_or("-".to_string(), |goal| format!("{goal:.0}")),
        );
    }
    Ok(outcome)
}
