//! Read-only views of locks: one lock as each group sees it, and the current locks and
//! semaphores.

use std::collections::HashMap;

use fred::prelude::{ClientLike, KeysInterface, Options};
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
    /// True when more locks and semaphores match than this page holds (`next_cursor` is set).
    pub truncated: bool,
    /// Where the next page starts: pass it to [`Locks::list_page`] with the same prefix.
    /// `None` on the last page.
    pub next_cursor: Option<String>,
}

/// What a listing met a key of: a lock, or a slot of a semaphore.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Candidate {
    Lock(String),
    Slot(String, u32),
}

/// What the quorum says of a candidate a walk lists.
enum Listed {
    Lock(ListedLock),
    Semaphore(SemaphoreStatus),
}

/// Largest `limit` accepted by [`Locks::list`].
pub const MAX_LIST_LIMIT: usize = 10_000;
/// Status reads in flight at once while listing.
const LIST_CONCURRENCY: usize = 16;
/// Keys one SCAN call of a listing looks at (MATCH filters them after).
const SCAN_COUNT: u32 = 1000;

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
    /// that name with a permit held on a majority, at most `limit` of them together: the
    /// first page of [`Locks::list_page`].
    pub async fn list(&self, prefix: &str, limit: usize) -> Result<LockList, Error> {
        self.list_page(prefix, limit, None).await
    }

    /// One page of the locks and semaphores [`Locks::list`] finds, from `cursor` (`None` for
    /// the first page; then the `next_cursor` of the page before, with the same prefix).
    /// Each page is sorted by name; `next_cursor` is `Some` exactly when more match. Across
    /// the pages of one listing every lock and semaphore held all along is listed once while
    /// the keys stay as they are. Advisory, like [`Locks::status`]: a key that expired on a
    /// group read before (a missed renewal), a group that stops answering mid-walk, or a
    /// waiter's partial grant on a group read before can show a lock twice or hide it.
    ///
    /// A page costs SCAN calls on one group at a time from where the page before stopped,
    /// not a walk of every group's keyspace: a lock held on a majority has its key on at
    /// least one of any `groups − majority + 1` groups, so once that many groups have been
    /// walked through every such lock was met, and a key met on a group walked before is
    /// skipped.
    pub async fn list_page(
        &self,
        prefix: &str,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<LockList, Error> {
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
        let groups = engine.groups.len();
        let tag = cursor::prefix_tag(prefix);
        let mut at = match cursor {
            None => Position::start(groups),
            Some(text) => Position::parse(text, groups, tag)?,
        };
        let enough = groups.saturating_sub(engine.majority.needed) + 1;
        let key_prefix = format!("{}:{{", engine.topology.key_prefix);
        // Locks are `<prefix>:{<name>}:lock`, a semaphore's slots `<prefix>:{<name>}:permit:<n>`;
        // the pattern also meets slots' fence keys, which are skipped.
        let pattern = format!(
            "{}{}*}}:[lp]*",
            glob_escape(&key_prefix),
            glob_escape(prefix)
        );
        let timed = Options {
            timeout: Some(std::time::Duration::from_millis(
                engine.topology.call_timeout_ms,
            )),
            fail_fast: true,
            ..Default::default()
        };
        let mut page: Vec<Listed> = Vec::new();
        let mut next = None;
        'groups: while at.group < groups && at.walked() < enough {
            let group = &engine.groups[at.group];
            let client = group.client().with_options(&timed);
            loop {
                let batch = client
                    .scan_page::<(String, Vec<String>), _, _>(
                        at.scan.clone(),
                        pattern.as_str(),
                        Some(SCAN_COUNT),
                        None,
                    )
                    .await;
                // A group that does not answer is passed over: the groups after it cover its
                // keys, as long as a majority answers.
                let Ok((scan_next, keys)) = batch else {
                    at.next_group(false);
                    continue 'groups;
                };
                let mut candidates: Vec<Candidate> = keys
                    .iter()
                    .filter_map(|key| candidate_of(key.strip_prefix(&key_prefix)?))
                    .collect();
                candidates.sort();
                // One semaphore is looked at once per batch, from its lowest slot in it.
                candidates.dedup_by(|later, earlier| match (later, earlier) {
                    (Candidate::Slot(a, _), Candidate::Slot(b, _)) => a == b,
                    (later, earlier) => later == earlier,
                });
                let mut after = at.after.take();
                let from = after.clone();
                let walked = at.walked_groups();
                let group_index = at.group;
                // A lock whose key a group walked before has was listed by that walk: one
                // EXISTS per key there (sent together) spares it a status read on every group.
                if !walked.is_empty() {
                    let listed_before = self
                        .on_walked_groups(&walked, &key_prefix, &candidates, &timed)
                        .await;
                    candidates = candidates
                        .into_iter()
                        .zip(listed_before)
                        .filter_map(|(candidate, before)| (!before).then_some(candidate))
                        .collect();
                }
                let mut decided = futures::stream::iter(
                    candidates
                        .into_iter()
                        .filter(|candidate| from.as_ref().is_none_or(|from| candidate > from)),
                )
                .map(|candidate| {
                    let walked = &walked;
                    async move {
                        let listed = self.decide(&candidate, group_index, walked).await?;
                        Ok::<_, Error>((candidate, listed))
                    }
                })
                .buffered(LIST_CONCURRENCY);
                while let Some(decision) = decided.next().await {
                    let (candidate, listed) = decision?;
                    let Some(listed) = listed else {
                        continue;
                    };
                    if page.len() == limit {
                        // One more matches: the next page starts again at this batch, after
                        // what this page took from it.
                        next = Some(Position {
                            walked: at.walked.clone(),
                            group: at.group,
                            scan: at.scan.clone(),
                            after,
                        });
                        break 'groups;
                    }
                    page.push(listed);
                    after = Some(candidate);
                }
                if scan_next == "0" {
                    at.next_group(true);
                    continue 'groups;
                }
                at.scan = scan_next;
            }
        }
        let mut list = LockList {
            locks: Vec::new(),
            semaphores: Vec::new(),
            truncated: next.is_some(),
            next_cursor: next.map(|position| position.render(tag)),
        };
        for listed in page {
            match listed {
                Listed::Lock(lock) => list.locks.push(lock),
                Listed::Semaphore(semaphore) => list.semaphores.push(semaphore),
            }
        }
        list.locks.sort_by(|a, b| a.resource.cmp(&b.resource));
        list.semaphores.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(list)
    }

    /// For each candidate, whether it is a lock whose key one of the `walked` groups has
    /// (a group that does not answer counts as not having it; `decide` then reads it).
    async fn on_walked_groups(
        &self,
        walked: &[usize],
        key_prefix: &str,
        candidates: &[Candidate],
        timed: &Options,
    ) -> Vec<bool> {
        let mut before = vec![false; candidates.len()];
        for index in walked {
            let Some(group) = self.engine.groups.get(*index) else {
                continue;
            };
            let client = group.client().with_options(timed);
            let answers = futures::future::join_all(candidates.iter().map(|candidate| {
                let client = &client;
                async move {
                    match candidate {
                        Candidate::Lock(name) => client
                            .exists::<i64, _>(format!("{key_prefix}{name}}}:lock"))
                            .await
                            .is_ok_and(|found| found > 0),
                        Candidate::Slot(..) => false,
                    }
                }
            }))
            .await;
            for (flag, found) in before.iter_mut().zip(answers) {
                *flag |= found;
            }
        }
        before
    }

    /// Whether the walk of group `group` lists `candidate`, a key it met: only when the
    /// quorum holds it, and no group walked before (`walked`) has it, as that group's walk
    /// listed it then.
    async fn decide(
        &self,
        candidate: &Candidate,
        group: usize,
        walked: &[usize],
    ) -> Result<Option<Listed>, Error> {
        let held_on = |status: &LockStatus, index: usize| {
            status
                .groups
                .get(index)
                .is_some_and(|view| view.state == GroupLockState::Held)
        };
        match candidate {
            Candidate::Lock(resource) => {
                let status = self.status(resource).await?;
                if !status.held || walked.iter().any(|index| held_on(&status, *index)) {
                    return Ok(None);
                }
                let holder = status.holder.unwrap_or_default();
                Ok(Some(Listed::Lock(ListedLock {
                    resource: status.resource,
                    owner: holder.owner,
                    purpose: holder.purpose,
                    remaining_ms: holder.remaining_ms,
                    fencing_token: status.fencing_token,
                })))
            }
            Candidate::Slot(name, slot) => {
                let semaphore = self.semaphore_status(name).await?;
                let Some(permits) = semaphore.permits.filter(|_| !semaphore.holders.is_empty())
                else {
                    return Ok(None);
                };
                // Each group's view of every slot: the semaphore is listed by the first walk
                // that meets a slot of it, from the lowest slot that group has.
                let prefix = &self.engine.topology.key_prefix;
                let keys: Vec<ResourceKeys> = (0..permits)
                    .map(|n| ResourceKeys::slot(prefix, name, n))
                    .collect();
                let slots =
                    futures::future::join_all(keys.iter().map(|keys| self.status_of(name, keys)))
                        .await
                        .into_iter()
                        .collect::<Result<Vec<LockStatus>, Error>>()?;
                let seen_before = slots
                    .iter()
                    .any(|status| walked.iter().any(|index| held_on(status, *index)));
                let lowest_here = slots.iter().position(|status| held_on(status, group));
                Ok((!seen_before && lowest_here == usize::try_from(*slot).ok())
                    .then_some(Listed::Semaphore(semaphore)))
            }
        }
    }
}

