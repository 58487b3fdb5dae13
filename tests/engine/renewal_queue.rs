//! Renewals under a full group-commit queue: a master whose queue refuses new grants still
//! takes renewals, so a lease renewed while the client is overloaded is not lost.

use crate::common;

use std::time::Duration;

use common::{fixture, plain};
use quorumlock::Vote;

/// Grants a master queues before refusing more (`MAX_QUEUED` in `src/group/batch.rs`).
const QUEUE_CAP: usize = 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_waits_behind_a_full_queue_not_refused() {
    // A call timeout long enough that nothing queued gives up while the majority is frozen.
    let mut fx = fixture(plain, |mut topology| {
        topology.call_timeout_ms = 10_000;
        topology
    })
    .await;
    let mut lease = fx
        .locks
        .acquire("renew:held")
        .ttl(Duration::from_secs(30))
        .await
        .expect("lease");
    for group in 0..3 {
        fx.lab.freeze(group).await.expect("freeze");
    }

    // One call in flight on each frozen master, QUEUE_CAP queued behind it, and the rest
    // refused at once; the first refusal shows the queues are full.
    let (refused, mut refusal) = tokio::sync::mpsc::channel(1);
    let grants: Vec<_> = (0..QUEUE_CAP + 8)
        .map(|i| {
            let locks = fx.locks.clone();
            let refused = refused.clone();
            tokio::spawn(async move {
                let outcome = locks
                    .acquire(format!("renew:crowd:{i}"))
                    .ttl(Duration::from_secs(30))
                    .await;
                if let Err(error) = &outcome
                    && error.votes().iter().any(|vote| {
                        matches!(&vote.vote, Vote::Error { message }
                            if message.contains("too many calls already queued"))
                    })
                {
                    let _ = refused.try_send(());
                }
                outcome
            })
        })
        .collect();
    tokio::time::timeout(Duration::from_secs(60), refusal.recv())
        .await
        .expect("the frozen masters' queues fill within a minute")
        .expect("a grant is refused");

    let renewal = tokio::spawn(async move {
        let renewed = lease.extend(Duration::from_secs(30)).await;
        (renewed, lease)
    });
    // Refused, the renewal would come back at once without a majority; queued, it cannot come
    // back while the majority is frozen.
    tokio::pin!(renewal);
    tokio::select! {
        outcome = &mut renewal => {
            let (renewed, _) = outcome.expect("renewal task");
            panic!("the renewal came back while the majority was frozen: {renewed:?}");
        }
        () = tokio::time::sleep(Duration::from_millis(500)) => {}
    }
    for group in 0..3 {
        fx.lab.thaw(group).await.expect("thaw");
    }
    let (renewed, lease) = renewal.await.expect("renewal task");
    let validity = renewed.expect("the queued renewal renews the lease on every group");
    assert!(validity > Duration::from_secs(20), "{validity:?}");

    for grant in grants {
        if let Ok(lease) = grant.await.expect("grant task") {
            let _ = lease.release().await;
        }
    }
    assert!(lease.release().await.expect("release").released);
}
