//! The chaos harness: workers contend for a few resources while the fault injector kills,
//! freezes and restarts masters and workers stall past their validity; every hold is reported
//! to the safety checker and every write goes through a fenced store. Used by
//! `quorumlock chaos` and by the bounded chaos test.

pub mod checker;
mod faults;
mod store;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::Rng;
use serde::Serialize;

pub use faults::{Fault, Injected};
pub use store::FencedStore;

use crate::Error;
use crate::Locks;
use crate::chaos::checker::{Checker, Hold};
use crate::engine::clock::millis;
use crate::lab::{Lab, LabError, LabSpec};

/// Resource names of a chaos run start with this.
pub const RESOURCE_PREFIX: &str = "chaos:";

/// What to run.
#[derive(Debug, Clone)]
pub struct ChaosOptions {
    pub duration: Duration,
    pub workers: usize,
    pub resources: usize,
    pub faults: Vec<Fault>,
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
}

impl Default for ChaosOptions {
    fn default() -> Self {
        ChaosOptions {
            duration: Duration::from_secs(60),
            workers: 8,
            resources: 3,
            faults: vec![Fault::Kill, Fault::Freeze, Fault::Restart, Fault::Pause],
            ttl: Duration::from_millis(1000),
            wait: Duration::from_secs(5),
            fault_every: Duration::from_millis(1500),
            max_down: 2,
            pause_chance: 0.01,
            crash_chance: 0.005,
        }
    }
}

/// What happened, and whether it was safe.
#[derive(Debug, Clone, Serialize)]
pub struct ChaosReport {
    pub duration_ms: u64,
    pub acquisitions: u64,
    pub acquire_attempts: u64,
    pub failed_acquires: u64,
    /// Share of acquire calls that succeeded within their wait (the injector keeps at most
    /// `max_down` groups disrupted, so every call was made in that condition).
    pub success_rate: f64,
    pub faults_injected: Injected,
    pub pauses: u64,
    pub crashes: u64,
    pub overlaps: usize,
    pub fencing_regressions: usize,
    pub stale_writes_rejected: u64,
    /// Writes refused although their holder's lease was valid: a safety violation.
    pub valid_writes_rejected: u64,
    /// Locks still held after every worker stopped and one TTL passed.
    pub locks_left: usize,
}

impl ChaosReport {
    pub fn violations(&self) -> u64 {
        self.overlaps as u64
            + self.fencing_regressions as u64
            + self.valid_writes_rejected
            + self.locks_left as u64
    }

    pub fn is_safe(&self) -> bool {
        self.violations() == 0
    }

    /// A human-readable summary.
    pub fn table(&self) -> String {
        let f = &self.faults_injected;
        [
            format!("duration                  {:.1} s", self.duration_ms as f64 / 1000.0),
            format!("acquisitions              {}", self.acquisitions),
            format!(
                "failed acquires           {} of {} ({:.2}% succeeded within their wait)",
                self.failed_acquires,
                self.acquire_attempts,
                self.success_rate * 100.0
            ),
            format!(
                "faults injected           {} (kill {}, freeze {}, restart {}), worker pauses {}, worker crashes {}",
                f.total(),
                f.kill,
                f.freeze,
                f.restart,
                self.pauses,
                self.crashes
            ),
            format!("overlaps                  {}", self.overlaps),
            format!("fencing regressions       {}", self.fencing_regressions),
            format!("stale writes rejected     {}", self.stale_writes_rejected),
            format!("valid writes rejected     {}", self.valid_writes_rejected),
            format!("locks still present       {}", self.locks_left),
            format!("verdict                   {}", if self.is_safe() { "SAFE" } else { "VIOLATIONS FOUND" }),
        ]
        .join("\n")
    }
}

#[derive(Default)]
struct Tally {
    attempts: AtomicU64,
    acquired: AtomicU64,
    failed: AtomicU64,
    pauses: AtomicU64,
    crashes: AtomicU64,
    valid_writes_rejected: AtomicU64,
}

/// `spec` shaped for chaos runs: its lock policy is the runs' TTL, so a group whose master
/// died or restarted sits out that long, not the default policy's minute.
pub fn lab_spec(spec: LabSpec, options: &ChaosOptions) -> LabSpec {
    LabSpec {
        max_ttl_ms: millis(options.ttl),
        ..spec
    }
}

