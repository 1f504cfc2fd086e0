//! Jepsen and Knossos `history.edn`: a vector (or a stream) of operation maps,
//! `{:process 0, :type :invoke, :f :acquire, :value nil}`.
//!
//! A mutex history (`:acquire`, `:release`) becomes a lock history, so every
//! lock checker applies; a register history (`:read`, `:write`, `:cas`)
//! becomes operations for the `register` or `cas-register` model. As in
//! Knossos, a `:fail` register operation did not happen and is dropped.

use super::edn::{Edn, EdnReader};
use super::jepsen_log::RegisterOperation;
use super::pairing::{Completion, Pairer};
use crate::event::{Event, EventType, Function, Process};
use crate::history::{History, HistoryBuilder};
use crate::linear::models::{RegisterInput, RegisterOutput};
use crate::linear::Operation;

/// What an EDN history turned out to be.
#[derive(Debug)]
pub enum EdnHistory {
    Locks(History),
    /// Register operations, whether any is a compare-and-set, and the event count.
    Register(Vec<RegisterOperation>, bool, u64),
}

type Located<T> = Result<T, (u64, String)>;

/// Reads every operation map, with the line it ended on; a top-level
/// vector or list of maps is read as its elements.
fn operations(text: &str) -> Located<Vec<(u64, Edn)>> {
    let mut reader = EdnReader::new(text);
    let mut out = Vec::new();
    while let Some(value) = reader.next_value() {
        let value = value.map_err(|error| (error.line, error.message))?;
        let line = reader.line();
        match value {
            Edn::Vector(items) | Edn::List(items) => {
                out.extend(items.into_iter().map(|item| (line, item)))
            }
            other => out.push((line, other)),
        }
    }
    Ok(out)
}

fn keyword<'a>(op: &'a Edn, name: &str, line: u64) -> Located<&'a str> {
    op.get(name)
        .and_then(Edn::as_keyword)
        .ok_or_else(|| (line, format!("missing keyword :{name} in {op}")))
}

pub fn parse(text: &str) -> Located<EdnHistory> {
    let ops = operations(text)?;
    let is_lock = ops.iter().any(|(_, op)| {
        matches!(op.get("f").and_then(Edn::as_keyword), Some("acquire" | "release"))
    });
    if is_lock {
        locks(&ops).map(EdnHistory::Locks)
    } else {
        registers(&ops)
    }
}

fn locks(ops: &[(u64, Edn)]) -> Located<History> {
    let mut builder = HistoryBuilder::new();
    let mut time_ns = 0u64;
    for (index, (line, op)) in ops.iter().enumerate() {
        let process = match op.get("process") {
            Some(Edn::Integer(process)) => Process::Client(*process),
            _ => Process::Nemesis,
        };
        let event_type = match keyword(op, "type", *line)? {
            "invoke" => EventType::Invoke,
            "ok" => EventType::Ok,
            "fail" => EventType::Fail,
            "info" => EventType::Info,
            other => return Err((*line, format!("unknown :type :{other}"))),
        };
        let f = Function::parse(keyword(op, "f", *line).unwrap_or("unknown"));
        // Jepsen's :time is nanoseconds since the test began; without it,
        // the position stands in (1 ms apart) so that order is kept.
        time_ns = match op.get("time") {
            Some(Edn::Integer(time)) if *time >= 0 => time_ns.max(*time as u64),
            _ => time_ns.max(index as u64 * 1_000_000),
        };
        let key = match (process, op.get("key")) {
            (Process::Nemesis, _) => None,
            (_, Some(Edn::String(key))) => Some(key.clone()),
            (_, Some(Edn::Keyword(key))) => Some(key.clone()),
            _ => Some("mutex".to_string()),
        };
        let error = match op.get("error") {
            None | Some(Edn::Nil) => None,
            Some(Edn::Keyword(name)) => Some(name.clone()),
            Some(Edn::Vector(items)) if matches!(items.first(), Some(Edn::Keyword(_))) => {
                items.first().and_then(Edn::as_keyword).map(str::to_string)
            }
            Some(other) => Some(other.to_string()),
        };
        let event = Event {
            index: index as u64,
            time_ns,
            process,
            event_type,
            f,
            key,
            value: None,
            error,
            extra: None,
        };
        builder.push(&event).map_err(|error| (*line, error.to_string()))?;
    }
    Ok(builder.finish())
}

fn integer(value: Option<&Edn>, line: u64) -> Located<Option<i64>> {
    match value {
        None | Some(Edn::Nil) => Ok(None),
        Some(Edn::Integer(value)) => Ok(Some(*value)),
        Some(other) => Err((line, format!("expected an integer or nil, found {other}"))),
    }
}

fn registers(ops: &[(u64, Edn)]) -> Located<EdnHistory> {
    let mut pairer = Pairer::new();
    let mut operations = Vec::new();
    let mut has_cas = false;
    let mut events = 0u64;
    for (line, op) in ops {
        let line = *line;
        let Some(Edn::Integer(process)) = op.get("process") else {
            continue; // the nemesis
        };
        let position = events;
        events += 1;
        let kind = keyword(op, "type", line)?;
        let value = op.get("value");
        if kind == "invoke" {
            let input = match keyword(op, "f", line)? {
                "read" => RegisterInput::Read,
                "write" => RegisterInput::Write(
                    integer(value, line)?
                        .ok_or_else(|| (line, "a write needs a value".to_string()))?,
                ),
                "cas" => match value {
                    Some(Edn::Vector(pair) | Edn::List(pair)) if pair.len() == 2 => {
                        has_cas = true;
                        match (integer(pair.first(), line)?, integer(pair.get(1), line)?) {
                            (Some(old), Some(new)) => RegisterInput::Cas(old, new),
                            _ => return Err((line, "cas needs [old new] integers".to_string())),
                        }
                    }
                    _ => return Err((line, "cas needs [old new]".to_string())),
                },
                other => return Err((line, format!("unknown :f :{other} for a register"))),
            };
            pairer.invoke(*process, input, position).map_err(|message| (line, message))?;
            continue;
        }
        let completion = match kind {
            "ok" => Completion::Ok,
            "fail" => Completion::Fail,
            "info" => Completion::Info,
            other => return Err((line, format!("unknown :type :{other}"))),
        };
        let (input, call) = pairer.complete(*process).map_err(|message| (line, message))?;
        let output = match (completion, input) {
            (Completion::Fail, _) => continue,
            (Completion::Info, _) => None,
            (Completion::Ok, RegisterInput::Read) => {
                Some(RegisterOutput::Read(integer(value, line)?))
            }
            (Completion::Ok, RegisterInput::Write(_)) => Some(RegisterOutput::Written),
            (Completion::Ok, RegisterInput::Cas(..)) => Some(RegisterOutput::Cas(true)),
        };
        let ret = (completion == Completion::Ok).then_some(position);
        operations.push(Operation { client: *process, input, output, call, ret });
    }
    operations.extend(pairer.unfinished());
    Ok(EdnHistory::Register(operations, has_cas, events))
}
