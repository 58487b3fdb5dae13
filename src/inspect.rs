//! Read-only views: one lock as each group sees it, and the health of every group.

use std::collections::HashMap;

use fred::types::Value;
use serde::Serialize;

use crate::error::{Error, Holder};
use crate::lock::{Locks, OwnerRecord, text};
use crate::quorum::{Reply, fan_out};
use crate::resource::validate_resource;
use crate::scripts;

/// One group's view of one lock.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct GroupView {
    pub group: String,
    /// `held`, `free`, `timeout` or `error`.
    pub state: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remaining_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub purpose: Option<String>,
    /// Highest fencing token this group has committed for the resource.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fence: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A lock as the quorum sees it. Advisory: it may change right after it is read.
#[derive(Debug, Clone, Serialize)]
pub struct LockStatus {
    pub resource: String,
    /// True when a majority of groups hold the same token.
    pub held: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder: Option<Holder>,
    /// The holder's fencing token, when held.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fencing_token: Option<u64>,
    pub groups: Vec<GroupView>,
}

/// One group's health.
#[derive(Debug, Clone, Serialize)]
pub struct GroupHealth {
    pub group: String,
    pub reachable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Every group's health and whether a majority answers.
#[derive(Debug, Clone, Serialize)]
pub struct Health {
    pub quorum_available: bool,
    pub quorum: usize,
    pub groups: Vec<GroupHealth>,
}

struct Seen {
    token: String,
    remaining_ms: u64,
    fence: u64,
    record: OwnerRecord,
}

impl Locks {
    /// Reads the lock on every group.
    pub async fn status(&self, resource: &str) -> Result<LockStatus, Error> {
        validate_resource(resource)?;
        let engine = &self.engine;
        let keys = engine.keys(resource).all();
        let replies = fan_out(
            &engine.groups,
            |group| group.eval::<Vec<Value>>(&scripts::INSPECT, keys.clone(), Vec::new()),
            |_| false,
        )
        .await;
        let seen: Vec<Option<Seen>> = replies
            .iter()
            .map(|reply| match reply {
                Some(Reply::Answer(values)) => {
                    let token = text(values.first());
                    let remaining_ms = values.get(1).and_then(Value::as_i64).unwrap_or(-2);
                    Some(Seen {
                        remaining_ms: u64::try_from(remaining_ms).unwrap_or(0),
                        token: if remaining_ms > 0 { token } else { String::new() },
                        fence: text(values.get(2)).parse().unwrap_or(0),
                        record: OwnerRecord::parse(&text(values.get(3))),
                    })
                }
                _ => None,
            })
            .collect();
        let mut tally: HashMap<&str, usize> = HashMap::new();
        for view in seen.iter().flatten().filter(|s| !s.token.is_empty()) {
            *tally.entry(view.token.as_str()).or_default() += 1;
        }
        let leader = tally
            .iter()
            .filter(|(_, votes)| **votes >= engine.quorum)
            .map(|(token, _)| *token)
            .next();
        let holding: Vec<&Seen> = seen.iter().flatten().filter(|s| Some(s.token.as_str()) == leader).collect();
        let holder = holding.iter().min_by_key(|s| s.remaining_ms).map(|s| Holder {
            owner: s.record.owner.clone(),
            purpose: s.record.purpose.clone(),
            remaining_ms: s.remaining_ms,
        });
        let fencing_token = holding.iter().map(|s| s.fence).max();
        let groups = engine
            .groups
            .iter()
            .zip(replies.iter().zip(&seen))
            .map(|(group, (reply, view))| match (reply, view) {
                (_, Some(view)) => GroupView {
                    group: group.name.clone(),
                    state: if view.token.is_empty() { "free" } else { "held" }.to_string(),
                    remaining_ms: (!view.token.is_empty()).then_some(view.remaining_ms),
                    owner: view.record.owner.clone(),
                    purpose: view.record.purpose.clone(),
                    fence: (view.fence > 0).then_some(view.fence),
                    error: None,
                },
                (reply, None) => GroupView {
                    group: group.name.clone(),
                    state: if matches!(reply, Some(Reply::Timeout)) { "timeout" } else { "error" }.to_string(),
                    remaining_ms: None,
                    owner: None,
                    purpose: None,
                    fence: None,
                    error: match reply {
                        Some(Reply::Failed(message)) => Some(message.clone()),
                        _ => None,
                    },
                },
            })
            .collect();
        Ok(LockStatus {
            resource: resource.to_string(),
            held: leader.is_some(),
            holder,
            fencing_token,
            groups,
        })
    }

    /// PINGs every group.
    pub async fn health(&self) -> Health {
        let engine = &self.engine;
        let replies = fan_out(&engine.groups, |group| group.ping(), |_| false).await;
        let groups: Vec<GroupHealth> = engine
            .groups
            .iter()
            .zip(replies)
            .map(|(group, reply)| {
                let (latency_ms, error) = match reply {
                    Some(Reply::Answer(rtt)) => (Some(rtt.as_secs_f64() * 1000.0), None),
                    Some(Reply::Timeout) => (None, Some("timeout".to_string())),
                    Some(Reply::Failed(message)) => (None, Some(message)),
                    None => (None, Some("no answer".to_string())),
                };
                GroupHealth {
                    group: group.name.clone(),
                    reachable: latency_ms.is_some(),
                    latency_ms,
                    error,
                }
            })
            .collect();
        Health {
            quorum_available: groups.iter().filter(|g| g.reachable).count() >= engine.quorum,
            quorum: engine.quorum,
            groups,
        }
    }
}
