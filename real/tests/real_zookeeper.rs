//! Curator's lock (`InterProcessMutex`) against a real ZooKeeper: a waiter
//! watching its predecessor is granted when the holder lets go, the token
//! (the lock znode's czxid, read afresh) grows and is the znode's own, a
//! waiter that gives up takes its znode back, and a holder stops acting
//! once its connection is SUSPENDED, unless it is the broken variant,
//! which acts on until the session is LOST.
//!
//! The server: `LOCKCHECK_ZOOKEEPER_URL` (comma-separated `zk://HOST:PORT`),
//! or else a private ZooKeeper each test starts (Debian's `zookeeper`
//! package on the machine's Java) and stops at its end; without one the
//! test fails, naming the package to install. The test that stops the
//! server always starts its own.

use std::time::Duration;

use lockcheck_real::{ClientConfig, ManagedServer, ServerKind, ZooKeeperClient};
use lockcheck_workloads::zookeeper_lock::{parent_path, Suspension, Variant};
use lockcheck_workloads::{LockClient, Outcome};
use zookeeper_client::Client;

/// The ensemble's URLs, and the server this test started (stopped and
/// deleted when dropped), if it started one.
fn zookeeper() -> (Vec<String>, Option<ManagedServer>) {
    if let Ok(urls) = std::env::var("LOCKCHECK_ZOOKEEPER_URL") {
        return (urls.split(',').map(str::to_string).collect(), None);
    }
    own_zookeeper()
}

fn own_zookeeper() -> (Vec<String>, Option<ManagedServer>) {
    let server = ManagedServer::start(ServerKind::ZooKeeper)
        .unwrap_or_else(|error| panic!("this test needs a ZooKeeper server: {error}"));
    (vec![server.url()], Some(server))
}

/// A client whose calls may take up to `deadline` (it waits in line half of
/// it), on a session of `ttl_ms`.
async fn connect(
    urls: &[String],
    client: u32,
    variant: Variant,
    deadline: Duration,
    ttl_ms: u64,
) -> ZooKeeperClient {
    let config = ClientConfig {
        name: format!("client-{client}"),
        deadline,
        storage_url: String::new(),
        fenced_storage: true,
    };
    ZooKeeperClient::connect(urls, &config, variant, true, ttl_ms)
        .await
        .unwrap_or_else(|error| panic!("ZooKeeper must be reachable at {urls:?}: {error}"))
}

/// The lock parents' children, read by a plain client.
async fn children(urls: &[String], key: &str) -> Vec<String> {
    let plain = Client::connect(urls[0].trim_start_matches("zk://")).await.expect("a plain client");
    plain.list_children(&parent_path(key)).await.expect("the lock's parent")
}

#[tokio::test]
async fn a_waiter_is_granted_when_the_holder_lets_go_and_its_token_is_its_znodes_czxid() {
    let (urls, _server) = zookeeper();
    let key = format!("zk-wait-{}", std::process::id());
    ZooKeeperClient::prepare(&urls, std::slice::from_ref(&key)).await.expect("the lock's parent");
    let roomy = Duration::from_secs(20);
    let mut a = connect(&urls, 0, Variant::CURATOR, roomy, 10_000).await;
    let mut b = connect(&urls, 1, Variant::CURATOR, roomy, 10_000).await;
    let Outcome::Ok(first) = a.acquire(&key, 10_000).await else { panic!("a's acquire") };
    assert_eq!(a.renew(&key, &first, 10_000).await, Outcome::Ok(()));
    // b waits in line (up to ten seconds) while a holds, then a lets go.
    let (second, released) = tokio::join!(b.acquire(&key, 10_000), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        a.release(&key, &first).await
    });
    assert_eq!(released, Outcome::Ok(()));
    let Outcome::Ok(second) = second else { panic!("b's acquire: {second:?}") };
    let (Some(one), Some(two)) = (first.fence, second.fence) else {
        panic!("{first:?} {second:?}")
    };
    assert!(two > one, "tokens {one} then {two}");
    // The token is the znode's own czxid, as a fresh read gives it.
    let path = second.lease.clone().expect("the lock znode's path");
    let plain = Client::connect(urls[0].trim_start_matches("zk://")).await.expect("a plain client");
    let stat = plain.check_stat(&path).await.expect("stat").expect("b's znode exists");
    assert_eq!(u64::try_from(stat.czxid).ok(), Some(two));
    assert_eq!(b.release(&key, &second).await, Outcome::Ok(()));
    assert_eq!(b.release(&key, &second).await, Outcome::Fail("not-held".into()));
    assert!(children(&urls, &key).await.is_empty());
}

#[tokio::test]
async fn a_waiter_that_gives_up_takes_its_znode_back() {
    let (urls, _server) = zookeeper();
    let key = format!("zk-busy-{}", std::process::id());
    ZooKeeperClient::prepare(&urls, std::slice::from_ref(&key)).await.expect("the lock's parent");
    // b waits in line a quarter of a second.
    let mut a = connect(&urls, 0, Variant::CURATOR, Duration::from_secs(20), 10_000).await;
    let mut b = connect(&urls, 1, Variant::CURATOR, Duration::from_millis(500), 10_000).await;
    let Outcome::Ok(grant) = a.acquire(&key, 10_000).await else { panic!("a's acquire") };
    match b.acquire(&key, 10_000).await {
        Outcome::Fail(reason) => assert_eq!(reason, "busy"),
        // A machine too slow for the half-second deadline: the outcome is
        // unknown, and the znode goes with the session at the reset.
        Outcome::Info(_) => b.reset().await,
        Outcome::Ok(grant) => panic!("b granted a held lock: {grant:?}"),
    }
    assert_eq!(children(&urls, &key).await.len(), 1, "only a's znode is left");
    assert_eq!(a.release(&key, &grant).await, Outcome::Ok(()));
}

