//! `cluster_health`: whether enough groups vote to grant locks, and each group's state.

use rmcp::model::JsonObject;

use super::super::arguments::decode;
use super::super::contract::{ClusterHealthArgs, ClusterHealthResult, GroupHealthView, HealthVote};
use super::super::handler::LockServer;
use super::super::reply::{Reply, ToolError};
use crate::Admission;

impl LockServer {
    pub(super) async fn health(&self, arguments: JsonObject) -> Result<Reply, ToolError> {
        let _: ClusterHealthArgs = decode(arguments)?;
        let shared = self.shared();
        let health = shared.locks.health().await;
        let groups: Vec<GroupHealthView> = health
            .groups
            .into_iter()
            .map(|group| {
                if !group.reachable {
                    shared.metrics.group_error(&group.group);
                }
                shared
                    .metrics
                    .group_unsafe(&group.group, !group.unsafe_settings.is_empty());
                let quarantine_remaining_ms = match group.admission {
                    Admission::Quarantined { remaining_ms } => Some(remaining_ms),
                    _ => None,
                };
                let vote = HealthVote::from(&group.admission);
                GroupHealthView {
                    group: group.group,
                    master: group.master,
                    reachable: group.reachable,
                    latency_ms: group.latency_ms,
                    role: group.role,
                    replicas: group.replicas,
                    sentinels_agree: group.sentinels_agree,
                    vote,
                    quarantine_remaining_ms,
                    error: group.error,
                    unsafe_settings: group.unsafe_settings,
                }
            })
            .collect();
        let reachable = groups.iter().filter(|g| g.reachable).count();
        let unreachable: Vec<&str> = groups
            .iter()
            .filter(|g| !g.reachable)
            .map(|g| g.group.as_str())
            .collect();
        let summary = if health.quorum_available {
            format!(
                "quorum available: {} of {} groups vote ({} needed){}",
                health.voting,
                groups.len(),
                health.quorum,
                if unreachable.is_empty() {
                    String::new()
                } else {
                    format!("; unreachable: {}", unreachable.join(", "))
                }
            )
        } else {
            format!(
                "NO quorum: only {} of {} groups vote ({} needed); unreachable: {}. Locks cannot be granted until they are back",
                health.voting,
                groups.len(),
                health.quorum,
                unreachable.join(", ")
            )
        };
        Reply::new(
            summary,
            &ClusterHealthResult {
                quorum_available: health.quorum_available,
                needed: health.quorum,
                reachable,
                voting: health.voting,
                groups,
            },
        )
    }
}
