//! Group commit for one master: the lock calls (acquire, release, extend) that arrive while
//! another is in flight wait, and go out together as one script call (`lua/batch.lua`) as soon
//! as it is back.
//!
//! An idle master gets each grant and release at once as its own script, so batching costs a
//! lone caller nothing; a renewal waits a moment there for others to join it. Under load one
//! script call (one read, one reply, one admission check, one replicated transaction) carries
//! many locks. Calls stay in arrival order on the master, so a rollback always runs after the
//! grant it undoes. A Cluster primary's batch mixes the slots it serves (see [`Batching`]).
//!
//! A master in acknowledged mode counts a vote only once every replica holds it. Each
//! voting call says how many replicas its client waits for (the last argument), the master
//! refuses a call that says another number, and the lane learns the master's number from
//! that refusal and sends those calls again. The `WAIT` goes right behind the script while
//! the replicas keep up, and only after a grant once a replica was found missing, so a group
//! short of a replica does not hold every call for the wait's whole timeout.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use fred::clients::WithOptions;
use fred::interfaces::{ClientInterface, ServerInterface};
use fred::prelude::Client;
use fred::types::{Key, Value};
use tokio::sync::{Notify, oneshot};

use crate::engine::protocol::code;
use crate::group::eval_script;
use crate::group::reply::Reply;
use crate::group::scripts;
use crate::group::slots::HashSlot;

/// Most calls in one script call: a master runs a script to the end before anything else,
/// so this bounds how long one batch holds it (well under a millisecond).
const MAX_BATCH: usize = 128;
/// Most calls waiting for one master before a new grant is refused at once rather than
/// queued: a queue longer than a master serves within the call timeout would make every call
/// in it time out (and leave grants to roll back).
///
/// Renewals and releases are never refused. A refused renewal is a lost lease that was still
/// held, and a refused release leaves the lock standing until its TTL. Their queue is bounded
/// by their callers instead: a keepalive lease has one renewal in flight at a time (the MCP
/// server also caps its leases and its concurrent calls), so a master never has more renewals
/// queued than leases renewing. One still queued at its caller's call timeout is dropped
/// unsent and retried while the lease is valid, so a queue longer than the master serves
/// costs it nothing. Sending a renewal late is safe: it renews only a lock that still carries
/// its token, and its caller counts the new validity from before it queued.
const MAX_QUEUED: usize = 8 * MAX_BATCH;
/// Longest a renewal that finds its master idle waits for others to go out with it.
/// Renewals are due every ttl/3 and not urgent to the millisecond, and each script call costs
/// the master an admission check (`INFO`) and the client a command, so a few gathered into
/// one call are much cheaper than each sent alone. At 1,000 sessions renewing 15 s leases,
/// 20 ms cost the server 0.7 x the CPU per renewal of 5 ms (docs/performance.md).
const MAX_LINGER: Duration = Duration::from_millis(20);
const QUEUED_TOO_LONG: &str = "queued behind other calls for the whole call timeout";
pub(crate) const QUEUE_FULL: &str =
    "too many calls already queued for this master (the client is overloaded)";

/// Which script a call runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LockScript {
    Acquire,
    /// A permit of a semaphore: a grant like acquire's.
    Permit,
    Release,
    Extend,
}

impl LockScript {
    /// The name `lua/batch.lua` knows it by.
    fn name(self) -> &'static str {
        match self {
            LockScript::Acquire => "acquire",
            LockScript::Permit => "permit",
            LockScript::Release => "release",
            LockScript::Extend => "extend",
        }
    }

    /// A grant: refused at once rather than queued behind too many calls.
    pub fn grants(self) -> bool {
        matches!(self, LockScript::Acquire | LockScript::Permit)
    }

    /// A vote (a grant or a renewal): in acknowledged mode it counts only once every replica
    /// of the master holds it.
    pub fn votes(self) -> bool {
        matches!(
            self,
            LockScript::Acquire | LockScript::Permit | LockScript::Extend
        )
    }

    fn single(self) -> &'static fred::types::scripts::Script {
        match self {
            LockScript::Acquire => &scripts::ACQUIRE,
            LockScript::Permit => &scripts::PERMIT,
            LockScript::Release => &scripts::RELEASE,
            LockScript::Extend => &scripts::EXTEND,
        }
    }
}

/// One lock call, the same for every group: cloning it for each group shares its keys and
/// arguments instead of copying them.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    pub script: LockScript,
    pub keys: Arc<[Key]>,
    pub args: Arc<[Value]>,
    /// The Cluster hash slot of the call's resource; `None` for a set of several.
    pub hash_slot: Option<HashSlot>,
}

