//! The protocol as a stateright [`Model`]: masters, clients, the network between them, the
//! faults, and a fenced store. See the top of `tests/model/main.rs` for what it covers and why its
//! bounds suffice.
//!
//! Every action names, in a comment, the script or Rust function it stands for. Numbers the
//! model shares with the code come from the code: the reply codes (`protocol::code`), the
//! majority (`Majority::of`), the policy's quarantine and its adoption (`Policy`).

use std::fmt::Write as _;

use quorumlock::Majority;
use quorumlock::protocol::{Policy, code};
use stateright::{Model, Property};

/// Groups the state has room for (a model uses 3; `Config::majority` also serves 5).
pub const MAX_GROUPS: usize = 3;
/// Clients the state has room for.
pub const MAX_CLIENTS: usize = 2;
/// Rounds one attempt may spend raising its proposal above a group's fence: the engine's
/// `FENCE_ROUNDS` (src/engine/locks.rs; `pub(crate)`, so repeated here).
pub const FENCE_ROUNDS: u8 = 3;

/// Time in ticks. One tick stands for any span; only the order of events and whole TTLs
/// matter.
pub type Tick = u8;
/// A fencing token (a fence proposal once granted).
pub type Fence = u8;
/// A lock token: which attempt (or, in the old design, which acquire) wrote a lock.
pub type Token = u8;

/// How long a master with a new history sits out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Quarantine {
    /// The design: the master's own policy, `Policy::quarantine_ms` (max TTL + write window).
    Policy,
    /// Broken: half of it, shorter than the longest TTL.
    Half,
    /// The old design: the first client that meets the new history decides, with its own
    /// configured max TTL (the acquire script's old `quarantine_ms` argument); no policy.
    ClientMaxTtl,
}

/// The acquire script's fence check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FenceCheck {
    /// The design: grant only when the stored fence is below the proposal.
    Below,
    /// Broken: at or below.
    AtOrBelow,
}

/// Which lock token an attempt carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tokens {
    /// The design: a fresh token for every attempt.
    PerAttempt,
    /// The old design: one token for every attempt of an acquire.
    PerAcquire,
}

/// What the client's `WAIT` after a vote in acknowledged mode needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Wait {
    /// The design: every replica the policy names (`WAIT R` answers R).
    Every,
    /// Broken: one replica, whatever the policy names.
    One,
}

/// What a promoted replica in acknowledged mode does at its first vote.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Takeover {
    /// The design (`takeover` in lua/admission.lua): it takes over the record it holds when
    /// the record's history is the one it replicated (`master_replid2`), and votes when its
    /// old master would have; any other new history sits out the quarantine.
    Record,
    /// Broken: a promoted replica votes at once, whatever record it holds.
    AtOnce,
}

/// A lock policy in ticks (the code's [`Policy`] in ms).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pol {
    pub max_ttl: Tick,
    pub write_window: Tick,
    /// Acknowledged mode when above 0: the replicas every vote must reach (`acked_replicas`).
    pub acked: u8,
}

impl Pol {
    pub const fn ttl(max_ttl: Tick) -> Pol {
        Pol {
            max_ttl,
            write_window: 0,
            acked: 0,
        }
    }

    /// A policy in acknowledged mode with `replicas` replicas.
    pub const fn acked(max_ttl: Tick, replicas: u8) -> Pol {
        Pol {
            max_ttl,
            write_window: 0,
            acked: replicas,
        }
    }

    pub fn policy(self) -> Policy {
        Policy {
            max_ttl_ms: u64::from(self.max_ttl),
            write_window_ms: u64::from(self.write_window),
            acked_replicas: u32::from(self.acked),
        }
    }

    pub fn from_policy(policy: Policy) -> Pol {
        Pol {
            max_ttl: tick(policy.max_ttl_ms),
            write_window: tick(policy.write_window_ms),
            acked: u8::try_from(policy.acked_replicas).unwrap_or(u8::MAX),
        }
    }

    /// Each field the larger of the two, as admit.lua raises a policy (`Policy::merge`).
    pub fn merge(self, other: Pol) -> Pol {
        Pol::from_policy(self.policy().merge(other.policy()))
    }
}

fn tick(ms: u64) -> Tick {
    Tick::try_from(ms).unwrap_or(Tick::MAX)
}

/// What the model is made of, and which mechanisms are on.
#[derive(Clone, Debug)]
pub struct Config {
    pub name: &'static str,
    pub groups: usize,
    pub clients: usize,
    /// Each client's lease TTL.
    pub ttl: [Tick; MAX_CLIENTS],
    /// Each client's configured max TTL: only the old design's client-supplied quarantine
    /// reads it.
    pub client_max_ttl: [Tick; MAX_CLIENTS],
    /// Each client's wall-clock offset (skew), which its fence proposals follow.
    pub offset: [Tick; MAX_CLIENTS],
    /// Each master's policy at the start (all masters start admitted, as after bootstrap).
    pub policy: [Option<Pol>; MAX_GROUPS],
    /// The drift the client subtracts from the TTL: `ttl * drift_factor + 2 ms`, in ticks.
    pub drift: Tick,
    /// Time runs from 0 to this tick.
    pub max_tick: Tick,
    /// Attempts each client may make in all (each acquire retries until they run out).
    pub attempts: [u8; MAX_CLIENTS],
    /// Rounds per attempt: [`FENCE_ROUNDS`] in the design; fewer keeps a run small.
    pub rounds: u8,
    /// Renewals each lease of each client may try.
    pub extends: [u8; MAX_CLIENTS],
    /// Data faults in all (promotion, empty restart, early expiry), each of those enabled.
    pub faults: u8,
    /// Sentinel promotions. While a master's replica has every write, a promotion loses at
    /// most the write the master made last (`Action::DeliverLost`). With `lagging_replica`,
    /// every write may stay behind until `Action::Replicate`, and a promotion loses all of
    /// them.
    pub promotions: bool,
    pub lagging_replica: bool,
    pub restarts: bool,
    pub early_expiry: bool,
    /// Deliveries out of send order on one client's connection to one group (a command
    /// buffered on a replaced connection applied after a newer one).
    pub reorders: u8,
    /// Operator policy raises (`lua/admit.lua` with a larger policy, delay 0), to this policy.
    pub raise_to: Option<Pol>,
    pub raises: u8,
    /// A raise counts only once the replica has it (`WAIT` after admit.lua). Otherwise the
    /// replica may lag from the raise on, until `Action::Replicate`.
    pub raise_replicated: bool,
    /// A raise on a master whose marker is not its current history's (a promoted replica no
    /// acquire has met yet) admits that history, as lua/admit.lua does with delay 0
    /// (`vote_from = now`). Otherwise the raise leaves such a marker alone (an operator who
    /// raises only masters already admitted). On a master whose marker is its current
    /// history's, a raise is admit.lua either way: `vote_from = max(now, vote_from)`, `since`
    /// kept.
    pub raise_admits: bool,
    /// Such an admission of a history the master had not met, on a master that held a
    /// policy, starts its quarantine now (`since = now`), as at its first vote: admit.lua
    /// without `--force`. Otherwise it votes at once, with no `since` (the old admit.lua).
    pub admit_starts_quarantine: bool,
    /// After a promotion that lost a raise, the operator applies the raise again to every
    /// master, before the promoted master's quarantine under the lost policy ends
    /// (`Action::Reapply`; time does not pass a tick at which it would vote first).
    pub raise_reapplied: bool,
    // The mechanisms; each broken variant turns one off.
    pub quarantine: Quarantine,
    /// The marker's `since` (lua/admission.lua): a quarantine runs from when the master met
    /// its history under the policy in force now, so a raise during it (or after it) lengthens
    /// it. Without it (the old rule) the quarantine is fixed when it starts.
    pub raise_lengthens: bool,
    pub fence_check: FenceCheck,
    pub rollback: bool,
    /// Answers with a policy an adoption needs: `Majority::of(groups).needed` in the design.
    pub adopt_needed: usize,
    pub tokens: Tokens,
    /// Acknowledged mode: the replicas modelled for each group, as many as its policy's
    /// `acked` names. A group with none modelled has replicas that keep up and never fail, so
    /// its `WAIT` always succeeds. In a configuration that models replicas, faults strike
    /// only the groups that have them.
    pub replicas: [u8; MAX_GROUPS],
    pub wait: Wait,
    /// Broken when on: the client counts a grant whose `WAIT` failed.
    pub count_unacked: bool,
    pub takeover: Takeover,
}

impl Config {
    /// The design, with no faults: two clients, one attempt each, contending over three
    /// groups for two ticks; leases of two ticks; the second client's clock one tick ahead.
    pub fn design(name: &'static str) -> Config {
        Config {
            name,
            groups: 3,
            clients: 2,
            ttl: [2, 2],
            client_max_ttl: [2, 2],
            offset: [0, 1],
            policy: [Some(Pol::ttl(2)); MAX_GROUPS],
            drift: 0,
            max_tick: 2,
            attempts: [1, 1],
            rounds: FENCE_ROUNDS,
            extends: [0, 0],
            faults: 0,
            promotions: false,
            lagging_replica: false,
            restarts: false,
            early_expiry: false,
            reorders: 0,
            raise_to: None,
            raises: 0,
            raise_replicated: false,
            raise_admits: true,
            admit_starts_quarantine: true,
            raise_reapplied: false,
            quarantine: Quarantine::Policy,
            raise_lengthens: true,
            fence_check: FenceCheck::Below,
            rollback: true,
            adopt_needed: Majority::of(3).needed,
            tokens: Tokens::PerAttempt,
            replicas: [0; MAX_GROUPS],
            wait: Wait::Every,
            count_unacked: false,
            takeover: Takeover::Record,
        }
    }

