//! The HTTP session manager: rmcp's in-memory one, plus the hook that opens a session in the
//! keepalive registry when it is created and releases its leases when it closes.
//!
//! rmcp calls `close_session` on a DELETE from the client and again when a session's service
//! stops for any reason (idle timeout, server shutdown), so this one hook sees every end.
//!
//! A DELETE that ends a session is answered `204 No Content` ([`answer_delete_with_no_content`]).
//!
//! It also caps the open sessions at the server's `max_sessions`: `create_session` refuses
//! one more (rmcp answers `500` with the message), and [`refuse_beyond_max_sessions`] answers
//! `503` before rmcp is reached in the common case of a request that would open one.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use futures::Stream;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError, SessionConfig,
};
use rmcp::transport::streamable_http_server::session::{
    EventStore, RestoreOutcome, ServerSseMessage, SessionId, SessionManager,
};

use super::http::MAX_REQUEST_BYTES;
use super::metrics::Metrics;
use super::sessions::{SessionKey, SessionRegistry};
use super::{MAX_SESSIONS_ENV, RELEASE_ON_SHUTDOWN_TIMEOUT};

/// The header that names an HTTP session.
const SESSION_HEADER: &str = "mcp-session-id";

/// Why the session manager failed.
#[derive(Debug, thiserror::Error)]
pub enum TrackedSessionsError {
    #[error(transparent)]
    Local(#[from] LocalSessionManagerError),
    #[error("{}", too_many_sessions(*.0))]
    TooManySessions(usize),
}

/// The refusal of a session beyond `max_sessions`, naming the limit.
fn too_many_sessions(max: usize) -> String {
    format!(
        "too many MCP sessions: this server already has {max} open, its max_sessions (set by {MAX_SESSIONS_ENV}); retry later, and end sessions you no longer need with DELETE /mcp"
    )
}

/// [`LocalSessionManager`] that keeps the keepalive registry in step with its sessions and
/// caps how many are open.
pub struct TrackedSessions {
    inner: LocalSessionManager,
    registry: Arc<SessionRegistry>,
    metrics: Arc<Metrics>,
    /// Open sessions (a set, because rmcp may close a session twice).
    open: tokio::sync::Mutex<HashSet<SessionId>>,
    max_sessions: usize,
}

impl TrackedSessions {
    /// Sessions close after `idle` without requests (and their keepalive leases are released);
    /// at most `max_sessions` are open at once.
    pub fn new(
        registry: Arc<SessionRegistry>,
        metrics: Arc<Metrics>,
        idle: Duration,
        max_sessions: usize,
    ) -> TrackedSessions {
        let mut inner = LocalSessionManager::default();
        let mut config = SessionConfig::default();
        config.keep_alive = Some(idle);
        inner.session_config = config;
        TrackedSessions {
            inner,
            registry,
            metrics,
            open: tokio::sync::Mutex::new(HashSet::new()),
            max_sessions,
        }
    }

    /// True when no further session may open.
    async fn full(&self) -> bool {
        self.open.lock().await.len() >= self.max_sessions
    }

    /// Counts `id` as open unless the cap is reached.
    async fn admit(&self, id: &SessionId) -> Result<(), TrackedSessionsError> {
        let mut open = self.open.lock().await;
        if !open.contains(id) && open.len() >= self.max_sessions {
            self.metrics.refused("max_sessions");
            return Err(TrackedSessionsError::TooManySessions(self.max_sessions));
        }
        open.insert(id.clone());
        self.metrics.sessions(open.len());
        Ok(())
    }
}

/// Middleware on `/mcp`: while `max_sessions` are open, an `initialize` (a POST without
/// `Mcp-Session-Id` whose method is `initialize`) gets `503` with `Retry-After`. Requests of
/// existing sessions, and sessionless (2026-07-28) calls, which open none, pass. The body is
/// only read here when the server is full.
pub async fn refuse_beyond_max_sessions(
    State(sessions): State<Arc<TrackedSessions>>,
    request: Request,
    next: Next,
) -> Response {
    let may_open =
        request.method() == Method::POST && !request.headers().contains_key(SESSION_HEADER);
    if !may_open || !sessions.full().await {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_REQUEST_BYTES).await else {
        return (
            StatusCode::PAYLOAD_TOO_LARGE,
            "Payload Too Large: the request body is too large or could not be read\n",
        )
            .into_response();
    };
    if is_initialize(&bytes) {
        sessions.metrics.refused("max_sessions");
        tracing::warn!(
            max_sessions = sessions.max_sessions,
            "refused a new MCP session: max_sessions reached"
        );
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, "5")],
            format!("{}\n", too_many_sessions(sessions.max_sessions)),
        )
            .into_response();
    }
    next.run(Request::from_parts(parts, axum::body::Body::from(bytes)))
        .await
}

/// Middleware on `/mcp`: a DELETE that ended a session gets `204 No Content`. rmcp answers
/// `202 Accepted`, which MCP clients do not expect for a DELETE: the official Python SDK logs
/// "Session termination failed: 202" for every agent that exits. The session's keepalive
/// leases are released before either answer.
pub async fn answer_delete_with_no_content(request: Request, next: Next) -> Response {
    let delete = request.method() == Method::DELETE;
    let mut response = next.run(request).await;
    if delete && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::NO_CONTENT;
    }
    response
}

/// Whether a request body is a JSON-RPC `initialize` request.
fn is_initialize(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Envelope<'a> {
        #[serde(borrow)]
        method: Option<std::borrow::Cow<'a, str>>,
    }
    serde_json::from_slice::<Envelope<'_>>(body)
        .is_ok_and(|message| message.method.as_deref() == Some("initialize"))
}

impl SessionManager for TrackedSessions {
    type Error = TrackedSessionsError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        // Held across the creation so that concurrent initializes cannot overshoot the cap.
        let mut open = self.open.lock().await;
        if open.len() >= self.max_sessions {
            self.metrics.refused("max_sessions");
            return Err(TrackedSessionsError::TooManySessions(self.max_sessions));
        }
        let (id, transport) = self.inner.create_session().await?;
        open.insert(id.clone());
        self.metrics.sessions(open.len());
        drop(open);
        self.registry.open(SessionKey::http(&id));
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        Ok(self.inner.initialize_session(id, message).await?)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        Ok(self.inner.has_session(id).await?)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        let closed = self.inner.close_session(id).await;
        {
            let mut open = self.open.lock().await;
            if open.remove(id) {
                self.metrics.sessions(open.len());
            }
        }
        // Released before the DELETE is answered, so a client that deletes its session can
        // rely on its locks being free when the call returns.
        self.registry
            .close(&SessionKey::http(id), RELEASE_ON_SHUTDOWN_TIMEOUT)
            .await;
        Ok(closed?)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.create_stream(id, message).await?)
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        Ok(self.inner.accept_message(id, message).await?)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.create_standalone_stream(id).await?)
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.resume(id, last_event_id).await?)
    }

    async fn restore_session(
        &self,
        id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        let outcome = self.inner.restore_session(id.clone()).await?;
        if matches!(outcome, RestoreOutcome::Restored(_)) {
            // Only reached with a session store, which this server does not configure; a
            // restored session counts against the cap like a new one.
            if let Err(refused) = self.admit(&id).await {
                let _ = self.inner.close_session(&id).await;
                return Err(refused);
            }
            self.registry.open(SessionKey::http(&id));
        }
        Ok(outcome)
    }

    fn event_store(&self) -> Option<Arc<dyn EventStore>> {
        self.inner.event_store()
    }
}
