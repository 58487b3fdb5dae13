//! Acquire: fencing proposals, the rounds of one attempt, rollback, and waiting.
//!
//! One acquire attempt is one round (two or three only when a group's fence is ahead of our
//! proposal): the acquire script goes to every group at once, the vote is decided as soon as
//! a majority granted or can no longer grant, and a lease is handed out only while
//! `ttl − elapsed − drift` is positive. A failed attempt is rolled back with the release
//! script on every group that may hold our grant, then retried after a jittered delay.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::types::Value;
use rand::Rng;
use tokio::task::JoinHandle;

use crate::engine::clock::millis;
use crate::engine::error::Error;
use crate::engine::fan_out::{count, fan_out};
use crate::engine::locks::{
    AcquireOptions, Acquired, DELETE_RETRIES, Engine, FENCE_ROUNDS, MAX_WAIT, OwnerRecord,
    check_ttl, lifetime,
};
use crate::engine::protocol::code;
use crate::engine::resource::{Claim, LeaseKeys, validate_label};
use crate::engine::vote::{GroupVote, Vote};
use crate::engine::waiters::Watch;
use crate::group::Group;
use crate::group::batch::{Call, LockScript, QUEUE_FULL};
use crate::group::reply::{Reply, integer, text};

/// A group's answer to the acquire script.
enum AcquireAnswer {
    /// Granted; for a permit, on this slot (a set answers slot 0).
    Granted {
        slot: usize,
    },
    /// The lease's `member`-th resource (in canonical order) is held by another token.
    Held {
        remaining_ms: u64,
        record: String,
        member: usize,
    },
    FenceAhead(u64),
    Quarantined(u64),
    NoPolicy,
    Evicts(String),
    AbovePolicy(u64),
    /// The semaphore has this many permits, not the number asked with.
    PermitsDiffer(u64),
    /// Acknowledged mode: so many of the replicas the master needs are attached and in sync.
    ReplicasMissing {
        online: u64,
        needed: u64,
    },
}

impl AcquireAnswer {
    /// A definite refusal: this group holds no grant of ours after answering it.
    fn refused(&self) -> bool {
        !matches!(self, AcquireAnswer::Granted { .. })
    }
}

/// The slot most groups granted so far, and how many granted it (a set has one slot).
fn leading_slot(replies: &[Option<Reply<AcquireAnswer>>]) -> (usize, usize) {
    let mut tally: Vec<(usize, usize)> = Vec::new();
    for reply in replies.iter().flatten() {
        if let Reply::Answer(AcquireAnswer::Granted { slot }) = reply {
            match tally.iter_mut().find(|(s, _)| s == slot) {
                Some((_, votes)) => *votes += 1,
                None => tally.push((*slot, 1)),
            }
        }
    }
    tally
        .into_iter()
        .max_by_key(|(slot, votes)| (*votes, std::cmp::Reverse(*slot)))
        .unwrap_or((0, 0))
}

/// Whether the votes show one holder on a majority of groups (one owner record on all the
/// `held` votes, and enough of them): then freeing our grants lets no waiter in.
fn held_by_one_majority(votes: &[GroupVote], needed: usize) -> bool {
    let mut held = votes.iter().filter_map(|v| match &v.vote {
        Vote::Held { owner, purpose, .. } => Some((owner, purpose)),
        _ => None,
    });
    let Some(first) = held.next() else {
        return false;
    };
    let mut count = 1;
    for other in held {
        if other != first {
            return false;
        }
        count += 1;
    }
    count >= needed
}

