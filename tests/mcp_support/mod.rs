//! Support for the MCP tests: the real `quorumlock serve` binary as a child process, rmcp's
//! real clients for stdio and HTTP, a recorder for logging notifications, a raw HTTP request
//! for status codes, Drop guards that kill every server by PID even when a test fails, and the
//! set-up the tool-contract tests share.

#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use quorumlock::mcp::LISTENING_PREFIX;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation, Tool,
};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use crate::common::sentinel_lab;

pub const BIN: &str = env!("CARGO_BIN_EXE_quorumlock");

/// Topology overrides every test server gets. These tests are about the MCP server, and they
/// run debug builds on busy 2-core machines next to a dozen redis-server processes: a group
/// answering in 150 ms must not count as failed, so the per-call timeout is 1 s instead of
/// 100 ms. (A killed master still fails at once: its connection is refused.)
pub const TEST_ENV: [(&str, &str); 2] =
    [("QUORUMLOCK_CALL_TIMEOUT_MS", "1000"), ("RUST_LOG", "warn")];

/// An MCP client session that records the logging notifications it receives.
pub type Client = RunningService<RoleClient, Recorder>;

/// Client handler that forwards every logging notification's data to a channel.
#[derive(Clone)]
pub struct Recorder {
    logs: mpsc::UnboundedSender<Value>,
}

impl ClientHandler for Recorder {
    #[allow(deprecated)]
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self.logs.send(params.data);
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("quorumlock-tests", "0.1.0"),
        )
    }
}

pub fn recorder() -> (Recorder, mpsc::UnboundedReceiver<Value>) {
    let (logs, received) = mpsc::unbounded_channel();
    (Recorder { logs }, received)
}

/// Kills a process by PID when dropped, unless disarmed after it was seen to exit. Only a
/// process still running our binary is killed, so a recycled PID is never hit.
pub struct PidGuard {
    pid: Option<u32>,
}

impl PidGuard {
    pub fn new(pid: u32) -> PidGuard {
        PidGuard { pid: Some(pid) }
    }

    pub fn pid(&self) -> u32 {
        self.pid.unwrap_or(0)
    }

    /// The process exited and was reaped: nothing left to kill.
    pub fn disarm(&mut self) {
        self.pid = None;
    }
}

impl Drop for PidGuard {
    fn drop(&mut self) {
        if let Some(pid) = self.pid.take() {
            kill_if_ours(pid);
        }
    }
}

/// SIGKILLs `pid` if it still runs the quorumlock binary.
pub fn kill_if_ours(pid: u32) {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    if String::from_utf8_lossy(&cmdline).contains("quorumlock") {
        // SAFETY: kill(2) with a PID we checked runs our binary; no memory is involved.
        unsafe {
            libc::kill(pid as libc::pid_t, libc::SIGKILL);
        }
    }
}

/// True when `pid` no longer runs (gone, or a zombie waiting to be reaped).
pub fn has_exited(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

/// A stdio server started by rmcp's child-process transport, and the session to it.
pub struct StdioServer {
    // Declared first so it is dropped first: the kill happens before rmcp's own cleanup can
    // reap the process and free its PID.
    pub guard: PidGuard,
    pub client: Client,
    pub logs: mpsc::UnboundedReceiver<Value>,
}

/// Starts `quorumlock --config <config> serve <extra>` and opens an MCP session over stdio.
pub async fn stdio_server(config: &Path, extra: &[&str]) -> StdioServer {
    stdio_server_with_env(config, extra, &[]).await
}

/// [`stdio_server`] with extra environment variables for the server (e.g. topology overrides).
pub async fn stdio_server_with_env(
    config: &Path,
    extra: &[&str],
    env: &[(&str, &str)],
) -> StdioServer {
    let mut command = tokio::process::Command::new(BIN);
    command
        .arg("--config")
        .arg(config)
        .arg("serve")
        .args(extra)
        .envs(TEST_ENV)
        .envs(env.iter().copied());
    let (transport, _) = TokioChildProcess::builder(command)
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn quorumlock serve");
    let guard = PidGuard::new(transport.id().expect("server PID"));
    let (handler, logs) = recorder();
    let client = handler
        .serve(transport)
        .await
        .expect("MCP handshake over stdio");
    StdioServer {
        guard,
        client,
        logs,
    }
}

impl StdioServer {
    /// Ends the session the polite way (stdin closed), waits for the server to exit.
    pub async fn close(mut self) {
        let pid = self.guard.pid();
        let _ = self.client.cancel().await;
        if has_exited(pid) {
            self.guard.disarm();
        }
    }
}

/// An HTTP server child process.
pub struct HttpServer {
    child: tokio::process::Child,
    pub url: String,
    pub addr: String,
    pub stderr: Arc<Mutex<Vec<String>>>,
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        // SIGKILL by PID; tokio reaps it in the background and knows not to signal a reaped PID.
        let _ = self.child.start_kill();
    }
}

