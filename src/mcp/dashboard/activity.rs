//! What the tool calls this server runs add to the dashboard: waiters while an
//! `acquire_lock` with a `wait_ms` runs, and grants, waits and releases on the timeline. Read
//! from each call's arguments and structured result, so the tools themselves stay unaware.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};

use super::timeline::{EventKind, Timeline};
use super::waiting::{WaitGuard, Waiting};

/// The resources a call names: `resource`, or every one of `resources`.
fn resources(arguments: &Map<String, Value>) -> Vec<String> {
    if let Some(Value::String(resource)) = arguments.get("resource") {
        return vec![resource.clone()];
    }
    match arguments.get("resources") {
        Some(Value::Array(names)) => names
            .iter()
            .filter_map(|name| name.as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    }
}

/// Before a call: an `acquire_lock` that may wait is counted as a waiter until it returns.
pub fn before(
    waiting: &Arc<Waiting>,
    tool: &str,
    arguments: Option<&Map<String, Value>>,
) -> Option<WaitGuard> {
    let arguments = arguments?;
    let waits = arguments
        .get("wait_ms")
        .and_then(Value::as_i64)
        .is_some_and(|ms| ms > 0);
    (tool == "acquire_lock" && waits).then(|| waiting.start(resources(arguments)))
}

/// After a call: what it did, on the timeline. Failed calls and reads add nothing.
pub fn after(
    timeline: &Timeline,
    tool: &str,
    arguments: Option<&Map<String, Value>>,
    result: Option<&Value>,
    elapsed: Duration,
) {
    let (Some(arguments), Some(result)) = (arguments, result) else {
        return;
    };
    let subject = match result.get("resources") {
        Some(Value::Array(names)) => names
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(", "),
        _ => resources(arguments).join(", "),
    };
    let owner = arguments
        .get("owner")
        .and_then(Value::as_str)
        .unwrap_or("unnamed");
    match tool {
        "acquire_lock" => match result.get("acquired").and_then(Value::as_bool) {
            Some(true) => {
                let fence = result
                    .get("fencing_token")
                    .and_then(Value::as_u64)
                    .map(|f| format!(", fencing token {f}"))
                    .unwrap_or_default();
                let waited = if elapsed >= Duration::from_millis(100) {
                    format!(" after {} ms", elapsed.as_millis())
                } else {
                    String::new()
                };
                timeline.record(
                    EventKind::Grant,
                    subject,
                    format!("granted to {owner}{waited}{fence}"),
                );
            }
            Some(false) => {
                let holder = result
                    .get("holder")
                    .and_then(|h| h.get("owner"))
                    .and_then(Value::as_str)
                    .unwrap_or("another holder");
                timeline.record(
                    EventKind::Wait,
                    subject,
                    format!(
                        "{owner} waited {} ms; held by {holder}",
                        elapsed.as_millis()
                    ),
                );
            }
            None => {}
        },
        "release_lock" if result.get("released").and_then(Value::as_bool) == Some(true) => {
            let groups = result
                .get("groups_released")
                .and_then(Value::as_u64)
                .unwrap_or(0);
            timeline.record(
                EventKind::Release,
                subject,
                format!("released on {groups} groups"),
            );
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }

    #[test]
    fn grants_refusals_and_releases_reach_the_timeline_and_waiters_are_counted() {
        let timeline = Timeline::new();
        let waiting = Arc::new(Waiting::new());
        let args = object(json!({"resource": "db", "owner": "ana", "wait_ms": 500}));
        let guard = before(&waiting, "acquire_lock", Some(&args));
        assert_eq!(waiting.snapshot(5), vec![("db".to_string(), 1)]);
        drop(guard);
        let granted = json!({"acquired": true, "resources": ["db"], "fencing_token": 7});
        after(
            &timeline,
            "acquire_lock",
            Some(&args),
            Some(&granted),
            Duration::ZERO,
        );
        let refused = json!({"acquired": false, "resources": ["db"], "holder": {"owner": "bo"}});
        after(
            &timeline,
            "acquire_lock",
            Some(&args),
            Some(&refused),
            Duration::ZERO,
        );
        let released = json!({"released": true, "resources": ["db"], "groups_released": 5});
        after(
            &timeline,
            "release_lock",
            Some(&args),
            Some(&released),
            Duration::ZERO,
        );
        let events = timeline.recent();
        let kinds: Vec<EventKind> = events.iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            [EventKind::Grant, EventKind::Wait, EventKind::Release]
        );
        assert_eq!(events[0].detail, "granted to ana, fencing token 7");
        assert!(
            events[1].detail.contains("held by bo"),
            "{}",
            events[1].detail
        );
    }
}