/// How a batch names its calls' keys to the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Batching {
    /// As the script's keys: a master holds every key.
    Declared,
    /// Among its arguments: a Cluster primary refuses a script whose declared keys span
    /// slots, but lets one without flags touch any key of a slot it serves. One batch then
    /// carries the calls of every slot of the primary.
    Undeclared,
}

/// The script's answer and, for a vote sent to a master in acknowledged mode, how many
/// replicas acknowledged its writes (or why `WAIT` failed) of how many it needs.
#[derive(Debug, Clone)]
pub(crate) struct Answer {
    pub value: Value,
    pub acknowledged: Option<Result<i64, String>>,
    /// The replicas the call waited for: 0 outside acknowledged mode, and for a call that
    /// does not vote.
    pub acks_needed: u32,
}

impl Answer {
    /// Whether the vote counts: granted (or renewed), and held by every replica the master
    /// names. Anything else is said in `Err`, for the vote's error.
    pub fn acknowledged_vote(&self) -> Result<(), String> {
        if self.acks_needed == 0 {
            return Ok(());
        }
        match &self.acknowledged {
            Some(Ok(count)) if *count >= i64::from(self.acks_needed) => Ok(()),
            Some(Ok(count)) => Err(format!(
                "the vote was acknowledged by {count} of the master's {} replicas within the wait, so it does not count",
                self.acks_needed
            )),
            Some(Err(message)) => Err(format!(
                "WAIT for the vote's replicas failed ({message}), so it does not count"
            )),
            None => Err("the vote's replicas were not waited for, so it does not count".into()),
        }
    }
}

struct Queued {
    call: Call,
    /// Set by whoever takes the call first: the lane to send it, or its caller to give up on
    /// it; so a caller that gives up knows whether the call went out.
    claimed: Arc<AtomicBool>,
    answer: oneshot::Sender<Reply<Answer>>,
}

#[derive(Default)]
struct State {
    /// A call or a batch is in flight, or renewals linger; new calls queue behind it.
    busy: bool,
    /// Renewals wait on an idle master for others (`linger`); whoever ends the wait first,
    /// its timer or a call that does not linger, sends the queue.
    lingering: bool,
    queue: VecDeque<Queued>,
}

/// The lock calls of one group.
pub(crate) struct Lane {
    timed: WithOptions<Client>,
    call_timeout: Duration,
    /// The replicas the master's acknowledged mode names, as last learned (0: off).
    acked_replicas: AtomicU32,
    /// Whether the replicas kept up at the last look: `WAIT` then goes right behind the
    /// script; otherwise only after a grant.
    replicas_in_sync: AtomicBool,
    /// The longest `WAIT` for the replicas, in ms.
    ack_timeout_ms: u64,
    batching: Batching,
    state: Mutex<State>,
    /// Signalled each time the lane falls idle.
    idle: Notify,
}

/// Passes the lane on when a direct call ends or its caller drops it.
struct HandOff<'l>(&'l Arc<Lane>);

impl Drop for HandOff<'_> {
    fn drop(&mut self) {
        self.0.hand_off();
    }
}

impl Lane {
    pub fn new(
        timed: WithOptions<Client>,
        call_timeout: Duration,
        ack_timeout_ms: u64,
        batching: Batching,
    ) -> Self {
        Lane {
            timed,
            call_timeout,
            acked_replicas: AtomicU32::new(0),
            replicas_in_sync: AtomicBool::new(true),
            ack_timeout_ms,
            batching,
            state: Mutex::new(State::default()),
            idle: Notify::new(),
        }
    }

