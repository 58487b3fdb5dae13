//! The library's error type: every failure says what happened and what to do next.

use crate::config::ConfigError;
use crate::engine::health::{ReplicaSetting, WindowSetting};
use crate::engine::vote::{GroupVote, Vote, failed_group_names};
use crate::group::SetupError;

/// Who holds a lock, as far as the groups told us.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "mcp", derive(schemars::JsonSchema))]
pub struct Holder {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purpose: Option<String>,
    /// Milliseconds left on the holder's lease (it may extend it).
    pub remaining_ms: u64,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.owner.as_deref().unwrap_or("an unnamed owner"))?;
        if let Some(purpose) = &self.purpose {
            write!(f, " ({purpose})")?;
        }
        write!(f, " for another {} ms", self.remaining_ms)
    }
}

/// Everything that can go wrong in quorumlock.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A caller-supplied value is out of bounds; `field` names it.
    #[error("invalid {field}: {reason}")]
    InvalidInput { field: &'static str, reason: String },

    /// Someone else holds the lock and `wait` ran out.
    #[error("`{resource}` is held by {}; wait for it, or retry later", holder.as_ref().map_or_else(|| "another holder".to_string(), Holder::to_string))]
    Held {
        resource: String,
        holder: Option<Holder>,
        votes: Vec<GroupVote>,
    },

    /// Not enough groups answered to decide: the infrastructure failed, not the contention.
    #[error(
        "no quorum for `{resource}`: {needed} of {total} groups must answer, but these failed: {}. Check them with `quorumlock health`; the lock was not taken",
        failed_group_names(votes).join(", ")
    )]
    Unavailable {
        resource: String,
        needed: usize,
        total: usize,
        votes: Vec<GroupVote>,
    },

    /// Too few groups answered for a listing to tell which locks are held.
    #[error(
        "cannot list `{locks}`: {needed} of {total} groups must answer to tell which locks are held, but these failed: {}. Check them with `quorumlock health`, then list again",
        failed_group_names(votes).join(", ")
    )]
    ListingUnavailable {
        /// The listing's prefix followed by `*`, or the one lock it could not decide.
        locks: String,
        needed: usize,
        total: usize,
        votes: Vec<GroupVote>,
    },

    /// A majority granted, but too late: the time left was used up by the round trips.
    #[error(
        "acquiring `{resource}` took {elapsed_ms} ms, longer than its TTL minus the drift allowance; the grants were rolled back. Use a longer ttl, or a shorter call timeout"
    )]
    Expired {
        resource: String,
        elapsed_ms: u64,
        votes: Vec<GroupVote>,
    },

    /// The token no longer holds the lock on a majority (it expired, was released, or the
    /// lock was force-released).
    #[error(
        "the lease on `{resource}` is not held by this token on a majority of groups (expired or released); acquire it again"
    )]
    NotHeld {
        resource: String,
        votes: Vec<GroupVote>,
    },

    /// The topology configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),

    /// A group's client could not be set up (not a network failure: those are votes).
    #[error("cannot set up group {group}: {message}")]
    Setup { group: String, message: String },

    /// A lease kept alive for some work ([`crate::Locks::with_lock`]) ended before the work
    /// did; the work was stopped.
    #[error(
        "the lease on `{resource}` was lost while the work ran ({reason}); the work was stopped and may be partly done: check what it wrote (fenced storage rejects writes under its fencing token once a later holder wrote), then acquire again"
    )]
    LeaseLost { resource: String, reason: String },
}

