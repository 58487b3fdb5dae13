//! `/readyz`: whether this server can grant now. 200 while a majority of groups vote, 503
//! with the reason otherwise, so a load balancer sends agents only to a server that can
//! grant. `/healthz` stays liveness only: a server whose groups are down still serves.
//!
//! No token is needed, as for `/healthz`: the answer carries counts only, never a group's
//! name, address or error. Probes share one reading at most a second old, so a storm of
//! probes costs the masters one round of health checks a second.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use tokio::sync::Mutex;

use crate::Locks;

/// How long one reading answers every probe.
const FRESH_FOR: Duration = Duration::from_secs(1);

/// The state `/readyz` reads: the client and its last reading.
pub struct Readiness {
    locks: Locks,
    last: Mutex<Option<Reading>>,
}

#[derive(Debug, Clone, Copy, Serialize)]
struct Answer {
    ready: bool,
    /// Groups that vote now.
    voting: usize,
    /// Groups a grant needs.
    quorum: usize,
    groups: usize,
}

#[derive(Clone, Copy)]
struct Reading {
    at: Instant,
    answer: Answer,
}

impl Readiness {
    pub fn new(locks: Locks) -> Arc<Readiness> {
        Arc::new(Readiness {
            locks,
            last: Mutex::new(None),
        })
    }

    /// A reading at most [`FRESH_FOR`] old; concurrent probes wait for the one in flight.
    async fn answer(&self) -> Answer {
        let mut last = self.last.lock().await;
        if let Some(reading) = *last
            && reading.at.elapsed() < FRESH_FOR
        {
            return reading.answer;
        }
        let health = self.locks.health().await;
        let answer = Answer {
            ready: health.quorum_available,
            voting: health.voting,
            quorum: health.quorum,
            groups: health.groups.len(),
        };
        *last = Some(Reading {
            at: Instant::now(),
            answer,
        });
        answer
    }
}

/// `GET /readyz`.
pub async fn readyz(State(readiness): State<Arc<Readiness>>) -> Response {
    let answer = readiness.answer().await;
    let (status, reason) = if answer.ready {
        (StatusCode::OK, None)
    } else {
        let reason = format!(
            "{} of {} groups vote; a grant needs {}",
            answer.voting, answer.groups, answer.quorum
        );
        (StatusCode::SERVICE_UNAVAILABLE, Some(reason))
    };
    let body = serde_json::json!({
        "status": if answer.ready { "ready" } else { "unavailable" },
        "voting": answer.voting,
        "quorum": answer.quorum,
        "groups": answer.groups,
        "reason": reason,
    });
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        format!("{body}\n"),
    )
        .into_response()
}
