//! Reading and writing histories as JSON Lines.
//!
//! The reader streams: it holds one chunk of lines at a time, never the whole
//! text, so a history of millions of lines costs memory only for the compact
//! operations the checkers keep. Chunks are parsed in parallel and fed to the
//! [`HistoryBuilder`] in order, so the result does not depend on the thread count.

use std::io::{self, BufRead, Write};

use rayon::prelude::*;
use thiserror::Error;

use crate::event::{Event, EventRef, ValueFields};
use crate::fastline;
use crate::history::{History, HistoryBuilder};
use crate::quote;

/// Lines parsed per parallel chunk: large enough to amortise the fork/join,
/// small enough that the chunk's buffers are reused by the allocator rather
/// than returned to the kernel and faulted in again (measured: 16K lines cost
/// a third more time in page clearing).
const CHUNK_LINES: usize = 4096;

/// A history that could not be read. Each variant names where the problem is.
#[derive(Debug, Error)]
pub enum ReadError {
    #[error("{source_name}: cannot read: {error}")]
    Io {
        source_name: String,
        #[source]
        error: io::Error,
    },
    /// The history is well formed, but not for the model asked for.
    #[error("{source_name}: {message}")]
    ModelMismatch { source_name: String, message: String },
    #[error("{source_name}:{line}: {message}")]
    Malformed { source_name: String, line: u64, message: String },
}

/// The first line of a history that is not an operation, and how many such
/// lines there are in all.
#[derive(Debug, Default)]
pub(crate) struct BadLines {
    first: Option<(u64, String)>,
    count: u64,
}

impl BadLines {
    pub(crate) fn add(&mut self, line: u64, message: String) {
        self.count += 1;
        if self.first.is_none() {
            self.first = Some((line, message));
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The first bad line's error, saying how many others there are.
    pub(crate) fn error(&self, what: &str) -> Option<(u64, String)> {
        let (line, message) = self.first.clone()?;
        Some(match self.count {
            1 => (line, message),
            count => {
                (line, format!("{message} (the first of {count} {what} that are not operations)"))
            }
        })
    }
}

/// Reads events one at a time from JSON Lines. Blank lines are skipped.
#[derive(Debug)]
pub struct EventReader<R> {
    input: R,
    source_name: String,
    line_number: u64,
    buffer: String,
}

impl<R: BufRead> EventReader<R> {
    pub fn new(input: R, source_name: impl Into<String>) -> Self {
        EventReader {
            input,
            source_name: source_name.into(),
            line_number: 0,
            buffer: String::new(),
        }
    }

    fn malformed(&self, line: u64, message: String) -> ReadError {
        ReadError::Malformed { source_name: self.source_name.clone(), line, message }
    }
}

impl<R: BufRead> Iterator for EventReader<R> {
    /// The event and the line it came from.
    type Item = Result<(u64, Event), ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            self.buffer.clear();
            match self.input.read_line(&mut self.buffer) {
                Ok(0) => return None,
                Ok(_) => {}
                Err(error) => {
                    let source_name = self.source_name.clone();
                    return Some(Err(ReadError::Io { source_name, error }));
                }
            }
            self.line_number += 1;
            if self.buffer.trim().is_empty() {
                continue;
            }
            let line = self.line_number;
            return Some(
                parse_line(&self.buffer)
                    .map(|event| (line, event))
                    .map_err(|message| self.malformed(line, message)),
            );
        }
    }
}

fn parse_line(text: &str) -> Result<Event, String> {
    serde_json::from_str::<Event>(text).map_err(|error| explain(error.to_string(), text.as_bytes()))
}

/// One line parsed off the main thread: the event borrowed from the chunk's
/// text, and its value's fields (or why they are malformed).
type ParsedLine<'a> = (EventRef<'a>, Result<ValueFields, String>);

/// Why a line is not an event, and whether it is JSON cut short (the input
/// ended inside a value).
type LineError = (String, bool);

/// Reads a whole history into its compact, paired form, validating as it goes.
pub fn read_history<R: BufRead>(input: R, source_name: &str) -> Result<History, ReadError> {
    read_history_sized(input, source_name, 0)
}

