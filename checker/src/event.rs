//! One line of a history: an operation event, as `histories/README.md` defines it.
//!
//! Parsing is hand-written rather than derived so that an error names the field
//! that is wrong, and so that unknown fields are kept (in their order) without
//! the buffering cost of `#[serde(flatten)]`.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// The logical client that issued an operation, or the nemesis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Process {
    Client(i64),
    Nemesis,
}

impl fmt::Display for Process {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Process::Client(id) => write!(f, "{id}"),
            Process::Nemesis => f.write_str("nemesis"),
        }
    }
}

/// The `type` of an event: an invocation or one of the three completions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    Invoke,
    /// The operation took effect.
    Ok,
    /// The operation definitely did not take effect.
    Fail,
    /// Unknown: it may or may not have taken effect (timeout, crash).
    Info,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Invoke => "invoke",
            EventType::Ok => "ok",
            EventType::Fail => "fail",
            EventType::Info => "info",
        }
    }

    fn parse(text: &str) -> Option<EventType> {
        EventType::from_bytes(text.as_bytes())
    }

    pub(crate) fn from_bytes(text: &[u8]) -> Option<EventType> {
        Some(match text {
            b"invoke" => EventType::Invoke,
            b"ok" => EventType::Ok,
            b"fail" => EventType::Fail,
            b"info" => EventType::Info,
            _ => return None,
        })
    }
}

/// The operation's function. Unknown names are kept, and ignored by the checkers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Function {
    Acquire,
    Release,
    Renew,
    Write,
    Read,
    /// Nemesis: a fault begins.
    Start,
    /// Nemesis: a fault ends.
    Stop,
    /// A unit of work that must happen exactly once (a cron job's daily
    /// run): `{"data": unit}` on invoke; ok = it ran, fail = skipped.
    Run,
    /// Payments: a unit put on a queue (`key`), to be done within `due_ms`
    /// of the enqueue's ok.
    Enqueue,
    /// Payments: a message taken off a queue (`key`) for a while
    /// (`visibility_ms`); its ok names the unit and which delivery it is.
    Deliver,
    /// Payments: the effect on a unit, landing where `key` says (the HTTP
    /// provider, or a table); ok = it took effect (once per `charge` id).
    Charge,
    /// Payments: a delivered message acknowledged, so that it is not
    /// delivered again.
    Ack,
    Other(Box<str>),
}

impl Function {
    pub fn as_str(&self) -> &str {
        match self {
            Function::Acquire => "acquire",
            Function::Release => "release",
            Function::Renew => "renew",
            Function::Write => "write",
            Function::Read => "read",
            Function::Start => "start",
            Function::Stop => "stop",
            Function::Run => "run",
            Function::Enqueue => "enqueue",
            Function::Deliver => "deliver",
            Function::Charge => "charge",
            Function::Ack => "ack",
            Function::Other(name) => name,
        }
    }

    pub fn parse(text: &str) -> Function {
        Function::known(text.as_bytes()).unwrap_or_else(|| Function::Other(text.into()))
    }

    /// A function by its name's bytes; `None` if they are not UTF-8.
    pub(crate) fn from_bytes(text: &[u8]) -> Option<Function> {
        match Function::known(text) {
            Some(f) => Some(f),
            None => Some(Function::Other(std::str::from_utf8(text).ok()?.into())),
        }
    }

    /// A function other than `Other`, by its name.
    pub(crate) fn known(text: &[u8]) -> Option<Function> {
        Some(match text {
            b"acquire" => Function::Acquire,
            b"release" => Function::Release,
            b"renew" => Function::Renew,
            b"write" => Function::Write,
            b"read" => Function::Read,
            b"start" => Function::Start,
            b"stop" => Function::Stop,
            b"run" => Function::Run,
            b"enqueue" => Function::Enqueue,
            b"deliver" => Function::Deliver,
            b"charge" => Function::Charge,
            b"ack" => Function::Ack,
            _ => return None,
        })
    }
}

