//! One group: a master (found through Sentinel, or a plain address) or a Redis Cluster (a
//! master per primary, routed by hash slot), the per-call timeout that keeps a dead or
//! frozen master from stalling a call, and script calls by SHA with a transparent reload on
//! NOSCRIPT.
//!
//! Everything that talks to one group lives in this folder: `master` (one client and its
//! lane), `cluster` (the slot map) and `slots` (hash slots and tags), group commit (`batch`), the
//! scripts, the Sentinel watch, release subscribers (`subscriber`, and `sharded` for Cluster
//! groups), connecting and diagnosing, ACL and TLS. A group answers each
//! call with a [`reply::Reply`]; it knows nothing of votes or majorities.

use std::sync::Arc;
use std::time::Duration;

use fred::clients::WithOptions;
use fred::error::ErrorKind;
use fred::prelude::*;
use fred::types::config::Server;
use fred::types::scripts::Script;
use fred::types::{FromValue, Key};

use crate::config::{ConfigError, Endpoint, GroupConfig, Topology};
use crate::group::batch::{Answer, Batching, Call};
use crate::group::cluster::{Cluster, Every};
use crate::group::diagnose::Diagnosis;
use crate::group::master::Master;
use crate::group::reply::Reply;
use crate::group::scripts::GroupScript;
use crate::group::security::{Credentials, Transport};
use crate::group::slots::HashSlot;
use crate::group::subscriber::Subscriber;

pub(crate) mod batch;
pub(crate) mod cluster;
pub(crate) mod connection;
pub(crate) mod diagnose;
pub(crate) mod master;
pub(crate) mod reply;
pub(crate) mod scripts;
pub(crate) mod security;
pub(crate) mod sentinel;
pub(crate) mod sharded;
pub(crate) mod slots;
pub(crate) mod subscriber;

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
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_millis(1000);

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

/// The keys one script reads of one resource, and the slot the resource lives in.
pub(crate) struct SlotKeys {
    pub slot: HashSlot,
    pub keys: Vec<Key>,
}

/// One Redis master group that votes.
pub(crate) struct Group {
    /// The group's name, as written in votes and errors.
    pub name: String,
    reach: Reach,
    diagnosis: Arc<Diagnosis>,
    nodes: Nodes,
}

