//! The one place tool results are built: structured content (which the tool's output schema
//! describes) plus a one-line text summary for the model, or a tool error whose text says what
//! went wrong and what to do next.
//!
//! Tool errors carry text only: clients may check `structuredContent` against the output
//! schema, and an error has no business pretending to be a result.

use rmcp::model::{CallToolResult, ContentBlock};
use serde::Serialize;

use crate::Error;

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
    kind: ToolErrorKind,
    message: String,
}

/// Failure classes, for metrics and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolErrorKind {
    /// The arguments were wrong; the message names the field.
    InvalidArguments,
    /// Too few groups answered: infrastructure, not contention.
    Unavailable,
    /// Anything else the engine or the server reported.
    Failed,
}

impl ToolError {
    pub fn invalid_arguments(message: impl Into<String>) -> ToolError {
        ToolError {
            kind: ToolErrorKind::InvalidArguments,
            message: message.into(),
        }
    }

    pub fn failed(message: impl Into<String>) -> ToolError {
        ToolError {
            kind: ToolErrorKind::Failed,
            message: message.into(),
        }
    }

    pub fn internal(message: impl Into<String>) -> ToolError {
        ToolError::failed(format!("internal server error: {}", message.into()))
    }

    pub fn kind(&self) -> ToolErrorKind {
        self.kind
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
            Error::InvalidInput { field, reason } => ToolError::invalid_arguments(format!(
                "invalid argument `{}`: {reason}",
                argument_name(field)
            )),
            Error::Unavailable { .. } => ToolError {
                kind: ToolErrorKind::Unavailable,
                message: format!(
                    "{error}. This is an infrastructure failure, not contention: nobody was granted the lock by this call. Call cluster_health, then retry in a few seconds"
                ),
            },
            Error::ListingUnavailable { .. } => ToolError {
                kind: ToolErrorKind::Unavailable,
                message: format!(
                    "{error}. This is an infrastructure failure. Call cluster_health, then retry in a few seconds"
                ),
            },
            _ => ToolError::failed(error.to_string()),
        }
    }
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
        Err(error) => CallToolResult::error(vec![ContentBlock::text(one_line(error.message))]),
    }
}