impl fmt::Display for Function {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One event of a history, as read from or written to one JSON line.
#[derive(Debug, Clone)]
pub struct Event {
    /// Unique, ascending from 0.
    pub index: u64,
    /// Nanoseconds since the test started, on the test's monotonic clock.
    pub time_ns: u64,
    pub process: Process,
    pub event_type: EventType,
    pub f: Function,
    /// The lock name for lock operations, the resource name for `write`/`read`.
    pub key: Option<String>,
    /// The `value` field exactly as it was written; `None` stands for `null`.
    pub value: Option<Box<RawValue>>,
    pub error: Option<String>,
    /// Fields this version does not know, kept in order so that they survive a
    /// read-write round trip.
    pub extra: Option<Box<Map<String, Value>>>,
}

/// The fields of `value` that the checkers read. Other fields are ignored here
/// (and kept by [`Event::value`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ValueFields {
    pub fence: Option<u64>,
    pub ttl_ms: Option<u64>,
    /// acquire of a semaphore: how many may hold it at once.
    pub permits: Option<u32>,
    /// acquire: how long the service keeps a lock whose holder's session
    /// ended from being taken again (Consul's lock-delay).
    pub lock_delay_ms: Option<u64>,
    /// acquire in a leader election: the bound within which a new leader
    /// must be elected after the leader's end.
    pub elect_within_ms: Option<u64>,
    pub data: Option<String>,
    /// write: the version of the resource the write made (on `ok`).
    pub version: Option<u64>,
    pub fault: Option<String>,
    pub targets: Option<Vec<String>>,
    /// A nemesis event's other fields that coverage reads (absent on client
    /// events).
    pub nemesis: Option<Box<NemesisDetails>>,
    /// The payments workload's fields (absent on other events).
    pub payment: Option<Box<PaymentFields>>,
}

/// What the payments workload's operations (`enqueue`, `deliver`, `charge`,
/// `ack`) say in their `value` beyond `data` and `fence`
/// (`histories/README.md` §1.2). Each field is read leniently, as the
/// nemesis details are: these are common words (`status`, `message`,
/// `body`) that other tools' histories may use for something else on other
/// operations, and a history that read before they meant anything must
/// still read. One of an unexpected type is left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PaymentFields {
    /// enqueue (invoke): the bound by which the unit must be done, in
    /// milliseconds after the enqueue's ok.
    pub due_ms: Option<u64>,
    /// enqueue, deliver (ok); ack (invoke): the queue's id of the message.
    pub message: Option<u64>,
    /// deliver (ok); ack (invoke): which delivery of the message, from 1.
    pub delivery: Option<u64>,
    /// deliver (ok): whether the message had been delivered before.
    pub redelivered: Option<bool>,
    /// deliver (invoke): how long the message stays invisible to others.
    pub visibility_ms: Option<u64>,
    /// charge (invoke): the amount, in the currency's smallest unit.
    pub amount: Option<i64>,
    /// charge (invoke): the idempotency key sent with the request, if any.
    pub idempotency_key: Option<String>,
    /// charge (invoke): the request body, a JSON text, compared as written.
    pub body: Option<String>,
    /// charge (invoke): how long the provider keeps a key's response.
    pub retention_ms: Option<u64>,
    /// charge (ok): the id of the effect (absent for a table write).
    pub charge: Option<String>,
    /// charge (ok, fail): the response's HTTP status.
    pub status: Option<u64>,
    /// charge (ok): whether the response replays an earlier one.
    pub replayed: Option<bool>,
}

impl PaymentFields {
    /// No fields: what a `run` says, as a payments unit's effect.
    pub const NONE: PaymentFields = PaymentFields {
        due_ms: None,
        message: None,
        delivery: None,
        redelivered: None,
        visibility_ms: None,
        amount: None,
        idempotency_key: None,
        body: None,
        retention_ms: None,
        charge: None,
        status: None,
        replayed: None,
    };

    pub(crate) fn is_field(name: &str) -> bool {
        matches!(
            name,
            "due_ms"
                | "message"
                | "delivery"
                | "redelivered"
                | "visibility_ms"
                | "amount"
                | "idempotency_key"
                | "body"
                | "retention_ms"
                | "charge"
                | "status"
                | "replayed"
        )
    }

