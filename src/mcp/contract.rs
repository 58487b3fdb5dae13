//! The tool contract: argument and result types of every tool, and the kinds of tool error.
//!
//! Field names and meanings here are the published contract (`docs/mcp.md`, which a test
//! compares with the schemas field for field). The doc comments of the arguments become the
//! input schemas' descriptions, which every agent loads into its context: they say in a few
//! words what the name and type do not. Results are described in docs/mcp.md only (their
//! schemas carry no prose; see `schema`). Arguments reject unknown fields, so a typo such as
//! `ttl` for `ttl_ms` is an error instead of a silently ignored value.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{GroupVote, Vote};

/// Default `ttl_ms` of `acquire_lock`, unless the server's bounds exclude it
/// ([`super::Limits::default_ttl`]).
pub const DEFAULT_TTL_MS: u64 = 15_000;
/// Default `limit` of `list_locks`.
pub const DEFAULT_LIST_LIMIT: i64 = 100;

/// A wall-clock time as agents read it: RFC 3339, UTC, milliseconds.
pub fn rfc3339(time: std::time::SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(time).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn default_list_limit() -> i64 {
    DEFAULT_LIST_LIMIT
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// What kind of failure a tool error is: a stable name an agent branches on. It travels as
/// `structuredContent.error.kind` and as the first word of the error's text (docs/mcp.md,
/// "Errors"). An unknown tool is a JSON-RPC error whose `data.kind` is `not_found`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// An argument is wrong; `field` names it. Fix the call; the same call fails again.
    InvalidInput,
    /// `ttl_ms` is above the longest lease this server (or the masters' lock policy) grants;
    /// `max` says how long that is. Use a shorter `ttl_ms`, or `keepalive: true`.
    HeldTooLong,
    /// Too few groups answered or vote: nothing was granted. Never act as if you held the lock;
    /// call `cluster_health`, retry in a few seconds.
    NoQuorum,
    /// A capacity cap of the server is reached; `limit` names it and `max` is its value.
    /// Nothing was taken.
    OverLimit,
    /// The tool does not exist (a JSON-RPC error, `field: "name"`).
    NotFound,
    /// The vote took longer than the lease's validity: nothing is held. Retry, with a longer
    /// `ttl_ms` if it recurs.
    Expired,
    /// The session ended, or the server is shutting down, while a keepalive lock was being
    /// acquired: it was released again.
    SessionClosed,
    /// Anything else: a fault of the server or of its set-up. Retry later; report it if it
    /// persists.
    Internal,
}

impl ErrorKind {
    /// Every kind, in the order docs/mcp.md lists them.
    pub const ALL: [ErrorKind; 8] = [
        ErrorKind::InvalidInput,
        ErrorKind::HeldTooLong,
        ErrorKind::NoQuorum,
        ErrorKind::OverLimit,
        ErrorKind::NotFound,
        ErrorKind::Expired,
        ErrorKind::SessionClosed,
        ErrorKind::Internal,
    ];

    /// The name agents see.
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidInput => "invalid_input",
            ErrorKind::HeldTooLong => "held_too_long",
            ErrorKind::NoQuorum => "no_quorum",
            ErrorKind::OverLimit => "over_limit",
            ErrorKind::NotFound => "not_found",
            ErrorKind::Expired => "expired",
            ErrorKind::SessionClosed => "session_closed",
            ErrorKind::Internal => "internal",
        }
    }
}

/// The error kinds' names, as agents see them, in the order of [`ErrorKind::ALL`].
pub const ERROR_KINDS: [&str; 8] = {
    let mut names = [""; 8];
    let mut index = 0;
    while index < ErrorKind::ALL.len() {
        names[index] = ErrorKind::ALL[index].as_str();
        index += 1;
    }
    names
};

/// A tool error's structured content: `{"error": {...}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ErrorResult {
    pub error: ErrorView,
}

/// What a tool error says to a program: its kind, and what it concerns.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ErrorView {
    /// One of [`ERROR_KINDS`].
    pub kind: &'static str,
    /// The argument to fix (`invalid_input`, `held_too_long`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// The capacity cap reached (`over_limit`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<&'static str>,
    /// The most allowed: the longest `ttl_ms` (`held_too_long`), the cap's value
    /// (`over_limit`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max: Option<u64>,
}

// ---------------------------------------------------------------------------------------------
// Arguments
// ---------------------------------------------------------------------------------------------

