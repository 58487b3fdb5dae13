//! Breaking and repairing a running lab: cut, heal and slow a master's links at its relay;
//! kill, freeze, thaw and restart nodes, and make an old master a replica again.

use std::time::{Duration, Instant};

use super::probe::parse_role;
use super::process::find_redis_server;
use super::relay::{self, LinkClass};
use super::{CONTROL_TIMEOUT, Lab, LabError, Node, RESTART_TIMEOUT, Readiness, resp};

impl Lab {
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

    pub(super) fn require_links(&self) -> Result<(), LabError> {
        if self.state.spec.links {
            Ok(())
        } else {
            Err(LabError::NoLinks)
        }
    }

    /// Sends one control command to the relay of a node.
    pub(super) async fn relay_command(
        &self,
        index: usize,
        command: &str,
    ) -> Result<String, LabError> {
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

    pub(super) async fn kill_index(
        &mut self,
        index: usize,
        group: usize,
    ) -> Result<Node, LabError> {
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

    pub(super) fn freeze_index(&mut self, index: usize, group: usize) -> Result<Node, LabError> {
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

    pub(super) async fn restart_indexes(
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
}
