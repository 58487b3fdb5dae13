//! A group's release subscriber: what hears the release announcements of one group. A
//! master's is one pub/sub client that fred keeps subscribed across reconnections and
//! failovers; a Cluster group's subscribes per shard (see [`crate::group::sharded`]). Either
//! way the engine subscribes and hears channels by the names it gave them.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fred::clients::SubscriberClient;
use fred::interfaces::{EventInterface, PubsubInterface};
use fred::types::Message;
use tokio::sync::broadcast;
use tokio_util::task::AbortOnDropHandle;

use crate::group::RECONNECT_DELAY;
use crate::group::connection::{Connection, keep_connected, shut};
use crate::group::sharded::ShardSubscribers;
use crate::group::slots::HashSlot;

/// A release channel: its name, and the slot of its resource, where a Cluster group
/// announces it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReleaseChannel {
    pub name: String,
    pub slot: HashSlot,
}

/// The release subscriber of one group; clones share it.
#[derive(Clone)]
pub(crate) enum Subscriber {
    Master(Arc<MasterSubscriber>),
    Cluster(Arc<ShardSubscribers>),
}

/// A pub/sub client to a master, connecting from the start.
pub(crate) struct MasterSubscriber {
    client: SubscriberClient,
    connection: Mutex<Option<Connection>>,
    /// Subscribes again after a reconnection or a failover.
    _restore: AbortOnDropHandle<()>,
}

impl Subscriber {
    /// Starts connecting `client`, a master's pub/sub client.
    pub fn master(client: SubscriberClient) -> Self {
        let connection = keep_connected(&client, RECONNECT_DELAY);
        let restore = AbortOnDropHandle::new(client.manage_subscriptions());
        Subscriber::Master(Arc::new(MasterSubscriber {
            client,
            connection: Mutex::new(Some(connection)),
            _restore: restore,
        }))
    }

    /// Subscribes to `channel`; a subscriber still connecting sends it once connected.
    pub async fn subscribe(&self, channel: &ReleaseChannel) -> Result<(), fred::error::Error> {
        match self {
            Subscriber::Master(master) => master.client.subscribe(channel.name.as_str()).await,
            Subscriber::Cluster(shards) => shards.subscribe(channel).await,
        }
    }

    pub async fn unsubscribe(&self, channel: &ReleaseChannel) {
        match self {
            Subscriber::Master(master) => {
                let _ = master.client.unsubscribe(channel.name.as_str()).await;
            }
            Subscriber::Cluster(shards) => shards.unsubscribe(channel).await,
        }
    }

    /// The announcements heard, on the channel names subscribed to.
    pub fn messages(&self) -> broadcast::Receiver<Message> {
        match self {
            Subscriber::Master(master) => master.client.message_rx(),
            Subscriber::Cluster(shards) => shards.messages(),
        }
    }

    /// Closes the connections, waiting at most `limit` for each to say goodbye.
    pub async fn stop(&self, limit: Duration) {
        match self {
            Subscriber::Master(master) => {
                let connection = master
                    .connection
                    .lock()
                    .ok()
                    .and_then(|mut slot| slot.take());
                shut(&master.client, connection, limit).await;
            }
            Subscriber::Cluster(shards) => shards.stop(limit).await,
        }
    }
}
