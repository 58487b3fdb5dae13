//! The slot map: which primary owns each of the 16,384 slots, read from the primaries'
//! (and the seeds') `CLUSTER SLOTS`, kept by the healthy node with the highest epoch, and
//! read again whenever asked and every [`REFRESH_INTERVAL`]; new primaries are connected as
//! they appear, and the ones gone are closed.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use fred::prelude::*;
use tokio::sync::{Notify, watch};
use tokio_util::task::AbortOnDropHandle;

use super::Shard;
use crate::config::Topology;
use crate::group::batch::Batching;
use crate::group::diagnose::Diagnosis;
use crate::group::master::Master;
use crate::group::security::{Credentials, Transport};
use crate::group::slots::{HashSlot, SLOTS};

/// How often the slot map is read while nothing asks for it sooner.
const REFRESH_INTERVAL: Duration = Duration::from_secs(1);
/// Every how many reads of the map the seeds are asked too, even while the primaries see
/// the cluster up: a primary cut off from the others says so only after the node timeout.
const SEEDS_EVERY: u64 = 10;
/// Shortest time between two reads of the map, however many calls ask for one.
pub(super) const REFRESH_SPACING: Duration = Duration::from_millis(50);

/// Which primary owns each slot.
#[derive(Default)]
pub(super) struct SlotMap {
    pub(super) shards: Vec<Arc<Shard>>,
    /// Per slot, the index of its primary in `shards`.
    pub(super) owners: Vec<Option<usize>>,
}

/// What the map-reading task needs to build clients for the primaries it finds.
pub(super) struct Builders {
    pub(super) name: String,
    pub(super) seeds: Vec<(String, u16)>,
    pub(super) credentials: Credentials,
    pub(super) transport: Transport,
    pub(super) topology: Topology,
    pub(super) diagnosis: Arc<Diagnosis>,
}

/// The slot map as the release subscribers read it: which primary owns a slot now, and word
/// of every change.
#[derive(Clone)]
pub(crate) struct MapView {
    pub(super) map: Arc<RwLock<Arc<SlotMap>>>,
    pub(super) stale: Arc<Notify>,
    pub(super) changes: watch::Receiver<u64>,
}

impl MapView {
    /// The primary that owns `slot` now.
    pub fn owner(&self, slot: HashSlot) -> Option<Arc<Shard>> {
        owner_in(&current_of(&self.map), slot)
    }

    /// `host:port` of every primary of the map.
    pub fn primaries(&self) -> Vec<String> {
        current_of(&self.map)
            .shards
            .iter()
            .map(|shard| shard.address.clone())
            .collect()
    }

    /// Resolves once the map changes after the last change seen; `false` once the cluster is
    /// gone.
    pub async fn changed(&mut self) -> bool {
        self.changes.changed().await.is_ok()
    }

    /// Reads the map again soon: a node answered that it does not own a slot it should.
    pub fn reread(&self) {
        self.stale.notify_one();
    }
}

pub(super) fn current_of(map: &RwLock<Arc<SlotMap>>) -> Arc<SlotMap> {
    map.read()
        .map(|map| map.clone())
        .unwrap_or_else(|poisoned| poisoned.into_inner().clone())
}

pub(super) fn owner_in(map: &SlotMap, slot: HashSlot) -> Option<Arc<Shard>> {
    let index = (*map.owners.get(usize::from(slot.index()))?)?;
    map.shards.get(index).cloned()
}

/// Reads the map whenever asked, and every [`REFRESH_INTERVAL`] anyway.
pub(super) async fn keep_current(
    builders: Arc<Builders>,
    map: Arc<RwLock<Arc<SlotMap>>>,
    stale: Arc<Notify>,
    changes: Arc<watch::Sender<u64>>,
    reads: Arc<watch::Sender<u64>>,
) {
    for round in 1_u64.. {
        let _ = tokio::time::timeout(REFRESH_INTERVAL, stale.notified()).await;
        let seeds = if round % SEEDS_EVERY == 0 {
            Seeds::Always
        } else {
            Seeds::WhenNoPrimaryIsUp
        };
        refresh(&builders, &map, &changes, seeds).await;
        reads.send_modify(|count| *count += 1);
        tokio::time::sleep(REFRESH_SPACING).await;
    }
}

/// One primary's slots, as a node of the cluster says.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SlotRange {
    first: u16,
    last: u16,
    primary: String,
}

/// What one node answered: whether it sees the cluster as up, its epoch, and its map.
struct View {
    healthy: bool,
    epoch: u64,
    ranges: Vec<SlotRange>,
}

/// When a read of the slot map asks the seeds too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Seeds {
    Always,
    WhenNoPrimaryIsUp,
}

