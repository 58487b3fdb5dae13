//! quorumlock vs rslock, side by side, in one process, against one local lab.
//!
//! A third column, the floor (`floor.rs`), is the least a Redlock on fred can do: `SET NX PX`
//! to every master, counted at a majority, compare-and-delete to release, nothing else. It
//! shows what the protocol and the client library cost on this machine, apart from
//! quorumlock's fencing, admission check and batching.
//!
//! The same workloads run for every library, interleaved round by round (each library goes
//! first, second and last in turn, so none always runs on a warmer or colder machine), and
//! every figure is the median over the rounds. On a small shared machine the absolute numbers
//! move a lot from run to run; the ratios are what holds.
//!
//! Workloads, per round and per library (TTL 10 s everywhere):
//! 1. sequential acquire latency: acquire one resource, release it, repeat; only the acquire
//!    is timed (p50, p99); the CPU used per acquire+release is read as well;
//! 2. lock+release cycles/s at concurrency 1 and 64, each task on its own resource; during
//!    the concurrency-64 phase the CPU time of this process (getrusage) and of the lab's
//!    redis processes (/proc/<pid>/stat) is read, giving CPU per cycle on each side;
//! 3. contention: 16 workers, one resource, 1 ms hold; every hold is recorded as
//!    [acquired, released] and checked for overlaps; the longest wait and (quorumlock only)
//!    the acquire attempts per acquisition are reported.
//!
//! Without contention both libraries make one try: quorumlock `acquire(..).ttl(..)` (no wait),
//! rslock `LockManager::lock` (its up-to-3 tries; the first succeeds on a free resource).
//! Under contention both wait with their own policy: quorumlock with `.wait(time left in the
//! phase)` (release notifications plus a fallback timer), rslock with
//! `LockManager::acquire_no_guard` (loops over `lock`, which tries 3 times with a random
//! 0..200 ms pause between tries; rslock's defaults), cut off at the end of the phase.
//!
//! Run from the repository root (see docs/performance.md):
//!   cargo run --release --manifest-path benches/peers/Cargo.toml -- [options]
//! Options: --rounds N (5), --shape sentinel|plain|both (both), --samples N (2000),
//!   --runtime multi|current (multi: the tokio runtime both libraries share),
//!   --c1-secs S (1), --c64-secs S (2), --contend-secs S (2),
//!   --profile quorumlock|rslock|floor --secs S: start the product-shaped lab (or --shape plain),
//!   warm up, print the PIDs, then run only that library's concurrency-64 phase for S
//!   seconds (for `perf`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod floor;

use floor::{Floor, FloorLock};
use hdrhistogram::Histogram;
use quorumlock::Locks;
use quorumlock::lab::{Lab, LabSpec, NodeKind};
use rslock::LockManager;

const TTL: Duration = Duration::from_secs(10);
const CONTENDERS: usize = 16;
const HOLD: Duration = Duration::from_millis(1);
/// Sequential cycles per library before the first round: connections up, scripts loaded.
const WARMUP_CYCLES: usize = 1000;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

// ---------------------------------------------------------------------------------------------
// Options

#[derive(Debug, Clone)]
struct Options {
    rounds: usize,
    shapes: Vec<Shape>,
    samples: usize,
    c1: Duration,
    c64: Duration,
    contend: Duration,
    profile: Option<LibKind>,
    profile_secs: Duration,
    /// Both libraries run on this tokio runtime: `multi` (2 worker threads) or `current`.
    current_thread: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// The product's shape: 5 groups of master + 1 replica, 3 Sentinels.
    Sentinel,
    /// rslock's usual setup: 5 plain masters.
    Plain,
}

impl Shape {
    fn describe(self) -> &'static str {
        match self {
            Shape::Sentinel => "5 groups (master + 1 replica) under 3 Sentinels",
            Shape::Plain => "5 plain masters (no replicas, no Sentinels)",
        }
    }
    fn tag(self) -> &'static str {
        match self {
            Shape::Sentinel => "sentinel",
            Shape::Plain => "plain",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum LibKind {
    Quorum,
    Rs,
    Floor,
}

impl LibKind {
    fn name(self) -> &'static str {
        match self {
            LibKind::Quorum => "quorumlock",
            LibKind::Rs => "rslock",
            LibKind::Floor => "floor",
        }
    }
}

