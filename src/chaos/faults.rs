//! The fault injector: kills, freezes, restarts, partitions and slows masters of a lab and
//! makes their clocks jump, at random moments (so also in the middle of acquires), never
//! disrupting more than `max_down` groups at a time, and brings every group back afterwards.
//! It keeps the window of every fault, so the report can say what happened during each kind.
//! A [`Storm`] is the other schedule: rounds at a fixed period, each faulting one group or two
//! and undoing the fault seconds later (issue #24, "failovers that cost seconds").

use std::str::FromStr;
use std::time::{Duration, Instant};

use rand::Rng;
use rand::seq::SliceRandom;
use serde::Serialize;

use crate::lab::relay::LinkClass;
use crate::lab::{Interruption, Lab, LabError};
use crate::millis;

/// A kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Fault {
    /// SIGKILL a master; Sentinel promotes its replica; the dead node comes back later.
    Kill,
    /// SIGSTOP a master for a while (a partition or a long pause), then SIGCONT.
    Freeze,
    /// SIGKILL a master and start it again at once, empty (no persistence).
    Restart,
    /// A worker stalls past its lease's validity before it writes (a GC pause).
    Pause,
    /// Links of a master are cut without closing them: from its replica and Sentinels while
    /// clients still reach it (a split brain: Sentinel promotes the replica), or from the
    /// clients; then healed, and the old master rejoins as a replica.
    Partition,
    /// Added latency and jitter on a master's client links.
    Latency,
    /// Clocks: a master whose clock runs fast or jumps expires its lock keys early (the
    /// keys' TTLs are cut), and workers' clocks are off and drift (see `ChaosOptions`).
    /// Drift within `drift_factor` must not cause an overlap; a jump beyond it may, and the
    /// report labels such overlaps "assumption broken".
    Clock,
    /// Cluster labs: the hash slot of one of the run's resources moves to another shard of
    /// its group, keys and all, while workers use it (a resharding).
    Migrate,
}

impl Fault {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Fault::Kill => "kill",
            Fault::Freeze => "freeze",
            Fault::Restart => "restart",
            Fault::Pause => "pause",
            Fault::Partition => "partition",
            Fault::Latency => "latency",
            Fault::Clock => "clock",
            Fault::Migrate => "migrate",
        }
    }

    /// Every fault, in the order reports list them.
    pub const ALL: [Fault; 8] = [
        Fault::Kill,
        Fault::Freeze,
        Fault::Restart,
        Fault::Pause,
        Fault::Partition,
        Fault::Latency,
        Fault::Clock,
        Fault::Migrate,
    ];

    /// The faults a lab of Cluster groups takes: a shard's primary killed, frozen or
    /// restarted, worker pauses, and slot migrations.
    pub const ON_CLUSTER: [Fault; 5] = [
        Fault::Kill,
        Fault::Freeze,
        Fault::Restart,
        Fault::Pause,
        Fault::Migrate,
    ];
}

impl FromStr for Fault {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        Fault::ALL
            .into_iter()
            .find(|fault| fault.name() == text)
            .ok_or_else(|| {
                format!(
                    "unknown fault `{text}`; expected one of {}",
                    Fault::ALL.map(Fault::name).join(", ")
                )
            })
    }
}

/// The storm schedule: every `every`, one group (one round in [`Storm::SECOND_GROUP`] two)
/// gets one of [`Storm::FAULTS`]; a kill, freeze or partition is undone after a hold drawn from
/// `hold_min..=hold_max`. At most `max_faulted` groups are faulted at once. A group restarted
/// empty has lost its data, which no mode recovers before every lease it may have missed has
/// expired: it counts as faulted until its quarantine (the lab's policy) ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Storm {
    pub every: Duration,
    pub hold_min: Duration,
    pub hold_max: Duration,
    pub max_faulted: usize,
}

impl Default for Storm {
    fn default() -> Self {
        Storm {
            every: Duration::from_secs(8),
            hold_min: Duration::from_secs(4),
            hold_max: Duration::from_secs(12),
            max_faulted: 2,
        }
    }
}

impl Storm {
    /// What a storm injects: a master killed (its replica promoted, the old master started
    /// again after the hold), frozen, cut from its replicas and Sentinels while clients still
    /// reach it (the split brain), or restarted empty at once.
    pub const FAULTS: [Fault; 4] = [Fault::Kill, Fault::Freeze, Fault::Partition, Fault::Restart];

