//! The payments queue in RabbitMQ, over AMQP 0-9-1 with `lapin`.
//!
//! RabbitMQ has no visibility timeout: an unacknowledged message stays
//! with its consumer until the consumer's channel closes, and only then is
//! requeued (at its old place, with `redelivered` set). Its own
//! `consumer_timeout` is checked about once a minute, far too coarsely for
//! a visibility timeout of a lease's length. So each delivery gets a
//! channel of its own, and a watchdog that closes that channel when the
//! delivery is not acknowledged within its visibility timeout: RabbitMQ
//! then redelivers the message to the next worker that asks.
//!
//! The watchdogs, and every connection's reactor, run on a runtime of the
//! queue's own (one thread), not the worker's: a worker stalled in a
//! GC-like pause, its task not polled or its thread blocked, cannot hold
//! back the watchdog that takes its job away.
//!
//! One difference from the pure queue (`lockcheck_workloads::queue`): its
//! stale ack still deletes a message delivered again since, as pgmq's
//! delete by id does. Here a delivery's ack is bound to its channel: once
//! the watchdog closed it, the stalled worker's late ack is `Fail("gone")`
//! and the message stays with its new consumer. A second: a message whose
//! watchdog fired goes back to its old place in the queue (the pure
//! queue's `release`), ahead of messages enqueued while it was hidden,
//! where the pure queue (and the PostgreSQL table) put a timed-out message
//! behind them, by when its timeout ran out.
//!
//! What RabbitMQ does not say is counted here: message ids (from 1, in
//! enqueue order, in the message's `message_id` property) and each
//! message's deliveries (a classic queue has no `x-delivery-count`), in
//! state the queue's sessions share. `redelivered` is RabbitMQ's own flag.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use lapin::options::{
    BasicAckOptions, BasicGetOptions, BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions,
    QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::uri::AMQPUri;
use lapin::{BasicProperties, Channel, Confirmation, Connection, ConnectionProperties};
use lockcheck_workloads::queue::Delivery;
use lockcheck_workloads::Outcome;
use tokio::runtime::Handle;
use tokio::time::{timeout_at, Instant};

use crate::RealError;

/// How long setting up (`rabbitmqctl`, declaring the queue) may take.
const SETUP_TIMEOUT: Duration = Duration::from_secs(30);

/// In the URL's own vhost (no private one could be made), the queue
/// deletes itself when unused this long, should its run die before
/// removing it.
const FALLBACK_EXPIRES_MS: u32 = 30 * 60 * 1000;

/// AMQP's reply code for a normal close.
const REPLY_SUCCESS: u16 = 200;

