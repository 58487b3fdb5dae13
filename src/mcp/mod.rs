//! The MCP server: the lock tools that AI agents call over stdio or streamable HTTP.
//!
//! Six tools (`acquire_lock`, `release_lock`, `extend_lock`, `lock_status`, `list_locks`,
//! `cluster_health`) put the engine in front of agents. Every lock lives in Redis; the only
//! state a server process keeps is the keepalive leases it renews for a live session, so
//! several HTTP replicas can run behind one load balancer. The contract agents see is in
//! `docs/mcp.md`.
//!
//! Layout, one job per file:
//! - `contract`: argument and result types of the tools (the JSON agents send and get back),
//!   and the kinds of tool error.
//! - `schema`: the schemas clients list, compacted and bounded by this server's limits.
//! - `arguments`: decoding of tool arguments into those types, with errors naming the field,
//!   and the server's TTL and wait bounds.
//! - `reply`: the one helper that turns a result into structured content plus a one-line
//!   summary, and every failure into a tool error with its kind.
//! - `tools`: the six tools.
//! - `handler`: the rmcp server handler: which session a request belongs to, metrics per call.
//! - `sessions`: keepalive leases by session, released when their session ends.
//! - `metrics`: Prometheus metrics for `/metrics`.
//! - `auth`: the HTTP bearer token, compared in constant time.
//! - `hosts`: the `Host` header check (DNS-rebinding protection) for `/mcp` and `/metrics`.
//! - `http_sessions`: HTTP sessions kept in front of rmcp's stateless service; a session's end
//!   releases its keepalive leases.
//! - `http`: the axum app (`/mcp`, `/healthz`, `/readyz`, `/metrics`, the dashboard) and its graceful
//!   shutdown.
//! - `readiness`: `/readyz`, 200 only while a majority of groups vote.
//! - `dashboard/`: the read-only operator dashboard at `/` and the snapshot it polls.
//! - `tls`: `https` on the HTTP listener: the rustls configuration and a TLS listener.
//! - `stdio`: one session over stdin and stdout.

mod arguments;
mod auth;
mod contract;
mod dashboard;
mod handler;
mod hosts;
mod http;
mod http_sessions;
mod metrics;
mod readiness;
mod reply;
mod schema;
mod sessions;
mod stdio;
mod tls;
mod tools;

use std::sync::Arc;
use std::time::Duration;

pub use auth::BearerToken;
pub use contract::{ERROR_KINDS, ErrorKind};
pub use http::{HttpOptions, serve_http};
pub use metrics::Metrics;
pub use stdio::{StdioEnd, serve_stdio};
pub use tls::TlsFiles;

use crate::{Locks, MIN_TTL};

/// The line `serve --http` prints on stderr once it listens, followed by the endpoint URL.
pub const LISTENING_PREFIX: &str = "quorumlock mcp listening on ";
/// The line `serve --report-renewals` prints on stderr every 100 ms, followed by the
/// process's keepalive renewal counts: renewed, late, failed, lost.
pub const RENEWALS_PREFIX: &str = "quorumlock keepalive renewals ";

/// The renewal report line for `counts`.
pub(crate) fn renewals_line(counts: crate::RenewalCounts) -> String {
    format!(
        "{RENEWALS_PREFIX}{} {} {} {}",
        counts.renewed, counts.late, counts.failed, counts.lost
    )
}

/// Default shortest TTL an agent may ask for: a margin against clock drift and process pauses.
pub const DEFAULT_MIN_TTL: Duration = Duration::from_secs(5);
/// Default longest TTL an agent may ask for (the topology's default `max_ttl_ms`).
pub const DEFAULT_MAX_TTL: Duration = Duration::from_millis(crate::DEFAULT_MAX_TTL_MS);
/// Longest `wait_ms` accepted: a tool call that blocks longer than this outlives most HTTP
/// proxies' timeouts and leaves the agent unable to act.
pub const MAX_WAIT: Duration = Duration::from_secs(60);
/// How long shutdown waits for keepalive leases to be released before giving up on them
/// (their TTL frees them anyway).
pub const RELEASE_ON_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

