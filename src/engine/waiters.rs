//! Waiting without polling: a denied acquire subscribes to its resource's release channel on
//! every group and retries as soon as a release is announced. A timer still retries now and
//! then, because a crashed holder's lock expires without an announcement and a group's
//! subscriber may be down.
//!
//! A release wakes one waiter, once: when a majority of groups announced it (or this process
//! deleted it on a majority), so the woken try finds the lock free where it needs it. Waking
//! at the first group's announcement would send that try ahead of the slower groups' deletes
//! of another process's release, and waking a second waiter at the majority makes two tries
//! race for one lock. A release heard from fewer groups (a rollback of a few grants, or a
//! group whose subscriber is down) wakes one waiter after a short grace instead.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fred::types::Message;
use tokio::sync::{Notify, OnceCell, broadcast};
use tokio_util::task::AbortOnDropHandle;

use crate::group::Group;
use crate::group::subscriber::{ReleaseChannel, Subscriber};

/// How long a subscriber may take to connect before it is left to reconnect in the background.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

type Channels = Arc<Mutex<HashMap<String, Channel>>>;

/// How many releases a channel tells apart at once: a rollback's announcements may arrive
/// among a release's.
const REMEMBERED: usize = 4;

struct Channel {
    notify: Arc<Notify>,
    waiters: usize,
    /// The releases heard lately, the newest last.
    heard: VecDeque<Heard>,
}

/// One release (or rollback, or force release) as the groups announce it.
struct Heard {
    /// Its announcement: the token, or the token marked as a rollback.
    release: String,
    /// How many groups announced it (a majority at once for a release of this process).
    groups: usize,
    /// A waiter was woken after the grace, before a majority announced it.
    early: bool,
    /// A waiter was woken once a majority announced it.
    at_majority: bool,
}

/// What hearing an announcement asks of the waiters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wake {
    Nobody,
    /// The longest waiting, now.
    One,
    /// The longest waiting, unless a majority announces the release within the grace.
    AfterGrace,
}

impl Channel {
    fn new() -> Channel {
        Channel {
            notify: Arc::new(Notify::new()),
            waiters: 0,
            heard: VecDeque::new(),
        }
    }

    /// Counts one announcement of `release` and says whom it wakes.
    fn hear(&mut self, release: Option<&str>, announced: Announced, majority: usize) -> Wake {
        // A message that names no release cannot be counted: it wakes one waiter.
        let Some(release) = release else {
            return Wake::One;
        };
        let known = self.heard.iter().position(|h| h.release == release);
        let index = match known {
            Some(index) => index,
            None => {
                if self.heard.len() == REMEMBERED {
                    self.heard.pop_front();
                }
                self.heard.push_back(Heard {
                    release: release.to_string(),
                    groups: 0,
                    early: false,
                    at_majority: false,
                });
                self.heard.len() - 1
            }
        };
        let heard = &mut self.heard[index];
        let before = heard.groups;
        heard.groups = match announced {
            Announced::ByGroup => before + 1,
            Announced::ByMajority => before.max(majority),
        };
        if heard.groups >= majority {
            if heard.at_majority {
                return Wake::Nobody;
            }
            // Also after an early wake-up: that try may have lost to the groups whose delete
            // had not landed yet.
            heard.at_majority = true;
            return Wake::One;
        }
        if before == 0 {
            Wake::AfterGrace
        } else {
            Wake::Nobody
        }
    }

    /// The grace after the first announcement of `release` passed: whether it wakes a waiter
    /// (nobody was woken for it yet).
    fn grace_passed(&mut self, release: &str) -> bool {
        match self.heard.iter_mut().find(|h| h.release == release) {
            Some(heard) if !heard.early && !heard.at_majority => {
                heard.early = true;
                true
            }
            _ => false,
        }
    }
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
pub(crate) struct Waiters {
    subscribers: OnceCell<Subscribers>,
    channels: Channels,
    /// How many groups' announcements make a majority.
    majority: usize,
    /// How long a release heard from fewer groups than a majority waits for the others.
    grace: Duration,
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
    /// `majority` groups' announcements free a lock; a release heard from fewer wakes a
    /// waiter `grace` after the first.
    pub fn new(majority: usize, grace: Duration) -> Waiters {
        Waiters {
            subscribers: OnceCell::new(),
            channels: Channels::default(),
            majority,
            grace,
        }
    }

    /// Registers interest in `channel`, subscribing on every group if nobody else waits on it.
    /// Subscribing stops at `deadline` (the caller's wait): a group that is down must not hold
    /// a waiter past it; the timer covers what a missing subscription would have announced.
    pub async fn watch(
        &self,
        groups: &[Group],
        channel: &ReleaseChannel,
        deadline: Instant,
    ) -> Watch {
        let subscribers = self
            .subscribers
            .get_or_init(|| start(groups, self.channels.clone(), self.majority, self.grace))
            .await;
        let (notify, first) = match self.channels.lock() {
            Ok(mut channels) => {
                let entry = channels
                    .entry(channel.name.clone())
                    .or_insert_with(Channel::new);
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
        heard(
            &self.channels,
            channel,
            Some(token),
            Announced::ByMajority,
            self.majority,
            self.grace,
        );
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
async fn start(
    groups: &[Group],
    channels: Channels,
    majority: usize,
    grace: Duration,
) -> Subscribers {
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
                grace,
            ))));
        subscribers.clients.push(client);
    }
    // Not waited for here: a waiter's subscriptions wait for them, within its own wait.
    subscribers
}

