//! HTTP sessions, kept by this server in front of rmcp's stateless service.
//!
//! rmcp serves every request on its own, and this layer adds the sessions of MCP's older
//! protocol versions on top. A session is an id and the time of its last request, plus its
//! entry in the keepalive registry. Nothing else lives for a session between its requests:
//! no task and no channel, unless the client opens the stream of server messages (`GET`).
//! rmcp's own session manager keeps a task and several channels per session, about 70 KB.
//!
//! - `initialize` without `Mcp-Session-Id` opens a session: the answer carries its id. While
//!   `max_sessions` are open, it gets `503` with `Retry-After`.
//! - A request naming a session that is not open gets `404`, so the client opens a new one.
//! - `GET` opens the session's stream, where the notice of a keepalive lease that ended
//!   arrives. A second `GET` replaces the first stream.
//! - `DELETE` ends the session. Its keepalive leases are released before the `204` answer.
//! - A session without requests for `idle` ends the same way.
//!
//! Calls without a session (the newest protocol, or `serve --stateless`) pass through.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use super::http::MAX_REQUEST_BYTES;
use super::metrics::Metrics;
use super::sessions::{SessionKey, SessionRegistry};
use super::{MAX_SESSIONS_ENV, RELEASE_ON_SHUTDOWN_TIMEOUT};

/// The header that names an HTTP session.
pub const SESSION_HEADER: &str = "mcp-session-id";
/// Longest pause between two looks for idle sessions.
const LONGEST_SWEEP: Duration = Duration::from_secs(5);
/// Shortest pause between two looks for idle sessions.
const SHORTEST_SWEEP: Duration = Duration::from_millis(50);

/// Why an `initialize` opened no session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refused {
    /// `max_sessions` are open.
    Full,
    /// The server is shutting down.
    ShuttingDown,
}

/// The open HTTP sessions: ids and the time of their last request.
pub struct HttpSessions {
    registry: Arc<SessionRegistry>,
    metrics: Arc<Metrics>,
    idle: Duration,
    max_sessions: usize,
    last_request: Mutex<HashMap<Arc<str>, Instant>>,
}

impl HttpSessions {
    /// Sessions end after `idle` without requests (and their keepalive leases are released);
    /// at most `max_sessions` are open at once.
    pub fn new(
        registry: Arc<SessionRegistry>,
        metrics: Arc<Metrics>,
        idle: Duration,
        max_sessions: usize,
    ) -> HttpSessions {
        HttpSessions {
            registry,
            metrics,
            idle,
            max_sessions,
            last_request: Mutex::new(HashMap::new()),
        }
    }

    fn open_sessions(&self) -> MutexGuard<'_, HashMap<Arc<str>, Instant>> {
        // The map holds instants only; a panic elsewhere leaves it usable.
        self.last_request
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Opens a session, unless `max_sessions` are open or the server is shutting down.
    fn open(&self) -> Result<Arc<str>, Refused> {
        let id: Arc<str> = Arc::from(uuid::Uuid::new_v4().simple().to_string());
        {
            let mut open = self.open_sessions();
            if open.len() >= self.max_sessions {
                return Err(Refused::Full);
            }
            open.insert(Arc::clone(&id), Instant::now());
            self.metrics.sessions(open.len());
        }
        if !self.registry.open(SessionKey::http(&id)) {
            self.forget(&id);
            return Err(Refused::ShuttingDown);
        }
        Ok(id)
    }

