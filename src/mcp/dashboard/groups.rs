//! Group state for the dashboard: health readings shared by every viewer (at most one a
//! second), each group's state as one word, and the changes between readings and the
//! failovers Sentinel announces, put on the timeline.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use super::timeline::{EventKind, Timeline};
use crate::{Admission, GroupHealth, Health, Locks};

/// How long one health reading answers every viewer.
const FRESH_FOR: Duration = Duration::from_secs(1);
/// How often the server reads group health while nobody looks, so the timeline still
/// shows what happened meanwhile.
const BACKGROUND_EVERY: Duration = Duration::from_secs(2);

/// One group as the dashboard shows it.
#[derive(Debug, Clone, Serialize)]
pub struct GroupRow {
    pub group: String,
    /// `voting`, `quarantined`, `unreachable`, `no policy`, `unadmitted`, `evicts` or
    /// `unknown`.
    pub state: String,
    pub reachable: bool,
    pub votes: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quarantine_left_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub master: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy_max_ttl_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy_write_window_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The quorum and every group.
#[derive(Debug, Clone, Serialize)]
pub struct GroupsView {
    pub quorum_available: bool,
    pub voting: usize,
    pub quorum: usize,
    pub groups: Vec<GroupRow>,
}

/// A group's state in one word.
fn state(group: &GroupHealth) -> &'static str {
    if !group.reachable {
        return "unreachable";
    }
    match group.admission {
        Admission::Voting => "voting",
        Admission::Quarantined { .. } => "quarantined",
        Admission::Unadmitted => "unadmitted",
        Admission::NoPolicy => "no policy",
        Admission::Evicts { .. } => "evicts",
        Admission::Unknown => "unknown",
    }
}

fn row(group: &GroupHealth) -> GroupRow {
    GroupRow {
        group: group.group.clone(),
        state: state(group).to_string(),
        reachable: group.reachable,
        votes: group.votes(),
        quarantine_left_ms: match group.admission {
            Admission::Quarantined { remaining_ms } => Some(remaining_ms),
            _ => None,
        },
        latency_ms: group.latency_ms,
        master: group.master.clone(),
        policy_max_ttl_ms: group.policy.map(|p| p.max_ttl_ms),
        policy_write_window_ms: group.policy.map(|p| p.write_window_ms),
        error: group.error.clone(),
    }
}

struct Reading {
    at: Instant,
    view: Arc<GroupsView>,
}

/// The latest reading, and each group's state in it, to tell changes.
pub struct GroupWatch {
    locks: Locks,
    timeline: Arc<Timeline>,
    last: Mutex<Option<Reading>>,
    states: std::sync::Mutex<HashMap<String, String>>,
}

impl GroupWatch {
    pub fn new(locks: Locks, timeline: Arc<Timeline>) -> Arc<GroupWatch> {
        Arc::new(GroupWatch {
            locks,
            timeline,
            last: Mutex::new(None),
            states: std::sync::Mutex::new(HashMap::new()),
        })
    }

    /// A reading at most a second old; concurrent viewers wait for the one in flight.
    pub async fn view(&self) -> Arc<GroupsView> {
        let mut last = self.last.lock().await;
        if let Some(reading) = last.as_ref()
            && reading.at.elapsed() < FRESH_FOR
        {
            return Arc::clone(&reading.view);
        }
        let health = self.locks.health().await;
        self.note_changes(&health);
        let view = Arc::new(GroupsView {
            quorum_available: health.quorum_available,
            voting: health.voting,
            quorum: health.quorum,
            groups: health.groups.iter().map(row).collect(),
        });
        *last = Some(Reading {
            at: Instant::now(),
            view: Arc::clone(&view),
        });
        view
    }

    /// Puts every group whose state changed since the last reading on the timeline (the first
    /// reading only sets the baseline).
    fn note_changes(&self, health: &Health) {
        let mut states = self
            .states
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for group in &health.groups {
            let now = state(group);
            let before = states.insert(group.group.clone(), now.to_string());
            let Some(before) = before else { continue };
            if before == now {
                continue;
            }
            let detail = match (&group.admission, &group.error) {
                (_, Some(error)) if !group.reachable => format!("{before} → {now}: {error}"),
                (Admission::Quarantined { remaining_ms }, _) => format!(
                    "{before} → {now}: sits out another {} s",
                    remaining_ms.div_ceil(1000)
                ),
                _ => format!("{before} → {now}"),
            };
            self.timeline.record(EventKind::Group, &group.group, detail);
        }
    }

    /// Reads health every few seconds and records Sentinel's failovers, until `stop`.
    pub fn spawn(self: &Arc<Self>, stop: CancellationToken) {
        let watch = Arc::clone(self);
        let mut failovers = self.locks.failovers();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(BACKGROUND_EVERY);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut announcing = true;
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    _ = every.tick() => { watch.view().await; }
                    failover = failovers.recv(), if announcing => match failover {
                        Ok(failover) => watch.timeline.record(
                            EventKind::Failover,
                            &failover.group,
                            format!("Sentinel promoted {}", failover.master),
                        ),
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(missed)) => watch.timeline.record(
                            EventKind::Failover,
                            "",
                            format!("{missed} failover announcements missed"),
                        ),
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => announcing = false,
                    },
                }
            }
        });
    }
}
