//! The workloads, the same for every library (TTL 10 s everywhere):
//! 1. sequential acquire latency: acquire one resource, release it, repeat; only the acquire
//!    is timed (p50, p99); the CPU used per acquire+release is read as well;
//! 2. lock+release cycles/s at concurrency N (1 and 64 in a round), each task on its own
//!    resource, with the CPU of this process and of the lab's redis processes per cycle;
//! 3. contention: 16 workers, one resource, 1 ms hold; every hold is recorded as
//!    [acquired, released] and checked for overlaps; the longest wait and (quorumlock only)
//!    the acquire attempts per acquisition are reported;
//! 4. failover (quorumlock in both modes and etcd, once per run): `FAILOVER_WORKERS` tasks cycle
//!    lock+release on their own resources while a server is killed; the longest time with no
//!    successful acquire and the failed calls are reported.

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::cpu::{CpuPerCycle, CpuSnapshot};
use crate::lab::LabPids;
use crate::libraries::Library;

/// Workers in the contended phase, all on one resource.
const CONTENDERS: usize = 16;
/// How long a contended worker keeps the lock.
const HOLD: Duration = Duration::from_millis(1);
/// Tasks cycling through the failover phase, each on its own resource.
const FAILOVER_WORKERS: usize = 16;

/// Distinct failure messages kept per phase: enough to say what failed, not a log.
const KEPT_MESSAGES: usize = 4;

/// Failed calls: how many, and the first few distinct messages.
#[derive(Debug, Clone, Default)]
pub struct Failures {
    pub count: u64,
    pub messages: Vec<String>,
}

impl Failures {
    pub fn record(&mut self, message: String) {
        self.count += 1;
        if self.messages.len() < KEPT_MESSAGES && !self.messages.contains(&message) {
            self.messages.push(message);
        }
    }

    pub fn merge(&mut self, other: Failures) {
        self.count += other.count;
        for message in other.messages {
            if self.messages.len() < KEPT_MESSAGES && !self.messages.contains(&message) {
                self.messages.push(message);
            }
        }
    }
}

/// Workload 1's result.
pub struct Latency {
    pub p50_us: f64,
    pub p99_us: f64,
    /// Failed acquires and releases.
    pub errors: Failures,
    /// CPU per acquire+release.
    pub cpu: CpuPerCycle,
}

/// Workload 2's result.
pub struct Throughput {
    pub per_sec: f64,
    /// Failed acquires and releases.
    pub errors: Failures,
    pub cpu: CpuPerCycle,
}

/// Workload 3's result.
pub struct Contention {
    pub per_sec: f64,
    pub max_wait_ms: f64,
    pub overlaps: usize,
    pub fencing_regressions: usize,
    pub acquisitions: usize,
    /// Mean acquire attempts per acquisition (quorumlock only).
    pub attempts: f64,
}

/// Microseconds from 1 µs to a minute, at 3 significant digits.
fn histogram() -> Result<Histogram<u64>, hdrhistogram::CreationError> {
    Histogram::new_with_bounds(1, 60_000_000, 3)
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
}

/// Workload 1: `samples` acquire+release cycles one after the other on `resource`.
pub async fn sequential(
    library: &Library,
    resource: &str,
    samples: usize,
    pids: &LabPids,
) -> Result<Latency, hdrhistogram::CreationError> {
    let mut acquired = histogram()?;
    let mut errors = Failures::default();
    let before = CpuSnapshot::take(pids);
    let started_all = Instant::now();
    for _ in 0..samples {
        let started = Instant::now();
        match library.try_acquire(resource).await {
            Ok(held) => {
                acquired.saturating_record(micros(started.elapsed()));
                if let Err(message) = library.release(held).await {
                    errors.record(message);
                }
            }
            Err(message) => errors.record(message),
        }
    }
    let cpu = CpuPerCycle::between(
        before,
        CpuSnapshot::take(pids),
        acquired.len(),
        started_all.elapsed(),
    );
    // A run in which every acquire failed has no latency (an empty histogram answers 0).
    let quantile = |q: f64| {
        if acquired.is_empty() {
            f64::NAN
        } else {
            acquired.value_at_quantile(q) as f64
        }
    };
    Ok(Latency {
        p50_us: quantile(0.50),
        p99_us: quantile(0.99),
        errors,
        cpu,
    })
}

