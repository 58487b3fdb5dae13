//! `quorumlock serve`: the MCP server for AI agents, on stdio (default) or streamable HTTP
//! (`--http ADDR`), `--bench` to measure tool-call round trips against the topology, and
//! `--bench-sessions` to measure the agent-swarm load (many sessions holding keepalive leases).

use std::path::{Path, PathBuf};
use std::time::Duration;

#[cfg(feature = "mcp-bench")]
use anyhow::Context;
use clap::Args;

use super::exit;
use crate::Locks;
use crate::Topology;
#[cfg(feature = "mcp-bench")]
use crate::bench::mcp::{self as bench, BenchOptions};
use crate::mcp::{
    BearerToken, Capacity, HttpOptions, LISTENING_PREFIX, Limits, McpServer, StdioEnd, TlsFiles,
    serve_http, serve_stdio,
};

const AFTER_HELP: &str = "Without --http the server speaks MCP on stdin/stdout (logs go to stderr), for MCP clients that start it as a subprocess.
With --http it serves streamable HTTP at http://ADDR/mcp, plus /healthz and /readyz (no token), /metrics (Prometheus) and a read-only dashboard at /.
With --tls-cert and --tls-key it serves https instead; plain HTTP on a non-loopback address prints a warning (the token would cross the network in clear).
HTTP requires a bearer token from QUORUMLOCK_MCP_TOKEN or --token-file (one of them, not both), except on a loopback address.
Once listening it prints `quorumlock mcp listening on http(s)://HOST:PORT/mcp` on stderr.

Examples:
  quorumlock --lab serve                                   # stdio, against the running lab
  QUORUMLOCK_MCP_TOKEN=$(openssl rand -hex 32) quorumlock --config prod.toml serve --http 0.0.0.0:8848 --allowed-host locks.internal --tls-cert /etc/quorumlock/tls.crt --tls-key /etc/quorumlock/tls.key
  quorumlock --lab serve --http 127.0.0.1:8848 --stateless   # no MCP sessions: any server behind a load balancer takes any call
  quorumlock --lab serve --bench                           # p50/p99 of acquire_lock+release_lock over stdio and HTTP
  quorumlock --lab serve --bench-sessions 1000 --bench-seconds 60   # 1000 sessions holding keepalive leases, 64 more acquiring";

/// The shortest ttl_ms agents may ask for, unless set: a margin against clock drift and
/// process pauses.
const DEFAULT_MIN_TTL_MS: u64 = 5_000;

/// The TTL --bench-sessions holds its leases at: the default agents get.
const BENCH_TTL_MS: u64 = crate::DEFAULT_TTL.as_millis() as u64;

