//! Call routing: each call goes to the primary that owns its slot, with its keys (and a
//! release's channels) moved into that slot, and again where the map says once a `MOVED`,
//! `ASK` or `TRYAGAIN` shows the slot moved; group-wide scripts run per slot or per primary.

use std::future::Future;
use std::ops::Range;
use std::sync::Arc;

use fred::prelude::*;
use fred::types::scripts::Script;
use fred::types::{FromValue, Key};

use super::slot_map::REFRESH_SPACING;
use super::{Cluster, Every, Shard};
use crate::engine::resource::admission_key;
use crate::group::batch::{Answer, Call, LockScript};
use crate::group::reply::Reply;
use crate::group::scripts::{self, GroupScript};
use crate::group::slots::HashSlot;

/// Most slots one `each_slot.lua` call runs: a script holds its primary until it ends. An
/// admission runs about 70 µs per slot (its `INFO` alone 20), so a call holds the primary
/// for about 5 ms.
const SLOTS_PER_CALL: usize = 64;
/// How many times a listing read asks for the slots that moved while it read them, each
/// time once the map shows where they went (or a map read later).
const LIST_ATTEMPTS: usize = 3;
/// Most slots one `list_slots.lua` call reads: under 10 µs each on a primary, so a call holds
/// it well under a millisecond, and stays within the call timeout on a loaded machine.
const LIST_SLOTS_PER_CALL: usize = 64;

pub(crate) const NOT_ONE_SLOT: &str =
    "a set of several resources spans hash slots, and a Cluster group runs a script on one slot";
pub(super) const NO_OWNER: &str = "no primary of the Cluster group owns the resource's slot now";
const REDIRECTED: &str =
    "the slot moved to another primary (MOVED, ASK or TRYAGAIN); the slot map is read again";

impl Cluster {
    /// Runs a lock call on the primary of its slot, with its keys moved into that slot. A
    /// release carries the slot's admission marker last, for the slot's ledger.
    pub async fn call(&self, call: Call) -> Reply<Answer> {
        let Some(slot) = call.hash_slot else {
            return Reply::NotSent(NOT_ONE_SLOT);
        };
        let (args, keys) = match call.script {
            LockScript::Release => {
                let mut keys = move_keys(slot, &call.keys);
                keys.push(self.marker(slot));
                (
                    announce_sharded(slot, &call.args, 2..call.args.len()).into(),
                    keys,
                )
            }
            _ => (call.args, move_keys(slot, &call.keys)),
        };
        let call = Call {
            keys: keys.into(),
            args,
            ..call
        };
        self.resend(slot, |shard| {
            let call = call.clone();
            async move { shard.master.call(call).await }
        })
        .await
    }

    /// The admission marker of `slot`.
    fn marker(&self, slot: HashSlot) -> Key {
        let marker = admission_key(&self.builders.topology.key_prefix);
        Key::from(slot.key(marker.as_bytes()).as_slice())
    }

    /// Deletes the lock at `keys` whoever holds it (lua/force_release.lua), announced in its
    /// slot: `args` are its release channel and the announcement. The slot's admission marker
    /// goes last, for the slot's ledger.
    pub async fn force_release<R: FromValue>(
        &self,
        slot: HashSlot,
        keys: &[Key],
        args: &[Value],
    ) -> Reply<R> {
        let args = announce_sharded(slot, args, 0..1);
        let mut keys = move_keys(slot, keys);
        keys.push(self.marker(slot));
        self.resend(slot, |shard| {
            let (keys, args) = (keys.clone(), args.clone());
            async move { shard.master.eval(&scripts::FORCE_RELEASE, keys, args).await }
        })
        .await
    }

