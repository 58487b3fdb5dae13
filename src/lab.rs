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
//! Security options: with a password every node requires it (`requirepass`, `masterauth`,
//! Sentinel's `auth-pass` and `sentinel-pass`). With TLS the lab writes a private CA and
//! certificates to `<dir>/tls/` and every node listens on TLS only (`port 0`, `tls-port`),
//! requires client certificates and replicates over TLS; the lab's own control client speaks
//! TLS with the same settings as the engine, so no plaintext port is left open beside it and
//! the port layout stays the same.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::fs::{self, OpenOptions};
use std::io;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::config::{GroupConfig, TlsSettings, Topology};

const STATE_FILE: &str = "lab.json";
/// Subdirectory of the lab's CA and certificates.
const TLS_DIR: &str = "tls";
const CONFIG_FILE: &str = "quorumlock.toml";
/// Thirteen processes on two busy cores normally need well under a second; the margin is for
/// CI machines running several labs at once.
const START_TIMEOUT: Duration = Duration::from_secs(20);
const RESTART_TIMEOUT: Duration = Duration::from_secs(10);
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
    RedisServerMissing(#[from] crate::install::InstallError),
    #[error("invalid lab settings: {0}")]
    InvalidSpec(String),
    #[error("cannot create the lab's TLS certificates: {0}")]
    Certificates(String),
    #[error("the lab's TLS files cannot be used: {0}")]
    Tls(#[from] crate::config::ConfigError),
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
    #[error("cannot find the current master of {group}: {reason}; check `quorumlock lab status`")]
    NoMaster { group: String, reason: String },
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
}

impl LabSpec {
    /// Five groups, one replica each, three Sentinels, free ports, fast failure detection.
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
        }
    }

    fn node_count(&self) -> usize {
        self.groups * (1 + self.replicas) + self.sentinels
    }

    fn validate(&self) -> Result<(), LabError> {
        let invalid = |message: String| Err(LabError::InvalidSpec(message));
        if self.groups == 0 {
            return invalid("groups must be at least 1 (5 is the usual quorum setup)".into());
        }
        if self.node_count() > MAX_NODES {
            return invalid(format!(
                "{} groups x (1 + {} replicas) + {} Sentinels is {} processes; the lab allows at most {MAX_NODES}",
                self.groups,
                self.replicas,
                self.sentinels,
                self.node_count()
            ));
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
    /// The role it was started in.
    pub kind: NodeKind,
    pub port: u16,
    pub pid: u32,
}

impl Node {
    /// `127.0.0.1:<port>`.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

/// One row of [`Lab::status`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeStatus {
    /// Process name, e.g. `g2-replica1` or `sentinel3`.
    pub name: String,
    /// 0-based group index; `None` for Sentinels, which watch every group.
    pub group: Option<usize>,
    /// The role it was started in.
    pub kind: NodeKind,
    pub port: u16,
    pub pid: u32,
    pub alive: bool,
    /// Stopped with SIGSTOP by [`Lab::freeze`].
    pub frozen: bool,
    /// `master`, `replica` or `sentinel` as the process reports it now; `None` if it did not
    /// answer (dead or frozen).
    pub role: Option<String>,
    /// For a replica: the port of the master it replicates from.
    pub replica_of: Option<u16>,
}

/// What `lab.json` remembers about one process.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct NodeRecord {
    name: String,
    group: Option<usize>,
    kind: NodeKind,
    port: u16,
    pid: u32,
    conf: PathBuf,
    log: PathBuf,
}

impl NodeRecord {
    fn node_dir(&self) -> &Path {
        self.conf.parent().unwrap_or(Path::new("."))
    }
}

/// The content of `lab.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct LabState {
    spec: LabSpec,
    nodes: Vec<NodeRecord>,
    /// Ports of the nodes currently stopped with SIGSTOP.
    frozen: BTreeSet<u16>,
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

