//! One master and its client: a Sentinel group's master, a plain master, or one primary of a
//! Cluster group. The client carries the per-call timeout, loads the scripts on every
//! connection, and sends lock calls through its group-commit lane.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fred::clients::WithOptions;
use fred::error::ErrorKind;
use fred::prelude::*;
use fred::types::config::UnresponsiveConfig;
use fred::types::scripts::Script;
use fred::types::{FromValue, Key};
use tokio_util::task::AbortOnDropHandle;

use crate::config::Topology;
use crate::group::batch::{Answer, Batching, Call, Lane};
use crate::group::connection::{Connection, connect, shut};
use crate::group::diagnose::Diagnosis;
use crate::group::reply::Reply;
use crate::group::security::{Credentials, Transport};
use crate::group::{
    CONNECT_TIMEOUT, RECONNECT_DELAY, eval_by_sha, load_scripts, load_scripts_on_reconnect,
    reconnect_policy,
};

/// One master's client and lane.
pub(crate) struct Master {
    /// The task that keeps the client connected, stopped by `quit`.
    connection: Mutex<Option<Connection>>,
    /// Loads the scripts onto every master this client connects to (after failovers too).
    script_loader: AbortOnDropHandle<()>,
    /// How this client is built, kept for the release subscriber made on demand.
    builder: Builder,
    client: Client,
    /// The same client with the per-call timeout and fail-fast applied to every command.
    timed: WithOptions<Client>,
    /// Acquire, release and extend, batched while the master is busy.
    lane: Arc<Lane>,
}

impl Master {
    /// Builds the client for `server` (it connects on [`Master::start`]).
    pub fn build(
        server: ServerConfig,
        credentials: &Credentials,
        transport: &Transport,
        topology: &Topology,
        diagnosis: Arc<Diagnosis>,
        batching: Batching,
    ) -> Result<Self, fred::error::Error> {
        let call_timeout = topology.call_timeout();
        let fred_config = Config {
            // The first connection's failure shows at once; `connection::keep_connected`
            // then starts the client again until it connects (fred gives up after it).
            fail_fast: true,
            ..transport.config(server, credentials)
        };
        let mut builder = Builder::from_config(fred_config);
        builder
            .with_connection_config(|connection| {
                connection.connection_timeout = CONNECT_TIMEOUT;
                connection.internal_command_timeout = CONNECT_TIMEOUT;
                // A retried lock call could land twice; the engine retries by itself instead.
                connection.max_command_attempts = 1;
                // A frozen master keeps its socket open: drop it so Sentinel's new master is found.
                connection.unresponsive = UnresponsiveConfig {
                    max_timeout: Some((call_timeout * 4).max(Duration::from_millis(500))),
                    interval: Duration::from_millis(100),
                };
                connection.tcp.nodelay = Some(true);
            })
            .with_performance_config(|performance| {
                performance.default_command_timeout = call_timeout;
            })
            .set_policy(reconnect_policy());
        let client = builder.build()?;
        // fred 10 applies these options to plain commands but not to EVAL and EVALSHA, which
        // go straight to the client: its own config above carries the same timeout,
        // fail-fast and single attempt, so a lock call is bounded either way.
        let timed = client.with_options(&Options {
            timeout: Some(call_timeout),
            fail_fast: true,
            max_attempts: Some(1),
            ..Default::default()
        });
        let script_loader = AbortOnDropHandle::new(tokio::spawn(load_scripts_on_reconnect(
            client.clone(),
            diagnosis,
        )));
        let lane = Arc::new(Lane::new(
            timed.clone(),
            call_timeout,
            // The wait and the script share one call timeout.
            topology
                .replica_ack_timeout_ms
                .min(topology.call_timeout_ms / 2)
                .max(1),
            batching,
        ));
        Ok(Master {
            connection: Mutex::new(None),
            script_loader,
            builder,
            client,
            timed,
            lane,
        })
    }