    /// Runs `script` on the primary of `slot`, with its keys moved into that slot.
    pub async fn eval<R: FromValue>(
        &self,
        slot: HashSlot,
        script: &Script,
        keys: &[Key],
        args: Vec<Value>,
    ) -> Reply<R> {
        let keys = move_keys(slot, keys);
        self.resend(slot, |shard| {
            let (keys, args) = (keys.clone(), args.clone());
            async move { shard.master.eval(script, keys, args).await }
        })
        .await
    }

    /// Sends a call with `send` to the primary of `slot`; when the cluster redirects it, or
    /// the map names no primary for the slot, waits for the next read of the map and sends it
    /// again where that map says, until the call timeout from now has passed. A redirected
    /// call did not run, so sending it again is safe; without the wait, a retry goes to the
    /// old owner again before the map is read, and a release leaves its lock to its TTL.
    async fn resend<T, F, Fut>(&self, slot: HashSlot, send: F) -> Reply<T>
    where
        F: Fn(Arc<Shard>) -> Fut,
        Fut: Future<Output = Reply<T>>,
    {
        let deadline = tokio::time::Instant::now() + self.builders.topology.call_timeout();
        let mut first = true;
        loop {
            // Subscribed before the call goes out: a read that ends after the redirect
            // wakes the wait below.
            let mut reads = self.reads.subscribe();
            let reply = match self.routed(slot) {
                Some(shard) if first => self.redirected(send(shard).await),
                // A resend is bounded by what is left of the first call's timeout.
                Some(shard) => match tokio::time::timeout_at(deadline, send(shard)).await {
                    Ok(reply) => self.redirected(reply),
                    Err(_) => return Reply::Timeout,
                },
                None => Reply::NotSent(NO_OWNER),
            };
            first = false;
            let again = matches!(reply, Reply::NotSent(reason) if reason == REDIRECTED || reason == NO_OWNER);
            if !again {
                return reply;
            }
            match tokio::time::timeout_at(deadline, reads.changed()).await {
                Ok(Ok(())) => {}
                _ => return reply,
            }
        }
    }

    /// Runs a group-wide script in every slot (one call per primary, over the slots the map
    /// gives it) or in one slot of each primary, with the keys moved into each slot. One
    /// reply per slot run.
    pub async fn eval_group<R: FromValue>(
        &self,
        every: Every,
        script: GroupScript,
        keys: &[Key],
        args: &[Value],
    ) -> Vec<Reply<R>> {
        match every {
            Every::Shard => {
                let slots = self.one_slot_per_shard();
                let runs = slots
                    .into_iter()
                    .map(|slot| self.eval(slot, script.single(), keys, args.to_vec()));
                futures::future::join_all(runs).await
            }
            Every::Slot => self.eval_each_slot(script, keys, args).await,
        }
    }

    async fn eval_each_slot<R: FromValue>(
        &self,
        script: GroupScript,
        keys: &[Key],
        args: &[Value],
    ) -> Vec<Reply<R>> {
        let map = self.current();
        let unowned = map.owners.iter().filter(|owner| owner.is_none()).count();
        let mut head: Vec<Value> = Vec::with_capacity(keys.len() + args.len() + 2);
        head.push(Value::from(keys.len() as i64));
        head.extend(
            keys.iter()
                .map(|key| Value::from(key.as_str_lossy().to_string())),
        );
        head.push(Value::from(args.len() as i64));
        head.extend(args.iter().cloned());
        let head = &head;
        // Each primary runs its slots a chunk at a time, one chunk after the other, so no
        // script call holds it for long; the primaries run at once.
        let per_shard = map.shards.iter().enumerate().map(|(index, shard)| {
            let tags: Vec<&'static str> = map
                .owners
                .iter()
                .enumerate()
                .filter(|(_, owner)| **owner == Some(index))
                .filter_map(|(slot, _)| Some(HashSlot::new(u16::try_from(slot).ok()?)?.tag()))
                .collect();
            async move {
                let mut replies: Vec<Reply<R>> = Vec::with_capacity(tags.len());
                for chunk in tags.chunks(SLOTS_PER_CALL) {
                    let mut argv = head.clone();
                    argv.extend(chunk.iter().map(|tag| Value::from(*tag)));
                    let reply = shard
                        .master
                        .eval::<Value>(script.each_slot(), Vec::new(), argv)
                        .await;
                    let reply = self.redirected(reply);
                    if !matches!(reply, Reply::Answer(_)) {
                        // A primary that did not answer one chunk is not asked for the
                        // rest: each would wait out its own call timeout.
                        let rest = tags.len() - replies.len();
                        replies.extend(per_slot(reply, rest));
                        break;
                    }
                    replies.extend(per_slot(reply, chunk.len()));
                }
                replies
            }
        });
        let mut replies: Vec<Reply<R>> = futures::future::join_all(per_shard)
            .await
            .into_iter()
            .flatten()
            .collect();
        if unowned > 0 {
            self.reread();
            replies.extend((0..unowned).map(|_| Reply::NotSent(NO_OWNER)));
        }
        replies
    }

