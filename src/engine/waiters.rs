//! Waiting without polling: a denied acquire subscribes to its resource's release channel on
//! every group and retries as soon as any group announces a release. A timer still retries
//! now and then, because a crashed holder's lock expires without an announcement and a
//! group's subscriber may be down.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fred::clients::SubscriberClient;
use fred::prelude::*;
use fred::types::Message;
use tokio::sync::{Notify, OnceCell, broadcast};
use tokio_util::task::AbortOnDropHandle;

use crate::group::connection::{Connection, keep_connected, shut_all};
use crate::group::{Group, RECONNECT_DELAY};

/// How long a subscriber may take to connect before it is left to reconnect in the background.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

type Channels = Arc<Mutex<HashMap<String, Channel>>>;

struct Channel {
    notify: Arc<Notify>,
    waiters: usize,
    /// The last release heard (its token): every group announces it, it counts once.
    last_release: Option<String>,
}

struct Subscribers {
    clients: Vec<SubscriberClient>,
    /// The clients' connection tasks, taken by `stop`.
    connections: Mutex<Vec<Connection>>,
    tasks: Vec<AbortOnDropHandle<()>>,
}

/// The engine's release subscriptions, shared by every waiter.
#[derive(Default)]
pub(crate) struct Waiters {
    subscribers: OnceCell<Subscribers>,
    channels: Channels,
}

/// One waiter's interest in one channel; dropping it unsubscribes when it was the last.
pub(crate) struct Watch {
    channel: String,
    notify: Arc<Notify>,
    channels: Channels,
    clients: Vec<SubscriberClient>,
}

impl Watch {
    /// Woken by the next release announced on this channel.
    pub fn notify(&self) -> Arc<Notify> {
        self.notify.clone()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let last = match self.channels.lock() {
            Ok(mut channels) => match channels.get_mut(&self.channel) {
                Some(entry) if entry.waiters > 1 => {
                    entry.waiters -= 1;
                    false
                }
                Some(_) => {
                    channels.remove(&self.channel);
                    true
                }
                None => false,
            },
            Err(_) => false,
        };
        if let (true, Ok(runtime)) = (last, tokio::runtime::Handle::try_current()) {
            let (clients, channel) = (std::mem::take(&mut self.clients), self.channel.clone());
            let channels = self.channels.clone();
            runtime.spawn(async move {
                for client in &clients {
                    let _ = client.unsubscribe(channel.as_str()).await;
                }
                // A new waiter may have subscribed while this unsubscribe was on its way, and
                // the unsubscribe may have reached the server last: subscribe again for it.
                let waited_for = channels
                    .lock()
                    .is_ok_and(|channels| channels.contains_key(&channel));
                if waited_for {
                    for client in &clients {
                        let _ = tokio::time::timeout(
                            CONNECT_TIMEOUT,
                            client.subscribe(channel.as_str()),
                        )
                        .await;
                    }
                }
            });
        }
    }
}

impl Waiters {
    /// Registers interest in `channel`, subscribing on every group if nobody else waits on it.
    /// Subscribing stops at `deadline` (the caller's wait): a group that is down must not hold
    /// a waiter past it; the timer covers what a missing subscription would have announced.
    pub async fn watch(&self, groups: &[Group], channel: &str, deadline: Instant) -> Watch {
        let subscribers = self
            .subscribers
            .get_or_init(|| start(groups, self.channels.clone()))
            .await;
        let (notify, first) = match self.channels.lock() {
            Ok(mut channels) => {
                let entry = channels
                    .entry(channel.to_string())
                    .or_insert_with(|| Channel {
                        notify: Arc::new(Notify::new()),
                        waiters: 0,
                        last_release: None,
                    });
                entry.waiters += 1;
                (entry.notify.clone(), entry.waiters == 1)
            }
            Err(_) => (Arc::new(Notify::new()), false),
        };
        // Made before subscribing, so a caller that gives up meanwhile still unregisters.
        let watch = Watch {
            channel: channel.to_string(),
            notify,
            channels: self.channels.clone(),
            clients: subscribers.clients.clone(),
        };
        if first {
            // A subscriber still connecting queues the subscription until it is up (or the
            // limit passes: a frozen master never answers a subscriber's first checks).
            let limit = deadline.min(Instant::now() + CONNECT_TIMEOUT);
            let subscriptions = subscribers.clients.iter().map(|client| {
                // Spawned, so that a subscription still under way at the limit completes and
                // is restored after reconnections (fred keeps only those that completed).
                let (client, channel) = (client.clone(), channel.to_string());
                let subscribed = tokio::spawn(async move { client.subscribe(channel).await });
                tokio::time::timeout_at(limit.into(), subscribed)
            });
            futures::future::join_all(subscriptions).await;
        }
        watch
    }

    /// A release by this process, announced to its own waiters without waiting for the groups
    /// to echo it (their announcements of the same token are then ignored).
    pub fn released(&self, channel: &str, token: &str) {
        wake_one(&self.channels, channel, Some(token));
    }

    /// Whether waiters of this process already queue for `channel`.
    pub fn queued(&self, channel: &str) -> bool {
        self.channels
            .lock()
            .is_ok_and(|channels| channels.get(channel).is_some_and(|entry| entry.waiters > 0))
    }

    pub async fn stop(&self) {
        if let Some(subscribers) = self.subscribers.get() {
            for task in &subscribers.tasks {
                task.abort();
            }
            shut_all(
                &subscribers.clients,
                &subscribers.connections,
                CONNECT_TIMEOUT,
            )
            .await;
        }
    }
}

/// Starts connecting one subscriber per group and routes its messages to the waiting channels.
async fn start(groups: &[Group], channels: Channels) -> Subscribers {
    let mut subscribers = Subscribers {
        clients: Vec::new(),
        connections: Mutex::new(Vec::new()),
        tasks: Vec::new(),
    };
    for group in groups {
        let client = match group.subscriber() {
            Ok(client) => client,
            Err(error) => {
                tracing::warn!(group = %group.name, %error, "no release subscriber; waiters poll this group");
                continue;
            }
        };
        if let Ok(mut connections) = subscribers.connections.lock() {
            connections.push(keep_connected(&client, RECONNECT_DELAY));
        }
        // Subscriptions come back by themselves after a reconnect or a failover.
        subscribers
            .tasks
            .push(AbortOnDropHandle::new(client.manage_subscriptions()));
        subscribers
            .tasks
            .push(AbortOnDropHandle::new(tokio::spawn(route(
                client.message_rx(),
                channels.clone(),
            ))));
        subscribers.clients.push(client);
    }
    // Not waited for here: a waiter's subscriptions wait for them, within its own wait.
    subscribers
}

/// One release frees the lock for one holder: wakes one waiter (the longest waiting), not all
/// of them to fight over it, and once per release however many groups (or this process)
/// announce it.
fn wake_one(channels: &Channels, channel: &str, release: Option<&str>) {
    let notify = channels.lock().ok().and_then(|mut channels| {
        let channel = channels.get_mut(channel)?;
        if release.is_some() && channel.last_release.as_deref() == release {
            return None;
        }
        channel.last_release = release.map(str::to_string);
        Some(channel.notify.clone())
    });
    if let Some(notify) = notify {
        notify.notify_one();
    }
}

async fn route(mut messages: broadcast::Receiver<Message>, channels: Channels) {
    loop {
        match messages.recv().await {
            Ok(message) => wake_one(
                &channels,
                &message.channel,
                message.value.as_str().as_deref(),
            ),
            Err(broadcast::error::RecvError::Lagged(_)) => {}
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}
