//! The chaos harness: workers contend for a few resources (one at a time, or sets of them all
//! or nothing) and for the permits of a semaphore while the fault injector kills, freezes and
//! restarts masters and workers stall past their validity; every hold is reported to the
//! safety checker and every write goes through a fenced store. Used by `quorumlock chaos`
//! and by the bounded chaos test. A [`Storm`] replaces the random faults with a schedule of
//! failovers, and the report's [`Availability`] says how long the locks were out of reach.

mod availability;
pub mod checker;
mod faults;
mod stats;
mod store;
mod workers;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::Rng;
use serde::Serialize;

pub use availability::{Availability, GroupOutOfVote};
pub use faults::{Fault, Injected, Storm, StormRounds};
pub use stats::FaultStats;
pub use store::FencedStore;
pub use workers::{Pattern, PatternStats, SEMAPHORE, slot_key};

use crate::chaos::checker::Checker;
use crate::chaos::workers::PatternTally;
use crate::lab::{Lab, LabError, LabSpec};
use crate::millis;
use crate::{Clock, Error, Locks, Topology};

/// Resource names of a chaos run start with this.
pub const RESOURCE_PREFIX: &str = "chaos:";

/// The production policy's longest TTL (docs/safety.md, "Operating rules").
pub const PRODUCTION_MAX_TTL_MS: u64 = 60_000;

/// The production policy's `min-replicas-max-lag` on every data node: a write window of
/// 12 000 ms.
pub const PRODUCTION_MIN_REPLICAS_MAX_LAG_S: u64 = 10;

/// What to run.
#[derive(Debug, Clone)]
pub struct ChaosOptions {
    pub duration: Duration,
    /// Workers on the resource pool: single locks, and with [`Pattern::Sets`] one in three
    /// takes sets of two or three resources instead.
    pub workers: usize,
    /// The pool's size.
    pub resources: usize,
    /// What the workers take: single locks, sets, permits.
    pub patterns: Vec<Pattern>,
    /// Workers that take permits of one semaphore, with [`Pattern::Permits`].
    pub permit_workers: usize,
    /// The semaphore's permit count.
    pub permits: u32,
    /// The faults injected at random (ignored with `storm`, which injects [`Storm::FAULTS`]).
    pub faults: Vec<Fault>,
    /// The storm schedule instead of random faults every `fault_every`.
    pub storm: Option<Storm>,
    /// The lab's masters take the production policy: `max_ttl_ms` 60 000 and
    /// `min-replicas-max-lag 10` (a write window of 12 000 ms), so a new master sits out
    /// 72 s; without it the policy is the run's TTL and a lag of one second.
    pub production_policy: bool,
    /// The lab admits its masters in acknowledged mode ([`LabSpec::acknowledged`]).
    pub acknowledged: bool,
    /// TTL of every lease; also the topology's max TTL, so quarantines stay this short.
    pub ttl: Duration,
    /// How long a worker keeps trying to acquire.
    pub wait: Duration,
    /// Time between two fault decisions.
    pub fault_every: Duration,
    /// Groups disrupted at once, at most.
    pub max_down: usize,
    /// Chance that a holder stalls past its validity before writing.
    pub pause_chance: f64,
    /// Chance that a holder "crashes": it never releases, the TTL must free the lock.
    pub crash_chance: f64,
    /// Workers run with different client configurations: `max_ttl_ms` and `drift_factor`
    /// vary from one worker to the next, as during a rolling change of the config.
    pub mixed_configs: bool,
}

impl Default for ChaosOptions {
    fn default() -> Self {
        ChaosOptions {
            duration: Duration::from_secs(60),
            workers: 8,
            resources: 3,
            patterns: Pattern::ALL.to_vec(),
            permit_workers: 4,
            permits: 2,
            faults: vec![Fault::Kill, Fault::Freeze, Fault::Restart, Fault::Pause],
            storm: None,
            production_policy: false,
            acknowledged: false,
            ttl: Duration::from_millis(1000),
            wait: Duration::from_secs(5),
            fault_every: Duration::from_millis(1500),
            max_down: 2,
            pause_chance: 0.01,
            crash_chance: 0.005,
            mixed_configs: false,
        }
    }
}

