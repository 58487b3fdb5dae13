//! A group that is a Redis Cluster: its slot map, and one client and lane per primary.
//!
//! fred's own cluster client is not used: it retries an `ASK` until its router gives up, and
//! one dead primary stalls every slot until the cluster fails it over. Here each primary is a
//! plain [`Master`], and a call goes to the primary that owns its resource's slot, with every
//! key moved into that slot (see [`HashSlot::key`]). A `MOVED`, `ASK` or `TRYAGAIN` answer
//! to the whole call means the script did not run: the call is "not sent", never counted,
//! and the map is read again at once; the call waits for that read and goes to the primary
//! it names, as long as its own call timeout lasts, so a release or renewal reaches a slot
//! that moved instead of being redirected until its lock expires. The map is also read every
//! [`REFRESH_INTERVAL`](slot_map::REFRESH_INTERVAL), and after any call that timed out or
//! failed, so a failover is seen without waiting for a call to be refused.
//!
//! Releases are announced with sharded pub/sub: on a channel moved into the resource's slot,
//! heard by the subscribers of that slot's primary only (see [`crate::group::sharded`]).
//!
//! This folder owns the Cluster group, one job a file: the [`Cluster`] and its primaries here;
//! `routing` sending each call to the primary of its slot, again when the slot moved;
//! `slot_map` which primary owns each slot, and the task that reads it again.

mod routing;
mod slot_map;

use std::sync::{Arc, Mutex, RwLock};

use fred::prelude::ClientLike;
use tokio::sync::{Notify, watch};
use tokio_util::task::AbortOnDropHandle;

use crate::config::Topology;
use crate::group::diagnose::Diagnosis;
use crate::group::master::Master;
use crate::group::security::{Credentials, Transport};
use crate::group::sharded::ShardSubscribers;
use crate::group::slots::HashSlot;

pub(crate) use routing::untag;
pub(crate) use slot_map::MapView;

use slot_map::{Builders, Seeds, SlotMap, current_of, keep_current, owner_in, refresh};

/// One primary of the cluster.
pub(crate) struct Shard {
    /// `host:port`, as the cluster announces it.
    pub address: String,
    pub master: Master,
}

/// The primaries of one Cluster group.
pub(crate) struct Cluster {
    builders: Arc<Builders>,
    map: Arc<RwLock<Arc<SlotMap>>>,
    /// Asks the map-reading task for a read now.
    stale: Arc<Notify>,
    /// Counts the changes of the map, for the release subscribers to follow them.
    changes: Arc<watch::Sender<u64>>,
    /// Counts the completed reads of the map, changed or not, for redirected calls to wait
    /// for the next one.
    reads: Arc<watch::Sender<u64>>,
    refresher: Mutex<Option<AbortOnDropHandle<()>>>,
}

impl Cluster {
    pub fn new(
        name: &str,
        seeds: Vec<(String, u16)>,
        credentials: Credentials,
        transport: &Transport,
        topology: &Topology,
        diagnosis: Arc<Diagnosis>,
    ) -> Self {
        Cluster {
            builders: Arc::new(Builders {
                name: name.to_string(),
                seeds,
                credentials,
                transport: transport.clone(),
                topology: topology.clone(),
                diagnosis,
            }),
            map: Arc::default(),
            stale: Arc::new(Notify::new()),
            changes: Arc::new(watch::Sender::new(0)),
            reads: Arc::new(watch::Sender::new(0)),
            refresher: Mutex::new(None),
        }
    }

    /// Reads the slot map once (bounded), connects its primaries, and starts the task that
    /// keeps it current. Whether a map was read.
    pub async fn start(&self) -> bool {
        let read = refresh(&self.builders, &self.map, &self.changes, Seeds::Always).await;
        self.reads.send_modify(|count| *count += 1);
        let task = tokio::spawn(keep_current(
            self.builders.clone(),
            self.map.clone(),
            self.stale.clone(),
            self.changes.clone(),
            self.reads.clone(),
        ));
        if let Ok(mut refresher) = self.refresher.lock() {
            *refresher = Some(AbortOnDropHandle::new(task));
        }
        read
    }

    fn current(&self) -> Arc<SlotMap> {
        current_of(&self.map)
    }

    /// The primary that owns `slot` now.
    fn owner(&self, slot: HashSlot) -> Option<Arc<Shard>> {
        owner_in(&self.current(), slot)
    }

    /// A new release subscriber: a client per primary that owns a slot with waiters, each
    /// subscribed with SSUBSCRIBE, all again after every change of the map.
    pub fn subscriber(&self) -> Arc<ShardSubscribers> {
        ShardSubscribers::start(MapView {
            map: self.map.clone(),
            stale: self.stale.clone(),
            changes: self.changes.subscribe(),
        })
    }

    /// The primary that owns `slot` now; with none, the map is read again soon.
    fn routed(&self, slot: HashSlot) -> Option<Arc<Shard>> {
        let owner = self.owner(slot);
        if owner.is_none() {
            self.reread();
        }
        owner
    }

    /// The primaries known now.
    pub fn shards(&self) -> Vec<Arc<Shard>> {
        self.current().shards.clone()
    }

    /// One slot of each primary, for views that read each primary once.
    fn one_slot_per_shard(&self) -> Vec<HashSlot> {
        let map = self.current();
        (0..map.shards.len())
            .filter_map(|shard| {
                let first = map.owners.iter().position(|owner| *owner == Some(shard))?;
                HashSlot::new(u16::try_from(first).ok()?)
            })
            .collect()
    }

    /// Reads the map again soon, after an answer that says it changed or a primary that did
    /// not answer.
    fn reread(&self) {
        self.stale.notify_one();
    }

    /// Whether every primary of the map is connected (false with no map).
    pub fn connected(&self) -> bool {
        let shards = self.shards();
        !shards.is_empty()
            && shards
                .iter()
                .all(|shard| shard.master.client().is_connected())
    }

    /// Closes every client and stops reading the map.
    pub async fn quit(&self) {
        if let Ok(mut refresher) = self.refresher.lock()
            && let Some(task) = refresher.take()
        {
            task.abort();
        }
        let shards = self.shards();
        futures::future::join_all(shards.iter().map(|shard| shard.master.quit())).await;
    }
}

/// Which slots a group-wide script runs on in a Cluster group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Every {
    /// All 16,384: what is written per slot (admission, policy).
    Slot,
    /// One per primary: what is read per primary (health).
    Shard,
}
