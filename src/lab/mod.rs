//! The local lab: real `redis-server` masters, replicas and Sentinels on 127.0.0.1 that tests,
//! the demo and `quorumlock lab` start, break (kill, freeze) and repair (thaw, restart) on
//! purpose. This module owns those processes (stopped only by PID, never by name), the state
//! file `<dir>/lab.json` that lets a later process attach to a running lab, and the topology
//! file `<dir>/quorumlock.toml` that clients read.
//!
//! Port layout with a base port B, N groups, R replicas per group and S Sentinels: masters take
//! B..B+N-1 (g1 first), replicas the next N·R ports (g1's replicas, then g2's, ...), Sentinels
//! the S ports after that. Without a base port every node gets a free port from the OS.
//!
//! Each node lives in `<dir>/<name>/` (`g1-master`, `g1-replica1`, `sentinel1`) with its config
//! file and log. Nothing is persisted: a restarted node comes back empty.
//!
//! Links ([`LabSpec::links`]): every data node (master and replica) gets a [`relay`] in front
//! of it, a `quorumlock lab relay` process of its own, so that its links can be cut
//! ([`Lab::partition`]), healed ([`Lab::heal`]) and slowed ([`Lab::slow`]) while the lab runs,
//! from this process or from a later `quorumlock lab` command. Each data node then has a
//! *public* port, where its relay listens, and a *real* port, where `redis-server` listens.
//! Everyone but the lab uses the public port: replicas replicate from their master's public
//! port, every data node announces its public port (`replica-announce-port`), Sentinels
//! monitor public ports, and the topology written for clients names public ports (through
//! Sentinel or directly). The lab's own control connections (PING, INFO, ROLE, admission)
//! use the real port, so a partition never blinds the lab. Sentinels are not behind relays.
//! With a base port the public ports take the layout above, so clients see the same ports
//! with or without links; the real ports of the data nodes follow the Sentinels (in the same
//! order), then the relays' control ports. `lab.json` records all three and the relays' PIDs.
//!
//! Security options: with a password every node requires it (`requirepass`, `masterauth`,
//! Sentinel's `auth-pass` and `sentinel-pass`). With TLS the lab writes a private CA and
//! certificates to `<dir>/tls/` and every node listens on TLS only (`port 0`, `tls-port`),
//! requires client certificates and replicates over TLS; the lab's own control client speaks
//! TLS with the same settings as the engine, so no plaintext port is left open beside it and
//! the port layout stays the same.
//!
//! Cluster labs ([`LabSpec::cluster`]): each group is a Redis Cluster of its own instead of a
//! Sentinel-watched master: `shards` primaries, each with `replicas` replicas, every node a
//! plain `redis-server` with `--cluster-enabled yes` and its own `nodes.conf` in its
//! directory (`g1-s1-primary`, `g1-s1-replica1`, ...). The lab splits the 16,384 slots evenly
//! over the primaries, joins each group's nodes with `CLUSTER MEET`, makes the replicas with
//! `CLUSTER REPLICATE`, and returns once every node of every group reports `cluster_state:ok`
//! and all agree on the slot map. The cluster fails over by itself after `down_after_ms`
//! (`cluster-node-timeout`), which needs a majority of a group's primaries alive: with fewer
//! than three shards no failover can happen. There are no Sentinels, relays or TLS. A node
//! keeps its `nodes.conf` across a restart, so it rejoins its cluster (empty, as every
//! restarted node). Ports: with a base port every node's client port comes first, group by
//! group, shard by shard, primary then replicas, then their bus ports in the same order.
//! [`Lab::kill_primary`], [`Lab::freeze_primary`] and [`Lab::restart_shard`] address one
//! shard's current primary, [`Lab::migrate_slots`] moves slots between shards of a group,
//! and [`Lab::cluster_seeds`] gives each group's seed nodes. Every slot of a cluster lab is
//! admitted under the lab's lock policy, through the engine.

mod certificates;
mod cluster;
mod confs;
pub mod install;
mod probe;
mod process;
pub mod relay;
pub mod resp;
mod state;

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::millis;
use crate::protocol::Policy;
use crate::{GroupConfig, Topology};

pub use cluster::{ClusterShape, Interruption, MigrationReport};

use certificates::{tls_settings, write_certificates};
use confs::{Slot, consecutive_ports, group_name, layout, render_confs};
use probe::{field_map, good_replicas, parse_master_addr, parse_role, ping, replica_link_up};
use process::{
    ensure_free, exit_error, find_redis_server, free_ports, is_lab_process, is_relay_process,
    relay_exit_error, send_signal, spawn, spawn_relay,
};
use relay::{LinkClass, RelayError, RelayStatus};
use state::{
    ClusterRecord, LabState, NodeRecord, RelayRecord, STATE_FILE, io_error, prepare_dir,
    read_state, refuse_if_running, remove_if_present, write_file,
};

const CONFIG_FILE: &str = "quorumlock.toml";
/// Thirteen processes on two busy cores normally need well under a second; the margin is for
/// CI machines running several labs at once.
const START_TIMEOUT: Duration = Duration::from_secs(20);
const RESTART_TIMEOUT: Duration = Duration::from_secs(10);
/// A cluster lab also waits for every group's nodes to meet and agree on the slot map.
const CLUSTER_START_TIMEOUT: Duration = Duration::from_secs(40);
/// A SIGKILLed process we are not the parent of disappears once init reaps it.
const EXIT_TIMEOUT: Duration = Duration::from_secs(3);
const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// Generous because a node that has just started may be busy loading or syncing.
const CONTROL_TIMEOUT: Duration = Duration::from_millis(500);
/// Short because a frozen or wedged node must not stall a status table.
const STATUS_TIMEOUT: Duration = Duration::from_millis(200);
/// Attempts at starting on free ports before a port taken in the meantime is reported.
const FREE_PORT_ATTEMPTS: usize = 3;
/// Guards against a typo such as `--groups 5000` spawning thousands of processes.
const MAX_NODES: usize = 200;