/// Default most HTTP sessions one server process keeps open at once.
pub const DEFAULT_MAX_SESSIONS: usize = 1024;
/// Default most keepalive leases one session may hold at once.
pub const DEFAULT_MAX_KEEPALIVE_PER_SESSION: usize = 64;
/// Default most keepalive leases one server process renews at once, over all sessions.
pub const DEFAULT_MAX_KEEPALIVE: usize = 4096;
/// Default most tool calls one server process runs at once, over all sessions.
pub const DEFAULT_MAX_CONCURRENT_CALLS: usize = 256;
/// How long a tool call waits for a free slot while `max_concurrent_calls` calls run, before
/// it is refused with a tool error naming the limit.
pub const CALL_SLOT_WAIT: Duration = Duration::from_secs(1);

/// Environment variable that sets [`Capacity::max_sessions`].
pub const MAX_SESSIONS_ENV: &str = "QUORUMLOCK_MCP_MAX_SESSIONS";
/// Environment variable that sets [`Capacity::max_keepalive_per_session`].
pub const MAX_KEEPALIVE_PER_SESSION_ENV: &str = "QUORUMLOCK_MCP_MAX_KEEPALIVE_PER_SESSION";
/// Environment variable that sets [`Capacity::max_keepalive`].
pub const MAX_KEEPALIVE_ENV: &str = "QUORUMLOCK_MCP_MAX_KEEPALIVE";
/// Environment variable that sets [`Capacity::max_concurrent_calls`].
pub const MAX_CONCURRENT_CALLS_ENV: &str = "QUORUMLOCK_MCP_MAX_CONCURRENT_CALLS";

/// How much of the server one client may take: caps on sessions, keepalive leases and calls
/// in flight, so that a single client (buggy or hostile) cannot exhaust the process. Every
/// refusal names the limit it hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capacity {
    /// Open HTTP sessions; an `initialize` beyond it gets `503`.
    pub max_sessions: usize,
    /// Keepalive leases of one session; `acquire_lock` with `keepalive: true` beyond it is a
    /// tool error and acquires nothing.
    pub max_keepalive_per_session: usize,
    /// Keepalive leases of the whole server; same refusal.
    pub max_keepalive: usize,
    /// Tool calls running at once; a call beyond it waits up to [`CALL_SLOT_WAIT`] for a free
    /// slot, then is a tool error.
    pub max_concurrent_calls: usize,
}

impl Default for Capacity {
    fn default() -> Self {
        Capacity {
            max_sessions: DEFAULT_MAX_SESSIONS,
            max_keepalive_per_session: DEFAULT_MAX_KEEPALIVE_PER_SESSION,
            max_keepalive: DEFAULT_MAX_KEEPALIVE,
            max_concurrent_calls: DEFAULT_MAX_CONCURRENT_CALLS,
        }
    }
}

impl Capacity {
    /// The defaults, each overridden by its environment variable when set
    /// ([`MAX_SESSIONS_ENV`], [`MAX_KEEPALIVE_PER_SESSION_ENV`], [`MAX_KEEPALIVE_ENV`],
    /// [`MAX_CONCURRENT_CALLS_ENV`]). A value that is not a positive integer is an error
    /// naming the variable.
    pub fn from_env() -> Result<Capacity, ServeError> {
        let read = |name: &str, default: usize| -> Result<usize, ServeError> {
            match std::env::var(name) {
                Err(std::env::VarError::NotPresent) => Ok(default),
                Err(std::env::VarError::NotUnicode(_)) => Err(ServeError::Capacity(format!(
                    "{name} must be a positive integer"
                ))),
                Ok(text) => text.trim().parse().map_err(|_| {
                    ServeError::Capacity(format!("{name} must be a positive integer, not {text:?}"))
                }),
            }
        };
        let defaults = Capacity::default();
        let capacity = Capacity {
            max_sessions: read(MAX_SESSIONS_ENV, defaults.max_sessions)?,
            max_keepalive_per_session: read(
                MAX_KEEPALIVE_PER_SESSION_ENV,
                defaults.max_keepalive_per_session,
            )?,
            max_keepalive: read(MAX_KEEPALIVE_ENV, defaults.max_keepalive)?,
            max_concurrent_calls: read(MAX_CONCURRENT_CALLS_ENV, defaults.max_concurrent_calls)?,
        };
        capacity.validate()?;
        Ok(capacity)
    }

