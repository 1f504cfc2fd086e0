//! A payment provider with idempotency keys, as a pure state machine
//! written once for both worlds: the simulator's provider host calls it
//! synchronously with its simulated time, and the real world's HTTP
//! provider serves it. It does no I/O and reads no clock: time comes in
//! as `now_ms`.
//!
//! A charge takes time, and a second request may arrive meanwhile, so a
//! request goes in two phases: [`Provider::begin`] answers at once (a
//! replay, a conflict, bad input) or hands out a [`Ticket`], and
//! [`Provider::finish`] with that ticket creates the charge and stores its
//! response under the request's `Idempotency-Key`. [`Provider::abandon`]
//! drops a ticket whose processing died, so that a retry proceeds.
//!
//! A request body is a JSON object with an `"order"` (a non-empty string)
//! and an `"amount"` (an integer above 0); `"card": "declined"` makes the
//! charge fail. Two bodies are the same request when their parsed JSON is
//! the same (key order and whitespace aside), as compared by a canonical
//! fingerprint, not their bytes. The statuses, under the IETF draft's
//! profile ([`Profile::Ietf`]) and Stripe's ([`Profile::Stripe`]):
//!
//! | situation | Ietf | Stripe |
//! |---|---|---|
//! | charge created (`{"id": "ch_N", "order", "amount"}`) | 201 | 201 |
//! | card declined (`card_declined`) | 402 problem | 402 `card_error` |
//! | bad input: a key missing (when required), empty or over 255 characters; a body not JSON, not an object, a bad `order` or `amount` | 400 problem | 400 `invalid_request_error` |
//! | the key's first request still in flight | 409 problem (`/problems/conflict`) | 409 `idempotency_error`, `idempotency_key_in_use` |
//! | the key reused with another body | 422 problem (`/problems/key-mismatch`) | 400 `idempotency_error` |
//! | the key reused with the same body, after its charge | the stored status and body, replayed | the same |
//!
//! A replay is the first response's status and body exactly, with
//! [`Response::replayed`] set (real HTTP sends `Idempotent-Replayed:
//! true`, as Stripe does). Only a finished charge's response (201 or 402)
//! is stored; bad input reserves nothing. A key is forgotten
//! `retention_ms` after its first request (24 hours unless
//! [`Provider::with_retention`] says otherwise), and a request with it
//! then proceeds anew. A request without a key always proceeds: nothing
//! can dedupe it ([`Provider::require_key`] refuses it instead).
//!
//! The broken [`Variant`]s are the mistakes an idempotency layer makes,
//! for the checkers to catch.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

/// How long a key is kept unless told otherwise: 24 hours, as Stripe does.
pub const DEFAULT_RETENTION_MS: u64 = 24 * 60 * 60 * 1_000;

/// The longest key accepted, in characters (Stripe's limit).
pub const MAX_KEY_CHARS: usize = 255;

/// How long a provider takes to charge a card, uniform, in ms, in both
/// worlds; one charge in [`SLOW_ONE_IN`] takes [`SLOW_CHARGE_MS`] instead,
/// longer than a worker waits for its reply, so that the worker's retry
/// with the same key finds the first still in flight.
pub const CHARGE_MS: (u64, u64) = (5, 40);
pub const SLOW_CHARGE_MS: (u64, u64) = (300, 600);
pub const SLOW_ONE_IN: u64 = 8;

/// Whose error bodies and statuses the provider answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Profile {
    /// The IETF `Idempotency-Key` draft: problem details (RFC 9457),
    /// 409 for a request in flight, 422 for a key reused with another body.
    #[default]
    Ietf,
    /// Stripe's API: `{"error": {"type", "code", "message"}}`, 409 for a
    /// request in flight, 400 `idempotency_error` for another body.
    Stripe,
}

impl Profile {
    pub const ALL: [Profile; 2] = [Profile::Ietf, Profile::Stripe];

