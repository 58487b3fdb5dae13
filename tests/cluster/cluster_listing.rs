//! The listing on Cluster groups, against real Redis Clusters on loopback: a Cluster group's
//! walk reads its keys slot by slot on the primary that serves each slot, so held locks and
//! semaphores are listed by prefix and released ones are not, a listing paged with a small
//! limit lists every held lock exactly once, and a cursor taken before the slots ahead of it
//! move to another primary still resumes there and lists the rest exactly once. A primary that
//! stops answering partway through its group's walk ends a resumed listing with an error
//! naming the cursor, and a listing started again passes that group over. A listing while
//! a slot is mid-migration, its keys already on the target, lists each held lock once.

use crate::common;

use std::collections::HashMap;
use std::time::Duration;

use common::resp::{array, key_slot, migrate_keys, start_slot_move};
use common::{connect, eventually, hold_a_lock_and_two_permits, port_of, start_lab, temp_dir};
use quorumlock::lab::{ClusterShape, Lab, LabSpec, NodeKind};
use quorumlock::{Error, Lease, LockList, Locks};
use tempfile::TempDir;

/// A cluster lab and a client of it. The lab is declared first: its processes are stopped
/// (by PID, on drop) before their directory is removed.
struct ClusterLab {
    lab: Lab,
    locks: Locks,
    _dir: TempDir,
}

/// `groups` Cluster groups of `shards` primaries each, without replicas.
async fn cluster_lab(groups: usize, shards: usize) -> ClusterLab {
    let dir = temp_dir();
    let lab = start_lab(LabSpec {
        groups,
        sentinels: 0,
        replicas: 0,
        cluster: Some(ClusterShape { shards }),
        ..LabSpec::new(dir.path())
    })
    .await;
    let locks = connect(lab.topology()).await;
    ClusterLab {
        lab,
        locks,
        _dir: dir,
    }
}

/// Holds `count` locks named `<stem><n>` for a minute.
async fn hold(locks: &Locks, stem: &str, count: usize) -> Vec<Lease> {
    let mut leases = Vec::new();
    for n in 0..count {
        leases.push(
            locks
                .acquire(format!("{stem}{n:02}"))
                .ttl(Duration::from_secs(60))
                .owner("holder")
                .await
                .expect("acquire"),
        );
    }
    leases
}

/// [`hold`], each lock held on all three groups: with g1 cut off, a lock whose grant had not
/// reached g3 (a call queued past its timeout on a busy machine) could not be told held.
async fn hold_on_every_group(locks: &Locks, stem: &str, count: usize) -> Vec<Lease> {
    let mut leases = Vec::new();
    for n in 0..count {
        let name = format!("{stem}{n:02}");
        for attempt in 1.. {
            let lease = locks
                .acquire(name.as_str())
                .ttl(Duration::from_secs(60))
                .owner("holder")
                .await
                .expect("acquire");
            let everywhere = eventually(Duration::from_secs(2), || async {
                let status = locks.status(&name).await.expect("status");
                status.holders.len() == 1 && status.holders[0].groups.len() == 3
            })
            .await;
            if everywhere {
                leases.push(lease);
                break;
            }
            assert!(attempt < 5, "{name} never reached all three groups");
            lease.release().await.expect("released");
        }
    }
    leases
}

/// Follows the cursors from `cursor` to the end of the listing.
async fn rest_of_listing(
    locks: &Locks,
    prefix: &str,
    limit: usize,
    mut cursor: Option<String>,
) -> Vec<LockList> {
    let mut pages = Vec::new();
    for _ in 0..100 {
        let page = locks
            .list_page(prefix, limit, cursor.as_deref())
            .await
            .expect("a page of the listing");
        cursor = page.next_cursor.clone();
        pages.push(page);
        if cursor.is_none() {
            return pages;
        }
    }
    panic!("the listing never ended");
}

