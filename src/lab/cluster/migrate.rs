//! Moving slots of a cluster lab from one shard to another, whole or interrupted partway.

use std::ops::RangeInclusive;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::form::Agreement;
use crate::lab::confs::CLUSTER_SLOTS;
use crate::lab::resp::Reply;
use crate::lab::{CONTROL_TIMEOUT, Lab, LabError, Node};

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

impl Lab {
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
