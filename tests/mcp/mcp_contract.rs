//! The agent's contract as an MCP client receives it from the real `quorumlock serve` binary:
//! small enough for every agent's context (the budget), with bounds and defaults from the
//! server's own config, documented field for field in docs/mcp.md (both ways), kept by every
//! result the tools return, and with a stable kind on every tool error.

use crate::common;
use crate::mcp_support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use common::{fixture, plain, plain_lab};
use mcp_support::*;
use quorumlock::Topology;
use quorumlock::lab::LabSpec;
use rmcp::model::Tool;
use serde_json::{Value, json};

/// The most characters of instructions, descriptions and schemas a client may receive.
const BUDGET: usize = 8_000;

// ---- The budget.

/// Characters of `value` as JSON on the wire: compact, as rmcp sends it.
fn wire_chars<T: serde::Serialize>(value: &T) -> usize {
    serde_json::to_string(value)
        .map(|text| text.chars().count())
        .unwrap_or(0)
}

/// Characters of `value` as Python's `json.dumps` writes it (a space after every `,` and `:`,
/// non-ASCII escaped): how issue #26 measured the list. Printed beside the wire figure.
fn spaced_chars(value: &Value) -> usize {
    let joined =
        |parts: Vec<usize>| parts.iter().sum::<usize>() + 2 * parts.len().saturating_sub(1);
    match value {
        Value::Object(map) => {
            2 + joined(
                map.iter()
                    .map(|(key, value)| string_chars(key) + 2 + spaced_chars(value))
                    .collect(),
            )
        }
        Value::Array(items) => 2 + joined(items.iter().map(spaced_chars).collect()),
        Value::String(text) => string_chars(text),
        other => other.to_string().chars().count(),
    }
}

fn string_chars(text: &str) -> usize {
    let escaped: usize = text
        .chars()
        .map(|c| match c {
            c if (c as u32) > 0xFFFF => 12,
            c if !c.is_ascii() => 6,
            c => serde_json::to_string(&c.to_string()).map_or(1, |s| s.len() - 2),
        })
        .sum();
    escaped + 2
}

/// One part of the contract: its description, input schema and output schema, in characters
/// on the wire and as Python renders them.
struct Part {
    name: String,
    wire: [usize; 3],
    spaced: [usize; 3],
}

impl Part {
    fn of(tool: &Tool) -> Part {
        let description = tool.description.as_deref().map_or(0, |d| d.chars().count());
        let input = Value::Object(tool.input_schema.as_ref().clone());
        let output = tool
            .output_schema
            .as_ref()
            .map_or(Value::Null, |schema| Value::Object(schema.as_ref().clone()));
        let output_spaced = if output.is_null() {
            0
        } else {
            spaced_chars(&output)
        };
        let output_wire = if output.is_null() {
            0
        } else {
            wire_chars(&output)
        };
        Part {
            name: format!("`{}`", tool.name),
            wire: [description, wire_chars(&input), output_wire],
            spaced: [description, spaced_chars(&input), output_spaced],
        }
    }

    fn total(&self, spaced: bool) -> usize {
        (if spaced { self.spaced } else { self.wire }).iter().sum()
    }
}

/// The breakdown as a Markdown table (wire / Python figures), largest tool first, and the
/// wire total.
fn breakdown(instructions: usize, parts: &mut [Part]) -> (String, usize) {
    parts.sort_by_key(|part| std::cmp::Reverse(part.total(false)));
    let both = |wire: usize, spaced: usize| format!("{wire} / {spaced}");
    let total = |spaced: bool| instructions + parts.iter().map(|p| p.total(spaced)).sum::<usize>();
    let mut table = String::from(
        "| part | description | input schema | output schema | total |\n|---|---:|---:|---:|---:|\n",
    );
    table.push_str(&format!("| server instructions | | | | {instructions} |\n"));
    for part in parts.iter() {
        table.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            part.name,
            part.wire[0],
            both(part.wire[1], part.spaced[1]),
            both(part.wire[2], part.spaced[2]),
            both(part.total(false), part.total(true)),
        ));
    }
    table.push_str(&format!(
        "| all | | | | {} |\n",
        both(total(false), total(true))
    ));
    (table, total(false))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tool_list_fits_the_budget() {
    let fx = plain_lab().await;
    within(Duration::from_secs(60), async {
        let server = stdio_server(&fx.lab.config_path(), &[]).await;
        let client = &server.client;
        let instructions = client
            .peer_info()
            .and_then(|info| info.instructions.clone())
            .map_or(0, |text| text.chars().count());
        let tools = client.list_all_tools().await.expect("tools/list");
        assert_eq!(tools.len(), TOOLS.len());
        let mut parts: Vec<Part> = tools.iter().map(Part::of).collect();
        let (table, total) = breakdown(instructions, &mut parts);
        eprintln!(
            "the contract a client receives, in characters (on the wire / as Python's json.dumps writes it):\n{table}"
        );
        assert!(
            total <= BUDGET,
            "the contract is {total} characters on the wire, above its budget of {BUDGET}:\n{table}"
        );
        server.close().await;
    })
    .await;
}

