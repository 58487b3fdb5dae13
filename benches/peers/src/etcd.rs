//! etcd as a fourth library: its lock API (`Lock` with a lease, `Unlock`) through the
//! `etcd-client` crate, the way an etcd user takes a fenced lock.
//!
//! Each holder needs a lease of its own: etcd's lock key is `<name>/<lease>`, so two holders
//! on one lease would share one key and both believe they hold the lock. Leases (TTL 10 s,
//! like every lock in the bench) are kept alive in the background and pooled, so that an
//! acquire is one `Lock` call and a release one `Unlock` call, as with one Go
//! `concurrency.Session` per worker; a lease whose lock call failed is revoked, never reused.
//!
//! The fencing token is the lock key's revision: the revision in the `Lock` reply's header,
//! which is the key's create revision when the lock was free and, after a wait, the revision
//! at which every earlier key was gone (`connect` checks the first on a fresh key). Both grow
//! from holder to holder, which the contended workload checks.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client::{Client, LockOptions};
use tokio::task::JoinHandle;

use crate::BoxError;

/// Lease TTL in seconds: the TTL of every lock in the bench.
const LEASE_TTL_SECS: i64 = 10;
/// How often a lease is kept alive: a third of its TTL, as etcd's own clients do.
const KEEP_ALIVE_EVERY: Duration = Duration::from_secs(3);

/// A lease with its keep-alive task; the task ends when the lease is dropped.
struct PooledLease {
    id: i64,
    /// When the last keep-alive that etcd answered was sent.
    refreshed: Arc<Mutex<Instant>>,
    keeper: JoinHandle<()>,
}

impl Drop for PooledLease {
    fn drop(&mut self) {
        self.keeper.abort();
    }
}

/// A connected etcd client with its pool of free leases.
pub struct EtcdLocks {
    client: Client,
    free: Mutex<Vec<PooledLease>>,
}

/// A lock etcd granted.
pub struct EtcdLock {
    key: Vec<u8>,
    lease: PooledLease,
    /// The lock key's revision.
    pub fence: u64,
    /// The lease's expiry as last renewed, counted from when the renewal was sent.
    pub valid_until: Instant,
}

impl EtcdLocks {
    /// Connects to every member, fills the pool with `leases` leases and checks that a free
    /// lock's reply carries its key's create revision.
    pub async fn connect(endpoints: &[String], leases: usize) -> Result<Arc<EtcdLocks>, BoxError> {
        let client = Client::connect(endpoints, None).await?;
        let locks = Arc::new(EtcdLocks {
            client,
            free: Mutex::new(Vec::new()),
        });
        let mut pool = Vec::new();
        for _ in 0..leases {
            pool.push(locks.grant().await?);
        }
        locks.free_list().extend(pool);
        locks.check_fence().await?;
        Ok(locks)
    }

    fn free_list(&self) -> std::sync::MutexGuard<'_, Vec<PooledLease>> {
        self.free
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    async fn grant(&self) -> Result<PooledLease, BoxError> {
        let id = self
            .client
            .lease_client()
            .grant(LEASE_TTL_SECS, None)
            .await?
            .id();
        let refreshed = Arc::new(Mutex::new(Instant::now()));
        let keeper = tokio::spawn(keep_alive(self.client.clone(), id, Arc::clone(&refreshed)));
        Ok(PooledLease {
            id,
            refreshed,
            keeper,
        })
    }

    /// A free lease from the pool, or a new one.
    async fn take_lease(&self) -> Result<PooledLease, BoxError> {
        let pooled = self.free_list().pop();
        match pooled {
            Some(lease) => Ok(lease),
            None => self.grant().await,
        }
    }

    /// Revokes the lease in the background, which also deletes any key left on it.
    fn discard(&self, lease: PooledLease) {
        let mut client = self.client.clone();
        let id = lease.id;
        drop(lease);
        tokio::spawn(async move {
            let _ = client.lease_revoke(id).await;
        });
    }

