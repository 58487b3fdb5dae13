//! The chaos suite, bounded for CI: workers contend while masters are killed, frozen and
//! restarted and workers stall; the run must end with no violation. Longer runs:
//! `quorumlock chaos --duration 600`.

mod common;

use std::time::Duration;

use common::{fixture, sentinel_lab};
use quorumlock::chaos::{ChaosOptions, FencedStore, lab_spec, run};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_holds_while_masters_die() {
    let options = ChaosOptions {
        duration: Duration::from_secs(60),
        ..ChaosOptions::default()
    };
    let mut fx = fixture(|spec| lab_spec(spec, &options), |topology| topology).await;
    let report = run(&mut fx.lab, &options).await.expect("chaos run");
    eprintln!("{}", report.table());
    assert!(report.is_safe(), "{}", report.table());
    assert!(
        report.acquisitions >= 2000,
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
    assert!(report.success_rate >= 0.99, "{}", report.table());
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