    /// The answer to an `initialize` that opened no session.
    fn refusal(&self, refused: Refused) -> Response {
        match refused {
            Refused::ShuttingDown => (
                StatusCode::SERVICE_UNAVAILABLE,
                "Service Unavailable: the server is shutting down\n",
            )
                .into_response(),
            Refused::Full => {
                self.metrics.refused("max_sessions");
                tracing::warn!(
                    max_sessions = self.max_sessions,
                    "refused a new MCP session: max_sessions reached"
                );
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    [(header::RETRY_AFTER, "5")],
                    format!(
                        "too many MCP sessions: this server already has {} open, its max_sessions (set by {MAX_SESSIONS_ENV}); retry later, and end sessions you no longer need with DELETE /mcp\n",
                        self.max_sessions
                    ),
                )
                    .into_response()
            }
        }
    }

    /// Notes a request of session `id`; false when no such session is open.
    fn touch(&self, id: &str) -> bool {
        match self.open_sessions().get_mut(id) {
            Some(last) => {
                *last = Instant::now();
                true
            }
            None => false,
        }
    }

    /// Takes `id` out of the open sessions; false when it was not open.
    fn forget(&self, id: &str) -> bool {
        let mut open = self.open_sessions();
        let removed = open.remove(id).is_some();
        if removed {
            self.metrics.sessions(open.len());
        }
        removed
    }

    /// Ends session `id`: its keepalive leases are released (or the wait for them times out)
    /// before this returns, and its stream closes.
    async fn close(&self, id: &str) -> bool {
        if !self.forget(id) {
            return false;
        }
        self.registry
            .close(&SessionKey::http(id), RELEASE_ON_SHUTDOWN_TIMEOUT)
            .await;
        true
    }

    /// Ends sessions idle for longer than `idle`, until `stop`.
    pub fn spawn_idle_sweep(self: &Arc<Self>, stop: CancellationToken) {
        let sessions = Arc::clone(self);
        let every = (self.idle / 4).clamp(SHORTEST_SWEEP, LONGEST_SWEEP);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while stop.run_until_cancelled(ticks.tick()).await.is_some() {
                let idle: Vec<Arc<str>> = sessions
                    .open_sessions()
                    .iter()
                    .filter(|(_, last)| last.elapsed() > sessions.idle)
                    .map(|(id, _)| Arc::clone(id))
                    .collect();
                for id in idle {
                    tracing::info!(session = %id, "MCP session idle too long; ending it");
                    sessions.close(&id).await;
                }
            }
        });
    }
}

/// Middleware on `/mcp` that keeps the sessions (see the module's doc).
pub async fn keep_sessions(
    State((sessions, stop)): State<(Arc<HttpSessions>, CancellationToken)>,
    request: Request,
    next: Next,
) -> Response {
    let named = request
        .headers()
        .get(SESSION_HEADER)
        .map(|value| value.to_str().map(str::to_owned));
    match (request.method().clone(), named) {
        (_, Some(Err(_))) => bad_request("the Mcp-Session-Id header is not text"),
        (Method::POST, None) => open_on_initialize(&sessions, request, next).await,
        (method, Some(Ok(id))) => {
            if !sessions.touch(&id) {
                return session_not_found();
            }
            match method {
                Method::POST => next.run(request).await,
                Method::GET => stream(&sessions.registry, &id, stop),
                Method::DELETE => {
                    sessions.close(&id).await;
                    StatusCode::NO_CONTENT.into_response()
                }
                _ => method_not_allowed(),
            }
        }
        (Method::GET | Method::DELETE, None) => {
            bad_request("this method needs the Mcp-Session-Id header of an open session")
        }
        _ => method_not_allowed(),
    }
}

/// A POST without a session: an `initialize` opens one, anything else is served without.
async fn open_on_initialize(sessions: &HttpSessions, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_REQUEST_BYTES).await else {
        return (
            StatusCode::PAYLOAD_TOO_LARGE,
            "Payload Too Large: the request body is too large or could not be read\n",
        )
            .into_response();
    };
    let initialize = is_initialize(&bytes);
    let request = Request::from_parts(parts, axum::body::Body::from(bytes));
    if !initialize {
        return next.run(request).await;
    }
    let id = match sessions.open() {
        Ok(id) => id,
        Err(refused) => return sessions.refusal(refused),
    };
    let mut response = next.run(request).await;
    match HeaderValue::from_str(&id) {
        Ok(value) if response.status().is_success() => {
            response.headers_mut().insert(SESSION_HEADER, value);
        }
        _ => {
            sessions.close(&id).await;
        }
    }
    response
}

/// The session's stream of server messages, open until the session or the server ends.
fn stream(registry: &SessionRegistry, id: &str, stop: CancellationToken) -> Response {
    let Some(messages) = registry.open_stream(&SessionKey::http(id)) else {
        return session_not_found();
    };
    let events = futures::stream::unfold(messages, |mut messages| async move {
        let message = messages.recv().await?;
        Some((
            Ok::<_, Infallible>(Event::default().data(&*message)),
            messages,
        ))
    })
    .take_until(stop.cancelled_owned());
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// The answer to a request naming a session that is not open: the client opens a new one.
fn session_not_found() -> Response {
    (StatusCode::NOT_FOUND, "Not Found: Session not found\n").into_response()
}

fn bad_request(why: &str) -> Response {
    (StatusCode::BAD_REQUEST, format!("Bad Request: {why}\n")).into_response()
}

fn method_not_allowed() -> Response {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        [(header::ALLOW, "GET, POST, DELETE")],
        "Method Not Allowed\n",
    )
        .into_response()
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
