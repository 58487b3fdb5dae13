//! Decoding tool arguments, and the bounds the server puts on them.
//!
//! rmcp's own decoding reports a wrong type without saying which field it was in; an agent
//! needs the field name to fix its call, so arguments go through `serde_path_to_error` here
//! and every error starts with the field it concerns.

use std::time::Duration;

use rmcp::model::JsonObject;
use serde::de::DeserializeOwned;

use super::reply::ToolError;
use super::{Limits, MAX_WAIT};
use crate::MAX_LIST_LIMIT;
use crate::validate_resource;

/// Longest token accepted before the engine sees it (tokens are 32 hex digits).
const MAX_TOKEN_BYTES: usize = 64;

/// Decodes a tool's arguments; a missing, unknown or mistyped field is named in the error.
pub fn decode<T: DeserializeOwned>(arguments: JsonObject) -> Result<T, ToolError> {
    let value = serde_json::Value::Object(arguments);
    serde_path_to_error::deserialize(value).map_err(|error| {
        let field = error.path().to_string();
        let inner = error.into_inner().to_string();
        // Missing and unknown fields are reported at the root, and serde names them itself.
        if field.is_empty() || field == "." {
            ToolError::invalid_arguments(format!("invalid arguments: {inner}"))
        } else {
            ToolError::invalid_arguments(format!("invalid argument `{field}`: {inner}"))
        }
    })
}

/// Checks a resource name with the engine's rules, naming the field.
pub fn resource(name: &str) -> Result<(), ToolError> {
    validate_resource(name).map_err(ToolError::from)
}

/// Checks a token's shape before it travels anywhere.
pub fn token(token: &str) -> Result<(), ToolError> {
    if token.is_empty() {
        return Err(ToolError::invalid_arguments(
            "invalid argument `token`: must not be empty; pass the token acquire_lock returned",
        ));
    }
    if token.len() > MAX_TOKEN_BYTES {
        return Err(ToolError::invalid_arguments(format!(
            "invalid argument `token`: is {} bytes long; tokens from acquire_lock are 32 hex digits",
            token.len()
        )));
    }
    Ok(())
}

impl Limits {
    /// A TTL within the server's bounds; `field` names the argument in the error.
    pub fn ttl(&self, field: &str, ttl_ms: i64) -> Result<Duration, ToolError> {
        let (min, max) = (self.min_ttl.as_millis(), self.max_ttl.as_millis());
        match u64::try_from(ttl_ms) {
            Ok(ms) if (min..=max).contains(&u128::from(ms)) => Ok(Duration::from_millis(ms)),
            _ if ttl_ms <= 0 => Err(ToolError::invalid_arguments(format!(
                "invalid argument `{field}`: {ttl_ms} is not a positive number of milliseconds; use {min} to {max}"
            ))),
            _ if i128::from(ttl_ms) < min as i128 => Err(ToolError::invalid_arguments(format!(
                "invalid argument `{field}`: {ttl_ms} ms is below this server's min_ttl_ms of {min} (a margin against clock drift and process pauses); use {min} to {max}"
            ))),
            _ => Err(ToolError::invalid_arguments(format!(
                "invalid argument `{field}`: {ttl_ms} ms is above this server's max_ttl_ms of {max}; use {min} to {max}, or keepalive: true for long work"
            ))),
        }
    }

    /// A wait between zero and [`MAX_WAIT`].
    pub fn wait(&self, field: &str, wait_ms: i64) -> Result<Duration, ToolError> {
        let max = MAX_WAIT.as_millis();
        match u64::try_from(wait_ms) {
            Ok(ms) if u128::from(ms) <= max => Ok(Duration::from_millis(ms)),
            _ => Err(ToolError::invalid_arguments(format!(
                "invalid argument `{field}`: {wait_ms} is outside 0 to {max} milliseconds; use 0 and retry after retry_after_ms for longer waits"
            ))),
        }
    }
}

/// A `list_locks` limit between 1 and the engine's maximum.
pub fn list_limit(limit: i64) -> Result<usize, ToolError> {
    match usize::try_from(limit) {
        Ok(limit) if (1..=MAX_LIST_LIMIT).contains(&limit) => Ok(limit),
        _ => Err(ToolError::invalid_arguments(format!(
            "invalid argument `limit`: {limit} is outside 1 to {MAX_LIST_LIMIT}"
        ))),
    }
}

/// A `list_locks` prefix: printable text.
pub fn prefix(prefix: &str) -> Result<(), ToolError> {
    if prefix.chars().any(char::is_control) {
        return Err(ToolError::invalid_arguments(
            "invalid argument `prefix`: contains a control character; use printable text",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::contract::AcquireLockArgs;
    use serde_json::json;

    fn object(value: serde_json::Value) -> JsonObject {
        match value {
            serde_json::Value::Object(map) => map,
            _ => JsonObject::new(),
        }
    }

    fn decode_error(value: serde_json::Value) -> String {
        match decode::<AcquireLockArgs>(object(value)) {
            Ok(args) => format!("decoded unexpectedly: {args:?}"),
            Err(error) => error.message().to_string(),
        }
    }

    #[test]
    fn every_decoding_error_names_the_field() {
        assert!(decode_error(json!({})).contains("`resource`"));
        assert!(decode_error(json!({"resource": 5})).contains("`resource`"));
        assert!(decode_error(json!({"resource": "a", "ttl_ms": "x"})).contains("`ttl_ms`"));
        assert!(decode_error(json!({"resource": "a", "ttl_ms": 1.5})).contains("`ttl_ms`"));
        assert!(decode_error(json!({"resource": "a", "keepalive": "yes"})).contains("`keepalive`"));
        assert!(decode_error(json!({"resource": "a", "ttl": 5})).contains("`ttl`"));
    }

    #[test]
    fn ttl_bounds_are_stated() {
        let limits = Limits::default();
        assert_eq!(
            limits.ttl("ttl_ms", 5000).ok(),
            Some(Duration::from_secs(5))
        );
        for (bad, expected) in [
            (0, "positive"),
            (-5, "positive"),
            (4999, "min_ttl_ms"),
            (3_600_001, "max_ttl_ms"),
            (i64::MAX, "max_ttl_ms"),
        ] {
            let message = limits
                .ttl("ttl_ms", bad)
                .err()
                .map(|e| e.message().to_string())
                .unwrap_or_default();
            assert!(
                message.contains("`ttl_ms`") && message.contains(expected),
                "{bad}: {message}"
            );
        }
        assert!(limits.wait("wait_ms", -1).is_err());
        assert!(limits.wait("wait_ms", 60_001).is_err());
        assert!(list_limit(0).is_err());
    }
}
