//! The real payment provider over HTTP, against the machine's PostgreSQL
//! (`LOCKCHECK_POSTGRES_URL`, default
//! `postgres://postgres@127.0.0.1:5432/test`; a database that cannot be
//! reached fails the test, saying so): every answer is the pure provider's
//! (`lockcheck_workloads::provider`), keys are kept in the database, and
//! each broken variant's mistake shows over HTTP.
//!
//! Requests are held in flight without timing: the test locks the
//! provider's charges table, so a request that reserved its key waits on
//! the lock until the test lets it go, and the test watches the database
//! (the key's row, the waiting locks) to know where each request is. (The
//! provider opens its first database sessions, statements prepared,
//! before it serves: a session prepared under the lock would wait on it
//! before its request began. So a held test sends at most four requests
//! at once.)
//! Every test has tables of its own (a prefix with the process id and a
//! counter), dropped at its end.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use lockcheck_real::{ProviderClient, ProviderConfig, ProviderServer, RealError};
use lockcheck_workloads::payments::{ChargeOrder, Charged};
use lockcheck_workloads::provider::{
    Begin, ChargeRequest, Invalid, Profile, Provider, Response, Variant, MAX_KEY_CHARS,
};
use lockcheck_workloads::Outcome;
use serde_json::{json, Value};

fn postgres_url() -> String {
    std::env::var("LOCKCHECK_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string())
}

/// How long the test waits for what it watches in the database: far past
/// what a loaded machine needs, so that only a real hang fails.
const PATIENCE: Duration = Duration::from_secs(30);

/// A table prefix no other test, or test process, uses.
fn unique_prefix() -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("lockcheck_provider_t{}_{n}", std::process::id())
}

async fn connect() -> tokio_postgres::Client {
    let url = postgres_url();
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|error| panic!("PostgreSQL at {url} cannot be reached: {error}"));
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// An answer over HTTP.
#[derive(Debug)]
struct Reply {
    status: u16,
    body: Value,
    replayed: bool,
}

impl Reply {
    /// As the pure provider's response, to compare with it.
    fn response(&self) -> Response {
        Response { status: self.status, body: self.body.clone(), replayed: self.replayed }
    }
}

/// A provider of the test's own, its tables, and a way to look at them.
struct Fixture {
    server: ProviderServer,
    url: String,
    prefix: String,
    profile: Profile,
    db: tokio_postgres::Client,
    http: reqwest::Client,
}

impl Fixture {
    async fn start(profile: Profile, variant: Variant) -> Fixture {
        Fixture::start_with(profile, variant, |_| {}).await
    }

    /// A provider with no charge delay, as `tweak` changes it.
    async fn start_with(
        profile: Profile,
        variant: Variant,
        tweak: impl FnOnce(&mut ProviderConfig),
    ) -> Fixture {
        let mut config = ProviderConfig::new(&postgres_url(), profile, variant).without_delays();
        config.table_prefix = unique_prefix();
        tweak(&mut config);
        let prefix = config.table_prefix.clone();
        let server = ProviderServer::start(config)
            .unwrap_or_else(|error| panic!("the provider did not start: {error}"));
        let url = server.url();
        let http = reqwest::Client::builder().no_proxy().build().unwrap();
        Fixture { server, url, prefix, profile, db: connect().await, http }
    }

    fn charges(&self) -> String {
        format!("{}_charges", self.prefix)
    }

    async fn post(&self, key: Option<&str>, body: &str) -> Reply {
        post(&self.http, &self.url, key, body).await
    }

    /// How many charges the provider made, and with which keys.
    async fn charged_keys(&self) -> Vec<Option<String>> {
        let rows = self
            .db
            .query(&format!("SELECT key FROM {} ORDER BY id", self.charges()), &[])
            .await
            .unwrap();
        rows.iter().map(|row| row.get(0)).collect()
    }

    /// The state of `key`'s row, if it has one.
    async fn key_state(&self, key: &str) -> Option<String> {
        let query = format!("SELECT state FROM {}_keys WHERE key = $1", self.prefix);
        self.db.query_opt(&query, &[&key]).await.unwrap().map(|row| row.get(0))
    }

