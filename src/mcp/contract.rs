//! The tool contract: argument and result types of every tool, exactly as agents see them.
//!
//! Field names, meanings and doc comments here are the published contract (`docs/mcp.md`);
//! the doc comments become the JSON Schema descriptions a language model reads, so they say
//! what a field means and what to do with it. Arguments reject unknown fields, so a typo such
//! as `ttl` for `ttl_ms` is an error instead of a silently ignored value.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{GroupVote, Vote};

/// Default `ttl_ms` of `acquire_lock`.
pub const DEFAULT_TTL_MS: i64 = 15_000;
/// Default `limit` of `list_locks`.
pub const DEFAULT_LIST_LIMIT: i64 = 100;

/// A wall-clock time as agents read it: RFC 3339, UTC, milliseconds.
pub fn rfc3339(time: std::time::SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(time).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn default_ttl_ms() -> i64 {
    DEFAULT_TTL_MS
}

fn default_list_limit() -> i64 {
    DEFAULT_LIST_LIMIT
}

// ---------------------------------------------------------------------------------------------
// Arguments
// ---------------------------------------------------------------------------------------------

/// Arguments of `acquire_lock`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AcquireLockArgs {
    /// Name of the one shared thing to lock, e.g. `repo:acme/api:branch:main` or
    /// `db:orders:migrations`. Everyone who must not act at the same time has to use exactly
    /// the same name. 1 to 512 bytes of printable text. Pass either `resource` or
    /// `resources`, not both.
    #[serde(default)]
    pub resource: Option<String>,
    /// Several shared things to lock together, all or nothing, e.g. every file one edit
    /// touches: you get every one of them under one token and one fencing token, or none.
    /// 1 to 64 distinct names, in any order (each named as for `resource`). Take them in this
    /// one call, never one call at a time: two agents each holding part of what the other
    /// needs wait for each other forever. Pass either `resource` or `resources`, not both.
    #[serde(default)]
    #[schemars(length(min = 1, max = 64))]
    pub resources: Option<Vec<String>>,
    /// Take one permit of a semaphore instead of a lock: `resource` then names a semaphore of
    /// this many permits, which at most this many holders hold at once (e.g. "at most 4 agents
    /// call this API at once"). 1 to 128. Every caller of the same semaphore must pass the
    /// same count; another count is refused naming `permits`. Only with `resource`, not with
    /// `resources`. The reply's `permit` says which permit you got; release and extend it with
    /// its `token`, like a lock.
    #[serde(default)]
    #[schemars(range(min = 1, max = 128))]
    pub permits: Option<i64>,
    /// How long the lock lives, in milliseconds, unless you extend or release it first (or
    /// set keepalive). Must lie within the server's bounds (by default 5000 to 3600000).
    #[serde(default = "default_ttl_ms")]
    pub ttl_ms: i64,
    /// How long to keep trying, in milliseconds, while someone else holds the lock
    /// (0 = one attempt, at most 60000). Prefer 0 and act on `retry_after_ms`.
    #[serde(default)]
    pub wait_ms: i64,
    /// Who you are (agent name, host, job id). Shown to everyone who finds the lock held.
    #[serde(default)]
    pub owner: Option<String>,
    /// Why you hold it, in a few words. Shown to everyone who finds the lock held.
    #[serde(default)]
    pub purpose: Option<String>,
    /// If true, this server renews the lease for you until you call `release_lock`, until your
    /// session ends (then it releases the lock), or until the server's max hold time. Over
    /// HTTP a session without any call for the server's idle timeout (default 5 minutes)
    /// counts as ended, so call `lock_status` now and then while you work.
    #[serde(default)]
    pub keepalive: bool,
}

/// Arguments of `release_lock`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReleaseLockArgs {
    /// The resource name you passed to `acquire_lock` as `resource`.
    #[serde(default)]
    pub resource: Option<String>,
    /// The names you passed to `acquire_lock` as `resources` (any order): the whole set is
    /// released together. Pass either `resource` or `resources`, not both.
    #[serde(default)]
    #[schemars(length(min = 1, max = 64))]
    pub resources: Option<Vec<String>>,
    /// The `token` that `acquire_lock` returned (not the fencing_token).
    pub token: String,
}

