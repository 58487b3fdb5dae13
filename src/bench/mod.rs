//! The engine benchmark behind `quorumlock bench`: acquire latency, acquire+release cycles of
//! sets of resources beside the single lock (with the script calls each costs a group),
//! lock+release cycles per second at several concurrencies on distinct resources (with what
//! each cycle cost the servers, when asked), and contended acquisitions per second on one
//! resource with an overlap check.

#[cfg(feature = "mcp-bench")]
pub mod load;
#[cfg(feature = "mcp-bench")]
pub mod mcp;
pub mod server;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::Acquire;
use crate::Error;
use crate::chaos::checker::{Checker, Hold};
use crate::{InfoSection, Locks};
use crate::{MAX_LABEL_BYTES, MAX_SET_RESOURCES};
use server::{ServerCost, Snapshot};

/// Resources each task of a throughput phase takes in turn, so that the slots in use spread
/// over the shards of Cluster groups.
const RESOURCES_PER_TASK: usize = 4;

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Sequential acquire+release cycles measured for the latency figures.
    pub samples: usize,
    /// Sizes of the sets whose acquire+release cycles are measured beside the single lock's
    /// (`samples` cycles each; empty skips the phase).
    pub set_sizes: Vec<usize>,
    /// Concurrencies for the throughput phase (each task on resources of its own).
    pub concurrency: Vec<usize>,
    /// Read every primary's CPU and script calls around each throughput phase.
    pub server_cost: bool,
    /// Length of each throughput and contention phase.
    pub phase: Duration,
    /// Workers contending for one resource in the contention phase.
    pub contenders: usize,
    /// How long a contender holds the lock.
    pub hold: Duration,
    /// TTL of every benchmark lease.
    pub ttl: Duration,
    /// Owner and purpose text stored with every lease (the payload of a grant).
    pub owner: Option<String>,
    pub purpose: Option<String>,
}

impl BenchOptions {
    /// Owner and purpose texts adding up to `bytes` (at most two labels' worth).
    pub fn with_payload(mut self, bytes: usize) -> Result<Self, Error> {
        let limit = 2 * MAX_LABEL_BYTES;
        if bytes > limit {
            return Err(Error::invalid(
                "payload_bytes",
                format!(
                    "{bytes} is above {limit} (owner and purpose, {MAX_LABEL_BYTES} bytes each)"
                ),
            ));
        }
        let owner = bytes.min(MAX_LABEL_BYTES);
        self.owner = (owner > 0).then(|| "o".repeat(owner));
        self.purpose = (bytes > owner).then(|| "p".repeat(bytes - owner));
        Ok(self)
    }

    /// An acquire with the benchmark's TTL and payload.
    fn acquire(&self, locks: &Locks, resource: &str) -> Acquire {
        self.dress(locks.acquire(resource))
    }

    /// Gives `acquire` (of one resource or of a set) the benchmark's TTL and payload.
    fn dress(&self, acquire: Acquire) -> Acquire {
        let mut acquire = acquire.ttl(self.ttl);
        if let Some(owner) = &self.owner {
            acquire = acquire.owner(owner.as_str());
        }
        if let Some(purpose) = &self.purpose {
            acquire = acquire.purpose(purpose.as_str());
        }
        acquire
    }
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            samples: 2000,
            set_sizes: vec![1, 4, 16],
            concurrency: vec![1, 64],
            server_cost: false,
            phase: Duration::from_secs(3),
            contenders: 16,
            hold: Duration::from_millis(1),
            ttl: Duration::from_secs(10),
            owner: None,
            purpose: None,
        }
    }
}

/// Percentiles of one latency distribution, in milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    pub samples: u64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

/// Acquire+release cycles of one caller, on a single lock or on a set of resources.
#[derive(Debug, Clone, Serialize)]
pub struct SetCycles {
    /// Resources in the set (taken with `Locks::acquire_all`); `None` for the single lock
    /// (`Locks::acquire`) measured beside the sets.
    pub set_size: Option<usize>,
    /// One acquire+release cycle.
    pub cycle: Latency,
    /// Cycles per second of one caller (the inverse of the mean cycle).
    pub cycles_per_sec: f64,
    /// Script calls (EVALSHA and EVAL) the first group's master ran per cycle, counted with
    /// INFO commandstats around extra cycles: one acquire and one release, whatever the size
    /// of the set. Other clients of the topology add theirs; `None` when INFO failed.
    pub script_calls_per_cycle: Option<f64>,
}

