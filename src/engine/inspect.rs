//! Read-only views of locks: one lock as each group sees it, and the current locks and
//! semaphores.

use std::collections::{HashMap, HashSet};

use fred::clients::WithOptions;
use fred::prelude::{Client, ClientLike, KeysInterface, Options};
use fred::types::Value;
use serde::Serialize;

use crate::engine::error::{Error, Holder};
use crate::engine::fan_out::fan_out;
use crate::engine::locks::{Locks, OwnerRecord};
use crate::engine::resource::{ResourceKeys, validate_resource};
use crate::engine::semaphore::{PermitHolder, SemaphoreStatus};
use crate::engine::vote::{GroupVote, Vote};
use crate::group::reply::Reply;
use crate::group::reply::text;
use crate::group::scripts;
use crate::group::slots::{HashSlot, SLOTS};
use crate::group::{Group, SlotKeys};

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

/// Which key of a lock (or of a semaphore's slot) a walk met.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Via {
    /// `…:lock` or `…:permit:<n>`: the grant itself.
    Lock,
    /// `…:fence` or `…:permit:<n>:fence`: the fence the grant left, which outlives it.
    Fence,
}

/// What a listing met a key of: a lock, or a slot of a semaphore, by one of its two keys.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Candidate {
    Lock { name: String, via: Via },
    Slot { name: String, slot: u32, via: Via },
}

/// What the quorum says of a candidate a walk lists.
enum Listed {
    Lock(ListedLock),
    Semaphore(SemaphoreStatus),
}

impl Listed {
    /// What tells entries apart on a page: a semaphore may share a lock's name.
    fn key(&self) -> (bool, String) {
        match self {
            Listed::Lock(lock) => (false, lock.resource.clone()),
            Listed::Semaphore(semaphore) => (true, semaphore.name.clone()),
        }
    }
}

/// Largest `limit` accepted by [`Locks::list`].
pub const MAX_LIST_LIMIT: usize = 10_000;
/// Semaphore reads in flight at once while listing.
const LIST_CONCURRENCY: usize = 16;
/// Locks one script call reads while listing: it stays well within the per-call timeout.
const LOCKS_PER_READ: usize = 100;
/// Lock reads of one batch in flight at once while listing.
const READS_IN_FLIGHT: usize = 4;
/// Keys one SCAN call of a listing looks at (MATCH filters them after).
const SCAN_COUNT: u32 = 1000;
/// Batches of a Cluster group's walk. Batch `k` is every slot `k + 16 n`: spread over the
/// whole slot space, so every primary reads its share of a batch at once (a few script calls
/// each), and which batch a slot is in does not depend on who serves it.
const SLOT_BATCHES: u16 = 16;

/// How a group's keys are walked.
enum Walker {
    /// A master's: with SCAN, on the client with the per-call timeout.
    Scan(WithOptions<Client>),
    /// A Cluster group's: slot by slot, each on the primary that serves it now.
    Slots,
}

impl Walker {
    /// Whether a walk of this kind resumes from `at`: a cursor of a group that was of the
    /// other kind when the page before was taken does not.
    fn resumes(&self, at: &Resume) -> bool {
        matches!(
            (self, at),
            (_, Resume::Start)
                | (Walker::Scan(_), Resume::Scan(_))
                | (Walker::Slots, Resume::Slot(_))
        )
    }
}

/// One batch of a walk: the keys it met (without a Cluster slot tag), and where the next
/// batch starts (`None` after the last).
struct Batch {
    next: Option<Resume>,
    keys: Vec<String>,
}

/// The SCAN batch of a master's walk at `at`, keys matching `pattern`.
async fn scan_batch(
    client: &WithOptions<Client>,
    at: &Resume,
    pattern: &str,
) -> Result<Batch, Vote> {
    let cursor = match at {
        Resume::Scan(cursor) => cursor.clone(),
        _ => "0".to_string(),
    };
    let page = client
        .scan_page::<(String, Vec<String>), _, _>(cursor, pattern, Some(SCAN_COUNT), None)
        .await;
    match page {
        Ok((next, keys)) => Ok(Batch {
            next: (next != "0").then_some(Resume::Scan(next)),
            keys,
        }),
        Err(error) if matches!(error.kind(), fred::error::ErrorKind::Timeout) => Err(Vote::Timeout),
        Err(error) => Err(Vote::Error {
            message: error.to_string(),
        }),
    }
}