/// Starts `quorumlock serve --http 127.0.0.1:0` and waits for its listening line.
pub async fn http_server(config: &Path, token: Option<&str>, extra: &[&str]) -> HttpServer {
    http_server_with_env(config, token, extra, &[]).await
}

/// [`http_server`] with extra environment variables for the server (e.g. capacity limits).
pub async fn http_server_with_env(
    config: &Path,
    token: Option<&str>,
    extra: &[&str],
    env: &[(&str, &str)],
) -> HttpServer {
    let mut command = tokio::process::Command::new(BIN);
    command
        .arg("--config")
        .arg(config)
        .args(["serve", "--http", "127.0.0.1:0"])
        .args(extra)
        .envs(TEST_ENV)
        .envs(env.iter().copied())
        .env_remove("QUORUMLOCK_MCP_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(token) = token {
        command.env("QUORUMLOCK_MCP_TOKEN", token);
    }
    let mut child = command.spawn().expect("spawn quorumlock serve --http");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr pipe")).lines();
    let stderr = Arc::new(Mutex::new(Vec::new()));
    let url = loop {
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("the server prints its address within 30 s")
            .expect("read stderr")
            .unwrap_or_else(|| {
                panic!(
                    "server exited before listening: {:?}",
                    stderr.lock().map(|l| l.clone())
                )
            });
        eprintln!("[server] {line}");
        if let Some(url) = line.strip_prefix(LISTENING_PREFIX) {
            break url.trim().to_string();
        }
        stderr.lock().expect("stderr log").push(line);
    };
    let log = Arc::clone(&stderr);
    // Keep draining stderr so the server never blocks on a full pipe.
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            eprintln!("[server] {line}");
            if let Ok(mut log) = log.lock() {
                log.push(line);
            }
        }
    });
    let addr = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .and_then(|rest| rest.strip_suffix("/mcp"))
        .expect("URL shape")
        .to_string();
    HttpServer {
        child,
        url,
        addr,
        stderr,
    }
}

impl HttpServer {
    pub fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }

    /// Sends SIGTERM and waits for the exit status.
    pub async fn terminate(&mut self) -> std::process::ExitStatus {
        // SAFETY: kill(2) on our own child, which has not been reaped (we still hold it).
        unsafe {
            libc::kill(self.pid() as libc::pid_t, libc::SIGTERM);
        }
        tokio::time::timeout(Duration::from_secs(20), self.child.wait())
            .await
            .expect("the server exits within 20 s of SIGTERM")
            .expect("wait for the server")
    }

    /// Sends SIGKILL, as a crash would, and waits for the exit.
    pub async fn kill(&mut self) {
        // SAFETY: kill(2) on our own child, which has not been reaped (we still hold it).
        unsafe {
            libc::kill(self.pid() as libc::pid_t, libc::SIGKILL);
        }
        tokio::time::timeout(Duration::from_secs(20), self.child.wait())
            .await
            .expect("the server exits within 20 s of SIGKILL")
            .expect("wait for the server");
    }

    /// Opens an MCP session with rmcp's streamable HTTP client.
    pub async fn connect(
        &self,
        token: Option<&str>,
    ) -> Result<(Client, mpsc::UnboundedReceiver<Value>), String> {
        // rmcp's HTTP client is built with rustls (the https test needs it), which asks for
        // the process's crypto provider.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut config = StreamableHttpClientTransportConfig::with_uri(self.url.clone());
        if let Some(token) = token {
            config = config.auth_header(token);
        }
        let (handler, logs) = recorder();
        let client = handler
            .serve(StreamableHttpClientTransport::from_config(config))
            .await
            .map_err(|error| error.to_string())?;
        Ok((client, logs))
    }
}

