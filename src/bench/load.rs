//! The agent-swarm load: many streamable-HTTP sessions, each holding a keepalive lease at the
//! server's minimum TTL, while a few more sessions acquire and release, all from real MCP
//! clients in this one process against a `quorumlock serve --http` child.
//!
//! `quorumlock serve --bench-sessions N --bench-seconds S` runs it against the configured
//! topology and prints what the server did: renewals on time, leases lost, its memory growth
//! per session, CPU per renewal, and `acquire_lock` latency under that background. The child
//! reports its renewal counts on stderr (`serve --report-renewals`), so the figures are the
//! server's own, not estimates.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::http::{HeaderValue, header};
use futures::StreamExt;
use hdrhistogram::Histogram;
use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::RenewalCounts;
use crate::mcp::{BearerToken, LISTENING_PREFIX, RENEWALS_PREFIX};

/// Sessions that acquire and release under the keepalive background.
pub const DEFAULT_CHURN_SESSIONS: usize = 64;
/// Sessions opened at once while the holders connect.
const OPEN_CONCURRENCY: usize = 32;
/// Holders asked per second at the end whether their lease still renews.
const CHECKS_PER_SECOND: u32 = 500;

/// What to run, and with which binary and topology file.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// The `quorumlock` binary to start as the server.
    pub binary: PathBuf,
    /// The topology file the server reads.
    pub config: PathBuf,
    /// Sessions that each hold one keepalive lease.
    pub sessions: usize,
    /// How long the leases are held while the churn sessions run.
    pub hold: Duration,
    /// Sessions that acquire and release (no keepalive) during the hold.
    pub churn_sessions: usize,
    /// The leases' TTL.
    pub ttl: Duration,
    /// Serve with `--stateless`: agents take plain leases and renew them with `extend_lock`.
    pub stateless: bool,
    /// The masters' PIDs, for their CPU per renewal; empty when unknown.
    pub master_pids: Vec<u32>,
}

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

/// Why the load could not run.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot start the server {binary}: {source}")]
    Spawn {
        binary: PathBuf,
        source: std::io::Error,
    },
    #[error("the server did not come up: {0}")]
    Start(String),
    #[error(
        "session {index} could not open or take its keepalive lease: {message} (check the open-file limit, `ulimit -n`, and the server's stderr above)"
    )]
    Session { index: usize, message: String },
    #[error(
        "{sessions} sessions need about {needed} open files, in this process and again in the server (one per session's event stream, plus the churn sessions' connections and Redis'), but the open-file limit is {limit} and could not be raised{why}. Raise the hard limit as root before running (`ulimit -Hn {needed}` in the shell, `prlimit --nofile={needed}`, a container's `--ulimit nofile={needed}`, systemd's LimitNOFILE; the kernel allows up to /proc/sys/fs/nr_open), or run at most about {fits} sessions"
    )]
    OpenFiles {
        sessions: usize,
        needed: u64,
        limit: u64,
        why: String,
        fits: u64,
    },
    #[error("cannot read the open-file limit (getrlimit): {0}")]
    ReadLimit(std::io::Error),
    #[error("cannot read the server's /proc entry: {0}")]
    Proc(String),
    #[error("{0}")]
    Histogram(String),
}

type Client = RunningService<RoleClient, ClientConfig>;

fn client_config() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("quorumlock-load", env!("CARGO_PKG_VERSION")),
    )
}

/// The server child, its URL and token, and its latest renewal counts.
struct Server {
    child: tokio::process::Child,
    pid: u32,
    url: String,
    token: String,
    renewals: watch::Receiver<RenewalCounts>,
}

/// Runs the load and reports what the server did.
pub async fn run(options: &LoadOptions) -> Result<LoadReport, LoadError> {
    let open_files_limit = raise_open_files(options.sessions, options.churn_sessions)?;
    let mut server = start(options).await?;
    let report = drive(options, &server, open_files_limit).await;
    stop(&mut server).await;
    report
}