fn parse_options() -> Result<Options, String> {
    let mut options = Options {
        rounds: 5,
        shapes: vec![Shape::Sentinel, Shape::Plain],
        samples: 2000,
        c1: Duration::from_secs(1),
        c64: Duration::from_secs(2),
        contend: Duration::from_secs(2),
        profile: None,
        profile_secs: Duration::from_secs(10),
        current_thread: false,
    };
    let mut args = std::env::args().skip(1);
    let secs = |v: String| -> Result<Duration, String> {
        v.parse::<f64>()
            .ok()
            .filter(|s| *s > 0.0 && *s < 3600.0)
            .map(Duration::from_secs_f64)
            .ok_or_else(|| format!("not a number of seconds: {v}"))
    };
    let count = |v: String| -> Result<usize, String> {
        v.parse::<usize>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| format!("not a positive count: {v}"))
    };
    let mut shape_given = false;
    while let Some(arg) = args.next() {
        // `cargo bench` passes --bench; ignore it.
        if arg == "--bench" {
            continue;
        }
        let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--rounds" => options.rounds = count(value()?)?,
            "--samples" => options.samples = count(value()?)?,
            "--c1-secs" => options.c1 = secs(value()?)?,
            "--c64-secs" => options.c64 = secs(value()?)?,
            "--contend-secs" => options.contend = secs(value()?)?,
            "--secs" => options.profile_secs = secs(value()?)?,
            "--runtime" => {
                options.current_thread = match value()?.as_str() {
                    "multi" => false,
                    "current" => true,
                    other => return Err(format!("--runtime is multi or current, not {other}")),
                }
            }
            "--shape" => {
                shape_given = true;
                options.shapes = match value()?.as_str() {
                    "sentinel" => vec![Shape::Sentinel],
                    "plain" => vec![Shape::Plain],
                    "both" => vec![Shape::Sentinel, Shape::Plain],
                    other => {
                        return Err(format!(
                            "--shape must be sentinel, plain or both, not {other}"
                        ));
                    }
                }
            }
            "--profile" => {
                options.profile = Some(match value()?.as_str() {
                    "quorumlock" => LibKind::Quorum,
                    "rslock" => LibKind::Rs,
                    "floor" => LibKind::Floor,
                    other => {
                        return Err(format!(
                            "--profile must be quorumlock, rslock or floor, not {other}"
                        ));
                    }
                })
            }
            "-h" | "--help" => {
                return Err("usage: quorumlock-peers [--rounds N] [--shape sentinel|plain|both] [--samples N] [--runtime multi|current] \
                     [--c1-secs S] [--c64-secs S] [--contend-secs S] | --profile quorumlock|rslock|floor [--secs S] [--shape ..]"
                    .into());
            }
            other => return Err(format!("unknown option {other} (try --help)")),
        }
    }
    if options.profile.is_some() && !shape_given {
        options.shapes = vec![Shape::Sentinel];
    }
    Ok(options)
}

// ---------------------------------------------------------------------------------------------
// The two libraries behind one face

#[derive(Clone)]
enum Lib {
    Quorum(Locks),
    Rs(LockManager),
    Floor(Arc<Floor>),
}

enum Handle {
    Quorum(quorumlock::Lease),
    Rs(rslock::Lock),
    Floor(FloorLock),
}

struct Held {
    handle: Handle,
    /// When the library says the lock may no longer be relied on.
    valid_until: Instant,
    /// quorumlock's fencing token; rslock has none.
    fence: Option<u64>,
    /// quorumlock's count of acquire attempts behind this lease; rslock does not tell.
    attempts: Option<u32>,
}

impl Lib {
    fn kind(&self) -> LibKind {
        match self {
            Lib::Quorum(_) => LibKind::Quorum,
            Lib::Rs(_) => LibKind::Rs,
            Lib::Floor(_) => LibKind::Floor,
        }
    }

    /// One acquire that does not wait for another holder (quorumlock: one attempt; rslock:
    /// `lock`, its up-to-3 tries — on a free resource both succeed at the first try).
    async fn try_acquire(&self, resource: &str) -> Result<Held, String> {
        match self {
            Lib::Quorum(locks) => {
                let lease = locks
                    .acquire(resource)
                    .ttl(TTL)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(Held {
                    valid_until: lease.valid_until(),
                    fence: Some(lease.fencing_token()),
                    attempts: Some(lease.attempts()),
                    handle: Handle::Quorum(lease),
                })
            }
            Lib::Rs(manager) => {
                let lock = manager
                    .lock(resource.as_bytes(), TTL)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(rs_held(lock))
            }
            Lib::Floor(floor) => {
                let lock = floor.try_acquire(resource, TTL).await?;
                Ok(Held {
                    valid_until: lock.valid_until,
                    fence: None,
                    attempts: None,
                    handle: Handle::Floor(lock),
                })
            }
        }
    }

