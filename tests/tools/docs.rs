//! Claims the docs make about the code, checked against it: design.md's Layout names every
//! folder and file under src/ (and nothing that is gone), the front doors and tools use only
//! the public API (design.md's dependency rule), and, as the README says, every command of
//! the binary has `--help` with examples.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const BIN: &str = env!("CARGO_BIN_EXE_quorumlock");

/// The column where design.md's Layout starts its descriptions: a line indented less starts
/// an entry (`name/` or `name.ext`), a line indented this much continues the one before.
const DESCRIPTION_COLUMN: usize = 16;

/// design.md's Layout: each entry's path (`src/cli/run/`, `src/lib.rs`) and its text.
fn layout() -> BTreeMap<String, String> {
    let design = std::fs::read_to_string(Path::new(ROOT).join("docs/design.md"))
        .expect("read docs/design.md");
    let block: Vec<&str> = design
        .split("## Layout")
        .nth(1)
        .and_then(|rest| rest.split("```").nth(1))
        .expect("docs/design.md has a ## Layout section with a code block")
        .lines()
        .collect();
    let mut entries: BTreeMap<String, String> = BTreeMap::new();
    // The folders enclosing the current line, by depth (two spaces a level).
    let mut folders: Vec<String> = Vec::new();
    let mut current: Option<String> = None;
    for line in block {
        let indent = line.len() - line.trim_start().len();
        let name = line.split_whitespace().next().unwrap_or_default();
        let is_entry = indent < DESCRIPTION_COLUMN
            && !name.is_empty()
            && (name.ends_with('/') || name.contains('.'));
        if is_entry {
            let depth = indent / 2;
            folders.truncate(depth);
            let path = format!("{}{name}", folders.concat());
            if name.ends_with('/') {
                folders.push(name.to_string());
            }
            entries.insert(path.clone(), line.trim_start()[name.len()..].to_string());
            current = Some(path);
        } else if let Some(path) = &current
            && let Some(text) = entries.get_mut(path)
        {
            text.push(' ');
            text.push_str(line.trim());
        }
    }
    entries
}

/// The words of an entry's text: names such as `by_token`, `fan_out` or `index.html`.
fn words(text: &str) -> Vec<&str> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.' || c == '-'))
        .map(|word| word.trim_end_matches('.'))
        .filter(|word| !word.is_empty())
        .collect()
}

/// Every folder under `dir` (itself included), with its files, as paths relative to ROOT.
fn tree(dir: &Path, out: &mut Vec<(String, Vec<String>)>) {
    let mut files = Vec::new();
    let mut folders = Vec::new();
    let mut children: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .collect();
    children.sort();
    for child in children {
        let name = child
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        if child.is_dir() {
            folders.push(child);
        } else {
            files.push(name);
        }
    }
    let relative = dir.strip_prefix(ROOT).unwrap_or(dir);
    out.push((format!("{}/", relative.display()), files));
    for folder in folders {
        tree(&folder, out);
    }
}

#[test]
fn design_md_layout_names_exactly_what_src_holds() {
    let entries = layout();
    let mut folders = Vec::new();
    tree(&Path::new(ROOT).join("src"), &mut folders);
    let mut missing = Vec::new();
    for (folder, files) in &folders {
        let Some(text) = entries.get(folder) else {
            missing.push(format!("the folder {folder} has no line"));
            continue;
        };
        let named = words(text);
        for file in files {
            // A folder's mod.rs is the folder's own line.
            if file == "mod.rs" || entries.contains_key(&format!("{folder}{file}")) {
                continue;
            }
            let name = file.strip_suffix(".rs").unwrap_or(file);
            if !named.contains(&name) {
                missing.push(format!("{folder}{file} is not named on {folder}'s line"));
            }
        }
    }
    // Every src/ entry names something that exists.
    for path in entries.keys().filter(|path| path.starts_with("src/")) {
        if !Path::new(ROOT).join(path).exists() {
            missing.push(format!("{path} is in the Layout but not in the tree"));
        }
    }
    assert!(
        missing.is_empty(),
        "docs/design.md's Layout is out of date:\n{}",
        missing.join("\n")
    );
}

/// The folders of the front doors and tools, which design.md says use only the public API
/// re-exported in lib.rs.
const USERS_OF_THE_API: [&str; 5] = ["src/cli", "src/mcp", "src/lab", "src/chaos", "src/bench"];

