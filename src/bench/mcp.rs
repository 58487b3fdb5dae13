//! Tool-call round trips through a real `quorumlock serve` child process, measured from a real
//! MCP client: `acquire_lock` then `release_lock`, sequentially, over stdio and over HTTP.
//!
//! `quorumlock serve --bench` runs it against the configured topology (a lab, usually).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::mcp::LISTENING_PREFIX;

/// What to measure, and with which binary and topology file.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// The `quorumlock` binary to start as the server.
    pub binary: PathBuf,
    /// The topology file the server reads.
    pub config: PathBuf,
    /// Measured acquire+release rounds per transport.
    pub rounds: usize,
    /// Unmeasured rounds first (connection set-up, script loading, allocator warm-up).
    pub warmup: usize,
}

/// Latency percentiles, in microseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Percentiles {
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
}

/// One transport's figures.
#[derive(Debug, Clone, Serialize)]
pub struct TransportReport {
    pub transport: &'static str,
    pub rounds: usize,
    /// One `acquire_lock` call.
    pub acquire: Percentiles,
    /// One `release_lock` call.
    pub release: Percentiles,
    /// `acquire_lock` + `release_lock`.
    pub round_trip: Percentiles,
    /// A call rejected at argument validation: the protocol and transport alone, no Redis.
    pub protocol_only: Percentiles,
}

/// Why the benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("cannot start the server {binary}: {source}")]
    Spawn {
        binary: PathBuf,
        source: std::io::Error,
    },
    #[error("the {transport} server did not come up: {message}")]
    Connect {
        transport: &'static str,
        message: String,
    },
    #[error("a tool call failed over {transport}: {message}")]
    Call {
        transport: &'static str,
        message: String,
    },
}

type Client = RunningService<RoleClient, ClientConfig>;

fn client_config() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("quorumlock-bench", env!("CARGO_PKG_VERSION")),
    )
}

/// Runs the benchmark over stdio, then over HTTP.
pub async fn run(options: &BenchOptions) -> Result<Vec<TransportReport>, BenchError> {
    let stdio = bench_stdio(options).await?;
    let http = bench_http(options).await?;
    Ok(vec![stdio, http])
}

async fn bench_stdio(options: &BenchOptions) -> Result<TransportReport, BenchError> {
    let mut command = tokio::process::Command::new(&options.binary);
    command
        .arg("--config")
        .arg(&options.config)
        .arg("serve")
        .env("RUST_LOG", "warn");
    let (transport, _) = TokioChildProcess::builder(command)
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|source| BenchError::Spawn {
            binary: options.binary.clone(),
            source,
        })?;
    let client = client_config()
        .serve(transport)
        .await
        .map_err(|error| BenchError::Connect {
            transport: "stdio",
            message: error.to_string(),
        })?;
    let report = measure("stdio", &client, options).await;
    let _ = client.cancel().await;
    report
}

async fn bench_http(options: &BenchOptions) -> Result<TransportReport, BenchError> {
    let token = uuid::Uuid::new_v4().simple().to_string();
    let mut child = tokio::process::Command::new(&options.binary)
        .arg("--config")
        .arg(&options.config)
        .args(["serve", "--http", "127.0.0.1:0"])
        .env("RUST_LOG", "warn")
        .env(crate::mcp::BearerToken::ENV, &token)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| BenchError::Spawn {
            binary: options.binary.clone(),
            source,
        })?;
    let connect_error = |message: String| BenchError::Connect {
        transport: "http",
        message,
    };
    let stderr = child
        .stderr
        .take()
        .ok_or_else(|| connect_error("no stderr pipe".into()))?;
    let mut lines = BufReader::new(stderr).lines();
    let url = loop {
        match tokio::time::timeout(Duration::from_secs(30), lines.next_line()).await {
            Ok(Ok(Some(line))) => {
                if let Some(url) = line.strip_prefix(LISTENING_PREFIX) {
                    break url.trim().to_string();
                }
                eprintln!("{line}");
            }
            Ok(Ok(None)) => return Err(connect_error("the server exited before listening".into())),
            Ok(Err(error)) => return Err(connect_error(error.to_string())),
            Err(_) => return Err(connect_error("no listening line within 30 s".into())),
        }
    };
    // Keep draining stderr so the server never blocks on a full pipe.
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            eprintln!("{line}")
        }
    });
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url).auth_header(token),
    );
    let client = client_config()
        .serve(transport)
        .await
        .map_err(|error| connect_error(error.to_string()))?;
    let report = measure("http", &client, options).await;
    let _ = client.cancel().await;
    let _ = child.kill().await;
    report
}

