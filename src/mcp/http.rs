//! Streamable HTTP, or HTTPS with `tls`: the axum app (`/mcp` for MCP, `/metrics` for Prometheus, `/healthz` and
//! `/readyz` for load balancers, the dashboard at `/`), bearer authentication, the `Host` check and the session cap, and a
//! graceful shutdown that releases every keepalive lease before the process exits.
//!
//! `/mcp`, `/metrics` and the dashboard's snapshot need the bearer token and an allowed
//! `Host`: the layers run token, then `Host` ([`require_allowed_host`]; rmcp checks `/mcp`
//! again with the same list), then, on `/mcp`, the session cap. The dashboard's page and
//! files need an allowed `Host` only: they carry no data. `/healthz` and `/readyz` need
//! neither: they reveal no name or address, and load balancers probe them by address.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use super::auth::{BearerToken, require_bearer};
use super::dashboard::{self, groups::GroupWatch, snapshot::Snapshots};
use super::handler::{LockServer, Shared, Transport};
use super::hosts::{AllowedHosts, require_allowed_host};
use super::http_sessions::{HttpSessions, keep_sessions};
use super::metrics::CONTENT_TYPE;
use super::readiness::{Readiness, readyz};
use super::tls::{TlsFiles, TlsListener, server_config};
use super::{McpServer, RELEASE_ON_SHUTDOWN_TIMEOUT, ServeError};

/// Largest request body accepted on `/mcp`. Big enough that a 1 MB argument reaches argument
/// validation (and gets an error naming its field); anything larger is refused with 413.
pub const MAX_REQUEST_BYTES: usize = 2 * 1024 * 1024;
/// Default idle time after which an HTTP session closes and its keepalive leases are released.
pub const DEFAULT_SESSION_IDLE: Duration = Duration::from_secs(300);

/// How to serve HTTP.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// `host:port` to listen on; port 0 picks a free port.
    pub listen: String,
    /// Required on every route but `/healthz`. Must be set unless `listen` is loopback.
    pub token: Option<BearerToken>,
    /// `Host` header values accepted on `/mcp` and `/metrics` (DNS-rebinding protection).
    /// Empty: loopback names only.
    pub allowed_hosts: Vec<String>,
    /// A session without requests for this long is closed and its keepalive leases released.
    pub session_idle: Duration,
    /// Open no MCP session for any client: every call stands alone, so any server behind a
    /// load balancer can take it. `keepalive: true` is refused, as it needs a session.
    pub stateless: bool,
    /// Serve `https` with this certificate and key; `None`: plain `http`.
    pub tls: Option<TlsFiles>,
}

impl HttpOptions {
    pub fn new(listen: impl Into<String>) -> HttpOptions {
        HttpOptions {
            listen: listen.into(),
            token: None,
            allowed_hosts: Vec::new(),
            session_idle: DEFAULT_SESSION_IDLE,
            stateless: false,
            tls: None,
        }
    }

    /// `https` with TLS, else `http`.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() { "https" } else { "http" }
    }
}

/// Serves MCP over streamable HTTP until `shutdown` resolves. `on_listening` gets the bound
/// address (useful with port 0) once requests can be accepted. On shutdown: stop accepting,
/// end every session, release every keepalive lease, then return.
pub async fn serve_http(
    server: &McpServer,
    options: HttpOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
    on_listening: impl FnOnce(SocketAddr),
) -> Result<(), ServeError> {
    // Read before binding, so a bad certificate fails at once.
    let tls = options.tls.as_ref().map(server_config).transpose()?;
    let (listener, addr) = bind(&options, tls.is_some()).await?;
    let stop = CancellationToken::new();
    let app = app(server, &options, &stop);

    on_listening(addr);
    let stopping = stop.clone();
    let graceful = async move {
        shutdown.await;
        tracing::info!(
            "shutting down: no new connections; closing sessions and releasing keepalive leases"
        );
        stopping.cancel();
    };
    match tls {
        None => axum::serve(listener, app)
            .with_graceful_shutdown(graceful)
            .await
            .map_err(ServeError::Http)?,
        Some(config) => {
            let listener = TlsListener::new(listener, config, stop.child_token())?;
            axum::serve(listener, app)
                .with_graceful_shutdown(graceful)
                .await
                .map_err(ServeError::Http)?
        }
    }
    stop.cancel();
    server.release_all(RELEASE_ON_SHUTDOWN_TIMEOUT).await;
    Ok(())
}

/// Binds the listener, refuses a tokenless non-loopback address and warns about the rest.
async fn bind(
    options: &HttpOptions,
    tls: bool,
) -> Result<(tokio::net::TcpListener, SocketAddr), ServeError> {
    let listener = tokio::net::TcpListener::bind(&options.listen)
        .await
        .map_err(|source| ServeError::Bind {
            addr: options.listen.clone(),
            source,
        })?;
    let addr = listener.local_addr().map_err(ServeError::Http)?;
    if options.token.is_none() && !addr.ip().is_loopback() {
        return Err(ServeError::TokenRequired { addr });
    }
    if options.token.is_none() {
        tracing::warn!(%addr, "serving HTTP without a bearer token (allowed on loopback only); set QUORUMLOCK_MCP_TOKEN to require one");
    }
    if let Some(warning) = plain_http_warning(addr, tls) {
        tracing::warn!(%addr, "{warning}");
    }
    if options.allowed_hosts.is_empty() && !addr.ip().is_loopback() {
        tracing::warn!(%addr, "no --allowed-host given: /mcp and /metrics only accept Host headers naming localhost, 127.0.0.1 or ::1");
    }
    Ok((listener, addr))
}