/// Arguments of `extend_lock`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExtendLockArgs {
    /// The resource name you passed to `acquire_lock` as `resource`.
    #[serde(default)]
    pub resource: Option<String>,
    /// The names you passed to `acquire_lock` as `resources` (any order): the whole set is
    /// renewed together. Pass either `resource` or `resources`, not both.
    #[serde(default)]
    #[schemars(length(min = 1, max = 64))]
    pub resources: Option<Vec<String>>,
    /// The `token` that `acquire_lock` returned (not the fencing_token).
    pub token: String,
    /// New lifetime in milliseconds, counted from now (same bounds as `acquire_lock`).
    pub ttl_ms: i64,
}

/// Arguments of `lock_status`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LockStatusArgs {
    /// The resource name to look at.
    pub resource: String,
}

/// Arguments of `list_locks`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListLocksArgs {
    /// Only locks and semaphores whose name starts with this text (default: all).
    #[serde(default)]
    pub prefix: Option<String>,
    /// Most locks and semaphores to return together on this page, 1 to 10000 (default 100).
    #[serde(default = "default_list_limit")]
    pub limit: i64,
    /// Where to continue: the `next_cursor` of the previous list_locks result, unchanged, with
    /// the same prefix. Leave it out for the first page.
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
    /// `granted`, `held` (someone else holds it there), `fence_ahead`, `not_held`,
    /// `quarantined` (a new master sitting out; `remaining_ms` says how long), `no_policy` (a
    /// master that lost its data, waiting to adopt the lock policy of a majority), `evicts` (a
    /// master that may evict keys sits out), `above_policy` (the ttl is above the masters' lock
    /// policy), `timeout`, `error`, or `not_awaited` (the vote was decided before this group
    /// answered).
    pub vote: String,
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
    /// `voting`; `quarantined` (a new master sits out until every lease it may have missed
    /// expired); `new` (quarantined at its first vote); `no_policy` (lost its data, sits out
    /// until it adopts the lock policy of a majority of groups); `evicts` (may evict keys, so
    /// it never votes); or `unknown`.
    pub vote: String,
    /// Time left in quarantine, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quarantine_remaining_ms: Option<u64>,
    /// Settings of this master that break a safety assumption, each with what to change.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unsafe_settings: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
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
            vote: String::new(),
            remaining_ms: None,
            owner: None,
            purpose: None,
            fence: None,
            message: None,
        };
        view.vote = match &vote.vote {
            Vote::Granted => "granted",
            Vote::Held {
                owner,
                purpose,
                remaining_ms,
            } => {
                view.owner.clone_from(owner);
                view.purpose.clone_from(purpose);
                view.remaining_ms = Some(*remaining_ms);
                "held"
            }
            Vote::FenceAhead { fence } => {
                view.fence = Some(*fence);
                "fence_ahead"
            }
            Vote::NotHeld => "not_held",
            Vote::MaybeReleased => "maybe_released",
            Vote::Timeout => "timeout",
            Vote::Error { message } => {
                view.message = Some(message.clone());
                "error"
            }
            Vote::Quarantined { remaining_ms } => {
                view.remaining_ms = Some(*remaining_ms);
                "quarantined"
            }
            Vote::NoPolicy => {
                view.message = Some(
                    "this master lost its data and its lock policy; it sits out until it adopts the policy of a majority of groups".to_string(),
                );
                "no_policy"
            }
            Vote::Evicts { maxmemory_policy } => {
                view.message = Some(format!(
                    "this master may evict keys (maxmemory-policy {maxmemory_policy}), so it does not vote; set maxmemory-policy noeviction"
                ));
                "evicts"
            }
            Vote::AbovePolicy { max_ttl_ms } => {
                view.message = Some(format!(
                    "the ttl is above this master's lock policy of {max_ttl_ms} ms"
                ));
                "above_policy"
            }
            Vote::PermitsDiffer { permits } => {
                view.message = Some(format!(
                    "the semaphore has {permits} permits on this group, not the count asked with"
                ));
                "permits_differ"
            }
            Vote::ReplicasMissing { online, needed } => {
                view.message = Some(format!(
                    "acknowledged mode: {online} of this master's {needed} replicas are attached and in sync, so it does not vote"
                ));
                "replicas_missing"
            }
            Vote::NotAwaited => "not_awaited",
        }
        .to_string();
        view
    }
}