    pub fn name(self) -> &'static str {
        match self {
            Profile::Ietf => "ietf",
            Profile::Stripe => "stripe",
        }
    }

    pub fn parse(name: &str) -> Option<Profile> {
        Profile::ALL.into_iter().find(|profile| profile.name() == name)
    }

    /// An error's body: a problem (`type`, `title`, `status`, and any
    /// other member of `extra`), or Stripe's `error` object (`type`, and
    /// `extra`'s members, a `message` among them).
    fn error(self, status: u16, problem: &str, stripe_type: &str, extra: Value) -> Response {
        let mut members = match extra {
            Value::Object(members) => members,
            _ => Map::new(),
        };
        let body = match self {
            Profile::Ietf => {
                let mut problem = Map::from_iter([
                    ("type".to_string(), json!(format!("/problems/{problem}"))),
                    ("status".to_string(), json!(status)),
                ]);
                if let Some(message) = members.remove("message") {
                    problem.insert("title".into(), message);
                }
                problem.extend(members);
                Value::Object(problem)
            }
            Profile::Stripe => {
                let mut error = Map::from_iter([("type".to_string(), json!(stripe_type))]);
                error.extend(members);
                json!({ "error": error })
            }
        };
        Response { status, body, replayed: false }
    }

    /// The 409 for a key whose first request is still in flight.
    pub fn in_flight(self) -> Response {
        let message = "a request with this Idempotency-Key is still being processed";
        let extra = json!({ "code": "idempotency_key_in_use", "message": message });
        self.error(409, "conflict", "idempotency_error", extra)
    }

    /// The answer to a key reused with another body: 422 under the IETF
    /// draft, Stripe's 400 `idempotency_error`.
    pub fn mismatch(self) -> Response {
        let message = "this Idempotency-Key was used with another request body";
        let status = match self {
            Profile::Ietf => 422,
            Profile::Stripe => 400,
        };
        self.error(status, "key-mismatch", "idempotency_error", json!({ "message": message }))
    }

    /// The 402 of a declined card.
    pub fn declined(self) -> Response {
        let extra = json!({ "code": "card_declined", "message": "Your card was declined." });
        self.error(402, "card-declined", "card_error", extra)
    }

    /// The 503 of a provider whose own storage failed while it handled the
    /// request: nothing was charged, and a retry may proceed. The pure
    /// provider never answers it; the real one does when its database
    /// does not.
    pub fn unavailable(self) -> Response {
        let message = "the provider could not process the request; retry it";
        self.error(503, "unavailable", "api_error", json!({ "message": message }))
    }

    /// The 500 of a provider whose handler broke (a bug, not bad input):
    /// whether it charged is unknown.
    pub fn internal(self) -> Response {
        let message = "the provider failed while processing the request";
        self.error(500, "internal", "api_error", json!({ "message": message }))
    }
}

/// How the provider keeps its keys: correctly, or with one of the
/// mistakes an idempotency layer makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Variant {
    /// A key is reserved at its first request: a second while it is in
    /// flight gets 409, one after it the stored response (or, with
    /// another body, a mismatch).
    #[default]
    Correct,
    /// Keys are ignored: every request charges.
    NoDedupe,
    /// As `Correct`, but a finished key's response is replayed whatever
    /// the body: a different order reusing a key is answered with another
    /// order's charge, and never charged.
    ReplayAnyBody,
    /// A key is looked up among finished requests only, and stored when
    /// its request finishes, with no uniqueness check: two requests with
    /// one key at once both charge (check-then-insert without a
    /// constraint).
    CheckThenInsert,
}

impl Variant {
    pub const ALL: [Variant; 4] =
        [Variant::Correct, Variant::NoDedupe, Variant::ReplayAnyBody, Variant::CheckThenInsert];

    pub fn name(self) -> &'static str {
        match self {
            Variant::Correct => "correct",
            Variant::NoDedupe => "no-dedupe",
            Variant::ReplayAnyBody => "replay-any-body",
            Variant::CheckThenInsert => "check-then-insert",
        }
    }

    pub fn parse(name: &str) -> Option<Variant> {
        Variant::ALL.into_iter().find(|variant| variant.name() == name)
    }

    /// Whether a key's first request reserves it until it finishes.
    fn reserves(self) -> bool {
        matches!(self, Variant::Correct | Variant::ReplayAnyBody)
    }
}

/// A charge request: its `Idempotency-Key` header, if any, and its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChargeRequest {
    pub key: Option<String>,
    pub body: Vec<u8>,
}

/// The provider's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub body: Value,
    /// Whether this is a stored response replayed for a key seen before
    /// (`Idempotent-Replayed: true` over HTTP).
    pub replayed: bool,
}

impl Response {
    /// The 201 of a charge made: `{"id", "order", "amount"}`.
    pub fn created(id: &str, order: &str, amount: u64) -> Response {
        let body = json!({ "id": id, "order": order, "amount": amount });
        Response { status: 201, body, replayed: false }
    }

    /// This response, as replayed to a key seen before.
    pub fn replay(&self) -> Response {
        Response { replayed: true, ..self.clone() }
    }

    /// The charge's id (`ch_N`), on a 2xx that made or replays one.
    pub fn charge(&self) -> Option<&str> {
        if (200..300).contains(&self.status) {
            self.body.get("id").and_then(Value::as_str)
        } else {
            None
        }
    }

    /// Why the request was refused, as a history's `error` names it
    /// (`in-flight`, `key-mismatch`, `declined`, `bad-request`, or
    /// `refused`); `None` for a 2xx. Both profiles read alike: Stripe's
    /// mismatch is a 400 whose error type is `idempotency_error`.
    pub fn refusal(&self) -> Option<&'static str> {
        let error_type = self.body.pointer("/error/type").and_then(Value::as_str);
        match self.status {
            200..=299 => None,
            409 => Some("in-flight"),
            402 => Some("declined"),
            422 => Some("key-mismatch"),
            400 if error_type == Some("idempotency_error") => Some("key-mismatch"),
            400 => Some("bad-request"),
            _ => Some("refused"),
        }
    }
}

/// A request that passed [`Provider::validate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Valid {
    pub key: Option<String>,
    pub order: String,
    pub amount: u64,
    /// `"card": "declined"`: the charge fails with 402.
    pub declined: bool,
    /// The body's canonical JSON: two bodies are the same request when
    /// these are equal.
    fingerprint: String,
}

impl Valid {
    /// The body's canonical JSON: equal for two bodies that are the same
    /// request (member order and whitespace aside).
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }
}