/// Why a lab operation failed, worded for the person who has to fix it.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error(transparent)]
    RedisServerMissing(#[from] crate::lab::install::InstallError),
    #[error("invalid lab settings: {0}")]
    InvalidSpec(String),
    #[error("invalid {field}: {reason}")]
    InvalidArgument { field: &'static str, reason: String },
    #[error(
        "this lab has no relays in front of its nodes, so its links cannot be cut or slowed; start the lab with links (`quorumlock lab up --links`, or LabSpec.links)"
    )]
    NoLinks,
    #[error("the relay of {node} (control port {port}) failed: {source}")]
    Relay {
        node: String,
        port: u16,
        source: RelayError,
    },
    #[error("the relay of {node} exited during start-up: {last_log_line} (full log: {log})")]
    RelayExited {
        node: String,
        log: PathBuf,
        last_log_line: String,
    },
    #[error("cannot create the lab's TLS certificates: {0}")]
    Certificates(String),
    #[error("the lab's TLS files cannot be used: {0}")]
    Tls(#[from] crate::ConfigError),
    #[error(
        "port {port} (for {node}) is already in use; pick another --base-port (this lab needs {needed} consecutive ports) or leave --base-port out to use free ports"
    )]
    PortTaken {
        port: u16,
        node: String,
        needed: usize,
    },
    #[error(
        "a lab is already running in {dir} (PIDs {pids:?}); stop it with `quorumlock lab down` or use another --lab-dir"
    )]
    AlreadyRunning { dir: PathBuf, pids: Vec<u32> },
    #[error("no lab in {dir} ({STATE_FILE} not found); start one with `quorumlock lab up`")]
    NoLab { dir: PathBuf },
    #[error(
        "lab state file {path} cannot be used: {message}; if no lab is running there, delete the file"
    )]
    State { path: PathBuf, message: String },
    #[error("cannot {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("cannot start redis-server for {node}: {source}")]
    Spawn { node: String, source: io::Error },
    #[error("redis-server for {node} exited during start-up: {last_log_line} (full log: {log})")]
    Exited {
        node: String,
        log: PathBuf,
        last_log_line: String,
    },
    #[error("lab not ready after {waited_ms} ms: {pending}; the logs are under {dir}")]
    NotReady {
        waited_ms: u128,
        pending: String,
        dir: PathBuf,
    },
    #[error(
        "group index {group} is out of range: this lab has {groups} groups, g1..g{groups} (indexes count from 0)"
    )]
    NoSuchGroup { group: usize, groups: usize },
    #[error(
        "shard index {shard} is out of range: each group of this lab has {shards} shards, s1..s{shards} (indexes count from 0)"
    )]
    NoSuchShard { shard: usize, shards: usize },
    #[error(
        "{group} is a Redis Cluster of {shards} shards, so it has no single master: name a shard (`--shard 1..{shards}`, or the lab's *_primary methods)"
    )]
    ShardRequired { group: String, shards: usize },
    #[error(
        "this lab's groups are not Redis Clusters, so they have no shards; start one with `quorumlock lab up --cluster`"
    )]
    NotCluster,
    #[error("cannot find the current master of {group}: {reason}; check `quorumlock lab status`")]
    NoMaster { group: String, reason: String },
    #[error("{command} on {node} failed: {reason}")]
    Command {
        node: String,
        command: String,
        reason: String,
    },
    #[error("cannot admit {node} to the vote: {reason}")]
    Admit { node: String, reason: String },
    #[error(
        "{node} (port {port}) is not running; if Sentinel has not promoted a replica yet, wait a moment, or bring the node back with `quorumlock lab restart {number}`"
    )]
    NotRunning {
        node: String,
        port: u16,
        number: usize,
    },
    #[error(
        "{node} (port {port}) is not running; if the cluster has not promoted a replica yet, wait a moment (that needs most of the group's primaries alive), or bring the node back with `quorumlock lab restart {group} --shard {shard}`"
    )]
    PrimaryNotRunning {
        node: String,
        port: u16,
        /// 1-based, as on the command line.
        group: usize,
        /// 1-based, as on the command line.
        shard: usize,
    },
    #[error("cannot signal {node} (PID {pid}): {source}")]
    Signal {
        node: String,
        pid: u32,
        source: io::Error,
    },
    #[error(
        "{node} (PID {pid}) is still running {waited_ms} ms after SIGKILL; check it with `ps -p {pid}`"
    )]
    StillRunning {
        node: String,
        pid: u32,
        waited_ms: u128,
    },
}

/// What to start. [`LabSpec::new`] gives five groups of master + replica under three Sentinels.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LabSpec {
    /// Number of master groups, named g1..gN.
    pub groups: usize,
    /// Replicas per group.
    pub replicas: usize,
    /// Sentinels watching every group; 0 starts plain masters that clients reach directly.
    pub sentinels: usize,
    /// First port of a consecutive block (layout in the module docs); `None` uses free ports.
    pub base_port: Option<u16>,
    /// Where configs, logs, `lab.json` and `quorumlock.toml` go.
    pub dir: PathBuf,
    /// Silence after which a Sentinel calls a master down.
    pub down_after_ms: u64,
    /// Sentinel failover timeout; also how long before a failed failover is retried.
    pub failover_timeout_ms: u64,
    /// Password every node (and Sentinel) requires; written into the topology.
    #[serde(default)]
    pub password: Option<String>,
    /// TLS only, with mutual authentication, under a CA generated in `<dir>/tls/`.
    #[serde(default)]
    pub tls: bool,
    /// The longest TTL the masters grant: the lock policy they are admitted under, and the
    /// topology's `max_ttl_ms`.
    #[serde(default = "default_max_ttl_ms")]
    pub max_ttl_ms: u64,
    /// With replicas: `min-replicas-to-write 1` and this `min-replicas-max-lag` (seconds) on
    /// every data node, so a master cut off from its replica stops taking writes within a
    /// bounded window that the policy's quarantine covers ([`LabSpec::new`]:
    /// [`LAB_MIN_REPLICAS_MAX_LAG_S`]). A master whose replicas are all gone then refuses
    /// writes (`NOREPLICAS`): a promoted replica takes writes once it has a replica again
    /// ([`Lab::rejoin`]). `None` leaves the window unbounded, which `health` flags: for
    /// labs that need that unsafe shape.
    #[serde(default)]
    pub min_replicas_max_lag_s: Option<u64>,
    /// A relay in front of every data node, so that links can be cut and slowed
    /// ([`Lab::partition`], [`Lab::heal`], [`Lab::slow`]); layout in the module docs. Not
    /// with TLS: the relay tells links apart by the commands they carry.
    #[serde(default)]
    pub links: bool,
    /// The `quorumlock` executable that runs each relay (`quorumlock lab relay`); required
    /// with `links`. The CLI passes itself; tests pass `env!("CARGO_BIN_EXE_quorumlock")`.
    #[serde(default)]
    pub binary: Option<PathBuf>,
    /// Each group a Redis Cluster of this shape instead of a master watched by Sentinels
    /// (module docs, "Cluster labs"); needs `sentinels: 0`, and neither links nor TLS.
    /// `replicas` is then the number of replicas of each shard's primary.
    #[serde(default)]
    pub cluster: Option<ClusterShape>,
    /// Acknowledged mode: the masters' policy names their replicas, every one of which
    /// acknowledges a grant before it counts, and a promoted replica votes at once
    /// (docs/safety.md, "Acknowledged mode"). Needs replicas and Sentinel groups.
    #[serde(default)]
    pub acknowledged: bool,
}

/// The lab's `min-replicas-max-lag`: short, so the write window (and with it a promoted
/// replica's quarantine) stays short, and a whole second above the replicas' once-a-second
/// acknowledgements.
pub const LAB_MIN_REPLICAS_MAX_LAG_S: u64 = 1;

fn default_max_ttl_ms() -> u64 {
    crate::DEFAULT_MAX_TTL_MS
}