/// Reads the map from the known primaries through their clients, and from the seeds too
/// (each on a connection of its own) as `seeds` says; keeps the view of a healthy node with
/// the highest epoch, and connects the new primaries at once. Says so on `changes` when the
/// map changed. Whether a map was read.
pub(super) async fn refresh(
    builders: &Builders,
    map: &RwLock<Arc<SlotMap>>,
    changes: &watch::Sender<u64>,
    seeds: Seeds,
) -> bool {
    let current = map.read().map(|map| map.clone()).unwrap_or_default();
    let views = read_views(builders, &current, seeds).await;
    let Some(view) = views
        .into_iter()
        .filter(|view| !view.ranges.is_empty())
        .max_by_key(|view| (view.healthy, view.epoch))
    else {
        tracing::debug!(group = %builders.name, "no node of the Cluster group answered with a slot map");
        return false;
    };
    let by_address = connect_new(builders, &current, &view).await;
    // Shards taken into the new map leave `by_address`; what is left is closed below.
    let mut gone = by_address;
    let mut shards: Vec<Arc<Shard>> = Vec::new();
    let mut owners = vec![None; usize::from(SLOTS)];
    for range in &view.ranges {
        let index = match shards
            .iter()
            .position(|shard| shard.address == range.primary)
        {
            Some(index) => index,
            None => {
                let Some(shard) = gone.remove(&range.primary) else {
                    continue;
                };
                shards.push(shard);
                shards.len() - 1
            }
        };
        for slot in range.first..=range.last.min(SLOTS - 1) {
            owners[usize::from(slot)] = Some(index);
        }
    }
    let changed = shards.len() != current.shards.len()
        || owners != current.owners
        || shards
            .iter()
            .zip(&current.shards)
            .any(|(new, old)| new.address != old.address);
    if changed {
        tracing::info!(
            group = %builders.name,
            primaries = ?shards.iter().map(|shard| shard.address.as_str()).collect::<Vec<_>>(),
            "the Cluster group's slot map changed"
        );
        if let Ok(mut slot) = map.write() {
            *slot = Arc::new(SlotMap { shards, owners });
        }
        changes.send_modify(|count| *count += 1);
        // Primaries no longer in the map: closed now; a call still on one fails like a call
        // to a node that went away.
        for (_, shard) in gone {
            tokio::spawn(async move { shard.master.quit().await });
        }
    }
    true
}

/// The views of the known primaries, read through their clients, and of the seeds not among
/// them (each on a connection of its own) as `seeds` says.
async fn read_views(builders: &Builders, current: &SlotMap, seeds: Seeds) -> Vec<View> {
    let mut views: Vec<View> =
        futures::future::join_all(current.shards.iter().map(|shard| async move {
            let (info, slots) = shard.master.cluster_map().await?;
            let (host, _) = split_address(&shard.address)?;
            Some(view_of(&info, &slots, &host))
        }))
        .await
        .into_iter()
        .flatten()
        .collect();
    let primary_up = views
        .iter()
        .any(|view| view.healthy && !view.ranges.is_empty());
    if seeds == Seeds::Always || !primary_up {
        let asked: Vec<(String, u16)> = current
            .shards
            .iter()
            .filter_map(|shard| split_address(&shard.address))
            .collect();
        let seeds = builders.seeds.iter().filter(|seed| !asked.contains(seed));
        let seed_views =
            futures::future::join_all(seeds.map(|(host, port)| read_view(builders, host, *port)))
                .await;
        views.extend(seed_views.into_iter().flatten());
    }
    views
}

/// The primaries of `current` by address, with those of `view` that are new connected at
/// once (a primary that cannot be built is left out).
async fn connect_new(
    builders: &Builders,
    current: &SlotMap,
    view: &View,
) -> HashMap<String, Arc<Shard>> {
    let mut by_address: HashMap<String, Arc<Shard>> = current
        .shards
        .iter()
        .map(|shard| (shard.address.clone(), shard.clone()))
        .collect();
    let mut new: Vec<&str> = Vec::new();
    for range in &view.ranges {
        if !by_address.contains_key(&range.primary) && !new.contains(&range.primary.as_str()) {
            new.push(&range.primary);
        }
    }
    let connected =
        futures::future::join_all(new.iter().map(|address| connect_shard(builders, address))).await;
    for (address, shard) in new.into_iter().zip(connected) {
        if let Some(shard) = shard {
            by_address.insert(address.to_string(), shard);
        }
    }
    by_address
}