    /// Starts the connection task and waits (bounded) for the first connection, then loads
    /// the scripts: `Ok(Ok)` connected, `Ok(Err)` refused at once, `Err` no answer in time.
    pub async fn start(
        &self,
    ) -> Result<Result<(), fred::error::Error>, tokio::time::error::Elapsed> {
        let (connection, first) = connect(&self.client, RECONNECT_DELAY, CONNECT_TIMEOUT).await;
        if let Ok(mut slot) = self.connection.lock() {
            *slot = Some(connection);
        }
        if let Ok(Ok(())) = first {
            load_scripts(&self.client).await;
        }
        first
    }

    /// Runs a lock call, batched with others while the master is busy.
    pub async fn call(&self, call: Call) -> Reply<Answer> {
        self.lane.call(call).await
    }

    /// Runs `script` by SHA within the per-call timeout (not batched: inspection and
    /// operator calls).
    pub async fn eval<R: FromValue>(
        &self,
        script: &Script,
        keys: Vec<Key>,
        args: Vec<Value>,
    ) -> Reply<R> {
        eval_by_sha(&self.timed, script, &keys, &args).await
    }

    /// Waits, within the per-call timeout, until every lock call handed to this group has
    /// been answered, including those nobody waits for any more (the groups a vote was decided
    /// without): a PING sent once the lane is idle comes back after them.
    pub async fn settle(&self) {
        let _ = tokio::time::timeout(self.lane.call_timeout(), self.lane.settled()).await;
        let _ = self.ping().await;
    }

    /// Whether this group's queue refuses new grants now (the client is overloaded).
    pub fn overloaded(&self) -> bool {
        self.lane.full()
    }

    /// The string at `key` on the current master, within the per-call timeout.
    pub async fn get(&self, key: &str) -> Reply<Option<String>> {
        match self.timed.get::<Option<String>, _>(key).await {
            Ok(value) => Reply::Answer(value),
            Err(error) if *error.kind() == ErrorKind::Timeout => Reply::Timeout,
            Err(error) => Reply::Failed(error.to_string()),
        }
    }

    /// `INFO <section>` of the current master, within the per-call timeout.
    pub async fn info(&self, section: fred::types::InfoKind) -> Reply<String> {
        match self.timed.info::<String>(Some(section)).await {
            Ok(text) => Reply::Answer(text),
            Err(error) if *error.kind() == ErrorKind::Timeout => Reply::Timeout,
            Err(error) => Reply::Failed(error.to_string()),
        }
    }

    /// The values of the configuration parameters `names` (`CONFIG GET`), within the
    /// per-call timeout. A server that renamed or disabled CONFIG answers an error.
    pub async fn config(&self, names: &[&str]) -> Reply<Vec<(String, String)>> {
        let asked = names
            .iter()
            .map(|name| Value::from(*name))
            .collect::<Vec<_>>();
        let command = self
            .timed
            .custom::<Value, _>(fred::cmd!("CONFIG", blocking: false), {
                let mut args = vec![Value::from("GET")];
                args.extend(asked);
                args
            });
        let text = |value: &Value| value.as_string().unwrap_or_default();
        match command.await {
            // RESP3 answers a map, RESP2 a flat list of names and values.
            Ok(Value::Map(map)) => Reply::Answer(
                map.inner()
                    .iter()
                    .map(|(name, value)| {
                        (
                            name.as_str().map(|n| n.to_string()).unwrap_or_default(),
                            text(value),
                        )
                    })
                    .collect(),
            ),
            Ok(Value::Array(flat)) => Reply::Answer(
                flat.chunks(2)
                    .filter_map(|pair| match pair {
                        [name, value] => Some((text(name), text(value))),
                        _ => None,
                    })
                    .collect(),
            ),
            Ok(other) => Reply::Failed(format!("unexpected CONFIG GET reply {other:?}")),
            Err(error) if *error.kind() == ErrorKind::Timeout => Reply::Timeout,
            Err(error) => Reply::Failed(error.to_string()),
        }
    }

    /// `CLUSTER INFO` and `CLUSTER SLOTS` of this node, each within the per-call timeout.
    pub async fn cluster_map(&self) -> Option<(String, Value)> {
        let cluster = || fred::cmd!("CLUSTER", blocking: false);
        let info = self
            .timed
            .custom::<String, _>(cluster(), vec!["INFO"])
            .await
            .ok()?;
        let slots = self
            .timed
            .custom::<Value, _>(cluster(), vec!["SLOTS"])
            .await
            .ok()?;
        Some((info, slots))
    }