    /// Whether any group's replicas are modelled (acknowledged mode).
    pub fn models_replicas(&self) -> bool {
        self.replicas[..self.groups].iter().any(|&r| r > 0)
    }

    /// Whether faults may strike master `m`: every master, or in a configuration that models
    /// replicas, those whose replicas it models.
    fn struck(&self, m: &Master) -> bool {
        !self.models_replicas() || m.modelled()
    }

    /// Client `c`'s wall clock at `now` (it starts at 1: a wall clock is never 0).
    pub fn clock(&self, c: usize, now: Tick) -> Tick {
        now + 1 + self.offset[c]
    }

    pub fn majority(&self) -> Majority {
        Majority::of(self.groups)
    }

    /// How long a lease is valid after its attempt started: the engine's `lifetime`
    /// (`ttl − drift`, src/engine/locks.rs).
    pub fn lifetime(&self, client: usize) -> Tick {
        self.ttl[client].saturating_sub(self.drift)
    }

    /// A master's quarantine under `pol` (admission.lua, adopt.lua).
    fn quarantine_of(&self, pol: Pol) -> Tick {
        let full = tick(pol.policy().quarantine_ms());
        match self.quarantine {
            Quarantine::Policy | Quarantine::ClientMaxTtl => full,
            Quarantine::Half => full / 2,
        }
    }

    /// Whether admission.lua and adopt.lua write `since`: the design's quarantine, counted
    /// from the master's policy, with the rule on. (The old client-supplied quarantine had no
    /// policy to count from.)
    fn writes_since(&self) -> bool {
        self.raise_lengthens && self.quarantine != Quarantine::ClientMaxTtl
    }

    /// When a master with `marker` (of its current history) votes under `policy`
    /// (lua/admission.lua): from `vote_from`, and with `since`, not before the quarantine of
    /// the policy in force now, counted from `since`.
    fn votes_from(&self, marker: Marker, policy: Option<Pol>) -> Tick {
        match (marker.since, policy) {
            (Some(since), Some(pol)) if self.raise_lengthens => marker
                .vote_from
                .max(since.saturating_add(self.quarantine_of(pol))),
            _ => marker.vote_from,
        }
    }

    fn data_faults(&self) -> bool {
        self.promotions || self.restarts || self.early_expiry
    }

    pub fn model(self) -> LockModel {
        LockModel { cfg: self }
    }
}

/// A lock on one master: `<prefix>:{R}:lock` with its PX expiry (absolute, master clock).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Lock {
    pub token: Token,
    pub expires_at: Tick,
}

/// What a master holds and replicates: the lock, the fence, the policy, and in acknowledged
/// mode the record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Data {
    pub lock: Option<Lock>,
    pub fence: Fence,
    pub policy: Option<Pol>,
    /// `<prefix>:policy:acked`: a replicated copy of the marker, written once per history
    /// (`keep_record` in lua/admission.lua).
    pub record: Option<Marker>,
}

/// `<prefix>:admission`, written without replication.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Marker {
    pub history: u8,
    /// When the master met this history (admission.lua, adopt.lua); none after an operator
    /// admitted a history the master had not met (admit.lua), and none once no policy a
    /// raise can still bring makes it matter (the canonical form).
    pub since: Option<Tick>,
    /// 0 once past, or once `since` decides alone (the canonical form).
    pub vote_from: Tick,
}

impl Marker {
    /// A master that votes, by every rule, at any policy: what bootstrap and a quarantine
    /// that ended leave.
    pub const fn voting(history: u8) -> Marker {
        Marker {
            history,
            since: None,
            vote_from: 0,
        }
    }
}

/// Replicas a group has at most, in acknowledged mode.
pub const MAX_REPLICAS: usize = 2;

/// How one replica of a group in acknowledged mode stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Link {
    /// No replica modelled here.
    #[default]
    Absent,
    /// Synced with the master (`state=online`); it may lag behind the master's writes.
    Online,
    /// Not synced with the master it follows yet (after a failover, a replica of the old
    /// master): not online until it rejoins.
    Detached,
    /// The old master after a failover: cut off from its replicas, it still answers the
    /// clients that reach it until it rejoins as a replica. No `WAIT` on it succeeds.
    Deposed,
}

/// One replica of a group in acknowledged mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Replica {
    pub link: Link,
    /// Online: what it holds when behind its master (a prefix of the master's writes),
    /// `None` when it has every write. Deposed: the old master's data.
    pub data: Option<Data>,
}

/// The history and marker of a deposed master (its data is in its replica slot).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Deposed {
    pub history: u8,
    pub marker: Option<Marker>,
    pub replid2: Option<u8>,
}

/// One group's master.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Master {
    pub data: Data,
    /// What the replica has when it is behind its master (a prefix of the master's
    /// writes); `None` when it has every write but maybe the last.
    pub replica: Option<Data>,
    pub marker: Option<Marker>,
    /// `master_replid`: changes on promotion and on an empty restart.
    pub history: u8,
    /// Its promotion lost a raise, which the operator has not applied again yet
    /// (`raise_reapplied`).
    pub lost_raise: bool,
    /// Acknowledged mode: the group's replicas, in a canonical order (all `Absent` when
    /// none is modelled; then `replica` above is the one replica of the other modes).
    pub replicas: [Replica; MAX_REPLICAS],
    /// `master_replid2`: the history a promoted replica replicated before its promotion.
    pub replid2: Option<u8>,
    pub deposed: Option<Deposed>,
    /// Ghost: a promoted replica that took over its record and voted at once would
    /// otherwise have sat out until this tick (0 once past).
    pub at_once_until: Tick,
    /// Ghost: it granted a lock before then.
    pub granted_at_once: bool,
}

impl Master {
    /// Whether the model has this group's replicas (acknowledged mode).
    pub fn modelled(&self) -> bool {
        self.replicas.iter().any(|r| r.link != Link::Absent)
    }

    /// The replicas its policy names (0: not in acknowledged mode).
    fn acked(&self) -> u8 {
        self.data.policy.map_or(0, |p| p.acked)
    }

    /// Whether it has exactly the replicas its policy names, each online (`vote_refusal`).
    /// Replicas not modelled are always there.
    fn replicas_ready(&self) -> bool {
        !self.modelled()
            || self
                .replicas
                .iter()
                .filter(|r| r.link == Link::Online)
                .count()
                == usize::from(self.acked())
    }

    /// What replica slot `i` holds: its own data when behind or deposed, else the master's.
    fn held_by(&self, i: usize) -> Data {
        self.replicas[i].data.unwrap_or(self.data)
    }

    /// A master as the scripts see the deposed one: its data, marker and history, no
    /// replicas modelled (it has not noticed they are gone).
    fn deposed_master(&self) -> Option<(usize, Master)> {
        let deposed = self.deposed?;
        let slot = self.replicas.iter().position(|r| r.link == Link::Deposed)?;
        let master = Master {
            data: self.replicas[slot].data?,
            marker: deposed.marker,
            history: deposed.history,
            replid2: deposed.replid2,
            ..Master::default()
        };
        Some((slot, master))
    }
}

/// A request on its way from a client to a group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Msg {
    /// lua/acquire.lua, sent by `Engine::attempt`.
    Acquire {
        client: u8,
        token: Token,
        ttl: Tick,
        proposal: Fence,
        tag: u8,
    },
    /// lua/extend.lua, sent by `Engine::extend`.
    Extend {
        client: u8,
        token: Token,
        ttl: Tick,
        tag: u8,
    },
    /// lua/release.lua, sent by `Engine::release` and by `Engine::roll_back`.
    Release { client: u8, token: Token },
}

impl Msg {
    fn client(self) -> u8 {
        match self {
            Msg::Acquire { client, .. }
            | Msg::Extend { client, .. }
            | Msg::Release { client, .. } => client,
        }
    }
}

/// Requests in flight to one group, in send order: a fixed array, so a state copies without
/// allocating. Compared and hashed by the requests in it only.
#[derive(Clone, Copy, Debug)]
pub struct Queue {
    len: u8,
    items: [Msg; QUEUE],
}

/// Room for requests in flight to one group.
pub const QUEUE: usize = 12;

impl Default for Queue {
    fn default() -> Queue {
        Queue {
            len: 0,
            items: [Msg::Release {
                client: 0,
                token: 0,
            }; QUEUE],
        }
    }
}

impl PartialEq for Queue {
    fn eq(&self, other: &Queue) -> bool {
        **self == **other
    }
}

impl Eq for Queue {}

impl std::hash::Hash for Queue {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (**self).hash(state);
    }
}

impl PartialOrd for Queue {
    fn partial_cmp(&self, other: &Queue) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Queue {
    fn cmp(&self, other: &Queue) -> std::cmp::Ordering {
        (**self).cmp(&**other)
    }
}

impl std::ops::Deref for Queue {
    type Target = [Msg];
    fn deref(&self) -> &[Msg] {
        &self.items[..usize::from(self.len)]
    }
}

impl Queue {
    fn push(&mut self, msg: Msg) {
        assert!(
            usize::from(self.len) < QUEUE,
            "more than {QUEUE} requests in flight"
        );
        self.items[usize::from(self.len)] = msg;
        self.len += 1;
    }

    fn remove(&mut self, index: usize) -> Msg {
        let msg = self.items[index];
        let len = usize::from(self.len);
        self.items.copy_within(index + 1..len, index);
        self.len -= 1;
        self.items[len - 1] = Queue::default().items[0];
        msg
    }

