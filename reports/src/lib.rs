//! Renderers for lockcheck results: a terminal report people read, one JSON
//! document for machines, for CI gates JUnit XML and a Markdown job
//! summary, and a self-contained HTML page with the run's timeline. All take
//! the [`Analysis`] of each history as the checker crate produced it;
//! nothing here decides a verdict.

mod html;
mod json;
mod junit;
mod markdown;
mod text;

pub use html::{escape_html, render_html, HtmlInput};
pub use json::{render_json, JsonReport};
pub use junit::render_junit;
pub use markdown::render_markdown;
pub use text::{render_text, TextOptions};

use lockcheck_checker::Analysis;

/// One analysed history and where it came from.
#[derive(Debug, Clone, Copy)]
pub struct Analyzed<'a> {
    /// The file name as the user gave it (`-` is standard input).
    pub source: &'a str,
    pub analysis: &'a Analysis,
}
