//! Criterion benchmarks of the engine against a local lab (five Sentinel groups on loopback):
//! acquire latency, and a full acquire+release cycle. `quorumlock bench` reports the
//! concurrent and contended figures.

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use quorumlock::Locks;
use quorumlock::lab::{Lab, LabSpec};

fn engine(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let lab = runtime
        .block_on(Lab::start(LabSpec::new(dir.path())))
        .expect("lab starts (is redis-server installed?)");
    let locks = runtime
        .block_on(Locks::connect(lab.topology()))
        .expect("connect");

    let mut group = c.benchmark_group("quorum5");
    group.measurement_time(Duration::from_secs(5));
    group.bench_function("acquire", |b| {
        b.to_async(&runtime).iter_custom(|iterations| {
            let locks = locks.clone();
            async move {
                let mut spent = Duration::ZERO;
                for _ in 0..iterations {
                    let started = Instant::now();
                    let lease = locks.acquire("bench:acquire").await.expect("acquire");
                    spent += started.elapsed();
                    lease.release().await.expect("release");
                }
                spent
            }
        })
    });
    group.bench_function("acquire_release", |b| {
        b.to_async(&runtime).iter(|| async {
            let lease = locks.acquire("bench:cycle").await.expect("acquire");
            lease.release().await.expect("release");
        })
    });
    group.finish();
    runtime.block_on(locks.close());
    runtime.block_on(lab.stop()).expect("lab stops");
}

criterion_group!(benches, engine);
criterion_main!(benches);