/// Cycles per second at one concurrency.
#[derive(Debug, Clone, Serialize)]
pub struct Throughput {
    pub concurrency: usize,
    pub cycles: u64,
    pub cycles_per_sec: f64,
    pub errors: u64,
    /// What the cycles cost the servers, with [`BenchOptions::server_cost`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerCost>,
    /// Why the servers' cost is missing although it was asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_unread: Option<String>,
    /// Failed calls by cause (`acquire: no quorum`), and the failed group votes behind them
    /// (`acquire vote: timeout`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub error_causes: BTreeMap<String, u64>,
}

/// The contention phase.
#[derive(Debug, Clone, Serialize)]
pub struct Contention {
    pub workers: usize,
    pub acquisitions: u64,
    pub acquisitions_per_sec: f64,
    pub overlaps: usize,
    pub fencing_regressions: usize,
    /// Longest time one worker waited for one acquisition.
    pub max_wait_ms: f64,
}

/// Every figure of one run.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub groups: usize,
    pub acquire: Latency,
    pub release: Latency,
    /// The single lock first, then each set size.
    pub sets: Vec<SetCycles>,
    /// The group whose master's script calls [`SetCycles::script_calls_per_cycle`] counts.
    pub counted_group: Option<String>,
    pub throughput: Vec<Throughput>,
    pub contention: Contention,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3)
        .expect("1 µs..60 s at 3 digits are valid constant bounds")
}

fn latency(histogram: &Histogram<u64>) -> Latency {
    let ms = |micros: u64| micros as f64 / 1000.0;
    Latency {
        samples: histogram.len(),
        p50_ms: ms(histogram.value_at_quantile(0.50)),
        p90_ms: ms(histogram.value_at_quantile(0.90)),
        p99_ms: ms(histogram.value_at_quantile(0.99)),
        p999_ms: ms(histogram.value_at_quantile(0.999)),
        max_ms: ms(histogram.max()),
    }
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros())
        .unwrap_or(u64::MAX)
        .max(1)
}

/// Runs every phase; `progress` is told the name of each phase as it starts.
pub async fn run(
    locks: &Locks,
    options: &BenchOptions,
    progress: impl Fn(&str),
) -> Result<BenchReport, Error> {
    if let Some(&size) = options
        .set_sizes
        .iter()
        .find(|&&size| size == 0 || size > MAX_SET_RESOURCES)
    {
        return Err(Error::invalid(
            "set_sizes",
            format!("{size} is outside 1..={MAX_SET_RESOURCES}"),
        ));
    }
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    progress("sequential acquire latency");
    let (acquire, release) = sequential(locks, options, &format!("bench:{run_id}:seq")).await?;
    let sets = if options.set_sizes.is_empty() {
        Vec::new()
    } else {
        progress("acquire+release of sets beside the single lock");
        set_cycles(locks, options, &format!("bench:{run_id}:set")).await?
    };
    let mut throughput = Vec::new();
    for &concurrency in &options.concurrency {
        progress(&format!("cycles/s at concurrency {concurrency}"));
        throughput.push(
            cycles(
                locks,
                options,
                concurrency,
                &format!("bench:{run_id}:c{concurrency}"),
            )
            .await,
        );
    }
    progress(&format!(
        "contention: {} workers, one resource",
        options.contenders
    ));
    let contention = contend(locks, options, &format!("bench:{run_id}:contended")).await;
    Ok(BenchReport {
        groups: locks.topology().groups.len(),
        acquire,
        release,
        sets,
        counted_group: locks
            .topology()
            .groups
            .first()
            .map(|group| group.name.clone()),
        throughput,
        contention,
    })
}

async fn sequential(
    locks: &Locks,
    options: &BenchOptions,
    resource: &str,
) -> Result<(Latency, Latency), Error> {
    let (mut acquired, mut released) = (histogram(), histogram());
    for _ in 0..options.samples {
        let started = Instant::now();
        let lease = options.acquire(locks, resource).await?;
        acquired.saturating_record(micros(started.elapsed()));
        let started = Instant::now();
        lease.release().await?;
        released.saturating_record(micros(started.elapsed()));
    }
    Ok((latency(&acquired), latency(&released)))
}

/// Cycles counted with INFO commandstats for [`SetCycles::script_calls_per_cycle`].
const COUNTED_CYCLES: u32 = 20;

