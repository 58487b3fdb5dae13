//! Cluster labs, where each group is a Redis Cluster: forming the clusters (`form`), reading
//! `CLUSTER NODES` (`nodes`), finding a shard's current primary and addressing it for kill,
//! freeze and restart, admitting the slots, moving slots from one shard to another (whole,
//! or interrupted partway the ways a reshard breaks: `migrate`), and naming each group's
//! seed nodes for clients.

mod form;
mod migrate;
mod nodes;

pub use migrate::{Interruption, MigrationReport};
use nodes::{NodeLine, parse_nodes};

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::lab::confs::{CLUSTER_SLOTS, group_name};
use crate::lab::resp::{self, Reply};
use crate::lab::{CONTROL_TIMEOUT, Lab, LabError, Node};

/// The shape of every group of a cluster lab.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterShape {
    /// Primaries per group, each starting with an even share of the 16,384 slots. A cluster
    /// fails over only while a majority of its primaries is alive, so it takes three or more.
    pub shards: usize,
}

impl ClusterShape {
    pub(in crate::lab) fn validate(&self) -> Result<(), LabError> {
        if self.shards == 0 || self.shards > usize::from(CLUSTER_SLOTS) {
            return Err(LabError::InvalidArgument {
                field: "shards",
                reason: format!(
                    "must be between 1 and {CLUSTER_SLOTS} (one slot each at most), got {}",
                    self.shards
                ),
            });
        }
        Ok(())
    }
}

/// `CLUSTER SETSLOT`, `MIGRATE`: the command's name, for errors.
fn command_name(args: &[&str]) -> String {
    match args {
        ["CLUSTER", sub, ..] => format!("CLUSTER {sub}"),
        [first, ..] => first.to_string(),
        [] => String::new(),
    }
}

/// The call timeout of the client that admits a cluster lab's slots.
const ADMIT_CALL_TIMEOUT_MS: u64 = 5_000;
/// Tries of a cluster lab's admission, and the pause between two: a node marked failing
/// under load comes back within a node timeout or two.
const ADMIT_ATTEMPTS: usize = 10;
const ADMIT_RETRY_DELAY: std::time::Duration = std::time::Duration::from_millis(500);

impl Lab {
    fn cluster_shape(&self) -> Result<ClusterShape, LabError> {
        self.state.spec.cluster.ok_or(LabError::NotCluster)
    }

    fn check_shard(&self, group: usize, shard: usize) -> Result<(), LabError> {
        let shape = self.cluster_shape()?;
        self.check_group(group)?;
        if shard < shape.shards {
            Ok(())
        } else {
            Err(LabError::NoSuchShard {
                shard,
                shards: shape.shards,
            })
        }
    }

    fn shard_of(&self, index: usize) -> Option<usize> {
        self.state.nodes[index]
            .cluster
            .as_ref()
            .map(|cluster| cluster.shard)
    }

    fn shard_indexes(&self, group: usize, shard: usize) -> Vec<usize> {
        self.group_indexes(group)
            .filter(|&index| self.shard_of(index) == Some(shard))
            .collect()
    }

    fn node_id(&self, index: usize) -> &str {
        self.state.nodes[index]
            .cluster
            .as_ref()
            .map_or("", |cluster| cluster.node_id.as_str())
    }

    fn is_frozen(&self, index: usize) -> bool {
        self.state.frozen.contains(&self.state.nodes[index].port)
    }

    async fn call_node(
        &self,
        index: usize,
        args: &[&str],
        timeout: Duration,
    ) -> Result<Reply, LabError> {
        let record = &self.state.nodes[index];
        resp::call(&self.control, record.port, args, timeout)
            .await
            .map_err(|reason| LabError::Command {
                node: record.name.clone(),
                command: command_name(args),
                reason,
            })
    }