/// One holding agent: its index names its resource, `lock_status` shows a keepalive lease
/// only to its session, and a stateless agent renews with its token.
struct Holder {
    index: usize,
    client: Arc<Client>,
    /// A stateless agent's lease, released at the end; `None` for a keepalive lease, which
    /// ends with its session.
    lease: Option<Lease>,
}

/// Renewal counts a stateless run keeps on the driver's side: those agents renew with
/// `extend_lock` themselves, so the server counts nothing.
#[derive(Default)]
struct AgentRenewals {
    renewed: AtomicU64,
    late: AtomicU64,
    failed: AtomicU64,
    lost: AtomicU64,
}

impl AgentRenewals {
    fn counts(&self) -> RenewalCounts {
        RenewalCounts {
            renewed: self.renewed.load(Ordering::Relaxed),
            late: self.late.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            lost: self.lost.load(Ordering::Relaxed),
        }
    }
}

/// The run's renewal counts: the server's for keepalive, the agents' own when stateless.
struct Renewals<'a> {
    server: &'a Server,
    agents: Arc<AgentRenewals>,
    stateless: bool,
}

impl Renewals<'_> {
    fn counts(&self) -> RenewalCounts {
        if self.stateless {
            self.agents.counts()
        } else {
            counts(self.server)
        }
    }
}

/// CPU time of the server and of the masters over one stretch.
struct CpuMark {
    at: Instant,
    server: f64,
    masters: Option<f64>,
    renewals: RenewalCounts,
}

impl CpuMark {
    fn take(
        server: &Server,
        masters: &[u32],
        renewals: &Renewals<'_>,
    ) -> Result<CpuMark, LoadError> {
        Ok(CpuMark {
            at: Instant::now(),
            server: cpu_seconds(server.pid)?,
            // A master that restarted mid-run has a new PID; its figure is then left out.
            masters: (!masters.is_empty())
                .then(|| {
                    masters
                        .iter()
                        .map(|&pid| cpu_seconds(pid))
                        .sum::<Result<f64, _>>()
                        .ok()
                })
                .flatten(),
            renewals: renewals.counts(),
        })
    }
}