fn parse_grant(values: Vec<Value>) -> Result<AcquireAnswer, String> {
    let detail = || integer(values.get(1)).unwrap_or(0);
    match integer(values.first()) {
        Some(code::GRANTED) => Ok(AcquireAnswer::Granted {
            slot: usize::try_from(integer(values.get(1)).unwrap_or(0)).unwrap_or(0),
        }),
        Some(code::HELD) => Ok(AcquireAnswer::Held {
            remaining_ms: detail(),
            record: text(values.get(2)),
            // Counted from 1 by the script; a reply without it is about the first.
            member: usize::try_from(integer(values.get(3)).unwrap_or(1).max(1) - 1).unwrap_or(0),
        }),
        Some(code::FENCE_AHEAD) => Ok(AcquireAnswer::FenceAhead(detail())),
        Some(code::QUARANTINED) => Ok(AcquireAnswer::Quarantined(detail())),
        Some(code::NO_POLICY) => Ok(AcquireAnswer::NoPolicy),
        Some(code::EVICTS) => Ok(AcquireAnswer::Evicts(text(values.get(1)))),
        Some(code::ABOVE_POLICY) => Ok(AcquireAnswer::AbovePolicy(detail())),
        Some(code::PERMITS_DIFFER) => Ok(AcquireAnswer::PermitsDiffer(detail())),
        Some(code::REPLICAS_MISSING) => Ok(AcquireAnswer::ReplicasMissing {
            online: detail(),
            needed: integer(values.get(2)).unwrap_or(0),
        }),
        // The lane sends such a call again with the master's number; a second refusal means
        // the policy changed in between.
        Some(code::ACKS_REQUIRED) => Err(format!(
            "the master's acknowledged mode names {} replicas, and changed while the call was sent",
            detail()
        )),
        _ => Err(format!("unexpected acquire reply {values:?}")),
    }
}

/// The script a claim's grant runs and, for a semaphore, its permit count and the slot to try
/// first. Every group tries a semaphore's slots from the same one on; callers start at random
/// places, so they spread over the free slots instead of racing for the first.
fn script_of(claim: &Claim) -> (LockScript, Option<(u32, u32)>) {
    match claim {
        Claim::Set(_) => (LockScript::Acquire, None),
        Claim::Permit(keys) => (
            LockScript::Permit,
            Some((keys.permits, rand::thread_rng().gen_range(0..keys.permits))),
        ),
    }
}

/// The acquire script's arguments: our token, the TTL, the fence proposal and the owner
/// record, then for a semaphore its permit count and the slot to try first.
fn grant_args(
    token: &str,
    ttl: Duration,
    fence: u64,
    record: &str,
    permits: Option<(u32, u32)>,
) -> Vec<Value> {
    let mut args = vec![
        token.into(),
        Value::from(millis(ttl) as i64),
        Value::from(fence.to_string()),
        record.into(),
    ];
    if let Some((permits, first)) = permits {
        args.push(Value::from(i64::from(permits)));
        args.push(Value::from(i64::from(first)));
    }
    args
}

/// What one round of grant calls came to.
struct RoundOutcome {
    /// The slot most groups granted, and how many did (the only slot of a lock).
    slot: usize,
    granted: usize,
    /// Groups that may hold a grant of ours elsewhere than on the slot won.
    stray: Vec<bool>,
    /// The member of a set that a group found held.
    held_member: Option<usize>,
    /// Fences above our proposal that groups reported.
    ahead: Vec<u64>,
}

impl RoundOutcome {
    fn of(replies: &[Option<Reply<AcquireAnswer>>], may_hold: &[bool]) -> RoundOutcome {
        let (slot, granted) = leading_slot(replies);
        let stray = replies
            .iter()
            .zip(may_hold)
            .map(|(reply, may)| {
                *may && !matches!(reply, Some(Reply::Answer(AcquireAnswer::Granted { slot: s })) if *s == slot)
            })
            .collect();
        let held_member = replies.iter().find_map(|r| match r {
            Some(Reply::Answer(AcquireAnswer::Held { member, .. })) => Some(*member),
            _ => None,
        });
        let ahead = replies
            .iter()
            .filter_map(|r| match r {
                Some(Reply::Answer(AcquireAnswer::FenceAhead(f))) => Some(*f),
                _ => None,
            })
            .collect();
        RoundOutcome {
            slot,
            granted,
            stray,
            held_member,
            ahead,
        }
    }
}

impl Engine {
    fn retry_delay(&self) -> Duration {
        let base = self.topology.retry_delay();
        base.mul_f64(rand::thread_rng().gen_range(0.5..1.5))
    }

