//! The libraries behind one face: quorumlock, rslock, the floor (`floor.rs`) and etcd
//! (`etcd.rs`), and in the product's shape quorumlock in acknowledged mode (`lab.rs` admits
//! it under its own key prefix): the same client calls, every grant confirmed by `WAIT`.
//!
//! Without contention every library makes one try: quorumlock `acquire(..).ttl(..)` (no
//! wait), rslock `LockManager::lock` (its up-to-3 tries; the first succeeds on a free
//! resource), the floor one `SET NX PX` round, etcd one `Lock` call (granted at once on a free
//! resource). Under contention each waits with its own policy: quorumlock with `.wait(time
//! left in the phase)` (release notifications plus a fallback timer), rslock with
//! `LockManager::acquire_no_guard` (loops over `lock`, which tries 3 times with a random
//! 0..200 ms pause between tries; rslock's defaults), the floor by retrying every millisecond,
//! etcd by its `Lock` call waiting in etcd's queue (by key revision); all are cut off at the
//! end of the phase.

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::ValueEnum;
use quorumlock::Locks;
use rslock::LockManager;

use crate::etcd::{EtcdLock, EtcdLocks};
use crate::floor::{Floor, FloorLock};

/// The TTL of every lock, in every workload.
pub const TTL: Duration = Duration::from_secs(10);

/// How long an etcd `Lock` call on a free resource may take before it counts as failed
/// (etcd has no try-lock; the call would wait in line).
const ETCD_TRY_LIMIT: Duration = Duration::from_secs(2);

/// Which library; also the values of `--profile`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub enum LibraryKind {
    #[value(name = "quorumlock")]
    Quorum,
    /// quorumlock under a key prefix whose masters run acknowledged mode.
    #[value(name = "quorumlock-acked")]
    QuorumAcked,
    #[value(name = "rslock")]
    Rs,
    #[value(name = "floor")]
    Floor,
    #[value(name = "etcd")]
    Etcd,
}

impl LibraryKind {
    pub fn name(self) -> &'static str {
        match self {
            LibraryKind::Quorum => "quorumlock",
            LibraryKind::QuorumAcked => "quorumlock-acked",
            LibraryKind::Rs => "rslock",
            LibraryKind::Floor => "floor",
            LibraryKind::Etcd => "etcd",
        }
    }
}

/// A connected client of one library; cheap to clone into tasks.
#[derive(Clone)]
pub enum Library {
    Quorum(Locks),
    QuorumAcked(Locks),
    Rs(LockManager),
    Floor(Arc<Floor>),
    Etcd(Arc<EtcdLocks>),
}

/// What each library hands back for a held lock.
enum LockHandle {
    Quorum(quorumlock::Lease),
    Rs(rslock::Lock),
    Floor(FloorLock),
    Etcd(EtcdLock),
}

/// A lock held through any library, with what the workloads check.
pub struct HeldLock {
    handle: LockHandle,
    /// When the library says the lock may no longer be relied on.
    pub valid_until: Instant,
    /// The fencing token of quorumlock and etcd; rslock and the floor have none.
    pub fence: Option<u64>,
    /// quorumlock's count of acquire attempts behind this lease; the others do not tell.
    pub attempts: Option<u32>,
}

impl Library {
    pub fn kind(&self) -> LibraryKind {
        match self {
            Library::Quorum(_) => LibraryKind::Quorum,
            Library::QuorumAcked(_) => LibraryKind::QuorumAcked,
            Library::Rs(_) => LibraryKind::Rs,
            Library::Floor(_) => LibraryKind::Floor,
            Library::Etcd(_) => LibraryKind::Etcd,
        }
    }

    /// One acquire that does not wait for another holder (quorumlock: one attempt; rslock:
    /// `lock`, its up-to-3 tries — on a free resource both succeed at the first try).
    pub async fn try_acquire(&self, resource: &str) -> Result<HeldLock, String> {
        match self {
            Library::Quorum(locks) | Library::QuorumAcked(locks) => {
                let lease = locks
                    .acquire(resource)
                    .ttl(TTL)
                    .await
                    .map_err(|e| quorum_error(&e, resource))?;
                Ok(quorum_held(lease))
            }
            Library::Rs(manager) => {
                let lock = manager
                    .lock(resource.as_bytes(), TTL)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(rs_held(lock))
            }
            Library::Floor(floor) => {
                let lock = floor.try_acquire(resource, TTL).await?;
                Ok(HeldLock {
                    valid_until: lock.valid_until,
                    fence: None,
                    attempts: None,
                    handle: LockHandle::Floor(lock),
                })
            }
            Library::Etcd(etcd) => Ok(etcd_held(etcd.acquire(resource, ETCD_TRY_LIMIT).await?)),
        }
    }

