//! Admission to the vote: a master that lost its data adopts the lock policy of a majority
//! of groups, and operators admit brand-new masters or raise the policy.
//!
//! The rule itself runs on the masters (`lua/admission.lua`); this side only fills in a
//! policy that a master lost, from what a majority of groups hold (`Policy::adopt`).

use std::sync::{Arc, PoisonError};
use std::time::Duration;

use fred::types::Value;

use crate::engine::clock::millis;
use crate::engine::error::Error;
use crate::engine::fan_out::fan_out;
use crate::engine::locks::{Engine, Locks};
use crate::engine::protocol::Policy;
use crate::engine::resource::{admission_key, policy_key};
use crate::group::reply::{Reply, integer};
use crate::group::scripts;

/// A policy as `lua/policy.lua` answers it: `{max_ttl_ms, write_window_ms}`, or `{}`.
pub(crate) fn parse_policy(values: &[Value]) -> Option<Policy> {
    Some(Policy {
        max_ttl_ms: integer(values.first())?,
        write_window_ms: integer(values.get(1)).unwrap_or(0),
    })
}

/// What [`Locks::admit`] did on one group.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GroupAdmission {
    pub group: String,
    /// The policy now in force on the group's master (a policy only grows, so it may be
    /// larger than the one asked for).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<Policy>,
    /// Why the master could not be admitted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Locks {
    /// Admits the masters of `groups` (names; empty: every group) to the vote under at least
    /// `policy`, after `delay` (zero: at once). For a brand-new deployment, for raising the
    /// policy, and for masters that lost their data when too few groups hold a policy for
    /// them to adopt one: then `delay` must cover every lease they may have missed (the
    /// policy's quarantine). Admitting a master at once that may have missed grants can hand
    /// one lock to two holders.
    pub async fn admit(
        &self,
        groups: &[String],
        policy: Policy,
        delay: Duration,
    ) -> Result<Vec<GroupAdmission>, Error> {
        let engine = &self.engine;
        for name in groups {
            if !engine.groups.iter().any(|group| &group.name == name) {
                return Err(Error::invalid(
                    "group",
                    format!("`{name}` is not a group of this topology"),
                ));
            }
        }
        let prefix = &engine.topology.key_prefix;
        let keys = vec![
            admission_key(prefix).as_str().into(),
            policy_key(prefix).as_str().into(),
        ];
        let args = vec![
            Value::from(policy.max_ttl_ms.to_string()),
            Value::from(policy.write_window_ms.to_string()),
            Value::from(millis(delay).to_string()),
        ];
        let chosen = engine
            .groups
            .iter()
            .filter(|group| groups.is_empty() || groups.contains(&group.name));
        let admissions = chosen.map(|group| {
            let (keys, args) = (keys.clone(), args.clone());
            async move {
                let reply = group.eval::<Vec<Value>>(&scripts::ADMIT, keys, args).await;
                let (policy, error) = match reply {
                    Reply::Answer(values) => match parse_policy(values.get(1..).unwrap_or(&[])) {
                        Some(policy) => (Some(policy), None),
                        None => (None, Some(format!("unexpected admit reply {values:?}"))),
                    },
                    Reply::Timeout => (None, Some("timeout".to_string())),
                    Reply::Failed(message) => (None, Some(message)),
                    Reply::NotSent(reason) => (None, Some(format!("not sent: {reason}"))),
                };
                GroupAdmission {
                    group: group.name.clone(),
                    policy,
                    error,
                }
            }
        });
        Ok(futures::future::join_all(admissions).await)
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

    async fn adopt(&self, targets: &[bool]) {
        let prefix = &self.topology.key_prefix;
        let policy = policy_key(prefix);
        let replies = fan_out(
            &self.groups,
            |group| {
                group.eval::<Vec<Value>>(&scripts::POLICY, vec![policy.as_str().into()], vec![])
            },
            |_| false,
        )
        .await;
        let answers: Vec<Option<Policy>> = replies
            .iter()
            .map(|reply| match reply {
                Some(Reply::Answer(values)) => parse_policy(values),
                _ => None,
            })
            .collect();
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
        let args = vec![
            Value::from(adopted.max_ttl_ms.to_string()),
            Value::from(adopted.write_window_ms.to_string()),
        ];
        let adoptions = self
            .groups
            .iter()
            .zip(targets)
            .filter(|(_, target)| **target)
            .map(|(group, _)| {
                let (keys, args) = (keys.clone(), args.clone());
                async move {
                    let reply = group.eval::<Vec<Value>>(&scripts::ADOPT, keys, args).await;
                    (group, reply)
                }
            });
        for (group, reply) in futures::future::join_all(adoptions).await {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_reply_is_read_and_an_empty_one_is_none() {
        assert_eq!(
            parse_policy(&[Value::Integer(60_000), Value::Integer(3_000)]),
            Some(Policy {
                max_ttl_ms: 60_000,
                write_window_ms: 3_000
            })
        );
        assert_eq!(parse_policy(&[]), None);
    }
}