/// Where a listing stands: the groups walked through, the group being walked, the SCAN
/// cursor of the batch to read next, and what the page before took from that batch.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Position {
    /// One flag per group: walked through to the end.
    walked: Vec<bool>,
    group: usize,
    scan: String,
    after: Option<Candidate>,
}

impl Position {
    fn start(groups: usize) -> Self {
        Position {
            walked: vec![false; groups],
            group: 0,
            scan: "0".to_string(),
            after: None,
        }
    }

    fn walked(&self) -> usize {
        self.walked.iter().filter(|walked| **walked).count()
    }

    fn walked_groups(&self) -> Vec<usize> {
        (0..self.walked.len()).filter(|i| self.walked[*i]).collect()
    }

    /// Moves on to the next group; `walked` when this one was walked through to the end.
    fn next_group(&mut self, walked: bool) {
        if let Some(flag) = self.walked.get_mut(self.group) {
            *flag = walked;
        }
        self.group += 1;
        self.scan = "0".to_string();
        self.after = None;
    }

    fn render(&self, tag: u64) -> String {
        let walked: String = self
            .walked
            .iter()
            .map(|walked| if *walked { '1' } else { '0' })
            .collect();
        let after = self.after.as_ref().map(cursor::encode).unwrap_or_default();
        format!(
            "{}.{walked}.{}.{}.{tag:016x}.{after}",
            cursor::VERSION,
            self.group,
            self.scan
        )
    }