/// One raw HTTP/1.1 request; returns the status code and the body. The `Host` header names
/// `addr` unless `headers` has one.
pub async fn raw_http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String) {
    let (status, _, body) = raw_http_response(addr, method, path, headers, body).await;
    (status, body)
}

/// [`raw_http`], with the response's head (status line and headers) too.
pub async fn raw_http_response(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("host"))
    {
        request.push_str(&format!("Host: {addr}\r\n"));
    }
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .expect("send head");
    // The server may answer (413) and close before reading a large body; that is fine.
    let _ = stream.write_all(body).await;
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response).await;
    let text = String::from_utf8_lossy(&response).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status in {text:?}"));
    let (head, body) = text
        .split_once("\r\n\r\n")
        .map(|(head, body)| (head.to_string(), body.to_string()))
        .unwrap_or_default();
    (status, head, body)
}

/// A raw `initialize` request body, for [`raw_http`].
pub const RAW_INITIALIZE: &[u8] = br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;

/// The headers a raw POST to `/mcp` needs besides the token.
pub const MCP_POST_HEADERS: [(&str, &str); 2] = [
    ("Content-Type", "application/json"),
    ("Accept", "application/json, text/event-stream"),
];

/// Calls a tool; a JSON-RPC error becomes `Err(message)`.
pub async fn try_call(
    client: &Client,
    tool: &str,
    arguments: Value,
) -> Result<CallToolResult, String> {
    let Value::Object(arguments) = arguments else {
        panic!("arguments must be an object")
    };
    client
        .call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(arguments))
        .await
        .map_err(|error| error.to_string())
}

/// Calls a tool that must answer with a result (error results included).
pub async fn call(client: &Client, tool: &str, arguments: Value) -> CallToolResult {
    try_call(client, tool, arguments.clone())
        .await
        .unwrap_or_else(|error| panic!("{tool}({arguments}) failed at the protocol level: {error}"))
}

/// Calls a tool that must succeed; returns its structured content.
pub async fn ok(client: &Client, tool: &str, arguments: Value) -> Value {
    let result = call(client, tool, arguments.clone()).await;
    assert_ne!(
        result.is_error,
        Some(true),
        "{tool}({arguments}) failed: {}",
        text(&result)
    );
    let summary = text(&result);
    assert!(
        !summary.is_empty() && !summary.contains('\n'),
        "{tool}: the summary must be one line: {summary:?}"
    );
    result
        .structured_content
        .unwrap_or_else(|| panic!("{tool} returned no structured content"))
}

/// Calls a tool that must fail with a tool error; returns the error text.
pub async fn tool_error(client: &Client, tool: &str, arguments: Value) -> String {
    let result = call(client, tool, arguments.clone()).await;
    assert_eq!(
        result.is_error,
        Some(true),
        "{tool}({arguments}) should fail, got {:?}",
        result.structured_content
    );
    text(&result)
}

/// Calls a tool that must fail with a tool error; returns the error's text and its
/// structured `error` object, after checking that the text starts with the error's kind.
pub async fn tool_error_of(client: &Client, tool: &str, arguments: Value) -> (String, Value) {
    let result = call(client, tool, arguments.clone()).await;
    assert_eq!(
        result.is_error,
        Some(true),
        "{tool}({arguments}) should fail, got {:?}",
        result.structured_content
    );
    let message = text(&result);
    let error = result
        .structured_content
        .as_ref()
        .map(|content| content["error"].clone())
        .unwrap_or_else(|| {
            panic!("{tool}({arguments}): the error has no structured content: {message}")
        });
    let kind = error["kind"].as_str().unwrap_or_default();
    assert!(
        !kind.is_empty() && message.starts_with(&format!("{kind}: ")),
        "{tool}({arguments}): the text does not start with the kind {kind:?}: {message}"
    );
    (message, error)
}

