//! The agent-client set-up is real. Every JSON snippet in docs/clients.md and docs/mcp.md
//! parses; every `quorumlock` command line they name (a client's `command` and `args`, and
//! the shell lines of clients.md) uses subcommands and flags the binary's `--help` lists;
//! HTTP entries point at the server's MCP route with a bearer header; VS Code's `${input:…}`
//! prompts are declared as passwords. And the Python agent (examples/python/agent.py, on the
//! official MCP SDK) takes a lock, writes with its fencing token and releases it, against the
//! real server over stdio and over HTTP with a token.
//!
//! The SDK is installed once into a virtualenv under `target/tmp` and reused while
//! requirements.txt stays the same. Only a machine without python3 skips the Python tests.

use crate::common;
use crate::mcp_support;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use quorumlock::Topology;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_quorumlock");
const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// A Python agent that has not finished by then is killed and the test fails.
const AGENT_LIMIT: Duration = Duration::from_secs(120);

// ---- The binary's command line, as its --help describes it.

/// What `quorumlock [SUBCOMMAND...] --help` lists.
#[derive(Debug, Clone, Default)]
struct Help {
    commands: BTreeSet<String>,
    /// Long options, and whether each takes a value.
    options: BTreeMap<String, bool>,
    text: String,
}

/// The help of `path` (empty for the top level), read once per path.
fn help(path: &[&str]) -> Help {
    static CACHE: OnceLock<Mutex<HashMap<String, Help>>> = OnceLock::new();
    let key = path.join(" ");
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(found) = cache.lock().expect("help cache").get(&key) {
        return found.clone();
    }
    let output = Command::new(BIN)
        .args(path)
        .arg("--help")
        .output()
        .unwrap_or_else(|e| panic!("run quorumlock {key} --help: {e}"));
    assert!(output.status.success(), "quorumlock {key} --help failed");
    let parsed = parse_help(&String::from_utf8_lossy(&output.stdout));
    cache
        .lock()
        .expect("help cache")
        .insert(key, parsed.clone());
    parsed
}

fn parse_help(text: &str) -> Help {
    let mut help = Help {
        text: text.to_string(),
        ..Help::default()
    };
    let mut in_commands = false;
    for line in text.lines() {
        if line.starts_with("Commands:") {
            in_commands = true;
            continue;
        }
        if in_commands {
            match line.split_whitespace().next() {
                Some(name) if line.starts_with("  ") => {
                    help.commands.insert(name.to_string());
                }
                _ => in_commands = false,
            }
            continue;
        }
        let trimmed = line.trim_start();
        if !trimmed.starts_with('-') {
            continue;
        }
        let words: Vec<&str> = trimmed.split_whitespace().collect();
        for (at, word) in words.iter().enumerate() {
            if let Some(name) = word.strip_prefix("--") {
                let takes_value = words.get(at + 1).is_some_and(|next| next.starts_with('<'));
                help.options
                    .insert(name.trim_end_matches(',').to_string(), takes_value);
                break;
            }
        }
    }
    help
}

/// Checks a `quorumlock` command line (the arguments after the binary) against the help of
/// each subcommand it names; returns what does not exist.
fn check_command_line(args: &[String]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut path: Vec<&str> = Vec::new();
    let mut at = 0;
    while at < args.len() {
        let arg = args[at].as_str();
        let here = help(&path);
        if arg == "--" {
            break;
        }
        if let Some(option) = arg.strip_prefix("--") {
            let (name, inline_value) = match option.split_once('=') {
                Some((name, _)) => (name, true),
                None => (option, false),
            };
            match here.options.get(name) {
                Some(true) if !inline_value => at += 1,
                Some(_) => {}
                None => problems.push(format!(
                    "`quorumlock {}` has no option --{name}",
                    path.join(" ")
                )),
            }
        } else if !arg.starts_with('-') && !here.commands.is_empty() {
            if here.commands.contains(arg) {
                path.push(arg);
            } else {
                problems.push(format!(
                    "`quorumlock {}` has no subcommand {arg}",
                    path.join(" ")
                ));
                break;
            }
        }
        at += 1;
    }
    if path.is_empty() && problems.is_empty() {
        problems.push(format!(
            "`quorumlock {}` names no subcommand",
            args.join(" ")
        ));
    }
    problems
}

