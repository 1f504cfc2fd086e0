//! What a cell of the truth table (docs/truth-table.md) must show, and the judgement
//! of runs against it: shared by the simulated matrix and the real one, so
//! that both call a cell found, blind or falsely accused by the same rule.

use crate::{Analysis, Verdict};

/// What a cell must show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// No checker finds anything, over every run.
    Safe,
    /// Some run makes one of `any_of` invalid, while `stays_valid` stays
    /// valid on every run tried (the fenced storage, say).
    Violated { any_of: &'static [&'static str], stays_valid: &'static [&'static str] },
    /// `valid` stays valid over every run; the other checkers may find
    /// something or not. For a cell whose promise is narrower than every
    /// checker's: a partition among etcd's members promises that the
    /// minority side never grants (the lock stays linearizable, its tokens
    /// increase, the storage stays safe), not that a holder whose own
    /// member is cut off stops believing before its lease expires.
    Keeps { valid: &'static [&'static str] },
}

/// The judgement of one cell after one more run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judgement {
    /// Nothing decided yet: run again if the budget allows.
    Undecided,
    /// The cell is decided; `matches` says whether as expected, `found` what
    /// was found (`mutual-exclusion at seed 3`).
    Decided { matches: bool, found: String },
}

/// How a cell came out over its runs ([`Expect::judge_runs`]).
#[derive(Debug, Clone, PartialEq)]
pub struct CellOutcome<R> {
    /// Whether as expected.
    pub matches: bool,
    /// What was found (`mutual-exclusion at seed 3`, `valid over 200 seeds`).
    pub found: String,
    /// Runs made.
    pub runs: u64,
    /// Of the runs made, those that had faults, and those whose faults
    /// reached a window where the lock could break.
    pub faulted: u64,
    pub covered: u64,
    /// The run that decided the cell, with its number; none when every run
    /// was made without a decision.
    pub decided: Option<(u64, R)>,
}

/// What a cell found, with how many of its runs' faults reached a
/// vulnerable window (`, covered 2/3`; nothing when no run had faults). A
/// cell that stayed valid (`valid`) while its faults reached nothing is
/// called vacuous: its pass proves nothing about them.
fn with_coverage(found: String, runs: u64, faulted: u64, covered: u64, valid: bool) -> String {
    match (faulted, covered) {
        (0, _) => found,
        (_, 0) if valid => format!("vacuous: {found}, covered 0/{runs}"),
        _ => format!("{found}, covered {covered}/{runs}"),
    }
}

/// The checkers of `names` whose verdict on `analysis` is one of `verdicts`.
fn with_verdict(analysis: &Analysis, names: &[&str], verdicts: &[Verdict]) -> Vec<String> {
    names
        .iter()
        .filter(|name| analysis.verdict_of(name).is_some_and(|verdict| verdicts.contains(&verdict)))
        .map(|name| name.to_string())
        .collect()
}

/// The checkers of `names` that found `analysis` invalid.
fn broken(analysis: &Analysis, names: &[&str]) -> Vec<String> {
    with_verdict(analysis, names, &[Verdict::Invalid])
}

impl Expect {
    /// Judges one run's `analysis`; `run` names it in what is found (`seed 3`).
    /// A safe cell is decided (mismatched) by the first run that is not valid;
    /// a violated one by the first run where an expected checker fails, or
    /// where a checker that must stay valid does not.
    pub fn judge(&self, analysis: &Analysis, run: &str) -> Judgement {
        match self {
            Expect::Safe if analysis.verdict != Verdict::Valid => {
                let all: Vec<&str> = analysis.results.iter().map(|result| result.checker).collect();
                let why = broken(analysis, &all);
                let found = format!("{} at {run}", analysis.verdict.as_str());
                let found =
                    if why.is_empty() { found } else { format!("{found} ({})", why.join(", ")) };
                Judgement::Decided { matches: false, found }
            }
            Expect::Safe => Judgement::Undecided,
            Expect::Keeps { valid } => {
                let wrongly = with_verdict(analysis, valid, &[Verdict::Invalid, Verdict::Unknown]);
                if wrongly.is_empty() {
                    return Judgement::Undecided;
                }
                let found =
                    format!("{} not valid at {run}, which must stay valid", wrongly.join(", "));
                Judgement::Decided { matches: false, found }
            }
            Expect::Violated { any_of, stays_valid } => {
                let wrongly = broken(analysis, stays_valid);
                if !wrongly.is_empty() {
                    let found =
                        format!("{} invalid at {run}, which must stay valid", wrongly.join(", "));
                    return Judgement::Decided { matches: false, found };
                }
                let hits = broken(analysis, any_of);
                if hits.is_empty() {
                    Judgement::Undecided
                } else {
                    Judgement::Decided {
                        matches: true,
                        found: format!("{} at {run}", hits.join(", ")),
                    }
                }
            }
        }
    }

