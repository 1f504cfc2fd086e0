//! porcupine's key-value histories: one EDN map per line,
//! `{:process 0, :type :invoke, :f :append, :key "0", :value "x 0 0 y"}`.

use rustc_hash::FxHashMap;

use super::edn::{Edn, EdnReader};
use super::pairing::Pairer;
use crate::linear::models::{Kv, KvCall, KvInput, KvOutput, Text};
use crate::linear::Operation;

pub type KvOperation = Operation<KvInput, KvOutput>;

fn text_of(value: Option<&Edn>) -> Result<Text, String> {
    match value {
        None | Some(Edn::Nil) => Ok(Text::new("")),
        Some(Edn::String(text)) => Ok(Text::new(text)),
        Some(other) => Err(format!("expected a string value, found {other}")),
    }
}

/// Parses a whole history: the model (its key names) and the operations.
pub fn parse(text: &str, partitioned: bool) -> Result<(Kv, Vec<KvOperation>, u64), (u64, String)> {
    let mut reader = EdnReader::new(text);
    let mut key_ids: FxHashMap<String, u32> = FxHashMap::default();
    let mut keys: Vec<String> = Vec::new();
    let mut pairer = Pairer::new();
    let mut operations = Vec::new();
    let mut events = 0;
    while let Some(value) = reader.next_value() {
        let line = reader.line();
        let op = value.map_err(|error| (error.line, error.message))?;
        let error = |message: String| (line, message);
        let field = |name: &str| op.get(name).ok_or_else(|| (line, format!("missing :{name}")));
        let Edn::Integer(process) = field("process")? else {
            continue; // the nemesis
        };
        let position = events;
        events += 1;
        let kind = field("type")?
            .as_keyword()
            .ok_or_else(|| (line, ":type must be a keyword".to_string()))?;
        if kind == "invoke" {
            let call = match field("f")?.as_keyword() {
                Some("get") => KvCall::Get,
                Some("put") => KvCall::Put,
                Some("append") => KvCall::Append,
                _ => return Err((line, format!("unknown :f {}", field("f")?))),
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
            pairer.invoke(*process, KvInput { call, key, value }, position).map_err(error)?;
            continue;
        }
        let (input, call) = pairer.complete(*process).map_err(error)?;
        let (output, ret) = match kind {
            "ok" => {
                (Some(KvOutput { value: text_of(op.get("value")).map_err(error)? }), Some(position))
            }
            "info" => (None, None),
            "fail" => continue,
            other => return Err((line, format!("unknown :type :{other}"))),
        };
        operations.push(Operation { client: *process, input, output, call, ret });
    }
    operations.extend(pairer.unfinished());
    Ok((Kv { keys, partitioned }, operations, events))
}