/// Why [`crate::Locks::admit`] left a group out before writing to its master: what the
/// master runs does not bound the write window asked for, or could not be read. Each
/// refusal has an escape of its own in [`crate::AdmitOptions`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize)]
#[serde(tag = "refusal", rename_all = "snake_case")]
pub enum AdmitRefusal {
    /// The window asked for is below what a setting of the master needs.
    #[error(
        "{group}: {setting} {value} {} on {primary} lets a master cut off from its replicas or its cluster take writes for up to {needed_ms} ms, longer than the write window of {window_ms} ms asked for: leave --write-window-ms out to admit it under {needed_ms} ms, or accept the gap with --allow-short-window (health then flags it)",
        if matches!(setting, WindowSetting::MinReplicasMaxLag) { "s" } else { "ms" }
    )]
    ShortWindow {
        group: String,
        /// The master (Cluster primary) that needs the window, `host:port`.
        primary: String,
        setting: WindowSetting,
        value: u64,
        needed_ms: u64,
        window_ms: u64,
    },
    /// The master has replicas but takes writes without them, so no window covers an old
    /// master cut off from them.
    #[error(
        "{group}: its master {primary} has replicas and {setting} 0, so once cut off from them it goes on granting after Sentinel or the cluster promoted one, and no write window covers that: set min-replicas-to-write 1 and min-replicas-max-lag 10 on every data node of {group} (CONFIG SET, and in its config file), then admit it; or accept the risk with --allow-unreplicated-writes (health then flags it)"
    )]
    UnreplicatedWrites {
        group: String,
        /// The master (Cluster primary) that runs the setting, `host:port`.
        primary: String,
        setting: ReplicaSetting,
    },
    /// The settings that bound the write window could not be read.
    #[error(
        "{group}: cannot read the settings that bound its write window on its master ({reason}): check that the group is up (`quorumlock health`) and that its user may run CONFIG GET and INFO, then admit it; or admit it unchecked with --allow-unread-settings and a --write-window-ms that covers min-replicas-max-lag + 2 s (health then flags it)"
    )]
    SettingsUnread { group: String, reason: String },
    /// Acknowledged mode needs a replica to acknowledge.
    #[error(
        "{group}: its master has no replica, and acknowledged mode counts a vote only once every replica holds it: give each master of {group} a replica (replicaof), then admit it with --acknowledged"
    )]
    NoReplicas { group: String },
    /// Acknowledged mode is built on Sentinel's promotion rules, not a Cluster's.
    #[error(
        "{group}: is a Redis Cluster, and acknowledged mode is for Sentinel groups: admit it without --acknowledged"
    )]
    AcknowledgedCluster { group: String },
    /// A Sentinel knows a replica the master does not have connected: the policy would not
    /// name it, yet Sentinel may promote it once it is back.
    #[error(
        "{group}: Sentinel {sentinel} knows {known} replicas but the master has {connected} connected, and acknowledged mode needs every replica Sentinel may promote to hold each vote: bring the missing replica back and admit again, or remove it for good (SENTINEL RESET on every Sentinel, its data wiped)"
    )]
    ReplicaUnconnected {
        group: String,
        sentinel: String,
        known: usize,
        connected: usize,
    },
    /// No Sentinel said which replicas it knows.
    #[error(
        "{group}: no Sentinel said which replicas it knows ({reason}), and acknowledged mode needs every replica Sentinel may promote to be connected: check the Sentinels (`quorumlock health`), then admit again"
    )]
    SentinelsUnread { group: String, reason: String },
}

impl From<SetupError> for Error {
    fn from(error: SetupError) -> Self {
        match error {
            SetupError::Config(error) => Error::Config(error),
            SetupError::Client { group, message } => Error::Setup { group, message },
        }
    }
}

impl Error {
    pub(crate) fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidInput {
            field,
            reason: reason.into(),
        }
    }

    /// Every group's vote behind this error, when there was a vote.
    pub fn votes(&self) -> &[GroupVote] {
        match self {
            Error::Held { votes, .. }
            | Error::Unavailable { votes, .. }
            | Error::ListingUnavailable { votes, .. }
            | Error::Expired { votes, .. }
            | Error::NotHeld { votes, .. } => votes,
            _ => &[],
        }
    }

    /// True when the failure comes from the infrastructure (too few groups answered).
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            Error::Unavailable { .. } | Error::ListingUnavailable { .. }
        )
    }
}

/// Picks the holder named by the most `Held` votes.
pub(crate) fn majority_holder(votes: &[GroupVote]) -> Option<Holder> {
    let mut best: Option<(usize, Holder)> = None;
    for vote in votes {
        if let Vote::Held {
            owner,
            purpose,
            remaining_ms,
        } = &vote.vote
        {
            let holder = Holder {
                owner: owner.clone(),
                purpose: purpose.clone(),
                remaining_ms: *remaining_ms,
            };
            let same = votes
                .iter()
                .filter(|other| matches!(&other.vote, Vote::Held { owner: o, purpose: p, .. } if o == owner && p == purpose))
                .count();
            if best.as_ref().is_none_or(|(count, _)| same > *count) {
                best = Some((same, holder));
            }
        }
    }
    best.map(|(_, holder)| holder)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(owner: &str, remaining_ms: u64) -> GroupVote {
        GroupVote {
            group: "g".into(),
            vote: Vote::Held {
                owner: Some(owner.into()),
                purpose: None,
                remaining_ms,
            },
        }
    }

    #[test]
    fn the_holder_named_by_most_groups_is_reported() {
        let votes = vec![
            held("a", 100),
            held("b", 200),
            held("b", 300),
            GroupVote {
                group: "g".into(),
                vote: Vote::Timeout,
            },
        ];
        let holder = majority_holder(&votes).map(|h| h.owner);
        assert_eq!(holder, Some(Some("b".into())));
    }

    #[test]
    fn no_held_vote_names_no_holder() {
        let votes = vec![GroupVote {
            group: "g".into(),
            vote: Vote::Granted,
        }];
        assert_eq!(majority_holder(&votes), None);
    }
}
