//! One master group: its fred client (found through Sentinel, or a plain address), the
//! per-call timeout that keeps a dead or frozen master from stalling a call, and script calls
//! by SHA with a transparent reload on NOSCRIPT.
//!
//! Everything that talks to one group lives in this folder: group commit (`batch`), the
//! scripts, the Sentinel watch, connecting and diagnosing, ACL and TLS. A group answers each
//! call with a [`reply::Reply`]; it knows nothing of votes or majorities.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fred::clients::WithOptions;
use fred::error::ErrorKind;
use fred::prelude::*;
use fred::types::config::{Server, UnresponsiveConfig};
use fred::types::scripts::Script;
use fred::types::{FromValue, Key};

use tokio_util::task::AbortOnDropHandle;

use crate::config::{ConfigError, Endpoint, GroupConfig, Topology};
use crate::group::batch::{Answer, Call, Lane};
use crate::group::connection::{Connection, connect, shut};
use crate::group::diagnose::Diagnosis;
use crate::group::reply::Reply;
use crate::group::security::{Credentials, Transport};

pub(crate) mod batch;
pub(crate) mod connection;
pub(crate) mod diagnose;
pub(crate) mod reply;
pub(crate) mod scripts;
pub(crate) mod security;
pub(crate) mod sentinel;

/// Why a group's client could not be built. Not a network failure: those are votes.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SetupError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot set up group {group}: {message}")]
    Client { group: String, message: String },
}

/// Pause between reconnect attempts. Short and without jitter: a refused connection costs
/// nothing, and after a failover the group should vote again as soon as it can.
const RECONNECT_DELAY_MS: u32 = 20;
pub(crate) const RECONNECT_DELAY: Duration = Duration::from_millis(RECONNECT_DELAY_MS as u64);
/// How long the first connection may take before the group starts out as "down".
const CONNECT_TIMEOUT: Duration = Duration::from_millis(1000);

/// How a Sentinel-watched group is watched.
#[derive(Clone)]
pub(crate) struct Watched {
    pub service: String,
    pub addresses: Vec<(String, u16)>,
    credentials: Credentials,
}

/// How to reach a group's nodes with a client of one's own: its Sentinels or its master's
/// address, and the credentials and TLS of each (for Sentinel watchers, health probes and
/// the diagnosis of a group that is down).
#[derive(Clone)]
pub(crate) struct Reach {
    pub watched: Option<Watched>,
    direct: Option<(String, u16)>,
    master: Credentials,
    /// TLS shared by every client of the engine.
    transport: Transport,
}

impl Reach {
    /// A direct client to one of the group's Sentinels (`None` for a group without them).
    pub fn sentinel_config(&self, host: &str, port: u16) -> Option<Config> {
        let watched = self.watched.as_ref()?;
        Some(self.transport.config(
            ServerConfig::new_centralized(host, port),
            &watched.credentials,
        ))
    }

    /// A direct client to the group's master at `host:port`.
    pub fn master_config(&self, host: &str, port: u16) -> Config {
        self.transport
            .config(ServerConfig::new_centralized(host, port), &self.master)
    }

    /// The master's address, for a group without Sentinels.
    pub fn direct_address(&self) -> Option<String> {
        self.direct
            .as_ref()
            .map(|(host, port)| format!("{host}:{port}"))
    }
}

/// One Redis master group that votes.
pub(crate) struct Group {
    /// The group's name, as written in votes and errors.
    pub name: String,
    reach: Reach,
    diagnosis: Arc<Diagnosis>,
    /// The task that keeps the client connected, stopped by `quit`.
    connection: Mutex<Option<Connection>>,
    /// Loads the scripts onto every master this client connects to (after failovers too).
    script_loader: AbortOnDropHandle<()>,
    /// How this group's clients are built, kept for the release subscriber made on demand.
    builder: Builder,
    client: Client,
    /// The same client with the per-call timeout and fail-fast applied to every command.
    timed: WithOptions<Client>,
    /// Acquire, release and extend, batched while the master is busy.
    lane: Arc<Lane>,
}

/// One run of `script` by SHA and, with `acks = Some((replicas, timeout_ms))`, `WAIT`
/// pipelined right behind it on the same connection.
async fn run_once<R: FromValue>(
    client: &WithOptions<Client>,
    script: &Script,
    keys: &[Key],
    args: &[Value],
    acks: Option<(u32, u64)>,
) -> (
    Result<R, fred::error::Error>,
    Option<Result<i64, fred::error::Error>>,
) {
    // fred's command futures are several kilobytes: boxed here, the futures of every caller
    // up the chain (and of every queued call, which never gets here) stay small and cheap to
    // move into the fan-out.
    let eval =
        Box::pin(client.evalsha::<R, _, _, _>(script.sha1().clone(), keys.to_vec(), args.to_vec()));
    match acks {
        None => (eval.await, None),
        Some((replicas, timeout_ms)) => {
            let wait = Box::pin(client.wait::<i64>(
                i64::from(replicas),
                i64::try_from(timeout_ms).unwrap_or(i64::MAX),
            ));
            let (answer, acknowledged) = tokio::join!(eval, wait);
            (answer, Some(acknowledged))
        }
    }
}