    fn set(&mut self, name: &str, value: Value) {
        let text = |value: Value| match value {
            Value::String(text) => Some(text),
            _ => None,
        };
        match name {
            "due_ms" => self.due_ms = value.as_u64(),
            "message" => self.message = value.as_u64(),
            "delivery" => self.delivery = value.as_u64(),
            "redelivered" => self.redelivered = value.as_bool(),
            "visibility_ms" => self.visibility_ms = value.as_u64(),
            "amount" => self.amount = value.as_i64(),
            "idempotency_key" => self.idempotency_key = text(value),
            "body" => self.body = text(value),
            "retention_ms" => self.retention_ms = value.as_u64(),
            "charge" => self.charge = text(value),
            "status" => self.status = value.as_u64(),
            "replayed" => self.replayed = value.as_bool(),
            _ => {}
        }
    }

    /// Takes what a completion says over what the invoke said: each field
    /// the completion gives replaces the invoke's.
    pub(crate) fn merge(&mut self, completion: PaymentFields) {
        macro_rules! take {
            ($($field:ident),*) => {
                $(if completion.$field.is_some() {
                    self.$field = completion.$field;
                })*
            };
        }
        take!(
            due_ms,
            message,
            delivery,
            redelivered,
            visibility_ms,
            amount,
            idempotency_key,
            body,
            retention_ms,
            charge,
            status,
            replayed
        );
    }
}

/// What a nemesis event's `value` says about its fault beyond its name and
/// targets, as far as coverage reads it. Each field is read leniently: one
/// of an unexpected type is left out, never an error, so that histories
/// written before a field existed (or by other tools) still read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NemesisDetails {
    /// partition: `client` (cut clients) or a server shape (`halves`, ...).
    pub shape: Option<String>,
    /// pause: how long the stall lasts.
    pub stall_ms: Option<u64>,
    /// pause (on stop): `Some(Some(point))` where it struck, `Some(None)`
    /// (`"struck": null`) it never struck, `None` not recorded.
    pub struck: Option<Option<String>>,
    /// clock: how far the clock jumped forward.
    pub jump_ms: Option<u64>,
    /// clock drift: how fast the server clock ran, in millionths
    /// (`drift_rate` or `rate`; 2000000 runs twice as fast).
    pub drift_micros: Option<u64>,
    /// The process ids of the targeted clients at that moment.
    pub processes: Option<Vec<i64>>,
    /// kill: whether the killed server kept its keys.
    pub persistent: Option<bool>,
}

impl NemesisDetails {
    fn is_field(name: &str) -> bool {
        matches!(
            name,
            "shape"
                | "stall_ms"
                | "struck"
                | "jump_ms"
                | "drift_rate"
                | "rate"
                | "processes"
                | "persistent"
        )
    }

    fn set(&mut self, name: &str, value: Value) {
        match name {
            "shape" => self.shape = value.as_str().map(str::to_string),
            "stall_ms" => self.stall_ms = value.as_u64(),
            "struck" => {
                self.struck = match value {
                    Value::Null => Some(None),
                    Value::String(point) => Some(Some(point)),
                    _ => None,
                }
            }
            "jump_ms" => self.jump_ms = value.as_u64(),
            "drift_rate" | "rate" => {
                self.drift_micros = value
                    .as_f64()
                    .filter(|rate| rate.is_finite() && *rate >= 0.0 && *rate < 1e9)
                    .map(|rate| (rate * 1e6).round() as u64)
            }
            "processes" => {
                self.processes = value
                    .as_array()
                    .map(|ids| ids.iter().filter_map(Value::as_i64).collect::<Vec<i64>>())
            }
            "persistent" => self.persistent = value.as_bool(),
            _ => {}
        }
    }
}

impl Event {
    /// Parses the known fields of `value`. A `value` that is not an object (or
    /// is null) has none of them; a known field of the wrong type is an error.
    pub fn value_fields(&self) -> Result<ValueFields, String> {
        value_fields(self.value.as_deref())
    }

