//! The layout's rules, checked on the source tree: dependencies point one
//! way, with no import cycle between the files of a crate; only the
//! real-world crate depends on database and etcd drivers (and only it and
//! the benchmarks on the real-world crate); no library depends on clap.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use common::files_under;

/// The crates' source folders, by crate.
const CRATES: [&str; 9] = [
    "src",
    "commands/src",
    "checker/src",
    "workloads/src",
    "sim/src",
    "real/src",
    "reports/src",
    "runs/src",
    "bench/src",
];

/// The library crates, by folder.
const LIBRARIES: [&str; 8] =
    ["checker", "workloads", "sim", "real", "reports", "runs", "bench", "commands"];

/// Crates that talk to real servers; only `real/` may depend on them (and
/// `bench/` on `lockcheck-real`, see below).
const DRIVERS: [&str; 5] =
    ["tokio-postgres", "redis", "mysql_async", "etcd-client", "lockcheck-real"];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A source file's module path inside its crate: `real::servers` for
/// `real/servers.rs` or `real/servers/mod.rs`, `` for `lib.rs`/`main.rs`.
fn module_of(crate_dir: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(crate_dir).unwrap().with_extension("");
    let parts: Vec<String> =
        relative.iter().map(|part| part.to_string_lossy().into_owned()).collect();
    let parts: Vec<&str> = parts.iter().map(String::as_str).filter(|part| *part != "mod").collect();
    match parts.as_slice() {
        ["lib"] | ["main"] => String::new(),
        parts => parts.join("::"),
    }
}