    /// The string at `key` moved into `slot`.
    pub async fn get(&self, slot: HashSlot, key: &str) -> Reply<Option<String>> {
        let Some(shard) = self.routed(slot) else {
            return Reply::NotSent(NO_OWNER);
        };
        let moved = String::from_utf8_lossy(&slot.key(key.as_bytes())).into_owned();
        let reply = shard.master.get(&moved).await;
        self.redirected(reply)
    }

    /// Keys matching `pattern` once their slot tag is taken off, on every primary.
    pub async fn scan_keys(&self, pattern: &str, limit: usize) -> Reply<Vec<String>> {
        let tagged = format!("{{*}}{pattern}");
        let mut keys = Vec::new();
        for shard in self.shards() {
            match shard.master.scan_keys(&tagged, limit).await {
                Reply::Answer(found) => keys.extend(found.into_iter().map(|key| untag(&key))),
                other => return self.redirected(other),
            }
        }
        keys.truncate(limit);
        Reply::Answer(keys)
    }

    /// The keys in `slots` that start with `start` once their slot tag is taken off, without
    /// it: each slot read whole on the primary that serves it now, the primaries at once. A
    /// slot that primary does not serve (it moved, or is moving) is read again once the map
    /// shows where it went; a slot still unread after [`LIST_ATTEMPTS`] fails the read, as
    /// does a primary that does not answer.
    pub async fn slot_keys(&self, slots: &[u16], start: &str) -> Reply<Vec<String>> {
        let mut pending: Vec<HashSlot> = slots.iter().copied().filter_map(HashSlot::new).collect();
        let mut keys = Vec::new();
        let mut why = NO_OWNER.to_string();
        for _ in 0..LIST_ATTEMPTS {
            // Subscribed before the map is read: a change after this read wakes the wait.
            let mut changes = self.changes.subscribe();
            let map = self.current();
            let mut by_shard: Vec<Vec<HashSlot>> = vec![Vec::new(); map.shards.len()];
            let mut again: Vec<HashSlot> = Vec::new();
            for slot in pending {
                let owner = map.owners.get(usize::from(slot.index())).copied().flatten();
                match owner.and_then(|index| by_shard.get_mut(index)) {
                    Some(served) => served.push(slot),
                    None => again.push(slot),
                }
            }
            let reads = map
                .shards
                .iter()
                .zip(&by_shard)
                .filter(|(_, slots)| !slots.is_empty())
                .map(|(shard, slots)| self.read_slots(shard, slots, start));
            for read in futures::future::join_all(reads).await {
                match read {
                    Ok(read) => {
                        keys.extend(read.keys);
                        if let Some(last) = read.why {
                            why = last;
                        }
                        again.extend(read.elsewhere);
                    }
                    Err(failed) => return failed,
                }
            }
            if again.is_empty() {
                return Reply::Answer(keys);
            }
            pending = again;
            self.reread();
            let wait = self.builders.topology.call_timeout() * 2 + REFRESH_SPACING;
            let _ = tokio::time::timeout(wait, changes.changed()).await;
        }
        let first = pending.first().map_or(0, |slot| slot.index());
        Reply::Failed(format!(
            "slot {first} was not served where the slot map put it, {LIST_ATTEMPTS} times: {why}"
        ))
    }