/// The single lock and each set size, one cycle of each in turn, so that the noise of a
/// shared machine falls on every row alike; then the script calls of each.
async fn set_cycles(
    locks: &Locks,
    options: &BenchOptions,
    prefix: &str,
) -> Result<Vec<SetCycles>, Error> {
    let sizes: Vec<Option<usize>> = std::iter::once(None)
        .chain(options.set_sizes.iter().copied().map(Some))
        .collect();
    let resources: Vec<Vec<String>> = sizes
        .iter()
        .enumerate()
        .map(|(row, size)| {
            (0..size.unwrap_or(1))
                .map(|member| format!("{prefix}:{row}:{member}"))
                .collect()
        })
        .collect();
    let mut histograms = vec![histogram(); sizes.len()];
    let mut spent = vec![Duration::ZERO; sizes.len()];
    for _ in 0..options.samples {
        for (row, size) in sizes.iter().enumerate() {
            let took = cycle(locks, options, *size, &resources[row]).await?;
            histograms[row].saturating_record(micros(took));
            spent[row] += took;
        }
    }
    let mut rows = Vec::with_capacity(sizes.len());
    for (row, size) in sizes.iter().enumerate() {
        let before = script_calls(locks).await;
        for _ in 0..COUNTED_CYCLES {
            cycle(locks, options, *size, &resources[row]).await?;
        }
        let after = script_calls(locks).await;
        rows.push(SetCycles {
            set_size: *size,
            cycle: latency(&histograms[row]),
            cycles_per_sec: options.samples as f64 / spent[row].as_secs_f64().max(f64::EPSILON),
            script_calls_per_cycle: before.zip(after).map(|(before, after)| {
                after.saturating_sub(before) as f64 / f64::from(COUNTED_CYCLES)
            }),
        });
    }
    Ok(rows)
}

/// One acquire+release of the single lock (`size` None) or of the set `resources`.
async fn cycle(
    locks: &Locks,
    options: &BenchOptions,
    size: Option<usize>,
    resources: &[String],
) -> Result<Duration, Error> {
    let started = Instant::now();
    let acquire = match size {
        None => locks.acquire(&resources[0]),
        Some(_) => locks.acquire_all(resources),
    };
    options.dress(acquire).await?.release().await?;
    Ok(started.elapsed())
}

/// EVALSHA and EVAL calls the first group's master has run, once every lock call handed to
/// the groups has been answered (a vote is decided without waiting for every group).
async fn script_calls(locks: &Locks) -> Option<u64> {
    locks.settle().await;
    let stats = locks
        .group_info(InfoSection::CommandStats)
        .await
        .into_iter()
        .next()??;
    let calls = |command: &str| -> u64 {
        stats
            .lines()
            .find_map(|line| line.strip_prefix(&format!("cmdstat_{command}:calls=")))
            .and_then(|rest| rest.split(',').next())
            .and_then(|calls| calls.parse().ok())
            .unwrap_or(0)
    };
    Some(calls("evalsha") + calls("eval"))
}

async fn cycles(
    locks: &Locks,
    options: &BenchOptions,
    concurrency: usize,
    prefix: &str,
) -> Throughput {
    let before = match options.server_cost {
        true => Some(Snapshot::take(locks).await),
        false => None,
    };
    let deadline = Instant::now() + options.phase;
    let started = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|task| {
            let (locks, options) = (locks.clone(), options.clone());
            let resources: Vec<String> = (0..RESOURCES_PER_TASK)
                .map(|n| format!("{prefix}:{task}:{n}"))
                .collect();
            tokio::spawn(async move {
                let (mut done, mut errors) = (0u64, 0u64);
                let mut causes = BTreeMap::new();
                for resource in resources.iter().cycle() {
                    if Instant::now() >= deadline {
                        break;
                    }
                    match options.acquire(&locks, resource).await {
                        Ok(lease) => match lease.release().await {
                            Ok(_) => done += 1,
                            Err(error) => {
                                errors += 1;
                                count_causes(&mut causes, "release", &error);
                            }
                        },
                        // Back off like a client would: retrying at once only adds load to an
                        // overloaded client or topology.
                        Err(error) => {
                            errors += 1;
                            count_causes(&mut causes, "acquire", &error);
                            tokio::time::sleep(locks.topology().retry_delay()).await;
                        }
                    }
                }
                (done, errors, causes)
            })
        })
        .collect();
    let (mut cycles, mut errors) = (0, 0);
    let mut error_causes = BTreeMap::new();
    for task in tasks {
        if let Ok((done, failed, causes)) = task.await {
            cycles += done;
            errors += failed;
            for (cause, count) in causes {
                *error_causes.entry(cause).or_insert(0) += count;
            }
        }
    }
    let cycles_per_sec = cycles as f64 / started.elapsed().as_secs_f64();
    let (server, server_unread) = match before {
        None => (None, None),
        Some(before) => server_cost(locks, before, cycles).await,
    };
    Throughput {
        concurrency,
        cycles,
        cycles_per_sec,
        errors,
        server,
        server_unread,
        error_causes,
    }
}