    /// Runs `call` on the master within the per-call timeout, queued behind the call in flight
    /// if there is one. A renewal that finds the master idle lingers a moment (see
    /// [`linger`]) for others to go out with it; any other call ends the wait and takes the
    /// renewals along at once.
    pub async fn call(self: &Arc<Self>, call: Call) -> Reply<Answer> {
        let linger = linger(&call, self.call_timeout);
        let (queued, ends_linger) = {
            let mut state = self.state();
            if state.queue.len() >= MAX_QUEUED && call.script.grants() {
                return Reply::NotSent(QUEUE_FULL);
            }
            let lingers = !state.busy && linger.is_some();
            if state.busy || lingers {
                state.busy = true;
                let ends_linger = state.lingering && linger.is_none();
                state.lingering = lingers || (state.lingering && !ends_linger);
                let (answer, receiver) = oneshot::channel();
                let claimed = Arc::new(AtomicBool::new(false));
                state.queue.push_back(Queued {
                    call,
                    claimed: claimed.clone(),
                    answer,
                });
                (Ok((receiver, claimed, lingers)), ends_linger)
            } else {
                state.busy = true;
                (Err(call), false)
            }
        };
        if let (Ok((_, _, true)), Some(linger)) = (&queued, linger) {
            let lane = Arc::clone(self);
            tokio::spawn(async move {
                tokio::time::sleep(linger).await;
                // Unless a call that does not linger took the queue out meanwhile.
                if lane.end_linger() {
                    lane.drain().await;
                }
            });
        }
        if ends_linger {
            tokio::spawn(Arc::clone(self).drain());
        }
        match queued.map(|(receiver, claimed, _)| (receiver, claimed)) {
            Ok((mut receiver, claimed)) => {
                match tokio::time::timeout(self.call_timeout, &mut receiver).await {
                    Ok(Ok(reply)) => reply,
                    Ok(Err(_)) => {
                        Reply::Failed("the client shut down before the call was sent".into())
                    }
                    Err(_) if !claimed.swap(true, Ordering::AcqRel) => {
                        Reply::NotSent(QUEUED_TOO_LONG)
                    }
                    Err(_) => receiver.try_recv().unwrap_or(Reply::Timeout),
                }
            }
            Err(call) => {
                let _hand_off = HandOff(self);
                let mut answers = self.send(vec![call]).await;
                answers
                    .pop()
                    .unwrap_or_else(|| Reply::Failed("no answer".into()))
            }
        }
    }

    pub fn call_timeout(&self) -> Duration {
        self.call_timeout
    }

