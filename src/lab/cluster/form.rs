//! Forming a cluster lab's clusters: slots, `CLUSTER MEET`, `CLUSTER REPLICATE`, and the
//! wait until every node of a group agrees on the slot map.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;
use std::time::Instant;

use super::nodes::{NodeLine, serves};
use crate::lab::confs::{CLUSTER_SLOTS, group_name, slot_ranges};
use crate::lab::probe::replica_link_up;
use crate::lab::resp::{self, Reply};
use crate::lab::{CONTROL_TIMEOUT, Lab, LabError, NodeKind};

/// What one node believes about another: the part every node must agree on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Belief {
    primary: bool,
    replica_of: Option<String>,
    slots: Vec<String>,
}

/// One node's slot map and roles, by node ID.
pub(super) type View = BTreeMap<String, Belief>;

pub(super) fn view_of(lines: &[NodeLine]) -> View {
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
pub(super) enum Agreement {
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
pub(super) fn info_fields(reply: &Reply) -> BTreeMap<String, String> {
    reply
        .text()
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.trim().split_once(':'))
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect()
}

impl Lab {
    /// Turns the lab's freshly started, empty nodes into one cluster per group and returns
    /// once every node of every group agrees on the slot map (or `deadline` passes).
    pub(in crate::lab) async fn form_clusters(
        &mut self,
        deadline: Instant,
    ) -> Result<(), LabError> {
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
    pub(super) async fn wait_agreement(
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
    /// Whether the node on `port` reports its cluster ok with every slot assigned.
    async fn check_every_slot_assigned(&self, name: &str, port: u16) -> Result<(), String> {
        let info = resp::call(&self.control, port, &["CLUSTER", "INFO"], CONTROL_TIMEOUT)
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
        Ok(())
    }

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
            self.check_every_slot_assigned(name, record.port).await?;
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
}
