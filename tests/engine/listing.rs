//! The paged listing against a lab when groups disagree or stop answering: a lock held on a
//! majority all along is listed exactly once across the pages whatever a group read earlier
//! lost or gained meanwhile, a group that stops answering partway through its walk ends the
//! listing with an error instead of a repeat, and too few answering groups are an error
//! instead of a page that looks complete.

use crate::common;

use std::collections::HashMap;
use std::time::Duration;

use common::{Fixture, fence_key, lock_key, plain_lab};
use quorumlock::{Error, Lease, LockList};

/// Holds `count` locks named `<stem><n>` on every group.
async fn hold(fx: &Fixture, stem: &str, count: usize) -> Vec<Lease> {
    let mut leases = Vec::new();
    for n in 0..count {
        leases.push(
            fx.locks
                .acquire(format!("{stem}{n:02}"))
                .ttl(Duration::from_secs(60))
                .owner("holder")
                .await
                .expect("acquire"),
        );
    }
    leases
}

/// Removes a lock's lock and fence keys from one group: as if its grant never reached it.
async fn never_granted_on(fx: &Fixture, group: usize, resource: &str) {
    for key in [lock_key(resource), fence_key(resource)] {
        fx.lab
            .run_on_master(group, &["DEL", &key])
            .await
            .expect("delete a key on one group");
    }
}

/// How many times each name shows across `pages`.
fn counted(pages: &[LockList]) -> HashMap<String, usize> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    for page in pages {
        for lock in &page.locks {
            *seen.entry(lock.resource.clone()).or_default() += 1;
        }
    }
    seen
}

/// Follows the cursors from `cursor` to the end of the listing.
async fn rest_of_listing(
    fx: &Fixture,
    prefix: &str,
    limit: usize,
    mut cursor: Option<String>,
) -> Result<Vec<LockList>, Error> {
    let mut pages = Vec::new();
    for _ in 0..100 {
        let page = fx.locks.list_page(prefix, limit, cursor.as_deref()).await?;
        cursor = page.next_cursor.clone();
        pages.push(page);
        if cursor.is_none() {
            return Ok(pages);
        }
    }
    panic!("the listing never ended");
}

fn assert_each_once(pages: &[LockList], expected: &[String]) {
    let seen = counted(pages);
    let twice: Vec<_> = seen.iter().filter(|(_, count)| **count > 1).collect();
    assert!(twice.is_empty(), "listed more than once: {twice:?}");
    let missing: Vec<_> = expected
        .iter()
        .filter(|name| !seen.contains_key(*name))
        .collect();
    assert!(missing.is_empty(), "not listed: {missing:?}");
    assert_eq!(seen.len(), expected.len(), "listed: {seen:?}");
}