    fn retain(&mut self, keep: impl Fn(&Msg) -> bool) {
        let mut index = 0;
        while index < usize::from(self.len) {
            if keep(&self.items[index]) {
                index += 1;
            } else {
                self.remove(index);
            }
        }
    }
}

/// One group's answer to the acquire or extend script, as the client recorded it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Answer {
    /// No answer yet; at the decision it counts as a timeout (or not awaited).
    Pending,
    Granted,
    Held,
    FenceAhead(Fence),
    Quarantined,
    NoPolicy,
    AbovePolicy,
    /// Acknowledged mode: the master does not have exactly its replicas online; nothing
    /// written.
    ReplicasMissing,
    /// Acknowledged mode: granted, but the `WAIT` after it failed (`acknowledged_vote` is an
    /// error, and the engine makes the vote `Reply::Failed`). The grant may stay.
    Unacked,
}

impl Answer {
    /// The script's reply code (`protocol::code`).
    pub fn code(self) -> Option<u64> {
        match self {
            Answer::Pending => None,
            Answer::Granted => Some(code::GRANTED),
            Answer::Held => Some(code::HELD),
            Answer::FenceAhead(_) => Some(code::FENCE_AHEAD),
            Answer::Quarantined => Some(code::QUARANTINED),
            Answer::NoPolicy => Some(code::NO_POLICY),
            Answer::AbovePolicy => Some(code::ABOVE_POLICY),
            Answer::ReplicasMissing => Some(code::REPLICAS_MISSING),
            Answer::Unacked => Some(code::GRANTED),
        }
    }

    /// A definite refusal: the group holds no grant of ours after answering it
    /// (`AcquireAnswer::refused`). A pending call may have been applied.
    fn refused(self) -> bool {
        !matches!(self, Answer::Pending | Answer::Granted | Answer::Unacked)
    }
}

/// One attempt of an acquire (`Engine::attempt`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Attempt {
    pub token: Token,
    /// Tells this round's replies from late replies to earlier rounds.
    pub tag: u8,
    pub started: Tick,
    pub round: u8,
    pub proposal: Fence,
    pub votes: [Answer; MAX_GROUPS],
    pub may_hold: [bool; MAX_GROUPS],
}

/// A lease the client believes it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Lease {
    pub token: Token,
    pub fence: Fence,
    pub valid_until: Tick,
    pub wrote: bool,
    pub extends_left: u8,
    /// Ghost: the lease's place in the order of grants (0 for the first lease granted).
    pub rank: u8,
}

/// A renewal in flight (`Engine::extend`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Renewal {
    pub tag: u8,
    pub started: Tick,
    pub votes: [Answer; MAX_GROUPS],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Between acquires.
    Idle,
    /// An attempt failed and was rolled back; the acquire retries (with this token in the
    /// old design).
    Retry {
        token: Token,
    },
    Trying(Attempt),
    Holding(Lease),
    Extending(Lease, Renewal),
    /// Out of attempts.
    Done,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Client {
    pub phase: Phase,
    /// `Fences`: the highest fence this client proposed or saw (src/engine/fence.rs).
    pub highest: Fence,
    pub attempts_left: u8,
    /// Ghost, at the start of the current acquire: the highest fence granted so far, and
    /// how many leases had been granted.
    pub call_floor: Fence,
    pub call_epoch: u8,
}

/// A store that checks fencing tokens: it takes a write whose token is at least the highest
/// it took.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Store {
    pub highest: Fence,
    /// Ghost: the most leases granted before the acquire of a writer the store took. A
    /// lease ranked below it was superseded by that writer.
    pub superseded_below: u8,
}

/// What the properties read beyond the protocol's own state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Ghost {
    /// Leases granted so far.
    pub epoch: u8,
    /// Fences of the leases granted so far (bit per fence).
    pub granted: u64,
    pub max_granted: Fence,
    /// A lease got a fence not above a lease granted before its acquire started, or a fence
    /// another lease has.
    pub fence_out_of_order: bool,
    /// The store took a write of a lease superseded by a writer it had taken.
    pub superseded_write_taken: bool,
    /// The store turned down a write made inside the lease's validity.
    pub valid_write_rejected: bool,
    /// The store turned down a write made after the lease's validity (a paused holder).
    pub late_write_rejected: bool,
    /// Something the "no leftovers" property does not cover happened: a reordered delivery,
    /// a promotion, a restart, an early expiry.
    pub disturbed: bool,
    pub adopted: bool,
    pub second_round: bool,
    pub extended: bool,
    pub rolled_back: bool,
    pub above_policy: bool,
    /// A raise moved a master's first vote later: a quarantine lengthened, or a master that
    /// voted put back out.
    pub lengthened: bool,
    /// An admission met a history the master had not met and started its quarantine.
    pub admission_quarantined: bool,
    /// A lease was granted with the vote of a promoted replica that took over its master's
    /// record and voted before a quarantine would have let it.
    pub promoted_voted: bool,
    /// An attempt had a majority of grants only with grants whose `WAIT` failed.
    pub unacked_not_counted: bool,
}

/// What one run of admit.lua did to a master's first vote.
#[derive(Clone, Copy, Debug, Default)]
struct AdmitEffect {
    /// It moved the vote later: a quarantine lengthened, or a master that voted put back out.
    lengthened: bool,
    /// It met a history the master had not met and started its quarantine (`since = now`).
    started_quarantine: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// Groups in use (the config's), for [`representative`].
    pub groups: u8,
    pub now: Tick,
    pub masters: [Master; MAX_GROUPS],
    /// Requests in flight to each group, in send order.
    pub net: [Queue; MAX_GROUPS],
    pub clients: [Client; MAX_CLIENTS],
    pub store: Store,
    pub faults_left: u8,
    pub reorders_left: u8,
    pub raises_left: u8,
    pub ghost: Ghost,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Time passes; every master expires the keys whose PX ran out.
    Tick,
    /// `Engine::acquire` starts an attempt (`Engine::attempt`): a token, a proposal
    /// (`Fences::propose`), the acquire script sent to every group.
    Begin(usize),
    /// Group `.0` runs request `.1` of its queue (acquire.lua, extend.lua or release.lua).
    Deliver(usize, usize),
    /// The client decides its round or renewal with the answers it has (`Engine::attempt`
    /// after `fan_out`, `Engine::extend`); a call not answered timed out or was not awaited.
    Decide(usize),
    /// The holder writes to the fenced store (at any time: a paused holder writes late).
    Write(usize),
    /// `Engine::release`: release.lua to every group.
    Release(usize),
    /// `Engine::extend`: extend.lua to every group.
    Extend(usize),
    /// `Engine::adopt_policies` (src/engine/admission.rs) for master `.0`, which has no
    /// policy: policy.lua on every group, `Policy::adopt` of the answers, then adopt.lua on
    /// the master. `.1` is the set of groups (a bit each) whose policy.lua answered.
    Adopt(usize, u8),
    /// Group `.0` runs request `.1`, and then Sentinel promotes its replica, which had every
    /// write but that one: the client got its answer, the write is gone, the history is new.
    DeliverLost(usize, usize),
    /// Sentinel promotes a replica that is behind its master (`lagging_replica`, or a raise
    /// not replicated yet): the writes it had not received are gone, the history is new.
    Promote(usize),
    /// A replica behind its master receives every write.
    Replicate(usize),
    /// The master restarts without its data: no lock, fence, policy or marker; new history.
    Restart(usize),
    /// The master's clock jumps: a live lock expires early.
    ExpireEarly(usize),
    /// An operator raises the master's policy (`Locks::admit`, lua/admit.lua, delay 0): the
    /// policy grows; a quarantine in progress keeps its `since`, so the larger policy
    /// lengthens it (and with `raise_admits`, a history the master had not met votes now).
    Raise(usize),
    /// The operator applies the raise again to every master after a promotion lost it
    /// (`raise_reapplied`): admit.lua, as `Raise`, on each.
    Reapply,
    /// Acknowledged mode: group `.0` runs request `.1`, a vote it grants, and the `WAIT`
    /// pipelined behind it succeeds: the replicas in the set `.2` (a bit each) receive every
    /// write. `WAIT` needs every replica (`Wait::Every`), or one (`Wait::One`).
    DeliverAcked(usize, usize, u8),
    /// The deposed master of group `.0` runs request `.1`, which the client sent before it
    /// learned of the failover. The `WAIT` after it never succeeds.
    DeliverDeposed(usize, usize),
    /// Replica `.1` of group `.0` receives every write of its master.
    Sync(usize, usize),
    /// Sentinel promotes replica `.1` of group `.0`, however far behind: the writes it had
    /// not received are gone, the history is new (`master_replid2` the old one), the old
    /// master is deposed, and the other replicas are detached until they sync with the new
    /// master.
    Failover(usize, usize),
    /// Replica `.1` of group `.0`, detached or the deposed master, syncs in full with the
    /// master and is online (Sentinel converts the old master, `quorumlock lab rejoin`).
    Rejoin(usize, usize),
}

pub struct LockModel {
    pub cfg: Config,
}

/// `Fences::propose`: above the clock and above every fence proposed or seen.
pub fn propose(highest: Fence, clock: Tick) -> Fence {
    highest.max(clock.saturating_sub(1)).saturating_add(1)
}

fn live(lock: Option<Lock>, now: Tick) -> Option<Lock> {
    lock.filter(|l| now < l.expires_at)
}

impl LockModel {
    fn token(&self, client: usize, attempt: u8) -> Token {
        1 + (client as u8) * 16 + attempt
    }