/// As [`read_history`], with the input's size in bytes when known (a file's
/// length), so that the operation tables are allocated once: growing them by
/// doubling cost more time in copying and page faults than the parsing did.
pub fn read_history_sized<R: BufRead>(
    input: R,
    source_name: &str,
    size_bytes: u64,
) -> Result<History, ReadError> {
    read(input, source_name, size_bytes, false).map(|(history, _)| history)
}

/// As [`read_history_sized`], except that a final line cut short (JSON that
/// ends inside a value: a run killed mid-write) is ignored rather than an
/// error; the notes say so, naming its line.
pub fn read_history_tolerant<R: BufRead>(
    input: R,
    source_name: &str,
    size_bytes: u64,
) -> Result<(History, Vec<String>), ReadError> {
    read(input, source_name, size_bytes, true)
}

fn read<R: BufRead>(
    mut input: R,
    source_name: &str,
    size_bytes: u64,
    tolerate_truncated: bool,
) -> Result<(History, Vec<String>), ReadError> {
    // The shortest realistic event line is about 80 bytes; reserving too much
    // costs only address space, as untouched capacity is never resident.
    let events_hint = (size_bytes / 80).min(1 << 31) as usize;
    let mut builder = HistoryBuilder::with_capacity(events_hint);
    let mut text: Vec<u8> = Vec::new();
    let mut line_starts: Vec<(u64, usize)> = Vec::with_capacity(CHUNK_LINES);
    let mut line_number = 0u64;
    let mut notes = Vec::new();
    // Past the first line that is not an event, the rest are only counted.
    let mut bad = BadLines::default();
    let io_error = |error| ReadError::Io { source_name: source_name.to_string(), error };
    let malformed = |line: u64, message: String| ReadError::Malformed {
        source_name: source_name.to_string(),
        line,
        message,
    };
    loop {
        text.clear();
        line_starts.clear();
        // Gather one chunk of non-blank lines, remembering where each starts.
        while line_starts.len() < CHUNK_LINES {
            let start = text.len();
            let read = input.read_until(b'\n', &mut text).map_err(io_error)?;
            if read == 0 {
                break;
            }
            line_number += 1;
            if text[start..].trim_ascii().is_empty() {
                text.truncate(start);
            } else {
                line_starts.push((line_number, start));
            }
        }
        if line_starts.is_empty() {
            break;
        }
        // Whether this chunk's last line is the input's last non-blank one.
        let at_end =
            line_starts.len() < CHUNK_LINES || input.fill_buf().map_err(io_error)?.is_empty();
        let line_text = |position: usize| {
            let start = line_starts[position].1;
            let end = line_starts.get(position + 1).map_or(text.len(), |next| next.1);
            &text[start..end]
        };
        // Parse in parallel, borrowing from `text`; feed the builder in order.
        let parsed: Vec<Result<ParsedLine<'_>, LineError>> = (0..line_starts.len())
            .into_par_iter()
            .map(|position| {
                let line = line_text(position);
                if let Some((event, fields)) = fastline::parse(line) {
                    return Ok((event, Ok(fields)));
                }
                let event = serde_json::from_slice::<EventRef<'_>>(line)
                    .map_err(|error| (error.to_string(), error.is_eof()))?;
                let fields = event.value_fields();
                Ok((event, fields))
            })
            .collect();
        let last = line_starts.len() - 1;
        for (position, parsed) in parsed.into_iter().enumerate() {
            let line = line_starts[position].0;
            let explained = |message: String| explain(message, line_text(position));
            match parsed {
                Err((_, true)) if at_end && position == last && tolerate_truncated => {
                    notes.push(format!("{source_name}:{line}: truncated final line, ignored"));
                }
                Err((message, _)) => bad.add(line, explained(message)),
                Ok(_) if !bad.is_empty() => {}
                Ok((event, fields)) => builder
                    .push_borrowed(&event, fields)
                    .map_err(|error| malformed(line, explained(error.to_string())))?,
            }
        }
    }
    if let Some((line, message)) = bad.error("lines") {
        return Err(malformed(line, message));
    }
    Ok((builder.finish(), notes))
}