    async fn cluster_nodes(&self, index: usize) -> Result<Vec<NodeLine>, String> {
        let port = self.state.nodes[index].port;
        let reply = resp::call(&self.control, port, &["CLUSTER", "NODES"], CONTROL_TIMEOUT).await?;
        parse_nodes(reply.text().unwrap_or_default())
    }

    /// Index of the shard's current primary: a node started in that shard that a running,
    /// unfrozen node of the group (one of another shard first) sees as a primary not failing.
    async fn primary_index(&self, group: usize, shard: usize) -> Result<usize, LabError> {
        self.check_shard(group, shard)?;
        let in_shard = self.shard_indexes(group, shard);
        let asked: Vec<usize> = self
            .group_indexes(group)
            .filter(|index| !in_shard.contains(index))
            .chain(in_shard.iter().copied())
            .filter(|&index| self.is_running(index) && !self.is_frozen(index))
            .collect();
        let mut reasons = Vec::new();
        for index in asked {
            let name = &self.state.nodes[index].name;
            let lines = match self.cluster_nodes(index).await {
                Ok(lines) => lines,
                Err(error) => {
                    reasons.push(format!("{name}: {error}"));
                    continue;
                }
            };
            let primary = lines
                .iter()
                .filter(|line| line.is_primary() && !line.is_failing())
                .find_map(|line| {
                    in_shard
                        .iter()
                        .copied()
                        .find(|&member| self.state.nodes[member].port == line.port)
                });
            match primary {
                Some(primary) => return Ok(primary),
                None => reasons.push(format!("{name} sees no live primary among its nodes")),
            }
        }
        if reasons.is_empty() {
            reasons.push("no node of the group is running and unfrozen".into());
        }
        Err(LabError::NoMaster {
            group: format!("{} shard s{}", group_name(group), shard + 1),
            reason: reasons.join("; "),
        })
    }

    async fn running_primary_index(&self, group: usize, shard: usize) -> Result<usize, LabError> {
        let index = self.primary_index(group, shard).await?;
        let record = &self.state.nodes[index];
        if self.is_running(index) {
            Ok(index)
        } else {
            Err(LabError::PrimaryNotRunning {
                node: record.name.clone(),
                port: record.port,
                group: group + 1,
                shard: shard + 1,
            })
        }
    }

    /// The current primary of one shard of a cluster lab's group (both 0-based), as the
    /// group's cluster reports it.
    pub async fn primary_of(&self, group: usize, shard: usize) -> Result<Node, LabError> {
        let index = self.primary_index(group, shard).await?;
        Ok(self.node(index, group))
    }

    /// The shard (0-based) whose primary serves `slot` in `group`, as that primary says.
    pub async fn shard_serving(&self, group: usize, slot: u16) -> Result<usize, LabError> {
        let shards = self.cluster_shape()?.shards;
        for shard in 0..shards {
            let Ok(index) = self.running_primary_index(group, shard).await else {
                continue;
            };
            let Ok(lines) = self.cluster_nodes(index).await else {
                continue;
            };
            let id = self.node_id(index);
            if lines.iter().any(|line| line.id == id && line.serves(slot)) {
                return Ok(shard);
            }
        }
        Err(LabError::NoMaster {
            group: group_name(group),
            reason: format!("no running primary says it serves slot {slot}"),
        })
    }

    /// SIGKILLs the current primary of one shard and waits until the process is gone; the
    /// cluster promotes one of its replicas after `down_after_ms` if a majority of the
    /// group's primaries is alive.
    pub async fn kill_primary(&mut self, group: usize, shard: usize) -> Result<Node, LabError> {
        let index = self.running_primary_index(group, shard).await?;
        self.kill_index(index, group).await
    }

    /// SIGSTOPs the current primary of one shard; [`Lab::thaw`] resumes it.
    pub async fn freeze_primary(&mut self, group: usize, shard: usize) -> Result<Node, LabError> {
        let index = self.running_primary_index(group, shard).await?;
        self.freeze_index(index, group)
    }

