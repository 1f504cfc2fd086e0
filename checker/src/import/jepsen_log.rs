//! Jepsen's log lines for a CAS register, as in porcupine's etcd corpus:
//! `INFO  jepsen.util - 3 :invoke :cas [1 4]` (fields apart by tabs or spaces).
//!
//! `:fail :cas` is a compare-and-set that did not match; a failed read or
//! write did not happen and is dropped; `:info` is unknown.

use super::pairing::{Completion, Pairer};
use crate::linear::models::{RegisterInput, RegisterOutput};
use crate::linear::Operation;

pub type RegisterOperation = Operation<RegisterInput, RegisterOutput>;

fn parse_value(text: &str) -> Result<Option<i64>, String> {
    match text {
        "nil" => Ok(None),
        _ => text
            .parse()
            .map(Some)
            .map_err(|_| format!("expected an integer or nil, found {text:?}")),
    }
}

fn parse_pair(text: &str) -> Result<(i64, i64), String> {
    let inner = text
        .strip_prefix('[')
        .and_then(|rest| rest.strip_suffix(']'))
        .ok_or_else(|| format!("expected [old new], found {text:?}"))?;
    let mut numbers = inner.split_whitespace().map(str::parse::<i64>);
    match (numbers.next(), numbers.next(), numbers.next()) {
        (Some(Ok(old)), Some(Ok(new)), None) => Ok((old, new)),
        _ => Err(format!("expected [old new], found {text:?}")),
    }
}

/// Parses a whole log; errors name the line.
pub fn parse(text: &str) -> Result<(Vec<RegisterOperation>, u64), (u64, String)> {
    let mut pairer = Pairer::new();
    let mut operations = Vec::new();
    let mut events = 0;
    for (number, line) in text.lines().enumerate() {
        let line_number = number as u64 + 1;
        let Some((_, rest)) = line.split_once("jepsen.util - ") else {
            if line.trim().is_empty() {
                continue;
            }
            return Err((line_number, "expected a `jepsen.util - ` log line".to_string()));
        };
        let mut fields = rest.split_whitespace();
        let (Some(process), Some(kind), Some(f)) = (fields.next(), fields.next(), fields.next())
        else {
            return Err((line_number, "expected: process type f value".to_string()));
        };
        let value = fields.collect::<Vec<_>>().join(" ");
        let value = if value.is_empty() { "nil" } else { value.as_str() };
        let error = |message: String| (line_number, message);
        let Ok(process) = process.parse::<i64>() else {
            continue; // the nemesis and other non-client lines
        };
        let position = events;
        events += 1;
        let completion = match kind {
            ":invoke" => {
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
                    other => return Err((line_number, format!("unknown operation {other}"))),
                };
                pairer.invoke(process, input, position).map_err(error)?;
                continue;
            }
            ":ok" => Completion::Ok,
            ":fail" => Completion::Fail,
            ":info" => Completion::Info,
            other => return Err((line_number, format!("unknown type {other}"))),
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
    operations.extend(pairer.unfinished());
    Ok((operations, events))
}
