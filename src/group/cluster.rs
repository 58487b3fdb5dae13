//! A group that is a Redis Cluster: its slot map, and one client and lane per primary.
//!
//! fred's own cluster client is not used: it retries an `ASK` until its router gives up, and
//! one dead primary stalls every slot until the cluster fails it over. Here each primary is a
//! plain [`Master`], and a call goes to the primary that owns its resource's slot, with every
//! key moved into that slot (see [`HashSlot::key`]). A `MOVED`, `ASK` or `TRYAGAIN` answer
//! to the whole call means the script did not run: the call is "not sent", never counted,
//! and the map is read again at once; the call waits for that read and goes to the primary
//! it names, as long as its own call timeout lasts, so a release or renewal reaches a slot
//! that moved instead of being redirected until its lock expires. The map is also read every
//! [`REFRESH_INTERVAL`], and after any call that timed out or failed, so a failover is seen
//! without waiting for a call to be refused.
//!
//! Releases are announced with sharded pub/sub: on a channel moved into the resource's slot,
//! heard by the subscribers of that slot's primary only (see [`crate::group::sharded`]).

use std::collections::HashMap;
use std::future::Future;
use std::ops::Range;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use fred::prelude::*;
use fred::types::scripts::Script;
use fred::types::{FromValue, Key};
use tokio::sync::{Notify, watch};
use tokio_util::task::AbortOnDropHandle;

use crate::config::Topology;
use crate::engine::resource::admission_key;
use crate::group::batch::{Answer, Batching, Call, LockScript};
use crate::group::diagnose::Diagnosis;
use crate::group::master::Master;
use crate::group::reply::Reply;
use crate::group::scripts::{self, GroupScript};
use crate::group::security::{Credentials, Transport};
use crate::group::sharded::ShardSubscribers;
use crate::group::slots::{HashSlot, SLOTS};

/// How often the slot map is read while nothing asks for it sooner.
const REFRESH_INTERVAL: Duration = Duration::from_secs(1);
/// Every how many reads of the map the seeds are asked too, even while the primaries see
/// the cluster up: a primary cut off from the others says so only after the node timeout.
const SEEDS_EVERY: u64 = 10;
/// Most slots one `each_slot.lua` call runs: a script holds its primary until it ends. An
/// admission runs about 70 µs per slot (its `INFO` alone 20), so a call holds the primary
/// for about 5 ms.
const SLOTS_PER_CALL: usize = 64;
/// Shortest time between two reads of the map, however many calls ask for one.
const REFRESH_SPACING: Duration = Duration::from_millis(50);
/// How many times a listing read asks for the slots that moved while it read them, each
/// time once the map shows where they went (or a map read later).
const LIST_ATTEMPTS: usize = 3;
/// Most slots one `list_slots.lua` call reads: under 10 µs each on a primary, so a call holds
/// it well under a millisecond, and stays within the call timeout on a loaded machine.
const LIST_SLOTS_PER_CALL: usize = 64;

pub(crate) const NOT_ONE_SLOT: &str =
    "a set of several resources spans hash slots, and a Cluster group runs a script on one slot";
const NO_OWNER: &str = "no primary of the Cluster group owns the resource's slot now";
const REDIRECTED: &str =
    "the slot moved to another primary (MOVED, ASK or TRYAGAIN); the slot map is read again";

/// One primary of the cluster.
pub(crate) struct Shard {
    /// `host:port`, as the cluster announces it.
    pub address: String,
    pub master: Master,
}

/// Which primary owns each slot.
#[derive(Default)]
struct SlotMap {
    shards: Vec<Arc<Shard>>,
    /// Per slot, the index of its primary in `shards`.
    owners: Vec<Option<usize>>,
}

/// What the map-reading task needs to build clients for the primaries it finds.
struct Builders {
    name: String,
    seeds: Vec<(String, u16)>,
    credentials: Credentials,
    transport: Transport,
    topology: Topology,
    diagnosis: Arc<Diagnosis>,
}

