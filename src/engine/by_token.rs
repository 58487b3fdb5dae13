//! The operations on a lease that exists: extend, release and force release, each a
//! compare-by-token script fanned out to every group.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::types::Value;
use tokio::task::JoinHandle;

use crate::engine::clock::millis;
use crate::engine::error::Error;
use crate::engine::fan_out::{count, fan_out};
use crate::engine::locks::{DELETE_RETRIES, Engine, Extended, Released, check_ttl, lifetime};
use crate::engine::protocol::code;
use crate::engine::resource::{LeaseKeys, validate_resource};
use crate::engine::vote::{GroupVote, Vote};
use crate::group::Group;
use crate::group::batch::{Call, LockScript};
use crate::group::reply::{Reply, integer, text};
use crate::group::slots::HashSlot;

/// What a release's retries of failed deletes need to read their answers.
struct DeleteRetry {
    /// The groups whose delete failed, to try again.
    failed: Vec<bool>,
    /// Per group, whether the first delete may have run.
    may_have_run: Vec<bool>,
    /// The lease's validity on the engine's clock, when this process holds it.
    valid_until: Option<Instant>,
    /// Whether a majority answered at the first try that the lock was not ours.
    ended_before: bool,
}

impl Engine {
    /// Runs a delete by token (`call`) on the groups marked in `on`, each tried up to `tries`
    /// times while it times out or fails, in a task of its own that carries on if its caller
    /// stops waiting. Deletes by token are idempotent, and one given up on leaves the lock on
    /// that group until its TTL. Answers each marked group's last reply.
    pub(crate) fn delete_apart(
        self: &Arc<Self>,
        call: Call,
        on: Vec<bool>,
        tries: usize,
    ) -> JoinHandle<Vec<Option<Reply<Value>>>> {
        let engine = self.clone();
        self.cleanup.spawn(async move {
            let tried = engine.delete_tries(&call, on, tries).await;
            tried
                .into_iter()
                .map(|tried| tried.map(|tried| tried.last))
                .collect()
        })
    }

    /// [`Engine::delete_apart`]'s tries on each marked group, with whether a try before the
    /// last may have run.
    async fn delete_tries(&self, call: &Call, on: Vec<bool>, tries: usize) -> Vec<Option<Tried>> {
        let deletes = self
            .groups
            .iter()
            .zip(on)
            .map(|(group, marked)| async move {
                if !marked {
                    return None;
                }
                let retries = tries.saturating_sub(1);
                Some(answered(retries, || lock_call(group, call.clone())).await)
            });
        futures::future::join_all(deletes).await
    }

    /// Fans a compare-by-token call out (release, extend, force release) and turns its
    /// answers (`1`, `0`, or `{status, quarantine_left}`) into votes.
    async fn by_token<'g, Fut>(
        &'g self,
        ask: impl Fn(&'g Group) -> Fut,
        call: TokenCall,
        on_majority: impl FnMut(),
    ) -> Vec<GroupVote>
    where
        Fut: Future<Output = Reply<Value>>,
    {
        let replies = self.token_replies(ask, call, on_majority).await;
        self.token_votes(replies)
    }

    /// [`Engine::by_token`]'s replies, before they are read as votes.
    async fn token_replies<'g, Fut>(
        &'g self,
        ask: impl Fn(&'g Group) -> Fut,
        call: TokenCall,
        mut on_majority: impl FnMut(),
    ) -> Vec<Option<Reply<Value>>>
    where
        Fut: Future<Output = Reply<Value>>,
    {
        let majority = self.majority;
        let wait_for_all = matches!(call, TokenCall::Delete);
        let mut majority_seen = false;
        fan_out(&self.groups, ask, |replies| {
            let yes = count(
                replies,
                |r| matches!(r, Reply::Answer(v) if token_vote(v) == Vote::Granted),
            );
            let no = count(
                replies,
                |r| !matches!(r, Reply::Answer(v) if token_vote(v) == Vote::Granted),
            );
            if yes >= majority.needed && !majority_seen {
                majority_seen = true;
                on_majority();
            }
            !wait_for_all && majority.decided(yes, no)
        })
        .await
    }

    /// Each group's reply to a compare-by-token call as its vote.
    fn token_votes(&self, replies: Vec<Option<Reply<Value>>>) -> Vec<GroupVote> {
        self.groups
            .iter()
            .zip(replies)
            .map(|(group, reply)| GroupVote {
                group: group.name.clone(),
                vote: Vote::from_reply(reply, |answer| token_vote(&answer)),
            })
            .collect()
    }