/// A parse error for people: a long value quoted in it cut short, and an
/// integer beyond 64 bits (which serde_json reads as a float) called one.
fn explain(message: String, line: &[u8]) -> String {
    const FLOAT: &str = "invalid type: floating point `";
    let message = match (message.find(FLOAT), out_of_range_integer(line)) {
        (Some(start), Some(digits)) => match message[start + FLOAT.len()..].find("`") {
            Some(end) => {
                let rest = &message[start + FLOAT.len() + end + 1..];
                format!(
                    "{}integer out of range (beyond 64 bits): {}{rest}",
                    &message[..start],
                    quote::display(&digits)
                )
            }
            None => message,
        },
        _ => message,
    };
    quote::clip_message(&message)
}

/// The first integer literal of a JSON line (outside strings) that fits
/// neither i64 nor u64.
fn out_of_range_integer(line: &[u8]) -> Option<String> {
    let mut at = 0;
    let mut in_string = false;
    while at < line.len() {
        let byte = line[at];
        if in_string {
            match byte {
                b'\\' => at += 1,
                b'"' => in_string = false,
                _ => {}
            }
            at += 1;
            continue;
        }
        if byte == b'"' {
            in_string = true;
            at += 1;
            continue;
        }
        if byte == b'-' || byte.is_ascii_digit() {
            let start = at;
            at += 1;
            while at < line.len() && line[at].is_ascii_digit() {
                at += 1;
            }
            let fraction = at < line.len() && matches!(line[at], b'.' | b'e' | b'E');
            let token = std::str::from_utf8(&line[start..at]).unwrap_or_default();
            if !fraction
                && token.len() > 1 + usize::from(token.starts_with('-'))
                && token.parse::<i64>().is_err()
                && token.parse::<u64>().is_err()
            {
                return Some(token.to_string());
            }
            continue;
        }
        at += 1;
    }
    None
}

/// Writes events as JSON Lines, one per line.
pub fn write_events<'a, W: Write>(
    mut output: W,
    events: impl IntoIterator<Item = &'a Event>,
) -> io::Result<()> {
    for event in events {
        serde_json::to_writer(&mut output, event)?;
        output.write_all(b"\n")?;
    }
    output.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"{"index":0,"time":1000000000,"process":1,"type":"invoke","f":"acquire","key":"report","value":{"ttl_ms":10000}}
{"index":1,"time":1003000000,"process":1,"type":"ok","f":"acquire","key":"report","value":{"fence":33},"trace":"x"}

{"index":2,"time":2000000000,"process":"nemesis","type":"info","f":"start","key":null,"value":{"fault":"pause","targets":["client-1"]}}
"#;

    #[test]
    fn streaming_reader_round_trips_and_skips_blank_lines() {
        let events: Vec<(u64, Event)> =
            EventReader::new(EXAMPLE.as_bytes(), "example").collect::<Result<_, _>>().unwrap();
        assert_eq!(events.iter().map(|(line, _)| *line).collect::<Vec<_>>(), [1, 2, 4]);
        let mut written = Vec::new();
        write_events(&mut written, events.iter().map(|(_, event)| event)).unwrap();
        let expected: String = EXAMPLE
            .lines()
            .filter(|line| !line.is_empty())
            .map(|line| format!("{line}\n"))
            .collect();
        assert_eq!(String::from_utf8(written).unwrap(), expected);
    }

    #[test]
    fn malformed_line_names_file_line_and_field() {
        let text = format!("{EXAMPLE}{{\"index\":3,\"time\":\"soon\"}}\n");
        let error = read_history(text.as_bytes(), "run.jsonl").unwrap_err().to_string();
        assert!(error.starts_with("run.jsonl:5: field `time`"), "{error}");
        let error = EventReader::new("not json\n".as_bytes(), "x").next().unwrap().unwrap_err();
        assert!(error.to_string().starts_with("x:1: "), "{error}");
    }

    #[test]
    fn pairing_errors_carry_the_line() {
        let text =
            r#"{"index":0,"time":1,"process":1,"type":"ok","f":"acquire","key":"a","value":null}"#;
        let error = read_history(text.as_bytes(), "h.jsonl").unwrap_err().to_string();
        assert!(error.starts_with("h.jsonl:1: "), "{error}");
        assert!(error.contains("no open invoke"), "{error}");
    }
}