/// The primaries of one Cluster group.
pub(crate) struct Cluster {
    builders: Arc<Builders>,
    map: Arc<RwLock<Arc<SlotMap>>>,
    /// Asks the map-reading task for a read now.
    stale: Arc<Notify>,
    /// Counts the changes of the map, for the release subscribers to follow them.
    changes: Arc<watch::Sender<u64>>,
    /// Counts the completed reads of the map, changed or not, for redirected calls to wait
    /// for the next one.
    reads: Arc<watch::Sender<u64>>,
    refresher: Mutex<Option<AbortOnDropHandle<()>>>,
}

/// The slot map as the release subscribers read it: which primary owns a slot now, and word
/// of every change.
#[derive(Clone)]
pub(crate) struct MapView {
    map: Arc<RwLock<Arc<SlotMap>>>,
    stale: Arc<Notify>,
    changes: watch::Receiver<u64>,
}

impl MapView {
    /// The primary that owns `slot` now.
    pub fn owner(&self, slot: HashSlot) -> Option<Arc<Shard>> {
        owner_in(&current_of(&self.map), slot)
    }

    /// `host:port` of every primary of the map.
    pub fn primaries(&self) -> Vec<String> {
        current_of(&self.map)
            .shards
            .iter()
            .map(|shard| shard.address.clone())
            .collect()
    }

    /// Resolves once the map changes after the last change seen; `false` once the cluster is
    /// gone.
    pub async fn changed(&mut self) -> bool {
        self.changes.changed().await.is_ok()
    }

    /// Reads the map again soon: a node answered that it does not own a slot it should.
    pub fn reread(&self) {
        self.stale.notify_one();
    }
}

impl Cluster {
    pub fn new(
        name: &str,
        seeds: Vec<(String, u16)>,
        credentials: Credentials,
        transport: &Transport,
        topology: &Topology,
        diagnosis: Arc<Diagnosis>,
    ) -> Self {
        Cluster {
            builders: Arc::new(Builders {
                name: name.to_string(),
                seeds,
                credentials,
                transport: transport.clone(),
                topology: topology.clone(),
                diagnosis,
            }),
            map: Arc::default(),
            stale: Arc::new(Notify::new()),
            changes: Arc::new(watch::Sender::new(0)),
            reads: Arc::new(watch::Sender::new(0)),
            refresher: Mutex::new(None),
        }
    }

    /// Reads the slot map once (bounded), connects its primaries, and starts the task that
    /// keeps it current. Whether a map was read.
    pub async fn start(&self) -> bool {
        let read = refresh(&self.builders, &self.map, &self.changes, Seeds::Always).await;
        self.reads.send_modify(|count| *count += 1);
        let task = tokio::spawn(keep_current(
            self.builders.clone(),
            self.map.clone(),
            self.stale.clone(),
            self.changes.clone(),
            self.reads.clone(),
        ));
        if let Ok(mut refresher) = self.refresher.lock() {
            *refresher = Some(AbortOnDropHandle::new(task));
        }
        read
    }

    fn current(&self) -> Arc<SlotMap> {
        current_of(&self.map)
    }

    /// The primary that owns `slot` now.
    fn owner(&self, slot: HashSlot) -> Option<Arc<Shard>> {
        owner_in(&self.current(), slot)
    }

    /// A new release subscriber: a client per primary that owns a slot with waiters, each
    /// subscribed with SSUBSCRIBE, all again after every change of the map.
    pub fn subscriber(&self) -> Arc<ShardSubscribers> {
        ShardSubscribers::start(MapView {
            map: self.map.clone(),
            stale: self.stale.clone(),
            changes: self.changes.subscribe(),
        })
    }

    /// The primary that owns `slot` now; with none, the map is read again soon.
    fn routed(&self, slot: HashSlot) -> Option<Arc<Shard>> {
        let owner = self.owner(slot);
        if owner.is_none() {
            self.reread();
        }
        owner
    }

    /// The primaries known now.
    pub fn shards(&self) -> Vec<Arc<Shard>> {
        self.current().shards.clone()
    }