    /// Waits until no call is queued and none is being handed to the master. A call whose
    /// caller stopped listening may still be on its way; anything sent after this (a PING,
    /// say) reaches the master after it.
    pub async fn settled(&self) {
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if !self.state().busy {
                return;
            }
            idle.await;
        }
    }

    /// Whether a new grant would be refused now: the queue, renewals included, is at
    /// [`MAX_QUEUED`].
    pub fn full(&self) -> bool {
        self.state().queue.len() >= MAX_QUEUED
    }

    /// Ends the renewals' wait; false when it had already ended.
    fn end_linger(&self) -> bool {
        std::mem::take(&mut self.state().lingering)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn hand_off(self: &Arc<Self>) {
        let mut state = self.state();
        if state.queue.is_empty() {
            state.busy = false;
            self.idle.notify_waiters();
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(self.clone().drain());
            }
            // No runtime left (shutdown): the queued callers see their calls fail.
            Err(_) => {
                state.queue.clear();
                state.busy = false;
                self.idle.notify_waiters();
            }
        }
    }

    /// Sends the queue batch by batch until it is empty.
    async fn drain(self: Arc<Self>) {
        loop {
            let batch: Vec<Queued> = {
                let mut state = self.state();
                let mut batch: Vec<Queued> = Vec::new();
                while batch.len() < MAX_BATCH {
                    let Some(queued) = state.queue.pop_front() else {
                        break;
                    };
                    // Its caller gave up on it at its timeout, knows it was never sent, and has
                    // nothing to roll back. A call whose caller merely stopped listening (the
                    // vote was decided without it) still goes: a grant should reach every group.
                    if queued.claimed.swap(true, Ordering::AcqRel) {
                        continue;
                    }
                    batch.push(queued);
                }
                if batch.is_empty() {
                    state.busy = false;
                    self.idle.notify_waiters();
                    return;
                }
                batch
            };
            let (calls, senders): (Vec<Call>, Vec<_>) = batch
                .into_iter()
                .map(|queued| (queued.call, queued.answer))
                .unzip();
            let answers = self.send(calls).await;
            for (sender, answer) in senders.into_iter().zip(answers) {
                let _ = sender.send(answer);
            }
        }
    }

    /// One script call for `calls`, and once more for the calls a master in acknowledged
    /// mode refused because they waited for another number of replicas than it has.
    async fn send(&self, calls: Vec<Call>) -> Vec<Reply<Answer>> {
        let started = tokio::time::Instant::now();
        let replicas = self.acked_replicas.load(Ordering::Relaxed);
        let mut answers = self.send_waiting_for(&calls, replicas).await;
        let refused: Vec<(usize, u32)> = answers
            .iter()
            .enumerate()
            .filter_map(|(at, answer)| Some((at, acks_required(answer)?)))
            .collect();
        let Some(&(_, learned)) = refused.first() else {
            return answers;
        };
        self.acked_replicas.store(learned, Ordering::Relaxed);
        let again: Vec<Call> = refused.iter().map(|&(at, _)| calls[at].clone()).collect();
        let resent = tokio::time::timeout_at(
            started + self.call_timeout,
            self.send_waiting_for(&again, learned),
        )
        .await
        .unwrap_or_else(|_| vec![Reply::Timeout; again.len()]);
        for ((at, _), answer) in refused.into_iter().zip(resent) {
            answers[at] = answer;
        }
        answers
    }

    /// One script call for `calls`: the call's own script for one, `BATCH` for several. Each
    /// vote says it waits for `replicas`, and with `replicas` above 0 a `WAIT` follows.
    async fn send_waiting_for(&self, calls: &[Call], replicas: u32) -> Vec<Reply<Answer>> {
        let count = calls.len();
        let votes = replicas > 0 && calls.iter().any(|call| call.script.votes());
        let declared: Vec<Call>;
        let calls = if replicas > 0 {
            declared = calls
                .iter()
                .map(|call| call.waiting_for(replicas))
                .collect();
            declared.as_slice()
        } else {
            calls
        };
        let pipelined = votes && self.replicas_in_sync.load(Ordering::Relaxed);
        let acks = pipelined.then_some((replicas, self.ack_timeout_ms));
        let (script, keys, args) = match calls {
            [call] => (call.script.single(), call.keys.clone(), call.args.clone()),
            _ => {
                let (keys, args) = pack(calls, self.batching);
                (&*scripts::BATCH, keys.into(), args.into())
            }
        };
        let connection = votes.then(|| self.timed.connection_ids());
        let reply = eval_script::<Value>(&self.timed, script, &keys, &args, acks).await;
        let reply = match reply {
            Reply::Answer((value, None)) if votes && granted_any(&value, count) => {
                let acknowledged = self.wait_for(replicas).await;
                Reply::Answer((value, Some(acknowledged)))
            }
            reply => reply,
        };
        // WAIT counts the replicas that hold its own connection's writes. After a reconnect
        // it speaks of another connection, maybe on another master, whose writes the
        // replicas may hold while the vote's are lost: it does not count then.
        let reply = match reply {
            Reply::Answer((value, Some(Ok(_))))
                if connection.as_ref().is_some_and(|before| {
                    !same_connection(before, &self.timed.connection_ids())
                }) =>
            {
                let moved = "the connection to the master changed between the vote and its WAIT";
                Reply::Answer((value, Some(Err(moved.to_string()))))
            }
            reply => reply,
        };
        if votes && let Reply::Answer((value, acknowledged)) = &reply {
            self.note_replicas_in_sync(value, acknowledged.as_ref(), count, replicas);
        }
        split_reply(reply, calls, replicas)
    }

    /// Whether the master's replicas kept up with a vote: a refusal for missing replicas, or
    /// a `WAIT` short of `replicas`, turns pipelined `WAIT` off until one keeps up again.
    fn note_replicas_in_sync(
        &self,
        value: &Value,
        acknowledged: Option<&Result<i64, String>>,
        count: usize,
        replicas: u32,
    ) {
        let missing = answers_of(value, count)
            .any(|answer| matches!(code_of(answer), Some(code::REPLICAS_MISSING)));
        let short = matches!(acknowledged, Some(Ok(n)) if *n < i64::from(replicas))
            || matches!(acknowledged, Some(Err(_)));
        let kept_up = matches!(acknowledged, Some(Ok(n)) if *n >= i64::from(replicas));
        if missing || short {
            self.replicas_in_sync.store(false, Ordering::Relaxed);
        } else if kept_up {
            self.replicas_in_sync.store(true, Ordering::Relaxed);
        }
    }
}