    /// Acquires, waiting and retrying with the library's own policy while the resource is
    /// held, until `deadline`. `None` when the deadline passed first.
    async fn acquire_waiting(&self, resource: &str, deadline: Instant) -> Option<Held> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            match self {
                Lib::Quorum(locks) => match locks.acquire(resource).ttl(TTL).wait(left).await {
                    Ok(lease) => {
                        return Some(Held {
                            valid_until: lease.valid_until(),
                            fence: Some(lease.fencing_token()),
                            attempts: Some(lease.attempts()),
                            handle: Handle::Quorum(lease),
                        });
                    }
                    Err(quorumlock::Error::Held { .. }) => {}
                    Err(_) => tokio::time::sleep(Duration::from_millis(1)).await,
                },
                // `acquire` loops until it gets the lock; the phase's end cuts it off.
                Lib::Rs(manager) => match tokio::time::timeout(
                    left,
                    manager.acquire_no_guard(resource.as_bytes(), TTL),
                )
                .await
                {
                    Ok(Ok(lock)) => return Some(rs_held(lock)),
                    Ok(Err(_)) => tokio::time::sleep(Duration::from_millis(1)).await,
                    Err(_) => return None,
                },
                // No order among waiters: each retries after a millisecond.
                Lib::Floor(_) => match self.try_acquire(resource).await {
                    Ok(held) => return Some(held),
                    Err(_) => tokio::time::sleep(Duration::from_millis(1)).await,
                },
            }
        }
    }

    async fn release(&self, held: Held) -> Result<(), String> {
        match (self, held.handle) {
            (_, Handle::Quorum(lease)) => {
                lease.release().await.map(|_| ()).map_err(|e| e.to_string())
            }
            // Best effort by design: rslock's unlock reports nothing.
            (Lib::Rs(manager), Handle::Rs(lock)) => {
                manager.unlock(&lock).await;
                Ok(())
            }
            (Lib::Floor(floor), Handle::Floor(lock)) => {
                floor.release(&lock).await;
                Ok(())
            }
            (_, _) => Err("a lock handed to another library".into()),
        }
    }
}

fn rs_held(lock: rslock::Lock) -> Held {
    // validity_time counts from the start of the winning try, which is before now: taking it
    // from now makes the relied-on interval longer, which can only find more overlaps.
    Held {
        valid_until: Instant::now() + Duration::from_millis(lock.validity_time as u64),
        fence: None,
        attempts: None,
        handle: Handle::Rs(lock),
    }
}

// ---------------------------------------------------------------------------------------------
// CPU accounting

/// CPU time of this process (all threads) and its context switches.
#[derive(Clone, Copy, Default)]
struct SelfUsage {
    cpu: Duration,
    voluntary_switches: i64,
    involuntary_switches: i64,
}

fn self_usage() -> SelfUsage {
    // SAFETY: getrusage only writes into the struct we pass.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } == 0;
    if !ok {
        return SelfUsage::default();
    }
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    SelfUsage {
        cpu: tv(usage.ru_utime) + tv(usage.ru_stime),
        voluntary_switches: usage.ru_nvcsw,
        involuntary_switches: usage.ru_nivcsw,
    }
}

/// utime + stime of a process (all threads), from /proc/<pid>/stat.
fn process_cpu(pid: u32) -> Duration {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return Duration::ZERO;
    };
    // Fields after the command name, which is in parentheses and may contain spaces.
    let Some(rest) = stat.rsplit_once(')').map(|(_, rest)| rest) else {
        return Duration::ZERO;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state); utime is field 14, stime 15.
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i)?.parse::<u64>().ok())
        .sum();
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_micros(ticks * 1_000_000 / hz)
}

/// The lab's PIDs by the role they were started in.
struct LabPids {
    masters: Vec<u32>,
    replicas: Vec<u32>,
    sentinels: Vec<u32>,
}

impl LabPids {
    async fn of(lab: &Lab) -> LabPids {
        let mut pids = LabPids {
            masters: Vec::new(),
            replicas: Vec::new(),
            sentinels: Vec::new(),
        };
        for node in lab.status().await {
            match node.kind {
                NodeKind::Master => pids.masters.push(node.pid),
                NodeKind::Replica => pids.replicas.push(node.pid),
                NodeKind::Sentinel => pids.sentinels.push(node.pid),
            }
        }
        pids
    }
}

