//! A lock with a fenced write. The storage the lock protects keeps the highest fencing token
//! it has seen and refuses a write that carries a lower one, so a holder whose lease ran out
//! while it was paused cannot overwrite the work of the holder after it. This example shows
//! the normal path, then such a stale holder rejected.
//!
//! Run it against a running lab (or name a topology file as the argument or in
//! `QUORUMLOCK_CONFIG`):
//!
//! ```sh
//! cargo run -- lab up                 # five groups and three Sentinels on 127.0.0.1
//! cargo run --example fenced_write
//! cargo run -- lab down
//! ```
//!
//! The README's "Use it from Rust" snippet is the part of this file between the two
//! `README` lines, word for word; tests/tools/examples.rs checks that they stay the same.

// README: begin
use std::time::Duration;

use quorumlock::Locks;

/// The storage the lock protects (in memory here; a database row or an object store in
/// practice). Refusing a fencing token below the highest one seen is what keeps it safe.
#[derive(Default)]
struct Storage {
    highest_token: u64,
    value: String,
}

impl Storage {
    fn write(&mut self, fencing_token: u64, value: &str) -> Result<(), String> {
        if fencing_token < self.highest_token {
            return Err(format!(
                "fencing token {fencing_token} is below {}: a later holder has written",
                self.highest_token
            ));
        }
        self.highest_token = fencing_token;
        self.value = value.to_string();
        Ok(())
    }
}

async fn migrate(locks: &Locks, storage: &mut Storage) -> Result<(), Box<dyn std::error::Error>> {
    let lease = locks
        .acquire("db:migrations")
        .ttl(Duration::from_secs(15))
        .wait(Duration::from_secs(10))
        .owner("agent-7")
        .purpose("apply migration 42")
        .await?; // Err says: held by whom, or which groups failed
    storage.write(lease.fencing_token(), "migration 42")?;
    lease.release().await?; // dropping a Lease releases it in the background
    Ok(())
}
// README: end

mod common;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let locks = Locks::connect(common::topology()?).await?;
    let mut storage = Storage::default();

    migrate(&locks, &mut storage).await?;
    println!(
        "agent-7 wrote {:?} under fencing token {}",
        storage.value, storage.highest_token
    );

    // agent-a takes the lock for one second, then stalls past its lease (a GC pause, a
    // suspended VM). agent-b waits, gets the lock once a's lease ran out, and writes.
    let a = locks
        .acquire("db:migrations")
        .ttl(Duration::from_secs(1))
        .owner("agent-a")
        .await?;
    println!(
        "agent-a holds the lock, fencing token {}",
        a.fencing_token()
    );
    let b = locks
        .acquire("db:migrations")
        .wait(Duration::from_secs(10))
        .owner("agent-b")
        .await?;
    println!(
        "agent-b holds the lock, fencing token {}",
        b.fencing_token()
    );
    storage.write(b.fencing_token(), "agent-b's write")?;

    // agent-a wakes up still believing it holds the lock. The storage refuses its write.
    match storage.write(a.fencing_token(), "agent-a's late write") {
        Err(why) => println!("stale holder rejected: {why}"),
        Ok(()) => return Err("the storage accepted a stale holder's write".into()),
    }
    println!("storage holds {:?}", storage.value);

    b.release().await?;
    drop(a); // its release in the background finds nothing left to release
    locks.close().await; // lets background releases land before the process exits
    Ok(())
}