    /// Reads a cursor [`Position::render`] wrote for a listing of `groups` groups and the
    /// prefix whose tag is `tag`.
    fn parse(text: &str, groups: usize, tag: u64) -> Result<Self, Error> {
        let unknown = || {
            Error::invalid(
                "cursor",
                "is not a cursor a listing returned: pass the previous page's next_cursor unchanged, or no cursor to start from the beginning",
            )
        };
        let fields: Vec<&str> = text.split('.').collect();
        let [version, walked, group, scan, text_tag, after] = fields[..] else {
            return Err(unknown());
        };
        if version != cursor::VERSION {
            return Err(unknown());
        }
        let walked: Vec<bool> = walked
            .chars()
            .map(|c| match c {
                '0' => Ok(false),
                '1' => Ok(true),
                _ => Err(unknown()),
            })
            .collect::<Result<_, _>>()?;
        if walked.len() != groups {
            return Err(Error::invalid(
                "cursor",
                format!(
                    "was returned by a listing over {} groups and this topology has {groups}: list again without a cursor",
                    walked.len()
                ),
            ));
        }
        if u64::from_str_radix(text_tag, 16).ok() != Some(tag) {
            return Err(Error::invalid(
                "cursor",
                "was returned for another prefix: pass the prefix of the page it came from",
            ));
        }
        let group: usize = group.parse().map_err(|_| unknown())?;
        if group >= groups || walked[group..].iter().any(|walked| *walked) {
            return Err(unknown());
        }
        if scan.is_empty() || !scan.bytes().all(|b| b.is_ascii_digit()) {
            return Err(unknown());
        }
        let after = match after {
            "" => None,
            text => Some(cursor::decode(text).ok_or_else(unknown)?),
        };
        Ok(Position {
            walked,
            group,
            scan: scan.to_string(),
            after,
        })
    }
}

