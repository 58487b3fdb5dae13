//! Several resources taken as one lease, all or nothing, against a lab: one script call per
//! group, one fencing token above every earlier holder's of each resource, nothing left
//! behind when a member is held, no deadlock whatever order callers name them in.

use crate::common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{lock_key, plain_lab};
use quorumlock::{Error, MAX_SET_RESOURCES};

const MS: Duration = Duration::from_millis(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_is_taken_and_released_all_or_nothing() {
    let fx = plain_lab().await;
    let before = fx.locks.acquire("b").await.expect("b alone");
    let fence_b = before.fencing_token();
    before.release().await.expect("release b");
    let set = fx
        .locks
        .acquire_all(&["c", "a", "b"])
        .ttl(5_000 * MS)
        .owner("agent-1")
        .await
        .expect("the set");
    assert_eq!(set.resources(), ["a", "b", "c"]);
    assert!(set.fencing_token() > fence_b, "b's fencing token went back");
    let token = set.token().to_string();
    for resource in ["a", "b", "c"] {
        let status = fx.locks.status(resource).await.expect("status");
        assert!(status.held, "{resource} is not held");
        assert_eq!(status.fencing_token, Some(set.fencing_token()));
        for value in fx.values_of(&lock_key(resource)).await {
            let value = value.expect("every group holds every member");
            assert!(value.starts_with(&token), "{resource}: {value}");
        }
    }
    // Each member is held: a single lock on any of them is refused.
    let other = fx.client().await;
    match other.acquire("b").await {
        Err(Error::Held { resource, .. }) => assert_eq!(resource, "b"),
        outcome => panic!("b was not held: {outcome:?}"),
    }
    let released = set.release().await.expect("release the set");
    assert_eq!(released.groups_released, 5);
    for resource in ["a", "b", "c"] {
        assert_eq!(fx.values_of(&lock_key(resource)).await, vec![None; 5]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_meeting_a_held_member_takes_nothing_and_names_it() {
    let fx = plain_lab().await;
    let other = fx.client().await;
    let held = other
        .acquire("b")
        .ttl(5_000 * MS)
        .owner("agent-2")
        .await
        .expect("b");
    match fx.locks.acquire_all(&["a", "b", "c"]).await {
        Err(Error::Held {
            resource, holder, ..
        }) => {
            assert_eq!(resource, "b");
            assert_eq!(
                holder.and_then(|h| h.owner).as_deref(),
                Some("agent-2"),
                "the holder is named"
            );
        }
        outcome => panic!("the set was not refused: {outcome:?}"),
    }
    // Nothing of the set stands on any group, not even for a moment's rollback: each group
    // checks every member before it writes any.
    for resource in ["a", "c"] {
        assert_eq!(fx.values_of(&lock_key(resource)).await, vec![None; 5]);
    }
    assert!(fx.locks.acquire("a").await.is_ok(), "a was left locked");
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_waits_for_its_held_member_and_takes_it() {
    let fx = plain_lab().await;
    let other = fx.client().await;
    let held = other.acquire("y").ttl(10_000 * MS).await.expect("y");
    let locks = fx.locks.clone();
    let waiter = tokio::spawn(async move {
        locks
            .acquire_all(&["x", "y", "z"])
            .wait(8_000 * MS)
            .await
            .map(|lease| lease.attempts())
    });
    // The waiter subscribes to y's release channel once it finds y held.
    assert!(
        fx.subscribed(0, &common::released_channel("y"), 5_000 * MS)
            .await,
        "the set's waiter never listened for y"
    );
    held.release().await.expect("release y");
    let attempts = tokio::time::timeout(5_000 * MS, waiter)
        .await
        .expect("the set was taken at y's release, long before its wait ran out")
        .expect("task")
        .expect("the set");
    assert!(attempts >= 2, "{attempts}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_sets_never_deadlock_nor_overlap() {
    let fx = plain_lab().await;
    let orders: [&[&str]; 4] = [&["p", "q", "r"], &["r", "q", "p"], &["q", "p"], &["r", "p"]];
    // Who holds each resource now; a second holder is an overlap.
    let holding: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let mut workers = Vec::new();
    for (worker, order) in orders.iter().enumerate() {
        let locks = fx.client().await;
        let holding = holding.clone();
        let order: Vec<String> = order.iter().map(|s| s.to_string()).collect();
        workers.push(tokio::spawn(async move {
            let mut taken = 0;
            for _ in 0..8 {
                let lease = locks
                    .acquire_all(&order)
                    .ttl(3_000 * MS)
                    .wait(20_000 * MS)
                    .await
                    .expect("every caller gets its set within the wait");
                {
                    let mut holding = holding.lock().expect("lock");
                    for resource in &order {
                        if let Some(other) = holding.insert(resource.clone(), worker) {
                            panic!("{resource} held by workers {other} and {worker} at once");
                        }
                    }
                }
                tokio::task::yield_now().await;
                {
                    let mut holding = holding.lock().expect("lock");
                    for resource in &order {
                        holding.remove(resource);
                    }
                }
                lease.release().await.expect("release");
                taken += 1;
            }
            locks.close().await;
            taken
        }));
    }
    for worker in workers {
        let taken = tokio::time::timeout(Duration::from_secs(60), worker)
            .await
            .expect("no deadlock: every worker finished")
            .expect("worker");
        assert_eq!(taken, 8);
    }
    for resource in ["p", "q", "r"] {
        assert_eq!(fx.values_of(&lock_key(resource)).await, vec![None; 5]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_renews_only_if_every_member_is_held() {
    let fx = plain_lab().await;
    let set = fx
        .locks
        .acquire_all(&["m", "n"])
        .ttl(5_000 * MS)
        .await
        .expect("the set");
    let token = set.token().to_string();
    fx.locks
        .extend_all(&["n", "m"], &token, 5_000 * MS)
        .await
        .expect("renewed while whole");
    // n is taken from the lease behind its back: no group holds the whole set any more.
    fx.locks.force_release("n").await.expect("force release n");
    match fx.locks.extend_all(&["m", "n"], &token, 5_000 * MS).await {
        Err(Error::NotHeld { resource, .. }) => assert_eq!(resource, "m, n"),
        outcome => panic!("a broken set was renewed: {outcome:?}"),
    }
    // The rest is released by token.
    fx.locks
        .release_all(&["m", "n"], &token)
        .await
        .expect("release the rest");
    assert_eq!(fx.values_of(&lock_key("m")).await, vec![None; 5]);
    drop(set);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_sets_are_refused_naming_the_field() {
    let fx = plain_lab().await;
    let field = |outcome: Result<quorumlock::Lease, Error>| match outcome {
        Err(Error::InvalidInput { field, reason }) => format!("{field}: {reason}"),
        other => panic!("accepted: {other:?}"),
    };
    let empty: [&str; 0] = [];
    assert!(field(fx.locks.acquire_all(&empty).await).starts_with("resources:"));
    let twice = field(fx.locks.acquire_all(&["d", "e", "d"]).await);
    assert!(
        twice.starts_with("resources:") && twice.contains("`d` twice"),
        "{twice}"
    );
    let many: Vec<String> = (0..=MAX_SET_RESOURCES).map(|i| format!("r{i}")).collect();
    assert!(field(fx.locks.acquire_all(&many).await).starts_with("resources:"));
    assert!(field(fx.locks.acquire_all(&["ok", "bad\nname"]).await).starts_with("resource:"));
    for resource in ["d", "e", "ok", "r0"] {
        assert_eq!(fx.values_of(&lock_key(resource)).await, vec![None; 5]);
    }
}