/// Arguments of `acquire_lock`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AcquireLockArgs {
    /// e.g. repo:acme/api:branch:main; 1-512 bytes
    #[serde(default)]
    pub resource: Option<String>,
    #[serde(default)]
    pub resources: Option<Vec<String>>,
    #[serde(default)]
    pub permits: Option<i64>,
    #[serde(default)]
    pub ttl_ms: Option<i64>,
    #[serde(default)]
    pub wait_ms: i64,
    #[serde(default)]
    pub owner: Option<String>,
    #[serde(default)]
    pub purpose: Option<String>,
    #[serde(default)]
    pub keepalive: bool,
}

/// Arguments of `release_lock`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReleaseLockArgs {
    #[serde(default)]
    pub resource: Option<String>,
    #[serde(default)]
    pub resources: Option<Vec<String>>,
    pub token: String,
}

/// Arguments of `extend_lock`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExtendLockArgs {
    #[serde(default)]
    pub resource: Option<String>,
    #[serde(default)]
    pub resources: Option<Vec<String>>,
    pub token: String,
    pub ttl_ms: i64,
}

/// Arguments of `lock_status`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LockStatusArgs {
    pub resource: String,
}

/// Arguments of `list_locks`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListLocksArgs {
    #[serde(default)]
    pub prefix: Option<String>,
    #[serde(default = "default_list_limit")]
    pub limit: i64,
    #[serde(default)]
    pub cursor: Option<String>,
}

/// Arguments of `cluster_health` (none).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClusterHealthArgs {}

// ---------------------------------------------------------------------------------------------
// Results
// ---------------------------------------------------------------------------------------------

/// Result of `acquire_lock`: either you got the lock (`acquired: true`) or someone else holds
/// it (`acquired: false`, with `holder` and `retry_after_ms`).
#[derive(Debug, Serialize, JsonSchema)]
pub struct AcquireLockResult {
    /// True when you now hold the lock (for `resources`: every one of them).
    pub acquired: bool,
    /// The resource you asked for; with `resources`, the first of them in sorted order.
    pub resource: String,
    /// Every resource this call was about, sorted: one, unless you passed `resources`. When
    /// acquired is true you hold all of them under the one token; when false, none of them.
    pub resources: Vec<String>,
    /// Secret proof of ownership: pass it to `release_lock` and `extend_lock`. Do not share it.
    /// For a permit it names the permit too: pass it unchanged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// With `permits`: the permit you hold, from 0 to permits − 1 (present when acquired).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub permit: Option<u32>,
    /// With `permits`: the semaphore's permit count you asked with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub permits: Option<u32>,
    /// Grows with every new holder of this resource. Pass it with every write to the protected
    /// resource, which must reject writes carrying a smaller number than one it has seen. With
    /// `resources` it is one number for the whole set: pass it with writes to each of them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fencing_token: Option<u64>,
    /// Milliseconds you may rely on holding the lock from now; finish or extend before then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub validity_ms: Option<u64>,
    /// When the validity ends (RFC 3339, this server's clock).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// True when this server renews the lease until you release it or your session ends.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keepalive: Option<bool>,
    /// How the vote went: how many groups granted, how many were needed, each group's vote.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quorum: Option<QuorumReport>,
    /// When you did not get it: the resource `holder` holds. With `resources`, the one that
    /// stopped the set (you were granted none of them); absent when the groups did not say.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_resource: Option<String>,
    /// Who holds the lock when you did not get it; with `permits`, the holder of the permit
    /// that expires first (every permit is taken).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder: Option<HolderView>,
    /// When you did not get it: milliseconds after which the current lease runs out unless
    /// its holder extends it. Do other work and retry after that.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
}

/// The vote behind a grant.
#[derive(Debug, Serialize, JsonSchema)]
pub struct QuorumReport {
    /// Groups that granted.
    pub granted: usize,
    /// Groups that had to grant (a majority).
    pub needed: usize,
    /// Every group's vote.
    pub groups: Vec<GroupVoteView>,
}

/// One group's vote.
#[derive(Debug, Serialize, JsonSchema)]
pub struct GroupVoteView {
    pub group: String,
    pub vote: VoteKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remaining_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub purpose: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fence: Option<u64>,
    /// What went wrong, for `error` votes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// What one group said, by name (docs/mcp.md lists what each means). One value per engine
/// [`Vote`], so a new vote cannot reach agents unnamed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum VoteKind {
    Granted,
    Held,
    FenceAhead,
    NotHeld,
    MaybeReleased,
    Quarantined,
    NoPolicy,
    Evicts,
    AbovePolicy,
    PermitsDiffer,
    ReplicasMissing,
    Timeout,
    Error,
    NotAwaited,
}

/// Who holds a lock: the engine's own type, so the contract cannot drift from it.
pub use crate::Holder as HolderView;

