//! The Redlock engine: acquire, extend and release on a majority of groups, with fencing.
//!
//! One acquire attempt is one round (two or three only when a group's fence is ahead of our
//! proposal): the acquire script goes to every group at once, the vote is decided as soon as
//! a majority granted or can no longer grant, and a lease is handed out only while
//! `ttl − elapsed − drift` is positive. A failed attempt is rolled back with the release
//! script on every group that may hold our grant, then retried after a jittered delay.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fred::types::Value;
use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::batch::{Answer, Call, Script};
use crate::config::Topology;
use crate::error::{Error, majority_holder};
use crate::group::Group;
use crate::lease::Lease;
use crate::quorum::{GroupVote, Reply, Vote, count, fan_out};
use crate::resource::{ResourceKeys, validate_label, validate_resource};
use crate::scripts;
use crate::security::Transport;
use crate::sentinel::{Failover, SentinelWatch};
use crate::waiters::{Waiters, Watch};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;
use tokio_util::task::TaskTracker;

/// Shortest TTL accepted: below this the drift allowance leaves no validity.
pub const MIN_TTL: Duration = Duration::from_millis(10);
/// Longest wait accepted.
pub const MAX_WAIT: Duration = Duration::from_secs(24 * 3600);
/// Default TTL of a lease.
pub const DEFAULT_TTL: Duration = Duration::from_secs(15);
/// Extra tries of a delete on a group that timed out or failed: deletes are idempotent, and
/// without them a lock would stay on that group until its TTL.
const DELETE_RETRIES: usize = 2;
/// Rounds one attempt may spend raising its fencing proposal above a group's fence.
const FENCE_ROUNDS: usize = 3;

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
    waiters: Waiters,
    pub topology: Topology,
    pub quorum: usize,
    /// Highest fence this process has proposed or seen; proposals always go above it.
    highest_fence: AtomicU64,
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

/// A group's answer to the acquire script.
enum Grant {
    Granted,
    Held { remaining_ms: u64, record: String },
    FenceAhead(u64),
    Quarantined(u64),
}

/// The result of one extend.
#[derive(Debug, Clone)]
pub struct Extended {
    /// When the renewed lease stops being valid (monotonic clock).
    pub valid_until: Instant,
    pub votes: Vec<GroupVote>,
}

/// The result of one release.
#[derive(Debug, Clone, Serialize)]
pub struct Released {
    /// True when at least one group still held the lock under this token and deleted it.
    pub released: bool,
    /// How many groups deleted it by the time the release answered (a group whose try
    /// failed, once the lock is gone elsewhere, is tried again in the background).
    pub groups_released: usize,
    pub votes: Vec<GroupVote>,
}

/// A successful acquire round, before it becomes a [`Lease`].
pub(crate) struct Granted {
    pub fence: u64,
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
        topology.validate()?;
        let transport = Transport::from_topology(&topology)?;
        let mut groups = Vec::with_capacity(topology.groups.len());
        for (index, config) in topology.groups.iter().enumerate() {
            groups.push(Group::connect(index, config, &topology, &transport).await?);
        }
        futures::future::join_all(groups.iter().map(Group::start)).await;
        let (failovers, _) = broadcast::channel(64);
        let sentinels = SentinelWatch::start(&groups, failovers.clone()).await;
        Ok(Locks {
            engine: Arc::new(Engine {
                quorum: topology.quorum(),
                failovers,
                sentinels,
                waiters: Waiters::default(),
                groups,
                topology,
                highest_fence: AtomicU64::new(0),
                cleanup: TaskTracker::new(),
            }),
        })
    }

    /// Starts building an acquire of `resource`; `.await` it (see [`crate::Acquire`]).
    pub fn acquire(&self, resource: impl Into<String>) -> crate::lease::Acquire {
        crate::lease::Acquire::new(self.clone(), resource.into())
    }

    /// Acquires with explicit options.
    pub async fn acquire_with(
        &self,
        resource: &str,
        options: &AcquireOptions,
    ) -> Result<Lease, Error> {
        let granted = self.engine.acquire(resource, options).await?;
        Ok(Lease::new(
            self.engine.clone(),
            resource.to_string(),
            granted.0,
            options.ttl,
            granted.1,
        ))
    }

    /// Renews the lock held under `token` for `ttl` on a majority of groups.
    pub async fn extend(
        &self,
        resource: &str,
        token: &str,
        ttl: Duration,
    ) -> Result<Extended, Error> {
        self.engine.extend(resource, token, ttl).await
    }

    /// Deletes the lock on every group where it still carries `token`.
    pub async fn release(&self, resource: &str, token: &str) -> Result<Released, Error> {
        self.engine.release(resource, token).await
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

    /// Votes needed for a majority.
    pub fn quorum(&self) -> usize {
        self.engine.quorum
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

fn unix_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_micros() as u64)
}

