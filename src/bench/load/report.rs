//! What the load measured, and the report made of it.

use serde::Serialize;

use super::{LoadOptions, Measured};

/// Latency percentiles, in microseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Percentiles {
    pub count: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
}

/// What the server did under the load.
#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    pub sessions: usize,
    pub churn_sessions: usize,
    /// Agents without sessions, renewing with `extend_lock`.
    pub stateless: bool,
    pub ttl_ms: u64,
    pub hold_seconds: f64,
    /// How long opening the sessions and taking their leases took.
    pub open_seconds: f64,
    /// The open-file limit this process ran with (the server inherits it).
    pub open_files_limit: libc::rlim_t,
    /// Renewals the server made from the first lease to the end.
    pub renewed: u64,
    /// Renewals that finished more than ttl/3 after they were due.
    pub late: u64,
    /// Renewals that failed and were retried.
    pub failed: u64,
    /// Keepalive leases the server gave up as lost.
    pub lost: u64,
    /// Renewals one per ttl/3 per lease would make over the hold.
    pub expected_in_hold: u64,
    /// Renewals made during the hold.
    pub renewed_in_hold: u64,
    /// Share of renewals that were neither late nor failed, in percent.
    pub on_time_percent: f64,
    /// Holding sessions whose lease was still renewing at the end (asked with `lock_status`).
    pub still_renewing: usize,
    /// Server resident memory before the holders opened, once they held, and at the end.
    pub rss_before_kb: u64,
    pub rss_held_kb: u64,
    pub rss_end_kb: u64,
    /// (end − before) / sessions.
    pub rss_per_session_bytes: u64,
    /// Server CPU in a quiet stretch with renewals alone, and per renewal in it.
    pub quiet_seconds: f64,
    pub quiet_cpu_seconds: f64,
    pub quiet_renewals: u64,
    pub cpu_us_per_renewal: f64,
    /// The masters' CPU per renewal in the quiet stretch, when their PIDs are known.
    pub masters_cpu_us_per_renewal: Option<f64>,
    /// Server CPU over the hold (renewals and churn).
    pub hold_cpu_seconds: f64,
    /// `acquire_lock` from the churn sessions during the hold.
    pub acquire: Percentiles,
    /// Churn `acquire_lock` calls that did not grant the lock.
    pub acquire_failures: u64,
}

impl LoadReport {
    /// The report of what `measured` found in a run of `options`.
    pub(super) fn new(options: &LoadOptions, measured: Measured) -> LoadReport {
        let Measured {
            ttl_ms,
            open_files_limit,
            open_seconds,
            rss_kb: [rss_before_kb, rss_held_kb, rss_end_kb],
            quiet: [quiet_start, hold_start],
            hold_end,
            renewals_end: end,
            still_renewing,
            churned,
        } = measured;
        let hold_seconds = (hold_end.at - hold_start.at).as_secs_f64();
        let interval_ms = (ttl_ms / 3).max(1);
        let attempts = end.renewed + end.failed;
        let quiet_renewals = hold_start.renewals.renewed - quiet_start.renewals.renewed;
        let per_renewal = |cpu: f64| {
            if quiet_renewals == 0 {
                0.0
            } else {
                cpu * 1e6 / quiet_renewals as f64
            }
        };
        LoadReport {
            sessions: options.sessions,
            churn_sessions: options.churn_sessions,
            stateless: options.stateless,
            ttl_ms,
            hold_seconds,
            open_seconds,
            open_files_limit,
            renewed: end.renewed,
            late: end.late,
            failed: end.failed,
            lost: end.lost,
            expected_in_hold: options.sessions as u64 * (hold_seconds * 1000.0) as u64
                / interval_ms,
            renewed_in_hold: end.renewed - hold_start.renewals.renewed,
            on_time_percent: if attempts == 0 {
                100.0
            } else {
                end.renewed.saturating_sub(end.late) as f64 * 100.0 / attempts as f64
            },
            still_renewing,
            rss_before_kb,
            rss_held_kb,
            rss_end_kb,
            rss_per_session_bytes: rss_end_kb.saturating_sub(rss_before_kb) * 1024
                / options.sessions.max(1) as u64,
            quiet_seconds: (hold_start.at - quiet_start.at).as_secs_f64(),
            quiet_cpu_seconds: hold_start.server - quiet_start.server,
            quiet_renewals,
            cpu_us_per_renewal: per_renewal(hold_start.server - quiet_start.server),
            masters_cpu_us_per_renewal: quiet_start
                .masters
                .zip(hold_start.masters)
                .map(|(start, end)| per_renewal(end - start)),
            hold_cpu_seconds: hold_end.server - hold_start.server,
            acquire: churned.acquire,
            acquire_failures: churned.failures,
        }
    }
}