    /// The chance that a round faults a second group (when two may be faulted).
    pub const SECOND_GROUP: f64 = 0.25;

    /// Whether the schedule can run: a period, an ordered hold range, a group to fault.
    pub fn check(&self) -> Result<(), String> {
        if self.every.is_zero() {
            return Err("the period must be above 0".into());
        }
        if self.hold_min.is_zero() || self.hold_min > self.hold_max {
            return Err(format!(
                "the hold range {}-{} ms must be above 0 and in order",
                self.hold_min.as_millis(),
                self.hold_max.as_millis()
            ));
        }
        if self.max_faulted == 0 {
            return Err("at least one group must be allowed to be faulted".into());
        }
        Ok(())
    }
}

/// How many storm rounds ran, how many found every allowed group already faulted, and the
/// most groups faulted at once (never above the storm's `max_faulted`).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct StormRounds {
    pub rounds: u64,
    pub rounds_full: u64,
    pub most_faulted: usize,
}

/// How long a failed recovery waits before it is tried again.
const RECOVERY_RETRY: Duration = Duration::from_secs(1);

/// Something to undo later.
#[derive(Debug, Clone, Copy)]
enum Recovery {
    Thaw,
    Revive,
    /// Started again as a replica of the master Sentinel names, as deployments start a data
    /// node (a start-up script asks Sentinel), instead of as a master Sentinel re-points some
    /// 8 to 18 s later.
    ReviveAsReplica,
    Heal,
}

struct Pending {
    group: usize,
    at: Instant,
    recovery: Recovery,
}

/// Faults injected so far, by kind.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Injected {
    pub kill: u64,
    pub freeze: u64,
    pub restart: u64,
    pub partition: u64,
    pub latency: u64,
    /// Master clock faults: drifts within the allowance and jumps beyond it.
    pub clock_drift: u64,
    pub clock_jump: u64,
    /// Slot migrations between shards of a Cluster group.
    pub migrate: u64,
}

impl Injected {
    pub fn total(&self) -> u64 {
        self.kill
            + self.freeze
            + self.restart
            + self.partition
            + self.latency
            + self.clock_drift
            + self.clock_jump
            + self.migrate
    }
}

/// When one fault was in force: from its injection until the group was back.
#[derive(Debug, Clone, Copy)]
pub struct FaultWindow {
    pub fault: Fault,
    /// The group's index in the topology.
    pub group: usize,
    pub start: Instant,
    pub end: Instant,
}

/// One random fault to inject: where, what, and its random parts.
#[derive(Debug, Clone, Copy)]
struct Choice {
    group: usize,
    fault: Fault,
    /// How long the fault lasts before it is undone (a partition three times, latency twice).
    hold: Duration,
    /// Picks a partition's kind (0: clients only) and a clock fault's kind (0: a jump).
    variant: u8,
    /// The shard whose primary is hit, in a Cluster lab.
    shard: Option<usize>,
}

pub(crate) struct Injector {
    faults: Vec<Fault>,
    /// Shards per group of a Cluster lab: faults hit one shard's primary.
    shards: Option<usize>,
    /// The run's resource names, whose slots migrations move.
    resources: Vec<String>,
    max_down: usize,
    /// How long a group stays out of the vote after it got its master back (the quarantine).
    quarantine: Duration,
    /// Until when each group counts as disrupted.
    down_until: Vec<Instant>,
    pending: Vec<Pending>,
    pub injected: Injected,
    /// Every fault injected, with when it was in force.
    pub windows: Vec<FaultWindow>,
    /// When a master's clock jumped beyond the drift allowance.
    pub jumps: Vec<Instant>,
    /// The lease TTL of the run and the drift allowance's share of it.
    ttl: Duration,
    drift_factor: f64,
    /// The lock keys the workers use.
    lock_keys: Vec<String>,
    /// Storm rounds so far.
    pub rounds: StormRounds,
}

/// Time Sentinel may take to promote a replica (down-after plus the election), with margin.
const FAILOVER_ALLOWANCE: Duration = Duration::from_millis(3000);

