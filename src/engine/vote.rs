//! The votes a fan-out gathers, and the one rule that reads them.
//!
//! Every group answers each call with a [`Vote`]. A majority of `Granted` decides; short of
//! it, the votes say whether the groups answered and refused (someone else holds the lock, or
//! the token is not ours), or too few answered to know (the infrastructure failed).

use serde::{Deserialize, Serialize};

use crate::group::reply::Reply;

/// What one group said about a lock, as reported to callers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "vote", rename_all = "snake_case")]
pub enum Vote {
    /// This group granted (or renewed, or released) for our token.
    Granted,
    /// This group's lock is held by another token.
    Held {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        owner: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        purpose: Option<String>,
        remaining_ms: u64,
    },
    /// This group refused because its committed fence is at or above our proposal.
    FenceAhead { fence: u64 },
    /// The script answered "not ours" (release/extend of a token this group does not hold).
    NotHeld,
    /// Release: no lock is left on this group after a try that may have run (it timed out or
    /// failed), and whether that try or the lease's end (expiry, force release) removed it
    /// cannot be told.
    MaybeReleased,
    /// This master is new to the vote (a promoted replica, or restarted without its data) and
    /// sits out until every lease it may have missed has expired.
    Quarantined { remaining_ms: u64 },
    /// This master lost its data and its lock policy: it sits out until it adopts the policy
    /// of a majority of groups, or an operator admits it.
    NoPolicy,
    /// This master may evict keys (`maxmemory` with an eviction policy): it could drop a live
    /// lock or a fence, so it does not vote until it is set to `noeviction`.
    Evicts { maxmemory_policy: String },
    /// The TTL asked for is above this master's lock policy (`quorumlock admit` raises it).
    AbovePolicy { max_ttl_ms: u64 },
    /// The semaphore exists on this group with another number of permits.
    PermitsDiffer { permits: u64 },
    /// Acknowledged mode: the master has `online` of the `needed` replicas its policy names
    /// attached and in sync, so it cannot get a vote acknowledged and does not vote.
    ReplicasMissing { online: u64, needed: u64 },
    /// No answer within the per-call timeout; the call may still have been applied.
    Timeout,
    /// The call failed; the message says why.
    Error { message: String },
    /// The vote was decided before this group answered.
    NotAwaited,
}

impl Vote {
    /// A vote that tells nothing about the lock: the group failed to answer, or sits out.
    pub fn is_failure(&self) -> bool {
        matches!(
            self,
            Vote::Timeout
                | Vote::Error { .. }
                | Vote::Quarantined { .. }
                | Vote::NoPolicy
                | Vote::Evicts { .. }
                | Vote::AbovePolicy { .. }
                | Vote::PermitsDiffer { .. }
                | Vote::ReplicasMissing { .. }
        )
    }

    pub(crate) fn from_reply<T>(reply: Option<Reply<T>>, answered: impl FnOnce(T) -> Vote) -> Vote {
        match reply {
            None => Vote::NotAwaited,
            Some(Reply::Timeout) => Vote::Timeout,
            Some(Reply::Failed(message)) => Vote::Error { message },
            Some(Reply::NotSent(reason)) => Vote::Error {
                message: format!("not sent: {reason}"),
            },
            Some(Reply::Answer(answer)) => answered(answer),
        }
    }
}

/// One group's vote, with the group's name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupVote {
    pub group: String,
    #[serde(flatten)]
    pub vote: Vote,
}

/// Names of the groups whose vote was a failure, for error messages.
pub(crate) fn failed_group_names(votes: &[GroupVote]) -> Vec<String> {
    votes
        .iter()
        .filter(|v| v.vote.is_failure())
        .map(|v| match &v.vote {
            Vote::Timeout => format!("{} (timeout)", v.group),
            Vote::Error { message } => format!("{} ({message})", v.group),
            Vote::Quarantined { remaining_ms } => {
                format!(
                    "{} (new master, out of the vote for another {remaining_ms} ms)",
                    v.group
                )
            }
            Vote::NoPolicy => format!(
                "{} (lost its data and its lock policy; it joins once a majority of groups can tell it theirs, or after `quorumlock admit`)",
                v.group
            ),
            Vote::Evicts { maxmemory_policy } => format!(
                "{} (may evict keys: maxmemory-policy {maxmemory_policy}; set noeviction)",
                v.group
            ),
            Vote::AbovePolicy { max_ttl_ms } => format!(
                "{} (the ttl is above its lock policy of {max_ttl_ms} ms)",
                v.group
            ),
            Vote::PermitsDiffer { permits } => format!(
                "{} (the semaphore has {permits} permits there)",
                v.group
            ),
            Vote::ReplicasMissing { online, needed } => format!(
                "{} (acknowledged mode: {online} of its {needed} replicas attached and in sync)",
                v.group
            ),
            _ => v.group.clone(),
        })
        .collect()
}