impl ChaosOptions {
    /// Whether the run injects `fault`: one of the storm's, or of `faults` without a storm.
    pub fn injects(&self, fault: Fault) -> bool {
        match self.storm {
            Some(_) => Storm::FAULTS.contains(&fault),
            None => self.faults.contains(&fault),
        }
    }
}

/// What happened, and whether it was safe.
#[derive(Debug, Clone, Serialize)]
pub struct ChaosReport {
    pub duration_ms: u64,
    /// Acquisitions of every kind: single locks, sets and permits.
    pub acquisitions: u64,
    pub acquire_attempts: u64,
    pub failed_acquires: u64,
    /// Sets of resources acquired (all or nothing).
    pub set_acquisitions: u64,
    /// Permits of the semaphore acquired.
    pub permit_acquisitions: u64,
    /// Workers, attempts and acquisitions per pattern.
    pub per_pattern: Vec<PatternStats>,
    /// Share of acquire calls that succeeded within their wait (the injector keeps at most
    /// `max_down` groups disrupted, so every call was made in that condition).
    pub success_rate: f64,
    pub faults_injected: Injected,
    pub pauses: u64,
    pub crashes: u64,
    /// Overlaps of holders with every assumption kept: violations.
    pub overlaps: usize,
    /// Overlaps while a clock assumption was broken on purpose (a master clock jump, a
    /// client clock beyond the drift allowance): not violations of the promise, which
    /// excludes them, but never a pass either; the fenced store must still reject every
    /// stale write.
    pub overlaps_assumption_broken: usize,
    /// Of `overlaps`, those where a set held the resource.
    pub set_overlaps: usize,
    /// Of `overlaps`, those of two holders of one semaphore slot.
    pub slot_overlaps: usize,
    /// The semaphore's permit count (0 without permit workers).
    pub permits: u32,
    /// The most permits held at once, labelled holds included.
    pub most_permits_held: usize,
    /// Permits that began while the whole count was held, with every assumption kept:
    /// violations.
    pub permits_over: usize,
    /// Permits beyond the count that only a broken clock assumption explains (labelled).
    pub permits_over_assumption_broken: usize,
    /// Fencing tokens that did not grow on a resource (per member for sets) or on a slot.
    pub fencing_regressions: usize,
    /// Of `fencing_regressions`, those where a set was one of the holds.
    pub set_fencing_regressions: usize,
    /// Of `fencing_regressions`, those on a semaphore slot.
    pub slot_fencing_regressions: usize,
    pub stale_writes_rejected: u64,
    /// Writes the fenced store accepted from a holder after a newer holder had been granted
    /// the lock (before that one's first write).
    pub stale_writes_accepted: u64,
    /// Writes refused although their holder's lease was valid, with every assumption kept: a
    /// safety violation.
    pub valid_writes_rejected: u64,
    /// Writes refused although their holder believed its lease valid, while a clock
    /// assumption was broken (its own clock beyond the allowance, or a master clock jump
    /// within one TTL): the fenced store doing its job when the lease could not.
    pub valid_writes_rejected_assumption_broken: u64,
    /// Locks and permits still held after every worker stopped and one TTL passed.
    pub locks_left: usize,
    /// What happened during each kind of fault.
    pub per_fault: Vec<FaultStats>,
    /// The longest time in the run with no successful acquire.
    pub longest_gap_ms: u64,
    /// Grants, the share of acquires that succeeded, the longest gap and when it began, and
    /// with a storm each group's time out of the vote.
    pub availability: Availability,
    /// Storm rounds, and those that found as many groups faulted as allowed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub storm: Option<StormRounds>,
    /// With a storm, every fault in the order injected: when, where, and how long the group
    /// counted as faulted.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub timeline: Vec<TimelineFault>,
}