/// The queue's own runtime: a thread that drives the connections' sockets
/// and timers and runs the watchdogs, whatever the workers' runtimes do.
#[derive(Debug)]
struct Background {
    handle: Handle,
    /// Ends the thread (and drops the runtime there, outside any async
    /// context) when the last session and the queue are gone.
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Background {
    fn start() -> Result<Background, RealError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| setup_error(format!("cannot start the queue's runtime: {e}")))?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("lockcheck-rabbitmq".into())
            .spawn(move || {
                let _ = runtime.block_on(stopped);
            })
            .map_err(|e| setup_error(format!("cannot start the queue's thread: {e}")))?;
        Ok(Background { handle, stop: Some(stop) })
    }

    /// Runs `work` on the queue's runtime, as `None` past `until` (the
    /// work is then aborted) or if the runtime is gone.
    async fn run<T: Send + 'static>(
        &self,
        until: Instant,
        work: impl Future<Output = T> + Send + 'static,
    ) -> Option<T> {
        let task = self.handle.spawn(work);
        let abort = task.abort_handle();
        match timeout_at(until, task).await {
            Ok(Ok(done)) => Some(done),
            Ok(Err(_)) => None,
            Err(_) => {
                abort.abort();
                None
            }
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// What the queue and its sessions share.
#[derive(Debug)]
struct Shared {
    /// The URL, its vhost the run's.
    uri: AMQPUri,
    queue: String,
    deadline: Duration,
    background: Background,
    /// The last message id given out.
    last_id: AtomicU64,
    /// Deliveries so far, per message id.
    deliveries: Mutex<HashMap<u64, u32>>,
    /// Held over a publish and its confirm, so that ids are in the queue's
    /// order even when sessions enqueue at once.
    enqueue_order: tokio::sync::Mutex<()>,
}

/// Where the run's queue lives.
#[derive(Debug)]
enum Home {
    /// A vhost made for the run, deleted with it.
    Vhost(String),
    /// The URL's own vhost: only the queue is the run's.
    Shared,
}

/// One run's queue, fresh and empty after [`RabbitQueue::prepare`].
#[derive(Debug)]
pub(super) struct RabbitQueue {
    shared: Arc<Shared>,
    home: Home,
    notes: Vec<String>,
    /// Set by [`RabbitQueue::remove`]: nothing left for `drop` to clean.
    removed: bool,
}

fn connect_error(url: &str, reason: impl ToString) -> RealError {
    RealError::Connect { what: "RabbitMQ", url: url.to_string(), reason: reason.to_string() }
}

fn setup_error(reason: impl ToString) -> RealError {
    RealError::Setup { what: "the RabbitMQ queue", reason: reason.to_string() }
}

/// Locks a mutex whose data stays whole whatever a holder did.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs `rabbitmqctl` with `args`: why not, if it is missing, refused or
/// takes too long.
async fn rabbitmqctl(args: &[&str]) -> Result<(), String> {
    let run = tokio::process::Command::new("rabbitmqctl")
        .args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = match tokio::time::timeout(SETUP_TIMEOUT, run).await {
        Ok(Ok(output)) => output,
        Ok(Err(error)) => return Err(format!("`rabbitmqctl` cannot run: {error}")),
        Err(_) => return Err(format!("`rabbitmqctl {}` took over {SETUP_TIMEOUT:?}", args[0])),
    };
    if output.status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&output.stderr);
    Err(format!("`rabbitmqctl {}` failed ({}): {}", args[0], output.status, said.trim()))
}

/// Makes `vhost` and lets `user` do anything in it.
async fn add_vhost(vhost: &str, user: &str) -> Result<(), String> {
    rabbitmqctl(&["add_vhost", vhost]).await?;
    let granted = rabbitmqctl(&["set_permissions", "-p", vhost, user, ".*", ".*", ".*"]).await;
    if granted.is_err() {
        let _ = rabbitmqctl(&["delete_vhost", vhost]).await;
    }
    granted
}

/// Opens a connection to `uri` on the queue's runtime, its reactor and
/// heartbeats there too (lapin binds a connection to the runtime it is
/// opened on).
async fn open(shared: &Shared, until: Instant) -> Option<Result<Connection, lapin::Error>> {
    let uri = shared.uri.clone();
    shared
        .background
        .run(until, Connection::connect_uri(uri, ConnectionProperties::default()))
        .await
}

/// Deletes and declares the queue: fresh and empty. Durable, since
/// messages are published persistently.
async fn declare(connection: &Connection, queue: &str, expires: bool) -> Result<(), lapin::Error> {
    let channel = connection.create_channel().await?;
    channel.queue_delete(queue.into(), QueueDeleteOptions::default()).await?;
    let mut arguments = FieldTable::default();
    if expires {
        arguments.insert("x-expires".into(), AMQPValue::LongUInt(FALLBACK_EXPIRES_MS));
    }
    let options = QueueDeclareOptions { durable: true, ..QueueDeclareOptions::default() };
    channel.queue_declare(queue.into(), options, arguments).await?;
    channel.close(REPLY_SUCCESS, "OK".into()).await
}

impl RabbitQueue {
    /// Makes a vhost of the run's own with `rabbitmqctl` (or, where that is
    /// missing or refused, uses the URL's vhost and says so in a note) and
    /// declares the queue in it, empty.
    pub(super) async fn prepare(
        url: &str,
        name: &str,
        deadline: Duration,
    ) -> Result<RabbitQueue, RealError> {
        let mut uri: AMQPUri = url.parse().map_err(|e| connect_error(url, e))?;
        let queue = format!("lockcheck-{name}");
        let vhost = format!("lockcheck-{name}");
        let mut notes = Vec::new();
        let home = match add_vhost(&vhost, &uri.authority.userinfo.username).await {
            Ok(()) => {
                uri.vhost = vhost.clone();
                Home::Vhost(vhost)
            }
            Err(why) => {
                notes.push(format!(
                    "no private RabbitMQ vhost ({why}): the queue `{queue}` lives in the URL's \
                     vhost `{}`",
                    uri.vhost
                ));
                Home::Shared
            }
        };
        let shared = Arc::new(Shared {
            uri,
            queue,
            deadline,
            background: Background::start()?,
            last_id: AtomicU64::new(0),
            deliveries: Mutex::new(HashMap::new()),
            enqueue_order: tokio::sync::Mutex::new(()),
        });
        // From here on, a failure drops the queue, which deletes the vhost.
        let made = RabbitQueue { shared, home, notes, removed: false };
        let until = Instant::now() + SETUP_TIMEOUT;
        let connection = open(&made.shared, until)
            .await
            .ok_or_else(|| connect_error(url, format!("no answer within {SETUP_TIMEOUT:?}")))?
            .map_err(|e| connect_error(url, e))?;
        let expires = matches!(made.home, Home::Shared);
        let queue = made.shared.queue.clone();
        let declared = made
            .shared
            .background
            .run(until, async move { declare(&connection, &queue, expires).await })
            .await;
        match declared {
            Some(Ok(())) => {}
            Some(Err(error)) => return Err(setup_error(error)),
            None => return Err(setup_error(format!("no answer within {SETUP_TIMEOUT:?}"))),
        }
        Ok(made)
    }

    pub(super) fn notes(&self) -> &[String] {
        &self.notes
    }

    /// A worker's session, its connection open.
    pub(super) async fn connect(&self) -> Result<RabbitSession, RealError> {
        let mut session = RabbitSession {
            shared: self.shared.clone(),
            link: None,
            links: 0,
            held: HashMap::new(),
        };
        let until = Instant::now() + SETUP_TIMEOUT;
        match Link::open(&self.shared, until, 0).await {
            Some(Ok(link)) => session.link = Some(link),
            Some(Err(error)) => return Err(connect_error(&self.url(), error)),
            None => {
                let why = format!("no answer within {SETUP_TIMEOUT:?}");
                return Err(connect_error(&self.url(), why));
            }
        }
        Ok(session)
    }

    /// The URL connected to, for errors, without its password.
    fn url(&self) -> String {
        let uri = &self.shared.uri;
        format!("amqp://{}:{}/{}", uri.authority.host, uri.authority.port, uri.vhost)
    }

    /// Deletes the vhost (or, in the URL's vhost, the queue).
    pub(super) async fn remove(mut self) -> Result<(), RealError> {
        self.removed = true;
        match &self.home {
            Home::Vhost(vhost) => rabbitmqctl(&["delete_vhost", vhost]).await.map_err(setup_error),
            Home::Shared => {
                let until = Instant::now() + SETUP_TIMEOUT;
                let connection = open(&self.shared, until)
                    .await
                    .ok_or_else(|| setup_error("no answer while deleting the queue"))?
                    .map_err(setup_error)?;
                let queue = self.shared.queue.clone();
                let deleted = self
                    .shared
                    .background
                    .run(until, async move {
                        let channel = connection.create_channel().await?;
                        channel.queue_delete(queue.into(), QueueDeleteOptions::default()).await
                    })
                    .await;
                match deleted {
                    Some(Ok(_)) => Ok(()),
                    Some(Err(error)) => Err(setup_error(error)),
                    None => Err(setup_error("no answer while deleting the queue")),
                }
            }
        }
    }
}

impl Drop for RabbitQueue {
    /// A queue dropped without [`RabbitQueue::remove`] still deletes its
    /// vhost, from a thread of its own (`drop` cannot wait, and may run on
    /// a worker's runtime). In the URL's vhost the queue expires unused.
    fn drop(&mut self) {
        if let (false, Home::Vhost(vhost)) = (self.removed, &self.home) {
            let vhost = vhost.clone();
            let _ = std::thread::Builder::new().name("lockcheck-rabbitmq-cleanup".into()).spawn(
                move || {
                    let _ = std::process::Command::new("rabbitmqctl")
                        .args(["delete_vhost", &vhost])
                        .stdin(std::process::Stdio::null())
                        .output();
                },
            );
        }
    }
}

/// A session's connection and its channels.
struct Link {
    /// Which of the session's connections this is, from 0: a channel is
    /// reused only on the connection it belongs to.
    number: u64,
    connection: Connection,
    /// Publishes with publisher confirms.
    publisher: Channel,
    /// Channels that hold no delivery, for the next `basic.get`.
    idle: Vec<Channel>,
}

impl Link {
    async fn open(
        shared: &Shared,
        until: Instant,
        number: u64,
    ) -> Option<Result<Link, lapin::Error>> {
        let uri = shared.uri.clone();
        let opened = async move {
            let connection = Connection::connect_uri(uri, ConnectionProperties::default()).await?;
            let publisher = connection.create_channel().await?;
            publisher.confirm_select(ConfirmSelectOptions::default()).await?;
            Ok((connection, publisher))
        };
        let opened = shared.background.run(until, opened).await?;
        Some(opened.map(|(connection, publisher)| Link {
            number,
            connection,
            publisher,
            idle: Vec::new(),
        }))
    }
}

/// Who settled a delivery, the worker's ack or its watchdog: the first to
/// move it from `Held`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Claim {
    Held,
    /// The worker's ack is on its way: the watchdog waits for it (a
    /// deadline more), since closing the channel now would leave the ack's
    /// outcome unknown.
    Acking,
    Acked,
    /// The watchdog closed the channel: RabbitMQ requeued the message.
    Released,
}