/// Why a request is bad input (400).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invalid {
    /// No `Idempotency-Key`, and the provider requires one.
    MissingKey,
    EmptyKey,
    /// A key over [`MAX_KEY_CHARS`] characters.
    LongKey,
    NotJson,
    NotObject,
    /// `order` missing, not a string, or empty.
    Order,
    /// `amount` missing, or not an integer above 0.
    Amount,
}

impl Invalid {
    /// What is wrong, in a sentence.
    pub fn message(self) -> &'static str {
        match self {
            Invalid::MissingKey => "an Idempotency-Key header is required",
            Invalid::EmptyKey => "the Idempotency-Key is empty",
            Invalid::LongKey => "the Idempotency-Key is longer than 255 characters",
            Invalid::NotJson => "the body is not JSON",
            Invalid::NotObject => "the body is not a JSON object",
            Invalid::Order => "\"order\" must be a non-empty string",
            Invalid::Amount => "\"amount\" must be an integer above 0",
        }
    }

    /// The header or body field at fault.
    pub fn param(self) -> &'static str {
        match self {
            Invalid::MissingKey | Invalid::EmptyKey | Invalid::LongKey => "Idempotency-Key",
            Invalid::NotJson | Invalid::NotObject => "body",
            Invalid::Order => "order",
            Invalid::Amount => "amount",
        }
    }

    /// The 400 a provider of `profile` answers with.
    pub fn response(self, profile: Profile) -> Response {
        let extra = json!({ "message": self.message(), "param": self.param() });
        profile.error(400, "bad-request", "invalid_request_error", extra)
    }
}

/// A request allowed to proceed: [`Provider::finish`] creates its charge,
/// or [`Provider::abandon`] drops it. Neither can be cloned, so a ticket
/// ends once.
#[derive(Debug)]
pub struct Ticket {
    id: u64,
    begun_ms: u64,
    request: Valid,
}

impl Ticket {
    /// The request it proceeds with.
    pub fn request(&self) -> &Valid {
        &self.request
    }
}

/// How [`Provider::begin`] answered.
#[derive(Debug)]
pub enum Begin {
    /// At once: a replay, a conflict, a mismatch or bad input.
    Done(Response),
    /// The charge is being made: finish or abandon the ticket.
    Proceed(Ticket),
}

/// A charge the provider made: one effect on its order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charge {
    /// `ch_N`, N from 1 in creation order.
    pub id: String,
    pub order: String,
    pub amount: u64,
    pub key: Option<String>,
    /// When it was made: its request's finish.
    pub at_ms: u64,
}

/// What the provider keeps of a key.
#[derive(Debug, Clone)]
enum Entry {
    /// Reserved by the ticket `ticket`, which has not finished.
    InFlight { ticket: u64, created_ms: u64 },
    /// Its request finished: the response to replay to the same body.
    Done { fingerprint: String, response: Response, created_ms: u64 },
}

impl Entry {
    fn created_ms(&self) -> u64 {
        match self {
            Entry::InFlight { created_ms, .. } | Entry::Done { created_ms, .. } => *created_ms,
        }
    }
}

/// The provider: its keys and every charge it made.
///
/// Every keyed request forgets the keys whose first request was
/// `retention_ms` or more before it.
#[derive(Debug, Clone)]
pub struct Provider {
    profile: Profile,
    variant: Variant,
    retention_ms: u64,
    require_key: bool,
    keys: BTreeMap<String, Entry>,
    /// Every key of `keys` by its entry's creation: the ones to forget
    /// first come first, so that forgetting costs a look at the front, not
    /// a pass over every key.
    by_age: std::collections::BTreeSet<(u64, String)>,
    charges: Vec<Charge>,
    last_ticket: u64,
}

impl Provider {
    pub fn new(profile: Profile, variant: Variant) -> Provider {
        Provider {
            profile,
            variant,
            retention_ms: DEFAULT_RETENTION_MS,
            require_key: false,
            keys: BTreeMap::new(),
            by_age: std::collections::BTreeSet::new(),
            charges: Vec::new(),
            last_ticket: 0,
        }
    }

    /// Keeps `entry` under `key`, in place of whatever was there.
    fn put(&mut self, key: String, entry: Entry) {
        self.by_age.insert((entry.created_ms(), key.clone()));
        if let Some(old) = self.keys.insert(key.clone(), entry) {
            if old.created_ms() != self.keys[&key].created_ms() {
                self.by_age.remove(&(old.created_ms(), key));
            }
        }
    }

    /// Forgets `key`.
    fn forget(&mut self, key: &str) {
        if let Some(old) = self.keys.remove(key) {
            self.by_age.remove(&(old.created_ms(), key.to_string()));
        }
    }

    /// Forgets every key whose first request was `retention_ms` or more
    /// before `now_ms`.
    fn expire(&mut self, now_ms: u64) {
        while let Some((created_ms, _)) = self.by_age.first() {
            if created_ms.saturating_add(self.retention_ms) > now_ms {
                break;
            }
            if let Some((_, key)) = self.by_age.pop_first() {
                self.keys.remove(&key);
            }
        }
    }

    /// Keys are forgotten `retention_ms` after their first request.
    pub fn with_retention(mut self, retention_ms: u64) -> Provider {
        self.retention_ms = retention_ms;
        self
    }