/// Result of `release_lock`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ReleaseLockResult {
    /// True when this call deleted your lock and it is free now. False when it did not: this
    /// token did not hold it (it expired, was already released, or the token is wrong), or
    /// see `groups_maybe_released`.
    pub released: bool,
    /// The resource; with `resources`, the first of them in sorted order.
    pub resource: String,
    /// Every resource released together, sorted: one, unless you passed `resources`.
    pub resources: Vec<String>,
    /// How many groups this call deleted the lock on; a group that did not answer is tried
    /// again in the background.
    pub groups_released: usize,
    /// Groups where the lock is gone after this call's unanswered try: it or the expiry did it.
    pub groups_maybe_released: usize,
}

/// Result of `extend_lock`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ExtendLockResult {
    /// True when the lease was renewed. False when this token no longer holds the lock:
    /// stop writing to the protected resource and acquire it again.
    pub extended: bool,
    /// The resource; with `resources`, the first of them in sorted order.
    pub resource: String,
    /// Every resource renewed together, sorted: one, unless you passed `resources`.
    pub resources: Vec<String>,
    /// Milliseconds you may rely on holding the lock from now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub validity_ms: Option<u64>,
    /// When the validity ends (RFC 3339, this server's clock).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
}

/// Result of `lock_status`. Advisory: the lock may change right after it is read.
#[derive(Debug, Serialize, JsonSchema)]
pub struct LockStatusResult {
    pub resource: String,
    /// True when a majority of groups hold the lock under one token.
    pub held: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder: Option<HolderView>,
    /// The current holder's fencing token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fencing_token: Option<u64>,
    /// Each group's view of the lock.
    pub groups: Vec<GroupStateView>,
    /// Every holder some group holds the lock for, with its groups, most groups first.
    pub holders: Vec<crate::HolderGroups>,
    /// True when groups hold the lock for more than one holder: do not trust `holder` alone;
    /// the one with the higher fencing token wins at fenced storage.
    pub split: bool,
    /// The keepalive lease this server runs (or ran) for this resource, alone or as one of a
    /// set, if any: `renewing`, or how it ended (`lost`, `max_hold_reached`). Only a lease of
    /// your own session shows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keepalive: Option<KeepaliveView>,
    /// Present when `resource` is a semaphore in use: its permit count, and who holds which
    /// permit (`permit`, `owner`, `purpose`, `remaining_ms`, `fencing_token`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub semaphore: Option<SemaphoreView>,
}

/// A semaphore's permits and holders: the engine's own type.
pub use crate::SemaphoreStatus as SemaphoreView;

/// One group's view of one lock: the engine's own type.
pub use crate::GroupView as GroupStateView;

/// Where a keepalive lease of this server stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum KeepaliveState {
    /// This server keeps renewing the lease.
    Renewing,
    /// A renewal failed: the lock may belong to someone else now.
    Lost,
    /// The server released the lease after its max hold time.
    MaxHoldReached,
}

impl KeepaliveState {
    /// The name used in JSON, logs and notifications.
    pub fn as_str(self) -> &'static str {
        match self {
            KeepaliveState::Renewing => "renewing",
            KeepaliveState::Lost => "lost",
            KeepaliveState::MaxHoldReached => "max_hold_reached",
        }
    }
}

/// A keepalive lease held by this server process.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct KeepaliveView {
    /// `renewing`: this server keeps the lease alive. `lost`: a renewal failed, the lock may
    /// belong to someone else now: stop writing and acquire again. `max_hold_reached`: the
    /// server released it after its max hold time.
    pub state: KeepaliveState,
    /// Every resource of the kept lease, sorted: more than one when it was acquired with
    /// `resources`, and then they are renewed, lost or released together.
    pub resources: Vec<String>,
    pub fencing_token: u64,
    /// Why the lease ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When it ended (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
}

/// Result of `list_locks`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ListLocksResult {
    /// Held locks on this page, sorted by resource name.
    pub locks: Vec<ListedLockView>,
    /// Semaphores with at least one permit held, sorted by name, one entry each: `name`,
    /// `permits` (its permit count; `holders` has one entry per permit held) and `holders`
    /// (`permit`, `owner`, `purpose`, `remaining_ms`, `fencing_token`). When as many holders
    /// as permits are listed, an acquire_lock with these permits will wait or be refused.
    pub semaphores: Vec<SemaphoreView>,
    /// True when more locks and semaphores match than this page holds; `next_cursor` is set.
    pub truncated: bool,
    /// Present when more match: call list_locks again with the same prefix and this value as
    /// `cursor` for the next page. Absent on the last page. Following it from the first page
    /// lists every lock held on a majority all along exactly once (docs/mcp.md names the
    /// rare exceptions).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// One held lock: the engine's own type.
pub use crate::ListedLock as ListedLockView;

