//! `quorumlock bench`: runs the engine benchmark against a topology (or a temporary lab) and
//! prints HDR percentiles as a table or JSON.

use std::time::Duration;

use clap::Args;

use super::{Cli, exit};
use crate::Locks;
use crate::bench::{BenchOptions, run as run_bench};
use crate::lab::{Lab, LabSpec};

#[derive(Debug, Clone, Args)]
#[command(
    after_help = "Without --config or a running lab, a temporary lab is started for the run and stopped after it.\n\nExample:\n  quorumlock bench --samples 5000 --phase-secs 5 --json"
)]
pub struct BenchArgs {
    /// Sequential acquire+release cycles for the latency percentiles.
    #[arg(long, default_value_t = 2000)]
    samples: usize,
    /// Sizes of the sets (`acquire_all`) whose acquire+release cycles are measured beside the
    /// single lock's, `--samples` cycles each, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
    set_sizes: Vec<usize>,
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
}

pub async fn run(args: &BenchArgs, cli: &Cli) -> anyhow::Result<u8> {
    let options = BenchOptions {
        samples: args.samples,
        set_sizes: args.set_sizes.clone(),
        concurrency: args.concurrency.clone(),
        phase: Duration::from_secs(args.phase_secs),
        contenders: args.contenders,
        ..BenchOptions::default()
    }
    .with_payload(args.payload_bytes)?;
    let (topology, temporary) = match cli.topology()? {
        Some(topology) => (topology, None),
        None => {
            let dir = tempfile::tempdir()?;
            eprintln!(
                "no topology configured: starting a temporary lab in {}",
                dir.path().display()
            );
            let lab = Lab::start(LabSpec::new(dir.path())).await?;
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
