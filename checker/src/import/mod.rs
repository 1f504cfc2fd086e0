//! Histories in other tools' formats: Jepsen/Knossos EDN, Jepsen's log lines
//! (porcupine's etcd corpus) and porcupine's key-value files.

mod edn;
mod jepsen_edn;
mod jepsen_log;
mod pairing;
mod porcupine_kv;

use std::fmt;
use std::io::{BufRead, BufReader};

pub use edn::{Edn, EdnError, EdnReader};
pub use jepsen_log::RegisterOperation;
pub use porcupine_kv::KvOperation;

use crate::capped::{Capped, DEFAULT_MAX_LINE_BYTES};
use crate::history::History;
use crate::linear::models::{Kv, RegisterInput};
use crate::reader::{read_history_capped, ReadError};

/// The formats `analyze --input-format` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InputFormat {
    /// lockcheck's JSON Lines (`histories/README.md`).
    Jsonl,
    /// Jepsen/Knossos `history.edn`: mutex, register or cas-register.
    JepsenEdn,
    /// `INFO jepsen.util - …` log lines of a CAS register (porcupine's etcd corpus).
    JepsenLog,
    /// porcupine's kv files: get, put, append per key.
    PorcupineKv,
}

/// The models `analyze --model` selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ModelChoice {
    /// The format's usual model (per lock: fenced-lease with TTLs or tokens, else mutex).
    Auto,
    Mutex,
    FencedLease,
    Register,
    CasRegister,
    /// Key-value, checked per key.
    Kv,
    /// Key-value, checked whole (far harder).
    KvUnpartitioned,
}

impl ModelChoice {
    pub fn name(self) -> &'static str {
        match self {
            ModelChoice::Auto => "auto",
            ModelChoice::Mutex => "mutex",
            ModelChoice::FencedLease => "fenced-lease",
            ModelChoice::Register => "register",
            ModelChoice::CasRegister => "cas-register",
            ModelChoice::Kv => "kv",
            ModelChoice::KvUnpartitioned => "kv-unpartitioned",
        }
    }

    /// Whether the model can check a history of this format.
    pub fn fits(self, format: InputFormat) -> bool {
        use ModelChoice as M;
        match format {
            InputFormat::Jsonl => matches!(self, M::Auto | M::Mutex | M::FencedLease),
            InputFormat::JepsenEdn => {
                matches!(self, M::Auto | M::Mutex | M::FencedLease | M::Register | M::CasRegister)
            }
            InputFormat::JepsenLog => matches!(self, M::Auto | M::Register | M::CasRegister),
            InputFormat::PorcupineKv => matches!(self, M::Auto | M::Kv | M::KvUnpartitioned),
        }
    }
}

impl fmt::Display for ModelChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An imported history, ready for its checkers.
#[derive(Debug)]
pub enum Imported {
    /// A lock history: every lock checker applies.
    Locks(History),
    Register {
        cas: bool,
        operations: Vec<RegisterOperation>,
        events: u64,
    },
    Kv {
        model: Kv,
        operations: Vec<KvOperation>,
        events: u64,
    },
}

/// An imported history, and what was skipped or ignored on the way (for
/// the report: nemesis events a register history has no use for, a JSON
/// Lines history's truncated final line).
#[derive(Debug)]
pub struct Import {
    pub imported: Imported,
    pub notes: Vec<String>,
}

/// The note on the nemesis events a register or key-value history skipped.
fn skipped_nemesis(source_name: &str, count: u64) -> Vec<String> {
    match count {
        0 => Vec::new(),
        1 => vec![format!("{source_name}: skipped 1 nemesis event (not an operation to check)")],
        count => {
            vec![format!("{source_name}: skipped {count} nemesis events (not operations to check)")]
        }
    }
}

/// Reads a whole text in one of the formats (JSON Lines too): see [`import_from`].
pub fn import(
    format: InputFormat,
    text: &str,
    source_name: &str,
    model: ModelChoice,
) -> Result<Imported, ReadError> {
    import_from(format, text.as_bytes(), source_name, model, 0).map(|import| import.imported)
}