async fn drive(
    options: &LoadOptions,
    server: &Server,
    open_files_limit: libc::rlim_t,
) -> Result<LoadReport, LoadError> {
    let ttl_ms = u64::try_from(options.ttl.as_millis()).unwrap_or(u64::MAX);
    let renewals = Renewals {
        server,
        agents: Arc::new(AgentRenewals::default()),
        stateless: options.stateless,
    };
    let churn = open_churn(options, server, ttl_ms).await?;
    let rss_before_kb = rss_kb(server.pid)?;

    let stop_renewing = CancellationToken::new();
    let opened = Instant::now();
    let holders = open_holders(options, server, ttl_ms, &renewals, &stop_renewing).await?;
    let open_seconds = opened.elapsed().as_secs_f64();
    eprintln!(
        "{} agents hold leases ({open_seconds:.1} s to open)",
        holders.len()
    );
    let rss_held_kb = rss_kb(server.pid)?;

    // A quiet stretch first: the server's CPU per renewal with nothing else to do.
    let quiet = options.hold.div_f64(5.0).clamp(
        options.ttl.min(Duration::from_secs(5)),
        Duration::from_secs(30),
    );
    let quiet_start = CpuMark::take(server, &options.master_pids, &renewals)?;
    tokio::time::sleep(quiet).await;
    let hold_start = CpuMark::take(server, &options.master_pids, &renewals)?;

    eprintln!(
        "holding for {} s while {} sessions acquire and release",
        options.hold.as_secs(),
        churn.len()
    );
    let (acquire, acquire_failures) = churn_for(options.hold, &churn, ttl_ms).await?;
    let hold_end = CpuMark::take(server, &options.master_pids, &renewals)?;
    stop_renewing.cancel();
    let rss_end_kb = rss_kb(server.pid)?;
    let renewals_end = renewals.counts();
    let still_renewing = if options.stateless {
        release_paced(&holders).await;
        holders
            .len()
            .saturating_sub(usize::try_from(renewals_end.lost).unwrap_or(usize::MAX))
    } else {
        count_still_renewing(&holders).await
    };
    for client in holders.into_iter().map(|holder| holder.client).chain(churn) {
        if let Ok(client) = Arc::try_unwrap(client) {
            let _ = client.cancel().await;
        }
    }

    let hold_seconds = (hold_end.at - hold_start.at).as_secs_f64();
    let interval_ms = (ttl_ms / 3).max(1);
    let hold_ms = (hold_seconds * 1000.0) as u64;
    let attempts = renewals_end.renewed + renewals_end.failed;
    let on_time = renewals_end.renewed.saturating_sub(renewals_end.late);
    let sessions = options.sessions.max(1) as u64;
    let quiet_renewals = hold_start.renewals.renewed - quiet_start.renewals.renewed;
    let per_renewal = |cpu: f64| {
        if quiet_renewals == 0 {
            0.0
        } else {
            cpu * 1e6 / quiet_renewals as f64
        }
    };
    Ok(LoadReport {
        sessions: options.sessions,
        churn_sessions: options.churn_sessions,
        stateless: options.stateless,
        ttl_ms,
        hold_seconds,
        open_seconds,
        open_files_limit,
        renewed: renewals_end.renewed,
        late: renewals_end.late,
        failed: renewals_end.failed,
        lost: renewals_end.lost,
        expected_in_hold: options.sessions as u64 * hold_ms / interval_ms,
        renewed_in_hold: renewals_end.renewed - hold_start.renewals.renewed,
        on_time_percent: if attempts == 0 {
            100.0
        } else {
            on_time as f64 * 100.0 / attempts as f64
        },
        still_renewing,
        rss_before_kb,
        rss_held_kb,
        rss_end_kb,
        rss_per_session_bytes: rss_end_kb.saturating_sub(rss_before_kb) * 1024 / sessions,
        quiet_seconds: quiet.as_secs_f64(),
        quiet_cpu_seconds: hold_start.server - quiet_start.server,
        quiet_renewals,
        cpu_us_per_renewal: per_renewal(hold_start.server - quiet_start.server),
        masters_cpu_us_per_renewal: quiet_start
            .masters
            .zip(hold_start.masters)
            .map(|(start, end)| per_renewal(end - start)),
        hold_cpu_seconds: hold_end.server - hold_start.server,
        acquire,
        acquire_failures,
    })
}

/// Opens the churn sessions and warms them up, so the memory baseline includes them.
async fn open_churn(
    options: &LoadOptions,
    server: &Server,
    ttl_ms: u64,
) -> Result<Vec<Arc<Client>>, LoadError> {
    let mut churn = Vec::with_capacity(options.churn_sessions);
    for index in 0..options.churn_sessions {
        let client = connect(server, Connections::KeepOpen)
            .await
            .map_err(|message| LoadError::Session {
                index: options.sessions + index,
                message,
            })?;
        for _ in 0..10 {
            let _ = acquire_release(&client, &churn_resource(index), ttl_ms).await;
        }
        churn.push(Arc::new(client));
    }
    Ok(churn)
}

