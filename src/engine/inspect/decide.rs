//! Which walk of a listing lists a lock or a semaphore: the lowest-numbered walked group
//! that carries the majority holder's grant, told from a [`LockStatus`] read on every group.

use super::LockStatus;
use super::walk::Via;
use crate::engine::error::Error;
use crate::engine::inspect::GroupLockState;
use crate::engine::semaphore::SemaphoreStatus;
use crate::engine::vote::{GroupVote, Vote};

/// A semaphore as one listing decision reads it: the entry to list, and every slot's view.
pub(super) struct SemaphoreRead {
    pub(super) semaphore: SemaphoreStatus,
    pub(super) slots: Vec<LockStatus>,
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
    pub(super) fn decided(&self, needed: usize) -> bool {
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
    pub(super) fn unavailable(&self, needed: usize) -> Error {
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
pub(super) fn lists_lock(
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
pub(super) fn lists_semaphore(
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