    /// Stops the server and drops its tables.
    async fn close(self) {
        let Fixture { server, prefix, db, .. } = self;
        drop(server);
        db.batch_execute(&format!(
            "DROP TABLE IF EXISTS {prefix}_keys, {prefix}_loose_keys, {prefix}_charges; \
             DROP SEQUENCE IF EXISTS {prefix}_tickets;"
        ))
        .await
        .unwrap();
    }
}

async fn post(http: &reqwest::Client, url: &str, key: Option<&str>, body: &str) -> Reply {
    let mut request = http
        .post(format!("{url}/v1/charges"))
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    let reply = tokio::time::timeout(PATIENCE, request.send())
        .await
        .expect("the provider answers")
        .expect("the provider is reachable");
    let status = reply.status().as_u16();
    let replayed = match reply.headers().get("idempotent-replayed") {
        None => false,
        Some(value) => {
            assert_eq!(value, "true", "a replay is marked true");
            true
        }
    };
    let body = reply.bytes().await.unwrap();
    let body = serde_json::from_slice(&body).unwrap_or_else(|error| {
        panic!(
            "status {status}: the body is not JSON ({error}): {}",
            String::from_utf8_lossy(&body)
        )
    });
    Reply { status, body, replayed }
}

/// A charge body.
fn order(order: &str, amount: u64) -> String {
    json!({ "order": order, "amount": amount }).to_string()
}

