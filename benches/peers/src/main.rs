//! quorumlock vs rslock vs etcd, side by side, in one process, against one local lab.
//!
//! A third column, the floor (`floor.rs`), is the least a Redlock on fred can do: `SET NX PX`
//! to every master, counted at a majority, compare-and-delete to release, nothing else. It
//! shows what the protocol and the client library cost on this machine, apart from
//! quorumlock's fencing, admission check and batching. A fourth, etcd (`etcd.rs`, on a
//! 3-member cluster from `etcd_cluster.rs`), is what users pick for a majority-backed lock
//! with a fencing token; in the product's shape a failover phase kills one of quorumlock's
//! masters and etcd's leader. In that shape quorumlock also runs in acknowledged mode
//! (`quorumlock-acked`, its own key prefix on the same masters), so that the report gives
//! what waiting for the replicas costs, measured beside the default mode in the same run.
//!
//! The same workloads (`workloads.rs`) run for every library (`libraries.rs`), interleaved
//! round by round (`comparison.rs`), and every figure is the median over the rounds
//! (`report.rs`). On a small shared machine the absolute numbers move a lot from run to run;
//! the ratios are what holds. `--profile` (`profile.rs`) runs one library alone for `perf`.
//!
//! Run from the repository root (see docs/performance.md; `--help` lists the options):
//!   cargo run --release --manifest-path benches/peers/Cargo.toml -- [options]

mod comparison;
mod cpu;
mod etcd;
mod etcd_cluster;
mod floor;
mod lab;
mod libraries;
mod options;
mod profile;
mod report;
mod workloads;

use std::fmt::Write as _;
use std::time::Instant;

use clap::Parser;

use options::Options;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn main() {
    // clap prints --help, or the error for a bad flag (exit code 2), and exits.
    let options = Options::parse();
    let runtime = if options.current_thread() {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
    };
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the runtime: {error}");
            std::process::exit(1);
        }
    };
    let outcome = match options.profile {
        Some(kind) => runtime
            .block_on(profile::profile(kind, &options))
            .map_err(|error| format!("error: {error}")),
        None => runtime.block_on(compare(&options)),
    };
    // The runtime goes before exiting, so that its tasks do not outlive the lab.
    drop(runtime);
    if let Err(message) = outcome {
        eprintln!("{message}");
        std::process::exit(1);
    }
}

/// Runs the comparison on every shape asked for and prints the report; on failure, the
/// message to print.
async fn compare(options: &Options) -> Result<(), String> {
    let started = Instant::now();
    let mut report = String::new();
    let _ = writeln!(
        report,
        "quorumlock (and, on the sentinel shape, quorumlock-acked) vs rslock 0.10 vs the floor vs etcd (etcd-client 0.21) — {} rounds; per round: {} sequential acquires, {:.1} s at concurrency 1, \
         {:.1} s at concurrency 64, {:.1} s contention; {} runtime, {} worker threads on {} cores",
        options.rounds,
        options.samples,
        options.c1.as_secs_f64(),
        options.c64.as_secs_f64(),
        options.contend.as_secs_f64(),
        if options.current_thread() {
            "current-thread"
        } else {
            "multi-thread"
        },
        tokio::runtime::Handle::current().metrics().num_workers(),
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0)
    );
    for shape in options.shapes() {
        let table = comparison::run_shape(shape, options)
            .await
            .map_err(|error| format!("error ({}): {error}", shape.tag()))?;
        report.push_str(&table);
    }
    let _ = writeln!(
        report,
        "\ntotal run time {:.0} s",
        started.elapsed().as_secs_f64()
    );
    println!("{report}");
    Ok(())
}