/// How many groups vote, and how many of them make a majority: the rule every operation
/// decides by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Majority {
    /// Groups that vote.
    pub groups: usize,
    /// Votes that decide: more than half of the groups.
    pub needed: usize,
}

impl Majority {
    /// The majority of `groups` groups.
    pub fn of(groups: usize) -> Majority {
        Majority {
            groups,
            needed: groups / 2 + 1,
        }
    }

    /// Decided once `yes` groups reached a majority, or once `no` groups made one
    /// impossible. The slower groups need not be awaited.
    pub fn decided(self, yes: usize, no: usize) -> bool {
        yes >= self.needed || no > self.groups - self.needed
    }

    /// True when a vote short of a majority says nothing about the lock: too few groups
    /// answered (timeouts, errors, quarantined masters) for their refusals to decide it.
    pub fn unavailable(self, votes: &[GroupVote]) -> bool {
        let failed = votes.iter().filter(|v| v.vote.is_failure()).count();
        self.groups.saturating_sub(failed) < self.needed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn votes(list: &[Vote]) -> Vec<GroupVote> {
        list.iter()
            .enumerate()
            .map(|(index, vote)| GroupVote {
                group: format!("g{}", index + 1),
                vote: vote.clone(),
            })
            .collect()
    }

    fn held() -> Vote {
        Vote::Held {
            owner: Some("other".into()),
            purpose: None,
            remaining_ms: 500,
        }
    }

    #[test]
    fn a_majority_is_more_than_half_of_the_groups() {
        assert_eq!(Majority::of(1).needed, 1);
        assert_eq!(Majority::of(3).needed, 2);
        assert_eq!(Majority::of(4).needed, 3);
        assert_eq!(Majority::of(5).needed, 3);
        assert_eq!(Majority::of(7).needed, 4);
    }

    #[test]
    fn the_vote_is_decided_as_soon_as_a_majority_said_yes() {
        let five = Majority::of(5);
        assert!(!five.decided(2, 0));
        assert!(five.decided(3, 0));
        assert!(five.decided(3, 2));
    }

    #[test]
    fn the_vote_is_decided_as_soon_as_a_majority_became_impossible() {
        let five = Majority::of(5);
        assert!(!five.decided(0, 2));
        assert!(!five.decided(2, 2));
        assert!(five.decided(0, 3));
        assert!(five.decided(2, 3));
    }

    #[test]
    fn refusals_from_a_majority_of_groups_say_held_not_unavailable() {
        let five = Majority::of(5);
        let list = votes(&[held(), held(), held(), Vote::Timeout, Vote::Timeout]);
        assert!(!five.unavailable(&list));
    }

    #[test]
    fn too_few_answers_say_unavailable_whatever_the_others_said() {
        let five = Majority::of(5);
        let list = votes(&[
            held(),
            held(),
            Vote::Timeout,
            Vote::Error {
                message: "refused".into(),
            },
            Vote::Quarantined { remaining_ms: 10 },
        ]);
        assert!(five.unavailable(&list));
    }

    #[test]
    fn votes_not_awaited_count_as_answers() {
        let five = Majority::of(5);
        let list = votes(&[
            Vote::Granted,
            Vote::Granted,
            Vote::NotAwaited,
            Vote::Timeout,
            Vote::Timeout,
        ]);
        assert!(!five.unavailable(&list));
    }

    #[test]
    fn a_reply_becomes_the_vote_it_stands_for() {
        assert_eq!(
            Vote::from_reply::<u8>(None, |_| Vote::Granted),
            Vote::NotAwaited
        );
        assert_eq!(
            Vote::from_reply::<u8>(Some(Reply::Timeout), |_| Vote::Granted),
            Vote::Timeout
        );
        assert_eq!(
            Vote::from_reply::<u8>(Some(Reply::NotSent("queue full")), |_| Vote::Granted),
            Vote::Error {
                message: "not sent: queue full".into()
            }
        );
        assert_eq!(
            Vote::from_reply(Some(Reply::Answer(1)), |n| if n == 1 {
                Vote::Granted
            } else {
                Vote::NotHeld
            }),
            Vote::Granted
        );
    }

    #[test]
    fn votes_serialise_to_the_names_of_the_contract() {
        let json = serde_json::to_value(votes(&[Vote::Granted, held(), Vote::NotAwaited]))
            .unwrap_or_default();
        assert_eq!(json[0]["vote"], "granted");
        assert_eq!(json[1]["vote"], "held");
        assert_eq!(json[1]["remaining_ms"], 500);
        assert_eq!(json[2]["vote"], "not_awaited");
    }
}