#[derive(Clone, Copy)]
struct CpuSnapshot {
    client: SelfUsage,
    masters: Duration,
    others: Duration,
}

fn cpu_snapshot(pids: &LabPids) -> CpuSnapshot {
    let sum = |list: &[u32]| list.iter().map(|&p| process_cpu(p)).sum::<Duration>();
    CpuSnapshot {
        client: self_usage(),
        masters: sum(&pids.masters),
        others: sum(&pids.replicas) + sum(&pids.sentinels),
    }
}

/// CPU per cycle over one phase, in µs, and context switches per cycle.
#[derive(Clone, Copy, Default)]
struct CpuPerCycle {
    client_us: f64,
    masters_us: f64,
    others_us: f64,
    client_util: f64,
    voluntary_switches: f64,
    involuntary_switches: f64,
}

fn cpu_per_cycle(
    before: CpuSnapshot,
    after: CpuSnapshot,
    cycles: u64,
    wall: Duration,
) -> CpuPerCycle {
    // No cycle, no cost per cycle: NaN prints as "-", never as a figure.
    let n = if cycles == 0 { f64::NAN } else { cycles as f64 };
    let us = |d: Duration| d.as_secs_f64() * 1e6 / n;
    CpuPerCycle {
        client_us: us(after.client.cpu.saturating_sub(before.client.cpu)),
        masters_us: us(after.masters.saturating_sub(before.masters)),
        others_us: us(after.others.saturating_sub(before.others)),
        client_util: after
            .client
            .cpu
            .saturating_sub(before.client.cpu)
            .as_secs_f64()
            / wall.as_secs_f64(),
        voluntary_switches: (after.client.voluntary_switches - before.client.voluntary_switches)
            as f64
            / n,
        involuntary_switches: (after.client.involuntary_switches
            - before.client.involuntary_switches) as f64
            / n,
    }
}

// ---------------------------------------------------------------------------------------------
// Workloads

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid constant bounds")
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
}

