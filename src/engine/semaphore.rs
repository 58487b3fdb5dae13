//! Counting semaphores: at most N holders of a named resource at once, each with a permit
//! that expires, carries a fencing token and renews like a lease.
//!
//! A semaphore of N permits is N slots, each a lock of its own under the same majority rule,
//! quarantine and fencing as any lock. A permit is one slot won on a majority of groups, so
//! no slot ever has two holders and the semaphore never more than N (a majority per permit
//! over independent counters would not do: three holders of a 2-permit semaphore can each
//! find a majority of groups with room). The groups keep the permit count the semaphore was
//! first used with, and refuse another.

use serde::Serialize;

use crate::engine::error::{Error, Holder};
use crate::engine::fan_out::fan_out;
use crate::engine::lease::Acquire;
use crate::engine::locks::{AcquireOptions, Locks};
use crate::engine::resource::{Claim, PermitKeys, validate_resource};
use crate::group::reply::Reply;
use crate::group::slots::HashSlot;

/// A semaphore as the groups see it now (advisory, like [`Locks::status`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "mcp", derive(schemars::JsonSchema))]
pub struct SemaphoreStatus {
    pub name: String,
    /// The permit count a majority of groups keeps; `None` when the semaphore is not in use
    /// (nor was in the last day).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub permits: Option<u32>,
    /// The permits held on a majority now, by slot.
    pub holders: Vec<PermitHolder>,
}

/// One held permit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "mcp", derive(schemars::JsonSchema))]
pub struct PermitHolder {
    /// The permit's slot, from 0 to permits − 1.
    pub permit: u32,
    #[serde(flatten)]
    pub holder: Holder,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fencing_token: Option<u64>,
}

impl Locks {
    /// Starts building an acquire of one permit of semaphore `name`, which has `permits`
    /// permits (1..=[`crate::MAX_PERMITS`]; every caller must name the same count);
    /// `.await` it like [`Locks::acquire`]. The lease's token names its slot, so
    /// [`Locks::release`] and [`Locks::extend`] with `name` and the token act on the permit.
    pub fn acquire_permit(&self, name: impl Into<String>, permits: u32) -> Acquire {
        Acquire::permit(self.clone(), name.into(), permits)
    }

    /// [`Locks::acquire_permit`] with explicit options.
    pub async fn acquire_permit_with(
        &self,
        name: &str,
        permits: u32,
        options: &AcquireOptions,
    ) -> Result<crate::Lease, Error> {
        let keys = PermitKeys::new(&self.engine.topology.key_prefix, name, permits)?;
        self.acquire_claim(Claim::Permit(keys), options).await
    }

    /// Reads semaphore `name` on every group: its permit count and who holds permits.
    pub async fn semaphore_status(&self, name: &str) -> Result<SemaphoreStatus, Error> {
        validate_resource(name)?;
        let engine = &self.engine;
        // The slot keys do not depend on the count: read it first, then every slot.
        let probe = PermitKeys::new(&engine.topology.key_prefix, name, 1)?;
        let count_key = probe.count.as_str().unwrap_or_default().to_string();
        let slot = HashSlot::of_resource(name);
        let replies = fan_out(
            &engine.groups,
            |group| group.get(slot, &count_key),
            |_| false,
        )
        .await;
        let mut counts: Vec<u32> = replies
            .iter()
            .filter_map(|reply| match reply {
                Some(Reply::Answer(Some(text))) => text.parse().ok(),
                _ => None,
            })
            .collect();
        counts.sort_unstable();
        let permits = counts
            .iter()
            .find(|count| counts.iter().filter(|c| c == count).count() >= engine.majority.needed)
            .copied();
        let mut holders = Vec::new();
        if let Some(permits) = permits {
            let keys = PermitKeys::new(&engine.topology.key_prefix, name, permits)?;
            let statuses =
                futures::future::join_all(keys.slots.iter().map(|slot| self.status_of(name, slot)))
                    .await;
            for (permit, status) in (0..permits).zip(statuses) {
                let status = status?;
                if let (true, Some(holder)) = (status.held, status.holder) {
                    holders.push(PermitHolder {
                        permit,
                        holder,
                        fencing_token: status.fencing_token,
                    });
                }
            }
        }
        Ok(SemaphoreStatus {
            name: name.to_string(),
            permits,
            holders,
        })
    }
}
