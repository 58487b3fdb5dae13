//! Read-only views of locks: one lock as each group sees it, and the current locks and
//! semaphores.

use std::collections::HashMap;

use fred::types::Value;
use futures::StreamExt;
use serde::Serialize;

use crate::engine::error::{Error, Holder};
use crate::engine::fan_out::fan_out;
use crate::engine::locks::{Locks, OwnerRecord};
use crate::engine::resource::{ResourceKeys, validate_resource};
use crate::engine::semaphore::SemaphoreStatus;
use crate::group::reply::Reply;
use crate::group::reply::text;
use crate::group::scripts;

/// One group's view of one lock.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[cfg_attr(feature = "mcp", derive(schemars::JsonSchema))]
pub struct GroupView {
    pub group: String,
    pub state: GroupLockState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remaining_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub purpose: Option<String>,
    /// Highest fencing token this group has committed for the resource.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fence: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What one group says of a lock.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[cfg_attr(feature = "mcp", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum GroupLockState {
    /// The group holds the lock for some token.
    Held,
    /// The group holds no lock for the resource.
    Free,
    /// No answer within the per-call timeout.
    Timeout,
    /// The call failed; `error` says why.
    Error,
}

impl GroupLockState {
    /// The name used in JSON and tables.
    pub fn as_str(self) -> &'static str {
        match self {
            GroupLockState::Held => "held",
            GroupLockState::Free => "free",
            GroupLockState::Timeout => "timeout",
            GroupLockState::Error => "error",
        }
    }
}

/// Compares with the JSON name, as scripts and tests read it.
impl PartialEq<&str> for GroupLockState {
    fn eq(&self, name: &&str) -> bool {
        self.as_str() == *name
    }
}

impl std::fmt::Display for GroupLockState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A lock as the quorum sees it. Advisory: it may change right after it is read.
#[derive(Debug, Clone, Serialize)]
pub struct LockStatus {
    pub resource: String,
    /// True when a majority of groups hold the same token.
    pub held: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder: Option<Holder>,
    /// The holder's fencing token, when held.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fencing_token: Option<u64>,
    pub groups: Vec<GroupView>,
    /// Every token some group holds the lock under, with its groups, most groups first.
    pub holders: Vec<HolderGroups>,
    /// True when the groups hold the lock under more than one token: a split (a lease that
    /// expired on some groups, a grant a rollback has not removed yet, or a broken
    /// assumption). Each holder is listed with its groups.
    pub split: bool,
}

/// One token the lock is held under, as the groups holding it see it. The token itself is
/// a secret and is not shown.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[cfg_attr(feature = "mcp", derive(schemars::JsonSchema))]
pub struct HolderGroups {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub purpose: Option<String>,
    /// The shortest time left on any of its groups.
    pub remaining_ms: u64,
    /// The highest fence among its groups: its fencing token, or above it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fencing_token: Option<u64>,
    /// The groups that hold the lock under this token.
    pub groups: Vec<String>,
    /// True when these groups are a majority.
    pub majority: bool,
}

/// One current lock, as listed.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "mcp", derive(schemars::JsonSchema))]
pub struct ListedLock {
    pub resource: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub purpose: Option<String>,
    pub remaining_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fencing_token: Option<u64>,
}

/// Current locks and semaphores whose name starts with a prefix.
#[derive(Debug, Clone, Serialize)]
pub struct LockList {
    pub locks: Vec<ListedLock>,
    /// Semaphores with at least one permit held, one entry each: the permit count and who
    /// holds which permit. Sorted by name.
    pub semaphores: Vec<SemaphoreStatus>,
    /// True when more locks and semaphores matched than `limit`.
    pub truncated: bool,
}

/// What a listing found a key of: a lock, or a slot of a semaphore.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Candidate {
    Lock(String),
    Semaphore(String),
}

impl Candidate {
    fn name(&self) -> &str {
        match self {
            Candidate::Lock(name) | Candidate::Semaphore(name) => name,
        }
    }
}