/// The path of the MCP endpoint, from `serve --help` ("serves streamable HTTP at
/// http://ADDR/mcp").
fn mcp_path() -> String {
    let text = help(&["serve"]).text;
    let at = text
        .find("http://ADDR/")
        .expect("serve --help names the endpoint as http://ADDR/...");
    let rest = &text[at + "http://ADDR".len()..];
    let end = rest
        .find(|c: char| c.is_whitespace() || c == ',' || c == ')')
        .unwrap_or(rest.len());
    rest[..end].trim_end_matches('.').to_string()
}

// ---- The docs' snippets.

/// A fenced block of `language` in a Markdown file, with the line it starts on.
struct Block {
    file: &'static str,
    line: usize,
    text: String,
}

fn blocks(file: &'static str, language: &str) -> Vec<Block> {
    let markdown = std::fs::read_to_string(Path::new(ROOT).join(file))
        .unwrap_or_else(|e| panic!("read {file}: {e}"));
    let mut found = Vec::new();
    let mut open: Option<(usize, String)> = None;
    for (index, line) in markdown.lines().enumerate() {
        let fence = line.trim();
        match open.take() {
            None if fence == format!("```{language}") => open = Some((index + 1, String::new())),
            None => {}
            Some((start, text)) if fence == "```" => found.push(Block {
                file,
                line: start,
                text,
            }),
            Some((start, mut text)) => {
                text.push_str(line);
                text.push('\n');
                open = Some((start, text));
            }
        }
    }
    assert!(
        open.is_none(),
        "{file}: a ```{language} block is not closed"
    );
    found
}

/// mcp.md shows replies with parts left out (`{…}`, `, ...]`); what remains must parse.
fn without_elisions(text: &str) -> String {
    let mut text = text.replace("{…}", "{}").replace("[…]", "[]");
    for elision in [", ...", ", …"] {
        while let Some(at) = text.find(elision).filter(|&at| {
            text[at + elision.len()..]
                .trim_start()
                .starts_with(['}', ']'])
        }) {
            text.replace_range(at..at + elision.len(), "");
        }
    }
    text
}

/// What the checks of one JSON snippet met, so the test can tell it checked something.
#[derive(Debug, Default)]
struct Seen {
    command_lines: usize,
    http_entries: usize,
    prompts: usize,
}

