//! The paired, compact form of a history that every checker reads.
//!
//! Each client operation is one [`Op`]: its invoke and its completion joined,
//! with only the fields the checkers use (token, TTL, data). The order in which
//! the events happened is kept as one `u32` per event, so checkers can sweep the
//! history in real-time order without holding the events themselves.

use std::collections::BTreeSet;

use rustc_hash::FxHashMap as HashMap;
use std::fmt;

use thiserror::Error;

use crate::event::{
    Event, EventType, Function, NemesisDetails, PaymentFields, Process, ValueFields,
};

/// Index of a key (lock name or resource name) in [`History::keys`].
pub type KeyId = u32;
/// Index of an operation in [`History::ops`].
pub type OpId = u32;

/// How an operation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// It took effect.
    Ok,
    /// It definitely did not take effect.
    Fail,
    /// Unknown: it completed as `info`, or never completed.
    Info,
}

/// A point of the history: an event's `index` and `time`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Moment {
    pub index: u64,
    pub time_ns: u64,
}

/// One client operation: an invoke joined with its completion.
#[derive(Debug, Clone, PartialEq)]
pub struct Op {
    pub process: i64,
    pub f: Function,
    pub key: KeyId,
    pub invoke: Moment,
    /// `None` when the invoke never completed (it counts as `info`).
    pub completion: Option<Moment>,
    pub outcome: Outcome,
    /// acquire: the token granted (from `ok`); release, write, charge: the
    /// token sent (from `invoke`); read: the token read (from `ok`).
    pub fence: Option<u64>,
    /// acquire, renew: the TTL asked for (from `invoke`).
    pub ttl_ms: Option<u64>,
    /// acquire of a semaphore: how many may hold it at once (from `invoke`).
    pub permits: Option<u32>,
    /// write: the data sent; read: the data read; run, enqueue, charge: the
    /// unit (from `invoke`); deliver: the unit delivered (from `ok`).
    pub data: Option<Box<str>>,
    /// write: the version of the resource it made (from `ok`), when the
    /// storage counts them; they count from 1, and a 0 is left out.
    pub version: Option<std::num::NonZeroU64>,
    pub error: Option<Box<str>>,
}

impl Op {
    pub fn is_ok(&self) -> bool {
        self.outcome == Outcome::Ok
    }
}

/// A payments operation (enqueue, deliver, charge, ack) with the rest of
/// what its invoke and its completion said (the completion's fields over
/// the invoke's). It reads as the operation.
#[derive(Debug, Clone, Copy)]
pub struct PaymentOp<'h> {
    pub op: &'h Op,
    pub fields: &'h PaymentFields,
}

impl std::ops::Deref for PaymentOp<'_> {
    type Target = Op;

    fn deref(&self) -> &Op {
        self.op
    }
}

/// A nemesis event: a fault starting or stopping. Kept for reports.
#[derive(Debug, Clone, PartialEq)]
pub struct NemesisEvent {
    pub at: Moment,
    pub event_type: EventType,
    pub f: Function,
    pub fault: Option<String>,
    pub targets: Vec<String>,
    /// The rest of what its value says about the fault (coverage reads it).
    pub details: NemesisDetails,
}

/// One step of the history in real-time order: an operation's invoke or its
/// completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    pub op: OpId,
    pub is_completion: bool,
}

const COMPLETION_BIT: u32 = 1 << 31;

/// Indices stay below this, so that one past the last event is still an index.
const MAX_INDEX: u64 = i64::MAX as u64;

/// A whole history, paired and validated.
#[derive(Debug, Clone, Default)]
pub struct History {
    keys: Vec<Box<str>>,
    ops: Vec<Op>,
    /// Every client event in the order it happened: an op id, with the high bit
    /// set for a completion.
    order: Vec<u32>,
    nemesis: Vec<NemesisEvent>,
    first: Option<Moment>,
    last: Option<Moment>,
    event_count: u64,
    warnings: Vec<String>,
    /// The longest lock-delay an acquire asked for (0: none).
    lock_delay_ms: u64,
    /// The largest bound on a leader election an acquire stated (none: no
    /// acquire is a candidate's).
    elect_within_ms: Option<u64>,
    /// The payments operations' fields, by op id, ascending: kept beside
    /// the operations, so that the other workloads' stay small.
    payments: Vec<(OpId, PaymentFields)>,
}

