//! `quorumlock bench`: runs the engine benchmark against a topology (or a temporary lab) and
//! prints HDR percentiles as a table or JSON; `--many-locks N` instead measures what N live
//! locks cost (Redis memory per lock and per fence key, `list` and `status` times). With
//! `--cluster` the temporary lab's groups are Redis Clusters, and every throughput phase also
//! prints what a cycle cost the primaries (`--server-cpu`).

use std::time::Duration;

use clap::Args;

use super::{Cli, exit};
use crate::Locks;
use crate::bench::{BenchOptions, run as run_bench};
use crate::lab::{ClusterShape, Lab, LabSpec};

/// Set sizes measured when `--set-sizes` is not given (none on Cluster groups).
const DEFAULT_SET_SIZES: [usize; 3] = [1, 4, 16];

#[derive(Debug, Clone, Args)]
#[command(
    after_help = "Without --config or a running lab, a temporary lab is started for the run and stopped after it\n(with --many-locks, one whose max_ttl_ms is an hour, so the locks outlive the run).\n\n--many-locks N holds N locks (`bench:many:NNNNNN`, the topology's longest TTL) and prints the\nused_memory growth per lock and, after releasing them, per fence key left behind, and the\nmedian times of `list` (first page), `list` of a prefix, walking every page, and `status`.\n\n--cluster makes every group of the temporary lab a Redis Cluster of --shards primaries, each with\n--replicas replicas, and measures no sets (a set spans hash slots). --server-cpu (on with --cluster)\nreads INFO cpu and commandstats of every primary before and after each throughput phase and\nprints the servers' CPU per cycle, per group and per shard.\n\nExamples:\n  quorumlock bench --samples 5000 --phase-secs 5 --json\n  quorumlock bench --many-locks 100000\n  quorumlock bench --cluster --shards 3 --replicas 0 --samples 200 --concurrency 64 --phase-secs 10"
)]
pub struct BenchArgs {
    /// Sequential acquire+release cycles for the latency percentiles.
    #[arg(long, default_value_t = 2000)]
    samples: usize,
    /// Sizes of the sets (`acquire_all`) whose acquire+release cycles are measured beside the
    /// single lock's, `--samples` cycles each, comma-separated [default: 1,4,16; none with
    /// --cluster].
    #[arg(long, value_delimiter = ',')]
    set_sizes: Option<Vec<usize>>,
    /// Concurrencies of the throughput phase, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,64")]
    concurrency: Vec<usize>,
    /// Seconds per throughput and contention phase.
    #[arg(long, default_value_t = 3)]
    phase_secs: u64,
    /// Workers contending for one resource.
    #[arg(long, default_value_t = 16)]
    contenders: usize,
    /// Bytes of owner and purpose text stored with every lease (0 to 2048).
    #[arg(long, default_value_t = 0)]
    payload_bytes: usize,
    /// Instead of the latency benchmark: hold this many locks and measure memory and listing.
    #[arg(long)]
    many_locks: Option<usize>,
    /// Make every group of the temporary lab a Redis Cluster (no Sentinels).
    #[arg(long, conflicts_with = "many_locks")]
    cluster: bool,
    /// Primaries per Cluster group of the temporary lab (with --cluster).
    #[arg(long, default_value_t = 3, requires = "cluster")]
    shards: usize,
    /// Replicas per group of the temporary lab (with --cluster, per shard) [default: 1].
    #[arg(long, conflicts_with = "many_locks")]
    replicas: Option<usize>,
    /// Print the primaries' CPU per cycle of each throughput phase (always on with --cluster).
    #[arg(long)]
    server_cpu: bool,
}

