//! Reading and writing histories as JSON Lines.
//!
//! The reader streams: it holds one chunk of lines at a time, never the whole
//! text, so a history of millions of lines costs memory only for the compact
//! operations the checkers keep. Chunks are parsed in parallel and fed to the
//! [`HistoryBuilder`] in order, so the result does not depend on the thread count.

use std::borrow::Cow;
use std::io::{self, BufRead, Read, Write};

use rayon::prelude::*;
use thiserror::Error;

use crate::capped::{Capped, LineTooLong, DEFAULT_MAX_LINE_BYTES};
use crate::event::{Event, EventRef, EventType, Function, Process, ValueFields};
use crate::fastline;
use crate::history::{EventParts, History, HistoryBuilder, Moment};
use crate::quote;

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

/// Reading stops after this many lines that are not operations: the first
/// is the error, and the count says the input is not a history (`yes
/// garbage | lockcheck analyze -` ends at once).
pub const MAX_BAD_LINES: u64 = 1000;

/// The first line of a history that is not an operation, and how many such
/// lines there are in all, up to [`MAX_BAD_LINES`].
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

    /// Whether reading should stop: there are [`MAX_BAD_LINES`].
    pub(crate) fn is_full(&self) -> bool {
        self.count >= MAX_BAD_LINES
    }

    /// The first bad line's error, saying how many others there are.
    pub(crate) fn error(&self, what: &str) -> Option<(u64, String)> {
        let (line, message) = self.first.clone()?;
        Some(match self.count {
            1 => (line, message),
            count if count >= MAX_BAD_LINES => (
                line,
                format!(
                    "{message} (the first of {MAX_BAD_LINES} or more {what} that are not operations: reading stopped)"
                ),
            ),
            count => {
                (line, format!("{message} (the first of {count} {what} that are not operations)"))
            }
        })
    }
}

/// Reads events one at a time from JSON Lines. Blank lines are skipped, as
/// is a byte-order mark; a line past [`DEFAULT_MAX_LINE_BYTES`] is an error.
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
            let mut line = (&mut self.input).take(DEFAULT_MAX_LINE_BYTES + 1);
            match line.read_line(&mut self.buffer) {
                Ok(0) => return None,
                Ok(_) => {}
                Err(error) => return Some(Err(io_error(&self.source_name, error))),
            }
            self.line_number += 1;
            let line = self.line_number;
            if self.buffer.trim_end_matches('\n').len() as u64 > DEFAULT_MAX_LINE_BYTES {
                let too_long = LineTooLong { line, max_line_bytes: DEFAULT_MAX_LINE_BYTES };
                return Some(Err(self.malformed(line, too_long.to_string())));
            }
            let text = match line {
                1 => self.buffer.strip_prefix('\u{feff}').unwrap_or(&self.buffer),
                _ => &self.buffer,
            };
            if text.trim().is_empty() {
                continue;
            }
            return Some(
                parse_line(text)
                    .map(|event| (line, event))
                    .map_err(|message| self.malformed(line, message)),
            );
        }
    }
}

fn parse_line(text: &str) -> Result<Event, String> {
    serde_json::from_str::<Event>(text).map_err(|error| explain(error.to_string(), text.as_bytes()))
}

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
    read(input, source_name, size_bytes, false, DEFAULT_MAX_LINE_BYTES).map(|(history, _)| history)
}

/// As [`read_history_sized`], except that a final line cut short (JSON that
/// ends inside a value, with no newline after it: a run killed mid-write)
/// is ignored rather than an error; the notes say so, naming its line.
pub fn read_history_tolerant<R: BufRead>(
    input: R,
    source_name: &str,
    size_bytes: u64,
) -> Result<(History, Vec<String>), ReadError> {
    read_history_capped(input, source_name, size_bytes, DEFAULT_MAX_LINE_BYTES)
}

/// As [`read_history_tolerant`], with a line longer than `max_line_bytes`
/// an error (found without holding the line).
pub fn read_history_capped<R: BufRead>(
    input: R,
    source_name: &str,
    size_bytes: u64,
    max_line_bytes: u64,
) -> Result<(History, Vec<String>), ReadError> {
    read(input, source_name, size_bytes, true, max_line_bytes)
}