impl LabSpec {
    /// Five groups, one replica each, three Sentinels, free ports, fast failure detection,
    /// and masters that stop taking writes within a second of losing their replica.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        LabSpec {
            groups: 5,
            replicas: 1,
            sentinels: 3,
            base_port: None,
            dir: dir.into(),
            down_after_ms: 500,
            failover_timeout_ms: 2000,
            password: None,
            tls: false,
            max_ttl_ms: crate::DEFAULT_MAX_TTL_MS,
            min_replicas_max_lag_s: Some(LAB_MIN_REPLICAS_MAX_LAG_S),
            links: false,
            binary: None,
            cluster: None,
            acknowledged: false,
        }
    }

    /// Whether its masters take writes only while a replica acknowledges them
    /// (`min-replicas-to-write 1`).
    fn writes_need_replica(&self) -> bool {
        self.replicas > 0 && self.min_replicas_max_lag_s.is_some()
    }

    /// Shards per group: 1 unless the groups are Redis Clusters.
    fn shards(&self) -> usize {
        self.cluster.map_or(1, |shape| shape.shards)
    }

    /// The lock policy the lab admits its masters under.
    pub fn policy(&self) -> Policy {
        let mut write_window_ms = match self.min_replicas_max_lag_s {
            Some(lag) if self.replicas > 0 => Policy::write_window_for(lag),
            _ => 0,
        };
        // A Cluster primary cut off from most of the others takes writes until its node
        // timeout runs out, and a second more covers the cron that notices (as `health`
        // checks).
        if self.cluster.is_some() {
            write_window_ms = write_window_ms.max(self.down_after_ms.saturating_add(1_000));
        }
        Policy {
            max_ttl_ms: self.max_ttl_ms,
            write_window_ms,
            acked_replicas: if self.acknowledged {
                u32::try_from(self.replicas).unwrap_or(u32::MAX)
            } else {
                0
            },
        }
    }

    fn node_count(&self) -> usize {
        self.data_node_count() + self.sentinels
    }

    fn data_node_count(&self) -> usize {
        self.groups * self.shards() * (1 + self.replicas)
    }

    /// Ports the lab takes: one per process, with links a real port and a control port
    /// more per data node, and in a cluster lab a bus port more per node.
    fn port_count(&self) -> usize {
        let relays = if self.links {
            self.data_node_count()
        } else {
            0
        };
        let buses = if self.cluster.is_some() {
            self.data_node_count()
        } else {
            0
        };
        self.node_count() + 2 * relays + buses
    }

    /// Processes the lab starts, relays included.
    fn process_count(&self) -> usize {
        let relays = if self.links {
            self.data_node_count()
        } else {
            0
        };
        self.node_count() + relays
    }

    fn validate(&self) -> Result<(), LabError> {
        let invalid = |message: String| Err(LabError::InvalidSpec(message));
        if self.groups == 0 {
            return invalid("groups must be at least 1 (5 is the usual quorum setup)".into());
        }
        if let Some(shape) = self.cluster {
            shape.validate()?;
            if self.sentinels > 0 {
                return invalid(format!(
                    "a cluster lab has no Sentinels (each cluster fails over by itself); set sentinels to 0, not {}",
                    self.sentinels
                ));
            }
            if self.links || self.tls {
                return invalid(
                    "a cluster lab takes neither links nor tls: its nodes announce their own ports on a plain cluster bus"
                        .into(),
                );
            }
            if self.process_count() > MAX_NODES {
                return invalid(format!(
                    "{} groups x {} shards x (1 + {} replicas) is {} processes; the lab allows at most {MAX_NODES}",
                    self.groups,
                    shape.shards,
                    self.replicas,
                    self.process_count()
                ));
            }
        }
        if self.process_count() > MAX_NODES {
            let relays = if self.links { " (+ a relay each)" } else { "" };
            return invalid(format!(
                "{} groups x (1 + {} replicas){relays} + {} Sentinels is {} processes; the lab allows at most {MAX_NODES}",
                self.groups,
                self.replicas,
                self.sentinels,
                self.process_count()
            ));
        }
        if self.links {
            if self.tls {
                return invalid(
                    "links cannot be combined with tls: the relays tell clients, replicas and Sentinels apart by the commands they send, which TLS hides"
                        .into(),
                );
            }
            match &self.binary {
                None => {
                    return invalid(
                        "binary must name the quorumlock executable when links is set: it runs the relay in front of every node (`quorumlock lab relay`)"
                            .into(),
                    );
                }
                Some(binary) if !binary.is_file() => {
                    return invalid(format!(
                        "binary {} (the quorumlock executable that runs the relays) is not a file",
                        binary.display()
                    ));
                }
                Some(_) => {}
            }
        }
        if self.min_replicas_max_lag_s == Some(0) {
            return invalid(
                "min_replicas_max_lag_s must be above 0: Redis turns min-replicas-to-write off at a lag of 0 (leave it unset to opt out)"
                    .into(),
            );
        }
        if self.down_after_ms == 0 || self.failover_timeout_ms == 0 {
            return invalid("down_after_ms and failover_timeout_ms must be above 0".into());
        }
        // Redis config files and AUTH split on whitespace; quotes would survive as text.
        if let Some(password) = &self.password
            && (password.is_empty()
                || password
                    .chars()
                    .any(|c| c.is_whitespace() || c.is_control() || c == '"' || c == '\\'))
        {
            return invalid(
                "the password must be non-empty, without spaces, quotes, backslashes or control characters"
                    .into(),
            );
        }
        Ok(())
    }
}

/// The role a process was started in. Failovers change roles; [`NodeStatus::role`] has the
/// current one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeKind {
    Master,
    Replica,
    Sentinel,
}

impl fmt::Display for NodeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NodeKind::Master => "master",
            NodeKind::Replica => "replica",
            NodeKind::Sentinel => "sentinel",
        })
    }
}

/// One data node (master or replica) of a group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Node {
    /// 0-based group index (group `g{group + 1}`).
    pub group: usize,
    /// 0-based shard index in a cluster lab (shard `s{shard + 1}`); `None` otherwise.
    pub shard: Option<usize>,
    /// The role it was started in.
    pub kind: NodeKind,
    /// Where `redis-server` listens (the lab's own connections use it).
    pub port: u16,
    /// Where replicas, Sentinels and clients reach it: its relay's port in a lab with links,
    /// else `port`.
    pub public_port: u16,
    pub pid: u32,
}

impl Node {
    /// `127.0.0.1:<port>`, the node itself.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `127.0.0.1:<public_port>`, the address Sentinel reports and clients use.
    pub fn public_address(&self) -> String {
        format!("127.0.0.1:{}", self.public_port)
    }
}

/// One row of [`Lab::status`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeStatus {
    /// Process name, e.g. `g2-replica1` or `sentinel3`.
    pub name: String,
    /// 0-based group index; `None` for Sentinels, which watch every group.
    pub group: Option<usize>,
    /// 0-based shard index of a node of a cluster lab; `None` otherwise.
    pub shard: Option<usize>,
    /// The role it was started in.
    pub kind: NodeKind,
    /// Where the process listens.
    pub port: u16,
    /// Where everyone else reaches it (its relay's port in a lab with links, else `port`).
    pub public_port: u16,
    pub pid: u32,
    pub alive: bool,
    /// Stopped with SIGSTOP by [`Lab::freeze`].
    pub frozen: bool,
    /// `master`, `replica` or `sentinel` as the process reports it now; `None` if it did not
    /// answer (dead or frozen).
    pub role: Option<String>,
    /// For a replica: the (public) port of the master it replicates from.
    pub replica_of: Option<u16>,
    /// The relay in front of a data node of a lab with links.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relay: Option<RelayView>,
}

/// The relay in front of a node, as [`Lab::status`] shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RelayView {
    /// Where it listens (the node's public port).
    pub port: u16,
    pub control_port: u16,
    pub pid: u32,
    pub alive: bool,
    /// What it reported on its control port; `None` if it did not answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<RelayState>,
}

