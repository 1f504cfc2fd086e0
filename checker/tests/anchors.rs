//! lockcheck against porcupine's own test histories (`../shared/anchors/porcupine`):
//! the same verdict on every file, with the same models porcupine's tests use.
//! The anchors sit beside the repository (CI lays a copy of shared/ there);
//! without them this test fails rather than passing unseen.

use std::fs;
use std::path::{Path, PathBuf};

use lockcheck_checker::import::{import, InputFormat, ModelChoice};
use lockcheck_checker::{analyze_imported, default_checkers, CheckOptions, Verdict};

fn anchors() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/anchors/porcupine");
    assert!(
        dir.is_dir(),
        "the anchors are missing: expected {} (shared/ beside the repository)",
        dir.display()
    );
    dir
}

/// `name verdict` lines, verdict `linearizable` or `not-linearizable`.
fn verdicts(dir: &Path) -> Vec<(String, Verdict)> {
    let text = fs::read_to_string(dir.join("VERDICTS.txt")).expect("VERDICTS.txt");
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let (name, verdict) = line.split_once(' ').expect("name verdict");
            let verdict = match verdict.trim() {
                "linearizable" => Verdict::Valid,
                "not-linearizable" => Verdict::Invalid,
                other => panic!("unknown verdict {other:?}"),
            };
            (name.to_string(), verdict)
        })
        .collect()
}

fn check(path: &Path, format: InputFormat, model: ModelChoice) -> Verdict {
    let text = fs::read_to_string(path).unwrap();
    let imported = import(format, &text, &path.display().to_string(), model)
        .unwrap_or_else(|error| panic!("{error}"));
    let options = CheckOptions { linearizability_time_limit: None, ..CheckOptions::default() };
    analyze_imported(&imported, &default_checkers(), &options).verdict
}

#[test]
fn every_porcupine_etcd_history_gets_porcupines_verdict() {
    let dir = anchors().join("jepsen");
    let expected = verdicts(&dir);
    assert_eq!(expected.len(), 102, "porcupine's etcd corpus has 102 tested histories");
    let wrong: Vec<String> = expected
        .iter()
        .filter_map(|(name, verdict)| {
            let found = check(&dir.join(name), InputFormat::JepsenLog, ModelChoice::CasRegister);
            (found != *verdict).then(|| format!("{name}: expected {verdict:?}, found {found:?}"))
        })
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn every_porcupine_kv_history_gets_porcupines_verdict_split_and_whole() {
    let dir = anchors().join("kv");
    let expected = verdicts(&dir);
    assert_eq!(expected.len(), 6);
    let mut wrong = Vec::new();
    for (name, verdict) in &expected {
        // As porcupine's tests: every file per key, the 1- and 10-client files whole too.
        let mut models = vec![ModelChoice::Kv];
        if !name.starts_with("c50") {
            models.push(ModelChoice::KvUnpartitioned);
        }
        for model in models {
            let found = check(&dir.join(name), InputFormat::PorcupineKv, model);
            if found != *verdict {
                wrong.push(format!("{name} ({model}): expected {verdict:?}, found {found:?}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The windowed cache, which long parts use, on the same corpus.
#[test]
fn windowed_search_agrees_on_every_etcd_history() {
    use lockcheck_checker::import::Imported;
    use lockcheck_checker::linear::models::CasRegister;
    use lockcheck_checker::linear::{check_parts, PartOutcome, SearchLimits};
    let dir = anchors().join("jepsen");
    let limits = SearchLimits { window_from_ops: 0, ..SearchLimits::default() };
    for (name, verdict) in verdicts(&dir) {
        let text = fs::read_to_string(dir.join(&name)).unwrap();
        let Ok(Imported::Register { operations, .. }) =
            import(InputFormat::JepsenLog, &text, &name, ModelChoice::CasRegister)
        else {
            panic!("{name} does not import as a register history");
        };
        let parts = check_parts(&CasRegister, &operations, &limits);
        let linearizable = parts.iter().all(|part| part.outcome == PartOutcome::Linearizable);
        assert_eq!(linearizable, verdict == Verdict::Valid, "{name}");
    }
}