/// One release frees the lock for one holder: it wakes one waiter (the longest waiting), not
/// all of them to fight over it, and only once a majority of groups deleted it, when that
/// waiter's try can win. Heard from fewer groups, it wakes one after `grace`.
fn heard(
    channels: &Channels,
    channel: &str,
    release: Option<&str>,
    announced: Announced,
    majority: usize,
    grace: Duration,
) {
    let decided = channels.lock().ok().and_then(|mut channels| {
        let entry = channels.get_mut(channel)?;
        let wake = entry.hear(release, announced, majority);
        Some((wake, entry.notify.clone()))
    });
    let Some((wake, notify)) = decided else {
        return;
    };
    match (wake, release, tokio::runtime::Handle::try_current()) {
        (Wake::Nobody, _, _) => {}
        (Wake::AfterGrace, Some(release), Ok(runtime)) => {
            let (channels, channel, release) =
                (channels.clone(), channel.to_string(), release.to_string());
            runtime.spawn(async move {
                tokio::time::sleep(grace).await;
                let woken = channels.lock().ok().and_then(|mut channels| {
                    let entry = channels.get_mut(&channel)?;
                    entry.grace_passed(&release).then(|| entry.notify.clone())
                });
                if let Some(notify) = woken {
                    notify.notify_one();
                }
            });
        }
        // Without a runtime to wait in, the waiter is woken now.
        (Wake::One | Wake::AfterGrace, _, _) => notify.notify_one(),
    }
}

async fn route(
    mut messages: broadcast::Receiver<Message>,
    channels: Channels,
    majority: usize,
    grace: Duration,
) {
    loop {
        match messages.recv().await {
            Ok(message) => heard(
                &channels,
                &message.channel,
                message.value.as_str().as_deref(),
                Announced::ByGroup,
                majority,
                grace,
            ),
            Err(broadcast::error::RecvError::Lagged(_)) => {}
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hears `release` from one group (or, with `ByMajority`, from this process).
    fn hear(channel: &mut Channel, release: &str, announced: Announced) -> Wake {
        channel.hear(Some(release), announced, 3)
    }

    #[test]
    fn a_release_wakes_one_waiter_once_a_majority_of_groups_announced_it() {
        let mut channel = Channel::new();
        assert_eq!(
            hear(&mut channel, "t1", Announced::ByGroup),
            Wake::AfterGrace
        );
        assert_eq!(hear(&mut channel, "t1", Announced::ByGroup), Wake::Nobody);
        assert_eq!(
            hear(&mut channel, "t1", Announced::ByGroup),
            Wake::One,
            "the third of five groups makes a majority"
        );
        assert_eq!(hear(&mut channel, "t1", Announced::ByGroup), Wake::Nobody);
        assert_eq!(hear(&mut channel, "t1", Announced::ByGroup), Wake::Nobody);
        assert!(!channel.grace_passed("t1"), "the waiter was woken already");
        assert_eq!(
            hear(&mut channel, "t2", Announced::ByGroup),
            Wake::AfterGrace
        );
    }

    #[test]
    fn a_release_of_this_process_wakes_one_waiter_and_its_echoes_wake_nobody() {
        let mut channel = Channel::new();
        assert_eq!(hear(&mut channel, "t", Announced::ByMajority), Wake::One);
        for _ in 0..5 {
            assert_eq!(hear(&mut channel, "t", Announced::ByGroup), Wake::Nobody);
        }
        // Its echoes may come first: they wake nobody at once, and this process's word that
        // a majority deleted it wakes one waiter, once.
        assert_eq!(
            hear(&mut channel, "u", Announced::ByGroup),
            Wake::AfterGrace
        );
        assert_eq!(hear(&mut channel, "u", Announced::ByMajority), Wake::One);
        assert_eq!(hear(&mut channel, "u", Announced::ByGroup), Wake::Nobody);
        assert_eq!(hear(&mut channel, "u", Announced::ByGroup), Wake::Nobody);
        assert!(!channel.grace_passed("u"));
    }

    #[test]
    fn a_release_heard_from_fewer_groups_than_a_majority_wakes_one_waiter_after_the_grace() {
        let mut channel = Channel::new();
        assert_eq!(
            hear(&mut channel, "t:rolled-back", Announced::ByGroup),
            Wake::AfterGrace
        );
        assert!(channel.grace_passed("t:rolled-back"));
        assert!(!channel.grace_passed("t:rolled-back"), "once");
        // Late groups make a majority after all: the early try may have lost to them.
        assert_eq!(
            hear(&mut channel, "t:rolled-back", Announced::ByGroup),
            Wake::Nobody
        );
        assert_eq!(
            hear(&mut channel, "t:rolled-back", Announced::ByGroup),
            Wake::One
        );
    }

    #[test]
    fn announcements_of_releases_that_interleave_are_counted_apart() {
        let mut channel = Channel::new();
        assert_eq!(
            hear(&mut channel, "t", Announced::ByGroup),
            Wake::AfterGrace
        );
        assert_eq!(
            hear(&mut channel, "r", Announced::ByGroup),
            Wake::AfterGrace
        );
        assert_eq!(hear(&mut channel, "t", Announced::ByGroup), Wake::Nobody);
        assert_eq!(hear(&mut channel, "r", Announced::ByGroup), Wake::Nobody);
        assert_eq!(hear(&mut channel, "t", Announced::ByGroup), Wake::One);
        for other in ["a", "b", "c", "d"] {
            hear(&mut channel, other, Announced::ByGroup);
        }
        assert!(
            !channel.grace_passed("r"),
            "forgotten once newer releases took its place"
        );
        assert_eq!(channel.heard.len(), REMEMBERED);
    }
}