/// Workload 1: (p50 µs, p99 µs, errors, CPU per acquire+release).
async fn sequential(
    lib: &Lib,
    resource: &str,
    samples: usize,
    pids: &LabPids,
) -> (f64, f64, u64, CpuPerCycle) {
    let mut acquired = histogram();
    let mut errors = 0;
    let before = cpu_snapshot(pids);
    let started_all = Instant::now();
    for _ in 0..samples {
        let started = Instant::now();
        match lib.try_acquire(resource).await {
            Ok(held) => {
                acquired.saturating_record(micros(started.elapsed()));
                if lib.release(held).await.is_err() {
                    errors += 1;
                }
            }
            Err(_) => errors += 1,
        }
    }
    let cpu = cpu_per_cycle(
        before,
        cpu_snapshot(pids),
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
    (quantile(0.50), quantile(0.99), errors, cpu)
}

/// Workload 2: (cycles/s, errors, CPU per cycle).
async fn cycles(
    lib: &Lib,
    prefix: &str,
    concurrency: usize,
    phase: Duration,
    pids: &LabPids,
) -> (f64, u64, CpuPerCycle) {
    let before = cpu_snapshot(pids);
    let started = Instant::now();
    let deadline = started + phase;
    let tasks: Vec<_> = (0..concurrency)
        .map(|task| {
            let (lib, resource) = (lib.clone(), format!("{prefix}:{task}"));
            tokio::spawn(async move {
                let (mut done, mut errors) = (0u64, 0u64);
                while Instant::now() < deadline {
                    match lib.try_acquire(&resource).await {
                        Ok(held) => match lib.release(held).await {
                            Ok(()) => done += 1,
                            Err(_) => errors += 1,
                        },
                        Err(_) => errors += 1,
                    }
                }
                (done, errors)
            })
        })
        .collect();
    let (mut done, mut errors) = (0, 0);
    for task in tasks {
        if let Ok((d, e)) = task.await {
            done += d;
            errors += e;
        }
    }
    let wall = started.elapsed();
    let after = cpu_snapshot(pids);
    (
        done as f64 / wall.as_secs_f64(),
        errors,
        cpu_per_cycle(before, after, done, wall),
    )
}

struct Hold {
    acquired_at: Instant,
    relied_until: Instant,
    fence: Option<u64>,
    attempts: Option<u32>,
}

struct Contention {
    per_sec: f64,
    max_wait_ms: f64,
    overlaps: usize,
    fencing_regressions: usize,
    acquisitions: usize,
    /// Mean acquire attempts per acquisition (quorumlock only).
    attempts: f64,
}

/// Workload 3.
async fn contend(lib: &Lib, resource: &str, phase: Duration) -> Contention {
    let holds = Arc::new(Mutex::new(Vec::<Hold>::new()));
    let max_wait = Arc::new(Mutex::new(Duration::ZERO));
    let started = Instant::now();
    let deadline = started + phase;
    let tasks: Vec<_> = (0..CONTENDERS)
        .map(|_| {
            let (lib, resource, holds, max_wait) = (
                lib.clone(),
                resource.to_string(),
                holds.clone(),
                max_wait.clone(),
            );
            tokio::spawn(async move {
                while Instant::now() < deadline {
                    let asked = Instant::now();
                    let Some(held) = lib.acquire_waiting(&resource, deadline).await else {
                        break;
                    };
                    let acquired_at = Instant::now();
                    {
                        let mut max = max_wait.lock().unwrap();
                        *max = (*max).max(acquired_at - asked);
                    }
                    tokio::time::sleep(HOLD).await;
                    let released_at = Instant::now();
                    holds.lock().unwrap().push(Hold {
                        acquired_at,
                        relied_until: released_at.min(held.valid_until),
                        fence: held.fence,
                        attempts: held.attempts,
                    });
                    let _ = lib.release(held).await;
                }
            })
        })
        .collect();
    for task in tasks {
        let _ = task.await;
    }
    let wall = started.elapsed();
    let mut holds = std::mem::take(&mut *holds.lock().unwrap());
    holds.sort_by_key(|h| h.acquired_at);
    let mut overlaps = 0;
    for (i, earlier) in holds.iter().enumerate() {
        for later in &holds[i + 1..] {
            if later.acquired_at >= earlier.relied_until {
                break;
            }
            overlaps += 1;
        }
    }
    let fencing_regressions = holds
        .windows(2)
        .filter(|pair| matches!((pair[0].fence, pair[1].fence), (Some(a), Some(b)) if b <= a))
        .count();
    let attempts = if holds.iter().all(|h| h.attempts.is_some()) && !holds.is_empty() {
        holds
            .iter()
            .filter_map(|h| h.attempts)
            .map(f64::from)
            .sum::<f64>()
            / holds.len() as f64
    } else {
        f64::NAN
    };
    let max_wait_ms = max_wait.lock().unwrap().as_secs_f64() * 1e3;
    Contention {
        per_sec: holds.len() as f64 / wall.as_secs_f64(),
        max_wait_ms,
        overlaps,
        fencing_regressions,
        acquisitions: holds.len(),
        attempts,
    }
}

// ---------------------------------------------------------------------------------------------
// Rounds, medians, the table

/// Every figure of one library's round, by row key.
type Figures = BTreeMap<&'static str, f64>;

struct Row {
    key: &'static str,
    label: &'static str,
    better: &'static str,
    /// Summed over rounds instead of the median (counts that must stay 0).
    summed: bool,
    decimals: usize,
}

const ROWS: &[Row] = &[
    Row {
        key: "acq_p50",
        label: "acquire p50 (µs)",
        better: "lower",
        summed: false,
        decimals: 0,
    },
    Row {
        key: "acq_p99",
        label: "acquire p99 (µs)",
        better: "lower",
        summed: false,
        decimals: 0,
    },
    Row {
        key: "seq_cpu_client",
        label: "sequential: client CPU per acquire+release (µs)",
        better: "lower",
        summed: false,
        decimals: 0,
    },
    Row {
        key: "seq_cpu_masters",
        label: "sequential: redis masters CPU per acquire+release (µs)",
        better: "lower",
        summed: false,
        decimals: 0,
    },
    Row {
        key: "c1",
        label: "lock+release cycles/s, concurrency 1",
        better: "higher",
        summed: false,
        decimals: 0,
    },
    Row {
        key: "c64",
        label: "lock+release cycles/s, concurrency 64",
        better: "higher",
        summed: false,
        decimals: 0,
    },
    Row {
        key: "cont",
        label: "contended acquisitions/s (16 workers, 1 ms hold)",
        better: "higher",
        summed: false,
        decimals: 1,
    },
    Row {
        key: "cont_wait",
        label: "contended max wait (ms)",
        better: "lower",
        summed: false,
        decimals: 0,
    },
    Row {
        key: "cont_attempts",
        label: "contended: acquire attempts per acquisition (rslock does not report it)",
        better: "lower",
        summed: false,
        decimals: 1,
    },
    Row {
        key: "overlaps",
        label: "contended overlaps (sum of rounds)",
        better: "must be 0",
        summed: true,
        decimals: 0,
    },
    Row {
        key: "fence_regr",
        label: "fencing regressions (sum; only quorumlock has tokens)",
        better: "must be 0",
        summed: true,
        decimals: 0,
    },
    Row {
        key: "errors",
        label: "failed acquires/releases in phases 1-2 (sum)",
        better: "lower",
        summed: true,
        decimals: 0,
    },
    Row {
        key: "cpu_client",
        label: "c64: client CPU per cycle (µs)",
        better: "lower",
        summed: false,
        decimals: 1,
    },
    Row {
        key: "cpu_masters",
        label: "c64: redis masters CPU per cycle (µs, 5 summed)",
        better: "lower",
        summed: false,
        decimals: 1,
    },
    Row {
        key: "cpu_others",
        label: "c64: replicas+Sentinels CPU per cycle (µs)",
        better: "lower",
        summed: false,
        decimals: 1,
    },
    Row {
        key: "client_util",
        label: "c64: client CPU utilisation (cores)",
        better: "-",
        summed: false,
        decimals: 2,
    },
    Row {
        key: "vcsw",
        label: "c64: client voluntary context switches per cycle",
        better: "lower",
        summed: false,
        decimals: 2,
    },
];

fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

async fn round(lib: &Lib, options: &Options, prefix: &str, pids: &LabPids) -> Figures {
    let name = lib.kind().name();
    let mut f = Figures::new();
    eprint!("  {name}: sequential");
    let (p50, p99, e1, seq_cpu) =
        sequential(lib, &format!("{prefix}:seq"), options.samples, pids).await;
    eprint!(", c1");
    let (c1, e2, _) = cycles(lib, &format!("{prefix}:c1"), 1, options.c1, pids).await;
    eprint!(", c64");
    let (c64, e3, cpu) = cycles(lib, &format!("{prefix}:c64"), 64, options.c64, pids).await;
    eprint!(", contention");
    let c = contend(lib, &format!("{prefix}:contended"), options.contend).await;
    eprintln!(
        " — p50 {p50:.0} µs, c64 {c64:.0}/s, contended {:.1}/s ({} holds, {} overlaps)",
        c.per_sec, c.acquisitions, c.overlaps
    );
    f.insert("acq_p50", p50);
    f.insert("acq_p99", p99);
    f.insert("seq_cpu_client", seq_cpu.client_us);
    f.insert("seq_cpu_masters", seq_cpu.masters_us);
    f.insert("c1", c1);
    f.insert("c64", c64);
    f.insert("cont", c.per_sec);
    f.insert("cont_wait", c.max_wait_ms);
    f.insert("cont_attempts", c.attempts);
    f.insert("overlaps", c.overlaps as f64);
    f.insert("fence_regr", c.fencing_regressions as f64);
    f.insert("errors", (e1 + e2 + e3) as f64);
    f.insert("cpu_client", cpu.client_us);
    f.insert("cpu_masters", cpu.masters_us);
    f.insert("cpu_others", cpu.others_us);
    f.insert("client_util", cpu.client_util);
    f.insert("vcsw", cpu.voluntary_switches);
    f
}

async fn warm_up(lib: &Lib, prefix: &str) {
    for i in 0..WARMUP_CYCLES {
        if let Ok(held) = lib.try_acquire(&format!("{prefix}:warm:{}", i % 8)).await {
            let _ = lib.release(held).await;
        }
    }
}

struct Lab2 {
    lab: Lab,
    _dir: tempfile::TempDir,
    quorum: Lib,
    rs: Lib,
    floor: Lib,
    pids: LabPids,
}

async fn start(shape: Shape) -> Result<Lab2, BoxError> {
    let dir = tempfile::tempdir()?;
    let mut spec = LabSpec::new(dir.path());
    if shape == Shape::Plain {
        spec.replicas = 0;
        spec.sentinels = 0;
    }
    let lab = Lab::start(spec).await?;
    let locks = Locks::connect(lab.topology()).await?;
    let mut ports = Vec::new();
    for group in 0..lab.spec().groups {
        ports.push(lab.master_of(group).await?.port);
    }
    let uris: Vec<String> = ports
        .iter()
        .map(|port| format!("redis://127.0.0.1:{port}"))
        .collect();
    let manager = LockManager::new(uris);
    let floor = Floor::connect(&ports).await?;
    let pids = LabPids::of(&lab).await;
    Ok(Lab2 {
        lab,
        _dir: dir,
        quorum: Lib::Quorum(locks),
        rs: Lib::Rs(manager),
        floor: Lib::Floor(floor),
        pids,
    })
}

async fn stop(lab: Lab2) {
    if let Lib::Quorum(locks) = &lab.quorum {
        locks.close().await;
    }
    drop(lab.rs);
    if let Lib::Floor(floor) = &lab.floor {
        floor.close().await;
    }
    if let Err(error) = lab.lab.stop().await {
        eprintln!("warning: lab did not stop cleanly: {error}");
    }
}

fn format_value(v: f64, decimals: usize) -> String {
    if v.is_nan() {
        "-".into()
    } else {
        format!("{v:.decimals$}")
    }
}

fn table(shape: Shape, options: &Options, results: &BTreeMap<LibKind, Vec<Figures>>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n### {} — medians of {} rounds\n",
        shape.describe(),
        options.rounds
    );
    let _ = writeln!(
        out,
        "| figure | quorumlock | rslock | floor | ratio q/r | ratio floor/r | better |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---|");
    let ratio = |a: f64, b: f64, summed: bool| {
        if summed || b == 0.0 || b.is_nan() || a.is_nan() {
            "-".to_string()
        } else {
            format!("{:.2}", a / b)
        }
    };
    for row in ROWS {
        let pick = |kind: LibKind| -> f64 {
            let values: Vec<f64> = results
                .get(&kind)
                .into_iter()
                .flatten()
                .filter_map(|f| f.get(row.key).copied())
                .collect();
            if row.summed {
                values.iter().sum()
            } else {
                median(values)
            }
        };
        let (q, r, f) = (
            pick(LibKind::Quorum),
            pick(LibKind::Rs),
            pick(LibKind::Floor),
        );
        // Only quorumlock has fencing tokens.
        let without_tokens = |v: f64| {
            if row.key == "fence_regr" {
                "n/a".into()
            } else {
                format_value(v, row.decimals)
            }
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} |",
            row.label,
            format_value(q, row.decimals),
            without_tokens(r),
            without_tokens(f),
            ratio(q, r, row.summed),
            ratio(f, r, row.summed),
            row.better
        );
    }
    let m = |kind: LibKind, key: &str| {
        median(
            results
                .get(&kind)
                .into_iter()
                .flatten()
                .filter_map(|f| f.get(key).copied())
                .collect(),
        )
    };
    let s = |kind: LibKind, key: &str| {
        results
            .get(&kind)
            .into_iter()
            .flatten()
            .filter_map(|f| f.get(key).copied())
            .sum::<f64>()
    };
    let verdict = |ok: bool| if ok { "MET" } else { "NOT MET" };
    let versus = |kind: LibKind, key: &str| m(kind, key) / m(LibKind::Rs, key);
    let _ = writeln!(
        out,
        "\nTargets (quorumlock vs rslock; the floor's own ratio in brackets):"
    );
    let p50 = versus(LibKind::Quorum, "acq_p50");
    let _ = writeln!(
        out,
        "- acquire p50 <= 0.5 x rslock: {p50:.2} x -> {} (floor {:.2} x)",
        verdict(p50 <= 0.5),
        versus(LibKind::Floor, "acq_p50")
    );
    let c64 = versus(LibKind::Quorum, "c64");
    let _ = writeln!(
        out,
        "- cycles/s at concurrency 64 >= 2 x rslock: {c64:.2} x -> {} (floor {:.2} x)",
        verdict(c64 >= 2.0),
        versus(LibKind::Floor, "c64")
    );
    let cont = versus(LibKind::Quorum, "cont");
    let overlaps = s(LibKind::Quorum, "overlaps");
    let _ = writeln!(
        out,
        "- contended acquisitions/s >= 1.5 x rslock with 0 overlaps: {cont:.2} x, {overlaps} overlaps -> {} (floor {:.2} x)",
        verdict(cont >= 1.5 && overlaps == 0.0),
        versus(LibKind::Floor, "cont")
    );
    out
}