// ---- Bounds and defaults from the config.

/// `tool`'s input property `field`.
fn input_property(tools: &[Tool], tool: &str, field: &str) -> Value {
    tools
        .iter()
        .find(|t| t.name == tool)
        .map(|t| t.input_schema["properties"][field].clone())
        .unwrap_or_else(|| panic!("{tool} is not listed"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schemas_ttl_bounds_are_the_servers_config() {
    let fx = plain_lab().await;
    within(Duration::from_secs(60), async {
        // The defaults: the topology's max_ttl_ms, 5 s, 15 s.
        let server = stdio_server(&fx.lab.config_path(), &[]).await;
        let tools = server.client.list_all_tools().await.expect("tools/list");
        assert_eq!(
            input_property(&tools, "acquire_lock", "ttl_ms"),
            json!({"type": "integer", "minimum": 5000, "maximum": 60000, "default": 15000})
        );
        server.close().await;

        // A server whose longest TTL is 10 s lists it, and its default is 10 s too.
        let server = stdio_server(
            &fx.lab.config_path(),
            &["--max-ttl-ms", "10000", "--min-ttl-ms", "1000"],
        )
        .await;
        let client = &server.client;
        let tools = client.list_all_tools().await.expect("tools/list");
        assert_eq!(
            input_property(&tools, "acquire_lock", "ttl_ms"),
            json!({"type": "integer", "minimum": 1000, "maximum": 10000, "default": 10000})
        );
        assert_eq!(
            input_property(&tools, "extend_lock", "ttl_ms"),
            json!({"type": "integer", "minimum": 1000, "maximum": 10000})
        );
        assert_eq!(
            input_property(&tools, "acquire_lock", "wait_ms"),
            json!({"type": "integer", "minimum": 0, "maximum": 60000, "default": 0})
        );
        assert_eq!(
            input_property(&tools, "list_locks", "limit"),
            json!({"type": "integer", "minimum": 1, "maximum": 10000, "default": 100})
        );
        // What the schema says is what the server does: the default is granted, and one
        // millisecond above the maximum is refused, naming the maximum.
        let granted = ok(client, "acquire_lock", json!({"resource": "bounds:a"})).await;
        assert!(u64_of(&granted, "validity_ms") <= 10_000, "{granted}");
        let (message, error) = tool_error_of(
            client,
            "acquire_lock",
            json!({"resource": "bounds:b", "ttl_ms": 10001}),
        )
        .await;
        assert_eq!(
            error,
            json!({"kind": "held_too_long", "field": "ttl_ms", "max": 10000}),
            "{message}"
        );
        assert!(message.contains("keepalive"), "{message}");
        server.close().await;
    })
    .await;
}

// ---- docs/mcp.md against the schemas.

/// A field as documented or listed: its type and whether it is required (an argument) or
/// always present (a result), and its default.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Field {
    kind: String,
    required: bool,
    default: Option<String>,
}

/// What one tool's section documents: its arguments and its result's fields, by path.
#[derive(Debug, Default)]
struct Documented {
    arguments: BTreeMap<String, Field>,
    results: BTreeMap<String, Field>,
}

/// The cells of a Markdown table row.
fn cells(line: &str) -> Vec<String> {
    let line = line.trim();
    let inner = line
        .strip_prefix('|')
        .and_then(|l| l.strip_suffix('|'))
        .unwrap_or(line);
    inner
        .split('|')
        .map(|cell| cell.trim().to_string())
        .collect()
}

/// A documented type: `string`, `integer[]`, `object`, or a list of `values` (a string enum).
fn documented_kind(cell: &str) -> String {
    if cell.contains('`') {
        let mut values: Vec<&str> = cell.split('`').skip(1).step_by(2).collect();
        values.sort_unstable();
        format!("one of {}", values.join(", "))
    } else {
        cell.to_string()
    }
}

/// The default a cell names: its first word when that is a JSON number or boolean.
fn documented_default(cell: &str) -> Option<String> {
    let word = cell.split([',', ' ']).next()?;
    serde_json::from_str::<Value>(word)
        .ok()
        .filter(|value| value.is_number() || value.is_boolean())
        .map(|value| value.to_string())
}

/// Every tool section of docs/mcp.md (`### `name``), and the kinds its Errors section lists.
fn read_docs() -> (BTreeMap<String, Documented>, Vec<String>) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/mcp.md");
    let text = std::fs::read_to_string(&path).expect("read docs/mcp.md");
    let mut tools: BTreeMap<String, Documented> = BTreeMap::new();
    let mut kinds = Vec::new();
    let mut section: Option<String> = None;
    let mut table: Option<String> = None;
    for line in text.lines() {
        if line.starts_with("## ") || line.starts_with("### ") {
            section = line
                .strip_prefix("### `")
                .and_then(|rest| rest.split('`').next())
                .map(str::to_string);
            table = None;
            continue;
        }
        if !line.starts_with('|') {
            table = None;
            continue;
        }
        let row = cells(line);
        if row.first().is_some_and(|c| c.starts_with("---")) {
            continue;
        }
        let Some(header) = &table else {
            table = row.first().cloned();
            continue;
        };
        let name = row[0].trim_matches('`').to_string();
        match (header.as_str(), &section) {
            ("kind", None) => kinds.push(name),
            ("argument", Some(tool)) => {
                let field = Field {
                    kind: documented_kind(&row[1]),
                    required: row[2] == "required",
                    default: documented_default(&row[2]),
                };
                tools
                    .entry(tool.clone())
                    .or_default()
                    .arguments
                    .insert(name, field);
            }
            ("field", Some(tool)) => {
                let field = Field {
                    kind: documented_kind(&row[1]),
                    required: row[2] == "always",
                    default: None,
                };
                tools
                    .entry(tool.clone())
                    .or_default()
                    .results
                    .insert(name, field);
            }
            _ => {}
        }
    }
    (tools, kinds)
}

/// The type of a listed property, as the docs write it.
fn listed_kind(schema: &Value) -> String {
    if let Some(Value::Array(values)) = schema.get("enum") {
        let mut values: Vec<&str> = values.iter().filter_map(Value::as_str).collect();
        values.sort_unstable();
        return format!("one of {}", values.join(", "));
    }
    if let Some(items) = schema.get("items") {
        let item = listed_kind(items);
        let item = if item.starts_with("one of") {
            "string".to_string()
        } else {
            item
        };
        return format!("{item}[]");
    }
    if schema.get("properties").is_some() {
        return "object".to_string();
    }
    schema["type"].as_str().unwrap_or("?").to_string()
}

/// Every field below `schema`, by path (`a.b[].c`), with its type and presence.
fn listed_fields(
    schema: &Value,
    required: &Value,
    prefix: &str,
    out: &mut BTreeMap<String, Field>,
) {
    let Some(Value::Object(properties)) = schema.get("properties") else {
        return;
    };
    for (name, property) in properties {
        let path = format!("{prefix}{name}");
        let field = Field {
            kind: listed_kind(property),
            required: required
                .as_array()
                .is_some_and(|r| r.contains(&Value::String(name.clone()))),
            default: property.get("default").map(Value::to_string),
        };
        out.insert(path.clone(), field);
        listed_fields(property, &property["required"], &format!("{path}."), out);
        if let Some(items) = property.get("items") {
            listed_fields(items, &items["required"], &format!("{path}[]."), out);
        }
    }
}

/// Where the documented and the listed fields differ, one line each.
fn differences(
    tool: &str,
    what: &str,
    documented: &BTreeMap<String, Field>,
    listed: &BTreeMap<String, Field>,
) -> Vec<String> {
    let mut problems = Vec::new();
    for (path, field) in listed {
        match documented.get(path) {
            None => problems.push(format!(
                "{tool}: {what} `{path}` ({}) is not documented",
                field.kind
            )),
            Some(doc) if doc != field => problems.push(format!(
                "{tool}: {what} `{path}` is documented as {doc:?} but listed as {field:?}"
            )),
            Some(_) => {}
        }
    }
    for path in documented.keys().filter(|path| !listed.contains_key(*path)) {
        problems.push(format!(
            "{tool}: {what} `{path}` is documented but not listed"
        ));
    }
    problems
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docs_mcp_md_documents_every_field_and_no_other() {
    let (documented, kinds) = read_docs();
    assert_eq!(
        kinds,
        quorumlock::mcp::ERROR_KINDS.to_vec(),
        "docs/mcp.md's Errors section lists the error kinds, in order"
    );
    let fx = plain_lab().await;
    within(Duration::from_secs(60), async {
        let server = stdio_server(&fx.lab.config_path(), &[]).await;
        let tools = server.client.list_all_tools().await.expect("tools/list");
        let mut problems = Vec::new();
        let names: BTreeSet<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        let sections: BTreeSet<&str> = documented.keys().map(String::as_str).collect();
        if names != sections {
            problems.push(format!("tools {names:?}, documented sections {sections:?}"));
        }
        for tool in &tools {
            let docs = documented.get(tool.name.as_ref());
            let input = Value::Object(tool.input_schema.as_ref().clone());
            let mut arguments = BTreeMap::new();
            listed_fields(&input, &input["required"], "", &mut arguments);
            let output = tool
                .output_schema
                .as_ref()
                .map(|schema| Value::Object(schema.as_ref().clone()))
                .unwrap_or_default();
            // A result's required fields are the first branch of the output schema's anyOf;
            // the other is the tool error's.
            assert_eq!(
                output["anyOf"][1],
                json!({"required": ["error"]}),
                "{}",
                tool.name
            );
            let mut results = BTreeMap::new();
            listed_fields(&output, &output["anyOf"][0]["required"], "", &mut results);
            let empty = BTreeMap::new();
            problems.extend(differences(
                &tool.name,
                "argument",
                docs.map_or(&empty, |d| &d.arguments),
                &arguments,
            ));
            problems.extend(differences(
                &tool.name,
                "result field",
                docs.map_or(&empty, |d| &d.results),
                &results,
            ));
        }
        assert!(
            problems.is_empty(),
            "docs/mcp.md and the listed schemas differ:\n{}",
            problems.join("\n")
        );
        server.close().await;
    })
    .await;
}

// ---- Results and errors against the output schemas.

/// Why `value` does not match `schema`, one line per violation (JSON Schema's `type`, `enum`,
/// `properties`, `required`, `items` and `anyOf`; `properties` implies an object, `items` an
/// array, as the compacted schemas have it).
fn violations(schema: &Value, value: &Value, at: &str, out: &mut Vec<String>) {
    let type_ok = |name: &str| match name {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        _ => false,
    };
    match schema.get("type") {
        Some(Value::String(name)) if !type_ok(name) => {
            out.push(format!("{at}: not {name}: {value}"))
        }
        Some(Value::Array(names)) if !names.iter().filter_map(Value::as_str).any(type_ok) => {
            out.push(format!("{at}: none of {names:?}: {value}"))
        }
        _ => {}
    }
    if let Some(Value::Array(values)) = schema.get("enum")
        && !values.contains(value)
    {
        out.push(format!("{at}: {value} is not one of {values:?}"));
    }
    if let Some(Value::Object(properties)) = schema.get("properties") {
        match value.as_object() {
            None => out.push(format!("{at}: not an object: {value}")),
            Some(object) => {
                for (name, property) in properties {
                    if let Some(field) = object.get(name) {
                        violations(property, field, &format!("{at}.{name}"), out);
                    }
                }
            }
        }
    }
    if let Some(Value::Array(required)) = schema.get("required") {
        for name in required.iter().filter_map(Value::as_str) {
            if value.get(name).is_none() {
                out.push(format!("{at}: lacks `{name}`"));
            }
        }
    }
    if let Some(items) = schema.get("items") {
        match value.as_array() {
            None => out.push(format!("{at}: not an array: {value}")),
            Some(array) => {
                for (index, item) in array.iter().enumerate() {
                    violations(items, item, &format!("{at}[{index}]"), out);
                }
            }
        }
    }
    if let Some(Value::Array(branches)) = schema.get("anyOf") {
        let failing: Vec<Vec<String>> = branches
            .iter()
            .map(|branch| {
                let mut found = Vec::new();
                violations(branch, value, at, &mut found);
                found
            })
            .collect();
        if failing.iter().all(|found| !found.is_empty()) {
            out.push(format!("{at}: matches no branch of anyOf: {failing:?}"));
        }
    }
}

/// Collects every field path present in `value` (`a.b[].c`), to see which fields the calls
/// below exercised.
fn present_paths(value: &Value, prefix: &str, out: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            for (name, field) in map {
                let path = format!("{prefix}{name}");
                out.insert(path.clone());
                present_paths(field, &format!("{path}."), out);
            }
        }
        Value::Array(items) => {
            let path = prefix.strip_suffix('.').unwrap_or(prefix);
            for item in items {
                present_paths(item, &format!("{path}[]."), out);
            }
        }
        _ => {}
    }
}