/// An io error as a read error: a line past the cap is named by its line.
pub(crate) fn io_error(source_name: &str, error: io::Error) -> ReadError {
    let source_name = source_name.to_string();
    match LineTooLong::of(&error) {
        Some(too_long) => {
            ReadError::Malformed { source_name, line: too_long.line, message: too_long.to_string() }
        }
        None => ReadError::Io { source_name, error },
    }
}

fn read<R: BufRead>(
    input: R,
    source_name: &str,
    size_bytes: u64,
    tolerate_truncated: bool,
    max_line_bytes: u64,
) -> Result<(History, Vec<String>), ReadError> {
    let mut input = Capped::new(input, max_line_bytes);
    // The shortest realistic event line is about 80 bytes; reserving too much
    // costs only address space, as untouched capacity is never resident.
    let events_hint = (size_bytes / 80).min(1 << 31) as usize;
    let mut feed = Feed {
        builder: HistoryBuilder::with_capacity(events_hint),
        source_name,
        tolerate_truncated,
        notes: Vec::new(),
        bad: BadLines::default(),
    };
    // A line past the cap ends the input there: the lines before it are
    // read, and it is a bad line after them.
    let mut too_long = None;
    // A pipeline of two chunks: while one is parsed (in parallel), the one
    // before it is fed to the builder, in order; then the next is read.
    // A small input gets small chunks, so that it is parsed in parallel all
    // the same and its buffers cost little to set up.
    let size = Size::for_input(size_bytes);
    let mut current = Chunk::default();
    let mut previous = Chunk::default();
    let mut carry = Vec::new();
    let mut have_previous = false;
    let mut eof = false;
    let mut next_line = 0u64;
    loop {
        let got = !eof && {
            eof = match current.fill(&mut input, &mut carry, size) {
                Ok(eof) => eof,
                Err(error) => match LineTooLong::of(&error) {
                    Some(line) => {
                        too_long = Some(line);
                        // Only whole lines are read: the long one's start goes.
                        let whole = memchr::memrchr(b'\n', &current.text).map_or(0, |at| at + 1);
                        current.text.truncate(whole);
                        true
                    }
                    None => return Err(io_error(source_name, error)),
                },
            };
            !current.text.trim_ascii().is_empty()
        };
        if got {
            current.first_line = next_line + current.skipped_lines;
        }
        // Whether a non-blank line follows the previous chunk's last.
        previous.at_end = !got;
        match (got, have_previous) {
            (false, false) => break,
            (true, false) => current.parse(),
            (false, true) => feed.chunk(&mut previous)?,
            (true, true) => {
                let ((), fed) = rayon::join(|| current.parse(), || feed.chunk(&mut previous));
                fed?;
            }
        }
        // Enough lines that are not operations: this is not a history.
        if !got || feed.bad.is_full() {
            break;
        }
        next_line = current.first_line + current.line_count;
        std::mem::swap(&mut current, &mut previous);
        have_previous = true;
    }
    if let Some(too_long) = too_long.filter(|_| !feed.bad.is_full()) {
        feed.bad.add(too_long.line, too_long.to_string());
    }
    if let Some((line, message)) = feed.bad.error("lines") {
        return Err(feed.malformed(line, message));
    }
    Ok((feed.builder.finish(), feed.notes))
}

/// Where the string of a parsed line is: a span of its chunk's text, or
/// owned (a string serde_json unescaped).
#[derive(Debug)]
enum Text {
    Span(usize, usize),
    Owned(Box<str>),
}

impl Text {
    fn of(text: Cow<'_, str>, chunk: &[u8]) -> Text {
        let start = (text.as_ptr() as usize).checked_sub(chunk.as_ptr() as usize);
        match (start, text) {
            (Some(start), Cow::Borrowed(text)) if start + text.len() <= chunk.len() => {
                Text::Span(start, start + text.len())
            }
            (_, text) => Text::Owned(text.into()),
        }
    }