    /// Renews every lock of `keys` held under `token`, on a majority of groups.
    pub async fn extend(
        &self,
        keys: &LeaseKeys,
        token: &str,
        ttl: Duration,
    ) -> Result<Extended, Error> {
        check_ttl(ttl, self.topology.max_ttl())?;
        check_token(token)?;
        let started = self.clock.now();
        let renew = Call {
            script: LockScript::Extend,
            keys: keys.extend().into(),
            args: keys.extend_args(token, millis(ttl)).into(),
            hash_slot: keys.hash_slot(),
        };
        let votes = self
            .by_token(
                |group| lock_call(group, renew.clone()),
                TokenCall::Renew,
                || {},
            )
            .await;
        let renewed = votes.iter().filter(|v| v.vote == Vote::Granted).count();
        let lifetime = lifetime(ttl, self.topology.drift_factor);
        if renewed >= self.majority.needed
            && self.clock.now().saturating_duration_since(started) < lifetime
        {
            return Ok(Extended {
                valid_until: started + lifetime,
                votes,
            });
        }
        if let Some(error) = self.above_policy(ttl, &votes) {
            return Err(error);
        }
        Err(self.not_held(&keys.label(), votes))
    }

    /// Deletes every lock of `keys` still held under `token`, on every group. `valid_until`
    /// is the lease's validity on the engine's clock, known to the process that holds the
    /// lease and to no other: without it, a group whose lock is gone after a try that may
    /// have run is never counted as released by this call.
    pub async fn release(
        self: &Arc<Self>,
        keys: &LeaseKeys,
        token: &str,
        valid_until: Option<Instant>,
    ) -> Result<Released, Error> {
        check_token(token)?;
        let release = Call {
            script: LockScript::Release,
            keys: keys.release().into(),
            args: keys.release_args(token, token).into(),
            hash_slot: keys.hash_slot(),
        };
        let wake = || {
            for member in &keys.members {
                self.waiters.released(&member.released, token);
            }
        };
        // Deleted on a majority: this process's next waiter may go. Its acquire queues behind
        // the deletes on every group (calls keep their order per group), so it does not wait
        // for the slowest groups nor for their announcements.
        let replies = self
            .token_replies(
                |group| lock_call(group, release.clone()),
                TokenCall::Delete,
                &wake,
            )
            .await;
        let may_have_run: Vec<bool> = replies
            .iter()
            .map(|reply| reply.as_ref().is_some_and(may_have_run))
            .collect();
        // A live lease holds its lock on a majority, where only this release deletes it: "not
        // ours" at the first try from so many groups that no majority is left means the lease
        // had already ended (expired, or force-released).
        let ended_before = count(
            &replies,
            |r| matches!(r, Reply::Answer(v) if token_vote(v) == Vote::NotHeld),
        );
        let ended_before = self.majority.decided(0, ended_before);
        let mut votes = self.token_votes(replies);
        // The groups that failed are tried again. Once the lock is gone somewhere, the
        // answer stands and the retries only clean up, so a frozen group costs the caller one
        // call timeout, not three; no later grant carries this token, so a late delete can
        // only take what this lease left.
        let failed: Vec<bool> = votes
            .iter()
            .map(|v| matches!(v.vote, Vote::Timeout | Vote::Error { .. }))
            .collect();
        if failed.contains(&true) {
            let retry = DeleteRetry {
                failed,
                may_have_run,
                valid_until,
                ended_before,
            };
            self.retry_release(release, retry, &mut votes, &wake).await;
        }
        self.released(&keys.label(), votes)
    }

    /// Tries the deletes that failed again. Once the lock is gone somewhere, the answer
    /// stands and the retries only clean up; with no group deleted yet, the votes wait for
    /// the retries and are read again.
    async fn retry_release(
        self: &Arc<Self>,
        release: Call,
        retry: DeleteRetry,
        votes: &mut [GroupVote],
        wake: &impl Fn(),
    ) {
        let engine = self.clone();
        let retried = self.cleanup.spawn(async move {
            engine
                .delete_tries(&release, retry.failed, DELETE_RETRIES)
                .await
        });
        let deleted =
            |votes: &[GroupVote]| votes.iter().filter(|v| v.vote == Vote::Granted).count();
        if deleted(votes) == 0
            && let Ok(tries) = retried.await
        {
            // Read once every retry has answered, not when the release started: the lease
            // may lapse while a try waits on a slow master, and a lock that expired there
            // before our delete landed must not count as ours. A group's lock outlives the
            // lease's validity (the drift allowance), so a lock found gone by an answer
            // that came back before the validity ended was removed before it ended, when
            // nothing but a delete removes it: this release's, or a force release's (the
            // operator's override, which no answer tells apart from ours).
            let live = retry
                .valid_until
                .is_some_and(|until| self.clock.now() < until);
            for ((vote, tried), ran) in votes.iter_mut().zip(tries).zip(retry.may_have_run) {
                let Some(tried) = tried else { continue };
                vote.vote = retried_vote(tried, ran, live && !retry.ended_before);
            }
            // Gone from a majority, by our delete or not: the lock is free either way.
            let gone = votes
                .iter()
                .filter(|v| matches!(v.vote, Vote::Granted | Vote::MaybeReleased))
                .count();
            if gone >= self.majority.needed {
                wake();
            }
        }
    }

