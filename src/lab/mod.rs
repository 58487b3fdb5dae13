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
//!
//! Files: `spec` (what to start, and its checks), `error`, `nodes` (what callers see of the
//! processes), `faults` (breaking and repairing), `readiness` (waiting until usable); this
//! file starts, attaches to and stops a lab and keeps its processes.

mod certificates;
mod cluster;
mod confs;
mod error;
mod faults;
pub mod install;
mod nodes;
mod probe;
mod process;
mod readiness;
pub mod relay;
pub mod resp;
mod spec;
mod state;

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use crate::{GroupConfig, Topology};

pub use cluster::{ClusterShape, Interruption, MigrationReport};
pub use error::LabError;
pub use nodes::{Node, NodeKind, NodeStatus, RelayState, RelayView};
pub use spec::{LAB_MIN_REPLICAS_MAX_LAG_S, LabSpec};

use certificates::{tls_settings, write_certificates};
use confs::{Slot, consecutive_ports, group_name, layout, render_confs};
use probe::parse_master_addr;
use process::{
    ensure_free, find_redis_server, free_ports, is_lab_process, is_relay_process, send_signal,
    spawn, spawn_relay,
};
use readiness::Readiness;
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