    /// Acquires what `claim` asks for on a majority of groups: every resource of a set, all
    /// or nothing, or one permit of a semaphore. Answers the keys the lease holds.
    pub async fn acquire(
        self: &Arc<Self>,
        claim: &Claim,
        options: &AcquireOptions,
    ) -> Result<(LeaseKeys, Acquired), Error> {
        let record = self.owner_record(options)?;
        let deadline = Instant::now() + options.wait;
        let mut attempts = 0;
        // Subscribed to a release channel once a wait finds the lease's first resource held
        // (or, for a set, the one that was held).
        let mut watch = self
            .queue_behind_local_waiters(claim, options, deadline)
            .await;
        loop {
            attempts += 1;
            // A token of its own for every attempt: a delete of an earlier attempt that lands
            // late (a rollback retried on a connection that was replaced) can then never take
            // this attempt's grant.
            let token = uuid::Uuid::new_v4().simple().to_string();
            // Armed before the attempt, so a release announced during it is not missed.
            let notify = watch.as_ref().map(Watch::notify);
            let mut released = notify.as_ref().map(|notify| Box::pin(notify.notified()));
            if let Some(released) = released.as_mut() {
                released.as_mut().enable();
            }
            let (error, may_hold) = match self.attempt(claim, &token, options.ttl, &record).await {
                Ok((acquired, stray)) => {
                    return Ok(self.won(claim, &token, (acquired, stray), attempts));
                }
                Err(failure) => failure,
            };
            // With a majority held by others, freeing our few grants lets no waiter in, and
            // announcing it would only wake the other waiters into a vote they lose again.
            let lock_is_held = held_by_one_majority(error.votes(), self.majority.needed);
            let rolled_back = self.roll_back(&claim.rollback(), &token, may_hold, !lock_is_held);
            let last = Instant::now() >= deadline || matches!(error, Error::InvalidInput { .. });
            if let Some(rolled_back) = rolled_back {
                self.await_rollback(rolled_back, last, deadline).await;
            }
            let now = Instant::now();
            if last || now >= deadline {
                return Err(error);
            }
            let (holder_left, held) = match &error {
                Error::Held {
                    holder, resource, ..
                } => (
                    holder
                        .as_ref()
                        .map(|h| Duration::from_millis(h.remaining_ms)),
                    Some(claim.channel(Some(resource))),
                ),
                _ => (None, None),
            };
            if watch.is_none()
                && let Some(channel) = held
            {
                // Try again at once after subscribing: a release before the subscription
                // shows up as a free lock, one after it as a message.
                watch = Some(self.waiters.watch(&self.groups, &channel, deadline).await);
                continue;
            }
            let delay = self.retry_wait(watch.is_some(), holder_left);
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

    /// The keys a won attempt holds, and its outcome. A permit won on one slot: grants on
    /// other slots are rolled back, and their waiters woken.
    fn won(
        self: &Arc<Self>,
        claim: &Claim,
        token: &str,
        (acquired, stray): (Acquired, Vec<bool>),
        attempts: u32,
    ) -> (LeaseKeys, Acquired) {
        if let Some(strays) = claim.strays(acquired.slot) {
            let _ = self.roll_back(&strays, token, stray, true);
        }
        let held = claim.held(acquired.slot);
        (
            held,
            Acquired {
                attempts,
                ..acquired
            },
        )
    }

    /// How long to wait before the next attempt. Subscribed to the held lock's releases,
    /// announcements wake us, and the timer only covers expiries and lost messages.
    fn retry_wait(&self, watched: bool, holder_left: Option<Duration>) -> Duration {
        match (watched, holder_left) {
            (true, Some(left)) => left.clamp(
                self.topology.retry_delay(),
                self.topology.retry_delay() * 10,
            ),
            _ => self.retry_delay(),
        }
    }

    /// The owner record stored with the lock, once the options are checked.
    fn owner_record(&self, options: &AcquireOptions) -> Result<String, Error> {
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
        Ok(serde_json::to_string(&OwnerRecord {
            owner: options.owner.clone(),
            purpose: options.purpose.clone(),
            acquired_at_ms: self.clock.unix_millis(),
        })
        .unwrap_or_default())
    }

    /// When other waiters of this process queue for the claim's first lock, it is held: this
    /// caller takes a place in the queue (releases wake one waiter at a time, the longest
    /// waiting first) rather than spend a vote on it, and returns its subscription once woken
    /// or once the timer, which covers a release nobody announces, ends.
    async fn queue_behind_local_waiters(
        &self,
        claim: &Claim,
        options: &AcquireOptions,
        deadline: Instant,
    ) -> Option<Watch> {
        let first_channel = claim.channel(None);
        if options.wait.is_zero() || !self.waiters.queued(&first_channel.name) {
            return None;
        }
        let queued = self
            .waiters
            .watch(&self.groups, &first_channel, deadline)
            .await;
        let released = queued.notify();
        let fallback = (self.topology.retry_delay() * 10)
            .min(deadline.saturating_duration_since(Instant::now()));
        tokio::select! {
            _ = released.notified() => {}
            _ = tokio::time::sleep(fallback) => {}
        }
        Some(queued)
    }

    /// Waits for a failed attempt's rollback. The groups that answer delete within one call
    /// timeout; one that does not must hold up neither this answer nor the caller's wait. The
    /// next attempt waits for the rollback within the wait, or it would find our own grant
    /// still standing where the rollback had not landed yet.
    async fn await_rollback(
        &self,
        rolled_back: JoinHandle<Vec<Option<Reply<Value>>>>,
        last: bool,
        deadline: Instant,
    ) {
        let limit = if last {
            Instant::now() + self.topology.call_timeout()
        } else {
            deadline
        };
        let _ = tokio::time::timeout_at(limit.into(), rolled_back).await;
    }

    /// One attempt: up to [`FENCE_ROUNDS`] rounds, all counted in `elapsed`. On failure it
    /// returns the error and, per group, whether that group may hold our grant.
    /// On success it also answers, per group, whether that group may hold a grant of ours
    /// on a slot other than the one won (a permit's grants may differ by group).
    async fn attempt(
        self: &Arc<Self>,
        claim: &Claim,
        token: &str,
        ttl: Duration,
        record: &str,
    ) -> Result<(Acquired, Vec<bool>), (Error, Vec<bool>)> {
        // Validity is measured on the engine's clock, from before the first call went out.
        let started = self.clock.now();
        let (n, quorum) = (self.majority.groups, self.majority.needed);
        let mut may_hold = vec![false; n];
        let script_keys: Arc<[fred::types::Key]> = claim.grant_keys().into();
        let label = claim.label();
        let (script, permits) = script_of(claim);
        for round in 0..FENCE_ROUNDS {
            if let Some(error) = self.refusal_when_overloaded(&label) {
                return Err((error, may_hold));
            }
            let fence = self.fences.propose(self.clock.unix_micros());
            let grant = Call {
                script,
                keys: script_keys.clone(),
                args: grant_args(token, ttl, fence, record, permits).into(),
                hash_slot: claim.hash_slot(),
            };
            let replies = self.ask_all(&grant).await;
            self.take_in(&replies, &mut may_hold);
            let RoundOutcome {
                slot,
                granted,
                stray,
                held_member,
                ahead,
            } = RoundOutcome::of(&replies, &may_hold);
            let votes = self.votes(replies);
            if granted >= quorum {
                let elapsed = self.clock.now().saturating_duration_since(started);
                let lifetime = lifetime(ttl, self.topology.drift_factor);
                if elapsed < lifetime {
                    let acquired = Acquired {
                        token: token.to_string(),
                        fence,
                        slot,
                        attempts: 1,
                        started,
                        valid_until: started + lifetime,
                        votes,
                    };
                    return Ok((acquired, stray));
                }
                let error = Error::Expired {
                    resource: label,
                    elapsed_ms: millis(elapsed),
                    votes,
                };
                return Err((error, may_hold));
            }
            if let Some(error) = self
                .above_policy(ttl, &votes)
                .or_else(|| self.permits_differ(&label, &votes))
            {
                return Err((error, may_hold));
            }
            if let Some(highest) = ahead.iter().max() {
                self.fences.observe(*highest);
                if granted + ahead.len() >= quorum && round + 1 < FENCE_ROUNDS {
                    continue;
                }
            }
            return Err((self.set_denial(claim, held_member, votes), may_hold));
        }
        // The loop always returns in its last round.
        Err((self.denial(&label, Vec::new()), may_hold))
    }

    /// Sends one round's grant call to every group, and returns once a majority decided.
    async fn ask_all(&self, grant: &Call) -> Vec<Option<Reply<AcquireAnswer>>> {
        let majority = self.majority;
        fan_out(
            &self.groups,
            |group| self.ask_grant(group, grant.clone()),
            |replies| {
                let (_, granted) = leading_slot(replies);
                let lost = count(replies, |r| {
                    !matches!(
                        r,
                        Reply::Answer(AcquireAnswer::Granted { .. } | AcquireAnswer::FenceAhead(_))
                    )
                });
                majority.decided(granted, lost)
            },
        )
        .await
    }

    /// The refusal, before anything is sent, when too few groups would take the call: a grant
    /// on a minority only costs a rollback.
    fn refusal_when_overloaded(&self, label: &str) -> Option<Error> {
        let overloaded = self
            .groups
            .iter()
            .filter(|group| group.overloaded())
            .count();
        if overloaded <= self.majority.groups - self.majority.needed {
            return None;
        }
        let votes = self
            .groups
            .iter()
            .map(|group| GroupVote {
                group: group.name.clone(),
                vote: if group.overloaded() {
                    Vote::Error {
                        message: format!("not sent: {}", QUEUE_FULL),
                    }
                } else {
                    Vote::NotAwaited
                },
            })
            .collect();
        Some(self.denial(label, votes))
    }

    /// Notes which groups may hold our grant after a round, and adopts the lock policy on
    /// the groups that answered they have none.
    fn take_in(self: &Arc<Self>, replies: &[Option<Reply<AcquireAnswer>>], may_hold: &mut [bool]) {
        for (index, reply) in replies.iter().enumerate() {
            // A call still in flight, timed out or failed may have been applied.
            may_hold[index] |= match reply {
                Some(Reply::Answer(answer)) => !answer.refused(),
                Some(Reply::NotSent(_)) => false,
                _ => true,
            };
        }
        let unadmitted: Vec<bool> = replies
            .iter()
            .map(|r| matches!(r, Some(Reply::Answer(AcquireAnswer::NoPolicy))))
            .collect();
        if unadmitted.contains(&true) {
            self.adopt_policies(unadmitted);
        }
    }

    /// One group's answer to the acquire script. A master in acknowledged mode counts a
    /// grant only once every one of its replicas acknowledged it (`WAIT`).
    async fn ask_grant(&self, group: &Group, grant: Call) -> Reply<AcquireAnswer> {
        let answer = match group.call(grant).await {
            Reply::Answer(answer) => answer,
            Reply::Timeout => return Reply::Timeout,
            Reply::Failed(message) => return Reply::Failed(message),
            Reply::NotSent(reason) => return Reply::NotSent(reason),
        };
        let acknowledged = answer.acknowledged_vote();
        let values = match answer.value {
            Value::Array(values) => values,
            value => {
                return Reply::Failed(format!("unexpected acquire reply {value:?}"));
            }
        };
        match (parse_grant(values), acknowledged) {
            // A grant its replicas do not all hold could vanish in a failover: it does not
            // count, and the rollback removes it.
            (Ok(AcquireAnswer::Granted { .. }), Err(message)) => Reply::Failed(message),
            (Ok(grant), _) => Reply::Answer(grant),
            (Err(message), _) => Reply::Failed(message),
        }
    }

    /// A denial that names the resource another token holds: for a set, the member a group
    /// found held, so the caller (and the waiter) know which one to wait for.
    fn set_denial(
        &self,
        claim: &Claim,
        held_member: Option<usize>,
        votes: Vec<GroupVote>,
    ) -> Error {
        let Claim::Set(keys) = claim else {
            return self.denial(&claim.label(), votes);
        };
        match self.denial(&keys.label(), votes) {
            Error::Held {
                resource,
                holder,
                votes,
            } => Error::Held {
                resource: held_member
                    .and_then(|member| keys.names.get(member).cloned())
                    .unwrap_or(resource),
                holder,
                votes,
            },
            other => other,
        }
    }

    fn votes(&self, replies: Vec<Option<Reply<AcquireAnswer>>>) -> Vec<GroupVote> {
        self.groups
            .iter()
            .zip(replies)
            .map(|(group, reply)| GroupVote {
                group: group.name.clone(),
                vote: Vote::from_reply(reply, |grant| match grant {
                    AcquireAnswer::Granted { .. } => Vote::Granted,
                    AcquireAnswer::PermitsDiffer(permits) => Vote::PermitsDiffer { permits },
                    AcquireAnswer::ReplicasMissing { online, needed } => {
                        Vote::ReplicasMissing { online, needed }
                    }
                    AcquireAnswer::FenceAhead(fence) => Vote::FenceAhead { fence },
                    AcquireAnswer::Quarantined(remaining_ms) => Vote::Quarantined { remaining_ms },
                    AcquireAnswer::NoPolicy => Vote::NoPolicy,
                    AcquireAnswer::Evicts(maxmemory_policy) => Vote::Evicts { maxmemory_policy },
                    AcquireAnswer::AbovePolicy(max_ttl_ms) => Vote::AbovePolicy { max_ttl_ms },
                    AcquireAnswer::Held {
                        remaining_ms,
                        record,
                        ..
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
    /// `announce` wakes the resource's waiters once the grants are gone.
    fn roll_back(
        self: &Arc<Self>,
        keys: &LeaseKeys,
        token: &str,
        may_hold: Vec<bool>,
        announce: bool,
    ) -> Option<JoinHandle<Vec<Option<Reply<Value>>>>> {
        if !may_hold.contains(&true) {
            return None;
        }
        // Announced apart from the release of the lease this token may still win, and from
        // other rollbacks of it, which the waiters must not take for repeats of this one.
        let announcement = if announce {
            format!("{token}:rolled-back:{:08x}", rand::random::<u32>())
        } else {
            String::new()
        };
        let release = Call {
            script: LockScript::Release,
            keys: keys.release().into(),
            args: keys.release_args(token, &announcement).into(),
            hash_slot: keys.hash_slot(),
        };
        Some(self.delete_apart(release, may_hold, 1 + DELETE_RETRIES))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(values: &[Value]) -> Result<AcquireAnswer, String> {
        parse_grant(values.to_vec())
    }

    #[test]
    fn each_acquire_reply_is_read_as_its_outcome() {
        assert!(matches!(
            reply(&[Value::Integer(1)]),
            Ok(AcquireAnswer::Granted { slot: 0 })
        ));
        assert!(matches!(
            reply(&[Value::Integer(1), Value::Integer(3)]),
            Ok(AcquireAnswer::Granted { slot: 3 })
        ));
        assert!(matches!(
            reply(&[Value::Integer(7), Value::Integer(4)]),
            Ok(AcquireAnswer::PermitsDiffer(4))
        ));
        assert!(matches!(
            reply(&[Value::Integer(0), Value::Integer(900), Value::from("{\"owner\":\"a\"}")]),
            Ok(AcquireAnswer::Held { remaining_ms: 900, record, member: 0 }) if record == "{\"owner\":\"a\"}"
        ));
        assert!(matches!(
            reply(&[
                Value::Integer(0),
                Value::Integer(900),
                Value::from(""),
                Value::Integer(3)
            ]),
            Ok(AcquireAnswer::Held { member: 2, .. })
        ));
        assert!(matches!(
            reply(&[Value::Integer(2), Value::from("1700000000000001")]),
            Ok(AcquireAnswer::FenceAhead(1_700_000_000_000_001))
        ));
        assert!(matches!(
            reply(&[Value::Integer(3), Value::Integer(59_000)]),
            Ok(AcquireAnswer::Quarantined(59_000))
        ));
    }

    #[test]
    fn an_unknown_acquire_reply_is_an_error_not_a_grant() {
        assert!(reply(&[]).is_err());
        assert!(reply(&[Value::Integer(9)]).is_err());
        assert!(reply(&[Value::from("OK")]).is_err());
    }
}
