//! Keepalive leases by session: the only state an MCP server process keeps.
//!
//! A keepalive lease belongs to the session that acquired it and lives until `release_lock`,
//! until the engine's `max_hold` cap, until a renewal fails, or until its session ends
//! (stdio: stdin closed; HTTP: session deleted or expired), whichever comes first; then the
//! lock is released. The registry is shared by every handler instance, because rmcp may build
//! a fresh handler per request: nothing per-session lives in a handler.
//!
//! A lease may hold several resources taken together (`resources`): it is renewed, released
//! and lost as one, and every one of its resources shows it.
//!
//! Each lease is owned by one task that waits for either its end or a stop request; stopping
//! means releasing. How a lease ended (lost, capped) is remembered per session and resource so
//! that `lock_status` can tell the agent, and the session gets a logging notification. A
//! session sees only its own leases and records: another session's keepalive state is none of
//! its business.
//!
//! The registry also enforces the keepalive caps: `max_keepalive_per_session` leases per
//! session and `max_keepalive` in all.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use rmcp::{Peer, RoleServer};
use tokio::sync::{mpsc, oneshot, watch};

use super::contract::{KeepaliveState, KeepaliveView, rfc3339};
use super::dashboard::timeline::{EventKind, Timeline};
use super::metrics::Metrics;
use super::{Capacity, MAX_KEEPALIVE_ENV, MAX_KEEPALIVE_PER_SESSION_ENV};
use crate::Error;
use crate::Released;
use crate::{KeptLease, LeaseEnd};

/// Server messages an HTTP session's stream holds before the client reads them; more are
/// dropped, as the session can still ask `lock_status`.
const STREAM_BACKLOG: usize = 8;
/// How many ended leases are remembered for `lock_status`; the oldest are forgotten first.
const MAX_ENDED_RECORDS: usize = 4096;

/// Identifies one MCP session: the HTTP `Mcp-Session-Id`, or the single stdio session.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SessionKey(Arc<str>);

impl SessionKey {
    pub fn stdio() -> SessionKey {
        SessionKey(Arc::from("stdio"))
    }

    pub fn http(session_id: &str) -> SessionKey {
        SessionKey(Arc::from(format!("http:{session_id}")))
    }
}

/// A logging level's rank in the MCP spec's order (debug lowest), so thresholds compare.
// rmcp marks logging deprecated (SEP-2577); see `notify_lease_end` for why it is still used.
#[allow(deprecated)]
pub const fn level_rank(level: rmcp::model::LoggingLevel) -> u8 {
    use rmcp::model::LoggingLevel;
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// The level of the notification sent when a keepalive lease ends by itself.
#[allow(deprecated)]
const LEVEL_WARNING: u8 = level_rank(rmcp::model::LoggingLevel::Warning);

type ReleaseResponder = oneshot::Sender<Result<Released, Error>>;

struct SessionEntry {
    /// Lowest level of logging notification the client wants (see [`level_rank`]).
    min_level: u8,
    /// An HTTP session's open stream of server messages (`GET /mcp`), as JSON-RPC text.
    stream: Option<mpsc::Sender<Arc<str>>>,
}

struct LeaseEntry {
    session: SessionKey,
    /// Every resource of the lease, in canonical order (one, unless it is a set).
    resources: Vec<String>,
    fencing_token: u64,
    /// Dropping this without sending also stops the lease (and releases it).
    stop: oneshot::Sender<ReleaseResponder>,
}

struct EndedLease {
    view: KeepaliveView,
    ended: SystemTime,
}

#[derive(Default)]
struct State {
    sessions: HashMap<SessionKey, SessionEntry>,
    /// Live keepalive leases by token.
    leases: HashMap<String, LeaseEntry>,
    /// A session's last keepalive lease of a resource that ended other than by release.
    ended: HashMap<(SessionKey, String), EndedLease>,
    /// Set at shutdown: no session may open and no lease may be adopted after it.
    closed: bool,
}

/// What [`SessionRegistry::release`] did with a token.
pub enum KeptRelease {
    /// The token keeps no lease of this server on these resources: release it through the
    /// engine.
    NotKept,
    /// The token keeps a lease on a different set that shares some of these resources; nothing
    /// was released. Carries the lease's resources.
    OtherSet(Vec<String>),
    /// The lease was stopped and released.
    Released(Result<Released, Error>),
}

/// Why a lease could not be adopted; the lease comes back so the caller releases it.
pub struct AdoptError {
    pub lease: KeptLease,
    pub refusal: Refusal,
}

/// Why a session may not take one more keepalive lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The session ended, or the server is shutting down.
    Closed,
    /// The keepalive cap `limit` (a [`Capacity`] field) is reached; `message` names it.
    Limit {
        limit: &'static str,
        message: String,
    },
}

