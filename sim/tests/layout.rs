//! Simulated services as modules: each service is a file of `sim/src/`
//! implementing `SimService`, listed once in `sim/src/services.rs`'s
//! table, and no other file of the simulator dispatches on the
//! catalogue's `Service` or `Recipe`. A new simulated service is then its
//! file and one line of the table (and `mod` for its file in `lib.rs`).

use std::path::{Path, PathBuf};

fn sources() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("sim/src is readable")
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "rs"))
        .collect();
    files.sort();
    files
}

/// A file's code, without its line comments and its test module.
fn code_of(path: &Path) -> String {
    let text = std::fs::read_to_string(path).expect("a source file is readable");
    let text = text.split("#[cfg(test)]").next().unwrap_or_default();
    text.lines().filter(|line| !line.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

fn name_of(path: &Path) -> String {
    path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default()
}

#[test]
fn only_the_services_and_their_table_name_a_service_or_a_recipe() {
    let mut services = Vec::new();
    for path in sources() {
        let (name, code) = (name_of(&path), code_of(&path));
        if code.contains("impl SimService for") {
            services.push(name);
            continue;
        }
        if name == "services.rs" || name == "service.rs" {
            continue;
        }
        for pattern in ["Service::", "Recipe::"] {
            assert!(!code.contains(pattern), "{name} dispatches on {pattern}: ask crate::services");
        }
    }
    assert!(services.len() >= 6, "the service modules: {services:?}");
}

#[test]
fn every_service_module_is_listed_once_in_the_table() {
    let table = code_of(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src/services.rs"));
    for path in sources() {
        let code = code_of(&path);
        for implementing in code.split("impl SimService for ").skip(1) {
            let service = implementing.split_whitespace().next().unwrap_or_default();
            let module = name_of(&path).trim_end_matches(".rs").to_string();
            // Once, or once per value of a service that takes one
            // (`&crate::primary_replica::Pair(Shipping::Async),`).
            let unit = format!("&crate::{module}::{service},");
            let valued = format!("&crate::{module}::{service}(");
            let values: Vec<&str> = table
                .split(&valued)
                .skip(1)
                .map(|rest| rest.split("),").next().unwrap_or_default())
                .collect();
            let mut distinct = values.clone();
            distinct.sort_unstable();
            distinct.dedup();
            let listed = table.matches(&unit).count() + values.len();
            assert!(listed >= 1, "{unit} in services.rs' table");
            assert!(
                table.matches(&unit).count() <= 1 && distinct.len() == values.len(),
                "{unit} listed more than once: {values:?}"
            );
            assert!(
                values.is_empty() || !table.contains(&unit),
                "{unit} listed bare and with values"
            );
        }
    }
}