    /// `Lock` on `resource` with a lease of its own; etcd waits while another holds it, so
    /// `limit` bounds the wait. A failed or timed-out call revokes its lease.
    pub async fn acquire(&self, resource: &str, limit: Duration) -> Result<EtcdLock, String> {
        let lease = self.take_lease().await.map_err(|e| e.to_string())?;
        let valid_until = lease_expiry(&lease);
        let mut client = self.client.lock_client();
        let call = client.lock(resource, Some(LockOptions::new().with_lease(lease.id)));
        let reply = match tokio::time::timeout(limit, call).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(error)) => {
                self.discard(lease);
                return Err(error.to_string());
            }
            Err(_) => {
                self.discard(lease);
                return Err("lock call timed out".into());
            }
        };
        let revision = reply.header().map(|h| h.revision()).unwrap_or(0);
        let Ok(fence) = u64::try_from(revision) else {
            self.discard(lease);
            return Err(format!("lock reply without a revision ({revision})"));
        };
        Ok(EtcdLock {
            key: reply.key().to_vec(),
            lease,
            fence,
            valid_until,
        })
    }

    /// `Unlock`; the lease goes back to the pool, or is revoked if the call failed.
    pub async fn release(&self, lock: EtcdLock) -> Result<(), String> {
        match self.client.lock_client().unlock(lock.key).await {
            Ok(_) => {
                self.free_list().push(lock.lease);
                Ok(())
            }
            Err(error) => {
                self.discard(lock.lease);
                Err(error.to_string())
            }
        }
    }

    /// Checks on a fresh key that the revision taken as the fencing token is the lock key's
    /// create revision.
    async fn check_fence(&self) -> Result<(), BoxError> {
        let resource = format!("peers:fence-check:{}", std::process::id());
        let lock = self.acquire(&resource, Duration::from_secs(5)).await?;
        let reply = self.client.kv_client().get(lock.key.clone(), None).await?;
        let created = reply.kvs().first().map(|kv| kv.create_revision());
        let fence = lock.fence;
        self.release(lock).await?;
        match created {
            Some(created) if u64::try_from(created) == Ok(fence) => Ok(()),
            other => Err(format!(
                "etcd's lock reply carries revision {fence}, but its key was created at {other:?}"
            )
            .into()),
        }
    }

    /// Revokes every pooled lease.
    pub async fn close(&self) {
        let leases: Vec<PooledLease> = self.free_list().drain(..).collect();
        let mut client = self.client.clone();
        for lease in leases {
            let id = lease.id;
            drop(lease);
            let _ = client.lease_revoke(id).await;
        }
    }
}

fn lease_expiry(lease: &PooledLease) -> Instant {
    let refreshed = *lease
        .refreshed
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    refreshed + Duration::from_secs(LEASE_TTL_SECS.unsigned_abs())
}

/// Keeps one lease alive every `KEEP_ALIVE_EVERY`, reopening the stream after an error (a
/// member died), until the lease is gone or the task is aborted.
async fn keep_alive(client: Client, id: i64, refreshed: Arc<Mutex<Instant>>) {
    let mark = |at: Instant| {
        *refreshed
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = at;
    };
    loop {
        let opened = Instant::now();
        let (mut keeper, mut stream) = match client.lease_client().keep_alive(id).await {
            Ok(pair) => pair,
            Err(etcd_client::Error::LeaseKeepAliveError(_)) => return,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        mark(opened);
        loop {
            tokio::time::sleep(KEEP_ALIVE_EVERY).await;
            let sent = Instant::now();
            if keeper.keep_alive().await.is_err() {
                break;
            }
            match stream.message().await {
                Ok(Some(reply)) if reply.ttl() > 0 => mark(sent),
                // The lease has expired or was revoked.
                Ok(Some(_)) => return,
                Ok(None) | Err(_) => break,
            }
        }
    }
}