/// A relay's switches and open links.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RelayState {
    /// The link classes it holds, by name (`clients`, `replica`, `sentinels`).
    pub cut: Vec<String>,
    pub latency_ms: u64,
    pub jitter_ms: u64,
    /// Open links of each class.
    pub clients: usize,
    pub replicas: usize,
    pub sentinels: usize,
}

impl From<RelayStatus> for RelayState {
    fn from(status: RelayStatus) -> Self {
        RelayState {
            cut: status
                .cut
                .iter()
                .map(|class| class.name().to_string())
                .collect(),
            latency_ms: millis(status.latency),
            jitter_ms: millis(status.jitter),
            clients: status.clients,
            replicas: status.replicas,
            sentinels: status.sentinels,
        }
    }
}

/// A running lab. Started with [`Lab::start`] it is owned: dropping it kills every process.
/// Attached with [`Lab::open`] it is borrowed: dropping it leaves the processes running.
pub struct Lab {
    state: LabState,
    /// Processes this process spawned; they must be waited on or they linger as zombies.
    children: HashMap<u32, Child>,
    owned: bool,
    /// How the lab's own client reaches the nodes (password, TLS).
    control: resp::Control,
}

/// How far a node must have come before a wait is over.
#[derive(Clone, Copy)]
enum Readiness {
    /// Answers PING.
    Answers,
    /// Masters answer, replicas have a live link to their master, Sentinels see every group.
    Serving,
}

impl Lab {
    /// Starts every process, waits until the lab is really usable (replication links up,
    /// Sentinels agreeing on every master), and writes `lab.json` and `quorumlock.toml`.
    /// On any failure everything already started is killed before the error is returned.
    pub async fn start(spec: LabSpec) -> Result<Lab, LabError> {
        let redis = find_redis_server().await?;
        spec.validate()?;
        let dir = prepare_dir(&spec.dir)?;
        refuse_if_running(&dir)?;
        let spec = LabSpec { dir, ..spec };
        if spec.tls {
            write_certificates(&spec.dir)?;
        }
        let control = resp::Control::new(&spec)?;
        let mut attempt = 1;
        loop {
            match Lab::start_once(&spec, &redis, &control).await {
                // Free ports are released before redis-server binds them, so another process
                // (often a lab started at the same moment) can take one in between.
                Err(LabError::PortTaken { port, .. })
                    if spec.base_port.is_none() && attempt < FREE_PORT_ATTEMPTS =>
                {
                    tracing::debug!(port, attempt, "lab: a free port was taken; retrying");
                    attempt += 1;
                }
                outcome => return outcome,
            }
        }
    }

    async fn start_once(
        spec: &LabSpec,
        redis: &Path,
        control: &resp::Control,
    ) -> Result<Lab, LabError> {
        let ports = match spec.base_port {
            Some(base) => consecutive_ports(base, spec.port_count())?,
            None => free_ports(spec.port_count())?,
        };
        let slots = layout(spec, &ports);
        if spec.base_port.is_some() {
            ensure_free(&slots, spec.port_count())?;
        }
        let confs = render_confs(spec, &slots);
        let deadline = Instant::now()
            + if spec.cluster.is_some() {
                CLUSTER_START_TIMEOUT
            } else {
                START_TIMEOUT
            };

        // From here on `lab` owns every spawned process: an early return drops it, which kills them.
        let mut lab = Lab {
            state: LabState {
                spec: spec.clone(),
                nodes: Vec::new(),
                frozen: BTreeSet::new(),
            },
            children: HashMap::new(),
            owned: true,
            control: control.clone(),
        };
        if spec.cluster.is_some() {
            // Cluster nodes start on their own; they become a cluster afterwards.
            for (slot, conf) in slots.iter().zip(&confs) {
                lab.spawn_new(redis, slot, conf)?;
            }
            lab.write_state()?;
            let all: Vec<usize> = (0..lab.state.nodes.len()).collect();
            lab.wait_until(&all, Readiness::Answers, deadline).await?;
            lab.form_clusters(deadline).await?;
            lab.admit_cluster().await?;
            write_file(&lab.config_path(), &lab.topology().to_toml())?;
            return Ok(lab);
        }
        let (masters, others): (Vec<_>, Vec<_>) = slots
            .iter()
            .zip(&confs)
            .partition(|(slot, _)| slot.kind == NodeKind::Master);
        // Replicas connect from a once-a-second cron, so starting them only after their masters
        // (and the masters' relays) listen saves up to a second of waiting.
        for (slot, conf) in masters {
            lab.spawn_new(redis, slot, conf)?;
        }
        lab.write_state()?;
        let master_indexes: Vec<usize> = (0..lab.state.nodes.len()).collect();
        lab.wait_until(&master_indexes, Readiness::Answers, deadline)
            .await?;
        for (slot, conf) in others {
            lab.spawn_new(redis, slot, conf)?;
        }
        lab.write_state()?;
        let all: Vec<usize> = (0..lab.state.nodes.len()).collect();
        lab.wait_until(&all, Readiness::Serving, deadline).await?;
        lab.admit_masters().await?;
        lab.wait_for_policy(deadline).await?;
        let config_path = lab.config_path();
        write_file(&config_path, &lab.topology().to_toml())?;
        Ok(lab)
    }

