//! The payments workload's services in the real world, as one worker
//! reaches them: the run's queue (PostgreSQL's `SKIP LOCKED` table or
//! RabbitMQ; `queues/`), lockcheck's own payment provider over HTTP
//! (`provider.rs`) and the payments table (`ledger.rs`). The simulator's
//! `SimPayments` is the same transport over simulated hosts; the worker,
//! `run_payments`, is written once for both.

use std::time::Duration;

use lockcheck_workloads::payments::{ChargeOrder, Charged, Delivery, Payments};
use lockcheck_workloads::Outcome;

use crate::ledger::{LedgerSession, LedgerTable};
use crate::provider::ProviderClient;
use crate::queues::{QueueSession, RealQueue};
use crate::RealError;

/// The payments services of one run, prepared: what each worker connects
/// to.
#[derive(Debug)]
pub(crate) struct PaymentsServices {
    /// The queue (none: a cron run, whose effect is only a table's row).
    pub(crate) queue: Option<RealQueue>,
    /// The provider's URL (`http://127.0.0.1:PORT`), when the run has one.
    pub(crate) provider: Option<String>,
    /// The payments table, when the run's protection records charges in
    /// one.
    pub(crate) ledger: Option<LedgerTable>,
}

impl PaymentsServices {
    /// One worker's sessions; every call ends within `deadline`.
    pub(crate) async fn connect(&self, deadline: Duration) -> Result<RealPayments, RealError> {
        Ok(RealPayments::On(Box::new(Connected {
            queue: match &self.queue {
                Some(queue) => Some(queue.connect().await?),
                None => None,
            },
            provider: self.provider.as_ref().map(|url| ProviderClient::new(url, deadline)),
            ledger: self.ledger.as_ref().map(|table| table.session(deadline)),
        })))
    }
}

/// One worker's way to the payments services, or none (`Off`, a run of
/// another workload: every call fails `unavailable`).
#[derive(Debug, Default)]
pub enum RealPayments {
    #[default]
    Off,
    On(Box<Connected>),
}

/// A worker's sessions to the queue, the provider and the table.
#[derive(Debug)]
pub struct Connected {
    queue: Option<QueueSession>,
    provider: Option<ProviderClient>,
    ledger: Option<LedgerSession>,
}

fn unavailable<T>() -> Outcome<T> {
    Outcome::Fail("unavailable".into())
}

impl Payments for RealPayments {
    async fn enqueue(&mut self, data: &str) -> Outcome<u64> {
        match self {
            RealPayments::On(on) => match on.queue.as_mut() {
                Some(queue) => queue.enqueue(data).await,
                None => unavailable(),
            },
            RealPayments::Off => unavailable(),
        }
    }

    async fn deliver(&mut self, visibility_ms: u64) -> Outcome<Option<Delivery>> {
        match self {
            RealPayments::On(on) => match on.queue.as_mut() {
                Some(queue) => queue.deliver(visibility_ms).await,
                None => unavailable(),
            },
            RealPayments::Off => unavailable(),
        }
    }

    async fn ack(&mut self, message: u64) -> Outcome<()> {
        match self {
            RealPayments::On(on) => match on.queue.as_mut() {
                Some(queue) => queue.ack(message).await,
                None => unavailable(),
            },
            RealPayments::Off => unavailable(),
        }
    }

    async fn charge(&mut self, order: &ChargeOrder, ledger: bool) -> Outcome<Charged> {
        let RealPayments::On(on) = self else { return unavailable() };
        if !ledger {
            return match on.provider.as_mut() {
                Some(provider) => provider.charge(order).await,
                None => unavailable(),
            };
        }
        let Some(table) = on.ledger.as_mut() else { return unavailable() };
        table.charge(&order.order, order.fence).await.map(|row| Charged {
            status: 200,
            charge: Some(row),
            replayed: false,
        })
    }

    async fn reset(&mut self) {
        if let RealPayments::On(on) = self {
            if let Some(queue) = on.queue.as_mut() {
                queue.reset().await;
            }
            if let Some(provider) = on.provider.as_mut() {
                provider.reset().await;
            }
            if let Some(table) = on.ledger.as_mut() {
                table.reset();
            }
        }
    }
}
