//! Decoding tool arguments, and the bounds the server puts on them.
//!
//! rmcp's own decoding reports a wrong type without saying which field it was in; an agent
//! needs the field name to fix its call, so arguments go through `serde_path_to_error` here
//! and every error is `invalid_input` naming the field it concerns, in its text and as
//! `error.field`. A TTL above the server's maximum is `held_too_long` instead.

use std::time::Duration;

use rmcp::model::JsonObject;
use serde::de::DeserializeOwned;

use super::reply::ToolError;
use super::{Limits, MAX_WAIT};
use crate::validate_resource;
use crate::{Error, MAX_LIST_LIMIT, MAX_PERMITS, MAX_SET_RESOURCES};

/// Longest token accepted before the engine sees it (tokens are 32 hex digits).
const MAX_TOKEN_BYTES: usize = 64;

/// Decodes a tool's arguments; a missing, unknown or mistyped field is named in the error.
pub fn decode<T: DeserializeOwned>(arguments: JsonObject) -> Result<T, ToolError> {
    let value = serde_json::Value::Object(arguments);
    serde_path_to_error::deserialize(value).map_err(|error| {
        let field = error.path().to_string();
        let inner = error.into_inner().to_string();
        // Missing and unknown fields are reported at the root, and serde names them itself,
        // in backquotes: "missing field `token`", "unknown field `ttl`, expected one of …".
        if field.is_empty() || field == "." {
            let named = inner.split('`').nth(1).unwrap_or_default().to_string();
            ToolError::invalid_input(named, format!("invalid arguments: {inner}"))
        } else {
            let message = format!("invalid argument `{field}`: {inner}");
            ToolError::invalid_input(field, message)
        }
    })
}

/// Checks a resource name with the engine's rules, naming the field.
pub fn resource(name: &str) -> Result<(), ToolError> {
    validate_resource(name).map_err(ToolError::from)
}

/// What `acquire_lock`, `release_lock` and `extend_lock` act on: one resource (`resource`),
/// or several taken all or nothing (`resources`). The caller names it with exactly one of the
/// two; `acquire_lock` may add `permits` to a `resource`, which then names a semaphore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The names: the one resource, or the set sorted into the engine's canonical order.
    pub names: Vec<String>,
    /// True when the caller passed `resources` (even a list of one).
    pub set: bool,
}

impl Target {
    /// The resource, or the first of the set.
    pub fn first(&self) -> &str {
        &self.names[0]
    }