/// Calls `tool` and checks its structured content (a result's or an error's) against the
/// tool's output schema; returns the result.
async fn checked(
    client: &Client,
    schemas: &BTreeMap<String, Value>,
    seen: &mut BTreeMap<String, BTreeSet<String>>,
    tool: &str,
    arguments: Value,
) -> rmcp::model::CallToolResult {
    let result = call(client, tool, arguments.clone()).await;
    let structured = result
        .structured_content
        .clone()
        .unwrap_or_else(|| panic!("{tool}({arguments}) has no structured content"));
    let mut found = Vec::new();
    violations(&schemas[tool], &structured, tool, &mut found);
    assert!(
        found.is_empty(),
        "{tool}({arguments}) does not match its output schema:\n{}\n{structured}",
        found.join("\n")
    );
    present_paths(&structured, "", seen.entry(tool.to_string()).or_default());
    result
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_result_and_error_matches_its_schema() {
    let fx = plain_lab().await;
    within(Duration::from_secs(90), async {
        let server = stdio_server(
            &fx.lab.config_path(),
            &["--max-keepalive-per-session", "1"],
        )
        .await;
        let client = &server.client;
        let tools = client.list_all_tools().await.expect("tools/list");
        let schemas: BTreeMap<String, Value> = tools
            .iter()
            .map(|tool| {
                let schema = tool.output_schema.as_ref().expect("output schema");
                (tool.name.to_string(), Value::Object(schema.as_ref().clone()))
            })
            .collect();
        let seen = &mut BTreeMap::new();
        let granted = checked(client, &schemas, seen, "acquire_lock", json!({"resource": "shape:a", "owner": "agent-1", "purpose": "shape", "keepalive": true})).await;
        let granted = granted.structured_content.unwrap_or_default();
        let token = str_of(&granted, "token").to_string();
        // Held: holder, held_resource, retry_after_ms.
        checked(client, &schemas, seen, "acquire_lock", json!({"resource": "shape:a"})).await;
        // A set, and a permit of a semaphore held twice over.
        let set = checked(client, &schemas, seen, "acquire_lock", json!({"resources": ["shape:c", "shape:b"], "owner": "agent-2"})).await;
        let set_token = str_of(set.structured_content.as_ref().expect("set"), "token").to_string();
        for owner in ["agent-3", "agent-4"] {
            checked(client, &schemas, seen, "acquire_lock", json!({"resource": "shape:api", "permits": 2, "owner": owner, "purpose": "search"})).await;
        }
        checked(client, &schemas, seen, "acquire_lock", json!({"resource": "shape:api", "permits": 2})).await;
        // Errors: invalid input, a TTL too long, a keepalive cap.
        for arguments in [
            json!({"resource": "shape:x", "ttl": 5000}),
            json!({"resource": "shape:x", "ttl_ms": 600_000}),
            json!({"resource": "shape:x", "keepalive": true}),
        ] {
            let result = checked(client, &schemas, seen, "acquire_lock", arguments).await;
            assert_eq!(result.is_error, Some(true));
        }
        checked(client, &schemas, seen, "lock_status", json!({"resource": "shape:a"})).await;
        checked(client, &schemas, seen, "lock_status", json!({"resource": "shape:api"})).await;
        checked(client, &schemas, seen, "lock_status", json!({"resource": "shape:free"})).await;
        checked(client, &schemas, seen, "list_locks", json!({"prefix": "shape:", "limit": 1})).await;
        checked(client, &schemas, seen, "list_locks", json!({"prefix": "shape:"})).await;
        checked(client, &schemas, seen, "list_locks", json!({"limit": 0})).await;
        checked(client, &schemas, seen, "cluster_health", json!({})).await;
        checked(client, &schemas, seen, "extend_lock", json!({"resources": ["shape:b", "shape:c"], "token": set_token, "ttl_ms": 20000})).await;
        checked(client, &schemas, seen, "extend_lock", json!({"resource": "shape:gone", "token": "0123456789abcdef0123456789abcdef", "ttl_ms": 20000})).await;
        checked(client, &schemas, seen, "release_lock", json!({"resource": "shape:a", "token": token})).await;
        checked(client, &schemas, seen, "release_lock", json!({"resource": "shape:a", "token": token})).await;
        checked(client, &schemas, seen, "release_lock", json!({"resources": ["shape:b"], "token": set_token})).await;

        // Every error field these calls produced is documented.
        let docs = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/mcp.md"))
            .expect("read docs/mcp.md");
        for path in seen.values().flatten().filter(|path| path.starts_with("error.")) {
            assert!(
                docs.contains(&format!("| `{path}` |")),
                "`{path}` of a tool error is not documented in docs/mcp.md's Errors section"
            );
        }
        eprintln!("fields these calls produced: {seen:#?}");
        server.close().await;
    })
    .await;
}

// ---- The error kinds (the rest are in tests/mcp/mcp.rs and the unit tests of src/mcp/reply.rs).

/// The topology of `fx` with a longer `max_ttl_ms` than the masters' lock policy, written to
/// a file for a server.
fn topology_above_policy(fx: &common::Fixture, max_ttl_ms: u64) -> std::path::PathBuf {
    let mut topology: Topology = fx.topology.clone();
    topology.max_ttl_ms = max_ttl_ms;
    fx.file("above-policy.toml", &topology.to_toml())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ttl_above_the_policy_is_not_advertised() {
    // Masters admitted under a 30 s policy, and a server configured for 60 s.
    let fx = fixture(
        |spec| LabSpec {
            max_ttl_ms: 30_000,
            ..plain(spec)
        },
        |topology| topology,
    )
    .await;
    let config = topology_above_policy(&fx, 60_000);
    within(Duration::from_secs(60), async {
        let server = stdio_server(&config, &[]).await;
        let client = &server.client;
        // The schema advertises the masters' 30 s, not the server's 60 s.
        let tools = client.list_all_tools().await.expect("tools/list");
        assert_eq!(
            input_property(&tools, "acquire_lock", "ttl_ms"),
            json!({"type": "integer", "minimum": 5000, "maximum": 30000, "default": 15000})
        );
        let (message, error) = tool_error_of(
            client,
            "acquire_lock",
            json!({"resource": "policy:a", "ttl_ms": 45000}),
        )
        .await;
        assert_eq!(
            error,
            json!({"kind": "held_too_long", "field": "ttl_ms", "max": 30000}),
            "{message}"
        );
        // Within the policy it is granted.
        let granted = ok(
            client,
            "acquire_lock",
            json!({"resource": "policy:a", "ttl_ms": 30000}),
        )
        .await;
        assert_eq!(granted["acquired"], json!(true));
        server.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vote_slower_than_the_lease_is_expired() {
    // Every master behind a relay that can delay its replies, and a 100 ms lease.
    let fx = fixture(
        |spec| LabSpec {
            links: true,
            binary: Some(BIN.into()),
            ..plain(spec)
        },
        |topology| topology,
    )
    .await;
    within(Duration::from_secs(60), async {
        let server = stdio_server(&fx.lab.config_path(), &["--min-ttl-ms", "100"]).await;
        let client = &server.client;
        // Connected while the links are fast; then every reply takes 150 ms or more.
        let health = ok(client, "cluster_health", json!({})).await;
        assert_eq!(health["reachable"], json!(5), "{health}");
        for group in fx.groups() {
            fx.lab
                .slow(group, Duration::from_millis(150), Duration::ZERO)
                .await
                .expect("slow a group's links");
        }
        let (message, error) = tool_error_of(
            client,
            "acquire_lock",
            json!({"resource": "slow:a", "ttl_ms": 100}),
        )
        .await;
        assert_eq!(error, json!({"kind": "expired"}), "{message}");
        assert!(message.contains("rolled back"), "{message}");
        server.close().await;
    })
    .await;
}