    /// One slot of each primary, for views that read each primary once.
    fn one_slot_per_shard(&self) -> Vec<HashSlot> {
        let map = self.current();
        (0..map.shards.len())
            .filter_map(|shard| {
                let first = map.owners.iter().position(|owner| *owner == Some(shard))?;
                HashSlot::new(u16::try_from(first).ok()?)
            })
            .collect()
    }

    /// Reads the map again soon, after an answer that says it changed or a primary that did
    /// not answer.
    fn reread(&self) {
        self.stale.notify_one();
    }

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

    /// Whether every primary of the map is connected (false with no map).
    pub fn connected(&self) -> bool {
        let shards = self.shards();
        !shards.is_empty()
            && shards
                .iter()
                .all(|shard| shard.master.client().is_connected())
    }

    /// Closes every client and stops reading the map.
    pub async fn quit(&self) {
        if let Ok(mut refresher) = self.refresher.lock()
            && let Some(task) = refresher.take()
        {
            task.abort();
        }
        let shards = self.shards();
        futures::future::join_all(shards.iter().map(|shard| shard.master.quit())).await;
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

/// Which slots a group-wide script runs on in a Cluster group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Every {
    /// All 16,384: what is written per slot (admission, policy).
    Slot,
    /// One per primary: what is read per primary (health).
    Shard,
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

fn current_of(map: &RwLock<Arc<SlotMap>>) -> Arc<SlotMap> {
    map.read()
        .map(|map| map.clone())
        .unwrap_or_else(|poisoned| poisoned.into_inner().clone())
}

fn owner_in(map: &SlotMap, slot: HashSlot) -> Option<Arc<Shard>> {
    let index = (*map.owners.get(usize::from(slot.index()))?)?;
    map.shards.get(index).cloned()
}

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

/// Reads the map whenever asked, and every [`REFRESH_INTERVAL`] anyway.
async fn keep_current(
    builders: Arc<Builders>,
    map: Arc<RwLock<Arc<SlotMap>>>,
    stale: Arc<Notify>,
    changes: Arc<watch::Sender<u64>>,
    reads: Arc<watch::Sender<u64>>,
) {
    for round in 1_u64.. {
        let _ = tokio::time::timeout(REFRESH_INTERVAL, stale.notified()).await;
        let seeds = if round % SEEDS_EVERY == 0 {
            Seeds::Always
        } else {
            Seeds::WhenNoPrimaryIsUp
        };
        refresh(&builders, &map, &changes, seeds).await;
        reads.send_modify(|count| *count += 1);
        tokio::time::sleep(REFRESH_SPACING).await;
    }
}

/// One primary's slots, as a node of the cluster says.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SlotRange {
    first: u16,
    last: u16,
    primary: String,
}

/// What one node answered: whether it sees the cluster as up, its epoch, and its map.
struct View {
    healthy: bool,
    epoch: u64,
    ranges: Vec<SlotRange>,
}

/// When a read of the slot map asks the seeds too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seeds {
    Always,
    WhenNoPrimaryIsUp,
}

