//! Times the JSON Lines reader alone on a file: `cargo run --release -p
//! lockcheck-checker --example read_jsonl -- FILE` (a big one from
//! `lockcheck synth --ops 3000000 -o big.jsonl`).

use std::fs::File;
use std::io::BufReader;
use std::time::Instant;

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: read_jsonl FILE");
        std::process::exit(64);
    };
    let file = File::open(&path).expect("the file opens");
    let size = file.metadata().map(|metadata| metadata.len()).unwrap_or(0);
    let started = Instant::now();
    let history =
        lockcheck_checker::read_history_sized(BufReader::with_capacity(1 << 20, file), &path, size);
    let elapsed = started.elapsed().as_secs_f64();
    match history {
        Ok(history) => println!(
            "{path}: {} events, {} ops in {elapsed:.3} s ({:.0} MB/s)",
            history.event_count(),
            history.ops().len(),
            size as f64 / 1e6 / elapsed
        ),
        Err(error) => println!("{error} (after {elapsed:.3} s)"),
    }
}