/// Runs workers and faults against `lab` for `options.duration`, then checks the outcome.
pub async fn run(lab: &mut Lab, options: &ChaosOptions) -> Result<ChaosReport, Error> {
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
    let locks = Locks::connect(topology).await?;
    let checker = Arc::new(Checker::new());
    let store = Arc::new(FencedStore::new());
    let tally = Arc::new(Tally::default());
    let started = Instant::now();
    let deadline = started + options.duration;
    let workers: Vec<_> = (0..options.workers)
        .map(|worker| {
            let shared = (locks.clone(), checker.clone(), store.clone(), tally.clone());
            tokio::spawn(work(worker, options.clone(), deadline, shared))
        })
        .collect();

    let mut injector = faults::Injector::new(
        lab.topology().groups.len(),
        &options.faults,
        options.max_down,
        Duration::from_millis(policy.quarantine_ms()),
    );
    let mut ticks = tokio::time::interval(options.fault_every);
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
    for worker in workers {
        let _ = worker.await;
    }
    let recovered = injector.recover(lab, true).await;
    let duration = started.elapsed();

    // Every lock, crashed holders' included, must be gone one TTL after the last holder.
    tokio::time::sleep(options.ttl + Duration::from_millis(200)).await;
    let locks_left = locks
        .list(RESOURCE_PREFIX, 1000)
        .await
        .map(|list| list.locks.len())
        .unwrap_or(0);
    locks.close().await;
    recovered.map_err(lab_failure)?;

    let verdict = checker.verdict();
    let attempts = tally.attempts.load(Ordering::Relaxed);
    let acquired = tally.acquired.load(Ordering::Relaxed);
    Ok(ChaosReport {
        duration_ms: millis(duration),
        acquisitions: acquired,
        acquire_attempts: attempts,
        failed_acquires: tally.failed.load(Ordering::Relaxed),
        success_rate: if attempts == 0 {
            0.0
        } else {
            acquired as f64 / attempts as f64
        },
        faults_injected: injector.injected.clone(),
        pauses: tally.pauses.load(Ordering::Relaxed),
        crashes: tally.crashes.load(Ordering::Relaxed),
        overlaps: verdict.overlaps,
        fencing_regressions: verdict.fencing_regressions,
        stale_writes_rejected: store.rejected()
            - tally.valid_writes_rejected.load(Ordering::Relaxed),
        valid_writes_rejected: tally.valid_writes_rejected.load(Ordering::Relaxed),
        locks_left,
    })
}

fn lab_failure(error: LabError) -> Error {
    Error::Setup {
        group: "lab".into(),
        message: error.to_string(),
    }
}

async fn work(
    worker: usize,
    options: ChaosOptions,
    deadline: Instant,
    (locks, checker, store, tally): (Locks, Arc<Checker>, Arc<FencedStore>, Arc<Tally>),
) {
    let owner = format!("chaos-worker-{worker}");
    let pauses = options.faults.contains(&Fault::Pause);
    while Instant::now() < deadline {
        let (resource, pause, crash, work) = {
            let mut rng = rand::thread_rng();
            (
                format!("{RESOURCE_PREFIX}{}", rng.gen_range(0..options.resources)),
                pauses && rng.gen_bool(options.pause_chance),
                rng.gen_bool(options.crash_chance),
                Duration::from_micros(rng.gen_range(200..3000)),
            )
        };
        tally.attempts.fetch_add(1, Ordering::Relaxed);
        let acquired = locks
            .acquire(resource.as_str())
            .ttl(options.ttl)
            .wait(options.wait)
            .owner(owner.as_str())
            .await;
        let lease = match acquired {
            Ok(lease) => lease,
            Err(error) => {
                tally.failed.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(%error, "chaos: acquire failed");
                continue;
            }
        };
        tally.acquired.fetch_add(1, Ordering::Relaxed);
        let acquired_at = Instant::now();
        if pause {
            // The holder does not know it stalled: it writes as if it still held the lock.
            tally.pauses.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(lease.validity() + Duration::from_millis(100)).await;
        }
        tokio::time::sleep(work).await;
        let valid = lease.validity() > Duration::ZERO;
        if !store.write(&resource, lease.fencing_token()) && valid {
            tally.valid_writes_rejected.fetch_add(1, Ordering::Relaxed);
        }
        checker.record(Hold::ending_now(&lease, acquired_at));
        if crash {
            tally.crashes.fetch_add(1, Ordering::Relaxed);
            let _ = lease.detach();
        } else {
            let _ = lease.release().await;
        }
    }
}