fn names(stem: &str, count: usize) -> Vec<String> {
    (0..count).map(|n| format!("{stem}{n:02}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_expired_on_a_read_group_is_not_relisted() {
    let fx = plain_lab().await;
    let _first = hold(&fx, "exp:a", 5).await;
    let _later = hold(&fx, "exp:b", 5).await;
    // The b locks never reached the first group: its walk lists the a locks only, and the
    // first page ends where the second group's walk meets a b lock.
    for name in names("exp:b", 5) {
        never_granted_on(&fx, 0, &name).await;
    }
    let first = fx
        .locks
        .list_page("exp:", 5, None)
        .await
        .expect("first page");
    let on_first: Vec<_> = first.locks.iter().map(|l| l.resource.clone()).collect();
    assert_eq!(on_first, names("exp:a", 5), "the first group's walk");
    assert!(first.next_cursor.is_some(), "the b locks are still to come");
    // The a locks' keys expire on the first group (a renewal it missed): still held on four.
    for name in names("exp:a", 5) {
        fx.lab
            .run_on_master(0, &["DEL", &lock_key(&name)])
            .await
            .expect("expire a key on one group");
    }
    let mut pages = vec![first.clone()];
    pages.extend(
        rest_of_listing(&fx, "exp:", 5, first.next_cursor.clone())
            .await
            .expect("the rest of the listing"),
    );
    let mut expected = names("exp:a", 5);
    expected.extend(names("exp:b", 5));
    assert_each_once(&pages, &expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiters_partial_grant_hides_no_held_lock() {
    let fx = plain_lab().await;
    let _first = hold(&fx, "wait:a", 5).await;
    let _held = hold(&fx, "wait:b", 1).await;
    never_granted_on(&fx, 0, "wait:b00").await;
    let first = fx
        .locks
        .list_page("wait:", 5, None)
        .await
        .expect("first page");
    assert_eq!(first.locks.len(), 5);
    assert!(first.next_cursor.is_some(), "wait:b00 is still to come");
    // A waiter wins the free first group (read already) and has not rolled back yet.
    fx.lab
        .run_on_master(
            0,
            &[
                "SET",
                &lock_key("wait:b00"),
                "waiter-token\n{\"owner\":\"waiter\"}",
                "PX",
                "60000",
            ],
        )
        .await
        .expect("plant a waiter's grant");
    fx.lab
        .run_on_master(0, &["SET", &fence_key("wait:b00"), "99999999999999"])
        .await
        .expect("plant a waiter's fence");
    let mut pages = vec![first.clone()];
    pages.extend(
        rest_of_listing(&fx, "wait:", 5, first.next_cursor.clone())
            .await
            .expect("the rest of the listing"),
    );
    let mut expected = names("wait:a", 5);
    expected.push("wait:b00".to_string());
    assert_each_once(&pages, &expected);
    let listed = pages
        .iter()
        .flat_map(|page| &page.locks)
        .find(|lock| lock.resource == "wait:b00")
        .expect("wait:b00 is listed");
    assert_eq!(
        listed.owner.as_deref(),
        Some("holder"),
        "the majority holder"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_gone_mid_walk_ends_it_without_a_repeat() {
    let mut fx = plain_lab().await;
    let _held = hold(&fx, "mid:", 12).await;
    let first = fx
        .locks
        .list_page("mid:", 4, None)
        .await
        .expect("first page");
    assert_eq!(first.locks.len(), 4);
    let cursor = first.next_cursor.clone().expect("more pages");
    // The first group's walk is under way: it listed the first page.
    fx.lab.freeze(0).await.expect("freeze the first group");
    let mut pages = vec![first];
    match rest_of_listing(&fx, "mid:", 4, Some(cursor)).await {
        Ok(rest) => {
            pages.extend(rest);
            assert_each_once(&pages, &names("mid:", 12));
        }
        Err(Error::InvalidInput { field, reason }) => {
            assert_eq!(field, "cursor");
            assert!(reason.contains("g1"), "names the group: {reason}");
            assert!(reason.contains("without a cursor"), "{reason}");
        }
        Err(other) => panic!("expected the cursor refused, got {other:?}"),
    }
    // Listed again from the start, the group that does not answer is passed over.
    let again = rest_of_listing(&fx, "mid:", 4, None)
        .await
        .expect("a new listing");
    assert_each_once(&again, &names("mid:", 12));
    fx.lab.thaw(0).await.expect("thaw");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_few_groups_is_an_error_not_an_empty_page() {
    let mut fx = plain_lab().await;
    let _held = hold(&fx, "few:", 3).await;
    for group in 0..3 {
        fx.lab.freeze(group).await.expect("freeze");
    }
    match fx.locks.list_page("few:", 10, None).await {
        Err(Error::ListingUnavailable { needed, votes, .. }) => {
            assert_eq!(needed, 3);
            let failed: Vec<_> = votes.iter().map(|vote| vote.group.as_str()).collect();
            assert_eq!(failed, ["g1", "g2", "g3"]);
        }
        other => panic!("expected unavailable, got {other:?}"),
    }
    for group in 0..3 {
        fx.lab.thaw(group).await.expect("thaw");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknowable_lock_is_an_error_not_a_gap() {
    let mut fx = plain_lab().await;
    let _held = hold(&fx, "tell:", 1).await;
    // Held on the first three groups only; the first stops answering: two of five hold it,
    // and the silent one may make it a majority.
    for group in [3, 4] {
        never_granted_on(&fx, group, "tell:00").await;
    }
    fx.lab.freeze(0).await.expect("freeze");
    match fx.locks.list_page("tell:", 10, None).await {
        Err(Error::ListingUnavailable { locks, votes, .. }) => {
            assert_eq!(locks, "tell:00");
            assert!(
                votes
                    .iter()
                    .any(|vote| vote.group == "g1" && vote.vote.is_failure()),
                "{votes:?}"
            );
        }
        other => panic!("expected unavailable, got {other:?}"),
    }
    fx.lab.thaw(0).await.expect("thaw");
}
