//! `lockcheck backends`: both worlds' catalogues, each backend with its help
//! line and the faults that strike it; with a name, why each other fault is
//! refused.

use std::fmt::Write as _;
use std::process::ExitCode;

use lockcheck_real::RealWorld;
use lockcheck_sim::{Backend, FaultKind, Simulator};
use lockcheck_workloads::Catalogue;

use crate::args::BackendsArgs;
use lockcheck_commands::exit;
use lockcheck_commands::print;

/// One backend of either world, as its catalogue describes it.
struct Entry {
    name: &'static str,
    world: &'static str,
    help: &'static str,
    refuses: Box<dyn Fn(FaultKind) -> Option<String>>,
    faults: Vec<FaultKind>,
}

fn entries_of<W: Catalogue>() -> impl Iterator<Item = Entry> {
    Backend::all_in(W::WORLD).map(|backend| Entry {
        name: backend.name_in(W::WORLD),
        world: W::WORLD.name(),
        help: backend.help(),
        refuses: Box::new(move |fault| W::refuses(backend, fault)),
        faults: W::faults(backend),
    })
}

fn entries() -> Vec<Entry> {
    entries_of::<Simulator>().chain(entries_of::<RealWorld>()).collect()
}

fn faults(entry: &Entry) -> String {
    let names: Vec<&str> = entry.faults.iter().map(|fault| fault.name()).collect();
    names.join(", ")
}

pub fn run(args: &BackendsArgs) -> anyhow::Result<ExitCode> {
    let entries = entries();
    let mut text = String::new();
    let Some(name) = &args.name else {
        let mut world = "";
        for entry in &entries {
            if entry.world != world {
                world = entry.world;
                text.push_str(match world {
                    "simulated" => "simulated (no servers; deterministic by seed):\n",
                    _ => "real (servers lockcheck starts on loopback, or given by --*-url):\n",
                });
            }
            let _ = writeln!(text, "  {:<30} {}", entry.name, entry.help);
            let _ = writeln!(text, "  {:<30} faults: {}", "", faults(entry));
        }
        print(&text)?;
        return Ok(exit::VALID.into());
    };
    let Some(entry) = entries.iter().find(|entry| entry.name == name.as_str()) else {
        eprintln!("lockcheck: {}", lockcheck_workloads::Backend::unknown(name));
        return Ok(exit::USAGE.into());
    };
    let _ = writeln!(text, "{} ({}): {}", entry.name, entry.world, entry.help);
    for fault in FaultKind::ALL {
        let _ = match (entry.refuses)(fault) {
            None => writeln!(text, "  {:<12} applies", fault.name()),
            Some(why) => writeln!(text, "  {:<12} refused: {why}", fault.name()),
        };
    }
    print(&text)?;
    Ok(exit::VALID.into())
}