/// A node about to be started.
struct Slot {
    name: String,
    group: Option<usize>,
    kind: NodeKind,
    port: u16,
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
            Some(base) => consecutive_ports(base, spec.node_count())?,
            None => free_ports(spec.node_count())?,
        };
        let slots = layout(spec, &ports);
        if spec.base_port.is_some() {
            ensure_free(&slots)?;
        }
        let confs = render_confs(spec, &slots);
        let deadline = Instant::now() + START_TIMEOUT;

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
        let (masters, others): (Vec<_>, Vec<_>) = slots
            .iter()
            .zip(&confs)
            .partition(|(slot, _)| slot.kind == NodeKind::Master);
        // Replicas connect from a once-a-second cron, so starting them only after their masters
        // listen saves up to a second of waiting.
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
        let config_path = lab.config_path();
        write_file(&config_path, &lab.topology().to_toml())?;
        Ok(lab)
    }

    /// The masters were just created empty, so no grant can have been missed: let them vote
    /// at once instead of sitting out the quarantine that protects a real restart.
    async fn admit_masters(&self) -> Result<(), LabError> {
        let marker = crate::resource::admission_key(crate::config::DEFAULT_KEY_PREFIX);
        for record in self.records(NodeKind::Master) {
            let args = ["EVAL", crate::scripts::ADMIT_LUA, "1", marker.as_str(), "0"];
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

    /// Kills every process by PID, waits until they are gone and removes the state file.
    pub async fn stop(mut self) -> Result<(), LabError> {
        let mut first_error = None;
        for index in 0..self.state.nodes.len() {
            if let Err(error) = self.kill_and_wait(index).await {
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

    /// The topology clients should use: Sentinel groups, or direct groups without Sentinels.
    pub fn topology(&self) -> Topology {
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
                    GroupConfig::direct(&name, &format!("127.0.0.1:{}", master.port))
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

    /// SIGKILLs the current master of a group and waits until the process is gone.
    pub async fn kill(&mut self, group: usize) -> Result<Node, LabError> {
        let index = self.running_master_index(group).await?;
        let node = self.node(index, group);
        self.kill_and_wait(index).await?;
        self.state.frozen.remove(&node.port);
        self.write_state()?;
        Ok(node)
    }

    /// SIGSTOPs the current master of a group: its sockets stay open but it answers nothing.
    pub async fn freeze(&mut self, group: usize) -> Result<Node, LabError> {
        let index = self.running_master_index(group).await?;
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
        let redis = find_redis_server().await?;
        for &index in &dead {
            self.respawn(&redis, index)?;
        }
        self.write_state()?;
        self.wait_until(&dead, Readiness::Answers, Instant::now() + RESTART_TIMEOUT)
            .await?;
        Ok(dead.iter().map(|&index| self.node(index, group)).collect())
    }

    /// Every process with its liveness and current role.
    pub async fn status(&self) -> Vec<NodeStatus> {
        futures::future::join_all(self.state.nodes.iter().map(|record| self.status_of(record)))
            .await
    }

    /// The PID of every process the lab knows, dead or alive.
    pub fn pids(&self) -> Vec<u32> {
        self.state.nodes.iter().map(|node| node.pid).collect()
    }

    async fn status_of(&self, record: &NodeRecord) -> NodeStatus {
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
            kind: record.kind,
            port: record.port,
            pid: record.pid,
            alive,
            frozen,
            replica_of: role.as_ref().and_then(|(_, master)| *master),
            role: role.map(|(role, _)| role),
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
            kind: record.kind,
            port: record.port,
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
                        .find(|&index| self.state.nodes[index].port == port)
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
        };
        // A leftover dump from an earlier lab in this directory would be loaded at start-up, and
        // an old log could make a start-up failure look like an earlier one.
        remove_if_present(&node_dir.join("dump.rdb"))?;
        remove_if_present(&record.log)?;
        let child = spawn(redis, &record)?;
        record.pid = child.id();
        self.children.insert(record.pid, child);
        self.state.nodes.push(record);
        Ok(())
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
        let started = Instant::now();
        loop {
            self.check_not_exited(indexes)?;
            let Some(pending) = self.first_pending(indexes, readiness).await else {
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
        for &index in indexes {
            let record = &self.state.nodes[index];
            let Some(child) = self.children.get_mut(&record.pid) else {
                continue;
            };
            if let Ok(Some(_)) = child.try_wait() {
                self.children.remove(&record.pid);
                return Err(exit_error(record, self.state.spec.node_count()));
            }
        }
        Ok(())
    }

    /// The first unmet condition, described for a "not ready" error.
    async fn first_pending(&self, indexes: &[usize], readiness: Readiness) -> Option<String> {
        for &index in indexes {
            let record = &self.state.nodes[index];
            let result = match (readiness, record.kind) {
                (Readiness::Answers, _) | (Readiness::Serving, NodeKind::Master) => {
                    ping(&self.control, record.port).await
                }
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
                ("port", master.port.to_string()),
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
        }
        // The processes are gone, so a state file would only describe a dead lab.
        if let Err(error) = remove_if_present(&self.state_path()) {
            tracing::warn!(%error, "lab: could not remove the state file");
        }
    }
}

fn group_name(group: usize) -> String {
    format!("g{}", group + 1)
}

fn io_error(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> LabError {
    let path = path.to_path_buf();
    move |source| LabError::Io {
        action,
        path,
        source,
    }
}

/// Writes through a temporary file so that a reader never sees half a state file.
fn write_file(path: &Path, text: &str) -> Result<(), LabError> {
    let temporary = path.with_extension("tmp");
    fs::write(&temporary, text).map_err(io_error("write", &temporary))?;
    fs::rename(&temporary, path).map_err(io_error("write", path))
}

fn remove_if_present(path: &Path) -> Result<(), LabError> {
    match fs::remove_file(path) {
        Err(error) if error.kind() != io::ErrorKind::NotFound => {
            Err(io_error("remove", path)(error))
        }
        _ => Ok(()),
    }
}

/// The binary to run; installing it may take a while, so it runs off the async threads.
async fn find_redis_server() -> Result<PathBuf, LabError> {
    tokio::task::spawn_blocking(crate::install::redis_server)
        .await
        .map_err(|error| LabError::InvalidSpec(format!("redis-server lookup stopped: {error}")))?
        .map_err(LabError::from)
}

/// Creates the lab directory and makes it absolute, because Redis resolves the paths in its
/// config from its own working directory.
fn prepare_dir(dir: &Path) -> Result<PathBuf, LabError> {
    fs::create_dir_all(dir).map_err(io_error("create lab directory", dir))?;
    dir.canonicalize()
        .map_err(io_error("resolve lab directory", dir))
}

fn read_state(dir: &Path) -> Result<LabState, LabError> {
    let path = dir.join(STATE_FILE);
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            return Err(LabError::NoLab {
                dir: dir.to_path_buf(),
            });
        }
        Err(error) => return Err(io_error("read", &path)(error)),
    };
    serde_json::from_str(&text).map_err(|error| LabError::State {
        path,
        message: error.to_string(),
    })
}

/// Refuses to start over a lab whose processes still run: its state file would be
/// overwritten and those processes lost track of.
fn refuse_if_running(dir: &Path) -> Result<(), LabError> {
    let state = match read_state(dir) {
        Ok(state) => state,
        // No lab, or a state file too damaged to name any process: nothing to protect.
        Err(LabError::NoLab { .. } | LabError::State { .. }) => return Ok(()),
        Err(error) => return Err(error),
    };
    let pids: Vec<u32> = state
        .nodes
        .iter()
        .filter(|node| is_lab_process(node))
        .map(|node| node.pid)
        .collect();
    if pids.is_empty() {
        Ok(())
    } else {
        Err(LabError::AlreadyRunning {
            dir: dir.to_path_buf(),
            pids,
        })
    }
}

fn consecutive_ports(base: u16, count: usize) -> Result<Vec<u16>, LabError> {
    let last = usize::from(base) + count - 1;
    if base == 0 || last > usize::from(u16::MAX) {
        return Err(LabError::InvalidSpec(format!(
            "--base-port {base} cannot fit {count} consecutive ports below 65536; pick a base between 1024 and {}",
            usize::from(u16::MAX) + 1 - count
        )));
    }
    Ok((0..count)
        .filter_map(|offset| u16::try_from(usize::from(base) + offset).ok())
        .collect())
}

/// Holds every listener until all ports are read, so the OS cannot hand out one port twice.
fn free_ports(count: usize) -> Result<Vec<u16>, LabError> {
    let listeners = (0..count)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<io::Result<Vec<_>>>()
        .map_err(io_error("bind a free port on", Path::new("127.0.0.1")))?;
    listeners
        .iter()
        .map(|listener| listener.local_addr().map(|address| address.port()))
        .collect::<io::Result<Vec<_>>>()
        .map_err(io_error("read a free port on", Path::new("127.0.0.1")))
}

/// Checks the whole block before anything is spawned, so a taken port leaves nothing behind.
fn ensure_free(slots: &[Slot]) -> Result<(), LabError> {
    for slot in slots {
        if TcpListener::bind(("127.0.0.1", slot.port)).is_err() {
            return Err(LabError::PortTaken {
                port: slot.port,
                node: slot.name.clone(),
                needed: slots.len(),
            });
        }
    }
    Ok(())
}

fn layout(spec: &LabSpec, ports: &[u16]) -> Vec<Slot> {
    let mut named = Vec::with_capacity(spec.node_count());
    for group in 0..spec.groups {
        named.push((
            format!("g{}-master", group + 1),
            Some(group),
            NodeKind::Master,
        ));
    }
    for group in 0..spec.groups {
        for replica in 0..spec.replicas {
            let name = format!("g{}-replica{}", group + 1, replica + 1);
            named.push((name, Some(group), NodeKind::Replica));
        }
    }
    for sentinel in 0..spec.sentinels {
        named.push((
            format!("sentinel{}", sentinel + 1),
            None,
            NodeKind::Sentinel,
        ));
    }
    named
        .into_iter()
        .zip(ports)
        .map(|((name, group, kind), &port)| Slot {
            name,
            group,
            kind,
            port,
        })
        .collect()
}

/// One config text per slot, in slot order.
fn render_confs(spec: &LabSpec, slots: &[Slot]) -> Vec<String> {
    let master_port = |group: usize| {
        slots
            .iter()
            .find(|slot| slot.kind == NodeKind::Master && slot.group == Some(group))
            .map(|slot| slot.port)
    };
    let sentinel_ids: Vec<(u16, String)> = slots
        .iter()
        .filter(|slot| slot.kind == NodeKind::Sentinel)
        .map(|slot| (slot.port, random_sentinel_id()))
        .collect();
    slots
        .iter()
        .map(|slot| {
            let node_dir = spec.dir.join(&slot.name);
            match slot.kind {
                NodeKind::Master => data_conf(spec, slot.port, &node_dir, None),
                NodeKind::Replica => {
                    data_conf(spec, slot.port, &node_dir, slot.group.and_then(master_port))
                }
                NodeKind::Sentinel => sentinel_conf(spec, slot, &node_dir, slots, &sentinel_ids),
            }
        })
        .collect()
}

fn data_conf(spec: &LabSpec, port: u16, node_dir: &Path, replica_of: Option<u16>) -> String {
    let mut conf = format!(
        "# Written by quorumlock lab. Sentinel may rewrite it when it reconfigures this node.\n\
         {}\
         bind 127.0.0.1\n\
         daemonize no\n\
         logfile \"\"\n\
         dir {}\n\
         save \"\"\n\
         appendonly no\n\
         # Full syncs go over the socket at once: no 5 s batching delay, no dump left on disk.\n\
         repl-diskless-sync yes\n\
         repl-diskless-sync-delay 0\n\
         repl-diskless-load swapdb\n",
        listen_conf(spec, port),
        quote(node_dir)
    );
    if let Some(password) = &spec.password {
        // A replica authenticates to its master, and a master becomes a replica after a failover.
        conf.push_str(&format!("requirepass {password}\nmasterauth {password}\n"));
    }
    if let Some(master) = replica_of {
        conf.push_str(&format!("replicaof 127.0.0.1 {master}\n"));
    }
    conf
}

/// Pre-seeds the other Sentinels and the replicas, which Sentinel would otherwise discover
/// through hello messages and INFO only after a few seconds.
fn sentinel_conf(
    spec: &LabSpec,
    me: &Slot,
    node_dir: &Path,
    slots: &[Slot],
    sentinel_ids: &[(u16, String)],
) -> String {
    let quorum = spec.sentinels / 2 + 1;
    let my_id = sentinel_ids
        .iter()
        .find(|(port, _)| *port == me.port)
        .map(|(_, id)| id.as_str())
        .unwrap_or_default();
    let mut conf = format!(
        "# Written by quorumlock lab; Sentinel rewrites it as it learns.\n\
         {}\
         bind 127.0.0.1\n\
         daemonize no\n\
         logfile \"\"\n\
         dir {}\n\
         sentinel myid {my_id}\n",
        listen_conf(spec, me.port),
        quote(node_dir)
    );
    if let Some(password) = &spec.password {
        // Sentinels talk to each other too, so each presents the password the others require.
        conf.push_str(&format!(
            "requirepass {password}\nsentinel sentinel-pass {password}\n"
        ));
    }
    for master in slots.iter().filter(|slot| slot.kind == NodeKind::Master) {
        let Some(group) = master.group else { continue };
        let name = group_name(group);
        conf.push_str(&format!(
            "sentinel monitor {name} 127.0.0.1 {} {quorum}\n\
             sentinel down-after-milliseconds {name} {}\n\
             sentinel failover-timeout {name} {}\n\
             sentinel parallel-syncs {name} 1\n",
            master.port, spec.down_after_ms, spec.failover_timeout_ms
        ));
        if let Some(password) = &spec.password {
            conf.push_str(&format!("sentinel auth-pass {name} {password}\n"));
        }
        let replicas = slots
            .iter()
            .filter(|slot| slot.kind == NodeKind::Replica && slot.group == Some(group));
        for replica in replicas {
            conf.push_str(&format!(
                "sentinel known-replica {name} 127.0.0.1 {}\n",
                replica.port
            ));
        }
        for (port, id) in sentinel_ids.iter().filter(|(port, _)| *port != me.port) {
            conf.push_str(&format!(
                "sentinel known-sentinel {name} 127.0.0.1 {port} {id}\n"
            ));
        }
    }
    conf
}

/// Sentinel requires a run id of exactly 40 hex characters.
fn random_sentinel_id() -> String {
    rand::random::<[u8; 20]>()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// The listening lines of a node: a plain port, or TLS only with client certificates. With
/// `tls-replication` replicas and Sentinels connect over TLS and announce their TLS port.
fn listen_conf(spec: &LabSpec, port: u16) -> String {
    if !spec.tls {
        return format!("port {port}\n");
    }
    let tls = spec.dir.join(TLS_DIR);
    format!(
        "port 0\n\
         tls-port {port}\n\
         tls-cert-file {}\n\
         tls-key-file {}\n\
         tls-ca-cert-file {}\n\
         tls-auth-clients yes\n\
         tls-replication yes\n",
        quote(&tls.join("node.crt")),
        quote(&tls.join("node.key")),
        quote(&tls.join("ca.crt")),
    )
}

/// The `[tls]` table of a TLS lab: its CA, and the client certificate every node requires.
fn tls_settings(dir: &Path) -> TlsSettings {
    let tls = dir.join(TLS_DIR);
    TlsSettings {
        ca_file: Some(tls.join("ca.crt")),
        cert_file: Some(tls.join("client.crt")),
        key_file: Some(tls.join("client.key")),
        server_name: None,
    }
}

/// Writes a fresh CA, a certificate for the nodes (server and, for replication and Sentinel
/// links, client) and one for clients, all for 127.0.0.1 and localhost.
fn write_certificates(dir: &Path) -> Result<(), LabError> {
    use rcgen::ExtendedKeyUsagePurpose::{ClientAuth, ServerAuth};
    let tls = dir.join(TLS_DIR);
    fs::create_dir_all(&tls).map_err(io_error("create TLS directory", &tls))?;
    let failed = |error: rcgen::Error| LabError::Certificates(error.to_string());
    let ca = certificates::authority().map_err(failed)?;
    write_file(&tls.join("ca.crt"), &ca.pem())?;
    for (name, usages) in [
        ("node", vec![ServerAuth, ClientAuth]),
        ("client", vec![ClientAuth]),
    ] {
        let (certificate, key) = certificates::leaf(&ca, name, usages).map_err(failed)?;
        write_file(&tls.join(format!("{name}.crt")), &certificate)?;
        write_file(&tls.join(format!("{name}.key")), &key)?;
    }
    Ok(())
}

/// The lab's private CA and the certificates it signs (ring-backed rcgen).
mod certificates {
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, Error,
        ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
    };

    pub fn authority() -> Result<CertifiedIssuer<'static, KeyPair>, Error> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "quorumlock lab CA");
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        CertifiedIssuer::self_signed(params, KeyPair::generate()?)
    }

    /// A certificate and its private key, both PEM.
    pub fn leaf(
        ca: &CertifiedIssuer<'static, KeyPair>,
        name: &str,
        usages: Vec<ExtendedKeyUsagePurpose>,
    ) -> Result<(String, String), Error> {
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])?;
        params
            .distinguished_name
            .push(DnType::CommonName, format!("quorumlock lab {name}"));
        params.extended_key_usages = usages;
        let key = KeyPair::generate()?;
        let certificate = params.signed_by(&key, ca)?;
        Ok((certificate.pem(), key.serialize_pem()))
    }
}

/// Quotes a path for a Redis config file.
fn quote(path: &Path) -> String {
    let text = path.display().to_string();
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

fn spawn(redis: &Path, record: &NodeRecord) -> Result<Child, LabError> {
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&record.log)
        .map_err(io_error("open log file", &record.log))?;
    let log_err = log
        .try_clone()
        .map_err(io_error("open log file", &record.log))?;
    let mut command = Command::new(redis);
    command.arg(&record.conf);
    if record.kind == NodeKind::Sentinel {
        command.arg("--sentinel");
    }
    let child = command
        .current_dir(record.node_dir())
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .spawn()
        .map_err(|source| LabError::Spawn {
            node: record.name.clone(),
            source,
        })?;
    tracing::debug!(node = %record.name, port = record.port, pid = child.id(), "lab: started");
    Ok(child)
}

/// Explains why a node died while starting, from the last line of its log.
fn exit_error(record: &NodeRecord, needed: usize) -> LabError {
    let log = fs::read_to_string(&record.log).unwrap_or_default();
    if log.contains("Address already in use") {
        return LabError::PortTaken {
            port: record.port,
            node: record.name.clone(),
            needed,
        };
    }
    let last_log_line = log
        .lines()
        .rev()
        .find(|line| !line.trim().is_empty())
        .unwrap_or("(empty log)")
        .to_string();
    LabError::Exited {
        node: record.name.clone(),
        log: record.log.clone(),
        last_log_line,
    }
}

fn send_signal(pid: u32, signal: libc::c_int) -> io::Result<()> {
    // PID 0 and negative PIDs address whole process groups, and 1 is init: never those.
    let pid = libc::pid_t::try_from(pid)
        .ok()
        .filter(|&pid| pid > 1)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a single process"))?;
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    if unsafe { libc::kill(pid, signal) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether the PID still belongs to this node. kill(pid, 0) alone is not enough: the PID may
/// have been reused, and a zombie still exists. `/proc/<pid>/cmdline` is empty for a zombie
/// and names redis-server with our config path (before Redis retitles itself) or our port
/// (after, as `redis-server 127.0.0.1:<port>`).
fn is_lab_process(record: &NodeRecord) -> bool {
    if send_signal(record.pid, 0).is_err() {
        return false;
    }
    let Ok(raw) = fs::read(format!("/proc/{}/cmdline", record.pid)) else {
        return false;
    };
    let cmdline = String::from_utf8_lossy(&raw);
    let port_suffix = format!(":{}", record.port);
    let conf = record.conf.display().to_string();
    cmdline.contains("redis-server")
        && cmdline
            .split(['\0', ' '])
            .any(|word| word.ends_with(&port_suffix) || word == conf)
}

async fn ping(control: &resp::Control, port: u16) -> Result<(), String> {
    match resp::call(control, port, &["PING"], CONTROL_TIMEOUT).await? {
        resp::Reply::Status(pong) if pong == "PONG" => Ok(()),
        other => Err(format!("unexpected PING reply {other:?}")),
    }
}

async fn replica_link_up(control: &resp::Control, port: u16) -> Result<(), String> {
    let reply = resp::call(control, port, &["INFO", "replication"], CONTROL_TIMEOUT).await?;
    let info = reply.text().unwrap_or_default();
    if info
        .lines()
        .any(|line| line.trim() == "master_link_status:up")
    {
        Ok(())
    } else {
        Err("replication link to its master is not up yet".into())
    }
}

/// `SENTINEL get-master-addr-by-name` answers `[ip, port]`, or nil for an unknown service.
fn parse_master_addr(reply: &resp::Reply) -> Result<u16, String> {
    reply
        .items()
        .and_then(|items| items.get(1))
        .and_then(resp::Reply::integer)
        .and_then(|port| u16::try_from(port).ok())
        .ok_or_else(|| format!("unexpected reply {reply:?}"))
}

/// `ROLE` answers `["master", ..]`, `["slave", ip, port, ..]` or `["sentinel", ..]`.
fn parse_role(reply: &resp::Reply) -> Option<(String, Option<u16>)> {
    let items = reply.items()?;
    let role = items.first()?.text()?;
    if role == "slave" {
        let master = items
            .get(2)
            .and_then(resp::Reply::integer)
            .and_then(|port| u16::try_from(port).ok());
        Some(("replica".into(), master))
    } else {
        Some((role.to_string(), None))
    }
}

/// Turns a flat `[key, value, key, value, ..]` reply into a map.
fn field_map(reply: &resp::Reply) -> HashMap<String, String> {
    let items = reply.items().unwrap_or_default();
    items
        .chunks_exact(2)
        .filter_map(|pair| Some((pair[0].text()?.to_string(), pair[1].text()?.to_string())))
        .collect()
}

/// Just enough RESP2 to send one command and read one reply. The lab needs a handful of
/// commands with hard per-call deadlines on nodes that may be frozen, dead or half started;
/// a bare socket per call is the most predictable way to get that.
mod resp {
    use std::net::{IpAddr, Ipv4Addr};
    use std::time::Duration;

    use rustls::pki_types::ServerName;
    use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
    use tokio::net::TcpStream;
    use tokio_rustls::TlsConnector;

    use super::{LabError, LabSpec, tls_settings};

    /// How to reach the lab's nodes: the password they require and, for a TLS lab, the same
    /// TLS client settings the lab writes into its topology.
    #[derive(Clone)]
    pub struct Control {
        password: Option<String>,
        tls: Option<TlsConnector>,
    }

    impl Control {
        pub fn new(spec: &LabSpec) -> Result<Self, LabError> {
            let tls = if spec.tls {
                Some(crate::security::tokio_connector(&tls_settings(&spec.dir))?)
            } else {
                None
            };
            Ok(Control {
                password: spec.password.clone(),
                tls,
            })
        }
    }

    #[derive(Debug, Clone, PartialEq)]
    pub enum Reply {
        Status(String),
        Error(String),
        Integer(i64),
        Bulk(Option<String>),
        Array(Option<Vec<Reply>>),
    }

    impl Reply {
        pub fn text(&self) -> Option<&str> {
            match self {
                Reply::Status(text) | Reply::Bulk(Some(text)) => Some(text),
                _ => None,
            }
        }

        pub fn items(&self) -> Option<&[Reply]> {
            match self {
                Reply::Array(Some(items)) => Some(items),
                _ => None,
            }
        }

        /// Integers arrive as `:n` or, from Sentinel, as bulk strings.
        pub fn integer(&self) -> Option<i64> {
            match self {
                Reply::Integer(value) => Some(*value),
                other => other.text()?.parse().ok(),
            }
        }
    }

    /// Connects, sends one command and reads one reply, all within `timeout`. An error reply
    /// comes back as `Err` with the server's message.
    pub async fn call(
        control: &Control,
        port: u16,
        args: &[&str],
        timeout: Duration,
    ) -> Result<Reply, String> {
        match tokio::time::timeout(timeout, connect_and_exchange(control, port, args)).await {
            Ok(Ok(Reply::Error(message))) => Err(message),
            Ok(result) => result,
            Err(_) => Err(format!("no reply within {} ms", timeout.as_millis())),
        }
    }

    async fn connect_and_exchange(
        control: &Control,
        port: u16,
        args: &[&str],
    ) -> Result<Reply, String> {
        let stream = TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(|error| format!("cannot connect to 127.0.0.1:{port}: {error}"))?;
        let password = control.password.as_deref();
        match &control.tls {
            None => exchange(stream, port, password, args).await,
            Some(connector) => {
                let name = ServerName::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST).into());
                let stream = connector
                    .connect(name, stream)
                    .await
                    .map_err(|error| format!("TLS handshake with 127.0.0.1:{port}: {error}"))?;
                exchange(stream, port, password, args).await
            }
        }
    }

    /// Sends AUTH (when there is a password) and the command in one write, and answers the
    /// command's reply once AUTH has been accepted.
    async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
        mut stream: S,
        port: u16,
        password: Option<&str>,
        args: &[&str],
    ) -> Result<Reply, String> {
        let mut request = Vec::new();
        if let Some(password) = password {
            request.extend(encode(&["AUTH", password]));
        }
        request.extend(encode(args));
        stream
            .write_all(&request)
            .await
            .map_err(|error| format!("cannot send to 127.0.0.1:{port}: {error}"))?;
        let mut replies_left = if password.is_some() { 2 } else { 1 };
        let mut buffer = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            while let Some((reply, used)) = parse(&buffer)? {
                replies_left -= 1;
                if replies_left == 0 {
                    return Ok(reply);
                }
                if let Reply::Error(message) = reply {
                    return Err(format!("AUTH refused by 127.0.0.1:{port}: {message}"));
                }
                buffer.drain(..used);
            }
            let read = stream
                .read(&mut chunk)
                .await
                .map_err(|error| format!("cannot read from 127.0.0.1:{port}: {error}"))?;
            if read == 0 {
                return Err(format!("127.0.0.1:{port} closed the connection mid-reply"));
            }
            buffer.extend_from_slice(&chunk[..read]);
        }
    }

    pub(super) fn encode(args: &[&str]) -> Vec<u8> {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for arg in args {
            out.extend_from_slice(format!("${}\r\n{arg}\r\n", arg.len()).as_bytes());
        }
        out
    }

    /// Parses one reply from the start of `buffer`: `Ok(None)` means more bytes are needed,
    /// `Ok(Some((reply, used)))` how many bytes it took.
    pub(super) fn parse(buffer: &[u8]) -> Result<Option<(Reply, usize)>, String> {
        let Some(line_end) = buffer.windows(2).position(|pair| pair == b"\r\n") else {
            return Ok(None);
        };
        let Some((&kind, rest)) = buffer[..line_end].split_first() else {
            return Err("empty reply line".into());
        };
        let line = String::from_utf8_lossy(rest).into_owned();
        let after = line_end + 2;
        let number = || {
            line.parse::<i64>()
                .map_err(|_| format!("`{line}` is not a RESP length or integer"))
        };
        let reply = match kind {
            b'+' => (Reply::Status(line.clone()), after),
            b'-' => (Reply::Error(line.clone()), after),
            b':' => (Reply::Integer(number()?), after),
            // A negative length is RESP2's nil.
            b'$' => match usize::try_from(number()?) {
                Err(_) => (Reply::Bulk(None), after),
                Ok(length) => {
                    let end = after + length;
                    if buffer.len() < end + 2 {
                        return Ok(None);
                    }
                    let text = String::from_utf8_lossy(&buffer[after..end]).into_owned();
                    (Reply::Bulk(Some(text)), end + 2)
                }
            },
            b'*' => match usize::try_from(number()?) {
                Err(_) => (Reply::Array(None), after),
                Ok(count) => {
                    let mut items = Vec::new();
                    let mut offset = after;
                    for _ in 0..count {
                        let Some((item, used)) = parse(&buffer[offset..])? else {
                            return Ok(None);
                        };
                        items.push(item);
                        offset += used;
                    }
                    (Reply::Array(Some(items)), offset)
                }
            },
            other => return Err(format!("unexpected RESP type byte {other:#04x}")),
        };
        Ok(Some(reply))
    }
}

#[cfg(test)]
mod tests {
    use super::resp::{Reply, encode, parse};
    use super::*;

    #[test]
    fn resp_parses_nested_replies_and_waits_for_more_bytes() {
        let role = b"*5\r\n$5\r\nslave\r\n$9\r\n127.0.0.1\r\n:7000\r\n$9\r\nconnected\r\n:42\r\n";
        let (reply, used) = parse(role).expect("valid RESP").expect("complete reply");
        assert_eq!(used, role.len());
        assert_eq!(parse_role(&reply), Some(("replica".into(), Some(7000))));
        for cut in 0..role.len() {
            assert_eq!(parse(&role[..cut]), Ok(None), "cut at {cut}");
        }
        assert_eq!(parse(b"$-1\r\n"), Ok(Some((Reply::Bulk(None), 5))));
        assert_eq!(parse(b"*-1\r\n"), Ok(Some((Reply::Array(None), 5))));
        assert!(parse(b"?what\r\n").is_err());
        assert_eq!(encode(&["PING"]), b"*1\r\n$4\r\nPING\r\n");
    }

    #[test]
    fn layout_follows_the_documented_port_order() {
        let spec = LabSpec::new("/tmp/lab");
        let ports = consecutive_ports(7000, spec.node_count()).expect("fits");
        let slots = layout(&spec, &ports);
        let find = |name: &str| slots.iter().find(|slot| slot.name == name).map(|s| s.port);
        assert_eq!(slots.len(), 13);
        assert_eq!(find("g1-master"), Some(7000));
        assert_eq!(find("g5-master"), Some(7004));
        assert_eq!(find("g1-replica1"), Some(7005));
        assert_eq!(find("g5-replica1"), Some(7009));
        assert_eq!(find("sentinel1"), Some(7010));
        assert_eq!(find("sentinel3"), Some(7012));
        assert!(consecutive_ports(65530, 13).is_err());
    }

    #[test]
    fn sentinel_conf_seeds_peers_and_replicas() {
        let spec = LabSpec::new("/tmp/lab");
        let ports = consecutive_ports(7000, spec.node_count()).expect("fits");
        let slots = layout(&spec, &ports);
        let confs = render_confs(&spec, &slots);
        let sentinel = &confs[10];
        assert!(sentinel.contains("sentinel monitor g3 127.0.0.1 7002 2\n"));
        assert!(sentinel.contains("sentinel known-replica g3 127.0.0.1 7007\n"));
        assert_eq!(sentinel.matches("sentinel known-sentinel g1 ").count(), 2);
        assert!(
            !sentinel.contains("127.0.0.1 7010 "),
            "a Sentinel must not know itself"
        );
        let id = sentinel
            .lines()
            .find_map(|line| line.strip_prefix("sentinel myid "))
            .unwrap_or_default();
        assert_eq!(id.len(), 40);
        assert!(confs[11].contains(&format!("known-sentinel g1 127.0.0.1 7010 {id}\n")));
        assert!(confs[5].contains("replicaof 127.0.0.1 7000\n"));
        assert!(!confs[0].contains("replicaof"));
    }
}
