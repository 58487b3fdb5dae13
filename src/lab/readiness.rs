//! Waiting until a lab is usable: nodes answer, replicas are linked, Sentinels see every
//! group, replicas hold the lock policy; failing early when a process exits.

use std::time::Instant;

use super::confs::group_name;
use super::probe::{field_map, good_replicas, ping, replica_link_up};
use super::process::{exit_error, relay_exit_error};
use super::state::NodeRecord;
use super::{CONTROL_TIMEOUT, Lab, LabError, NodeKind, POLL_INTERVAL, relay, resp};
use crate::protocol::Policy;

/// How far a node must have come before a wait is over.
#[derive(Clone, Copy)]
pub(super) enum Readiness {
    /// Answers PING.
    Answers,
    /// Masters answer, replicas have a live link to their master, Sentinels see every group.
    Serving,
}

impl Lab {
    /// Waits until every replica holds the lock policy: a replica promoted before it arrived
    /// would have none, and with `min-replicas-to-write` it could not adopt one either. A
    /// replica that has just synced gets the stream from its first acknowledgement, up to a
    /// second later.
    pub(super) async fn wait_for_policy(&mut self, deadline: Instant) -> Result<(), LabError> {
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

    /// Polls until every listed node is ready, failing early if one of our children exits.
    pub(super) async fn wait_until(
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
    pub(super) async fn poll_ready(
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

    pub(super) fn check_not_exited(&mut self, indexes: &[usize]) -> Result<(), LabError> {
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
    pub(super) async fn first_pending(
        &self,
        indexes: &[usize],
        readiness: Readiness,
    ) -> Option<String> {
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
    pub(super) async fn sentinel_sees_all(&self, sentinel: &NodeRecord) -> Result<(), String> {
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
