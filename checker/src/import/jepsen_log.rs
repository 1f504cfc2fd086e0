//! Jepsen's log lines for a CAS register, as in porcupine's etcd corpus:
//! `INFO  jepsen.util - 3 :invoke :cas [1 4]` (fields apart by tabs or spaces).
//!
//! `:fail :cas` is a compare-and-set that did not match; a failed read or
//! write did not happen and is dropped; `:info` is unknown. Lines of the
//! nemesis (`:nemesis` for the process) are skipped and counted; any other
//! line that is not a `jepsen.util - process type f value` line is an error.

use std::io::BufRead;

use super::pairing::{Completion, Pairer};
use crate::linear::models::{RegisterInput, RegisterOutput};
use crate::linear::Operation;
use crate::quote;
use crate::reader::BadLines;

pub type RegisterOperation = Operation<RegisterInput, RegisterOutput>;

fn parse_value(text: &str) -> Result<Option<i64>, String> {
    match text {
        "nil" => Ok(None),
        _ => text.parse().map(Some).map_err(|_| {
            let digits = text.strip_prefix('-').unwrap_or(text);
            if !digits.is_empty() && digits.bytes().all(|byte| byte.is_ascii_digit()) {
                format!("integer out of range (beyond 64 bits): {}", quote::display(&text))
            } else {
                format!("expected an integer or nil, found {}", quote::text(text))
            }
        }),
    }
}

fn parse_pair(text: &str) -> Result<(i64, i64), String> {
    let expected = || format!("expected [old new], found {}", quote::text(text));
    let inner =
        text.strip_prefix('[').and_then(|rest| rest.strip_suffix(']')).ok_or_else(expected)?;
    let mut numbers = inner.split_whitespace().map(parse_value);
    match (numbers.next(), numbers.next(), numbers.next()) {
        (Some(Ok(Some(old))), Some(Ok(Some(new))), None) => Ok((old, new)),
        (Some(Err(error)), ..) | (_, Some(Err(error)), _) if error.contains("out of range") => {
            Err(error)
        }
        _ => Err(expected()),
    }
}

/// One log line: the process (`None` for the nemesis), type, f and value.
struct LogLine<'a> {
    process: Option<i64>,
    kind: Kind,
    f: &'a str,
    value: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Invoke,
    Ok,
    Fail,
    Info,
}

/// A line as a log line (`Ok(None)` for a blank one), or why it is not one.
fn log_line(line: &str) -> Result<Option<LogLine<'_>>, String> {
    let Some((_, rest)) = line.split_once("jepsen.util - ") else {
        if line.trim().is_empty() {
            return Ok(None);
        }
        let line = line.trim_end();
        return Err(format!("expected a `jepsen.util - ` log line, found {}", quote::text(line)));
    };
    let mut fields = rest.split_whitespace();
    let (Some(process), Some(kind), Some(f)) = (fields.next(), fields.next(), fields.next()) else {
        return Err(format!("expected: process type f value, found {}", quote::text(rest)));
    };
    let value = fields.collect::<Vec<_>>().join(" ");
    let value = if value.is_empty() { "nil".to_string() } else { value };
    let process = match process.parse::<i64>() {
        Ok(process) => Some(process),
        Err(_) if process == ":nemesis" => None,
        Err(_) => {
            let digits = process.strip_prefix('-').unwrap_or(process);
            return Err(if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                format!(
                    "process: integer out of range (beyond 64 bits): {}",
                    quote::display(&process)
                )
            } else {
                format!(
                    "the process must be an integer or :nemesis, found {}",
                    quote::text(process)
                )
            });
        }
    };
    let kind = match kind {
        ":invoke" => Kind::Invoke,
        ":ok" => Kind::Ok,
        ":fail" => Kind::Fail,
        ":info" => Kind::Info,
        other => return Err(format!("unknown type {}", quote::display(&other))),
    };
    Ok(Some(LogLine { process, kind, f, value }))
}

/// What a log holds: the operations, the client event count, and how many
/// nemesis lines were skipped.
pub type Parsed = (Vec<RegisterOperation>, u64, u64);

/// Parses a log line by line, streaming; errors name the line. Lines that
/// are not log lines are an error at the first, with the count of them all.
pub fn parse<R: BufRead>(mut input: R) -> Result<Parsed, (u64, String)> {
    let mut pairer = Pairer::new();
    let mut operations = Vec::new();
    let mut events = 0;
    let mut nemesis = 0;
    let mut bad = BadLines::default();
    let mut bytes = Vec::new();
    let mut line_number = 0u64;
    while !bad.is_full() {
        bytes.clear();
        match input.read_until(b'\n', &mut bytes) {
            Ok(0) => break,
            Ok(_) => {}
            Err(error) => return Err((line_number + 1, format!("cannot read: {error}"))),
        }
        line_number += 1;
        let line = match std::str::from_utf8(&bytes) {
            Ok(line) => line,
            Err(_) => {
                bad.add(line_number, "not UTF-8 text".to_string());
                continue;
            }
        };
        let parsed = match log_line(line) {
            Ok(Some(parsed)) => parsed,
            Ok(None) => continue,
            Err(message) => {
                bad.add(line_number, message);
                continue;
            }
        };
        if !bad.is_empty() {
            continue; // only counting lines that are not log lines
        }
        let Some(process) = parsed.process else {
            nemesis += 1;
            continue;
        };
        let (kind, f, value) = (parsed.kind, parsed.f, parsed.value.as_str());
        let position = events;
        events += 1;
        let error = |message: String| (line_number, message);
        let completion = match kind {
            Kind::Invoke => {
                let input = match f {
                    ":read" => RegisterInput::Read,
                    ":write" => RegisterInput::Write(
                        parse_value(value)
                            .map_err(error)?
                            .ok_or_else(|| (line_number, "a write needs a value".to_string()))?,
                    ),
                    ":cas" => {
                        let (old, new) = parse_pair(value).map_err(error)?;
                        RegisterInput::Cas(old, new)
                    }
                    other => {
                        let other = quote::display(&other);
                        return Err((line_number, format!("unknown operation {other}")));
                    }
                };
                pairer.invoke(process, input, position).map_err(error)?;
                continue;
            }
            Kind::Ok => Completion::Ok,
            Kind::Fail => Completion::Fail,
            Kind::Info => Completion::Info,
        };
        let (input, call) = pairer.complete(process).map_err(error)?;
        let output = match (completion, input) {
            (Completion::Info, _) => None,
            (Completion::Ok, RegisterInput::Read) => {
                Some(RegisterOutput::Read(parse_value(value).map_err(error)?))
            }
            (Completion::Ok, RegisterInput::Write(_)) => Some(RegisterOutput::Written),
            (Completion::Ok, RegisterInput::Cas(..)) => Some(RegisterOutput::Cas(true)),
            (Completion::Fail, RegisterInput::Cas(..)) => Some(RegisterOutput::Cas(false)),
            (Completion::Fail, _) => continue,
        };
        let ret = (completion != Completion::Info).then_some(position);
        operations.push(Operation { client: process, input, output, call, ret });
    }
    if let Some(error) = bad.error("lines") {
        return Err(error);
    }
    operations.extend(pairer.unfinished());
    Ok((operations, events, nemesis))
}
