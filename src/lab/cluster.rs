//! Cluster labs, where each group is a Redis Cluster: forming the clusters (node IDs, slots,
//! `CLUSTER MEET`, `CLUSTER REPLICATE`, and the wait until every node agrees), finding a
//! shard's current primary and addressing it for kill, freeze and restart, moving slots from
//! one shard to another (whole, or interrupted partway the ways a reshard breaks), and naming
//! each group's seed nodes for clients.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::confs::{CLUSTER_SLOTS, group_name, slot_ranges};
use super::probe::replica_link_up;
use super::resp::{self, Reply};
use super::{CONTROL_TIMEOUT, Lab, LabError, Node, NodeKind};

/// The shape of every group of a cluster lab.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterShape {
    /// Primaries per group, each starting with an even share of the 16,384 slots. A cluster
    /// fails over only while a majority of its primaries is alive, so it takes three or more.
    pub shards: usize,
}

impl ClusterShape {
    pub(super) fn validate(&self) -> Result<(), LabError> {
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

/// What [`Lab::migrate_slots`] or [`Lab::interrupt_migration`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MigrationReport {
    /// The primary the slots left.
    pub from: Node,
    /// The primary that serves them now.
    pub to: Node,
    /// Slots moved (or, interrupted, whose move was broken off).
    pub slots: usize,
    /// Keys moved to the target.
    pub keys: usize,
}

/// How [`Lab::interrupt_migration`] breaks off a slot's migration once some keys moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Interruption {
    /// The slot is closed back on its source (`CLUSTER SETSLOT <slot> STABLE` on both sides),
    /// as `redis-cli --cluster fix` does with an open slot ("Case 4: Closing slot"): the keys
    /// that left stay on the target, where no one reads them.
    ClosedBack,
    /// The target's primary is killed (SIGKILL) with the keys it took, then the slot is
    /// closed back on its source.
    TargetKilled,
}

/// How long one MIGRATE batch may take on the node, and the lab's call around it.
const MIGRATE_TIMEOUT_MS: u64 = 5_000;
const MIGRATE_CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Keys moved per MIGRATE.
const MIGRATE_BATCH: usize = 100;
/// How long a group's nodes may take to agree on the slot map after a migration.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(10);

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct NodeLine {
    pub(super) id: String,
    pub(super) port: u16,
    pub(super) flags: Vec<String>,
    /// The ID of its primary, for a replica.
    pub(super) primary: Option<String>,
    /// Slot ranges as printed (`0-5460`, `5461`), without migration entries (`[..]`).
    pub(super) slots: Vec<String>,
}

impl NodeLine {
    fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|own| own == flag)
    }

    pub(super) fn is_primary(&self) -> bool {
        self.has_flag("master")
    }

    /// Flagged failed (`fail`) or suspected (`fail?`) by the node that answered.
    pub(super) fn is_failing(&self) -> bool {
        self.has_flag("fail") || self.has_flag("fail?")
    }

    /// Still joining: a MEET not yet answered, or an address not yet known.
    fn is_joining(&self) -> bool {
        self.has_flag("handshake") || self.has_flag("noaddr")
    }

    pub(super) fn serves(&self, slot: u16) -> bool {
        serves(&self.slots, slot)
    }
}

/// Whether `slot` is in one of the printed ranges.
fn serves(ranges: &[String], slot: u16) -> bool {
    ranges
        .iter()
        .filter_map(|range| parse_range(range))
        .any(|(first, last)| (first..=last).contains(&slot))
}

fn parse_range(text: &str) -> Option<(u16, u16)> {
    match text.split_once('-') {
        Some((first, last)) => Some((first.parse().ok()?, last.parse().ok()?)),
        None => {
            let slot = text.parse().ok()?;
            Some((slot, slot))
        }
    }
}

/// Parses `CLUSTER NODES`, one node a line:
/// `<id> <ip:port@bus[,hostname]> <flags> <primary id or -> <ping> <pong> <epoch> <link> <slots>..`.
pub(super) fn parse_nodes(text: &str) -> Result<Vec<NodeLine>, String> {
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let bad = || format!("unexpected CLUSTER NODES line `{line}`");
            if fields.len() < 8 {
                return Err(bad());
            }
            let address = fields[1].split(['@', ',']).next().unwrap_or_default();
            let port = address
                .rsplit_once(':')
                .and_then(|(_, port)| port.parse().ok())
                .ok_or_else(bad)?;
            Ok(NodeLine {
                id: fields[0].to_string(),
                port,
                flags: fields[2].split(',').map(str::to_string).collect(),
                primary: (fields[3] != "-").then(|| fields[3].to_string()),
                slots: fields[8..]
                    .iter()
                    .filter(|slot| !slot.starts_with('['))
                    .map(|slot| slot.to_string())
                    .collect(),
            })
        })
        .collect()
}

