//! The one fan-out helper every operation uses.
//!
//! A call goes to every group at once; each group's answer (or its timeout) becomes a
//! [`Reply`]. The caller says when the vote is decided, so acquire can return as soon as a
//! majority granted without waiting for the slowest group.

use futures::StreamExt;
use futures::stream::FuturesUnordered;

use crate::group::Group;
use crate::group::reply::Reply;

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

/// Counts votes matching `predicate` among the answers gathered so far.
pub(crate) fn count<T>(
    replies: &[Option<Reply<T>>],
    predicate: impl Fn(&Reply<T>) -> bool,
) -> usize {
    replies.iter().flatten().filter(|r| predicate(r)).count()
}
