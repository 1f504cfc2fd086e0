//! `lockcheck synth`: a synthetic history from a correct reference lock.

use std::fs::File;
use std::io::{self, BufWriter};
use std::process::ExitCode;

use anyhow::Context;
use lockcheck_checker::synth::{generate, SynthOptions};
use lockcheck_checker::write_events;

use crate::args::SynthArgs;
use lockcheck_commands::exit;

pub fn options(args: &SynthArgs) -> SynthOptions {
    SynthOptions {
        ops: args.ops,
        clients: args.clients,
        keys: args.keys,
        seed: args.seed,
        ttl_ms: args.ttl_ms,
        fenced: !args.unfenced,
    }
}

pub fn run(args: &SynthArgs) -> anyhow::Result<ExitCode> {
    if args.clients == 0 || args.keys == 0 {
        eprintln!("lockcheck: --clients and --keys must be at least 1");
        return Ok(exit::USAGE.into());
    }
    let events = generate(&options(args));
    let written = match &args.output {
        Some(path) => {
            let file =
                File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
            write_events(BufWriter::new(file), &events)
        }
        None => write_events(BufWriter::new(io::stdout().lock()), &events),
    };
    match written {
        Err(error) if error.kind() == io::ErrorKind::BrokenPipe => {}
        other => other.context("cannot write the history")?,
    }
    Ok(exit::VALID.into())
}