    /// The text's bytes: UTF-8, as they were a `&str` when parsed.
    fn bytes<'c>(&'c self, chunk: &'c [u8]) -> &'c [u8] {
        match self {
            Text::Span(start, end) => &chunk[*start..*end],
            Text::Owned(text) => text.as_bytes(),
        }
    }

    fn get<'c>(&'c self, chunk: &'c [u8]) -> &'c str {
        match self {
            // A span was a `&str` when parsed, so it is whole UTF-8.
            Text::Span(start, end) => std::str::from_utf8(&chunk[*start..*end]).unwrap_or(""),
            Text::Owned(text) => text,
        }
    }
}

/// One line parsed off the main thread, its strings located in the chunk.
#[derive(Debug)]
struct Parsed {
    at: Moment,
    process: Process,
    event_type: EventType,
    f: Function,
    key: Option<Text>,
    error: Option<Text>,
    fields: Result<ValueFields, String>,
}

impl Parsed {
    fn of(event: EventRef<'_>, fields: Result<ValueFields, String>, chunk: &[u8]) -> Parsed {
        Parsed {
            at: Moment { index: event.index, time_ns: event.time_ns },
            process: event.process,
            event_type: event.event_type,
            f: event.f,
            key: event.key.map(|key| Text::of(key, chunk)),
            error: event.error.map(|error| Text::of(error, chunk)),
            fields,
        }
    }
}

/// A line that is not an event: whether it is JSON cut short (the input
/// ended inside a value). Why it is not is told again for the first such
/// line only ([`line_error`]): endless garbage costs no message a line.
type LineError = bool;

/// Bytes read at a time from a large input (or one of unknown size): about
/// 20,000 lines, enough to amortise the parallel fork and join; the chunk's
/// tables are reused, so their pages are touched once.
const CHUNK_BYTES: usize = 1 << 21;

/// The smallest chunk, for inputs known to be small.
const MIN_CHUNK_BYTES: usize = 1 << 16;

/// Bytes asked for by each read: the 1 MiB buffer the CLI reads files
/// through, which a larger read bypasses.
const READ_BYTES: usize = 1 << 20;

/// How much a chunk holds at least, and how much each read asks for.
#[derive(Debug, Clone, Copy)]
struct Size {
    chunk: usize,
    read: usize,
}

impl Size {
    /// For an input of `size_bytes` (0: unknown): about a sixteenth of it
    /// per chunk, between `MIN_CHUNK_BYTES` and `CHUNK_BYTES`.
    fn for_input(size_bytes: u64) -> Size {
        let chunk = match usize::try_from(size_bytes) {
            Ok(0) | Err(_) => CHUNK_BYTES,
            Ok(size) => (size / 16).clamp(MIN_CHUNK_BYTES, CHUNK_BYTES),
        };
        Size { chunk, read: READ_BYTES.min(chunk) }
    }
}

/// Whole lines of the input, and what they parsed to. Two chunks are reused
/// in turn, so their buffers are allocated once.
#[derive(Debug, Default)]
struct Chunk {
    text: Vec<u8>,
    /// Blank lines read and dropped before `text`.
    skipped_lines: u64,
    /// The line number of `text`'s first line, less one.
    first_line: u64,
    /// Lines in `text`, blank ones included.
    line_count: u64,
    /// Non-blank lines: number within `text` (from 1), start and end.
    lines: Vec<(u64, usize, usize)>,
    parsed: Vec<Result<Parsed, LineError>>,
    /// No non-blank line follows this chunk.
    at_end: bool,
}

