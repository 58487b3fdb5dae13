//! The lab's processes as callers see them: a data node ([`Node`]), a row of
//! [`Lab::status`] ([`NodeStatus`]) and the relay in front of a node.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::probe::parse_role;
use super::process::{is_lab_process, is_relay_process};
use super::relay::{self, RelayStatus};
use super::state::{NodeRecord, RelayRecord};
use super::{Lab, STATUS_TIMEOUT, resp};
use crate::millis;

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

impl Lab {
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

    /// The PIDs of the masters the lab started (a failover may have moved the role).
    pub fn master_pids(&self) -> Vec<u32> {
        self.state
            .nodes
            .iter()
            .filter(|node| node.kind == NodeKind::Master)
            .map(|node| node.pid)
            .collect()
    }

    pub(super) async fn status_of(&self, record: &NodeRecord) -> NodeStatus {
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
