//! A counting semaphore: at most N holders at once, say at most 2 workers calling a rate
//! limited API. Six workers contend for one of 2 permits of `api:search`; each waits for a
//! permit, does its work while holding it, and releases it. Each permit is a lock of its own
//! under the same majority and fencing as any lock, so no more than 2 workers ever hold one;
//! the example counts the workers inside and shows that the count never passes 2.
//!
//! Run it against a running lab (or name a topology file as the argument or in
//! `QUORUMLOCK_CONFIG`):
//!
//! ```sh
//! cargo run -- lab up
//! cargo run --example semaphore
//! cargo run -- lab down
//! ```

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use quorumlock::{Error, Locks};

const SEMAPHORE: &str = "api:search";
/// Every caller of one semaphore names the same count.
const PERMITS: u32 = 2;
const WORKERS: usize = 6;

/// How many workers hold a permit now, and the most that ever did at once.
#[derive(Default)]
struct Inside {
    now: AtomicUsize,
    most: AtomicUsize,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let locks = Locks::connect(common::topology()?).await?;
    let inside = Arc::new(Inside::default());

    let mut workers = Vec::new();
    for worker in 1..=WORKERS {
        let (locks, inside) = (locks.clone(), Arc::clone(&inside));
        workers.push(tokio::spawn(async move {
            call_api(&locks, &inside, &format!("worker-{worker}")).await
        }));
    }
    for worker in workers {
        worker.await??;
    }

    let most = inside.most.load(Ordering::SeqCst);
    if most > PERMITS as usize {
        return Err(format!("{most} workers held a permit at once, above {PERMITS}").into());
    }
    println!(
        "all {WORKERS} workers called the API; at most {most} at once, never more than {PERMITS}"
    );
    let after = locks.semaphore_status(SEMAPHORE).await?;
    println!(
        "{SEMAPHORE} now: {} of {} permits held",
        after.holders.len(),
        after.permits.unwrap_or(PERMITS)
    );

    locks.close().await;
    Ok(())
}

/// One worker: waits for a permit, calls the API while holding it, releases it.
async fn call_api(locks: &Locks, inside: &Inside, worker: &str) -> Result<(), Error> {
    let permit = locks
        .acquire_permit(SEMAPHORE, PERMITS)
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_secs(60))
        .owner(worker)
        .purpose("search API call")
        .await?;
    let now = inside.now.fetch_add(1, Ordering::SeqCst) + 1;
    inside.most.fetch_max(now, Ordering::SeqCst);
    println!(
        "{worker} holds a permit (fencing token {}); {now} of {PERMITS} in use",
        permit.fencing_token()
    );
    if now == PERMITS as usize {
        // Every permit is taken: the quorum names the holders (advisory, like any status).
        let status = locks.semaphore_status(SEMAPHORE).await?;
        let holders: Vec<String> = status
            .holders
            .iter()
            .map(|h| {
                format!(
                    "permit {} by {}",
                    h.permit,
                    h.holder.owner.as_deref().unwrap_or("?")
                )
            })
            .collect();
        println!("{SEMAPHORE} holders: {}", holders.join(", "));
    }

    // The API call; pass the fencing token along where the API can check it.
    tokio::time::sleep(Duration::from_millis(300)).await;

    inside.now.fetch_sub(1, Ordering::SeqCst);
    permit.release().await?;
    println!("{worker} released its permit");
    Ok(())
}
