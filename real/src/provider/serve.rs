//! The real provider's one route, `POST /v1/charges`: validation and every
//! answer come from the pure provider (`lockcheck_workloads::provider`),
//! the keys from PostgreSQL ([`Store`]), as each [`Variant`] keeps them.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::header::{HeaderValue, CONTENT_TYPE};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use lockcheck_workloads::provider::{ChargeRequest, Profile, Provider, Response, Valid, Variant};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::keys::{Keep, Reservation, Store};

/// The request header that carries a key, and the response header that
/// marks a replay (Stripe's name).
pub(super) const KEY_HEADER: &str = "idempotency-key";
pub(super) const REPLAYED_HEADER: &str = "idempotent-replayed";

/// How long charging a card takes: `normal` (uniform, ms), except one
/// charge in `slow_one_in` (never if 0), which takes `slow`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Delays {
    pub(super) normal: (u64, u64),
    pub(super) slow_one_in: u64,
    pub(super) slow: (u64, u64),
}

/// What every request of one server shares.
#[derive(Debug)]
pub(super) struct Service {
    /// The pure provider, for its validation only: its keys live in
    /// `store`.
    pure: Provider,
    variant: Variant,
    retention_ms: i64,
    store: Store,
    delays: Delays,
    rng: Mutex<SmallRng>,
}

impl Service {
    pub(super) fn new(
        pure: Provider,
        retention_ms: u64,
        store: Store,
        delays: Delays,
        seed: u64,
    ) -> Service {
        Service {
            variant: pure.variant(),
            pure,
            // Past bigint's milliseconds no key is ever forgotten anyway.
            retention_ms: i64::try_from(retention_ms).unwrap_or(i64::MAX),
            store,
            delays,
            rng: Mutex::new(SmallRng::seed_from_u64(seed)),
        }
    }

    fn profile(&self) -> Profile {
        self.pure.profile()
    }

    /// The router: the one route, with this service as its state.
    pub(super) fn router(self: Arc<Service>) -> Router {
        Router::new().route("/v1/charges", post(charge_route)).with_state(self)
    }

    /// The answer to a charge request.
    async fn answer(&self, request: ChargeRequest) -> Response {
        let valid = match self.pure.validate(&request) {
            Ok(valid) => valid,
            Err(invalid) => return invalid.response(self.profile()),
        };
        let key = valid.key.clone();
        match (key, self.variant) {
            (Some(key), Variant::Correct | Variant::ReplayAnyBody) => {
                self.reserved(&key, &valid).await
            }
            (Some(key), Variant::CheckThenInsert) => self.checked(&key, &valid).await,
            // No key, or keys ignored: nothing can dedupe it.
            _ => self.charged(&valid, Keep::Nothing).await,
        }
    }

    /// `correct` and `replay-any-body`: the key reserved first, its
    /// response stored with the charge.
    async fn reserved(&self, key: &str, valid: &Valid) -> Response {
        let reservation = self.store.reserve(key, valid.fingerprint(), self.retention_ms).await;
        match reservation {
            Err(_) => self.profile().unavailable(),
            Ok(Reservation::InFlight) => self.profile().in_flight(),
            Ok(Reservation::Done { fingerprint, response }) => {
                if fingerprint == valid.fingerprint() || self.variant == Variant::ReplayAnyBody {
                    response.replay()
                } else {
                    self.profile().mismatch()
                }
            }
            Ok(Reservation::Reserved(ticket)) => {
                self.pause().await;
                let keep = Keep::Reservation { key, ticket };
                match self.store.charge(self.profile(), valid, keep).await {
                    Ok(response) => response,
                    Err(_) => {
                        // Nothing was charged: free the key for a retry. If
                        // that fails too, the key stays in flight until its
                        // retention ends.
                        let _ = self.store.release(key, ticket).await;
                        self.profile().unavailable()
                    }
                }
            }
        }
    }

    /// `check-then-insert`: a look-up among finished keys, the charge, then
    /// the key stored, with nothing to stop a second request in between.
    async fn checked(&self, key: &str, valid: &Valid) -> Response {
        match self.store.look_up(key, self.retention_ms).await {
            Err(_) => self.profile().unavailable(),
            Ok((Some((fingerprint, response)), _)) => {
                if fingerprint == valid.fingerprint() {
                    response.replay()
                } else {
                    self.profile().mismatch()
                }
            }
            Ok((None, begun)) => self.charged(valid, Keep::Append { key, begun }).await,
        }
    }