/// A client for the primary at `address`, connected (bounded) with the scripts loaded.
async fn connect_shard(builders: &Builders, address: &str) -> Option<Arc<Shard>> {
    let (host, port) = split_address(address)?;
    let master = Master::build(
        ServerConfig::new_centralized(host, port),
        &builders.credentials,
        &builders.transport,
        &builders.topology,
        builders.diagnosis.clone(),
        Batching::Undeclared,
    )
    .map_err(|error| {
        tracing::warn!(group = %builders.name, address, %error, "cannot build a client for a Cluster primary");
    })
    .ok()?;
    match master.start().await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => {
            tracing::warn!(group = %builders.name, address, %error, "a Cluster primary refused the connection; it reconnects in the background")
        }
        Err(_) => {
            tracing::warn!(group = %builders.name, address, "a Cluster primary did not answer in time; it reconnects in the background")
        }
    }
    Some(Arc::new(Shard {
        address: address.to_string(),
        master,
    }))
}

/// `CLUSTER INFO` and `CLUSTER SLOTS` of one node, within the call timeout.
async fn read_view(builders: &Builders, host: &str, port: u16) -> Option<View> {
    let config = builders.transport.config(
        ServerConfig::new_centralized(host, port),
        &builders.credentials,
    );
    let client = Builder::from_config(config)
        .with_connection_config(|connection| {
            connection.connection_timeout = builders.topology.call_timeout();
            connection.max_command_attempts = 1;
        })
        .build()
        .ok()?;
    let limit = builders.topology.call_timeout() * 2;
    // Aborted on every path when dropped, so a node that never answers (frozen) keeps no
    // connection task behind.
    let connection = AbortOnDropHandle::new(client.connect());
    let read = async {
        client.wait_for_connect().await.ok()?;
        let info = client
            .custom::<String, _>(fred::cmd!("CLUSTER", blocking: false), vec!["INFO"])
            .await
            .ok()?;
        let slots = client
            .custom::<Value, _>(fred::cmd!("CLUSTER", blocking: false), vec!["SLOTS"])
            .await
            .ok()?;
        Some((info, slots))
    };
    let answer = tokio::time::timeout(limit, read).await.ok().flatten();
    if answer.is_some() {
        let _ = tokio::time::timeout(limit, client.quit()).await;
    }
    drop(connection);
    let (info, slots) = answer?;
    Some(view_of(&info, &slots, host))
}

/// A node's view from its `CLUSTER INFO` and `CLUSTER SLOTS` replies; `host` is where it was
/// asked.
fn view_of(info: &str, slots: &Value, host: &str) -> View {
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.trim().strip_prefix(name)?.strip_prefix(':'))
            .map(str::to_string)
    };
    View {
        healthy: field("cluster_state").as_deref() == Some("ok"),
        epoch: field("cluster_current_epoch")
            .and_then(|epoch| epoch.parse().ok())
            .unwrap_or(0),
        ranges: parse_slots(slots, host),
    }
}

/// The ranges of a `CLUSTER SLOTS` reply: `[[first, last, [host, port, id, ...], replicas...], ...]`.
/// A primary announced without a host is at `asked_host`, the node that answered.
fn parse_slots(reply: &Value, asked_host: &str) -> Vec<SlotRange> {
    let Value::Array(ranges) = reply else {
        return Vec::new();
    };
    ranges
        .iter()
        .filter_map(|range| {
            let Value::Array(fields) = range else {
                return None;
            };
            let number = |value: &Value| value.as_u64().and_then(|n| u16::try_from(n).ok());
            let first = number(fields.first()?)?;
            let last = number(fields.get(1)?)?;
            let Value::Array(primary) = fields.get(2)? else {
                return None;
            };
            let host = primary.first()?.as_string()?;
            let host = if host.is_empty() || host == "?" {
                asked_host.to_string()
            } else {
                host
            };
            let port = number(primary.get(1)?)?;
            Some(SlotRange {
                first,
                last,
                primary: format!("{host}:{port}"),
            })
        })
        .collect()
}

fn split_address(address: &str) -> Option<(String, u16)> {
    let (host, port) = address.rsplit_once(':')?;
    Some((host.to_string(), port.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_slots_reply_becomes_ranges_with_their_primary() {
        let node = |host: &str, port: i64| {
            Value::Array(vec![
                Value::from(host),
                Value::Integer(port),
                Value::from("id"),
            ])
        };
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Integer(0),
                Value::Integer(5460),
                node("127.0.0.1", 7000),
                node("127.0.0.1", 7003),
            ]),
            Value::Array(vec![
                Value::Integer(5461),
                Value::Integer(16383),
                node("", 7001),
            ]),
        ]);
        assert_eq!(
            parse_slots(&reply, "10.0.0.9"),
            vec![
                SlotRange {
                    first: 0,
                    last: 5460,
                    primary: "127.0.0.1:7000".into()
                },
                SlotRange {
                    first: 5461,
                    last: 16383,
                    primary: "10.0.0.9:7001".into()
                },
            ]
        );
    }
}
