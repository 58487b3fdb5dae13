//! The one place tool results are built: structured content (which the tool's output schema
//! describes) plus a one-line text summary for the model, or a tool error.
//!
//! A tool error carries its [`ErrorKind`] twice, for programs and for models: as structured
//! content `{"error": {"kind", "field"?, "limit"?, "max"?}}` (which every output schema admits
//! beside a result, see `schema`), and as the first word of its one text block, followed by
//! what went wrong and what to do next.

use rmcp::model::{CallToolResult, ContentBlock};
use serde::Serialize;

use super::contract::{ErrorKind, ErrorResult, ErrorView};
use crate::{Error, Vote};

/// What a tool hands back when it worked (including "held by someone else", which is a
/// normal answer, not a failure).
pub struct Reply {
    summary: String,
    structured: serde_json::Value,
}

impl Reply {
    /// `value` becomes the structured content; `summary` the text block (kept to one line).
    pub fn new<T: Serialize>(summary: impl Into<String>, value: &T) -> Result<Reply, ToolError> {
        let structured = serde_json::to_value(value)
            .map_err(|error| ToolError::internal(format!("cannot encode the result: {error}")))?;
        Ok(Reply {
            summary: one_line(summary.into()),
            structured,
        })
    }
}

/// Why a tool call failed, as the agent reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolError {
    view: ErrorView,
    message: String,
}

impl ToolError {
    fn new(kind: ErrorKind, message: impl Into<String>) -> ToolError {
        ToolError {
            view: ErrorView {
                kind: kind.as_str(),
                ..ErrorView::default()
            },
            message: message.into(),
        }
    }

    /// An argument is wrong: `field` names it (as the agent spelled it, `resources[2]` say).
    pub fn invalid_input(field: impl Into<String>, message: impl Into<String>) -> ToolError {
        let mut error = ToolError::new(ErrorKind::InvalidInput, message);
        error.view.field = Some(field.into()).filter(|field: &String| !field.is_empty());
        error
    }

    /// `field` asks for a lease longer than `max_ms` (when known) allows.
    pub fn held_too_long(
        field: &str,
        max_ms: Option<u64>,
        message: impl Into<String>,
    ) -> ToolError {
        let mut error = ToolError::new(ErrorKind::HeldTooLong, message);
        error.view.field = Some(field.to_string());
        error.view.max = max_ms;
        error
    }

    /// The capacity cap `limit`, of value `max`, is reached.
    pub fn over_limit(limit: &'static str, max: usize, message: impl Into<String>) -> ToolError {
        let mut error = ToolError::new(ErrorKind::OverLimit, message);
        error.view.limit = Some(limit);
        error.view.max = u64::try_from(max).ok();
        error
    }

    /// The session ended (or the server is shutting down) during the call.
    pub fn session_closed(message: impl Into<String>) -> ToolError {
        ToolError::new(ErrorKind::SessionClosed, message)
    }

    /// A fault of the server.
    pub fn internal(message: impl Into<String>) -> ToolError {
        ToolError::new(
            ErrorKind::Internal,
            format!("internal server error: {}", message.into()),
        )
    }

