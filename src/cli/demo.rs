//! `quorumlock demo`: the five-minute tour. Starts a lab, lets workers contend for a few
//! resources, kills one master halfway, brings it back as the promoted replica's replica,
//! and prints what happened and whether it was safe. The lab runs the safe settings
//! (`min-replicas-to-write 1`), so the promoted replica takes writes only once it has a
//! replica again. With `--cluster` every group is a Redis Cluster, and the master killed is
//! one primary.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use rand::Rng;

use super::exit;
use crate::Error;
use crate::Failover;
use crate::Locks;
use crate::Vote;
use crate::chaos::checker::{Checker, Hold};
use crate::lab::{ClusterShape, Lab, LabSpec};
use crate::millis;
use tokio::sync::broadcast;

/// Group whose master the demo kills (0-based: g2).
const VICTIM: usize = 1;
/// The demo's max TTL: with the lab's write window, the quarantine of the promoted replica.
const MAX_TTL: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Args)]
#[command(after_help = "Examples:
  quorumlock demo                          # 30 s, 8 workers on 3 resources; g2's master killed halfway
  quorumlock demo --duration 60 --workers 16
  quorumlock demo --cluster                # every group a Redis Cluster of three shards

It starts its own lab in a temporary directory and stops it at the end; exit code 0 when the
safety check passed (no two holders at once, fencing tokens always growing), 4 when it failed.")]
pub struct DemoArgs {
    /// How long the workers run, in seconds: the failed group votes again some 10 s after
    /// the kill halfway.
    #[arg(long, default_value_t = 30)]
    duration: u64,
    /// Number of contending workers.
    #[arg(long, default_value_t = 8)]
    workers: usize,
    /// Number of resources they contend for.
    #[arg(long, default_value_t = 3)]
    resources: usize,
    /// Make every group a Redis Cluster of three shards (primary + replica each), instead
    /// of a master and replica watched by Sentinel.
    #[arg(long)]
    cluster: bool,
}

/// Shards per group with `--cluster`: a cluster fails over only while most of its
/// primaries are alive, so it takes three.
const CLUSTER_SHARDS: usize = 3;

#[derive(Default)]
struct Counters {
    acquired: AtomicU64,
    /// Acquisitions that found the resource held and waited for it.
    waited: AtomicU64,
    held_elsewhere: AtomicU64,
    unavailable: AtomicU64,
    /// Milliseconds after the start when the victim group first granted again after the kill.
    victim_back_at_ms: AtomicU64,
}

pub async fn run(args: &DemoArgs) -> anyhow::Result<u8> {
    if args.workers == 0 || args.resources == 0 || args.duration == 0 {
        anyhow::bail!("--workers, --resources and --duration must be above 0");
    }
    let dir = tempfile::tempdir()?;
    // A short lock policy keeps the promoted replica's quarantine visible within the run.
    let spec = LabSpec {
        max_ttl_ms: millis(MAX_TTL),
        ..LabSpec::new(dir.path())
    };
    let spec = if args.cluster {
        println!(
            "starting a lab: 5 groups, each a Redis Cluster of {CLUSTER_SHARDS} shards (primary + replica), on 127.0.0.1 ..."
        );
        LabSpec {
            sentinels: 0,
            cluster: Some(ClusterShape {
                shards: CLUSTER_SHARDS,
            }),
            ..spec
        }
    } else {
        println!("starting a lab: 5 groups (master + replica), 3 Sentinels, on 127.0.0.1 ...");
        spec
    };
    let lab = Lab::start(spec).await?;
    let outcome = tokio::select! {
        outcome = contend(args, lab) => outcome,
        _ = tokio::signal::ctrl_c() => {
            // The lab is dropped with the cancelled future, which stops its processes.
            println!("interrupted: lab stopped");
            return Ok(exit::FAILURE);
        }
    };
    outcome
}