/// One storm fault on the run's timeline.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct TimelineFault {
    /// Milliseconds after the run started.
    pub at_ms: u64,
    pub group: String,
    pub fault: &'static str,
    /// How long the group counted as faulted: the hold until the fault was undone, or for a
    /// restart its quarantine.
    pub faulted_ms: u64,
}

impl ChaosReport {
    pub fn violations(&self) -> u64 {
        self.overlaps as u64
            + self.permits_over as u64
            + self.fencing_regressions as u64
            + self.valid_writes_rejected
            + self.stale_writes_accepted
            + self.locks_left as u64
    }

    /// The one-word outcome: no violation and no assumption broken, no violation but
    /// overlaps (or permits beyond the count) under broken clock assumptions, or violations.
    pub fn verdict(&self) -> &'static str {
        let labelled = self.overlaps_assumption_broken + self.permits_over_assumption_broken;
        match (self.is_safe(), labelled) {
            (true, 0) => "SAFE",
            (true, _) => {
                "SAFE WITHIN ITS ASSUMPTIONS (overlaps or extra permits only while a clock assumption was broken; every stale write rejected)"
            }
            (false, _) => "VIOLATIONS FOUND",
        }
    }

    pub fn is_safe(&self) -> bool {
        self.violations() == 0
    }

    /// A human-readable summary.
    pub fn table(&self) -> String {
        let f = &self.faults_injected;
        let mut lines = vec![
            format!(
                "duration                  {:.1} s",
                self.duration_ms as f64 / 1000.0
            ),
            format!(
                "acquisitions              {} (sets {}, permits {})",
                self.acquisitions, self.set_acquisitions, self.permit_acquisitions
            ),
            format!(
                "failed acquires           {} of {} ({:.2}% succeeded within their wait)",
                self.failed_acquires,
                self.acquire_attempts,
                self.success_rate * 100.0
            ),
        ];
        for stats in &self.per_pattern {
            let rate = if stats.acquire_attempts == 0 {
                0.0
            } else {
                stats.acquisitions as f64 / stats.acquire_attempts as f64 * 100.0
            };
            lines.push(format!(
                "  {:<8} {:>2} workers, acquisitions {:>6}, failed {:>4} ({:.2}% succeeded)",
                stats.pattern, stats.workers, stats.acquisitions, stats.failed_acquires, rate
            ));
        }
        lines.extend([
            format!(
                "faults injected           {} (kill {}, freeze {}, restart {}, partition {}, latency {}, clock drift {}, clock jump {}, migrate {}), worker pauses {}, worker crashes {}",
                f.total(),
                f.kill,
                f.freeze,
                f.restart,
                f.partition,
                f.latency,
                f.clock_drift,
                f.clock_jump,
                f.migrate,
                self.pauses,
                self.crashes
            ),
            format!(
                "overlaps                  {} (set members {}, permit slots {})",
                self.overlaps, self.set_overlaps, self.slot_overlaps
            ),
            format!(
                "overlaps, assumption broken {}",
                self.overlaps_assumption_broken
            ),
            format!(
                "permits held at once      at most {} of {}",
                self.most_permits_held, self.permits
            ),
            format!("permits beyond the count  {}", self.permits_over),
            format!(
                "  with an assumption broken {}",
                self.permits_over_assumption_broken
            ),
            format!(
                "fencing regressions       {} (set members {}, permit slots {})",
                self.fencing_regressions,
                self.set_fencing_regressions,
                self.slot_fencing_regressions
            ),
            format!("stale writes rejected     {}", self.stale_writes_rejected),
            format!("stale writes accepted     {}", self.stale_writes_accepted),
            format!("valid writes rejected     {}", self.valid_writes_rejected),
            format!(
                "  with an assumption broken {}",
                self.valid_writes_rejected_assumption_broken
            ),
            format!("locks still present       {}", self.locks_left),
            format!(
                "longest gap, no acquire   {} ms, from {:.1} s into the run",
                self.availability.longest_gap_ms,
                self.availability.longest_gap_started_ms as f64 / 1000.0
            ),
        ]);
        for stats in &self.per_fault {
            lines.push(format!(
                "  {:<10} injected {:>4}, acquisitions during {:>6}, longest gap {:>6} ms",
                stats.fault, stats.injected, stats.acquisitions, stats.longest_gap_ms
            ));
        }
        lines.extend(self.availability_lines());
        lines.push(format!("verdict                   {}", self.verdict()));
        lines.join("\n")
    }

    fn availability_lines(&self) -> Vec<String> {
        let a = &self.availability;
        let mut lines = vec![format!(
            "grants                    {} ({:.1}/s); {:.2}% of {} acquires (wait {} ms) succeeded",
            a.grants,
            a.grants_per_s,
            a.success_share * 100.0,
            a.acquires,
            a.wait_ms
        )];
        if let Some(rounds) = &self.storm {
            lines.push(format!(
                "storm rounds              {} ({} found every allowed group faulted; at most {} faulted at once)",
                rounds.rounds, rounds.rounds_full, rounds.most_faulted
            ));
        }
        for fault in &self.timeline {
            lines.push(format!(
                "  at {:>6.1} s {:<4} {:<10} faulted {:>5.1} s",
                fault.at_ms as f64 / 1000.0,
                fault.group,
                fault.fault,
                fault.faulted_ms as f64 / 1000.0
            ));
        }
        if let Some(no_quorum_ms) = a.no_quorum_ms {
            lines.push(format!(
                "no quorum (health, 1/s)   {:.1} s; quarantine {} ms",
                no_quorum_ms as f64 / 1000.0,
                a.quarantine_ms
            ));
        }
        for group in &a.out_of_vote {
            lines.push(format!(
                "  {:<10} out of the vote {:>7.1} s, longest {:>7.1} s",
                group.group,
                group.out_of_vote_ms as f64 / 1000.0,
                group.longest_out_ms as f64 / 1000.0
            ));
        }
        lines
    }
}

