//! Reading the groups' lock policies, and adopting the largest for a master that answers
//! with none once a majority of groups hold one.

use std::sync::{Arc, PoisonError};

use fred::types::Value;

use super::parse_policy;
use crate::engine::health::read_write_settings;
use crate::engine::locks::Engine;
use crate::engine::protocol::Policy;
use crate::engine::resource::{admission_key, policy_key};
use crate::group::cluster::Every;
use crate::group::reply::Reply;
use crate::group::reply::integer;
use crate::group::scripts::GroupScript;

/// What one group answered when asked for its lock policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PolicyAnswer {
    Held(Policy),
    /// It answered, with no policy.
    Missing,
    /// It did not answer (down, cut off, timed out).
    NoAnswer,
}

impl PolicyAnswer {
    pub(super) fn policy(&self) -> Option<Policy> {
        match self {
            PolicyAnswer::Held(policy) => Some(*policy),
            PolicyAnswer::Missing | PolicyAnswer::NoAnswer => None,
        }
    }
}

/// Whether `group`'s master holds a lock policy (a master that does not answer counts as
/// having none: admitting it is refused until it answers).
pub(super) async fn group_has_policy(group: &crate::group::Group, policy: &str) -> bool {
    let replies = group
        .eval_group::<Vec<Value>>(
            Every::Slot,
            GroupScript::Policy,
            vec![policy.into()],
            vec![],
        )
        .await;
    replies
        .iter()
        .all(|reply| matches!(reply, Reply::Answer(values) if parse_policy(values).is_some()))
}

/// One group's policy from what its master (or each slot of a Cluster group) answered: no
/// answer when any part did not answer, since it may hold a larger policy; else the largest
/// held; else none.
fn group_policy(replies: &[Reply<Vec<Value>>]) -> PolicyAnswer {
    let mut held: Option<Policy> = None;
    for reply in replies {
        match reply {
            Reply::Answer(values) => {
                if let Some(policy) = parse_policy(values) {
                    held = Some(held.map_or(policy, |seen| seen.merge(policy)));
                }
            }
            _ => return PolicyAnswer::NoAnswer,
        }
    }
    match (replies.is_empty(), held) {
        (true, _) => PolicyAnswer::NoAnswer,
        (false, Some(policy)) => PolicyAnswer::Held(policy),
        (false, None) => PolicyAnswer::Missing,
    }
}

impl Engine {
    /// Gives the groups marked in `unadmitted` (they answered that they have no lock policy)
    /// the largest policy of the groups, once a majority of groups answered with one. In a
    /// task of its own, off the caller's path; a group already being adopted is skipped.
    pub(crate) fn adopt_policies(self: &Arc<Self>, unadmitted: Vec<bool>) {
        let targets: Vec<bool> = {
            let mut adopting = self.adopting.lock().unwrap_or_else(PoisonError::into_inner);
            unadmitted
                .iter()
                .zip(adopting.iter_mut())
                .map(|(&wanted, busy)| {
                    let start = wanted && !*busy;
                    *busy |= start;
                    start
                })
                .collect()
        };
        if !targets.contains(&true) {
            return;
        }
        let engine = self.clone();
        self.cleanup.spawn(async move {
            engine.adopt(&targets).await;
            let mut adopting = engine
                .adopting
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            for (busy, &done) in adopting.iter_mut().zip(&targets) {
                *busy &= !done;
            }
        });
    }

    /// Every group's lock policy (`None` where it has none or did not answer).
    pub(crate) async fn read_policies(&self) -> Vec<Option<Policy>> {
        self.read_policy_answers()
            .await
            .iter()
            .map(PolicyAnswer::policy)
            .collect()
    }

    /// What each group answered when asked for its lock policy.
    pub(super) async fn read_policy_answers(&self) -> Vec<PolicyAnswer> {
        let policy = policy_key(&self.topology.key_prefix);
        let replies = futures::future::join_all(self.groups.iter().map(|group| {
            group.eval_group::<Vec<Value>>(
                Every::Slot,
                GroupScript::Policy,
                vec![policy.as_str().into()],
                vec![],
            )
        }))
        .await;
        replies
            .iter()
            .map(|replies| group_policy(replies))
            .collect()
    }

    async fn adopt(&self, targets: &[bool]) {
        let prefix = &self.topology.key_prefix;
        let policy = policy_key(prefix);
        let answers = self.read_policies().await;
        let Some(adopted) = Policy::adopt(&answers, self.majority) else {
            tracing::warn!(
                with_policy = answers.iter().flatten().count(),
                needed = self.majority.needed,
                "a master lost its lock policy and too few groups hold one to adopt: it stays out of the vote until `quorumlock admit`"
            );
            return;
        };
        let marker = admission_key(prefix);
        let keys = vec![marker.as_str().into(), policy.as_str().into()];
        let adoptions = self
            .groups
            .iter()
            .zip(targets)
            .filter(|(_, target)| **target)
            .map(|(group, _)| {
                let keys = keys.clone();
                async move {
                    let adopted = own_window(group, adopted).await;
                    let args = vec![
                        Value::from(adopted.max_ttl_ms.to_string()),
                        Value::from(adopted.write_window_ms.to_string()),
                        Value::from(adopted.acked_replicas.to_string()),
                    ];
                    let replies = group
                        .eval_group::<Vec<Value>>(Every::Slot, GroupScript::Adopt, keys, args)
                        .await;
                    // Adopted where any part lacked the policy; unanswered where any part
                    // did not answer, so the next vote tries again.
                    let done = replies.iter().any(
                        |reply| matches!(reply, Reply::Answer(values) if integer(values.first()) == Some(1)),
                    );
                    let reply = match replies.iter().find(|reply| !matches!(reply, Reply::Answer(_))) {
                        Some(_) => Reply::Timeout,
                        None => Reply::Answer(vec![Value::from(i64::from(done))]),
                    };
                    (group, adopted, reply)
                }
            });
        for (group, adopted, reply) in futures::future::join_all(adoptions).await {
            match reply {
                Reply::Answer(values) if integer(values.first()) == Some(1) => tracing::info!(
                    group = group.name,
                    max_ttl_ms = adopted.max_ttl_ms,
                    write_window_ms = adopted.write_window_ms,
                    quarantine_ms = adopted.quarantine_ms(),
                    "a master that lost its data adopted the lock policy of a majority of groups; it sits out its quarantine"
                ),
                Reply::Answer(_) => {}
                _ => tracing::debug!(
                    group = group.name,
                    "adopting a lock policy did not answer; the next vote tries again"
                ),
            }
        }
    }
}

/// The adopted policy with at least the write window `group`'s own masters need: the
/// others' policy says nothing about a group that runs a longer `min-replicas-max-lag` or
/// `cluster-node-timeout`. Settings that cannot be read leave the adopted policy as it is,
/// with a warning naming the group.
async fn own_window(group: &crate::group::Group, adopted: Policy) -> Policy {
    match read_write_settings(group).await {
        Ok(settings) => Policy {
            write_window_ms: adopted.write_window_ms.max(settings.needed_window_ms()),
            ..adopted
        },
        Err(unread) => {
            tracing::warn!(
                group = group.name,
                reason = %unread,
                write_window_ms = adopted.write_window_ms,
                "cannot read the settings that bound this group's write window: it adopts the other groups' window, which may not cover what its masters need; check it with `quorumlock health`"
            );
            adopted
        }
    }
}