/// The batch of a Cluster group's walk at `at` (see [`SLOT_BATCHES`]): the keys of its
/// slots that start with `start`, each slot read on the primary that serves it when it is
/// read.
async fn slots_batch(group: &Group, at: &Resume, start: &str) -> Result<Batch, Vote> {
    let first = match at {
        Resume::Slot(slot) => *slot,
        _ => 0,
    };
    let slots: Vec<u16> = (first..SLOTS).step_by(usize::from(SLOT_BATCHES)).collect();
    match group.slot_keys(&slots, start).await {
        Reply::Answer(mut keys) => {
            keys.retain(|key| key.starts_with(start));
            let next = first + 1;
            Ok(Batch {
                next: (next < SLOT_BATCHES).then_some(Resume::Slot(next)),
                keys,
            })
        }
        Reply::Timeout => Err(Vote::Timeout),
        Reply::Failed(message) => Err(Vote::Error { message }),
        Reply::NotSent(reason) => Err(Vote::Error {
            message: reason.to_string(),
        }),
    }
}

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
enum Read {
    Seen(Seen),
    Timeout,
    Failed(Option<String>),
}

/// Values the inspect script answers per lock.
const INSPECT_VALUES: usize = 4;

impl Read {
    /// The `index`-th lock of one group's inspect reply.
    fn of(reply: Option<&Reply<Vec<Value>>>, index: usize) -> Read {
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
    fn inspect_keys<S: AsRef<str>>(&self, resources: &[S]) -> Vec<SlotKeys> {
        resources
            .iter()
            .map(|resource| SlotKeys {
                slot: HashSlot::of_resource(resource.as_ref()),
                keys: self.engine.resource_keys(resource.as_ref()).inspect(),
            })
            .collect()
    }

    /// Reads many locks on every group with one script call per group.
    async fn statuses_of(&self, resources: &[&str]) -> Vec<LockStatus> {
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
            .map(|(group, read)| match read {
                Read::Seen(view) => GroupView {
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
                Read::Timeout | Read::Failed(_) => GroupView {
                    group: group.name.clone(),
                    state: if matches!(read, Read::Timeout) {
                        GroupLockState::Timeout
                    } else {
                        GroupLockState::Error
                    },
                    remaining_ms: None,
                    owner: None,
                    purpose: None,
                    fence: None,
                    error: match read {
                        Read::Failed(message) => message.clone(),
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

    /// Locks held on a majority whose resource name starts with `prefix`, and semaphores of
    /// that name with a permit held on a majority, at most `limit` of them together: the
    /// first page of [`Locks::list_page`].
    pub async fn list(&self, prefix: &str, limit: usize) -> Result<LockList, Error> {
        self.list_page(prefix, limit, None).await
    }

    /// One page of the locks and semaphores [`Locks::list`] finds, from `cursor` (`None` for
    /// the first page; then the `next_cursor` of the page before, with the same prefix).
    /// Each page is sorted by name; `next_cursor` is `Some` exactly when more match. Across
    /// the pages of one listing every lock held on a majority all along, and every semaphore
    /// whose permits stay held, is listed exactly once, even when its key expired on some
    /// groups or a waiter's partial grant sits on a group; a lock not held on a majority is
    /// not listed. One taken or released meanwhile may show or not. The limits, since a page
    /// cannot know what an earlier walk saw: a lock shows twice when a group walked before
    /// lost its key and a waiter's grant then replaced its fence there, and is missed when the
    /// holder's own grant reaches the first group after its walk passed it, or when `SCAN`
    /// returns a batch differently on the next page (a shrinking table, a failover).
    ///
    /// A page costs SCAN calls on one group at a time from where the page before stopped,
    /// not a walk of every group's keyspace: a lock held on a majority has its keys on at
    /// least one of any `groups − majority + 1` groups, so once that many groups have been
    /// walked through every such lock was met. The walk of the lowest-numbered group that
    /// carries the majority holder's grant (holds its token, or keeps its fence, which
    /// outlives the key) lists the lock; the others skip it. A group that does not answer
    /// when its walk starts is passed over, as if it held nothing. A Cluster group is walked
    /// by hash slot instead of by SCAN, 1,024 slots spread over its primaries at a time, each
    /// slot's keys read whole on the primary that serves it then (a slot moving meanwhile is
    /// read again from its new primary), and a cursor holds the slot its batch starts at: it
    /// resumes there after a failover or a resharding.
    ///
    /// Errors: [`Error::ListingUnavailable`] when too few groups answer to walk enough of
    /// them or to tell whether a lock is held (or which group listed it); [`Error::InvalidInput`] naming
    /// `cursor` when the group a cursor is in the middle of stopped answering, as going on
    /// would repeat or miss locks: list again without a cursor.
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
        // Locks are `<prefix>:{<name>}:lock|fence`, a semaphore's slots
        // `<prefix>:{<name>}:permit:<n>[:fence]`; other keys it meets are skipped.
        let pattern = format!("{}{}*}}:*", glob_escape(&key_prefix), glob_escape(prefix));
        // What those keys start with, as a Cluster group's slots are filtered.
        let key_start = format!("{key_prefix}{prefix}");
        let timed = Options {
            timeout: Some(std::time::Duration::from_millis(
                engine.topology.call_timeout_ms,
            )),
            fail_fast: true,
            ..Default::default()
        };
        let mut page: Vec<Listed> = Vec::new();
        let mut on_page: HashSet<(bool, String)> = HashSet::new();
        let mut next = None;
        // Why the groups passed over in this call were: shown when too few are left.
        let mut passed_over: Vec<GroupVote> = Vec::new();
        'groups: while at.walked() < enough {
            if at.walked() + groups.saturating_sub(at.group) < enough {
                return Err(self.too_few_walked(prefix, enough, &at, passed_over));
            }
            let group = &engine.groups[at.group];
            let walker = match group.client() {
                Some(client) => Walker::Scan(client.with_options(&timed)),
                None => Walker::Slots,
            };
            if !walker.resumes(&at.scan) {
                return Err(Self::kind_changed(&group.name, &walker));
            }
            // A walk that starts in this call has listed nothing on an earlier page: if its
            // group stops answering, what it put on this page is taken back and it is passed
            // over as a whole.
            let fresh = at.scan == Resume::Start && at.after.is_none();
            let taken_before = page.len();
            loop {
                let batch = match &walker {
                    Walker::Scan(client) => scan_batch(client, &at.scan, &pattern).await,
                    Walker::Slots => slots_batch(group, &at.scan, &key_start).await,
                };
                let Batch {
                    next: after_batch,
                    keys,
                } = match batch {
                    Ok(batch) => batch,
                    Err(vote) => {
                        if !fresh {
                            return Err(Self::walk_broken(&group.name, &vote));
                        }
                        page.truncate(taken_before);
                        on_page = page.iter().map(Listed::key).collect();
                        passed_over.push(GroupVote {
                            group: group.name.clone(),
                            vote,
                        });
                        at.next_group(Walk::PassedOver);
                        continue 'groups;
                    }
                };
                let mut candidates: Vec<Candidate> = keys
                    .iter()
                    .filter_map(|key| candidate_of(key.strip_prefix(&key_prefix)?))
                    .collect();
                candidates.sort();
                candidates.dedup();
                let mut after = at.after.take();
                if let Some(from) = &after {
                    candidates.retain(|candidate| candidate > from);
                }
                let walked = at.walked_groups();
                let decided = self.decide_batch(&candidates, at.group, &walked).await?;
                for (candidate, listed) in candidates.into_iter().zip(decided) {
                    let Some(listed) = listed else {
                        continue;
                    };
                    // SCAN may return a key twice (while a master's key table shrinks).
                    if !on_page.insert(listed.key()) {
                        continue;
                    }
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
                match after_batch {
                    Some(resume) => at.scan = resume,
                    None => {
                        at.next_group(Walk::Walked);
                        continue 'groups;
                    }
                }
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

    /// Decides, for each candidate the walk of group `group` met in one batch, whether this
    /// walk lists it: the locks are read with one script call per group, the semaphores
    /// one by one.
    async fn decide_batch(
        &self,
        candidates: &[Candidate],
        group: usize,
        walked: &[usize],
    ) -> Result<Vec<Option<Listed>>, Error> {
        let mut lock_names = self.worth_reading(candidates, group, walked).await;
        lock_names.dedup();
        // A few reads in flight: each is one script call on every group's connection, and
        // more at once only queue there behind the per-call timeout.
        let mut reads = Vec::with_capacity(lock_names.len());
        for wave in lock_names.chunks(LOCKS_PER_READ * READS_IN_FLIGHT) {
            let some = futures::future::join_all(
                wave.chunks(LOCKS_PER_READ)
                    .map(|some| self.statuses_of(some)),
            )
            .await;
            reads.extend(some.into_iter().flatten());
        }
        let locks: HashMap<&str, LockStatus> = lock_names.iter().copied().zip(reads).collect();
        let mut semaphore_names: Vec<&str> = candidates
            .iter()
            .filter_map(|candidate| match candidate {
                Candidate::Slot { name, .. } => Some(name.as_str()),
                Candidate::Lock { .. } => None,
            })
            .collect();
        semaphore_names.sort_unstable();
        semaphore_names.dedup();
        let mut semaphores: HashMap<&str, SemaphoreRead> = HashMap::new();
        for some in semaphore_names.chunks(LIST_CONCURRENCY) {
            let reads =
                futures::future::join_all(some.iter().map(|name| self.read_semaphore(name))).await;
            for (name, read) in some.iter().zip(reads) {
                semaphores.insert(name, read?);
            }
        }
        let needed = self.engine.majority.needed;
        let mut decided = Vec::with_capacity(candidates.len());
        for candidate in candidates {
            let listed = match candidate {
                Candidate::Lock { name, via } => match locks.get(name.as_str()) {
                    Some(status) => lists_lock(status, *via, group, walked, needed)?.then(|| {
                        let holder = status.holder.clone().unwrap_or_default();
                        Listed::Lock(ListedLock {
                            resource: status.resource.clone(),
                            owner: holder.owner,
                            purpose: holder.purpose,
                            remaining_ms: holder.remaining_ms,
                            fencing_token: status.fencing_token,
                        })
                    }),
                    None => None,
                },
                Candidate::Slot { name, slot, via } => match semaphores.get(name.as_str()) {
                    Some(read) => lists_semaphore(read, *slot, *via, group, walked, needed)?
                        .then(|| Listed::Semaphore(read.semaphore.clone())),
                    None => None,
                },
            };
            decided.push(listed);
        }
        Ok(decided)
    }

    /// The locks among `candidates` the walk of `group` may list, told from a read of this
    /// group and the `walked` ones only, so that only those are read on every group. A lock
    /// is left out when this group keeps neither a token nor a fence for it, when it was met
    /// by its lock key and this group keeps a fence (the walk lists it from the fence), or
    /// when a walked group keeps the same token or the same fence: both groups then carry
    /// the holder's grant or neither does, and the walked one listed it.
    async fn worth_reading<'c>(
        &self,
        candidates: &'c [Candidate],
        group: usize,
        walked: &[usize],
    ) -> Vec<&'c str> {
        let mut met: Vec<(&str, Via)> = candidates
            .iter()
            .filter_map(|candidate| match candidate {
                Candidate::Lock { name, via } => Some((name.as_str(), *via)),
                Candidate::Slot { .. } => None,
            })
            .collect();
        let mut names: Vec<&str> = met.iter().map(|(name, _)| *name).collect();
        names.dedup();
        let groups: Vec<usize> = std::iter::once(group)
            .chain(walked.iter().copied())
            .collect();
        // Per name, each of `groups`' view: `None` where the group did not answer.
        let mut views: HashMap<&str, Vec<Option<Seen>>> = HashMap::new();
        for some in names.chunks(LOCKS_PER_READ) {
            let keys = self.inspect_keys(some);
            let replies = futures::future::join_all(groups.iter().map(|index| {
                let keys = &keys;
                async move {
                    match self.engine.groups.get(*index) {
                        Some(one) => Some(one.inspect(keys).await),
                        None => None,
                    }
                }
            }))
            .await;
            for (at, name) in some.iter().enumerate() {
                let seen = replies
                    .iter()
                    .map(|reply| match Read::of(reply.as_ref(), at) {
                        Read::Seen(seen) => Some(seen),
                        _ => None,
                    })
                    .collect();
                views.insert(name, seen);
            }
        }
        met.retain(|(name, via)| {
            let Some(seen) = views.get(name) else {
                return true;
            };
            let Some(Some(here)) = seen.first() else {
                return true;
            };
            if here.token.is_empty() && here.fence == 0 {
                return false;
            }
            if *via == Via::Lock && here.fence > 0 {
                return false;
            }
            !seen.iter().skip(1).flatten().any(|before| {
                (here.fence > 0 && before.fence == here.fence)
                    || (!here.token.is_empty() && before.token == here.token)
            })
        });
        met.into_iter().map(|(name, _)| name).collect()
    }

    /// Semaphore `name` as the groups see it now, with every slot's view.
    async fn read_semaphore(&self, name: &str) -> Result<SemaphoreRead, Error> {
        let semaphore = self.semaphore_status(name).await?;
        let prefix = &self.engine.topology.key_prefix;
        let keys: Vec<ResourceKeys> = (0..semaphore.permits.unwrap_or(0))
            .map(|n| ResourceKeys::slot(prefix, name, n))
            .collect();
        let slots = match semaphore.permits {
            Some(_) => {
                futures::future::join_all(keys.iter().map(|keys| self.status_of(name, keys)))
                    .await
                    .into_iter()
                    .collect::<Result<Vec<LockStatus>, Error>>()?
            }
            None => Vec::new(),
        };
        // The holders as the slots were read here, so the entry agrees with the decision.
        let holders = (0u32..)
            .zip(&slots)
            .filter_map(|(permit, status)| {
                let holder = status.holder.clone().filter(|_| status.held)?;
                Some(PermitHolder {
                    permit,
                    holder,
                    fencing_token: status.fencing_token,
                })
            })
            .collect();
        Ok(SemaphoreRead {
            semaphore: SemaphoreStatus {
                holders,
                ..semaphore
            },
            slots,
        })
    }

    /// The error when fewer than `enough` groups can be walked.
    fn too_few_walked(
        &self,
        prefix: &str,
        enough: usize,
        at: &Position,
        mut passed_over: Vec<GroupVote>,
    ) -> Error {
        // Groups passed over on an earlier page: why is not in the cursor.
        for (index, walk) in at.walked.iter().enumerate() {
            let Some(group) = self.engine.groups.get(index) else {
                continue;
            };
            if *walk == Walk::PassedOver && !passed_over.iter().any(|v| v.group == group.name) {
                passed_over.push(GroupVote {
                    group: group.name.clone(),
                    vote: Vote::Error {
                        message: "did not answer when an earlier page of this listing reached it"
                            .to_string(),
                    },
                });
            }
        }
        Error::ListingUnavailable {
            locks: format!("{prefix}*"),
            needed: enough,
            total: self.engine.groups.len(),
            votes: passed_over,
        }
    }

    /// The error when a cursor is in the middle of a group that was a Redis Cluster when
    /// the page before was taken and is not now, or the other way round.
    fn kind_changed(group: &str, walker: &Walker) -> Error {
        let now = match walker {
            Walker::Scan(_) => "not a Redis Cluster",
            Walker::Slots => "a Redis Cluster",
        };
        Error::invalid(
            "cursor",
            format!(
                "is in the middle of group {group}'s keys, walked as group {group} was before the topology changed; it is {now} now. List again without a cursor"
            ),
        )
    }

    /// The error when the group a cursor is in the middle of stops answering.
    fn walk_broken(group: &str, vote: &Vote) -> Error {
        let why = match vote {
            Vote::Error { message } => message.clone(),
            _ => "timeout".to_string(),
        };
        Error::invalid(
            "cursor",
            format!(
                "is in the middle of group {group}'s keys, and {group} stopped answering ({why}): going on would repeat or miss locks. List again without a cursor (a group that does not answer is then passed over); `quorumlock health` shows {group}"
            ),
        )
    }
}

/// A semaphore as one listing decision reads it: the entry to list, and every slot's view.
struct SemaphoreRead {
    semaphore: SemaphoreStatus,
    slots: Vec<LockStatus>,
}

impl LockStatus {
    /// Whether group `index` answered this read.
    fn answered(&self, index: usize) -> bool {
        self.groups
            .get(index)
            .is_some_and(|view| matches!(view.state, GroupLockState::Held | GroupLockState::Free))
    }

    /// Whether the groups that answered tell if a majority holds the lock: it is held, or
    /// even the groups that did not answer could not make a token a majority.
    fn decided(&self, needed: usize) -> bool {
        let top = self.holders.first().map_or(0, |holder| holder.groups.len());
        let unanswered = (0..self.groups.len())
            .filter(|index| !self.answered(*index))
            .count();
        self.held || top + unanswered < needed
    }

    /// Whether group `index` carries the majority holder's grant: it holds the token, or
    /// keeps the fence the grant left (which stays when the key expires there, and which a
    /// later grant there replaces). `None` when the group did not answer.
    fn carries(&self, index: usize) -> Option<bool> {
        let view = self.groups.get(index).filter(|_| self.answered(index))?;
        let holds = self
            .holders
            .iter()
            .find(|holder| holder.majority)
            .is_some_and(|holder| holder.groups.contains(&view.group));
        let fence = self.fencing_token.filter(|fence| *fence > 0);
        Some(self.held && (holds || (fence.is_some() && view.fence == fence)))
    }

    /// The key of this lock a walk of group `index` lists it from: its fence when the group
    /// keeps one, else its lock key. One of the two, so one walk lists it once.
    fn listed_via(&self, index: usize) -> Via {
        match self.groups.get(index).and_then(|view| view.fence) {
            Some(_) => Via::Fence,
            None => Via::Lock,
        }
    }

    /// The error when too few groups answered to decide.
    fn unavailable(&self, needed: usize) -> Error {
        let votes = self
            .groups
            .iter()
            .map(|view| GroupVote {
                group: view.group.clone(),
                vote: match view.state {
                    GroupLockState::Held => Vote::Held {
                        owner: view.owner.clone(),
                        purpose: view.purpose.clone(),
                        remaining_ms: view.remaining_ms.unwrap_or(0),
                    },
                    GroupLockState::Free => Vote::NotHeld,
                    GroupLockState::Timeout => Vote::Timeout,
                    GroupLockState::Error => Vote::Error {
                        message: view
                            .error
                            .clone()
                            .unwrap_or_else(|| "no answer".to_string()),
                    },
                },
            })
            .collect();
        Error::ListingUnavailable {
            locks: self.resource.clone(),
            needed,
            total: self.groups.len(),
            votes,
        }
    }
}

/// Whether one of the `walked` groups carries the grant of one of `statuses` (its walk
/// listed it then); the status it cannot be told of when a walked group did not answer and
/// none carries it.
fn listed_before<'s>(
    statuses: &[&'s LockStatus],
    walked: &[usize],
) -> Result<bool, &'s LockStatus> {
    let mut unknown = None;
    for index in walked {
        for status in statuses {
            match status.carries(*index) {
                Some(true) => return Ok(true),
                Some(false) => {}
                None => unknown = unknown.or(Some(*status)),
            }
        }
    }
    match unknown {
        Some(status) => Err(status),
        None => Ok(false),
    }
}

/// Whether the walk of group `group`, meeting lock `status` by its `via` key, lists it: the
/// quorum holds it, this group carries the holder's grant and met it by the key it is
/// listed from, and no group walked before carries the grant (that walk listed it).
fn lists_lock(
    status: &LockStatus,
    via: Via,
    group: usize,
    walked: &[usize],
    needed: usize,
) -> Result<bool, Error> {
    if !status.decided(needed) {
        return Err(status.unavailable(needed));
    }
    if !status.held {
        return Ok(false);
    }
    match status.carries(group) {
        None => return Err(status.unavailable(needed)),
        Some(false) => return Ok(false),
        Some(true) => {}
    }
    if via != status.listed_via(group) {
        return Ok(false);
    }
    listed_before(&[status], walked)
        .map(|before| !before)
        .map_err(|status| status.unavailable(needed))
}

/// Whether the walk of group `group`, meeting slot `slot` of a semaphore by its `via` key,
/// lists the semaphore: the walk lists it from the lowest held slot whose grant this group
/// carries, when no group walked before carries the grant of any held slot.
fn lists_semaphore(
    read: &SemaphoreRead,
    slot: u32,
    via: Via,
    group: usize,
    walked: &[usize],
    needed: usize,
) -> Result<bool, Error> {
    let mut held: Vec<&LockStatus> = Vec::new();
    for status in &read.slots {
        if !status.decided(needed) {
            return Err(status.unavailable(needed));
        }
        if status.held {
            held.push(status);
        }
    }
    let mut from = None;
    for (n, status) in (0u32..).zip(&read.slots) {
        if !status.held {
            continue;
        }
        match status.carries(group) {
            None => return Err(status.unavailable(needed)),
            Some(true) => {
                from = Some((n, status.listed_via(group)));
                break;
            }
            Some(false) => {}
        }
    }
    if from != Some((slot, via)) {
        return Ok(false);
    }
    listed_before(&held, walked)
        .map(|before| !before)
        .map_err(|status| status.unavailable(needed))
}

/// How the walk of one group ended, as far as a listing has gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Walk {
    /// Not reached yet (or being walked).
    Pending,
    /// Walked through to the end: it listed the locks it was the first to carry.
    Walked,
    /// Did not answer when its walk started: it listed nothing.
    PassedOver,
}

impl Walk {
    fn symbol(self) -> char {
        match self {
            Walk::Pending => '0',
            Walk::Walked => '1',
            Walk::PassedOver => 'x',
        }
    }

    fn from_symbol(symbol: char) -> Option<Walk> {
        match symbol {
            '0' => Some(Walk::Pending),
            '1' => Some(Walk::Walked),
            'x' => Some(Walk::PassedOver),
            _ => None,
        }
    }
}

/// Where the walk of the group being walked reads its next batch.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Resume {
    /// At the beginning.
    Start,
    /// A master's: at this SCAN cursor (never "0", which is the beginning).
    Scan(String),
    /// A Cluster group's: at the batch this hash slot starts (one of the first
    /// [`SLOT_BATCHES`]), whichever primaries serve its slots now.
    Slot(u16),
}

impl Resume {
    /// `0` for the beginning, a SCAN cursor as Redis gave it, `s<slot>` for a slot.
    fn render(&self) -> String {
        match self {
            Resume::Start => "0".to_string(),
            Resume::Scan(cursor) => cursor.clone(),
            Resume::Slot(slot) => format!("s{slot}"),
        }
    }

    fn parse(text: &str) -> Option<Resume> {
        let digits = |text: &str| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
        if text == "0" {
            return Some(Resume::Start);
        }
        if digits(text) {
            return Some(Resume::Scan(text.to_string()));
        }
        let slot = text.strip_prefix('s').filter(|slot| digits(slot))?;
        let slot: u16 = slot.parse().ok()?;
        (slot < SLOT_BATCHES).then_some(Resume::Slot(slot))
    }
}

/// Where a listing stands: how each group's walk ended, the group being walked, where the
/// batch to read next starts in it, and what the page before took from that batch.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Position {
    walked: Vec<Walk>,
    group: usize,
    scan: Resume,
    after: Option<Candidate>,
}

impl Position {
    fn start(groups: usize) -> Self {
        Position {
            walked: vec![Walk::Pending; groups],
            group: 0,
            scan: Resume::Start,
            after: None,
        }
    }

    fn walked(&self) -> usize {
        self.walked
            .iter()
            .filter(|walk| **walk == Walk::Walked)
            .count()
    }

    fn walked_groups(&self) -> Vec<usize> {
        (0..self.walked.len())
            .filter(|i| self.walked[*i] == Walk::Walked)
            .collect()
    }

    /// Moves on to the next group, the walk of this one ended as `walk`.
    fn next_group(&mut self, walk: Walk) {
        if let Some(flag) = self.walked.get_mut(self.group) {
            *flag = walk;
        }
        self.group += 1;
        self.scan = Resume::Start;
        self.after = None;
    }

    fn render(&self, tag: u64) -> String {
        let walked: String = self.walked.iter().map(|walk| walk.symbol()).collect();
        let after = self.after.as_ref().map(cursor::encode).unwrap_or_default();
        format!(
            "{}.{walked}.{}.{}.{tag:016x}.{after}",
            cursor::VERSION,
            self.group,
            self.scan.render()
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
        let walked: Vec<Walk> = walked
            .chars()
            .map(|c| Walk::from_symbol(c).ok_or_else(unknown))
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
        // The walks end in group order: every group before the one being walked has ended,
        // none after it has.
        if group >= groups
            || walked[..group].contains(&Walk::Pending)
            || walked[group..].iter().any(|walk| *walk != Walk::Pending)
        {
            return Err(unknown());
        }
        let scan = Resume::parse(scan).ok_or_else(unknown)?;
        let after = match after {
            "" => None,
            text => Some(cursor::decode(text).ok_or_else(unknown)?),
        };
        Ok(Position {
            walked,
            group,
            scan,
            after,
        })
    }
}

/// The text form of listing cursors.
mod cursor {
    use super::{Candidate, Via};

    /// The first field of every cursor; a cursor of another form is refused.
    pub const VERSION: &str = "c2";

    /// A stable 64-bit FNV-1a hash of the prefix, so a cursor is not used with another one.
    pub fn prefix_tag(prefix: &str) -> u64 {
        prefix.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    }

    /// A candidate as hex: `l<name>` (`f<name>` by its fence) for a lock, `s<slot>:<name>`
    /// (`t<slot>:<name>`) for a slot.
    pub fn encode(candidate: &Candidate) -> String {
        let text = match candidate {
            Candidate::Lock {
                name,
                via: Via::Lock,
            } => format!("l{name}"),
            Candidate::Lock {
                name,
                via: Via::Fence,
            } => format!("f{name}"),
            Candidate::Slot {
                name,
                slot,
                via: Via::Lock,
            } => format!("s{slot}:{name}"),
            Candidate::Slot {
                name,
                slot,
                via: Via::Fence,
            } => format!("t{slot}:{name}"),
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
        let mut chars = text.chars();
        let kind = chars.next()?;
        let rest = chars.as_str();
        let lock = |via| {
            Some(Candidate::Lock {
                name: rest.to_string(),
                via,
            })
        };
        let slot = |via| {
            let (slot, name) = rest.split_once(':')?;
            Some(Candidate::Slot {
                name: name.to_string(),
                slot: slot.parse().ok()?,
                via,
            })
        };
        match kind {
            'l' => lock(Via::Lock),
            'f' => lock(Via::Fence),
            's' => slot(Via::Lock),
            't' => slot(Via::Fence),
            _ => None,
        }
    }
}

/// What a key met while listing is (the key without `<prefix>:{`): a lock's or a slot's
/// lock or fence key, or neither (a semaphore's count, anything else).
fn candidate_of(rest: &str) -> Option<Candidate> {
    if let Some(name) = rest.strip_suffix("}:lock") {
        return Some(Candidate::Lock {
            name: name.to_string(),
            via: Via::Lock,
        });
    }
    if let Some(name) = rest.strip_suffix("}:fence") {
        return Some(Candidate::Lock {
            name: name.to_string(),
            via: Via::Fence,
        });
    }
    let (slot_key, via) = match rest.strip_suffix(":fence") {
        Some(slot_key) => (slot_key, Via::Fence),
        None => (rest, Via::Lock),
    };
    let (name, slot) = slot_key.rsplit_once("}:permit:")?;
    if slot.is_empty() || !slot.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(Candidate::Slot {
        name: name.to_string(),
        slot: slot.parse().ok()?,
        via,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_key_names_its_semaphore_and_a_count_key_names_none() {
        let slot = |name: &str, slot, via| {
            Some(Candidate::Slot {
                name: name.to_string(),
                slot,
                via,
            })
        };
        let lock = |name: &str, via| {
            Some(Candidate::Lock {
                name: name.to_string(),
                via,
            })
        };
        assert_eq!(candidate_of("api}:permit:3"), slot("api", 3, Via::Lock));
        assert_eq!(
            candidate_of("a}:permit:1}:permit:12"),
            slot("a}:permit:1", 12, Via::Lock)
        );
        assert_eq!(candidate_of("db}:lock"), lock("db", Via::Lock));
        assert_eq!(
            candidate_of("api}:permit:3:fence"),
            slot("api", 3, Via::Fence)
        );
        assert_eq!(candidate_of("db}:fence"), lock("db", Via::Fence));
        assert_eq!(
            candidate_of("a}:permit:1}:fence"),
            lock("a}:permit:1", Via::Fence)
        );
        assert_eq!(candidate_of("api}:permit:"), None);
        assert_eq!(candidate_of("api}:permits"), None);
        assert_eq!(candidate_of("api}:permits:released"), None);
    }

    #[test]
    fn a_cursor_reads_back_as_the_position_it_was_written_from() {
        let tag = cursor::prefix_tag("jobs:");
        for after in [
            Candidate::Slot {
                name: "api.v1:x".to_string(),
                slot: 7,
                via: Via::Fence,
            },
            Candidate::Lock {
                name: "db".to_string(),
                via: Via::Lock,
            },
        ] {
            for scan in [Resume::Scan("8192".to_string()), Resume::Slot(15)] {
                let position = Position {
                    walked: vec![Walk::Walked, Walk::PassedOver, Walk::Pending, Walk::Pending],
                    group: 2,
                    scan,
                    after: Some(after.clone()),
                };
                let text = position.render(tag);
                assert_eq!(Position::parse(&text, 4, tag).ok(), Some(position));
            }
        }
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
            ("c2.00000.9.0.0.", 5, tag),
            ("c1.00000.0.0.0.", 5, tag),
            ("", 5, tag),
        ] {
            match Position::parse(bad, groups, tag) {
                Err(Error::InvalidInput { field, .. }) => assert_eq!(field, "cursor"),
                other => panic!("{bad:?} gave {other:?}"),
            }
        }
        // Walks end in group order.
        let tag_text = format!("{tag:016x}");
        for order in ["01000", "10100", "0x000"] {
            let bad = format!("c2.{order}.1.0.{tag_text}.");
            assert!(Position::parse(&bad, 5, tag).is_err(), "{bad}");
        }
        let good = format!("c2.x0000.1.0.{tag_text}.");
        assert!(Position::parse(&good, 5, tag).is_ok());
        // A Cluster group's walk resumes at the batch a hash slot starts, one of 0 to 15.
        for slot in ["s16", "s16384", "s", "s-1", "s1x", "x1"] {
            let bad = format!("c2.x0000.1.{slot}.{tag_text}.");
            assert!(Position::parse(&bad, 5, tag).is_err(), "{bad}");
        }
        let good = format!("c2.x0000.1.s15.{tag_text}.");
        assert!(Position::parse(&good, 5, tag).is_ok());
    }
}