#[derive(Default)]
struct Tally {
    attempts: AtomicU64,
    acquired: AtomicU64,
    failed: AtomicU64,
    pauses: AtomicU64,
    crashes: AtomicU64,
    /// Per pattern, in the order of `Pattern::ALL`.
    patterns: [PatternTally; 3],
    /// Writes refused although their holders believed their leases valid.
    valid_writes_rejected: Mutex<Vec<RefusedWrite>>,
}

/// `spec` shaped for chaos runs: its lock policy is the runs' TTL, so a group whose master
/// died or restarted sits out that long, not the default policy's minute. Partitions and
/// slow links need the lab's relays (and `spec.binary` to run them). Every fault that takes
/// a master away may split its group's brain: a partitioned, thawed, or restarted old master
/// comes back as a master beside the promoted replica, and some clients may reach it until
/// Sentinel demotes it. That is only safe with `min-replicas-to-write` (docs/safety.md), so
/// those labs set it, with two replicas per group: with one, a promoted replica has none left
/// and takes no writes until the old master rejoins. The production policy replaces the TTL
/// and the lag with [`PRODUCTION_MAX_TTL_MS`] and [`PRODUCTION_MIN_REPLICAS_MAX_LAG_S`];
/// `acknowledged` sets [`LabSpec::acknowledged`].
pub fn lab_spec(spec: LabSpec, options: &ChaosOptions) -> LabSpec {
    let spec = if options.production_policy {
        LabSpec {
            min_replicas_max_lag_s: Some(PRODUCTION_MIN_REPLICAS_MAX_LAG_S),
            ..spec
        }
    } else {
        spec
    };
    let max_ttl_ms = if options.production_policy {
        PRODUCTION_MAX_TTL_MS.max(millis(options.ttl))
    } else {
        millis(options.ttl)
    };
    let spec = LabSpec {
        acknowledged: spec.acknowledged || options.acknowledged,
        ..spec
    };
    let has = |fault| options.injects(fault);
    let split_brain =
        has(Fault::Partition) || has(Fault::Freeze) || has(Fault::Kill) || has(Fault::Restart);
    if spec.cluster.is_some() {
        // A Cluster lab has no relays: partitions, latency and clock faults are refused
        // before it starts (`check_cluster`). A frozen primary thawed after the cluster
        // promoted its replica may take writes until it hears of the new primary; with
        // `min-replicas-to-write` it refuses them, its replica gone. With one replica per
        // shard a promoted replica takes no writes until the old primary rejoins under it:
        // availability, not safety, and half the processes of two replicas.
        return LabSpec {
            max_ttl_ms,
            replicas: spec.replicas.max(1),
            min_replicas_max_lag_s: if split_brain {
                Some(spec.min_replicas_max_lag_s.unwrap_or(1))
            } else {
                spec.min_replicas_max_lag_s
            },
            ..spec
        };
    }
    LabSpec {
        max_ttl_ms,
        links: spec.links || has(Fault::Partition) || has(Fault::Latency),
        min_replicas_max_lag_s: if split_brain {
            Some(spec.min_replicas_max_lag_s.unwrap_or(1))
        } else {
            spec.min_replicas_max_lag_s
        },
        replicas: if split_brain {
            spec.replicas.max(2)
        } else {
            spec.replicas
        },
        ..spec
    }
}

