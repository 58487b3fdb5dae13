//! The public face of the engine: [`Locks`] connects to every group, hands out leases and
//! closes; the engine state it shares with leases and waiters lives here too.
//!
//! The work is split by job: `acquire` (rounds, fencing, rollback), `by_token` (extend,
//! release, force release), `vote` (the majority rule), `fan_out` (one call to every group).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;
use tokio_util::task::TaskTracker;

use crate::config::Topology;
use crate::engine::clock::{Clock, millis};
use crate::engine::error::{Error, majority_holder};
use crate::engine::fence::Fences;
use crate::engine::lease::{Acquire, Lease, RenewalCounts};
use crate::engine::resource::{
    Claim, LeaseKeys, MAX_PERMITS, PermitHandle, ResourceKeys, validate_resource,
};
use crate::engine::vote::{GroupVote, Majority, Vote};
use crate::engine::waiters::Waiters;
use crate::group::Group;
use crate::group::security::Transport;
use crate::group::sentinel::{Failover, SentinelWatch};

/// Shortest TTL accepted: below this the drift allowance leaves no validity.
pub const MIN_TTL: Duration = Duration::from_millis(10);
/// Longest wait accepted.
pub const MAX_WAIT: Duration = Duration::from_secs(24 * 3600);
/// Default TTL of a lease.
pub const DEFAULT_TTL: Duration = Duration::from_secs(15);
/// Extra tries of a delete on a group that timed out or failed: deletes are idempotent, and
/// without them a lock would stay on that group until its TTL.
pub(crate) const DELETE_RETRIES: usize = 2;
/// Rounds one attempt may spend raising its fencing proposal above a group's fence.
pub(crate) const FENCE_ROUNDS: usize = 3;

/// A connection to every group of a topology; cheap to clone, share it.
#[derive(Clone)]
pub struct Locks {
    pub(crate) engine: Arc<Engine>,
}

pub(crate) struct Engine {
    pub groups: Vec<Group>,
    /// Master changes Sentinel announced, as the groups acted on them.
    failovers: broadcast::Sender<Failover>,
    sentinels: SentinelWatch,
    /// Release subscriptions of denied acquires that wait.
    pub waiters: Waiters,
    pub topology: Topology,
    pub majority: Majority,
    /// Highest fence this process has proposed or seen; proposals always go above it.
    pub fences: Fences,
    /// Where validity and fencing proposals read the time.
    pub clock: Clock,
    /// Groups whose lock policy is being adopted now (one adoption at a time per group).
    pub adopting: std::sync::Mutex<Vec<bool>>,
    /// Deletes that outlive their caller (rollbacks, and release retries on a group that
    /// failed); `close` lets them finish.
    pub cleanup: TaskTracker,
}

/// How to acquire: TTL, how long to keep trying, and who is asking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcquireOptions {
    /// How long the lock lives on each group unless extended or released.
    pub ttl: Duration,
    /// How long to keep retrying while the lock is held or the quorum is unavailable.
    pub wait: Duration,
    /// Who holds the lock, shown to everyone who inspects or waits for it.
    pub owner: Option<String>,
    /// Why, shown alongside the owner.
    pub purpose: Option<String>,
}

impl Default for AcquireOptions {
    fn default() -> Self {
        AcquireOptions {
            ttl: DEFAULT_TTL,
            wait: Duration::ZERO,
            owner: None,
            purpose: None,
        }
    }
}

/// What is stored beside the lock for inspection.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct OwnerRecord {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purpose: Option<String>,
    #[serde(default)]
    pub acquired_at_ms: u64,
}

impl OwnerRecord {
    pub fn parse(raw: &str) -> OwnerRecord {
        serde_json::from_str(raw).unwrap_or_default()
    }
}

/// The result of one extend.
#[derive(Debug, Clone)]
pub struct Extended {
    /// When the renewed lease stops being valid (monotonic clock).
    pub valid_until: Instant,
    pub votes: Vec<GroupVote>,
}

