//! `quorumlock chaos`: contending workers (single locks, sets of resources, semaphore
//! permits) while masters are killed, frozen and restarted; prints what happened and exits
//! non-zero on any safety violation. `--storm` runs the failover storm of issue #24 instead of
//! random faults, and the report says how available the locks stayed.

use std::time::Duration;

use clap::Args;

use super::exit;
use crate::MAX_PERMITS;
use crate::chaos::{ChaosOptions, Fault, Pattern, Storm, run as run_chaos};
use crate::lab::{ClusterShape, Lab, LabSpec};

#[derive(Debug, Clone, Args)]
#[command(
    after_help = "Starts a temporary lab (5 groups with replicas, 3 Sentinels) unless --lab is given.\n\nWorkers on the resource pool take single locks; with sets on, one in three of them takes sets of 2 or 3 of its resources instead, all or nothing, named in random orders (all of them with sets alone); the permit workers take permits of one semaphore. The checker proves no two holders of a resource (a set holds each member) or of a semaphore slot at once, never more permits held than the semaphore has, and fencing tokens that only grow per resource and per slot.\n\nA failover storm (--storm) replaces the random faults: every --storm-every-ms one group, one round in four two, gets one fault: its master killed, frozen, cut from its replicas and its Sentinels while clients still reach it (the split brain), or restarted empty at once. A kill, freeze or partition is undone after a hold drawn from --storm-hold-ms. At most --storm-max-faulted groups are faulted at once; a group restarted empty lost its data, which no mode recovers before every lease it may have missed expired, so it counts as faulted until its quarantine (max_ttl_ms + write_window_ms of the lab's policy) ends. With --storm the workers default to 12 on 3 resources taking single locks, each acquire waiting 2000 ms, and the report adds each group's time out of the vote (from `health`, once a second). The safety verdict is the same; availability figures are reported, never judged.\n\nExamples:\n  quorumlock chaos --duration 600 --workers 8 --resources 3 --patterns locks,sets,permits --permit-workers 4 --permits 2 --faults kill,freeze,restart,pause,partition,latency,clock --mixed-configs\n  quorumlock chaos --storm --production-policy --duration 150"
)]
pub struct ChaosArgs {
    /// Seconds to run.
    #[arg(long, default_value_t = 60)]
    duration: u64,
    /// Workers contending for the resource pool (single locks; with sets on, one in three
    /// takes sets) [default: 8; 12 with --storm].
    #[arg(long)]
    workers: Option<usize>,
    /// Resources in the pool they contend for.
    #[arg(long, default_value_t = 3)]
    resources: usize,
    /// What the workers take, comma-separated: locks (one resource), sets (2 or 3 resources
    /// of the pool, all or nothing), permits (of one semaphore) [default: locks,sets,permits;
    /// locks with --storm].
    #[arg(long, value_delimiter = ',')]
    patterns: Option<Vec<Pattern>>,
    /// Workers contending for the semaphore's permits (with the `permits` pattern).
    #[arg(long, default_value_t = 4)]
    permit_workers: usize,
    /// Permits of the semaphore.
    #[arg(long, default_value_t = 2)]
    permits: u32,
    /// Faults to inject, comma-separated: kill, freeze, restart, pause, partition, latency,
    /// clock. Partitions and latency run the lab behind relays; see docs/safety.md
    /// [default: kill,freeze,restart,pause; not with --storm].
    #[arg(long, value_delimiter = ',', conflicts_with = "storm")]
    faults: Option<Vec<Fault>>,
    /// Lease TTL in milliseconds (also how long a fresh master sits out of the vote).
    #[arg(long, default_value_t = 1000)]
    ttl_ms: u64,
    /// Milliseconds between two fault decisions.
    #[arg(long, default_value_t = 1500, conflicts_with = "storm")]
    fault_every_ms: u64,
    /// How long each acquire waits for its lock, in milliseconds [default: 5000; 2000 with
    /// --storm, which takes no less].
    #[arg(long)]
    wait_ms: Option<u64>,
    /// The failover storm instead of random faults (see below).
    #[arg(long)]
    storm: bool,
    /// Milliseconds between two storm rounds.
    #[arg(long, default_value_t = 8000, requires = "storm")]
    storm_every_ms: u64,
    /// How long a storm's kill, freeze or partition lasts before it is undone, in
    /// milliseconds: MIN-MAX (drawn at random) or one value.
    #[arg(long, default_value = "4000-12000", value_parser = parse_hold, requires = "storm")]
    storm_hold_ms: (u64, u64),
    /// Groups faulted at once by the storm, at most (a group restarted empty counts until
    /// its quarantine ends).
    #[arg(long, default_value_t = 2, requires = "storm")]
    storm_max_faulted: usize,
    /// The temporary lab's masters take the production policy: max_ttl_ms 60000 and
    /// min-replicas-max-lag 10 on every data node (write window 12000 ms), so a new master
    /// sits out 72 s. Without it the policy is --ttl-ms with a lag of 1 s.
    #[arg(long)]
    production_policy: bool,
    /// The temporary lab admits its masters in acknowledged mode (docs/safety.md).
    #[arg(long)]
    acknowledged: bool,
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
    let options = options(args)?;
    if use_running_lab && (args.production_policy || args.acknowledged) {
        anyhow::bail!(
            "--production-policy and --acknowledged shape the temporary lab; a running lab (--lab) keeps the policy it was started with"
        );
    }
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
    announce(args, &options, &lab);
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

/// Says on stderr what the run does: workers, patterns, faults and the lab's lock policy.
fn announce(args: &ChaosArgs, options: &ChaosOptions, lab: &Lab) {
    let permit_workers = if options.patterns.contains(&Pattern::Permits) {
        format!(
            ", {} permit workers on {} permits",
            args.permit_workers, args.permits
        )
    } else {
        String::new()
    };
    let faults = match &options.storm {
        Some(storm) => format!(
            "a storm every {} ms, holds {}-{} ms, at most {} groups faulted",
            storm.every.as_millis(),
            storm.hold_min.as_millis(),
            storm.hold_max.as_millis(),
            storm.max_faulted
        ),
        None => format!("faults {:?}", options.faults),
    };
    let policy = lab.spec().policy();
    eprintln!(
        "chaos: {} workers on {} resources{permit_workers}, patterns {:?}, wait {} ms, {} s, {faults}; policy max_ttl_ms {}, write_window_ms {}, acknowledged {}",
        options.workers,
        options.resources,
        options.patterns,
        options.wait.as_millis(),
        args.duration,
        policy.max_ttl_ms,
        policy.write_window_ms,
        policy.acked_replicas > 0
    );
}

/// The run's options from the arguments, with the storm's defaults where one is asked for.
fn options(args: &ChaosArgs) -> anyhow::Result<ChaosOptions> {
    let defaults = ChaosOptions::default();
    let workers = args.workers.unwrap_or(if args.storm { 12 } else { 8 });
    let patterns = match (&args.patterns, args.storm) {
        (Some(patterns), _) => patterns.clone(),
        (None, true) => vec![Pattern::Locks],
        (None, false) => defaults.patterns.clone(),
    };
    let wait_ms = args.wait_ms.unwrap_or(if args.storm { 2000 } else { 5000 });
    if workers == 0 || args.resources == 0 || args.duration == 0 || wait_ms == 0 {
        anyhow::bail!("--workers, --resources, --wait-ms and --duration must be above 0");
    }
    if args.permits == 0 || args.permits > MAX_PERMITS {
        anyhow::bail!("--permits must be between 1 and {MAX_PERMITS}");
    }
    if patterns.contains(&Pattern::Permits) && args.permit_workers == 0 {
        anyhow::bail!("the permits pattern needs --permit-workers above 0");
    }
    let storm = if args.storm {
        if wait_ms < STORM_MIN_WAIT_MS {
            anyhow::bail!(
                "--wait-ms must be at least {STORM_MIN_WAIT_MS} with --storm: its availability figures are of acquires that wait that long"
            );
        }
        let storm = Storm {
            every: Duration::from_millis(args.storm_every_ms),
            hold_min: Duration::from_millis(args.storm_hold_ms.0),
            hold_max: Duration::from_millis(args.storm_hold_ms.1),
            max_faulted: args.storm_max_faulted,
        };
        storm
            .check()
            .map_err(|reason| anyhow::anyhow!("--storm: {reason}"))?;
        Some(storm)
    } else {
        None
    };
    Ok(ChaosOptions {
        duration: Duration::from_secs(args.duration),
        workers,
        resources: args.resources,
        patterns,
        permit_workers: args.permit_workers,
        permits: args.permits,
        faults: args.faults.clone().unwrap_or(defaults.faults.clone()),
        storm,
        production_policy: args.production_policy,
        acknowledged: args.acknowledged,
        ttl: Duration::from_millis(args.ttl_ms),
        wait: Duration::from_millis(wait_ms),
        fault_every: Duration::from_millis(args.fault_every_ms),
        mixed_configs: args.mixed_configs,
        ..defaults
    })
}

/// The shortest wait a storm's acquires take (issue #24 measures acquires of 2 s or more).
const STORM_MIN_WAIT_MS: u64 = 2000;

/// `MIN-MAX` or one value, in milliseconds.
fn parse_hold(text: &str) -> Result<(u64, u64), String> {
    let number = |part: &str| {
        part.trim()
            .parse::<u64>()
            .map_err(|error| format!("`{part}` is not a number of milliseconds: {error}"))
    };
    let (min, max) = match text.split_once('-') {
        Some((min, max)) => (number(min)?, number(max)?),
        None => {
            let value = number(text)?;
            (value, value)
        }
    };
    if min == 0 || min > max {
        return Err(format!("{text}: expected MIN-MAX with 0 < MIN <= MAX"));
    }
    Ok((min, max))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: ChaosArgs,
    }