    /// Deletes the lock whoever holds it, one try per group. Only a group that answered that
    /// it deleted a lock counts as released; one whose try went unanswered may have deleted
    /// it too, and keeps its timeout or error vote.
    pub async fn force_release(&self, resource: &str) -> Result<Released, Error> {
        validate_resource(resource)?;
        let keys = self.resource_keys(resource);
        // Each force release is announced under a name of its own (there is no token).
        let announcement = format!("forced:{}", uuid::Uuid::new_v4().simple());
        let (lock_keys, args) = (
            keys.release(),
            vec![keys.released.as_str().into(), announcement.into()],
        );
        let votes = self
            .by_token(
                |group| {
                    group.force_release(
                        HashSlot::of_resource(resource),
                        lock_keys.clone(),
                        args.clone(),
                    )
                },
                // A force release deletes whatever holds the lock: never tried twice, since
                // a try that timed out may have run, and a new holder may have taken the
                // lock before the second one lands.
                TokenCall::Delete,
                || {},
            )
            .await;
        self.released(resource, votes)
    }

    /// A release's outcome: what this call deleted (only the groups whose vote is
    /// [`Vote::Granted`]), or an error when too few groups answered to know.
    fn released(&self, resource: &str, votes: Vec<GroupVote>) -> Result<Released, Error> {
        let groups_released = votes.iter().filter(|v| v.vote == Vote::Granted).count();
        let answered = votes.iter().filter(|v| !v.vote.is_failure()).count();
        if groups_released == 0 && answered < self.majority.needed {
            return Err(self.not_held(resource, votes));
        }
        Ok(Released {
            released: groups_released > 0,
            groups_released,
            votes,
        })
    }
}

/// A call tried until it answered: its last reply, and whether a try before it may have run.
struct Tried {
    last: Reply<Value>,
    earlier_may_have_run: bool,
}

/// A retried group's vote (`ran`: the first try may have run). A try that may have run, then
/// no lock at all: our try or the lease's end removed it. Counted as deleted only when the
/// lease was ours throughout (`live`), or a release whose replies came back after the call
/// timeout would say that the lock it deleted was not held; otherwise which of the two
/// removed it cannot be told, and the vote says so. Another holder's lock there says our
/// token did not hold it.
fn retried_vote(tried: Tried, ran: bool, live: bool) -> Vote {
    let ran = ran || tried.earlier_may_have_run;
    let absent = matches!(&tried.last, Reply::Answer(value) if status(value) == Some(code::ABSENT));
    if ran && absent {
        return if live {
            Vote::Granted
        } else {
            Vote::MaybeReleased
        };
    }
    Vote::from_reply(Some(tried.last), |answer| token_vote(&answer))
}

/// `ask`'s first answer, tried up to `retries` more times while it times out or fails.
async fn answered<Fut>(retries: usize, ask: impl Fn() -> Fut) -> Tried
where
    Fut: Future<Output = Reply<Value>>,
{
    let mut tried = Tried {
        last: ask().await,
        earlier_may_have_run: false,
    };
    for _ in 0..retries {
        if matches!(tried.last, Reply::Answer(_)) {
            break;
        }
        tried.earlier_may_have_run |= may_have_run(&tried.last);
        tried.last = ask().await;
    }
    tried
}

/// A call that timed out or failed may have run on the master; one not sent did not.
fn may_have_run<T>(reply: &Reply<T>) -> bool {
    matches!(reply, Reply::Timeout | Reply::Failed(_))
}