/// The result of one release. `released: true` says this call deleted the lock; `false`
/// with [`Released::groups_maybe_released`] at 0 says it was gone already (expired,
/// released, force-released) or held by another token; `false` with some groups maybe
/// released says it is gone there, and whether this call or the lease's end removed it
/// cannot be told.
#[derive(Debug, Clone, Serialize)]
pub struct Released {
    /// True when at least one group still held the lock under this token and this release
    /// deleted it there.
    pub released: bool,
    /// How many groups this release deleted it on by the time it answered (a group whose try
    /// failed, once the lock is gone elsewhere, is tried again in the background). A group
    /// where a try that may have run is followed by no lock at all counts only while the
    /// lease's validity lasts, which the holder of a [`Lease`] knows and a release by token
    /// does not; elsewhere it is [`Vote::MaybeReleased`].
    pub groups_released: usize,
    pub votes: Vec<GroupVote>,
}

impl Released {
    /// Groups where the lock is gone after a try of this release that may have run, but
    /// whether that try or the lease's end removed it cannot be told ([`Vote::MaybeReleased`]);
    /// never counted in `groups_released`.
    pub fn groups_maybe_released(&self) -> usize {
        self.votes
            .iter()
            .filter(|v| v.vote == Vote::MaybeReleased)
            .count()
    }
}

/// A successful acquire: the token and fencing token it won, and the vote behind it. It
/// becomes a [`Lease`].
pub(crate) struct Acquired {
    /// The random token that identifies this holder on every group.
    pub token: String,
    pub fence: u64,
    /// The slot a permit won (0 for a lock or a set).
    pub slot: usize,
    /// Attempts this acquire made (1 when the lock was free at once).
    pub attempts: u32,
    pub started: Instant,
    pub valid_until: Instant,
    pub votes: Vec<GroupVote>,
}

impl Locks {
    /// Connects to every group of the topology. Groups that are down now do not fail the
    /// call: they reconnect in the background and vote "error" meanwhile.
    pub async fn connect(topology: Topology) -> Result<Locks, Error> {
        Locks::connect_with_clock(topology, Clock::system()).await
    }

    /// [`Locks::connect`], reading the time from `clock`: for tests and chaos runs that play
    /// a client whose clock is off or drifts.
    pub async fn connect_with_clock(topology: Topology, clock: Clock) -> Result<Locks, Error> {
        topology.validate()?;
        let transport = Transport::from_topology(&topology)?;
        let mut groups = Vec::with_capacity(topology.groups.len());
        for (index, config) in topology.groups.iter().enumerate() {
            groups.push(Group::connect(index, config, &topology, &transport).await?);
        }
        futures::future::join_all(groups.iter().map(Group::start)).await;
        let (failovers, _) = broadcast::channel(64);
        let sentinels = SentinelWatch::start(&groups, failovers.clone()).await;
        let majority = Majority::of(topology.groups.len());
        // A release's groups delete it within a call timeout of each other, and mostly
        // within a small part of one; a try that waits longer than a retry delay for the
        // rest would be slower than polling.
        let grace = topology.call_timeout().min(topology.retry_delay()) / 5;
        Ok(Locks {
            engine: Arc::new(Engine {
                majority,
                adopting: std::sync::Mutex::new(vec![false; topology.groups.len()]),
                failovers,
                sentinels,
                waiters: Waiters::new(majority.needed, grace),
                groups,
                topology,
                fences: Fences::default(),
                clock,
                cleanup: TaskTracker::new(),
            }),
        })
    }

    /// What every keepalive task of this process has done since it started, whichever
    /// `Locks` it renews through: for load reports.
    pub fn renewal_counts() -> RenewalCounts {
        crate::engine::lease::renewal_counts()
    }

    /// Starts building an acquire of `resource`; `.await` it (see [`crate::Acquire`]).
    pub fn acquire(&self, resource: impl Into<String>) -> Acquire {
        Acquire::new(self.clone(), resource.into())
    }