/// The crate's layers below the public API: private modules, reached only through lib.rs.
const PRIVATE_LAYERS: [&str; 3] = ["engine", "group", "config"];

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display())) {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

/// The paths after each `crate::` of `code`, with a `use crate::{a, b::c}` group split into
/// its items (`a`, `b::c`).
fn crate_paths(code: &str) -> Vec<String> {
    let mut paths = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // The group up to its closing brace, nested groups included.
            let mut depth = 1;
            let end = group
                .char_indices()
                .find(|&(_, c)| {
                    depth += match c {
                        '{' => 1,
                        '}' => -1,
                        _ => 0,
                    };
                    depth == 0
                })
                .map_or(group.len(), |(end, _)| end);
            let mut item = String::new();
            let mut depth = 0;
            for c in group[..end].chars() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => paths.push(std::mem::take(&mut item)),
                    _ => item.push(c),
                }
            }
            paths.push(item);
        } else {
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(rest.len());
            paths.push(rest[..end].to_string());
        }
    }
    paths
        .into_iter()
        .map(|path| path.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|path| !path.is_empty())
        .collect()
}

#[test]
fn front_doors_use_only_the_public_engine_api() {
    let mut files = Vec::new();
    for folder in USERS_OF_THE_API {
        rust_files(&Path::new(ROOT).join(folder), &mut files);
    }
    files.sort();
    let mut leaks = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file)
            .unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
        // Comments may name private paths; only code is checked.
        let code: String = text
            .lines()
            .map(|line| line.split("//").next().unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n");
        for path in crate_paths(&code) {
            let first = path.split("::").next().unwrap_or_default();
            if PRIVATE_LAYERS.contains(&first) {
                let relative = file.strip_prefix(ROOT).unwrap_or(file);
                leaks.push(format!("{}: crate::{path}", relative.display()));
            }
        }
    }
    assert!(
        !files.is_empty() && leaks.is_empty(),
        "front doors and tools must use the public API re-exported in lib.rs (add a public, \
         named way there), not these private paths:\n{}",
        leaks.join("\n")
    );
}

#[test]
fn the_leak_check_reads_plain_and_grouped_paths() {
    let code = "use crate::engine::clock::millis;\nuse crate::{Locks, group::reply::Reply};\nlet x = crate::config::DEFAULT;";
    assert_eq!(
        crate_paths(code),
        [
            "engine::clock::millis",
            "Locks",
            "group::reply::Reply",
            "config::DEFAULT"
        ]
    );
}

/// The subcommands `quorumlock <path> --help` lists (without `help`).
fn subcommands(path: &[&str]) -> Vec<String> {
    let help = help_text(path);
    let mut names = Vec::new();
    let mut listing = false;
    for line in help.lines() {
        if line.starts_with("Commands:") {
            listing = true;
            continue;
        }
        if listing {
            match line
                .strip_prefix("  ")
                .and_then(|l| l.split_whitespace().next())
            {
                Some(name) if !line.starts_with("   ") => names.push(name.to_string()),
                Some(_) => {}
                None => break,
            }
        }
    }
    names.retain(|name| name != "help");
    names
}

fn help_text(path: &[&str]) -> String {
    let output = Command::new(BIN)
        .args(path)
        .arg("--help")
        .output()
        .unwrap_or_else(|e| panic!("run quorumlock {} --help: {e}", path.join(" ")));
    assert!(
        output.status.success(),
        "quorumlock {} --help failed",
        path.join(" ")
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn every_command_has_help_with_examples() {
    let commands = subcommands(&[]);
    assert!(commands.contains(&"lab".to_string()), "{commands:?}");
    let mut paths: Vec<Vec<String>> = commands.iter().map(|c| vec![c.clone()]).collect();
    for command in &commands {
        for sub in subcommands(&[command.as_str()]) {
            paths.push(vec![command.clone(), sub]);
        }
    }
    let without: Vec<String> = paths
        .iter()
        .filter(|path| {
            let path: Vec<&str> = path.iter().map(String::as_str).collect();
            let text = help_text(&path);
            !(text.contains("Example:") || text.contains("Examples:"))
        })
        .map(|path| path.join(" "))
        .collect();
    assert!(
        without.is_empty(),
        "these commands' --help has no examples: {without:?}"
    );
}