    pub fn kind(&self) -> &'static str {
        self.view.kind
    }

    pub fn field(&self) -> Option<&str> {
        self.view.field.as_deref()
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

impl From<Error> for ToolError {
    /// Engine errors that are failures for every tool. `Held` and `NotHeld` are normal answers
    /// that the tools turn into results before they get here.
    fn from(error: Error) -> ToolError {
        match &error {
            // The engine refuses a TTL above the masters' lock policy (or its own bound, which
            // this server's limits never exceed) as an invalid `ttl`; it names the policy only
            // in its text.
            Error::InvalidInput {
                field: "ttl",
                reason,
            } => ToolError::held_too_long(
                "ttl_ms",
                policy_in(reason),
                format!("`ttl_ms` is too long: {reason}"),
            ),
            Error::InvalidInput { field, reason } => {
                let field = argument_name(field);
                ToolError::invalid_input(field, format!("invalid argument `{field}`: {reason}"))
            }
            Error::Unavailable {
                needed,
                total,
                votes,
                ..
            } => match above_policy(votes, *needed, *total) {
                Some(max_ttl_ms) => ToolError::held_too_long(
                    "ttl_ms",
                    Some(max_ttl_ms),
                    format!(
                        "ttl_ms is above the masters' lock policy of {max_ttl_ms} ms, so too few groups would grant it ({error}); use ttl_ms of at most {max_ttl_ms}, or keepalive: true for long work"
                    ),
                ),
                None => ToolError::new(
                    ErrorKind::NoQuorum,
                    format!(
                        "{error}. This is an infrastructure failure, not contention: nobody was granted the lock by this call. Call cluster_health, then retry in a few seconds"
                    ),
                ),
            },
            Error::ListingUnavailable { .. } => ToolError::new(
                ErrorKind::NoQuorum,
                format!(
                    "{error}. This is an infrastructure failure. Call cluster_health, then retry in a few seconds"
                ),
            ),
            Error::Expired { .. } => ToolError::new(ErrorKind::Expired, error.to_string()),
            _ => ToolError::new(ErrorKind::Internal, error.to_string()),
        }
    }
}

/// When the groups that refused a TTL above their lock policy are what kept a majority from
/// granting (the other failures alone would not have), the lowest such policy.
fn above_policy(votes: &[crate::GroupVote], needed: usize, total: usize) -> Option<u64> {
    let policies: Vec<u64> = votes
        .iter()
        .filter_map(|vote| match vote.vote {
            Vote::AbovePolicy { max_ttl_ms } => Some(max_ttl_ms),
            _ => None,
        })
        .collect();
    let other_failures = votes
        .iter()
        .filter(|vote| vote.vote.is_failure() && !matches!(vote.vote, Vote::AbovePolicy { .. }))
        .count();
    let lowest = policies.iter().min().copied()?;
    (total.saturating_sub(other_failures) >= needed).then_some(lowest)
}

/// The policy in the engine's refusal "… the lock policy of the masters (30000 ms) …".
fn policy_in(reason: &str) -> Option<u64> {
    let (_, after) = reason.split_once("lock policy of the masters (")?;
    after.split_once(" ms)")?.0.parse().ok()
}

/// The engine names durations after its own options; agents know them by argument name.
fn argument_name(engine_field: &str) -> &str {
    match engine_field {
        "ttl" => "ttl_ms",
        "wait" => "wait_ms",
        other => other,
    }
}

fn one_line(text: String) -> String {
    if text.contains(['\n', '\r']) {
        text.replace(['\n', '\r'], " ")
    } else {
        text
    }
}

/// Turns a tool's outcome into the MCP result.
pub fn finish(outcome: Result<Reply, ToolError>) -> CallToolResult {
    match outcome {
        Ok(reply) => {
            let mut result = CallToolResult::structured(reply.structured);
            result.content = vec![ContentBlock::text(reply.summary)];
            result
        }
        Err(error) => {
            let text = one_line(format!("{}: {}", error.view.kind, error.message));
            let structured = serde_json::to_value(ErrorResult { error: error.view })
                .unwrap_or(serde_json::Value::Null);
            let mut result = CallToolResult::error(vec![ContentBlock::text(text)]);
            result.structured_content = Some(structured).filter(|value| !value.is_null());
            result
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::GroupVote;

    fn vote(vote: Vote) -> GroupVote {
        GroupVote {
            group: "g".into(),
            vote,
        }
    }

    #[test]
    fn a_tool_error_carries_its_kind_as_structured_content_and_as_the_first_word() {
        let result = finish(Err(ToolError::over_limit(
            "max_keepalive",
            4096,
            "refused: too many",
        )));
        assert_eq!(result.is_error, Some(true));
        assert_eq!(
            result.structured_content,
            Some(
                serde_json::json!({"error": {"kind": "over_limit", "limit": "max_keepalive", "max": 4096}})
            )
        );
        let text = result.content[0].as_text().map(|t| t.text.clone());
        assert_eq!(text.as_deref(), Some("over_limit: refused: too many"));
    }

    #[test]
    fn a_session_that_closes_during_a_keepalive_acquire_is_a_session_closed_error() {
        let result = finish(Err(ToolError::session_closed("the session ended")));
        assert_eq!(
            result.structured_content,
            Some(serde_json::json!({"error": {"kind": "session_closed"}}))
        );
    }

    #[test]
    fn an_engine_failure_outside_the_contract_is_an_internal_error() {
        let error = ToolError::from(Error::Setup {
            group: "g1".into(),
            message: "bad certificate".into(),
        });
        assert_eq!(error.kind(), "internal");
        assert!(error.message().contains("bad certificate"));
    }

    #[test]
    fn a_ttl_above_the_masters_policy_is_held_too_long_with_the_policy() {
        let error = ToolError::from(Error::InvalidInput {
            field: "ttl",
            reason: "90000 ms is above the lock policy of the masters (30000 ms); ask for at most that and renew, or raise the policy with `quorumlock admit`".into(),
        });
        assert_eq!(
            (error.kind(), error.field(), error.view.max),
            ("held_too_long", Some("ttl_ms"), Some(30_000))
        );
    }

    #[test]
    fn groups_refusing_a_ttl_above_their_policy_make_held_too_long_only_when_they_cost_the_majority()
     {
        let above = || vote(Vote::AbovePolicy { max_ttl_ms: 30_000 });
        let down = || vote(Vote::Timeout);
        let granted = || vote(Vote::Granted);
        // Three of five above the policy: without them a majority would have answered.
        let votes = [above(), above(), above(), granted(), granted()];
        assert_eq!(above_policy(&votes, 3, 5), Some(30_000));
        // Three down and one above: the outage alone loses the majority.
        let votes = [down(), down(), down(), above(), granted()];
        assert_eq!(above_policy(&votes, 3, 5), None);
        let votes = [down(), down(), down(), granted(), granted()];
        assert_eq!(above_policy(&votes, 3, 5), None);
    }
}