/// The kind of a tool error, after [`tool_error_of`]'s checks.
pub async fn error_kind(client: &Client, tool: &str, arguments: Value) -> String {
    let (_, error) = tool_error_of(client, tool, arguments).await;
    error["kind"].as_str().unwrap_or_default().to_string()
}

/// Calls a tool that does not exist; returns the JSON-RPC error.
pub async fn protocol_error(client: &Client, tool: &str) -> rmcp::model::ErrorData {
    match client
        .call_tool(CallToolRequestParams::new(tool.to_string()))
        .await
    {
        Err(rmcp::ServiceError::McpError(error)) => error,
        other => panic!("calling {tool} should be a JSON-RPC error, got {other:?}"),
    }
}

/// The text of a result's first content block.
pub fn text(result: &CallToolResult) -> String {
    result
        .content
        .first()
        .and_then(|block| block.as_text())
        .map(|text| text.text.clone())
        .unwrap_or_default()
}

/// A field as u64, or a panic naming it.
pub fn u64_of(value: &Value, field: &str) -> u64 {
    value[field]
        .as_u64()
        .unwrap_or_else(|| panic!("`{field}` is not a u64 in {value}"))
}

/// A field as str, or a panic naming it.
pub fn str_of<'v>(value: &'v Value, field: &str) -> &'v str {
    value[field]
        .as_str()
        .unwrap_or_else(|| panic!("`{field}` is not a string in {value}"))
}

/// Fails a test that hangs instead of hanging the whole run.
pub async fn within<T>(limit: Duration, test: impl Future<Output = T>) -> T {
    tokio::time::timeout(limit, test)
        .await
        .expect("the test took too long")
}

/// Whether `lock_status` says `resource` is held.
pub async fn held(client: &Client, resource: &str) -> bool {
    ok(client, "lock_status", json!({"resource": resource})).await["held"] == json!(true)
}

/// The tools the server lists, and whether each is read-only.
pub const TOOLS: [(&str, bool); 6] = [
    ("acquire_lock", false),
    ("release_lock", false),
    ("extend_lock", false),
    ("lock_status", true),
    ("list_locks", true),
    ("cluster_health", true),
];

/// The set-up of every tool's contract test: a Sentinel lab, a stdio server on it, and the
/// tool `name` as tools/list describes it, checked against what every tool promises (the list
/// holds exactly [`TOOLS`]; the tool has an output schema, its read-only hint, and, unless it
/// is `acquire_lock`, the idempotent hint). `test` then runs within 60 s, and the server is
/// closed after it.
pub async fn tool_contract(name: &str, test: impl AsyncFnOnce(&Client, &Tool)) {
    let fx = sentinel_lab().await;
    within(Duration::from_secs(60), async {
        let server = stdio_server(&fx.lab.config_path(), &[]).await;
        let client = &server.client;
        let tools = client.list_all_tools().await.expect("tools/list");
        let by_name: HashMap<String, &Tool> =
            tools.iter().map(|t| (t.name.to_string(), t)).collect();
        let names: HashSet<&str> = by_name.keys().map(String::as_str).collect();
        assert_eq!(names, TOOLS.iter().map(|(name, _)| *name).collect());
        let tool = by_name[name];
        assert!(
            tool.output_schema.is_some(),
            "{} has no output schema",
            tool.name
        );
        let annotations = tool.annotations.as_ref().expect("annotations");
        let read_only = TOOLS.contains(&(name, true));
        assert_eq!(annotations.read_only_hint, Some(read_only), "{}", tool.name);
        if tool.name != "acquire_lock" {
            assert_eq!(annotations.idempotent_hint, Some(true), "{}", tool.name);
        }
        test(client, tool).await;
        server.close().await;
    })
    .await;
}

/// Releases `resource` with `token`; returns the result.
pub async fn release(client: &Client, resource: &str, token: &str) -> Value {
    ok(
        client,
        "release_lock",
        json!({"resource": resource, "token": token}),
    )
    .await
}

/// The lock the contract tests take first: `contract:a` for 20 s, by agent-1 for "contract
/// test".
pub async fn acquire_contract_lock(client: &Client) -> Value {
    ok(
        client,
        "acquire_lock",
        json!({"resource": "contract:a", "ttl_ms": 20000, "owner": "agent-1", "purpose": "contract test"}),
    )
    .await
}