/// Workload 2: `concurrency` tasks, each cycling on its own resource, for `phase`.
pub async fn cycles(
    library: &Library,
    prefix: &str,
    concurrency: usize,
    phase: Duration,
    pids: &LabPids,
) -> Throughput {
    let before = CpuSnapshot::take(pids);
    let started = Instant::now();
    let deadline = started + phase;
    let tasks: Vec<_> = (0..concurrency)
        .map(|task| {
            let (library, resource) = (library.clone(), format!("{prefix}:{task}"));
            tokio::spawn(async move {
                let (mut done, mut errors) = (0u64, Failures::default());
                while Instant::now() < deadline {
                    match library.try_acquire(&resource).await {
                        Ok(held) => match library.release(held).await {
                            Ok(()) => done += 1,
                            Err(message) => errors.record(message),
                        },
                        Err(message) => errors.record(message),
                    }
                }
                (done, errors)
            })
        })
        .collect();
    let (mut done, mut errors) = (0, Failures::default());
    for task in tasks {
        if let Ok((d, e)) = task.await {
            done += d;
            errors.merge(e);
        }
    }
    let wall = started.elapsed();
    let after = CpuSnapshot::take(pids);
    Throughput {
        per_sec: done as f64 / wall.as_secs_f64(),
        errors,
        cpu: CpuPerCycle::between(before, after, done, wall),
    }
}

/// One contended hold, as the overlap and fencing checks need it.
struct Hold {
    acquired_at: Instant,
    relied_until: Instant,
    fence: Option<u64>,
    attempts: Option<u32>,
}

/// What one contending worker saw.
#[derive(Default)]
struct WorkerLog {
    holds: Vec<Hold>,
    max_wait: Duration,
}

/// Workload 3: `CONTENDERS` workers take turns on `resource` for `phase`.
pub async fn contend(library: &Library, resource: &str, phase: Duration) -> Contention {
    let started = Instant::now();
    let deadline = started + phase;
    let tasks: Vec<_> = (0..CONTENDERS)
        .map(|_| {
            let (library, resource) = (library.clone(), resource.to_string());
            tokio::spawn(async move {
                let mut log = WorkerLog::default();
                while Instant::now() < deadline {
                    let asked = Instant::now();
                    let Some(held) = library.acquire_waiting(&resource, deadline).await else {
                        break;
                    };
                    let acquired_at = Instant::now();
                    log.max_wait = log.max_wait.max(acquired_at - asked);
                    tokio::time::sleep(HOLD).await;
                    let released_at = Instant::now();
                    log.holds.push(Hold {
                        acquired_at,
                        relied_until: released_at.min(held.valid_until),
                        fence: held.fence,
                        attempts: held.attempts,
                    });
                    let _ = library.release(held).await;
                }
                log
            })
        })
        .collect();
    // Each worker keeps its own log; they are merged once all have ended.
    let mut holds = Vec::new();
    let mut max_wait = Duration::ZERO;
    for task in tasks {
        if let Ok(log) = task.await {
            holds.extend(log.holds);
            max_wait = max_wait.max(log.max_wait);
        }
    }
    let wall = started.elapsed();
    holds.sort_by_key(|h| h.acquired_at);
    Contention {
        per_sec: holds.len() as f64 / wall.as_secs_f64(),
        max_wait_ms: max_wait.as_secs_f64() * 1e3,
        overlaps: overlaps(&holds),
        fencing_regressions: fencing_regressions(&holds),
        acquisitions: holds.len(),
        attempts: mean_attempts(&holds),
    }
}