    /// With `true`, a request without a key is bad input (400) rather than
    /// a charge nothing can dedupe.
    pub fn require_key(mut self, require: bool) -> Provider {
        self.require_key = require;
        self
    }

    pub fn profile(&self) -> Profile {
        self.profile
    }

    pub fn variant(&self) -> Variant {
        self.variant
    }

    /// Every charge made, in creation order.
    pub fn charges(&self) -> &[Charge] {
        &self.charges
    }

    /// Checks a request's key and body: the charge it asks for, or why it
    /// is bad input ([`Invalid::response`] is the 400 to send).
    pub fn validate(&self, request: &ChargeRequest) -> Result<Valid, Invalid> {
        match &request.key {
            None if self.require_key => return Err(Invalid::MissingKey),
            Some(key) if key.is_empty() => return Err(Invalid::EmptyKey),
            Some(key) if key.chars().count() > MAX_KEY_CHARS => return Err(Invalid::LongKey),
            _ => {}
        }
        let body: Value = serde_json::from_slice(&request.body).map_err(|_| Invalid::NotJson)?;
        let fields = body.as_object().ok_or(Invalid::NotObject)?;
        let order = match fields.get("order").and_then(Value::as_str) {
            Some(order) if !order.is_empty() => order.to_string(),
            _ => return Err(Invalid::Order),
        };
        let amount = match fields.get("amount").and_then(Value::as_u64) {
            Some(amount) if amount > 0 => amount,
            _ => return Err(Invalid::Amount),
        };
        let declined = fields.get("card").and_then(Value::as_str) == Some("declined");
        Ok(Valid {
            key: request.key.clone(),
            order,
            amount,
            declined,
            fingerprint: canonical(&body),
        })
    }

    /// Answers a request at once, or lets it proceed (see the module's
    /// table).
    pub fn begin(&mut self, request: &ChargeRequest, now_ms: u64) -> Begin {
        let request = match self.validate(request) {
            Ok(request) => request,
            Err(invalid) => return Begin::Done(invalid.response(self.profile)),
        };
        let key = match (&request.key, self.variant) {
            (Some(key), variant) if variant != Variant::NoDedupe => key.clone(),
            _ => return Begin::Proceed(self.ticket(request, now_ms)),
        };
        self.expire(now_ms);
        match self.keys.get(&key) {
            Some(Entry::Done { fingerprint, response, .. }) => {
                let same = *fingerprint == request.fingerprint;
                if same || self.variant == Variant::ReplayAnyBody {
                    Begin::Done(response.replay())
                } else {
                    Begin::Done(self.mismatch())
                }
            }
            Some(Entry::InFlight { .. }) => Begin::Done(self.in_flight()),
            None => {
                let ticket = self.ticket(request, now_ms);
                if self.variant.reserves() {
                    let entry = Entry::InFlight { ticket: ticket.id, created_ms: now_ms };
                    self.put(key, entry);
                }
                Begin::Proceed(ticket)
            }
        }
    }

    fn ticket(&mut self, request: Valid, now_ms: u64) -> Ticket {
        self.last_ticket += 1;
        Ticket { id: self.last_ticket, begun_ms: now_ms, request }
    }

    /// Makes the ticket's charge (201), or declines it (402), and stores
    /// the response under its key: in place of its own reservation (a
    /// reservation that expired and was taken by a newer request is left
    /// to that one), or, for `CheckThenInsert`, over whatever is there.
    pub fn finish(&mut self, ticket: Ticket, now_ms: u64) -> Response {
        let Ticket { id, begun_ms, request } = ticket;
        let response = if request.declined {
            self.profile.declined()
        } else {
            let charge = Charge {
                id: format!("ch_{}", self.charges.len() + 1),
                order: request.order.clone(),
                amount: request.amount,
                key: request.key.clone(),
                at_ms: now_ms,
            };
            let response = Response::created(&charge.id, &charge.order, charge.amount);
            self.charges.push(charge);
            response
        };
        let Some(key) = request.key else { return response };
        let done = Entry::Done {
            fingerprint: request.fingerprint,
            response: response.clone(),
            created_ms: begun_ms,
        };
        match (self.variant, self.keys.get_mut(&key)) {
            (Variant::NoDedupe, _) => {}
            (Variant::CheckThenInsert, _) => {
                self.put(key, done);
            }
            (_, Some(entry)) => {
                if matches!(entry, Entry::InFlight { ticket, .. } if *ticket == id) {
                    *entry = done;
                }
            }
            (_, None) => {}
        }
        response
    }

    /// Drops a ticket whose processing died without charging: its key's
    /// reservation goes, so that a retry proceeds.
    pub fn abandon(&mut self, ticket: Ticket) {
        let Some(key) = &ticket.request.key else { return };
        if matches!(self.keys.get(key), Some(Entry::InFlight { ticket: id, .. }) if *id == ticket.id)
        {
            self.forget(key);
        }
    }

    fn in_flight(&self) -> Response {
        self.profile.in_flight()
    }

    fn mismatch(&self) -> Response {
        self.profile.mismatch()
    }
}

