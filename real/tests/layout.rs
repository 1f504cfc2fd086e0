//! Servers as data: each server kind is one value in its own file of
//! `real/src/servers/`, and no code matches on a kind but the few sites
//! listed here, each with why it must. A new kind (ZooKeeper, PgBouncer)
//! is then one file and one line of `KINDS`, as moto's S3 server was.
//!
//! The machinery asks a kind for what differs: data (binaries, package,
//! ports, stop signal, whether libfaketime works, the user it runs as
//! under root, its exec variables) and functions the kind holds where
//! behaviour differs (its URL, its arguments, its folder's preparation,
//! its readiness probe, PostgreSQL's bin directory). Those are the
//! dispatch points; none is a `match`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use lockcheck_real::ServerKind;

/// The workspace's source folders.
const SOURCES: [&str; 6] =
    ["src", "checker/src", "workloads/src", "sim/src", "real/src", "reports/src"];

/// The sites that may still match on a kind (lines whose patterns or
/// comparisons name one), by file, at most so many each.
const ALLOWED: [(&str, usize, &str); 2] = [
    (
        "real/src/netfault.rs",
        3,
        "a user's URL gets its default port by its scheme: a scheme is a protocol, not a \
         kind (PgBouncer speaks postgres://, etcd and an S3 server http://)",
    ),
    (
        "real/src/plan.rs",
        1,
        "the clock fault is refused for `--servers etcd` with a message of its own (etcd is \
         written in Go); `!kind.clock_is_fakeable()` could ask the kind instead",
    ),
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|extension| extension == "rs") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// A file's code, without its line comments and its test module.
fn code_of(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let text = text.split("#[cfg(test)]").next().unwrap_or_default();
    text.lines().filter(|line| !line.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

/// Whether `before` and `after`, around a kind named in `line`, make it a
/// pattern (`X =>`, `X |`, `| X`, `X if`) or one side of a comparison.
fn dispatches(line: &str, before: &str, after: &str) -> bool {
    let (before, after) = (before.trim_end(), after.trim_start());
    let single_bar = |text: &str, at_end: bool| match at_end {
        true => text.ends_with('|') && !text.ends_with("||"),
        false => text.starts_with('|') && !text.starts_with("||"),
    };
    after.starts_with("=>")
        || single_bar(after, false)
        || after.starts_with("if ")
        || before.ends_with("==")
        || before.ends_with("!=")
        || single_bar(before, true)
        || line.contains("matches!(")
}

/// Where `line` names a kind: its constant (`ServerKind::Etcd`) or one of
/// its names as a string (`"mysql"`), as (start, end) of the mention.
fn kind_mentions(line: &str) -> Vec<(usize, usize)> {
    let mut mentions = Vec::new();
    for (at, prefix) in line.match_indices("ServerKind::") {
        let name: String =
            line[at + prefix.len()..].chars().take_while(|c| c.is_alphanumeric()).collect();
        let constant = name.starts_with(|c: char| c.is_uppercase())
            && ServerKind::parse(&name.to_lowercase()).is_ok();
        if constant {
            mentions.push((at, at + prefix.len() + name.len()));
        }
    }
    let quotes: Vec<usize> = line.match_indices('"').map(|(at, _)| at).collect();
    for pair in quotes.windows(2) {
        if ServerKind::parse(&line[pair[0] + 1..pair[1]]).is_ok() {
            mentions.push((pair[0], pair[1] + 1));
        }
    }
    mentions
}

/// The lines of `code` that match on a kind or compare with one.
fn kind_sites(code: &str) -> Vec<String> {
    code.lines()
        .filter(|line| {
            kind_mentions(line)
                .into_iter()
                .any(|(start, end)| dispatches(line, &line[..start], &line[end..]))
        })
        .map(|line| line.trim().to_string())
        .collect()
}

#[test]
fn no_code_matches_on_a_server_kind_but_the_sites_that_must() {
    let allowed: BTreeMap<&str, usize> =
        ALLOWED.iter().map(|(file, count, _)| (*file, *count)).collect();
    let mut excess = Vec::new();
    for source in SOURCES {
        for file in rust_files(&root().join(source)) {
            let name = file.strip_prefix(root()).unwrap().to_string_lossy().replace('\\', "/");
            let sites = kind_sites(&code_of(&file));
            if sites.len() > allowed.get(name.as_str()).copied().unwrap_or(0) {
                excess.push(format!("{name}:\n  {}", sites.join("\n  ")));
            }
        }
    }
    assert!(
        excess.is_empty(),
        "code that matches on a server kind: ask the kind (a field or a function of \
         `ServerKind`) instead, or list the site in ALLOWED with why:\n{}",
        excess.join("\n")
    );
}

#[test]
fn the_site_finder_finds_patterns_and_comparisons_only() {
    let code = r#"
        ServerKind::Postgres => vec![],
        "mysql" | "mariadb" if count == 1 => ServerKind::Mariadb,
        if *kind == ServerKind::Etcd {
        let redis = of("redis");
        servers.start(ServerKind::Redis, 1)?;
        LockService::Redis { .. } => Some(ServerKind::Redis),
        "redis-server" => 1,
        kind.name() != "etcd"
    "#;
    assert_eq!(
        kind_sites(code),
        [
            "ServerKind::Postgres => vec![],",
            "\"mysql\" | \"mariadb\" if count == 1 => ServerKind::Mariadb,",
            "if *kind == ServerKind::Etcd {",
            "kind.name() != \"etcd\"",
        ]
    );
}

#[test]
fn every_kind_is_one_value_in_its_own_file() {
    let folder = root().join("real/src/servers");
    let machinery = ["mod.rs", "leftovers.rs"];
    let mut files: Vec<String> = std::fs::read_dir(&folder)
        .unwrap()
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| !machinery.contains(&name.as_str()))
        .collect();
    files.sort();
    let mut kinds: Vec<String> =
        ServerKind::ALL.iter().map(|kind| format!("{}.rs", kind.name())).collect();
    kinds.sort();
    assert_eq!(files, kinds, "one file a kind in {}", folder.display());
    for file in &files {
        let code = code_of(&folder.join(file));
        let values = code.matches(": ServerKind = ServerKind {").count();
        assert_eq!(values, 1, "{file} must hold one kind's value, and only it");
    }
    // The machinery names no kind but in the list of them.
    let machinery = code_of(&folder.join("mod.rs"));
    assert_eq!(machinery.matches(": ServerKind = ServerKind {").count(), 0);
    let list = machinery.split("const KINDS").nth(1).and_then(|rest| rest.split(';').next());
    let list = list.expect("servers/mod.rs has the list KINDS");
    assert_eq!(kind_mentions(list).len(), ServerKind::ALL.len(), "KINDS lists every kind");
    let outside = machinery.replace(list, "");
    let named: Vec<&str> = outside.lines().filter(|line| !kind_mentions(line).is_empty()).collect();
    assert!(named.is_empty(), "servers/mod.rs names a kind outside KINDS: {named:?}");
}

#[test]
fn only_the_machinery_starts_a_server() {
    // Each kind's binary is named in its own file alone: no other code runs
    // it, with a start, a probe and a cleanup of its own. A binary named as
    // a kind is (`postgres`, `etcd`) is left out: that word is also a
    // database's, a URL scheme's, a message's.
    for kind in ServerKind::ALL {
        let own = format!("real/src/servers/{}.rs", kind.name());
        for source in SOURCES {
            for file in rust_files(&root().join(source)) {
                let name = file.strip_prefix(root()).unwrap().to_string_lossy().replace('\\', "/");
                let code = code_of(&file);
                for binary in
                    kind.binaries().iter().filter(|binary| ServerKind::parse(binary).is_err())
                {
                    let named = code.contains(&format!("\"{binary}\""));
                    assert!(!named || name == own, "{name} names {binary}: only {own} may");
                }
            }
        }
    }
}