pub(crate) fn unix_millis() -> u64 {
    unix_micros() / 1000
}

fn to_millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn integer(value: Option<&Value>) -> Option<u64> {
    match value? {
        Value::Integer(n) => u64::try_from(*n).ok(),
        Value::String(s) => s.parse().ok(),
        Value::Bytes(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}

pub(crate) fn text(value: Option<&Value>) -> String {
    value.and_then(Value::as_string).unwrap_or_default()
}

fn parse_grant(values: Vec<Value>) -> Result<Grant, String> {
    match integer(values.first()) {
        Some(1) => Ok(Grant::Granted),
        Some(0) => Ok(Grant::Held {
            remaining_ms: integer(values.get(1)).unwrap_or(0),
            record: text(values.get(2)),
        }),
        Some(2) => Ok(Grant::FenceAhead(integer(values.get(1)).unwrap_or(0))),
        Some(3) => Ok(Grant::Quarantined(integer(values.get(1)).unwrap_or(0))),
        _ => Err(format!("unexpected acquire reply {values:?}")),
    }
}

/// TTLs must lie within MIN_TTL..=max_ttl: a longer lease could outlive a fresh master's
/// quarantine.
fn check_ttl(ttl: Duration, max_ttl: Duration) -> Result<(), Error> {
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

impl Engine {
    fn size(&self) -> usize {
        self.groups.len()
    }

    /// Clock-drift allowance for a TTL: ttl·drift_factor + 2 ms.
    pub fn drift(&self, ttl: Duration) -> Duration {
        ttl.mul_f64(self.topology.drift_factor) + Duration::from_millis(2)
    }

    pub fn keys(&self, resource: &str) -> ResourceKeys {
        ResourceKeys::new(&self.topology.key_prefix, resource)
    }

    /// A fence above the clock and above everything this process has seen.
    fn propose_fence(&self) -> u64 {
        let now = unix_micros();
        let previous = self
            .highest_fence
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |last| {
                Some(last.max(now - 1) + 1)
            })
            .unwrap_or_else(|last| last);
        previous.max(now - 1) + 1
    }

    fn observe_fence(&self, fence: u64) {
        self.highest_fence.fetch_max(fence, Ordering::AcqRel);
    }

    fn retry_delay(&self) -> Duration {
        let base = self.topology.retry_delay();
        base.mul_f64(rand::thread_rng().gen_range(0.5..1.5))
    }

    pub async fn acquire(
        self: &Arc<Self>,
        resource: &str,
        options: &AcquireOptions,
    ) -> Result<(String, Granted), Error> {
        validate_resource(resource)?;
        check_ttl(options.ttl, self.topology.max_ttl())?;
        if options.wait > MAX_WAIT {
            return Err(Error::invalid(
                "wait",
                format!(
                    "{} ms is above the limit of {} ms",
                    options.wait.as_millis(),
                    MAX_WAIT.as_millis()
                ),
            ));
        }
        validate_label("owner", options.owner.as_deref())?;
        validate_label("purpose", options.purpose.as_deref())?;
        let keys = self.keys(resource);
        let token = uuid::Uuid::new_v4().simple().to_string();
        let record = serde_json::to_string(&OwnerRecord {
            owner: options.owner.clone(),
            purpose: options.purpose.clone(),
            acquired_at_ms: unix_millis(),
        })
        .unwrap_or_default();
        let deadline = Instant::now() + options.wait;
        let mut attempts = 0;
        // Subscribed to the resource's release channel once a wait finds it held.
        let mut watch: Option<Watch> = None;
        if !options.wait.is_zero() && self.waiters.queued(&keys.released) {
            // Other waiters of this process queue for this lock: it is held. Take a place in
            // the queue (releases wake one waiter at a time, the longest waiting first) rather
            // than spend a vote on it; the timer covers a release nobody announces.
            let queued = self
                .waiters
                .watch(&self.groups, &keys.released, deadline)
                .await;
            let released = queued.notify();
            let fallback = (self.topology.retry_delay() * 10)
                .min(deadline.saturating_duration_since(Instant::now()));
            tokio::select! {
                _ = released.notified() => {}
                _ = tokio::time::sleep(fallback) => {}
            }
            watch = Some(queued);
        }
        loop {
            attempts += 1;
            // Armed before the attempt, so a release announced during it is not missed.
            let notify = watch.as_ref().map(Watch::notify);
            let mut released = notify.as_ref().map(|notify| Box::pin(notify.notified()));
            if let Some(released) = released.as_mut() {
                released.as_mut().enable();
            }
            let (error, may_hold) = match self
                .attempt(resource, &keys, &token, options.ttl, &record)
                .await
            {
                Ok(granted) => {
                    return Ok((
                        token,
                        Granted {
                            attempts,
                            ..granted
                        },
                    ));
                }
                Err(failure) => failure,
            };
            let rolled_back = self.roll_back(&keys, &token, may_hold);
            let last = Instant::now() >= deadline || matches!(error, Error::InvalidInput { .. });
            if let Some(rolled_back) = rolled_back {
                // The groups that answer delete within one call timeout; one that does not
                // must hold up neither this answer nor the caller's wait. The next attempt
                // reuses the token, so it only starts once the rollback is done (a delete
                // retried after it would take the new grant): a rollback still running at
                // the deadline ends the wait.
                let limit = if last {
                    Instant::now() + self.topology.call_timeout()
                } else {
                    deadline
                };
                let _ = tokio::time::timeout_at(limit.into(), rolled_back).await;
            }
            let now = Instant::now();
            if last || now >= deadline {
                return Err(error);
            }
            let holder_left = match &error {
                Error::Held { holder, .. } => holder
                    .as_ref()
                    .map(|h| Duration::from_millis(h.remaining_ms)),
                _ => None,
            };
            if watch.is_none() && matches!(error, Error::Held { .. }) {
                // Try again at once after subscribing: a release before the subscription
                // shows up as a free lock, one after it as a message.
                watch = Some(
                    self.waiters
                        .watch(&self.groups, &keys.released, deadline)
                        .await,
                );
                continue;
            }
            let delay = match (&watch, holder_left) {
                // Announcements wake us; the timer only covers expiries and lost messages.
                (Some(_), Some(left)) => left.clamp(
                    self.topology.retry_delay(),
                    self.topology.retry_delay() * 10,
                ),
                _ => self.retry_delay(),
            };
            let announced = async {
                match released.as_mut() {
                    Some(released) => released.as_mut().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = announced => {}
                _ = tokio::time::sleep(delay.min(deadline - now)) => {}
            }
        }
    }

    /// One attempt: up to [`FENCE_ROUNDS`] rounds, all counted in `elapsed`. On failure it
    /// returns the error and, per group, whether that group may hold our grant.
    async fn attempt(
        &self,
        resource: &str,
        keys: &ResourceKeys,
        token: &str,
        ttl: Duration,
        record: &str,
    ) -> Result<Granted, (Error, Vec<bool>)> {
        let started = Instant::now();
        let n = self.size();
        let quorum = self.quorum;
        let mut may_hold = vec![false; n];
        let script_keys: Arc<[fred::types::Key]> = keys.acquire().into();
        let quarantine = Value::from(to_millis(self.topology.max_ttl()) as i64);
        for round in 0..FENCE_ROUNDS {
            // Refused before anything is sent when too few groups would take the call: a
            // grant on a minority only costs a rollback.
            if self
                .groups
                .iter()
                .filter(|group| group.overloaded())
                .count()
                > n - quorum
            {
                let votes = self
                    .groups
                    .iter()
                    .map(|group| GroupVote {
                        group: group.name.clone(),
                        vote: if group.overloaded() {
                            Vote::Error {
                                message: format!("not sent: {}", crate::batch::QUEUE_FULL),
                            }
                        } else {
                            Vote::NotAwaited
                        },
                    })
                    .collect();
                return Err((self.denial(resource, votes), may_hold));
            }
            let fence = self.propose_fence();
            let grant = Call {
                script: Script::Acquire,
                keys: script_keys.clone(),
                args: vec![
                    token.into(),
                    Value::from(to_millis(ttl) as i64),
                    Value::from(fence.to_string()),
                    record.into(),
                    quarantine.clone(),
                ]
                .into(),
            };
            let replies = fan_out(
                &self.groups,
                |group| self.ask_grant(group, grant.clone()),
                |replies| {
                    let granted = count(replies, |r| matches!(r, Reply::Answer(Grant::Granted)));
                    let lost = count(replies, |r| {
                        !matches!(r, Reply::Answer(Grant::Granted | Grant::FenceAhead(_)))
                    });
                    granted >= quorum || lost > n - quorum
                },
            )
            .await;
            for (index, reply) in replies.iter().enumerate() {
                may_hold[index] |= !matches!(
                    reply,
                    Some(
                        Reply::Answer(
                            Grant::Held { .. } | Grant::FenceAhead(_) | Grant::Quarantined(_)
                        ) | Reply::NotSent(_)
                    )
                );
            }
            let granted = count(&replies, |r| matches!(r, Reply::Answer(Grant::Granted)));
            let ahead: Vec<u64> = replies
                .iter()
                .filter_map(|r| match r {
                    Some(Reply::Answer(Grant::FenceAhead(f))) => Some(*f),
                    _ => None,
                })
                .collect();
            let votes = self.votes(replies);
            if granted >= quorum {
                let elapsed = started.elapsed();
                let lifetime = ttl.saturating_sub(self.drift(ttl));
                if elapsed < lifetime {
                    return Ok(Granted {
                        fence,
                        attempts: 1,
                        started,
                        valid_until: started + lifetime,
                        votes,
                    });
                }
                let error = Error::Expired {
                    resource: resource.to_string(),
                    elapsed_ms: to_millis(elapsed),
                    votes,
                };
                return Err((error, may_hold));
            }
            if let Some(highest) = ahead.iter().max() {
                self.observe_fence(*highest);
                if granted + ahead.len() >= quorum && round + 1 < FENCE_ROUNDS {
                    continue;
                }
            }
            return Err((self.denial(resource, votes), may_hold));
        }
        // The loop always returns in its last round.
        Err((self.denial(resource, Vec::new()), may_hold))
    }

    /// One group's answer to the acquire script; with `replica_acks`, a grant counts only
    /// once that many replicas acknowledged it (`WAIT`, pipelined behind the script).
    async fn ask_grant(&self, group: &Group, grant: Call) -> Reply<Grant> {
        let (values, acknowledged) = match group.call(grant).await {
            Reply::Answer(Answer {
                value: Value::Array(values),
                acknowledged,
            }) => (values, acknowledged),
            Reply::Answer(Answer { value, .. }) => {
                return Reply::Failed(format!("unexpected acquire reply {value:?}"));
            }
            Reply::Timeout => return Reply::Timeout,
            Reply::Failed(message) => return Reply::Failed(message),
            Reply::NotSent(reason) => return Reply::NotSent(reason),
        };
        let wanted = self.topology.replica_acks;
        match (parse_grant(values), acknowledged) {
            // A grant its replicas have not seen could vanish in a failover: it does not count,
            // and the rollback removes it.
            (Ok(Grant::Granted), Some(Ok(count))) if count < i64::from(wanted) => {
                Reply::Failed(format!(
                    "grant acknowledged by {count} of {wanted} replicas within {} ms",
                    self.topology.replica_ack_timeout_ms
                ))
            }
            (Ok(Grant::Granted), Some(Err(message))) => {
                Reply::Failed(format!("WAIT for the grant's replicas failed: {message}"))
            }
            (Ok(grant), _) => Reply::Answer(grant),
            (Err(message), _) => Reply::Failed(message),
        }
    }

    /// Why a vote without a majority failed: the infrastructure, or another holder.
    fn denial(&self, resource: &str, votes: Vec<GroupVote>) -> Error {
        let failed = votes.iter().filter(|v| v.vote.is_failure()).count();
        if self.size() - failed < self.quorum {
            return Error::Unavailable {
                resource: resource.to_string(),
                needed: self.quorum,
                total: self.size(),
                votes,
            };
        }
        Error::Held {
            resource: resource.to_string(),
            holder: majority_holder(&votes),
            votes,
        }
    }

    fn votes(&self, replies: Vec<Option<Reply<Grant>>>) -> Vec<GroupVote> {
        self.groups
            .iter()
            .zip(replies)
            .map(|(group, reply)| GroupVote {
                group: group.name.clone(),
                vote: Vote::from_reply(reply, |grant| match grant {
                    Grant::Granted => Vote::Granted,
                    Grant::FenceAhead(fence) => Vote::FenceAhead { fence },
                    Grant::Quarantined(remaining_ms) => Vote::Quarantined { remaining_ms },
                    Grant::Held {
                        remaining_ms,
                        record,
                    } => {
                        let record = OwnerRecord::parse(&record);
                        Vote::Held {
                            owner: record.owner,
                            purpose: record.purpose,
                            remaining_ms,
                        }
                    }
                }),
            })
            .collect()
    }

    /// Runs the release script on every group that may hold our grant, including those that
    /// timed out: their grant may have landed after we stopped waiting. In a task of its own,
    /// which carries on if its caller stops waiting; `None` when no group may hold a grant.
    fn roll_back(
        self: &Arc<Self>,
        keys: &ResourceKeys,
        token: &str,
        may_hold: Vec<bool>,
    ) -> Option<JoinHandle<Vec<Option<Reply<Value>>>>> {
        if !may_hold.contains(&true) {
            return None;
        }
        // Announced apart from the release of the lease this token may still win, and from
        // other rollbacks of it, which the waiters must not take for repeats of this one.
        let release = Call {
            script: Script::Release,
            keys: keys.release().into(),
            args: vec![
                token.into(),
                keys.released.as_str().into(),
                format!("{token}:rolled-back:{:08x}", rand::random::<u32>()).into(),
            ]
            .into(),
        };
        Some(self.delete_apart(release, may_hold, 1 + DELETE_RETRIES))
    }

    /// Runs a delete by token (`call`) on the groups marked in `on`, each tried up to `tries`
    /// times while it times out or fails, in a task of its own that carries on if its caller
    /// stops waiting. Deletes by token are idempotent, and one given up on leaves the lock on
    /// that group until its TTL. Answers each marked group's last reply.
    fn delete_apart(
        self: &Arc<Self>,
        call: Call,
        on: Vec<bool>,
        tries: usize,
    ) -> JoinHandle<Vec<Option<Reply<Value>>>> {
        let engine = self.clone();
        self.cleanup.spawn(async move {
            let deletes = engine.groups.iter().zip(on).map(|(group, marked)| {
                let call = &call;
                async move {
                    if !marked {
                        return None;
                    }
                    let retries = tries.saturating_sub(1);
                    Some(answered(retries, || lock_call(group, call.clone())).await)
                }
            });
            futures::future::join_all(deletes).await
        })
    }

    /// Fans a compare-by-token call out (release, extend, force release) and turns its
    /// answers (`1`, `0`, or `{status, quarantine_left}`) into votes.
    async fn by_token<'g, Fut>(
        &'g self,
        ask: impl Fn(&'g Group) -> Fut,
        call: TokenCall,
        mut on_majority: impl FnMut(),
    ) -> Vec<GroupVote>
    where
        Fut: Future<Output = Reply<Value>>,
    {
        let (n, quorum) = (self.size(), self.quorum);
        let wait_for_all = matches!(call, TokenCall::Delete);
        let mut majority_seen = false;
        let replies = fan_out(&self.groups, ask, |replies| {
            let yes = count(
                replies,
                |r| matches!(r, Reply::Answer(v) if token_vote(v) == Vote::Granted),
            );
            let no = count(
                replies,
                |r| !matches!(r, Reply::Answer(v) if token_vote(v) == Vote::Granted),
            );
            if yes >= quorum && !majority_seen {
                majority_seen = true;
                on_majority();
            }
            !wait_for_all && (yes >= quorum || no > n - quorum)
        })
        .await;
        self.groups
            .iter()
            .zip(replies)
            .map(|(group, reply)| GroupVote {
                group: group.name.clone(),
                vote: Vote::from_reply(reply, |answer| token_vote(&answer)),
            })
            .collect()
    }

    fn not_held_or_unavailable(&self, resource: &str, votes: Vec<GroupVote>) -> Error {
        let failed = votes.iter().filter(|v| v.vote.is_failure()).count();
        if self.size() - failed < self.quorum {
            Error::Unavailable {
                resource: resource.to_string(),
                needed: self.quorum,
                total: self.size(),
                votes,
            }
        } else {
            Error::NotHeld {
                resource: resource.to_string(),
                votes,
            }
        }
    }

    pub async fn extend(
        &self,
        resource: &str,
        token: &str,
        ttl: Duration,
    ) -> Result<Extended, Error> {
        check_ttl(ttl, self.topology.max_ttl())?;
        check_token(token)?;
        validate_resource(resource)?;
        let started = Instant::now();
        let args: Vec<Value> = vec![
            token.into(),
            Value::from(to_millis(ttl) as i64),
            Value::from(to_millis(self.topology.max_ttl()) as i64),
        ];
        let renew = Call {
            script: Script::Extend,
            keys: self.keys(resource).extend().into(),
            args: args.into(),
        };
        let votes = self
            .by_token(
                |group| lock_call(group, renew.clone()),
                TokenCall::Renew,
                || {},
            )
            .await;
        let renewed = votes.iter().filter(|v| v.vote == Vote::Granted).count();
        let lifetime = ttl.saturating_sub(self.drift(ttl));
        if renewed >= self.quorum && started.elapsed() < lifetime {
            return Ok(Extended {
                valid_until: started + lifetime,
                votes,
            });
        }
        Err(self.not_held_or_unavailable(resource, votes))
    }

    pub async fn release(self: &Arc<Self>, resource: &str, token: &str) -> Result<Released, Error> {
        check_token(token)?;
        validate_resource(resource)?;
        let keys = self.keys(resource);
        let release = Call {
            script: Script::Release,
            keys: keys.release().into(),
            args: vec![token.into(), keys.released.as_str().into(), token.into()].into(),
        };
        // Deleted on a majority: this process's next waiter may go. Its acquire queues behind
        // the deletes on every group (calls keep their order per group), so it does not wait
        // for the slowest groups nor for their announcements.
        let mut votes = self
            .by_token(
                |group| lock_call(group, release.clone()),
                TokenCall::Delete,
                || self.waiters.released(&keys.released, token),
            )
            .await;
        // The groups that failed are tried again. Once the lock is gone somewhere, the
        // answer stands and the retries only clean up, so a frozen group costs the caller one
        // call timeout, not three; no later grant carries this token, so a late delete can
        // only take what this lease left.
        let failed: Vec<bool> = votes
            .iter()
            .map(|v| matches!(v.vote, Vote::Timeout | Vote::Error { .. }))
            .collect();
        if failed.contains(&true) {
            let retried = self.delete_apart(release, failed, DELETE_RETRIES);
            let deleted =
                |votes: &[GroupVote]| votes.iter().filter(|v| v.vote == Vote::Granted).count();
            if deleted(&votes) == 0
                && let Ok(replies) = retried.await
            {
                for (vote, reply) in votes.iter_mut().zip(replies) {
                    if reply.is_some() {
                        vote.vote = Vote::from_reply(reply, |answer| token_vote(&answer));
                    }
                }
                if deleted(&votes) >= self.quorum {
                    self.waiters.released(&keys.released, token);
                }
            }
        }
        self.released(resource, votes)
    }

    pub async fn force_release(&self, resource: &str) -> Result<Released, Error> {
        validate_resource(resource)?;
        let keys = self.keys(resource);
        // Each force release is announced under a name of its own (there is no token).
        let announcement = format!("forced:{}", uuid::Uuid::new_v4().simple());
        let (lock_keys, args) = (
            keys.release(),
            vec![keys.released.as_str().into(), announcement.into()],
        );
        let votes = self
            .by_token(
                |group| group.eval(&scripts::FORCE_RELEASE, lock_keys.clone(), args.clone()),
                // A force release deletes whatever holds the lock: never tried twice, since
                // a try that timed out may have run, and a new holder may have taken the
                // lock before the second one lands.
                TokenCall::Delete,
                || {},
            )
            .await;
        self.released(resource, votes)
    }

    /// A release's outcome: what was deleted, or an error when too few groups answered to
    /// know.
    fn released(&self, resource: &str, votes: Vec<GroupVote>) -> Result<Released, Error> {
        let groups_released = votes.iter().filter(|v| v.vote == Vote::Granted).count();
        let answered = votes.iter().filter(|v| !v.vote.is_failure()).count();
        if groups_released == 0 && answered < self.quorum {
            return Err(self.not_held_or_unavailable(resource, votes));
        }
        Ok(Released {
            released: groups_released > 0,
            groups_released,
            votes,
        })
    }
}

/// `ask`'s first answer, tried up to `retries` more times while it times out or fails.
async fn answered<T, Fut>(retries: usize, ask: impl Fn() -> Fut) -> Reply<T>
where
    Fut: Future<Output = Reply<T>>,
{
    let mut reply = ask().await;
    for _ in 0..retries {
        if matches!(reply, Reply::Answer(_)) {
            break;
        }
        reply = ask().await;
    }
    reply
}

/// A lock call's answer without the replica count (release and extend never wait for it).
async fn lock_call(group: &Group, call: Call) -> Reply<Value> {
    group.call(call).await.map(|answer| answer.value)
}

/// How a compare-by-token call is fanned out.
#[derive(Clone, Copy)]
enum TokenCall {
    /// Extend: decided as soon as a majority answered one way.
    Renew,
    /// Release: every group answers once (the callers decide what is tried again).
    Delete,
}

/// The vote behind a release or extend answer.
fn token_vote(answer: &Value) -> Vote {
    let (status, detail) = match answer {
        Value::Array(values) => (integer(values.first()), integer(values.get(1))),
        other => (integer(Some(other)), None),
    };
    match status {
        Some(1) => Vote::Granted,
        Some(3) => Vote::Quarantined {
            remaining_ms: detail.unwrap_or(0),
        },
        _ => Vote::NotHeld,
    }
}

/// Tokens are what acquire hands out: 32 lowercase hex digits. Anything else cannot match.
fn check_token(token: &str) -> Result<(), Error> {
    if token.is_empty()
        || token.len() > 64
        || !token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
    {
        return Err(Error::invalid(
            "token",
            "must be the token returned by acquire (32 hex digits)",
        ));
    }
    Ok(())
}