    /// How summaries name it: `` `a` `` or `` `a`, `b`, `c` ``.
    pub fn label(&self) -> String {
        self.names
            .iter()
            .map(|name| format!("`{name}`"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Checks `resource` and `resources` (exactly one of them; every name with the engine's rules,
/// none twice, at most [`MAX_SET_RESOURCES`]), naming the field that is wrong.
pub fn target(
    resource: Option<String>,
    resources: Option<Vec<String>>,
) -> Result<Target, ToolError> {
    match (resource, resources) {
        (Some(_), Some(_)) => Err(ToolError::invalid_input(
            "resource",
            "invalid arguments `resource` and `resources`: pass exactly one of them: `resource` for one lock, or `resources` for several taken together, all or nothing",
        )),
        (None, None) => Err(ToolError::invalid_input(
            "resource",
            "invalid arguments: missing `resource` or `resources`: pass exactly one of them: `resource` (a name) for one lock, or `resources` (a list of names) for several taken together, all or nothing",
        )),
        (Some(name), None) => {
            self::resource(&name)?;
            Ok(Target {
                names: vec![name],
                set: false,
            })
        }
        (None, Some(names)) => set(names),
    }
}

fn set(mut names: Vec<String>) -> Result<Target, ToolError> {
    if names.is_empty() {
        return Err(ToolError::invalid_input(
            "resources",
            "invalid argument `resources`: is empty; name at least one resource",
        ));
    }
    if names.len() > MAX_SET_RESOURCES {
        return Err(ToolError::invalid_input(
            "resources",
            format!(
                "invalid argument `resources`: names {} resources; one lock takes at most {MAX_SET_RESOURCES}. Split the work, or lock fewer, coarser names",
                names.len()
            ),
        ));
    }
    for (index, name) in names.iter().enumerate() {
        validate_resource(name).map_err(|error| match error {
            Error::InvalidInput { reason, .. } => ToolError::invalid_input(
                format!("resources[{index}]"),
                format!("invalid argument `resources[{index}]`: {reason}"),
            ),
            other => ToolError::from(other),
        })?;
    }
    names.sort();
    if let Some(twice) = names.windows(2).find(|pair| pair[0] == pair[1]) {
        return Err(ToolError::invalid_input(
            "resources",
            format!(
                "invalid argument `resources`: names `{}` twice; name each resource once",
                twice[0]
            ),
        ));
    }
    Ok(Target { names, set: true })
}

/// Checks `permits` of `acquire_lock`: 1 to [`MAX_PERMITS`], and only with `resource`.
pub fn permits(permits: Option<i64>, target: &Target) -> Result<Option<u32>, ToolError> {
    let Some(permits) = permits else {
        return Ok(None);
    };
    if target.set {
        return Err(ToolError::invalid_input(
            "permits",
            "invalid argument `permits`: takes one permit of one semaphore; pass it with `resource` (the semaphore's name), not with `resources`",
        ));
    }
    match u32::try_from(permits) {
        Ok(count) if (1..=MAX_PERMITS).contains(&count) => Ok(Some(count)),
        _ => Err(ToolError::invalid_input(
            "permits",
            format!(
                "invalid argument `permits`: {permits} is outside 1 to {MAX_PERMITS}; pass the semaphore's permit count, the same as every other caller"
            ),
        )),
    }
}

/// Checks a token's shape before it travels anywhere.
pub fn token(token: &str) -> Result<(), ToolError> {
    if token.is_empty() {
        return Err(ToolError::invalid_input(
            "token",
            "invalid argument `token`: must not be empty; pass the token acquire_lock returned",
        ));
    }
    if token.len() > MAX_TOKEN_BYTES {
        return Err(ToolError::invalid_input(
            "token",
            format!(
                "invalid argument `token`: is {} bytes long; tokens from acquire_lock are 32 hex digits",
                token.len()
            ),
        ));
    }
    Ok(())
}

impl Limits {
    /// A TTL within the server's bounds; `field` names the argument in the error.
    pub fn ttl(&self, field: &str, ttl_ms: i64) -> Result<Duration, ToolError> {
        let (min, max) = (self.min_ttl.as_millis(), self.max_ttl.as_millis());
        match u64::try_from(ttl_ms) {
            Ok(ms) if (min..=max).contains(&u128::from(ms)) => Ok(Duration::from_millis(ms)),
            _ if ttl_ms <= 0 => Err(ToolError::invalid_input(
                field,
                format!(
                    "invalid argument `{field}`: {ttl_ms} is not a positive number of milliseconds; use {min} to {max}"
                ),
            )),
            _ if i128::from(ttl_ms) < min as i128 => Err(ToolError::invalid_input(
                field,
                format!(
                    "invalid argument `{field}`: {ttl_ms} ms is below this server's min_ttl_ms of {min} (a margin against clock drift and process pauses); use {min} to {max}"
                ),
            )),
            _ => Err(ToolError::held_too_long(
                field,
                u64::try_from(max).ok(),
                format!(
                    "`{field}` {ttl_ms} ms is above this server's max_ttl_ms of {max}; use {min} to {max}, or keepalive: true for long work"
                ),
            )),
        }
    }

    /// A wait between zero and [`MAX_WAIT`].
    pub fn wait(&self, field: &str, wait_ms: i64) -> Result<Duration, ToolError> {
        let max = MAX_WAIT.as_millis();
        match u64::try_from(wait_ms) {
            Ok(ms) if u128::from(ms) <= max => Ok(Duration::from_millis(ms)),
            _ => Err(ToolError::invalid_input(
                field,
                format!(
                    "invalid argument `{field}`: {wait_ms} is outside 0 to {max} milliseconds; use 0 and retry after retry_after_ms for longer waits"
                ),
            )),
        }
    }
}

/// A `list_locks` limit between 1 and the engine's maximum.
pub fn list_limit(limit: i64) -> Result<usize, ToolError> {
    match usize::try_from(limit) {
        Ok(limit) if (1..=MAX_LIST_LIMIT).contains(&limit) => Ok(limit),
        _ => Err(ToolError::invalid_input(
            "limit",
            format!("invalid argument `limit`: {limit} is outside 1 to {MAX_LIST_LIMIT}"),
        )),
    }
}

/// A `list_locks` cursor: absent, or non-empty printable text (the engine checks the rest).
pub fn cursor(cursor: Option<&str>) -> Result<Option<&str>, ToolError> {
    match cursor {
        Some(text) if text.is_empty() || text.chars().any(char::is_control) => {
            Err(ToolError::invalid_input(
                "cursor",
                "invalid argument `cursor`: pass the next_cursor of the previous list_locks result unchanged, or leave cursor out for the first page",
            ))
        }
        cursor => Ok(cursor),
    }
}

/// A `list_locks` prefix: printable text.
pub fn prefix(prefix: &str) -> Result<(), ToolError> {
    if prefix.chars().any(char::is_control) {
        return Err(ToolError::invalid_input(
            "prefix",
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
        assert!(decode_error(json!({"resource": 5})).contains("`resource`"));
        assert!(decode_error(json!({"resources": "a"})).contains("`resources`"));
        assert!(decode_error(json!({"resources": ["a", 5]})).contains("`resources[1]`"));
        assert!(decode_error(json!({"resource": "a", "ttl_ms": "x"})).contains("`ttl_ms`"));
        assert!(decode_error(json!({"resource": "a", "ttl_ms": 1.5})).contains("`ttl_ms`"));
        assert!(decode_error(json!({"resource": "a", "keepalive": "yes"})).contains("`keepalive`"));
        assert!(decode_error(json!({"resource": "a", "ttl": 5})).contains("`ttl`"));
    }

    fn target_error(resource: Option<&str>, resources: Option<&[&str]>) -> String {
        let owned = |names: &[&str]| names.iter().map(|n| n.to_string()).collect();
        match target(resource.map(str::to_string), resources.map(owned)) {
            Ok(target) => format!("accepted: {target:?}"),
            Err(error) => error.message().to_string(),
        }
    }

    #[test]
    fn a_target_is_one_resource_or_a_sorted_set_and_a_bad_one_names_its_field() {
        let one = target(Some("a".into()), None).expect("one");
        assert_eq!((one.names, one.set), (vec!["a".to_string()], false));
        let set = target(None, Some(vec!["c".into(), "a".into(), "b".into()])).expect("set");
        assert_eq!((set.first(), set.set), ("a", true));
        assert_eq!(set.label(), "`a`, `b`, `c`");

        let both = target_error(Some("a"), Some(&["b"]));
        assert!(both.contains("`resource` and `resources`"), "{both}");
        assert!(both.contains("exactly one"), "{both}");
        let neither = target_error(None, None);
        assert!(neither.contains("`resource` or `resources`"), "{neither}");
        let empty = target_error(None, Some(&[]));
        assert!(
            empty.contains("`resources`") && empty.contains("empty"),
            "{empty}"
        );
        let twice = target_error(None, Some(&["a", "b", "a"]));
        assert!(
            twice.contains("`resources`") && twice.contains("`a` twice"),
            "{twice}"
        );
        let bad = target_error(None, Some(&["ok", "bad\nname"]));
        assert!(bad.contains("`resources[1]`"), "{bad}");
        assert!(target_error(Some(""), None).contains("`resource`"));
        let many: Vec<String> = (0..=MAX_SET_RESOURCES).map(|i| i.to_string()).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let too_many = target_error(None, Some(&many));
        assert!(
            too_many.contains("`resources`") && too_many.contains("at most 64"),
            "{too_many}"
        );
        assert!(
            target(
                None,
                Some(many[..64].iter().map(|n| n.to_string()).collect())
            )
            .is_ok()
        );
    }

    #[test]
    fn permits_are_one_to_128_and_only_with_one_resource() {
        let one = target(Some("api".into()), None).expect("one");
        assert_eq!(permits(None, &one).ok(), Some(None));
        assert_eq!(permits(Some(3), &one).ok(), Some(Some(3)));
        assert_eq!(permits(Some(128), &one).ok(), Some(Some(128)));
        for bad in [0, -1, 129, i64::MAX] {
            let message = permits(Some(bad), &one)
                .err()
                .map(|e| e.message().to_string())
                .unwrap_or_default();
            assert!(
                message.contains("`permits`") && message.contains("1 to 128"),
                "{bad}: {message}"
            );
        }
        let set = target(None, Some(vec!["a".into(), "b".into()])).expect("set");
        let message = permits(Some(2), &set)
            .err()
            .map(|e| e.message().to_string())
            .unwrap_or_default();
        assert!(
            message.contains("`permits`") && message.contains("`resources`"),
            "{message}"
        );
        assert!(decode_error(json!({"resource": "a", "permits": "2"})).contains("`permits`"));
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
