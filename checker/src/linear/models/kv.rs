//! A key-value store with get, put and append, as porcupine's kv model; it
//! can be checked split per key (the usual way) or whole.
//!
//! Values carry a hash kept up to date as they grow, so comparing and hashing
//! states (what the search does at every step) does not read whole strings.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use crate::linear::model::{Model, Operation};

/// A string with its polynomial hash.
#[derive(Debug, Clone)]
pub struct Text {
    hash: u64,
    text: Arc<str>,
}

const BASE: u64 = 0x100_0000_01b3;

impl Text {
    pub fn new(text: &str) -> Text {
        Text { hash: extend(0, text), text: text.into() }
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    fn append(&self, suffix: &Text) -> Text {
        let mut text = String::with_capacity(self.text.len() + suffix.text.len());
        text.push_str(&self.text);
        text.push_str(&suffix.text);
        Text { hash: extend(self.hash, &suffix.text), text: text.into() }
    }
}

fn extend(mut hash: u64, text: &str) -> u64 {
    for byte in text.bytes() {
        hash = hash.wrapping_mul(BASE).wrapping_add(u64::from(byte) + 1);
    }
    hash
}

impl PartialEq for Text {
    fn eq(&self, other: &Text) -> bool {
        self.hash == other.hash && (Arc::ptr_eq(&self.text, &other.text) || self.text == other.text)
    }
}

impl Eq for Text {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvCall {
    Get,
    Put,
    Append,
}

#[derive(Debug, Clone)]
pub struct KvInput {
    pub call: KvCall,
    /// An index into [`Kv::keys`].
    pub key: u32,
    /// What put writes or append adds; empty for get.
    pub value: Text,
}

/// What a get returned (empty for a missing key); put and append return
/// nothing worth checking.
#[derive(Debug, Clone)]
pub struct KvOutput {
    pub value: Text,
}

/// The values of the keys touched so far, sorted by key, with a hash of the
/// whole kept up to date. Shared: the search clones a state at every step,
/// and most steps (gets) do not change it.
#[derive(Debug, Clone)]
pub struct KvState(Arc<KvValues>);

#[derive(Debug, PartialEq, Eq)]
struct KvValues {
    hash: u64,
    values: Vec<(u32, Text)>,
}

impl PartialEq for KvState {
    fn eq(&self, other: &KvState) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || *self.0 == *other.0
    }
}

impl Eq for KvState {}

impl Hash for KvState {
    fn hash<H: Hasher>(&self, hasher: &mut H) {
        hasher.write_u64(self.0.hash);
    }
}

fn entry_hash(key: u32, value: &Text) -> u64 {
    (u64::from(key) + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ value.hash.rotate_left(29)
}

impl KvState {
    fn get(&self, key: u32) -> Option<&Text> {
        let values = &self.0.values;
        values.binary_search_by_key(&key, |(k, _)| *k).ok().map(|at| &values[at].1)
    }

    fn set(&self, key: u32, value: Text) -> KvState {
        let mut hash = self.0.hash;
        let mut values = self.0.values.clone();
        match values.binary_search_by_key(&key, |(k, _)| *k) {
            Ok(at) => {
                hash ^= entry_hash(key, &values[at].1) ^ entry_hash(key, &value);
                values[at].1 = value;
            }
            Err(at) => {
                hash ^= entry_hash(key, &value);
                values.insert(at, (key, value));
            }
        }
        KvState(Arc::new(KvValues { hash, values }))
    }
}

/// The kv model. `partitioned` checks each key on its own (porcupine's
/// `kvModel`); otherwise the whole store is one state (`kvNoPartitionModel`),
/// which is far harder.
#[derive(Debug, Clone)]
pub struct Kv {
    pub keys: Vec<String>,
    pub partitioned: bool,
}

impl Model for Kv {
    type State = KvState;
    type Input = KvInput;
    type Output = KvOutput;

    fn name(&self) -> &'static str {
        if self.partitioned {
            "kv"
        } else {
            "kv-unpartitioned"
        }
    }

    fn init(&self) -> KvState {
        KvState(Arc::new(KvValues { hash: 0, values: Vec::new() }))
    }

    fn step(&self, state: &KvState, input: &KvInput, output: Option<&KvOutput>) -> Option<KvState> {
        match input.call {
            KvCall::Get => match output {
                None => Some(state.clone()),
                Some(output) => {
                    let matches = match state.get(input.key) {
                        Some(value) => *value == output.value,
                        None => output.value.text.is_empty(),
                    };
                    matches.then(|| state.clone())
                }
            },
            KvCall::Put => Some(state.set(input.key, input.value.clone())),
            KvCall::Append => {
                let value = match state.get(input.key) {
                    Some(value) => value.append(&input.value),
                    None => input.value.clone(),
                };
                Some(state.set(input.key, value))
            }
        }
    }

    fn read_only(&self, input: &KvInput, _output: Option<&KvOutput>) -> bool {
        input.call == KvCall::Get
    }

    fn state_heap_bytes(&self, state: &KvState) -> usize {
        // The texts are shared between states, but an appended one is new.
        state.0.values.capacity() * std::mem::size_of::<(u32, Text)>()
            + state.0.values.iter().map(|(_, value)| value.text.len() + 16).sum::<usize>()
    }

    fn partition(&self, operations: &[Operation<KvInput, KvOutput>]) -> Vec<Vec<usize>> {
        if !self.partitioned {
            return vec![(0..operations.len()).collect()];
        }
        let mut parts: Vec<Vec<usize>> = vec![Vec::new(); self.keys.len()];
        for (at, operation) in operations.iter().enumerate() {
            parts[operation.input.key as usize].push(at);
        }
        parts.retain(|part| !part.is_empty());
        parts
    }

    fn partition_name(
        &self,
        operations: &[Operation<KvInput, KvOutput>],
        part: &[usize],
    ) -> String {
        match (self.partitioned, part.first()) {
            (true, Some(&first)) => self.keys[operations[first].input.key as usize].clone(),
            _ => String::new(),
        }
    }

    fn describe_operation(&self, input: &KvInput, output: Option<&KvOutput>) -> String {
        let key = &self.keys[input.key as usize];
        match (input.call, output) {
            (KvCall::Get, Some(output)) => format!("get {key:?} -> {:?}", output.value.as_str()),
            (KvCall::Get, None) => format!("get {key:?} -> ?"),
            (KvCall::Put, _) => format!("put {key:?} {:?}", input.value.as_str()),
            (KvCall::Append, _) => format!("append {key:?} {:?}", input.value.as_str()),
        }
    }

    fn describe_state(&self, state: &KvState) -> String {
        let values: Vec<String> = state
            .0
            .values
            .iter()
            .map(|(key, value)| format!("{:?}: {:?}", self.keys[*key as usize], value.as_str()))
            .collect();
        format!("{{{}}}", values.join(", "))
    }
}
