//! Renderers for lockcheck results: a terminal report people read, and one
//! JSON document for machines. Both take the [`Analysis`] of each history as
//! the checker crate produced it; nothing here decides a verdict.

mod json;
mod text;

pub use json::{render_json, JsonReport};
pub use text::{render_text, TextOptions};

use lockcheck_checker::Analysis;

/// One analysed history and where it came from.
#[derive(Debug, Clone, Copy)]
pub struct Analyzed<'a> {
    /// The file name as the user gave it (`-` is standard input).
    pub source: &'a str,
    pub analysis: &'a Analysis,
}
