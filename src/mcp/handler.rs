//! The rmcp server handler: server info, tool dispatch with per-call metrics and the cap on
//! concurrent calls, and which session a request belongs to.
//!
//! A [`LockServer`] is only a pointer to the shared state plus the transport it serves; rmcp
//! may build one per session or one per request, and either is fine because sessions live in
//! the shared registry.

use std::sync::Arc;
use std::time::Instant;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Extensions, Implementation, ServerCapabilities,
    ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, tool_handler};

use super::contract::ErrorKind;
use super::dashboard::activity;
use super::dashboard::timeline::Timeline;
use super::dashboard::waiting::Waiting;
use super::http_sessions::SESSION_HEADER;
use super::metrics::Metrics;
use super::reply::{ToolError, finish};
use super::schema;
use super::sessions::{SessionKey, SessionRegistry, level_rank};
use super::{CALL_SLOT_WAIT, Capacity, Limits, MAX_CONCURRENT_CALLS_ENV};
use crate::Locks;

const INSTRUCTIONS: &str = "Locks for agents, granted by a majority of independent Redis groups: acquire_lock before changing a shared resource. \
A tool error's first word is its kind; after no_quorum never act as if you held the lock.";

/// What every handler instance shares.
pub struct Shared {
    pub locks: Locks,
    pub limits: Limits,
    pub capacity: Capacity,
    pub metrics: Arc<Metrics>,
    pub sessions: Arc<SessionRegistry>,
    /// What this server saw happen, for the dashboard.
    pub timeline: Arc<Timeline>,
    /// `acquire_lock` calls waiting now, for the dashboard.
    pub waiting: Arc<Waiting>,
    pub router: ToolRouter<LockServer>,
    /// One permit per tool call running, `capacity.max_concurrent_calls` in all.
    calls: tokio::sync::Semaphore,
}

impl Shared {
    pub fn new(locks: Locks, limits: Limits, capacity: Capacity) -> Shared {
        let metrics = Arc::new(Metrics::new());
        let timeline = Arc::new(Timeline::new());
        Shared {
            locks,
            limits,
            capacity,
            sessions: Arc::new(SessionRegistry::new(
                Arc::clone(&metrics),
                Arc::clone(&timeline),
                &capacity,
            )),
            metrics,
            timeline,
            waiting: Arc::new(Waiting::new()),
            router: {
                let mut router = LockServer::tool_router();
                schema::bound(&mut router, &limits);
                router
            },
            calls: tokio::sync::Semaphore::new(capacity.max_concurrent_calls),
        }
    }
}

/// Which transport a handler serves, which decides how requests map to sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// One session for the life of the process.
    Stdio,
    /// Sessions named by the `Mcp-Session-Id` header; requests without one have no session.
    Http,
}

/// The MCP handler for the lock tools.
#[derive(Clone)]
pub struct LockServer {
    shared: Arc<Shared>,
    transport: Transport,
}

impl LockServer {
    pub(crate) fn new(shared: Arc<Shared>, transport: Transport) -> LockServer {
        LockServer { shared, transport }
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
    }

    /// Where a kept lease's session hears that the lease ended: the stdio client's peer. An
    /// HTTP request's peer ends with the request; HTTP sessions hear over their own stream.
    pub(crate) fn notice_peer(
        &self,
        context: &rmcp::service::RequestContext<RoleServer>,
    ) -> Option<rmcp::Peer<RoleServer>> {
        (self.transport == Transport::Stdio).then(|| context.peer.clone())
    }

    /// The session a request belongs to, if it has one.
    pub(crate) fn session(&self, extensions: &Extensions) -> Option<SessionKey> {
        match self.transport {
            Transport::Stdio => Some(SessionKey::stdio()),
            Transport::Http => extensions
                .get::<axum::http::request::Parts>()
                .and_then(|parts| parts.headers.get(SESSION_HEADER))
                .and_then(|value| value.to_str().ok())
                .map(SessionKey::http),
        }
    }
}

// The macro adds list_tools and get_tool over the shared router; call_tool is written out
// below so that every call is timed and an unknown tool gets a helpful error.
#[tool_handler(router = self.shared.router)]
impl ServerHandler for LockServer {
    fn get_info(&self) -> ServerConfig {
        // Logging is deprecated by SEP-2577, yet it is how a session learns that a keepalive
        // lease was lost; the capability has to be declared for clients to accept the messages.
        #[allow(deprecated)]
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_logging()
            .build();
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("quorumlock", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let router = &self.shared.router;
        let name = request.name.to_string();
        if !router.has_route(&name) {
            let known: Vec<String> = router
                .list_all()
                .into_iter()
                .map(|tool| tool.name.to_string())
                .collect();
            return Err(McpError::invalid_params(
                format!(
                    "not_found: unknown tool `{name}` (field `name`); this server has: {}",
                    known.join(", ")
                ),
                Some(serde_json::json!({"kind": ErrorKind::NotFound.as_str(), "field": "name"})),
            ));
        }
        let started = Instant::now();
        // A call beyond max_concurrent_calls waits briefly for a slot (bursts pass), then is
        // refused: a tool error the agent can read and retry on, without touching the engine.
        let Ok(Ok(_slot)) = tokio::time::timeout(CALL_SLOT_WAIT, self.shared.calls.acquire()).await
        else {
            let max = self.shared.capacity.max_concurrent_calls;
            tracing::warn!(tool = %name, max_concurrent_calls = max, "refused a tool call: max_concurrent_calls reached");
            self.shared.metrics.refused("max_concurrent_calls");
            self.shared
                .metrics
                .tool_call(&name, false, started.elapsed());
            return Ok(CallToolResponse::Complete(finish(Err(
                ToolError::over_limit(
                    "max_concurrent_calls",
                    max,
                    format!(
                        "the server is busy: {max} tool calls are already running, its max_concurrent_calls (set by {MAX_CONCURRENT_CALLS_ENV}), and none finished within {} ms; `{name}` was not run. Retry in a moment",
                        CALL_SLOT_WAIT.as_millis()
                    ),
                ),
            ))));
        };
        let arguments = request.arguments.clone();
        let waiter = activity::before(&self.shared.waiting, &name, arguments.as_ref());
        let response = router
            .call(ToolCallContext::new(self, request, context))
            .await;
        drop(waiter);
        if let Ok(CallToolResponse::Complete(result)) = &response
            && result.is_error != Some(true)
        {
            activity::after(
                &self.shared.timeline,
                &name,
                arguments.as_ref(),
                result.structured_content.as_ref(),
                started.elapsed(),
            );
        }
        let ok = match &response {
            Ok(CallToolResponse::Complete(result)) => result.is_error != Some(true),
            Ok(_) => true,
            Err(_) => false,
        };
        self.shared.metrics.tool_call(&name, ok, started.elapsed());
        response
    }

    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let rank = level_rank(request.level);
        if let Some(session) = self.session(&context.extensions) {
            self.shared.sessions.set_min_level(&session, rank);
        }
        Ok(())
    }
}
