//! One lock read on every group: the inspect script's reply per group, and the lock as the
//! quorum sees it ([`LockStatus`]), for one resource or many in one script call per group.

use std::collections::HashMap;

use fred::types::Value;

use super::{GroupLockState, GroupView, HolderGroups, LockStatus};
use crate::engine::error::{Error, Holder};
use crate::engine::fan_out::fan_out;
use crate::engine::locks::{Locks, OwnerRecord};
use crate::engine::resource::{ResourceKeys, validate_resource};
use crate::group::SlotKeys;
use crate::group::reply::Reply;
use crate::group::reply::text;
use crate::group::scripts;
use crate::group::slots::HashSlot;

pub(super) struct Seen {
    pub(super) token: String,
    pub(super) remaining_ms: u64,
    pub(super) fence: u64,
    pub(super) record: OwnerRecord,
}

impl Seen {
    /// One lock's four values of an inspect reply.
    fn parse(values: &[Value]) -> Seen {
        let token = text(values.first());
        let remaining_ms = values.get(1).and_then(Value::as_i64).unwrap_or(-2);
        Seen {
            remaining_ms: u64::try_from(remaining_ms).unwrap_or(0),
            token: if remaining_ms > 0 {
                token
            } else {
                String::new()
            },
            fence: text(values.get(2)).parse().unwrap_or(0),
            record: OwnerRecord::parse(&text(values.get(3))),
        }
    }
}

/// One group's answer about one lock.
pub(super) enum Read {
    Seen(Seen),
    Timeout,
    Failed(Option<String>),
}

/// Values the inspect script answers per lock.
const INSPECT_VALUES: usize = 4;

impl Read {
    /// The `index`-th lock of one group's inspect reply.
    pub(super) fn of(reply: Option<&Reply<Vec<Value>>>, index: usize) -> Read {
        match reply {
            Some(Reply::Answer(values)) => {
                let from = index * INSPECT_VALUES;
                match values.get(from..from + INSPECT_VALUES) {
                    Some(one) => Read::Seen(Seen::parse(one)),
                    None => Read::Failed(Some(
                        "the inspect script answered fewer locks than it was asked".to_string(),
                    )),
                }
            }
            Some(Reply::Timeout) => Read::Timeout,
            Some(Reply::Failed(message)) => Read::Failed(Some(message.clone())),
            _ => Read::Failed(None),
        }
    }

    /// Group `group`'s view of the lock, from its read.
    fn view(&self, group: &str) -> GroupView {
        match self {
            Read::Seen(view) => GroupView {
                group: group.to_string(),
                state: if view.token.is_empty() {
                    GroupLockState::Free
                } else {
                    GroupLockState::Held
                },
                remaining_ms: (!view.token.is_empty()).then_some(view.remaining_ms),
                owner: view.record.owner.clone(),
                purpose: view.record.purpose.clone(),
                fence: (view.fence > 0).then_some(view.fence),
                error: None,
            },
            Read::Timeout | Read::Failed(_) => GroupView {
                group: group.to_string(),
                state: if matches!(self, Read::Timeout) {
                    GroupLockState::Timeout
                } else {
                    GroupLockState::Error
                },
                remaining_ms: None,
                owner: None,
                purpose: None,
                fence: None,
                error: match self {
                    Read::Failed(message) => message.clone(),
                    _ => None,
                },
            },
        }
    }
}

impl Locks {
    /// Reads the lock on every group.
    pub async fn status(&self, resource: &str) -> Result<LockStatus, Error> {
        validate_resource(resource)?;
        self.status_of(resource, &self.engine.resource_keys(resource))
            .await
    }

    /// Reads the lock behind `keys` (a resource's, or a semaphore slot's) on every group.
    pub(crate) async fn status_of(
        &self,
        resource: &str,
        keys: &ResourceKeys,
    ) -> Result<LockStatus, Error> {
        let keys = keys.inspect();
        let slot = HashSlot::of_resource(resource);
        let replies = fan_out(
            &self.engine.groups,
            |group| group.eval::<Vec<Value>>(slot, &scripts::INSPECT, keys.clone(), Vec::new()),
            |_| false,
        )
        .await;
        let reads = replies
            .iter()
            .map(|reply| Read::of(reply.as_ref(), 0))
            .collect();
        Ok(self.status_from(resource, reads))
    }

