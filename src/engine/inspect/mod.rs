//! Read-only views of locks: one lock as each group sees it, and the current locks and
//! semaphores. This folder owns those views, one job a file: the public types here;
//! `status` one lock (or many) read on every group; `list` the paged listing; `walk` how a
//! group's keys are walked; `decide` which walk lists a lock or semaphore; `cursor` where a
//! listing stands and its text form.

mod cursor;
mod decide;
mod list;
mod status;
mod walk;

use serde::Serialize;

use crate::engine::error::Holder;
use crate::engine::semaphore::SemaphoreStatus;

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
    /// Where the next page starts: pass it to [`Locks::list_page`](crate::Locks::list_page)
    /// with the same prefix. `None` on the last page.
    pub next_cursor: Option<String>,
}

/// Largest `limit` accepted by [`Locks::list`](crate::Locks::list).
pub const MAX_LIST_LIMIT: usize = 10_000;
