//! The real payment provider: lockcheck's own HTTP service with
//! idempotency keys, held to the pure provider both worlds share
//! (`lockcheck_workloads::provider`, whose header has the status table),
//! its keys in PostgreSQL so that concurrent requests race for real.
//!
//! [`ProviderServer`] serves `POST /v1/charges` (header `Idempotency-Key`,
//! body `{"order": "...", "amount": N}`) on loopback, on a thread and a
//! tokio runtime of its own, so that a caller's runtime, and a client
//! stalled in it, never stalls the provider. [`ProviderClient`] is a
//! worker's way to it.
//!
//! Files: `keys.rs` (the tables and each variant's statements), `serve.rs`
//! (the route), `client.rs` (the client).

use std::net::SocketAddr;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use lockcheck_workloads::provider::{
    Profile, Provider, Variant, CHARGE_MS, DEFAULT_RETENTION_MS, SLOW_CHARGE_MS, SLOW_ONE_IN,
};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use super::RealError;

mod client;
mod keys;
mod serve;

pub use client::ProviderClient;

use keys::{Store, Tables};
use serve::{Delays, Service};

/// The tables' prefix unless told otherwise.
pub const DEFAULT_TABLE_PREFIX: &str = "lockcheck_provider";

/// How long starting may take (the first connection, creating and emptying
/// the tables): a cold server may be slow.
const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// How many database sessions a provider opens before it serves.
const WARM_SESSIONS: usize = 4;

/// How long a stopping server waits for requests in flight (a charge
/// takes at most the slow delay) before it drops them.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// What a provider is and how it behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderConfig {
    /// Where its keys and charges live.
    pub postgres_url: String,
    pub profile: Profile,
    pub variant: Variant,
    /// A key is forgotten this long after its first request.
    pub retention_ms: u64,
    /// A request without a key is refused (400) rather than charged.
    pub require_key: bool,
    /// How long a charge takes, uniform, in ms; one in `slow_one_in`
    /// (never if 0) takes `slow_charge_ms` instead.
    pub charge_ms: (u64, u64),
    pub slow_one_in: u64,
    pub slow_charge_ms: (u64, u64),
    /// Seeds the charges' delays.
    pub seed: u64,
    /// The tables are `{table_prefix}_keys` and so on: lower-case letters,
    /// digits and underscores.
    pub table_prefix: String,
}

impl ProviderConfig {
    /// A provider with the simulator's delays, Stripe's retention, keys
    /// optional, and the default tables.
    pub fn new(postgres_url: &str, profile: Profile, variant: Variant) -> ProviderConfig {
        ProviderConfig {
            postgres_url: postgres_url.to_string(),
            profile,
            variant,
            retention_ms: DEFAULT_RETENTION_MS,
            require_key: false,
            charge_ms: CHARGE_MS,
            slow_one_in: SLOW_ONE_IN,
            slow_charge_ms: SLOW_CHARGE_MS,
            seed: 0,
            table_prefix: DEFAULT_TABLE_PREFIX.to_string(),
        }
    }

    /// Every charge at once: no delay, none slow.
    pub fn without_delays(mut self) -> ProviderConfig {
        self.charge_ms = (0, 0);
        self.slow_one_in = 0;
        self
    }
}

/// A running provider. Dropping it stops it: requests in flight get a
/// few seconds to finish, then the thread is joined and the port closed.
#[derive(Debug)]
pub struct ProviderServer {
    address: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

fn server_error(reason: impl ToString) -> RealError {
    RealError::Server { what: "payment provider", reason: reason.to_string() }
}

impl ProviderServer {
    /// Creates its tables if missing, empties them, binds 127.0.0.1 on a
    /// free port and serves; returns once it accepts connections.
    pub fn start(config: ProviderConfig) -> Result<ProviderServer, RealError> {
        let tables = Tables::new(&config.table_prefix)
            .map_err(|reason| RealError::Setup { what: "the payment provider's tables", reason })?;
        let (ready, started) = mpsc::channel();
        let (stop, stopped) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("lockcheck-provider".into())
            .spawn(move || run(config, tables, ready, stopped))
            .map_err(server_error)?;
        let address = match started.recv() {
            Ok(Ok(address)) => address,
            Ok(Err(error)) => {
                let _ = thread.join();
                return Err(error);
            }
            Err(_) => {
                let _ = thread.join();
                return Err(server_error("its thread ended before it served"));
            }
        };
        Ok(ProviderServer { address, stop: Some(stop), thread: Some(thread) })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }
}

impl Drop for ProviderServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The server's thread: its runtime, set-up, and serving until `stopped`.
fn run(
    config: ProviderConfig,
    tables: Tables,
    ready: mpsc::Sender<Result<SocketAddr, RealError>>,
    stopped: oneshot::Receiver<()>,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            let _ = ready.send(Err(server_error(error)));
            return;
        }
    };
    runtime.block_on(async move {
        let (listener, service) = match set_up(config, tables).await {
            Ok(started) => started,
            Err(error) => {
                let _ = ready.send(Err(error));
                return;
            }
        };
        match listener.local_addr() {
            Ok(address) => {
                let _ = ready.send(Ok(address));
            }
            Err(error) => {
                let _ = ready.send(Err(server_error(error)));
                return;
            }
        }
        serve_until(listener, service, stopped).await;
    });
}

/// The tables ready and the port bound.
async fn set_up(
    config: ProviderConfig,
    tables: Tables,
) -> Result<(TcpListener, Arc<Service>), RealError> {
    let url = &config.postgres_url;
    let connect_error = |reason: String| RealError::Connect {
        what: "PostgreSQL (the payment provider's)",
        url: url.clone(),
        reason,
    };
    match tokio::time::timeout(SETUP_TIMEOUT, keys::prepare(url, &tables)).await {
        Err(_) => return Err(connect_error(format!("no answer within {SETUP_TIMEOUT:?}"))),
        Ok(Err(error)) if error.as_db_error().is_some() => {
            let reason = error.to_string();
            return Err(RealError::Setup { what: "the payment provider's tables", reason });
        }
        Ok(Err(error)) => return Err(connect_error(error.to_string())),
        Ok(Ok(())) => {}
    }
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.map_err(server_error)?;
    let pure = Provider::new(config.profile, config.variant).require_key(config.require_key);
    let delays = Delays {
        normal: config.charge_ms,
        slow_one_in: config.slow_one_in,
        slow: config.slow_charge_ms,
    };
    let store = Store::new(url, tables);
    store.warm(WARM_SESSIONS).await.map_err(|error| connect_error(error.to_string()))?;
    let service = Service::new(pure, config.retention_ms, store, delays, config.seed);
    Ok((listener, Arc::new(service)))
}

/// Serves until `stopped` fires (or its sender is dropped), then lets the
/// requests in flight finish within [`STOP_GRACE`].
async fn serve_until(listener: TcpListener, service: Arc<Service>, stopped: oneshot::Receiver<()>) {
    let stopping = Arc::new(tokio::sync::Notify::new());
    let notify = stopping.clone();
    let shutdown = async move {
        let _ = stopped.await;
        notify.notify_one();
    };
    let serving = axum::serve(listener, service.router()).with_graceful_shutdown(shutdown);
    let grace = async {
        stopping.notified().await;
        tokio::time::sleep(STOP_GRACE).await;
    };
    tokio::select! {
        _ = serving => {}
        _ = grace => {}
    }
}