/// The report as text, one figure a line.
pub fn summary(report: &LoadReport) -> String {
    load_rows(report)
        .into_iter()
        .chain(cost_rows(report))
        .map(|(label, value)| format!("{label:<36} {value}\n"))
        .collect()
}

/// The rows of what ran, and how the leases fared.
fn load_rows(report: &LoadReport) -> Vec<(&'static str, String)> {
    let agents = if report.stateless {
        "stateless agents renewing leases"
    } else {
        "sessions holding keepalive leases"
    };
    vec![
        (
            agents,
            format!(
                "{} (ttl {} ms, open-file limit {})",
                report.sessions, report.ttl_ms, report.open_files_limit
            ),
        ),
        (
            "sessions acquiring and releasing",
            report.churn_sessions.to_string(),
        ),
        (
            "opening sessions and leases took",
            format!("{:.1} s", report.open_seconds),
        ),
        ("held for", format!("{:.1} s", report.hold_seconds)),
        (
            "renewals",
            format!(
                "{} in all, {} in the hold (one per ttl/3 would be {})",
                report.renewed, report.renewed_in_hold, report.expected_in_hold
            ),
        ),
        (
            "renewals on time",
            format!(
                "{:.3} % ({} late, {} failed and retried)",
                report.on_time_percent, report.late, report.failed
            ),
        ),
        (
            "leases lost",
            format!(
                "{} ({} of {} still renewing at the end)",
                report.lost, report.still_renewing, report.sessions
            ),
        ),
    ]
}

/// The rows of what the load cost: memory, CPU, and `acquire_lock` latency beside it.
fn cost_rows(report: &LoadReport) -> Vec<(&'static str, String)> {
    let ms = |us: u64| us as f64 / 1000.0;
    vec![
        (
            "server RSS",
            format!(
                "{} kB before, {} kB held, {} kB at the end",
                report.rss_before_kb, report.rss_held_kb, report.rss_end_kb
            ),
        ),
        (
            "server RSS per session",
            format!("{:.1} KB", report.rss_per_session_bytes as f64 / 1024.0),
        ),
        (
            "server CPU per renewal (quiet)",
            format!(
                "{:.1} µs ({:.2} CPU s for {} renewals in {:.0} s)",
                report.cpu_us_per_renewal,
                report.quiet_cpu_seconds,
                report.quiet_renewals,
                report.quiet_seconds
            ),
        ),
        (
            "masters' CPU per renewal (quiet)",
            report.masters_cpu_us_per_renewal.map_or_else(
                || "not measured: no lab in --lab-dir".to_string(),
                |us| format!("{us:.1} µs, the masters together"),
            ),
        ),
        (
            "server CPU over the hold",
            format!("{:.1} s", report.hold_cpu_seconds),
        ),
        (
            "acquire_lock under the background",
            format!(
                "p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({} calls, {} not granted)",
                ms(report.acquire.p50_us),
                ms(report.acquire.p99_us),
                ms(report.acquire.max_us),
                report.acquire.count,
                report.acquire_failures
            ),
        ),
    ]
}