/// Whether `options` suit a lab of Cluster groups: no sets (a set spans slots), and only the
/// faults a Cluster lab can inject (no relays for partitions and latency; lock keys spread
/// over shards for clock faults). The error names the option.
pub fn check_cluster(options: &ChaosOptions) -> Result<(), Error> {
    if options.storm.is_some() {
        return Err(Error::invalid(
            "storm",
            "a storm partitions masters from their Sentinels: it needs Sentinel groups",
        ));
    }
    if options.patterns.contains(&Pattern::Sets) {
        return Err(Error::invalid(
            "patterns",
            "sets are refused on Cluster groups (a set spans hash slots): use locks,permits",
        ));
    }
    let unsupported: Vec<&str> = options
        .faults
        .iter()
        .filter(|fault| !Fault::ON_CLUSTER.contains(fault))
        .map(|fault| fault.name())
        .collect();
    if !unsupported.is_empty() {
        return Err(Error::invalid(
            "faults",
            format!(
                "{} cannot be injected on a Cluster lab; use {}",
                unsupported.join(", "),
                Fault::ON_CLUSTER.map(Fault::name).join(",")
            ),
        ));
    }
    Ok(())
}

/// Whether `options` suit the Sentinel lab: a slot migration needs Cluster groups.
fn check_sentinel(options: &ChaosOptions) -> Result<(), Error> {
    if options.injects(Fault::Migrate) {
        return Err(Error::invalid(
            "faults",
            "migrate moves a hash slot between shards: it needs a Cluster lab (--cluster)",
        ));
    }
    Ok(())
}