/// Checks that `pages` list each of `expected` exactly once, and nothing else.
fn assert_each_once(pages: &[LockList], expected: &[String]) {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for page in pages {
        for lock in &page.locks {
            *seen.entry(lock.resource.as_str()).or_default() += 1;
        }
    }
    let twice: Vec<_> = seen.iter().filter(|(_, count)| **count > 1).collect();
    assert!(twice.is_empty(), "listed more than once: {twice:?}");
    let missing: Vec<_> = expected
        .iter()
        .filter(|name| !seen.contains_key(name.as_str()))
        .collect();
    assert!(missing.is_empty(), "not listed: {missing:?}");
    assert_eq!(seen.len(), expected.len(), "listed: {seen:?}");
}

fn names(stem: &str, count: usize) -> Vec<String> {
    (0..count).map(|n| format!("{stem}{n:02}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_locks_and_semaphores_are_listed_by_prefix() {
    let fx = cluster_lab(3, 2).await;
    let held = hold_a_lock_and_two_permits(&fx.locks).await;
    let other = fx
        .locks
        .acquire("jobs:nightly")
        .ttl(Duration::from_secs(60))
        .await
        .expect("acquire");
    let gone = fx
        .locks
        .acquire("api:gone")
        .ttl(Duration::from_secs(60))
        .await
        .expect("acquire");
    gone.release().await.expect("released");
    let permit_gone = fx
        .locks
        .acquire_permit("api:drained", 2)
        .ttl(Duration::from_secs(60))
        .await
        .expect("a permit");
    permit_gone.release().await.expect("released");

    let list = fx.locks.list("api:", 100).await.expect("a listing");
    let locks: Vec<&str> = list.locks.iter().map(|l| l.resource.as_str()).collect();
    assert_eq!(locks, ["api:deploy"], "{list:?}");
    assert_eq!(list.locks[0].owner.as_deref(), Some("carol"));
    assert_eq!(
        list.locks[0].fencing_token,
        Some(held.lock.fencing_token()),
        "{list:?}"
    );
    let [semaphore] = &list.semaphores[..] else {
        panic!("one semaphore: {list:?}");
    };
    assert_eq!(semaphore.name, "api:search");
    let mut owners: Vec<&str> = semaphore
        .holders
        .iter()
        .filter_map(|h| h.holder.owner.as_deref())
        .collect();
    owners.sort_unstable();
    assert_eq!(owners, ["worker-1", "worker-2"], "{semaphore:?}");
    assert!(!list.truncated && list.next_cursor.is_none());

    // Every prefix: the lock under another prefix shows too.
    let everything = fx.locks.list("", 100).await.expect("a listing");
    let mut all: Vec<&str> = everything
        .locks
        .iter()
        .map(|l| l.resource.as_str())
        .collect();
    all.sort_unstable();
    assert_eq!(all, ["api:deploy", "jobs:nightly"], "{everything:?}");

    other.release().await.expect("released");
    held.lock.release().await.expect("released");
    for permit in held.permits {
        permit.release().await.expect("released");
    }
    let after = fx.locks.list("api:", 100).await.expect("a listing");
    assert!(
        after.locks.is_empty() && after.semaphores.is_empty(),
        "{after:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_pages_list_every_held_lock_once() {
    let fx = cluster_lab(3, 2).await;
    let leases = hold(&fx.locks, "paged:", 40).await;
    let pages = rest_of_listing(&fx.locks, "paged:", 7, None).await;
    assert!(pages.len() >= 6, "{} pages", pages.len());
    assert!(pages.iter().all(|page| page.locks.len() <= 7));
    assert_each_once(&pages, &names("paged:", 40));
    for lease in leases {
        lease.release().await.expect("released");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_resumes_on_the_new_primary_of_moved_slots() {
    let mut fx = cluster_lab(3, 2).await;
    let leases = hold(&fx.locks, "moving:", 30).await;
    let first = fx
        .locks
        .list_page("moving:", 5, None)
        .await
        .expect("the first page");
    let cursor = first.next_cursor.clone().expect("more pages");
    assert_eq!(first.locks.len(), 5, "{first:?}");

    // Every lock not listed yet whose slot the first shard of g1 (the group being walked)
    // serves moves to its second shard, one slot at a time, as resharding moves them.
    let listed: Vec<&str> = first.locks.iter().map(|l| l.resource.as_str()).collect();
    let mut moved = 0;
    for name in names("moving:", 30) {
        if listed.contains(&name.as_str()) {
            continue;
        }
        let slot = key_slot(&name);
        let shard = fx.lab.shard_serving(0, slot).await.expect("served");
        if shard != 0 {
            continue;
        }
        let report = fx
            .lab
            .migrate_slots(0, 0, 1, slot..=slot)
            .await
            .expect("the slot moves");
        assert!(report.keys > 0, "{name}'s keys moved with slot {slot}");
        moved += 1;
    }
    assert!(
        moved > 0,
        "no lock ahead of the cursor was on g1's first shard"
    );

    let mut pages = vec![first];
    pages.extend(rest_of_listing(&fx.locks, "moving:", 5, Some(cursor)).await);
    assert_each_once(&pages, &names("moving:", 30));
    for lease in leases {
        lease.release().await.expect("released");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_gone_mid_walk_ends_the_resumed_listing() {
    let mut fx = cluster_lab(3, 2).await;
    let leases = hold_on_every_group(&fx.locks, "frozen:", 20).await;
    // The walk reads slots in order: g1's first shard serves the first half.
    let first = fx
        .locks
        .list_page("frozen:", 3, None)
        .await
        .expect("the first page");
    let cursor = first.next_cursor.clone().expect("more pages");
    assert_eq!(
        fx.lab.shard_serving(0, 16_383).await.expect("served"),
        1,
        "g1's second shard serves the last slot"
    );
    fx.lab.freeze_primary(0, 1).await.expect("frozen");

    match fx.locks.list_page("frozen:", 100, Some(&cursor)).await {
        Err(Error::InvalidInput { field, reason }) => {
            assert_eq!(field, "cursor");
            assert!(reason.contains("g1"), "{reason}");
        }
        other => panic!("a walk resumed past a primary that does not answer: {other:?}"),
    }
    let pages = rest_of_listing(&fx.locks, "frozen:", 100, None).await;
    assert_each_once(&pages, &names("frozen:", 20));
    drop(leases);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mid_migration_each_lock_is_listed_once_or_an_error() {
    let fx = cluster_lab(3, 2).await;
    let leases = hold_on_every_group(&fx.locks, "half:", 6).await;
    let status = fx.lab.status().await;
    let primary = |shard: usize| port_of(&status, 0, shard, NodeKind::Master);
    // One lock of g1's first shard has every key moved to the second shard, its slot still
    // migrating: the source no longer has them, and its slot list would not show them.
    let mut moving = None;
    for name in names("half:", 6) {
        if fx
            .lab
            .shard_serving(0, key_slot(&name))
            .await
            .expect("served")
            == 0
        {
            moving = Some(name);
            break;
        }
    }
    let moving = moving.expect("a lock on g1's first shard");
    let (source, target) = (primary(0), primary(1));
    start_slot_move(source, target, key_slot(&moving)).await;
    let pattern = format!("*ql:{{{moving}}}:*");
    let moved = array(source, &["KEYS", &pattern]).await.unwrap_or_default();
    assert_eq!(moved.len(), 2, "the lock and its fence: {moved:?}");
    let moved: Vec<&str> = moved.iter().map(String::as_str).collect();
    migrate_keys(source, target, &moved).await;

    // g1's walk cannot read that slot on its source: the listing lists every held lock once
    // all the same (on this setup it does), or says it cannot; it never misses the moved
    // one nor lists it twice.
    match fx.locks.list_page("half:", 100, None).await {
        Ok(page) => assert_each_once(&[page], &names("half:", 6)),
        Err(Error::ListingUnavailable { .. }) => {}
        Err(other) => panic!("{other:?}"),
    }
    for lease in leases {
        lease.release().await.expect("released");
    }
}