/// Opens every holder and takes its lease: a keepalive lease, or a plain one that the agent
/// renews itself with `extend_lock` until `stop_renewing`.
async fn open_holders(
    options: &LoadOptions,
    server: &Server,
    ttl_ms: u64,
    renewals: &Renewals<'_>,
    stop_renewing: &CancellationToken,
) -> Result<Vec<Holder>, LoadError> {
    futures::stream::iter(0..options.sessions)
        .map(|index| async move {
            let holder = async {
                let client = Arc::new(connect(server, Connections::CloseAfterCall).await?);
                let resource = holder_resource(index);
                let arguments = serde_json::json!({
                    "resource": resource,
                    "ttl_ms": ttl_ms,
                    "keepalive": !options.stateless,
                    // Rides out a group that misses its call timeout on a busy machine.
                    "wait_ms": 10_000,
                    "owner": "quorumlock-load",
                });
                let result = call(&client, "acquire_lock", arguments).await?;
                let token = match (
                    result.get("acquired").and_then(serde_json::Value::as_bool),
                    result.get("token").and_then(serde_json::Value::as_str),
                ) {
                    (Some(true), Some(token)) => token.to_string(),
                    _ => return Err(format!("acquire_lock did not grant the lock: {result}")),
                };
                let lease = options.stateless.then(|| {
                    let lease = Lease {
                        resource,
                        token,
                        ttl_ms,
                    };
                    tokio::spawn(extend_loop(
                        Arc::clone(&client),
                        lease.clone(),
                        Arc::clone(&renewals.agents),
                        stop_renewing.clone(),
                    ));
                    lease
                });
                Ok((client, lease))
            };
            holder
                .await
                .map(|(client, lease)| Holder {
                    index,
                    client,
                    lease,
                })
                .map_err(|message| LoadError::Session { index, message })
        })
        .buffer_unordered(OPEN_CONCURRENCY)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect()
}

fn holder_resource(index: usize) -> String {
    format!("load:hold:{index}")
}

/// A stateless agent's lease, which it renews itself.
#[derive(Clone)]
struct Lease {
    resource: String,
    token: String,
    ttl_ms: u64,
}

/// Renews one stateless agent's lease every ttl/3 with `extend_lock`, as an agent without a
/// session must, until `stop` or until the lease is gone.
async fn extend_loop(
    client: Arc<Client>,
    lease: Lease,
    counts: Arc<AgentRenewals>,
    stop: CancellationToken,
) {
    let interval = Duration::from_millis((lease.ttl_ms / 3).max(1));
    let mut due = tokio::time::Instant::now() + interval;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep_until(due) => {}
        }
        let arguments = serde_json::json!({
            "resource": lease.resource,
            "token": lease.token,
            "ttl_ms": lease.ttl_ms,
        });
        match call(&client, "extend_lock", arguments).await {
            Ok(result)
                if result.get("extended").and_then(serde_json::Value::as_bool) == Some(true) =>
            {
                counts.renewed.fetch_add(1, Ordering::Relaxed);
                // Late, as the server counts a keepalive renewal: done more than ttl/3 after due.
                if due.elapsed() > interval {
                    counts.late.fetch_add(1, Ordering::Relaxed);
                }
                due += interval;
            }
            Ok(_) => {
                counts.lost.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Err(_) => {
                // Retried at once; the lease holds for two more intervals.
                counts.failed.fetch_add(1, Ordering::Relaxed);
                due = tokio::time::Instant::now() + Duration::from_millis(100);
            }
        }
    }
}

/// Runs the churn sessions for `hold`; returns the merged `acquire_lock` latencies and how
/// many calls did not grant the lock.
async fn churn_for(
    hold: Duration,
    churn: &[Arc<Client>],
    ttl_ms: u64,
) -> Result<(Percentiles, u64), LoadError> {
    let stopping = Arc::new(AtomicBool::new(false));
    let mut churners = Vec::with_capacity(churn.len());
    for (index, client) in churn.iter().enumerate() {
        let stopping = Arc::clone(&stopping);
        let result = ChurnResult {
            latencies: histogram()?,
            failures: 0,
        };
        churners.push(async move { churn_loop(client, index, ttl_ms, &stopping, result).await });
    }
    let (results, ()) = tokio::join!(futures::future::join_all(churners), async {
        tokio::time::sleep(hold).await;
        stopping.store(true, Ordering::Relaxed);
    });
    let mut acquire = histogram()?;
    let mut failures = 0;
    for result in results {
        acquire
            .add(&result.latencies)
            .map_err(|error| LoadError::Histogram(format!("cannot merge histograms: {error}")))?;
        failures += result.failures;
    }
    let percentiles = Percentiles {
        count: acquire.len(),
        p50_us: acquire.value_at_quantile(0.5),
        p99_us: acquire.value_at_quantile(0.99),
        max_us: acquire.max(),
    };
    Ok((percentiles, failures))
}