    /// The inspect script's keys of each of `resources`, with the slot each lives in.
    pub(super) fn inspect_keys<S: AsRef<str>>(&self, resources: &[S]) -> Vec<SlotKeys> {
        resources
            .iter()
            .map(|resource| SlotKeys {
                slot: HashSlot::of_resource(resource.as_ref()),
                keys: self.engine.resource_keys(resource.as_ref()).inspect(),
            })
            .collect()
    }

    /// Reads many locks on every group with one script call per group.
    pub(super) async fn statuses_of(&self, resources: &[&str]) -> Vec<LockStatus> {
        let keys = self.inspect_keys(resources);
        let replies = fan_out(&self.engine.groups, |group| group.inspect(&keys), |_| false).await;
        resources
            .iter()
            .enumerate()
            .map(|(index, resource)| {
                let reads = replies
                    .iter()
                    .map(|reply| Read::of(reply.as_ref(), index))
                    .collect();
                self.status_from(resource, reads)
            })
            .collect()
    }

    /// The lock as the quorum sees it, from each group's read (in group order).
    fn status_from(&self, resource: &str, reads: Vec<Read>) -> LockStatus {
        let engine = &self.engine;
        let seen: Vec<Option<&Seen>> = reads
            .iter()
            .map(|read| match read {
                Read::Seen(seen) => Some(seen),
                _ => None,
            })
            .collect();
        let mut tally: HashMap<&str, usize> = HashMap::new();
        for view in seen.iter().flatten().filter(|s| !s.token.is_empty()) {
            *tally.entry(view.token.as_str()).or_default() += 1;
        }
        let leader = tally
            .iter()
            .filter(|(_, votes)| **votes >= engine.majority.needed)
            .map(|(token, _)| *token)
            .next();
        let holding: Vec<&Seen> = seen
            .iter()
            .flatten()
            .filter(|s| Some(s.token.as_str()) == leader)
            .copied()
            .collect();
        let holder = holding
            .iter()
            .min_by_key(|s| s.remaining_ms)
            .map(|s| Holder {
                owner: s.record.owner.clone(),
                purpose: s.record.purpose.clone(),
                remaining_ms: s.remaining_ms,
            });
        let fencing_token = holding.iter().map(|s| s.fence).max();
        let groups = engine
            .groups
            .iter()
            .zip(&reads)
            .map(|(group, read)| read.view(&group.name))
            .collect();
        let holders = self.holders_of(&seen, &tally);
        LockStatus {
            resource: resource.to_string(),
            held: leader.is_some(),
            holder,
            fencing_token,
            groups,
            split: holders.len() > 1,
            holders,
        }
    }

    /// Every token some group holds the lock under (`tally` counts its groups), with its
    /// groups, most groups first.
    fn holders_of(
        &self,
        seen: &[Option<&Seen>],
        tally: &HashMap<&str, usize>,
    ) -> Vec<HolderGroups> {
        let engine = &self.engine;
        let mut holders: Vec<HolderGroups> = Vec::new();
        let mut tokens: Vec<&str> = tally.keys().copied().collect();
        tokens.sort_by_key(|token| std::cmp::Reverse(tally[token]));
        for token in tokens {
            let seen_with: Vec<(&str, &Seen)> = engine
                .groups
                .iter()
                .zip(seen)
                .filter_map(|(group, view)| match view {
                    Some(view) if view.token == token => Some((group.name.as_str(), *view)),
                    _ => None,
                })
                .collect();
            let Some((_, first)) = seen_with.first() else {
                continue;
            };
            holders.push(HolderGroups {
                owner: first.record.owner.clone(),
                purpose: first.record.purpose.clone(),
                remaining_ms: seen_with
                    .iter()
                    .map(|(_, v)| v.remaining_ms)
                    .min()
                    .unwrap_or(0),
                fencing_token: seen_with
                    .iter()
                    .map(|(_, v)| v.fence)
                    .max()
                    .filter(|f| *f > 0),
                groups: seen_with.iter().map(|(name, _)| name.to_string()).collect(),
                majority: seen_with.len() >= engine.majority.needed,
            });
        }
        holders
    }
}