impl History {
    pub fn ops(&self) -> &[Op] {
        &self.ops
    }

    pub fn op(&self, id: OpId) -> &Op {
        &self.ops[id as usize]
    }

    /// What a payments operation's events said beyond its unit and token;
    /// `None` for any other operation.
    pub fn payment(&self, id: OpId) -> Option<&PaymentFields> {
        let at = self.payments.binary_search_by_key(&id, |&(op, _)| op).ok()?;
        Some(&self.payments[at].1)
    }

    /// The payments operations, in history order.
    pub fn payment_ops(&self) -> impl ExactSizeIterator<Item = PaymentOp<'_>> + '_ {
        self.payments.iter().map(|(id, fields)| PaymentOp { op: &self.ops[*id as usize], fields })
    }

    pub fn key_name(&self, key: KeyId) -> &str {
        &self.keys[key as usize]
    }

    pub fn key_count(&self) -> usize {
        self.keys.len()
    }

    /// The longest lock-delay an acquire asked for: how long the service
    /// keeps a lock whose holder's session ended from being taken (0: none).
    pub fn lock_delay_ms(&self) -> u64 {
        self.lock_delay_ms
    }

    /// The largest bound within which an election's acquires said a new
    /// leader must be elected after the leader's end (`elect_within_ms`);
    /// none when no acquire said one.
    pub fn elect_within_ms(&self) -> Option<u64> {
        self.elect_within_ms
    }

    pub fn nemesis_events(&self) -> &[NemesisEvent] {
        &self.nemesis
    }

    /// Events read, client and nemesis.
    pub fn event_count(&self) -> u64 {
        self.event_count
    }

    /// Problems in the history that did not stop it from being checked.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The first event of the history, if any.
    pub fn start(&self) -> Option<Moment> {
        self.first
    }

    /// The moment just after the last event: where beliefs that were never
    /// given up end. Its index is one past the last event's.
    pub fn end(&self) -> Moment {
        self.last
            .map(|last| Moment { index: last.index + 1, time_ns: last.time_ns })
            .unwrap_or(Moment { index: 0, time_ns: 0 })
    }

    /// Client events in the order they happened.
    pub fn steps(&self) -> impl ExactSizeIterator<Item = Step> + '_ {
        self.order.iter().map(|&raw| Step {
            op: raw & !COMPLETION_BIT,
            is_completion: raw & COMPLETION_BIT != 0,
        })
    }

    /// Distinct client processes, ascending.
    pub fn clients(&self) -> BTreeSet<i64> {
        self.ops.iter().map(|op| op.process).collect()
    }

    /// Where an operation's effect is certainly over: its completion, or the
    /// end of the history for one that never completed.
    pub fn completion_or_end(&self, op: &Op) -> Moment {
        op.completion.unwrap_or_else(|| self.end())
    }
}

/// An event that cannot be paired or breaks the format's rules.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum HistoryError {
    #[error(
        "index {index} does not follow index {previous}: indices must be unique and ascending"
    )]
    IndexNotAscending { index: u64, previous: u64 },
    #[error("time {time_ns} ns at index {index} is earlier than the previous event's {previous_ns} ns: events must be in the order they happened")]
    TimeBackwards { index: u64, time_ns: u64, previous_ns: u64 },
    #[error("{event_type} of {f} by process {process} at index {index}, but the process has no open invoke")]
    NoOpenInvoke { index: u64, process: i64, event_type: &'static str, f: String },
    #[error("process {process} invokes {f} at index {index} while its {open_f} invoked at index {open_index} is still open")]
    AlreadyOpen { index: u64, process: i64, f: String, open_f: String, open_index: u64 },
    #[error("completion at index {index} is {f} {key}, but process {process} invoked {open_f} {open_key} at index {open_index}")]
    Mismatch {
        index: u64,
        process: i64,
        f: String,
        /// The completion's key, quoted, or "with no key".
        key: String,
        open_f: String,
        open_key: String,
        open_index: u64,
    },
    #[error("field `key`: {f} needs a key (the lock or resource name) at index {index}")]
    MissingKey { index: u64, f: String },
    #[error("{message} at index {index}")]
    BadValue { index: u64, message: String },
    #[error("index {index} is too large: indices count events from 0 (at most 2^63 - 1)")]
    IndexTooLarge { index: u64 },
    #[error("more than {max} operations: this build keeps operation ids in 31 bits")]
    TooManyOps { max: u32 },
}

