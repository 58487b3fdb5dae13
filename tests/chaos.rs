//! The chaos suite, bounded for CI: workers contend while masters are killed, frozen,
//! restarted, partitioned and slowed, clocks drift and jump, workers stall and run mixed
//! configs; the run must end with no violation. Longer runs:
//! `quorumlock chaos --duration 600 --faults kill,freeze,restart,pause,partition,latency,clock --mixed-configs`.

mod common;

use std::time::Duration;

use common::{fixture, sentinel_lab};
use quorumlock::chaos::{ChaosOptions, ChaosReport, Fault, FencedStore, lab_spec, run};
use quorumlock::lab::LabSpec;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_holds_while_masters_die() {
    let options = ChaosOptions {
        duration: Duration::from_secs(60),
        ..ChaosOptions::default()
    };
    let mut fx = fixture(|spec| lab_spec(spec, &options), |topology| topology).await;
    let report = run(&mut fx.lab, &options).await.expect("chaos run");
    assert_safe_and_busy(&report, 2000, 0.99);
}

/// A run with no violation that also did enough to mean something: `acquisitions` at least,
/// ten faults, paused holders whose late writes were rejected, and `success_rate` of the
/// acquires within their wait.
fn assert_safe_and_busy(report: &ChaosReport, acquisitions: u64, success_rate: f64) {
    eprintln!("{}", report.table());
    assert!(report.is_safe(), "{}", report.table());
    assert!(
        report.acquisitions >= acquisitions,
        "too few acquisitions to mean much: {}",
        report.table()
    );
    assert!(
        report.faults_injected.total() >= 10,
        "too few faults: {}",
        report.table()
    );
    assert!(
        report.pauses > 0 && report.stale_writes_rejected > 0,
        "{}",
        report.table()
    );
    assert!(report.success_rate >= success_rate, "{}", report.table());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_holds_while_partitions_split_brains_links_slow_and_clocks_drift() {
    let options = ChaosOptions {
        duration: Duration::from_secs(60),
        faults: vec![
            Fault::Partition,
            Fault::Latency,
            Fault::Clock,
            Fault::Kill,
            Fault::Pause,
        ],
        mixed_configs: true,
        ..ChaosOptions::default()
    };
    let mut fx = fixture(
        |spec| {
            lab_spec(
                LabSpec {
                    binary: Some(env!("CARGO_BIN_EXE_quorumlock").into()),
                    ..spec
                },
                &options,
            )
        },
        |topology| topology,
    )
    .await;
    let report = run(&mut fx.lab, &options).await.expect("chaos run");
    assert_eq!(report.stale_writes_accepted, 0, "{}", report.table());
    for kind in ["partition", "latency"] {
        assert!(
            report
                .per_fault
                .iter()
                .any(|f| f.fault == kind && f.injected > 0),
            "no {kind} fault in the run: {}",
            report.table()
        );
    }
    // Partitions and clock faults keep a group out for longer: fewer acquisitions, and a
    // waiter may give up more often.
    assert_safe_and_busy(&report, 1000, 0.95);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holders_late_write_is_rejected() {
    let fx = sentinel_lab().await;
    let store = FencedStore::new();
    let ttl = Duration::from_millis(300);
    let paused = fx
        .locks
        .acquire("fenced-resource")
        .ttl(ttl)
        .await
        .expect("first holder");
    assert!(store.write("fenced-resource", paused.fencing_token()));

    // The first holder stalls (a GC pause) past its validity; the lock expires and moves on.
    let next = fx
        .locks
        .acquire("fenced-resource")
        .ttl(Duration::from_secs(5))
        .wait(Duration::from_secs(3))
        .await
        .expect("second holder after expiry");
    assert_eq!(
        paused.validity(),
        Duration::ZERO,
        "the first lease must have run out"
    );
    assert!(store.write("fenced-resource", next.fencing_token()));

    // It wakes up and writes as if it still held the lock: the store refuses.
    assert!(!store.write("fenced-resource", paused.fencing_token()));
    assert_eq!(store.rejected(), 1);
    next.release().await.expect("release");
    let _ = paused.detach();
}