/// Checks every server entry in a parsed snippet; returns the problems found.
fn check_snippet(snippet: &Value, seen: &mut Seen) -> Vec<String> {
    let mut problems = Vec::new();
    let endpoint = mcp_path();
    let declared: BTreeMap<String, bool> = snippet["inputs"]
        .as_array()
        .map(|inputs| {
            inputs
                .iter()
                .filter_map(|input| {
                    let id = input["id"].as_str()?.to_string();
                    Some((id, input["password"] == Value::Bool(true)))
                })
                .collect()
        })
        .unwrap_or_default();
    for servers in [&snippet["mcpServers"], &snippet["servers"]] {
        let Some(servers) = servers.as_object() else {
            continue;
        };
        for (name, server) in servers {
            let strings = |field: &str| -> Vec<String> {
                server[field]
                    .as_array()
                    .map(|items| {
                        items
                            .iter()
                            .filter_map(|i| i.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default()
            };
            let args = strings("args");
            if let Some(command) = server["command"].as_str() {
                if Path::new(command).file_name() == Some("quorumlock".as_ref()) {
                    seen.command_lines += 1;
                    problems.extend(check_command_line(&args));
                }
            } else if server["url"].as_str().is_none() {
                problems.push(format!("server {name} has neither command nor url"));
            }
            let urls = server["url"]
                .as_str()
                .map(str::to_string)
                .into_iter()
                .chain(args.iter().filter(|a| a.starts_with("http")).cloned());
            for url in urls {
                seen.http_entries += 1;
                if !url.ends_with(&endpoint) {
                    problems.push(format!("{name}: {url} is not the server's {endpoint}"));
                }
            }
            if let Some(headers) = server["headers"].as_object() {
                let authorization = headers
                    .get("Authorization")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                if !authorization.starts_with("Bearer ") {
                    problems.push(format!("{name}: Authorization is not a bearer token"));
                }
            }
            let text = server.to_string();
            for (at, _) in text.match_indices("${input:") {
                let id: String = text[at + "${input:".len()..]
                    .chars()
                    .take_while(|&c| c != '}')
                    .collect();
                seen.prompts += 1;
                match declared.get(&id) {
                    Some(true) => {}
                    Some(false) => problems.push(format!("input {id} is not a password prompt")),
                    None => problems.push(format!("{name} uses ${{input:{id}}}, not declared")),
                }
            }
        }
    }
    problems
}

/// Splits a shell line into words: double and single quotes group, `#` starts a comment.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    let mut in_word = false;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                in_word = true;
            }
            (None, '#') if !in_word => break,
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            (None, c) => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

#[test]
fn client_docs_json_parses_and_names_real_commands() {
    let mut seen = Seen::default();
    let mut problems = Vec::new();
    let mut parsed = 0;
    for (file, elisions) in [("docs/clients.md", false), ("docs/mcp.md", true)] {
        for block in blocks(file, "json") {
            let text = if elisions {
                without_elisions(&block.text)
            } else {
                block.text.clone()
            };
            match serde_json::from_str::<Value>(&text) {
                Ok(snippet) => {
                    parsed += 1;
                    for problem in check_snippet(&snippet, &mut seen) {
                        problems.push(format!("{}:{}: {problem}", block.file, block.line));
                    }
                }
                Err(error) => problems.push(format!(
                    "{}:{}: not JSON: {error}\n{text}",
                    block.file, block.line
                )),
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    eprintln!("{parsed} JSON snippets, {seen:?}");
    // Claude Desktop, Cursor, VS Code and mcp.md's stdio entries; the HTTP entries of
    // Claude Desktop's bridge, Claude Code, Cursor, VS Code and mcp.md; VS Code's prompt.
    assert!(seen.command_lines >= 4, "{seen:?}");
    assert!(seen.http_entries >= 5, "{seen:?}");
    assert!(seen.prompts >= 1, "{seen:?}");
}

#[test]
fn client_docs_shell_lines_name_real_commands() {
    let endpoint = mcp_path();
    let mut problems = Vec::new();
    let mut checked = 0;
    let mut claude_http = 0;
    for block in blocks("docs/clients.md", "sh") {
        for (offset, line) in block.text.lines().enumerate() {
            let words = shell_words(line);
            let at = format!("{}:{}", block.file, block.line + 1 + offset);
            // The binary: the first word after any VAR=value, or the server's command after
            // `claude mcp add ... --`.
            let start = match words.iter().position(|w| w == "--") {
                Some(dash) if words.starts_with(&["claude".into(), "mcp".into()]) => dash + 1,
                _ => words.iter().take_while(|w| w.contains('=')).count(),
            };
            let end = words
                .iter()
                .skip(start)
                .position(|w| ["|", "&&", ">", ";"].contains(&w.as_str()))
                .map_or(words.len(), |end| start + end);
            if words.get(start).is_some_and(|w| w.ends_with("quorumlock")) {
                checked += 1;
                for problem in check_command_line(&words[start + 1..end]) {
                    problems.push(format!("{}: {problem}", at));
                }
            }
            if words.starts_with(&["claude".into(), "mcp".into(), "add".into()])
                && words.contains(&"http".to_string())
            {
                claude_http += 1;
                if !words.iter().any(|w| w.ends_with(&endpoint)) {
                    problems.push(format!("{}: no URL ending in {endpoint}", at));
                }
                let header = words
                    .iter()
                    .position(|w| w == "--header")
                    .and_then(|i| words.get(i + 1));
                if !header.is_some_and(|h| h.starts_with("Authorization: Bearer ")) {
                    problems.push(format!("{}: no bearer --header", at));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // serve --http, health is prose; Claude Code's stdio line; the Python example's lab up.
    assert!(
        checked >= 3,
        "only {checked} quorumlock command lines found"
    );
    assert_eq!(
        claude_http, 3,
        "Claude Code's HTTP lines: https, then local and project"
    );
}

#[test]
fn the_command_check_refuses_what_the_binary_lacks() {
    let words = |line: &str| shell_words(line);
    assert!(check_command_line(&words("--config f.toml serve --http 0.0.0.0:8848")).is_empty());
    assert!(check_command_line(&words("lab up --links")).is_empty());
    assert!(!check_command_line(&words("--config f.toml serve --port 8848")).is_empty());
    assert!(!check_command_line(&words("--config f.toml server")).is_empty());
    assert!(!check_command_line(&words("--config f.toml")).is_empty());
    assert_eq!(
        without_elisions(r#"{"a": [1, ...], "b": {…}, "c": "…", ...}"#),
        r#"{"a": [1], "b": {}, "c": "…"}"#
    );
}

// ---- The Python agent.

/// The virtualenv's python with the MCP SDK installed, or None (with the reason printed)
/// when python3 is absent. Built once under target/tmp; rebuilt when requirements.txt changes.
fn python_with_sdk() -> Option<PathBuf> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _guard = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    match Command::new("python3").arg("--version").output() {
        Ok(output) if output.status.success() => {}
        Ok(output) => panic!("python3 --version failed: {output:?}"),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("SKIPPED: python3 is not installed, so the Python agent example is not run");
            return None;
        }
        Err(error) => panic!("cannot run python3: {error}"),
    }
    let requirements = Path::new(ROOT).join("examples/python/requirements.txt");
    let wanted = std::fs::read_to_string(&requirements).expect("read requirements.txt");
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mcp-python-sdk");
    let python = venv.join("bin/python");
    let stamp = venv.join("requirements.txt");
    if python.exists() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(&wanted) {
        return Some(python);
    }
    if venv.exists() {
        std::fs::remove_dir_all(&venv).expect("remove the outdated virtualenv");
    }
    let run = |command: &mut Command, what: &str| {
        let output = command.output().unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(
            output.status.success(),
            "{what} failed:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    };
    run(
        Command::new("python3").args(["-m", "venv"]).arg(&venv),
        "python3 -m venv",
    );
    run(
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "-r",
            ])
            .arg(&requirements),
        "pip install -r examples/python/requirements.txt",
    );
    std::fs::write(&stamp, wanted).expect("write the requirements stamp");
    Some(python)
}

/// The fenced store the agent leaves behind.
#[derive(Debug, serde::Deserialize)]
struct Store {
    fencing_token: u64,
    writes: Vec<StoreWrite>,
}

#[derive(Debug, serde::Deserialize)]
struct StoreWrite {
    fencing_token: u64,
    value: String,
}

/// A lab whose client timeouts suit a busy 2-core machine running debug servers.
async fn lab() -> common::Fixture {
    common::fixture(
        |spec| spec,
        |mut topology: Topology| {
            topology.call_timeout_ms = 1000;
            topology
        },
    )
    .await
}

/// What the official SDK logs when a server answers the DELETE that ends an HTTP session
/// with anything but 200 or 204.
const TERMINATION_WARNING: &str = "Session termination failed";

/// Runs agent.py with `args` (and `env`); returns its stdout after checking it exited 0 and
/// the SDK logged no warning about the session's end.
async fn run_agent(python: &Path, args: &[&str], env: &[(&str, &str)]) -> String {
    let mut command = tokio::process::Command::new(python);
    command
        .arg(Path::new(ROOT).join("examples/python/agent.py"))
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(AGENT_LIMIT, command.output())
        .await
        .unwrap_or_else(|_| panic!("agent.py still ran after {AGENT_LIMIT:?}; killed"))
        .expect("run agent.py");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!(
        "agent.py {}\n--- stdout\n{stdout}--- stderr\n{stderr}",
        output.status
    );
    assert!(output.status.success(), "agent.py failed");
    assert!(
        !stderr.contains(TERMINATION_WARNING),
        "the MCP SDK warned as the session ended: {stderr}"
    );
    stdout
}

/// What every run must leave: three fenced writes in order, the stale write refused, every
/// lock released (the engine takes it at once, with a fencing token above the agent's).
async fn check_agent_run(fx: &common::Fixture, stdout: &str, store: &Path, resource: &str) {
    let store: Store = serde_json::from_str(&std::fs::read_to_string(store).expect("store"))
        .expect("the store is JSON");
    let tokens: Vec<u64> = store.writes.iter().map(|w| w.fencing_token).collect();
    assert_eq!(tokens.len(), 3, "{store:?}");
    assert!(tokens.windows(2).all(|t| t[0] < t[1]), "{tokens:?}");
    assert_eq!(store.fencing_token, tokens[2]);
    assert!(store.writes[0].value.starts_with("task 1 by "), "{store:?}");
    assert_eq!(stdout.matches("released=true").count(), 3, "{stdout}");
    assert!(
        stdout.contains(&format!("stale write refused: fencing token {}", tokens[0])),
        "{stdout}"
    );
    let lease = fx
        .locks
        .acquire(resource)
        .ttl(Duration::from_secs(10))
        .await
        .expect("the agent released the lock, so it is free at once");
    assert!(lease.fencing_token() > tokens[2]);
    lease.release().await.expect("release");
}

#[tokio::test]
async fn the_python_agent_locks_over_stdio() {
    let Some(python) = python_with_sdk() else {
        return;
    };
    let fx = lab().await;
    let config = fx.file("quorumlock.toml", &fx.topology.to_toml());
    let store = fx.path("store.json");
    let stdout = run_agent(
        &python,
        &[
            "--server",
            BIN,
            "--config",
            config.to_str().expect("UTF-8 path"),
            "--store",
            store.to_str().expect("UTF-8 path"),
            "--resource",
            "report:stdio",
        ],
        &[],
    )
    .await;
    check_agent_run(&fx, &stdout, &store, "report:stdio").await;
}

#[tokio::test]
async fn the_python_agent_locks_over_http_cleanly() {
    let Some(python) = python_with_sdk() else {
        return;
    };
    let fx = lab().await;
    let config = fx.file("quorumlock.toml", &fx.topology.to_toml());
    let token = "a-token-for-the-python-agent";
    let server = mcp_support::http_server(&config, Some(token), &[]).await;
    let store = fx.path("store.json");
    let store_arg = store.to_str().expect("UTF-8 path");
    let url = server.url.as_str();
    let agent = [
        "--url",
        url,
        "--store",
        store_arg,
        "--resource",
        "report:http",
    ];
    let stdout = run_agent(&python, &agent, &[("QUORUMLOCK_MCP_TOKEN", token)]).await;
    check_agent_run(&fx, &stdout, &store, "report:http").await;

    // The same agent with a wrong token is refused and writes nothing.
    let before = std::fs::read_to_string(&store).expect("store");
    let mut command = tokio::process::Command::new(&python);
    command
        .arg(Path::new(ROOT).join("examples/python/agent.py"))
        .args(agent)
        .env("QUORUMLOCK_MCP_TOKEN", "not-the-token")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let refused = tokio::time::timeout(AGENT_LIMIT, command.output())
        .await
        .expect("agent.py with a wrong token ends")
        .expect("run agent.py");
    assert!(!refused.status.success(), "a wrong token must be refused");
    assert_eq!(std::fs::read_to_string(&store).expect("store"), before);
}

#[tokio::test]
async fn the_python_agent_works_with_a_stateless_server() {
    let Some(python) = python_with_sdk() else {
        return;
    };
    let fx = lab().await;
    let config = fx.file("quorumlock.toml", &fx.topology.to_toml());
    let token = "a-token-for-the-stateless-agent";
    // Room for one session: a server that opened one for the raw client below would refuse
    // the SDK's.
    let flags = ["--stateless", "--max-sessions", "1"];
    let server = mcp_support::http_server(&config, Some(token), &flags).await;
    let bearer = format!("Bearer {token}");
    let [content_type, accept] = mcp_support::MCP_POST_HEADERS;
    let headers = [content_type, accept, ("Authorization", bearer.as_str())];
    let (status, body) = mcp_support::raw_http(
        &server.addr,
        "POST",
        "/mcp",
        &headers,
        mcp_support::RAW_INITIALIZE,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let store = fx.path("store.json");
    let agent = [
        "--url",
        server.url.as_str(),
        "--store",
        store.to_str().expect("UTF-8 path"),
        "--resource",
        "report:stateless",
    ];
    let stdout = run_agent(&python, &agent, &[("QUORUMLOCK_MCP_TOKEN", token)]).await;
    check_agent_run(&fx, &stdout, &store, "report:stateless").await;
}