    /// Starts the dead nodes of one shard again, empty, with the `nodes.conf` that makes each
    /// rejoin its cluster; if none is dead, kills and restarts the shard's current primary.
    /// Returns once they answer PING.
    pub async fn restart_shard(
        &mut self,
        group: usize,
        shard: usize,
    ) -> Result<Vec<Node>, LabError> {
        self.check_shard(group, shard)?;
        let mut dead: Vec<usize> = self
            .shard_indexes(group, shard)
            .into_iter()
            .filter(|&index| !self.is_running(index))
            .collect();
        if dead.is_empty() {
            let index = self.running_primary_index(group, shard).await?;
            self.kill_and_wait(index).await?;
            dead.push(index);
        }
        self.restart_indexes(&dead, group).await
    }

    /// Every node of a cluster lab's group as `(host, port)`: any of them is a seed from
    /// which a cluster client learns the slot map.
    pub fn cluster_seeds(&self, group: usize) -> Result<Vec<(String, u16)>, LabError> {
        self.cluster_shape()?;
        self.check_group(group)?;
        Ok(self
            .group_indexes(group)
            .map(|index| {
                (
                    "127.0.0.1".to_string(),
                    self.state.nodes[index].public_port(),
                )
            })
            .collect())
    }

    /// The masters were just created empty, so no grant can have been missed: every slot of
    /// every group votes at once under the lab's lock policy, admitted through the engine,
    /// which writes a slot's marker and policy on the primary that owns it.
    pub(in crate::lab) async fn admit_cluster(&self) -> Result<(), LabError> {
        let failed = |reason: String| LabError::Admit {
            node: "the cluster lab".to_string(),
            reason,
        };
        // A lab starts on a busy machine: the admission's calls may take longer than the
        // lock calls' timeout, and nothing waits on them.
        let topology = crate::Topology {
            call_timeout_ms: ADMIT_CALL_TIMEOUT_MS,
            ..self.topology()
        };
        let locks = crate::Locks::connect(topology)
            .await
            .map_err(|error| failed(error.to_string()))?;
        // The lab's own policy, which the engine checks against what the nodes run; a lab
        // that opted out of min-replicas-to-write says so.
        let spec = &self.state.spec;
        let policy = spec.policy();
        // Forced: the lab knows its nodes are new, and a retry meets slots the last try
        // admitted. A loaded machine can have a node marked failing for a moment (the lab's
        // node timeout is short), and the cluster refuses scripts until it is back.
        let mut groups: Vec<String> = Vec::new();
        let mut last_error = None;
        for _ in 0..ADMIT_ATTEMPTS {
            let admitted = locks
                .admit(&crate::AdmitOptions {
                    groups: groups.clone(),
                    write_window_ms: Some(policy.write_window_ms),
                    force: true,
                    allow_unreplicated_writes: spec.min_replicas_max_lag_s.is_none(),
                    ..crate::AdmitOptions::new(policy.max_ttl_ms)
                })
                .await;
            let refused: Vec<crate::GroupAdmission> = match admitted {
                Ok(admissions) => admissions
                    .into_iter()
                    .filter(|admission| admission.error.is_some())
                    .collect(),
                Err(error) => {
                    last_error = Some(failed(error.to_string()));
                    tokio::time::sleep(ADMIT_RETRY_DELAY).await;
                    continue;
                }
            };
            let Some(first) = refused.first() else {
                locks.close().await;
                return Ok(());
            };
            last_error = Some(LabError::Admit {
                node: first.group.clone(),
                reason: first.error.clone().unwrap_or_default(),
            });
            groups = refused
                .into_iter()
                .map(|admission| admission.group)
                .collect();
            tokio::time::sleep(ADMIT_RETRY_DELAY).await;
        }
        locks.close().await;
        Err(last_error.unwrap_or_else(|| failed("no admission was tried".to_string())))
    }
}