    /// Acquires with explicit options.
    pub async fn acquire_with(
        &self,
        resource: &str,
        options: &AcquireOptions,
    ) -> Result<Lease, Error> {
        validate_resource(resource)?;
        let keys = self.engine.keys(resource);
        self.acquire_claim(Claim::Set(keys), options).await
    }

    /// Starts building an acquire of several resources at once, all or nothing: one lease,
    /// one token, and one fencing token that every resource of the set carries. Names may
    /// come in any order (the groups see one canonical order, so two callers naming the same
    /// resources never deadlock); `.await` it like [`Locks::acquire`].
    pub fn acquire_all<S: AsRef<str>>(&self, resources: &[S]) -> Acquire {
        Acquire::set(
            self.clone(),
            resources.iter().map(|r| r.as_ref().to_string()).collect(),
        )
    }

    /// [`Locks::acquire_all`] with explicit options.
    pub async fn acquire_all_with<S: AsRef<str>>(
        &self,
        resources: &[S],
        options: &AcquireOptions,
    ) -> Result<Lease, Error> {
        let keys = self.engine.set_keys(resources)?;
        self.acquire_claim(Claim::Set(keys), options).await
    }

    pub(crate) async fn acquire_claim(
        &self,
        claim: Claim,
        options: &AcquireOptions,
    ) -> Result<Lease, Error> {
        let permit = matches!(claim, Claim::Permit(_));
        let (keys, acquired) = self.engine.acquire(&claim, options).await?;
        Ok(Lease::new(
            self.engine.clone(),
            Arc::new(keys),
            options.ttl,
            acquired,
            permit,
        ))
    }

    /// Renews the lock held under `token` for `ttl` on a majority of groups; with a permit's
    /// token, that permit of semaphore `resource`.
    pub async fn extend(
        &self,
        resource: &str,
        token: &str,
        ttl: Duration,
    ) -> Result<Extended, Error> {
        let (keys, token) = self.engine.by_token_keys(resource, token)?;
        self.engine.extend(&keys, token, ttl).await
    }

    /// Renews every resource of a set held under `token` (see [`Locks::acquire_all`]); a
    /// group counts only when it still holds all of them.
    pub async fn extend_all<S: AsRef<str>>(
        &self,
        resources: &[S],
        token: &str,
        ttl: Duration,
    ) -> Result<Extended, Error> {
        let keys = self.engine.set_keys(resources)?;
        self.engine.extend(&keys, token, ttl).await
    }

    /// Deletes the lock on every group where it still carries `token`; with a permit's
    /// token, that permit of semaphore `resource`. A release by token cannot know the lease's
    /// validity, so a group where the lock is gone after a try that went unanswered counts
    /// as maybe released, never as released ([`Released::groups_maybe_released`]).
    pub async fn release(&self, resource: &str, token: &str) -> Result<Released, Error> {
        let (keys, token) = self.engine.by_token_keys(resource, token)?;
        self.engine.release(&keys, token, None).await
    }

    /// Deletes every resource of a set still held under `token`, on every group; by token,
    /// like [`Locks::release`].
    pub async fn release_all<S: AsRef<str>>(
        &self,
        resources: &[S],
        token: &str,
    ) -> Result<Released, Error> {
        let keys = self.engine.set_keys(resources)?;
        self.engine.release(&keys, token, None).await
    }

    /// Deletes the lock on every group whoever holds it; for operators clearing a stuck
    /// lock. The holder is not told; its fencing token stays below every later holder's.
    pub async fn force_release(&self, resource: &str) -> Result<Released, Error> {
        self.engine.force_release(resource).await
    }

    /// The topology this client votes over.
    pub fn topology(&self) -> &Topology {
        &self.engine.topology
    }

    /// The clock validity and fencing proposals are read from.
    pub fn clock(&self) -> &Clock {
        &self.engine.clock
    }

    /// Votes needed for a majority.
    pub fn quorum(&self) -> usize {
        self.engine.majority.needed
    }