/// Runs `script` by SHA and, with `acks`, `WAIT` behind it; answers the script's reply and
/// what `WAIT` said (how many replicas acknowledged the script's writes, or why it failed).
/// On NOSCRIPT it loads the script and runs both again (a `WAIT` sent before the script ran
/// counted replicas for earlier writes), within what is left of one call timeout, so a master
/// that froze in between does not stall the call for three.
pub(crate) async fn eval_script<R: FromValue>(
    client: &WithOptions<Client>,
    script: &Script,
    keys: &[Key],
    args: &[Value],
    acks: Option<(u32, u64)>,
) -> Reply<(R, Option<Result<i64, String>>)> {
    let started = tokio::time::Instant::now();
    let (answer, acknowledged) = match run_once(client, script, keys, args, acks).await {
        (Err(error), _) if error.details().starts_with("NOSCRIPT") => {
            let reload = async {
                let lua = script.lua().cloned().unwrap_or_default();
                match Box::pin(client.script_load::<String, _>(lua)).await {
                    Ok(_) => run_once(client, script, keys, args, acks).await,
                    Err(error) => (Err(error), None),
                }
            };
            match client.options().timeout {
                Some(limit) => match tokio::time::timeout_at(started + limit, reload).await {
                    Ok(outcome) => outcome,
                    Err(_) => return Reply::Timeout,
                },
                None => reload.await,
            }
        }
        outcome => outcome,
    };
    match answer {
        Ok(answer) => Reply::Answer((
            answer,
            acknowledged.map(|count| count.map_err(|error| error.to_string())),
        )),
        Err(error) if *error.kind() == ErrorKind::Timeout => Reply::Timeout,
        Err(error) => Reply::Failed(error.to_string()),
    }
}

/// Runs `script` by SHA within the per-call timeout, reloading it on NOSCRIPT.
pub(crate) async fn eval_by_sha<R: FromValue>(
    client: &WithOptions<Client>,
    script: &Script,
    keys: &[Key],
    args: &[Value],
) -> Reply<R> {
    eval_script(client, script, keys, args, None)
        .await
        .map(|(answer, _)| answer)
}

/// Loads every script; a failure only means the first call pays a NOSCRIPT round trip.
async fn load_scripts(client: &Client) {
    for script in crate::group::scripts::all() {
        if let Some(lua) = script.lua() {
            let _ = client.script_load::<String, _>(lua.clone()).await;
        }
    }
}

async fn load_scripts_on_reconnect(client: Client, diagnosis: Arc<Diagnosis>) {
    let mut reconnects = client.reconnect_rx();
    loop {
        match reconnects.recv().await {
            Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                diagnosis.forget();
                load_scripts(&client).await
            }
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        }
    }
}

fn reconnect_policy() -> ReconnectPolicy {
    let mut policy = ReconnectPolicy::new_constant(0, RECONNECT_DELAY_MS);
    policy.set_jitter(0);
    policy
}