    /// A short description for reports, e.g. `process 3 ok acquire "report"`.
    pub fn describe(&self) -> String {
        match &self.key {
            Some(key) => {
                format!("{} {} {} {key:?}", self.process, self.event_type.as_str(), self.f)
            }
            None => format!("{} {} {}", self.process, self.event_type.as_str(), self.f),
        }
    }
}

fn value_fields(value: Option<&RawValue>) -> Result<ValueFields, String> {
    let Some(raw) = value else {
        return Ok(ValueFields::default());
    };
    let text = raw.get();
    if !text.trim_start().starts_with('{') {
        return Ok(ValueFields::default());
    }
    serde_json::from_str::<ValueFields>(text).map_err(|error| error.to_string())
}

impl Serialize for Event {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let known = 6 + usize::from(self.error.is_some());
        let extra = self.extra.as_ref().map_or(0, |extra| extra.len());
        let mut map = serializer.serialize_map(Some(known + extra + 1))?;
        map.serialize_entry("index", &self.index)?;
        map.serialize_entry("time", &self.time_ns)?;
        match self.process {
            Process::Client(id) => map.serialize_entry("process", &id)?,
            Process::Nemesis => map.serialize_entry("process", "nemesis")?,
        }
        map.serialize_entry("type", self.event_type.as_str())?;
        map.serialize_entry("f", self.f.as_str())?;
        map.serialize_entry("key", &self.key)?;
        map.serialize_entry("value", &self.value)?;
        if let Some(error) = &self.error {
            map.serialize_entry("error", error)?;
        }
        if let Some(extra) = &self.extra {
            for (name, value) in extra.iter() {
                map.serialize_entry(name, value)?;
            }
        }
        map.end()
    }
}

/// Deserializes from borrowed input (`serde_json::from_str`, `from_slice`):
/// `value` is kept as raw JSON text, which serde_json borrows.
impl<'de> Deserialize<'de> for Event {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        EventRef::deserialize(deserializer).map(EventRef::into_owned)
    }
}

/// An event borrowed from the line it was parsed from: the reader's fast
/// path, which allocates nothing for a typical line.
#[derive(Debug)]
pub(crate) struct EventRef<'a> {
    pub index: u64,
    pub time_ns: u64,
    pub process: Process,
    pub event_type: EventType,
    pub f: Function,
    pub key: Option<Cow<'a, str>>,
    pub value: Option<&'a RawValue>,
    pub error: Option<Cow<'a, str>>,
    pub extra: Option<Box<Map<String, Value>>>,
}

impl EventRef<'_> {
    pub fn into_owned(self) -> Event {
        Event {
            index: self.index,
            time_ns: self.time_ns,
            process: self.process,
            event_type: self.event_type,
            f: self.f,
            key: self.key.map(Cow::into_owned),
            value: self.value.map(ToOwned::to_owned),
            error: self.error.map(Cow::into_owned),
            extra: self.extra,
        }
    }

    pub fn value_fields(&self) -> Result<ValueFields, String> {
        value_fields(self.value)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for EventRef<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(EventVisitor)
    }
}

struct EventVisitor;

/// A string that borrows from the input when it has no escapes. (serde's own
/// `Cow<str>` always allocates.)
struct CowStr<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for CowStr<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct CowStrVisitor;
        impl<'de> Visitor<'de> for CowStrVisitor {
            type Value = CowStr<'de>;
            fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
                formatter.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, text: &'de str) -> Result<CowStr<'de>, E> {
                Ok(CowStr(Cow::Borrowed(text)))
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<CowStr<'de>, E> {
                Ok(CowStr(Cow::Owned(text.to_owned())))
            }
        }
        deserializer.deserialize_str(CowStrVisitor)
    }
}

impl<'de> Deserialize<'de> for ValueFields {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(ValueFieldsVisitor)
    }
}

struct ValueFieldsVisitor;

