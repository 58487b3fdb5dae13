//! The profile run (`--profile`): one library's concurrency-64 phase alone, with the PIDs
//! printed first so that `perf` can be pointed at the client and the lab.

use crate::BoxError;
use crate::lab::{ConnectedLab, warm_up};
use crate::libraries::LibraryKind;
use crate::options::Options;
use crate::workloads;

pub async fn profile(kind: LibraryKind, options: &Options) -> Result<(), BoxError> {
    let shape = options.profile_shape();
    let lab = ConnectedLab::start(shape).await?;
    let Some(library) = lab.library(kind) else {
        lab.stop().await;
        return Err(format!(
            "{} runs only on the sentinel shape: its masters need replicas",
            kind.name()
        )
        .into());
    };
    let pids = lab.pids_of(kind);
    let run = format!("peers:profile:{}", std::process::id());
    warm_up(library, &run).await;
    eprintln!(
        "profile: {} on {}; client PID {}, servers {:?}, replicas {:?}, sentinels {:?}",
        kind.name(),
        shape.describe(),
        std::process::id(),
        pids.masters,
        pids.replicas,
        pids.sentinels
    );
    let phase = workloads::cycles(
        library,
        &format!("{run}:c64"),
        64,
        options.profile_secs,
        pids,
    )
    .await;
    let cpu = phase.cpu;
    println!(
        "{}: {:.0} cycles/s at concurrency 64, {} errors; per cycle: client {:.1} µs CPU, servers {:.1} µs, \
         replicas+Sentinels {:.1} µs; client {:.2} cores; {:.2} voluntary + {:.2} involuntary context switches",
        kind.name(),
        phase.per_sec,
        phase.errors.count,
        cpu.client_us,
        cpu.masters_us,
        cpu.others_us,
        cpu.client_util,
        cpu.voluntary_switches,
        cpu.involuntary_switches
    );
    for message in &phase.errors.messages {
        println!("  failed: {message}");
    }
    lab.stop().await;
    Ok(())
}
