//! The six tools, a file each: acquire, release, extend, status, list and health. Each
//! decodes its arguments, asks the engine, and hands a [`Reply`] (or a [`ToolError`]) to
//! [`finish`]; the descriptions here are written for the language model that picks and calls
//! the tools.

mod acquire;
mod extend;
mod health;
mod list;
mod release;
mod status;

use rmcp::model::{CallToolResult, JsonObject};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, tool, tool_router};

use super::contract::{
    AcquireLockArgs, AcquireLockResult, ClusterHealthArgs, ClusterHealthResult, ExtendLockArgs,
    ExtendLockResult, ListLocksArgs, ListLocksResult, LockStatusArgs, LockStatusResult,
    ReleaseLockArgs, ReleaseLockResult,
};
use super::handler::LockServer;
use super::reply::{ToolError, finish};
use super::schema;
use crate::Error;

const ACQUIRE_LOCK: &str = "Lock a shared resource before changing it; resources: several, all or nothing (one call each can deadlock); permits: N lets N holders share it. \
If acquired: write with fencing_token, release_lock with token within validity_ms (or extend_lock; keepalive: true has the server renew it). \
Else retry after retry_after_ms.";

const RELEASE_LOCK: &str = "Release your lock when done: token, same resource(s). \
released false: the token did not hold it (but groups_maybe_released > 0: it is gone). Safe to repeat.";

const EXTEND_LOCK: &str = "Renew your lock for ttl_ms from now, before validity_ms ends: token, same resource(s). \
extended false: lost; stop writing, reacquire.";

const LOCK_STATUS: &str = "Read one lock: holder, fencing_token, group states, semaphore permits, your keepalive lease (lost: stop writing, reacquire). \
Advisory: never instead of acquire_lock.";

const LIST_LOCKS: &str = "Held locks and semaphores in use, by name prefix: who works on what. Advisory. \
Pass next_cursor, if set, as cursor for more.";

const CLUSTER_HEALTH: &str = "Whether enough Redis groups vote to grant locks, and each group's state. Call after no_quorum.";

