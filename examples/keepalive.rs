//! A lease kept alive while long work runs, and what to do when it is lost: first by hand
//! with `Acquire::keepalive()` and `KeptLease::lost()`, then with `Locks::with_lock`, which
//! acquires, renews, stops the work when the lease is lost and releases when the work ends.
//! An operator's `force_release` plays the loss; in production it is also renewals failing
//! until the lease ran out, or the lease reaching `max_hold_ms`.
//!
//! Run it against a running lab (or name a topology file as the argument or in
//! `QUORUMLOCK_CONFIG`):
//!
//! ```sh
//! cargo run -- lab up
//! cargo run --example keepalive
//! cargo run -- lab down
//! ```

mod common;

use std::time::Duration;

use quorumlock::{AcquireOptions, Error, Locks};

const RESOURCE: &str = "reports:nightly";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let locks = Locks::connect(common::topology()?).await?;

    // A kept lease is renewed every ttl/3 until it is released, dropped or lost. Run the work
    // beside `lost()`, which resolves the moment a renewal finds the lease gone.
    let kept = locks
        .acquire(RESOURCE)
        .ttl(Duration::from_secs(3))
        .owner("agent-7")
        .keepalive()
        .await?;
    println!(
        "kept lease on {RESOURCE}, fencing token {}",
        kept.fencing_token()
    );
    force_release_after(&locks, Duration::from_secs(1));
    tokio::select! {
        end = kept.lost() => println!("lease lost ({end:?}): the work was stopped"),
        () = work("kept lease", kept.fencing_token()) => return Err("the loss went unnoticed".into()),
    }

    // `with_lock` does the same for scoped work, and releases the lock when the work is done.
    let options = AcquireOptions {
        ttl: Duration::from_secs(3),
        owner: Some("agent-7".into()),
        ..AcquireOptions::default()
    };
    let fence = locks
        .with_lock(RESOURCE, &options, |scope| async move {
            // scope.is_lost() before each write, or select on scope.lost(), in work that
            // the scope is handed to (spawned tasks outlive with_lock).
            println!(
                "with_lock: working under fencing token {}",
                scope.fencing_token()
            );
            scope.fencing_token()
        })
        .await?;
    println!("with_lock: the work under fencing token {fence} finished; the lock is released");

    // When the lease is lost while the work runs, with_lock drops the work future and says so.
    force_release_after(&locks, Duration::from_secs(1));
    let outcome = locks
        .with_lock(RESOURCE, &options, |scope| {
            work("with_lock", scope.fencing_token())
        })
        .await;
    match outcome {
        Err(Error::LeaseLost { reason, .. }) => println!("with_lock stopped the work: {reason}"),
        other => return Err(format!("the loss went unnoticed: {other:?}").into()),
    }

    locks.close().await;
    Ok(())
}

/// Work that would take a minute: a fenced write every half second.
async fn work(name: &str, fencing_token: u64) {
    for step in 1..=120 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        println!("{name}: step {step} written under fencing token {fencing_token}");
    }
}

/// An operator deletes the lock after `delay`, whoever holds it.
fn force_release_after(locks: &Locks, delay: Duration) {
    let locks = locks.clone();
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        let _ = locks.force_release(RESOURCE).await;
    });
}
