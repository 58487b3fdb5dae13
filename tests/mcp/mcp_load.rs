//! The agent-swarm load command, small: `quorumlock serve --bench-sessions` against a lab of
//! real redis-server groups, with real MCP clients over streamable HTTP. It checks that the
//! command runs and that every lease is kept; how fast is for the benchmark itself.

#![cfg(feature = "mcp-bench")]

use crate::common;

use std::time::Duration;

use common::plain_lab;

const BIN: &str = env!("CARGO_BIN_EXE_quorumlock");

/// The value after `label` on its line of the report, up to the first space.
fn figure<'a>(report: &'a str, label: &str) -> &'a str {
    report
        .lines()
        .find_map(|line| line.strip_prefix(label))
        .map(str::trim_start)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no `{label}` line in:\n{report}"))
}

/// The run's shape: its leases' TTL and how long they are held.
struct Shape {
    ttl_ms: &'static str,
    seconds: &'static str,
}

/// Runs `serve --bench-sessions 50` in `shape` with `extra` flags; its report.
async fn run_load(shape: Shape, extra: &[&str]) -> String {
    let fx = plain_lab().await;
    let output = tokio::time::timeout(
        Duration::from_secs(180),
        tokio::process::Command::new(BIN)
            .arg("--config")
            .arg(fx.lab.config_path())
            .args([
                "serve",
                "--min-ttl-ms",
                "600",
                "--bench-sessions",
                "50",
                "--bench-seconds",
                shape.seconds,
                "--bench-ttl-ms",
                shape.ttl_ms,
                "--bench-churn",
                "4",
            ])
            .args(extra)
            .env("RUST_LOG", "warn")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the load command finishes")
    .expect("the load command starts");
    let report = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{report}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    report
}

/// The checks both kinds of agent pass: every lease kept, renewals made, every churn granted.
fn assert_every_lease_kept(report: &str) {
    assert_eq!(figure(report, "leases lost"), "0", "{report}");
    assert!(
        report.contains("(50 of 50 still renewing at the end)"),
        "{report}"
    );
    // Held for several TTLs: still held on a majority means every lease was renewed.
    let renewals: u64 = figure(report, "renewals").parse().expect("a count");
    assert!(renewals > 0, "{report}");
    let acquires = report
        .lines()
        .find(|line| line.starts_with("acquire_lock under the background"))
        .expect("an acquire_lock line");
    assert!(acquires.contains(", 0 not granted)"), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_sessions_keep_keepalive_leases_beside_churn() {
    // Renewed inside the server: five TTLs in 3 s.
    let shape = Shape {
        ttl_ms: "600",
        seconds: "3",
    };
    let report = run_load(shape, &[]).await;
    assert_eq!(figure(&report, "sessions holding keepalive leases"), "50");
    assert_every_lease_kept(&report);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_stateless_agents_keep_leases_by_extend_lock() {
    // Each renewal is a whole MCP call from this debug build's client, so a longer TTL: three
    // in 6 s.
    let shape = Shape {
        ttl_ms: "2000",
        seconds: "6",
    };
    let report = run_load(shape, &["--bench-stateless"]).await;
    assert_eq!(figure(&report, "stateless agents renewing leases"), "50");
    assert_every_lease_kept(&report);
}