/// The primaries' cost of `cycles`, from the snapshot before the phase and one taken now; or
/// why it could not be read.
async fn server_cost(
    locks: &Locks,
    before: Result<Snapshot, String>,
    cycles: u64,
) -> (Option<ServerCost>, Option<String>) {
    match (before, Snapshot::take(locks).await) {
        (Ok(before), Ok(after)) => match before.cost(&after, cycles) {
            Some(cost) => (Some(cost), None),
            None => (
                None,
                Some("no cycle ran, or the primaries changed during the phase".to_string()),
            ),
        },
        (Err(error), _) | (_, Err(error)) => (None, Some(error)),
    }
}

/// Longest text of one cause kept in [`Throughput::error_causes`].
const CAUSE_CHARS: usize = 120;

/// Counts a failed call by its kind, and each failed group vote behind it by what it was.
fn count_causes(causes: &mut BTreeMap<String, u64>, step: &str, error: &Error) {
    let cut = |text: String| text.chars().take(CAUSE_CHARS).collect::<String>();
    let kind = match error {
        Error::Unavailable { .. } => "no quorum".to_string(),
        Error::Expired { .. } => "expired before a majority granted".to_string(),
        Error::NotHeld { .. } => "not held".to_string(),
        Error::Held { .. } => "held".to_string(),
        other => cut(other.to_string()),
    };
    *causes.entry(format!("{step}: {kind}")).or_insert(0) += 1;
    for vote in error.votes().iter().filter(|vote| vote.vote.is_failure()) {
        let what = match &vote.vote {
            crate::Vote::Timeout => "timeout".to_string(),
            crate::Vote::Error { message } => cut(message.clone()),
            crate::Vote::Quarantined { .. } => "quarantined".to_string(),
            other => cut(format!("{other:?}")),
        };
        *causes.entry(format!("{step} vote: {what}")).or_insert(0) += 1;
    }
}