/// What the quorum says of a candidate.
enum Listed {
    Lock(ListedLock),
    Semaphore(SemaphoreStatus),
    /// Not held on a majority (a key some group still has).
    Free,
}

/// Largest `limit` accepted by [`Locks::list`].
pub const MAX_LIST_LIMIT: usize = 10_000;
/// Status reads in flight at once while listing.
const LIST_CONCURRENCY: usize = 16;
/// Keys one group may contribute to a listing.
const MAX_SCAN_KEYS: usize = 100_000;

/// Escapes the glob characters of SCAN MATCH so a prefix matches literally.
fn glob_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

struct Seen {
    token: String,
    remaining_ms: u64,
    fence: u64,
    record: OwnerRecord,
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
        let engine = &self.engine;
        let keys = keys.inspect();
        let replies = fan_out(
            &engine.groups,
            |group| group.eval::<Vec<Value>>(&scripts::INSPECT, keys.clone(), Vec::new()),
            |_| false,
        )
        .await;
        let seen: Vec<Option<Seen>> = replies
            .iter()
            .map(|reply| match reply {
                Some(Reply::Answer(values)) => {
                    let token = text(values.first());
                    let remaining_ms = values.get(1).and_then(Value::as_i64).unwrap_or(-2);
                    Some(Seen {
                        remaining_ms: u64::try_from(remaining_ms).unwrap_or(0),
                        token: if remaining_ms > 0 {
                            token
                        } else {
                            String::new()
                        },
                        fence: text(values.get(2)).parse().unwrap_or(0),
                        record: OwnerRecord::parse(&text(values.get(3))),
                    })
                }
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
            .zip(replies.iter().zip(&seen))
            .map(|(group, (reply, view))| match (reply, view) {
                (_, Some(view)) => GroupView {
                    group: group.name.clone(),
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
                (reply, None) => GroupView {
                    group: group.name.clone(),
                    state: if matches!(reply, Some(Reply::Timeout)) {
                        GroupLockState::Timeout
                    } else {
                        GroupLockState::Error
                    },
                    remaining_ms: None,
                    owner: None,
                    purpose: None,
                    fence: None,
                    error: match reply {
                        Some(Reply::Failed(message)) => Some(message.clone()),
                        _ => None,
                    },
                },
            })
            .collect();
        let mut holders: Vec<HolderGroups> = Vec::new();
        let mut tokens: Vec<&str> = tally.keys().copied().collect();
        tokens.sort_by_key(|token| std::cmp::Reverse(tally[token]));
        for token in tokens {
            let seen_with: Vec<(&str, &Seen)> = engine
                .groups
                .iter()
                .zip(&seen)
                .filter_map(|(group, view)| match view {
                    Some(view) if view.token == token => Some((group.name.as_str(), view)),
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
        Ok(LockStatus {
            resource: resource.to_string(),
            held: leader.is_some(),
            holder,
            fencing_token,
            groups,
            split: holders.len() > 1,
            holders,
        })
    }

    /// Locks held on a majority whose resource name starts with `prefix`, and semaphores of
    /// that name with a permit held on a majority, sorted by name, at most `limit` of them
    /// together. Advisory, like [`Locks::status`].
    pub async fn list(&self, prefix: &str, limit: usize) -> Result<LockList, Error> {
        if prefix.chars().any(char::is_control) {
            return Err(Error::invalid(
                "prefix",
                "must not contain control characters",
            ));
        }
        if limit == 0 || limit > MAX_LIST_LIMIT {
            return Err(Error::invalid(
                "limit",
                format!("must be between 1 and {MAX_LIST_LIMIT}"),
            ));
        }
        let engine = &self.engine;
        let key_prefix = format!("{}:{{", engine.topology.key_prefix);
        let start = format!("{}{}*", glob_escape(&key_prefix), glob_escape(prefix));
        // Locks are `<prefix>:{<name>}:lock`; a semaphore's slots `<prefix>:{<name>}:permit:<n>`
        // (the same pattern also finds their `:fence` keys, which are skipped).
        let (locks_pattern, slots_pattern) =
            (format!("{start}}}:lock"), format!("{start}}}:permit:*"));
        let (lock_keys, slot_keys) = tokio::join!(
            fan_out(
                &engine.groups,
                |group| group.scan_keys(&locks_pattern, MAX_SCAN_KEYS),
                |_| false,
            ),
            fan_out(
                &engine.groups,
                |group| group.scan_keys(&slots_pattern, MAX_SCAN_KEYS),
                |_| false,
            )
        );
        let answered = |replies: Vec<Option<Reply<Vec<String>>>>| {
            replies
                .into_iter()
                .flatten()
                .filter_map(|reply| match reply {
                    Reply::Answer(keys) => Some(keys),
                    _ => None,
                })
                .flatten()
                .collect::<Vec<String>>()
        };
        let mut candidates: Vec<Candidate> = Vec::new();
        for key in answered(lock_keys) {
            if let Some(name) = key
                .strip_prefix(&key_prefix)
                .and_then(|rest| rest.strip_suffix("}:lock"))
            {
                candidates.push(Candidate::Lock(name.to_string()));
            }
        }
        for key in answered(slot_keys) {
            if let Some(name) = key.strip_prefix(&key_prefix).and_then(semaphore_of_slot) {
                candidates.push(Candidate::Semaphore(name.to_string()));
            }
        }
        candidates.sort_by(|a, b| a.name().cmp(b.name()).then_with(|| a.cmp(b)));
        candidates.dedup();
        // A key on some group is only a candidate: the quorum decides whether it is held.
        let mut statuses = futures::stream::iter(candidates)
            .map(|candidate| async move {
                Ok::<_, Error>(match candidate {
                    Candidate::Lock(resource) => {
                        let status = self.status(&resource).await?;
                        match (status.held, status.holder) {
                            (true, holder) => {
                                let holder = holder.unwrap_or_default();
                                Listed::Lock(ListedLock {
                                    resource: status.resource,
                                    owner: holder.owner,
                                    purpose: holder.purpose,
                                    remaining_ms: holder.remaining_ms,
                                    fencing_token: status.fencing_token,
                                })
                            }
                            (false, _) => Listed::Free,
                        }
                    }
                    Candidate::Semaphore(name) => {
                        let semaphore = self.semaphore_status(&name).await?;
                        if semaphore.holders.is_empty() {
                            Listed::Free
                        } else {
                            Listed::Semaphore(semaphore)
                        }
                    }
                })
            })
            .buffered(LIST_CONCURRENCY);
        let mut list = LockList {
            locks: Vec::new(),
            semaphores: Vec::new(),
            truncated: false,
        };
        while let Some(listed) = statuses.next().await {
            let listed = listed?;
            if matches!(listed, Listed::Free) {
                continue;
            }
            if list.locks.len() + list.semaphores.len() == limit {
                list.truncated = true;
                break;
            }
            match listed {
                Listed::Lock(lock) => list.locks.push(lock),
                Listed::Semaphore(semaphore) => list.semaphores.push(semaphore),
                Listed::Free => {}
            }
        }
        Ok(list)
    }
}

/// The semaphore whose slot key this is (the key without `<prefix>:{`): `<name>}:permit:<n>`
/// gives `name`; a slot's fence key, or any other key, gives `None`.
fn semaphore_of_slot(rest: &str) -> Option<&str> {
    let (name, slot) = rest.rsplit_once("}:permit:")?;
    (!slot.is_empty() && slot.bytes().all(|b| b.is_ascii_digit())).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_key_names_its_semaphore_and_a_fence_key_names_none() {
        assert_eq!(semaphore_of_slot("api}:permit:3"), Some("api"));
        assert_eq!(
            semaphore_of_slot("a}:permit:1}:permit:12"),
            Some("a}:permit:1")
        );
        assert_eq!(semaphore_of_slot("api}:permit:3:fence"), None);
        assert_eq!(semaphore_of_slot("api}:permit:"), None);
        assert_eq!(semaphore_of_slot("api}:permits"), None);
    }
}