/// What a group is made of.
enum Nodes {
    /// One master: Sentinel-watched or a plain address. Boxed: its client's builder is large.
    Master(Box<Master>),
    /// A Redis Cluster: a primary per range of slots.
    Cluster(Cluster),
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
pub(crate) async fn load_scripts(client: &Client) {
    for script in crate::group::scripts::all() {
        if let Some(lua) = script.lua() {
            let _ = client.script_load::<String, _>(lua.clone()).await;
        }
    }
}

pub(crate) async fn load_scripts_on_reconnect(client: Client, diagnosis: Arc<Diagnosis>) {
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

pub(crate) fn reconnect_policy() -> ReconnectPolicy {
    let mut policy = ReconnectPolicy::new_constant(0, RECONNECT_DELAY_MS);
    policy.set_jitter(0);
    policy
}

impl Group {
    /// Builds the clients and starts connecting. A group that is down now is not an error:
    /// it reconnects in the background and votes "error" until it is back.
    pub async fn connect(
        index: usize,
        config: &GroupConfig,
        topology: &Topology,
        transport: &Transport,
    ) -> Result<Self, SetupError> {
        let endpoint = config.endpoint_at(index)?;
        let master = Credentials {
            username: config.username.clone(),
            password: config.password.clone(),
        };
        let diagnosis = Arc::new(Diagnosis::default());
        let mut reach = Reach {
            watched: None,
            direct: None,
            master: master.clone(),
            transport: transport.clone(),
        };
        let server = match endpoint {
            Endpoint::Direct { host, port } => {
                reach.direct = Some((host.clone(), port));
                ServerConfig::new_centralized(host, port)
            }
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
                reach.watched = Some(Watched {
                    service,
                    addresses: sentinels,
                    credentials,
                });
                server
            }
            Endpoint::Cluster { seeds } => {
                let cluster = Cluster::new(
                    &config.name,
                    seeds,
                    master,
                    transport,
                    topology,
                    diagnosis.clone(),
                );
                return Ok(Group {
                    name: config.name.clone(),
                    reach,
                    diagnosis,
                    nodes: Nodes::Cluster(cluster),
                });
            }
        };
        let built = Master::build(
            server,
            &master,
            transport,
            topology,
            diagnosis.clone(),
            Batching::Declared,
        )
        .map_err(|error| SetupError::Client {
            group: config.name.clone(),
            message: error.to_string(),
        })?;
        Ok(Group {
            name: config.name.clone(),
            reach,
            diagnosis,
            nodes: Nodes::Master(Box::new(built)),
        })
    }

    /// Starts the connection task and waits (bounded) for the first connection.
    pub async fn start(&self) {
        let master = match &self.nodes {
            Nodes::Master(master) => master,
            Nodes::Cluster(cluster) => {
                if !cluster.start().await {
                    tracing::warn!(group = %self.name, "no node of the Cluster group answered; reading its slot map again in the background");
                }
                return;
            }
        };
        match master.start().await {
            Ok(Ok(())) => tracing::debug!(group = %self.name, "connected"),
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

    /// Whether this group is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.nodes, Nodes::Cluster(_))
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
        let Nodes::Master(master) = &self.nodes else {
            return None;
        };
        self.diagnosis
            .probe(&self.reach, master.client(), &self.name)
    }

    /// Whether the group's clients are connected: its master's, or every primary's.
    pub fn connected(&self) -> bool {
        match &self.nodes {
            Nodes::Master(master) => master.client().is_connected(),
            Nodes::Cluster(cluster) => cluster.connected(),
        }
    }

    /// Why the client is down, when it is and a probe found out (and starts a new probe when
    /// the last one is old).
    pub fn down_because(&self) -> Option<String> {
        if self.connected() {
            return None;
        }
        self.diagnose();
        self.diagnosis.cause()
    }

    /// Runs `script` by SHA within the per-call timeout (not batched: inspection and
    /// operator calls), for the resource in `slot` (a Cluster group moves the keys there).
    pub async fn eval<R: FromValue>(
        &self,
        slot: HashSlot,
        script: &Script,
        keys: Vec<Key>,
        args: Vec<Value>,
    ) -> Reply<R> {
        match &self.nodes {
            Nodes::Master(master) => master.eval(script, keys, args).await,
            Nodes::Cluster(cluster) => cluster.eval(slot, script, &keys, args).await,
        }
    }

    /// Deletes the lock at `keys` whoever holds it, and announces it (lua/force_release.lua):
    /// `args` are the release channel and the announcement. A Cluster group announces in the
    /// resource's `slot`, with sharded pub/sub.
    pub async fn force_release<R: FromValue>(
        &self,
        slot: HashSlot,
        keys: Vec<Key>,
        args: Vec<Value>,
    ) -> Reply<R> {
        match &self.nodes {
            Nodes::Master(master) => master.eval(&scripts::FORCE_RELEASE, keys, args).await,
            Nodes::Cluster(cluster) => cluster.force_release(slot, &keys, &args).await,
        }
    }

    /// Reads many locks with the inspect script: one call on a master; in a Cluster group one
    /// per resource, since each lives in its own slot. The answers follow `locks`' order.
    pub async fn inspect(&self, locks: &[SlotKeys]) -> Reply<Vec<Value>> {
        match &self.nodes {
            Nodes::Master(master) => {
                let keys = locks
                    .iter()
                    .flat_map(|lock| lock.keys.iter().cloned())
                    .collect();
                master.eval(&scripts::INSPECT, keys, Vec::new()).await
            }
            Nodes::Cluster(cluster) => {
                let reads = futures::future::join_all(locks.iter().map(|lock| {
                    cluster.eval::<Vec<Value>>(lock.slot, &scripts::INSPECT, &lock.keys, Vec::new())
                }))
                .await;
                let mut views = Vec::with_capacity(4 * locks.len());
                for read in reads {
                    match read {
                        Reply::Answer(view) => views.extend(view),
                        other => return other,
                    }
                }
                Reply::Answer(views)
            }
        }
    }

    /// Runs a script about the whole group (admission, policy): once on a master; in a
    /// Cluster group in every slot or in one slot of each primary, as `every` says, with the
    /// keys moved into each slot. One reply per run.
    pub async fn eval_group<R: FromValue>(
        &self,
        every: Every,
        script: GroupScript,
        keys: Vec<Key>,
        args: Vec<Value>,
    ) -> Vec<Reply<R>> {
        match &self.nodes {
            Nodes::Master(master) => vec![master.eval(script.single(), keys, args).await],
            Nodes::Cluster(cluster) => cluster.eval_group(every, script, &keys, &args).await,
        }
    }

    /// Waits, within the per-call timeout, until every lock call handed to this group has
    /// been answered, including those nobody waits for any more (the groups a vote was decided
    /// without): a PING sent once the lane is idle comes back after them.
    pub async fn settle(&self) {
        match &self.nodes {
            Nodes::Master(master) => master.settle().await,
            Nodes::Cluster(cluster) => {
                let shards = cluster.shards();
                futures::future::join_all(shards.iter().map(|shard| shard.master.settle())).await;
            }
        }
    }

    /// Whether this group's queue refuses new grants now (the client is overloaded). A
    /// Cluster group's primaries each refuse on their own, so the group as a whole never
    /// does here.
    pub fn overloaded(&self) -> bool {
        match &self.nodes {
            Nodes::Master(master) => master.overloaded(),
            Nodes::Cluster(_) => false,
        }
    }

    /// Runs a lock call, batched with others while the master is busy. A call that fails
    /// while the client is down says why, when a probe found out.
    pub async fn call(&self, call: Call) -> Reply<Answer> {
        let reply = match &self.nodes {
            Nodes::Master(master) => master.call(call).await,
            Nodes::Cluster(cluster) => return cluster.call(call).await,
        };
        match reply {
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

    /// The string at `key` of the resource in `slot`, within the per-call timeout.
    pub async fn get(&self, slot: HashSlot, key: &str) -> Reply<Option<String>> {
        match &self.nodes {
            Nodes::Master(master) => master.get(key).await,
            Nodes::Cluster(cluster) => cluster.get(slot, key).await,
        }
    }

    /// The master, or a Cluster group's first primary: the node health views read.
    fn first_master(&self) -> Option<FirstMaster<'_>> {
        match &self.nodes {
            Nodes::Master(master) => Some(FirstMaster::Own(master)),
            Nodes::Cluster(cluster) => cluster.shards().into_iter().next().map(FirstMaster::Shard),
        }
    }

    /// `INFO <section>` of the current master (a Cluster group's first primary), within the
    /// per-call timeout.
    pub async fn info(&self, section: fred::types::InfoKind) -> Reply<String> {
        match self.first_master() {
            Some(master) => master.get().info(section).await,
            None => Reply::NotSent(NO_PRIMARY),
        }
    }

    /// `CONFIG GET names` and `INFO replication` on the master, or on every primary of a
    /// Cluster group, each within the per-call timeout and named by its address. Read per
    /// primary, not merged per setting: whether a primary's writes are bounded depends on
    /// its settings together with its own replicas.
    pub(crate) async fn primary_settings(&self, names: &[&str]) -> Reply<Vec<PrimaryReading>> {
        match &self.nodes {
            Nodes::Master(master) => {
                let address = master
                    .connected_master()
                    .unwrap_or_else(|| "(address unknown)".to_string());
                Reply::Answer(vec![PrimaryReading::read(address, master, names).await])
            }
            Nodes::Cluster(cluster) => {
                let shards = cluster.shards();
                if shards.is_empty() {
                    return Reply::NotSent(NO_PRIMARY);
                }
                Reply::Answer(
                    futures::future::join_all(shards.iter().map(|shard| {
                        PrimaryReading::read(shard.address.clone(), &shard.master, names)
                    }))
                    .await,
                )
            }
        }
    }

    /// `host:port` of the master the client is connected to now (every primary of a Cluster
    /// group, joined).
    pub fn connected_master(&self) -> Option<String> {
        match &self.nodes {
            Nodes::Master(master) => master.connected_master(),
            Nodes::Cluster(cluster) => {
                let shards = cluster.shards();
                (!shards.is_empty()).then(|| {
                    shards
                        .iter()
                        .map(|shard| shard.address.as_str())
                        .collect::<Vec<_>>()
                        .join(",")
                })
            }
        }
    }

    /// Round-trip time of a PING, bounded by the per-call timeout (a Cluster group's slowest
    /// primary).
    pub async fn ping(&self) -> Reply<Duration> {
        match &self.nodes {
            Nodes::Master(master) => master.ping().await,
            Nodes::Cluster(cluster) => {
                let shards = cluster.shards();
                if shards.is_empty() {
                    return Reply::NotSent(NO_PRIMARY);
                }
                let replies =
                    futures::future::join_all(shards.iter().map(|shard| shard.master.ping())).await;
                let mut slowest = Duration::ZERO;
                for reply in replies {
                    match reply {
                        Reply::Answer(rtt) => slowest = slowest.max(rtt),
                        other => return other,
                    }
                }
                Reply::Answer(slowest)
            }
        }
    }

    /// Keys matching `pattern` (SCAN, page by page, each page within the per-call timeout),
    /// at most `limit` of them; in a Cluster group on every primary, without their slot tag.
    pub async fn scan_keys(&self, pattern: &str, limit: usize) -> Reply<Vec<String>> {
        match &self.nodes {
            Nodes::Master(master) => master.scan_keys(pattern, limit).await,
            Nodes::Cluster(cluster) => cluster.scan_keys(pattern, limit).await,
        }
    }

    /// A Cluster group's keys in hash slots `slots` that start with `start` once their slot
    /// tag is taken off, each slot read whole on the primary that serves it now (see
    /// [`Cluster::slot_keys`]). A master has no slots: it answers that it is not a Cluster.
    pub async fn slot_keys(&self, slots: &[u16], start: &str) -> Reply<Vec<String>> {
        match &self.nodes {
            Nodes::Master(_) => Reply::NotSent(NOT_A_CLUSTER),
            Nodes::Cluster(cluster) => cluster.slot_keys(slots, start).await,
        }
    }

    /// The connection a master group's commands go out on now (`CLIENT ID` per server, as
    /// read at connect); empty for a Cluster group.
    pub fn connection_ids(&self) -> std::collections::HashMap<fred::types::config::Server, i64> {
        match &self.nodes {
            Nodes::Master(master) => master.connection_ids(),
            Nodes::Cluster(_) => std::collections::HashMap::new(),
        }
    }

    /// Waits, at most `limit`, until every replica connected to the master (to each primary
    /// of a Cluster group) acknowledged the writes this client made so far:
    /// `(acknowledged, connected)`, or `None` when a master did not say.
    pub async fn wait_for_replicas(&self, limit: Duration) -> Option<(u64, u64)> {
        match &self.nodes {
            Nodes::Master(master) => master.wait_for_replicas(limit).await,
            Nodes::Cluster(cluster) => {
                let shards = cluster.shards();
                let waits = futures::future::join_all(
                    shards
                        .iter()
                        .map(|shard| shard.master.wait_for_replicas(limit)),
                )
                .await;
                waits
                    .into_iter()
                    .try_fold((0, 0), |(acked, connected), wait| {
                        let (a, c) = wait?;
                        Some((acked + a, connected + c))
                    })
            }
        }
    }

    /// A new release subscriber, connecting from now on: a pub/sub client to the master (it
    /// follows failovers like the main one), or a Cluster group's client per primary.
    pub fn subscriber(&self) -> Result<Subscriber, fred::error::Error> {
        match &self.nodes {
            Nodes::Master(master) => Ok(Subscriber::master(master.subscriber()?)),
            Nodes::Cluster(cluster) => Ok(Subscriber::Cluster(cluster.subscriber())),
        }
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

    /// The master's client (shared with the Sentinel watcher, which reconnects it); `None`
    /// for a Cluster group, whose clients change with its slot map.
    pub fn client(&self) -> Option<&Client> {
        match &self.nodes {
            Nodes::Master(master) => Some(master.client()),
            Nodes::Cluster(_) => None,
        }
    }

    /// Closes the connections.
    pub async fn quit(&self) {
        match &self.nodes {
            Nodes::Master(master) => master.quit().await,
            Nodes::Cluster(cluster) => cluster.quit().await,
        }
    }
}

const NO_PRIMARY: &str = "no primary of the Cluster group is known yet";
const NOT_A_CLUSTER: &str = "the group is not a Redis Cluster: it has no hash slots";

/// What one master (one primary of a Cluster group) answered about its write settings.
#[derive(Debug, Clone)]
pub(crate) struct PrimaryReading {
    /// `host:port`.
    pub address: String,
    pub config: Reply<Vec<(String, String)>>,
    /// `INFO replication`.
    pub info: Reply<String>,
}

impl PrimaryReading {
    async fn read(address: String, master: &Master, names: &[&str]) -> Self {
        let (config, info) = tokio::join!(
            master.config(names),
            master.info(fred::types::InfoKind::Replication)
        );
        PrimaryReading {
            address,
            config,
            info,
        }
    }
}

/// The master a health view reads: the group's own, or a Cluster primary held alive.
enum FirstMaster<'g> {
    Own(&'g Master),
    Shard(Arc<cluster::Shard>),
}

impl FirstMaster<'_> {
    fn get(&self) -> &Master {
        match self {
            FirstMaster::Own(master) => master,
            FirstMaster::Shard(shard) => &shard.master,
        }
    }
}