    /// Checks that every cap admits at least one of its kind.
    pub fn validate(&self) -> Result<(), ServeError> {
        let caps = [
            ("max_sessions", MAX_SESSIONS_ENV, self.max_sessions),
            (
                "max_keepalive_per_session",
                MAX_KEEPALIVE_PER_SESSION_ENV,
                self.max_keepalive_per_session,
            ),
            ("max_keepalive", MAX_KEEPALIVE_ENV, self.max_keepalive),
            (
                "max_concurrent_calls",
                MAX_CONCURRENT_CALLS_ENV,
                self.max_concurrent_calls,
            ),
        ];
        for (field, env, value) in caps {
            if value == 0 || value > tokio::sync::Semaphore::MAX_PERMITS {
                return Err(ServeError::Capacity(format!(
                    "{field} ({env}) must be between 1 and {}, not {value}",
                    tokio::sync::Semaphore::MAX_PERMITS
                )));
            }
        }
        Ok(())
    }
}

/// Bounds the server puts on what agents may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Shortest `ttl_ms` accepted.
    pub min_ttl: Duration,
    /// Longest `ttl_ms` accepted.
    pub max_ttl: Duration,
    /// The masters' longest TTL, read when the server starts, where it is below `max_ttl`.
    /// The schemas advertise it and the default TTL keeps within it. A longer `ttl_ms` still
    /// goes to the masters, which answer `held_too_long` and name their policy.
    pub policy_max_ttl: Option<Duration>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            min_ttl: DEFAULT_MIN_TTL,
            max_ttl: DEFAULT_MAX_TTL,
            policy_max_ttl: None,
        }
    }
}

impl Limits {
    /// The `ttl_ms` of an `acquire_lock` that names none: 15 s, or the nearest bound when the
    /// bounds exclude that.
    pub fn default_ttl(&self) -> Duration {
        Duration::from_millis(contract::DEFAULT_TTL_MS)
            .clamp(self.min_ttl, self.advertised_max_ttl())
    }

    /// The longest `ttl_ms` the schemas advertise: this server's bound, or the masters'
    /// policy where that is lower, never below `min_ttl`.
    pub fn advertised_max_ttl(&self) -> Duration {
        let policy = self.policy_max_ttl.unwrap_or(self.max_ttl);
        self.max_ttl.min(policy).max(self.min_ttl)
    }

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
    #[error("invalid server capacity: {0}")]
    Capacity(String),
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
    #[error("cannot serve TLS: {0}")]
    Tls(String),
    #[error("the HTTP server failed: {0}")]
    Http(#[source] std::io::Error),
    #[error("the MCP client did not complete the handshake: {0}")]
    Handshake(String),
    #[error("the MCP session ended abnormally: {0}")]
    Session(String),
}

/// What every session of one server process shares: the engine, the bounds and capacity, the
/// keepalive registry and the metrics. Cheap to clone.
#[derive(Clone)]
pub struct McpServer {
    shared: Arc<handler::Shared>,
}

impl McpServer {
    /// A server over connected `locks`, with the [`Capacity`] its environment variables set
    /// (the defaults when unset).
    pub fn new(locks: Locks, limits: Limits) -> Result<McpServer, ServeError> {
        McpServer::with_capacity(locks, limits, Capacity::from_env()?)
    }

    /// A server over connected `locks` with an explicit `capacity`.
    pub fn with_capacity(
        locks: Locks,
        limits: Limits,
        capacity: Capacity,
    ) -> Result<McpServer, ServeError> {
        limits.validate(locks.topology().max_ttl())?;
        capacity.validate()?;
        Ok(McpServer {
            shared: Arc::new(handler::Shared::new(locks, limits, capacity)),
        })
    }

    /// The caps this server enforces.
    pub fn capacity(&self) -> Capacity {
        self.shared.capacity
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_capacity_cap_must_admit_one_and_a_zero_is_named() {
        assert!(Capacity::default().validate().is_ok());
        let zero_calls = Capacity {
            max_concurrent_calls: 0,
            ..Capacity::default()
        };
        let message = zero_calls.validate().err().map(|e| e.to_string());
        assert!(
            message.as_deref().is_some_and(
                |m| m.contains("max_concurrent_calls (QUORUMLOCK_MCP_MAX_CONCURRENT_CALLS)")
            ),
            "{message:?}"
        );
        let zero_sessions = Capacity {
            max_sessions: 0,
            ..Capacity::default()
        };
        assert!(zero_sessions.validate().is_err());
    }
}