#[tool_router(vis = "pub(crate)")]
impl LockServer {
    #[tool(
        name = "acquire_lock",
        description = ACQUIRE_LOCK,
        input_schema = schema::input::<AcquireLockArgs>(),
        output_schema = schema::output::<AcquireLockResult>(),
        annotations(title = "Acquire a lock", read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false)
    )]
    async fn acquire_lock(
        &self,
        arguments: JsonObject,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        finish(self.acquire(arguments, &context).await)
    }

    #[tool(
        name = "release_lock",
        description = RELEASE_LOCK,
        input_schema = schema::input::<ReleaseLockArgs>(),
        output_schema = schema::output::<ReleaseLockResult>(),
        annotations(title = "Release a lock", read_only_hint = false, destructive_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn release_lock(&self, arguments: JsonObject) -> CallToolResult {
        finish(self.release(arguments).await)
    }

    #[tool(
        name = "extend_lock",
        description = EXTEND_LOCK,
        input_schema = schema::input::<ExtendLockArgs>(),
        output_schema = schema::output::<ExtendLockResult>(),
        annotations(title = "Extend a lock", read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn extend_lock(&self, arguments: JsonObject) -> CallToolResult {
        finish(self.extend(arguments).await)
    }

    #[tool(
        name = "lock_status",
        description = LOCK_STATUS,
        input_schema = schema::input::<LockStatusArgs>(),
        output_schema = schema::output::<LockStatusResult>(),
        annotations(title = "Show a lock", read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn lock_status(
        &self,
        arguments: JsonObject,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        finish(self.status(arguments, &context).await)
    }

    #[tool(
        name = "list_locks",
        description = LIST_LOCKS,
        input_schema = schema::input::<ListLocksArgs>(),
        output_schema = schema::output::<ListLocksResult>(),
        annotations(title = "List held locks", read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn list_locks(&self, arguments: JsonObject) -> CallToolResult {
        finish(self.list(arguments).await)
    }

    #[tool(
        name = "cluster_health",
        description = CLUSTER_HEALTH,
        input_schema = schema::input::<ClusterHealthArgs>(),
        output_schema = schema::output::<ClusterHealthResult>(),
        annotations(title = "Lock service health", read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn cluster_health(&self, arguments: JsonObject) -> CallToolResult {
        finish(self.health(arguments).await)
    }
}

impl LockServer {
    /// A refusal at the keepalive cap `limit`, with the cap's value.
    fn over_limit(&self, limit: &'static str, message: String) -> ToolError {
        let capacity = &self.shared().capacity;
        let max = match limit {
            "max_keepalive_per_session" => capacity.max_keepalive_per_session,
            _ => capacity.max_keepalive,
        };
        ToolError::over_limit(limit, max, message)
    }

    /// An engine failure as a tool error, counted in the metrics.
    fn failure(&self, error: Error) -> ToolError {
        let metrics = &self.shared().metrics;
        metrics.votes(error.votes());
        if error.is_unavailable() {
            metrics.quorum_failed();
        }
        ToolError::from(error)
    }
}

/// An owner and purpose as a summary names them.
fn describe_holder(owner: Option<&str>, purpose: Option<&str>) -> String {
    let mut text = owner.unwrap_or("an unnamed owner").to_string();
    if let Some(purpose) = purpose {
        text.push_str(&format!(" ({purpose})"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::acquire::held_reply;
    use super::*;
    use crate::mcp::Limits;
    use crate::mcp::arguments;
    use crate::mcp::reply::Reply;

    /// The tools as a server with the default limits lists them.
    fn listed() -> Vec<rmcp::model::Tool> {
        let mut router = LockServer::tool_router();
        schema::bound(&mut router, &Limits::default());
        router.list_all()
    }

    #[test]
    fn every_tool_has_object_schemas_and_a_description() {
        for tool in listed() {
            assert_eq!(
                tool.input_schema.get("type"),
                Some(&serde_json::json!("object")),
                "{}",
                tool.name
            );
            let output = tool
                .output_schema
                .as_ref()
                .map(|schema| schema.get("type").cloned());
            assert_eq!(
                output,
                Some(Some(serde_json::json!("object"))),
                "{}",
                tool.name
            );
            assert!(
                tool.description.as_ref().is_some_and(|d| d.len() > 80),
                "{}",
                tool.name
            );
            assert!(tool.annotations.is_some(), "{}", tool.name);
        }
        assert_eq!(listed().len(), 6);
    }

    fn structured(reply: Result<Reply, ToolError>) -> (String, serde_json::Value) {
        let result = finish(reply);
        let summary = result
            .content
            .first()
            .and_then(|block| block.as_text())
            .map(|text| text.text.clone())
            .unwrap_or_default();
        (summary, result.structured_content.unwrap_or_default())
    }

    #[test]
    fn a_denied_set_names_the_held_member_and_says_none_was_taken() {
        let target = arguments::target(None, Some(vec!["c".into(), "b".into(), "a".into()]))
            .expect("target");
        let holder = crate::Holder {
            owner: Some("agent-2".into()),
            purpose: None,
            remaining_ms: 900,
        };
        let (summary, result) = structured(held_reply(
            target.clone(),
            None,
            "b".into(),
            Some(holder),
            50,
        ));
        assert_eq!(result["acquired"], serde_json::json!(false));
        assert_eq!(result["resource"], serde_json::json!("a"));
        assert_eq!(result["resources"], serde_json::json!(["a", "b", "c"]));
        assert_eq!(result["held_resource"], serde_json::json!("b"));
        assert_eq!(result["retry_after_ms"], serde_json::json!(900));
        assert!(
            summary.contains("`b`, one of the 3") && summary.contains("none of them"),
            "{summary}"
        );
        // When the groups did not say which member is held, the whole set is named.
        let (summary, result) = structured(held_reply(target, None, "a, b, c".into(), None, 50));
        assert!(result.get("held_resource").is_none(), "{result}");
        assert!(summary.contains("one of `a`, `b`, `c`"), "{summary}");
    }

    #[test]
    fn acquire_lock_takes_permits_and_lock_status_shows_a_semaphore() {
        let tools = listed();
        let tool = |name: &str| {
            tools
                .iter()
                .find(|tool| tool.name == name)
                .cloned()
                .expect("tool")
        };
        let acquire = tool("acquire_lock");
        let permits = &acquire.input_schema["properties"]["permits"];
        assert_eq!(permits["minimum"], serde_json::json!(1), "{permits}");
        assert_eq!(permits["maximum"], serde_json::json!(128), "{permits}");
        let description = acquire.description.as_deref().unwrap_or_default();
        assert!(description.contains("permits: N"), "{description}");
        let output = acquire.output_schema.as_ref().expect("output schema");
        for field in ["permit", "permits", "token"] {
            assert!(
                output["properties"].get(field).is_some(),
                "acquire_lock output lacks {field}"
            );
        }
        let status = tool("lock_status");
        let output = serde_json::Value::Object((*status.output_schema.expect("schema")).clone());
        let text = output.to_string();
        assert!(output["properties"].get("semaphore").is_some(), "{text}");
        for field in [
            "\"permits\"",
            "\"holders\"",
            "\"permit\"",
            "\"remaining_ms\"",
        ] {
            assert!(text.contains(field), "lock_status schema lacks {field}");
        }
    }

    #[test]
    fn a_denied_permit_says_every_permit_is_taken() {
        let target = arguments::target(Some("api".into()), None).expect("target");
        let holder = crate::Holder {
            owner: Some("agent-1".into()),
            purpose: None,
            remaining_ms: 700,
        };
        let (summary, result) =
            structured(held_reply(target, Some(2), "api".into(), Some(holder), 50));
        assert_eq!(result["acquired"], serde_json::json!(false));
        assert_eq!(result["permits"], serde_json::json!(2));
        assert_eq!(result["held_resource"], serde_json::json!("api"));
        assert!(
            summary.contains("2 permits of semaphore `api` is taken")
                && summary.contains("agent-1"),
            "{summary}"
        );
    }

    #[test]
    fn the_lock_tools_take_resource_or_resources_and_describe_both() {
        for tool in listed() {
            if !["acquire_lock", "release_lock", "extend_lock"].contains(&tool.name.as_ref()) {
                continue;
            }
            let properties = &tool.input_schema["properties"];
            assert_eq!(
                properties["resources"]["maxItems"],
                serde_json::json!(64),
                "{}",
                tool.name
            );
            assert_eq!(
                properties["resources"]["minItems"],
                serde_json::json!(1),
                "{}",
                tool.name
            );
            let required = tool
                .input_schema
                .get("required")
                .cloned()
                .unwrap_or_default();
            assert!(
                !required.to_string().contains("resource"),
                "{}: {required}",
                tool.name
            );
            let description = tool.description.as_deref().unwrap_or_default();
            assert!(
                description.contains("resources") || description.contains("resource(s)"),
                "{}: {description}",
                tool.name
            );
            let output = tool.output_schema.as_ref().expect("output schema");
            assert!(
                output["properties"]["resources"]["items"] == serde_json::json!({"type": "string"}),
                "{}: {}",
                tool.name,
                serde_json::Value::Object((**output).clone())
            );
        }
    }
}