/// Pairs of holds whose relied-on intervals overlap; `holds` is sorted by acquisition.
fn overlaps(holds: &[Hold]) -> usize {
    let mut overlaps = 0;
    for (i, earlier) in holds.iter().enumerate() {
        for later in &holds[i + 1..] {
            if later.acquired_at >= earlier.relied_until {
                break;
            }
            overlaps += 1;
        }
    }
    overlaps
}

/// Consecutive holds whose fencing token did not grow; only quorumlock has tokens.
fn fencing_regressions(holds: &[Hold]) -> usize {
    holds
        .windows(2)
        .filter(|pair| matches!((pair[0].fence, pair[1].fence), (Some(a), Some(b)) if b <= a))
        .count()
}

/// Mean acquire attempts per hold; NaN when the library does not report them.
fn mean_attempts(holds: &[Hold]) -> f64 {
    if holds.is_empty() || holds.iter().any(|h| h.attempts.is_none()) {
        return f64::NAN;
    }
    holds
        .iter()
        .filter_map(|h| h.attempts)
        .map(f64::from)
        .sum::<f64>()
        / holds.len() as f64
}

/// Workload 4's result.
pub struct Failover {
    /// The longest stretch of the phase with no successful acquire by any task.
    pub longest_gap_ms: f64,
    /// Failed acquires and releases.
    pub failed: Failures,
    /// Successful acquires.
    pub acquired: usize,
    /// When the longest gap began, from the start of the phase.
    pub gap_started_ms: f64,
}

/// What one failover task saw.
#[derive(Default)]
struct FailoverLog {
    acquired: Vec<Instant>,
    failed: Failures,
}

/// Workload 4, running: the tasks cycle while the caller kills a server.
pub struct RunningFailover {
    started: Instant,
    deadline: Instant,
    tasks: Vec<tokio::task::JoinHandle<FailoverLog>>,
}

/// Starts workload 4 for `phase`; the caller kills a server meanwhile and then calls
/// `finish`.
pub fn start_failover(library: &Library, prefix: &str, phase: Duration) -> RunningFailover {
    let started = Instant::now();
    let deadline = started + phase;
    let tasks = (0..FAILOVER_WORKERS)
        .map(|task| {
            let (library, resource) = (library.clone(), format!("{prefix}:{task}"));
            tokio::spawn(async move {
                let mut log = FailoverLog::default();
                while Instant::now() < deadline {
                    match library.try_acquire(&resource).await {
                        Ok(held) => {
                            log.acquired.push(Instant::now());
                            if let Err(message) = library.release(held).await {
                                log.failed.record(message);
                            }
                        }
                        Err(message) => {
                            log.failed.record(message);
                            // A failing call may fail at once; do not spin on it.
                            tokio::time::sleep(Duration::from_millis(1)).await;
                        }
                    }
                }
                log
            })
        })
        .collect();
    RunningFailover {
        started,
        deadline,
        tasks,
    }
}

impl RunningFailover {
    /// Waits for every task and measures the longest gap between successful acquires, the
    /// phase's start and end counting as bounds.
    pub async fn finish(self) -> Failover {
        let mut times = vec![self.started];
        let mut failed = Failures::default();
        for task in self.tasks {
            if let Ok(log) = task.await {
                times.extend(log.acquired);
                failed.merge(log.failed);
            }
        }
        let acquired = times.len() - 1;
        times.push(
            self.deadline
                .max(times.iter().copied().max().unwrap_or(self.deadline)),
        );
        times.sort();
        let (mut longest, mut gap_start) = (Duration::ZERO, self.started);
        for pair in times.windows(2) {
            let gap = pair[1] - pair[0];
            if gap > longest {
                longest = gap;
                gap_start = pair[0];
            }
        }
        Failover {
            longest_gap_ms: longest.as_secs_f64() * 1e3,
            failed,
            acquired,
            gap_started_ms: (gap_start - self.started).as_secs_f64() * 1e3,
        }
    }
}