    /// Stops the listed relay and returns once its PID is gone.
    async fn stop_relay(&mut self, index: usize) -> Result<(), LabError> {
        self.kill_relay(index)?;
        let started = Instant::now();
        while self.is_relay_running(index) {
            if started.elapsed() > EXIT_TIMEOUT {
                let record = &self.state.nodes[index];
                let pid = record.relay.as_ref().map_or(0, |relay| relay.pid);
                return Err(LabError::StillRunning {
                    node: format!("{}'s relay", record.name),
                    pid,
                    waited_ms: started.elapsed().as_millis(),
                });
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
        Ok(())
    }

    /// The masters were just created empty, so no grant can have been missed: let them vote
    /// at once under the lab's lock policy instead of sitting out the quarantine that
    /// protects a real restart. The policy replicates to the replicas.
    async fn admit_masters(&self) -> Result<(), LabError> {
        let command = self
            .state
            .spec
            .policy()
            .admit_command(crate::DEFAULT_KEY_PREFIX);
        let args: Vec<&str> = command.iter().map(String::as_str).collect();
        for record in self.records(NodeKind::Master) {
            resp::call(&self.control, record.port, &args, CONTROL_TIMEOUT)
                .await
                .map_err(|reason| LabError::Admit {
                    node: record.name.clone(),
                    reason,
                })?;
        }
        Ok(())
    }

    /// Waits until every replica holds the lock policy: a replica promoted before it arrived
    /// would have none, and with `min-replicas-to-write` it could not adopt one either. A
    /// replica that has just synced gets the stream from its first acknowledgement, up to a
    /// second later.
    async fn wait_for_policy(&mut self, deadline: Instant) -> Result<(), LabError> {
        let policy_key = Policy::key(crate::DEFAULT_KEY_PREFIX);
        let replicas: Vec<usize> = (0..self.state.nodes.len())
            .filter(|&index| self.state.nodes[index].kind == NodeKind::Replica)
            .collect();
        self.poll_ready(&replicas, deadline, async |lab: &Lab| {
            for &index in &replicas {
                let record = &lab.state.nodes[index];
                let args = ["EXISTS", policy_key.as_str()];
                match resp::call(&lab.control, record.port, &args, CONTROL_TIMEOUT).await {
                    Ok(reply) if reply.integer() == Some(1) => {}
                    Ok(_) => return Some(format!("{} has no lock policy yet", record.name)),
                    Err(reason) => return Some(format!("{}: {reason}", record.name)),
                }
            }
            None
        })
        .await
    }

    /// Attaches to a lab started by an earlier process, from `<dir>/lab.json`. Dropping the
    /// returned value leaves the lab running; use [`Lab::stop`] to end it.
    pub fn open(dir: &Path) -> Result<Lab, LabError> {
        let state = read_state(dir)?;
        let control = resp::Control::new(&state.spec)?;
        Ok(Lab {
            state,
            children: HashMap::new(),
            owned: false,
            control,
        })
    }

    /// Lets the lab outlive this value (and this process); the state file stays for
    /// [`Lab::open`].
    pub fn detach(mut self) {
        self.owned = false;
    }

    /// Kills every process (relays included) by PID, waits until they are gone and removes
    /// the state file.
    pub async fn stop(mut self) -> Result<(), LabError> {
        let mut first_error = None;
        for index in 0..self.state.nodes.len() {
            if let Err(error) = self.kill_and_wait(index).await {
                first_error.get_or_insert(error);
            }
            if let Err(error) = self.stop_relay(index).await {
                first_error.get_or_insert(error);
            }
        }
        // A failed kill keeps the state file so that `lab down` can be retried.
        self.owned = false;
        if let Some(error) = first_error {
            return Err(error);
        }
        remove_if_present(&self.state_path())
    }

    /// The topology clients should use: Sentinel groups, direct groups without Sentinels, or
    /// Cluster groups named by every node (any one is a seed). The first two lead to the
    /// public ports, through the relays of a lab with links.
    pub fn topology(&self) -> Topology {
        if self.state.spec.cluster.is_some() {
            let groups = (0..self.state.spec.groups)
                .map(|group| GroupConfig {
                    password: self.state.spec.password.clone(),
                    ..GroupConfig::cluster(
                        &group_name(group),
                        self.cluster_seeds(group)
                            .unwrap_or_default()
                            .iter()
                            .map(|(host, port)| format!("{host}:{port}"))
                            .collect(),
                    )
                })
                .collect();
            return Topology {
                max_ttl_ms: self.state.spec.max_ttl_ms,
                ..Topology::new(groups)
            };
        }
        let sentinels: Vec<String> = self
            .records(NodeKind::Sentinel)
            .map(|node| format!("127.0.0.1:{}", node.port))
            .collect();
        let password = self.state.spec.password.clone();
        let groups = self
            .records(NodeKind::Master)
            .enumerate()
            .map(|(index, master)| {
                let name = group_name(index);
                let group = if sentinels.is_empty() {
                    GroupConfig::direct(&name, &format!("127.0.0.1:{}", master.public_port()))
                } else {
                    GroupConfig {
                        sentinel_password: password.clone(),
                        ..GroupConfig::sentinel(&name, sentinels.clone(), &name)
                    }
                };
                GroupConfig {
                    password: password.clone(),
                    ..group
                }
            })
            .collect();
        Topology {
            tls: self.state.spec.tls.then(|| tls_settings(self.dir())),
            max_ttl_ms: self.state.spec.max_ttl_ms,
            ..Topology::new(groups)
        }
    }

    /// `<dir>/quorumlock.toml`, written by [`Lab::start`].
    pub fn config_path(&self) -> PathBuf {
        self.dir().join(CONFIG_FILE)
    }

    /// The lab directory (absolute).
    pub fn dir(&self) -> &Path {
        &self.state.spec.dir
    }

    /// The settings the lab was started with.
    pub fn spec(&self) -> &LabSpec {
        &self.state.spec
    }

    /// The current master of a group, as a live Sentinel reports it (a group without Sentinels
    /// has exactly one master: the node started as one).
    pub async fn master_of(&self, group: usize) -> Result<Node, LabError> {
        let index = self.master_index(group).await?;
        Ok(self.node(index, group))
    }

    /// Cuts one class of links of the group's current master, at its relay: the links stay
    /// open but carry nothing, as in a network partition, until [`Lab::heal`]. Cutting
    /// `Replica` and `Sentinel` isolates the master from its replicas and Sentinels while
    /// clients still reach it: Sentinel promotes a replica, and the old master goes on
    /// answering clients that address it directly. Needs a lab with links.
    pub async fn partition(&self, group: usize, class: LinkClass) -> Result<Node, LabError> {
        self.require_links()?;
        let index = self.master_index(group).await?;
        self.relay_command(index, &format!("cut {}", class.name()))
            .await?;
        Ok(self.node(index, group))
    }

    /// Heals every node of the group: lifts every cut (the links that were cut are reset, so
    /// their peers reconnect) and sets their latency back to zero. Returns the nodes healed.
    /// Every relay of the group is tried; the first failure is returned after that.
    pub async fn heal(&self, group: usize) -> Result<Vec<Node>, LabError> {
        self.require_links()?;
        self.check_group(group)?;
        let mut healed = Vec::new();
        let mut first_error = None;
        for index in self.group_indexes(group).collect::<Vec<_>>() {
            let outcome = async {
                self.relay_command(index, "heal").await?;
                self.relay_command(index, "latency 0 0").await
            };
            match outcome.await {
                Ok(_) => healed.push(self.node(index, group)),
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        match first_error {
            Some(error) => Err(error),
            None => Ok(healed),
        }
    }

    /// Delays every chunk the client links of the group's current master carry, both ways,
    /// by `delay` ± `jitter` (in whole milliseconds, each at most [`relay::MAX_LATENCY`]);
    /// replica and Sentinel links are not slowed. [`Lab::heal`] (or zero and zero) ends it.
    pub async fn slow(
        &self,
        group: usize,
        delay: Duration,
        jitter: Duration,
    ) -> Result<Node, LabError> {
        self.require_links()?;
        for (field, value) in [("delay", delay), ("jitter", jitter)] {
            if value > relay::MAX_LATENCY {
                return Err(LabError::InvalidArgument {
                    field,
                    reason: format!(
                        "{} ms is above the relay's limit of {} ms",
                        value.as_millis(),
                        relay::MAX_LATENCY.as_millis()
                    ),
                });
            }
        }
        let index = self.master_index(group).await?;
        let command = format!("latency {} {}", delay.as_millis(), jitter.as_millis());
        self.relay_command(index, &command).await?;
        Ok(self.node(index, group))
    }

    /// Runs one command on the group's current master, through its own port (never a relay,
    /// so a partition does not stop it), and returns the reply as text: a status, bulk string
    /// or integer as is, anything else in its debug form. An error reply is an error.
    pub async fn run_on_master(&self, group: usize, args: &[&str]) -> Result<String, LabError> {
        let index = self.running_master_index(group).await?;
        let record = &self.state.nodes[index];
        let reply = resp::call(&self.control, record.port, args, CONTROL_TIMEOUT)
            .await
            .map_err(|reason| LabError::Command {
                node: record.name.clone(),
                command: args.first().copied().unwrap_or_default().to_string(),
                reason,
            })?;
        Ok(match (&reply, reply.text()) {
            (_, Some(text)) => text.to_string(),
            (resp::Reply::Integer(value), None) => value.to_string(),
            (other, None) => format!("{other:?}"),
        })
    }

    fn require_links(&self) -> Result<(), LabError> {
        if self.state.spec.links {
            Ok(())
        } else {
            Err(LabError::NoLinks)
        }
    }

    /// Sends one control command to the relay of a node.
    async fn relay_command(&self, index: usize, command: &str) -> Result<String, LabError> {
        let record = &self.state.nodes[index];
        let Some(relay) = &record.relay else {
            return Err(LabError::NoLinks);
        };
        relay::control(relay.control_port, command)
            .await
            .map_err(|source| LabError::Relay {
                node: record.name.clone(),
                port: relay.control_port,
                source,
            })
    }

    /// SIGKILLs the current master of a group and waits until the process is gone.
    pub async fn kill(&mut self, group: usize) -> Result<Node, LabError> {
        let index = self.running_master_index(group).await?;
        self.kill_index(index, group).await
    }

    async fn kill_index(&mut self, index: usize, group: usize) -> Result<Node, LabError> {
        let node = self.node(index, group);
        self.kill_and_wait(index).await?;
        self.state.frozen.remove(&node.port);
        self.write_state()?;
        Ok(node)
    }

    /// SIGSTOPs the current master of a group: its sockets stay open but it answers nothing.
    pub async fn freeze(&mut self, group: usize) -> Result<Node, LabError> {
        let index = self.running_master_index(group).await?;
        self.freeze_index(index, group)
    }

    fn freeze_index(&mut self, index: usize, group: usize) -> Result<Node, LabError> {
        self.signal(index, libc::SIGSTOP)?;
        let node = self.node(index, group);
        self.state.frozen.insert(node.port);
        self.write_state()?;
        Ok(node)
    }

    /// SIGCONTs every frozen node of a group; returns them (empty if none was frozen).
    pub async fn thaw(&mut self, group: usize) -> Result<Vec<Node>, LabError> {
        self.check_group(group)?;
        let frozen: Vec<usize> = self
            .group_indexes(group)
            .filter(|&index| self.state.frozen.contains(&self.state.nodes[index].port))
            .collect();
        let mut thawed = Vec::new();
        for index in frozen {
            if self.is_running(index) {
                self.signal(index, libc::SIGCONT)?;
            }
            self.state.frozen.remove(&self.state.nodes[index].port);
            thawed.push(self.node(index, group));
        }
        self.write_state()?;
        Ok(thawed)
    }

    /// Starts every dead node of a group again, on its port with its config (which Sentinel
    /// may have rewritten); without persistence it comes back empty. If no node of the group
    /// is dead, the current master is killed and started again. Returns once they answer PING.
    /// A node keeps its relay, with its cuts and latency; a relay that died is started again.
    pub async fn restart(&mut self, group: usize) -> Result<Vec<Node>, LabError> {
        self.check_group(group)?;
        let mut dead: Vec<usize> = self
            .group_indexes(group)
            .filter(|&index| !self.is_running(index))
            .collect();
        if dead.is_empty() {
            let index = self.running_master_index(group).await?;
            self.kill_and_wait(index).await?;
            dead.push(index);
        }
        self.restart_indexes(&dead, group).await
    }

    async fn restart_indexes(
        &mut self,
        dead: &[usize],
        group: usize,
    ) -> Result<Vec<Node>, LabError> {
        let redis = find_redis_server().await?;
        for &index in dead {
            self.respawn(&redis, index)?;
            if self.state.nodes[index].relay.is_some() && !self.is_relay_running(index) {
                self.respawn_relay(index)?;
            }
        }
        self.write_state()?;
        self.wait_until(dead, Readiness::Answers, Instant::now() + RESTART_TIMEOUT)
            .await?;
        Ok(dead.iter().map(|&index| self.node(index, group)).collect())
    }

    /// Makes every running data node of a Sentinel group that reports itself master, other
    /// than the master the Sentinels name, a replica of that master, as Sentinel itself does
    /// only some 8 to 18 s after an old master comes back. With `min-replicas-to-write` a
    /// promoted replica takes writes only once it has a replica again, so after
    /// [`Lab::kill`] and [`Lab::restart`] this brings the group back sooner. Returns the
    /// nodes told to replicate.
    pub async fn rejoin(&self, group: usize) -> Result<Vec<Node>, LabError> {
        let master = self.master_index(group).await?;
        let master_port = self.state.nodes[master].public_port().to_string();
        let mut told = Vec::new();
        for index in self.group_indexes(group).collect::<Vec<_>>() {
            let record = &self.state.nodes[index];
            if index == master || !self.is_running(index) {
                continue;
            }
            let role = resp::call(&self.control, record.port, &["ROLE"], CONTROL_TIMEOUT)
                .await
                .ok()
                .and_then(|reply| parse_role(&reply));
            if !matches!(role, Some((ref role, _)) if role == "master") {
                continue;
            }
            let args = ["REPLICAOF", "127.0.0.1", master_port.as_str()];
            resp::call(&self.control, record.port, &args, CONTROL_TIMEOUT)
                .await
                .map_err(|reason| LabError::Command {
                    node: record.name.clone(),
                    command: "REPLICAOF".to_string(),
                    reason,
                })?;
            told.push(self.node(index, group));
        }
        Ok(told)
    }

    /// Every process with its liveness and current role; a data node of a lab with links
    /// also shows its relay (PID, liveness, what is cut, its latency and open links).
    pub async fn status(&self) -> Vec<NodeStatus> {
        futures::future::join_all(self.state.nodes.iter().map(|record| self.status_of(record)))
            .await
    }

    /// The PID of every process the lab knows, dead or alive: the nodes, then their relays.
    pub fn pids(&self) -> Vec<u32> {
        let relays = self
            .state
            .nodes
            .iter()
            .filter_map(|node| node.relay.as_ref().map(|relay| relay.pid));
        self.state
            .nodes
            .iter()
            .map(|node| node.pid)
            .chain(relays)
            .collect()
    }

    async fn status_of(&self, record: &NodeRecord) -> NodeStatus {
        let relay = match &record.relay {
            Some(relay) => Some(relay_view(relay).await),
            None => None,
        };
        let alive = is_lab_process(record);
        let frozen = self.state.frozen.contains(&record.port);
        let role = if alive && !frozen {
            resp::call(&self.control, record.port, &["ROLE"], STATUS_TIMEOUT)
                .await
                .ok()
                .and_then(|reply| parse_role(&reply))
        } else {
            None
        };
        NodeStatus {
            name: record.name.clone(),
            group: record.group,
            shard: record.cluster.as_ref().map(|cluster| cluster.shard),
            kind: record.kind,
            port: record.port,
            public_port: record.public_port(),
            pid: record.pid,
            alive,
            frozen,
            replica_of: role.as_ref().and_then(|(_, master)| *master),
            role: role.map(|(role, _)| role),
            relay,
        }
    }

    fn state_path(&self) -> PathBuf {
        self.dir().join(STATE_FILE)
    }

    fn write_state(&self) -> Result<(), LabError> {
        let path = self.state_path();
        let text = serde_json::to_string_pretty(&self.state).map_err(|error| LabError::State {
            path: path.clone(),
            message: error.to_string(),
        })?;
        write_file(&path, &text)
    }

    fn records(&self, kind: NodeKind) -> impl Iterator<Item = &NodeRecord> {
        self.state
            .nodes
            .iter()
            .filter(move |node| node.kind == kind)
    }

    fn group_indexes(&self, group: usize) -> impl Iterator<Item = usize> + '_ {
        (0..self.state.nodes.len())
            .filter(move |&index| self.state.nodes[index].group == Some(group))
    }

    fn node(&self, index: usize, group: usize) -> Node {
        let record = &self.state.nodes[index];
        Node {
            group,
            shard: record.cluster.as_ref().map(|cluster| cluster.shard),
            kind: record.kind,
            port: record.port,
            public_port: record.public_port(),
            pid: record.pid,
        }
    }

    fn check_group(&self, group: usize) -> Result<(), LabError> {
        let groups = self.state.spec.groups;
        if group < groups {
            Ok(())
        } else {
            Err(LabError::NoSuchGroup { group, groups })
        }
    }

    /// Index of the node a live Sentinel names as the group's master.
    async fn master_index(&self, group: usize) -> Result<usize, LabError> {
        self.check_group(group)?;
        let service = group_name(group);
        if let Some(shape) = self.state.spec.cluster {
            return Err(LabError::ShardRequired {
                group: service,
                shards: shape.shards,
            });
        }
        let no_master = |reason: String| LabError::NoMaster {
            group: service.clone(),
            reason,
        };
        if self.state.spec.sentinels == 0 {
            return self
                .group_indexes(group)
                .find(|&index| self.state.nodes[index].kind == NodeKind::Master)
                .ok_or_else(|| no_master("the state file lists no master for it".into()));
        }
        let mut reasons = Vec::new();
        for sentinel in self.records(NodeKind::Sentinel) {
            if !is_lab_process(sentinel) {
                reasons.push(format!("{} is not running", sentinel.name));
                continue;
            }
            let args = ["SENTINEL", "get-master-addr-by-name", service.as_str()];
            let port = resp::call(&self.control, sentinel.port, &args, CONTROL_TIMEOUT)
                .await
                .and_then(|reply| parse_master_addr(&reply));
            match port {
                Ok(port) => {
                    return self
                        .group_indexes(group)
                        .find(|&index| self.state.nodes[index].public_port() == port)
                        .ok_or_else(|| {
                            no_master(format!(
                                "{} names 127.0.0.1:{port}, which is not a node of this group",
                                sentinel.name
                            ))
                        });
                }
                Err(error) => reasons.push(format!("{}: {error}", sentinel.name)),
            }
        }
        Err(no_master(reasons.join("; ")))
    }

    async fn running_master_index(&self, group: usize) -> Result<usize, LabError> {
        let index = self.master_index(group).await?;
        let record = &self.state.nodes[index];
        if is_lab_process(record) {
            Ok(index)
        } else {
            Err(LabError::NotRunning {
                node: record.name.clone(),
                port: record.port,
                number: group + 1,
            })
        }
    }

    fn is_running(&self, index: usize) -> bool {
        is_lab_process(&self.state.nodes[index])
    }

    fn is_relay_running(&self, index: usize) -> bool {
        self.state.nodes[index]
            .relay
            .as_ref()
            .is_some_and(is_relay_process)
    }

    /// SIGKILLs the node's relay if it is still ours, and reaps it if we are its parent.
    /// Synchronous so that `Drop` can use it.
    fn kill_relay(&mut self, index: usize) -> Result<(), LabError> {
        let record = &self.state.nodes[index];
        let Some(relay) = &record.relay else {
            return Ok(());
        };
        let pid = relay.pid;
        if is_relay_process(relay) {
            match send_signal(pid, libc::SIGKILL) {
                Err(source) if source.raw_os_error() == Some(libc::ESRCH) => {}
                Err(source) => {
                    return Err(LabError::Signal {
                        node: format!("{}'s relay", record.name),
                        pid,
                        source,
                    });
                }
                Ok(()) => {}
            }
        }
        if let Some(mut child) = self.children.remove(&pid) {
            let _ = child.wait();
        }
        Ok(())
    }

    /// Starts the relay of a data node whose slot has one.
    fn start_relay(&mut self, index: usize) -> Result<(), LabError> {
        let record = &self.state.nodes[index];
        let Some(relay) = &record.relay else {
            return Ok(());
        };
        let Some(binary) = &self.state.spec.binary else {
            return Err(LabError::InvalidSpec(
                "binary must name the quorumlock executable when links is set".into(),
            ));
        };
        let child = spawn_relay(binary, record, relay)?;
        let pid = child.id();
        self.children.insert(pid, child);
        if let Some(relay) = self.state.nodes[index].relay.as_mut() {
            relay.pid = pid;
        }
        Ok(())
    }

    fn respawn_relay(&mut self, index: usize) -> Result<(), LabError> {
        self.kill_relay(index)?;
        if let Some(relay) = &self.state.nodes[index].relay {
            remove_if_present(&relay.log)?;
        }
        self.start_relay(index)
    }

    fn signal(&self, index: usize, signal: libc::c_int) -> Result<(), LabError> {
        let record = &self.state.nodes[index];
        send_signal(record.pid, signal).map_err(|source| LabError::Signal {
            node: record.name.clone(),
            pid: record.pid,
            source,
        })
    }

    /// Sends SIGKILL if the process is still ours, and reaps it if we are its parent. Stays
    /// synchronous so that `Drop` can use it.
    fn kill_process(&mut self, index: usize) -> Result<(), LabError> {
        let pid = self.state.nodes[index].pid;
        if self.is_running(index) {
            match self.signal(index, libc::SIGKILL) {
                // It exited on its own between the check and the signal.
                Err(LabError::Signal { source, .. })
                    if source.raw_os_error() == Some(libc::ESRCH) => {}
                other => other?,
            }
        }
        if let Some(mut child) = self.children.remove(&pid) {
            // After SIGKILL this returns at once; an error means it was already reaped.
            let _ = child.wait();
        }
        Ok(())
    }

    async fn kill_and_wait(&mut self, index: usize) -> Result<(), LabError> {
        self.kill_process(index)?;
        let started = Instant::now();
        while self.is_running(index) {
            if started.elapsed() > EXIT_TIMEOUT {
                let record = &self.state.nodes[index];
                return Err(LabError::StillRunning {
                    node: record.name.clone(),
                    pid: record.pid,
                    waited_ms: started.elapsed().as_millis(),
                });
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
        Ok(())
    }

    fn spawn_new(&mut self, redis: &Path, slot: &Slot, conf_text: &str) -> Result<(), LabError> {
        let node_dir = self.dir().join(&slot.name);
        fs::create_dir_all(&node_dir).map_err(io_error("create node directory", &node_dir))?;
        let conf_name = match slot.kind {
            NodeKind::Sentinel => "sentinel.conf",
            _ => "redis.conf",
        };
        let conf = node_dir.join(conf_name);
        write_file(&conf, conf_text)?;
        let mut record = NodeRecord {
            name: slot.name.clone(),
            group: slot.group,
            kind: slot.kind,
            port: slot.port,
            pid: 0,
            conf,
            log: node_dir.join("redis.log"),
            relay: slot.relay.map(|ports| RelayRecord {
                public_port: ports.public,
                control_port: ports.control,
                pid: 0,
                log: node_dir.join("relay.log"),
            }),
            cluster: slot.cluster.map(|ports| ClusterRecord {
                shard: ports.shard,
                bus_port: ports.bus,
                node_id: String::new(),
            }),
        };
        // A node finding an earlier lab's nodes.conf would rejoin that lab's cluster.
        remove_if_present(&node_dir.join("nodes.conf"))?;
        // A leftover dump from an earlier lab in this directory would be loaded at start-up, and
        // an old log could make a start-up failure look like an earlier one.
        remove_if_present(&node_dir.join("dump.rdb"))?;
        remove_if_present(&record.log)?;
        if let Some(relay) = &record.relay {
            remove_if_present(&relay.log)?;
        }
        let child = spawn(redis, &record)?;
        record.pid = child.id();
        self.children.insert(record.pid, child);
        self.state.nodes.push(record);
        self.start_relay(self.state.nodes.len() - 1)
    }

    fn respawn(&mut self, redis: &Path, index: usize) -> Result<(), LabError> {
        // Reaps a node that died on its own, so its PID no longer counts as ours.
        self.kill_process(index)?;
        let record = &self.state.nodes[index];
        // A replica that synced through disk keeps a dump it would reload; the lab promises
        // restarted nodes come back empty.
        remove_if_present(&record.node_dir().join("dump.rdb"))?;
        let child = spawn(redis, record)?;
        let pid = child.id();
        let port = record.port;
        self.children.insert(pid, child);
        self.state.nodes[index].pid = pid;
        self.state.frozen.remove(&port);
        Ok(())
    }

    /// Polls until every listed node is ready, failing early if one of our children exits.
    async fn wait_until(
        &mut self,
        indexes: &[usize],
        readiness: Readiness,
        deadline: Instant,
    ) -> Result<(), LabError> {
        self.poll_ready(indexes, deadline, async |lab: &Lab| {
            lab.first_pending(indexes, readiness).await
        })
        .await
    }

    /// Polls `pending` (what is not ready yet, or `None`) until it answers `None` or the
    /// deadline passes, failing early if one of the nodes at `indexes` exits.
    async fn poll_ready(
        &mut self,
        indexes: &[usize],
        deadline: Instant,
        mut pending: impl AsyncFnMut(&Lab) -> Option<String>,
    ) -> Result<(), LabError> {
        let started = Instant::now();
        loop {
            self.check_not_exited(indexes)?;
            let Some(pending) = pending(self).await else {
                return Ok(());
            };
            if Instant::now() >= deadline {
                return Err(LabError::NotReady {
                    waited_ms: started.elapsed().as_millis(),
                    pending,
                    dir: self.dir().to_path_buf(),
                });
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    fn check_not_exited(&mut self, indexes: &[usize]) -> Result<(), LabError> {
        let needed = self.state.spec.port_count();
        for &index in indexes {
            let record = &self.state.nodes[index];
            if let Some(child) = self.children.get_mut(&record.pid)
                && let Ok(Some(_)) = child.try_wait()
            {
                self.children.remove(&record.pid);
                return Err(exit_error(record, needed));
            }
            let Some(relay) = &record.relay else { continue };
            if let Some(child) = self.children.get_mut(&relay.pid)
                && let Ok(Some(_)) = child.try_wait()
            {
                self.children.remove(&relay.pid);
                return Err(relay_exit_error(record, relay, needed));
            }
        }
        Ok(())
    }

    /// The first unmet condition, described for a "not ready" error. A node with a relay
    /// is not ready until the relay answers on its control port.
    async fn first_pending(&self, indexes: &[usize], readiness: Readiness) -> Option<String> {
        for &index in indexes {
            let record = &self.state.nodes[index];
            if let Some(relay) = &record.relay {
                let answer = tokio::time::timeout(
                    CONTROL_TIMEOUT,
                    relay::control(relay.control_port, "status"),
                )
                .await;
                match answer {
                    Ok(Ok(_)) => {}
                    Ok(Err(error)) => return Some(format!("{}'s relay: {error}", record.name)),
                    Err(_) => {
                        return Some(format!(
                            "{}'s relay did not answer on control port {} within {} ms",
                            record.name,
                            relay.control_port,
                            CONTROL_TIMEOUT.as_millis()
                        ));
                    }
                }
            }
            let result = match (readiness, record.kind) {
                (Readiness::Answers, _) => ping(&self.control, record.port).await,
                // A master that needs a replica to take writes is serving once it has one.
                (Readiness::Serving, NodeKind::Master) if self.state.spec.writes_need_replica() => {
                    good_replicas(&self.control, record.port).await
                }
                (Readiness::Serving, NodeKind::Master) => ping(&self.control, record.port).await,
                (Readiness::Serving, NodeKind::Replica) => {
                    replica_link_up(&self.control, record.port).await
                }
                (Readiness::Serving, NodeKind::Sentinel) => self.sentinel_sees_all(record).await,
            };
            if let Err(reason) = result {
                return Some(format!("{} (port {}): {reason}", record.name, record.port));
            }
        }
        None
    }

    /// True once the Sentinel is connected to every master and already knows the replicas and
    /// the other Sentinels, so that a failover can start without waiting for discovery.
    async fn sentinel_sees_all(&self, sentinel: &NodeRecord) -> Result<(), String> {
        let spec = &self.state.spec;
        for (group, master) in self.records(NodeKind::Master).enumerate() {
            let service = group_name(group);
            let reply = resp::call(
                &self.control,
                sentinel.port,
                &["SENTINEL", "MASTER", &service],
                CONTROL_TIMEOUT,
            )
            .await?;
            let fields = field_map(&reply);
            let field = |key: &str| fields.get(key).map(String::as_str).unwrap_or("?");
            let expected = [
                ("port", master.public_port().to_string()),
                ("flags", "master".to_string()),
                ("num-slaves", spec.replicas.to_string()),
                (
                    "num-other-sentinels",
                    spec.sentinels.saturating_sub(1).to_string(),
                ),
            ];
            for (key, want) in expected {
                if field(key) != want {
                    return Err(format!(
                        "{service} {key} is {}, waiting for {want}",
                        field(key)
                    ));
                }
            }
        }
        Ok(())
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        for index in 0..self.state.nodes.len() {
            if let Err(error) = self.kill_process(index) {
                tracing::warn!(%error, "lab: could not stop a process while dropping the lab");
            }
            if let Err(error) = self.kill_relay(index) {
                tracing::warn!(%error, "lab: could not stop a relay while dropping the lab");
            }
        }
        // The processes are gone, so a state file would only describe a dead lab.
        if let Err(error) = remove_if_present(&self.state_path()) {
            tracing::warn!(%error, "lab: could not remove the state file");
        }
    }
}

/// A relay as `lab status` shows it; a dead or silent relay has no state.
async fn relay_view(relay: &RelayRecord) -> RelayView {
    let alive = is_relay_process(relay);
    let state = if alive {
        tokio::time::timeout(STATUS_TIMEOUT, relay::control(relay.control_port, "status"))
            .await
            .ok()
            .and_then(Result::ok)
            .and_then(|answer| answer.parse::<RelayStatus>().ok())
            .map(RelayState::from)
    } else {
        None
    };
    RelayView {
        port: relay.public_port,
        control_port: relay.control_port,
        pid: relay.pid,
        alive,
        state,
    }
}
