//! The agents of the load: the holders (keepalive sessions, or stateless agents renewing with
//! `extend_lock`), the churn sessions, and the MCP client calls they make.

use std::collections::HashMap;
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
use tokio_util::sync::CancellationToken;

use crate::RenewalCounts;

use super::Percentiles;
use super::server::Server;
use super::{CHECKS_PER_SECOND, LoadError, LoadOptions, OPEN_CONCURRENCY, Renewals};

pub(super) type Client = RunningService<RoleClient, ClientConfig>;

pub(super) fn client_config() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("quorumlock-load", env!("CARGO_PKG_VERSION")),
    )
}

/// One holding agent: its index names its resource, `lock_status` shows a keepalive lease
/// only to its session, and a stateless agent renews with its token.
pub(super) struct Holder {
    index: usize,
    pub(super) client: Arc<Client>,
    /// A stateless agent's lease, released at the end; `None` for a keepalive lease, which
    /// ends with its session.
    lease: Option<Lease>,
}

/// Renewal counts a stateless run keeps on the driver's side: those agents renew with
/// `extend_lock` themselves, so the server counts nothing.
#[derive(Default)]
pub(super) struct AgentRenewals {
    renewed: AtomicU64,
    late: AtomicU64,
    failed: AtomicU64,
    lost: AtomicU64,
}

impl AgentRenewals {
    pub(super) fn counts(&self) -> RenewalCounts {
        RenewalCounts {
            renewed: self.renewed.load(Ordering::Relaxed),
            late: self.late.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            lost: self.lost.load(Ordering::Relaxed),
        }
    }
}

/// Opens the churn sessions and warms them up, so the memory baseline includes them.
pub(super) async fn open_churn(
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
pub(super) async fn open_holders(
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

pub(super) fn holder_resource(index: usize) -> String {
    format!("load:hold:{index}")
}

/// A stateless agent's lease, which it renews itself.
#[derive(Clone)]
pub(super) struct Lease {
    resource: String,
    token: String,
    ttl_ms: u64,
}

/// Renews one stateless agent's lease every ttl/3 with `extend_lock`, as an agent without a
/// session must, until `stop` or until the lease is gone.
pub(super) async fn extend_loop(
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
pub(super) async fn churn_for(
    hold: Duration,
    churn: &[Arc<Client>],
    ttl_ms: u64,
) -> Result<Churned, LoadError> {
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
    Ok(Churned {
        acquire: Percentiles {
            count: acquire.len(),
            p50_us: acquire.value_at_quantile(0.5),
            p99_us: acquire.value_at_quantile(0.99),
            max_us: acquire.max(),
        },
        failures,
    })
}

/// What the churn sessions saw over the hold.
pub(super) struct Churned {
    /// Latencies of the `acquire_lock` calls that granted the lock.
    pub(super) acquire: Percentiles,
    /// Calls that did not grant it.
    pub(super) failures: u64,
}

/// Releases each stateless agent's lease at a paced rate, so a run leaves no lock behind.
pub(super) async fn release_paced(holders: &[Holder]) {
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
pub(super) async fn count_still_renewing(holders: &[Holder]) -> usize {
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
pub(super) struct ChurnResult {
    latencies: Histogram<u64>,
    failures: u64,
}

/// Microseconds up to ten minutes, three significant digits.
pub(super) fn histogram() -> Result<Histogram<u64>, LoadError> {
    Histogram::new_with_bounds(1, 600_000_000, 3)
        .map_err(|error| LoadError::Histogram(format!("cannot create a histogram: {error}")))
}

pub(super) async fn churn_loop(
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

pub(super) fn churn_resource(index: usize) -> String {
    format!("load:churn:{index}")
}

/// One `acquire_lock` then `release_lock`; the acquire's latency when it granted the lock.
pub(super) async fn acquire_release(
    client: &Client,
    resource: &str,
    ttl_ms: u64,
) -> Option<Duration> {
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
pub(super) enum Connections {
    /// Keeps its request connection open between calls (the churn sessions, whose latency
    /// counts).
    KeepOpen,
    /// Closes its request connection after each call and keeps only its event stream open.
    /// An idle client's pool drops that connection after 90 s anyway; closing it at once lets
    /// both processes fit one open file per holder under a hard limit they cannot raise.
    CloseAfterCall,
}

pub(super) async fn connect(server: &Server, connections: Connections) -> Result<Client, String> {
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

pub(super) async fn call(
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
