//! Listing many locks a page at a time against a lab: following `next_cursor` from the first
//! page lists every lock and semaphore held on a majority exactly once (a key on a minority
//! of groups is not listed, a lock whose key is missing on two groups still is), and a cursor
//! that is not one a listing returned is refused naming `cursor`.

use crate::common;

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use common::{lock_key, plain_lab};
use futures::StreamExt;
use quorumlock::Error;

/// Locks held under the listed prefix.
const LOCKS: usize = 2000;
/// Entries per page: not a divisor of the total, so the last page is a short one.
const PAGE: usize = 97;

fn name(n: usize) -> String {
    format!("many:{n:05}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn next_cursor_lists_every_lock_exactly_once() {
    let fx = plain_lab().await;
    let acquired: Vec<_> = futures::stream::iter(0..LOCKS)
        .map(|n| {
            let locks = fx.locks.clone();
            async move {
                locks
                    .acquire(name(n))
                    .ttl(Duration::from_secs(60))
                    .owner("filler")
                    .await
                    .map(|lease| lease.detach())
            }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    let refused: Vec<_> = acquired.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(refused.is_empty(), "every acquire is granted: {refused:?}");
    let outside = fx.locks.acquire("other:1").await.expect("acquire outside");
    let mut permits = Vec::new();
    for semaphore in ["many:pool-a", "many:pool-b"] {
        for _ in 0..2 {
            permits.push(
                fx.locks
                    .acquire_permit(semaphore, 3)
                    .await
                    .expect("acquire a permit"),
            );
        }
    }
    // Ten locks lose their key on the first two groups: still held on three of five.
    for n in 0..10 {
        for group in [0, 1] {
            fx.lab
                .run_on_master(group, &["DEL", &lock_key(&name(n))])
                .await
                .expect("delete a key on one group");
        }
    }
    // A key on one group alone is no lock held.
    fx.lab
        .run_on_master(
            0,
            &[
                "SET",
                &lock_key("many:minority"),
                "token\n{}",
                "PX",
                "60000",
            ],
        )
        .await
        .expect("write a minority key");

    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let page = fx
            .locks
            .list_page("many:", PAGE, cursor.as_deref())
            .await
            .expect("list a page");
        pages += 1;
        let entries = page.locks.len() + page.semaphores.len();
        assert_eq!(page.truncated, page.next_cursor.is_some());
        for lock in &page.locks {
            assert_eq!(lock.owner.as_deref(), Some("filler"), "{lock:?}");
            *seen.entry(lock.resource.clone()).or_default() += 1;
        }
        for semaphore in &page.semaphores {
            assert_eq!(semaphore.holders.len(), 2, "{semaphore:?}");
            *seen.entry(semaphore.name.clone()).or_default() += 1;
        }
        match page.next_cursor {
            Some(next) => {
                assert_eq!(entries, PAGE, "a page before the last one is full");
                cursor = Some(next);
            }
            None => {
                assert!(entries <= PAGE);
                break;
            }
        }
        assert!(pages <= LOCKS, "the listing ends");
    }
    let twice: Vec<_> = seen.iter().filter(|(_, count)| **count > 1).collect();
    assert!(twice.is_empty(), "listed more than once: {twice:?}");
    let mut expected: BTreeSet<String> = (0..LOCKS).map(name).collect();
    expected.extend(["many:pool-a".to_string(), "many:pool-b".to_string()]);
    let listed: BTreeSet<String> = seen.into_keys().collect();
    let missing: Vec<_> = expected.difference(&listed).collect();
    let extra: Vec<_> = listed.difference(&expected).collect();
    assert!(missing.is_empty(), "not listed: {missing:?}");
    assert!(extra.is_empty(), "listed though not held: {extra:?}");
    assert_eq!(pages, (LOCKS + 2).div_ceil(PAGE));

    for permit in permits {
        permit.release().await.expect("release");
    }
    outside.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_made_up_cursor_is_refused_naming_it() {
    let fx = plain_lab().await;
    let mut leases = Vec::new();
    for n in 0..3 {
        leases.push(fx.locks.acquire(name(n)).await.expect("acquire"));
    }
    let first = fx.locks.list_page("many:", 1, None).await.expect("list");
    let next = first.next_cursor.expect("more than one page");
    let refused = |result: Result<quorumlock::LockList, Error>| match result {
        Err(Error::InvalidInput { field, reason }) => {
            assert_eq!(field, "cursor");
            reason
        }
        other => panic!("expected a refused cursor, got {other:?}"),
    };
    let garbage = refused(fx.locks.list_page("many:", 1, Some("not-a-cursor")).await);
    assert!(garbage.contains("next_cursor"), "{garbage}");
    let other_prefix = refused(fx.locks.list_page("jobs:", 1, Some(&next)).await);
    assert!(other_prefix.contains("prefix"), "{other_prefix}");
    // The cursor itself still works with its own prefix.
    let second = fx
        .locks
        .list_page("many:", 1, Some(&next))
        .await
        .expect("second page");
    assert_eq!(second.locks.len(), 1);
    assert_ne!(second.locks[0].resource, first.locks[0].resource);
    for lease in leases {
        lease.release().await.expect("release");
    }
}