    fn attempt_no(&self, s: &State, c: usize) -> u8 {
        self.cfg.attempts[c] - s.clients[c].attempts_left
    }

    /// Canonical form: expired keys gone, past quarantines at 0, dead requests dropped,
    /// promotion can happen.
    fn normalize(&self, s: &mut State) {
        let now = s.now;
        let promotable = self.cfg.promotions && s.faults_left > 0;
        for m in s.masters.iter_mut() {
            if let Some(replica) = m.replica.as_mut() {
                replica.lock = live(replica.lock, now);
            }
            if !promotable {
                m.replica = None;
            }
        }
        // Whether a master may still change its history (promotion, restart).
        let changeable = (self.cfg.promotions || self.cfg.restarts) && s.faults_left > 0;
        // Whether an operator's raise may still come (a raise, or a raise applied again).
        let raisable = s.raises_left > 0 || s.masters.iter().any(|m| m.lost_raise);
        // Acknowledged mode: whether a replica may still be promoted.
        let failover = self.cfg.promotions && s.faults_left > 0;
        for m in s.masters.iter_mut().take(self.cfg.groups) {
            self.canonical_data(&mut m.data, now, raisable);
            if let Some(marker) = m.marker.as_mut() {
                self.canonical_marker(marker, m.data.policy, now, raisable);
            }
            if m.at_once_until <= now {
                m.at_once_until = 0;
            }
            let data = m.data;
            for replica in m.replicas.iter_mut() {
                match (replica.link, replica.data.as_mut()) {
                    (Link::Online, Some(held)) => {
                        self.canonical_data(held, now, raisable);
                        // What a replica holds matters once it is promoted, and only then.
                        if *held == data || !failover {
                            replica.data = None;
                        }
                    }
                    (Link::Deposed, Some(held)) => {
                        self.canonical_data(held, now, raisable);
                        if let Some(deposed) = m.deposed.as_mut()
                            && let Some(marker) = deposed.marker.as_mut()
                        {
                            self.canonical_marker(marker, held.policy, now, raisable);
                        }
                    }
                    _ => {}
                }
            }
            // Replicas are interchangeable.
            m.replicas.sort();
        }
        // A release that can delete nothing, now or later: the lock is not its token's, no
        // acquire with its token is on the way, and no promotion can bring one back.
        for g in 0..self.cfg.groups {
            let m = s.masters[g];
            let queue = &mut s.net[g];
            let snapshot = *queue;
            let acquiring = |t: Token| {
                snapshot
                    .iter()
                    .any(|msg| matches!(msg, Msg::Acquire { token, .. } if *token == t))
            };
            // A late acquire or extend (its client no longer waits for the answer) that can
            // change nothing, now or later: the master keeps its history and marker (no fault
            // can change them any more) and the script would refuse without a write (in
            // acknowledged mode, the record of this history is written; no deposed master
            // may run it).
            let settled = !changeable
                && m.marker.is_some_and(|k| k == Marker::voting(m.history))
                && (m.acked() == 0 || m.data.record.is_some_and(|r| r.history == m.history))
                && m.deposed.is_none();
            let clients = &s.clients;
            let ours = |token: Token| m.data.lock.is_some_and(|l| l.token == token);
            let holds = |data: Option<Data>, token: Token| {
                data.is_some_and(|d| d.lock.is_some_and(|l| l.token == token))
            };
            queue.retain(|msg| match *msg {
                Msg::Release { token, .. } => {
                    ours(token)
                        || holds(m.replica, token)
                        || m.replicas.iter().any(|r| holds(r.data, token))
                        || acquiring(token)
                }
                Msg::Acquire {
                    client,
                    token,
                    proposal,
                    tag,
                    ..
                } => {
                    let awaited = matches!(clients[usize::from(client)].phase,
                        Phase::Trying(a) if a.tag == tag);
                    let refused = m.data.policy.is_some()
                        && (m.data.fence >= proposal
                            && !(ours(token) && m.data.fence == proposal)
                            && self.cfg.fence_check == FenceCheck::Below);
                    awaited || !settled || !refused
                }
                Msg::Extend {
                    client, token, tag, ..
                } => {
                    let awaited = matches!(clients[usize::from(client)].phase,
                        Phase::Extending(l, r) if r.tag == tag && l.token == token);
                    awaited || !settled || ours(token) || acquiring(token)
                }
            });
        }
        // What no later step reads.
        for c in s.clients.iter_mut() {
            match c.phase {
                Phase::Done => {
                    c.highest = 0;
                    c.call_floor = 0;
                    c.call_epoch = 0;
                }
                Phase::Idle => {
                    c.call_floor = 0;
                    c.call_epoch = 0;
                }
                Phase::Retry { .. } if self.cfg.tokens == Tokens::PerAttempt => {
                    c.phase = Phase::Retry { token: 0 };
                }
                _ => {}
            }
        }
    }

    /// Canonical form of a marker, or a record, under `policy`: past times at 0.
    fn canonical_marker(
        &self,
        marker: &mut Marker,
        policy: Option<Pol>,
        now: Tick,
        raisable: bool,
    ) {
        if marker.vote_from <= now {
            marker.vote_from = 0;
        }
        if let Some(since) = marker.since {
            // The largest policy this master may still come to hold: only a raise grows
            // it under the same history (a promotion or restart writes a new marker).
            let reach = match (policy, self.cfg.raise_to) {
                (Some(pol), Some(to)) if raisable => Some(pol.merge(to)),
                (pol, _) => pol,
            };
            let longest = reach.map_or(0, |pol| self.cfg.quarantine_of(pol));
            if since.saturating_add(longest) <= now {
                // No policy it may come to hold keeps it out any more.
                marker.since = None;
            } else if let Some(pol) = policy
                && marker.vote_from <= since.saturating_add(self.cfg.quarantine_of(pol))
            {
                // `since` decides alone, now and under any larger policy.
                marker.vote_from = 0;
            }
        }
    }

    /// Canonical form of what a master or a replica holds: expired keys gone, the record's
    /// past times at 0.
    fn canonical_data(&self, data: &mut Data, now: Tick, raisable: bool) {
        data.lock = live(data.lock, now);
        if let Some(record) = data.record.as_mut() {
            self.canonical_marker(record, data.policy, now, raisable);
        }
    }

    /// The admission prologue (lua/admission.lua) and the policy check of acquire.lua and
    /// extend.lua. `Err` is the refusal.
    fn admission(&self, m: &mut Master, now: Tick, ttl: Tick, client: usize) -> Result<(), Answer> {
        let (quarantine, max_ttl) = match self.cfg.quarantine {
            Quarantine::ClientMaxTtl => (self.cfg.client_max_ttl[client], None),
            Quarantine::Policy | Quarantine::Half => {
                let Some(pol) = m.data.policy else {
                    return Err(Answer::NoPolicy);
                };
                (self.cfg.quarantine_of(pol), Some(pol.max_ttl))
            }
        };
        let met = m.marker.is_none_or(|k| k.history != m.history);
        let left = match m.marker {
            Some(marker) if !met => self
                .cfg
                .votes_from(marker, m.data.policy)
                .saturating_sub(now),
            _ => match self.takeover(m, now, quarantine) {
                Some(left) => left,
                None => {
                    m.marker = Some(Marker {
                        history: m.history,
                        since: self.cfg.writes_since().then_some(now),
                        vote_from: now.saturating_add(quarantine),
                    });
                    quarantine
                }
            },
        };
        if m.acked() > 0 {
            Self::keep_record(m, now, met);
        }
        if left > 0 {
            return Err(Answer::Quarantined);
        }
        // vote_refusal: every call declares the policy's replicas (a client with a stale idea
        // of the mode is refused and sends again, which adds nothing here).
        if m.acked() > 0 && !m.replicas_ready() {
            return Err(Answer::ReplicasMissing);
        }
        match max_ttl {
            Some(max_ttl) if ttl > max_ttl => Err(Answer::AbovePolicy),
            _ => Ok(()),
        }
    }

    /// `takeover` in lua/admission.lua, for a master in acknowledged mode that meets a new
    /// history: a promoted replica whose record is of the history it replicated takes the
    /// record over as its marker. Answers how long it still sits out, or `None` when it sits
    /// out the quarantine.
    fn takeover(&self, m: &mut Master, now: Tick, quarantine: Tick) -> Option<Tick> {
        if m.acked() == 0 {
            return None;
        }
        let marker = match self.cfg.takeover {
            Takeover::Record => {
                let record = m.data.record?;
                if Some(record.history) != m.replid2 {
                    return None;
                }
                Marker {
                    history: m.history,
                    ..record
                }
            }
            Takeover::AtOnce => {
                m.replid2?;
                Marker::voting(m.history)
            }
        };
        m.marker = Some(marker);
        let left = self
            .cfg
            .votes_from(marker, m.data.policy)
            .saturating_sub(now);
        if left == 0 {
            m.at_once_until = now.saturating_add(quarantine);
        }
        Some(left)
    }

    /// `keep_record` in lua/admission.lua: the record of this history, written once and
    /// replicated. A history met in this call copies the new marker; one met earlier (an
    /// adoption) gets a record that sits out from now.
    fn keep_record(m: &mut Master, now: Tick, met: bool) {
        if m.data.record.is_some_and(|r| r.history == m.history) {
            return;
        }
        m.data.record = match m.marker {
            Some(marker) if met => Some(marker),
            _ => Some(Marker {
                history: m.history,
                since: Some(now),
                vote_from: now,
            }),
        };
    }