impl<'de> Visitor<'de> for ValueFieldsVisitor {
    type Value = ValueFields;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ValueFields, A::Error> {
        let mut fields = ValueFields::default();
        while let Some(CowStr(name)) = map.next_key::<CowStr<'de>>()? {
            let name = name.as_ref();
            let error = |e: A::Error| field_error::<A::Error>(&format!("value.{name}"), e);
            match name {
                "fence" => fields.fence = map.next_value().map_err(error)?,
                "ttl_ms" => fields.ttl_ms = map.next_value().map_err(error)?,
                "permits" => fields.permits = map.next_value().map_err(error)?,
                "lock_delay_ms" => fields.lock_delay_ms = map.next_value().map_err(error)?,
                "elect_within_ms" => fields.elect_within_ms = map.next_value().map_err(error)?,
                "data" => fields.data = map.next_value().map_err(error)?,
                "version" => fields.version = map.next_value().map_err(error)?,
                "fault" => fields.fault = map.next_value().map_err(error)?,
                "targets" => fields.targets = map.next_value().map_err(error)?,
                _ if NemesisDetails::is_field(name) => {
                    let value: Value = map.next_value()?;
                    fields.nemesis.get_or_insert_with(Default::default).set(name, value);
                }
                _ if PaymentFields::is_field(name) => {
                    let value: Value = map.next_value()?;
                    fields.payment.get_or_insert_with(Default::default).set(name, value);
                }
                _ => {
                    map.next_value::<de::IgnoredAny>()?;
                }
            }
        }
        Ok(fields)
    }
}

/// A JSON number or string as a field of an event reads it: a whole
/// number of up to 64 bits, signed or not, or one past that (serde_json
/// reads such a number as a float), or a fraction, or a string.
enum Scalar<'a> {
    Whole(i128),
    /// A whole number beyond 64 bits, as serde_json read it (a float: its
    /// digits are the line's, which the reader quotes).
    Huge(f64),
    Fraction(f64),
    Text(Cow<'a, str>),
}

impl<'de: 'a, 'a> Deserialize<'de> for Scalar<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ScalarVisitor;
        impl<'de> Visitor<'de> for ScalarVisitor {
            type Value = Scalar<'de>;
            fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
                formatter.write_str("an integer")
            }
            fn visit_u64<E: de::Error>(self, value: u64) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Whole(i128::from(value)))
            }
            fn visit_i64<E: de::Error>(self, value: i64) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Whole(i128::from(value)))
            }
            fn visit_f64<E: de::Error>(self, value: f64) -> Result<Scalar<'de>, E> {
                Ok(if value.fract() == 0.0 && value.abs() >= 2f64.powi(63) {
                    Scalar::Huge(value)
                } else {
                    Scalar::Fraction(value)
                })
            }
            fn visit_borrowed_str<E: de::Error>(self, text: &'de str) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Text(Cow::Borrowed(text)))
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Text(Cow::Owned(text.to_owned())))
            }
        }
        deserializer.deserialize_any(ScalarVisitor)
    }
}

impl Scalar<'_> {
    /// What an integer field found instead of an integer it can hold.
    fn describe(&self) -> String {
        match self {
            Scalar::Whole(value) => value.to_string(),
            Scalar::Huge(value) => value.to_string(),
            Scalar::Fraction(value) => value.to_string(),
            Scalar::Text(text) => crate::quote::text(text),
        }
    }

    /// A non-negative integer of up to 64 bits (`index`, `time`).
    fn unsigned<E: de::Error>(self, field: &str) -> Result<u64, E> {
        let message = match self {
            Scalar::Whole(value) if value < 0 => {
                format!("expected a non-negative integer, found {value}")
            }
            Scalar::Whole(value) => match u64::try_from(value) {
                Ok(value) => return Ok(value),
                Err(_) => format!("integer out of range (beyond 64 bits): {value}"),
            },
            Scalar::Huge(_) => huge(64),
            other => format!("expected an integer, found {}", other.describe()),
        };
        Err(field_error(field, message))
    }

    /// A process: a signed integer of up to 64 bits, or "nemesis".
    fn process<E: de::Error>(self) -> Result<Process, E> {
        let message = match self {
            Scalar::Whole(value) => match i64::try_from(value) {
                Ok(id) => return Ok(Process::Client(id)),
                Err(_) => format!("integer out of range (beyond 63 bits): {value}"),
            },
            Scalar::Huge(_) => huge(63),
            Scalar::Text(text) if text == "nemesis" => return Ok(Process::Nemesis),
            other => format!("expected an integer or \"nemesis\", found {}", other.describe()),
        };
        Err(field_error("process", message))
    }
}