    /// Charges after the charge's delay.
    async fn charged(&self, valid: &Valid, keep: Keep<'_>) -> Response {
        self.pause().await;
        match self.store.charge(self.profile(), valid, keep).await {
            Ok(response) => response,
            Err(_) => self.profile().unavailable(),
        }
    }

    /// Waits as long as charging a card takes.
    async fn pause(&self) {
        let ms = match self.rng.lock() {
            Ok(mut rng) => charge_ms(&mut rng, self.delays),
            Err(_) => self.delays.normal.0,
        };
        if ms > 0 {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
    }
}

/// One charge's delay, drawn as the simulator's provider draws it.
fn charge_ms(rng: &mut SmallRng, delays: Delays) -> u64 {
    let slow = delays.slow_one_in > 0 && rng.gen_range(1..=delays.slow_one_in) == 1;
    let (low, high) = if slow { delays.slow } else { delays.normal };
    rng.gen_range(low.min(high)..=high.max(low))
}

/// `POST /v1/charges`. The answer is worked out in a task of its own, so
/// that a client that hangs up does not cut a charge off midway (its key
/// would stay in flight), and a panic ends that task, not the server: it
/// is answered 500.
async fn charge_route(
    State(service): State<Arc<Service>>,
    headers: HeaderMap,
    body: Bytes,
) -> axum::response::Response {
    // A header that is not UTF-8 is read as the pure provider would read
    // its text: lossily, still a key (or an empty one, refused).
    let key =
        headers.get(KEY_HEADER).map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned());
    let request = ChargeRequest { key, body: body.to_vec() };
    let profile = service.profile();
    let answered = tokio::spawn(async move { service.answer(request).await }).await;
    http_response(profile, &joined(profile, answered))
}

/// A request's task's answer, or the 500 of one that panicked.
fn joined(profile: Profile, answered: Result<Response, tokio::task::JoinError>) -> Response {
    answered.unwrap_or_else(|_| profile.internal())
}

/// `response` over HTTP: its status, its body as JSON (a problem's media
/// type for the IETF profile's errors), `Idempotent-Replayed: true` on a
/// replay.
fn http_response(profile: Profile, response: &Response) -> axum::response::Response {
    let status = StatusCode::from_u16(response.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let problem = profile == Profile::Ietf && !status.is_success();
    let media = if problem { "application/problem+json" } else { "application/json" };
    let mut http = axum::response::Response::new(axum::body::Body::from(response.body.to_string()));
    *http.status_mut() = status;
    http.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(media));
    if response.replayed {
        http.headers_mut().insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
    }
    http
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_are_drawn_within_their_bounds_and_slow_ones_when_asked() {
        let mut rng = SmallRng::seed_from_u64(7);
        let delays = Delays { normal: (5, 40), slow_one_in: 2, slow: (300, 600) };
        let drawn: Vec<u64> = (0..200).map(|_| charge_ms(&mut rng, delays)).collect();
        assert!(drawn.iter().all(|ms| (5..=40).contains(ms) || (300..=600).contains(ms)));
        assert!(drawn.iter().any(|ms| *ms >= 300));
        let never = Delays { slow_one_in: 0, normal: (0, 0), ..delays };
        assert!((0..50).all(|_| charge_ms(&mut rng, never) == 0));
        // Bounds given backwards still draw between them.
        let backwards = Delays { normal: (9, 3), ..never };
        assert!((0..50).all(|_| (3..=9).contains(&charge_ms(&mut rng, backwards))));
    }

    #[test]
    fn a_replay_is_marked_and_an_ietf_error_is_a_problem() {
        let created = Response::created("ch_1", "o", 5).replay();
        let http = http_response(Profile::Ietf, &created);
        assert_eq!(http.status(), StatusCode::CREATED);
        assert_eq!(http.headers()[REPLAYED_HEADER], "true");
        assert_eq!(http.headers()[CONTENT_TYPE], "application/json");
        let http = http_response(Profile::Ietf, &Profile::Ietf.in_flight());
        assert_eq!(http.headers()[CONTENT_TYPE], "application/problem+json");
        assert!(http.headers().get(REPLAYED_HEADER).is_none());
        let http = http_response(Profile::Stripe, &Profile::Stripe.in_flight());
        assert_eq!(http.headers()[CONTENT_TYPE], "application/json");
    }

    #[tokio::test]
    async fn a_panicking_task_is_answered_500_with_the_profiles_body() {
        let answered = tokio::spawn(async { panic!("a handler's bug") }).await;
        let response = joined(Profile::Stripe, answered);
        assert_eq!(response.status, 500);
        assert_eq!(response.body["error"]["type"], "api_error");
    }
}
