//! Jepsen and Knossos `history.edn`: a vector (or a stream) of operation maps,
//! `{:process 0, :type :invoke, :f :acquire, :value nil}`.
//!
//! A mutex history (`:acquire`, `:release`) becomes a lock history, so every
//! lock checker applies; a register history (`:read`, `:write`, `:cas`)
//! becomes operations for the `register` or `cas-register` model. As in
//! Knossos, a `:fail` register operation did not happen and is dropped.
//!
//! Every element must be an operation map with an integer (or `:nemesis`)
//! `:process`, a `:type` and an `:f`: anything else is not this format. The
//! nemesis' events are kept in a lock history and skipped (and counted) in a
//! register history.

use std::io::BufRead;

use super::edn::{Edn, EdnReader};
use super::jepsen_log::RegisterOperation;
use super::pairing::{Completion, Pairer};
use crate::event::{Event, EventType, Function, Process};
use crate::history::{History, HistoryBuilder};
use crate::linear::models::{RegisterInput, RegisterOutput};
use crate::linear::Operation;
use crate::quote;
use crate::reader::BadLines;

/// What an EDN history turned out to be.
#[derive(Debug)]
pub enum EdnHistory {
    Locks(History),
    /// Register operations, whether any is a compare-and-set, the event
    /// count, and how many nemesis events were skipped.
    Register(Vec<RegisterOperation>, bool, u64, u64),
}

type Located<T> = Result<T, (u64, String)>;

/// An operation's value, as far as a register needs it.
#[derive(Debug)]
enum Value {
    Nil,
    Integer(i64),
    /// `[old new]`, each an integer or nil.
    Pair(Option<i64>, Option<i64>),
    /// An integer beyond 64 bits, quoted.
    OutOfRange(String),
    /// Anything else, quoted.
    Other(String),
}

impl Value {
    fn of(value: Option<&Edn>) -> Value {
        let element = |value: &Edn| match value {
            Edn::Nil => Ok(None),
            Edn::Integer(value) => Ok(Some(*value)),
            Edn::BigInteger(digits) => Err(Value::OutOfRange(quote::display(digits))),
            other => Err(Value::Other(quote::display(other))),
        };
        match value {
            None | Some(Edn::Nil) => Value::Nil,
            Some(Edn::Integer(value)) => Value::Integer(*value),
            Some(Edn::BigInteger(digits)) => Value::OutOfRange(quote::display(digits)),
            Some(whole @ (Edn::Vector(pair) | Edn::List(pair))) if pair.len() == 2 => {
                match (element(&pair[0]), element(&pair[1])) {
                    (Ok(old), Ok(new)) => Value::Pair(old, new),
                    (Err(Value::OutOfRange(digits)), _) | (_, Err(Value::OutOfRange(digits))) => {
                        Value::OutOfRange(digits)
                    }
                    _ => Value::Other(quote::display(whole)),
                }
            }
            Some(other) => Value::Other(quote::display(other)),
        }
    }

    /// The value as an integer or nil.
    fn integer(&self) -> Result<Option<i64>, String> {
        match self {
            Value::Nil => Ok(None),
            Value::Integer(value) => Ok(Some(*value)),
            Value::OutOfRange(digits) => Err(out_of_range(digits)),
            Value::Pair(old, new) => Err(format!(
                "expected an integer or nil, found [{} {}]",
                old.map_or("nil".to_string(), |old| old.to_string()),
                new.map_or("nil".to_string(), |new| new.to_string())
            )),
            Value::Other(quoted) => Err(format!("expected an integer or nil, found {quoted}")),
        }
    }
}

fn out_of_range(digits: &str) -> String {
    format!("integer out of range (beyond 64 bits): {digits}")
}

/// One operation map, compact: what a lock or register history needs of it
/// (so that memory grows with the operations, not with the text).
#[derive(Debug)]
struct EdnOp {
    line: u64,
    process: Process,
    event_type: EventType,
    f: String,
    time: Option<u64>,
    key: Option<String>,
    error: Option<String>,
    value: Value,
}

fn keyword<'a>(op: &'a Edn, name: &str) -> Result<&'a str, String> {
    match op.get(name) {
        Some(Edn::Keyword(keyword)) => Ok(keyword),
        Some(other) => Err(format!(":{name} must be a keyword, found {}", quote::display(other))),
        None => Err(format!("missing keyword :{name} in {}", quote::display(op))),
    }
}

/// An element of the history as an operation, or why it is not one.
fn operation(line: u64, op: &Edn) -> Result<EdnOp, String> {
    if !matches!(op, Edn::Map(_)) {
        return Err(format!(
            "expected an operation map {{:process …, :type …, :f …}}, found {}",
            quote::display(op)
        ));
    }
    let process = match op.get("process") {
        Some(Edn::Integer(process)) => Process::Client(*process),
        Some(Edn::Keyword(name)) if name == "nemesis" => Process::Nemesis,
        Some(Edn::BigInteger(digits)) => {
            return Err(format!(":process: {}", out_of_range(&quote::display(digits))))
        }
        Some(other) => {
            return Err(format!(
                ":process must be an integer or :nemesis, found {}",
                quote::display(other)
            ))
        }
        None => return Err(format!("missing :process in {}", quote::display(op))),
    };
    let event_type = match keyword(op, "type")? {
        "invoke" => EventType::Invoke,
        "ok" => EventType::Ok,
        "fail" => EventType::Fail,
        "info" => EventType::Info,
        other => return Err(format!("unknown :type :{}", quote::display(&other))),
    };
    let f = keyword(op, "f")?.to_string();
    let time = match op.get("time") {
        Some(Edn::Integer(time)) if *time >= 0 => Some(*time as u64),
        _ => None,
    };
    let key = match op.get("key") {
        Some(Edn::String(key) | Edn::Keyword(key)) => Some(key.clone()),
        _ => None,
    };
    let error = match op.get("error") {
        None | Some(Edn::Nil) => None,
        Some(Edn::Keyword(name)) => Some(name.clone()),
        Some(Edn::Vector(items)) if matches!(items.first(), Some(Edn::Keyword(_))) => {
            items.first().and_then(Edn::as_keyword).map(str::to_string)
        }
        Some(other) => Some(quote::display(other)),
    };
    let value = Value::of(op.get("value"));
    Ok(EdnOp { line, process, event_type, f, time, key, error, value })
}