    /// The one loop of every matrix: runs `run(0)`, `run(1)`, … up to
    /// `runs` of them (at least one) until one decides the cell, judging
    /// each by the analysis `analysis_of` finds in it. `names` says how what
    /// is found names a run and counts them: `("seed", "seed")` gives
    /// `mutual-exclusion at seed 3` and `valid over 200 seeds`. A run that
    /// fails ends the loop with its error.
    pub fn judge_runs<R, E>(
        &self,
        runs: u64,
        names: (&str, &str),
        run: impl FnMut(u64) -> Result<R, E>,
        analysis_of: impl Fn(&R) -> &Analysis,
    ) -> Result<CellOutcome<R>, E> {
        self.judge_runs_from(0, runs, names, run, analysis_of)
    }

    /// As [`Expect::judge_runs`], from `run(first)` on: how many runs a
    /// violated cell needs depends on where its seeds start.
    pub fn judge_runs_from<R, E>(
        &self,
        first: u64,
        runs: u64,
        names: (&str, &str),
        mut run: impl FnMut(u64) -> Result<R, E>,
        analysis_of: impl Fn(&R) -> &Analysis,
    ) -> Result<CellOutcome<R>, E> {
        let runs = runs.max(1);
        let (mut faulted, mut covered) = (0, 0);
        for (done, at) in (first..first.saturating_add(runs)).enumerate() {
            let made = run(at)?;
            let analysis = analysis_of(&made);
            faulted += u64::from(!analysis.coverage.is_none());
            covered += u64::from(analysis.coverage.reached() > 0);
            if let Judgement::Decided { matches, found } =
                self.judge(analysis, &format!("{} {at}", names.0))
            {
                let runs = done as u64 + 1;
                let found = with_coverage(found, runs, faulted, covered, false);
                let decided = Some((at, made));
                return Ok(CellOutcome { matches, found, runs, faulted, covered, decided });
            }
        }
        let (matches, found) = self.exhausted(runs, names.1);
        let found = with_coverage(found, runs, faulted, covered, matches);
        Ok(CellOutcome { matches, found, runs, faulted, covered, decided: None })
    }

    /// Whether a run can decide the cell for a match: only a violated cell
    /// is found; a safe or kept one takes its whole budget of runs.
    pub fn seeks_violation(&self) -> bool {
        matches!(self, Expect::Violated { .. })
    }

    /// The judgement once `runs` runs decided nothing: a safe cell stayed
    /// clean, a violated one was not found (the tool is blind there).
    pub fn exhausted(&self, runs: u64, unit: &str) -> (bool, String) {
        let plural = if runs == 1 { "" } else { "s" };
        match self {
            Expect::Safe => (true, format!("valid over {runs} {unit}{plural}")),
            Expect::Keeps { valid } => {
                (true, format!("{} valid over {runs} {unit}{plural}", valid.join(", ")))
            }
            Expect::Violated { .. } => (false, format!("not found in {runs} {unit}{plural}")),
        }
    }