/// The shared registry of sessions and their keepalive leases.
pub struct SessionRegistry {
    state: Mutex<State>,
    /// Lease tasks still running (they may be mid-release), so shutdown can wait for them.
    running: watch::Sender<usize>,
    metrics: Arc<Metrics>,
    timeline: Arc<Timeline>,
    max_per_session: usize,
    max_total: usize,
}

impl SessionRegistry {
    /// A registry enforcing `capacity`'s keepalive caps.
    pub fn new(
        metrics: Arc<Metrics>,
        timeline: Arc<Timeline>,
        capacity: &Capacity,
    ) -> SessionRegistry {
        SessionRegistry {
            state: Mutex::new(State::default()),
            running: watch::Sender::new(0),
            metrics,
            timeline,
            max_per_session: capacity.max_keepalive_per_session,
            max_total: capacity.max_keepalive,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain maps behind, still consistent enough to
        // release leases from; refusing to serve would be worse.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts tracking a session. Returns false during shutdown.
    pub fn open(&self, session: SessionKey) -> bool {
        let mut state = self.lock();
        if state.closed {
            return false;
        }
        state.sessions.entry(session).or_insert(SessionEntry {
            min_level: 0,
            stream: None,
        });
        true
    }

    /// Opens `session`'s stream of server messages, in place of the one it had; `None` when
    /// the session is not open.
    pub fn open_stream(&self, session: &SessionKey) -> Option<mpsc::Receiver<Arc<str>>> {
        let (sender, messages) = mpsc::channel(STREAM_BACKLOG);
        self.lock().sessions.get_mut(session)?.stream = Some(sender);
        Some(messages)
    }

    pub fn is_open(&self, session: &SessionKey) -> bool {
        self.lock().sessions.contains_key(session)
    }

    /// Whether `session` may take one more keepalive lease. Checked before acquiring, so that a
    /// refused call takes no lock at all; [`SessionRegistry::adopt`] checks again.
    pub fn keepalive_room(&self, session: &SessionKey) -> Result<(), Refusal> {
        match self.refusal(&self.lock(), session) {
            None => Ok(()),
            Some(refusal) => {
                if let Refusal::Limit { limit, .. } = &refusal {
                    self.metrics.refused(limit);
                }
                Err(refusal)
            }
        }
    }

    /// Why `session` may not take one more keepalive lease, if it may not.
    fn refusal(&self, state: &State, session: &SessionKey) -> Option<Refusal> {
        if state.closed || !state.sessions.contains_key(session) {
            return Some(Refusal::Closed);
        }
        let mine = state
            .leases
            .values()
            .filter(|lease| &lease.session == session)
            .count();
        if mine >= self.max_per_session {
            return Some(Refusal::Limit {
                limit: "max_keepalive_per_session",
                message: format!(
                    "refused: this session already holds {mine} keepalive leases, the server's max_keepalive_per_session ({}, set by {MAX_KEEPALIVE_PER_SESSION_ENV}); this call left no lock behind. Release a keepalive lease you no longer need with release_lock, or use keepalive: false and extend_lock",
                    self.max_per_session
                ),
            });
        }
        if state.leases.len() >= self.max_total {
            return Some(Refusal::Limit {
                limit: "max_keepalive",
                message: format!(
                    "refused: this server already renews {} keepalive leases, its max_keepalive ({}, set by {MAX_KEEPALIVE_ENV}); this call left no lock behind. Use keepalive: false and extend_lock, or retry later",
                    state.leases.len(),
                    self.max_total
                ),
            });
        }
        None
    }

    /// Records the lowest logging level the session's client wants.
    pub fn set_min_level(&self, session: &SessionKey, level: u8) {
        if let Some(entry) = self.lock().sessions.get_mut(session) {
            entry.min_level = level;
        }
    }

    /// Ends a session: stops and releases each of its keepalive leases and waits until they are
    /// released (or `timeout` passes; their TTL frees them anyway).
    pub async fn close(&self, session: &SessionKey, timeout: Duration) {
        let stops = {
            let mut state = self.lock();
            state.sessions.remove(session);
            state.ended.retain(|(owner, _), _| owner != session);
            let tokens: Vec<String> = state
                .leases
                .iter()
                .filter(|(_, lease)| &lease.session == session)
                .map(|(token, _)| token.clone())
                .collect();
            tokens
                .iter()
                .filter_map(|token| state.leases.remove(token))
                .collect::<Vec<_>>()
        };
        if stops.is_empty() {
            return;
        }
        tracing::info!(
            leases = stops.len(),
            "MCP session ended; releasing its keepalive leases"
        );
        let releases = stops.into_iter().map(stop_lease);
        if tokio::time::timeout(timeout, futures::future::join_all(releases))
            .await
            .is_err()
        {
            tracing::warn!(
                "releasing a closed session's keepalive leases timed out; their TTL will free them"
            );
        }
    }

    /// Shutdown: refuses new sessions and leases, closes every session and waits until every
    /// lease task has finished releasing.
    pub async fn shutdown(&self, timeout: Duration) {
        let sessions: Vec<SessionKey> = {
            let mut state = self.lock();
            state.closed = true;
            state.sessions.keys().cloned().collect()
        };
        let deadline = tokio::time::Instant::now() + timeout;
        for session in sessions {
            self.close(&session, timeout).await;
        }
        // Leases whose session was closed concurrently are released by their own task.
        let mut running = self.running.subscribe();
        if tokio::time::timeout_at(deadline, running.wait_for(|count| *count == 0))
            .await
            .is_err()
        {
            tracing::warn!(
                "shutdown: some keepalive leases were not released in time; their TTL will free them"
            );
        }
    }

    /// Takes a kept lease into `session`, renewing it until it ends; on a lost lease the session
    /// is told with a logging notification, over `peer` (stdio) or its stream (HTTP). An HTTP
    /// request's peer ends with the request, so HTTP sessions pass none.
    pub fn adopt(
        self: &Arc<Self>,
        session: SessionKey,
        peer: Option<Peer<RoleServer>>,
        lease: KeptLease,
    ) -> Result<(), Box<AdoptError>> {
        let (stop, stopped) = oneshot::channel();
        {
            let mut state = self.lock();
            if let Some(refusal) = self.refusal(&state, &session) {
                if let Refusal::Limit { limit, .. } = &refusal {
                    self.metrics.refused(limit);
                }
                return Err(Box::new(AdoptError { lease, refusal }));
            }
            for resource in lease.resources() {
                state.ended.remove(&(session.clone(), resource.clone()));
            }
            state.leases.insert(
                lease.token().to_string(),
                LeaseEntry {
                    session: session.clone(),
                    resources: lease.resources().to_vec(),
                    fencing_token: lease.fencing_token(),
                    stop,
                },
            );
        }
        self.metrics.keepalive_started();
        self.running.send_modify(|count| *count += 1);
        let registry = Arc::clone(self);
        tokio::spawn(async move {
            registry.watch(session, peer, lease, stopped).await;
            registry.metrics.keepalive_stopped();
            registry
                .running
                .send_modify(|count| *count = count.saturating_sub(1));
        });
        Ok(())
    }

    /// Releases the keepalive lease `token` of `resources` (canonical order), if this server
    /// keeps it alive. A lease on a set is released only when all of its resources are named:
    /// part of it, released through the engine, would leave the rest renewing until a renewal
    /// fails.
    pub async fn release(&self, resources: &[String], token: &str) -> KeptRelease {
        let entry = {
            let mut state = self.lock();
            match state.leases.get(token) {
                Some(entry) if entry.resources == resources => state.leases.remove(token),
                Some(entry) if entry.resources.iter().any(|r| resources.contains(r)) => {
                    return KeptRelease::OtherSet(entry.resources.clone());
                }
                _ => None,
            }
        };
        match entry {
            Some(entry) => KeptRelease::Released(stop_lease(entry).await),
            None => KeptRelease::NotKept,
        }
    }

    /// What `lock_status` shows `session` about its own keepalive lease on `resource`: never
    /// another session's, and nothing to a request without a session.
    pub fn view(&self, session: Option<&SessionKey>, resource: &str) -> Option<KeepaliveView> {
        let session = session?;
        let state = self.lock();
        if let Some(lease) = state.leases.values().find(|lease| {
            &lease.session == session && lease.resources.iter().any(|r| r == resource)
        }) {
            return Some(KeepaliveView {
                state: KeepaliveState::Renewing,
                resources: lease.resources.clone(),
                fencing_token: lease.fencing_token,
                reason: None,
                ended_at: None,
            });
        }
        state
            .ended
            .get(&(session.clone(), resource.to_string()))
            .map(|ended| ended.view.clone())
    }

    /// The lease task: waits for the lease to end or to be stopped.
    async fn watch(
        &self,
        session: SessionKey,
        peer: Option<Peer<RoleServer>>,
        lease: KeptLease,
        mut stopped: oneshot::Receiver<ReleaseResponder>,
    ) {
        let stop = tokio::select! {
            end = lease.lost() => Err(end),
            responder = &mut stopped => Ok(responder.ok()),
        };
        match stop {
            Ok(responder) => {
                let resource = lease.resources().join(", ");
                let released = lease.release().await;
                if let Err(error) = &released {
                    tracing::warn!(%resource, %error, "releasing a keepalive lease failed; its TTL will free it");
                }
                if let Some(responder) = responder {
                    let _ = responder.send(released);
                }
            }
            Err(end) => {
                // Told first, released after: at max_hold the lock is still ours until the end
                // of its validity, and the session hears of the end before anyone else can
                // take the lock. A session slow to take the notice does not hold it longer.
                // Boxed: the notification's future is large and rarely needed, and every
                // lease's task would otherwise reserve room for it for the lease's whole life.
                let capped = end == LeaseEnd::MaxHold;
                let told = Box::pin(self.ended(session, peer, &lease, end));
                if capped {
                    let _ = tokio::time::timeout(lease.validity(), told).await;
                } else {
                    told.await;
                }
                let _ = lease.release().await;
            }
        }
    }

    /// Records how a lease ended by itself and tells its session.
    async fn ended(
        &self,
        session: SessionKey,
        peer: Option<Peer<RoleServer>>,
        lease: &KeptLease,
        end: LeaseEnd,
    ) {
        let (state_name, reason) = match &end {
            LeaseEnd::Lost(reason) => {
                self.metrics.keepalive_lost();
                (KeepaliveState::Lost, reason.clone())
            }
            LeaseEnd::MaxHold => {
                self.metrics.keepalive_max_hold();
                (
                    KeepaliveState::MaxHoldReached,
                    "the server's max_hold_ms was reached; the lock is released after this notice"
                        .to_string(),
                )
            }
            // A release through the registry takes the other select arm; this is the renewal
            // task vanishing, which leaves nothing to report but the entry to forget.
            LeaseEnd::Released => {
                self.lock().leases.remove(lease.token());
                return;
            }
        };
        self.timeline.record(
            EventKind::LeaseLost,
            lease.resources().join(", "),
            format!(
                "keepalive lease (fencing token {}) ended: {reason}",
                lease.fencing_token()
            ),
        );
        let ended = SystemTime::now();
        let view = KeepaliveView {
            state: state_name,
            resources: lease.resources().to_vec(),
            fencing_token: lease.fencing_token(),
            reason: Some(reason.clone()),
            ended_at: Some(rfc3339(ended)),
        };
        let told = {
            let mut state = self.lock();
            state.leases.remove(lease.token());
            // Room for one record per resource of the lease.
            while state.ended.len() + lease.resources().len() > MAX_ENDED_RECORDS
                && let Some(oldest) = state
                    .ended
                    .iter()
                    .min_by_key(|(_, e)| e.ended)
                    .map(|(key, _)| key.clone())
            {
                state.ended.remove(&oldest);
            }
            // A session that is gone can no longer ask. Each resource of a set shows the end.
            if state.sessions.contains_key(&session) {
                for resource in lease.resources() {
                    state.ended.insert(
                        (session.clone(), resource.clone()),
                        EndedLease {
                            view: view.clone(),
                            ended,
                        },
                    );
                }
            }
            match state.sessions.get(&session) {
                Some(entry) if entry.min_level <= LEVEL_WARNING => match peer {
                    Some(peer) => Listener::Peer(peer),
                    None => entry
                        .stream
                        .clone()
                        .map_or(Listener::None, Listener::Stream),
                },
                _ => Listener::None,
            }
        };
        tracing::warn!(resource = %lease.resources().join(", "), state = state_name.as_str(), %reason, "keepalive lease ended");
        if !matches!(told, Listener::None) {
            notify_lease_end(told, lease, state_name, &reason).await;
        }
    }
}

async fn stop_lease(entry: LeaseEntry) -> Result<Released, Error> {
    let (responder, response) = oneshot::channel();
    if entry.stop.send(responder).is_err() {
        // The task already ended (the lease was lost or capped at this very moment).
        return Ok(not_released());
    }
    response.await.unwrap_or_else(|_| Ok(not_released()))
}

fn not_released() -> Released {
    Released {
        released: false,
        groups_released: 0,
        votes: Vec::new(),
    }
}

/// Who hears that a keepalive lease ended.
enum Listener {
    /// A stdio client, over its connection.
    Peer(Peer<RoleServer>),
    /// An HTTP session, over its stream of server messages.
    Stream(mpsc::Sender<Arc<str>>),
    /// Nobody: the session is gone, has no stream open, or wants no warnings.
    None,
}

// Logging notifications are deprecated by SEP-2577, but they are the only way MCP has to tell
// a session about an event it did not ask for, and clients still show them.
#[allow(deprecated)]
async fn notify_lease_end(
    listener: Listener,
    lease: &KeptLease,
    state: KeepaliveState,
    reason: &str,
) {
    use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
    let data = serde_json::json!({
        "event": "keepalive_lease_ended",
        "state": state.as_str(),
        "resource": lease.resource(),
        "resources": lease.resources(),
        "fencing_token": lease.fencing_token(),
        "reason": reason,
        "advice": "stop writing to the protected resource; call acquire_lock again before continuing",
    });
    let message =
        LoggingMessageNotificationParam::new(LoggingLevel::Warning, data).with_logger("quorumlock");
    let told = match listener {
        Listener::Peer(peer) => peer
            .notify_logging_message(message)
            .await
            .map_err(|error| error.to_string()),
        Listener::Stream(stream) => stream_notice(&stream, message),
        Listener::None => return,
    };
    if let Err(error) = told {
        tracing::debug!(%error, "could not notify the session that its keepalive lease ended");
    }
}

/// Puts a logging notification on an HTTP session's stream, without waiting for room.
#[allow(deprecated)]
fn stream_notice(
    stream: &mpsc::Sender<Arc<str>>,
    message: rmcp::model::LoggingMessageNotificationParam,
) -> Result<(), String> {
    use rmcp::model::{LoggingMessageNotification, ServerJsonRpcMessage, ServerNotification};
    let notification = ServerJsonRpcMessage::notification(
        ServerNotification::LoggingMessageNotification(LoggingMessageNotification::new(message)),
    );
    let text = serde_json::to_string(&notification).map_err(|error| error.to_string())?;
    stream
        .try_send(Arc::from(text))
        .map_err(|error| error.to_string())
}