/// Reads the map from the known primaries through their clients, and from the seeds too
/// (each on a connection of its own) as `seeds` says; keeps the view of a healthy node with
/// the highest epoch, and connects the new primaries at once. Says so on `changes` when the
/// map changed. Whether a map was read.
async fn refresh(
    builders: &Builders,
    map: &RwLock<Arc<SlotMap>>,
    changes: &watch::Sender<u64>,
    seeds: Seeds,
) -> bool {
    let current = map.read().map(|map| map.clone()).unwrap_or_default();
    let mut views: Vec<View> =
        futures::future::join_all(current.shards.iter().map(|shard| async move {
            let (info, slots) = shard.master.cluster_map().await?;
            let (host, _) = split_address(&shard.address)?;
            Some(view_of(&info, &slots, &host))
        }))
        .await
        .into_iter()
        .flatten()
        .collect();
    let primary_up = views
        .iter()
        .any(|view| view.healthy && !view.ranges.is_empty());
    if seeds == Seeds::Always || !primary_up {
        let asked: Vec<(String, u16)> = current
            .shards
            .iter()
            .filter_map(|shard| split_address(&shard.address))
            .collect();
        let seeds = builders.seeds.iter().filter(|seed| !asked.contains(seed));
        let seed_views =
            futures::future::join_all(seeds.map(|(host, port)| read_view(builders, host, *port)))
                .await;
        views.extend(seed_views.into_iter().flatten());
    }
    let Some(view) = views
        .into_iter()
        .filter(|view| !view.ranges.is_empty())
        .max_by_key(|view| (view.healthy, view.epoch))
    else {
        tracing::debug!(group = %builders.name, "no node of the Cluster group answered with a slot map");
        return false;
    };
    let mut by_address: HashMap<String, Arc<Shard>> = current
        .shards
        .iter()
        .map(|shard| (shard.address.clone(), shard.clone()))
        .collect();
    let mut new: Vec<&str> = Vec::new();
    for range in &view.ranges {
        if !by_address.contains_key(&range.primary) && !new.contains(&range.primary.as_str()) {
            new.push(&range.primary);
        }
    }
    let connected =
        futures::future::join_all(new.iter().map(|address| connect_shard(builders, address))).await;
    for (address, shard) in new.into_iter().zip(connected) {
        if let Some(shard) = shard {
            by_address.insert(address.to_string(), shard);
        }
    }
    // Shards taken into the new map leave `by_address`; what is left is closed below.
    let mut gone = by_address;
    let mut shards: Vec<Arc<Shard>> = Vec::new();
    let mut owners = vec![None; usize::from(SLOTS)];
    for range in &view.ranges {
        let index = match shards
            .iter()
            .position(|shard| shard.address == range.primary)
        {
            Some(index) => index,
            None => {
                let Some(shard) = gone.remove(&range.primary) else {
                    continue;
                };
                shards.push(shard);
                shards.len() - 1
            }
        };
        for slot in range.first..=range.last.min(SLOTS - 1) {
            owners[usize::from(slot)] = Some(index);
        }
    }
    let changed = shards.len() != current.shards.len()
        || owners != current.owners
        || shards
            .iter()
            .zip(&current.shards)
            .any(|(new, old)| new.address != old.address);
    if changed {
        tracing::info!(
            group = %builders.name,
            primaries = ?shards.iter().map(|shard| shard.address.as_str()).collect::<Vec<_>>(),
            "the Cluster group's slot map changed"
        );
        if let Ok(mut slot) = map.write() {
            *slot = Arc::new(SlotMap { shards, owners });
        }
        changes.send_modify(|count| *count += 1);
        // Primaries no longer in the map: closed now; a call still on one fails like a call
        // to a node that went away.
        for (_, shard) in gone {
            tokio::spawn(async move { shard.master.quit().await });
        }
    }
    true
}

/// A client for the primary at `address`, connected (bounded) with the scripts loaded.
async fn connect_shard(builders: &Builders, address: &str) -> Option<Arc<Shard>> {
    let (host, port) = split_address(address)?;
    let master = Master::build(
        ServerConfig::new_centralized(host, port),
        &builders.credentials,
        &builders.transport,
        &builders.topology,
        builders.diagnosis.clone(),
        Batching::Undeclared,
    )
    .map_err(|error| {
        tracing::warn!(group = %builders.name, address, %error, "cannot build a client for a Cluster primary");
    })
    .ok()?;
    match master.start().await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => {
            tracing::warn!(group = %builders.name, address, %error, "a Cluster primary refused the connection; it reconnects in the background")
        }
        Err(_) => {
            tracing::warn!(group = %builders.name, address, "a Cluster primary did not answer in time; it reconnects in the background")
        }
    }
    Some(Arc::new(Shard {
        address: address.to_string(),
        master,
    }))
}