/// A lock call's answer. A renewal that a master in acknowledged mode made but its replicas
/// do not all hold does not count: a replica promoted without it would let the lock expire
/// at the old time.
async fn lock_call(group: &Group, call: Call) -> Reply<Value> {
    match group.call(call).await {
        Reply::Answer(answer) if status(&answer.value) == Some(code::GRANTED) => {
            match answer.acknowledged_vote() {
                Ok(()) => Reply::Answer(answer.value),
                Err(message) => Reply::Failed(message),
            }
        }
        reply => reply.map(|answer| answer.value),
    }
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
/// The status code of a compare-by-token answer: the answer, or the first of its values.
fn status(answer: &Value) -> Option<u64> {
    match answer {
        Value::Array(values) => integer(values.first()),
        other => integer(Some(other)),
    }
}

fn token_vote(answer: &Value) -> Vote {
    let detail = match answer {
        Value::Array(values) => integer(values.get(1)),
        _ => None,
    };
    match status(answer) {
        Some(code::GRANTED) => Vote::Granted,
        Some(code::QUARANTINED) => Vote::Quarantined {
            remaining_ms: detail.unwrap_or(0),
        },
        Some(code::NO_POLICY) => Vote::NoPolicy,
        Some(code::EVICTS) => Vote::Evicts {
            maxmemory_policy: match answer {
                Value::Array(values) => text(values.get(1)),
                _ => String::new(),
            },
        },
        Some(code::ABOVE_POLICY) => Vote::AbovePolicy {
            max_ttl_ms: detail.unwrap_or(0),
        },
        Some(code::REPLICAS_MISSING) => Vote::ReplicasMissing {
            online: detail.unwrap_or(0),
            needed: match answer {
                Value::Array(values) => integer(values.get(2)).unwrap_or(0),
                _ => 0,
            },
        },
        Some(code::ACKS_REQUIRED) => Vote::Error {
            message: "the master's acknowledged mode changed while the call was sent".into(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_one_is_a_yes_and_anything_else_is_not_ours() {
        assert_eq!(token_vote(&Value::Integer(1)), Vote::Granted);
        assert_eq!(
            token_vote(&Value::Array(vec![Value::Integer(1)])),
            Vote::Granted
        );
        assert_eq!(token_vote(&Value::Integer(0)), Vote::NotHeld);
        assert_eq!(token_vote(&Value::Null), Vote::NotHeld);
    }

    #[test]
    fn a_quarantined_master_says_how_long_it_sits_out() {
        let answer = Value::Array(vec![Value::Integer(3), Value::Integer(1500)]);
        assert_eq!(
            token_vote(&answer),
            Vote::Quarantined { remaining_ms: 1500 }
        );
    }

    /// Runs [`answered`] over `replies`, one per try, with `retries` retries.
    fn tries(retries: usize, replies: Vec<Reply<Value>>) -> Tried {
        let replies = std::sync::Mutex::new(std::collections::VecDeque::from(replies));
        futures::executor::block_on(answered(retries, || {
            let next = replies.lock().ok().and_then(|mut left| left.pop_front());
            async move { next.unwrap_or(Reply::NotSent("no reply left")) }
        }))
    }

    #[test]
    fn a_try_that_may_have_run_is_remembered_behind_the_answer_of_a_later_one() {
        let not_ours = || Reply::Answer(Value::Integer(0));
        let tried = tries(
            2,
            vec![Reply::NotSent("queued"), Reply::Timeout, not_ours()],
        );
        assert!(tried.earlier_may_have_run);
        assert!(matches!(tried.last, Reply::Answer(Value::Integer(0))));
        let tried = tries(2, vec![Reply::Failed("reset".into()), not_ours()]);
        assert!(tried.earlier_may_have_run);
        // Never sent, then answered: nothing of ours ran before the answer.
        let tried = tries(2, vec![Reply::NotSent("queued"), not_ours()]);
        assert!(!tried.earlier_may_have_run);
        let tried = tries(2, vec![not_ours()]);
        assert!(!tried.earlier_may_have_run);
    }

    #[test]
    fn a_lock_gone_after_a_try_that_may_have_run_is_released_only_while_the_lease_lived() {
        let absent = || Reply::Answer(Value::Array(vec![Value::Integer(8)]));
        let tried = |last, earlier_may_have_run| Tried {
            last,
            earlier_may_have_run,
        };
        // The first try timed out, the retry found no lock: ours only within the validity.
        assert_eq!(
            retried_vote(tried(absent(), false), true, true),
            Vote::Granted
        );
        assert_eq!(
            retried_vote(tried(absent(), false), true, false),
            Vote::MaybeReleased
        );
        // A retry before the last timed out: the same.
        assert_eq!(
            retried_vote(tried(absent(), true), false, false),
            Vote::MaybeReleased
        );
        // Nothing of ours ran before the answer: the lock was gone already.
        assert_eq!(
            retried_vote(tried(absent(), false), false, true),
            Vote::NotHeld
        );
        // Another holder's lock is never ours; a retry that failed too says so.
        let other = Reply::Answer(Value::Integer(0));
        assert_eq!(retried_vote(tried(other, true), true, true), Vote::NotHeld);
        assert_eq!(
            retried_vote(tried(Reply::Timeout, true), true, true),
            Vote::Timeout
        );
    }

    #[test]
    fn tokens_from_acquire_pass_and_others_are_refused_naming_the_field() {
        assert!(check_token("0123456789abcdef0123456789abcdef").is_ok());
        for bad in ["", "has space", "semi;colon", "new\nline", &"a".repeat(65)] {
            match check_token(bad) {
                Err(Error::InvalidInput { field, .. }) => assert_eq!(field, "token"),
                other => panic!("{bad:?} gave {other:?}"),
            }
        }
    }
}