    /// How a table prints it: `safe`, or `violated: mutual-exclusion;
    /// resource-safety safe`.
    pub fn describe(&self) -> String {
        match self {
            Expect::Safe => "safe".to_string(),
            Expect::Keeps { valid } => format!("{} safe", valid.join(", ")),
            Expect::Violated { any_of, stays_valid: [] } => {
                format!("violated: {}", any_of.join(" or "))
            }
            Expect::Violated { any_of, stays_valid } => {
                format!("violated: {}; {} safe", any_of.join(" or "), stays_valid.join(", "))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::{MUTUAL_EXCLUSION, RESOURCE_SAFETY};
    use crate::{analyze, default_checkers, CheckOptions, HistoryBuilder};

    fn analysis(lines: &[&str]) -> Analysis {
        let mut builder = HistoryBuilder::new();
        for line in lines {
            builder.push(&serde_json::from_str(line).expect("a valid event")).expect("pushed");
        }
        analyze(&builder.finish(), &default_checkers(), &CheckOptions::default())
    }

    /// Two clients both hold `l` from 2 to 3.
    fn overlapping() -> Analysis {
        analysis(&[
            r#"{"index":0,"time":0,"process":0,"type":"invoke","f":"acquire","key":"l"}"#,
            r#"{"index":1,"time":1,"process":0,"type":"ok","f":"acquire","key":"l"}"#,
            r#"{"index":2,"time":2,"process":1,"type":"invoke","f":"acquire","key":"l"}"#,
            r#"{"index":3,"time":2,"process":1,"type":"ok","f":"acquire","key":"l"}"#,
            r#"{"index":4,"time":3,"process":0,"type":"invoke","f":"release","key":"l"}"#,
            r#"{"index":5,"time":4,"process":0,"type":"ok","f":"release","key":"l"}"#,
        ])
    }

    fn clean() -> Analysis {
        analysis(&[
            r#"{"index":0,"time":0,"process":0,"type":"invoke","f":"acquire","key":"l"}"#,
            r#"{"index":1,"time":1,"process":0,"type":"ok","f":"acquire","key":"l"}"#,
            r#"{"index":2,"time":3,"process":0,"type":"invoke","f":"release","key":"l"}"#,
            r#"{"index":3,"time":4,"process":0,"type":"ok","f":"release","key":"l"}"#,
        ])
    }

    const VIOLATED: Expect =
        Expect::Violated { any_of: &[MUTUAL_EXCLUSION], stays_valid: &[RESOURCE_SAFETY] };
    const FENCED: Expect =
        Expect::Violated { any_of: &[RESOURCE_SAFETY], stays_valid: &[MUTUAL_EXCLUSION] };

    #[test]
    fn a_safe_cell_is_decided_by_the_first_violation_only() {
        assert_eq!(Expect::Safe.judge(&clean(), "seed 0"), Judgement::Undecided);
        match Expect::Safe.judge(&overlapping(), "seed 4") {
            Judgement::Decided { matches: false, found } => {
                assert!(found.contains("invalid at seed 4"), "{found}");
                assert!(found.contains(MUTUAL_EXCLUSION), "{found}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(Expect::Safe.exhausted(3, "seed"), (true, "valid over 3 seeds".to_string()));
    }

    #[test]
    fn a_violated_cell_needs_the_expected_checker_and_no_false_one() {
        assert_eq!(VIOLATED.judge(&clean(), "seed 0"), Judgement::Undecided);
        assert_eq!(
            VIOLATED.judge(&overlapping(), "seed 2"),
            Judgement::Decided { matches: true, found: "mutual-exclusion at seed 2".to_string() }
        );
        assert_eq!(
            FENCED.judge(&overlapping(), "run 1"),
            Judgement::Decided {
                matches: false,
                found: "mutual-exclusion invalid at run 1, which must stay valid".to_string()
            }
        );
        assert_eq!(VIOLATED.exhausted(1, "run"), (false, "not found in 1 run".to_string()));
        assert_eq!(VIOLATED.describe(), "violated: mutual-exclusion; resource-safety safe");
        assert_eq!(Expect::Safe.describe(), "safe");
    }

    #[test]
    fn the_runs_stop_at_the_first_that_decides() {
        let histories = [clean(), clean(), overlapping(), clean()];
        let mut made = Vec::new();
        let outcome = VIOLATED
            .judge_runs(
                4,
                ("seed", "seed"),
                |at| {
                    made.push(at);
                    Ok::<_, ()>(histories[at as usize].clone())
                },
                |analysis| analysis,
            )
            .unwrap();
        assert_eq!(made, [0, 1, 2]);
        assert!(outcome.matches);
        assert_eq!(outcome.found, "mutual-exclusion at seed 2");
        assert_eq!((outcome.runs, outcome.decided.map(|(at, _)| at)), (3, Some(2)));
        let outcome =
            Expect::Safe.judge_runs(2, ("seed", "run"), |_| Ok::<_, ()>(clean()), |a| a).unwrap();
        assert_eq!((outcome.matches, outcome.runs, outcome.decided), (true, 2, None));
        assert_eq!(outcome.found, "valid over 2 runs");
        let failed = Expect::Safe.judge_runs(0, ("seed", "run"), Err::<Analysis, _>, |a| a);
        assert_eq!(failed, Err(0), "no runs asked: still one made");
    }

    #[test]
    fn a_kept_cell_judges_only_the_checkers_it_keeps() {
        // The overlap breaks mutual exclusion (and linearizability: the lock
        // has no lease), not the storage: a cell that keeps only the storage
        // is not decided by it.
        let keeps_storage = Expect::Keeps { valid: &[RESOURCE_SAFETY] };
        assert_eq!(keeps_storage.judge(&overlapping(), "run 1"), Judgement::Undecided);
        assert_eq!(keeps_storage.judge(&clean(), "run 2"), Judgement::Undecided);
        let keeps_mutex = Expect::Keeps { valid: &[RESOURCE_SAFETY, MUTUAL_EXCLUSION] };
        assert_eq!(keeps_mutex.judge(&clean(), "run 3"), Judgement::Undecided);
        assert_eq!(
            keeps_mutex.judge(&overlapping(), "run 4"),
            Judgement::Decided {
                matches: false,
                found: "mutual-exclusion not valid at run 4, which must stay valid".to_string()
            }
        );
        assert_eq!(
            keeps_storage.exhausted(2, "run"),
            (true, "resource-safety valid over 2 runs".to_string())
        );
        assert_eq!(keeps_mutex.describe(), "resource-safety, mutual-exclusion safe");
    }

    /// `clean` with a fault: a slow network while the lock is held within
    /// its (absent) lease reaches nothing; a kill while it is held does.
    fn clean_with(fault: &str) -> Analysis {
        let start = format!(
            r#"{{"index":2,"time":2,"process":"nemesis","type":"info","f":"start","key":null,"value":{{"fault":"{fault}","targets":["s"]}}}}"#
        );
        analysis(&[
            r#"{"index":0,"time":0,"process":0,"type":"invoke","f":"acquire","key":"l","value":{"ttl_ms":1000}}"#,
            r#"{"index":1,"time":1,"process":0,"type":"ok","f":"acquire","key":"l"}"#,
            &start,
            r#"{"index":3,"time":3,"process":0,"type":"invoke","f":"release","key":"l"}"#,
            r#"{"index":4,"time":4,"process":0,"type":"ok","f":"release","key":"l"}"#,
        ])
    }

    #[test]
    fn a_cell_counts_its_covered_runs_and_a_valid_one_that_covered_none_is_vacuous() {
        let judge = |histories: Vec<Analysis>| {
            Expect::Safe
                .judge_runs(
                    histories.len() as u64,
                    ("seed", "seed"),
                    |at| Ok::<_, ()>(histories[at as usize].clone()),
                    |a| a,
                )
                .unwrap()
        };
        let vacuous = judge(vec![clean_with("slow-net"), clean_with("slow-net")]);
        assert!(vacuous.matches);
        assert_eq!((vacuous.faulted, vacuous.covered), (2, 0));
        assert_eq!(vacuous.found, "vacuous: valid over 2 seeds, covered 0/2");
        let covered = judge(vec![clean_with("kill"), clean_with("slow-net"), clean()]);
        assert_eq!((covered.faulted, covered.covered), (2, 1));
        assert_eq!(covered.found, "valid over 3 seeds, covered 1/3");
        // No faults: as before.
        assert_eq!(judge(vec![clean()]).found, "valid over 1 seed");
        let missed = VIOLATED
            .judge_runs(1, ("seed", "seed"), |_| Ok::<_, ()>(clean_with("slow-net")), |a| a)
            .unwrap();
        assert_eq!(missed.found, "not found in 1 seed, covered 0/1");
    }
}
