//! `lockcheck model`: every interleaving of a recipe within bounds
//! (`lockcheck_model`), each property's verdict, and a shortest
//! counterexample as a step list and a history `analyze` reads.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use lockcheck_model::{
    check_bounds, explore_with, names, property, recipe, Bounds, Search, Setup, Verdict,
};

use lockcheck_checker::{CheckOptions, Verdict as Judged};
use lockcheck_sim::check_run;
use lockcheck_workloads::{Backend, FaultKind, RunOptions};

use crate::exit;

/// The command's options, as plain data.
#[derive(Debug, Clone)]
pub struct ModelRequest {
    pub recipe: String,
    pub clients: u8,
    /// Acquire attempts per client.
    pub ops: u8,
    /// Renewals each holder makes before its write.
    pub renewals: u8,
    pub ticks: u8,
    /// Faults with their counts, as `pause=1,loss=2` (a name alone: 1).
    pub faults: String,
    pub no_fencing: bool,
    pub persistent: bool,
    pub ttl_ticks: u8,
    pub tick_ms: u64,
    pub max_states: usize,
    /// The properties to check, comma-separated (empty: all).
    pub properties: String,
    /// Depth first with symmetry reduction over clients.
    pub symmetry: bool,
    /// Where counterexample histories go (one file per property).
    pub out: Option<PathBuf>,
}

/// The faults the model injects, by the nemesis' names.
pub const MODEL_FAULTS: &[(&str, &str)] = &[
    (
        "pause",
        "a client takes no step while ticks pass (at SETNX-then-PEXPIRE's crash point: its crash)",
    ),
    ("clock", "the lock server's clock jumps ahead by one lease (etcd's leases go by a monotonic clock)"),
    (
        "kill",
        "the lock server crashes and restarts (its keys lost unless --persistent); etcd's leader crashes: a leader change",
    ),
    ("loss", "a command never arrives, or its reply is lost"),
    ("skew", "one client's clock jumps ahead by one lease"),
];

/// Reads `pause=1,loss=2` into the bounds' fault budget.
pub fn parse_faults(text: &str, bounds: &mut Bounds) -> Result<(), String> {
    for part in text.split(',').map(str::trim).filter(|part| !part.is_empty()) {
        let (name, count) = match part.split_once('=') {
            Some((name, count)) => {
                let count: u8 = count.trim().parse().map_err(|_| {
                    format!("fault {part:?}: the count after '=' must be a number from 0 to 255")
                })?;
                (name.trim(), count)
            }
            None => (part, 1),
        };
        let slot = match name {
            "pause" => &mut bounds.pauses,
            "clock" => &mut bounds.clock_jumps,
            "kill" => &mut bounds.crashes,
            "loss" => &mut bounds.losses,
            "skew" => &mut bounds.skews,
            "none" => continue,
            other => {
                let known: Vec<&str> = MODEL_FAULTS.iter().map(|(name, _)| *name).collect();
                return Err(format!(
                    "unknown fault {other:?}: the model's faults are {} (or none)",
                    known.join(", ")
                ));
            }
        };
        *slot = count;
    }
    Ok(())
}

