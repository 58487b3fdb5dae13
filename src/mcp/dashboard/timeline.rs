//! The timeline: what this server saw happen in the last minutes (grants, waits, releases,
//! keepalive leases lost, failovers, groups changing state), newest last, in a bounded ring
//! so a busy server keeps a fixed amount of it.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::mcp::contract::rfc3339;

/// How long an event stays on the timeline.
pub const KEPT_FOR: Duration = Duration::from_secs(15 * 60);
/// Most events kept; the oldest go first.
pub const MAX_EVENTS: usize = 2_000;
/// Most events one dashboard answer carries (the newest).
pub const SHOWN: usize = 200;

/// What kind of thing happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    Grant,
    /// An acquire that waited, or was refused because someone else held the lock.
    Wait,
    Release,
    /// A keepalive lease the server could not renew, or that reached max_hold.
    LeaseLost,
    Failover,
    /// A group's state changed: reachable or not, voting, quarantined.
    Group,
}

/// One thing that happened.
#[derive(Debug, Clone, Serialize)]
pub struct Event {
    /// RFC 3339, this server's clock.
    pub at: String,
    #[serde(skip)]
    when: SystemTime,
    pub kind: EventKind,
    /// The resources or the group it is about.
    pub subject: String,
    pub detail: String,
}

/// The ring of recent events.
#[derive(Debug, Default)]
pub struct Timeline {
    events: Mutex<VecDeque<Event>>,
}

impl Timeline {
    pub fn new() -> Timeline {
        Timeline::default()
    }

    /// Adds an event that happened now.
    pub fn record(&self, kind: EventKind, subject: impl Into<String>, detail: impl Into<String>) {
        let when = SystemTime::now();
        let event = Event {
            at: rfc3339(when),
            when,
            kind,
            subject: subject.into(),
            detail: detail.into(),
        };
        let mut events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        events.push_back(event);
        while events.len() > MAX_EVENTS {
            events.pop_front();
        }
    }

    /// The newest [`SHOWN`] events of the last [`KEPT_FOR`], oldest first.
    pub fn recent(&self) -> Vec<Event> {
        let cutoff = SystemTime::now()
            .checked_sub(KEPT_FOR)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let mut events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        while events.front().is_some_and(|event| event.when < cutoff) {
            events.pop_front();
        }
        let skip = events.len().saturating_sub(SHOWN);
        events.iter().skip(skip).cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_the_newest_events_in_order() {
        let timeline = Timeline::new();
        for n in 0..MAX_EVENTS + 10 {
            timeline.record(EventKind::Grant, format!("r{n}"), "");
        }
        let recent = timeline.recent();
        assert_eq!(recent.len(), SHOWN);
        assert_eq!(
            recent.last().map(|e| e.subject.as_str()),
            Some(format!("r{}", MAX_EVENTS + 9).as_str())
        );
        assert_eq!(
            timeline.events.lock().map(|e| e.len()).ok(),
            Some(MAX_EVENTS)
        );
    }
}
