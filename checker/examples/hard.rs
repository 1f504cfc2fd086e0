//! Generates a hard mutex history and checks it: `cargo run --release -p
//! lockcheck-checker --example hard -- OPS CLIENTS INFO% [SEED]`.
use std::time::Instant;

use lockcheck_checker::synth_hard::{generate, HardOptions};
use lockcheck_checker::{CheckOptions, Checker, HistoryBuilder, Linearizability};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number =
        |at: usize, default: f64| args.get(at).and_then(|a| a.parse().ok()).unwrap_or(default);
    let options = HardOptions {
        ops: number(0, 20_000.0) as usize,
        clients: number(1, 10.0) as u32,
        info_percent: number(2, 0.0),
        seed: number(3, 0.0) as u64,
    };
    let mut builder = HistoryBuilder::default();
    for event in generate(&options) {
        builder.push(&event).unwrap();
    }
    let history = builder.finish();
    let started = Instant::now();
    let options_check = CheckOptions {
        linearizability_time_limit: Some(std::time::Duration::from_secs(60)),
        ..CheckOptions::default()
    };
    let result = Linearizability.check(&history, &options_check);
    println!("{options:?}: {:?} in {:.3} s", result.verdict, started.elapsed().as_secs_f64());
}