    /// lua/acquire.lua on one master.
    fn acquire_script(
        &self,
        m: &mut Master,
        now: Tick,
        client: usize,
        token: Token,
        ttl: Tick,
        proposal: Fence,
    ) -> Answer {
        if let Err(refused) = self.admission(m, now, ttl, client) {
            return refused;
        }
        let answer = self.grant(m, now, token, ttl, proposal);
        if answer == Answer::Granted && now < m.at_once_until {
            m.granted_at_once = true;
        }
        answer
    }

    /// The grant of lua/acquire.lua, after its admission.
    fn grant(&self, m: &mut Master, now: Tick, token: Token, ttl: Tick, proposal: Fence) -> Answer {
        let lock = live(m.data.lock, now);
        let below = match self.cfg.fence_check {
            FenceCheck::Below => m.data.fence < proposal,
            FenceCheck::AtOrBelow => m.data.fence <= proposal,
        };
        let grant = Lock {
            token,
            expires_at: now.saturating_add(ttl),
        };
        if below {
            match lock {
                // SET NX PX, then the fence.
                None => {
                    m.data.lock = Some(grant);
                    m.data.fence = proposal;
                    Answer::Granted
                }
                // Ours from an earlier round: the new fence.
                Some(l) if l.token == token => {
                    m.data.lock = Some(grant);
                    m.data.fence = proposal;
                    Answer::Granted
                }
                Some(_) => Answer::Held,
            }
        } else {
            match lock {
                Some(l) if l.token != token => Answer::Held,
                // A repeat of this very grant.
                Some(_) if m.data.fence == proposal => {
                    m.data.lock = Some(grant);
                    Answer::Granted
                }
                _ => Answer::FenceAhead(m.data.fence),
            }
        }
    }

    /// lua/extend.lua on one master.
    fn extend_script(
        &self,
        m: &mut Master,
        now: Tick,
        client: usize,
        token: Token,
        ttl: Tick,
    ) -> Answer {
        if let Err(refused) = self.admission(m, now, ttl, client) {
            return refused;
        }
        match live(m.data.lock, now) {
            Some(l) if l.token == token => {
                m.data.lock = Some(Lock {
                    token,
                    expires_at: now.saturating_add(ttl),
                });
                Answer::Granted
            }
            _ => Answer::Held,
        }
    }

    /// lua/release.lua on one master: compare-and-delete, the fence stays.
    fn release_script(m: &mut Master, now: Tick, token: Token) -> bool {
        match live(m.data.lock, now) {
            Some(l) if l.token == token => {
                m.data.lock = None;
                true
            }
            _ => false,
        }
    }

    /// lua/admit.lua on one master with a policy, delay 0: the policy grows to at least `to`;
    /// the marker of the current history keeps its `since` and votes from `max(now,
    /// vote_from)`; another history's is admitted with `since = now`, or with no `since`
    /// without `admit_starts_quarantine` (with `raise_admits`; otherwise left alone).
    fn admit_script(&self, m: &mut Master, now: Tick, to: Pol) -> AdmitEffect {
        let mut effect = AdmitEffect::default();
        let Some(was) = m.data.policy else {
            return effect;
        };
        let raised = was.merge(to);
        m.data.policy = Some(raised);
        match m.marker.as_mut() {
            Some(marker) if marker.history == m.history => {
                let before = self.cfg.votes_from(*marker, Some(was)).max(now);
                marker.vote_from = marker.vote_from.max(now);
                effect.lengthened = self.cfg.votes_from(*marker, Some(raised)) > before;
            }
            _ if self.cfg.raise_admits => {
                m.marker = Some(Marker {
                    history: m.history,
                    since: self.cfg.admit_starts_quarantine.then_some(now),
                    vote_from: now,
                });
                effect.started_quarantine = self.cfg.admit_starts_quarantine;
            }
            _ => {}
        }
        effect
    }

    /// Whether admit.lua with the raised policy changes master `m`: it grows its policy, or
    /// admits a history the master had not met (with `raise_admits`). On a master already at
    /// the raised policy whose marker is its current history's, it writes nothing that
    /// matters (`vote_from = max(now, vote_from)`).
    fn raise_changes(&self, m: &Master) -> bool {
        let (Some(to), Some(pol)) = (self.cfg.raise_to, m.data.policy) else {
            return false;
        };
        pol.merge(to) != pol
            || (self.cfg.raise_admits && m.marker.is_none_or(|k| k.history != m.history))
    }

    /// A master whose promotion lost a raise would vote at the next tick: the operator must
    /// have applied the raise again before time passes it (`raise_reapplied`).
    fn reapply_due(&self, s: &State) -> bool {
        s.masters[..self.cfg.groups].iter().any(|m| {
            m.lost_raise
                && m.marker.is_some_and(|marker| {
                    marker.history == m.history
                        && self.cfg.votes_from(marker, m.data.policy) <= s.now + 1
                })
        })
    }

    /// Whether request `index` of group `g`'s queue may be delivered now, and whether that
    /// takes a reorder.
    fn deliverable(&self, s: &State, g: usize, index: usize) -> Option<bool> {
        let queue = &s.net[g];
        let client = queue[index].client();
        let overtakes = queue[..index].iter().any(|m| m.client() == client);
        if !overtakes {
            Some(false)
        } else if s.reorders_left > 0 {
            Some(true)
        } else {
            None
        }
    }

    /// Acknowledged mode: the replicas of group `g` that had every write of its master miss
    /// what it wrote since `last`.
    fn lag(&self, s: &mut State, last: &State, g: usize) {
        let was = last.masters[g].data;
        let m = &mut s.masters[g];
        if m.data == was {
            return;
        }
        for replica in m.replicas.iter_mut() {
            if replica.link == Link::Online && replica.data.is_none() {
                replica.data = Some(was);
            }
        }
    }

    fn send_all(&self, s: &mut State, msg: Msg, to: impl Fn(usize) -> bool) {
        for g in 0..self.cfg.groups {
            if to(g) {
                s.net[g].push(msg);
            }
        }
    }

    /// Whether the client counts a vote: a grant, and in acknowledged mode only one its
    /// replicas acknowledged (`Answer::acknowledged_vote`), unless `count_unacked`.
    fn counts(&self, vote: Answer) -> bool {
        vote == Answer::Granted || (self.cfg.count_unacked && vote == Answer::Unacked)
    }

    fn decide_attempt(&self, s: &mut State, c: usize, mut a: Attempt) {
        let cfg = &self.cfg;
        let majority = cfg.majority();
        let groups = cfg.groups;
        for g in 0..groups {
            a.may_hold[g] |= !a.votes[g].refused();
        }
        let granted = a.votes[..groups]
            .iter()
            .filter(|v| self.counts(**v))
            .count();
        let unacked = a.votes[..groups]
            .iter()
            .filter(|v| **v == Answer::Unacked)
            .count();
        if granted < majority.needed && granted + unacked >= majority.needed {
            s.ghost.unacked_not_counted = true;
        }
        let ahead = a.votes[..groups].iter().filter_map(|v| match v {
            Answer::FenceAhead(f) => Some(*f),
            _ => None,
        });
        let (aheads, highest) = (ahead.clone().count(), ahead.max());
        if a.votes[..groups].contains(&Answer::AbovePolicy) {
            s.ghost.above_policy = true;
        }
        // Ghost: a promoted replica that voted at once holds this grant.
        let at_once = (0..groups).any(|g| {
            let m = &s.masters[g];
            a.votes[g] == Answer::Granted
                && m.granted_at_once
                && m.data.lock.is_some_and(|l| l.token == a.token)
        });
        let client = &mut s.clients[c];
        if granted >= majority.needed {
            if s.now - a.started < cfg.lifetime(c) {
                s.ghost.promoted_voted |= at_once;
                // The lease. Ghost: its fence must be new, and above every lease granted
                // before its acquire started.
                let g = &mut s.ghost;
                assert!(
                    a.proposal < 64,
                    "fences above 63 do not fit the ghost's bit set"
                );
                let bit = 1u64 << a.proposal;
                if a.proposal <= client.call_floor || g.granted & bit != 0 {
                    g.fence_out_of_order = true;
                }
                g.granted |= bit;
                g.max_granted = g.max_granted.max(a.proposal);
                let rank = g.epoch;
                g.epoch += 1;
                client.phase = Phase::Holding(Lease {
                    token: a.token,
                    fence: a.proposal,
                    valid_until: a.started + cfg.lifetime(c),
                    wrote: false,
                    extends_left: cfg.extends[c],
                    rank,
                });
                return;
            }
        } else if let Some(highest) = highest {
            // Fences::observe, and another round while a majority is still possible.
            client.highest = client.highest.max(highest);
            if granted + aheads >= majority.needed && a.round + 1 < self.cfg.rounds {
                let clock = cfg.clock(c, s.now);
                let proposal = propose(client.highest, clock);
                client.highest = proposal;
                let next = Attempt {
                    tag: a.tag + 1,
                    round: a.round + 1,
                    proposal,
                    votes: [Answer::Pending; MAX_GROUPS],
                    ..a
                };
                client.phase = Phase::Trying(next);
                s.ghost.second_round = true;
                let msg = Msg::Acquire {
                    client: c as u8,
                    token: a.token,
                    ttl: cfg.ttl[c],
                    proposal,
                    tag: next.tag,
                };
                self.send_all(s, msg, |_| true);
                return;
            }
        }
        // Failed: Engine::roll_back on every group that may hold our grant. Refused as above
        // the policy by too many groups for a majority, the acquire ends
        // (`Engine::above_policy`, an invalid input); otherwise it retries.
        let above = a.votes[..groups]
            .iter()
            .filter(|v| **v == Answer::AbovePolicy)
            .count();
        client.phase = if client.attempts_left == 0 {
            Phase::Done
        } else if above > groups - majority.needed {
            Phase::Idle
        } else {
            Phase::Retry { token: a.token }
        };
        if cfg.rollback && a.may_hold[..groups].contains(&true) {
            let msg = Msg::Release {
                client: c as u8,
                token: a.token,
            };
            self.send_all(s, msg, |g| a.may_hold[g]);
        }
    }