    /// Master changes that Sentinel announces from now on, each after the group reconnected.
    pub fn failovers(&self) -> broadcast::Receiver<Failover> {
        self.engine.failovers.subscribe()
    }

    /// Lets the lock calls in flight land (a grant that the vote was decided without still
    /// reaches its group, a release or rollback still retried on a group that failed), then
    /// closes every group's connection. A process that exits right after acquiring or
    /// releasing should call it, or its lock may stand on a bare majority, or on a minority
    /// until its TTL.
    pub async fn close(&self) {
        self.engine.cleanup.close();
        self.engine.cleanup.wait().await;
        futures::future::join_all(self.engine.groups.iter().map(Group::settle)).await;
        self.engine.sentinels.stop().await;
        self.engine.waiters.stop().await;
        futures::future::join_all(self.engine.groups.iter().map(Group::quit)).await;
    }
}

/// TTLs must lie within MIN_TTL..=max_ttl: a longer lease could outlive a fresh master's
/// quarantine.
pub(crate) fn check_ttl(ttl: Duration, max_ttl: Duration) -> Result<(), Error> {
    if ttl < MIN_TTL || ttl > max_ttl {
        return Err(Error::invalid(
            "ttl",
            format!(
                "{} ms is outside {}..={} ms (max_ttl_ms of the topology)",
                ttl.as_millis(),
                MIN_TTL.as_millis(),
                max_ttl.as_millis()
            ),
        ));
    }
    Ok(())
}

/// How long a lease stays valid, counted from the start of the attempt that won it: its TTL
/// less the clock-drift allowance, `ttl × drift_factor + 2 ms`. Zero when nothing is left.
pub(crate) fn lifetime(ttl: Duration, drift_factor: f64) -> Duration {
    let drift = ttl.mul_f64(drift_factor) + Duration::from_millis(2);
    ttl.saturating_sub(drift)
}

impl Engine {
    /// The keys of a set of resources (see [`LeaseKeys::set`]). A set of several is refused
    /// when a group is a Redis Cluster: its resources live in slots of their own, and a
    /// Cluster primary runs a script on one slot.
    pub fn set_keys<S: AsRef<str>>(&self, resources: &[S]) -> Result<LeaseKeys, Error> {
        let keys = LeaseKeys::set(&self.topology.key_prefix, resources)?;
        if keys.names.len() > 1
            && let Some(cluster) = self.groups.iter().find(|group| group.is_cluster())
        {
            return Err(Error::invalid(
                "resources",
                format!(
                    "names {} resources, and group `{}` is a Redis Cluster, where each resource lives in a hash slot of its own: take them one at a time",
                    keys.names.len(),
                    cluster.name
                ),
            ));
        }
        Ok(keys)
    }

    /// The keys of one resource.
    pub fn resource_keys(&self, resource: &str) -> ResourceKeys {
        ResourceKeys::new(&self.topology.key_prefix, resource)
    }

