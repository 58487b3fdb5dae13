//! The paged listing of current locks and semaphores ([`Locks::list_page`]): walks enough
//! groups' keys, one group at a time, and takes what each walk lists onto the page.

use std::collections::{HashMap, HashSet};

use fred::prelude::{ClientLike, Options};

use super::cursor::{self, Position, Resume, Walk};
use super::decide::{SemaphoreRead, lists_lock, lists_semaphore};
use super::status::{Read, Seen};
use super::walk::{
    Batch, Candidate, Via, Walker, candidate_of, glob_escape, scan_batch, slots_batch,
};
use super::{ListedLock, LockList, LockStatus, MAX_LIST_LIMIT};
use crate::engine::error::Error;
use crate::engine::locks::Locks;
use crate::engine::resource::ResourceKeys;
use crate::engine::semaphore::{PermitHolder, SemaphoreStatus};
use crate::engine::vote::{GroupVote, Vote};

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

/// What one listing call matches keys by.
struct Listing {
    /// What every lock and semaphore key starts with: `<key prefix>:{`.
    key_prefix: String,
    /// The SCAN MATCH pattern of a master's walk.
    pattern: String,
    /// What the keys a Cluster group's walk keeps start with.
    key_start: String,
    /// A master's client options for the walk: the per-call timeout.
    timed: Options,
}

impl Listing {
    fn new(locks: &Locks, prefix: &str) -> Self {
        let topology = &locks.engine.topology;
        let key_prefix = format!("{}:{{", topology.key_prefix);
        // Locks are `<prefix>:{<name>}:lock|fence`, a semaphore's slots
        // `<prefix>:{<name>}:permit:<n>[:fence]`; other keys it meets are skipped.
        let pattern = format!("{}{}*}}:*", glob_escape(&key_prefix), glob_escape(prefix));
        // What those keys start with, as a Cluster group's slots are filtered.
        let key_start = format!("{key_prefix}{prefix}");
        let timed = Options {
            timeout: Some(std::time::Duration::from_millis(topology.call_timeout_ms)),
            fail_fast: true,
            ..Default::default()
        };
        Listing {
            key_prefix,
            pattern,
            key_start,
            timed,
        }
    }
}

/// What one page has taken so far, and what tells its entries apart.
struct Page {
    limit: usize,
    listed: Vec<Listed>,
    on_page: HashSet<(bool, String)>,
}

impl Page {
    fn new(limit: usize) -> Self {
        Page {
            limit,
            listed: Vec::new(),
            on_page: HashSet::new(),
        }
    }

    /// Takes back what was put on the page after its first `len` entries.
    fn truncate(&mut self, len: usize) {
        self.listed.truncate(len);
        self.on_page = self.listed.iter().map(Listed::key).collect();
    }

    /// The page as returned, each kind sorted by name.
    fn into_list(self, next_cursor: Option<String>) -> LockList {
        let mut list = LockList {
            locks: Vec::new(),
            semaphores: Vec::new(),
            truncated: next_cursor.is_some(),
            next_cursor,
        };
        for listed in self.listed {
            match listed {
                Listed::Lock(lock) => list.locks.push(lock),
                Listed::Semaphore(semaphore) => list.semaphores.push(semaphore),
            }
        }
        list.locks.sort_by(|a, b| a.resource.cmp(&b.resource));
        list.semaphores.sort_by(|a, b| a.name.cmp(&b.name));
        list
    }
}

/// Semaphore reads in flight at once while listing.
const LIST_CONCURRENCY: usize = 16;
/// Locks one script call reads while listing: it stays well within the per-call timeout.
const LOCKS_PER_READ: usize = 100;
/// Lock reads of one batch in flight at once while listing.
const READS_IN_FLIGHT: usize = 4;

impl Locks {
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
        let listing = Listing::new(self, prefix);
        let mut page = Page::new(limit);
        let mut next = None;
        // Why the groups passed over in this call were: shown when too few are left.
        let mut passed_over: Vec<GroupVote> = Vec::new();
        while at.walked() < enough {
            if at.walked() + groups.saturating_sub(at.group) < enough {
                return Err(self.too_few_walked(prefix, enough, &at, passed_over));
            }
            next = self
                .walk_group(&listing, &mut page, &mut at, &mut passed_over)
                .await?;
            if next.is_some() {
                break;
            }
        }
        Ok(page.into_list(next.map(|position| position.render(tag))))
    }

    /// Walks group `at.group` from where `at` stands, a batch at a time, taking onto `page`
    /// what the walk lists, until the walk ends (`at` then moves on to the next group) or the
    /// page is full: then the position the next page starts at.
    async fn walk_group(
        &self,
        listing: &Listing,
        page: &mut Page,
        at: &mut Position,
        passed_over: &mut Vec<GroupVote>,
    ) -> Result<Option<Position>, Error> {
        let group = &self.engine.groups[at.group];
        let walker = match group.client() {
            Some(client) => Walker::Scan(client.with_options(&listing.timed)),
            None => Walker::Slots,
        };
        if !walker.resumes(&at.scan) {
            return Err(Self::kind_changed(&group.name, &walker));
        }
        // A walk that starts in this call has listed nothing on an earlier page: if its
        // group stops answering, what it put on this page is taken back and it is passed
        // over as a whole.
        let fresh = at.scan == Resume::Start && at.after.is_none();
        let taken_before = page.listed.len();
        loop {
            let batch = match &walker {
                Walker::Scan(client) => scan_batch(client, &at.scan, &listing.pattern).await,
                Walker::Slots => slots_batch(group, &at.scan, &listing.key_start).await,
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
                    passed_over.push(GroupVote {
                        group: group.name.clone(),
                        vote,
                    });
                    at.next_group(Walk::PassedOver);
                    return Ok(None);
                }
            };
            let full = self
                .take_batch(page, at, &keys, &listing.key_prefix)
                .await?;
            if full.is_some() {
                return Ok(full);
            }
            match after_batch {
                Some(resume) => at.scan = resume,
                None => {
                    at.next_group(Walk::Walked);
                    return Ok(None);
                }
            }
        }
    }

    /// Takes onto `page` what the walk of `at.group` lists among the `keys` of one batch,
    /// after what the page before took from it; when one more matches than the page holds,
    /// the position the next page starts at: this batch again, after what this page took.
    async fn take_batch(
        &self,
        page: &mut Page,
        at: &mut Position,
        keys: &[String],
        key_prefix: &str,
    ) -> Result<Option<Position>, Error> {
        let mut candidates: Vec<Candidate> = keys
            .iter()
            .filter_map(|key| candidate_of(key.strip_prefix(key_prefix)?))
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
            if !page.on_page.insert(listed.key()) {
                continue;
            }
            if page.listed.len() == page.limit {
                return Ok(Some(Position {
                    walked: at.walked.clone(),
                    group: at.group,
                    scan: at.scan.clone(),
                    after,
                }));
            }
            page.listed.push(listed);
            after = Some(candidate);
        }
        Ok(None)
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
