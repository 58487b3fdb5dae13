//! Release subscriptions in a Cluster group: sharded pub/sub. A release is announced with
//! SPUBLISH on its channel moved into the resource's slot, and only the subscribers of that
//! slot's shard hear it; so each channel with waiters is subscribed with SSUBSCRIBE on the
//! primary that owns its slot, through one client per primary kept here.
//!
//! Redis drops a shard subscription without a word that fred passes on when the slot leaves
//! the node (a failover, a migration), so every channel with waiters is subscribed again
//! after each change of the slot map and after each reconnection of a primary's client.
//! Announcements reach the waiters under the channel name they know, without the slot tag.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use fred::bytes_utils::Str;
use fred::clients::SubscriberClient;
use fred::interfaces::{EventInterface, PubsubInterface};
use fred::types::Message;
use tokio::sync::broadcast;
use tokio_util::task::AbortOnDropHandle;

use crate::group::RECONNECT_DELAY;
use crate::group::cluster::{MapView, Shard, untag};
use crate::group::connection::{Connection, keep_connected, shut};
use crate::group::slots::HashSlot;
use crate::group::subscriber::ReleaseChannel;

/// How long one primary may take to confirm a subscription made again after a change: one
/// that does not is asked again at its next reconnection or the next change of the map.
const RESUBSCRIBE_WITHIN: Duration = Duration::from_secs(2);
/// Announcements heard and not yet routed to waiters.
const BACKLOG: usize = 1024;

/// The release subscriptions of one Cluster group.
pub(crate) struct ShardSubscribers {
    map: MapView,
    /// The channels with waiters, by the name waiters know, and the slot of each.
    wanted: Mutex<HashMap<String, HashSlot>>,
    /// One subscriber client per primary asked so far, by `host:port`.
    clients: Mutex<HashMap<String, ShardClient>>,
    messages: broadcast::Sender<Message>,
    /// Follows the map; stopped with the subscribers.
    follower: Mutex<Option<AbortOnDropHandle<()>>>,
}

/// The subscriber client of one primary, and the tasks that serve it.
struct ShardClient {
    client: SubscriberClient,
    connection: Option<Connection>,
    /// Passes its announcements on, and subscribes again after each reconnection.
    _tasks: [AbortOnDropHandle<()>; 2],
}

impl ShardSubscribers {
    /// Starts following the map of the Cluster group that `map` reads.
    pub fn start(map: MapView) -> Arc<Self> {
        let subscribers = Arc::new(ShardSubscribers {
            map: map.clone(),
            wanted: Mutex::default(),
            clients: Mutex::default(),
            messages: broadcast::channel(BACKLOG).0,
            follower: Mutex::new(None),
        });
        let task = tokio::spawn(follow(map, Arc::downgrade(&subscribers)));
        *lock(&subscribers.follower) = Some(AbortOnDropHandle::new(task));
        subscribers
    }

    /// Subscribes to `channel` on the primary that owns its slot now. With no owner known,
    /// the subscription is made once the map shows one.
    pub async fn subscribe(
        self: &Arc<Self>,
        channel: &ReleaseChannel,
    ) -> Result<(), fred::error::Error> {
        lock(&self.wanted).insert(channel.name.clone(), channel.slot);
        let Some(shard) = self.map.owner(channel.slot) else {
            self.map.reread();
            return Err(fred::error::Error::new(
                fred::error::ErrorKind::Cluster,
                "no primary of the Cluster group owns the channel's slot now",
            ));
        };
        let client = self.client_for(&shard)?;
        let subscribed = client.ssubscribe(tagged(channel)).await;
        if subscribed.as_ref().is_err_and(|error| error.is_moved()) {
            // The map moved on: the subscription is made again once it is read.
            self.map.reread();
        }
        subscribed
    }

    /// Unsubscribes from `channel` where its slot is now.
    pub async fn unsubscribe(&self, channel: &ReleaseChannel) {
        lock(&self.wanted).remove(&channel.name);
        let Some(shard) = self.map.owner(channel.slot) else {
            return;
        };
        let client = lock(&self.clients)
            .get(&shard.address)
            .map(|known| known.client.clone());
        if let Some(client) = client {
            let _ = client.sunsubscribe(tagged(channel)).await;
        }
    }

    /// The announcements heard, under the names the waiters know.
    pub fn messages(&self) -> broadcast::Receiver<Message> {
        self.messages.subscribe()
    }

    /// Closes every client and stops following the map.
    pub async fn stop(&self, limit: Duration) {
        if let Some(follower) = lock(&self.follower).take() {
            follower.abort();
        }
        let clients: Vec<ShardClient> = lock(&self.clients).drain().map(|(_, c)| c).collect();
        futures::future::join_all(clients.into_iter().map(|mut known| async move {
            shut(&known.client, known.connection.take(), limit).await
        }))
        .await;
    }