impl Chunk {
    /// Reads whole lines: the line begun in the last read (`carry`), then
    /// input up to at least `size.chunk` and on to the last newline, which
    /// leaves the rest in `carry`. Text that is all blank lines is counted
    /// and dropped. True at the end of the input.
    fn fill<R: Read>(
        &mut self,
        input: &mut R,
        carry: &mut Vec<u8>,
        size: Size,
    ) -> io::Result<bool> {
        self.text.clear();
        self.skipped_lines = 0;
        loop {
            self.text.append(carry);
            let eof = loop {
                // Reads of a large input ask for READ_BYTES, at least a
                // reader's buffer, so that a `BufReader` reads into `text`
                // without a copy.
                let len = self.text.len();
                self.text.resize(len + size.read, 0);
                let read = input.read(&mut self.text[len..]);
                self.text.truncate(len + *read.as_ref().unwrap_or(&0));
                match read {
                    Ok(0) => break true,
                    Ok(_) => {}
                    Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                    Err(error) => return Err(error),
                }
                if self.text.len() < size.chunk {
                    continue;
                }
                // A line longer than a chunk reads on.
                if let Some(last) = memchr::memrchr(b'\n', &self.text[len..]) {
                    carry.extend_from_slice(&self.text[len + last + 1..]);
                    self.text.truncate(len + last + 1);
                    break false;
                }
            };
            if eof || !self.text.trim_ascii().is_empty() {
                return Ok(eof);
            }
            self.skipped_lines += memchr::memchr_iter(b'\n', &self.text).count() as u64;
            self.text.clear();
        }
    }

    /// Finds the lines and parses them in parallel.
    fn parse(&mut self) {
        self.lines.clear();
        let mut start = 0;
        let mut number = 0;
        let ends = memchr::memchr_iter(b'\n', &self.text).map(|newline| newline + 1);
        let last =
            (!self.text.ends_with(b"\n") && !self.text.is_empty()).then_some(self.text.len());
        for end in ends.chain(last) {
            number += 1;
            if !self.text[start..end].trim_ascii().is_empty() {
                self.lines.push((number, start, end));
            }
            start = end;
        }
        self.line_count = number;
        let text = &self.text;
        self.lines
            .par_iter()
            .map(|&(_, start, end)| {
                let line = &text[start..end];
                if let Some((event, fields)) = fastline::parse(line) {
                    return Ok(Parsed::of(event, Ok(fields), text));
                }
                let event = serde_json::from_slice::<EventRef<'_>>(line)
                    .map_err(|error| cut_short(line, &error))?;
                let fields = event.value_fields();
                Ok(Parsed::of(event, fields, text))
            })
            .collect_into_vec(&mut self.parsed);
    }
}

/// Why a line is not an event: serde_json's reason.
fn line_error(line: &[u8]) -> String {
    match serde_json::from_slice::<EventRef<'_>>(line) {
        Err(error) => error.to_string(),
        Ok(_) => "not an event".to_string(),
    }
}

/// Whether a line that is not an event is JSON that ends inside a value (a
/// writer stopped mid-line). An error inside a field's value is reworded
/// with the field's name, which loses serde_json's end-of-input category,
/// so the line is read again as any JSON to tell.
fn cut_short(line: &[u8], error: &serde_json::Error) -> bool {
    error.is_eof()
        || serde_json::from_slice::<serde::de::IgnoredAny>(line).is_err_and(|error| error.is_eof())
}

/// The builder and what reading has found so far, fed a chunk at a time.
struct Feed<'s> {
    builder: HistoryBuilder,
    source_name: &'s str,
    tolerate_truncated: bool,
    notes: Vec<String>,
    // Past the first line that is not an event, the rest are only counted.
    bad: BadLines,
}

impl Feed<'_> {
    fn malformed(&self, line: u64, message: String) -> ReadError {
        ReadError::Malformed { source_name: self.source_name.to_string(), line, message }
    }

    fn chunk(&mut self, chunk: &mut Chunk) -> Result<(), ReadError> {
        let Chunk { text, first_line, lines, parsed, at_end, .. } = chunk;
        let last = lines.len().saturating_sub(1);
        for (position, (&(number, start, end), parsed)) in
            lines.iter().zip(parsed.iter_mut()).enumerate()
        {
            let line = *first_line + number;
            let explained = |message: String| explain(message, &text[start..end]);
            match parsed {
                Err(true)
                    if *at_end
                        && position == last
                        && self.tolerate_truncated
                        && is_cut_off(&text[start..end]) =>
                {
                    let source_name = self.source_name;
                    self.notes.push(format!("{source_name}:{line}: truncated final line, ignored"));
                }
                Err(_) if self.bad.is_empty() => {
                    self.bad.add(line, explained(line_error(&text[start..end])));
                }
                Err(_) => self.bad.add(line, String::new()),
                Ok(_) if !self.bad.is_empty() => {}
                Ok(parsed) => {
                    let parts = EventParts {
                        at: parsed.at,
                        process: parsed.process,
                        event_type: parsed.event_type,
                        f: &parsed.f,
                        key: parsed.key.as_ref().map(|key| key.bytes(text)),
                        error: parsed.error.as_ref().map(|error| error.get(text)),
                    };
                    self.builder
                        .push_parts(parts, parsed.fields.as_mut().map_err(|message| &**message))
                        .map_err(|error| self.malformed(line, explained(error.to_string())))?;
                }
            }
        }
        Ok(())
    }
}