/// What the builder reads of one event, however it was parsed.
pub(crate) struct EventParts<'e> {
    pub(crate) at: Moment,
    pub(crate) process: Process,
    pub(crate) event_type: EventType,
    pub(crate) f: &'e Function,
    /// The key's text: UTF-8, as it was read from a string.
    pub(crate) key: Option<&'e [u8]>,
    pub(crate) error: Option<&'e str>,
}

impl<'e> EventParts<'e> {
    fn of(event: &'e Event) -> Self {
        EventParts {
            at: Moment { index: event.index, time_ns: event.time_ns },
            process: event.process,
            event_type: event.event_type,
            f: &event.f,
            key: event.key.as_deref().map(str::as_bytes),
            error: event.error.as_deref(),
        }
    }
}

/// Builds a [`History`] from events pushed in file order.
#[derive(Debug, Default)]
pub struct HistoryBuilder {
    history: History,
    key_ids: HashMap<Box<[u8]>, KeyId>,
    open: HashMap<i64, OpId>,
    crashed: HashMap<i64, u64>,
    last_key: Option<KeyId>,
}

impl HistoryBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// A builder with room for about this many events.
    pub fn with_capacity(events: usize) -> Self {
        let mut builder = Self::default();
        builder.history.ops.reserve(events / 2);
        builder.history.order.reserve(events);
        builder
    }

    pub fn push(&mut self, event: &Event) -> Result<(), HistoryError> {
        self.push_parts(EventParts::of(event), event.value_fields().as_mut().map_err(|e| &**e))
    }

    /// The reader's path: an event's parts, borrowed from its line, and its
    /// value's fields already parsed (in parallel).
    pub(crate) fn push_parts(
        &mut self,
        event: EventParts<'_>,
        fields: Result<&mut ValueFields, &str>,
    ) -> Result<(), HistoryError> {
        let at = event.at;
        if at.index > MAX_INDEX {
            return Err(HistoryError::IndexTooLarge { index: at.index });
        }
        if let Some(previous) = self.history.last {
            if at.index <= previous.index {
                return Err(HistoryError::IndexNotAscending {
                    index: at.index,
                    previous: previous.index,
                });
            }
            if at.time_ns < previous.time_ns {
                return Err(HistoryError::TimeBackwards {
                    index: at.index,
                    time_ns: at.time_ns,
                    previous_ns: previous.time_ns,
                });
            }
        }
        let fields = fields.map_err(|message| HistoryError::BadValue {
            index: at.index,
            message: message.to_string(),
        })?;
        match event.process {
            Process::Nemesis => self.history.nemesis.push(NemesisEvent {
                at,
                event_type: event.event_type,
                f: event.f.clone(),
                fault: fields.fault.take(),
                targets: fields.targets.take().unwrap_or_default(),
                details: fields.nemesis.take().map(|details| *details).unwrap_or_default(),
            }),
            Process::Client(process) => match event.event_type {
                EventType::Invoke => self.invoke(process, &event, fields)?,
                completion => self.complete(process, completion, &event, fields)?,
            },
        }
        self.history.first.get_or_insert(at);
        self.history.last = Some(at);
        self.history.event_count += 1;
        Ok(())
    }

    fn key_id(&mut self, key: &[u8]) -> KeyId {
        // Runs of events on one key are common: compare before hashing.
        if let Some(last) = self.last_key {
            if *self.history.keys[last as usize].as_bytes() == *key {
                return last;
            }
        }
        let id = match self.key_ids.get(key) {
            Some(&id) => id,
            None => {
                let id = self.history.keys.len() as KeyId;
                self.history.keys.push(String::from_utf8_lossy(key).into());
                self.key_ids.insert(key.into(), id);
                id
            }
        };
        self.last_key = Some(id);
        id
    }

    fn invoke(
        &mut self,
        process: i64,
        event: &EventParts<'_>,
        fields: &mut ValueFields,
    ) -> Result<(), HistoryError> {
        let at = event.at;
        if let Some(&open) = self.open.get(&process) {
            let open = &self.history.ops[open as usize];
            return Err(HistoryError::AlreadyOpen {
                index: at.index,
                process,
                f: event.f.to_string(),
                open_f: open.f.to_string(),
                open_index: open.invoke.index,
            });
        }
        let key = match (event.key, event.f) {
            (Some(key), _) => self.key_id(key),
            (None, Function::Other(_)) => self.key_id(b""),
            (None, f) => {
                return Err(HistoryError::MissingKey { index: at.index, f: f.to_string() })
            }
        };
        let crashed = if self.crashed.is_empty() { None } else { self.crashed.remove(&process) };
        if let Some(crashed_at) = crashed {
            self.history.warnings.push(format!(
                "process {process} invokes again at index {} after its operation ended in info at index {crashed_at}; \
                 it is treated as a new client that holds nothing",
                at.index
            ));
        }
        let id = self.history.ops.len();
        if id >= COMPLETION_BIT as usize {
            return Err(HistoryError::TooManyOps { max: COMPLETION_BIT - 1 });
        }
        let id = id as OpId;
        if let Some(lock_delay_ms) = fields.lock_delay_ms {
            self.history.lock_delay_ms = self.history.lock_delay_ms.max(lock_delay_ms);
        }
        if let (Function::Acquire, Some(bound)) = (&event.f, fields.elect_within_ms) {
            self.history.elect_within_ms =
                Some(self.history.elect_within_ms.map_or(bound, |seen| seen.max(bound)));
        }
        let (fence, data) = match event.f {
            Function::Release | Function::Write | Function::Run | Function::Charge => {
                (fields.fence, fields.data.take())
            }
            Function::Enqueue => (None, fields.data.take()),
            _ => (None, None),
        };
        if matches!(
            event.f,
            Function::Enqueue | Function::Deliver | Function::Charge | Function::Ack
        ) {
            let payment = fields.payment.take().map(|payment| *payment).unwrap_or_default();
            self.history.payments.push((id, payment));
        }
        self.history.ops.push(Op {
            process,
            f: event.f.clone(),
            key,
            invoke: at,
            completion: None,
            outcome: Outcome::Info,
            fence,
            ttl_ms: fields.ttl_ms,
            permits: fields.permits,
            data: data.map(String::into_boxed_str),
            version: None,
            error: None,
        });
        self.open.insert(process, id);
        self.history.order.push(id);
        Ok(())
    }

    fn complete(
        &mut self,
        process: i64,
        event_type: EventType,
        event: &EventParts<'_>,
        fields: &mut ValueFields,
    ) -> Result<(), HistoryError> {
        let at = event.at;
        let Some(id) = self.open.remove(&process) else {
            return Err(HistoryError::NoOpenInvoke {
                index: at.index,
                process,
                event_type: event_type.as_str(),
                f: event.f.to_string(),
            });
        };
        let open_key = self.history.ops[id as usize].key;
        let key_matches = match event.key {
            Some(key) => *self.history.keys[open_key as usize].as_bytes() == *key,
            None => true,
        };
        let op = &mut self.history.ops[id as usize];
        if op.f != *event.f || !key_matches {
            return Err(HistoryError::Mismatch {
                index: at.index,
                process,
                f: event.f.to_string(),
                key: event.key.map_or_else(
                    || "with no key".to_string(),
                    |key| crate::quote::text(&String::from_utf8_lossy(key)),
                ),
                open_f: op.f.to_string(),
                open_key: crate::quote::text(self.history.keys[open_key as usize].as_ref()),
                open_index: op.invoke.index,
            });
        }
        op.completion = Some(at);
        op.outcome = match event_type {
            EventType::Ok => Outcome::Ok,
            EventType::Fail => Outcome::Fail,
            EventType::Info | EventType::Invoke => Outcome::Info,
        };
        op.error = event.error.map(Into::into);
        if event_type == EventType::Ok {
            match op.f {
                Function::Acquire => op.fence = fields.fence,
                Function::Write => op.version = fields.version.and_then(std::num::NonZeroU64::new),
                Function::Read => {
                    op.fence = fields.fence;
                    op.data = fields.data.take().map(String::into_boxed_str);
                }
                Function::Deliver => op.data = fields.data.take().map(String::into_boxed_str),
                _ => {}
            }
        }
        // A payments operation's completion may say more: the message an
        // enqueue made, a delivery's message, a charge's response (a failed
        // charge's value may hold its status).
        if let Some(completion) = fields.payment.take() {
            let payments = &mut self.history.payments;
            if let Ok(at) = payments.binary_search_by_key(&id, |&(op, _)| op) {
                payments[at].1.merge(*completion);
            }
        }
        if op.outcome == Outcome::Info {
            self.crashed.insert(process, at.index);
        }
        self.history.order.push(id | COMPLETION_BIT);
        Ok(())
    }

    pub fn finish(self) -> History {
        self.history
    }
}