/// The code of a file without its line comments and its test module.
fn code_of(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or_default();
    text.lines().filter(|line| !line.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

/// The modules of `modules` that `code` (the file of `module`) names by a
/// `crate::` or `super::` path.
fn uses(module: &str, code: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let parent = module.rsplit_once("::").map_or("", |(parent, _)| parent);
    let mut found = BTreeSet::new();
    for (prefix, base) in [("crate::", ""), ("super::", parent)] {
        for (at, _) in code.match_indices(prefix) {
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let path: String = code[at + prefix.len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            let parts: Vec<&str> = path.split("::").filter(|part| !part.is_empty()).collect();
            // The longest prefix of the path that is a module of the crate.
            for length in (1..=parts.len()).rev() {
                let name = parts[..length].join("::");
                let name = if base.is_empty() { name } else { format!("{base}::{name}") };
                if modules.contains(&name) {
                    found.insert(name);
                    break;
                }
            }
        }
    }
    found.remove(module);
    found
}

/// A cycle in `edges`, as the modules along it, if there is one.
fn cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    // 0 unvisited, 1 on the current path, 2 done.
    fn visit(
        at: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(at.to_string(), 1);
        path.push(at.to_string());
        for next in edges.get(at).into_iter().flatten() {
            match state.get(next.as_str()).copied().unwrap_or(0) {
                1 => {
                    let start = path.iter().position(|module| module == next).unwrap();
                    let mut found = path[start..].to_vec();
                    found.push(next.clone());
                    return Some(found);
                }
                0 => {
                    if let Some(found) = visit(next, edges, state, path) {
                        return Some(found);
                    }
                }
                _ => {}
            }
        }
        path.pop();
        state.insert(at.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for module in edges.keys() {
        if state.get(module.as_str()).copied().unwrap_or(0) == 0 {
            if let Some(found) = visit(module, edges, &mut state, &mut Vec::new()) {
                return Some(found);
            }
        }
    }
    None
}

#[test]
fn no_file_of_a_crate_imports_a_file_that_imports_it_back() {
    let mut cycles = Vec::new();
    for crate_dir in CRATES {
        let dir = root().join(crate_dir);
        let files: Vec<_> = files_under(&dir)
            .into_iter()
            .filter(|file| file.extension().is_some_and(|extension| extension == "rs"))
            .collect();
        assert!(!files.is_empty(), "no source files in {crate_dir}");
        let modules: BTreeSet<String> = files.iter().map(|file| module_of(&dir, file)).collect();
        let mut edges = BTreeMap::new();
        for file in &files {
            let module = module_of(&dir, file);
            let code = code_of(&std::fs::read_to_string(file).unwrap());
            edges.insert(module.clone(), uses(&module, &code, &modules));
        }
        if let Some(found) = cycle(&edges) {
            cycles.push(format!("{crate_dir}: {}", found.join(" -> ")));
        }
    }
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

#[test]
fn the_cycle_finder_finds_a_cycle() {
    let modules: BTreeSet<String> = ["a", "b", "c"].map(String::from).into();
    let mut edges = BTreeMap::new();
    edges.insert("a".to_string(), uses("a", "use crate::b::Thing;", &modules));
    edges.insert("b".to_string(), uses("b", "fn f() { crate::c::g() }", &modules));
    edges.insert("c".to_string(), uses("c", &code_of("// crate::a in a comment\n"), &modules));
    assert_eq!(cycle(&edges), None);
    edges.insert("c".to_string(), uses("c", "use crate::a;", &modules));
    assert_eq!(cycle(&edges), Some(["a", "b", "c", "a"].map(String::from).to_vec()));
}

/// The dependency names of a Cargo.toml's `[dependencies]`,
/// `[dev-dependencies]` and `[build-dependencies]` sections.
fn dependencies(manifest: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut in_dependencies = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_dependencies = line.ends_with("dependencies]");
            continue;
        }
        if in_dependencies {
            if let Some((name, _)) = line.split_once('=') {
                let name = name.trim();
                let name = name.split('.').next().unwrap_or(name);
                if !name.is_empty() && !name.starts_with('#') {
                    names.push(name.to_string());
                }
            }
        }
    }
    names
}

#[test]
fn only_the_real_world_crate_depends_on_drivers() {
    for crate_dir in ["checker", "workloads", "sim", "reports", "runs"] {
        let manifest = std::fs::read_to_string(root().join(crate_dir).join("Cargo.toml")).unwrap();
        let found: Vec<String> = dependencies(&manifest)
            .into_iter()
            .filter(|name| DRIVERS.contains(&name.as_str()))
            .collect();
        assert!(found.is_empty(), "{crate_dir}/Cargo.toml depends on {found:?}");
    }
    // The benchmarks measure real servers too (`bench --only real`), by
    // `lockcheck_real::bench`, and the commands run real tests: `bench/`
    // and `commands/` are the other crates that may depend on the real
    // world's crate, and, like every crate but `real/`, on no driver itself.
    for crate_dir in ["bench", "commands"] {
        let manifest = std::fs::read_to_string(root().join(crate_dir).join("Cargo.toml")).unwrap();
        let found: Vec<String> = dependencies(&manifest)
            .into_iter()
            .filter(|name| DRIVERS[..4].contains(&name.as_str()))
            .collect();
        assert!(found.is_empty(), "{crate_dir}/Cargo.toml depends on {found:?}");
    }
    let real = std::fs::read_to_string(root().join("real/Cargo.toml")).unwrap();
    let real = dependencies(&real);
    for driver in &DRIVERS[..4] {
        assert!(real.iter().any(|name| name == driver), "real/ lost {driver}: {real:?}");
    }
}

/// The binary reads the command line and hands plain options to the
/// libraries: what a command does is `commands/`'s. Nine commands' options
/// (`model`'s the ninth) fit in this many lines.
const BINARY_LINES: usize = 1_600;

#[test]
fn the_binary_is_the_command_line_and_little_else() {
    let lines: usize = files_under(&root().join("src"))
        .iter()
        .map(|file| std::fs::read_to_string(file).unwrap().lines().count())
        .sum();
    assert!(lines < BINARY_LINES, "src/ has {lines} lines, {BINARY_LINES} at most");
}

#[test]
fn no_library_depends_on_clap() {
    // Libraries never see clap: the binary turns words into their options.
    for crate_dir in LIBRARIES {
        let manifest = std::fs::read_to_string(root().join(crate_dir).join("Cargo.toml")).unwrap();
        let found = dependencies(&manifest);
        assert!(!found.iter().any(|name| name == "clap"), "{crate_dir}/Cargo.toml depends on clap");
    }
}

#[test]
fn the_binary_starts_no_server_and_plans_no_fault() {
    // What belongs to the real world's crate (servers, proxy, fault
    // schedules) or to a backend's own code is named nowhere in `src/`.
    let banned = [
        "ManagedServer",
        "ServerKind",
        "Proxy",
        "schedule(",
        "lockcheck_real::servers",
        "lockcheck_real::nemesis",
        "lockcheck_real::netfault",
        "lockcheck_real::failover",
        "lockcheck_real::redis",
        "lockcheck_real::sql",
        "lockcheck_real::etcd",
        "match backend",
    ];
    let mut found = Vec::new();
    for file in files_under(&root().join("src")) {
        let code = code_of(&std::fs::read_to_string(&file).unwrap());
        for word in banned {
            if code.contains(word) {
                found.push(format!("{}: {word}", file.display()));
            }
        }
    }
    assert!(found.is_empty(), "src/ is glue only, yet names:\n{}", found.join("\n"));
}

#[test]
fn a_recorded_history_is_filed_under_its_backend_name() {
    // One name per recipe: `histories/<recipe>/` is the `--backend` name
    // (a simulated run's without `sim-`), or a folder of histories that no
    // backend in particular recorded (a workload's: cron, payments).
    let mut strays = Vec::new();
    for entry in std::fs::read_dir(root().join("histories")).unwrap() {
        let entry = entry.unwrap();
        if !entry.file_type().unwrap().is_dir() {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        let known = lockcheck_real::RealBackend::parse(&name).is_some()
            || lockcheck_sim::Backend::parse(&format!("sim-{name}")).is_some()
            || ["mutex-service", "cron", "payments"].contains(&name.as_str());
        if !known {
            strays.push(name);
        }
    }
    assert!(strays.is_empty(), "folders of histories/ that name no backend: {strays:?}");
}