/// Runs workers and faults against `lab` for `options.duration`, then checks the outcome.
pub async fn run(lab: &mut Lab, options: &ChaosOptions) -> Result<ChaosReport, Error> {
    if lab.spec().cluster.is_some() {
        check_cluster(options)?;
    } else {
        check_sentinel(options)?;
    }
    if let Some(storm) = &options.storm {
        storm
            .check()
            .map_err(|reason| Error::invalid("storm", reason))?;
    }
    let policy = lab.spec().policy();
    if millis(options.ttl) > policy.max_ttl_ms {
        return Err(Error::invalid(
            "ttl",
            format!(
                "{} ms is above the lab's lock policy ({} ms); start the lab with chaos::lab_spec",
                millis(options.ttl),
                policy.max_ttl_ms
            ),
        ));
    }
    let mut topology = lab.topology();
    topology.max_ttl_ms = millis(options.ttl);
    topology.validate()?;
    let locks = Locks::connect(topology.clone()).await?;
    let checker = Arc::new(Checker::new());
    let store = Arc::new(FencedStore::new());
    let tally = Arc::new(Tally::default());
    let roles = workers::roles(options);
    let permits = options.patterns.contains(&Pattern::Permits) && options.permit_workers > 0;
    // Every worker is a client of its own: its own connections, config and clock.
    let mut clients = Vec::with_capacity(roles.len());
    for worker in 0..roles.len() {
        let (config, clock) = worker_setup(worker, &topology, options);
        clients.push(Locks::connect_with_clock(config, clock).await?);
    }
    let started = Instant::now();
    let deadline = started + options.duration;
    let workers: Vec<_> = clients
        .iter()
        .zip(&roles)
        .enumerate()
        .map(|(worker, (client, pattern))| {
            let shared = (
                client.clone(),
                checker.clone(),
                store.clone(),
                tally.clone(),
            );
            tokio::spawn(workers::work(
                worker,
                *pattern,
                options.clone(),
                deadline,
                shared,
            ))
        })
        .collect();

    // The keys a master clock fault cuts: every resource's lock and every permit's slot.
    let mut lock_keys: Vec<String> = (0..options.resources)
        .map(|index| format!("{}:{{{RESOURCE_PREFIX}{index}}}:lock", topology.key_prefix))
        .collect();
    if permits {
        lock_keys.extend(
            (0..options.permits)
                .map(|slot| format!("{}:{{{SEMAPHORE}}}:permit:{slot}", topology.key_prefix)),
        );
    }
    // A slot migration moves the slot of one of the run's resources.
    let mut resources: Vec<String> = (0..options.resources)
        .map(|index| format!("{RESOURCE_PREFIX}{index}"))
        .collect();
    if permits {
        resources.push(SEMAPHORE.to_string());
    }
    let storm_faults = Storm::FAULTS.to_vec();
    let mut injector = faults::Injector::new(
        topology.groups.len(),
        lab.spec().cluster.map(|shape| shape.shards),
        resources,
        if options.storm.is_some() {
            &storm_faults
        } else {
            &options.faults
        },
        options.max_down,
        Duration::from_millis(policy.quarantine_ms()),
        // Mixed configs include a drift_factor of 0.005: cut within the smallest allowance.
        (
            options.ttl,
            if options.mixed_configs {
                topology.drift_factor.min(0.005)
            } else {
                topology.drift_factor
            },
        ),
        lock_keys,
    );
    // A storm's figures include each group's time out of the vote, from `health`.
    let votes = options
        .storm
        .map(|_| tokio::spawn(availability::watch_votes(locks.clone(), deadline)));
    match &options.storm {
        Some(storm) => storm_faults_until(lab, &mut injector, storm, (started, deadline)).await,
        None => random_faults_until(lab, &mut injector, options.fault_every, deadline).await,
    }
    for worker in workers {
        let _ = worker.await;
    }
    let votes = match votes {
        Some(watcher) => watcher.await.ok(),
        None => None,
    };
    let recovered = injector.recover(lab, true).await;
    let ended = Instant::now();
    let duration = ended - started;
    for client in &clients {
        client.close().await;
    }

    // Every lock, crashed holders' included, must be gone one TTL after the last holder.
    tokio::time::sleep(options.ttl + Duration::from_millis(200)).await;
    // Read resource by resource: a listing does not walk Cluster groups.
    let mut locks_left = 0;
    for index in 0..options.resources {
        let resource = format!("{RESOURCE_PREFIX}{index}");
        if locks
            .status(&resource)
            .await
            .is_ok_and(|status| status.held)
        {
            locks_left += 1;
        }
    }
    if permits {
        locks_left += locks
            .semaphore_status(SEMAPHORE)
            .await
            .map(|status| status.holders.len())
            .unwrap_or(0);
    }
    locks.close().await;
    recovered.map_err(lab_failure)?;

    // A grant may land on a master up to one call timeout before its holder hears of it.
    let in_flight = topology.call_timeout();
    let verdict = checker.verdict_with(&injector.jumps, in_flight);
    let rejected_valid = tally
        .valid_writes_rejected
        .lock()
        .map(|list| list.clone())
        .unwrap_or_default();
    // Only the writer's own hold explains a refusal: its clock, or a jump that cut its keys
    // while it held them.
    let explained = |write: &RefusedWrite| {
        write.clock_broken
            || injector
                .jumps
                .iter()
                .any(|jump| write.acquired_at <= *jump + in_flight && *jump <= write.at)
    };
    let broken_valid = rejected_valid.iter().filter(|r| explained(r)).count() as u64;
    let valid_writes_rejected = rejected_valid.len() as u64 - broken_valid;
    let (per_fault, longest_gap) =
        stats::per_fault(&injector.windows, &checker.holds(), (started, ended));
    let attempts = tally.attempts.load(Ordering::Relaxed);
    let acquired = tally.acquired.load(Ordering::Relaxed);
    let per_pattern = workers::pattern_stats(&roles, &tally);
    let acquired_by = |pattern: Pattern| {
        per_pattern
            .iter()
            .find(|stats| stats.pattern == pattern.name())
            .map_or(0, |stats| stats.acquisitions)
    };
    let peak = verdict
        .semaphores
        .iter()
        .find(|peak| peak.name == SEMAPHORE)
        .map_or(0, |peak| peak.most_held);
    Ok(ChaosReport {
        duration_ms: millis(duration),
        acquisitions: acquired,
        acquire_attempts: attempts,
        failed_acquires: tally.failed.load(Ordering::Relaxed),
        set_acquisitions: acquired_by(Pattern::Sets),
        permit_acquisitions: acquired_by(Pattern::Permits),
        per_pattern,
        success_rate: if attempts == 0 {
            0.0
        } else {
            acquired as f64 / attempts as f64
        },
        faults_injected: injector.injected.clone(),
        pauses: tally.pauses.load(Ordering::Relaxed),
        crashes: tally.crashes.load(Ordering::Relaxed),
        overlaps: verdict.overlaps,
        overlaps_assumption_broken: verdict.overlaps_assumption_broken,
        set_overlaps: verdict.set_overlaps,
        slot_overlaps: verdict.slot_overlaps,
        permits: if permits { options.permits } else { 0 },
        most_permits_held: peak,
        permits_over: verdict.permits_over,
        permits_over_assumption_broken: verdict.permits_over_assumption_broken,
        fencing_regressions: verdict.fencing_regressions,
        set_fencing_regressions: verdict.set_fencing_regressions,
        slot_fencing_regressions: verdict.slot_fencing_regressions,
        stale_writes_rejected: store.rejected() - rejected_valid.len() as u64,
        stale_writes_accepted: store.stale_accepted(),
        valid_writes_rejected,
        valid_writes_rejected_assumption_broken: broken_valid,
        locks_left,
        per_fault,
        longest_gap_ms: longest_gap.ms,
        availability: Availability {
            wait_ms: millis(options.wait),
            acquires: attempts,
            success_share: if attempts == 0 {
                0.0
            } else {
                acquired as f64 / attempts as f64
            },
            grants: acquired,
            grants_per_s: acquired as f64 / duration.as_secs_f64().max(0.001),
            longest_gap_ms: longest_gap.ms,
            longest_gap_started_ms: millis(longest_gap.start.saturating_duration_since(started)),
            quarantine_ms: policy.quarantine_ms(),
            no_quorum_ms: votes.as_ref().map(|watch| watch.no_quorum_ms),
            out_of_vote: votes.map(|watch| watch.groups).unwrap_or_default(),
        },
        storm: options.storm.map(|_| injector.rounds),
        timeline: if options.storm.is_some() {
            timeline(&injector.windows, &topology, started)
        } else {
            Vec::new()
        },
    })
}

