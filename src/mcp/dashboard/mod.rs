//! The read-only operator dashboard that `serve --http` serves at `/`.
//!
//! The page, its script and its style sheet are files in the repo (`static/`), compiled in:
//! no build step and nothing fetched from outside the server. They carry no data, so they
//! need only an allowed `Host`; the page asks for the bearer token once, keeps it in
//! `sessionStorage`, and sends it as `Authorization` on every poll of
//! `/dashboard/api/snapshot`, which sits behind the same token and `Host` checks as
//! `/metrics`. Polling (at most once a second) rather than server-sent events, because a
//! browser's `EventSource` cannot send an `Authorization` header and the token must never be
//! in a URL. Every response carries a strict Content-Security-Policy.
//!
//! - `timeline`: the ring of recent events.
//! - `waiting`: waiters per resource in this process.
//! - `activity`: what tool calls add to both.
//! - `groups`: shared health readings, state changes and failovers onto the timeline.
//! - `snapshot`: one poll's answer, paged like `list_locks`.

pub mod activity;
pub mod groups;
pub mod snapshot;
pub mod timeline;
pub mod waiting;

use std::sync::Arc;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;

use snapshot::Snapshots;

/// The Content-Security-Policy of every dashboard response: only this server's own script,
/// style and requests; no inline code, frames, forms or base URL.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The route the page polls.
pub const SNAPSHOT_PATH: &str = "/dashboard/api/snapshot";

const INDEX_HTML: &str = include_str!("static/index.html");
const APP_JS: &str = include_str!("static/app.js");
const STYLE_CSS: &str = include_str!("static/style.css");

/// Headers on every dashboard response.
fn hardened(content_type: &'static str, body: impl IntoResponse) -> Response {
    let headers: [(HeaderName, HeaderValue); 6] = [
        (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        ),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
        (
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        ),
        (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
    ];
    (headers, body).into_response()
}

async fn index() -> Response {
    hardened("text/html; charset=utf-8", INDEX_HTML)
}

async fn app_js() -> Response {
    hardened("text/javascript; charset=utf-8", APP_JS)
}

async fn style_css() -> Response {
    hardened("text/css; charset=utf-8", STYLE_CSS)
}

#[derive(Debug, Deserialize)]
struct SnapshotQuery {
    cursor: Option<String>,
}

async fn snapshot(
    State(snapshots): State<Arc<Snapshots>>,
    Query(query): Query<SnapshotQuery>,
) -> Response {
    let cursor = query.cursor.as_deref().filter(|c| !c.is_empty());
    let answer = snapshots.snapshot(cursor).await;
    match serde_json::to_string(&answer) {
        Ok(body) => hardened("application/json", body),
        Err(error) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot encode the snapshot: {error}\n"),
        )
            .into_response(),
    }
}

/// The page and its files: they need an allowed `Host`, not the token.
pub fn pages() -> Router {
    Router::new()
        .route("/", get(index))
        .route("/dashboard/app.js", get(app_js))
        .route("/dashboard/style.css", get(style_css))
}

/// The data the page polls: behind the bearer token.
pub fn api(snapshots: Arc<Snapshots>) -> Router {
    Router::new().route(SNAPSHOT_PATH, get(snapshot).with_state(snapshots))
}
