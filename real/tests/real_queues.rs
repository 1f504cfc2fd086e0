//! The payments workload's real queues, each test for both kinds: a
//! PostgreSQL jobs table taken with `SKIP LOCKED` and a RabbitMQ queue,
//! held to what the pure queue (`lockcheck_workloads::queue`) says.
//!
//! The servers: `LOCKCHECK_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`) and `LOCKCHECK_RABBITMQ_URL`
//! (default `amqp://guest:guest@127.0.0.1:5672/%2f`). A server that cannot
//! be reached fails the test, saying so. Every test names its own queue
//! (the process id and a counter), so the tests run in parallel without
//! meeting.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use lockcheck_real::{QueueConfig, QueueSession, RealError, RealQueue};
use lockcheck_workloads::queue::{Delivery, QueueKind};
use lockcheck_workloads::Outcome;

/// A visibility timeout no test outlasts.
const LONG_MS: u64 = 120_000;
/// A visibility timeout a test waits out.
const SHORT_MS: u64 = 300;
/// How long a test waits for a redelivery: far past [`SHORT_MS`], for a
/// loaded machine.
const PATIENCE: Duration = Duration::from_secs(30);

fn postgres_url() -> String {
    std::env::var("LOCKCHECK_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string())
}

fn rabbitmq_url() -> String {
    std::env::var("LOCKCHECK_RABBITMQ_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_string())
}

/// A queue name of this test's own.
fn unique_name(test: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    format!("t{}-{n}-{test}", std::process::id())
}

fn config(test: &str) -> QueueConfig {
    QueueConfig {
        postgres_url: postgres_url(),
        rabbitmq_url: rabbitmq_url(),
        name: unique_name(test),
        deadline: Duration::from_secs(5),
    }
}

/// A fresh queue of `kind`; a server that cannot be reached fails the test.
async fn prepared(kind: QueueKind, test: &str) -> RealQueue {
    let url = match kind {
        QueueKind::Postgres => postgres_url(),
        QueueKind::Rabbitmq => rabbitmq_url(),
    };
    RealQueue::prepare(kind, config(test)).await.unwrap_or_else(|error| {
        panic!("cannot set up a {} queue at {url} (is the server running?): {error}", kind.name())
    })
}

async fn session(queue: &RealQueue) -> QueueSession {
    queue
        .connect()
        .await
        .unwrap_or_else(|error| panic!("cannot open a {} session: {error}", queue.kind().name()))
}

fn ok<T: std::fmt::Debug>(outcome: Outcome<T>, what: &str) -> T {
    match outcome {
        Outcome::Ok(value) => value,
        other => panic!("{what}: {other:?}"),
    }
}

fn delivery(message: u64, data: &str, delivery: u32) -> Delivery {
    Delivery { message, data: data.into(), delivery, redelivered: delivery > 1 }
}

/// Delivers until a job comes, for at most [`PATIENCE`].
async fn deliver_eventually(session: &mut QueueSession, visibility_ms: u64) -> Delivery {
    let started = Instant::now();
    loop {
        if let Some(job) = ok(session.deliver(visibility_ms).await, "deliver") {
            return job;
        }
        assert!(started.elapsed() < PATIENCE, "no job was delivered again within {PATIENCE:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Each test as one function per kind, so that a failure names its kind.
macro_rules! both_kinds {
    ($($test:ident),* $(,)?) => {
        mod postgres {
            $(
                #[tokio::test]
                async fn $test() {
                    super::$test(lockcheck_workloads::queue::QueueKind::Postgres).await
                }
            )*
        }
        mod rabbitmq {
            $(
                #[tokio::test]
                async fn $test() {
                    super::$test(lockcheck_workloads::queue::QueueKind::Rabbitmq).await
                }
            )*
        }
    };
}

both_kinds!(
    a_job_enqueued_is_delivered_as_its_first_delivery,
    an_empty_queue_delivers_nothing,
    an_acked_job_is_never_delivered_again_and_a_second_ack_is_gone,
    a_job_not_acked_in_time_is_redelivered_to_another_session,
    a_stalled_session_loses_its_job_after_the_visibility_timeout,
    two_sessions_delivering_at_once_never_share_a_visible_job,
    jobs_come_out_oldest_first,
    removing_the_queue_cleans_up_what_it_made,
    an_unreachable_server_is_a_connect_error,
    jobs_per_second_with_one_session,
);

async fn a_job_enqueued_is_delivered_as_its_first_delivery(kind: QueueKind) {
    let queue = prepared(kind, "first").await;
    let mut worker = session(&queue).await;
    assert_eq!(ok(worker.enqueue("order-1").await, "enqueue"), 1);
    assert_eq!(ok(worker.enqueue("order-2").await, "enqueue"), 2);
    let job = ok(worker.deliver(LONG_MS).await, "deliver");
    assert_eq!(job, Some(delivery(1, "order-1", 1)));
    ok(worker.ack(1).await, "ack");
    queue.remove().await.unwrap();
}

async fn an_empty_queue_delivers_nothing(kind: QueueKind) {
    let queue = prepared(kind, "empty").await;
    let mut worker = session(&queue).await;
    assert_eq!(ok(worker.deliver(LONG_MS).await, "deliver"), None);
    // A queue whose only job is delivered, and hidden, is as empty.
    ok(worker.enqueue("order-1").await, "enqueue");
    assert!(ok(worker.deliver(LONG_MS).await, "deliver").is_some());
    let mut other = session(&queue).await;
    assert_eq!(ok(other.deliver(LONG_MS).await, "deliver"), None);
    assert_eq!(ok(worker.deliver(LONG_MS).await, "deliver"), None);
    queue.remove().await.unwrap();
}

async fn an_acked_job_is_never_delivered_again_and_a_second_ack_is_gone(kind: QueueKind) {
    let queue = prepared(kind, "acked").await;
    let mut worker = session(&queue).await;
    let mut other = session(&queue).await;
    ok(worker.enqueue("order-1").await, "enqueue");
    let job = ok(worker.deliver(SHORT_MS).await, "deliver");
    assert_eq!(job, Some(delivery(1, "order-1", 1)));
    ok(worker.ack(1).await, "ack");
    assert_eq!(worker.ack(1).await, Outcome::Fail("gone".into()));
    assert_eq!(other.ack(1).await, Outcome::Fail("gone".into()));
    // Well past the visibility timeout the job stays gone.
    tokio::time::sleep(Duration::from_millis(SHORT_MS * 4)).await;
    assert_eq!(ok(worker.deliver(LONG_MS).await, "deliver"), None);
    assert_eq!(ok(other.deliver(LONG_MS).await, "deliver"), None);
    queue.remove().await.unwrap();
}

/// What the stalled session's late ack comes to, once its job went to
/// another: PostgreSQL deletes by id whoever holds the job (as pgmq and
/// the pure queue do), so the late ack is `Ok` and takes the job from the
/// new holder, whose own ack is then `gone`. RabbitMQ binds an ack to its
/// channel, which the watchdog closed: the late ack is `gone`, and the new
/// holder's acks.
fn late_acks(kind: QueueKind) -> (Outcome<()>, Outcome<()>) {
    match kind {
        QueueKind::Postgres => (Outcome::Ok(()), Outcome::Fail("gone".into())),
        QueueKind::Rabbitmq => (Outcome::Fail("gone".into()), Outcome::Ok(())),
    }
}

async fn a_job_not_acked_in_time_is_redelivered_to_another_session(kind: QueueKind) {
    let queue = prepared(kind, "redeliver").await;
    let mut slow = session(&queue).await;
    let mut other = session(&queue).await;
    ok(slow.enqueue("order-1").await, "enqueue");
    assert_eq!(ok(slow.deliver(SHORT_MS).await, "deliver"), Some(delivery(1, "order-1", 1)));
    // The slow session neither acks nor is told: its job times out.
    let again = deliver_eventually(&mut other, LONG_MS).await;
    assert_eq!(again, delivery(1, "order-1", 2));
    assert!(again.redelivered);
    let (late, newer) = late_acks(kind);
    assert_eq!(slow.ack(1).await, late, "the slow session's late ack");
    assert_eq!(other.ack(1).await, newer, "the new holder's ack");
    assert_eq!(ok(other.deliver(LONG_MS).await, "deliver"), None);
    queue.remove().await.unwrap();
}

async fn a_stalled_session_loses_its_job_after_the_visibility_timeout(kind: QueueKind) {
    let queue = prepared(kind, "stalled").await;
    let mut producer = session(&queue).await;
    ok(producer.enqueue("order-1").await, "enqueue");
    let mut stalled = session(&queue).await;
    let (delivered_tx, delivered) = tokio::sync::oneshot::channel();
    let (resume, resumed) = std::sync::mpsc::channel::<()>();
    let (acked_tx, acked) = tokio::sync::oneshot::channel();
    // The stalled worker: a thread of its own with a current-thread
    // runtime, blocked (its task not polled at all) from its delivery
    // until the test tells it to go on.
    let worker = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
        let runtime = runtime.expect("a runtime for the stalled worker");
        runtime.block_on(async move {
            let job = stalled.deliver(SHORT_MS).await;
            let _ = delivered_tx.send(job);
            // The stall: the thread blocks, and its runtime with it.
            let _ = resumed.recv();
            let _ = acked_tx.send(stalled.ack(1).await);
        });
    });
    let job = delivered.await.expect("the stalled worker delivers");
    assert_eq!(ok(job, "deliver"), Some(delivery(1, "order-1", 1)));
    let mut other = session(&queue).await;
    let again = deliver_eventually(&mut other, LONG_MS).await;
    assert_eq!(again, delivery(1, "order-1", 2));
    resume.send(()).expect("the stalled worker waits");
    let (late, newer) = late_acks(kind);
    assert_eq!(acked.await.expect("the stalled worker acks"), late);
    assert_eq!(other.ack(1).await, newer);
    worker.join().expect("the stalled worker ends");
    queue.remove().await.unwrap();
}

async fn two_sessions_delivering_at_once_never_share_a_visible_job(kind: QueueKind) {
    const JOBS: u64 = 60;
    const ROUNDS: u64 = 3;
    const SESSIONS: usize = 3;
    let queue = prepared(kind, "skip-locked").await;
    let mut producer = session(&queue).await;
    let mut workers = Vec::new();
    for _ in 0..SESSIONS {
        workers.push(session(&queue).await);
    }
    for round in 0..ROUNDS {
        for job in 0..JOBS {
            ok(producer.enqueue(&format!("order-{round}-{job}")).await, "enqueue");
        }
        // Every session delivers (and holds, unacked) until the queue is
        // dry, all at once.
        let drained = futures_util::future::join_all(workers.iter_mut().map(|worker| async {
            let mut got = Vec::new();
            while let Some(job) = ok(worker.deliver(LONG_MS).await, "deliver") {
                got.push(job);
            }
            got
        }))
        .await;
        let mut seen: BTreeMap<u64, usize> = BTreeMap::new();
        for (who, got) in drained.iter().enumerate() {
            for job in got {
                assert_eq!(job.delivery, 1, "round {round}: {job:?} to session {who}");
                if let Some(first) = seen.insert(job.message, who) {
                    panic!("round {round}: job {} went to sessions {first} and {who}", job.message);
                }
            }
        }
        let expected: Vec<u64> = (round * JOBS + 1..=(round + 1) * JOBS).collect();
        assert_eq!(seen.keys().copied().collect::<Vec<_>>(), expected, "round {round}");
        for (worker, got) in workers.iter_mut().zip(&drained) {
            for job in got {
                ok(worker.ack(job.message).await, "ack");
            }
        }
    }
    queue.remove().await.unwrap();
}

async fn jobs_come_out_oldest_first(kind: QueueKind) {
    let queue = prepared(kind, "order").await;
    let mut worker = session(&queue).await;
    for job in 1..=20 {
        assert_eq!(ok(worker.enqueue(&format!("order-{job}")).await, "enqueue"), job);
    }
    for job in 1..=20 {
        let got = ok(worker.deliver(LONG_MS).await, "deliver");
        assert_eq!(got, Some(delivery(job, &format!("order-{job}"), 1)));
        ok(worker.ack(job).await, "ack");
    }
    queue.remove().await.unwrap();
}

fn vhosts() -> Vec<String> {
    let listed = std::process::Command::new("rabbitmqctl")
        .args(["-q", "list_vhosts", "name"])
        .output()
        .expect("rabbitmqctl runs");
    assert!(listed.status.success(), "rabbitmqctl list_vhosts: {listed:?}");
    String::from_utf8_lossy(&listed.stdout).lines().map(str::to_string).collect()
}

async fn table_exists(name: &str) -> bool {
    let (client, connection) =
        tokio_postgres::connect(&postgres_url(), tokio_postgres::NoTls).await.unwrap();
    let driving = tokio::spawn(connection);
    let table = format!("\"lockcheck_jobs_{name}\"");
    let row = client.query_one("SELECT to_regclass($1)::text", &[&table]).await.unwrap();
    driving.abort();
    row.get::<_, Option<String>>(0).is_some()
}

/// Whether the queue's own place is there: its vhost, or its table.
async fn exists(kind: QueueKind, name: &str) -> bool {
    match kind {
        QueueKind::Postgres => table_exists(name).await,
        QueueKind::Rabbitmq => vhosts().contains(&format!("lockcheck-{name}")),
    }
}

async fn removing_the_queue_cleans_up_what_it_made(kind: QueueKind) {
    let config = config("cleanup");
    let name = config.name.clone();
    let queue = RealQueue::prepare(kind, config).await.unwrap();
    assert!(queue.notes().is_empty(), "{:?}", queue.notes());
    assert!(exists(kind, &name).await);
    queue.remove().await.unwrap();
    assert!(!exists(kind, &name).await);
    if kind == QueueKind::Rabbitmq {
        // Dropped, not removed: the vhost goes all the same, soon.
        let config = self::config("dropped");
        let name = config.name.clone();
        let queue = RealQueue::prepare(kind, config).await.unwrap();
        assert!(exists(kind, &name).await);
        drop(queue);
        let started = Instant::now();
        while exists(kind, &name).await {
            assert!(started.elapsed() < PATIENCE, "the dropped queue's vhost stays");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

async fn an_unreachable_server_is_a_connect_error(kind: QueueKind) {
    let mut config = config("unreachable");
    config.postgres_url = "postgres://postgres@127.0.0.1:1/test".into();
    config.rabbitmq_url = "amqp://guest:guest@127.0.0.1:1/%2f".into();
    match RealQueue::prepare(kind, config).await {
        Err(RealError::Connect { .. }) => {}
        other => panic!("expected a connect error, got {other:?}"),
    }
}

/// Not a timing assertion: prints jobs per second through enqueue,
/// deliver and ack, one at a time, with one session.
async fn jobs_per_second_with_one_session(kind: QueueKind) {
    const JOBS: u64 = 300;
    let queue = prepared(kind, "rate").await;
    let mut worker = session(&queue).await;
    let started = Instant::now();
    for job in 1..=JOBS {
        assert_eq!(ok(worker.enqueue("order").await, "enqueue"), job);
        let got = ok(worker.deliver(LONG_MS).await, "deliver").expect("a job");
        ok(worker.ack(got.message).await, "ack");
    }
    let rate = JOBS as f64 / started.elapsed().as_secs_f64();
    println!("{}: {rate:.0} jobs/s (enqueue + deliver + ack, one session)", kind.name());
    queue.remove().await.unwrap();
}

#[tokio::test]
async fn a_bad_queue_name_is_refused_before_any_server_is_asked() {
    for kind in QueueKind::ALL {
        let mut config = config("x");
        config.name = "no spaces; please".into();
        match RealQueue::prepare(kind, config).await {
            Err(RealError::Setup { reason, .. }) => assert!(reason.contains("queue name")),
            other => panic!("expected a setup error, got {other:?}"),
        }
    }
}