    /// `host:port` of the master the client is connected to now.
    pub fn connected_master(&self) -> Option<String> {
        self.client
            .active_connections()
            .first()
            .map(|server| format!("{}:{}", server.host, server.port))
    }

    /// Round-trip time of a PING, bounded by the per-call timeout.
    pub async fn ping(&self) -> Reply<Duration> {
        let started = std::time::Instant::now();
        match self.timed.ping::<String>(None).await {
            Ok(_) => Reply::Answer(started.elapsed()),
            Err(error) if *error.kind() == ErrorKind::Timeout => Reply::Timeout,
            Err(error) => Reply::Failed(error.to_string()),
        }
    }

    /// Keys matching `pattern` (SCAN, page by page, each page within the per-call timeout),
    /// at most `limit` of them.
    pub async fn scan_keys(&self, pattern: &str, limit: usize) -> Reply<Vec<String>> {
        let mut cursor = "0".to_string();
        let mut keys = Vec::new();
        loop {
            let page = self
                .timed
                .scan_page::<(String, Vec<String>), _, _>(cursor.clone(), pattern, Some(1000), None)
                .await;
            match page {
                Ok((next, found)) => {
                    keys.extend(found);
                    if next == "0" || keys.len() >= limit {
                        keys.truncate(limit);
                        return Reply::Answer(keys);
                    }
                    cursor = next;
                }
                Err(error) if *error.kind() == ErrorKind::Timeout => return Reply::Timeout,
                Err(error) => return Reply::Failed(error.to_string()),
            }
        }
    }

    /// The connection commands go out on now: `CLIENT ID` per server, as fred read it when
    /// it connected.
    pub fn connection_ids(&self) -> std::collections::HashMap<fred::types::config::Server, i64> {
        fred::interfaces::ClientInterface::connection_ids(&self.client)
    }

    /// Waits, at most `limit`, until every replica connected to the master acknowledged the
    /// writes this client made so far: `(acknowledged, connected)`, or `None` when the master
    /// did not say.
    pub async fn wait_for_replicas(&self, limit: Duration) -> Option<(u64, u64)> {
        let info = self.info(fred::types::InfoKind::Replication).await;
        let Reply::Answer(text) = info else {
            return None;
        };
        let connected: u64 = text
            .lines()
            .find_map(|line| line.trim().strip_prefix("connected_slaves:"))
            .and_then(|n| n.parse().ok())?;
        if connected == 0 {
            return Some((0, 0));
        }
        // WAIT's own limit decides, not the per-call timeout.
        let waiting = self.client.with_options(&Options {
            timeout: Some(limit + Duration::from_secs(1)),
            max_attempts: Some(1),
            ..Default::default()
        });
        let wait = waiting.custom::<i64, _>(
            fred::cmd!("WAIT", blocking: true),
            vec![
                Value::from(connected as i64),
                Value::from(limit.as_millis() as i64),
            ],
        );
        match tokio::time::timeout(limit + Duration::from_secs(1), wait).await {
            Ok(Ok(acknowledged)) => Some((u64::try_from(acknowledged).unwrap_or(0), connected)),
            _ => None,
        }
    }

    /// A new pub/sub client to this master (it follows failovers like the main one).
    pub fn subscriber(&self) -> Result<fred::clients::SubscriberClient, fred::error::Error> {
        let mut builder = self.builder.clone();
        // Subscribing waits for messages: no command timeout, and no fail-fast.
        builder.with_performance_config(|p| p.default_command_timeout = Duration::ZERO);
        builder.build_subscriber_client()
    }

    /// The underlying client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Closes the connection.
    pub async fn quit(&self) {
        let connection = self.connection.lock().ok().and_then(|mut slot| slot.take());
        shut(&self.client, connection, self.lane.call_timeout()).await;
    }
}

impl Drop for Master {
    fn drop(&mut self) {
        self.script_loader.abort();
    }
}
