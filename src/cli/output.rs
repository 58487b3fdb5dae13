//! How commands print: aligned plain tables for people, JSON for programs (`--json`).

use comfy_table::{ContentArrangement, Row, Table, presets};
use serde::Serialize;

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