    /// The keys of `slots` that start with `start` on one primary, untagged, with the slots it
    /// did not serve; or the reply of the call that failed. The slots go a chunk per call, one
    /// call after the other, so no call holds the primary for long or waits behind another
    /// within its own timeout; a primary that did not answer one chunk is not asked for more.
    async fn read_slots(
        &self,
        shard: &Shard,
        slots: &[HashSlot],
        start: &str,
    ) -> Result<SlotsRead, Reply<Vec<String>>> {
        let mut read = SlotsRead::default();
        for chunk in slots.chunks(LIST_SLOTS_PER_CALL) {
            let mut args = Vec::with_capacity(1 + 2 * chunk.len());
            args.push(Value::from(start));
            for slot in chunk {
                args.push(Value::from(i64::from(slot.index())));
                args.push(Value::from(slot.tag()));
            }
            let reply = shard
                .master
                .eval::<Value>(&scripts::LIST_SLOTS, Vec::new(), args)
                .await;
            let answers = match self.redirected(reply) {
                Reply::Answer(Value::Array(answers)) if answers.len() == chunk.len() => answers,
                Reply::Answer(other) => {
                    return Err(Reply::Failed(format!(
                        "unexpected reply to a listing read of {} slots: {other:?}",
                        chunk.len()
                    )));
                }
                other => return Err(other.map(|_| Vec::new())),
            };
            for (slot, answer) in chunk.iter().zip(answers) {
                match answer {
                    Value::Array(found) => read.keys.extend(
                        found
                            .iter()
                            .filter_map(Value::as_string)
                            .map(|key| untag(&key)),
                    ),
                    other => {
                        read.why = other.as_string();
                        read.elsewhere.push(*slot);
                    }
                }
            }
        }
        Ok(read)
    }
    /// Passes `reply` on, as "not sent" when the cluster redirected it; asks for the map
    /// again after any failure.
    fn redirected<T>(&self, reply: Reply<T>) -> Reply<T> {
        match reply {
            Reply::Failed(message) if redirection(&message) => {
                self.reread();
                Reply::NotSent(REDIRECTED)
            }
            reply @ (Reply::Failed(_) | Reply::Timeout) => {
                self.reread();
                reply
            }
            reply => reply,
        }
    }
}

/// What one primary's listing read found: the keys, and the slots it did not serve (it
/// answered why, last in `why`).
#[derive(Default)]
struct SlotsRead {
    keys: Vec<String>,
    elsewhere: Vec<HashSlot>,
    why: Option<String>,
}

/// The replies of the `count` slot runs of one `each_slot.lua` call.
fn per_slot<R: FromValue>(reply: Reply<Value>, count: usize) -> Vec<Reply<R>> {
    match reply {
        Reply::Answer(Value::Array(answers)) if answers.len() == count => answers
            .into_iter()
            .map(|answer| match answer {
                // each_slot.lua answers a run that raised an error with its text.
                Value::String(message) => Reply::Failed(message.to_string()),
                Value::Bytes(message) => {
                    Reply::Failed(String::from_utf8_lossy(&message).into_owned())
                }
                value => match R::from_value(value) {
                    Ok(answer) => Reply::Answer(answer),
                    Err(error) => Reply::Failed(error.to_string()),
                },
            })
            .collect(),
        Reply::Answer(other) => {
            let message = format!("unexpected reply for {count} slots: {other:?}");
            (0..count).map(|_| Reply::Failed(message.clone())).collect()
        }
        Reply::Timeout => (0..count).map(|_| Reply::Timeout).collect(),
        Reply::Failed(message) => (0..count).map(|_| Reply::Failed(message.clone())).collect(),
        Reply::NotSent(reason) => (0..count).map(|_| Reply::NotSent(reason)).collect(),
    }
}