/// Result of `cluster_health`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ClusterHealthResult {
    /// True when enough groups answer to grant locks.
    pub quorum_available: bool,
    /// Groups that must answer for a lock to be granted.
    pub needed: usize,
    /// Groups that answered.
    pub reachable: usize,
    /// Groups that answered and take part in the vote (not quarantined).
    pub voting: usize,
    pub groups: Vec<GroupHealthView>,
}

/// One group's health.
#[derive(Debug, Serialize, JsonSchema)]
pub struct GroupHealthView {
    pub group: String,
    /// `host:port` of the master this server talks to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub master: Option<String>,
    pub reachable: bool,
    /// Round trip of a PING, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<f64>,
    /// `master` (or `slave` while a failover settles), as the node reports itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// The master's replicas and how far behind each is.
    pub replicas: Vec<crate::ReplicaView>,
    /// Whether every Sentinel that answered names the master this server uses (with no master
    /// connected, the same master as each other); absent when no Sentinel named one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sentinels_agree: Option<bool>,
    pub vote: HealthVote,
    /// Time left in quarantine, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quarantine_remaining_ms: Option<u64>,
    /// Settings of this master that break a safety assumption, each with what to change.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unsafe_settings: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Whether a group's master takes part in the vote (docs/mcp.md lists what each means).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HealthVote {
    Voting,
    Quarantined,
    New,
    NoPolicy,
    Evicts,
    Unknown,
}

impl From<&crate::Admission> for HealthVote {
    fn from(admission: &crate::Admission) -> Self {
        match admission {
            crate::Admission::Voting => HealthVote::Voting,
            crate::Admission::Quarantined { .. } => HealthVote::Quarantined,
            crate::Admission::Unadmitted => HealthVote::New,
            crate::Admission::NoPolicy => HealthVote::NoPolicy,
            crate::Admission::Evicts { .. } => HealthVote::Evicts,
            crate::Admission::Unknown => HealthVote::Unknown,
        }
    }
}

impl QuorumReport {
    pub fn from_votes(votes: &[GroupVote], needed: usize) -> QuorumReport {
        QuorumReport {
            granted: votes.iter().filter(|v| v.vote == Vote::Granted).count(),
            needed,
            groups: votes.iter().map(GroupVoteView::from).collect(),
        }
    }
}

impl From<&GroupVote> for GroupVoteView {
    fn from(vote: &GroupVote) -> Self {
        let mut view = GroupVoteView {
            group: vote.group.clone(),
            vote: VoteKind::Granted,
            remaining_ms: None,
            owner: None,
            purpose: None,
            fence: None,
            message: None,
        };
        view.vote = match &vote.vote {
            Vote::Granted => VoteKind::Granted,
            Vote::Held {
                owner,
                purpose,
                remaining_ms,
            } => {
                view.owner.clone_from(owner);
                view.purpose.clone_from(purpose);
                view.remaining_ms = Some(*remaining_ms);
                VoteKind::Held
            }
            Vote::FenceAhead { fence } => {
                view.fence = Some(*fence);
                VoteKind::FenceAhead
            }
            Vote::NotHeld => VoteKind::NotHeld,
            Vote::MaybeReleased => VoteKind::MaybeReleased,
            Vote::Timeout => VoteKind::Timeout,
            Vote::Error { message } => {
                view.message = Some(message.clone());
                VoteKind::Error
            }
            Vote::Quarantined { remaining_ms } => {
                view.remaining_ms = Some(*remaining_ms);
                VoteKind::Quarantined
            }
            Vote::NoPolicy => {
                view.message = Some(
                    "this master lost its data and its lock policy; it sits out until it adopts the policy of a majority of groups".to_string(),
                );
                VoteKind::NoPolicy
            }
            Vote::Evicts { maxmemory_policy } => {
                view.message = Some(format!(
                    "this master may evict keys (maxmemory-policy {maxmemory_policy}), so it does not vote; set maxmemory-policy noeviction"
                ));
                VoteKind::Evicts
            }
            Vote::AbovePolicy { max_ttl_ms } => {
                view.message = Some(format!(
                    "the ttl is above this master's lock policy of {max_ttl_ms} ms"
                ));
                VoteKind::AbovePolicy
            }
            Vote::PermitsDiffer { permits } => {
                view.message = Some(format!(
                    "the semaphore has {permits} permits on this group, not the count asked with"
                ));
                VoteKind::PermitsDiffer
            }
            Vote::ReplicasMissing { online, needed } => {
                view.message = Some(format!(
                    "acknowledged mode: {online} of this master's {needed} replicas are attached and in sync, so it does not vote"
                ));
                VoteKind::ReplicasMissing
            }
            Vote::NotAwaited => VoteKind::NotAwaited,
        };
        view
    }
}