async fn contend(args: &DemoArgs, mut lab: Lab) -> anyhow::Result<u8> {
    let locks = Locks::connect(lab.topology()).await?;
    let mut failovers = locks.failovers();
    let checker = Arc::new(Checker::new());
    let counters = Arc::new(Counters::default());
    let start = Instant::now();
    let duration = Duration::from_secs(args.duration);
    let deadline = start + duration;
    let victim_name = if args.cluster {
        format!("the primary of g{}'s first shard", VICTIM + 1)
    } else {
        format!("the master of g{}", VICTIM + 1)
    };
    println!(
        "{} workers contend for {} resources for {} s; {victim_name} dies halfway",
        args.workers, args.resources, args.duration,
    );
    let killed_at_ms = Arc::new(AtomicU64::new(u64::MAX));
    let workers: Vec<_> = (0..args.workers)
        .map(|worker| {
            let context = (
                locks.clone(),
                checker.clone(),
                counters.clone(),
                killed_at_ms.clone(),
            );
            tokio::spawn(work(worker, args.resources, deadline, start, context))
        })
        .collect();

    tokio::time::sleep(duration / 2).await;
    let victim = if args.cluster {
        lab.kill_primary(VICTIM, 0).await?
    } else {
        lab.kill(VICTIM).await?
    };
    let kill_ms = start.elapsed().as_millis() as u64;
    // In a Cluster group only the killed shard's slots sit out: other grants of the group
    // say nothing about its return.
    if !args.cluster {
        killed_at_ms.store(kill_ms, Ordering::SeqCst);
    }
    println!(
        "t={:>5.1}s  killed {victim_name} (pid {}, port {})",
        kill_ms as f64 / 1000.0,
        victim.pid,
        victim.port
    );
    repair(
        args,
        &mut lab,
        &mut failovers,
        victim.port,
        (start, deadline),
        kill_ms,
    )
    .await?;
    for worker in workers {
        worker.await?;
    }
    finish(locks, lab, checker, counters, kill_ms).await
}

/// Waits for the failover after the kill and brings the old node back, empty, as the new
/// one's replica (which it needs to take writes under min-replicas-to-write).
async fn repair(
    args: &DemoArgs,
    lab: &mut Lab,
    failovers: &mut broadcast::Receiver<Failover>,
    victim_port: u16,
    (start, deadline): (Instant, Instant),
    kill_ms: u64,
) -> anyhow::Result<()> {
    let quarantine_s = lab.spec().policy().quarantine_ms() as f64 / 1000.0;
    if args.cluster {
        match watch_promotion(lab, victim_port, deadline).await {
            Some(promoted) => {
                let at = start.elapsed();
                println!(
                    "t={:>5.1}s  the cluster promoted 127.0.0.1:{promoted} ({} ms after the kill)",
                    at.as_secs_f64(),
                    at.as_millis() as u64 - kill_ms,
                );
                // With min-replicas-to-write the new primary takes writes once the old one
                // is back as its replica.
                lab.restart_shard(VICTIM, 0).await?;
                println!(
                    "t={:>5.1}s  restarted the old primary, empty: it rejoins as the new primary's replica",
                    start.elapsed().as_secs_f64()
                );
                println!(
                    "           the shard's slots sit out the vote for {quarantine_s} s from their first vote: the new primary may have missed the last grants"
                );
            }
            None => println!("           no promotion seen before the end of the run"),
        }
    } else if report_failover(failovers, deadline, start, kill_ms).await {
        // With min-replicas-to-write the promoted replica takes writes once it has a
        // replica: the old master, back empty.
        lab.restart(VICTIM).await?;
        lab.rejoin(VICTIM).await?;
        println!(
            "t={:>5.1}s  restarted the old master, empty, as the new master's replica",
            start.elapsed().as_secs_f64()
        );
        println!(
            "           the new master sits out the vote for {quarantine_s} s from its first vote: it may have missed the last grants"
        );
    }
    Ok(())
}

/// How often the demo asks a Cluster group for the shard's primary after the kill.
const PROMOTION_POLL: Duration = Duration::from_millis(100);

/// Waits until the victim shard's primary is another node than `killed`: its port.
async fn watch_promotion(lab: &Lab, killed: u16, deadline: Instant) -> Option<u16> {
    while Instant::now() < deadline {
        if let Ok(primary) = lab.primary_of(VICTIM, 0).await
            && primary.port != killed
        {
            return Some(primary.port);
        }
        tokio::time::sleep(PROMOTION_POLL).await;
    }
    None
}

