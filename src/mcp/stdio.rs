//! MCP over stdin/stdout: one session for the life of the process. The session ends when the
//! client closes stdin (or dies, which closes it) or on `shutdown`; either way every keepalive
//! lease is released before this returns. Nothing but MCP may be written to stdout, so all
//! logging goes to stderr.

use std::future::Future;

use rmcp::ServiceExt;
use rmcp::transport::io::stdio_pipes;

use super::handler::{LockServer, Transport};
use super::sessions::SessionKey;
use super::{McpServer, RELEASE_ON_SHUTDOWN_TIMEOUT, ServeError};

/// How a stdio session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StdioEnd {
    /// The client closed stdin (or died).
    ClientGone,
    /// `shutdown` resolved. stdin may still be blocked in a read on tokio's blocking pool
    /// (when stdin and stdout are not both pipes), which nothing can interrupt: the caller
    /// should exit the process rather than wait for the runtime to shut down.
    Shutdown,
}

/// Serves MCP on stdin/stdout until the client goes away or `shutdown` resolves.
pub async fn serve_stdio(
    server: &McpServer,
    shutdown: impl Future<Output = ()>,
) -> Result<StdioEnd, ServeError> {
    let shared = std::sync::Arc::clone(&server.shared);
    shared.sessions.open(SessionKey::stdio());
    let handler = LockServer::new(shared, Transport::Stdio);
    tokio::pin!(shutdown);
    // Non-blocking pipes where possible (what MCP clients give their servers), so that reading
    // stdin does not tie up a blocking thread.
    let running = tokio::select! {
        running = handler.serve(stdio_pipes()) => running.map_err(|error| ServeError::Handshake(error.to_string()))?,
        () = &mut shutdown => {
            server.release_all(RELEASE_ON_SHUTDOWN_TIMEOUT).await;
            return Ok(StdioEnd::Shutdown);
        }
    };
    let cancel = running.cancellation_token();
    let waiting = running.waiting();
    tokio::pin!(waiting);
    let (ended, end) = tokio::select! {
        ended = &mut waiting => (ended, StdioEnd::ClientGone),
        () = &mut shutdown => {
            tracing::info!("shutting down: ending the stdio session and releasing keepalive leases");
            cancel.cancel();
            (waiting.await, StdioEnd::Shutdown)
        }
    };
    server.release_all(RELEASE_ON_SHUTDOWN_TIMEOUT).await;
    match ended {
        Ok(reason) => {
            tracing::info!(?reason, "stdio session ended");
            Ok(end)
        }
        Err(error) => Err(ServeError::Session(error.to_string())),
    }
}
