//! The schemas a client lists: generated from the contract's types, compacted, and bounded by
//! this server's own limits.
//!
//! Every agent loads the tool list into its context each time it starts, so the schemas carry
//! the contract and nothing else. Compacting keeps every field, type, enum value, bound and
//! `required` list, and drops what a validator and a model do not need: `$schema` (MCP's
//! default dialect is JSON Schema 2020-12), titles, Rust integer formats, `null` as a type of
//! a field that is simply left out, and `$defs` (inlined). Input schemas leave out
//! `additionalProperties: false`: the server refuses an unknown argument itself, naming it,
//! and some model APIs (Gemini's) refuse a tool whose schema has the keyword. Output schemas drop descriptions
//! as well (docs/mcp.md describes every field); input schemas keep theirs, on one line.
//!
//! Numbers in the input schemas (the TTL bounds and default, the most `wait_ms`, `limit`,
//! `permits` and `resources`) are written here from the server's [`Limits`] and the engine's
//! constants, so they change when the config does.
//!
//! Below the root, an output schema leaves out the `type` that `properties` (an object),
//! `items` (an array) or `enum` (a string) already implies.
//!
//! Output schemas admit a tool error's structured content too: `{"error": {"kind", …}}`
//! (docs/mcp.md, "Errors"). Clients check structured content against the output schema even
//! on errors (the TypeScript SDK does), so a result's `required` fields become one branch of an
//! `anyOf` whose other branch requires `error`.

use std::sync::Arc;

use rmcp::handler::server::common::{schema_for_input, schema_for_output};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::model::JsonObject;
use schemars::JsonSchema;
use serde_json::{Map, Value, json};

use super::contract::DEFAULT_LIST_LIMIT;
use super::{Limits, MAX_WAIT};
use crate::{MAX_LIST_LIMIT, MAX_PERMITS, MAX_SET_RESOURCES};

/// The input schema of `T`, compacted, descriptions kept. The schema is static, so a failure
/// is a bug the unit tests catch; serving an open object schema beats refusing to start.
pub fn input<T: JsonSchema + 'static>() -> Arc<JsonObject> {
    match schema_for_input::<T>() {
        Ok(schema) => {
            let mut schema = compact_root(&schema, Descriptions::Keep);
            // The server refuses unknown arguments itself (`invalid_input` naming the field);
            // some model APIs reject schemas that say so.
            schema.remove("additionalProperties");
            Arc::new(schema)
        }
        Err(error) => {
            tracing::error!(%error, "a tool's input schema is invalid; advertising an open one");
            Arc::new(object([("type", json!("object"))]))
        }
    }
}

/// The output schema of `T`, compacted, without descriptions, admitting a tool error.
pub fn output<T: JsonSchema + 'static>() -> Arc<JsonObject> {
    let mut schema = compact_root(&schema_for_output::<T>(), Descriptions::Drop);
    let required = schema.remove("required").unwrap_or_else(|| json!([]));
    schema.insert(
        "anyOf".into(),
        json!([{"required": required}, {"required": ["error"]}]),
    );
    Arc::new(schema)
}