/// The faults of `windows` on the run's timeline, with the topology's group names.
fn timeline(
    windows: &[faults::FaultWindow],
    topology: &Topology,
    started: Instant,
) -> Vec<TimelineFault> {
    windows
        .iter()
        .map(|window| TimelineFault {
            at_ms: millis(window.start.saturating_duration_since(started)),
            group: topology
                .groups
                .get(window.group)
                .map_or_else(|| format!("#{}", window.group), |g| g.name.clone()),
            fault: window.fault.name(),
            faulted_ms: millis(window.end.saturating_duration_since(window.start)),
        })
        .collect()
}

/// Random faults: one decision every `every` until `deadline` ([`faults::Injector::step`]).
async fn random_faults_until(
    lab: &mut Lab,
    injector: &mut faults::Injector,
    every: Duration,
    deadline: Instant,
) {
    let mut ticks = tokio::time::interval(every);
    ticks.tick().await;
    while Instant::now() < deadline {
        ticks.tick().await;
        if Instant::now() >= deadline {
            break;
        }
        if let Err(error) = injector.step(lab).await {
            tracing::warn!(%error, "chaos: a fault could not be injected");
        }
    }
}

/// The storm: a round every `storm.every` from the start, and each fault undone when its hold
/// ends (the injector says when the next one is due), until `deadline`.
async fn storm_faults_until(
    lab: &mut Lab,
    injector: &mut faults::Injector,
    storm: &Storm,
    (started, deadline): (Instant, Instant),
) {
    let mut next_round = started + storm.every;
    loop {
        let wake = injector
            .next_recovery()
            .map_or(next_round, |due| due.min(next_round))
            .min(deadline);
        tokio::time::sleep_until(wake.into()).await;
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        if now < next_round {
            if let Err(error) = injector.recover(lab, false).await {
                tracing::warn!(%error, "chaos: a fault could not be undone");
            }
            continue;
        }
        if let Err(error) = injector.storm_round(lab, storm).await {
            tracing::warn!(%error, "chaos: a storm round failed");
        }
        // A round that ran late does not bunch up the next ones.
        while next_round <= Instant::now() {
            next_round += storm.every;
        }
    }
}

