//! The engine against real redis-server masters and Sentinels started by the lab.

use crate::common;

use std::future::IntoFuture;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{
    Fixture, eventually, fence_key, fixture, lock_key, plain, plain_lab, released_channel,
    sentinel_lab,
};
use fred::prelude::*;
use fred::types::{Expiration, SetOptions};
use quorumlock::{Error, LeaseEnd, Locks, Released, Vote};
use tokio::sync::Mutex;

const MS: Duration = Duration::from_millis(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_under_contention() {
    let fx = sentinel_lab().await;
    let inside = Arc::new(AtomicBool::new(false));
    let fences = Arc::new(Mutex::new(Vec::new()));
    let mut workers = Vec::new();
    for worker in 0..12 {
        let (locks, inside, fences) = (fx.locks.clone(), inside.clone(), fences.clone());
        workers.push(tokio::spawn(async move {
            let mut held = 0;
            while held < 8 {
                let lease = match locks
                    .acquire("contended")
                    .ttl(Duration::from_secs(2))
                    .wait(Duration::from_secs(5))
                    .owner(format!("worker-{worker}"))
                    .await
                {
                    Ok(lease) => lease,
                    Err(Error::Held { .. }) => continue,
                    Err(other) => panic!("unexpected acquire error: {other}"),
                };
                assert!(
                    !inside.swap(true, Ordering::SeqCst),
                    "two holders inside at once"
                );
                fences.lock().await.push(lease.fencing_token());
                tokio::task::yield_now().await;
                inside.store(false, Ordering::SeqCst);
                assert!(lease.validity() > Duration::ZERO, "held past validity");
                lease.release().await.expect("release");
                held += 1;
            }
        }));
    }
    for worker in workers {
        worker.await.expect("worker");
    }
    let fences = fences.lock().await;
    assert_eq!(fences.len(), 12 * 8);
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "fencing tokens must grow in grant order"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_frees_the_lock_and_stale_tokens_do_nothing() {
    let fx = sentinel_lab().await;
    let first = fx
        .locks
        .acquire("expiring")
        .ttl(300 * MS)
        .await
        .expect("first");
    let quorumlock::Detached {
        token: stale_token,
        fencing_token: first_fence,
        ..
    } = first.detach();

    let denied = fx.locks.acquire("expiring").await.expect_err("still held");
    assert!(matches!(denied, Error::Held { .. }), "{denied}");

    let second = fx
        .locks
        .acquire("expiring")
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_secs(3))
        .await
        .expect("after expiry");
    assert!(second.fencing_token() > first_fence);

    // The first holder's token is stale now: release and extend must leave the lease alone.
    let released = fx
        .locks
        .release("expiring", &stale_token)
        .await
        .expect("release answers");
    assert!(!released.released);
    let extended = fx
        .locks
        .extend("expiring", &stale_token, Duration::from_secs(60))
        .await;
    assert!(
        matches!(extended, Err(Error::NotHeld { .. })),
        "{extended:?}"
    );
    let status = fx.locks.status("expiring").await.expect("status");
    assert!(status.held);
    assert_eq!(status.fencing_token, Some(second.fencing_token()));
    let remaining = status.holder.expect("holder").remaining_ms;
    assert!(
        remaining <= 10_000,
        "a stale extend must not renew: {remaining} ms left"
    );
    second.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_grants_are_rolled_back() {
    let mut fx = sentinel_lab().await;
    // Another holder owns the lock on a majority (groups 0, 1, 2): our grants on 3 and 4 must go.
    fx.on_masters(0..3, async |client| {
        let _: Option<String> = client
            .set(
                lock_key("planted"),
                "someone-else",
                Some(Expiration::PX(30_000)),
                Some(SetOptions::NX),
                false,
            )
            .await
            .expect("plant");
    })
    .await;
    let error = fx
        .locks
        .acquire("planted")
        .await
        .expect_err("held on a majority");
    assert!(matches!(error, Error::Held { .. }), "{error}");
    let values = fx.values_of(&lock_key("planted")).await;
    assert_eq!(
        &values[3..],
        &[None, None],
        "our grants on the free groups were not rolled back"
    );

    // Planted on two groups and one group dead: 2 grants are not a majority, so they go too.
    fx.on_masters(0..2, async |client| {
        let _: Option<String> = client
            .set(
                lock_key("planted-two"),
                "someone-else",
                Some(Expiration::PX(30_000)),
                None,
                false,
            )
            .await
            .expect("plant");
    })
    .await;
    fx.lab.kill(2).await.expect("kill");
    let error = fx
        .locks
        .acquire("planted-two")
        .await
        .expect_err("no majority");
    assert!(matches!(error, Error::Held { .. }), "{error}");
    for group in 3..5 {
        let value = fx.value_on(group, &lock_key("planted-two")).await;
        assert_eq!(value, None, "group {group} kept our partial grant");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn survives_two_dead_groups_and_names_three() {
    let mut fx = plain_lab().await;
    fx.lab.kill(0).await.expect("kill");
    fx.lab.kill(1).await.expect("kill");
    let lease = fx
        .locks
        .acquire("two-down")
        .await
        .expect("3 of 5 still grant");
    let granted = lease
        .votes()
        .iter()
        .filter(|v| v.vote == Vote::Granted)
        .count();
    assert!(granted >= 3);
    lease.release().await.expect("release");

    fx.lab.kill(2).await.expect("kill");
    let started = Instant::now();
    let error = fx.locks.acquire("three-down").await.expect_err("no quorum");
    let took = started.elapsed();
    assert!(error.is_unavailable(), "{error}");
    let message = error.to_string();
    for name in ["g1", "g2", "g3"] {
        assert!(message.contains(name), "{message} should name {name}");
    }
    assert!(!message.contains("g4"), "{message}");
    // Bounded by the per-call timeout, not by reconnect attempts (generous slack for CI).
    assert!(took < fx.topology.call_timeout() * 5, "took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_masters_cost_at_most_the_call_timeout() {
    let mut fx = plain_lab().await;
    fx.lab.freeze(4).await.expect("freeze");
    let lease = fx.locks.acquire("one-frozen").await.expect("4 of 5 answer");
    let started = Instant::now();
    let released = lease.release().await.expect("release");
    let took = started.elapsed();
    assert!(
        released.released && released.groups_released >= 4,
        "{released:?}"
    );
    // One try per group is waited for; the frozen group's retries go on in the background.
    assert!(
        took < fx.topology.call_timeout() * 2,
        "a frozen master stalled release for {took:?}"
    );

    fx.lab.freeze(3).await.expect("freeze");
    fx.lab.freeze(2).await.expect("freeze");
    let started = Instant::now();
    let error = fx
        .locks
        .acquire("three-frozen")
        .await
        .expect_err("no quorum");
    let took = started.elapsed();
    assert!(error.is_unavailable(), "{error}");
    // A frozen master either times out, or still holds an earlier call (the release's
    // retry) so this one waits behind it and is reported as not sent.
    let unanswered = |vote: &Vote| match vote {
        Vote::Timeout => true,
        Vote::Error { message } => message.starts_with("not sent"),
        _ => false,
    };
    assert!(
        error.votes().iter().filter(|v| unanswered(&v.vote)).count() >= 3,
        "{error}"
    );
    assert!(
        took < fx.topology.call_timeout() * 5,
        "frozen masters stalled acquire for {took:?}"
    );
    let started = Instant::now();
    let status = fx
        .locks
        .status("three-frozen")
        .await
        .expect("status answers");
    assert_eq!(
        status
            .groups
            .iter()
            .filter(|g| g.state == "timeout" || g.state == "error")
            .count(),
        3
    );
    assert!(started.elapsed() < fx.topology.call_timeout() * 5);
    for group in 2..5 {
        fx.lab.thaw(group).await.expect("thaw");
    }
}

/// The first waiter of a process connects the release subscribers. Through Sentinel, a
/// subscriber checks its master's role before it is up, and a frozen master never answers:
/// the waiter must still give up at the end of its wait, not at the subscriber's timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_master_keeps_no_waiter_past_its_wait() {
    let mut fx = sentinel_lab().await;
    fx.lab.freeze(4).await.expect("freeze");
    let lease = fx.locks.acquire("waited-on").await.expect("4 of 5 answer");
    let wait = Duration::from_millis(50);
    let started = Instant::now();
    let error = fx
        .locks
        .acquire("waited-on")
        .wait(wait)
        .await
        .expect_err("held by the lease");
    let took = started.elapsed();
    fx.lab.thaw(4).await.expect("thaw");
    assert!(matches!(error, Error::Held { .. }), "{error}");
    // Two votes (before and after subscribing), each decided without the frozen group.
    assert!(
        took < wait + fx.topology.call_timeout() * 2,
        "a waiter stalled on the frozen master for {took:?}"
    );
    lease.release().await.expect("release");
}

/// A group that is down when a client connects is reached once it is back: the client keeps
/// reconnecting instead of giving up after its first failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_down_at_connect_joins_once_back() {
    let mut fx = plain_lab().await;
    fx.lab.kill(4).await.expect("kill");
    let locks = fx.client().await;
    assert!(!locks.health().await.groups[4].reachable);
    fx.lab.restart(4).await.expect("restart");
    // Nothing announces a reconnection to the library's user; health is what they see.
    let reached = eventually(Duration::from_secs(10), || async {
        locks.health().await.groups[4].reachable
    })
    .await;
    assert!(
        reached,
        "g5 was not reached again: {:?}",
        locks.health().await.groups[4].error
    );
    locks.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_acquire_fails_and_rolls_back() {
    let mut fx = fixture(plain, |mut topology| {
        topology.call_timeout_ms = 5_000;
        topology
    })
    .await;
    for group in 0..3 {
        fx.lab.freeze(group).await.expect("freeze");
    }
    let locks = fx.locks.clone();
    let attempt = tokio::spawn(async move { locks.acquire("slow").ttl(300 * MS).await });
    // The injected delay: the majority answers only after the whole TTL has passed.
    tokio::time::sleep(600 * MS).await;
    for group in 0..3 {
        fx.lab.thaw(group).await.expect("thaw");
    }
    let error = attempt.await.expect("task").expect_err("validity used up");
    assert!(matches!(error, Error::Expired { .. }), "{error}");
    assert!(
        error
            .votes()
            .iter()
            .filter(|v| v.vote == Vote::Granted)
            .count()
            >= 3,
        "{error}"
    );
    assert_eq!(
        fx.values_of(&lock_key("slow")).await,
        vec![None; 5],
        "expired grants left behind"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_grow_across_release_expiry_and_data_loss() {
    let fx = sentinel_lab().await;
    let mut fences = Vec::new();
    let released = fx.locks.acquire("fenced").await.expect("acquire");
    fences.push(released.fencing_token());
    released.release().await.expect("release");

    let expired = fx
        .locks
        .acquire("fenced")
        .ttl(100 * MS)
        .await
        .expect("acquire");
    fences.push(expired.fencing_token());
    let _ = expired.detach();
    let after_expiry = fx
        .locks
        .acquire("fenced")
        .wait(Duration::from_secs(2))
        .await
        .expect("after expiry");
    fences.push(after_expiry.fencing_token());
    after_expiry.release().await.expect("release");

    let wiped = fx.master(0).await;
    let _: () = wiped.flushall(false).await.expect("FLUSHALL");
    let after_loss = fx.locks.acquire("fenced").await.expect("after data loss");
    fences.push(after_loss.fencing_token());
    after_loss.release().await.expect("release");
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");

    // A fence far ahead of this host's clock on a majority (another client's fast clock):
    // the same acquire raises its proposal above it instead of going backwards.
    let ahead = fences[fences.len() - 1] + 1_000_000_000;
    fx.on_masters(0..3, async |client| {
        let _: () = client
            .set(fence_key("fenced"), ahead, None, None, false)
            .await
            .expect("SET fence");
    })
    .await;
    let overtaken = fx
        .locks
        .acquire("fenced")
        .await
        .expect("acquire above the fence");
    assert!(
        overtaken.fencing_token() > ahead,
        "{} <= {ahead}",
        overtaken.fencing_token()
    );
    overtaken.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_reload_after_script_flush() {
    let fx = sentinel_lab().await;
    fx.locks
        .acquire("before-flush")
        .await
        .expect("acquire")
        .release()
        .await
        .expect("release");
    fx.on_masters(0..5, async |client| {
        let _: () = client.script_flush(false).await.expect("SCRIPT FLUSH");
    })
    .await;
    let lease = fx
        .locks
        .acquire("after-flush")
        .await
        .expect("scripts reload on NOSCRIPT");
    assert!(
        lease.votes().iter().all(|v| !v.vote.is_failure()),
        "{:?}",
        lease.votes()
    );
    lease.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_names_are_checked_and_independent() {
    let fx = sentinel_lab().await;
    let oversized = "r".repeat(quorumlock::MAX_RESOURCE_BYTES + 1);
    for bad in ["", "line\nbreak", "nul\0byte", oversized.as_str()] {
        match fx.locks.acquire(bad).await {
            Err(Error::InvalidInput { field, reason }) => assert_eq!(field, "resource", "{reason}"),
            other => panic!("{bad:?} was not rejected: {:?}", other.map(|l| l.detach())),
        }
    }
    let names = [
        "a", "{a}", "a}", "{", "}", "*", "a*", "a b", " a", "ключ", "錠", "a}:lock",
    ];
    let mut leases = Vec::new();
    for name in names {
        leases.push(
            fx.locks
                .acquire(name)
                .await
                .unwrap_or_else(|e| panic!("{name:?}: {e}")),
        );
    }
    for (name, lease) in names.iter().zip(&leases) {
        let status = fx.locks.status(name).await.expect("status");
        assert!(status.held, "{name:?}");
        assert_eq!(
            status.fencing_token,
            Some(lease.fencing_token()),
            "{name:?}"
        );
    }
    for lease in leases {
        assert!(lease.release().await.expect("release").released);
    }
    for name in names {
        assert!(
            !fx.locks.status(name).await.expect("status").held,
            "{name:?} still held"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalive_renews_and_reports_loss_at_once() {
    let fx = sentinel_lab().await;
    let kept = fx
        .locks
        .acquire("kept")
        .ttl(300 * MS)
        .keepalive()
        .await
        .expect("acquire");
    // Three TTLs pass: only the keepalive keeps it alive.
    tokio::time::sleep(900 * MS).await;
    let status = fx.locks.status("kept").await.expect("status");
    assert!(status.held, "keepalive did not renew");
    assert_eq!(status.fencing_token, Some(kept.fencing_token()));
    assert!(kept.ended().is_none());

    // Someone force-deletes the lock: the owner hears about it at the next renewal.
    fx.delete_everywhere(&lock_key("kept")).await;
    let end = tokio::time::timeout(Duration::from_secs(2), kept.lost())
        .await
        .expect("loss reported");
    assert!(matches!(end, LeaseEnd::Lost(_)), "{end:?}");

    let again = fx
        .locks
        .acquire("kept")
        .ttl(300 * MS)
        .keepalive()
        .await
        .expect("acquire");
    drop(again);
    let freed = fx
        .locks
        .acquire("kept")
        .wait(Duration::from_millis(200))
        .await;
    assert!(
        freed.is_ok(),
        "dropping a kept lease must release it: {:?}",
        freed.err()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_shows_held_locks_by_prefix() {
    let fx = sentinel_lab().await;
    let mut leases = Vec::new();
    for name in ["jobs:a", "jobs:b", "jobs:c", "jobs*literal", "other"] {
        leases.push(
            fx.locks
                .acquire(name)
                .owner("lister")
                .await
                .expect("acquire"),
        );
    }
    let released = leases.remove(1); // jobs:b
    released.release().await.expect("release");

    let jobs = fx.locks.list("jobs:", 100).await.expect("list");
    let names: Vec<&str> = jobs.locks.iter().map(|l| l.resource.as_str()).collect();
    assert_eq!(names, ["jobs:a", "jobs:c"]);
    assert!(!jobs.truncated);
    assert!(
        jobs.locks
            .iter()
            .all(|l| l.owner.as_deref() == Some("lister") && l.remaining_ms > 0)
    );

    // Glob characters in the prefix match literally.
    let literal = fx.locks.list("jobs*", 100).await.expect("list");
    assert_eq!(literal.locks.len(), 1, "{:?}", literal.locks);
    let limited = fx.locks.list("", 2).await.expect("list");
    assert_eq!(limited.locks.len(), 2);
    assert!(limited.truncated);
    assert!(matches!(
        fx.locks.list("", 0).await,
        Err(Error::InvalidInput { field: "limit", .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_reports_every_node_and_admission() {
    let mut fx = sentinel_lab().await;
    let health = fx.locks.health().await;
    assert!(health.quorum_available);
    assert_eq!(health.voting, 5);
    for group in &health.groups {
        assert!(group.reachable, "{group:?}");
        assert_eq!(group.role.as_deref(), Some("master"), "{group:?}");
        assert_eq!(group.replicas.len(), 1, "{group:?}");
        assert_eq!(group.sentinels.len(), 3, "{group:?}");
        assert_eq!(group.sentinels_agree, Some(true), "{group:?}");
        assert_eq!(group.admission, quorumlock::Admission::Voting, "{group:?}");
    }
    fx.lab.kill(4).await.expect("kill");
    let health = fx.locks.health().await;
    assert!(!health.groups[4].reachable);
    assert_eq!(health.voting, 4);
    assert!(health.quorum_available);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_release_clears_a_lock_and_keeps_the_fence() {
    let fx = sentinel_lab().await;
    let stuck = fx
        .locks
        .acquire("stuck")
        .ttl(Duration::from_secs(30))
        .await
        .expect("acquire");
    let stuck_fence = stuck.detach().fencing_token;
    let cleared = fx
        .locks
        .force_release("stuck")
        .await
        .expect("force release");
    assert!(cleared.released);
    assert!(cleared.groups_released >= 3);
    let next = fx.locks.acquire("stuck").await.expect("free again");
    assert!(next.fencing_token() > stuck_fence);
    next.release().await.expect("release");
    assert!(
        !fx.locks
            .force_release("stuck")
            .await
            .expect("nothing to clear")
            .released
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_wake_at_each_release_not_their_next_poll() {
    // Retries are 10 s apart: only release announcements can wake the waiters sooner.
    let fx = fixture(
        |spec| spec,
        |mut topology| {
            topology.retry_delay_ms = 10_000;
            topology
        },
    )
    .await;
    // The first holder is another client: its release reaches our waiters only through the
    // groups' release channel.
    let other_client = fx.client().await;
    let holder = other_client
        .acquire("wake")
        .ttl(Duration::from_secs(30))
        .await
        .expect("holder");
    let wait_for_it = |locks: Locks| {
        tokio::spawn(async move { locks.acquire("wake").wait(Duration::from_secs(25)).await })
    };
    let first_waiter = wait_for_it(fx.locks.clone());

    // The waiter was denied and subscribed once its subscription shows on a master.
    assert!(
        fx.subscribed(0, &released_channel("wake"), Duration::from_secs(5))
            .await,
        "the waiter never subscribed"
    );
    // A second waiter of the same client queues behind the first.
    let second_waiter = wait_for_it(fx.locks.clone());

    let mut released_at = Instant::now();
    holder.release().await.expect("release");
    let mut waiters = vec![first_waiter, second_waiter];
    while !waiters.is_empty() {
        let (outcome, _, rest) = futures::future::select_all(waiters).await;
        waiters = rest;
        let lease = outcome.expect("task").expect("a waiter gets the lock");
        let woke_after = lease.acquired_at().saturating_duration_since(released_at);
        assert!(
            woke_after < Duration::from_secs(2),
            "woke {woke_after:?} after the release: it polled"
        );
        // This release comes from our own client.
        released_at = Instant::now();
        lease.release().await.expect("release");
    }
    other_client.close().await;
}

/// EVALSHA calls each master has run since its stats were reset.
async fn evalsha_calls(fx: &Fixture) -> Vec<u64> {
    fx.on_masters(fx.groups(), async |client| {
        let stats: String = client
            .info(Some(fred::types::InfoKind::CommandStats))
            .await
            .expect("INFO");
        stats
            .lines()
            .find_map(|line| line.strip_prefix("cmdstat_evalsha:calls="))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_share_script_calls_but_not_answers() {
    let fx = plain_lab().await;
    // A value of the wrong type makes this resource's script call raise an error on every
    // master; the calls batched with it must not fail with it.
    fx.on_masters(fx.groups(), async |client| {
        let _: i64 = client
            .lpush(lock_key("batch:poisoned"), "not a lock")
            .await
            .expect("plant");
        let _: () = client
            .custom(fred::cmd!("CONFIG"), vec!["RESETSTAT"])
            .await
            .expect("RESETSTAT");
    })
    .await;
    const CALLERS: usize = 100;
    let resources: Vec<String> = (0..CALLERS)
        .map(|i| {
            if i == CALLERS / 2 {
                "batch:poisoned".to_string()
            } else {
                format!("batch:{i}")
            }
        })
        .collect();
    let acquired = futures::future::join_all(resources.iter().map(|resource| {
        fx.locks
            .acquire(resource.as_str())
            .ttl(Duration::from_secs(30))
            .into_future()
    }))
    .await;
    let mut leases = Vec::new();
    for (resource, outcome) in resources.iter().zip(acquired) {
        match outcome {
            Ok(lease) => {
                assert_ne!(
                    resource, "batch:poisoned",
                    "granted over a value of the wrong type"
                );
                leases.push(lease);
            }
            Err(error) => {
                assert_eq!(resource, "batch:poisoned", "{resource}: {error}");
                assert!(error.is_unavailable(), "{error}");
                assert!(error.to_string().contains("WRONGTYPE"), "{error}");
            }
        }
    }
    assert_eq!(leases.len(), CALLERS - 1);
    let mut fences: Vec<u64> = leases.iter().map(|lease| lease.fencing_token()).collect();
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(
        fences.len(),
        CALLERS - 1,
        "two leases share a fencing token"
    );

    let calls = evalsha_calls(&fx).await;
    assert!(
        calls.iter().all(|&n| n < CALLERS as u64),
        "{CALLERS} concurrent acquires took {calls:?} script calls per master: nothing was batched"
    );

    let released = futures::future::join_all(leases.into_iter().map(|lease| lease.release())).await;
    for outcome in released {
        let released = outcome.expect("release");
        assert!(released.groups_released >= 3, "{released:?}");
    }
    for i in [0, 1, CALLERS - 1] {
        assert_eq!(
            fx.values_of(&lock_key(&format!("batch:{i}"))).await,
            vec![None; 5],
            "batch:{i} left behind"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_master_under_load_refuses_not_stalls() {
    let mut fx = plain_lab().await;
    fx.lab.freeze(4).await.expect("freeze");
    // More calls at once than the frozen master's queue takes: the first waits for it, the
    // next ones queue, the rest are refused at once. Every call ends, within a bound, as a
    // lease or as a clean "unavailable" (the client itself may be the bottleneck here).
    const CALLERS: usize = 1500;
    let acquired = futures::future::join_all((0..CALLERS).map(|i| {
        let locks = fx.locks.clone();
        async move {
            let started = Instant::now();
            let outcome = locks
                .acquire(format!("crowd:{i}"))
                .ttl(Duration::from_secs(30))
                .await;
            (outcome, started.elapsed())
        }
    }))
    .await;
    let (mut refused, mut slowest) = (0, Duration::ZERO);
    let mut leases = Vec::new();
    for (outcome, took) in acquired {
        slowest = slowest.max(took);
        let votes = match &outcome {
            Ok(lease) => lease.votes().to_vec(),
            Err(error) => {
                assert!(error.is_unavailable(), "{error}");
                error.votes().to_vec()
            }
        };
        match &votes[4].vote {
            Vote::Timeout | Vote::NotAwaited => {}
            Vote::Error { message } if message.contains("too many calls already queued") => {
                refused += 1
            }
            // Queued behind the frozen call past its caller's timeout (never sent), or failed
            // once the client gave up on the frozen connection, 500 ms without an answer.
            Vote::Error { message }
                if [
                    "not sent",
                    "not connected",
                    "Unresponsive connection",
                    "Failed to route command",
                ]
                .iter()
                .any(|cause| message.contains(cause)) => {}
            other => panic!("the frozen group voted {other:?}"),
        }
        if let Ok(lease) = outcome {
            leases.push(lease);
        }
    }
    assert!(!leases.is_empty(), "no call got a lease");
    assert!(refused > 0, "the frozen master's queue never filled");
    // Far above the call timeout, far below what waiting in line for a frozen master costs.
    assert!(
        slowest < fx.topology.call_timeout() * 30,
        "a call stalled {slowest:?} behind the frozen master"
    );
    fx.lab.thaw(4).await.expect("thaw");
    // A hundred at a time: the point here is the acquires; 1,500 releases at once on two
    // busy cores can fail every try of some within the call timeout, rightly, as unavailable.
    while !leases.is_empty() {
        let wave: Vec<_> = leases.drain(..leases.len().min(100)).collect();
        for outcome in
            futures::future::join_all(wave.into_iter().map(|lease| lease.release())).await
        {
            assert!(
                matches!(&outcome, Ok(released) if released.released),
                "a lease released within its TTL: {outcome:?}"
            );
        }
    }
}

/// Holds every write command (scripts included) on the masters of `groups` until
/// [`resume_writes`], or for 20 s should the test stop first.
async fn pause_writes(fx: &Fixture, groups: std::ops::Range<usize>) {
    fx.on_masters(groups, async |client| {
        let _: () = client
            .custom(fred::cmd!("CLIENT"), vec!["PAUSE", "20000", "WRITE"])
            .await
            .expect("CLIENT PAUSE");
    })
    .await;
}

async fn resume_writes(fx: &Fixture, groups: std::ops::Range<usize>) {
    fx.on_masters(groups, async |client| {
        let _: () = client
            .custom(fred::cmd!("CLIENT"), vec!["UNPAUSE"])
            .await
            .expect("CLIENT UNPAUSE");
    })
    .await;
}

/// Whether a paused master holds a script call and has another call read in behind it on
/// the same connection: the caller gave up on the first and sent the next.
async fn a_call_waits_behind_a_held_one(fx: &Fixture, group: usize) -> bool {
    let master = fx.master(group).await;
    let list: String = master
        .custom(fred::cmd!("CLIENT"), vec!["LIST"])
        .await
        .expect("CLIENT LIST");
    let _ = master.quit().await;
    list.lines().any(|line| {
        let field = |name: &str| {
            line.split(' ')
                .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
                .unwrap_or_default()
        };
        field("cmd") == "evalsha"
            && field("flags").contains('b')
            && field("qbuf").parse::<u64>().unwrap_or(0) > 0
    })
}

/// Waits until every group in `groups` holds a timed-out call with its retry behind it.
async fn retried_behind_held_calls(fx: &Fixture, groups: std::ops::Range<usize>) -> bool {
    eventually(Duration::from_secs(10), || {
        let groups = groups.clone();
        async move {
            for group in groups {
                if !a_call_waits_behind_a_held_one(fx, group).await {
                    return false;
                }
            }
            true
        }
    })
    .await
}

/// A plain lab whose call timeout is long enough for a test to act between a try and its
/// retry.
async fn late_replies_fixture() -> Fixture {
    fixture(plain, |mut topology| {
        topology.call_timeout_ms = 1_000;
        topology
    })
    .await
}

/// Runs `release` (a lease's, or one by token) while the masters of `groups` hold every
/// write until its caller gave up on the first try and sent the retry behind it.
async fn released_late(
    fx: &Fixture,
    release: impl Future<Output = Result<Released, Error>> + Send + 'static,
    groups: std::ops::Range<usize>,
) -> Result<Released, Error> {
    pause_writes(fx, groups.clone()).await;
    let release = tokio::spawn(release);
    let retried = retried_behind_held_calls(fx, groups.clone()).await;
    resume_writes(fx, groups).await;
    assert!(retried, "no master got a retry behind the held release");
    release.await.expect("release task")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_with_late_replies_still_says_released() {
    // Long enough a call timeout for the test to act between a try and its retry.
    let fx = late_replies_fixture().await;
    let lease = fx
        .locks
        .acquire("late-replies")
        .ttl(Duration::from_secs(30))
        .await
        .expect("acquire");
    // Every master holds the release until its caller gave up on it and sent the retry;
    // then the release runs and deletes the lock, and the retry finds it gone.
    let outcome = released_late(&fx, lease.release(), fx.groups()).await;
    assert!(
        matches!(&outcome, Ok(released) if released.released && released.groups_released == 5),
        "the release deleted the lock on every group: {outcome:?}"
    );
    assert_eq!(fx.values_of(&lock_key("late-replies")).await, vec![None; 5]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_release_of_a_taken_lock_says_not_released() {
    let fx = late_replies_fixture().await;
    let lease = fx
        .locks
        .acquire("taken-over")
        .ttl(Duration::from_secs(30))
        .await
        .expect("acquire");
    // The lease ends behind its holder's back, and another holder takes the lock.
    fx.delete_everywhere(&lock_key("taken-over")).await;
    let other = fx
        .locks
        .acquire("taken-over")
        .ttl(Duration::from_secs(30))
        .await
        .expect("the other holder");
    // Every first try is held past its timeout; each retry finds the other holder's lock.
    let outcome = released_late(&fx, lease.release(), fx.groups()).await;
    assert!(
        matches!(&outcome, Ok(released) if !released.released
            && released.groups_released == 0
            && released.groups_maybe_released() == 0),
        "another holder's lock was reported released: {outcome:?}"
    );
    let status = fx.locks.status("taken-over").await.expect("status");
    assert_eq!(
        status.fencing_token,
        Some(other.fencing_token()),
        "{status:?}"
    );
    other.release().await.expect("released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_of_an_ended_lease_says_so_even_if_late() {
    let fx = late_replies_fixture().await;
    let lease = fx
        .locks
        .acquire("ended")
        .ttl(Duration::from_secs(30))
        .await
        .expect("acquire");
    // The lease ends behind its holder's back, as if it had expired.
    fx.delete_everywhere(&lock_key("ended")).await;
    // One master answers late: its retry finds nothing either, which says nothing about who
    // deleted the lock there; the other four said at once that it was gone.
    let outcome = released_late(&fx, lease.release(), 0..1).await;
    assert!(
        matches!(&outcome, Ok(released) if !released.released && released.groups_released == 0),
        "the lease had ended before its release: {outcome:?}"
    );
    // The late group cannot tell who removed the lock there, and says so.
    assert!(
        matches!(&outcome, Ok(released) if released.groups_maybe_released() == 1),
        "{outcome:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_after_a_lapse_never_says_released() {
    let fx = late_replies_fixture().await;
    let lease = fx
        .locks
        .acquire("lapsed")
        .ttl(Duration::from_secs(1))
        .await
        .expect("acquire");
    // The validity runs out, then the lock expires on every master.
    tokio::time::sleep(lease.validity()).await;
    assert_eq!(lease.validity(), Duration::ZERO);
    let expired = eventually(Duration::from_secs(5), || async {
        fx.values_of(&lock_key("lapsed")).await == vec![None; 5]
    })
    .await;
    assert!(expired, "the lock outlived its TTL");
    // Every first try is held past its timeout; each retry finds no lock. The expiry removed
    // it, and a release that cannot tell so from its own late delete never claims it.
    let outcome = released_late(&fx, lease.release(), fx.groups()).await;
    assert!(
        matches!(&outcome, Ok(released) if !released.released
            && released.groups_released == 0
            && released.groups_maybe_released() == 5
            && released.votes.iter().all(|v| v.vote == Vote::MaybeReleased)),
        "a lapsed lease was reported released: {outcome:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_release_never_says_released() {
    let fx = late_replies_fixture().await;
    let lease = fx
        .locks
        .acquire("by-token")
        .ttl(Duration::from_secs(30))
        .await
        .expect("acquire");
    let held = lease.detach();
    // A process that did not take the lease releases it by token: it cannot know the
    // validity, so a lock gone after its unanswered try may as well have expired.
    let other = fx.client().await;
    let release = async move {
        let released = other.release(&held.resource, &held.token).await;
        other.close().await;
        released
    };
    let outcome = released_late(&fx, release, fx.groups()).await;
    assert!(
        matches!(&outcome, Ok(released) if !released.released
            && released.groups_released == 0
            && released.groups_maybe_released() == 5),
        "a release by token claimed a lock it cannot know it deleted: {outcome:?}"
    );
    assert_eq!(fx.values_of(&lock_key("by-token")).await, vec![None; 5]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_shorter_extend_cuts_the_validity() {
    let fx = plain_lab().await;
    let mut lease = fx
        .locks
        .acquire("shortened")
        .ttl(Duration::from_secs(30))
        .await
        .expect("acquire");
    // Every master holds the extend past its call timeout, then runs it: the shorter TTL
    // lands after the caller heard of a failure.
    pause_writes(&fx, fx.groups()).await;
    let extended = lease.extend(Duration::from_secs(1)).await;
    resume_writes(&fx, fx.groups()).await;
    assert!(extended.is_err(), "{extended:?}");
    assert!(
        lease.validity() <= Duration::from_secs(1),
        "the lease still counts on {:?} though its locks may expire in 1 s",
        lease.validity()
    );
}