    fn decide_renewal(&self, s: &mut State, c: usize, mut lease: Lease, r: Renewal) {
        let renewed = r.votes[..self.cfg.groups]
            .iter()
            .filter(|v| self.counts(**v))
            .count();
        if renewed >= self.cfg.majority().needed && s.now - r.started < self.cfg.lifetime(c) {
            lease.valid_until = r.started + self.cfg.lifetime(c);
            s.ghost.extended = true;
        }
        s.clients[c].phase = Phase::Holding(lease);
    }
}

impl Model for LockModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let cfg = &self.cfg;
        let mut masters = [Master::default(); MAX_GROUPS];
        for (g, m) in masters.iter_mut().enumerate().take(cfg.groups) {
            m.data.policy = cfg.policy[g];
            // Admitted at bootstrap (lua/admit.lua, delay 0). In acknowledged mode admit.lua
            // writes the record as a copy of the marker: the master had never voted.
            m.marker = Some(Marker::voting(0));
            if m.acked() > 0 {
                m.data.record = m.marker;
            }
            for replica in m.replicas.iter_mut().take(usize::from(cfg.replicas[g])) {
                replica.link = Link::Online;
            }
        }
        let clients = std::array::from_fn(|c| Client {
            phase: if c < cfg.clients && cfg.attempts[c] > 0 {
                Phase::Idle
            } else {
                Phase::Done
            },
            highest: 0,
            attempts_left: if c < cfg.clients { cfg.attempts[c] } else { 0 },
            call_floor: 0,
            call_epoch: 0,
        });
        let mut state = State {
            groups: cfg.groups as u8,
            now: 0,
            masters,
            net: Default::default(),
            clients,
            store: Store::default(),
            faults_left: if cfg.data_faults() { cfg.faults } else { 0 },
            reorders_left: cfg.reorders,
            raises_left: if cfg.raise_to.is_some() {
                cfg.raises
            } else {
                0
            },
            ghost: Ghost::default(),
        };
        self.normalize(&mut state);
        vec![state]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        let cfg = &self.cfg;
        if s.now < cfg.max_tick && !self.reapply_due(s) {
            actions.push(Action::Tick);
        }
        if s.masters.iter().any(|m| m.lost_raise) {
            actions.push(Action::Reapply);
        }
        for c in 0..cfg.clients {
            let client = &s.clients[c];
            match client.phase {
                Phase::Idle | Phase::Retry { .. } if client.attempts_left > 0 => {
                    actions.push(Action::Begin(c));
                }
                Phase::Trying(_) | Phase::Extending(..) => actions.push(Action::Decide(c)),
                Phase::Holding(lease) => {
                    if !lease.wrote {
                        actions.push(Action::Write(c));
                    }
                    actions.push(Action::Release(c));
                    if lease.extends_left > 0 {
                        actions.push(Action::Extend(c));
                    }
                }
                _ => {}
            }
        }
        for g in 0..cfg.groups {
            let m = &s.masters[g];
            // The sets of replicas whose acknowledgement makes a `WAIT` succeed.
            let online = (0..MAX_REPLICAS)
                .filter(|&i| m.replicas[i].link == Link::Online)
                .fold(0u8, |set, i| set | 1 << i);
            let needed = match cfg.wait {
                Wait::Every => m.acked(),
                Wait::One => 1,
            };
            let waits = (1..=online)
                .filter(|set| set & !online == 0 && set.count_ones() >= u32::from(needed));
            for index in 0..s.net[g].len() {
                if self.deliverable(s, g, index).is_some() {
                    actions.push(Action::Deliver(g, index));
                    if cfg.promotions
                        && !m.modelled()
                        && cfg.struck(m)
                        && m.replica.is_none()
                        && s.faults_left > 0
                    {
                        actions.push(Action::DeliverLost(g, index));
                    }
                    if m.modelled() && m.acked() > 0 {
                        for set in waits.clone() {
                            actions.push(Action::DeliverAcked(g, index, set));
                        }
                    }
                    if m.deposed.is_some() {
                        actions.push(Action::DeliverDeposed(g, index));
                    }
                }
            }
        }
        for g in 0..cfg.groups {
            let m = &s.masters[g];
            if cfg.quarantine != Quarantine::ClientMaxTtl && m.data.policy.is_none() {
                for answered in 1..(1u8 << cfg.groups) {
                    actions.push(Action::Adopt(g, answered));
                }
            }
            // A failure that loses nothing (a promotion of a replica that has every write, a
            // restart of a master that holds no lock and no fence) only makes a group refuse
            // for a while: it adds no behaviour that safety could break, and is left out.
            if s.faults_left > 0 && cfg.struck(m) {
                if cfg.promotions && m.replica.is_some() {
                    actions.push(Action::Replicate(g));
                    actions.push(Action::Promote(g));
                }
                if cfg.restarts
                    && (m.data.lock.is_some() || m.data.fence > 0)
                    && m.deposed.is_none()
                {
                    actions.push(Action::Restart(g));
                }
                if cfg.early_expiry && m.data.lock.is_some() {
                    actions.push(Action::ExpireEarly(g));
                }
            }
            // Acknowledged mode. Replicas in equal states are one choice.
            for i in 0..MAX_REPLICAS {
                let replica = m.replicas[i];
                if i > 0 && m.replicas[i - 1] == replica {
                    continue;
                }
                match replica.link {
                    Link::Online => {
                        if replica.data.is_some() {
                            actions.push(Action::Sync(g, i));
                        }
                        // A promotion of a replica that has every write is in: its taking
                        // over at once is what the mode is for.
                        if cfg.promotions && s.faults_left > 0 {
                            actions.push(Action::Failover(g, i));
                        }
                    }
                    Link::Detached | Link::Deposed => actions.push(Action::Rejoin(g, i)),
                    Link::Absent => {}
                }
            }
            // A raise that would change nothing on this master is the same as no raise.
            if s.raises_left > 0 && self.raise_changes(m) {
                actions.push(Action::Raise(g));
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let cfg = &self.cfg;
        let mut s = last.clone();
        let now = s.now;
        match action {
            Action::Tick => {
                s.now += 1;
            }
            Action::Begin(c) => {
                let attempt_no = self.attempt_no(&s, c);
                let client = &mut s.clients[c];
                let token = match (client.phase, cfg.tokens) {
                    (Phase::Retry { token }, Tokens::PerAcquire) => token,
                    _ => self.token(c, attempt_no),
                };
                if client.phase == Phase::Idle {
                    client.call_floor = s.ghost.max_granted;
                    client.call_epoch = s.ghost.epoch;
                }
                client.attempts_left -= 1;
                let proposal = propose(client.highest, cfg.clock(c, now));
                client.highest = proposal;
                let attempt = Attempt {
                    token,
                    tag: attempt_no * FENCE_ROUNDS,
                    started: now,
                    round: 0,
                    proposal,
                    votes: [Answer::Pending; MAX_GROUPS],
                    may_hold: [false; MAX_GROUPS],
                };
                client.phase = Phase::Trying(attempt);
                let msg = Msg::Acquire {
                    client: c as u8,
                    token,
                    ttl: cfg.ttl[c],
                    proposal,
                    tag: attempt.tag,
                };
                self.send_all(&mut s, msg, |_| true);
            }
            Action::Deliver(g, index)
            | Action::DeliverLost(g, index)
            | Action::DeliverAcked(g, index, _)
            | Action::DeliverDeposed(g, index) => {
                let before = s.masters[g].data;
                if self.deliverable(&s, g, index)? {
                    s.reorders_left -= 1;
                    s.ghost.disturbed = true;
                }
                let msg = s.net[g].remove(index);
                // The master that runs it: the group's, or its deposed one.
                let deposed = match action {
                    Action::DeliverDeposed(..) => Some(s.masters[g].deposed_master()?),
                    _ => None,
                };
                let mut m = deposed.map_or(s.masters[g], |(_, old)| old);
                // In acknowledged mode a grant counts only once its replicas hold it: the
                // `WAIT` pipelined behind the call. Replicas not modelled keep up.
                let acked = match action {
                    Action::DeliverAcked(..) => true,
                    _ => deposed.is_none() && !(m.acked() > 0 && m.modelled()),
                };
                let vote = |answer: Answer| match answer {
                    Answer::Granted if !acked => Answer::Unacked,
                    answer => answer,
                };
                let mut granted = false;
                match msg {
                    Msg::Acquire {
                        client,
                        token,
                        ttl,
                        proposal,
                        tag,
                    } => {
                        let c = usize::from(client);
                        let answer = self.acquire_script(&mut m, now, c, token, ttl, proposal);
                        granted = answer == Answer::Granted;
                        let answer = vote(answer);
                        if let Phase::Trying(a) = &mut s.clients[c].phase
                            && a.tag == tag
                            && a.votes[g] == Answer::Pending
                        {
                            a.votes[g] = answer;
                        }
                    }
                    Msg::Extend {
                        client,
                        token,
                        ttl,
                        tag,
                    } => {
                        let c = usize::from(client);
                        let answer = self.extend_script(&mut m, now, c, token, ttl);
                        granted = answer == Answer::Granted;
                        let answer = vote(answer);
                        if let Phase::Extending(lease, r) = &mut s.clients[c].phase
                            && r.tag == tag
                            && lease.token == token
                            && r.votes[g] == Answer::Pending
                        {
                            r.votes[g] = answer;
                        }
                    }
                    Msg::Release { token, .. } => {
                        let deleted = Self::release_script(&mut m, now, token);
                        let rolled_back = s.clients.iter().all(|c| match c.phase {
                            Phase::Holding(l) | Phase::Extending(l, _) => l.token != token,
                            _ => true,
                        });
                        s.ghost.rolled_back |= deleted && rolled_back && deposed.is_none();
                    }
                }
                match deposed {
                    Some((slot, old)) => {
                        let group = &mut s.masters[g];
                        group.replicas[slot].data = Some(m.data);
                        group.deposed = Some(Deposed {
                            history: old.history,
                            marker: m.marker,
                            replid2: old.replid2,
                        });
                    }
                    None => s.masters[g] = m,
                }
                if let Action::DeliverAcked(_, _, set) = action {
                    // `WAIT` answers the replicas that hold the write; only a grant's matters.
                    if !granted {
                        return None;
                    }
                    self.lag(&mut s, last, g);
                    let group = &mut s.masters[g];
                    for (i, replica) in group.replicas.iter_mut().enumerate() {
                        if set & (1 << i) != 0 {
                            replica.data = None;
                        }
                    }
                }
                if let Action::DeliverLost(..) = action {
                    let m = &mut s.masters[g];
                    if m.data == before {
                        // Nothing written, nothing lost: that is `Promote`.
                        return None;
                    }
                    m.data = before;
                    m.marker = None;
                    m.history += 1;
                    s.faults_left -= 1;
                    s.ghost.disturbed = true;
                }
            }
            Action::Decide(c) => match s.clients[c].phase {
                Phase::Trying(a) => self.decide_attempt(&mut s, c, a),
                Phase::Extending(lease, r) => self.decide_renewal(&mut s, c, lease, r),
                _ => return None,
            },
            Action::Write(c) => {
                let Phase::Holding(mut lease) = s.clients[c].phase else {
                    return None;
                };
                lease.wrote = true;
                s.clients[c].phase = Phase::Holding(lease);
                if lease.fence >= s.store.highest {
                    s.store.highest = lease.fence;
                    if lease.rank < s.store.superseded_below {
                        s.ghost.superseded_write_taken = true;
                    }
                    let epoch = s.clients[c].call_epoch;
                    s.store.superseded_below = s.store.superseded_below.max(epoch);
                } else if now < lease.valid_until {
                    s.ghost.valid_write_rejected = true;
                } else {
                    s.ghost.late_write_rejected = true;
                }
            }
            Action::Release(c) => {
                let Phase::Holding(lease) = s.clients[c].phase else {
                    return None;
                };
                let client = &mut s.clients[c];
                client.phase = if client.attempts_left > 0 {
                    Phase::Idle
                } else {
                    Phase::Done
                };
                let msg = Msg::Release {
                    client: c as u8,
                    token: lease.token,
                };
                self.send_all(&mut s, msg, |_| true);
            }
            Action::Extend(c) => {
                let Phase::Holding(mut lease) = s.clients[c].phase else {
                    return None;
                };
                lease.extends_left -= 1;
                let renewal = Renewal {
                    tag: lease.extends_left,
                    started: now,
                    votes: [Answer::Pending; MAX_GROUPS],
                };
                s.clients[c].phase = Phase::Extending(lease, renewal);
                let msg = Msg::Extend {
                    client: c as u8,
                    token: lease.token,
                    ttl: cfg.ttl[c],
                    tag: renewal.tag,
                };
                self.send_all(&mut s, msg, |_| true);
            }
            Action::Adopt(g, answered) => {
                let answers: Vec<Option<Policy>> = s.masters[..cfg.groups]
                    .iter()
                    .enumerate()
                    .map(|(i, m)| m.data.policy.filter(|_| answered & (1 << i) != 0))
                    .map(|policy| policy.map(Pol::policy))
                    .collect();
                if answered & (1 << g) == 0
                    || answers.iter().flatten().count() < answered.count_ones() as usize - 1
                {
                    // Only sets that differ in what they tell: the master itself answers
                    // (nothing), and every other group in the set answered a policy.
                    return None;
                }
                let majority = Majority {
                    groups: cfg.groups,
                    needed: cfg.adopt_needed,
                };
                let adopted = Pol::from_policy(Policy::adopt(&answers, majority)?);
                // lua/adopt.lua: only a master that still has no policy.
                let m = &mut s.masters[g];
                if m.data.policy.is_some() {
                    return None;
                }
                m.data.policy = Some(adopted);
                m.marker = Some(Marker {
                    history: m.history,
                    since: cfg.writes_since().then_some(now),
                    vote_from: now.saturating_add(cfg.quarantine_of(adopted)),
                });
                s.ghost.adopted = true;
            }
            Action::Replicate(g) => {
                let m = &mut s.masters[g];
                m.replica = None;
            }
            Action::Promote(g) => {
                let m = &mut s.masters[g];
                if let Some(replica) = m.replica {
                    m.lost_raise = cfg.raise_reapplied && replica.policy != m.data.policy;
                    m.data = replica;
                    m.replica = None;
                }
                m.marker = None;
                m.history += 1;
                s.faults_left -= 1;
                s.ghost.disturbed = true;
            }
            Action::Restart(g) => {
                let m = &mut s.masters[g];
                m.data = Data::default();
                m.replica = None;
                m.marker = None;
                m.history += 1;
                m.replid2 = None;
                m.granted_at_once = false;
                // Its replicas sync with it again, in full: they hold nothing either.
                for replica in m.replicas.iter_mut() {
                    if replica.link == Link::Online {
                        replica.data = None;
                    }
                }
                s.faults_left -= 1;
                s.ghost.disturbed = true;
            }
            Action::Sync(g, i) => {
                let replica = &mut s.masters[g].replicas[i];
                if replica.link != Link::Online || replica.data.is_none() {
                    return None;
                }
                replica.data = None;
            }
            Action::Failover(g, i) => {
                let m = &mut s.masters[g];
                if m.replicas[i].link != Link::Online {
                    return None;
                }
                let promoted = m.held_by(i);
                m.deposed = Some(Deposed {
                    history: m.history,
                    marker: m.marker,
                    replid2: m.replid2,
                });
                for (j, replica) in m.replicas.iter_mut().enumerate() {
                    *replica = match (j == i, replica.link) {
                        (true, _) => Replica {
                            link: Link::Deposed,
                            data: Some(m.data),
                        },
                        (false, Link::Online) => Replica {
                            link: Link::Detached,
                            data: None,
                        },
                        (false, _) => *replica,
                    };
                }
                m.data = promoted;
                m.replid2 = Some(m.history);
                m.history += 1;
                m.marker = None;
                m.granted_at_once = false;
                s.faults_left -= 1;
                s.ghost.disturbed = true;
            }
            Action::Rejoin(g, i) => {
                let m = &mut s.masters[g];
                match m.replicas[i].link {
                    Link::Detached => {}
                    Link::Deposed => m.deposed = None,
                    _ => return None,
                }
                m.replicas[i] = Replica {
                    link: Link::Online,
                    data: None,
                };
            }
            Action::ExpireEarly(g) => {
                s.masters[g].data.lock = None;
                s.faults_left -= 1;
                s.ghost.disturbed = true;
            }
            Action::Raise(g) => {
                let to = cfg.raise_to?;
                let m = &mut s.masters[g];
                m.data.policy?;
                if !cfg.raise_replicated && m.replica.is_none() {
                    m.replica = Some(m.data);
                }
                let effect = self.admit_script(m, now, to);
                s.ghost.lengthened |= effect.lengthened;
                s.ghost.admission_quarantined |= effect.started_quarantine;
                s.raises_left -= 1;
            }
            Action::Reapply => {
                let to = cfg.raise_to?;
                for g in 0..cfg.groups {
                    let m = &mut s.masters[g];
                    let effect = self.admit_script(m, now, to);
                    s.ghost.lengthened |= effect.lengthened;
                    s.ghost.admission_quarantined |= effect.started_quarantine;
                    m.lost_raise = false;
                }
            }
        }
        // Acknowledged mode: a replica receives its master's writes late, until `Sync` or a
        // `WAIT` that succeeds (`DeliverAcked`, which lags the others itself).
        if !matches!(
            action,
            Action::Restart(_) | Action::DeliverAcked(..) | Action::Failover(..)
        ) {
            for g in 0..cfg.groups {
                self.lag(&mut s, last, g);
            }
        }
        if cfg.lagging_replica && !matches!(action, Action::Promote(_) | Action::Restart(_)) {
            for (m, was) in s.masters.iter_mut().zip(&last.masters) {
                if m.data != was.data && m.replica.is_none() {
                    m.replica = Some(was.data);
                }
            }
        }
        self.normalize(&mut s);
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let cfg = &self.cfg;
        let mut properties = vec![
            Property::always(FENCES_GROW, |_, s: &State| !s.ghost.fence_out_of_order),
            Property::always(ONE_HOLDER, |m: &LockModel, s: &State| {
                holders_inside_validity(m, s) <= 1
            }),
            Property::always(NO_SUPERSEDED_WRITE, |_, s: &State| {
                !s.ghost.superseded_write_taken
            }),
            Property::always(VALID_WRITES_TAKEN, |_, s: &State| {
                !s.ghost.valid_write_rejected
            }),
            Property::always(NO_LEFTOVERS, |m: &LockModel, s: &State| !leftover(m, s)),
            Property::sometimes("a lease is granted", |_, s: &State| s.ghost.epoch > 0),
            Property::sometimes("two leases are granted", |_, s: &State| s.ghost.epoch > 1),
            Property::sometimes("a fence ahead takes another round", |_, s: &State| {
                s.ghost.second_round
            }),
            Property::sometimes("a rollback deletes a grant", |_, s: &State| {
                s.ghost.rolled_back
            }),
            Property::sometimes(
                "a paused holder's late write is rejected",
                |_, s: &State| s.ghost.late_write_rejected,
            ),
        ];
        if cfg.extends.iter().any(|&n| n > 0) {
            properties.push(Property::sometimes(
                "a lease is extended",
                |_, s: &State| s.ghost.extended,
            ));
        }
        if cfg.promotions || cfg.restarts {
            properties.push(Property::sometimes(
                "a quarantine ends",
                |m: &LockModel, s: &State| {
                    s.masters[..m.cfg.groups].iter().any(|master| {
                        master.history > 0 && master.marker == Some(Marker::voting(master.history))
                    })
                },
            ));
        }
        if cfg.models_replicas() {
            properties.push(Property::sometimes(UNACKED_NOT_COUNTED, |_, s: &State| {
                s.ghost.unacked_not_counted
            }));
            if cfg.promotions {
                properties.push(Property::sometimes(PROMOTED_VOTES, |_, s: &State| {
                    s.ghost.promoted_voted
                }));
            }
        }
        if cfg.restarts && cfg.quarantine != Quarantine::ClientMaxTtl {
            properties.push(Property::sometimes(
                "an adoption happens",
                |_, s: &State| s.ghost.adopted,
            ));
        }
        if cfg.raise_admits
            && cfg.admit_starts_quarantine
            && cfg.raise_to.is_some()
            && cfg.promotions
        {
            properties.push(Property::sometimes(
                ADMISSION_QUARANTINED,
                |_, s: &State| s.ghost.admission_quarantined,
            ));
        }
        if cfg.writes_since() && cfg.raise_to.is_some() && (cfg.promotions || cfg.restarts) {
            properties.push(Property::sometimes(LENGTHENED, |_, s: &State| {
                s.ghost.lengthened
            }));
        }
        let above_policy = cfg.raise_to.is_some()
            || cfg.ttl[..cfg.clients].iter().any(|&ttl| {
                cfg.policy[..cfg.groups]
                    .iter()
                    .flatten()
                    .any(|p| ttl > p.max_ttl)
            });
        if above_policy && cfg.quarantine != Quarantine::ClientMaxTtl {
            properties.push(Property::sometimes(
                "a TTL above a policy is refused",
                |_, s: &State| s.ghost.above_policy,
            ));
        }
        properties
    }
}

