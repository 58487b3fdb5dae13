//! `quorumlock chaos`: contending workers (single locks, sets of resources, semaphore
//! permits) while masters are killed, frozen and restarted; prints what happened and exits
//! non-zero on any safety violation.

use std::time::Duration;

use clap::Args;

use super::exit;
use crate::MAX_PERMITS;
use crate::chaos::{ChaosOptions, Fault, Pattern, run as run_chaos};
use crate::lab::{ClusterShape, Lab, LabSpec};

#[derive(Debug, Clone, Args)]
#[command(
    after_help = "Starts a temporary lab (5 groups with replicas, 3 Sentinels) unless --lab is given.\n\nWorkers on the resource pool take single locks; with sets on, one in three of them takes sets of 2 or 3 of its resources instead, all or nothing, named in random orders (all of them with sets alone); the permit workers take permits of one semaphore. The checker proves no two holders of a resource (a set holds each member) or of a semaphore slot at once, never more permits held than the semaphore has, and fencing tokens that only grow per resource and per slot.\n\nExample:\n  quorumlock chaos --duration 600 --workers 8 --resources 3 --patterns locks,sets,permits --permit-workers 4 --permits 2 --faults kill,freeze,restart,pause,partition,latency,clock --mixed-configs"
)]
pub struct ChaosArgs {
    /// Seconds to run.
    #[arg(long, default_value_t = 60)]
    duration: u64,
    /// Workers contending for the resource pool (single locks; with sets on, one in three
    /// takes sets).
    #[arg(long, default_value_t = 8)]
    workers: usize,
    /// Resources in the pool they contend for.
    #[arg(long, default_value_t = 3)]
    resources: usize,
    /// What the workers take, comma-separated: locks (one resource), sets (2 or 3 resources
    /// of the pool, all or nothing), permits (of one semaphore).
    #[arg(long, value_delimiter = ',', default_value = "locks,sets,permits")]
    patterns: Vec<Pattern>,
    /// Workers contending for the semaphore's permits (with the `permits` pattern).
    #[arg(long, default_value_t = 4)]
    permit_workers: usize,
    /// Permits of the semaphore.
    #[arg(long, default_value_t = 2)]
    permits: u32,
    /// Faults to inject, comma-separated: kill, freeze, restart, pause, partition, latency,
    /// clock. Partitions and latency run the lab behind relays; see docs/safety.md.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "kill,freeze,restart,pause"
    )]
    faults: Vec<Fault>,
    /// Lease TTL in milliseconds (also how long a fresh master sits out of the vote).
    #[arg(long, default_value_t = 1000)]
    ttl_ms: u64,
    /// Milliseconds between two fault decisions.
    #[arg(long, default_value_t = 1500)]
    fault_every_ms: u64,
    /// Workers run with different max_ttl_ms and drift_factor, as during a rolling change
    /// of the client config.
    #[arg(long)]
    mixed_configs: bool,
    /// Make the temporary lab's groups Redis Clusters of this many shards (a primary and a
    /// replica each; three or more for a killed primary to be replaced). Patterns locks and
    /// permits; faults kill, freeze, restart, pause and migrate (a slot moves between shards).
    #[arg(long, value_name = "SHARDS")]
    cluster: Option<usize>,
}

pub async fn run(
    args: &ChaosArgs,
    use_running_lab: bool,
    lab_dir: &std::path::Path,
    json: bool,
) -> anyhow::Result<u8> {
    if args.workers == 0 || args.resources == 0 || args.duration == 0 {
        anyhow::bail!("--workers, --resources and --duration must be above 0");
    }
    if args.permits == 0 || args.permits > MAX_PERMITS {
        anyhow::bail!("--permits must be between 1 and {MAX_PERMITS}");
    }
    if args.patterns.contains(&Pattern::Permits) && args.permit_workers == 0 {
        anyhow::bail!("the permits pattern needs --permit-workers above 0");
    }
    let options = ChaosOptions {
        duration: Duration::from_secs(args.duration),
        workers: args.workers,
        resources: args.resources,
        patterns: args.patterns.clone(),
        permit_workers: args.permit_workers,
        permits: args.permits,
        faults: args.faults.clone(),
        ttl: Duration::from_millis(args.ttl_ms),
        fault_every: Duration::from_millis(args.fault_every_ms),
        mixed_configs: args.mixed_configs,
        ..ChaosOptions::default()
    };
    let temporary = if use_running_lab {
        None
    } else {
        Some(tempfile::tempdir()?)
    };
    let mut lab = match &temporary {
        Some(dir) => {
            eprintln!("starting a temporary lab in {}", dir.path().display());
            let spec = LabSpec {
                binary: Some(std::env::current_exe()?),
                ..LabSpec::new(dir.path())
            };
            let spec = match args.cluster {
                Some(shards) => {
                    crate::chaos::check_cluster(&options)?;
                    LabSpec {
                        sentinels: 0,
                        cluster: Some(ClusterShape { shards }),
                        ..spec
                    }
                }
                None => spec,
            };
            Lab::start(crate::chaos::lab_spec(spec, &options)).await?
        }
        None => Lab::open(lab_dir)?,
    };
    let permit_workers = if args.patterns.contains(&Pattern::Permits) {
        format!(
            ", {} permit workers on {} permits",
            args.permit_workers, args.permits
        )
    } else {
        String::new()
    };
    eprintln!(
        "chaos: {} workers on {} resources{permit_workers}, patterns {:?}, {} s, faults {:?}",
        args.workers, args.resources, args.patterns, args.duration, args.faults
    );
    let report = tokio::select! {
        report = run_chaos(&mut lab, &options) => report?,
        _ = tokio::signal::ctrl_c() => anyhow::bail!("interrupted"),
    };
    if temporary.is_some() {
        lab.stop().await?;
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{}", report.table());
    }
    Ok(if report.is_safe() {
        exit::OK
    } else {
        exit::FAILURE
    })
}