/// Releases each stateless agent's lease at a paced rate, so a run leaves no lock behind.
async fn release_paced(holders: &[Holder]) {
    let mut pace = tokio::time::interval(Duration::from_secs(1) / CHECKS_PER_SECOND);
    let mut releases = futures::stream::FuturesUnordered::new();
    for holder in holders {
        let Some(lease) = &holder.lease else { continue };
        pace.tick().await;
        releases.push(async move {
            let arguments = serde_json::json!({"resource": lease.resource, "token": lease.token});
            let _ = call(&holder.client, "release_lock", arguments).await;
        });
        while let Some(Some(())) = futures::FutureExt::now_or_never(releases.next()) {}
    }
    while releases.next().await.is_some() {}
}

/// Asks each holder's session, at a paced rate, whether its keepalive lease still renews.
/// The pace keeps the check from loading the server it measures.
async fn count_still_renewing(holders: &[Holder]) -> usize {
    let mut pace = tokio::time::interval(Duration::from_secs(1) / CHECKS_PER_SECOND);
    let mut checks = futures::stream::FuturesUnordered::new();
    let mut renewing = 0;
    for holder in holders {
        pace.tick().await;
        checks.push(async move {
            let arguments = serde_json::json!({"resource": holder_resource(holder.index)});
            call(&holder.client, "lock_status", arguments)
                .await
                .is_ok_and(|status| {
                    status
                        .pointer("/keepalive/state")
                        .and_then(serde_json::Value::as_str)
                        == Some("renewing")
                        && status.get("held").and_then(serde_json::Value::as_bool) == Some(true)
                })
        });
        // Takes the answers already in, so the set stays small.
        while let Some(Some(done)) = futures::FutureExt::now_or_never(checks.next()) {
            renewing += usize::from(done);
        }
    }
    while let Some(done) = checks.next().await {
        renewing += usize::from(done);
    }
    renewing
}

/// One churn session's `acquire_lock` latencies and failures.
struct ChurnResult {
    latencies: Histogram<u64>,
    failures: u64,
}

/// Microseconds up to ten minutes, three significant digits.
fn histogram() -> Result<Histogram<u64>, LoadError> {
    Histogram::new_with_bounds(1, 600_000_000, 3)
        .map_err(|error| LoadError::Histogram(format!("cannot create a histogram: {error}")))
}

