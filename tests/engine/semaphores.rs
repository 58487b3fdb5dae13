//! Counting semaphores against a lab: never more holders than permits, a permit of a dead
//! holder frees itself within its TTL, permits renew and release by their token, and a count
//! that disagrees with the semaphore's is refused naming the field.

use crate::common;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{eventually, plain_lab};
use quorumlock::{Error, MAX_PERMITS};

const MS: Duration = Duration::from_millis(1);

/// The channel a semaphore's releases are announced on.
fn permits_channel(name: &str) -> String {
    format!("ql:{{{name}}}:permits:released")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_are_granted_then_refused_until_a_release() {
    let fx = plain_lab().await;
    let first = fx
        .locks
        .acquire_permit("api", 2)
        .ttl(5_000 * MS)
        .owner("agent-1")
        .await
        .expect("first permit");
    let second = fx
        .locks
        .acquire_permit("api", 2)
        .ttl(5_000 * MS)
        .owner("agent-2")
        .await
        .expect("second permit");
    assert_ne!(first.token(), second.token());
    let status = fx.locks.semaphore_status("api").await.expect("status");
    assert_eq!(status.permits, Some(2));
    let slots: HashSet<u32> = status.holders.iter().map(|h| h.permit).collect();
    assert_eq!(slots, HashSet::from([0, 1]), "{status:?}");
    let owners: HashSet<Option<String>> = status
        .holders
        .iter()
        .map(|h| h.holder.owner.clone())
        .collect();
    assert!(owners.contains(&Some("agent-1".into())) && owners.contains(&Some("agent-2".into())));
    match fx.locks.acquire_permit("api", 2).await {
        Err(Error::Held { resource, .. }) => assert_eq!(resource, "api"),
        outcome => panic!("a third permit of two: {outcome:?}"),
    }
    fx.locks
        .release("api", first.token())
        .await
        .expect("release the first by its token");
    let third = fx
        .locks
        .acquire_permit("api", 2)
        .await
        .expect("a released permit is free again");
    drop((second, third));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holders_never_outnumber_the_permits() {
    let fx = plain_lab().await;
    const PERMITS: u32 = 3;
    let holding = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..6 {
        let locks = fx.client().await;
        let (holding, most) = (holding.clone(), most.clone());
        workers.push(tokio::spawn(async move {
            let mut fences: Vec<(u32, u64)> = Vec::new();
            for _ in 0..6 {
                let permit = locks
                    .acquire_permit("pool", PERMITS)
                    .ttl(3_000 * MS)
                    .wait(30_000 * MS)
                    .await
                    .expect("a permit within the wait");
                let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(30 * MS).await;
                holding.fetch_sub(1, Ordering::SeqCst);
                let slot = permit
                    .token()
                    .rsplit_once('-')
                    .and_then(|(_, slot)| slot.parse().ok())
                    .expect("a permit's token names its slot");
                fences.push((slot, permit.fencing_token()));
                permit.release().await.expect("release");
            }
            locks.close().await;
            fences
        }));
    }
    let mut by_slot: Vec<Vec<u64>> = vec![Vec::new(); PERMITS as usize];
    for worker in workers {
        let fences = tokio::time::timeout(Duration::from_secs(90), worker)
            .await
            .expect("every worker finished")
            .expect("worker");
        for (slot, fence) in fences {
            by_slot[slot as usize].push(fence);
        }
    }
    let most = most.load(Ordering::SeqCst);
    assert!(
        most <= PERMITS as usize,
        "{most} holders of {PERMITS} permits"
    );
    assert!(most >= 2, "the permits were never shared ({most} at most)");
    // Each slot is a lock of its own: its fencing tokens never repeat.
    for fences in &by_slot {
        let distinct: HashSet<&u64> = fences.iter().collect();
        assert_eq!(
            distinct.len(),
            fences.len(),
            "a slot's fencing token repeated"
        );
    }
    let status = fx.locks.semaphore_status("pool").await.expect("status");
    assert!(status.holders.is_empty(), "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_holders_permit_frees_within_its_ttl() {
    let fx = plain_lab().await;
    let dead = fx
        .locks
        .acquire_permit("solo", 1)
        .ttl(600 * MS)
        .await
        .expect("the permit");
    // Its holder dies: nobody releases it.
    let _ = dead.detach();
    let started = Instant::now();
    let other = fx.client().await;
    other
        .acquire_permit("solo", 1)
        .wait(5_000 * MS)
        .await
        .expect("the permit frees itself");
    assert!(
        started.elapsed() < 600 * MS + Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_on_a_full_semaphore_wakes_at_a_release() {
    let fx = plain_lab().await;
    let held = fx
        .locks
        .acquire_permit("gate", 1)
        .ttl(20_000 * MS)
        .await
        .expect("the permit");
    let other = fx.client().await;
    let waiter = tokio::spawn(async move {
        other
            .acquire_permit("gate", 1)
            .wait(15_000 * MS)
            .await
            .map(|permit| permit.fencing_token())
    });
    assert!(
        fx.subscribed(0, &permits_channel("gate"), 5_000 * MS).await,
        "the waiter never listened for the semaphore's releases"
    );
    let first_fence = held.fencing_token();
    held.release().await.expect("release");
    let fence = tokio::time::timeout(5_000 * MS, waiter)
        .await
        .expect("woken by the release, long before its wait ran out")
        .expect("task")
        .expect("the permit");
    assert!(fence > first_fence);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_renews_by_token_and_keepalive_keeps_it() {
    let fx = plain_lab().await;
    let permit = fx
        .locks
        .acquire_permit("renewed", 2)
        .ttl(600 * MS)
        .await
        .expect("the permit");
    let token = permit.token().to_string();
    let detached = permit.detach();
    fx.locks
        .extend("renewed", &token, 5_000 * MS)
        .await
        .expect("renewed by its token");
    let status = fx.locks.semaphore_status("renewed").await.expect("status");
    assert!(status.holders[0].holder.remaining_ms > 1_000, "{status:?}");
    fx.locks
        .release("renewed", &detached.token)
        .await
        .expect("released by its token");
    assert!(
        fx.locks
            .semaphore_status("renewed")
            .await
            .expect("status")
            .holders
            .is_empty()
    );
    // Kept alive past several TTLs.
    let kept = fx
        .locks
        .acquire_permit("renewed", 2)
        .ttl(300 * MS)
        .keepalive()
        .await
        .expect("kept permit");
    tokio::time::sleep(1_000 * MS).await;
    assert!(kept.ended().is_none(), "{:?}", kept.ended());
    assert_eq!(
        fx.locks
            .semaphore_status("renewed")
            .await
            .expect("status")
            .holders
            .len(),
        1
    );
    kept.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_permit_keeps_the_count() {
    use fred::prelude::KeysInterface;
    let fx = plain_lab().await;
    let mut held = fx
        .locks
        .acquire_permit("renewed-count", 1)
        .ttl(5_000 * MS)
        .await
        .expect("the permit");
    // As if its last grant were long ago: the count is about to expire on every master.
    let count = "ql:{renewed-count}:permits";
    fx.on_masters(fx.groups(), async |master| {
        let set: bool = master.pexpire(count, 60_000, None).await.expect("PEXPIRE");
        assert!(set, "the count exists");
    })
    .await;
    held.extend(5_000 * MS).await.expect("renewed");
    let lifetimes = fx
        .on_masters(fx.groups(), async |master| {
            let left: i64 = master.pttl(count).await.expect("PTTL");
            left
        })
        .await;
    assert!(
        lifetimes.iter().all(|&left| left > 3_600_000),
        "the renewal left the count to expire (PTTL in ms per group): {lifetimes:?}"
    );
    // So a caller giving a larger count is still refused.
    match fx.locks.acquire_permit("renewed-count", 3).await {
        Err(Error::InvalidInput { field, reason }) => {
            assert_eq!(field, "permits");
            assert!(reason.contains("has 1 permits"), "{reason}");
        }
        other => panic!("a second holder of a one-permit semaphore: {other:?}"),
    }
    held.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_permit_count_is_refused_naming_the_field() {
    let fx = plain_lab().await;
    let held = fx
        .locks
        .acquire_permit("counted", 2)
        .await
        .expect("the permit");
    let field = |outcome: Result<quorumlock::Lease, Error>| match outcome {
        Err(Error::InvalidInput { field, reason }) => format!("{field}: {reason}"),
        other => panic!("accepted: {other:?}"),
    };
    let differs = field(fx.locks.acquire_permit("counted", 3).await);
    assert!(
        differs.starts_with("permits:") && differs.contains("has 2 permits"),
        "{differs}"
    );
    assert!(field(fx.locks.acquire_permit("zero", 0).await).starts_with("permits:"));
    assert!(field(fx.locks.acquire_permit("many", MAX_PERMITS + 1).await).starts_with("permits:"));
    assert!(field(fx.locks.acquire_permit("", 2).await).starts_with("resource:"));
    let status = fx.locks.semaphore_status("counted").await.expect("status");
    assert_eq!(status.holders.len(), 1, "{status:?}");
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_in_use_is_one_entry_in_list() {
    let fx = plain_lab().await;
    let common::LockAndPermits { lock, permits } =
        common::hold_a_lock_and_two_permits(&fx.locks).await;
    // A semaphore whose name looks like a slot key is still listed by its own name.
    let odd = fx
        .locks
        .acquire_permit("api:x}:permit:7", 1)
        .owner("worker-3")
        .await
        .expect("permit of the oddly named semaphore");

    // A grant the vote was decided without may reach its group after a walk passed it
    // (docs/mcp.md, list_locks): list once every grant has landed.
    let landed = eventually(Duration::from_secs(5), || async {
        fx.values_of("ql:{api:x}:permit:7}:permit:0")
            .await
            .iter()
            .all(Option::is_some)
    })
    .await;
    assert!(
        landed,
        "the odd semaphore's permit never reached every group"
    );
    let list = fx.locks.list("api:", 100).await.expect("list");
    let locks: Vec<&str> = list.locks.iter().map(|l| l.resource.as_str()).collect();
    assert_eq!(locks, ["api:deploy"], "no rows for permits: {list:?}");
    let names: Vec<&str> = list.semaphores.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["api:search", "api:x}:permit:7"]);
    let search = &list.semaphores[0];
    assert_eq!(search.permits, Some(3));
    let mut owners: Vec<&str> = search
        .holders
        .iter()
        .map(|h| h.holder.owner.as_deref().expect("owner"))
        .collect();
    owners.sort_unstable();
    assert_eq!(owners, ["worker-1", "worker-2"]);
    assert!(search.holders.iter().all(|h| {
        h.holder.purpose.as_deref() == Some("crawl")
            && h.holder.remaining_ms > 0
            && h.fencing_token.is_some()
    }));
    assert!(!list.truncated);

    // A semaphore counts as one entry against the limit.
    let limited = fx.locks.list("api:", 2).await.expect("list");
    assert_eq!(limited.locks.len() + limited.semaphores.len(), 2);
    assert!(limited.truncated);

    // Released permits leave no entry, though the groups keep the count.
    for permit in permits {
        permit.release().await.expect("release");
    }
    odd.release().await.expect("release");
    let after = fx.locks.list("api:", 100).await.expect("list");
    assert!(after.semaphores.is_empty(), "{after:?}");
    assert_eq!(after.locks.len(), 1);
    lock.release().await.expect("release");
}