/// The answers of each of `calls` from the reply to their one script call.
fn split_reply(
    reply: Reply<(Value, Option<Result<i64, String>>)>,
    calls: &[Call],
    replicas: u32,
) -> Vec<Reply<Answer>> {
    let count = calls.len();
    let needed = |call: &Call| if call.script.votes() { replicas } else { 0 };
    match reply {
        Reply::Answer((value, acknowledged)) if count == 1 => {
            vec![Reply::Answer(Answer {
                value,
                acknowledged,
                acks_needed: needed(&calls[0]),
            })]
        }
        Reply::Answer((Value::Array(values), acknowledged)) if values.len() == count => {
            values
                .into_iter()
                .zip(calls)
                .map(|(value, call)| match value {
                    // batch.lua answers a call that raised an error with its text.
                    Value::String(message) => Reply::Failed(message.to_string()),
                    Value::Bytes(message) => {
                        Reply::Failed(String::from_utf8_lossy(&message).into_owned())
                    }
                    value => Reply::Answer(Answer {
                        value,
                        acknowledged: acknowledged.clone(),
                        acks_needed: needed(call),
                    }),
                })
                .collect()
        }
        Reply::Answer((other, _)) => {
            let message = format!("unexpected batch reply for {count} calls: {other:?}");
            vec![Reply::Failed(message); count]
        }
        Reply::Timeout => vec![Reply::Timeout; count],
        Reply::Failed(message) => vec![Reply::Failed(message); count],
        Reply::NotSent(reason) => vec![Reply::NotSent(reason); count],
    }
}

/// Whether two readings of a client's connections (`CLIENT ID` per server, as fred read it
/// at connect) name the same one. An empty reading names none: the identity is unknown.
pub(crate) fn same_connection(
    before: &std::collections::HashMap<fred::types::config::Server, i64>,
    after: &std::collections::HashMap<fred::types::config::Server, i64>,
) -> bool {
    !before.is_empty() && before == after
}

impl Lane {
    /// `WAIT replicas` for the writes this client made so far, within the ack timeout.
    async fn wait_for(&self, replicas: u32) -> Result<i64, String> {
        let timeout_ms = i64::try_from(self.ack_timeout_ms).unwrap_or(i64::MAX);
        Box::pin(self.timed.wait::<i64>(i64::from(replicas), timeout_ms))
            .await
            .map_err(|error| error.to_string())
    }
}

impl Call {
    /// This call as sent to a master in acknowledged mode: a vote carries, as its last
    /// argument, the replicas its client waits for.
    fn waiting_for(&self, replicas: u32) -> Call {
        if !self.script.votes() {
            return self.clone();
        }
        let mut args = self.args.to_vec();
        args.push(Value::from(i64::from(replicas)));
        Call {
            args: args.into(),
            ..self.clone()
        }
    }
}

/// The answers in a script reply for `count` calls: the reply itself for one call.
fn answers_of(value: &Value, count: usize) -> Box<dyn Iterator<Item = &Value> + '_> {
    match value {
        Value::Array(values) if count > 1 => Box::new(values.iter()),
        value => Box::new(std::iter::once(value)),
    }
}

/// The code a voting script answered with (its reply's first element).
fn code_of(answer: &Value) -> Option<u64> {
    match answer {
        Value::Array(values) => match values.first() {
            Some(Value::Integer(code)) => u64::try_from(*code).ok(),
            _ => None,
        },
        _ => None,
    }
}

/// Whether a vote of the reply was granted (or renewed): only then is there something for
/// the replicas to acknowledge.
fn granted_any(value: &Value, count: usize) -> bool {
    answers_of(value, count).any(|answer| code_of(answer) == Some(code::GRANTED))
}

/// The replicas a master in acknowledged mode named when it refused a call that waited for
/// another number of them.
fn acks_required(answer: &Reply<Answer>) -> Option<u32> {
    let Reply::Answer(Answer {
        value: Value::Array(values),
        ..
    }) = answer
    else {
        return None;
    };
    match values.as_slice() {
        [Value::Integer(code), Value::Integer(replicas)]
            if u64::try_from(*code).ok() == Some(code::ACKS_REQUIRED) =>
        {
            u32::try_from(*replicas).ok()
        }
        _ => None,
    }
}

/// How long `call` waits on an idle master for others: a renewal waits a hundredth of its
/// TTL, at most [`MAX_LINGER`] and a quarter of the call timeout, so even the shortest lease
/// keeps nearly all its validity and the send keeps most of its timeout (the caller's timeout
/// runs from when it queued); anything else goes at once. The renewal's caller counts its
/// validity from before it queued, so the wait only makes the lease look shorter to its
/// holder, never longer.
fn linger(call: &Call, call_timeout: Duration) -> Option<Duration> {
    if call.script != LockScript::Extend {
        return None;
    }
    let ttl_ms = match call.args.get(1) {
        Some(Value::Integer(ms)) => u64::try_from(*ms).ok()?,
        _ => return None,
    };
    let linger = Duration::from_millis(ttl_ms / 100)
        .min(MAX_LINGER)
        .min(call_timeout / 4);
    (linger >= Duration::from_millis(1)).then_some(linger)
}