/// Whether a final line that is JSON cut short is what a writer stopped
/// mid-line leaves: the start of an event (an object) with no newline after
/// it. A corrupt line that ends with a newline was written whole.
fn is_cut_off(line: &[u8]) -> bool {
    line.trim_ascii_start().starts_with(b"{") && !line.ends_with(b"\n")
}

/// A parse error for people: a long value quoted in it cut short, and an
/// integer beyond 64 bits (which serde_json reads as a float) called one.
fn explain(message: String, line: &[u8]) -> String {
    const FLOAT: &str = "invalid type: floating point `";
    const OUT_OF_RANGE: &str = "integer out of range (beyond ";
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
        // A field that read the number as one past its bits: its digits.
        (None, Some(digits)) => match message.find(OUT_OF_RANGE) {
            Some(start) => match message[start..].find(" bits)") {
                Some(end) if !message[start + end..].starts_with(" bits):") => {
                    let at = start + end + " bits)".len();
                    format!("{}: {}{}", &message[..at], quote::display(&digits), &message[at..])
                }
                _ => message,
            },
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

    /// A reader that hands out a few bytes at a time, as a pipe may.
    struct Trickle<'a> {
        text: &'a [u8],
        step: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.step.min(buf.len()).min(self.text.len());
            buf[..n].copy_from_slice(&self.text[..n]);
            self.text = &self.text[n..];
            Ok(n)
        }
    }

    /// The same history read line by line, without chunks: what the
    /// chunked reader must agree with.
    fn line_by_line(text: &str) -> Result<History, String> {
        let mut builder = HistoryBuilder::new();
        for item in EventReader::new(text.as_bytes(), "x") {
            let (line, event) = item.map_err(|error| error.to_string())?;
            builder.push(&event).map_err(|error| format!("x:{line}: {error}"))?;
        }
        Ok(builder.finish())
    }

    fn same(chunked: &History, expected: &History) {
        assert_eq!(chunked.ops(), expected.ops());
        assert!(chunked.steps().eq(expected.steps()));
        assert_eq!(chunked.event_count(), expected.event_count());
        assert_eq!(chunked.warnings(), expected.warnings());
        assert_eq!(chunked.key_count(), expected.key_count());
    }

    /// Lines of acquires and releases on three keys, with runs of blank
    /// lines (one of them longer than a chunk) and a write whose data is
    /// longer than a chunk: several chunks, with lines across their edges.
    fn many_chunks(events: u64) -> String {
        let mut text = String::new();
        let mut index = 0;
        for round in 0..events / 4 {
            let (process, key) = (round % 4, format!("k{}", round % 3));
            for (event_type, f) in
                [("invoke", "acquire"), ("ok", "acquire"), ("invoke", "release"), ("ok", "release")]
            {
                text.push_str(&format!(
                    r#"{{"index":{index},"time":{index},"process":{process},"type":"{event_type}","f":"{f}","key":"{key}","value":null}}"#
                ));
                text.push('\n');
                index += 1;
            }
            match round % 5_000 {
                17 => text.push_str(&" \n".repeat(CHUNK_BYTES)),
                101 => text.push_str("\n\n   \n"),
                _ => {}
            }
            if round == 2_222 {
                let data = "d".repeat(CHUNK_BYTES * 3 / 2);
                for event_type in ["invoke", "ok"] {
                    text.push_str(&format!(
                        r#"{{"index":{index},"time":{index},"process":9,"type":"{event_type}","f":"write","key":"r","value":{{"data":"{data}"}}}}"#
                    ));
                    text.push('\n');
                    index += 1;
                }
            }
        }
        text
    }

    #[test]
    fn chunks_read_as_lines_do_whatever_the_reads_return() {
        let text = many_chunks(80_000);
        assert!(text.len() > 4 * CHUNK_BYTES, "{}", text.len());
        let expected = line_by_line(&text).unwrap();
        same(&read_history(text.as_bytes(), "x").unwrap(), &expected);
        let trickle =
            io::BufReader::with_capacity(64, Trickle { text: text.as_bytes(), step: 4_099 });
        same(&read_history(trickle, "x").unwrap(), &expected);
        // Chunks sized for the input's size, right or wrong.
        for size in [text.len() as u64, 100_000, 1] {
            same(&read_history_sized(text.as_bytes(), "x", size).unwrap(), &expected);
        }
        // Without a final newline, and with blank lines at the end.
        let cut = text.trim_end();
        same(&read_history(cut.as_bytes(), "x").unwrap(), &line_by_line(cut).unwrap());
        let padded = format!("{text}{}", "\n \n".repeat(CHUNK_BYTES));
        same(&read_history(padded.as_bytes(), "x").unwrap(), &expected);
    }

    #[test]
    fn a_bad_line_in_a_later_chunk_is_named_by_its_line() {
        let text = many_chunks(80_000);
        let mut lines: Vec<&str> = text.split('\n').collect();
        let bad_line = lines.len() - 1_000;
        assert!(lines[bad_line - 1].starts_with('{'));
        lines[bad_line - 1] = r#"{"index":"soon"}"#;
        let broken = lines.join("\n");
        let error = read_history(broken.as_bytes(), "x").unwrap_err().to_string();
        assert!(error.starts_with(&format!("x:{bad_line}: ")), "{error}");
        assert_eq!(line_by_line(&broken).unwrap_err().split(' ').next(), error.split(' ').next());
    }

    #[test]
    fn a_final_line_cut_short_is_ignored_across_chunks() {
        let text = many_chunks(40_000);
        let lines = text.lines().count();
        let cut = format!("{text}{{\"index\":99999999,\"time\":");
        let (history, notes) = read_history_tolerant(cut.as_bytes(), "x", 0).unwrap();
        same(&history, &line_by_line(&text).unwrap());
        assert_eq!(notes, [format!("x:{}: truncated final line, ignored", lines + 1)]);
        // Read strictly, the same line is an error.
        let error = read_history(cut.as_bytes(), "x").unwrap_err().to_string();
        assert!(error.starts_with(&format!("x:{}: ", lines + 1)), "{error}");
        // A newline after it, blank lines or not: it was written whole, and
        // is as bad as any other line.
        for tail in ["\n", "\n  \n", &"\n \n".repeat(CHUNK_BYTES)] {
            let corrupt = format!("{cut}{tail}");
            let error = read_history_tolerant(corrupt.as_bytes(), "x", 0).unwrap_err().to_string();
            assert!(error.starts_with(&format!("x:{}: ", lines + 1)), "{error}");
        }
    }

    /// "garbage\n" for ever, as `yes garbage` writes it.
    struct Garbage(usize);

    impl Read for Garbage {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            const LINE: &[u8] = b"garbage\n";
            for byte in buf.iter_mut() {
                *byte = LINE[self.0 % LINE.len()];
                self.0 += 1;
            }
            Ok(buf.len())
        }
    }

    #[test]
    fn endless_input_ends_at_the_cap_or_after_enough_bad_lines() {
        // `analyze /dev/zero`: one endless line.
        let zeros = io::BufReader::new(io::repeat(0));
        let error = read_history_tolerant(zeros, "zero", 0).unwrap_err().to_string();
        assert!(error.starts_with("zero:1: line longer than 16 MiB"), "{error}");
        // `yes garbage | lockcheck analyze -`: endless bad lines.
        let garbage = io::BufReader::new(Garbage(0));
        let error = read_history_tolerant(garbage, "-", 0).unwrap_err().to_string();
        assert!(error.starts_with("-:1: "), "{error}");
        assert!(
            error.ends_with(
                "(the first of 1000 or more lines that are not operations: reading stopped)"
            ),
            "{error}"
        );
    }

    #[test]
    fn a_long_line_is_an_error_after_the_lines_before_it() {
        let text = many_chunks(400);
        let lines = text.lines().count() as u64;
        let long = format!("{text}{{\"index\":1,\"key\":\"{}\"}}\n", "k".repeat(5000));
        let error = read_history_capped(long.as_bytes(), "x", 0, 4096).unwrap_err().to_string();
        assert_eq!(error, format!("x:{}: line longer than 4 KiB (the cap on a line, --max-line-bytes): not a history's line", lines + 1));
        // An earlier bad line comes first.
        let bad_first = format!("nonsense\n{long}");
        let error = read_history_capped(bad_first.as_bytes(), "x", 0, 4096).unwrap_err();
        assert!(error.to_string().starts_with("x:1: "), "{error}");
        let error = read_history_capped(long.as_bytes(), "x", 0, 1 << 20).unwrap_err();
        assert!(!error.to_string().contains("longer than"), "{error}");
    }

    #[test]
    fn only_an_unterminated_last_line_is_a_truncation() {
        let text = many_chunks(8);
        for (corrupt, line) in [
            (format!("{text}{{\"index\":4,\"time\":5000,\n"), 9),
            (format!("{}\n", "[".repeat(100_000)), 1),
            ("[".repeat(100_000), 1),
            (format!("{text}[1,2"), 9),
        ] {
            let error = read_history_tolerant(corrupt.as_bytes(), "x", 0).unwrap_err().to_string();
            assert!(error.starts_with(&format!("x:{line}: ")), "{error}");
        }
        let cut = format!("{text}{{\"index\":4,\"time\":5000,");
        let (_, notes) = read_history_tolerant(cut.as_bytes(), "x", 0).unwrap();
        assert_eq!(notes, ["x:9: truncated final line, ignored"]);
    }

    #[test]
    fn a_byte_order_mark_is_skipped_by_both_readers() {
        let text = many_chunks(8);
        let marked = format!("\u{feff}{text}");
        same(
            &read_history(marked.as_bytes(), "x").unwrap(),
            &read_history(text.as_bytes(), "x").unwrap(),
        );
        same(&line_by_line(&marked).unwrap(), &line_by_line(&text).unwrap());
        // Anywhere else it is what it is: not JSON.
        let inside = format!("{text}\u{feff}{text}");
        assert!(read_history(inside.as_bytes(), "x").unwrap_err().to_string().starts_with("x:9: "));
    }

    #[test]
    fn integers_past_their_bits_and_keys_are_said_plainly() {
        let event = |process: &str| {
            format!(
                r#"{{"index":0,"time":0,"process":{process},"type":"invoke","f":"acquire","key":"a","value":null}}"#
            )
        };
        for (process, said) in [
            ("9223372036854775808", "integer out of range (beyond 63 bits): 9223372036854775808"),
            ("18446744073709551616", "integer out of range (beyond 63 bits): 18446744073709551616"),
            ("18446744073709551617", "integer out of range (beyond 63 bits): 18446744073709551617"),
            ("-9223372036854775809", "integer out of range (beyond 63 bits): -9223372036854775809"),
            ("1.5", "expected an integer or \"nemesis\", found 1.5"),
            ("\"chaos\"", "expected an integer or \"nemesis\", found \"chaos\""),
        ] {
            let error = read_history(event(process).as_bytes(), "x").unwrap_err().to_string();
            assert!(error.contains(said), "{process}: {error}");
        }
        let text = concat!(
            r#"{"index":0,"time":0,"process":1,"type":"invoke","f":"acquire","key":"a","value":null}"#,
            "\n",
            r#"{"index":1,"time":1,"process":1,"type":"ok","f":"release","value":null}"#,
        );
        let error = read_history(text.as_bytes(), "x").unwrap_err().to_string();
        assert!(!error.contains("Some(") && !error.contains("None"), "{error}");
        assert!(error.contains("release with no key"), "{error}");
    }
}
