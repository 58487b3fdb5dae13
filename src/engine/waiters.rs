//! Waiting without polling: a denied acquire subscribes to its resource's release channel on
//! every group and retries as soon as any group announces a release. A timer still retries
//! now and then, because a crashed holder's lock expires without an announcement and a
//! group's subscriber may be down.
//!
//! A release wakes one waiter at the first group's announcement, and one more once a
//! majority of groups announced it: the first try may run before the slower groups deleted
//! the lock, and loses.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use fred::types::Message;
use tokio::sync::{Notify, OnceCell, broadcast};
use tokio_util::task::AbortOnDropHandle;

use crate::engine::vote::Majority;
use crate::group::Group;
use crate::group::subscriber::{ReleaseChannel, Subscriber};

/// How long a subscriber may take to connect before it is left to reconnect in the background.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

type Channels = Arc<Mutex<HashMap<String, Channel>>>;

struct Channel {
    notify: Arc<Notify>,
    waiters: usize,
    /// The last release heard (its token): every group announces it.
    last_release: Option<String>,
    /// How many groups announced it so far (a majority, for a release of this process).
    heard: usize,
}

/// Who says a lock was released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Announced {
    /// One group's announcement.
    ByGroup,
    /// This process, once a majority of groups deleted it.
    ByMajority,
}

struct Subscribers {
    clients: Vec<Subscriber>,
    /// Route each client's announcements to the waiters.
    tasks: Vec<AbortOnDropHandle<()>>,
}

/// The engine's release subscriptions, shared by every waiter.
#[derive(Default)]
pub(crate) struct Waiters {
    subscribers: OnceCell<Subscribers>,
    channels: Channels,
    /// How many groups' announcements make a majority, known once the first waiter watches.
    majority: OnceLock<usize>,
}

/// One waiter's interest in one channel; dropping it unsubscribes when it was the last.
pub(crate) struct Watch {
    channel: ReleaseChannel,
    notify: Arc<Notify>,
    channels: Channels,
    clients: Vec<Subscriber>,
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
            Ok(mut channels) => match channels.get_mut(&self.channel.name) {
                Some(entry) if entry.waiters > 1 => {
                    entry.waiters -= 1;
                    false
                }
                Some(_) => {
                    channels.remove(&self.channel.name);
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
                    client.unsubscribe(&channel).await;
                }
                // A new waiter may have subscribed while this unsubscribe was on its way, and
                // the unsubscribe may have reached the server last: subscribe again for it.
                let waited_for = channels
                    .lock()
                    .is_ok_and(|channels| channels.contains_key(&channel.name));
                if waited_for {
                    for client in &clients {
                        let _ =
                            tokio::time::timeout(CONNECT_TIMEOUT, client.subscribe(&channel)).await;
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
    pub async fn watch(
        &self,
        groups: &[Group],
        channel: &ReleaseChannel,
        deadline: Instant,
    ) -> Watch {
        let majority = *self
            .majority
            .get_or_init(|| Majority::of(groups.len()).needed);
        let subscribers = self
            .subscribers
            .get_or_init(|| start(groups, self.channels.clone(), majority))
            .await;
        let (notify, first) = match self.channels.lock() {
            Ok(mut channels) => {
                let entry = channels
                    .entry(channel.name.clone())
                    .or_insert_with(|| Channel {
                        notify: Arc::new(Notify::new()),
                        waiters: 0,
                        last_release: None,
                        heard: 0,
                    });
                entry.waiters += 1;
                (entry.notify.clone(), entry.waiters == 1)
            }
            Err(_) => (Arc::new(Notify::new()), false),
        };
        // Made before subscribing, so a caller that gives up meanwhile still unregisters.
        let watch = Watch {
            channel: channel.clone(),
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
                let (client, channel) = (client.clone(), channel.clone());
                let subscribed = tokio::spawn(async move { client.subscribe(&channel).await });
                tokio::time::timeout_at(limit.into(), subscribed)
            });
            futures::future::join_all(subscriptions).await;
        }
        watch
    }

    /// A release by this process, announced to its own waiters without waiting for the groups
    /// to echo it (their announcements of the same token then wake nobody).
    pub fn released(&self, channel: &str, token: &str) {
        if let Some(majority) = self.majority.get() {
            let release = Some(token);
            wake_one(
                &self.channels,
                channel,
                release,
                Announced::ByMajority,
                *majority,
            );
        }
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
            futures::future::join_all(
                subscribers
                    .clients
                    .iter()
                    .map(|client| client.stop(CONNECT_TIMEOUT)),
            )
            .await;
        }
    }
}