pub async fn run(args: &BenchArgs, cli: &Cli) -> anyhow::Result<u8> {
    if let Some(count) = args.many_locks {
        return many::run(count, cli).await;
    }
    let set_sizes = match (&args.set_sizes, args.cluster) {
        (Some(sizes), true) if sizes.iter().any(|&size| size > 1) => anyhow::bail!(
            "--set-sizes: a set of several resources spans hash slots, and Cluster groups refuse it; leave --set-sizes out with --cluster"
        ),
        (Some(sizes), _) => sizes.clone(),
        (None, true) => Vec::new(),
        (None, false) => DEFAULT_SET_SIZES.to_vec(),
    };
    let options = BenchOptions {
        samples: args.samples,
        set_sizes,
        concurrency: args.concurrency.clone(),
        server_cost: args.server_cpu || args.cluster,
        phase: Duration::from_secs(args.phase_secs),
        contenders: args.contenders,
        ..BenchOptions::default()
    }
    .with_payload(args.payload_bytes)?;
    let (topology, temporary) = match cli.topology()? {
        Some(_) if args.cluster || args.replicas.is_some() => anyhow::bail!(
            "--cluster, --shards and --replicas shape the temporary lab, and a topology is configured (--config, --lab, or a running lab): leave them out to measure that topology as it is, or point --lab-dir at an empty directory"
        ),
        Some(topology) => (topology, None),
        None => {
            let dir = tempfile::tempdir()?;
            eprintln!(
                "no topology configured: starting a temporary lab in {}",
                dir.path().display()
            );
            let lab = Lab::start(temporary_lab(args, dir.path())).await?;
            (lab.topology(), Some((lab, dir)))
        }
    };
    let locks = Locks::connect(topology).await?;
    // A spinner on stderr (drawn only on a terminal) shows which phase is running.
    let progress = indicatif::ProgressBar::new_spinner().with_style(
        indicatif::ProgressStyle::with_template("{spinner} {elapsed:>4} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    progress.enable_steady_tick(Duration::from_millis(100));
    let report = run_bench(&locks, &options, |phase| {
        progress.set_message(phase.to_string())
    })
    .await;
    progress.finish_and_clear();
    let report = report?;
    locks.close().await;
    if let Some((lab, _dir)) = temporary {
        lab.stop().await?;
    }
    if cli.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.table());
    }
    Ok(
        if report.contention.overlaps == 0 && report.contention.fencing_regressions == 0 {
            exit::OK
        } else {
            exit::FAILURE
        },
    )
}

/// The temporary lab: five Sentinel-watched groups, or with `--cluster` five Cluster groups.
fn temporary_lab(args: &BenchArgs, dir: &std::path::Path) -> LabSpec {
    let spec = LabSpec::new(dir);
    let replicas = args.replicas.unwrap_or(spec.replicas);
    match args.cluster {
        true => LabSpec {
            replicas,
            // Cluster groups fail over by themselves.
            sentinels: 0,
            cluster: Some(ClusterShape {
                shards: args.shards,
            }),
            ..spec
        },
        false => LabSpec { replicas, ..spec },
    }
}

/// `--many-locks`: what many live locks cost.
mod many {
    use std::time::{Duration, Instant};

    use futures::StreamExt;
    use serde::Serialize;

    use super::super::{Cli, exit};
    use crate::lab::{Lab, LabSpec};
    use crate::{InfoSection, Locks};

    /// Acquires and releases in flight at once.
    const CONCURRENCY: usize = 64;
    /// Tries again of an acquire that found no quorum.
    const RETRIES: usize = 5;
    /// Runs per timed read; the median is printed.
    const RUNS: usize = 7;
    /// Largest count accepted.
    const MAX_LOCKS: usize = 10_000_000;

    /// The figures `--many-locks` prints.
    #[derive(Debug, Serialize)]
    struct Report {
        locks: usize,
        acquire_secs: f64,
        /// used_memory growth per lock, averaged over the groups (lock key, fence key, owner).
        bytes_per_lock: f64,
        /// used_memory left per released lock: its fence key, kept after the release.
        bytes_per_fence_key: f64,
        /// Median ms of the first page of `list` (limit 100).
        list_first_page_ms: f64,
        /// Median ms of `list` of a prefix matching 100 locks (limit 100).
        list_prefix_ms: f64,
        /// Ms to walk every page of `list` (limit 1000) once.
        list_every_page_ms: f64,
        /// Median ms of one full-keyspace SCAN on every group at once, the floor of a listing
        /// that walks the whole keyspace per call.
        full_scan_ms: f64,
        /// Median ms of `status` of one lock.
        status_ms: f64,
    }

    fn name(n: usize) -> String {
        format!("bench:many:{n:06}")
    }

    fn median(mut runs: Vec<f64>) -> f64 {
        runs.sort_by(f64::total_cmp);
        runs.get(runs.len() / 2).copied().unwrap_or(0.0)
    }

    fn ms(since: Instant) -> f64 {
        since.elapsed().as_secs_f64() * 1000.0
    }

    /// `used_memory` of every group that answers, summed, and how many answered.
    async fn used_memory(locks: &Locks) -> (f64, usize) {
        let mut total = 0.0;
        let mut answered = 0;
        for text in locks
            .group_info(InfoSection::Memory)
            .await
            .into_iter()
            .flatten()
        {
            if let Some(bytes) = text
                .lines()
                .find_map(|line| line.trim().strip_prefix("used_memory:"))
                .and_then(|n| n.parse::<f64>().ok())
            {
                total += bytes;
                answered += 1;
            }
        }
        (total, answered)
    }