#[derive(Debug, Clone, Args)]
#[command(after_help = AFTER_HELP)]
pub struct ServeArgs {
    /// Serve streamable HTTP on ADDR (e.g. 127.0.0.1:8848; port 0 picks a free one) instead of stdio.
    #[arg(long, value_name = "ADDR")]
    http: Option<String>,
    /// File holding the HTTP bearer token, instead of the QUORUMLOCK_MCP_TOKEN environment
    /// variable (setting both is an error).
    #[arg(long, value_name = "FILE", requires = "http")]
    token_file: Option<PathBuf>,
    /// Host header accepted on /mcp and /metrics, repeatable (DNS-rebinding protection). Default: localhost, 127.0.0.1, ::1.
    #[arg(long = "allowed-host", value_name = "HOST", requires = "http")]
    allowed_hosts: Vec<String>,
    /// Open no MCP session for any client, whatever protocol version it speaks, so any server
    /// behind a plain load balancer can take any call. keepalive: true is refused; agents
    /// renew with extend_lock.
    #[arg(long, requires = "http", conflicts_with = "session_idle_secs")]
    stateless: bool,
    /// Serve https with this PEM certificate chain (with --tls-key).
    #[arg(long, value_name = "FILE", requires_all = ["http", "tls_key"])]
    tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, value_name = "FILE", requires_all = ["http", "tls_cert"])]
    tls_key: Option<PathBuf>,
    /// Open HTTP sessions at most; a new one beyond it is refused (503).
    #[arg(long, env = "QUORUMLOCK_MCP_MAX_SESSIONS", default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..))]
    max_sessions: u64,
    /// Keepalive leases one session may hold at once.
    #[arg(long, env = "QUORUMLOCK_MCP_MAX_KEEPALIVE_PER_SESSION", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..))]
    max_keepalive_per_session: u64,
    /// Keepalive leases the whole server may hold at once.
    #[arg(long, env = "QUORUMLOCK_MCP_MAX_KEEPALIVE", default_value_t = 4096, value_parser = clap::value_parser!(u64).range(1..))]
    max_keepalive: u64,
    /// Tool calls running at once; a call beyond it waits up to a second, then is refused.
    #[arg(long, env = "QUORUMLOCK_MCP_MAX_CONCURRENT_CALLS", default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..))]
    max_concurrent_calls: u64,
    /// Shortest ttl_ms agents may ask for: a margin against clock drift and process pauses.
    /// Default: 5000, or the longest ttl_ms agents may ask for when that is shorter.
    #[arg(long, env = "QUORUMLOCK_MCP_MIN_TTL_MS")]
    min_ttl_ms: Option<u64>,
    /// Longest ttl_ms agents may ask for (use keepalive for longer work).
    /// Default: the topology's max_ttl_ms (60000 unless configured), which is also the most
    /// this may be.
    #[arg(long, env = "QUORUMLOCK_MCP_MAX_TTL_MS")]
    max_ttl_ms: Option<u64>,
    /// How long a keepalive lease may be renewed before the server releases it. Default: the
    /// topology's max_hold_ms (1 hour unless configured or set by QUORUMLOCK_MAX_HOLD_MS).
    #[arg(long)]
    max_hold_ms: Option<u64>,
    /// Seconds without requests after which an HTTP session closes and its keepalive leases are released.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..))]
    session_idle_secs: u64,
    /// Measure acquire_lock + release_lock round trips over stdio and HTTP (p50/p99), then exit.
    #[arg(long, conflicts_with_all = ["http", "token_file", "allowed_hosts"])]
    bench: bool,
    /// Measured rounds per transport for --bench.
    #[arg(long, default_value_t = 2000, requires = "bench")]
    bench_rounds: usize,
    /// Open this many HTTP sessions against a server child, each holding a keepalive lease,
    /// while 64 more acquire and release; report renewals on time, leases lost, server memory
    /// per session, CPU per renewal and acquire_lock p50/p99, then exit.
    #[arg(long, value_name = "N", conflicts_with_all = ["http", "token_file", "allowed_hosts", "bench"], value_parser = clap::value_parser!(u64).range(1..))]
    bench_sessions: Option<u64>,
    /// How long --bench-sessions holds the leases while the 64 sessions acquire and release.
    #[arg(long, value_name = "SECONDS", default_value_t = 60, requires = "bench_sessions", value_parser = clap::value_parser!(u64).range(1..))]
    bench_seconds: u64,
    /// The TTL of the leases --bench-sessions holds.
    #[arg(long, value_name = "MS", default_value_t = BENCH_TTL_MS, requires = "bench_sessions", value_parser = clap::value_parser!(u64).range(1..))]
    bench_ttl_ms: u64,
    /// Run --bench-sessions against a `--stateless` server: each agent takes a plain lease
    /// and renews it with extend_lock.
    #[arg(long, requires = "bench_sessions")]
    bench_stateless: bool,
    /// Sessions that acquire and release during --bench-sessions.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 64,
        requires = "bench_sessions"
    )]
    bench_churn: usize,
    /// Print the process's keepalive renewal counts on stderr every 100 ms (for --bench-sessions).
    #[arg(long, hide = true, requires = "http")]
    report_renewals: bool,
}

pub async fn run(args: &ServeArgs, mut topology: Topology, lab_dir: &Path) -> anyhow::Result<u8> {
    if let Some(max_hold_ms) = args.max_hold_ms {
        topology.max_hold_ms = max_hold_ms;
        topology.validate()?;
    }
    let max_ttl_ms = args.max_ttl_ms.unwrap_or(topology.max_ttl_ms);
    let mut limits = Limits {
        // A topology whose policy allows less than the default still serves.
        min_ttl: Duration::from_millis(
            args.min_ttl_ms
                .unwrap_or(DEFAULT_MIN_TTL_MS.min(max_ttl_ms)),
        ),
        max_ttl: Duration::from_millis(max_ttl_ms),
        policy_max_ttl: None,
    };
    limits.validate(topology.max_ttl())?;
    if args.bench {
        return run_bench(args, &topology).await;
    }
    if let Some(sessions) = args.bench_sessions {
        return run_load(args, &topology, lab_dir, sessions).await;
    }
    // Settings are checked before connecting, so a bad flag fails at once.
    if args.token_file.is_some() && std::env::var_os(BearerToken::ENV).is_some() {
        return Err(TokenTwice.into());
    }
    let http = match &args.http {
        Some(listen) => Some(HttpOptions {
            listen: listen.clone(),
            token: BearerToken::load(args.token_file.as_deref())?,
            allowed_hosts: args.allowed_hosts.clone(),
            session_idle: Duration::from_secs(args.session_idle_secs),
            stateless: args.stateless,
            tls: match (&args.tls_cert, &args.tls_key) {
                (Some(cert), Some(key)) => Some(TlsFiles {
                    cert: cert.clone(),
                    key: key.clone(),
                }),
                _ => None,
            },
        }),
        None => None,
    };
    let locks = Locks::connect(topology).await?;
    limits.policy_max_ttl = locks.policy_max_ttl().await;
    let capacity = Capacity {
        max_sessions: usize::try_from(args.max_sessions)?,
        max_keepalive_per_session: usize::try_from(args.max_keepalive_per_session)?,
        max_keepalive: usize::try_from(args.max_keepalive)?,
        max_concurrent_calls: usize::try_from(args.max_concurrent_calls)?,
    };
    let server = McpServer::with_capacity(locks.clone(), limits, capacity)?;
    if args.report_renewals {
        tokio::spawn(report_renewals());
    }
    match http {
        Some(options) => {
            let scheme = options.scheme();
            serve_http(&server, options, termination(), |addr| {
                eprintln!("{LISTENING_PREFIX}{scheme}://{addr}/mcp");
            })
            .await?;
        }
        None => {
            if serve_stdio(&server, termination()).await? == StdioEnd::Shutdown {
                locks.close().await;
                // Every lease is released; what may remain is a stdin read blocked on tokio's
                // blocking pool (stdin or stdout not a pipe), which would keep the runtime, and
                // so the process, alive until the client wrote again.
                std::process::exit(i32::from(exit::OK));
            }
        }
    }
    locks.close().await;
    Ok(exit::OK)
}