async fn run_shape(shape: Shape, options: &Options) -> Result<String, BoxError> {
    eprintln!("\n== {} ==", shape.describe());
    let started = Instant::now();
    let lab = start(shape).await?;
    eprintln!(
        "lab up in {:.1} s; warming up",
        started.elapsed().as_secs_f64()
    );
    let run = format!("peers:{}:{}", shape.tag(), std::process::id());
    warm_up(&lab.quorum, &format!("{run}:q")).await;
    warm_up(&lab.rs, &format!("{run}:r")).await;
    warm_up(&lab.floor, &format!("{run}:f")).await;
    let mut results: BTreeMap<LibKind, Vec<Figures>> = BTreeMap::new();
    for r in 0..options.rounds {
        eprintln!("round {}/{}", r + 1, options.rounds);
        // Each library goes first, second and last in turn.
        let mut order = [&lab.quorum, &lab.rs, &lab.floor];
        order.rotate_left(r % 3);
        for lib in order {
            let prefix = format!("{run}:{}:{r}", lib.kind().name());
            let figures = round(lib, options, &prefix, &lab.pids).await;
            results.entry(lib.kind()).or_default().push(figures);
        }
    }
    stop(lab).await;
    eprintln!(
        "{} done in {:.0} s",
        shape.tag(),
        started.elapsed().as_secs_f64()
    );
    Ok(table(shape, options, &results))
}

