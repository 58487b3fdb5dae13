//! How commands print: aligned plain tables for people, JSON for programs (`--json`), errors
//! in either form, and the logs on stderr (text, or JSON lines with `--log-format json`).

use std::io::IsTerminal;

use comfy_table::{ContentArrangement, Row, Table, presets};
use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::ConfigError;
use crate::mcp::ServeError;

/// A borderless table with a header row, as `kubectl` or `docker ps` print them.
pub fn table(header: impl Into<Row>, rows: impl IntoIterator<Item = impl Into<Row>>) -> String {
    let mut table = Table::new();
    table
        .load_preset(presets::NOTHING)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(header);
    for row in rows {
        table.add_row(row);
    }
    let mut text: String = table
        .to_string()
        .lines()
        .map(|line| line.trim().to_string())
        .collect::<Vec<_>>()
        .join("\n");
    text.push('\n');
    text
}

/// Prints `value` as pretty JSON.
pub fn json<T: Serialize>(value: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// `-` for what is missing.
pub fn or_dash<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_string(), |v| v.to_string())
}

/// Milliseconds as people read them: `850 ms`, `14.2 s`, `3 min 5 s`.
pub fn duration_ms(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        _ => format!("{} min {} s", ms / 60_000, (ms % 60_000) / 1000),
    }
}

/// Prints a command's error: `error: ...` on stderr, or with `--json` an object on stdout with
/// `error` (the message), `kind`, `exit_code`, `field` when one value is wrong, and the typed
/// error's other details (resource, holder, votes, path, ...).
pub fn error(error: &anyhow::Error, exit_code: u8, json: bool) {
    if !json {
        eprintln!("error: {error:#}");
        return;
    }
    let mut object = error_details(error);
    object.insert("error".into(), format!("{error:#}").into());
    object.insert("exit_code".into(), exit_code.into());
    println!("{}", Value::Object(object));
}

/// A usage error found while parsing the arguments, as JSON (`--json` was given).
pub fn usage_error(message: &str, exit_code: u8) {
    let message = message.trim().trim_start_matches("error: ");
    println!(
        "{}",
        json!({"error": message, "kind": "usage", "exit_code": exit_code})
    );
}

/// `kind` and the details of the typed error behind `error`.
fn error_details(error: &anyhow::Error) -> Map<String, Value> {
    let details = if let Some(error) = error.downcast_ref::<crate::Error>() {
        engine_error(error)
    } else if let Some(error) = error.downcast_ref::<ConfigError>() {
        config_error(error)
    } else if let Some(error) = error.downcast_ref::<ServeError>() {
        serve_error(error)
    } else if error.downcast_ref::<super::serve::TokenTwice>().is_some() {
        json!({"kind": "usage", "field": "token_file"})
    } else if error.downcast_ref::<super::NoTopology>().is_some() {
        json!({"kind": "no_topology", "field": "config"})
    } else {
        json!({"kind": "failure"})
    };
    match details {
        Value::Object(object) => object,
        _ => Map::new(),
    }
}

fn engine_error(error: &crate::Error) -> Value {
    use crate::Error;
    match error {
        Error::InvalidInput { field, reason } => {
            json!({"kind": "invalid_input", "field": field, "reason": reason})
        }
        Error::Held {
            resource,
            holder,
            votes,
        } => json!({"kind": "held", "resource": resource, "holder": holder, "votes": votes}),
        Error::Unavailable {
            resource,
            needed,
            total,
            votes,
        } => json!({
            "kind": "unavailable",
            "resource": resource,
            "needed": needed,
            "total": total,
            "votes": votes,
        }),
        Error::ListingUnavailable {
            locks,
            needed,
            total,
            votes,
        } => json!({
            "kind": "unavailable",
            "locks": locks,
            "needed": needed,
            "total": total,
            "votes": votes,
        }),
        Error::Expired {
            resource,
            elapsed_ms,
            votes,
        } => json!({
            "kind": "expired",
            "resource": resource,
            "elapsed_ms": elapsed_ms,
            "votes": votes,
        }),
        Error::NotHeld { resource, votes } => {
            json!({"kind": "not_held", "resource": resource, "votes": votes})
        }
        Error::Config(error) => config_error(error),
        Error::Setup { group, message } => {
            json!({"kind": "setup", "group": group, "reason": message})
        }
        Error::LeaseLost { resource, reason } => {
            json!({"kind": "lease_lost", "resource": resource, "reason": reason})
        }
    }
}