/// Starts connecting one subscriber per group and routes its messages to the waiting channels.
async fn start(groups: &[Group], channels: Channels, majority: usize) -> Subscribers {
    let mut subscribers = Subscribers {
        clients: Vec::new(),
        tasks: Vec::new(),
    };
    for group in groups {
        // Each group's subscriber keeps its subscriptions across reconnections, failovers and,
        // in a Cluster group, changes of the slot map.
        let client = match group.subscriber() {
            Ok(client) => client,
            Err(error) => {
                tracing::warn!(group = %group.name, %error, "no release subscriber; waiters poll this group");
                continue;
            }
        };
        subscribers
            .tasks
            .push(AbortOnDropHandle::new(tokio::spawn(route(
                client.messages(),
                channels.clone(),
                majority,
            ))));
        subscribers.clients.push(client);
    }
    // Not waited for here: a waiter's subscriptions wait for them, within its own wait.
    subscribers
}

/// One release frees the lock for one holder: wakes one waiter (the longest waiting), not all
/// of them to fight over it, when it is first heard; and one more when a majority of groups
/// has announced it, since a try woken by the first group may have found the lock still held
/// on groups whose delete had not landed yet.
fn wake_one(
    channels: &Channels,
    channel: &str,
    release: Option<&str>,
    announced: Announced,
    majority: usize,
) {
    let notify = channels.lock().ok().and_then(|mut channels| {
        let channel = channels.get_mut(channel)?;
        let Some(release) = release else {
            return Some(channel.notify.clone());
        };
        if channel.last_release.as_deref() != Some(release) {
            channel.last_release = Some(release.to_string());
            channel.heard = 0;
        }
        let before = channel.heard;
        channel.heard = match announced {
            Announced::ByGroup => before + 1,
            Announced::ByMajority => before.max(majority),
        };
        let woken = before == 0 || (before < majority && channel.heard >= majority);
        woken.then(|| channel.notify.clone())
    });
    if let Some(notify) = notify {
        notify.notify_one();
    }
}

async fn route(mut messages: broadcast::Receiver<Message>, channels: Channels, majority: usize) {
    loop {
        match messages.recv().await {
            Ok(message) => wake_one(
                &channels,
                &message.channel,
                message.value.as_str().as_deref(),
                Announced::ByGroup,
                majority,
            ),
            Err(broadcast::error::RecvError::Lagged(_)) => {}
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;

    use super::*;

    fn one_channel() -> (Channels, Arc<Notify>) {
        let notify = Arc::new(Notify::new());
        let channel = Channel {
            notify: notify.clone(),
            waiters: 2,
            last_release: None,
            heard: 0,
        };
        let channels = Arc::new(Mutex::new(HashMap::from([("c".to_string(), channel)])));
        (channels, notify)
    }

    /// Whether a waiter would be woken now (takes the wake-up).
    fn woken(notify: &Notify) -> bool {
        notify.notified().now_or_never().is_some()
    }

    #[test]
    fn a_release_wakes_one_waiter_when_first_heard_and_one_more_at_a_majority_of_groups() {
        let (channels, notify) = one_channel();
        let heard = |release| wake_one(&channels, "c", Some(release), Announced::ByGroup, 3);
        heard("t1");
        assert!(woken(&notify));
        heard("t1");
        assert!(!woken(&notify));
        heard("t1");
        assert!(woken(&notify), "the third of five groups makes a majority");
        heard("t1");
        heard("t1");
        assert!(!woken(&notify));
        heard("t2");
        assert!(woken(&notify), "another release");
    }

    #[test]
    fn a_release_of_this_process_wakes_once_and_its_echoes_wake_nobody() {
        let (channels, notify) = one_channel();
        wake_one(&channels, "c", Some("t"), Announced::ByMajority, 3);
        assert!(woken(&notify));
        for _ in 0..5 {
            wake_one(&channels, "c", Some("t"), Announced::ByGroup, 3);
        }
        assert!(!woken(&notify));
        // Heard from one group first: this process's word that a majority deleted it wakes
        // one more.
        wake_one(&channels, "c", Some("u"), Announced::ByGroup, 3);
        assert!(woken(&notify));
        wake_one(&channels, "c", Some("u"), Announced::ByMajority, 3);
        assert!(woken(&notify));
    }
}