/// A delivery this session holds.
#[derive(Debug)]
struct Held {
    channel: Channel,
    tag: u64,
    /// The link whose channel it is.
    link: u64,
    claim: Arc<Mutex<Claim>>,
}

/// One worker's way to the run's queue.
pub(super) struct RabbitSession {
    shared: Arc<Shared>,
    /// `None` after a timeout or a lost connection: the next call opens a
    /// new one.
    link: Option<Link>,
    /// Connections opened so far.
    links: u64,
    /// Deliveries not yet acked, by message id.
    held: HashMap<u64, Held>,
}

impl std::fmt::Debug for RabbitSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RabbitSession")
            .field("queue", &self.shared.queue)
            .field("connected", &self.link.is_some())
            .field("held", &self.held.len())
            .finish()
    }
}

/// Closes `channel` once `at` passes with its delivery not acked, so that
/// RabbitMQ requeues the message; an ack already on its way gets `grace`
/// more.
async fn watchdog(channel: Channel, claim: Arc<Mutex<Claim>>, at: Instant, grace: Duration) {
    tokio::time::sleep_until(at).await;
    let mut waited = false;
    loop {
        {
            let mut claim = lock(&claim);
            match *claim {
                Claim::Held => *claim = Claim::Released,
                Claim::Acking if !waited => {}
                Claim::Acking => *claim = Claim::Released,
                Claim::Acked | Claim::Released => return,
            }
            if *claim == Claim::Released {
                break;
            }
        }
        waited = true;
        tokio::time::sleep(grace).await;
    }
    let _ = channel.close(REPLY_SUCCESS, "visibility timeout".into()).await;
}