/// Asks `client` to renew until it answers other than `Ok` or `within`
/// passes: its answer.
async fn renew_until_refused(
    client: &mut ZooKeeperClient,
    key: &str,
    grant: &lockcheck_workloads::Grant,
    within: Duration,
) -> Outcome<()> {
    let until = tokio::time::Instant::now() + within;
    loop {
        let outcome = client.renew(key, grant, 2000).await;
        if outcome != Outcome::Ok(()) || tokio::time::Instant::now() >= until {
            return outcome;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn suspended_stops_curators_holder_and_the_broken_one_acts_until_lost() {
    let (urls, server) = own_zookeeper();
    let server = server.expect("a private server");
    let (key, other) = ("zk-suspend-0".to_string(), "zk-suspend-1".to_string());
    ZooKeeperClient::prepare(&urls, &[key.clone(), other.clone()])
        .await
        .expect("the locks' parents");
    let broken = Variant { suspension: Suspension::KeepsActing, ..Variant::CURATOR };
    let deadline = Duration::from_secs(5);
    let mut curator = connect(&urls, 0, Variant::CURATOR, deadline, 2000).await;
    let mut acting = connect(&urls, 1, broken, deadline, 2000).await;
    let Outcome::Ok(held) = curator.acquire(&key, 2000).await else { panic!("curator's acquire") };
    let Outcome::Ok(kept) = acting.acquire(&other, 2000).await else { panic!("acting's acquire") };
    // The server stops answering: each library is disconnected after two
    // fifths of the session timeout.
    server.pause().expect("SIGSTOP");
    let suspended = renew_until_refused(&mut curator, &key, &held, Duration::from_secs(20)).await;
    assert_eq!(suspended, Outcome::Fail("suspended".into()));
    // The broken one acts on, until its library gives the session up
    // (seven fifths of the timeout after its last answer).
    assert_eq!(acting.renew(&other, &kept, 2000).await, Outcome::Ok(()));
    let lost = renew_until_refused(&mut acting, &other, &kept, Duration::from_secs(30)).await;
    assert_eq!(lost, Outcome::Fail("session-expired".into()));
    server.resume().expect("SIGCONT");
    // A client whose session was lost opens a new one for its next lock.
    let mut granted = false;
    for _ in 0..100 {
        match acting.acquire(&other, 2000).await {
            Outcome::Ok(_) => {
                granted = true;
                break;
            }
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    assert!(granted, "no grant after the server came back");
}

/// A holder and three waiters in line on one lock, each released in turn:
/// the watches that woke the waiters, summed.
async fn wake_ups_in_line(urls: &[String], variant: Variant, key: &str) -> u64 {
    ZooKeeperClient::prepare(urls, &[key.to_string()]).await.expect("the lock's parent");
    let roomy = Duration::from_secs(20);
    let mut holder = connect(urls, 0, variant, roomy, 10_000).await;
    let mut waiters = Vec::new();
    for client in 1..4 {
        waiters.push(connect(urls, client, variant, roomy, 10_000).await);
    }
    let Outcome::Ok(grant) = holder.acquire(key, 10_000).await else { panic!("the first acquire") };
    // Each waiter joins the line a third of a second after the one before,
    // takes the lock when its turn comes, holds it a moment and lets go.
    let turns = waiters.iter_mut().zip(1u64..).map(|(waiter, at)| async move {
        tokio::time::sleep(Duration::from_millis(300 * at)).await;
        let Outcome::Ok(grant) = waiter.acquire(key, 10_000).await else { panic!("waiter {at}") };
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(waiter.release(key, &grant).await, Outcome::Ok(()));
        waiter.take_wake_ups().expect("ZooKeeper counts its wake-ups")
    });
    let (woken, released) = tokio::join!(futures_util::future::join_all(turns), async {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        holder.release(key, &grant).await
    });
    assert_eq!(released, Outcome::Ok(()));
    woken.into_iter().sum()
}

#[tokio::test]
async fn a_release_wakes_one_waiter_and_the_herd_wakes_them_all() {
    let (urls, _server) = zookeeper();
    let tag = std::process::id();
    // Three releases with someone in line: one wake-up each.
    let predecessor = wake_ups_in_line(&urls, Variant::CURATOR, &format!("zk-line-{tag}")).await;
    assert_eq!(predecessor, 3);
    // The herd: the first release wakes all three waiters (N - 1 for a
    // holder and three waiters), the next two and one; every waiter also
    // wakes when a later one joins the line.
    let herd =
        Variant { waiting: lockcheck_workloads::zookeeper_lock::Waiting::Herd, ..Variant::CURATOR };
    let woken = wake_ups_in_line(&urls, herd, &format!("zk-herd-{tag}")).await;
    assert!((6..=9).contains(&woken), "{woken} wake-ups in the herd");
}