async fn profile(kind: LibKind, shape: Shape, options: &Options) -> Result<(), BoxError> {
    let lab = start(shape).await?;
    let lib = match kind {
        LibKind::Quorum => lab.quorum.clone(),
        LibKind::Rs => lab.rs.clone(),
        LibKind::Floor => lab.floor.clone(),
    };
    let run = format!("peers:profile:{}", std::process::id());
    warm_up(&lib, &run).await;
    eprintln!(
        "profile: {} on {}; client PID {}, masters {:?}, replicas {:?}, sentinels {:?}",
        kind.name(),
        shape.describe(),
        std::process::id(),
        lab.pids.masters,
        lab.pids.replicas,
        lab.pids.sentinels
    );
    let (per_sec, errors, cpu) = cycles(
        &lib,
        &format!("{run}:c64"),
        64,
        options.profile_secs,
        &lab.pids,
    )
    .await;
    println!(
        "{}: {per_sec:.0} cycles/s at concurrency 64, {errors} errors; per cycle: client {:.1} µs CPU, masters {:.1} µs, \
         replicas+Sentinels {:.1} µs; client {:.2} cores; {:.2} voluntary + {:.2} involuntary context switches",
        kind.name(),
        cpu.client_us,
        cpu.masters_us,
        cpu.others_us,
        cpu.client_util,
        cpu.voluntary_switches,
        cpu.involuntary_switches
    );
    stop(lab).await;
    Ok(())
}