async fn measure(
    transport: &'static str,
    client: &Client,
    options: &BenchOptions,
) -> Result<TransportReport, BenchError> {
    let histogram = || {
        Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).map_err(|error| BenchError::Call {
            transport,
            message: format!("cannot create a histogram: {error}"),
        })
    };
    let (mut acquire, mut release, mut round_trip, mut protocol_only) =
        (histogram()?, histogram()?, histogram()?, histogram()?);
    let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
    for round in 0..options.warmup + options.rounds {
        let measured = round >= options.warmup;
        let resource = format!("bench:mcp:{transport}:{}", round % 64);
        let started = Instant::now();
        let arguments = serde_json::json!({"resource": resource, "ttl_ms": 10_000, "owner": "quorumlock-bench"});
        let acquired = call(transport, client, "acquire_lock", arguments).await?;
        let acquired_at = Instant::now();
        let token = acquired
            .get("token")
            .and_then(serde_json::Value::as_str)
            .ok_or_else(|| BenchError::Call {
                transport,
                message: format!("acquire_lock did not grant `{resource}`: {acquired}"),
            })?
            .to_string();
        let arguments = serde_json::json!({"resource": resource, "token": token});
        call(transport, client, "release_lock", arguments).await?;
        let done = Instant::now();
        // An empty resource is refused before Redis is asked: what is left is MCP itself.
        let invalid = serde_json::json!({"resource": ""});
        let rejected_at = Instant::now();
        if call(transport, client, "lock_status", invalid)
            .await
            .is_ok()
        {
            return Err(BenchError::Call {
                transport,
                message: "lock_status accepted an empty resource".into(),
            });
        }
        if measured {
            acquire.saturating_record(micros(acquired_at - started));
            release.saturating_record(micros(done - acquired_at));
            round_trip.saturating_record(micros(done - started));
            protocol_only.saturating_record(micros(rejected_at.elapsed()));
        }
    }
    let percentiles = |h: &Histogram<u64>| Percentiles {
        p50_us: h.value_at_quantile(0.5),
        p99_us: h.value_at_quantile(0.99),
        max_us: h.max(),
    };
    Ok(TransportReport {
        transport,
        rounds: options.rounds,
        acquire: percentiles(&acquire),
        release: percentiles(&release),
        round_trip: percentiles(&round_trip),
        protocol_only: percentiles(&protocol_only),
    })
}

async fn call(
    transport: &'static str,
    client: &Client,
    tool: &'static str,
    arguments: serde_json::Value,
) -> Result<serde_json::Value, BenchError> {
    let serde_json::Value::Object(arguments) = arguments else {
        return Err(BenchError::Call {
            transport,
            message: "arguments must be an object".into(),
        });
    };
    let result = client
        .call_tool(CallToolRequestParams::new(tool).with_arguments(arguments))
        .await
        .map_err(|error| BenchError::Call {
            transport,
            message: format!("{tool}: {error}"),
        })?;
    match (result.is_error, result.structured_content) {
        (Some(true), _) | (_, None) => Err(BenchError::Call {
            transport,
            message: format!("{tool} returned an error: {:?}", result.content),
        }),
        (_, Some(structured)) => Ok(structured),
    }
}

/// The reports as a table, one line per transport and call.
pub fn table(reports: &[TransportReport]) -> String {
    let mut text = format!(
        "{:<10} {:<26} {:>8} {:>10} {:>10} {:>10}\n",
        "transport", "call", "rounds", "p50 ms", "p99 ms", "max ms"
    );
    for report in reports {
        for (name, p) in [
            ("acquire_lock", &report.acquire),
            ("release_lock", &report.release),
            ("acquire+release", &report.round_trip),
            ("rejected call (no Redis)", &report.protocol_only),
        ] {
            let ms = |us: u64| us as f64 / 1000.0;
            text.push_str(&format!(
                "{:<10} {:<26} {:>8} {:>10.3} {:>10.3} {:>10.3}\n",
                report.transport,
                name,
                report.rounds,
                ms(p.p50_us),
                ms(p.p99_us),
                ms(p.max_us)
            ));
        }
    }
    text
}