/// Runs the exploration and prints it: exit 0 every property holds, 1 one
/// is violated, 2 one is unknown (stopped at `--max-states`), 64 bad
/// options.
pub fn run(request: &ModelRequest) -> anyhow::Result<ExitCode> {
    let recipe = match recipe(&request.recipe) {
        Ok(recipe) => recipe,
        Err(error) => return usage(&error),
    };
    let mut bounds = Bounds {
        clients: request.clients,
        ops: request.ops,
        renewals: request.renewals,
        ticks: request.ticks,
        ..Bounds::default()
    };
    if let Err(error) =
        parse_faults(&request.faults, &mut bounds).and_then(|()| check_bounds(&bounds))
    {
        return usage(&error);
    }
    if request.ttl_ticks < 2 {
        return usage("--ttl-ticks must be at least 2 (a holder works for less than its lease)");
    }
    if request.max_states == 0 {
        return usage("--max-states must be at least 1");
    }
    if request.tick_ms == 0 {
        return usage("--tick-ms must be at least 1");
    }
    let setup = Setup {
        kind: recipe.kind,
        fencing: !request.no_fencing,
        fenced_storage: !request.no_fencing,
        persist: request.persistent,
        ttl_ticks: request.ttl_ticks,
        tick_ms: request.tick_ms,
    };
    let mut only = Vec::new();
    for name in request.properties.split(',').map(str::trim).filter(|name| !name.is_empty()) {
        match property(name) {
            Ok(name) => only.push(name),
            Err(error) => return usage(&error),
        }
    }
    let search = if request.symmetry { Search::Symmetric } else { Search::BreadthFirst };
    let exploration = explore_with(setup, bounds, &only, request.max_states, search);
    let mut text = String::new();
    let _ = writeln!(
        text,
        "model {}: {} clients, {} ops each{}, {} ticks of {} ms, lease {} ticks; faults {}",
        recipe.name,
        bounds.clients,
        bounds.ops,
        match bounds.renewals {
            0 => String::new(),
            renewals => format!(" ({renewals} renewals a hold)"),
        },
        bounds.ticks,
        setup.tick_ms,
        setup.ttl_ticks,
        fault_list(&bounds, true)
    );
    let _ = writeln!(
        text,
        "  {} states ({} generated, depth {}) in {:.3} s{}",
        exploration.states,
        exploration.generated,
        exploration.depth,
        exploration.elapsed.as_secs_f64(),
        if exploration
            .properties
            .iter()
            .all(|property| matches!(property.verdict, Verdict::Violated(_)))
        {
            ", stopped once every property had its counterexample"
        } else if exploration.complete {
            ", every reachable state"
        } else {
            ", stopped at --max-states"
        }
    );
    let mut code = exit::VALID;
    let faults = fault_list(&bounds, false);
    let mut simulated = Simulated::new(recipe.backend, &faults, request.no_fencing);
    for property in &exploration.properties {
        match &property.verdict {
            Verdict::Holds => {
                let _ = writeln!(
                    text,
                    "{:<20} holds    within these bounds ({} states)",
                    property.name, exploration.states
                );
            }
            Verdict::Unknown => {
                let _ = writeln!(
                    text,
                    "{:<20} unknown  not broken in the {} states generated (raise --max-states or lower the bounds)",
                    property.name, exploration.generated
                );
                if code == exit::VALID {
                    code = exit::UNKNOWN;
                }
            }
            Verdict::Violated(counterexample) => {
                code = exit::INVALID;
                let _ = writeln!(
                    text,
                    "{:<20} VIOLATED {} counterexample: {} steps",
                    property.name,
                    if request.symmetry { "a (depth-first, not the shortest)" } else { "shortest" },
                    counterexample.length
                );
                for (number, step) in counterexample.steps.iter().enumerate() {
                    if number == counterexample.length {
                        let _ = writeln!(
                            text,
                            "      then, past the bounds, every client retries once a tick, refused: {} more steps that show the checkers the lock never frees",
                            counterexample.steps.len() - counterexample.length
                        );
                        break;
                    }
                    let _ =
                        writeln!(text, "  {:>2}. tick {}: {}", number + 1, step.tick, step.action);
                    for line in &step.lines {
                        let _ = writeln!(text, "        {line}");
                    }
                }
                if let Some(dir) = &request.out {
                    let path = dir.join(format!("{}-{}.jsonl", recipe.name, property.name));
                    std::fs::create_dir_all(dir)?;
                    std::fs::write(&path, counterexample.history.join("\n") + "\n")?;
                    let _ = writeln!(
                        text,
                        "  history: {} (lockcheck analyze {} confirms it)",
                        path.display(),
                        path.display()
                    );
                }
                let _ = match simulated.breaking(property.name) {
                    Some(options) => writeln!(
                        text,
                        "  in the simulator: {} (its run breaks {} too, by its own schedule)",
                        crate::program::replay_line(&options.replay()),
                        property.name
                    ),
                    None => writeln!(
                        text,
                        "  in the simulator: lockcheck check --backend {} --nemesis {faults}{} (none of seeds 0 to {} breaks {} there)",
                        recipe.backend,
                        if request.no_fencing { " --no-fencing" } else { "" },
                        SIMULATED_SEEDS - 1,
                        property.name
                    ),
                };
            }
        }
    }
    print!("{text}");
    Ok(code.into())
}

/// The seeds of the simulator's cell tried for one whose run breaks the
/// same property.
const SIMULATED_SEEDS: u64 = 20;

/// The simulator's runs of the recipe's cell, seed by seed: each seed is
/// run once, however many properties ask about it.
struct Simulated {
    /// The cell's options (`None`: the simulator has no such cell).
    cell: Option<RunOptions>,
    /// Per seed run so far, the properties its run breaks.
    broken: Vec<Vec<&'static str>>,
}

impl Simulated {
    /// The cell of `backend` under `faults` (the nemesis' names, or
    /// `none`).
    fn new(backend: &str, faults: &str, no_fencing: bool) -> Simulated {
        let cell = Backend::parse(backend).and_then(|(backend, world)| {
            let mut options = RunOptions::new(world, backend);
            options.faults = match faults {
                "none" => Vec::new(),
                faults => FaultKind::parse_list(faults).ok()?,
            };
            options.fencing = !no_fencing;
            Some(options)
        });
        Simulated { cell, broken: Vec::new() }
    }

    /// The first run (of seeds 0 to [`SIMULATED_SEEDS`] - 1) that breaks
    /// `property`: its options, whose replay line runs it again.
    fn breaking(&mut self, property: &str) -> Option<RunOptions> {
        let cell = self.cell.as_ref()?;
        let seeded = |seed| RunOptions { seed, ..cell.clone() };
        for seed in 0..SIMULATED_SEEDS {
            if self.broken.len() as u64 == seed {
                let analysis = lockcheck_sim::run(&seeded(seed))
                    .ok()
                    .and_then(|run| check_run(&run, &CheckOptions::default()).ok());
                let broken = names::ALL.iter().copied().filter(|name| {
                    analysis.as_ref().and_then(|analysis| analysis.verdict_of(name))
                        == Some(Judged::Invalid)
                });
                self.broken.push(broken.collect());
            }
            if self.broken[seed as usize].contains(&property) {
                return Some(seeded(seed));
            }
        }
        None
    }
}

/// The faults the bounds give, as `pause=1,loss=2` (`counted`) or as the
/// simulator's nemesis names them (`pause,loss`); `none` if none.
fn fault_list(bounds: &Bounds, counted: bool) -> String {
    let faults: Vec<String> = [
        ("pause", bounds.pauses),
        ("clock", bounds.clock_jumps),
        ("kill", bounds.crashes),
        ("loss", bounds.losses),
        ("skew", bounds.skews),
    ]
    .iter()
    .filter(|(_, count)| *count > 0)
    .map(|(name, count)| if counted { format!("{name}={count}") } else { name.to_string() })
    .collect();
    if faults.is_empty() {
        "none".into()
    } else {
        faults.join(",")
    }
}

fn usage(message: &str) -> anyhow::Result<ExitCode> {
    eprintln!("lockcheck model: {message}");
    Ok(exit::USAGE.into())
}
