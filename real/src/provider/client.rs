//! A worker's way to a payment provider over HTTP: a charge's answer read
//! through the pure provider's [`Response`], so that the real world's
//! outcomes read as the simulator's do.

use std::time::Duration;

use lockcheck_workloads::payments::{ChargeOrder, Charged};
use lockcheck_workloads::provider::Response;
use lockcheck_workloads::Outcome;
use reqwest::header::CONTENT_TYPE;
use serde_json::Value;

use super::serve::{KEY_HEADER, REPLAYED_HEADER};

/// One worker's connections to a provider.
#[derive(Debug)]
pub struct ProviderClient {
    /// `{url}/v1/charges`.
    endpoint: String,
    deadline: Duration,
    /// Built on first use, and again after [`ProviderClient::reset`]: it
    /// holds the connection pool.
    http: Option<reqwest::Client>,
}

impl ProviderClient {
    /// A client of the provider at `url` (`http://127.0.0.1:PORT`, as
    /// [`super::ProviderServer::url`] gives it) whose every charge ends
    /// within `deadline`.
    pub fn new(url: &str, deadline: Duration) -> ProviderClient {
        ProviderClient {
            endpoint: format!("{}/v1/charges", url.trim_end_matches('/')),
            deadline,
            http: None,
        }
    }

    fn http(&mut self) -> Option<&reqwest::Client> {
        if self.http.is_none() {
            // No proxy: the provider is on loopback, whatever the
            // environment's HTTP_PROXY says.
            self.http = reqwest::Client::builder().no_proxy().build().ok();
        }
        self.http.as_ref()
    }

    /// Charges `order`: `Ok` on a 2xx (the charge's id; `replayed` when
    /// the provider says so), `Fail` with the refusal's reason
    /// ([`Response::refusal`]: `in-flight`, `key-mismatch`, `declined`,
    /// `bad-request`, `refused`), `Info` when the charge may or may not
    /// have happened: past the deadline, a connection lost with the
    /// request sent, a 5xx, or an answer that is not the provider's. A
    /// connection that cannot be made is `Fail("unavailable")`: nothing
    /// was sent.
    pub async fn charge(&mut self, order: &ChargeOrder) -> Outcome<Charged> {
        let (endpoint, deadline) = (self.endpoint.clone(), self.deadline);
        let Some(http) = self.http() else {
            return Outcome::Fail("unavailable".into());
        };
        let mut request =
            http.post(endpoint).header(CONTENT_TYPE, "application/json").body(order.body());
        if let Some(key) = &order.idempotency_key {
            request = request.header(KEY_HEADER, key.as_str());
        }
        let exchange = async {
            let reply = request.send().await?;
            let status = reply.status().as_u16();
            let replayed = reply.headers().get(REPLAYED_HEADER).is_some_and(|v| v == "true");
            let body = reply.bytes().await?;
            Ok::<_, reqwest::Error>((status, replayed, body))
        };
        match tokio::time::timeout(deadline, exchange).await {
            Err(_) => Outcome::Info("timeout".into()),
            Ok(Err(error)) if error.is_connect() => Outcome::Fail("unavailable".into()),
            Ok(Err(error)) if error.is_timeout() => Outcome::Info("timeout".into()),
            Ok(Err(_)) => Outcome::Info("conn-lost".into()),
            Ok(Ok((status, replayed, body))) => outcome(status, replayed, &body),
        }
    }

    /// Drops the connection pool: the next charge connects anew.
    pub async fn reset(&mut self) {
        self.http = None;
    }
}

/// A reply as an outcome.
fn outcome(status: u16, replayed: bool, body: &[u8]) -> Outcome<Charged> {
    if status >= 500 {
        // The provider's own failure: it may have charged.
        return Outcome::Info(format!("http-{status}"));
    }
    let Ok(body) = serde_json::from_slice::<Value>(body) else {
        return Outcome::Info("bad-reply".into());
    };
    let response = Response { status, body, replayed };
    match response.refusal() {
        Some(reason) => Outcome::Fail(reason.to_string()),
        None => {
            let charge = response.charge().map(str::to_string);
            Outcome::Ok(Charged { status, charge, replayed })
        }
    }
}

#[cfg(test)]
mod tests {
    use lockcheck_workloads::provider::Profile;

    use super::*;

    fn read(response: &Response) -> Outcome<Charged> {
        outcome(response.status, response.replayed, response.body.to_string().as_bytes())
    }

    #[test]
    fn replies_read_as_the_pure_provider_names_them() {
        let made = Response::created("ch_3", "o", 5);
        let charged = Charged { status: 201, charge: Some("ch_3".into()), replayed: false };
        assert_eq!(read(&made), Outcome::Ok(charged.clone()));
        assert_eq!(read(&made.replay()), Outcome::Ok(Charged { replayed: true, ..charged }));
        for profile in Profile::ALL {
            assert_eq!(read(&profile.in_flight()), Outcome::Fail("in-flight".into()));
            assert_eq!(read(&profile.mismatch()), Outcome::Fail("key-mismatch".into()));
            assert_eq!(read(&profile.declined()), Outcome::Fail("declined".into()));
            assert_eq!(read(&profile.unavailable()), Outcome::Info("http-503".into()));
            assert_eq!(read(&profile.internal()), Outcome::Info("http-500".into()));
        }
        assert_eq!(outcome(201, false, b"<html>"), Outcome::Info("bad-reply".into()));
        assert_eq!(outcome(502, false, b"<html>"), Outcome::Info("http-502".into()));
    }
}