    /// Acquires, waiting and retrying with the library's own policy while the resource is
    /// held, until `deadline`. `None` when the deadline passed first.
    pub async fn acquire_waiting(&self, resource: &str, deadline: Instant) -> Option<HeldLock> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            match self {
                Library::Quorum(locks) | Library::QuorumAcked(locks) => {
                    match locks.acquire(resource).ttl(TTL).wait(left).await {
                        Ok(lease) => return Some(quorum_held(lease)),
                        Err(quorumlock::Error::Held { .. }) => {}
                        Err(_) => tokio::time::sleep(Duration::from_millis(1)).await,
                    }
                }
                // `acquire` loops until it gets the lock; the phase's end cuts it off.
                Library::Rs(manager) => match tokio::time::timeout(
                    left,
                    manager.acquire_no_guard(resource.as_bytes(), TTL),
                )
                .await
                {
                    Ok(Ok(lock)) => return Some(rs_held(lock)),
                    Ok(Err(_)) => tokio::time::sleep(Duration::from_millis(1)).await,
                    Err(_) => return None,
                },
                // No order among waiters: each retries after a millisecond.
                Library::Floor(_) => match self.try_acquire(resource).await {
                    Ok(held) => return Some(held),
                    Err(_) => tokio::time::sleep(Duration::from_millis(1)).await,
                },
                // The call waits in etcd's queue; the phase's end cuts it off.
                Library::Etcd(etcd) => match etcd.acquire(resource, left).await {
                    Ok(lock) => return Some(etcd_held(lock)),
                    Err(_) => tokio::time::sleep(Duration::from_millis(1)).await,
                },
            }
        }
    }

    pub async fn release(&self, held: HeldLock) -> Result<(), String> {
        match (self, held.handle) {
            (_, LockHandle::Quorum(lease)) => {
                let resource = lease.resource().to_string();
                lease
                    .release()
                    .await
                    .map(|_| ())
                    .map_err(|e| quorum_error(&e, &resource))
            }
            // Best effort by design: rslock's unlock reports nothing.
            (Library::Rs(manager), LockHandle::Rs(lock)) => {
                manager.unlock(&lock).await;
                Ok(())
            }
            (Library::Floor(floor), LockHandle::Floor(lock)) => {
                floor.release(&lock).await;
                Ok(())
            }
            (Library::Etcd(etcd), LockHandle::Etcd(lock)) => etcd.release(lock).await,
            (_, _) => Err("a lock handed to another library".into()),
        }
    }

    /// Closes the library's connections, where it has a way to.
    pub async fn close(self) {
        match self {
            Library::Quorum(locks) | Library::QuorumAcked(locks) => locks.close().await,
            // rslock has no close; dropping the manager drops its connections.
            Library::Rs(manager) => drop(manager),
            Library::Floor(floor) => floor.close().await,
            Library::Etcd(etcd) => etcd.close().await,
        }
    }
}

/// A quorumlock error with the votes that were not grants, the resource's name left out so
/// that the same failure on many resources reads as one message.
fn quorum_error(error: &quorumlock::Error, resource: &str) -> String {
    let votes: Vec<String> = error
        .votes()
        .iter()
        .filter(|v| v.vote != quorumlock::Vote::Granted)
        .map(|v| format!("{} {:?}", v.group, v.vote))
        .collect();
    let message = if votes.is_empty() {
        error.to_string()
    } else {
        format!("{error} [votes: {}]", votes.join("; "))
    };
    message.replace(resource, "<resource>")
}

fn quorum_held(lease: quorumlock::Lease) -> HeldLock {
    HeldLock {
        valid_until: lease.valid_until(),
        fence: Some(lease.fencing_token()),
        attempts: Some(lease.attempts()),
        handle: LockHandle::Quorum(lease),
    }
}

fn rs_held(lock: rslock::Lock) -> HeldLock {
    // validity_time counts from the start of the winning try, which is before now: taking it
    // from now makes the relied-on interval longer, which can only find more overlaps.
    HeldLock {
        valid_until: Instant::now() + Duration::from_millis(lock.validity_time as u64),
        fence: None,
        attempts: None,
        handle: LockHandle::Rs(lock),
    }
}

fn etcd_held(lock: EtcdLock) -> HeldLock {
    HeldLock {
        valid_until: lock.valid_until,
        fence: Some(lock.fence),
        attempts: None,
        handle: LockHandle::Etcd(lock),
    }
}