    /// The keys a token acts on: a permit's slot when the token is a permit's, else the
    /// resource; and the token the groups hold.
    pub fn by_token_keys<'t>(
        &self,
        resource: &str,
        token: &'t str,
    ) -> Result<(LeaseKeys, &'t str), Error> {
        validate_resource(resource)?;
        Ok(match PermitHandle::parse(token) {
            Some(PermitHandle { token: raw, slot }) if slot < MAX_PERMITS => (
                LeaseKeys {
                    names: vec![resource.to_string()],
                    members: vec![ResourceKeys::slot(
                        &self.topology.key_prefix,
                        resource,
                        slot,
                    )],
                },
                raw,
            ),
            _ => (self.keys(resource), token),
        })
    }

    /// The semaphore's permit count differs on so many groups that no majority can grant:
    /// the caller's input is at fault.
    pub(crate) fn permits_differ(&self, name: &str, votes: &[GroupVote]) -> Option<Error> {
        let counts: Vec<u64> = votes
            .iter()
            .filter_map(|v| match v.vote {
                Vote::PermitsDiffer { permits } => Some(permits),
                _ => None,
            })
            .collect();
        if counts.len() <= self.majority.groups - self.majority.needed {
            return None;
        }
        let count = counts.iter().max().copied().unwrap_or_default();
        Some(Error::invalid(
            "permits",
            format!(
                "the semaphore `{name}` has {count} permits; ask with that count (it is kept while the semaphore is in use, and a day after)"
            ),
        ))
    }

    /// The keys of one resource, as a lease of one.
    pub fn keys(&self, resource: &str) -> LeaseKeys {
        LeaseKeys::one(&self.topology.key_prefix, resource)
    }

    /// Why a vote without a majority failed: the infrastructure when too few groups
    /// answered, otherwise what the groups that answered said (`refused`: another holder, or
    /// not our token).
    pub(crate) fn refusal(
        &self,
        resource: &str,
        votes: Vec<GroupVote>,
        refused: impl FnOnce(String, Vec<GroupVote>) -> Error,
    ) -> Error {
        if self.majority.unavailable(&votes) {
            return Error::Unavailable {
                resource: resource.to_string(),
                needed: self.majority.needed,
                total: self.majority.groups,
                votes,
            };
        }
        refused(resource.to_string(), votes)
    }

    /// A TTL that so many masters refused as above their lock policy that no majority can
    /// grant it: the caller's input, not the infrastructure, is at fault.
    pub(crate) fn above_policy(&self, ttl: Duration, votes: &[GroupVote]) -> Option<Error> {
        let caps: Vec<u64> = votes
            .iter()
            .filter_map(|v| match v.vote {
                Vote::AbovePolicy { max_ttl_ms } => Some(max_ttl_ms),
                _ => None,
            })
            .collect();
        if caps.len() <= self.majority.groups - self.majority.needed {
            return None;
        }
        let cap = caps.iter().min().copied().unwrap_or_default();
        Some(Error::invalid(
            "ttl",
            format!(
                "{} ms is above the lock policy of the masters ({cap} ms); ask for at most that and renew, or raise the policy with `quorumlock admit`",
                millis(ttl)
            ),
        ))
    }

    /// Another holder has the lock (or too few groups answered to know).
    pub(crate) fn denial(&self, resource: &str, votes: Vec<GroupVote>) -> Error {
        self.refusal(resource, votes, |resource, votes| Error::Held {
            resource,
            holder: majority_holder(&votes),
            votes,
        })
    }

    /// The token does not hold the lock (or too few groups answered to know).
    pub(crate) fn not_held(&self, resource: &str, votes: Vec<GroupVote>) -> Error {
        self.refusal(resource, votes, |resource, votes| Error::NotHeld {
            resource,
            votes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validity_is_the_ttl_less_the_drift_allowance() {
        let ttl = Duration::from_millis(10_000);
        // 10 000 − (10 000 × 0.01 + 2) = 9 898 ms.
        assert_eq!(lifetime(ttl, 0.01), Duration::from_millis(9_898));
        assert_eq!(lifetime(ttl, 0.0), Duration::from_millis(9_998));
    }

    #[test]
    fn validity_never_goes_below_zero() {
        assert_eq!(lifetime(Duration::from_millis(1), 0.01), Duration::ZERO);
        assert_eq!(lifetime(Duration::from_millis(100), 1.0), Duration::ZERO);
    }

    #[test]
    fn ttls_outside_the_bounds_are_refused_naming_the_field() {
        let max = Duration::from_secs(60);
        assert!(check_ttl(MIN_TTL, max).is_ok());
        assert!(check_ttl(max, max).is_ok());
        for bad in [
            MIN_TTL - Duration::from_millis(1),
            max + Duration::from_millis(1),
        ] {
            match check_ttl(bad, max) {
                Err(Error::InvalidInput { field, .. }) => assert_eq!(field, "ttl"),
                other => panic!("{bad:?} gave {other:?}"),
            }
        }
    }
}