fn config_error(error: &ConfigError) -> Value {
    match error {
        ConfigError::Read { path, .. } => {
            json!({"kind": "config", "field": "config", "path": path})
        }
        ConfigError::Parse { path, message } => {
            json!({"kind": "config", "field": "config", "path": path, "reason": message})
        }
        ConfigError::Invalid { key, message } => {
            json!({"kind": "config", "field": key, "reason": message})
        }
    }
}

fn serve_error(error: &ServeError) -> Value {
    match error {
        ServeError::TokenRequired { addr } => {
            json!({"kind": "serve", "field": "token", "address": addr.to_string()})
        }
        ServeError::EmptyToken => json!({"kind": "serve", "field": "token"}),
        ServeError::TokenFile { path, .. } => {
            json!({"kind": "serve", "field": "token_file", "path": path})
        }
        ServeError::Bind { addr, .. } => json!({"kind": "serve", "field": "http", "address": addr}),
        _ => json!({"kind": "serve"}),
    }
}

/// How logs are written on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One line per event for people (colours only on a terminal).
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `message` and the event's
    /// fields, for log collectors.
    Json,
}

/// The log filter for `-v`/`-q` when RUST_LOG is not set.
fn verbosity_filter(verbose: u8, quiet: u8) -> &'static str {
    match (verbose, quiet) {
        (_, 1) => "error",
        (_, 2..) => "off",
        (0, _) => "warn,fred=error",
        (1, _) => "info,fred=warn",
        (2, _) => "debug,fred=info",
        _ => "trace",
    }
}

/// Sets up logging to stderr, so that stdout stays machine-readable (tables, JSON, MCP on
/// stdio). RUST_LOG, when set and valid, wins over `-v`/`-q`. Colour codes only reach a
/// terminal: MCP clients save a server's stderr to log files.
pub fn init_logs(verbose: u8, quiet: u8, format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(verbosity_filter(verbose, quiet)));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    // A second initialisation (none happens in the binary) keeps the first.
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.event_format(JsonLines).try_init(),
    };
}

/// Formats each event as one JSON object on one line.
struct JsonLines;

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for JsonLines
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        context: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let mut fields = JsonFields::default();
        event.record(&mut fields);
        let mut line = fields.0;
        let metadata = event.metadata();
        line.insert(
            "timestamp".into(),
            chrono::Utc::now()
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
                .into(),
        );
        line.insert("level".into(), metadata.level().to_string().into());
        line.insert("target".into(), metadata.target().into());
        if let Some(scope) = context.event_scope() {
            let spans: Vec<Value> = scope.from_root().map(|span| span.name().into()).collect();
            line.insert("spans".into(), spans.into());
        }
        writeln!(writer, "{}", Value::Object(line))
    }
}

/// An event's fields as JSON values.
#[derive(Default)]
struct JsonFields(Map<String, Value>);

impl tracing::field::Visit for JsonFields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0
            .insert(field.name().into(), format!("{value:?}").into());
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_i64(&mut self, field: &tracing::field::Field, value: i64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_f64(&mut self, field: &tracing::field::Field, value: f64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_bool(&mut self, field: &tracing::field::Field, value: bool) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_error(
        &mut self,
        field: &tracing::field::Field,
        value: &(dyn std::error::Error + 'static),
    ) {
        self.0.insert(field.name().into(), value.to_string().into());
    }
}