/// Whether a failure is the cluster refusing to run the call where it was sent: `MOVED`,
/// `ASK` or `TRYAGAIN` as the reply to the whole script call, which fred words as
/// "<kind> Error: <reply>". A call's own error inside a batch that ran is the script's text,
/// which never starts so. `CLUSTERDOWN` is not one: fred fails every command in flight on
/// the connection with it, and some of them may have run. Anything not recognised counts as
/// a call that may have run, so its grant is rolled back.
fn redirection(message: &str) -> bool {
    let reply = match message.split_once(" Error: ") {
        Some((kind, reply)) if !kind.contains(' ') => reply,
        _ => return false,
    };
    ["MOVED ", "ASK ", "TRYAGAIN "]
        .iter()
        .any(|word| reply.starts_with(word))
}

/// The arguments of a release script with the release channels at `channels` moved into
/// `slot`, and `sharded` after them, so the script announces with SPUBLISH.
///
/// A script may only SPUBLISH on a channel in its own slot, and only the Cluster group knows
/// slots: the engine sends every group the same call, channels named as a Sentinel group
/// publishes them, and this rule, per script, moves them here the same way the keys move.
/// Waiters hear the announcement under the name they know: the subscriber takes the slot
/// tag off again.
fn announce_sharded(slot: HashSlot, args: &[Value], channels: Range<usize>) -> Vec<Value> {
    let mut moved: Vec<Value> = args
        .iter()
        .enumerate()
        .map(|(at, arg)| match arg.as_bytes() {
            Some(channel) if channels.contains(&at) => {
                Value::from(String::from_utf8_lossy(&slot.key(channel)).into_owned())
            }
            _ => arg.clone(),
        })
        .collect();
    moved.push(Value::from(SHARDED));
    moved
}

/// The last argument of a release script in a Cluster group: announce with SPUBLISH.
const SHARDED: &str = "sharded";

fn move_keys(slot: HashSlot, keys: &[Key]) -> Vec<Key> {
    keys.iter()
        .map(|key| Key::from(slot.key(key.as_bytes()).as_slice()))
        .collect()
}

/// `key` (or a channel) without its leading `{T}` slot tag.
pub(crate) fn untag(key: &str) -> String {
    match key.strip_prefix('{').and_then(|rest| rest.split_once('}')) {
        Some((_, rest)) => rest.to_string(),
        None => key.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirections_are_told_apart_from_other_failures() {
        // As fred 10 words the error of a whole call.
        assert!(redirection("Cluster Error: MOVED 3999 127.0.0.1:6381"));
        assert!(redirection("Cluster Error: ASK 3999 127.0.0.1:6381"));
        assert!(redirection(
            "Unknown Error: TRYAGAIN Multiple keys request during rehashing of slot"
        ));
        // CLUSTERDOWN fails commands that may have run; a batched call's own error text
        // (the script's) is never a redirection, whatever it says.
        assert!(!redirection(
            "Cluster Error: CLUSTERDOWN The cluster is down"
        ));
        assert!(!redirection("MOVED 3999 127.0.0.1:6381"));
        assert!(!redirection("ERR user script: MOVED Error: MOVED 1 x"));
        assert!(!redirection("Unknown Error: NOSCRIPT No matching script"));
        assert!(!redirection("IO Error: Connection refused"));
    }

    #[test]
    fn a_scanned_key_loses_its_slot_tag() {
        assert_eq!(untag("{a1}ql:{x}:lock"), "ql:{x}:lock");
        assert_eq!(untag("ql:{x}:lock"), "ql:{x}:lock");
    }
}