impl RabbitSession {
    /// The connection, opened anew if the last one was given up; `None` if
    /// it cannot be opened by `until`. Nothing of the call has been sent
    /// then, so the call fails `unavailable`.
    async fn link(&mut self, until: Instant) -> Option<&mut Link> {
        if self.link.as_ref().is_some_and(|link| !link.connection.status().connected()) {
            self.link = None;
        }
        if self.link.is_none() {
            self.links += 1;
            if let Some(Ok(link)) = Link::open(&self.shared, until, self.links).await {
                self.link = Some(link);
            }
        }
        self.link.as_mut()
    }

    /// Publishes `data` persistently under the next message id: `Ok` once
    /// RabbitMQ confirms it has the message.
    pub(super) async fn enqueue(&mut self, data: &str) -> Outcome<u64> {
        let until = Instant::now() + self.shared.deadline;
        let shared = self.shared.clone();
        let Some(link) = self.link(until).await else {
            return Outcome::Fail("unavailable".into());
        };
        let publisher = link.publisher.clone();
        let publish = async {
            let _order = shared.enqueue_order.lock().await;
            let id = shared.last_id.fetch_add(1, Ordering::SeqCst) + 1;
            let properties = BasicProperties::default()
                .with_delivery_mode(2)
                .with_content_type("text/plain".into())
                .with_message_id(id.to_string().into());
            let confirm = publisher
                .basic_publish(
                    "".into(),
                    shared.queue.as_str().into(),
                    BasicPublishOptions::default(),
                    data.as_bytes(),
                    properties,
                )
                .await?;
            Ok::<_, lapin::Error>((id, confirm.await?))
        };
        let (outcome, lost) = match timeout_at(until, publish).await {
            Ok(Ok((id, Confirmation::Ack(None)))) => (Outcome::Ok(id), false),
            // Returned: unroutable, which a publish to the default
            // exchange is only when the queue is gone.
            Ok(Ok((_, Confirmation::Ack(Some(_))))) => (Outcome::Fail("unroutable".into()), false),
            Ok(Ok((_, Confirmation::Nack(_)))) => (Outcome::Fail("nacked".into()), false),
            Ok(Ok((_, Confirmation::NotRequested))) => (Outcome::Info("unconfirmed".into()), true),
            Ok(Err(_)) => (Outcome::Info("conn-lost".into()), true),
            Err(_) => (Outcome::Info("timeout".into()), true),
        };
        if lost {
            self.link = None;
        }
        outcome
    }