async fn churn_loop(
    client: &Client,
    index: usize,
    ttl_ms: u64,
    stopping: &AtomicBool,
    mut result: ChurnResult,
) -> ChurnResult {
    let resource = churn_resource(index);
    while !stopping.load(Ordering::Relaxed) {
        match acquire_release(client, &resource, ttl_ms).await {
            Some(elapsed) => {
                let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
                result.latencies.saturating_record(micros);
            }
            None => {
                result.failures += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    result
}

fn churn_resource(index: usize) -> String {
    format!("load:churn:{index}")
}

/// One `acquire_lock` then `release_lock`; the acquire's latency when it granted the lock.
async fn acquire_release(client: &Client, resource: &str, ttl_ms: u64) -> Option<Duration> {
    let started = Instant::now();
    let arguments =
        serde_json::json!({"resource": resource, "ttl_ms": ttl_ms, "owner": "quorumlock-load"});
    let acquired = call(client, "acquire_lock", arguments).await.ok()?;
    let elapsed = started.elapsed();
    let token = acquired.get("token").and_then(serde_json::Value::as_str)?;
    let arguments = serde_json::json!({"resource": resource, "token": token});
    call(client, "release_lock", arguments).await.ok()?;
    Some(elapsed)
}

/// How a session's client uses HTTP connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Connections {
    /// Keeps its request connection open between calls (the churn sessions, whose latency
    /// counts).
    KeepOpen,
    /// Closes its request connection after each call and keeps only its event stream open.
    /// An idle client's pool drops that connection after 90 s anyway; closing it at once lets
    /// both processes fit one open file per holder under a hard limit they cannot raise.
    CloseAfterCall,
}

async fn connect(server: &Server, connections: Connections) -> Result<Client, String> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(server.url.as_str())
        .auth_header(server.token.clone());
    if connections == Connections::CloseAfterCall {
        config = config.custom_headers(HashMap::from([(
            header::CONNECTION,
            HeaderValue::from_static("close"),
        )]));
    }
    let transport = StreamableHttpClientTransport::from_config(config);
    client_config()
        .serve(transport)
        .await
        .map_err(|error| error.to_string())
}

async fn call(
    client: &Client,
    tool: &'static str,
    arguments: serde_json::Value,
) -> Result<serde_json::Value, String> {
    let serde_json::Value::Object(arguments) = arguments else {
        return Err("arguments must be an object".into());
    };
    let result = client
        .call_tool(CallToolRequestParams::new(tool).with_arguments(arguments))
        .await
        .map_err(|error| format!("{tool}: {error}"))?;
    match (result.is_error, result.structured_content) {
        (Some(true), _) | (_, None) => {
            Err(format!("{tool} returned an error: {:?}", result.content))
        }
        (_, Some(structured)) => Ok(structured),
    }
}

/// Starts `serve --http` with room for every session and lease, and waits until it listens.
async fn start(options: &LoadOptions) -> Result<Server, LoadError> {
    let token = uuid::Uuid::new_v4().simple().to_string();
    let sessions = options.sessions + options.churn_sessions + 16;
    let idle = options.hold.as_secs() * 2 + 600;
    let mut child = tokio::process::Command::new(&options.binary)
        .arg("--config")
        .arg(&options.config)
        .args(["serve", "--http", "127.0.0.1:0", "--report-renewals"])
        .arg(format!("--max-sessions={sessions}"))
        .arg(format!("--max-keepalive={sessions}"))
        .args(if options.stateless {
            vec!["--stateless".to_string()]
        } else {
            vec![format!("--session-idle-secs={idle}")]
        })
        .arg(format!(
            "--min-ttl-ms={}",
            options.ttl.min(Duration::from_secs(5)).as_millis()
        ))
        .env("RUST_LOG", "warn")
        .env(BearerToken::ENV, &token)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| LoadError::Spawn {
            binary: options.binary.clone(),
            source,
        })?;
    let pid = child
        .id()
        .ok_or_else(|| LoadError::Start("the server exited at once".into()))?;
    let stderr = child
        .stderr
        .take()
        .ok_or_else(|| LoadError::Start("no stderr pipe".into()))?;
    let mut lines = BufReader::new(stderr).lines();
    let url = loop {
        match tokio::time::timeout(Duration::from_secs(60), lines.next_line()).await {
            Ok(Ok(Some(line))) => {
                if let Some(url) = line.strip_prefix(LISTENING_PREFIX) {
                    break url.trim().to_string();
                }
                eprintln!("{line}");
            }
            Ok(Ok(None)) => {
                return Err(LoadError::Start(
                    "the server exited before listening".into(),
                ));
            }
            Ok(Err(error)) => return Err(LoadError::Start(error.to_string())),
            Err(_) => return Err(LoadError::Start("no listening line within 60 s".into())),
        }
    };
    let (report, renewals) = watch::channel(RenewalCounts::default());
    // Keeps draining stderr so the server never blocks on a full pipe, and keeps the latest
    // renewal counts.
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            match line.strip_prefix(RENEWALS_PREFIX).and_then(parse_counts) {
                Some(counts) => {
                    report.send_replace(counts);
                }
                None => eprintln!("{line}"),
            }
        }
    });
    Ok(Server {
        child,
        pid,
        url,
        token,
        renewals,
    })
}

/// The latest renewal counts the server reported (it reports every 100 ms).
fn counts(server: &Server) -> RenewalCounts {
    *server.renewals.borrow()
}