fn main() {
    let options = match parse_options() {
        Ok(options) => options,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(2);
        }
    };
    let runtime = if options.current_thread {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
    };
    match runtime {
        Ok(runtime) => runtime.block_on(run(options)),
        Err(error) => {
            eprintln!("error: cannot start the runtime: {error}");
            std::process::exit(1);
        }
    }
}

async fn run(options: Options) {
    if let Some(kind) = options.profile {
        if let Err(error) = profile(kind, options.shapes[0], &options).await {
            eprintln!("error: {error}");
            std::process::exit(1);
        }
        return;
    }
    let started = Instant::now();
    let mut report = String::new();
    let _ = writeln!(
        report,
        "quorumlock vs rslock 0.10 — {} rounds; per round: {} sequential acquires, {:.1} s at concurrency 1, \
         {:.1} s at concurrency 64, {:.1} s contention; {} runtime, {} worker threads on {} cores",
        options.rounds,
        options.samples,
        options.c1.as_secs_f64(),
        options.c64.as_secs_f64(),
        options.contend.as_secs_f64(),
        if options.current_thread {
            "current-thread"
        } else {
            "multi-thread"
        },
        tokio::runtime::Handle::current().metrics().num_workers(),
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0)
    );
    for &shape in &options.shapes {
        match run_shape(shape, &options).await {
            Ok(table) => report.push_str(&table),
            Err(error) => {
                eprintln!("error ({}): {error}", shape.tag());
                std::process::exit(1);
            }
        }
    }
    let _ = writeln!(
        report,
        "\ntotal run time {:.0} s",
        started.elapsed().as_secs_f64()
    );
    println!("{report}");
}