/// The text form of listing cursors.
mod cursor {
    use super::Candidate;

    /// The first field of every cursor; a cursor of another form is refused.
    pub const VERSION: &str = "c1";

    /// A stable 64-bit FNV-1a hash of the prefix, so a cursor is not used with another one.
    pub fn prefix_tag(prefix: &str) -> u64 {
        prefix.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    }

    /// A candidate as hex: `l<name>` for a lock, `s<slot>:<name>` for a slot.
    pub fn encode(candidate: &Candidate) -> String {
        let text = match candidate {
            Candidate::Lock(name) => format!("l{name}"),
            Candidate::Slot(name, slot) => format!("s{slot}:{name}"),
        };
        text.bytes().map(|byte| format!("{byte:02x}")).collect()
    }

    pub fn decode(hex: &str) -> Option<Candidate> {
        if !hex.len().is_multiple_of(2) {
            return None;
        }
        let bytes = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
            .collect::<Option<Vec<u8>>>()?;
        let text = String::from_utf8(bytes).ok()?;
        if let Some(name) = text.strip_prefix('l') {
            return Some(Candidate::Lock(name.to_string()));
        }
        let (slot, name) = text.strip_prefix('s')?.split_once(':')?;
        Some(Candidate::Slot(name.to_string(), slot.parse().ok()?))
    }
}

/// What a key met while listing is (the key without `<prefix>:{`): a lock, a semaphore's
/// slot, or neither (a fence key, a semaphore's count).
fn candidate_of(rest: &str) -> Option<Candidate> {
    if let Some(name) = rest.strip_suffix("}:lock") {
        return Some(Candidate::Lock(name.to_string()));
    }
    let (name, slot) = rest.rsplit_once("}:permit:")?;
    (!slot.is_empty() && slot.bytes().all(|b| b.is_ascii_digit()))
        .then(|| Some(Candidate::Slot(name.to_string(), slot.parse().ok()?)))
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_key_names_its_semaphore_and_a_fence_key_names_none() {
        let slot = |name: &str, n| Some(Candidate::Slot(name.to_string(), n));
        assert_eq!(candidate_of("api}:permit:3"), slot("api", 3));
        assert_eq!(
            candidate_of("a}:permit:1}:permit:12"),
            slot("a}:permit:1", 12)
        );
        assert_eq!(
            candidate_of("db}:lock"),
            Some(Candidate::Lock("db".to_string()))
        );
        assert_eq!(candidate_of("api}:permit:3:fence"), None);
        assert_eq!(candidate_of("api}:permit:"), None);
        assert_eq!(candidate_of("api}:permits"), None);
        assert_eq!(candidate_of("db}:fence"), None);
    }

    #[test]
    fn a_cursor_reads_back_as_the_position_it_was_written_from() {
        let tag = cursor::prefix_tag("jobs:");
        let position = Position {
            walked: vec![true, false, false, false, false],
            group: 2,
            scan: "8192".to_string(),
            after: Some(Candidate::Slot("api.v1:x".to_string(), 7)),
        };
        let text = position.render(tag);
        assert_eq!(Position::parse(&text, 5, tag).ok(), Some(position));
        let start = Position::start(3);
        assert_eq!(
            Position::parse(&start.render(tag), 3, tag).ok(),
            Some(start)
        );
    }

    #[test]
    fn a_cursor_of_another_prefix_or_topology_or_garbage_is_refused_naming_cursor() {
        let tag = cursor::prefix_tag("jobs:");
        let text = Position::start(5).render(tag);
        for (bad, groups, tag) in [
            (text.as_str(), 5, cursor::prefix_tag("other")),
            (text.as_str(), 3, tag),
            ("garbage", 5, tag),
            ("c1.00000.9.0.0.", 5, tag),
            ("", 5, tag),
        ] {
            match Position::parse(bad, groups, tag) {
                Err(Error::InvalidInput { field, .. }) => assert_eq!(field, "cursor"),
                other => panic!("{bad:?} gave {other:?}"),
            }
        }
    }
}