    fn parse(line: &[&str]) -> anyhow::Result<ChaosOptions> {
        let wrapper =
            Wrapper::try_parse_from(std::iter::once("chaos").chain(line.iter().copied()))?;
        options(&wrapper.args)
    }

    #[test]
    fn a_storm_defaults_to_twelve_lock_workers_waiting_two_seconds_on_the_issues_schedule() {
        let options = parse(&["--storm"]).expect("parsed");
        assert_eq!(options.storm, Some(Storm::default()));
        assert_eq!(
            Storm::default(),
            Storm {
                every: Duration::from_secs(8),
                hold_min: Duration::from_secs(4),
                hold_max: Duration::from_secs(12),
                max_faulted: 2,
            }
        );
        assert_eq!((options.workers, options.resources), (12, 3));
        assert_eq!(options.patterns, vec![Pattern::Locks]);
        assert_eq!(options.wait, Duration::from_secs(2));
        assert!(!options.production_policy && !options.acknowledged);

        let plain = parse(&[]).expect("parsed");
        assert_eq!(plain.storm, None);
        assert_eq!((plain.workers, plain.wait), (8, Duration::from_secs(5)));
        assert_eq!(plain.patterns, Pattern::ALL.to_vec());
    }

    #[test]
    fn storm_flags_set_the_schedule_and_need_the_storm() {
        let options = parse(&[
            "--storm",
            "--storm-every-ms",
            "5000",
            "--storm-hold-ms",
            "1000-2000",
            "--storm-max-faulted",
            "1",
            "--production-policy",
            "--acknowledged",
            "--workers",
            "4",
        ])
        .expect("parsed");
        assert_eq!(
            options.storm,
            Some(Storm {
                every: Duration::from_secs(5),
                hold_min: Duration::from_secs(1),
                hold_max: Duration::from_secs(2),
                max_faulted: 1,
            })
        );
        assert!(options.production_policy && options.acknowledged);
        assert_eq!(options.workers, 4);
        assert!(parse(&["--storm-every-ms", "5000"]).is_err());
        assert!(parse(&["--storm", "--faults", "kill"]).is_err());
        assert!(parse(&["--storm", "--wait-ms", "1999"]).is_err());
        assert!(parse(&["--storm", "--storm-max-faulted", "0"]).is_err());
    }

    #[test]
    fn a_hold_reads_as_min_dash_max_or_one_value() {
        assert_eq!(parse_hold("4000-12000"), Ok((4000, 12000)));
        assert_eq!(parse_hold("5000"), Ok((5000, 5000)));
        assert!(parse_hold("12000-4000").is_err());
        assert!(parse_hold("0-10").is_err());
        assert!(parse_hold("four").is_err());
    }
}
