//! Values quoted in error messages and in the reports people read (the
//! terminal's, Markdown) are cut short: a 200 MB bad value or key must not
//! give 200 MB on stderr or stdout.

use std::fmt::{self, Write};

/// At most this many bytes of a value are quoted.
pub const QUOTE_BYTES: usize = 80;

/// Keeps the first [`QUOTE_BYTES`] of what is written, and counts the rest.
struct Bounded {
    kept: String,
    total: usize,
}

impl Write for Bounded {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        self.total += text.len();
        if self.kept.len() < QUOTE_BYTES {
            let room = QUOTE_BYTES - self.kept.len();
            self.kept.push_str(&text[..floor_char_boundary(text, room)]);
        }
        Ok(())
    }
}

fn floor_char_boundary(text: &str, at: usize) -> usize {
    if at >= text.len() {
        return text.len();
    }
    (0..=at).rev().find(|&at| text.is_char_boundary(at)).unwrap_or(0)
}

fn finish(kept: String, total: usize) -> String {
    if total <= QUOTE_BYTES {
        kept
    } else {
        format!("{kept}… ({total} bytes)")
    }
}

/// A value as displayed, cut to [`QUOTE_BYTES`] with an ellipsis and its
/// full length when longer. Formatting a long value costs time, not memory.
pub fn display(value: &impl fmt::Display) -> String {
    let mut bounded = Bounded { kept: String::new(), total: 0 };
    let _ = write!(bounded, "{value}");
    finish(bounded.kept, bounded.total)
}

/// A text as a quoted string (`"…"`), cut as [`display`] cuts.
pub fn text(text: &str) -> String {
    let cut = floor_char_boundary(text, QUOTE_BYTES);
    if cut == text.len() {
        format!("{text:?}")
    } else {
        format!("{:?}… ({} bytes)", &text[..cut], text.len())
    }
}

/// A message (serde's, say) that may quote a long value between `"` or
/// backticks: each quoted run longer than [`QUOTE_BYTES`] is cut, and a
/// message still longer than `8 × QUOTE_BYTES` too.
pub fn clip_message(message: &str) -> String {
    let out = clip_quoted(message);
    if out.len() > 8 * QUOTE_BYTES {
        let cut = floor_char_boundary(&out, 4 * QUOTE_BYTES);
        return format!("{}… ({} bytes)", &out[..cut], out.len());
    }
    out
}

/// A text (a violation's explanation, say) with each run between `"` or
/// backticks longer than [`QUOTE_BYTES`] cut, as [`clip_message`] cuts it;
/// the rest is kept whole, however long.
pub fn clip_quoted(message: &str) -> String {
    if message.len() <= 2 * QUOTE_BYTES {
        return message.to_string();
    }
    let bytes = message.as_bytes();
    let mut out = String::new();
    let mut at = 0;
    while at < message.len() {
        let Some(open) = message[at..].find(['"', '`']).map(|found| at + found) else {
            out.push_str(&message[at..]);
            break;
        };
        let quote = bytes[open];
        let mut close = open + 1;
        while close < bytes.len() && bytes[close] != quote {
            close += if bytes[close] == b'\\' && quote == b'"' { 2 } else { 1 };
        }
        let close = close.min(bytes.len());
        let inner = &message[open + 1..floor_char_boundary(message, close)];
        out.push_str(&message[at..=open]);
        if inner.len() > QUOTE_BYTES {
            let cut = floor_char_boundary(inner, QUOTE_BYTES);
            let _ = write!(out, "{}…", &inner[..cut]);
            if close < bytes.len() {
                out.push(quote as char);
            }
            let _ = write!(out, " ({} bytes)", inner.len());
        } else {
            out.push_str(inner);
            if close < bytes.len() {
                out.push(quote as char);
            }
        }
        at = (close + 1).min(message.len());
        at = floor_char_boundary(message, at);
        if at <= open {
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_values_are_whole_long_ones_cut_with_their_length() {
        assert_eq!(display(&"abc"), "abc");
        let long = "é".repeat(1000);
        let shown = display(&long);
        assert!(shown.ends_with("… (2000 bytes)"), "{shown}");
        assert!(shown.len() < 120, "{shown}");
        assert_eq!(text("ab"), "\"ab\"");
        assert!(text(&long).ends_with("… (2000 bytes)"));
    }

    #[test]
    fn quoted_runs_of_a_message_are_cut() {
        let long = "x".repeat(100_000);
        let message = format!("invalid type: string \"{long}\", expected u64 at line 1 column 9");
        let clipped = clip_message(&message);
        assert!(clipped.len() < 200, "{clipped}");
        assert!(clipped.contains("(100000 bytes)"), "{clipped}");
        assert!(clipped.ends_with("expected u64 at line 1 column 9"), "{clipped}");
        let message = format!("unknown variant `{long}`, expected one of `a`, `b`");
        let clipped = clip_message(&message);
        assert!(clipped.len() < 200 && clipped.ends_with("`a`, `b`"), "{clipped}");
        let unclosed = format!("bad \"{long}");
        assert!(clip_message(&unclosed).len() < 200);
        assert_eq!(clip_message("short \"q\""), "short \"q\"");
        // Outside the quotes, `clip_quoted` keeps a long text whole.
        let prose = format!("{} then \"{long}\" and more", "word ".repeat(200));
        let clipped = clip_quoted(&prose);
        assert!(clipped.starts_with(&"word ".repeat(200)), "{clipped}");
        assert!(clipped.ends_with("…\" (100000 bytes) and more"), "{clipped}");
        assert!(clip_message(&prose).len() < 8 * QUOTE_BYTES);
    }
}
