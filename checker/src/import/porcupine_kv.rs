//! porcupine's key-value histories: one EDN map per line,
//! `{:process 0, :type :invoke, :f :append, :key "0", :value "x 0 0 y"}`.
//! The nemesis' lines (`:process :nemesis`) are skipped and counted; a form
//! that is not such a map is an error.

use std::io::BufRead;

use rustc_hash::FxHashMap;

use super::edn::{Edn, EdnReader};
use super::pairing::Pairer;
use crate::linear::models::{Kv, KvCall, KvInput, KvOutput, Text};
use crate::linear::Operation;
use crate::quote;
use crate::reader::BadLines;

pub type KvOperation = Operation<KvInput, KvOutput>;

fn text_of(value: Option<&Edn>) -> Result<Text, String> {
    match value {
        None | Some(Edn::Nil) => Ok(Text::new("")),
        Some(Edn::String(text)) => Ok(Text::new(text)),
        Some(other) => Err(format!("expected a string value, found {}", quote::display(other))),
    }
}

/// A line's operation: the process (`None` for the nemesis) and its type.
fn process_and_type(op: &Edn) -> Result<(Option<i64>, &str), String> {
    if !matches!(op, Edn::Map(_)) {
        return Err(format!(
            "expected an operation map {{:process …, :type …, :f …, :key …}}, found {}",
            quote::display(op)
        ));
    }
    let process = match op.get("process") {
        Some(Edn::Integer(process)) => Some(*process),
        Some(Edn::Keyword(name)) if name == "nemesis" => None,
        Some(Edn::BigInteger(digits)) => {
            return Err(format!(
                ":process: integer out of range (beyond 64 bits): {}",
                quote::display(digits)
            ))
        }
        Some(other) => {
            return Err(format!(
                ":process must be an integer or :nemesis, found {}",
                quote::display(other)
            ))
        }
        None => return Err("missing :process".to_string()),
    };
    let kind = match op.get("type") {
        Some(Edn::Keyword(kind)) if matches!(kind.as_str(), "invoke" | "ok" | "fail" | "info") => {
            kind.as_str()
        }
        Some(Edn::Keyword(kind)) => return Err(format!("unknown :type :{}", quote::display(kind))),
        Some(_) => return Err(":type must be a keyword".to_string()),
        None => return Err("missing :type".to_string()),
    };
    Ok((process, kind))
}

/// What a history holds: the model (its key names), the operations, the
/// client event count and how many nemesis events were skipped.
pub type Parsed = (Kv, Vec<KvOperation>, u64, u64);

/// Parses a history, streaming: one operation map per line. A form that is
/// not an operation is an error at the first, with the count of them all.
pub fn parse<R: BufRead>(input: R, partitioned: bool) -> Result<Parsed, (u64, String)> {
    let mut reader = EdnReader::from_reader(input);
    let mut key_ids: FxHashMap<String, u32> = FxHashMap::default();
    let mut keys: Vec<String> = Vec::new();
    let mut pairer = Pairer::new();
    let mut operations = Vec::new();
    let mut events = 0;
    let mut nemesis = 0;
    let mut bad = BadLines::default();
    while let Some(value) = reader.next_value_at().filter(|_| !bad.is_full()) {
        let (line, op) = match value {
            Ok(value) => value,
            // Past unreadable EDN nothing more can be told apart.
            Err(error) => return Err(bad.error("forms").unwrap_or((error.line, error.message))),
        };
        let (process, kind) = match process_and_type(&op) {
            Ok(found) => found,
            Err(message) => {
                bad.add(line, message);
                continue;
            }
        };
        if !bad.is_empty() {
            continue; // only counting forms that are not operations
        }
        let error = |message: String| (line, message);
        let field = |name: &str| op.get(name).ok_or_else(|| (line, format!("missing :{name}")));
        let Some(process) = process else {
            nemesis += 1;
            continue;
        };
        let position = events;
        events += 1;
        if kind == "invoke" {
            let call = match field("f")?.as_keyword() {
                Some("get") => KvCall::Get,
                Some("put") => KvCall::Put,
                Some("append") => KvCall::Append,
                _ => return Err((line, format!("unknown :f {}", quote::display(field("f")?)))),
            };
            let Edn::String(key) = field("key")? else {
                return Err((line, ":key must be a string".to_string()));
            };
            let next_id = keys.len() as u32;
            let key = *key_ids.entry(key.clone()).or_insert_with(|| {
                keys.push(key.clone());
                next_id
            });
            let value = if call == KvCall::Get {
                Text::new("")
            } else {
                text_of(op.get("value")).map_err(error)?
            };
            pairer.invoke(process, KvInput { call, key, value }, position).map_err(error)?;
            continue;
        }
        let (input, call) = pairer.complete(process).map_err(error)?;
        let (output, ret) = match kind {
            "ok" => {
                (Some(KvOutput { value: text_of(op.get("value")).map_err(error)? }), Some(position))
            }
            "fail" => continue,
            _ => (None, None),
        };
        operations.push(Operation { client: process, input, output, call, ret });
    }
    if let Some(error) = bad.error("forms") {
        return Err(error);
    }
    operations.extend(pairer.unfinished());
    Ok((Kv { keys, partitioned }, operations, events, nemesis))
}