/// Prints Sentinel's promotion of the victim's replica; false when none came in time.
async fn report_failover(
    failovers: &mut broadcast::Receiver<Failover>,
    deadline: Instant,
    start: Instant,
    kill_ms: u64,
) -> bool {
    match watch_failover(failovers, deadline).await {
        Some(failover) => {
            let at = failover.announced_at - start;
            println!(
                "t={:>5.1}s  Sentinel promoted {} ({} ms after the kill); g{} reconnected {} ms later",
                at.as_secs_f64(),
                failover.master,
                at.as_millis() as u64 - kill_ms,
                VICTIM + 1,
                (failover.reconnected_at - failover.announced_at).as_millis()
            );
            true
        }
        None => {
            println!("           no failover seen before the end of the run");
            false
        }
    }
}

async fn finish(
    locks: Locks,
    lab: Lab,
    checker: Arc<Checker>,
    counters: Arc<Counters>,
    kill_ms: u64,
) -> anyhow::Result<u8> {
    locks.close().await;
    let verdict = checker.verdict();
    let back = counters.victim_back_at_ms.load(Ordering::SeqCst);
    println!("\nsummary");
    println!("  acquisitions              {}", verdict.holds);
    println!(
        "  waited for another holder {}",
        counters.waited.load(Ordering::SeqCst)
    );
    println!(
        "  gave up (held too long)   {}",
        counters.held_elsewhere.load(Ordering::SeqCst)
    );
    println!(
        "  quorum unavailable        {}",
        counters.unavailable.load(Ordering::SeqCst)
    );
    if back != 0 {
        println!(
            "  g{} voting again          {} ms after the kill",
            VICTIM + 1,
            back - kill_ms
        );
    }
    println!(
        "  fencing tokens monotonic  {}",
        if verdict.fencing_regressions == 0 {
            "yes".to_string()
        } else {
            format!("NO ({} regressions)", verdict.fencing_regressions)
        }
    );
    println!("  overlapping holders       {}", verdict.overlaps);
    lab.stop().await?;
    println!("lab stopped");
    if verdict.is_safe() && verdict.holds > 0 {
        Ok(exit::OK)
    } else {
        println!("SAFETY CHECK FAILED");
        Ok(exit::FAILURE)
    }
}

async fn work(
    worker: usize,
    resources: usize,
    deadline: Instant,
    start: Instant,
    (locks, checker, counters, killed_at_ms): (Locks, Arc<Checker>, Arc<Counters>, Arc<AtomicU64>),
) {
    let owner = format!("worker-{worker}");
    while Instant::now() < deadline {
        let resource = format!("demo:{}", rand::thread_rng().gen_range(0..resources));
        let result = locks
            .acquire(resource.as_str())
            .ttl(Duration::from_secs(2))
            .wait(Duration::from_millis(500))
            .owner(owner.as_str())
            .purpose("demo")
            .await;
        match result {
            Ok(lease) => {
                let acquired_at = Instant::now();
                let now_ms = start.elapsed().as_millis() as u64;
                if now_ms > killed_at_ms.load(Ordering::SeqCst)
                    && lease
                        .votes()
                        .get(VICTIM)
                        .is_some_and(|v| v.vote == Vote::Granted)
                {
                    let _ = counters.victim_back_at_ms.compare_exchange(
                        0,
                        now_ms,
                        Ordering::SeqCst,
                        Ordering::SeqCst,
                    );
                }
                let work = Duration::from_millis(rand::thread_rng().gen_range(2..10));
                tokio::time::sleep(work).await;
                checker.record(Hold::ending_now(&lease, acquired_at, locks.clock()));
                counters.acquired.fetch_add(1, Ordering::Relaxed);
                if lease.attempts() > 1 {
                    counters.waited.fetch_add(1, Ordering::Relaxed);
                }
                let _ = lease.release().await;
            }
            Err(Error::Held { .. }) => {
                counters.held_elsewhere.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                counters.unavailable.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Waits for Sentinel's announcement that the victim group has a new master.
async fn watch_failover(
    failovers: &mut broadcast::Receiver<Failover>,
    deadline: Instant,
) -> Option<Failover> {
    let wait = deadline.saturating_duration_since(Instant::now());
    tokio::time::timeout(wait, async {
        loop {
            match failovers.recv().await {
                Ok(failover) if failover.group == format!("g{}", VICTIM + 1) => {
                    return Some(failover);
                }
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    })
    .await
    .ok()
    .flatten()
}