pub const FENCES_GROW: &str = "(a) fencing tokens are unique and grow in real-time order";
pub const ONE_HOLDER: &str = "(b) at most one holder inside its validity";
pub const NO_SUPERSEDED_WRITE: &str =
    "(c) the store never takes a write of a lease superseded by one whose write it took";
pub const VALID_WRITES_TAKEN: &str = "(c') a write inside the lease's validity is never rejected";
/// An example: a raise moved a master's first vote later (`since` at work).
pub const LENGTHENED: &str = "a raise lengthens a quarantine";
pub const ADMISSION_QUARANTINED: &str = "an admission starts a promoted master's quarantine";
/// Acknowledged mode: a promoted replica takes over its master's record, votes before a
/// quarantine would have let it, and a lease counts its grant.
pub const PROMOTED_VOTES: &str =
    "a promoted replica votes at once and a lease is granted through it";
/// Acknowledged mode: grants that would have made a majority do not count, because a `WAIT`
/// failed.
pub const UNACKED_NOT_COUNTED: &str = "a grant the replicas do not all hold is not counted";
pub const NO_LEFTOVERS: &str =
    "(d) once quiet, no lock is left behind (no reorder, promotion, restart or early expiry)";

/// Clients that hold a lease and are inside its validity.
pub fn holders_inside_validity(m: &LockModel, s: &State) -> usize {
    s.clients[..m.cfg.clients]
        .iter()
        .filter(|c| match c.phase {
            Phase::Holding(l) | Phase::Extending(l, _) => s.now < l.valid_until,
            _ => false,
        })
        .count()
}