impl Injector {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        groups: usize,
        shards: Option<usize>,
        resources: Vec<String>,
        faults: &[Fault],
        max_down: usize,
        quarantine: Duration,
        (ttl, drift_factor): (Duration, f64),
        lock_keys: Vec<String>,
    ) -> Self {
        let now = Instant::now();
        Injector {
            shards,
            resources,
            faults: faults
                .iter()
                .copied()
                .filter(|f| *f != Fault::Pause)
                .collect(),
            max_down,
            quarantine,
            down_until: vec![now; groups],
            pending: Vec::new(),
            injected: Injected::default(),
            windows: Vec::new(),
            jumps: Vec::new(),
            ttl,
            drift_factor,
            lock_keys,
            rounds: StormRounds::default(),
        }
    }

    /// Groups counted as disrupted right now.
    pub fn disrupted(&self) -> usize {
        let now = Instant::now();
        self.down_until.iter().filter(|until| **until > now).count()
    }

    /// Undoes what is due, then injects one new fault if fewer than `max_down` groups are
    /// disrupted.
    pub async fn step(&mut self, lab: &mut Lab) -> Result<(), LabError> {
        self.recover(lab, false).await?;
        if self.faults.is_empty() || self.disrupted() >= self.max_down {
            return Ok(());
        }
        let now = Instant::now();
        let Some(choice) = self.choose(now) else {
            return Ok(());
        };
        let injected = match (choice.fault, choice.shard) {
            (Fault::Kill | Fault::Freeze | Fault::Restart | Fault::Migrate, Some(shard)) => {
                self.inject_on_shard(lab, &choice, shard, now).await?
            }
            (Fault::Migrate, None) => false,
            (Fault::Kill | Fault::Freeze | Fault::Restart, None) => {
                self.inject_on_master(lab, &choice, now).await?;
                true
            }
            (Fault::Partition | Fault::Latency, _) => {
                self.inject_on_links(lab, &choice, now).await?;
                true
            }
            (Fault::Clock, _) => {
                self.inject_clock(lab, &choice, now).await?;
                true
            }
            (Fault::Pause, _) => true,
        };
        if !injected {
            return Ok(());
        }
        let Choice { fault, group, .. } = choice;
        self.windows.push(FaultWindow {
            fault,
            group,
            start: now,
            end: self.down_until[group].max(now),
        });
        tracing::info!(group, ?fault, "chaos: fault injected");
        Ok(())
    }

    /// The next fault, on a group not disrupted at `now`; `None` when every group is.
    fn choose(&self, now: Instant) -> Option<Choice> {
        let healthy: Vec<usize> = (0..self.down_until.len())
            .filter(|g| self.down_until[*g] <= now)
            .collect();
        let mut rng = rand::thread_rng();
        // A run with migrations on reshards first, so even a short run moves a slot.
        let first_migration = self.faults.contains(&Fault::Migrate) && self.injected.migrate == 0;
        let fault = if first_migration {
            Some(Fault::Migrate)
        } else {
            self.faults.choose(&mut rng).copied()
        };
        Some(Choice {
            group: healthy.choose(&mut rng).copied()?,
            fault: fault?,
            hold: Duration::from_millis(rng.gen_range(300..1500)),
            variant: rng.gen_range(0..4u8),
            shard: self.shards.map(|shards| rng.gen_range(0..shards)),
        })
    }

    /// Kills, freezes or restarts one shard's primary of a Cluster group, or moves a slot;
    /// false when no slot could be moved.
    async fn inject_on_shard(
        &mut self,
        lab: &mut Lab,
        choice: &Choice,
        shard: usize,
        now: Instant,
    ) -> Result<bool, LabError> {
        let group = choice.group;
        match choice.fault {
            Fault::Kill => {
                lab.kill_primary(group, shard).await?;
            }
            Fault::Freeze => {
                lab.freeze_primary(group, shard).await?;
            }
            Fault::Restart => {
                lab.restart_shard(group, shard).await?;
            }
            _ => {
                if !self.migrate(lab, group).await? {
                    return Ok(false);
                }
                self.injected.migrate += 1;
                // The slot's new primary sits out its quarantine for that slot; a slot closed
                // back on its source after it lost keys sits out there.
                self.down_until[group] =
                    self.down_until[group].max(Instant::now() + self.quarantine);
                return Ok(true);
            }
        }
        self.note_master_fault(choice, now);
        Ok(true)
    }

    /// Kills, freezes or restarts the master of a Sentinel group.
    async fn inject_on_master(
        &mut self,
        lab: &mut Lab,
        choice: &Choice,
        now: Instant,
    ) -> Result<(), LabError> {
        match choice.fault {
            Fault::Kill => {
                lab.kill(choice.group).await?;
            }
            Fault::Freeze => {
                lab.freeze(choice.group).await?;
            }
            _ => {
                lab.restart(choice.group).await?;
            }
        }
        self.note_master_fault(choice, now);
        Ok(())
    }

    /// Counts a kill, freeze or restart of a group's master (or a shard's primary) and says
    /// when it is undone and how long the group counts as disrupted.
    fn note_master_fault(&mut self, choice: &Choice, now: Instant) {
        let Choice { group, hold, .. } = *choice;
        match choice.fault {
            Fault::Kill => {
                self.injected.kill += 1;
                self.later(group, now + FAILOVER_ALLOWANCE, Recovery::Revive);
            }
            Fault::Freeze => {
                self.injected.freeze += 1;
                // A freeze longer than down-after also ends in a failover.
                self.later(group, now + hold, Recovery::Thaw);
                self.down_until[group] = now + FAILOVER_ALLOWANCE.max(hold) + self.quarantine;
            }
            _ => {
                self.injected.restart += 1;
                self.down_until[group] =
                    Instant::now() + self.quarantine + Duration::from_millis(500);
            }
        }
    }

    /// Cuts (a partition) or slows (latency) a group's links.
    async fn inject_on_links(
        &mut self,
        lab: &mut Lab,
        choice: &Choice,
        now: Instant,
    ) -> Result<(), LabError> {
        let Choice { group, hold, .. } = *choice;
        if choice.fault == Fault::Partition {
            if choice.variant == 0 {
                // The clients lose the master; nothing else changes.
                lab.partition(group, LinkClass::Client).await?;
            } else {
                // The split brain: Sentinel loses the master and promotes its replica,
                // while clients on the old side still reach the old master.
                lab.partition(group, LinkClass::Replica).await?;
                lab.partition(group, LinkClass::Sentinel).await?;
            }
            self.injected.partition += 1;
            let hold = hold * 3;
            self.later(group, now + hold, Recovery::Heal);
            self.down_until[group] = now + FAILOVER_ALLOWANCE.max(hold) + self.quarantine;
            return Ok(());
        }
        let (delay, jitter) = {
            let mut rng = rand::thread_rng();
            (
                Duration::from_millis(rng.gen_range(5..150)),
                Duration::from_millis(rng.gen_range(0..50)),
            )
        };
        lab.slow(group, delay, jitter).await?;
        self.injected.latency += 1;
        self.later(group, now + hold * 2, Recovery::Heal);
        self.down_until[group] = now + hold * 2;
        Ok(())
    }

    /// Cuts the TTLs of the run's locks on a group's master, as a clock running fast would.
    async fn inject_clock(
        &mut self,
        lab: &mut Lab,
        choice: &Choice,
        now: Instant,
    ) -> Result<(), LabError> {
        let group = choice.group;
        // Three in four stay within the drift allowance; the fourth jumps.
        let jump = choice.variant == 0;
        let cut = if jump {
            self.ttl.mul_f64(0.75)
        } else {
            self.ttl.mul_f64(self.drift_factor / 2.0)
        };
        cut_lock_ttls(lab, group, &self.lock_keys, cut).await?;
        if jump {
            self.injected.clock_jump += 1;
            self.jumps.push(now);
        } else {
            self.injected.clock_drift += 1;
        }
        self.down_until[group] = now + self.ttl;
        Ok(())
    }

    /// Moves the slot of a random resource of the run from the shard that serves it to
    /// another shard of `group`: whole, or broken off after one to three keys left (in
    /// `CLUSTER GETKEYSINSLOT` order, as redis-cli moves them) and closed back on the
    /// source, with or without the target's primary killed first. False when no shard
    /// answered which serves it (one is down).
    async fn migrate(&mut self, lab: &mut Lab, group: usize) -> Result<bool, LabError> {
        let (Some(shards), Some(resource)) = (
            self.shards,
            self.resources.choose(&mut rand::thread_rng()).cloned(),
        ) else {
            return Ok(false);
        };
        if shards < 2 {
            return Ok(false);
        }
        let slot = crate::cluster_slot(&resource);
        let Ok(from) = lab.shard_serving(group, slot).await else {
            return Ok(false);
        };
        let (to, ending, keys) = {
            let mut rng = rand::thread_rng();
            (
                (from + rng.gen_range(1..shards)) % shards,
                rng.gen_range(0..3u8),
                rng.gen_range(1..=3usize),
            )
        };
        let (report, how) = match ending {
            0 => (
                lab.migrate_slots(group, from, to, slot..=slot).await?,
                "whole",
            ),
            1 => (
                lab.interrupt_migration(group, from, to, slot, keys, Interruption::ClosedBack)
                    .await?,
                "broken off, closed back on the source",
            ),
            _ => {
                let report = lab
                    .interrupt_migration(group, from, to, slot, keys, Interruption::TargetKilled)
                    .await?;
                self.later(group, Instant::now() + FAILOVER_ALLOWANCE, Recovery::Revive);
                (
                    report,
                    "broken off, target killed, closed back on the source",
                )
            }
        };
        tracing::info!(
            group,
            resource,
            slot,
            from,
            to,
            keys = report.keys,
            how,
            "chaos: slot migrated"
        );
        Ok(true)
    }

    /// Undoes at `at`, and counts the group disrupted through its failover and quarantine.
    fn later(&mut self, group: usize, at: Instant, recovery: Recovery) {
        self.down_until[group] =
            self.down_until[group].max(at + FAILOVER_ALLOWANCE + self.quarantine);
        self.undo_at(group, at, recovery);
    }

    /// Undoes at `at`; the group counts as faulted until then (the storm's count).
    fn undo_at(&mut self, group: usize, at: Instant, recovery: Recovery) {
        self.down_until[group] = self.down_until[group].max(at);
        self.pending.push(Pending {
            group,
            at,
            recovery,
        });
    }

    /// When the next recovery is due.
    pub fn next_recovery(&self) -> Option<Instant> {
        self.pending.iter().map(|p| p.at).min()
    }

    /// Runs the due recoveries (all of them with `everything`). One that fails does not stop
    /// the others: it is tried again a second later (with `everything`, not again), and the
    /// first failure is returned.
    pub async fn recover(&mut self, lab: &mut Lab, everything: bool) -> Result<(), LabError> {
        let now = Instant::now();
        let (due, later): (Vec<_>, Vec<_>) = self
            .pending
            .drain(..)
            .partition(|p| everything || p.at <= now);
        self.pending = later;
        let mut first_error = None;
        for pending in due {
            let outcome = match pending.recovery {
                Recovery::Thaw => lab.thaw(pending.group).await.map(drop),
                Recovery::Revive => lab.restart(pending.group).await.map(drop),
                Recovery::ReviveAsReplica => match lab.restart(pending.group).await {
                    Ok(_) => lab.rejoin(pending.group).await.map(drop),
                    Err(error) => Err(error),
                },
                Recovery::Heal => lab.heal(pending.group).await.map(drop),
            };
            if let Err(error) = outcome {
                tracing::warn!(group = pending.group, %error, recovery = ?pending.recovery, "chaos: a recovery failed");
                if !everything {
                    self.pending.push(Pending {
                        at: Instant::now() + RECOVERY_RETRY,
                        ..pending
                    });
                }
                first_error.get_or_insert(error);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Groups faulted under the storm's count at `now`: a fault not undone yet, or a restart
    /// still in its quarantine.
    fn storm_faulted(&self, group: usize, now: Instant) -> bool {
        self.down_until[group] > now || self.pending.iter().any(|p| p.group == group)
    }

    /// One round of `storm`: one group, or two, of those not faulted get a fault each, while
    /// no more than `max_faulted` are faulted at once. The due recoveries run first. A fault
    /// that cannot be injected does not stop the other; the first failure is returned.
    pub async fn storm_round(&mut self, lab: &mut Lab, storm: &Storm) -> Result<(), LabError> {
        // A group whose recovery failed keeps it pending, so it stays faulted meanwhile.
        if let Err(error) = self.recover(lab, false).await {
            tracing::warn!(%error, "chaos: a fault could not be undone");
        }
        let now = Instant::now();
        let free: Vec<usize> = (0..self.down_until.len())
            .filter(|g| !self.storm_faulted(*g, now))
            .collect();
        let faulted = self.down_until.len() - free.len();
        let room = storm.max_faulted.saturating_sub(faulted);
        self.rounds.rounds += 1;
        let chosen: Vec<(usize, Fault, Duration)> = {
            let mut rng = rand::thread_rng();
            let wanted = if rng.gen_bool(Storm::SECOND_GROUP) {
                2
            } else {
                1
            };
            free.choose_multiple(&mut rng, wanted.min(room))
                .map(|group| {
                    let fault = Storm::FAULTS
                        .choose(&mut rng)
                        .copied()
                        .unwrap_or(Fault::Kill);
                    let hold = rng.gen_range(storm.hold_min..=storm.hold_max);
                    (*group, fault, hold)
                })
                .collect()
        };
        if chosen.is_empty() {
            self.rounds.rounds_full += 1;
            tracing::info!(faulted, "chaos: storm round skipped, no group free");
            return Ok(());
        }
        let mut first_error = None;
        for (group, fault, hold) in chosen {
            if let Err(error) = self.storm_fault(lab, group, fault, hold).await {
                tracing::warn!(group, ?fault, %error, "chaos: a storm fault could not be injected");
                first_error.get_or_insert(error);
            }
        }
        let now = Instant::now();
        let faulted = (0..self.down_until.len())
            .filter(|g| self.storm_faulted(*g, now))
            .count();
        self.rounds.most_faulted = self.rounds.most_faulted.max(faulted);
        first_error.map_or(Ok(()), Err)
    }

    /// Injects one storm fault on `group`, undone after `hold` (a restart: none to undo, the
    /// group counts as faulted through its quarantine).
    async fn storm_fault(
        &mut self,
        lab: &mut Lab,
        group: usize,
        fault: Fault,
        hold: Duration,
    ) -> Result<(), LabError> {
        let now = Instant::now();
        match fault {
            Fault::Kill => {
                lab.kill(group).await?;
                self.injected.kill += 1;
                self.undo_at(group, now + hold, Recovery::ReviveAsReplica);
            }
            Fault::Freeze => {
                lab.freeze(group).await?;
                self.injected.freeze += 1;
                self.undo_at(group, now + hold, Recovery::Thaw);
            }
            Fault::Partition => {
                // Cut from its replicas and its Sentinels: Sentinel promotes a replica while
                // clients still reach the old master. A heal lifts whatever was cut.
                lab.partition(group, LinkClass::Replica).await?;
                self.undo_at(group, now + hold, Recovery::Heal);
                lab.partition(group, LinkClass::Sentinel).await?;
                self.injected.partition += 1;
            }
            Fault::Restart => {
                lab.restart(group).await?;
                self.injected.restart += 1;
                self.down_until[group] =
                    self.down_until[group].max(Instant::now() + self.quarantine);
            }
            other => {
                tracing::warn!(?other, "chaos: not a storm fault");
                return Ok(());
            }
        }
        self.windows.push(FaultWindow {
            fault,
            group,
            start: now,
            end: self.down_until[group].max(now),
        });
        tracing::info!(
            group,
            ?fault,
            hold_ms = millis(hold),
            "chaos: storm fault injected"
        );
        Ok(())
    }
}

/// A master whose clock runs fast expires keys early: the live lock keys of `group`'s master
/// lose `cut` of their remaining time (or expire, when less is left). One script per key, so
/// a lock released and taken again meanwhile is cut by its own remaining time, never more.
async fn cut_lock_ttls(
    lab: &Lab,
    group: usize,
    keys: &[String],
    cut: Duration,
) -> Result<(), LabError> {
    const CUT: &str = "local left = redis.call('PTTL', KEYS[1]) \
        if left > 0 then redis.call('PEXPIRE', KEYS[1], math.max(1, left - tonumber(ARGV[1]))) end \
        return left";
    let cut_ms = cut.as_millis().to_string();
    for key in keys {
        lab.run_on_master(group, &["EVAL", CUT, "1", key, cut_ms.as_str()])
            .await?;
    }
    Ok(())
}
