//! Putting a master or a Cluster slot back in quarantine, for losses the engine cannot see,
//! and the longest TTL the masters accept.

use std::time::Duration;

use fred::types::Value;

use super::describe;
use super::outcome::{GroupQuarantine, QuarantineScope};
use crate::engine::error::Error;
use crate::engine::locks::Locks;
use crate::engine::resource::{admission_key, policy_key};
use crate::group::cluster::Every;
use crate::group::reply::{Reply, integer};
use crate::group::scripts::{self, GroupScript};
use crate::group::slots::{HashSlot, SLOTS};

impl Locks {
    /// The longest TTL every master that answered accepts: the shortest `max_ttl_ms` among
    /// their lock policies. `None` when no master answered with a policy.
    pub async fn policy_max_ttl(&self) -> Option<Duration> {
        let policies = self.engine.read_policies().await;
        policies
            .iter()
            .flatten()
            .map(|policy| Duration::from_millis(policy.max_ttl_ms))
            .min()
    }

    /// Puts `scope` of group `group` back in quarantine (lua/quarantine.lua): it sits out
    /// max_ttl_ms + write_window_ms from now, as a promoted master does, and a quarantine in
    /// progress is never shortened. For losses the engine cannot see: a Cluster slot closed
    /// back on its source after some keys left it, keys restored by hand (see
    /// docs/operations.md). On a Sentinel group the master sits out whatever the scope.
    pub async fn quarantine(
        &self,
        group: &str,
        scope: &QuarantineScope,
    ) -> Result<GroupQuarantine, Error> {
        let engine = &self.engine;
        let Some(chosen) = engine.groups.iter().find(|g| g.name == group) else {
            return Err(Error::invalid(
                "group",
                format!("`{group}` is not a group of this topology"),
            ));
        };
        let prefix = &engine.topology.key_prefix;
        let keys = vec![
            admission_key(prefix).as_str().into(),
            policy_key(prefix).as_str().into(),
        ];
        let slot = slot_of(scope)?;
        let (quarantined, replies) = match (chosen.is_cluster(), slot) {
            (true, Some(slot)) => (
                format!("slot {}", slot.index()),
                vec![
                    chosen
                        .eval::<Vec<Value>>(slot, &scripts::QUARANTINE, keys, Vec::new())
                        .await,
                ],
            ),
            (true, None) => (
                "every slot".to_string(),
                chosen
                    .eval_group::<Vec<Value>>(Every::Slot, GroupScript::Quarantine, keys, vec![])
                    .await,
            ),
            (false, _) => (
                "master".to_string(),
                chosen
                    .eval_group::<Vec<Value>>(Every::Slot, GroupScript::Quarantine, keys, vec![])
                    .await,
            ),
        };
        Ok(outcome_of(chosen.name.clone(), quarantined, &replies))
    }
}

/// The hash slot a quarantine's scope names; `None` for the whole group.
fn slot_of(scope: &QuarantineScope) -> Result<Option<HashSlot>, Error> {
    Ok(match scope {
        QuarantineScope::Group => None,
        QuarantineScope::Slot(index) => Some(HashSlot::new(*index).ok_or_else(|| {
            Error::invalid(
                "slot",
                format!(
                    "{index} is not a hash slot: pick one from 0 to {}",
                    SLOTS - 1
                ),
            )
        })?),
        QuarantineScope::Resource(resource) => {
            crate::engine::resource::validate_resource(resource)?;
            Some(HashSlot::of_resource(resource))
        }
    })
}

/// What the quarantine scripts' `replies` say: how long until the group votes again, how
/// many runs found no policy, and the first failure.
fn outcome_of(
    group: String,
    quarantined: String,
    replies: &[Reply<Vec<Value>>],
) -> GroupQuarantine {
    let mut outcome = GroupQuarantine {
        group,
        quarantined,
        votes_in_ms: None,
        without_policy: 0,
        error: None,
    };
    let mut failed = 0;
    let mut first_failure = None;
    for reply in replies {
        match reply {
            Reply::Answer(values) if integer(values.first()) == Some(1) => {
                let left = integer(values.get(1)).unwrap_or(0);
                outcome.votes_in_ms = Some(outcome.votes_in_ms.map_or(left, |l| l.max(left)));
            }
            Reply::Answer(values) if integer(values.first()) == Some(0) => {
                outcome.without_policy += 1;
            }
            other => {
                failed += 1;
                first_failure.get_or_insert_with(|| match other {
                    Reply::Answer(values) => format!("unexpected reply {values:?}"),
                    other => describe(other),
                });
            }
        }
    }
    if let Some(why) = first_failure {
        outcome.error = Some(format!(
            "{failed} of {} runs failed (first: {why}). A slot whose marker or policy already left for another node sits out by itself once closed back here (no marker, or no policy); otherwise run the quarantine again before the slot votes",
            replies.len()
        ));
    }
    tracing::warn!(
        group = outcome.group,
        quarantined = outcome.quarantined,
        votes_in_ms = outcome.votes_in_ms,
        failed,
        "an operator put part of a group back in quarantine"
    );
    outcome
}