/// A write refused although its holder believed its lease valid.
#[derive(Debug, Clone, Copy)]
struct RefusedWrite {
    at: Instant,
    /// When the holder's acquire returned.
    acquired_at: Instant,
    /// The holder's clock ran beyond the drift allowance.
    clock_broken: bool,
}

impl Tally {
    fn valid_write_rejected(&self, acquired_at: Instant, clock_broken: bool) {
        if let Ok(mut list) = self.valid_writes_rejected.lock() {
            list.push(RefusedWrite {
                at: Instant::now(),
                acquired_at,
                clock_broken,
            });
        }
    }
}

/// A worker's client config and clock. With clock faults every worker's wall clock is off by
/// up to two seconds (fencing proposals must cope) and runs at its own rate within the drift
/// allowance; one worker in four runs 10% slow, far beyond it, and its holds are labelled.
/// With mixed configs `max_ttl_ms` and `drift_factor` differ from worker to worker.
fn worker_setup(worker: usize, topology: &Topology, options: &ChaosOptions) -> (Topology, Clock) {
    let mut config = topology.clone();
    if options.mixed_configs {
        config.max_ttl_ms = millis(options.ttl) * (1 + worker as u64 % 3);
        config.drift_factor = [0.01, 0.02, 0.005][worker % 3];
    }
    let clock = if options.injects(Fault::Clock) {
        let mut rng = rand::thread_rng();
        let offset = rng.gen_range(-2_000_000..=2_000_000);
        let rate = if worker % 4 == 3 {
            0.9
        } else {
            // Within half the smallest allowance: a master's clock may drift the other half.
            1.0 + rng.gen_range(-0.0025..=0.0025)
        };
        Clock::skewed(offset, rate)
    } else {
        Clock::system()
    };
    (config, clock)
}

/// Whether a worker's clock runs outside the drift allowance of its config.
fn clock_broken(clock: &Clock, drift_factor: f64) -> bool {
    (1.0 - clock.rate()).abs() > drift_factor / 2.0
}

fn lab_failure(error: LabError) -> Error {
    Error::Setup {
        group: "lab".into(),
        message: error.to_string(),
    }
}