/// Parses `renewed late failed lost`.
fn parse_counts(text: &str) -> Option<RenewalCounts> {
    let mut fields = text.split_whitespace().map(str::parse::<u64>);
    let mut next = || fields.next().and_then(Result::ok);
    Some(RenewalCounts {
        renewed: next()?,
        late: next()?,
        failed: next()?,
        lost: next()?,
    })
}

/// Stops the server with SIGTERM (it releases every lease), then by PID if it lingers.
async fn stop(server: &mut Server) {
    if let Ok(pid) = libc::pid_t::try_from(server.pid) {
        // SAFETY: kill(2) on the PID of a child this process started and has not reaped.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
    }
    if tokio::time::timeout(Duration::from_secs(30), server.child.wait())
        .await
        .is_err()
    {
        let _ = server.child.kill().await;
    }
}

/// Open files a load of `sessions` holders and `churn` more sessions needs in this process,
/// and again in the server: one per holder's event stream, two per churn session (its event
/// stream and its request connection), the holders' request connections while they open,
/// and room for Redis connections and the rest.
fn open_files_needed(sessions: usize, churn: usize) -> u64 {
    (sessions + 2 * churn + 2 * OPEN_CONCURRENCY + 1024) as u64
}

/// Raises this process's open-file limit (which the server inherits) to what the load needs,
/// as far as the system allows; returns the limit in effect, or says what to raise when it
/// stays too low.
fn raise_open_files(sessions: usize, churn: usize) -> Result<libc::rlim_t, LoadError> {
    let needed: libc::rlim_t = open_files_needed(sessions, churn);
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    let mut refused = None;
    // SAFETY: getrlimit and setrlimit read and write the one struct passed by pointer.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return Err(LoadError::ReadLimit(std::io::Error::last_os_error()));
        }
        if limit.rlim_cur >= needed {
            return Ok(limit.rlim_cur);
        }
        // Root with CAP_SYS_RESOURCE may raise the hard limit too; anyone may raise the soft
        // one up to it.
        let raised = libc::rlimit {
            rlim_cur: needed,
            rlim_max: needed.max(limit.rlim_max),
        };
        if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) != 0 {
            refused = Some(std::io::Error::last_os_error());
            let soft = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            libc::setrlimit(libc::RLIMIT_NOFILE, &soft);
        }
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return Err(LoadError::ReadLimit(std::io::Error::last_os_error()));
        }
    }
    if limit.rlim_cur >= needed {
        return Ok(limit.rlim_cur);
    }
    let fits = limit.rlim_cur.saturating_sub(open_files_needed(0, churn));
    Err(LoadError::OpenFiles {
        sessions,
        needed,
        limit: limit.rlim_cur,
        why: refused.map_or_else(String::new, |error| format!(" ({error})")),
        fits,
    })
}

/// The resident memory of process `pid`, in kB (`VmRSS` in `/proc/PID/status`).
fn rss_kb(pid: u32) -> Result<u64, LoadError> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path)
        .map_err(|error| LoadError::Proc(format!("{path}: {error}")))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.split_whitespace().next())
        .and_then(|kb| kb.parse().ok())
        .ok_or_else(|| LoadError::Proc(format!("{path} has no VmRSS line")))
}

/// The user plus system CPU time of process `pid`, in seconds (`/proc/PID/stat`).
fn cpu_seconds(pid: u32) -> Result<f64, LoadError> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path)
        .map_err(|error| LoadError::Proc(format!("{path}: {error}")))?;
    // The command name (field 2) may hold spaces; the fields after its ')' are plain.
    let after_name = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .ok_or_else(|| LoadError::Proc(format!("{path} is not a stat line")))?;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let ticks = |index: usize| -> Result<u64, LoadError> {
        fields
            .get(index)
            .and_then(|value| value.parse().ok())
            .ok_or_else(|| LoadError::Proc(format!("{path} has no CPU time fields")))
    };
    // SAFETY: sysconf only reads a configuration value.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Ok((ticks(11)? + ticks(12)?) as f64 / per_second)
}

