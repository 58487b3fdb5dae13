//! The MCP server: the lock tools that AI agents call over stdio or streamable HTTP.
//!
//! Six tools (`acquire_lock`, `release_lock`, `extend_lock`, `lock_status`, `list_locks`,
//! `cluster_health`) put the engine in front of agents. Every lock lives in Redis; the only
//! state a server process keeps is the keepalive leases it renews for a live session, so
//! several HTTP replicas can run behind one load balancer. The contract agents see is in
//! `docs/mcp.md`.
//!
//! Layout, one job per file:
//! - `contract`: argument and result types of the tools: the JSON agents send and get back.
//! - `arguments`: decoding of tool arguments into those types, with errors naming the field,
//!   and the server's TTL and wait bounds.
//! - `reply`: the one helper that turns a result into structured content plus a one-line
//!   summary, and every failure into a tool error.
//! - `tools`: the six tools.
//! - `handler`: the rmcp server handler: which session a request belongs to, metrics per call.
//! - `sessions`: keepalive leases by session, released when their session ends.
//! - `metrics`: Prometheus metrics for `/metrics`.
//! - `auth`: the HTTP bearer token, compared in constant time.
//! - `http_sessions`: the HTTP session manager that releases a session's leases as it closes.
//! - `http`: the axum app (`/mcp`, `/healthz`, `/metrics`) and its graceful shutdown.
//! - `stdio`: one session over stdin and stdout.

mod arguments;
mod auth;

mod contract;
mod handler;
mod http;
mod http_sessions;
mod metrics;
mod reply;
mod sessions;
mod stdio;
mod tools;

use std::sync::Arc;
use std::time::Duration;

pub use auth::BearerToken;
pub use http::{HttpOptions, serve_http};
pub use metrics::Metrics;
pub use stdio::{StdioEnd, serve_stdio};

use crate::{Locks, MIN_TTL};

/// The line `serve --http` prints on stderr once it listens, followed by the endpoint URL.
pub const LISTENING_PREFIX: &str = "quorumlock mcp listening on ";
/// Default shortest TTL an agent may ask for: a margin against clock drift and process pauses.
pub const DEFAULT_MIN_TTL: Duration = Duration::from_secs(5);
/// Default longest TTL an agent may ask for (the topology's default `max_ttl_ms`).
pub const DEFAULT_MAX_TTL: Duration = Duration::from_millis(crate::config::DEFAULT_MAX_TTL_MS);
/// Longest `wait_ms` accepted: a tool call that blocks longer than this outlives most HTTP
/// proxies' timeouts and leaves the agent unable to act.
pub const MAX_WAIT: Duration = Duration::from_secs(60);
/// How long shutdown waits for keepalive leases to be released before giving up on them
/// (their TTL frees them anyway).
pub const RELEASE_ON_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

/// Bounds the server puts on what agents may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Shortest `ttl_ms` accepted.
    pub min_ttl: Duration,
    /// Longest `ttl_ms` accepted.
    pub max_ttl: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            min_ttl: DEFAULT_MIN_TTL,
            max_ttl: DEFAULT_MAX_TTL,
        }
    }
}

impl Limits {
    /// Checks that the bounds are ordered and inside what the engine accepts: at most the
    /// topology's `max_ttl_ms`, which is also how long a new master sits out of the vote.
    pub fn validate(&self, topology_max_ttl: Duration) -> Result<(), ServeError> {
        let millis = |d: Duration| d.as_millis();
        if self.min_ttl < MIN_TTL || self.max_ttl > topology_max_ttl || self.min_ttl > self.max_ttl
        {
            return Err(ServeError::Limits(format!(
                "min_ttl_ms ({}) and max_ttl_ms ({}) must satisfy {} <= min_ttl_ms <= max_ttl_ms <= {} (the topology's max_ttl_ms)",
                millis(self.min_ttl),
                millis(self.max_ttl),
                millis(MIN_TTL),
                millis(topology_max_ttl)
            )));
        }
        Ok(())
    }
}

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("invalid TTL bounds: {0}")]
    Limits(String),
    #[error(
        "refusing to serve HTTP on {addr} without a bearer token: set QUORUMLOCK_MCP_TOKEN or pass --token-file (only loopback addresses may run without one)"
    )]
    TokenRequired { addr: std::net::SocketAddr },
    #[error(
        "the bearer token is empty; put a long random secret in QUORUMLOCK_MCP_TOKEN or the --token-file"
    )]
    EmptyToken,
    #[error("cannot read the token file {path}: {source}")]
    TokenFile {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("the HTTP server failed: {0}")]
    Http(#[source] std::io::Error),
    #[error("the MCP client did not complete the handshake: {0}")]
    Handshake(String),
    #[error("the MCP session ended abnormally: {0}")]
    Session(String),
}

/// What every session of one server process shares: the engine, the bounds, the keepalive
/// registry and the metrics. Cheap to clone.
#[derive(Clone)]
pub struct McpServer {
    shared: Arc<handler::Shared>,
}

impl McpServer {
    /// A server over connected `locks`.
    pub fn new(locks: Locks, limits: Limits) -> Result<McpServer, ServeError> {
        limits.validate(locks.topology().max_ttl())?;
        Ok(McpServer {
            shared: Arc::new(handler::Shared::new(locks, limits)),
        })
    }

    /// The metrics this server records (also served at `/metrics`).
    pub fn metrics(&self) -> &Metrics {
        &self.shared.metrics
    }

    /// Stops renewing every keepalive lease, releases them all, and waits (up to `timeout`)
    /// until the releases are done. New keepalive leases are refused from then on.
    pub async fn release_all(&self, timeout: Duration) {
        self.shared.sessions.shutdown(timeout).await;
    }
}