impl fmt::Display for Moment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "index {} (t={})", self.index, crate::format_time(self.time_ns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(line: &str) -> Event {
        serde_json::from_str(line).unwrap()
    }

    fn build(lines: &[&str]) -> Result<History, HistoryError> {
        let mut builder = HistoryBuilder::new();
        for line in lines {
            builder.push(&event(line))?;
        }
        Ok(builder.finish())
    }

    #[test]
    fn pairs_invokes_with_completions_and_unfinished_ones_are_info() {
        let history = build(&[
            r#"{"index":0,"time":10,"process":1,"type":"invoke","f":"acquire","key":"l","value":{"ttl_ms":500}}"#,
            r#"{"index":1,"time":11,"process":2,"type":"invoke","f":"acquire","key":"l","value":null}"#,
            r#"{"index":2,"time":12,"process":1,"type":"ok","f":"acquire","key":"l","value":{"fence":7}}"#,
            r#"{"index":3,"time":13,"process":1,"type":"invoke","f":"write","key":"doc","value":{"fence":7,"data":"x"}}"#,
            r#"{"index":4,"time":14,"process":1,"type":"fail","f":"write","key":"doc","value":null,"error":"stale-fence"}"#,
        ])
        .unwrap();
        let ops = history.ops();
        assert_eq!(ops.len(), 3);
        assert_eq!(
            (ops[0].outcome, ops[0].fence, ops[0].ttl_ms),
            (Outcome::Ok, Some(7), Some(500))
        );
        assert_eq!((ops[1].outcome, ops[1].completion), (Outcome::Info, None));
        assert_eq!((ops[2].outcome, ops[2].error.as_deref()), (Outcome::Fail, Some("stale-fence")));
        assert_eq!(ops[2].data.as_deref(), Some("x"));
        let steps: Vec<_> = history.steps().map(|s| (s.op, s.is_completion)).collect();
        assert_eq!(steps, [(0, false), (1, false), (0, true), (2, false), (2, true)]);
        assert_eq!(history.end(), Moment { index: 5, time_ns: 14 });
    }

    #[test]
    fn rejects_histories_that_break_the_format() {
        let invoke = r#"{"index":0,"time":10,"process":1,"type":"invoke","f":"acquire","key":"l","value":null}"#;
        let cases: [(&[&str], &str); 5] = [
            (&[invoke, invoke], "does not follow"),
            (
                &[
                    invoke,
                    r#"{"index":1,"time":11,"process":1,"type":"invoke","f":"read","key":"l","value":null}"#,
                ],
                "still open",
            ),
            (
                &[
                    invoke,
                    r#"{"index":1,"time":11,"process":1,"type":"ok","f":"release","key":"l","value":null}"#,
                ],
                "invoked acquire",
            ),
            (
                &[
                    invoke,
                    r#"{"index":1,"time":9,"process":1,"type":"ok","f":"acquire","key":"l","value":null}"#,
                ],
                "earlier",
            ),
            (
                &[
                    r#"{"index":0,"time":10,"process":1,"type":"invoke","f":"acquire","key":null,"value":null}"#,
                ],
                "needs a key",
            ),
        ];
        for (lines, expected) in cases {
            let error = build(lines).unwrap_err().to_string();
            assert!(error.contains(expected), "{error} should contain {expected}");
        }
    }

    #[test]
    fn an_op_stays_small() {
        // Memory per operation is what bounds the history size we can check.
        assert!(std::mem::size_of::<Op>() <= 160, "{}", std::mem::size_of::<Op>());
    }

    #[test]
    fn payments_ops_keep_the_unit_and_what_both_events_said() {
        let history = build(&[
            r#"{"index":0,"time":1,"process":1,"type":"invoke","f":"enqueue","key":"orders","value":{"data":"order-7","due_ms":20000}}"#,
            r#"{"index":1,"time":2,"process":1,"type":"ok","f":"enqueue","key":"orders","value":{"message":7}}"#,
            r#"{"index":2,"time":3,"process":2,"type":"invoke","f":"deliver","key":"orders","value":{"visibility_ms":3000}}"#,
            r#"{"index":3,"time":4,"process":2,"type":"ok","f":"deliver","key":"orders","value":{"data":"order-7","message":7,"delivery":2,"redelivered":true}}"#,
            r#"{"index":4,"time":5,"process":2,"type":"invoke","f":"charge","key":"provider","value":{"data":"order-7","idempotency_key":"order-7","fence":9}}"#,
            r#"{"index":5,"time":6,"process":2,"type":"fail","f":"charge","key":"provider","value":{"status":402},"error":"declined"}"#,
            r#"{"index":6,"time":7,"process":2,"type":"invoke","f":"write","key":"doc","value":{"data":"x","status":201}}"#,
        ])
        .unwrap();
        let ops = history.ops();
        let payment = |at: u32| history.payment(at).cloned().unwrap_or_default();
        assert_eq!(ops[0].data.as_deref(), Some("order-7"));
        assert_eq!((payment(0).due_ms, payment(0).message), (Some(20000), Some(7)));
        // A delivery's unit comes with its ok.
        assert_eq!(ops[1].data.as_deref(), Some("order-7"));
        assert_eq!(
            (payment(1).visibility_ms, payment(1).delivery, payment(1).redelivered),
            (Some(3000), Some(2), Some(true))
        );
        // A failed charge keeps its status; its fence is the token sent.
        assert_eq!((ops[2].data.as_deref(), ops[2].fence), (Some("order-7"), Some(9)));
        assert_eq!(
            (payment(2).status, payment(2).idempotency_key.as_deref()),
            (Some(402), Some("order-7"))
        );
        // Other operations carry none.
        assert_eq!(history.payment(3), None);
        let listed: Vec<u64> = history.payment_ops().map(|op| op.invoke.index).collect();
        assert_eq!(listed, [0, 2, 4]);
    }

    #[test]
    fn invoking_after_info_is_a_warning() {
        let history = build(&[
            r#"{"index":0,"time":10,"process":1,"type":"invoke","f":"acquire","key":"l","value":null}"#,
            r#"{"index":1,"time":11,"process":1,"type":"info","f":"acquire","key":"l","value":null,"error":"timeout"}"#,
            r#"{"index":2,"time":12,"process":1,"type":"invoke","f":"acquire","key":"l","value":null}"#,
        ])
        .unwrap();
        assert_eq!(history.warnings().len(), 1);
    }
}
