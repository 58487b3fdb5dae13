//! Sentinel events: one subscriber per Sentinel address tells the groups at once when their
//! master changed (`+switch-master`), so a group reconnects to the promoted replica as soon as
//! Sentinel announces it instead of finding out through timeouts.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fred::prelude::*;
use tokio::sync::broadcast;
use tokio_util::task::AbortOnDropHandle;

use crate::group::Group;
use crate::group::connection::{Connection, connect, shut_all};

const SWITCH_MASTER: &str = "+switch-master";
const CONNECT_TIMEOUT: Duration = Duration::from_millis(1000);
const RECONNECT_DELAY_MS: u32 = 200;
const RECONNECT_DELAY: Duration = Duration::from_millis(RECONNECT_DELAY_MS as u64);
/// How long a group keeps reconnecting after a `+switch-master` until it reaches the master
/// announced. The first announcement comes from the Sentinel that ran the failover; the
/// Sentinel the client then asks may not have heard of it yet and name the old master. Once
/// that one is back (thawed, healed or restarted) it answers as a master until Sentinel
/// demotes it, seconds later, and the later announcements of the same switch are ignored.
const LAND_WITHIN: Duration = Duration::from_secs(5);
const LAND_RETRY: Duration = Duration::from_millis(50);

/// A master change announced by Sentinel and acted on.
#[derive(Debug, Clone)]
pub struct Failover {
    /// The group whose master changed.
    pub group: String,
    /// `host:port` of the new master.
    pub master: String,
    /// When the announcement arrived.
    pub announced_at: Instant,
    /// When the group's client had reconnected to the new master.
    pub reconnected_at: Instant,
}

/// The running subscribers; dropping this stops them.
pub(crate) struct SentinelWatch {
    subscribers: Vec<Client>,
    /// The subscribers' connection tasks, taken by `stop`.
    connections: Mutex<Vec<Connection>>,
    tasks: Vec<AbortOnDropHandle<()>>,
}

/// Which groups each Sentinel service name belongs to.
type Services = HashMap<String, Vec<(String, Client)>>;

impl SentinelWatch {
    /// Subscribes to every distinct Sentinel of every Sentinel-watched group.
    pub async fn start(groups: &[Group], events: broadcast::Sender<Failover>) -> Self {
        let mut services: Services = HashMap::new();
        let mut sentinels: BTreeMap<(String, u16), Config> = BTreeMap::new();
        for group in groups {
            let (Some(watched), Some(client)) = (group.sentinels(), group.client()) else {
                continue;
            };
            services
                .entry(watched.service.clone())
                .or_default()
                .push((group.name.clone(), client.clone()));
            for (host, port) in &watched.addresses {
                if let Some(config) = group.sentinel_config(host, *port) {
                    sentinels.insert((host.clone(), *port), config);
                }
            }
        }
        let services = Arc::new(services);
        // Every Sentinel announces the same switch: act on the first announcement only.
        let handled = Arc::new(Mutex::new(HashMap::<String, String>::new()));
        let mut subscribers = Vec::new();
        for config in sentinels.into_values() {
            let config = Config {
                // A Sentinel that is down now is listened to once it is back: see
                // `connection::keep_connected`.
                fail_fast: true,
                ..config
            };
            if let Ok(subscriber) = Builder::from_config(config)
                .with_connection_config(|c| c.connection_timeout = CONNECT_TIMEOUT)
                .with_performance_config(|p| p.default_command_timeout = CONNECT_TIMEOUT)
                .set_policy(ReconnectPolicy::new_constant(0, RECONNECT_DELAY_MS))
                .build()
            {
                subscribers.push(subscriber);
            }
        }
        // All at once: Sentinels that are down cost one timeout, not one each.
        let connections = futures::future::join_all(
            subscribers
                .iter()
                .map(|subscriber| connect(subscriber, RECONNECT_DELAY, CONNECT_TIMEOUT)),
        )
        .await
        .into_iter()
        .map(|(connection, _)| connection)
        .collect();
        let tasks = subscribers
            .iter()
            .map(|subscriber| {
                AbortOnDropHandle::new(tokio::spawn(listen(
                    subscriber.clone(),
                    services.clone(),
                    handled.clone(),
                    events.clone(),
                )))
            })
            .collect();
        SentinelWatch {
            subscribers,
            connections: Mutex::new(connections),
            tasks,
        }
    }

    pub async fn stop(&self) {
        for task in &self.tasks {
            task.abort();
        }
        shut_all(&self.subscribers, &self.connections, CONNECT_TIMEOUT).await;
    }
}

impl Drop for SentinelWatch {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

async fn listen(
    subscriber: Client,
    services: Arc<Services>,
    handled: Arc<Mutex<HashMap<String, String>>>,
    events: broadcast::Sender<Failover>,
) {
    let mut messages = subscriber.message_rx();
    let mut reconnects = subscriber.reconnect_rx();
    // A Sentinel that was down at start, or restarted, needs the subscription again.
    let _ = subscriber.subscribe(SWITCH_MASTER).await;
    loop {
        tokio::select! {
            message = messages.recv() => match message {
                Ok(message) if message.channel == SWITCH_MASTER => {
                    let text = message.value.as_string().unwrap_or_default();
                    switch(&text, &services, &handled, &events).await;
                }
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return,
            },
            reconnect = reconnects.recv() => match reconnect {
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {
                    let _ = subscriber.subscribe(SWITCH_MASTER).await;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
        }
    }
}

/// Handles `<service> <old ip> <old port> <new ip> <new port>`.
async fn switch(
    text: &str,
    services: &Services,
    handled: &Mutex<HashMap<String, String>>,
    events: &broadcast::Sender<Failover>,
) {
    let announced_at = Instant::now();
    let fields: Vec<&str> = text.split_whitespace().collect();
    let [service, _, _, host, port] = fields[..] else {
        tracing::warn!(%text, "ignoring a malformed +switch-master announcement");
        return;
    };
    let master = format!("{host}:{port}");
    let first = handled
        .lock()
        .map(|mut seen| seen.insert(service.to_string(), master.clone()).as_ref() != Some(&master))
        .unwrap_or(true);
    if !first {
        return;
    }
    for (group, client) in services.get(service).into_iter().flatten() {
        tracing::info!(%group, %master, "Sentinel switched the master; reconnecting");
        let give_up = Instant::now() + LAND_WITHIN;
        loop {
            if let Err(error) = client.force_reconnection().await {
                tracing::warn!(%group, %error, "reconnecting to the new master failed; fred keeps retrying");
            }
            let landed = client
                .active_connections()
                .iter()
                .any(|server| format!("{}:{}", server.host, server.port) == master);
            // A newer switch of this service takes over.
            let superseded = handled
                .lock()
                .map(|seen| seen.get(service) != Some(&master))
                .unwrap_or(false);
            if landed || superseded {
                break;
            }
            if Instant::now() >= give_up {
                tracing::warn!(%group, %master, "the group did not reach the master Sentinel announced; it stays where the Sentinels it asks send it");
                break;
            }
            // The Sentinel asked still names the old master: ask again shortly.
            tokio::time::sleep(LAND_RETRY).await;
        }
        let _ = events.send(Failover {
            group: group.clone(),
            master: master.clone(),
            announced_at,
            reconnected_at: Instant::now(),
        });
    }
}