/// A whole number past 64 bits, which serde_json read as a float and so
/// lost its digits: the reader quotes the line's own after this message.
fn huge(bits: u32) -> String {
    format!("integer out of range (beyond {bits} bits)")
}

fn field_error<E: de::Error>(field: &str, error: impl fmt::Display) -> E {
    E::custom(format!("field `{field}`: {error}"))
}

impl<'de> Visitor<'de> for EventVisitor {
    type Value = EventRef<'de>;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON object with index, time, process, type, f, key and value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<EventRef<'de>, A::Error> {
        let mut index = None;
        let mut time_ns = None;
        let mut process = None;
        let mut event_type = None;
        let mut f = None;
        let mut key: Option<Option<Cow<'de, str>>> = None;
        let mut value: Option<Option<&'de RawValue>> = None;
        let mut error = None;
        let mut extra: Option<Box<Map<String, Value>>> = None;
        while let Some(CowStr(name)) = map.next_key::<CowStr<'de>>()? {
            match name.as_ref() {
                "index" => {
                    let raw =
                        map.next_value::<Scalar<'_>>().map_err(|e| field_error("index", e))?;
                    index = Some(raw.unsigned("index")?);
                }
                "time" => {
                    let raw = map.next_value::<Scalar<'_>>().map_err(|e| field_error("time", e))?;
                    time_ns = Some(raw.unsigned("time")?);
                }
                "process" => {
                    let raw =
                        map.next_value::<Scalar<'_>>().map_err(|e| field_error("process", e))?;
                    process = Some(raw.process()?);
                }
                "type" => {
                    let CowStr(text) =
                        map.next_value::<CowStr<'de>>().map_err(|e| field_error("type", e))?;
                    event_type = Some(EventType::parse(&text).ok_or_else(|| {
                        field_error(
                            "type",
                            format!("expected invoke, ok, fail or info, found {text:?}"),
                        )
                    })?);
                }
                "f" => {
                    let CowStr(text) =
                        map.next_value::<CowStr<'de>>().map_err(|e| field_error("f", e))?;
                    f = Some(Function::parse(&text));
                }
                "key" => {
                    let text = map
                        .next_value::<Option<CowStr<'de>>>()
                        .map_err(|e| field_error("key", e))?;
                    key = Some(text.map(|CowStr(text)| text));
                }
                "value" => {
                    let raw =
                        map.next_value::<&'de RawValue>().map_err(|e| field_error("value", e))?;
                    value = Some(if raw.get() == "null" { None } else { Some(raw) });
                }
                "error" => {
                    let text = map
                        .next_value::<Option<CowStr<'de>>>()
                        .map_err(|e| field_error("error", e))?;
                    error = text.map(|CowStr(text)| text);
                }
                _ => {
                    let field_value = map.next_value::<Value>()?;
                    extra
                        .get_or_insert_with(Default::default)
                        .insert(name.into_owned(), field_value);
                }
            }
        }
        Ok(EventRef {
            index: index.ok_or_else(|| de::Error::missing_field("index"))?,
            time_ns: time_ns.ok_or_else(|| de::Error::missing_field("time"))?,
            process: process.ok_or_else(|| de::Error::missing_field("process"))?,
            event_type: event_type.ok_or_else(|| de::Error::missing_field("type"))?,
            f: f.ok_or_else(|| de::Error::missing_field("f"))?,
            key: key.unwrap_or(None),
            value: value.unwrap_or(None),
            error,
            extra,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_keeps_unknown_fields_in_order() {
        let line = r#"{"index":3,"time":13000000000,"process":2,"type":"ok","f":"acquire","key":"report","value":{"fence":34,"lease":"abc"},"node":"n1","latency":{"p":1}}"#;
        let event: Event = serde_json::from_str(line).unwrap();
        assert_eq!(event.value_fields().unwrap().fence, Some(34));
        assert_eq!(serde_json::to_string(&event).unwrap(), line);
    }

    #[test]
    fn nemesis_event_with_null_key() {
        let line = r#"{"index":2,"time":5,"process":"nemesis","type":"info","f":"start","key":null,"value":{"fault":"pause","targets":["client-1"]}}"#;
        let event: Event = serde_json::from_str(line).unwrap();
        assert_eq!(event.process, Process::Nemesis);
        assert_eq!(event.f, Function::Start);
        let fields = event.value_fields().unwrap();
        assert_eq!(fields.fault.as_deref(), Some("pause"));
        assert_eq!(serde_json::to_string(&event).unwrap(), line);
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            (
                r#"{"index":"x","time":1,"process":1,"type":"ok","f":"read","key":"a","value":null}"#,
                "`index`",
            ),
            (
                r#"{"index":1,"time":-1,"process":1,"type":"ok","f":"read","key":"a","value":null}"#,
                "`time`",
            ),
            (
                r#"{"index":1,"time":1,"process":"bob","type":"ok","f":"read","key":"a","value":null}"#,
                "`process`",
            ),
            (
                r#"{"index":1,"time":1,"process":1,"type":"done","f":"read","key":"a","value":null}"#,
                "`type`",
            ),
            (r#"{"time":1,"process":1,"type":"ok","f":"read","key":"a","value":null}"#, "`index`"),
            (
                r#"{"index":1,"time":1,"process":1,"type":"ok","f":"read","key":7,"value":null}"#,
                "`key`",
            ),
        ];
        for (line, field) in cases {
            let error = serde_json::from_str::<Event>(line).unwrap_err().to_string();
            assert!(error.contains(field), "{error} should name {field}");
        }
    }

    #[test]
    fn payments_functions_are_known_by_name() {
        for (name, f) in [
            ("enqueue", Function::Enqueue),
            ("deliver", Function::Deliver),
            ("charge", Function::Charge),
            ("ack", Function::Ack),
        ] {
            assert_eq!(Function::parse(name), f);
            assert_eq!(Function::from_bytes(name.as_bytes()), Some(f.clone()));
            assert_eq!(f.as_str(), name);
        }
    }

    #[test]
    fn payments_fields_are_read_and_a_wrong_type_is_left_out() {
        let line = r#"{"index":1,"time":1,"process":1,"type":"invoke","f":"charge","key":"provider","value":{"data":"order-7","amount":4200,"idempotency_key":"order-7","body":"{\"amount\":4200}","fence":3,"retention_ms":60000}}"#;
        let event: Event = serde_json::from_str(line).unwrap();
        let fields = event.value_fields().unwrap();
        assert_eq!((fields.data.as_deref(), fields.fence), (Some("order-7"), Some(3)));
        let payment = fields.payment.expect("payment fields");
        assert_eq!(payment.amount, Some(4200));
        assert_eq!(payment.idempotency_key.as_deref(), Some("order-7"));
        assert_eq!(payment.body.as_deref(), Some(r#"{"amount":4200}"#));
        assert_eq!(payment.retention_ms, Some(60000));
        // Common words another tool may use otherwise: never an error.
        let line = r#"{"index":1,"time":1,"process":1,"type":"ok","f":"acquire","key":"l","value":{"status":"granted","message":"hi","replayed":1,"charge":7}}"#;
        let event: Event = serde_json::from_str(line).unwrap();
        let payment = event.value_fields().unwrap().payment.expect("payment fields");
        assert_eq!(*payment, PaymentFields::default());
    }

    #[test]
    fn value_field_of_wrong_type_is_an_error() {
        let line = r#"{"index":1,"time":1,"process":1,"type":"ok","f":"acquire","key":"a","value":{"fence":"x"}}"#;
        let event: Event = serde_json::from_str(line).unwrap();
        assert!(event.value_fields().unwrap_err().contains("fence"));
    }
}
