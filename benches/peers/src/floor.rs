//! The floor: the least any Redlock built on fred must do, as a third library in the table.
//!
//! A lock is `SET <resource> <token> NX PX <ttl>` sent to every master at once, counted as soon
//! as a majority granted (the rest land in the background); a failed try or a release is the
//! usual compare-and-delete script on every master. Nothing else: no fencing token, no
//! admission check of the master's history, no owner record, no batching, no waiting in line.
//! It is not a lock service (it is unsafe across a failover, and its waiters retry every
//! millisecond with no order), so it is only here to show what the protocol itself costs on
//! this machine, through the same client library quorumlock uses.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::prelude::*;
use fred::types::{Expiration, SetOptions};
use futures::StreamExt;
use futures::stream::FuturesUnordered;

/// Deletes the key only if it still holds the caller's token (the Redlock release).
const RELEASE: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

pub struct Floor {
    masters: Vec<Client>,
    release_sha: String,
    quorum: usize,
}

/// A lock the floor holds.
pub struct FloorLock {
    resource: String,
    token: String,
    /// When the lock may no longer be relied on: TTL minus the time to a majority, minus
    /// Redlock's drift allowance.
    pub valid_until: Instant,
}

impl Floor {
    /// Connects one fred client to each master, directly (like rslock).
    pub async fn connect(ports: &[u16]) -> Result<Arc<Floor>, Error> {
        let mut masters = Vec::new();
        for port in ports {
            let config = Config::from_url(&format!("redis://127.0.0.1:{port}"))?;
            let client = Builder::from_config(config)
                .with_connection_config(|connection| connection.tcp.nodelay = Some(true))
                .with_performance_config(|performance| {
                    performance.default_command_timeout = Duration::from_secs(1)
                })
                .build()?;
            client.init().await?;
            masters.push(client);
        }
        let mut release_sha = String::new();
        for master in &masters {
            release_sha = master.script_load::<String, _>(RELEASE).await?;
        }
        Ok(Arc::new(Floor {
            quorum: masters.len() / 2 + 1,
            masters,
            release_sha,
        }))
    }

    /// One try: a lock on a majority, or the grants it got are deleted again.
    pub async fn try_acquire(&self, resource: &str, ttl: Duration) -> Result<FloorLock, String> {
        let started = Instant::now();
        let token = uuid::Uuid::new_v4().simple().to_string();
        let ttl_ms = i64::try_from(ttl.as_millis()).map_err(|_| "ttl too long".to_string())?;
        let mut pending: FuturesUnordered<_> = self
            .masters
            .iter()
            .map(|master| {
                Box::pin(master.set::<Option<String>, _, _>(
                    resource,
                    token.as_str(),
                    Some(Expiration::PX(ttl_ms)),
                    Some(SetOptions::NX),
                    false,
                ))
            })
            .collect();
        let (mut granted, mut answered) = (0, 0);
        while let Some(reply) = pending.next().await {
            answered += 1;
            if matches!(reply, Ok(Some(_))) {
                granted += 1;
            }
            let left = self.masters.len() - answered;
            if granted >= self.quorum || granted + left < self.quorum {
                break;
            }
        }
        // The replies not awaited still arrive; fred drops them.
        drop(pending);
        let drift = ttl / 100 + Duration::from_millis(2);
        let elapsed = started.elapsed();
        if granted >= self.quorum && elapsed + drift < ttl {
            return Ok(FloorLock {
                resource: resource.to_string(),
                token,
                valid_until: started + ttl - drift,
            });
        }
        let lock = FloorLock {
            resource: resource.to_string(),
            token,
            valid_until: started,
        };
        self.release(&lock).await;
        Err(format!("granted by {granted} of {}", self.masters.len()))
    }

    /// Compare-and-delete on every master, waiting for all (as rslock and quorumlock do).
    pub async fn release(&self, lock: &FloorLock) {
        let deletes = self.masters.iter().map(|master| {
            Box::pin(master.evalsha::<i64, _, _, _>(
                self.release_sha.as_str(),
                vec![lock.resource.as_str()],
                vec![lock.token.as_str()],
            ))
        });
        futures::future::join_all(deletes).await;
    }

    pub async fn close(&self) {
        for master in &self.masters {
            let _ = master.quit().await;
        }
    }
}