/// `CLUSTER INFO` and `CLUSTER SLOTS` of one node, within the call timeout.
async fn read_view(builders: &Builders, host: &str, port: u16) -> Option<View> {
    let config = builders.transport.config(
        ServerConfig::new_centralized(host, port),
        &builders.credentials,
    );
    let client = Builder::from_config(config)
        .with_connection_config(|connection| {
            connection.connection_timeout = builders.topology.call_timeout();
            connection.max_command_attempts = 1;
        })
        .build()
        .ok()?;
    let limit = builders.topology.call_timeout() * 2;
    // Aborted on every path when dropped, so a node that never answers (frozen) keeps no
    // connection task behind.
    let connection = AbortOnDropHandle::new(client.connect());
    let read = async {
        client.wait_for_connect().await.ok()?;
        let info = client
            .custom::<String, _>(fred::cmd!("CLUSTER", blocking: false), vec!["INFO"])
            .await
            .ok()?;
        let slots = client
            .custom::<Value, _>(fred::cmd!("CLUSTER", blocking: false), vec!["SLOTS"])
            .await
            .ok()?;
        Some((info, slots))
    };
    let answer = tokio::time::timeout(limit, read).await.ok().flatten();
    if answer.is_some() {
        let _ = tokio::time::timeout(limit, client.quit()).await;
    }
    drop(connection);
    let (info, slots) = answer?;
    Some(view_of(&info, &slots, host))
}

/// A node's view from its `CLUSTER INFO` and `CLUSTER SLOTS` replies; `host` is where it was
/// asked.
fn view_of(info: &str, slots: &Value, host: &str) -> View {
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.trim().strip_prefix(name)?.strip_prefix(':'))
            .map(str::to_string)
    };
    View {
        healthy: field("cluster_state").as_deref() == Some("ok"),
        epoch: field("cluster_current_epoch")
            .and_then(|epoch| epoch.parse().ok())
            .unwrap_or(0),
        ranges: parse_slots(slots, host),
    }
}

/// The ranges of a `CLUSTER SLOTS` reply: `[[first, last, [host, port, id, ...], replicas...], ...]`.
/// A primary announced without a host is at `asked_host`, the node that answered.
fn parse_slots(reply: &Value, asked_host: &str) -> Vec<SlotRange> {
    let Value::Array(ranges) = reply else {
        return Vec::new();
    };
    ranges
        .iter()
        .filter_map(|range| {
            let Value::Array(fields) = range else {
                return None;
            };
            let number = |value: &Value| value.as_u64().and_then(|n| u16::try_from(n).ok());
            let first = number(fields.first()?)?;
            let last = number(fields.get(1)?)?;
            let Value::Array(primary) = fields.get(2)? else {
                return None;
            };
            let host = primary.first()?.as_string()?;
            let host = if host.is_empty() || host == "?" {
                asked_host.to_string()
            } else {
                host
            };
            let port = number(primary.get(1)?)?;
            Some(SlotRange {
                first,
                last,
                primary: format!("{host}:{port}"),
            })
        })
        .collect()
}

fn split_address(address: &str) -> Option<(String, u16)> {
    let (host, port) = address.rsplit_once(':')?;
    Some((host.to_string(), port.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_slots_reply_becomes_ranges_with_their_primary() {
        let node = |host: &str, port: i64| {
            Value::Array(vec![
                Value::from(host),
                Value::Integer(port),
                Value::from("id"),
            ])
        };
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Integer(0),
                Value::Integer(5460),
                node("127.0.0.1", 7000),
                node("127.0.0.1", 7003),
            ]),
            Value::Array(vec![
                Value::Integer(5461),
                Value::Integer(16383),
                node("", 7001),
            ]),
        ]);
        assert_eq!(
            parse_slots(&reply, "10.0.0.9"),
            vec![
                SlotRange {
                    first: 0,
                    last: 5460,
                    primary: "127.0.0.1:7000".into()
                },
                SlotRange {
                    first: 5461,
                    last: 16383,
                    primary: "10.0.0.9:7001".into()
                },
            ]
        );
    }

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
