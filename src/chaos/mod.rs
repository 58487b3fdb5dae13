//! The chaos harness: workers contend for a few resources (one at a time, or sets of them all
//! or nothing) and for the permits of a semaphore while the fault injector kills, freezes and
//! restarts masters and workers stall past their validity; every hold is reported to the
//! safety checker and every write goes through a fenced store. Used by `quorumlock chaos`
//! and by the bounded chaos test. A [`Storm`] replaces the random faults with a schedule of
//! failovers, and the report's [`Availability`] says how long the locks were out of reach.

mod availability;
pub mod checker;
mod faults;
mod report;
mod stats;
mod store;
mod workers;

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::Rng;

pub use availability::{Availability, GroupOutOfVote};
pub use faults::{Fault, Injected, Storm, StormRounds};
pub use report::{ChaosReport, TimelineFault};
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
    let topology = run_topology(lab, options)?;
    let locks = Locks::connect(topology.clone()).await?;
    let shared = Shared {
        checker: Arc::new(Checker::new()),
        store: Arc::new(FencedStore::new()),
        tally: Arc::new(Tally::default()),
    };
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
            let handles = (
                client.clone(),
                Arc::clone(&shared.checker),
                Arc::clone(&shared.store),
                Arc::clone(&shared.tally),
            );
            let run = workers::work(worker, *pattern, options.clone(), deadline, handles);
            tokio::spawn(run)
        })
        .collect();
    let mut injector = injector_for(lab, options, &topology, permits);
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
    for client in &clients {
        client.close().await;
    }
    // Every lock, crashed holders' included, must be gone one TTL after the last holder.
    tokio::time::sleep(options.ttl + Duration::from_millis(200)).await;
    let locks_left = count_locks_left(&locks, options, permits).await;
    locks.close().await;
    recovered.map_err(lab_failure)?;
    Ok(report::of_run(
        options,
        Finished {
            span: (started, ended),
            topology,
            quarantine_ms: lab.spec().policy().quarantine_ms(),
            permits,
            roles,
            shared,
            injector,
            votes,
            locks_left,
        },
    ))
}

/// What a run's workers share: the checker, the fenced store and the tally.
struct Shared {
    checker: Arc<Checker>,
    store: Arc<FencedStore>,
    tally: Arc<Tally>,
}

/// Everything a finished run leaves for its report.
struct Finished {
    /// When the workers started, and when the last fault was undone.
    span: (Instant, Instant),
    topology: Topology,
    quarantine_ms: u64,
    /// Whether workers took permits of the semaphore.
    permits: bool,
    roles: Vec<Pattern>,
    shared: Shared,
    injector: faults::Injector,
    votes: Option<availability::VoteWatch>,
    locks_left: usize,
}

/// The run's topology after checking the options against the lab: its TTL is the run's.
fn run_topology(lab: &Lab, options: &ChaosOptions) -> Result<Topology, Error> {
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
    Ok(topology)
}

/// The fault injector for this run: the keys a master clock fault cuts (every resource's
/// lock and every permit's slot), and the resources whose slots a migration moves.
fn injector_for(
    lab: &Lab,
    options: &ChaosOptions,
    topology: &Topology,
    permits: bool,
) -> faults::Injector {
    let prefix = &topology.key_prefix;
    let mut lock_keys: Vec<String> = (0..options.resources)
        .map(|index| format!("{prefix}:{{{RESOURCE_PREFIX}{index}}}:lock"))
        .collect();
    let mut resources: Vec<String> = (0..options.resources)
        .map(|index| format!("{RESOURCE_PREFIX}{index}"))
        .collect();
    if permits {
        lock_keys.extend(
            (0..options.permits).map(|slot| format!("{prefix}:{{{SEMAPHORE}}}:permit:{slot}")),
        );
        resources.push(SEMAPHORE.to_string());
    }
    let storm_faults = Storm::FAULTS.to_vec();
    // Mixed configs include a drift_factor of 0.005: cut within the smallest allowance.
    let drift_factor = if options.mixed_configs {
        topology.drift_factor.min(0.005)
    } else {
        topology.drift_factor
    };
    faults::Injector::new(
        topology.groups.len(),
        lab.spec().cluster.map(|shape| shape.shards),
        resources,
        if options.storm.is_some() {
            &storm_faults
        } else {
            &options.faults
        },
        options.max_down,
        Duration::from_millis(lab.spec().policy().quarantine_ms()),
        (options.ttl, drift_factor),
        lock_keys,
    )
}

/// Locks and permits still held. Read resource by resource: a listing does not walk Cluster
/// groups.
async fn count_locks_left(locks: &Locks, options: &ChaosOptions, permits: bool) -> usize {
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
    locks_left
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
