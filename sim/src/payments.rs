//! The payments workload's services in the simulator: the `queue` host (an
//! at-least-once queue with a visibility timeout), the `provider` host (a
//! payment provider with idempotency keys, which takes a while to charge)
//! and the `payments` host (the payments table). Each serves the pure state
//! machine the real world's services are held to
//! (`lockcheck_workloads::{queue, provider}`, [`Ledger`]), over the
//! simulator's connections, so that latency, loss and a worker's stall in
//! flight strike their requests as they strike a lock's. [`SimPayments`] is
//! one worker's way to all three.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use lockcheck_workloads::payments::{ChargeOrder, Charged, Delivery, Ledger, LedgerMode, Payments};
use lockcheck_workloads::provider::{
    Begin, ChargeRequest, Profile, Provider, Ticket, Variant, CHARGE_MS, SLOW_CHARGE_MS,
    SLOW_ONE_IN,
};
use lockcheck_workloads::queue::{Ack, Queue};
use lockcheck_workloads::{Outcome, Stall};
use serde::{Deserialize, Serialize};
use turmoil::net::TcpListener;

use crate::host::{serve_requests, Connection, DownHosts, Knobs, PORT};

pub(crate) const QUEUE_HOST: &str = "queue";
pub(crate) const PROVIDER_HOST: &str = "provider";
pub(crate) const TABLE_HOST: &str = "payments";
/// The three hosts, in the order faults number them after the lock
/// servers, and [`PaymentsServices::host`] takes their knobs.
pub(crate) const PAYMENTS_HOSTS: [&str; 3] = [QUEUE_HOST, PROVIDER_HOST, TABLE_HOST];

/// What a worker asks of the payments services.
#[derive(Debug, Serialize, Deserialize)]
enum Ask {
    Enqueue { data: String },
    Deliver { visibility_ms: u64 },
    Ack { message: u64 },
    Charge { key: Option<String>, body: String },
    Record { order: String, fence: Option<u64> },
}

/// Their answers.
#[derive(Debug, Serialize, Deserialize)]
enum Answer {
    Enqueued {
        message: u64,
    },
    Delivered(Option<Delivery>),
    Acked,
    Gone,
    /// The provider's status, the charge's id on a 2xx or why it was
    /// refused, and whether it is a replay.
    Charged {
        status: u16,
        charge: Option<String>,
        refusal: Option<String>,
        replayed: bool,
    },
    /// The payments table took the charge as this row.
    Recorded {
        row: String,
    },
    /// Refused, and why (`stale-fence`, `exists`, `not-pending`).
    Refused {
        reason: String,
    },
}

/// The three services' state, each on a host of its own.
#[derive(Debug)]
pub(crate) struct PaymentsServices {
    queue: Rc<RefCell<Queue>>,
    provider: Rc<RefCell<Provider>>,
    table: Rc<RefCell<Ledger>>,
}

impl PaymentsServices {
    pub(crate) fn new(profile: Profile, variant: Variant, ledger: LedgerMode) -> Self {
        PaymentsServices {
            queue: Rc::new(RefCell::new(Queue::new())),
            provider: Rc::new(RefCell::new(Provider::new(profile, variant))),
            table: Rc::new(RefCell::new(Ledger::new(ledger))),
        }
    }

    /// Starts the three hosts on `sim`, with the knobs a nemesis turns on
    /// each ([`PAYMENTS_HOSTS`]' order). Their state outlives a restart (a
    /// queue, a provider and a database keep what they acknowledged); a
    /// charge the provider had begun when it crashed is abandoned, its key
    /// free again. Each reads time on its own clock, which a clock fault
    /// moves: a queue whose clock jumps ahead redelivers early.
    pub(crate) fn host(&self, sim: &mut turmoil::Sim<'_>, knobs: [Rc<Knobs>; 3]) {
        let [queue_knobs, provider_knobs, table_knobs] = knobs;
        let queue = self.queue.clone();
        sim.host(QUEUE_HOST, move || {
            let (queue, knobs) = (queue.clone(), queue_knobs.clone());
            serve(knobs.clone(), move |ask| {
                let queue = queue.clone();
                let now_ms = knobs.now_ms().max(0) as u64;
                async move { Some(queue_answer(&mut queue.borrow_mut(), ask, now_ms)) }
            })
        });
        let provider = self.provider.clone();
        sim.host(PROVIDER_HOST, move || {
            let (provider, knobs) = (provider.clone(), provider_knobs.clone());
            let charging = knobs.clone();
            serve(knobs, move |ask| charge(provider.clone(), charging.clone(), ask))
        });
        let table = self.table.clone();
        sim.host(TABLE_HOST, move || {
            let (table, knobs) = (table.clone(), table_knobs.clone());
            serve(knobs, move |ask| {
                let table = table.clone();
                async move {
                    Some(match ask {
                        Ask::Record { order, fence } => {
                            match table.borrow_mut().charge(&order, fence) {
                                Ok(row) => Answer::Recorded { row },
                                Err(reason) => Answer::Refused { reason: reason.to_string() },
                            }
                        }
                        _ => return None,
                    })
                }
            })
        });
    }
}

/// Serves every connection to this host with `answer`.
async fn serve<F, Fut>(knobs: Rc<Knobs>, answer: F) -> Result<(), Box<dyn std::error::Error>>
where
    F: Fn(Ask) -> Fut + Clone + 'static,
    Fut: std::future::Future<Output = Option<Answer>>,
{
    let listener = TcpListener::bind(("0.0.0.0", PORT)).await?;
    loop {
        let (stream, _) = listener.accept().await?;
        let (knobs, answer) = (knobs.clone(), answer.clone());
        tokio::task::spawn_local(async move { serve_requests(stream, &knobs, answer).await });
    }
}