/// The keys and arguments of `lua/batch.lua` for `calls`.
fn pack(calls: &[Call], batching: Batching) -> (Vec<Key>, Vec<Value>) {
    let key_count = calls.iter().map(|call| call.keys.len()).sum();
    let arg_count = calls.iter().map(|call| call.args.len() + 3).sum::<usize>() + 2;
    let mut keys = Vec::new();
    let mut args = Vec::new();
    let form = match batching {
        Batching::Declared => {
            keys.reserve(key_count);
            args.reserve(arg_count);
            "declared"
        }
        Batching::Undeclared => {
            args.reserve(arg_count + key_count);
            "undeclared"
        }
    };
    args.push(Value::from(calls.len() as i64));
    args.push(Value::from(form));
    for call in calls {
        args.push(Value::from(call.script.name()));
        args.push(Value::from(call.keys.len() as i64));
        args.push(Value::from(call.args.len() as i64));
        match batching {
            Batching::Declared => keys.extend(call.keys.iter().cloned()),
            Batching::Undeclared => {
                args.extend(call.keys.iter().map(|key| Value::from(key.clone())))
            }
        }
        args.extend(call.args.iter().cloned());
    }
    (keys, args)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn extend(ttl_ms: i64) -> Call {
        Call {
            script: LockScript::Extend,
            keys: vec!["l".into()].into(),
            args: vec!["t".into(), Value::from(ttl_ms)].into(),
            hash_slot: None,
        }
    }

    #[test]
    fn a_renewal_lingers_a_hundredth_of_its_ttl_up_to_the_cap_and_nothing_else_lingers() {
        let timeout = Duration::from_millis(100);
        assert_eq!(
            linger(&extend(200), timeout),
            Some(Duration::from_millis(2))
        );
        assert_eq!(linger(&extend(5_000), timeout), Some(MAX_LINGER));
        assert_eq!(linger(&extend(50), timeout), None);
        let release = Call {
            script: LockScript::Release,
            ..extend(5_000)
        };
        assert_eq!(linger(&release, timeout), None);
    }

    #[test]
    fn a_renewal_lingers_at_most_a_quarter_of_the_call_timeout() {
        assert_eq!(
            linger(&extend(5_000), Duration::from_millis(8)),
            Some(Duration::from_millis(2))
        );
        // A 3 ms call timeout would leave the wait under a millisecond: no wait at all.
        assert_eq!(linger(&extend(5_000), Duration::from_millis(3)), None);
    }

    fn acquire_and_release() -> [Call; 2] {
        let acquire = Call {
            script: LockScript::Acquire,
            keys: vec!["l".into(), "f".into(), "a".into()].into(),
            args: vec!["t".into(), Value::from(10_i64)].into(),
            hash_slot: None,
        };
        let release = Call {
            script: LockScript::Release,
            keys: vec!["l2".into()].into(),
            args: Vec::new().into(),
            hash_slot: None,
        };
        [acquire, release]
    }

    fn texts(keys: &[Key]) -> Vec<String> {
        keys.iter().map(|k| k.as_str_lossy().to_string()).collect()
    }

    #[test]
    fn pack_lays_out_what_batch_lua_reads() {
        let (keys, args) = pack(&acquire_and_release(), Batching::Declared);
        assert_eq!(texts(&keys), ["l", "f", "a", "l2"]);
        let expected: Vec<Value> = vec![
            Value::from(2_i64),
            Value::from("declared"),
            Value::from("acquire"),
            Value::from(3_i64),
            Value::from(2_i64),
            Value::from("t"),
            Value::from(10_i64),
            Value::from("release"),
            Value::from(1_i64),
            Value::from(0_i64),
        ];
        assert_eq!(args, expected);
    }

    #[test]
    fn an_undeclared_batch_carries_each_calls_keys_before_its_arguments() {
        let (keys, args) = pack(&acquire_and_release(), Batching::Undeclared);
        assert!(keys.is_empty());
        let expected: Vec<Value> = vec![
            Value::from(2_i64),
            Value::from("undeclared"),
            Value::from("acquire"),
            Value::from(3_i64),
            Value::from(2_i64),
            Value::from(Key::from("l")),
            Value::from(Key::from("f")),
            Value::from(Key::from("a")),
            Value::from("t"),
            Value::from(10_i64),
            Value::from("release"),
            Value::from(1_i64),
            Value::from(0_i64),
            Value::from(Key::from("l2")),
        ];
        assert_eq!(args, expected);
    }
}
