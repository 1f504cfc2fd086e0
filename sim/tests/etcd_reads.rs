//! sim-etcd-linearizable-check and sim-etcd-serializable-check: a holder
//! whose keepalive goes unanswered reads its key from its own member, the
//! one it talks to, before it goes on. A partition among the members takes
//! a member's clients with it, so a holder whose member is cut off hears
//! only what that member has. These tests hold what the truth table's cells
//! (`sim/src/matrix.rs`) do not: determinism, the partition's record, and
//! one fixed seed where the serializable read is stale.

use std::time::Duration;

use lockcheck_checker::{analyze_events, write_events, Event, Function, Process, Verdict};
use lockcheck_sim::{run, Backend, FaultKind, RunOptions, Shape, SimRun};

use lockcheck_checker::names::FENCE_MONOTONICITY as FENCE;
use lockcheck_checker::names::LINEARIZABILITY as LINEAR;
use lockcheck_checker::names::RESOURCE_SAFETY as RESOURCE;

/// `backend` under partitions among the members, as the truth table's
/// cells run it.
fn options(backend: Backend, seed: u64) -> RunOptions {
    RunOptions {
        backend,
        faults: vec![FaultKind::Partition],
        partition_shapes: vec![Shape::IsolateOne, Shape::Halves],
        time_limit: Duration::from_secs(30),
        seed,
        ..RunOptions::default()
    }
}

fn simulate(options: &RunOptions) -> SimRun {
    run(options).unwrap_or_else(|error| {
        panic!("{error}; replay: cargo run -- {}", options.replay().arguments())
    })
}

fn bytes(events: &[Event]) -> Vec<u8> {
    let mut bytes = Vec::new();
    write_events(&mut bytes, events).expect("writing to a Vec cannot fail");
    bytes
}

/// The clients each partition's start says were cut off with the minority
/// side (`None` for a record that names none).
fn cut_with_members(events: &[Event]) -> Vec<Option<Vec<String>>> {
    events
        .iter()
        .filter_map(|event| {
            if event.process != Process::Nemesis || event.f != Function::Start {
                return None;
            }
            let value: serde_json::Value =
                serde_json::from_str(event.value.as_ref()?.get()).ok()?;
            (value["fault"] == "partition").then(|| {
                value["clients"].as_array().map(|clients| {
                    clients.iter().filter_map(|client| Some(client.as_str()?.to_string())).collect()
                })
            })
        })
        .collect()
}

#[test]
fn the_same_seed_gives_the_same_history_byte_for_byte() {
    for backend in [Backend::EtcdLinearizableCheck, Backend::EtcdSerializableCheck] {
        let options = options(backend, 6);
        let first = bytes(&simulate(&options).events);
        assert!(!first.is_empty());
        assert!(first == bytes(&simulate(&options).events), "{backend:?}: two runs differ");
        let other = RunOptions { seed: 7, ..options };
        assert!(first != bytes(&simulate(&other).events), "the seed does not reach the run");
    }
}

#[test]
fn a_split_takes_the_clients_of_the_minoritys_member_along_for_the_checking_holders_only() {
    let pinned = simulate(&options(Backend::EtcdSerializableCheck, 6));
    let splits = cut_with_members(&pinned.events);
    assert!(!splits.is_empty(), "no partition struck");
    for clients in &splits {
        // Five clients on three members: one or two go with the member cut off.
        let clients = clients.as_ref().expect("a split names the clients it took along");
        assert!((1..=2).contains(&clients.len()), "{clients:?}");
    }
    // sim-etcd's clients ask any member: a split among members is theirs alone.
    let unpinned = simulate(&options(Backend::Etcd, 6));
    let splits = cut_with_members(&unpinned.events);
    assert!(!splits.is_empty() && splits.iter().all(Option::is_none), "{splits:?}");
}

#[test]
fn a_serializable_read_from_a_member_cut_off_renews_a_lease_the_majority_revoked() {
    // Seed 6: a holder's member is cut off; the majority revokes its lease
    // and grants the lock again, and the holder, its keepalive unanswered,
    // renews on its member's word that its key is there.
    let options = options(Backend::EtcdSerializableCheck, 6);
    let sim = simulate(&options);
    let analysis = analyze_events(&sim.events, &options.checks()).expect("a well-formed history");
    assert_eq!(analysis.verdict_of(LINEAR), Some(Verdict::Invalid), "a stale renewal");
    assert_eq!(analysis.verdict_of(RESOURCE), Some(Verdict::Valid), "the revision fences");
}

#[test]
fn a_linearizable_read_never_renews_past_the_lease() {
    // Mutual exclusion is not promised: a holder cut off from the leader
    // works on until its session's deadline, and past it until its next
    // renewal, as sim-etcd's holder cut off from the whole cluster does.
    for seed in 0..6 {
        let options = options(Backend::EtcdLinearizableCheck, seed);
        let sim = simulate(&options);
        let analysis =
            analyze_events(&sim.events, &options.checks()).expect("a well-formed history");
        for checker in [LINEAR, FENCE, RESOURCE] {
            assert_eq!(
                analysis.verdict_of(checker),
                Some(Verdict::Valid),
                "seed {seed}: {checker}"
            );
        }
    }
}