/// Reads a history in one of the formats, streaming (memory grows with the
/// operations, not with the text); `size_bytes`, when known, sizes the
/// tables of a JSON Lines history. A JSON Lines history whose final line is
/// cut short (a run killed mid-write) is read without it, and a note says so.
pub fn import_from<R: BufRead>(
    format: InputFormat,
    input: R,
    source_name: &str,
    model: ModelChoice,
    size_bytes: u64,
) -> Result<Import, ReadError> {
    import_capped(format, input, source_name, model, size_bytes, DEFAULT_MAX_LINE_BYTES)
}

/// As [`import_from`], with a line longer than `max_line_bytes` an error
/// in any format (found without holding the line), and a byte-order mark
/// at the start skipped.
pub fn import_capped<R: BufRead>(
    format: InputFormat,
    input: R,
    source_name: &str,
    model: ModelChoice,
    size_bytes: u64,
    max_line_bytes: u64,
) -> Result<Import, ReadError> {
    // JSON Lines reads through the cap itself, a chunk at a time; the other
    // formats read small pieces, which a buffer gathers from the cap.
    let malformed = |(line, message): (u64, String)| ReadError::Malformed {
        source_name: source_name.to_string(),
        line,
        message,
    };
    let (imported, notes) = match format {
        InputFormat::Jsonl => {
            let (history, notes) =
                read_history_capped(input, source_name, size_bytes, max_line_bytes)?;
            (Imported::Locks(history), notes)
        }
        InputFormat::JepsenLog => {
            let (operations, events, nemesis) =
                jepsen_log::parse(BufReader::new(Capped::new(input, max_line_bytes)))
                    .map_err(malformed)?;
            let cas = model != ModelChoice::Register;
            (Imported::Register { cas, operations, events }, skipped_nemesis(source_name, nemesis))
        }
        InputFormat::PorcupineKv => {
            let partitioned = model != ModelChoice::KvUnpartitioned;
            let (model, operations, events, nemesis) = porcupine_kv::parse(
                BufReader::new(Capped::new(input, max_line_bytes)),
                partitioned,
            )
            .map_err(malformed)?;
            (Imported::Kv { model, operations, events }, skipped_nemesis(source_name, nemesis))
        }
        InputFormat::JepsenEdn => {
            match jepsen_edn::parse(BufReader::new(Capped::new(input, max_line_bytes)))
                .map_err(malformed)?
            {
                jepsen_edn::EdnHistory::Locks(history) => (Imported::Locks(history), Vec::new()),
                jepsen_edn::EdnHistory::Register(operations, has_cas, events, nemesis) => {
                    let cas = match model {
                        ModelChoice::Register => false,
                        ModelChoice::CasRegister => true,
                        _ => has_cas,
                    };
                    (
                        Imported::Register { cas, operations, events },
                        skipped_nemesis(source_name, nemesis),
                    )
                }
            }
        }
    };
    let fits = match (&imported, model) {
        (_, ModelChoice::Auto) => true,
        (Imported::Locks(_), choice) => {
            matches!(choice, ModelChoice::Mutex | ModelChoice::FencedLease)
        }
        (Imported::Register { .. }, choice) => {
            matches!(choice, ModelChoice::Register | ModelChoice::CasRegister)
        }
        (Imported::Kv { .. }, choice) => {
            matches!(choice, ModelChoice::Kv | ModelChoice::KvUnpartitioned)
        }
    };
    let cas_without_cas = match &imported {
        Imported::Register { cas: false, operations, .. } => {
            operations.iter().any(|operation| matches!(operation.input, RegisterInput::Cas(..)))
        }
        _ => false,
    };
    if !fits || cas_without_cas {
        let message = format!("the {model} model does not fit this history's operations");
        return Err(ReadError::ModelMismatch { source_name: source_name.to_string(), message });
    }
    Ok(Import { imported, notes })
}