/// The report as text, one figure a line.
pub fn summary(report: &LoadReport) -> String {
    let ms = |us: u64| us as f64 / 1000.0;
    let mut text = String::new();
    let mut line = |label: &str, value: String| text.push_str(&format!("{label:<36} {value}\n"));
    line(
        if report.stateless {
            "stateless agents renewing leases"
        } else {
            "sessions holding keepalive leases"
        },
        format!(
            "{} (ttl {} ms, open-file limit {})",
            report.sessions, report.ttl_ms, report.open_files_limit
        ),
    );
    line(
        "sessions acquiring and releasing",
        report.churn_sessions.to_string(),
    );
    line(
        "opening sessions and leases took",
        format!("{:.1} s", report.open_seconds),
    );
    line("held for", format!("{:.1} s", report.hold_seconds));
    line(
        "renewals",
        format!(
            "{} in all, {} in the hold (one per ttl/3 would be {})",
            report.renewed, report.renewed_in_hold, report.expected_in_hold
        ),
    );
    line(
        "renewals on time",
        format!(
            "{:.3} % ({} late, {} failed and retried)",
            report.on_time_percent, report.late, report.failed
        ),
    );
    line(
        "leases lost",
        format!(
            "{} ({} of {} still renewing at the end)",
            report.lost, report.still_renewing, report.sessions
        ),
    );
    line(
        "server RSS",
        format!(
            "{} kB before, {} kB held, {} kB at the end",
            report.rss_before_kb, report.rss_held_kb, report.rss_end_kb
        ),
    );
    line(
        "server RSS per session",
        format!("{:.1} KB", report.rss_per_session_bytes as f64 / 1024.0),
    );
    line(
        "server CPU per renewal (quiet)",
        format!(
            "{:.1} µs ({:.2} CPU s for {} renewals in {:.0} s)",
            report.cpu_us_per_renewal,
            report.quiet_cpu_seconds,
            report.quiet_renewals,
            report.quiet_seconds
        ),
    );
    line(
        "masters' CPU per renewal (quiet)",
        report.masters_cpu_us_per_renewal.map_or_else(
            || "not measured: no lab in --lab-dir".to_string(),
            |us| format!("{us:.1} µs, the masters together"),
        ),
    );
    line(
        "server CPU over the hold",
        format!("{:.1} s", report.hold_cpu_seconds),
    );
    line(
        "acquire_lock under the background",
        format!(
            "p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({} calls, {} not granted)",
            ms(report.acquire.p50_us),
            ms(report.acquire.p99_us),
            ms(report.acquire.max_us),
            report.acquire.count,
            report.acquire_failures
        ),
    );
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_renewal_report_line_reads_back_as_the_counts_it_was_made_from() {
        let counts = RenewalCounts {
            renewed: 12,
            late: 1,
            failed: 2,
            lost: 0,
        };
        let line = crate::mcp::renewals_line(counts);
        let parsed = line.strip_prefix(RENEWALS_PREFIX).and_then(parse_counts);
        assert_eq!(parsed, Some(counts));
        assert_eq!(parse_counts("12 1 two 0"), None);
    }

    #[test]
    fn an_open_file_limit_too_low_says_what_to_raise_and_how_many_sessions_fit() {
        let needed = open_files_needed(10_000, 64);
        assert!(needed > 10_000, "{needed}");
        let error = LoadError::OpenFiles {
            sessions: 10_000,
            needed,
            limit: 8_192,
            why: " (Operation not permitted)".into(),
            fits: 8_192 - open_files_needed(0, 64),
        };
        let message = error.to_string();
        assert!(
            message.contains(&format!("ulimit -Hn {needed}")),
            "{message}"
        );
        assert!(message.contains("the open-file limit is 8192"), "{message}");
        assert!(message.contains("Operation not permitted"), "{message}");
        assert!(message.contains("at most about 6976 sessions"), "{message}");
    }
}