/// Writes this server's bounds and defaults into the tools' input schemas.
pub fn bound<S>(router: &mut ToolRouter<S>, limits: &Limits) {
    let millis = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let (min_ttl, max_ttl) = (millis(limits.min_ttl), millis(limits.advertised_max_ttl()));
    let ttl = json!({"minimum": min_ttl, "maximum": max_ttl});
    let default_ttl = json!({"default": millis(limits.default_ttl())});
    let set = json!({"minItems": 1, "maxItems": MAX_SET_RESOURCES});
    let edits: [(&str, &str, &Value); 9] = [
        ("acquire_lock", "ttl_ms", &ttl),
        ("acquire_lock", "ttl_ms", &default_ttl),
        (
            "acquire_lock",
            "wait_ms",
            &json!({"minimum": 0, "maximum": millis(MAX_WAIT), "default": 0}),
        ),
        (
            "acquire_lock",
            "permits",
            &json!({"minimum": 1, "maximum": MAX_PERMITS}),
        ),
        ("acquire_lock", "resources", &set),
        ("release_lock", "resources", &set),
        ("extend_lock", "resources", &set),
        ("extend_lock", "ttl_ms", &ttl),
        (
            "list_locks",
            "limit",
            &json!({"minimum": 1, "maximum": MAX_LIST_LIMIT, "default": DEFAULT_LIST_LIMIT}),
        ),
    ];
    for (tool, field, bounds) in edits {
        let Some(route) = router.map.get_mut(tool) else {
            continue;
        };
        let mut schema = route.attr.input_schema.as_ref().clone();
        if let Some(Value::Object(property)) = schema
            .get_mut("properties")
            .and_then(|properties| properties.get_mut(field))
            && let Value::Object(bounds) = bounds
        {
            property.extend(bounds.clone());
        }
        route.attr.input_schema = Arc::new(schema);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Descriptions {
    Keep,
    Drop,
}

fn object<const N: usize>(entries: [(&str, Value); N]) -> JsonObject {
    entries
        .into_iter()
        .map(|(key, value)| (key.to_string(), value))
        .collect()
}

/// The root schema with its `$defs` inlined and every part compacted.
fn compact_root(schema: &JsonObject, descriptions: Descriptions) -> JsonObject {
    let defs = match schema.get("$defs") {
        Some(Value::Object(defs)) => defs.clone(),
        _ => Map::new(),
    };
    let mut root = schema.clone();
    root.remove("$defs");
    root.remove("$schema");
    match compact(Value::Object(root), &defs, descriptions, 0) {
        Value::Object(root) => root,
        _ => JsonObject::new(),
    }
}

/// How deep `$ref`s are followed: the contract's types are a few levels deep and not
/// recursive, so this only stops a bug from looping.
const MAX_DEPTH: usize = 16;

fn compact(value: Value, defs: &JsonObject, descriptions: Descriptions, depth: usize) -> Value {
    let Value::Object(mut schema) = value else {
        return value;
    };
    if depth > MAX_DEPTH {
        return Value::Object(schema);
    }
    // A reference, or an optional reference (`anyOf: [X, {"type": "null"}]`), becomes the
    // schema it names, with this schema's own keys (a field's description) on top.
    let referenced = take_reference(&mut schema);
    if let Some(reference) = referenced {
        schema.remove("anyOf");
        let name = reference.trim_start_matches("#/$defs/");
        if let Some(Value::Object(target)) = defs.get(name) {
            let mut merged = target.clone();
            // The field's own description says more than the type's.
            merged.remove("description");
            merged.extend(schema);
            schema = merged;
        }
        return compact(Value::Object(schema), defs, descriptions, depth + 1);
    }
    // A unit enum (`oneOf` of `const`s, each with its doc comment) becomes its values.
    if let Some(Value::Array(branches)) = schema.get("oneOf")
        && let Some(values) = branches
            .iter()
            .map(|branch| branch.get("const").cloned())
            .collect::<Option<Vec<Value>>>()
    {
        schema.remove("oneOf");
        schema.insert("enum".into(), Value::Array(values));
    }
    let required: Vec<Value> = match schema.get("required") {
        Some(Value::Array(required)) => required.clone(),
        _ => Vec::new(),
    };
    for key in ["title", "format", "$schema"] {
        schema.remove(key);
    }
    if schema.get("default") == Some(&Value::Null) {
        schema.remove("default");
    }
    trim(&mut schema, descriptions, depth);
    if let Some(Value::Object(properties)) = schema.remove("properties") {
        let properties = properties
            .into_iter()
            .map(|(name, property)| {
                let mut property = compact(property, defs, descriptions, depth + 1);
                // A field that may be left out needs no `null` as well.
                if !required.contains(&Value::String(name.clone())) {
                    drop_null(&mut property);
                }
                (name, property)
            })
            .collect();
        schema.insert("properties".into(), Value::Object(properties));
    }
    if let Some(items) = schema.remove("items") {
        schema.insert(
            "items".into(),
            compact(items, defs, descriptions, depth + 1),
        );
    }
    Value::Object(schema)
}

/// The definition a schema refers to, as a reference (`$ref`, removed) or an optional
/// reference (`anyOf: [X, {"type": "null"}]`).
fn take_reference(schema: &mut JsonObject) -> Option<String> {
    match schema.remove("$ref") {
        Some(Value::String(reference)) => Some(reference),
        Some(other) => {
            schema.insert("$ref".into(), other);
            None
        }
        None => None,
    }
    .or_else(|| {
        let Some(Value::Array(branches)) = schema.get("anyOf") else {
            return None;
        };
        let not_null: Vec<&Value> = branches
            .iter()
            .filter(|branch| **branch != json!({"type": "null"}))
            .collect();
        match (branches.len(), not_null.as_slice()) {
            (2, [only]) => only.get("$ref").and_then(Value::as_str).map(str::to_string),
            _ => None,
        }
    })
}

/// Drops what a reader does not need (descriptions, for outputs, and what the shape already
/// says), or makes each description one line.
fn trim(schema: &mut JsonObject, descriptions: Descriptions, depth: usize) {
    match descriptions {
        Descriptions::Drop => {
            schema.remove("description");
            // Outputs: a count is never negative, which the type already says to a reader.
            if schema.get("minimum") == Some(&json!(0)) {
                schema.remove("minimum");
            }
            // Below the root, `properties` says "object", `items` "array" and `enum` "string"
            // to every reader; the root keeps its `type` (MCP requires "object" there).
            if depth > 0 {
                let implied = ["properties", "items", "enum"]
                    .into_iter()
                    .any(|key| schema.contains_key(key));
                if implied {
                    schema.remove("type");
                }
            }
        }
        Descriptions::Keep => {
            if let Some(Value::String(text)) = schema.get_mut("description") {
                *text = one_line(text);
            }
        }
    }
}

/// `"type": ["string", "null"]` → `"type": "string"`.
fn drop_null(schema: &mut Value) {
    if let Some(Value::Array(types)) = schema.get("type") {
        let types: Vec<Value> = types
            .iter()
            .filter(|t| t.as_str() != Some("null"))
            .cloned()
            .collect();
        let single = match types.as_slice() {
            [one] => one.clone(),
            _ => Value::Array(types),
        };
        if let Value::Object(schema) = schema {
            schema.insert("type".into(), single);
        }
    }
}

/// A doc comment's wrapped lines as one line.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::mcp::contract::{AcquireLockArgs, LockStatusResult};
    use crate::mcp::handler::LockServer;

    /// Every `(path, schema)` below `schema`, `a.b[].c` style.
    fn fields(schema: &Value, path: &str, out: &mut Vec<String>) {
        if let Some(Value::Object(properties)) = schema.get("properties") {
            for (name, property) in properties {
                let path = if path.is_empty() {
                    name.clone()
                } else {
                    format!("{path}.{name}")
                };
                out.push(path.clone());
                fields(property, &path, out);
            }
        }
        if let Some(items) = schema.get("items") {
            fields(items, &format!("{path}[]"), out);
        }
        if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
            out.push(format!("$ref {reference}"));
        }
    }

    /// The raw schema's fields, with `$ref`s and `anyOf`-wrapped references followed.
    fn raw_fields(root: &JsonObject) -> Vec<String> {
        let defs = match root.get("$defs") {
            Some(Value::Object(defs)) => defs.clone(),
            _ => Map::new(),
        };
        fn resolve(schema: &Value, defs: &JsonObject) -> Value {
            let reference = schema.get("$ref").and_then(Value::as_str).or_else(|| {
                schema
                    .get("anyOf")?
                    .as_array()?
                    .iter()
                    .find_map(|branch| branch.get("$ref").and_then(Value::as_str))
            });
            let mut schema = match reference {
                Some(reference) => defs
                    .get(reference.trim_start_matches("#/$defs/"))
                    .cloned()
                    .unwrap_or(Value::Null),
                None => schema.clone(),
            };
            if let Some(Value::Object(properties)) = schema.get_mut("properties") {
                for property in properties.values_mut() {
                    *property = resolve(property, defs);
                }
            }
            if let Some(items) = schema.get_mut("items") {
                *items = resolve(items, defs);
            }
            schema
        }
        let mut out = Vec::new();
        fields(&resolve(&Value::Object(root.clone()), &defs), "", &mut out);
        out.sort();
        out
    }

    #[test]
    fn compacting_an_output_schema_keeps_every_field_and_what_is_required_and_drops_the_prose() {
        let raw = schema_for_output::<LockStatusResult>();
        let compacted = Value::Object(output::<LockStatusResult>().as_ref().clone());
        let mut kept = Vec::new();
        fields(&compacted, "", &mut kept);
        kept.sort();
        assert_eq!(kept, raw_fields(&raw));
        assert!(
            kept.iter().any(|f| f == "semaphore.holders[].permit"),
            "{kept:?}"
        );
        let text = compacted.to_string();
        for gone in ["description", "$ref", "$defs", "$schema", "format", "null"] {
            assert!(!text.contains(gone), "{gone} in {text}");
        }
        assert_eq!(
            compacted["anyOf"],
            json!([{"required": raw["required"]}, {"required": ["error"]}])
        );
        assert_eq!(compacted["type"], json!("object"));
        assert_eq!(
            compacted["properties"]["keepalive"]["properties"]["state"]["enum"],
            json!(["renewing", "lost", "max_hold_reached"])
        );
    }

    #[test]
    fn an_input_schema_keeps_its_descriptions_on_one_line() {
        let schema = Value::Object(input::<AcquireLockArgs>().as_ref().clone());
        let resource = &schema["properties"]["resource"];
        assert_eq!(resource["type"], json!("string"));
        let description = resource["description"].as_str().unwrap_or_default();
        assert!(
            description.contains("1-512 bytes") && !description.contains('\n'),
            "{description}"
        );
        assert!(schema.get("additionalProperties").is_none(), "{schema}");
    }

    #[test]
    fn the_ttl_bounds_and_default_in_the_input_schemas_are_the_servers_own() {
        let listed_under = |min_ms: u64, max_ms: u64, policy_ms: Option<u64>| {
            let mut router = LockServer::tool_router();
            let limits = Limits {
                min_ttl: Duration::from_millis(min_ms),
                max_ttl: Duration::from_millis(max_ms),
                policy_max_ttl: policy_ms.map(Duration::from_millis),
            };
            bound(&mut router, &limits);
            router.list_all()
        };
        let listed = |min_ms: u64, max_ms: u64| listed_under(min_ms, max_ms, None);
        let ttl = |tools: &[rmcp::model::Tool], tool: &str| {
            tools
                .iter()
                .find(|t| t.name == tool)
                .map(|t| t.input_schema["properties"]["ttl_ms"].clone())
                .unwrap_or_default()
        };
        let tools = listed(1_000, 20_000);
        assert_eq!(
            ttl(&tools, "acquire_lock"),
            json!({"type": "integer", "minimum": 1000, "maximum": 20000, "default": 15000})
        );
        assert_eq!(
            ttl(&tools, "extend_lock"),
            json!({"type": "integer", "minimum": 1000, "maximum": 20000})
        );
        // A maximum below 15 s is the default too.
        let tools = listed(1_000, 10_000);
        assert_eq!(ttl(&tools, "acquire_lock")["default"], json!(10000));
        // Masters whose policy is shorter than the server's bound lower both.
        let tools = listed_under(1_000, 20_000, Some(12_000));
        assert_eq!(
            ttl(&tools, "acquire_lock"),
            json!({"type": "integer", "minimum": 1000, "maximum": 12000, "default": 12000})
        );
        // A longer policy changes nothing.
        let tools = listed_under(1_000, 20_000, Some(30_000));
        assert_eq!(ttl(&tools, "extend_lock")["maximum"], json!(20000));
    }
}
