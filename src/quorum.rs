//! The one fan-out helper every operation uses, and the votes it gathers.
//!
//! A call goes to every group at once; each group's answer (or its timeout) becomes a
//! [`Reply`]. The caller says when the vote is decided, so acquire can return as soon as a
//! majority granted without waiting for the slowest group.

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use serde::{Deserialize, Serialize};

use crate::group::Group;

/// One group's answer to one call.
#[derive(Debug, Clone)]
pub(crate) enum Reply<T> {
    /// The script ran and answered.
    Answer(T),
    /// No answer within the per-call timeout: the call may still have been applied.
    Timeout,
    /// The call failed (connection refused or closed, server error): outcome unknown.
    Failed(String),
    /// The call was never sent, for the reason given: it waited in the client's queue for its
    /// whole timeout, or the queue was full. Nothing was applied.
    NotSent(&'static str),
}

impl<T> Reply<T> {
    /// The same reply with its answer turned into another.
    pub fn map<U>(self, answer: impl FnOnce(T) -> U) -> Reply<U> {
        match self {
            Reply::Answer(value) => Reply::Answer(answer(value)),
            Reply::Timeout => Reply::Timeout,
            Reply::Failed(message) => Reply::Failed(message),
            Reply::NotSent(reason) => Reply::NotSent(reason),
        }
    }
}

/// Sends `call` to every group concurrently and gathers the replies until `decided` says the
/// vote is settled (or every group answered). Groups that had not answered by then are `None`;
/// their calls still run to completion in the background, which is why callers clean up by
/// token on every group that might hold a grant.
pub(crate) async fn fan_out<'g, T, Call, Fut>(
    groups: &'g [Group],
    call: Call,
    mut decided: impl FnMut(&[Option<Reply<T>>]) -> bool,
) -> Vec<Option<Reply<T>>>
where
    Call: Fn(&'g Group) -> Fut,
    Fut: Future<Output = Reply<T>>,
{
    // Boxed once: the per-group futures are large, and moving them into the set by value
    // copied kilobytes per call on the hot path.
    let mut pending: FuturesUnordered<_> = groups
        .iter()
        .enumerate()
        .map(|(index, group)| {
            let reply = Box::pin(call(group));
            async move { (index, reply.await) }
        })
        .collect();
    let mut replies: Vec<Option<Reply<T>>> = (0..groups.len()).map(|_| None).collect();
    while let Some((index, reply)) = pending.next().await {
        replies[index] = Some(reply);
        if decided(&replies) {
            break;
        }
    }
    replies
}

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
    /// This master is new to the vote (a promoted replica, or restarted without its data) and
    /// sits out until every lease it may have missed has expired.
    Quarantined { remaining_ms: u64 },
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
            Vote::Timeout | Vote::Error { .. } | Vote::Quarantined { .. }
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
            _ => v.group.clone(),
        })
        .collect()
}

/// Counts votes matching `predicate` among the answers gathered so far.
pub(crate) fn count<T>(
    replies: &[Option<Reply<T>>],
    predicate: impl Fn(&Reply<T>) -> bool,
) -> usize {
    replies.iter().flatten().filter(|r| predicate(r)).count()
}