/// Quiet (nothing in flight, nobody trying or holding) and a master still holds a lock.
fn leftover(m: &LockModel, s: &State) -> bool {
    if s.ghost.disturbed {
        return false;
    }
    let quiet = s.net.iter().all(|q| q.is_empty())
        && s.clients[..m.cfg.clients]
            .iter()
            .all(|c| matches!(c.phase, Phase::Idle | Phase::Retry { .. } | Phase::Done));
    quiet
        && s.masters[..m.cfg.groups]
            .iter()
            .any(|master| live(master.data.lock, s.now).is_some())
}

/// A path as one line per step, with the requests the deliveries ran.
pub fn describe(model: &LockModel, path: &[(State, Option<Action>)]) -> String {
    let mut out = String::new();
    for (state, action) in path {
        let Some(action) = action else {
            continue;
        };
        let _ = write!(out, "  t={} ", state.now);
        match *action {
            Action::Deliver(g, index)
            | Action::DeliverLost(g, index)
            | Action::DeliverAcked(g, index, _)
            | Action::DeliverDeposed(g, index) => {
                let msg = state.net[g][index];
                let _ = match action {
                    Action::DeliverDeposed(..) => write!(out, "g{g}'s deposed master runs {msg:?}"),
                    _ => write!(out, "g{g} runs {msg:?}"),
                };
                if let Action::DeliverAcked(_, _, set) = action {
                    let _ = write!(out, ", WAIT reaches replicas {set:#b}");
                }
                if let Action::DeliverLost(..) = action {
                    let _ = write!(
                        out,
                        ", then its replica, which missed that write, is promoted"
                    );
                }
                if let Some(next) = model.next_state(state, *action)
                    && let Msg::Acquire { client, .. } | Msg::Extend { client, .. } = msg
                {
                    let c = usize::from(client);
                    let answer = match next.clients[c].phase {
                        Phase::Trying(a) => Some(a.votes[g]),
                        Phase::Extending(_, r) => Some(r.votes[g]),
                        _ => None,
                    };
                    if let Some(answer) = answer {
                        let _ = write!(out, " -> {answer:?}");
                    }
                }
            }
            Action::Decide(c) => {
                let _ = write!(out, "c{c} decides");
                if let Some(next) = model.next_state(state, *action) {
                    let _ = match next.clients[c].phase {
                        Phase::Holding(l) => write!(
                            out,
                            " -> holds, token {} fence {} valid until t={}",
                            l.token, l.fence, l.valid_until
                        ),
                        Phase::Trying(a) => {
                            write!(out, " -> round {} proposing {}", a.round, a.proposal)
                        }
                        other => write!(out, " -> {other:?}"),
                    };
                }
            }
            Action::Begin(c) => {
                let _ = write!(out, "c{c} begins an attempt");
                if let Some(next) = model.next_state(state, *action)
                    && let Phase::Trying(a) = next.clients[c].phase
                {
                    let _ = write!(out, ", token {} proposing {}", a.token, a.proposal);
                }
            }
            Action::Write(c) => {
                let _ = write!(out, "c{c} writes to the store");
                if let Phase::Holding(l) = state.clients[c].phase {
                    let taken = l.fence >= state.store.highest;
                    let _ = write!(
                        out,
                        " with fence {} ({}, {} its validity)",
                        l.fence,
                        if taken { "taken" } else { "rejected" },
                        if state.now < l.valid_until {
                            "inside"
                        } else {
                            "after"
                        }
                    );
                }
            }
            other => {
                let _ = write!(out, "{other:?}");
            }
        }
        out.push('\n');
    }
    out
}

/// Groups are interchangeable: every group-indexed part of a state (masters, queues, votes)
/// permuted the same way is the same state for every property. The representative sorts the
/// groups (symmetry reduction, `CheckerBuilder::symmetry_fn`).
pub fn representative(s: &State) -> State {
    let groups = usize::from(s.groups);
    let per_client = |g: usize| {
        s.clients.map(|client| match client.phase {
            Phase::Trying(a) => (a.votes[g], a.may_hold[g]),
            Phase::Extending(_, r) => (r.votes[g], false),
            _ => (Answer::Pending, false),
        })
    };
    let key = |g: usize| (&s.masters[g], &s.net[g], per_client(g));
    let mut order: [usize; MAX_GROUPS] = std::array::from_fn(|g| g);
    order[..groups].sort_by(|&x, &y| key(x).cmp(&key(y)));
    if order.iter().enumerate().all(|(i, &g)| i == g) {
        return s.clone();
    }
    let mut r = s.clone();
    for (to, &from) in order.iter().enumerate().take(groups) {
        r.masters[to] = s.masters[from];
        r.net[to] = s.net[from];
        for (c, client) in s.clients.iter().enumerate() {
            match (client.phase, &mut r.clients[c].phase) {
                (Phase::Trying(a), Phase::Trying(ra)) => {
                    ra.votes[to] = a.votes[from];
                    ra.may_hold[to] = a.may_hold[from];
                }
                (Phase::Extending(_, rn), Phase::Extending(_, rr)) => {
                    rr.votes[to] = rn.votes[from];
                }
                _ => {}
            }
        }
    }
    r
}