/// Every route with its layers: `/healthz`, `/readyz` and the dashboard's pages open, the rest
/// behind the token and the `Host` check.
fn app(server: &McpServer, options: &HttpOptions, stop: &CancellationToken) -> Router {
    let hosts = Arc::new(AllowedHosts::new(&options.allowed_hosts));
    let metrics_route = Router::new().route(
        "/metrics",
        get(metrics).with_state(Arc::clone(&server.shared)),
    );
    let groups = GroupWatch::new(
        server.shared.locks.clone(),
        Arc::clone(&server.shared.timeline),
    );
    groups.spawn(stop.child_token());
    let snapshots = Arc::new(Snapshots::new(
        server.shared.locks.clone(),
        groups,
        Arc::clone(&server.shared.timeline),
        Arc::clone(&server.shared.waiting),
    ));
    // The dashboard's page and files carry no data: an allowed Host is enough for them.
    let pages = dashboard::pages().layer(axum::middleware::from_fn_with_state(
        Arc::clone(&hosts),
        require_allowed_host,
    ));
    let protected = mcp_route(server, options, &hosts, stop)
        .merge(metrics_route)
        .merge(dashboard::api(snapshots))
        .layer(axum::middleware::from_fn_with_state(
            hosts,
            require_allowed_host,
        ))
        .layer(axum::middleware::from_fn_with_state(
            options.token.clone(),
            require_bearer,
        ));
    Router::new()
        .route("/healthz", get(healthz))
        .route(
            "/readyz",
            get(readyz).with_state(Readiness::new(server.shared.locks.clone())),
        )
        .merge(pages)
        .merge(protected)
}

/// `/mcp`: rmcp's stateless streamable HTTP service, behind this server's own sessions
/// unless `stateless` is set.
fn mcp_route(
    server: &McpServer,
    options: &HttpOptions,
    hosts: &AllowedHosts,
    stop: &CancellationToken,
) -> Router {
    // rmcp keeps no session: its own session manager costs about 70 KB per session, and
    // `http_sessions` keeps what a session needs in far less.
    let config = StreamableHttpServerConfig::default()
        .with_cancellation_token(stop.child_token())
        .with_max_request_body_bytes(MAX_REQUEST_BYTES)
        .with_legacy_session_mode(false)
        .with_allowed_hosts(hosts.entries().to_vec());
    let shared = Arc::clone(&server.shared);
    let mcp = StreamableHttpService::new(
        move || Ok(LockServer::new(Arc::clone(&shared), Transport::Http)),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    let route = Router::new().nest_service("/mcp", mcp);
    if options.stateless {
        return route;
    }
    let sessions = Arc::new(HttpSessions::new(
        Arc::clone(&server.shared.sessions),
        Arc::clone(&server.shared.metrics),
        options.session_idle,
        server.shared.capacity.max_sessions,
    ));
    sessions.spawn_idle_sweep(stop.child_token());
    route.layer(axum::middleware::from_fn_with_state(
        (sessions, stop.child_token()),
        keep_sessions,
    ))
}

/// The warning for plain HTTP where the token would cross a network: off loopback, no TLS.
fn plain_http_warning(addr: SocketAddr, tls: bool) -> Option<&'static str> {
    (!tls && !addr.ip().is_loopback()).then_some(
        "serving plain HTTP on a non-loopback address: the bearer token crosses the network in clear; pass --tls-cert and --tls-key, or put a TLS proxy in front",
    )
}

async fn healthz() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        "{\"status\":\"ok\"}\n",
    )
        .into_response()
}

/// Each scrape probes every group first, so the quorum and group series are as fresh as the
/// scrape (the probe takes about one call timeout when a group does not answer).
async fn metrics(State(shared): State<Arc<Shared>>) -> Response {
    let health = shared.locks.health().await;
    shared.metrics.record_health(&health);
    match shared.metrics.encode() {
        Ok(text) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response(),
        Err(error) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot encode metrics: {error}\n"),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_off_loopback_warns_that_the_token_crosses_the_network_in_clear() {
        let public: SocketAddr = ([10, 0, 0, 7], 8848).into();
        let loopback: SocketAddr = ([127, 0, 0, 1], 8848).into();
        assert!(
            plain_http_warning(public, false)
                .is_some_and(|w| w.contains("bearer token crosses the network in clear"))
        );
        assert_eq!(plain_http_warning(public, true), None);
        assert_eq!(plain_http_warning(loopback, false), None);
    }
}