    /// Takes the next message with `basic.get` on a channel of its own,
    /// and starts its watchdog.
    pub(super) async fn deliver(&mut self, visibility_ms: u64) -> Outcome<Option<Delivery>> {
        let until = Instant::now() + self.shared.deadline;
        let shared = self.shared.clone();
        let Some(link) = self.link(until).await else {
            return Outcome::Fail("unavailable".into());
        };
        let number = link.number;
        let channel = match link.idle.pop() {
            Some(channel) if channel.status().connected() => channel,
            _ => match timeout_at(until, link.connection.create_channel()).await {
                Ok(Ok(channel)) => channel,
                // Nothing of the delivery was asked for yet.
                _ => {
                    self.link = None;
                    return Outcome::Fail("unavailable".into());
                }
            },
        };
        let get =
            channel.basic_get(shared.queue.as_str().into(), BasicGetOptions { no_ack: false });
        let message = match timeout_at(until, get).await {
            Ok(Ok(Some(message))) => message.delivery,
            Ok(Ok(None)) => {
                link.idle.push(channel);
                return Outcome::Ok(None);
            }
            // A message taken on a channel that is dropped here goes back
            // to the queue; whether one was taken is unknown.
            Ok(Err(_)) => {
                self.link = None;
                return Outcome::Info("conn-lost".into());
            }
            Err(_) => return Outcome::Info("timeout".into()),
        };
        let id = message.properties.message_id().as_ref().and_then(|id| id.as_str().parse().ok());
        let (Some(id), Ok(data)) = (id, String::from_utf8(message.data)) else {
            // Not one of ours: dropping its channel requeues it.
            return Outcome::Info("bad-message".into());
        };
        let redelivered = message.redelivered;
        let delivery = {
            let mut deliveries = lock(&shared.deliveries);
            let count = deliveries.entry(id).or_insert(0);
            *count = (*count + 1).max(if redelivered { 2 } else { 1 });
            *count
        };
        let claim = Arc::new(Mutex::new(Claim::Held));
        let at = Instant::now() + Duration::from_millis(visibility_ms);
        let watched = watchdog(channel.clone(), claim.clone(), at, shared.deadline);
        shared.background.handle.spawn(watched);
        let held = Held { channel, tag: message.delivery_tag, link: number, claim };
        self.held.insert(id, held);
        Outcome::Ok(Some(Delivery { message: id, data, delivery, redelivered }))
    }

    /// Acknowledges a delivery this session holds, and waits for RabbitMQ
    /// to have it (a `basic.qos` round trip after the ack on the same
    /// channel: RabbitMQ handles a channel's frames in order). `gone` when
    /// the session holds no delivery of `message`: acked before, never
    /// delivered here, or taken away by its watchdog.
    pub(super) async fn ack(&mut self, message: u64) -> Outcome<()> {
        let until = Instant::now() + self.shared.deadline;
        let Some(held) = self.held.remove(&message) else {
            return Outcome::Fail("gone".into());
        };
        {
            let mut claim = lock(&held.claim);
            if *claim != Claim::Held {
                return Outcome::Fail("gone".into());
            }
            *claim = Claim::Acking;
        }
        let channel = &held.channel;
        let acked = async {
            channel.basic_ack(held.tag, BasicAckOptions::default()).await?;
            channel.basic_qos(0, BasicQosOptions::default()).await
        };
        match timeout_at(until, acked).await {
            Ok(Ok(())) => {
                *lock(&held.claim) = Claim::Acked;
                if let Some(link) = self.link.as_mut().filter(|link| link.number == held.link) {
                    link.idle.push(held.channel);
                }
                Outcome::Ok(())
            }
            // The channel closed under the ack: whether it landed first
            // is unknown.
            Ok(Err(_)) => Outcome::Info("conn-lost".into()),
            Err(_) => Outcome::Info("timeout".into()),
        }
    }

    /// The next call opens a new connection. Deliveries held stay hidden
    /// until their watchdogs release them, as the pure queue's do until
    /// their timeouts.
    pub(super) fn reset(&mut self) {
        self.link = None;
        self.held.clear();
    }
}
