//! Several resources taken as one lease, all or nothing: `Locks::acquire_all` takes a set in
//! one script call per group, under one token and one fencing token that is above every
//! earlier holder's of each member. A set that meets a held member takes nothing, and names
//! the member. Callers may name the members in any order: the groups see one order, so two
//! overlapping sets never deadlock.
//!
//! Run it against a running lab (or name a topology file as the argument or in
//! `QUORUMLOCK_CONFIG`):
//!
//! ```sh
//! cargo run -- lab up
//! cargo run --example several_resources
//! cargo run -- lab down
//! ```

mod common;

use std::time::Duration;

use quorumlock::{Error, Locks};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let locks = Locks::connect(common::topology()?).await?;

    let mut set = locks
        .acquire_all(&["accounts:bob", "accounts:alice", "ledger"])
        .ttl(Duration::from_secs(10))
        .owner("transfer-17")
        .await?;
    println!(
        "holding {:?} under fencing token {}",
        set.resources(),
        set.fencing_token()
    );

    // Every member is held: a lock on one of them, or a set that shares one, is refused.
    for wanted in [vec!["ledger"], vec!["accounts:carol", "accounts:alice"]] {
        match locks.acquire_all(&wanted).await {
            Err(Error::Held {
                resource, holder, ..
            }) => println!(
                "{wanted:?} refused: {resource} is held by {}",
                holder.and_then(|h| h.owner).unwrap_or_default()
            ),
            other => return Err(format!("{wanted:?} was not refused: {other:?}").into()),
        }
    }
    // The refused set took nothing: carol is free.
    locks.acquire("accounts:carol").await?.release().await?;
    println!("accounts:carol is free: the refused set took nothing");

    // The set is renewed and released as a whole.
    set.extend(Duration::from_secs(10)).await?;
    let released = set.release().await?;
    println!("released the set on {} groups", released.groups_released);

    locks.close().await;
    Ok(())
}