    pub async fn run(count: usize, cli: &Cli) -> anyhow::Result<u8> {
        if count == 0 || count > MAX_LOCKS {
            anyhow::bail!("--many-locks must be between 1 and {MAX_LOCKS}, not {count}");
        }
        let (topology, temporary) = match cli.topology()? {
            Some(topology) => (topology, None),
            None => {
                let dir = tempfile::tempdir()?;
                eprintln!(
                    "no topology configured: starting a temporary lab in {}",
                    dir.path().display()
                );
                let spec = LabSpec {
                    max_ttl_ms: 3_600_000,
                    ..LabSpec::new(dir.path())
                };
                let lab = Lab::start(spec).await?;
                (lab.topology(), Some((lab, dir)))
            }
        };
        let ttl = topology.max_ttl();
        let locks = Locks::connect(topology).await?;
        let report = measure(&locks, count, ttl).await;
        locks.close().await;
        if let Some((lab, _dir)) = temporary {
            lab.stop().await?;
        }
        let report = report?;
        if cli.json {
            println!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            println!("locks held                      {}", report.locks);
            println!(
                "acquire all                     {:.1} s",
                report.acquire_secs
            );
            println!(
                "memory per lock (per group)     {:.0} B",
                report.bytes_per_lock
            );
            println!(
                "memory per fence key left       {:.0} B",
                report.bytes_per_fence_key
            );
            println!(
                "list, first page of 100         {:.1} ms",
                report.list_first_page_ms
            );
            println!(
                "list of a prefix matching 100   {:.1} ms",
                report.list_prefix_ms
            );
            println!(
                "list, every page of 1000        {:.1} ms",
                report.list_every_page_ms
            );
            println!(
                "one full SCAN of every group    {:.1} ms",
                report.full_scan_ms
            );
            println!("status of one lock              {:.2} ms", report.status_ms);
        }
        Ok(exit::OK)
    }

    async fn measure(locks: &Locks, count: usize, ttl: Duration) -> anyhow::Result<Report> {
        let (before, groups) = used_memory(locks).await;
        let started = Instant::now();
        let leases: Vec<_> = futures::stream::iter(0..count)
            .map(|n| async move {
                // A busy machine can miss a quorum now and then: try again a few times.
                let mut tries = 0;
                loop {
                    match locks.acquire(name(n)).ttl(ttl).owner("bench").await {
                        Err(error) if error.is_unavailable() && tries < RETRIES => tries += 1,
                        result => return result,
                    }
                }
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        let leases = leases.into_iter().collect::<Result<Vec<_>, _>>()?;
        let acquire_secs = started.elapsed().as_secs_f64();
        let (held, _) = used_memory(locks).await;
        let per_group = |bytes: f64| bytes / groups.max(1) as f64 / count as f64;

        let mut first_page = Vec::new();
        let mut prefix = Vec::new();
        let mut status = Vec::new();
        let mut full_scan = Vec::new();
        // A prefix that matches 100 names when there are that many (`bench:many:0001NN`).
        let narrow = if count >= 200 {
            "bench:many:0001"
        } else {
            "bench:many:"
        };
        let pattern = format!("{}:{{bench:many:*}}:lock", locks.topology().key_prefix);
        for run in 0..RUNS {
            let at = Instant::now();
            locks.list("", 100).await?;
            first_page.push(ms(at));
            let at = Instant::now();
            locks.list(narrow, 100).await?;
            prefix.push(ms(at));
            let at = Instant::now();
            locks.status(&name(run * 7919 % count)).await?;
            status.push(ms(at));
            let at = Instant::now();
            locks.scan_every_group(&pattern).await;
            full_scan.push(ms(at));
        }
        let at = Instant::now();
        let mut cursor: Option<String> = None;
        loop {
            let page = locks.list_page("", 1000, cursor.as_deref()).await?;
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        let list_every_page_ms = ms(at);

        let released: Vec<_> = futures::stream::iter(leases)
            .map(|lease| lease.release())
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        released.into_iter().collect::<Result<Vec<_>, _>>()?;
        let (after, _) = used_memory(locks).await;
        Ok(Report {
            locks: count,
            acquire_secs,
            bytes_per_lock: per_group(held - before),
            bytes_per_fence_key: per_group(after - before),
            list_first_page_ms: median(first_page),
            list_prefix_ms: median(prefix),
            list_every_page_ms,
            full_scan_ms: median(full_scan),
            status_ms: median(status),
        })
    }
}