/// `value` as JSON text with every object's members sorted by name, so
/// that two bodies differing only in member order and whitespace read
/// alike.
fn canonical(value: &Value) -> String {
    fn sorted(value: &Value) -> Value {
        match value {
            Value::Object(members) => {
                let mut members: Vec<(&String, &Value)> = members.iter().collect();
                members.sort_by(|a, b| a.0.cmp(b.0));
                Value::Object(
                    members
                        .into_iter()
                        .map(|(name, value)| (name.clone(), sorted(value)))
                        .collect(),
                )
            }
            Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    sorted(value).to_string()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const KEY: &str = "order-7";

    fn request(key: Option<&str>, body: &str) -> ChargeRequest {
        ChargeRequest { key: key.map(str::to_string), body: body.as_bytes().to_vec() }
    }

    fn order(order: &str) -> String {
        format!(r#"{{"order": "{order}", "amount": 4200}}"#)
    }

    /// Every profile with every variant.
    fn providers() -> Vec<Provider> {
        let mut providers = Vec::new();
        for profile in Profile::ALL {
            for variant in Variant::ALL {
                providers.push(Provider::new(profile, variant));
            }
        }
        providers
    }

    fn proceed(provider: &mut Provider, request: &ChargeRequest, now_ms: u64) -> Ticket {
        match provider.begin(request, now_ms) {
            Begin::Proceed(ticket) => ticket,
            Begin::Done(response) => panic!("{:?} answered at once: {response:?}", provider),
        }
    }

    fn answered(provider: &mut Provider, request: &ChargeRequest, now_ms: u64) -> Response {
        match provider.begin(request, now_ms) {
            Begin::Done(response) => response,
            Begin::Proceed(ticket) => panic!("{:?} proceeded: {ticket:?}", provider),
        }
    }

    fn created(id: &str, order: &str) -> Response {
        let body = json!({ "id": id, "order": order, "amount": 4200 });
        Response { status: 201, body, replayed: false }
    }

    fn replay(response: &Response) -> Response {
        Response { replayed: true, ..response.clone() }
    }

    /// The error's type: the problem's, or Stripe's `error.type`.
    fn error_type(response: &Response) -> &str {
        let error = response.body.get("error").unwrap_or(&response.body);
        error["type"].as_str().unwrap_or_default()
    }

    fn error_code(response: &Response) -> &str {
        let error = response.body.get("error").unwrap_or(&response.body);
        error["code"].as_str().unwrap_or_default()
    }

    #[test]
    fn names_read_back() {
        for profile in Profile::ALL {
            assert_eq!(Profile::parse(profile.name()), Some(profile));
        }
        for variant in Variant::ALL {
            assert_eq!(Variant::parse(variant.name()), Some(variant));
        }
        assert_eq!(Variant::parse("check-then-insert"), Some(Variant::CheckThenInsert));
        assert_eq!(Profile::parse("paypal"), None);
        assert_eq!(Variant::parse("Correct"), None);
    }

    #[test]
    fn a_first_charge_is_created() {
        for mut provider in providers() {
            let ticket = proceed(&mut provider, &request(Some(KEY), &order("order-7")), 0);
            assert_eq!(provider.finish(ticket, 5), created("ch_1", "order-7"));
            let ticket = proceed(&mut provider, &request(Some("order-8"), &order("order-8")), 6);
            assert_eq!(provider.finish(ticket, 9), created("ch_2", "order-8"));
            let first = Charge {
                id: "ch_1".into(),
                order: "order-7".into(),
                amount: 4200,
                key: Some(KEY.into()),
                at_ms: 5,
            };
            assert_eq!(provider.charges().len(), 2);
            assert_eq!(provider.charges()[0], first);
        }
    }

    #[test]
    fn the_same_body_again_replays_the_response() {
        for mut provider in providers() {
            let ticket = proceed(&mut provider, &request(Some(KEY), &order("order-7")), 0);
            let first = provider.finish(ticket, 5);
            // The same JSON, its members in another order and spaced out.
            let same = request(Some(KEY), "{ \"amount\":4200,\n \"order\":\"order-7\" }");
            if provider.variant() == Variant::NoDedupe {
                let ticket = proceed(&mut provider, &same, 10);
                assert_eq!(provider.finish(ticket, 15), created("ch_2", "order-7"));
            } else {
                assert_eq!(answered(&mut provider, &same, 10), replay(&first));
                assert_eq!(provider.charges().len(), 1);
            }
        }
    }

    #[test]
    fn another_body_is_a_mismatch_unless_any_body_replays() {
        for mut provider in providers() {
            let ticket = proceed(&mut provider, &request(Some(KEY), &order("order-7")), 0);
            let first = provider.finish(ticket, 5);
            let other = request(Some(KEY), &order("order-8"));
            match provider.variant() {
                Variant::NoDedupe => {
                    let ticket = proceed(&mut provider, &other, 10);
                    assert_eq!(provider.finish(ticket, 15), created("ch_2", "order-8"));
                }
                Variant::ReplayAnyBody => {
                    // Order 8 is told it was charged, with order 7's charge.
                    assert_eq!(answered(&mut provider, &other, 10), replay(&first));
                    assert_eq!(provider.charges().len(), 1);
                }
                Variant::Correct | Variant::CheckThenInsert => {
                    let response = answered(&mut provider, &other, 10);
                    assert!(!response.replayed);
                    match provider.profile() {
                        Profile::Ietf => {
                            assert_eq!(response.status, 422);
                            assert_eq!(error_type(&response), "/problems/key-mismatch");
                            assert_eq!(response.body["status"], 422);
                        }
                        Profile::Stripe => {
                            assert_eq!(response.status, 400);
                            assert_eq!(error_type(&response), "idempotency_error");
                        }
                    }
                    assert_eq!(provider.charges().len(), 1);
                    // The key still replays its own body's response.
                    let same = request(Some(KEY), &order("order-7"));
                    assert_eq!(answered(&mut provider, &same, 20), replay(&first));
                }
            }
        }
    }

    #[test]
    fn a_request_while_the_first_is_in_flight_conflicts_unless_nothing_reserves() {
        for mut provider in providers() {
            let same = request(Some(KEY), &order("order-7"));
            let first = proceed(&mut provider, &same, 0);
            match provider.variant() {
                Variant::Correct | Variant::ReplayAnyBody => {
                    let response = answered(&mut provider, &same, 10);
                    assert_eq!(response.status, 409);
                    match provider.profile() {
                        Profile::Ietf => assert_eq!(error_type(&response), "/problems/conflict"),
                        Profile::Stripe => {
                            assert_eq!(error_type(&response), "idempotency_error");
                            assert_eq!(error_code(&response), "idempotency_key_in_use");
                        }
                    }
                    // Another body conflicts too: nothing is stored yet.
                    let other = request(Some(KEY), &order("order-8"));
                    assert_eq!(answered(&mut provider, &other, 11).status, 409);
                    let response = provider.finish(first, 20);
                    assert_eq!(answered(&mut provider, &same, 30), replay(&response));
                    assert_eq!(provider.charges().len(), 1);
                }
                Variant::NoDedupe | Variant::CheckThenInsert => {
                    // Both charge: the double charge the checkers must see.
                    let second = proceed(&mut provider, &same, 10);
                    assert_eq!(provider.finish(first, 20), created("ch_1", "order-7"));
                    let last = provider.finish(second, 25);
                    assert_eq!(last, created("ch_2", "order-7"));
                    let keys: Vec<_> = provider.charges().iter().map(|c| c.key.clone()).collect();
                    assert_eq!(keys, [Some(KEY.to_string()), Some(KEY.to_string())]);
                    if provider.variant() == Variant::CheckThenInsert {
                        // The last one stored wins.
                        assert_eq!(answered(&mut provider, &same, 30), replay(&last));
                    }
                }
            }
        }
    }

    #[test]
    fn requests_without_a_key_all_charge() {
        for mut provider in providers() {
            let keyless = request(None, &order("order-7"));
            let first = proceed(&mut provider, &keyless, 0);
            let second = proceed(&mut provider, &keyless, 1);
            provider.finish(first, 2);
            provider.finish(second, 3);
            assert_eq!(provider.charges().len(), 2);
            let ticket = proceed(&mut provider, &keyless, 4);
            assert_eq!(provider.finish(ticket, 5), created("ch_3", "order-7"));
        }
    }

    #[test]
    fn a_key_is_forgotten_after_its_retention() {
        for provider in providers() {
            let mut provider = provider.with_retention(1_000);
            let same = request(Some(KEY), &order("order-7"));
            let ticket = proceed(&mut provider, &same, 0);
            let first = provider.finish(ticket, 10);
            if provider.variant() != Variant::NoDedupe {
                assert_eq!(answered(&mut provider, &same, 999), replay(&first));
            }
            let ticket = proceed(&mut provider, &same, 1_000);
            assert_eq!(provider.finish(ticket, 1_010), created("ch_2", "order-7"));
            if provider.variant() != Variant::NoDedupe {
                // The new charge is the key's response now, kept from 1000.
                let response = answered(&mut provider, &same, 1_999);
                assert_eq!(response, replay(&created("ch_2", "order-7")));
            }
        }
    }

    #[test]
    fn a_reservation_expires_and_its_late_finish_stores_nothing() {
        for variant in [Variant::Correct, Variant::ReplayAnyBody] {
            let mut provider = Provider::new(Profile::Ietf, variant).with_retention(1_000);
            let same = request(Some(KEY), &order("order-7"));
            let stalled = proceed(&mut provider, &same, 0);
            assert_eq!(answered(&mut provider, &same, 999).status, 409);
            let retry = proceed(&mut provider, &same, 1_000);
            // The stalled request charges, but the key is the retry's now.
            assert_eq!(provider.finish(stalled, 1_100), created("ch_1", "order-7"));
            assert_eq!(answered(&mut provider, &same, 1_200).status, 409);
            let response = provider.finish(retry, 1_300);
            assert_eq!(response, created("ch_2", "order-7"));
            assert_eq!(answered(&mut provider, &same, 1_400), replay(&response));
        }
    }

    #[test]
    fn a_declined_card_is_402_and_replayed_as_402() {
        for mut provider in providers() {
            let declined =
                request(Some(KEY), r#"{"order": "order-7", "amount": 4200, "card": "declined"}"#);
            let ticket = proceed(&mut provider, &declined, 0);
            let response = provider.finish(ticket, 5);
            assert_eq!(response.status, 402);
            assert_eq!(error_code(&response), "card_declined");
            let kind = match provider.profile() {
                Profile::Ietf => "/problems/card-declined",
                Profile::Stripe => "card_error",
            };
            assert_eq!(error_type(&response), kind);
            assert!(provider.charges().is_empty());
            if provider.variant() == Variant::NoDedupe {
                let ticket = proceed(&mut provider, &declined, 10);
                assert_eq!(provider.finish(ticket, 15), response);
            } else {
                assert_eq!(answered(&mut provider, &declined, 10), replay(&response));
            }
            assert!(provider.charges().is_empty());
        }
    }

    #[test]
    fn an_abandoned_request_lets_a_retry_proceed() {
        for mut provider in providers() {
            let same = request(Some(KEY), &order("order-7"));
            let ticket = proceed(&mut provider, &same, 0);
            provider.abandon(ticket);
            let ticket = proceed(&mut provider, &same, 10);
            assert_eq!(provider.finish(ticket, 20), created("ch_1", "order-7"));
            assert_eq!(provider.charges().len(), 1);
        }
    }

    #[test]
    fn abandoning_an_expired_reservation_leaves_the_newer_one() {
        let mut provider = Provider::new(Profile::Stripe, Variant::Correct).with_retention(1_000);
        let same = request(Some(KEY), &order("order-7"));
        let stalled = proceed(&mut provider, &same, 0);
        let _retry = proceed(&mut provider, &same, 1_000);
        provider.abandon(stalled);
        assert_eq!(answered(&mut provider, &same, 1_001).status, 409);
    }

    #[test]
    fn bad_input_is_400_naming_the_problem_and_reserves_nothing() {
        let long = "k".repeat(MAX_KEY_CHARS + 1);
        let cases: [(Option<&str>, String, Invalid); 13] = [
            (None, order("order-7"), Invalid::MissingKey),
            (Some(""), order("order-7"), Invalid::EmptyKey),
            (Some(&long), order("order-7"), Invalid::LongKey),
            (Some(KEY), "{\"order\": ".into(), Invalid::NotJson),
            (Some(KEY), "\u{feff}not json".into(), Invalid::NotJson),
            (Some(KEY), "[\"order-7\", 4200]".into(), Invalid::NotObject),
            (Some(KEY), r#"{"amount": 4200}"#.into(), Invalid::Order),
            (Some(KEY), r#"{"order": 7, "amount": 4200}"#.into(), Invalid::Order),
            (Some(KEY), r#"{"order": "", "amount": 4200}"#.into(), Invalid::Order),
            (Some(KEY), r#"{"order": "order-7"}"#.into(), Invalid::Amount),
            (Some(KEY), r#"{"order": "order-7", "amount": 0}"#.into(), Invalid::Amount),
            (Some(KEY), r#"{"order": "order-7", "amount": -5}"#.into(), Invalid::Amount),
            (Some(KEY), r#"{"order": "order-7", "amount": 42.5}"#.into(), Invalid::Amount),
        ];
        for provider in providers() {
            let mut provider = provider.require_key(true);
            for (key, body, invalid) in &cases {
                let bad = request(*key, body);
                assert_eq!(provider.validate(&bad), Err(*invalid), "{body}");
                let response = answered(&mut provider, &bad, 0);
                assert_eq!(response, invalid.response(provider.profile()));
                assert_eq!(response.status, 400);
                let error = match provider.profile() {
                    Profile::Ietf => {
                        assert_eq!(error_type(&response), "/problems/bad-request");
                        assert_eq!(response.body["title"], invalid.message());
                        &response.body
                    }
                    Profile::Stripe => {
                        assert_eq!(error_type(&response), "invalid_request_error");
                        assert_eq!(response.body["error"]["message"], invalid.message());
                        &response.body["error"]
                    }
                };
                assert_eq!(error["param"], invalid.param());
            }
            // Nothing was reserved or charged: the key proceeds.
            let ticket = proceed(&mut provider, &request(Some(KEY), &order("order-7")), 1);
            assert_eq!(provider.finish(ticket, 2), created("ch_1", "order-7"));
        }
    }

    #[test]
    fn a_key_of_255_characters_is_accepted_and_a_missing_one_unless_required() {
        let mut provider = Provider::new(Profile::Ietf, Variant::Correct);
        // 255 characters, 510 bytes: the limit counts characters.
        let key = "é".repeat(MAX_KEY_CHARS);
        assert!(provider.validate(&request(Some(&key), &order("order-7"))).is_ok());
        proceed(&mut provider, &request(None, &order("order-7")), 0);
        let valid = provider.validate(&request(None, &order("order-7")));
        assert_eq!(valid.map(|valid| (valid.order, valid.amount)), Ok(("order-7".into(), 4200)));
    }

    #[test]
    fn the_fingerprint_ignores_member_order_at_every_depth() {
        let a: Value =
            serde_json::from_str(r#"{"b": {"y": 1, "x": [2, {"q": 1, "p": 0}]}, "a": 1}"#).unwrap();
        let b: Value =
            serde_json::from_str(r#"{"a": 1, "b": {"x": [2, {"p": 0, "q": 1}], "y": 1}}"#).unwrap();
        assert_eq!(canonical(&a), canonical(&b));
        let c: Value =
            serde_json::from_str(r#"{"a": 1, "b": {"x": [{"p": 0, "q": 1}, 2], "y": 1}}"#).unwrap();
        assert_ne!(canonical(&a), canonical(&c));
    }

    /// One step of a run of requests over a few keys.
    #[derive(Debug, Clone)]
    enum Step {
        /// A request with key `key`; `other` changes its order, `declined`
        /// its card.
        Begin {
            key: u8,
            other: bool,
            declined: bool,
        },
        /// Finishes the ticket at this index (modulo the tickets held).
        Finish(usize),
        Abandon(usize),
        Wait(u64),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => (0u8..3, prop::bool::weighted(0.2), prop::bool::weighted(0.2))
                .prop_map(|(key, other, declined)| Step::Begin { key, other, declined }),
            3 => any::<usize>().prop_map(Step::Finish),
            1 => any::<usize>().prop_map(Step::Abandon),
            2 => (0u64..400).prop_map(Step::Wait),
        ]
    }

    const RETENTION_MS: u64 = 1_000;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Whatever the interleaving, a correct provider makes a key's
        /// second charge only once the first one's key has expired: its
        /// request began a whole retention after the first's.
        #[test]
        fn a_correct_provider_charges_a_key_once_within_retention(
            stripe in any::<bool>(),
            steps in prop::collection::vec(step(), 1..60),
        ) {
            let profile = if stripe { Profile::Stripe } else { Profile::Ietf };
            let mut provider =
                Provider::new(profile, Variant::Correct).with_retention(RETENTION_MS);
            let mut now_ms = 0;
            let mut tickets: Vec<Ticket> = Vec::new();
            // Each charge's key and when its request began.
            let mut begun: Vec<(String, u64)> = Vec::new();
            for step in steps {
                match step {
                    Step::Begin { key, other, declined } => {
                        let order = if other { format!("order-{key}-b") } else { format!("order-{key}") };
                        let card = if declined { r#", "card": "declined""# } else { "" };
                        let body = format!(r#"{{"order": "{order}", "amount": 10{card}}}"#);
                        let key = format!("key-{key}");
                        match provider.begin(&request(Some(&key), &body), now_ms) {
                            Begin::Proceed(ticket) => tickets.push(ticket),
                            Begin::Done(response) if response.status == 201 => {
                                // A replay names a charge of this key and order.
                                prop_assert!(response.replayed);
                                let id = response.body["id"].as_str().unwrap_or_default();
                                let charge = provider.charges().iter().find(|c| c.id == id);
                                let named = charge.is_some_and(|c| {
                                    c.key.as_deref() == Some(key.as_str()) && c.order == order
                                });
                                prop_assert!(named, "{response:?} names no charge of {key}");
                            }
                            Begin::Done(_) => {}
                        }
                    }
                    Step::Finish(index) if !tickets.is_empty() => {
                        let ticket = tickets.remove(index % tickets.len());
                        let start = (ticket.request.key.clone().unwrap_or_default(), ticket.begun_ms);
                        if provider.finish(ticket, now_ms).status == 201 {
                            begun.push(start);
                        }
                    }
                    Step::Abandon(index) if !tickets.is_empty() => {
                        provider.abandon(tickets.remove(index % tickets.len()));
                    }
                    Step::Wait(ms) => now_ms += ms,
                    Step::Finish(_) | Step::Abandon(_) => {}
                }
            }
            prop_assert_eq!(provider.charges().len(), begun.len());
            for (i, (key, first)) in begun.iter().enumerate() {
                for (other, second) in &begun[i + 1..] {
                    if key == other {
                        prop_assert!(first.abs_diff(*second) >= RETENTION_MS,
                            "{key} charged twice, its requests begun at {first} and {second}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_response_names_its_charge_or_why_it_was_refused() {
        for profile in Profile::ALL {
            let mut provider = Provider::new(profile, Variant::Correct);
            let first = ChargeRequest {
                key: Some("k".into()),
                body: br#"{"order":"o-1","amount":5}"#.to_vec(),
            };
            let Begin::Proceed(ticket) = provider.begin(&first, 0) else {
                panic!("a first request proceeds")
            };
            let Begin::Done(busy) = provider.begin(&first, 1) else { panic!("a second waits") };
            assert_eq!((busy.charge(), busy.refusal()), (None, Some("in-flight")));
            let made = provider.finish(ticket, 2);
            assert_eq!((made.charge(), made.refusal()), (Some("ch_1"), None));
            let other = ChargeRequest {
                key: Some("k".into()),
                body: br#"{"order":"o-2","amount":5}"#.to_vec(),
            };
            let Begin::Done(mismatch) = provider.begin(&other, 3) else {
                panic!("a mismatch is answered at once")
            };
            assert_eq!(mismatch.refusal(), Some("key-mismatch"), "{profile:?}");
            let bad = ChargeRequest { key: Some("k2".into()), body: b"not json".to_vec() };
            let Begin::Done(bad) = provider.begin(&bad, 4) else {
                panic!("bad input is answered at once")
            };
            assert_eq!(bad.refusal(), Some("bad-request"), "{profile:?}");
        }
    }
}
