//! `--format json`: one JSON document for every history analysed.

use lockcheck_checker::{Analysis, Verdict};
use serde::Serialize;

use crate::Analyzed;

/// The document's shape: the verdict over all histories, then each history.
#[derive(Debug, Serialize)]
pub struct JsonReport<'a> {
    pub lockcheck_version: &'static str,
    pub verdict: Verdict,
    pub histories: Vec<JsonHistory<'a>>,
    /// Files that could not be read, with the reason.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<JsonError<'a>>,
}

#[derive(Debug, Serialize)]
pub struct JsonHistory<'a> {
    pub source: &'a str,
    #[serde(flatten)]
    pub analysis: &'a Analysis,
}

#[derive(Debug, Serialize)]
pub struct JsonError<'a> {
    pub source: &'a str,
    pub error: &'a str,
}

/// Renders the document, pretty-printed, with a trailing newline.
pub fn render_json(verdict: Verdict, analyzed: &[Analyzed<'_>], errors: &[(&str, &str)]) -> String {
    let report = JsonReport {
        lockcheck_version: env!("CARGO_PKG_VERSION"),
        verdict,
        histories: analyzed
            .iter()
            .map(|one| JsonHistory { source: one.source, analysis: one.analysis })
            .collect(),
        errors: errors.iter().map(|&(source, error)| JsonError { source, error }).collect(),
    };
    let mut text = serde_json::to_string_pretty(&report).expect("the report serializes");
    text.push('\n');
    text
}