/// What one node believes about another: the part every node must agree on.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Belief {
    primary: bool,
    replica_of: Option<String>,
    slots: Vec<String>,
}

/// One node's slot map and roles, by node ID.
type View = BTreeMap<String, Belief>;

fn view_of(lines: &[NodeLine]) -> View {
    lines
        .iter()
        .map(|line| {
            let belief = Belief {
                primary: line.is_primary(),
                replica_of: line.primary.clone(),
                slots: line.slots.clone(),
            };
            (line.id.clone(), belief)
        })
        .collect()
}

/// What a wait on a group's cluster waits for.
enum Agreement {
    /// Every node knows every other node of its group, handshakes done.
    Joined,
    /// Every node is up, reports `cluster_state:ok` with every slot assigned, and all agree
    /// on the slot map and roles; every replica's link to its primary is up.
    Formed,
    /// The running, unfrozen nodes report `cluster_state:ok`, agree on the slot map, and
    /// that map has node `to` serving `slots`.
    Moved {
        slots: RangeInclusive<u16>,
        to: String,
    },
}

/// `CLUSTER INFO` as a map.
fn info_fields(reply: &Reply) -> BTreeMap<String, String> {
    reply
        .text()
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.trim().split_once(':'))
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect()
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

    /// Turns the lab's freshly started, empty nodes into one cluster per group and returns
    /// once every node of every group agrees on the slot map (or `deadline` passes).
    pub(super) async fn form_clusters(&mut self, deadline: Instant) -> Result<(), LabError> {
        let shape = self.cluster_shape()?;
        for index in 0..self.state.nodes.len() {
            let reply = self
                .call_node(index, &["CLUSTER", "MYID"], CONTROL_TIMEOUT)
                .await?;
            let id = reply.text().unwrap_or_default().to_string();
            if let Some(cluster) = self.state.nodes[index].cluster.as_mut() {
                cluster.node_id = id;
            }
        }
        self.write_state()?;
        let ranges = slot_ranges(shape.shards);
        let groups: Vec<usize> = (0..self.state.spec.groups).collect();
        for &group in &groups {
            self.assign_and_meet(group, &ranges).await?;
        }
        // A replica can follow only a primary it already knows.
        self.wait_agreement(&groups, &Agreement::Joined, deadline)
            .await?;
        self.make_replicas().await?;
        self.wait_agreement(&groups, &Agreement::Formed, deadline)
            .await
    }

    /// Gives each primary of `group` its epoch and its range of slots, and has the group's
    /// first node meet every other.
    async fn assign_and_meet(&self, group: usize, ranges: &[(u16, u16)]) -> Result<(), LabError> {
        let members: Vec<usize> = self.group_indexes(group).collect();
        for &index in &members {
            let (Some(shard), NodeKind::Master) =
                (self.shard_of(index), self.state.nodes[index].kind)
            else {
                continue;
            };
            let Some(&(first, last)) = ranges.get(shard) else {
                continue;
            };
            // Distinct epochs settle who owns which slots without the cluster having to
            // resolve a collision first.
            let epoch = (shard + 1).to_string();
            self.call_node(
                index,
                &["CLUSTER", "SET-CONFIG-EPOCH", &epoch],
                CONTROL_TIMEOUT,
            )
            .await?;
            let (first, last) = (first.to_string(), last.to_string());
            self.call_node(
                index,
                &["CLUSTER", "ADDSLOTSRANGE", &first, &last],
                CONTROL_TIMEOUT,
            )
            .await?;
        }
        let Some((&seed, others)) = members.split_first() else {
            return Ok(());
        };
        for &other in others {
            let record = &self.state.nodes[other];
            let port = record.port.to_string();
            let bus = record
                .cluster
                .as_ref()
                .map_or(0, |cluster| cluster.bus_port)
                .to_string();
            self.call_node(
                seed,
                &["CLUSTER", "MEET", "127.0.0.1", &port, &bus],
                CONTROL_TIMEOUT,
            )
            .await?;
        }
        Ok(())
    }

    /// Has every replica follow its shard's primary.
    async fn make_replicas(&self) -> Result<(), LabError> {
        for index in 0..self.state.nodes.len() {
            if self.state.nodes[index].kind != NodeKind::Replica {
                continue;
            }
            let (Some(group), Some(shard)) = (self.state.nodes[index].group, self.shard_of(index))
            else {
                continue;
            };
            let Some(primary) = self
                .shard_indexes(group, shard)
                .into_iter()
                .find(|&other| self.state.nodes[other].kind == NodeKind::Master)
            else {
                continue;
            };
            let id = self.node_id(primary).to_string();
            self.call_node(index, &["CLUSTER", "REPLICATE", &id], CONTROL_TIMEOUT)
                .await?;
        }
        Ok(())
    }

    /// Polls every group in `groups` until `agreement` holds in all of them, failing early
    /// if one of this process's nodes exits.
    async fn wait_agreement(
        &mut self,
        groups: &[usize],
        agreement: &Agreement,
        deadline: Instant,
    ) -> Result<(), LabError> {
        let indexes: Vec<usize> = groups
            .iter()
            .flat_map(|&group| self.group_indexes(group).collect::<Vec<_>>())
            .collect();
        self.poll_ready(&indexes, deadline, async |lab: &Lab| {
            for &group in groups {
                if let Err(reason) = lab.check_agreement(group, agreement).await {
                    return Some(format!("{}: {reason}", group_name(group)));
                }
            }
            None
        })
        .await
    }

    /// `Ok` when `agreement` holds in `group`, else what is still missing.
    async fn check_agreement(&self, group: usize, agreement: &Agreement) -> Result<(), String> {
        let members: Vec<usize> = self.group_indexes(group).collect();
        let mut agreed: Option<(String, View)> = None;
        for &index in &members {
            let record = &self.state.nodes[index];
            let live_only = matches!(agreement, Agreement::Moved { .. });
            if live_only && (!self.is_running(index) || self.is_frozen(index)) {
                continue;
            }
            let name = &record.name;
            let lines = self
                .cluster_nodes(index)
                .await
                .map_err(|error| format!("{name}: {error}"))?;
            if let Some(line) = lines.iter().find(|line| line.is_joining()) {
                return Err(format!(
                    "{name} is still meeting the node on port {}",
                    line.port
                ));
            }
            if !live_only {
                for &other in &members {
                    let port = self.state.nodes[other].port;
                    if !lines.iter().any(|line| line.port == port) {
                        return Err(format!("{name} does not know the node on port {port} yet"));
                    }
                }
            }
            if matches!(agreement, Agreement::Joined) {
                continue;
            }
            if !live_only && let Some(line) = lines.iter().find(|line| line.is_failing()) {
                return Err(format!(
                    "{name} sees the node on port {} failing",
                    line.port
                ));
            }
            let info = resp::call(
                &self.control,
                record.port,
                &["CLUSTER", "INFO"],
                CONTROL_TIMEOUT,
            )
            .await
            .map(|reply| info_fields(&reply))
            .map_err(|error| format!("{name}: {error}"))?;
            let field = |key: &str| info.get(key).map_or("?", String::as_str);
            let slots = CLUSTER_SLOTS.to_string();
            if field("cluster_state") != "ok" || field("cluster_slots_assigned") != slots {
                return Err(format!(
                    "{name} reports cluster_state:{} with {} of {slots} slots assigned",
                    field("cluster_state"),
                    field("cluster_slots_assigned")
                ));
            }
            if !live_only && record.kind == NodeKind::Replica {
                replica_link_up(&self.control, record.port)
                    .await
                    .map_err(|error| format!("{name}: {error}"))?;
            }
            let view = view_of(&lines);
            match &agreed {
                None => agreed = Some((name.clone(), view)),
                Some((first, seen)) if *seen != view => {
                    return Err(format!(
                        "{name} and {first} do not agree on the slot map yet"
                    ));
                }
                Some(_) => {}
            }
        }
        if let Agreement::Moved { slots, to } = agreement {
            let Some((name, view)) = &agreed else {
                return Err("no node of the group is running".into());
            };
            let served = view.get(to).map(|belief| belief.slots.as_slice());
            let missing = slots
                .clone()
                .find(|&slot| !served.is_some_and(|ranges| serves(ranges, slot)));
            if let Some(slot) = missing {
                return Err(format!(
                    "{name} does not see slot {slot} on its new primary yet"
                ));
            }
        }
        Ok(())
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
    pub(super) async fn admit_cluster(&self) -> Result<(), LabError> {
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

    /// Moves `slots` of a cluster lab's group from one shard's primary to another's (shards
    /// 0-based), the way `redis-cli --cluster reshard` does: for each slot the target is set
    /// IMPORTING and the source MIGRATING, the slot's keys move in batches with MIGRATE, and
    /// both are told the slot's new owner with `SETSLOT NODE`. Clients that follow MOVED and
    /// ASK keep working throughout. Returns once the group's running nodes agree that the
    /// target serves every slot. A failure leaves the slot it was moving half migrated;
    /// the error names it.
    pub async fn migrate_slots(
        &mut self,
        group: usize,
        from: usize,
        to: usize,
        slots: RangeInclusive<u16>,
    ) -> Result<MigrationReport, LabError> {
        if slots.is_empty() || *slots.end() >= CLUSTER_SLOTS {
            return Err(LabError::InvalidArgument {
                field: "slots",
                reason: format!(
                    "{}-{} is not a range within 0-{}",
                    slots.start(),
                    slots.end(),
                    CLUSTER_SLOTS - 1
                ),
            });
        }
        let ends = self.move_ends(group, from, to, &slots).await?;
        let MoveEnds {
            source,
            target,
            ref target_id,
            ref target_port,
            ref password,
            ..
        } = ends;
        let mut keys = 0;
        for slot in slots.clone() {
            let slot_text = slot.to_string();
            self.open_slot(&ends, &slot_text).await?;
            keys += self
                .move_keys(source, &slot_text, target_port, password.as_deref(), None)
                .await?;
            for node in [target, source] {
                self.call_node(
                    node,
                    &["CLUSTER", "SETSLOT", &slot_text, "NODE", target_id],
                    CONTROL_TIMEOUT,
                )
                .await?;
            }
        }
        let moved = Agreement::Moved {
            slots: slots.clone(),
            to: target_id.clone(),
        };
        self.wait_agreement(&[group], &moved, Instant::now() + SETTLE_TIMEOUT)
            .await?;
        Ok(MigrationReport {
            from: self.node(source, group),
            to: self.node(target, group),
            slots: slots.len(),
            keys,
        })
    }

    /// Starts moving `slot` of a cluster lab's group from one shard's primary to another's
    /// (shards 0-based) as [`Lab::migrate_slots`] does, moves only its first `keys` keys in
    /// `CLUSTER GETKEYSINSLOT` order (newest first, as `redis-cli` moves them), and breaks
    /// off as `interruption` says, leaving the source serving the slot without the keys that
    /// left. Returns once the source serves the slot again.
    pub async fn interrupt_migration(
        &mut self,
        group: usize,
        from: usize,
        to: usize,
        slot: u16,
        keys: usize,
        interruption: Interruption,
    ) -> Result<MigrationReport, LabError> {
        let ends = self.move_ends(group, from, to, &(slot..=slot)).await?;
        let (source, target) = (ends.source, ends.target);
        let slot_text = slot.to_string();
        self.open_slot(&ends, &slot_text).await?;
        let moved = self
            .move_keys(
                source,
                &slot_text,
                &ends.target_port,
                ends.password.as_deref(),
                Some(keys),
            )
            .await?;
        let to_node = self.node(target, group);
        let stable = ["CLUSTER", "SETSLOT", &slot_text, "STABLE"];
        match interruption {
            Interruption::ClosedBack => {
                self.call_node(target, &stable, CONTROL_TIMEOUT).await?;
            }
            Interruption::TargetKilled => {
                self.kill_index(target, group).await?;
            }
        }
        self.call_node(source, &stable, CONTROL_TIMEOUT).await?;
        Ok(MigrationReport {
            from: self.node(source, group),
            to: to_node,
            slots: 1,
            keys: moved,
        })
    }

    /// The two primaries of a move of `slots` from shard `from` to shard `to` of `group`,
    /// checked: distinct shards, both running, and the source serving every slot.
    async fn move_ends(
        &self,
        group: usize,
        from: usize,
        to: usize,
        slots: &RangeInclusive<u16>,
    ) -> Result<MoveEnds, LabError> {
        self.check_shard(group, from)?;
        self.check_shard(group, to)?;
        if from == to {
            return Err(LabError::InvalidArgument {
                field: "to",
                reason: format!("is shard s{} too; pick another shard", from + 1),
            });
        }
        let source = self.running_primary_index(group, from).await?;
        let target = self.running_primary_index(group, to).await?;
        let ends = MoveEnds {
            source,
            target,
            source_id: self.node_id(source).to_string(),
            target_id: self.node_id(target).to_string(),
            target_port: self.state.nodes[target].port.to_string(),
            password: self.state.spec.password.clone(),
        };
        self.check_serves(source, &ends.source_id, slots).await?;
        Ok(ends)
    }

    /// Sets `slot` IMPORTING on the target and MIGRATING on the source, as `redis-cli` does
    /// before it moves a slot's keys.
    async fn open_slot(&self, ends: &MoveEnds, slot: &str) -> Result<(), LabError> {
        self.call_node(
            ends.target,
            &["CLUSTER", "SETSLOT", slot, "IMPORTING", &ends.source_id],
            CONTROL_TIMEOUT,
        )
        .await?;
        self.call_node(
            ends.source,
            &["CLUSTER", "SETSLOT", slot, "MIGRATING", &ends.target_id],
            CONTROL_TIMEOUT,
        )
        .await?;
        Ok(())
    }

    /// Refuses a migration of slots the source does not serve, naming the first one.
    async fn check_serves(
        &self,
        source: usize,
        source_id: &str,
        slots: &RangeInclusive<u16>,
    ) -> Result<(), LabError> {
        let record = &self.state.nodes[source];
        let lines = self
            .cluster_nodes(source)
            .await
            .map_err(|reason| LabError::Command {
                node: record.name.clone(),
                command: "CLUSTER NODES".into(),
                reason,
            })?;
        let Some(own) = lines.iter().find(|line| line.id == source_id) else {
            return Err(LabError::Command {
                node: record.name.clone(),
                command: "CLUSTER NODES".into(),
                reason: format!("its own ID {source_id} is missing from the reply"),
            });
        };
        match slots.clone().find(|&slot| !own.serves(slot)) {
            None => Ok(()),
            Some(slot) => Err(LabError::InvalidArgument {
                field: "slots",
                reason: format!(
                    "slot {slot} is not served by {}, the source shard's primary (it serves {})",
                    record.name,
                    own.slots.join(" ")
                ),
            }),
        }
    }

    /// Moves every key of one slot from `source` to the node on `target_port`, in batches in
    /// the order `CLUSTER GETKEYSINSLOT` lists them, as `redis-cli --cluster reshard` does; or
    /// only the first `limit` keys listed.
    async fn move_keys(
        &self,
        source: usize,
        slot: &str,
        target_port: &str,
        password: Option<&str>,
        limit: Option<usize>,
    ) -> Result<usize, LabError> {
        let timeout = MIGRATE_TIMEOUT_MS.to_string();
        let mut moved = 0;
        loop {
            let batch = match limit {
                Some(limit) if limit <= moved => return Ok(moved),
                Some(limit) => (limit - moved).min(MIGRATE_BATCH),
                None => MIGRATE_BATCH,
            }
            .to_string();
            let reply = self
                .call_node(
                    source,
                    &["CLUSTER", "GETKEYSINSLOT", slot, &batch],
                    CONTROL_TIMEOUT,
                )
                .await?;
            let keys: Vec<&str> = reply
                .items()
                .unwrap_or_default()
                .iter()
                .filter_map(Reply::text)
                .collect();
            if keys.is_empty() {
                return Ok(moved);
            }
            let mut args = vec!["MIGRATE", "127.0.0.1", target_port, "", "0", &timeout];
            if let Some(password) = password {
                args.extend(["AUTH", password]);
            }
            args.push("KEYS");
            args.extend(&keys);
            self.call_node(source, &args, MIGRATE_CALL_TIMEOUT)
                .await
                .map_err(|error| match error {
                    LabError::Command {
                        node,
                        command,
                        reason,
                    } => LabError::Command {
                        node,
                        command: format!("{command} of slot {slot}"),
                        reason,
                    },
                    other => other,
                })?;
            moved += keys.len();
        }
    }
}

/// The primaries of a slot move, by node index, with what the move's commands need.
struct MoveEnds {
    source: usize,
    target: usize,
    source_id: String,
    target_id: String,
    target_port: String,
    password: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_nodes_lines_give_roles_slots_and_ports_without_migration_entries() {
        let text = "\
07c3 127.0.0.1:30004@40004 slave e7d1 0 1426238317239 4 connected
e7d1 127.0.0.1:30001@40001,host myself,master - 0 0 1 connected 0-5460 5462 [5461->-abcd]
292f 127.0.0.1:30002@40002 master,fail? - 0 1426238316232 2 connected 5463-10922
";
        let lines = parse_nodes(text).expect("valid");
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0].primary.as_deref(), Some("e7d1"));
        assert!(!lines[0].is_primary());
        assert_eq!(lines[1].port, 30001);
        assert_eq!(lines[1].slots, vec!["0-5460", "5462"]);
        assert!(lines[1].serves(0) && lines[1].serves(5460) && lines[1].serves(5462));
        assert!(!lines[1].serves(5461));
        assert!(lines[2].is_failing() && lines[2].is_primary());
        assert!(parse_nodes("too short").is_err());
    }
}
