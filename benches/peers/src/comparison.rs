//! The comparison run: per lab shape, every library through every workload, round by round,
//! each library taking every place in the order in turn, and the figures gathered for the
//! table; then, in the product's shape, the failover phase of quorumlock (in both modes) and
//! etcd.

use std::time::Instant;

use crate::BoxError;
use crate::lab::{ConnectedLab, LabPids, warm_up};
use crate::libraries::{Library, LibraryKind};
use crate::options::{Options, Shape};
use crate::report::{self, FailedCalls, FailoverResults, Figures, Results};
use crate::workloads::{self, Failures};

/// Runs every round on a fresh lab of `shape` and returns its table.
pub async fn run_shape(shape: Shape, options: &Options) -> Result<String, BoxError> {
    eprintln!("\n== {} ==", shape.describe());
    let started = Instant::now();
    let mut lab = ConnectedLab::start(shape).await?;
    eprintln!(
        "lab up in {:.1} s; warming up",
        started.elapsed().as_secs_f64()
    );
    let run = format!("peers:{}:{}", shape.tag(), std::process::id());
    for library in lab.libraries() {
        warm_up(library, &format!("{run}:{}:warm", library.kind().name())).await;
    }
    let mut failed = FailedCalls::new();
    let mut results = rounds(&lab, options, &run, &mut failed).await;
    // Failover only means something where a group has a replica to promote.
    let mut failovers = FailoverResults::new();
    if results.is_ok()
        && shape == Shape::Sentinel
        && !options.no_failover
        && let Err(error) = failover(&mut lab, options, &run, &mut failovers).await
    {
        results = Err(error);
    }
    // The lab is stopped whether or not the rounds went through.
    lab.stop().await;
    let results = results?;
    eprintln!(
        "{} done in {:.0} s",
        shape.tag(),
        started.elapsed().as_secs_f64()
    );
    let mut table = report::table(shape, options.rounds, &results);
    table.push_str(&report::acknowledged_cost(shape, &results));
    table.push_str(&report::failed_calls(&failed));
    table.push_str(&report::failover_table(options, &failovers));
    Ok(table)
}

async fn rounds(
    lab: &ConnectedLab,
    options: &Options,
    run: &str,
    failed: &mut FailedCalls,
) -> Result<Results, BoxError> {
    let mut results = Results::new();
    for r in 0..options.rounds {
        eprintln!("round {}/{}", r + 1, options.rounds);
        // Each library takes every place in the order in turn, so none always runs on a
        // warmer or colder machine.
        let mut order = lab.libraries();
        let len = order.len();
        order.rotate_left(r % len);
        for library in order {
            let prefix = format!("{run}:{}:{r}", library.kind().name());
            let pids = lab.pids_of(library.kind());
            let (figures, failures) = round(library, options, &prefix, pids).await?;
            results.entry(library.kind()).or_default().push(figures);
            failed.entry(library.kind()).or_default().merge(failures);
        }
    }
    Ok(results)
}

/// One library's round: the three workloads, one after the other; its figures and the calls
/// that failed in phases 1-2.
async fn round(
    library: &Library,
    options: &Options,
    prefix: &str,
    pids: &LabPids,
) -> Result<(Figures, Failures), BoxError> {
    let name = library.kind().name();
    eprint!("  {name}: sequential");
    let seq =
        workloads::sequential(library, &format!("{prefix}:seq"), options.samples, pids).await?;
    eprint!(", c1");
    let c1 = workloads::cycles(library, &format!("{prefix}:c1"), 1, options.c1, pids).await;
    eprint!(", c64");
    let c64 = workloads::cycles(library, &format!("{prefix}:c64"), 64, options.c64, pids).await;
    eprint!(", contention");
    let c = workloads::contend(library, &format!("{prefix}:contended"), options.contend).await;
    eprintln!(
        " — p50 {:.0} µs, c64 {:.0}/s, contended {:.1}/s ({} holds, {} overlaps)",
        seq.p50_us, c64.per_sec, c.per_sec, c.acquisitions, c.overlaps
    );
    let cpu = c64.cpu;
    let errors = (seq.errors.count + c1.errors.count + c64.errors.count) as f64;
    let figures = Figures::from([
        ("acq_p50", seq.p50_us),
        ("acq_p99", seq.p99_us),
        ("seq_cpu_client", seq.cpu.client_us),
        ("seq_cpu_masters", seq.cpu.masters_us),
        ("c1", c1.per_sec),
        ("c64", c64.per_sec),
        ("cont", c.per_sec),
        ("cont_wait", c.max_wait_ms),
        ("cont_attempts", c.attempts),
        ("overlaps", c.overlaps as f64),
        ("fence_regr", c.fencing_regressions as f64),
        ("errors", errors),
        ("cpu_client", cpu.client_us),
        ("cpu_masters", cpu.masters_us),
        ("cpu_others", cpu.others_us),
        ("client_util", cpu.client_util),
        ("vcsw", cpu.voluntary_switches),
    ]);
    let mut failures = seq.errors;
    failures.merge(c1.errors);
    failures.merge(c64.errors);
    Ok((figures, failures))
}

/// quorumlock with group 0's master killed, then etcd with its leader killed, then (in
/// acknowledged mode, once group 0 has its replica again) quorumlock with group 1's master
/// killed; each kill a third of the way into a phase of lock+release cycles.
async fn failover(
    lab: &mut ConnectedLab,
    options: &Options,
    run: &str,
    results: &mut FailoverResults,
) -> Result<(), BoxError> {
    let phase = options.failover;
    let kill_at = phase / 3;
    eprint!("failover: quorumlock (killing group 0's master)");
    let library = lab.quorum.clone();
    let running = workloads::start_failover(&library, &format!("{run}:failover:q"), phase);
    tokio::time::sleep(kill_at).await;
    lab.kill_master(0).await?;
    let quorum = running.finish().await;
    eprint!(
        " — longest gap {:.0} ms, {} failed",
        quorum.longest_gap_ms, quorum.failed.count
    );
    results.insert(LibraryKind::Quorum, quorum);
    eprint!("; etcd (killing the leader)");
    let library = lab.etcd.clone();
    let running = workloads::start_failover(&library, &format!("{run}:failover:e"), phase);
    tokio::time::sleep(kill_at).await;
    let killed = lab.etcd_cluster.kill_leader().await?;
    let etcd = running.finish().await;
    eprintln!(
        " ({killed}) — longest gap {:.0} ms, {} failed",
        etcd.longest_gap_ms, etcd.failed.count
    );
    results.insert(LibraryKind::Etcd, etcd);
    let Some(library) = lab.quorum_acked.clone() else {
        return Ok(());
    };
    // Group 0 lost its replica with the first kill: in acknowledged mode it does not vote
    // until the old master is back as its replica, so this phase starts with all five.
    let back = lab.rejoin_acknowledged(0).await?;
    eprint!(
        "failover: quorumlock-acked (group 0 voting again {:.1} s after its restart; killing group 1's master)",
        back.as_secs_f64()
    );
    let running = workloads::start_failover(&library, &format!("{run}:failover:qa"), phase);
    tokio::time::sleep(kill_at).await;
    lab.kill_master(1).await?;
    let acked = running.finish().await;
    eprintln!(
        " — longest gap {:.0} ms, {} failed",
        acked.longest_gap_ms, acked.failed.count
    );
    results.insert(LibraryKind::QuorumAcked, acked);
    Ok(())
}