fn queue_answer(queue: &mut Queue, ask: Ask, now_ms: u64) -> Answer {
    match ask {
        Ask::Enqueue { data } => Answer::Enqueued { message: queue.enqueue(data, now_ms) },
        Ask::Deliver { visibility_ms } => Answer::Delivered(queue.deliver(now_ms, visibility_ms)),
        Ask::Ack { message } => match queue.ack(message, now_ms) {
            Ack::Acked => Answer::Acked,
            Ack::Gone => Answer::Gone,
        },
        _ => Answer::Refused { reason: "not-a-queue-request".into() },
    }
}

/// The provider's answer to a charge: at once when it can tell (a replay,
/// a key in flight, bad input), else after charging the card a while.
async fn charge(provider: Rc<RefCell<Provider>>, knobs: Rc<Knobs>, ask: Ask) -> Option<Answer> {
    let Ask::Charge { key, body } = ask else {
        return None;
    };
    let request = ChargeRequest { key, body: body.into_bytes() };
    let now_ms = || knobs.now_ms().max(0) as u64;
    let begun = provider.borrow_mut().begin(&request, now_ms());
    let response = match begun {
        Begin::Done(response) => response,
        Begin::Proceed(ticket) => {
            let (low, high) =
                if knobs.uniform(1, SLOW_ONE_IN) == 1 { SLOW_CHARGE_MS } else { CHARGE_MS };
            let ms = knobs.uniform(low, high);
            // Should the provider crash while charging, the charge never
            // happened and its key is free again.
            let mut charging = Charging { provider: provider.clone(), ticket: Some(ticket) };
            tokio::time::sleep(Duration::from_millis(ms)).await;
            let ticket = charging.ticket.take().expect("taken once, here");
            provider.borrow_mut().finish(ticket, now_ms())
        }
    };
    Some(Answer::Charged {
        status: response.status,
        charge: response.charge().map(str::to_string),
        refusal: response.refusal().map(str::to_string),
        replayed: response.replayed,
    })
}

/// A charge under way: abandoned, its key freed, if dropped unfinished
/// (its host crashed).
struct Charging {
    provider: Rc<RefCell<Provider>>,
    ticket: Option<Ticket>,
}

impl Drop for Charging {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            self.provider.borrow_mut().abandon(ticket);
        }
    }
}

/// One worker's connections to the payments services.
#[derive(Debug)]
pub struct SimPayments {
    queue: Connection,
    provider: Connection,
    table: Connection,
}

impl SimPayments {
    /// Connections whose every request ends within `deadline`, stall in
    /// flight when the worker's pause asks for it, and are refused at once
    /// while their host is crashed.
    pub(crate) fn new(deadline: Duration, stall: &Stall, down: &DownHosts) -> SimPayments {
        let connect =
            |host| Connection::new(host, deadline).stalling(stall).refusing_when_down(down);
        SimPayments {
            queue: connect(QUEUE_HOST),
            provider: connect(PROVIDER_HOST),
            table: connect(TABLE_HOST),
        }
    }
}

impl Payments for SimPayments {
    async fn enqueue(&mut self, data: &str) -> Outcome<u64> {
        match self.queue.call_as(&Ask::Enqueue { data: data.into() }).await {
            Ok(Answer::Enqueued { message }) => Outcome::Ok(message),
            Ok(_) => Outcome::Info("bad-reply".into()),
            Err(failure) => failure.outcome(),
        }
    }

    async fn deliver(&mut self, visibility_ms: u64) -> Outcome<Option<Delivery>> {
        match self.queue.call_as(&Ask::Deliver { visibility_ms }).await {
            Ok(Answer::Delivered(delivery)) => Outcome::Ok(delivery),
            Ok(_) => Outcome::Info("bad-reply".into()),
            Err(failure) => failure.outcome(),
        }
    }

    async fn ack(&mut self, message: u64) -> Outcome<()> {
        match self.queue.call_as(&Ask::Ack { message }).await {
            Ok(Answer::Acked) => Outcome::Ok(()),
            Ok(Answer::Gone) => Outcome::Fail("gone".into()),
            Ok(_) => Outcome::Info("bad-reply".into()),
            Err(failure) => failure.outcome(),
        }
    }

    async fn charge(&mut self, order: &ChargeOrder, ledger: bool) -> Outcome<Charged> {
        if ledger {
            let ask = Ask::Record { order: order.order.clone(), fence: order.fence };
            return match self.table.call_as(&ask).await {
                Ok(Answer::Recorded { row }) => {
                    Outcome::Ok(Charged { status: 200, charge: Some(row), replayed: false })
                }
                Ok(Answer::Refused { reason }) => Outcome::Fail(reason),
                Ok(_) => Outcome::Info("bad-reply".into()),
                Err(failure) => failure.outcome(),
            };
        }
        let ask = Ask::Charge { key: order.idempotency_key.clone(), body: order.body() };
        match self.provider.call_as(&ask).await {
            Ok(Answer::Charged { status, charge, refusal: None, replayed }) => {
                Outcome::Ok(Charged { status, charge, replayed })
            }
            Ok(Answer::Charged { refusal: Some(why), .. }) => Outcome::Fail(why),
            Ok(_) => Outcome::Info("bad-reply".into()),
            Err(failure) => failure.outcome(),
        }
    }

    async fn reset(&mut self) {
        self.queue.reset();
        self.provider.reset();
        self.table.reset();
    }
}