async fn contend(locks: &Locks, options: &BenchOptions, resource: &str) -> Contention {
    let checker = Arc::new(Checker::new());
    let max_wait = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + options.phase;
    let started = Instant::now();
    let tasks: Vec<_> = (0..options.contenders)
        .map(|_| {
            let (locks, checker, max_wait) = (locks.clone(), checker.clone(), max_wait.clone());
            let (resource, options) = (resource.to_string(), options.clone());
            tokio::spawn(async move {
                while Instant::now() < deadline {
                    let asked = Instant::now();
                    let wait = deadline.saturating_duration_since(asked);
                    match options.acquire(&locks, &resource).wait(wait).await {
                        Ok(lease) => {
                            let acquired_at = Instant::now();
                            max_wait.fetch_max(micros(acquired_at - asked), Ordering::Relaxed);
                            tokio::time::sleep(options.hold).await;
                            checker.record(Hold::ending_now(&lease, acquired_at, locks.clock()));
                            let _ = lease.release().await;
                        }
                        Err(Error::Held { .. }) => {}
                        Err(_) => tokio::time::sleep(Duration::from_millis(1)).await,
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        let _ = task.await;
    }
    let verdict = checker.verdict();
    Contention {
        workers: options.contenders,
        acquisitions: verdict.holds as u64,
        acquisitions_per_sec: verdict.holds as f64 / started.elapsed().as_secs_f64(),
        overlaps: verdict.overlaps,
        fencing_regressions: verdict.fencing_regressions,
        max_wait_ms: max_wait.load(Ordering::Relaxed) as f64 / 1000.0,
    }
}

impl BenchReport {
    /// A human-readable table.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let row = |name: &str, l: &Latency| {
            format!(
                "{name:<10} {:>8} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3}\n",
                l.samples, l.p50_ms, l.p90_ms, l.p99_ms, l.p999_ms, l.max_ms
            )
        };
        out.push_str(&format!("quorum over {} groups\n\n", self.groups));
        out.push_str(&format!(
            "{:<10} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9}\n",
            "latency", "samples", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms"
        ));
        out.push_str(&row("acquire", &self.acquire));
        out.push_str(&row("release", &self.release));
        if let Some(lock) = self.sets.first() {
            let group = self.counted_group.as_deref().unwrap_or("the first group");
            out.push_str(&format!(
                "\n{:<10} {:>8} {:>9} {:>9} {:>9} {:>9} {:>10} {:>9}\n",
                "cycle",
                "samples",
                "p50 ms",
                "p99 ms",
                "p50/lock",
                "p99/lock",
                "cycles/s",
                "scripts"
            ));
            for set in &self.sets {
                let name = set
                    .set_size
                    .map_or_else(|| "lock".to_string(), |size| format!("set of {size}"));
                let calls = set
                    .script_calls_per_cycle
                    .map_or_else(|| "-".to_string(), |calls| format!("{calls:.2}"));
                out.push_str(&format!(
                    "{name:<10} {:>8} {:>9.3} {:>9.3} {:>9.2} {:>9.2} {:>10.0} {calls:>9}\n",
                    set.cycle.samples,
                    set.cycle.p50_ms,
                    set.cycle.p99_ms,
                    set.cycle.p50_ms / lock.cycle.p50_ms,
                    set.cycle.p99_ms / lock.cycle.p99_ms,
                    set.cycles_per_sec,
                ));
            }
            out.push_str(&format!(
                "(acquire+release by one caller, the rows in turn; scripts: EVALSHA/EVAL calls on {group}'s master per cycle)\n"
            ));
        }
        out.push_str(&format!(
            "\n{:<12} {:>10} {:>12} {:>8}\n",
            "concurrency", "cycles", "cycles/s", "errors"
        ));
        for t in &self.throughput {
            out.push_str(&format!(
                "{:<12} {:>10} {:>12.0} {:>8}\n",
                t.concurrency, t.cycles, t.cycles_per_sec, t.errors
            ));
        }
        if self
            .throughput
            .iter()
            .any(|t| t.server.is_some() || t.server_unread.is_some())
        {
            out.push_str(&server_table(&self.throughput));
        }
        let c = &self.contention;
        out.push_str(&format!(
            "\ncontended: {} workers on one resource: {} acquisitions, {:.0}/s, max wait {:.1} ms, overlaps {}, fencing regressions {}\n",
            c.workers, c.acquisitions, c.acquisitions_per_sec, c.max_wait_ms, c.overlaps, c.fencing_regressions
        ));
        out
    }
}

/// The servers' cost of each throughput phase, below the throughput table.
fn server_table(throughput: &[Throughput]) -> String {
    let mut out = format!(
        "\n{:<12} {:>9} {:>7} {:>10} {:>10} {:>10} {:>10} {:>6}\n",
        "concurrency", "primaries", "shards", "cpu/group", "cpu/shard", "scripts", "client", "load"
    );
    for t in throughput {
        match (&t.server, &t.server_unread) {
            (Some(s), _) => out.push_str(&format!(
                "{:<12} {:>9} {:>7.1} {:>10.1} {:>10.1} {:>10.2} {:>10.1} {:>6}\n",
                t.concurrency,
                s.primaries,
                s.shards_per_group,
                s.cpu_us_per_cycle_per_group,
                s.cpu_us_per_cycle_per_shard,
                s.script_calls_per_cycle_per_group,
                s.client_cpu_us_per_cycle,
                s.load_average
                    .map_or_else(|| "-".to_string(), |load| format!("{load:.2}")),
            )),
            (None, Some(why)) => {
                out.push_str(&format!("{:<12} servers not read: {why}\n", t.concurrency))
            }
            (None, None) => {}
        }
        for (cause, count) in &t.error_causes {
            out.push_str(&format!("{:<12} {count:>9} {cause}\n", ""));
        }
    }
    out.push_str("(per lock+release cycle: µs of used_cpu_sys+used_cpu_user of a group's primaries, and of one\n primary (shard); scripts: EVALSHA/EVAL calls per group; client: µs of this process's CPU;\n load: 1-minute load average at the phase's end; then failed calls and failed\n group votes by cause)\n");
    out
}