/// Waits until `check` holds, for at most [`PATIENCE`].
async fn wait_until<F: std::future::Future<Output = bool>>(
    what: &str,
    mut check: impl FnMut() -> F,
) {
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < PATIENCE, "waited {PATIENCE:?} for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Holds the provider's charges table locked until dropped (rolled back):
/// a request that reaches its charge waits there.
struct Hold {
    db: tokio_postgres::Client,
}

impl Hold {
    async fn charges(fixture: &Fixture) -> Hold {
        let db = connect().await;
        db.batch_execute(&format!("BEGIN; LOCK TABLE {} IN EXCLUSIVE MODE;", fixture.charges()))
            .await
            .unwrap();
        Hold { db }
    }

    /// How many requests wait for the lock.
    async fn waiting(&self, fixture: &Fixture) -> i64 {
        let query = "SELECT count(*) FROM pg_locks WHERE relation = $1::text::regclass \
                     AND NOT granted";
        self.db.query_one(query, &[&fixture.charges()]).await.unwrap().get(0)
    }

    async fn release(self) {
        self.db.batch_execute("ROLLBACK").await.unwrap();
    }
}

// ---- the correct provider ----

#[tokio::test]
async fn a_first_charge_is_created_and_the_same_request_replays_it() {
    for profile in Profile::ALL {
        let fixture = Fixture::start(profile, Variant::Correct).await;
        let first = fixture.post(Some("key-1"), &order("order-1", 4200)).await;
        assert_eq!(first.response(), Response::created("ch_1", "order-1", 4200), "{profile:?}");
        // The same JSON, its members in another order and spaced out.
        let same = r#"{ "amount": 4200,  "order": "order-1" }"#;
        let again = fixture.post(Some("key-1"), same).await;
        assert_eq!(again.response(), first.response().replay(), "{profile:?}");
        assert_eq!(fixture.charged_keys().await, [Some("key-1".to_string())]);
        assert_eq!(fixture.key_state("key-1").await.as_deref(), Some("done"));
        fixture.close().await;
    }
}

#[tokio::test]
async fn the_key_with_another_body_gets_the_profiles_mismatch() {
    for profile in Profile::ALL {
        let fixture = Fixture::start(profile, Variant::Correct).await;
        let first = fixture.post(Some("key-1"), &order("order-1", 4200)).await;
        let other = fixture.post(Some("key-1"), &order("order-1", 4300)).await;
        assert_eq!(other.response(), profile.mismatch());
        let status = match profile {
            Profile::Ietf => 422,
            Profile::Stripe => 400,
        };
        assert_eq!(other.status, status);
        // The key still replays its own body's charge.
        let same = fixture.post(Some("key-1"), &order("order-1", 4200)).await;
        assert_eq!(same.response(), first.response().replay());
        assert_eq!(fixture.charged_keys().await.len(), 1);
        fixture.close().await;
    }
}

#[tokio::test]
async fn a_second_request_while_the_first_is_in_flight_gets_409() {
    for profile in Profile::ALL {
        let fixture = Fixture::start(profile, Variant::Correct).await;
        let hold = Hold::charges(&fixture).await;
        let (http, url) = (fixture.http.clone(), fixture.url.clone());
        let first =
            tokio::spawn(
                async move { post(&http, &url, Some("key-1"), &order("order-1", 4200)).await },
            );
        wait_until("the first request's reservation", || async {
            fixture.key_state("key-1").await.as_deref() == Some("in-flight")
        })
        .await;
        let second = fixture.post(Some("key-1"), &order("order-1", 4200)).await;
        assert_eq!(second.response(), profile.in_flight(), "{profile:?}");
        assert_eq!(second.status, 409);
        // Another body too: nothing is stored to compare it with yet.
        let other = fixture.post(Some("key-1"), &order("order-2", 1)).await;
        assert_eq!(other.response(), profile.in_flight());
        assert!(!first.is_finished(), "the first request waits on the held charges table");
        hold.release().await;
        let first = first.await.unwrap();
        assert_eq!(first.response(), Response::created("ch_1", "order-1", 4200));
        let third = fixture.post(Some("key-1"), &order("order-1", 4200)).await;
        assert_eq!(third.response(), first.response().replay());
        assert_eq!(fixture.charged_keys().await.len(), 1);
        fixture.close().await;
    }
}

#[tokio::test]
async fn a_declined_card_is_402_and_replayed() {
    for profile in Profile::ALL {
        let fixture = Fixture::start(profile, Variant::Correct).await;
        let declined = r#"{"order": "order-1", "amount": 4200, "card": "declined"}"#;
        let first = fixture.post(Some("key-1"), declined).await;
        assert_eq!(first.response(), profile.declined(), "{profile:?}");
        assert_eq!(first.status, 402);
        let again = fixture.post(Some("key-1"), declined).await;
        assert_eq!(again.response(), profile.declined().replay());
        assert!(fixture.charged_keys().await.is_empty(), "a declined card is no charge");
        fixture.close().await;
    }
}

#[tokio::test]
async fn a_key_past_its_retention_is_charged_anew() {
    for profile in Profile::ALL {
        let fixture =
            Fixture::start_with(profile, Variant::Correct, |c| c.retention_ms = 200).await;
        let first = fixture.post(Some("key-1"), &order("order-1", 4200)).await;
        assert_eq!(first.response(), Response::created("ch_1", "order-1", 4200));
        // Past the retention on any machine: the wait is a floor, not a bound.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let later = fixture.post(Some("key-1"), &order("order-1", 4200)).await;
        assert_eq!(later.response(), Response::created("ch_2", "order-1", 4200), "{profile:?}");
        assert_eq!(fixture.charged_keys().await.len(), 2);
        fixture.close().await;
    }
}

#[tokio::test]
async fn a_failed_charge_releases_the_key_and_answers_503() {
    for profile in Profile::ALL {
        let fixture = Fixture::start(profile, Variant::Correct).await;
        let charges = fixture.charges();
        let refuse = format!("ALTER TABLE {charges} ADD CONSTRAINT small CHECK (amount < 100)");
        fixture.db.batch_execute(&refuse).await.unwrap();
        let failed = fixture.post(Some("key-1"), &order("order-1", 4200)).await;
        assert_eq!(failed.response(), profile.unavailable(), "{profile:?}");
        assert_eq!(fixture.key_state("key-1").await, None, "the reservation is released");
        // The client reads a 5xx as unknown: the provider may have charged.
        let mut client = ProviderClient::new(&fixture.url, PATIENCE);
        let charge = ChargeOrder {
            order: "order-1".into(),
            amount: 4200,
            idempotency_key: Some("key-1".into()),
            fence: None,
        };
        assert_eq!(client.charge(&charge).await, Outcome::Info("http-503".into()));
        let allow = format!("ALTER TABLE {charges} DROP CONSTRAINT small");
        fixture.db.batch_execute(&allow).await.unwrap();
        let retry = fixture.post(Some("key-1"), &order("order-1", 4200)).await;
        assert_eq!((retry.status, retry.replayed), (201, false));
        assert_eq!(fixture.charged_keys().await.len(), 1);
        fixture.close().await;
    }
}

// ---- bad input: each case is 400 with the profile's body, never a 500 ----

/// Posts `body` with `key` to a provider of each profile (requiring keys
/// if `require_key`): answered as the pure provider answers `invalid`, and
/// nothing reserved or charged.
async fn refused_as(key: Option<&str>, body: &str, invalid: Invalid, require_key: bool) {
    for profile in Profile::ALL {
        let fixture =
            Fixture::start_with(profile, Variant::Correct, |c| c.require_key = require_key).await;
        let reply = fixture.post(key, body).await;
        assert_eq!(reply.status, 400, "{profile:?}: {:?}", reply.body);
        assert_eq!(reply.response(), invalid.response(profile), "{profile:?}");
        assert!(fixture.charged_keys().await.is_empty());
        if let Some(key) = key {
            assert_eq!(fixture.key_state(key).await, None, "bad input reserves nothing");
        }
        fixture.close().await;
    }
}

#[tokio::test]
async fn a_missing_key_is_refused_when_keys_are_required() {
    refused_as(None, &order("order-1", 4200), Invalid::MissingKey, true).await;
}

#[tokio::test]
async fn an_empty_key_is_refused() {
    refused_as(Some(""), &order("order-1", 4200), Invalid::EmptyKey, false).await;
}

#[tokio::test]
async fn a_key_of_256_characters_is_refused() {
    let key = "k".repeat(MAX_KEY_CHARS + 1);
    refused_as(Some(&key), &order("order-1", 4200), Invalid::LongKey, false).await;
}

#[tokio::test]
async fn a_body_that_is_not_json_is_refused() {
    refused_as(Some("key-1"), "{\"order\": ", Invalid::NotJson, false).await;
}

#[tokio::test]
async fn a_json_body_that_is_not_an_object_is_refused() {
    refused_as(Some("key-1"), r#"["order-1", 4200]"#, Invalid::NotObject, false).await;
}

#[tokio::test]
async fn an_empty_order_is_refused() {
    refused_as(Some("key-1"), r#"{"order": "", "amount": 4200}"#, Invalid::Order, false).await;
}

#[tokio::test]
async fn an_order_that_is_not_a_string_is_refused() {
    refused_as(Some("key-1"), r#"{"order": 7, "amount": 4200}"#, Invalid::Order, false).await;
}

#[tokio::test]
async fn a_zero_amount_is_refused() {
    refused_as(Some("key-1"), r#"{"order": "order-1", "amount": 0}"#, Invalid::Amount, false).await;
}

#[tokio::test]
async fn a_fractional_amount_is_refused() {
    let body = r#"{"order": "order-1", "amount": 42.5}"#;
    refused_as(Some("key-1"), body, Invalid::Amount, false).await;
}

#[tokio::test]
async fn a_key_of_255_characters_is_accepted() {
    // 255 characters, 510 bytes: the limit counts characters.
    let key = "é".repeat(MAX_KEY_CHARS);
    for profile in Profile::ALL {
        let fixture = Fixture::start(profile, Variant::Correct).await;
        let reply = fixture.post(Some(&key), &order("order-1", 4200)).await;
        assert_eq!(reply.response(), Response::created("ch_1", "order-1", 4200));
        assert_eq!(fixture.key_state(&key).await.as_deref(), Some("done"));
        fixture.close().await;
    }
}

#[tokio::test]
async fn a_request_without_a_key_is_charged_unless_keys_are_required() {
    for profile in Profile::ALL {
        let fixture = Fixture::start(profile, Variant::Correct).await;
        let first = fixture.post(None, &order("order-1", 4200)).await;
        let second = fixture.post(None, &order("order-1", 4200)).await;
        assert_eq!(first.response(), Response::created("ch_1", "order-1", 4200));
        assert_eq!(second.response(), Response::created("ch_2", "order-1", 4200));
        fixture.close().await;
    }
}

#[tokio::test]
async fn an_amount_past_bigint_is_charged_as_the_pure_provider_charges_it() {
    let fixture = Fixture::start(Profile::Stripe, Variant::Correct).await;
    let reply = fixture.post(Some("key-1"), &order("order-1", u64::MAX)).await;
    assert_eq!(reply.response(), Response::created("ch_1", "order-1", u64::MAX));
    fixture.close().await;
}

// ---- the broken variants, each showing its mistake ----

#[tokio::test]
async fn no_dedupe_charges_twice_for_one_key() {
    for profile in Profile::ALL {
        let fixture = Fixture::start(profile, Variant::NoDedupe).await;
        let first = fixture.post(Some("key-1"), &order("order-1", 4200)).await;
        let second = fixture.post(Some("key-1"), &order("order-1", 4200)).await;
        assert_eq!(first.response(), Response::created("ch_1", "order-1", 4200));
        assert_eq!(second.response(), Response::created("ch_2", "order-1", 4200));
        let key = Some("key-1".to_string());
        assert_eq!(fixture.charged_keys().await, [key.clone(), key]);
        fixture.close().await;
    }
}

#[tokio::test]
async fn replay_any_body_answers_another_body_with_the_first_charge() {
    for profile in Profile::ALL {
        let fixture = Fixture::start(profile, Variant::ReplayAnyBody).await;
        let first = fixture.post(Some("key-1"), &order("order-1", 4200)).await;
        let other = fixture.post(Some("key-1"), &order("order-2", 99)).await;
        // Order 2 is told it was charged, with order 1's charge.
        assert_eq!(other.response(), first.response().replay(), "{profile:?}");
        assert_eq!(other.body["order"], "order-1");
        assert_eq!(fixture.charged_keys().await.len(), 1);
        fixture.close().await;
    }
}

#[tokio::test]
async fn check_then_insert_charges_twice_for_two_concurrent_requests_with_one_key() {
    for profile in Profile::ALL {
        let fixture = Fixture::start(profile, Variant::CheckThenInsert).await;
        let hold = Hold::charges(&fixture).await;
        let mut requests = Vec::new();
        for _ in 0..2 {
            let (http, url) = (fixture.http.clone(), fixture.url.clone());
            requests.push(tokio::spawn(async move {
                post(&http, &url, Some("key-1"), &order("order-1", 4200)).await
            }));
        }
        // Both looked the key up, found nothing, and wait to charge.
        wait_until("both requests at their charge", || async { hold.waiting(&fixture).await == 2 })
            .await;
        hold.release().await;
        let mut ids = Vec::new();
        for request in requests {
            let reply = request.await.unwrap();
            assert_eq!((reply.status, reply.replayed), (201, false), "{profile:?}");
            ids.push(reply.body["id"].as_str().unwrap().to_string());
        }
        ids.sort();
        assert_eq!(ids, ["ch_1", "ch_2"]);
        assert_eq!(fixture.charged_keys().await.len(), 2, "one key, two charges");
        // Afterwards it does dedupe: the last one stored is replayed.
        let third = fixture.post(Some("key-1"), &order("order-1", 4200)).await;
        assert!(third.replayed && third.status == 201);
        fixture.close().await;
    }
}

#[tokio::test]
async fn the_correct_provider_charges_once_for_two_concurrent_requests_with_one_key() {
    let fixture = Fixture::start(Profile::Ietf, Variant::Correct).await;
    let hold = Hold::charges(&fixture).await;
    let mut requests = Vec::new();
    for _ in 0..2 {
        let (http, url) = (fixture.http.clone(), fixture.url.clone());
        requests.push(tokio::spawn(async move {
            post(&http, &url, Some("key-1"), &order("order-1", 4200)).await
        }));
    }
    // One of them reserved the key and waits to charge; the other is
    // answered at once, while the charge is held.
    wait_until("one request at its charge", || async { hold.waiting(&fixture).await == 1 }).await;
    wait_until("the other request's answer", || async {
        requests.iter().any(|request| request.is_finished())
    })
    .await;
    hold.release().await;
    let mut statuses = Vec::new();
    for request in requests {
        statuses.push(request.await.unwrap().status);
    }
    statuses.sort();
    assert_eq!(statuses, [201, 409]);
    assert_eq!(fixture.charged_keys().await.len(), 1);
    fixture.close().await;
}

// ---- the model: the same sequence, the same answers ----

#[tokio::test]
async fn the_server_answers_a_sequence_as_the_pure_provider_does() {
    let declined = r#"{"order": "order-4", "amount": 10, "card": "declined"}"#;
    let steps: Vec<(Option<&str>, String)> = vec![
        (Some("a"), order("order-1", 100)),
        (Some("a"), order("order-1", 100)),
        (Some("a"), order("order-2", 100)),
        (Some("b"), order("order-2", 200)),
        (None, order("order-3", 300)),
        (Some("c"), declined.to_string()),
        (Some("c"), declined.to_string()),
        (Some("d"), "not json".to_string()),
        (Some("d"), order("order-5", 500)),
        (Some(""), order("order-6", 600)),
        (Some("b"), r#"{"amount": 200, "order": "order-2"}"#.to_string()),
        (Some("e"), r#"{"order": "order-7", "amount": -1}"#.to_string()),
        (Some("a"), order("order-1", 100)),
    ];
    for profile in Profile::ALL {
        for variant in Variant::ALL {
            let fixture = Fixture::start(profile, variant).await;
            let mut pure = Provider::new(profile, variant);
            for (at, (key, body)) in steps.iter().enumerate() {
                let request =
                    ChargeRequest { key: key.map(str::to_string), body: body.as_bytes().to_vec() };
                let now_ms = at as u64;
                let expected = match pure.begin(&request, now_ms) {
                    Begin::Done(response) => response,
                    Begin::Proceed(ticket) => pure.finish(ticket, now_ms),
                };
                let reply = fixture.post(*key, body).await;
                assert_eq!(
                    reply.response(),
                    expected,
                    "{profile:?} {variant:?}, step {at}: {key:?} {body}"
                );
            }
            let keys: Vec<_> = pure.charges().iter().map(|charge| charge.key.clone()).collect();
            assert_eq!(fixture.charged_keys().await, keys, "{profile:?} {variant:?}");
            fixture.close().await;
        }
    }
}

// ---- the client ----

fn charge_order(order: &str, key: Option<&str>) -> ChargeOrder {
    ChargeOrder {
        order: order.into(),
        amount: 4200,
        idempotency_key: key.map(str::to_string),
        fence: None,
    }
}

#[tokio::test]
async fn the_client_reads_charges_replays_and_refusals() {
    for profile in Profile::ALL {
        let fixture = Fixture::start(profile, Variant::Correct).await;
        let mut client = ProviderClient::new(&fixture.url, PATIENCE);
        let made = Charged { status: 201, charge: Some("ch_1".into()), replayed: false };
        let first = charge_order("order-1", Some("key-1"));
        assert_eq!(client.charge(&first).await, Outcome::Ok(made.clone()));
        let replayed = Charged { replayed: true, ..made };
        assert_eq!(client.charge(&first).await, Outcome::Ok(replayed.clone()));
        let other = charge_order("order-2", Some("key-1"));
        assert_eq!(client.charge(&other).await, Outcome::Fail("key-mismatch".into()));
        client.reset().await;
        assert_eq!(client.charge(&first).await, Outcome::Ok(replayed));
        fixture.close().await;
    }
}

#[tokio::test]
async fn the_client_says_unknown_past_its_deadline_and_in_flight_meanwhile() {
    let fixture = Fixture::start(Profile::Stripe, Variant::Correct).await;
    let hold = Hold::charges(&fixture).await;
    let order = charge_order("order-1", Some("key-1"));
    // The charge is held until released: it cannot answer within the deadline.
    let mut stalled = ProviderClient::new(&fixture.url, Duration::from_millis(300));
    assert_eq!(stalled.charge(&order).await, Outcome::Info("timeout".into()));
    // The provider goes on with it all the same.
    assert_eq!(fixture.key_state("key-1").await.as_deref(), Some("in-flight"));
    let mut other = ProviderClient::new(&fixture.url, PATIENCE);
    assert_eq!(other.charge(&order).await, Outcome::Fail("in-flight".into()));
    hold.release().await;
    wait_until("the abandoned request's charge", || async {
        fixture.key_state("key-1").await.as_deref() == Some("done")
    })
    .await;
    let replayed = Charged { status: 201, charge: Some("ch_1".into()), replayed: true };
    assert_eq!(other.charge(&order).await, Outcome::Ok(replayed));
    fixture.close().await;
}

#[tokio::test]
async fn the_server_stops_on_drop_and_its_port_refuses() {
    let fixture = Fixture::start(Profile::Ietf, Variant::Correct).await;
    let mut client = ProviderClient::new(&fixture.url, PATIENCE);
    let charge = charge_order("order-1", Some("key-1"));
    assert!(matches!(client.charge(&charge).await, Outcome::Ok(_)));
    let address = fixture.url.trim_start_matches("http://").to_string();
    let Fixture { server, prefix, db, profile, url, http } = fixture;
    drop(server);
    let refused = tokio::net::TcpStream::connect(&address).await;
    assert!(refused.is_err(), "{address} still accepts connections");
    // Nothing can have been sent: the charge definitely did not happen.
    let mut fresh = ProviderClient::new(&url, PATIENCE);
    assert_eq!(fresh.charge(&charge).await, Outcome::Fail("unavailable".into()));
    let server = ProviderServer::start({
        let mut config =
            ProviderConfig::new(&postgres_url(), profile, Variant::Correct).without_delays();
        config.table_prefix = prefix.clone();
        config
    })
    .unwrap();
    // A new run starts with no keys.
    let restarted = Fixture { url: server.url(), server, prefix, db, profile, http };
    let reply = restarted.post(Some("key-1"), &order("order-1", 4200)).await;
    assert_eq!(reply.response(), Response::created("ch_1", "order-1", 4200));
    restarted.close().await;
}

#[tokio::test]
async fn a_database_that_cannot_be_reached_is_a_clear_error() {
    let mut config = ProviderConfig::new(
        "postgres://postgres@127.0.0.1:1/test",
        Profile::Ietf,
        Variant::Correct,
    );
    config.table_prefix = unique_prefix();
    let error = ProviderServer::start(config).unwrap_err();
    assert!(matches!(error, RealError::Connect { .. }), "{error}");
    assert!(error.to_string().contains("127.0.0.1:1"), "{error}");
}

#[tokio::test]
async fn a_table_prefix_that_is_not_a_plain_name_is_refused() {
    let mut config = ProviderConfig::new(&postgres_url(), Profile::Ietf, Variant::Correct);
    config.table_prefix = "x; DROP TABLE y".into();
    let error = ProviderServer::start(config).unwrap_err();
    assert!(matches!(error, RealError::Setup { .. }), "{error}");
}

/// Sequential keyed charges with no charge delay, per second: run with
/// `cargo test -p lockcheck-real --test real_provider -- --ignored --nocapture`.
#[tokio::test]
#[ignore]
async fn measure_sequential_keyed_charges_per_second() {
    let fixture = Fixture::start(Profile::Stripe, Variant::Correct).await;
    let mut client = ProviderClient::new(&fixture.url, PATIENCE);
    let count = 2_000;
    let start = Instant::now();
    for n in 0..count {
        let order = charge_order(&format!("order-{n}"), Some(&format!("key-{n}")));
        assert!(matches!(client.charge(&order).await, Outcome::Ok(_)));
    }
    let elapsed = start.elapsed();
    println!(
        "{count} sequential keyed charges in {elapsed:?}: {:.0} per second",
        f64::from(count) / elapsed.as_secs_f64()
    );
    fixture.close().await;
}