/// Reads every operation, streaming; a top-level vector or list of maps is
/// read element by element, each with the line it starts on. An element that
/// is not an operation is an error at its line, with the count of them all.
fn operations<R: BufRead>(input: R) -> Located<Vec<EdnOp>> {
    let mut reader = EdnReader::from_reader(input);
    let mut out = Vec::new();
    let mut bad = BadLines::default();
    while let Some(element) = reader.next_element() {
        let (line, element) = match element {
            Ok(element) => element,
            // Past unreadable EDN nothing more can be told apart.
            Err(error) => return Err(bad.error("elements").unwrap_or((error.line, error.message))),
        };
        match operation(line, &element) {
            Ok(op) if bad.is_empty() => out.push(op),
            Ok(_) => {}
            Err(message) => bad.add(line, message),
        }
        if bad.is_full() {
            break;
        }
    }
    match bad.error("elements") {
        Some(error) => Err(error),
        None => Ok(out),
    }
}

pub fn parse<R: BufRead>(input: R) -> Located<EdnHistory> {
    let ops = operations(input)?;
    let is_lock = ops.iter().any(|op| matches!(op.f.as_str(), "acquire" | "release"));
    if is_lock {
        locks(&ops).map(EdnHistory::Locks)
    } else {
        registers(&ops)
    }
}

fn locks(ops: &[EdnOp]) -> Located<History> {
    let mut builder = HistoryBuilder::new();
    let mut time_ns = 0u64;
    for (index, op) in ops.iter().enumerate() {
        // Jepsen's :time is nanoseconds since the test began; without it,
        // the position stands in (1 ms apart) so that order is kept.
        time_ns = match op.time {
            Some(time) => time_ns.max(time),
            None => time_ns.max(index as u64 * 1_000_000),
        };
        let key = match op.process {
            Process::Nemesis => None,
            _ => Some(op.key.clone().unwrap_or_else(|| "mutex".to_string())),
        };
        let event = Event {
            index: index as u64,
            time_ns,
            process: op.process,
            event_type: op.event_type,
            f: Function::parse(&op.f),
            key,
            value: None,
            error: op.error.clone(),
            extra: None,
        };
        builder.push(&event).map_err(|error| (op.line, error.to_string()))?;
    }
    Ok(builder.finish())
}

fn registers(ops: &[EdnOp]) -> Located<EdnHistory> {
    let mut pairer = Pairer::new();
    let mut operations = Vec::new();
    let mut has_cas = false;
    let mut events = 0u64;
    let mut nemesis = 0u64;
    for op in ops {
        let line = op.line;
        let Process::Client(process) = op.process else {
            nemesis += 1;
            continue;
        };
        let position = events;
        events += 1;
        let located = |message: String| (line, message);
        if op.event_type == EventType::Invoke {
            let input = match op.f.as_str() {
                "read" => RegisterInput::Read,
                "write" => RegisterInput::Write(
                    op.value
                        .integer()
                        .map_err(located)?
                        .ok_or_else(|| (line, "a write needs a value".to_string()))?,
                ),
                "cas" => match &op.value {
                    Value::Pair(old, new) => {
                        has_cas = true;
                        match (old, new) {
                            (Some(old), Some(new)) => RegisterInput::Cas(*old, *new),
                            _ => return Err((line, "cas needs [old new] integers".to_string())),
                        }
                    }
                    Value::OutOfRange(digits) => return Err((line, out_of_range(digits))),
                    _ => return Err((line, "cas needs [old new]".to_string())),
                },
                other => {
                    let other = quote::display(&other);
                    return Err((line, format!("unknown :f :{other} for a register")));
                }
            };
            pairer.invoke(process, input, position).map_err(located)?;
            continue;
        }
        let completion = match op.event_type {
            EventType::Ok => Completion::Ok,
            EventType::Fail => Completion::Fail,
            _ => Completion::Info,
        };
        let (input, call) = pairer.complete(process).map_err(located)?;
        let output = match (completion, input) {
            (Completion::Fail, _) => continue,
            (Completion::Info, _) => None,
            (Completion::Ok, RegisterInput::Read) => {
                Some(RegisterOutput::Read(op.value.integer().map_err(located)?))
            }
            (Completion::Ok, RegisterInput::Write(_)) => Some(RegisterOutput::Written),
            (Completion::Ok, RegisterInput::Cas(..)) => Some(RegisterOutput::Cas(true)),
        };
        let ret = (completion == Completion::Ok).then_some(position);
        operations.push(Operation { client: process, input, output, call, ret });
    }
    operations.extend(pairer.unfinished());
    Ok(EdnHistory::Register(operations, has_cas, events, nemesis))
}