impl Group {
    /// Builds the client and starts connecting. A group that is down now is not an error:
    /// it reconnects in the background and votes "error" until it is back.
    pub async fn connect(
        index: usize,
        config: &GroupConfig,
        topology: &Topology,
        transport: &Transport,
    ) -> Result<Self, SetupError> {
        let endpoint = config.endpoint_at(index)?;
        let direct = match &endpoint {
            Endpoint::Direct { host, port } => Some((host.clone(), *port)),
            Endpoint::Sentinel { .. } => None,
        };
        let (server, watched) = match endpoint {
            Endpoint::Direct { host, port } => (ServerConfig::new_centralized(host, port), None),
            Endpoint::Sentinel { sentinels, service } => {
                let credentials = Credentials {
                    username: config.sentinel_username.clone(),
                    password: config.sentinel_password.clone(),
                };
                let server = ServerConfig::Sentinel {
                    hosts: sentinels
                        .iter()
                        .map(|(host, port)| Server::new(host.as_str(), *port))
                        .collect(),
                    service_name: service.clone(),
                    username: credentials.username.clone(),
                    password: credentials.password.clone(),
                };
                let watched = Watched {
                    service,
                    addresses: sentinels,
                    credentials,
                };
                (server, Some(watched))
            }
        };
        let call_timeout = topology.call_timeout();
        let master = Credentials {
            username: config.username.clone(),
            password: config.password.clone(),
        };
        let fred_config = Config {
            // The first connection's failure shows at once; `connection::keep_connected`
            // then starts the client again until it connects (fred gives up after it).
            fail_fast: true,
            ..transport.config(server, &master)
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
        let client = builder.build().map_err(|error| SetupError::Client {
            group: config.name.clone(),
            message: error.to_string(),
        })?;
        // fred 10 applies these options to plain commands but not to EVAL and EVALSHA, which
        // go straight to the client: its own config above carries the same timeout,
        // fail-fast and single attempt, so a lock call is bounded either way.
        let timed = client.with_options(&Options {
            timeout: Some(call_timeout),
            fail_fast: true,
            max_attempts: Some(1),
            ..Default::default()
        });
        let diagnosis = Arc::new(Diagnosis::default());
        let script_loader = AbortOnDropHandle::new(tokio::spawn(load_scripts_on_reconnect(
            client.clone(),
            diagnosis.clone(),
        )));
        let acks = (topology.replica_acks > 0)
            .then_some((topology.replica_acks, topology.replica_ack_timeout_ms));
        let lane = Arc::new(Lane::new(timed.clone(), call_timeout, acks));
        Ok(Group {
            name: config.name.clone(),
            script_loader,
            reach: Reach {
                watched,
                direct,
                master,
                transport: transport.clone(),
            },
            diagnosis,
            connection: Mutex::new(None),
            builder,
            client,
            timed,
            lane,
        })
    }

    /// Starts the connection task and waits (bounded) for the first connection.
    pub async fn start(&self) {
        let (connection, first) = connect(&self.client, RECONNECT_DELAY, CONNECT_TIMEOUT).await;
        if let Ok(mut slot) = self.connection.lock() {
            *slot = Some(connection);
        }
        match first {
            Ok(Ok(())) => {
                tracing::debug!(group = %self.name, "connected");
                load_scripts(&self.client).await;
            }
            Ok(Err(error)) => {
                tracing::warn!(group = %self.name, %error, "group unreachable; reconnecting in the background");
                // Refused at once (a login, a certificate, nothing listening): a probe by hand
                // fails as fast, and the first calls can then say why.
                if let Some(probe) = self.diagnosis_probe() {
                    probe.await;
                }
            }
            Err(_) => {
                tracing::warn!(group = %self.name, "group did not answer in time; reconnecting in the background");
                self.diagnose();
            }
        }
    }

    /// Probes, in the background, why the client is down; the answer goes into the votes of
    /// the calls that fail meanwhile.
    fn diagnose(&self) {
        if let Some(probe) = self.diagnosis_probe() {
            tokio::spawn(probe);
        }
    }

    /// The probe that finds and keeps why the client is down (see [`Diagnosis::probe`]).
    fn diagnosis_probe(&self) -> Option<impl Future<Output = ()> + Send + 'static> {
        self.diagnosis.probe(&self.reach, &self.client, &self.name)
    }

    /// Why the client is down, when it is and a probe found out (and starts a new probe when
    /// the last one is old).
    pub fn down_because(&self) -> Option<String> {
        if self.client.is_connected() {
            return None;
        }
        self.diagnose();
        self.diagnosis.cause()
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

    /// Runs a lock call, batched with others while the master is busy. A call that fails
    /// while the client is down says why, when a probe found out.
    pub async fn call(&self, call: Call) -> Reply<Answer> {
        match self.lane.call(call).await {
            reply @ (Reply::Timeout | Reply::Failed(_)) => match self.down_because() {
                Some(cause) => Reply::Failed(format!("not connected: {cause}")),
                None => reply,
            },
            reply => reply,
        }
    }

    /// How to reach this group's nodes with a client of one's own.
    pub fn reach(&self) -> &Reach {
        &self.reach
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

    /// A new pub/sub client to this group's master (it follows failovers like the main one).
    pub fn subscriber(&self) -> Result<fred::clients::SubscriberClient, fred::error::Error> {
        let mut builder = self.builder.clone();
        // Subscribing waits for messages: no command timeout, and no fail-fast.
        builder.with_performance_config(|p| p.default_command_timeout = Duration::ZERO);
        builder.build_subscriber_client()
    }

    /// The Sentinels watching this group, if any.
    pub fn sentinels(&self) -> Option<&Watched> {
        self.reach.watched.as_ref()
    }

    /// The configuration of a direct client to one of this group's Sentinels (`None` for a
    /// group without Sentinels): the group's Sentinel credentials and the engine's TLS.
    pub fn sentinel_config(&self, host: &str, port: u16) -> Option<Config> {
        self.reach.sentinel_config(host, port)
    }

    /// The underlying client (shared with the Sentinel watcher, which reconnects it).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Closes the connection.
    pub async fn quit(&self) {
        let connection = self.connection.lock().ok().and_then(|mut slot| slot.take());
        shut(&self.client, connection, self.lane.call_timeout()).await;
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.script_loader.abort();
    }
}
