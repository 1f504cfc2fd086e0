//! `lockcheck model`: exit codes, refusals of bad input, a counterexample
//! written as a history that `analyze` confirms and `report` draws, and
//! the simulator's run that breaks the same property.

mod common;

use common::{both, lockcheck};

#[test]
fn a_safe_recipe_holds_and_a_fault_gives_a_counterexample_analyze_confirms() {
    let safe = lockcheck(&["model", "--recipe", "redis"]);
    assert_eq!(safe.status.code(), Some(0), "{}", both(&safe));
    let stdout = String::from_utf8_lossy(&safe.stdout);
    assert!(stdout.contains("mutual-exclusion     holds    within these bounds"), "{stdout}");
    assert!(stdout.contains("every reachable state"), "{stdout}");

    let dir = std::env::temp_dir().join(format!("lockcheck-model-{}", std::process::id()));
    let out = dir.display().to_string();
    let paused = lockcheck(&["model", "--recipe", "redis", "--faults", "pause", "--out", &out]);
    assert_eq!(paused.status.code(), Some(1), "{}", both(&paused));
    let stdout = String::from_utf8_lossy(&paused.stdout);
    assert!(
        stdout.contains("mutual-exclusion     VIOLATED shortest counterexample: 8 steps"),
        "{stdout}"
    );
    assert!(stdout.contains("client 0 pauses"), "{stdout}");
    assert!(stdout.contains("SetNxPx"), "{stdout}");
    // The simulator's run that breaks the same property: its replay line,
    // run as printed, does.
    let simulated = stdout
        .lines()
        .find_map(|line| line.split_once("in the simulator: "))
        .map(|(_, command)| command)
        .expect("a simulator command");
    let (command, note) = simulated.split_once(" (").expect("a note after the command");
    assert_eq!(note, "its run breaks mutual-exclusion too, by its own schedule)", "{stdout}");
    let args: Vec<&str> =
        command.split_once("check ").expect("a check command").1.split(' ').collect();
    assert!(args.starts_with(&["--backend", "sim-redis"]), "{command}");
    let replayed = lockcheck(&[&["check", "--no-store"], args.as_slice()].concat());
    assert_eq!(replayed.status.code(), Some(1), "{command}: {}", both(&replayed));
    assert!(String::from_utf8_lossy(&replayed.stdout).contains("mutual-exclusion"), "{command}");
    let history = dir.join("redis-mutual-exclusion.jsonl");
    let analyzed = lockcheck(&["analyze", &history.display().to_string()]);
    assert_eq!(analyzed.status.code(), Some(1), "{}", both(&analyzed));
    let stdout = String::from_utf8_lossy(&analyzed.stdout);
    assert!(stdout.contains("verdict: INVALID (mutual-exclusion)"), "{stdout}");
    assert!(stdout.contains("fault: pause struck client-0"), "{stdout}");
    // `report` draws it: the HTML beside the history, each client a lane.
    let drawn = lockcheck(&["report", &history.display().to_string()]);
    assert_eq!(drawn.status.code(), Some(1), "{}", both(&drawn));
    let html = std::fs::read_to_string(history.with_extension("html")).expect("report.html");
    assert!(html.contains("<html") && html.contains("lock-0"), "{}", &html[..html.len().min(400)]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_input_is_refused_with_what_there_is() {
    let refused = |args: &[&str], says: &str| {
        let output = lockcheck(&[&["model"][..], args].concat());
        assert_eq!(output.status.code(), Some(64), "{args:?}: {}", both(&output));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    };
    refused(&["--recipe", "zookeeper-ish"], "the recipes are redis, redis-del-release");
    refused(
        &["--recipe", "redis", "--clients", "10", "--ticks", "200"],
        "past the model checker's limit",
    );
    refused(
        &["--recipe", "redis", "--faults", "gc"],
        "the model's faults are pause, clock, kill, loss",
    );
    refused(&["--recipe", "redis", "--faults", "pause=x"], "must be a number");
    refused(&["--recipe", "redis", "--property", "safety"], "the properties are mutual-exclusion");
    refused(&["--recipe", "redis", "--ttl-ticks", "1"], "--ttl-ticks must be at least 2");
    refused(&["--recipe", "redis", "--clients", "0"], "clients must be at least 1");
    refused(
        &["--recipe", "redis", "--renewals", "9"],
        "renewals 9 is past the model checker's limit of 3",
    );
}

#[test]
fn a_state_limit_ends_in_unknown_with_exit_2() {
    let args = [
        "model",
        "--recipe",
        "redis",
        "--clients",
        "3",
        "--faults",
        "pause",
        "--max-states",
        "1000",
    ];
    let output = lockcheck(&args);
    assert_eq!(output.status.code(), Some(2), "{}", both(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("stopped at --max-states"), "{stdout}");
    assert!(stdout.contains("unknown  not broken in the"), "{stdout}");
}