    /// The subscriber client of `shard`'s primary, made and connecting on first use.
    fn client_for(self: &Arc<Self>, shard: &Shard) -> Result<SubscriberClient, fred::error::Error> {
        let mut clients = lock(&self.clients);
        if let Some(known) = clients.get(&shard.address) {
            return Ok(known.client.clone());
        }
        let client = shard.master.subscriber()?;
        // Listened to before connecting: the first connection counts as a reconnection.
        let reconnects = client.reconnect_rx();
        let forward = tokio::spawn(forward(client.message_rx(), self.messages.clone()));
        let resubscribe = tokio::spawn(resubscribe_on_reconnect(
            reconnects,
            Arc::downgrade(self),
            shard.address.clone(),
        ));
        let connection = keep_connected(&client, RECONNECT_DELAY);
        clients.insert(
            shard.address.clone(),
            ShardClient {
                client: client.clone(),
                connection: Some(connection),
                _tasks: [
                    AbortOnDropHandle::new(forward),
                    AbortOnDropHandle::new(resubscribe),
                ],
            },
        );
        Ok(client)
    }

    /// Subscribes again to every channel with waiters on the primary that owns it now (only
    /// those on `only`, when given), and closes the clients of nodes that are no longer
    /// primaries.
    async fn resubscribe(self: &Arc<Self>, only: Option<&str>) {
        let primaries = self.map.primaries();
        let gone: Vec<ShardClient> = {
            let mut clients = lock(&self.clients);
            let addresses: Vec<String> = clients.keys().cloned().collect();
            addresses
                .into_iter()
                .filter(|address| !primaries.contains(address))
                .filter_map(|address| clients.remove(&address))
                .collect()
        };
        for mut known in gone {
            tokio::spawn(async move {
                shut(&known.client, known.connection.take(), RESUBSCRIBE_WITHIN).await
            });
        }
        let wanted: Vec<ReleaseChannel> = lock(&self.wanted)
            .iter()
            .map(|(name, slot)| ReleaseChannel {
                name: name.clone(),
                slot: *slot,
            })
            .collect();
        let mut by_primary: HashMap<String, (Arc<Shard>, Vec<String>)> = HashMap::new();
        for channel in &wanted {
            let Some(shard) = self.map.owner(channel.slot) else {
                continue;
            };
            if only.is_some_and(|only| only != shard.address) {
                continue;
            }
            by_primary
                .entry(shard.address.clone())
                .or_insert_with(|| (shard.clone(), Vec::new()))
                .1
                .push(tagged(channel));
        }
        let subscriptions = by_primary.into_values().map(|(shard, channels)| async move {
            let client = self.client_for(&shard).ok()?;
            let subscribed =
                tokio::time::timeout(RESUBSCRIBE_WITHIN, client.ssubscribe(channels)).await;
            if let Ok(Err(error)) = subscribed {
                tracing::debug!(primary = %shard.address, %error, "release channels not subscribed again; waiters poll meanwhile");
                if error.is_moved() {
                    self.map.reread();
                }
            }
            Some(())
        });
        futures::future::join_all(subscriptions).await;
    }
}

/// The channel as a Cluster node knows it: moved into its resource's slot.
fn tagged(channel: &ReleaseChannel) -> String {
    String::from_utf8_lossy(&channel.slot.key(channel.name.as_bytes())).into_owned()
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Subscribes again after every change of the map, while the subscribers live.
async fn follow(mut map: MapView, subscribers: Weak<ShardSubscribers>) {
    while map.changed().await {
        let Some(subscribers) = subscribers.upgrade() else {
            return;
        };
        subscribers.resubscribe(None).await;
    }
}

/// Subscribes again to the channels of `address` each time its client (re)connects: a
/// reconnection starts with no subscriptions, and fred's own restore does not cover shard
/// channels reliably.
async fn resubscribe_on_reconnect(
    mut reconnects: broadcast::Receiver<fred::types::config::Server>,
    subscribers: Weak<ShardSubscribers>,
    address: String,
) {
    loop {
        match reconnects.recv().await {
            Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {
                let Some(subscribers) = subscribers.upgrade() else {
                    return;
                };
                subscribers.resubscribe(Some(&address)).await;
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// Passes a primary's announcements on, under the channel name without its slot tag.
async fn forward(mut heard: broadcast::Receiver<Message>, messages: broadcast::Sender<Message>) {
    loop {
        match heard.recv().await {
            Ok(mut message) => {
                message.channel = Str::from(untag(&message.channel));
                let _ = messages.send(message);
            }
            Err(broadcast::error::RecvError::Lagged(_)) => {}
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}
