//! What admitting or quarantining did on each group, as the CLI and MCP show it.

use crate::engine::error::AdmitRefusal;
use crate::engine::protocol::Policy;

/// What [`Locks::admit`] did on one group.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GroupAdmission {
    pub group: String,
    /// The policy now in force on the group's master (a policy only grows, so it may be
    /// larger than the one asked for).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<Policy>,
    /// Milliseconds until the master votes: the delay asked for, or longer when a
    /// quarantine in progress, or one that starts now, outlasts it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub votes_in_ms: Option<u64>,
    /// Replicas that acknowledged the policy, of those connected: a replica promoted before
    /// it saw a raised policy would sit out the old, shorter quarantine.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<ReplicaAcks>,
    /// Why the master was not admitted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The refusal, when the master's settings were the reason (`error` has its words).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusal: Option<AdmitRefusal>,
}

/// Replicas that acknowledged a write, of those connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ReplicaAcks {
    pub acknowledged: u64,
    pub connected: u64,
}

/// What [`Locks::quarantine`] puts back in quarantine on one group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuarantineScope {
    /// The whole group: its master, or every slot of a Cluster group.
    Group,
    /// One hash slot of a Cluster group (0 to 16383); a Sentinel group's master.
    Slot(u16),
    /// The slot of one resource in a Cluster group; a Sentinel group's master.
    Resource(String),
}

/// What [`Locks::quarantine`] did on one group.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GroupQuarantine {
    pub group: String,
    /// What sits out: `master`, `slot <n>`, or `every slot`.
    pub quarantined: String,
    /// Milliseconds until it votes again (the longest over its slots): at least the
    /// policy's quarantine, longer when one in progress outlasts it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub votes_in_ms: Option<u64>,
    /// Slots (or the master) with no lock policy: they do not vote anyway.
    #[serde(skip_serializing_if = "is_zero")]
    pub without_policy: usize,
    /// Why it was not (wholly) quarantined, and what to do.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

fn is_zero(count: &usize) -> bool {
    *count == 0
}