/// Prints the keepalive renewal counts on stderr every 100 ms, for the load driver.
async fn report_renewals() {
    let mut every = tokio::time::interval(Duration::from_millis(100));
    loop {
        every.tick().await;
        eprintln!(
            "{}",
            crate::mcp::renewals_line(crate::Locks::renewal_counts())
        );
    }
}

/// The bearer token was given both ways; which one was meant is unclear.
#[derive(Debug, thiserror::Error)]
#[error(
    "token_file: --token-file and QUORUMLOCK_MCP_TOKEN are both set; give the bearer token one way (unset QUORUMLOCK_MCP_TOKEN, or drop --token-file)"
)]
pub(crate) struct TokenTwice;

/// Resolves on SIGTERM or Ctrl-C.
async fn termination() {
    let ctrl_c = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::warn!(%error, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                tokio::select! {
                    () = ctrl_c => {}
                    _ = terminate.recv() => {}
                }
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM; only Ctrl-C stops the server");
                ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    ctrl_c.await;
}

#[cfg(not(feature = "mcp-bench"))]
async fn run_bench(_args: &ServeArgs, _topology: &Topology) -> anyhow::Result<u8> {
    anyhow::bail!(
        "--bench needs the MCP client, which this build leaves out: build with `cargo build --release --features mcp-bench`"
    )
}

#[cfg(not(feature = "mcp-bench"))]
async fn run_load(
    _args: &ServeArgs,
    _topology: &Topology,
    _lab_dir: &Path,
    _sessions: u64,
) -> anyhow::Result<u8> {
    anyhow::bail!(
        "--bench-sessions needs the MCP client, which this build leaves out: build with `cargo build --release --features mcp-bench`"
    )
}

#[cfg(feature = "mcp-bench")]
async fn run_load(
    args: &ServeArgs,
    topology: &Topology,
    lab_dir: &Path,
    sessions: u64,
) -> anyhow::Result<u8> {
    use crate::bench::load::{self, LoadOptions};
    let config = config_file(topology)?;
    let ttl = Duration::from_millis(args.bench_ttl_ms);
    // The masters' CPU is read from their PIDs, known only for a lab.
    let master_pids = crate::lab::Lab::open(lab_dir)
        .map(|lab| lab.master_pids())
        .unwrap_or_default();
    let options = LoadOptions {
        binary: std::env::current_exe()
            .context("cannot find this executable to start the server")?,
        config: config.path().to_path_buf(),
        sessions: usize::try_from(sessions)?,
        hold: Duration::from_secs(args.bench_seconds),
        churn_sessions: args.bench_churn,
        ttl,
        stateless: args.bench_stateless,
        master_pids,
    };
    eprintln!(
        "opening {} {}, each taking a lease with ttl {} ms",
        options.sessions,
        if options.stateless {
            "stateless agents"
        } else {
            "sessions"
        },
        ttl.as_millis()
    );
    let report = load::run(&options).await?;
    print!("{}", load::summary(&report));
    Ok(exit::OK)
}

/// The topology in effect here (with every override applied), written out for a server child.
#[cfg(feature = "mcp-bench")]
fn config_file(topology: &Topology) -> anyhow::Result<tempfile::NamedTempFile> {
    let mut config =
        tempfile::NamedTempFile::new().context("cannot create a temporary config file")?;
    std::io::Write::write_all(&mut config, topology.to_toml().as_bytes())
        .context("cannot write the temporary config file")?;
    Ok(config)
}

#[cfg(feature = "mcp-bench")]
async fn run_bench(args: &ServeArgs, topology: &Topology) -> anyhow::Result<u8> {
    // The server children read the topology from a file.
    let config = config_file(topology)?;
    let options = BenchOptions {
        binary: std::env::current_exe()
            .context("cannot find this executable to start the server")?,
        config: config.path().to_path_buf(),
        rounds: args.bench_rounds,
        warmup: (args.bench_rounds / 10).clamp(50, 500),
    };
    eprintln!(
        "measuring {} acquire_lock + release_lock rounds over stdio, then HTTP",
        options.rounds
    );
    let reports = bench::run(&options).await?;
    print!("{}", bench::table(&reports));
    Ok(exit::OK)
}
