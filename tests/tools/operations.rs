//! What operators meet around the locks: `--version`, where the topology file is found,
//! secrets kept out of it, errors and logs fit for programs and log files, and the quorum and
//! group series of `/metrics`. Each test runs the real binary (and, where groups must answer,
//! a lab of real redis-server processes); environment variables are set on the child only.

use crate::common;
use crate::mcp_support;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{fixture, plain_lab, temp_dir};
use mcp_support::{BIN, http_server, http_server_with_env, raw_http, within};
use quorumlock::{Locks, Topology};
use serde_json::{Value, json};

const TOKEN: &str = "operations-token-0123456789";

/// The binary with none of the caller's quorumlock settings: no config, no token, no lab
/// directory or home of the caller, logs at their default level.
fn quorumlock(cwd: &Path) -> Command {
    let mut command = Command::new(BIN);
    command
        .current_dir(cwd)
        .env_remove("QUORUMLOCK_CONFIG")
        .env_remove("QUORUMLOCK_MCP_TOKEN")
        .env_remove("QUORUMLOCK_LOG_FORMAT")
        .env_remove("RUST_LOG")
        .env_remove("XDG_CONFIG_HOME")
        .env("HOME", cwd.join("home"))
        .env("QUORUMLOCK_LAB_DIR", cwd.join("no-lab"))
        .env("QUORUMLOCK_CALL_TIMEOUT_MS", "1000")
        .stdin(Stdio::null());
    command
}

fn run(command: &mut Command) -> Output {
    command.output().expect("run quorumlock")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).to_string()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).to_string()
}

fn json_of(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
        panic!(
            "stdout is not JSON ({error}): {}\nstderr: {}",
            stdout(output),
            stderr(output)
        )
    })
}

/// A topology of groups nobody listens on: commands that never reach a group, or that must
/// find none, use it without a lab.
const UNREACHABLE: &str = r#"
[[groups]]
name = "g1"
address = "127.0.0.1:1"
[[groups]]
name = "g2"
address = "127.0.0.1:2"
[[groups]]
name = "g3"
address = "127.0.0.1:3"
"#;

#[test]
fn version_prints_the_crate_version() {
    let dir = temp_dir();
    let output = run(quorumlock(dir.path()).arg("--version"));
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        stdout(&output).trim(),
        format!("quorumlock {}", env!("CARGO_PKG_VERSION"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_topology_file_is_found_in_order_and_named() {
    let fx = plain_lab().await;
    let config = std::fs::read_to_string(fx.lab.config_path()).expect("lab config");
    let dir = temp_dir();
    let cwd = dir.path().join("work");
    let xdg = dir.path().join("xdg");
    std::fs::create_dir_all(cwd.join("home/.config/quorumlock")).expect("home config dir");
    std::fs::create_dir_all(xdg.join("quorumlock")).expect("xdg dir");
    let home_file = cwd.join("home/.config/quorumlock/quorumlock.toml");
    let xdg_file = xdg.join("quorumlock/quorumlock.toml");
    let env_file = dir.path().join("from-env.toml");
    let flag_file = dir.path().join("from-flag.toml");
    for file in [&home_file, &xdg_file, &env_file, &flag_file] {
        std::fs::write(file, &config).expect("write config");
    }
    let health = |configure: &dyn Fn(&mut Command)| {
        let mut command = quorumlock(&cwd);
        configure(&mut command);
        let output = run(command.args(["--json", "health"]));
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        let health = json_of(&output);
        assert_eq!(health["quorum_available"], json!(true), "{health}");
        (
            health["config"]["source"]
                .as_str()
                .unwrap_or("")
                .to_string(),
            health["config"]["path"].as_str().unwrap_or("").to_string(),
        )
    };
    let found = |source: &str, path: &Path| (source.to_string(), path.display().to_string());

    // Nothing but ~/.config.
    assert_eq!(health(&|_| {}), found("user", &home_file));
    // XDG_CONFIG_HOME replaces ~/.config.
    let with_xdg = |command: &mut Command| {
        command.env("XDG_CONFIG_HOME", &xdg);
    };
    assert_eq!(health(&with_xdg), found("user", &xdg_file));
    // ./quorumlock.toml comes before the user's file.
    std::fs::write(cwd.join("quorumlock.toml"), &config).expect("write ./quorumlock.toml");
    assert_eq!(
        health(&with_xdg),
        found("working_dir", Path::new("quorumlock.toml"))
    );
    // QUORUMLOCK_CONFIG before that, --config before everything.
    let with_env = |command: &mut Command| {
        command
            .env("XDG_CONFIG_HOME", &xdg)
            .env("QUORUMLOCK_CONFIG", &env_file);
    };
    assert_eq!(health(&with_env), found("env", &env_file));
    let with_flag = |command: &mut Command| {
        with_env(command);
        command.arg("--config").arg(&flag_file);
    };
    assert_eq!(health(&with_flag), found("flag", &flag_file));

    // The table says it too, and so does --help.
    let output = run(quorumlock(&cwd).arg("health"));
    assert!(
        stdout(&output).contains("config: quorumlock.toml (from ./quorumlock.toml)"),
        "{}",
        stdout(&output)
    );
    let output = run(quorumlock(&cwd)
        .env("QUORUMLOCK_CONFIG", &env_file)
        .arg("--help"));
    let help = stdout(&output);
    assert!(
        help.contains(&format!(
            "In use without --config or --lab: {} (from QUORUMLOCK_CONFIG)",
            env_file.display()
        )),
        "{help}"
    );
    assert!(
        help.contains("/etc/quorumlock/quorumlock.toml, and last the config of the lab"),
        "{help}"
    );
}

/// The lab's topology with every password moved out of the file: the masters' into an
/// environment variable, the Sentinels' into a file.
fn topology_without_inline_passwords(topology: &Topology, sentinel_secret: &Path) -> String {
    let mut topology = topology.clone();
    for group in &mut topology.groups {
        assert_eq!(group.password.as_deref(), Some("lab-secret"));
        group.password = None;
        group.password_env = Some("QL_TEST_MASTER_PASSWORD".into());
        group.sentinel_password = None;
        group.sentinel_password_file = Some(sentinel_secret.to_path_buf());
    }
    topology.to_toml()
}

/// A lab whose masters and Sentinels want the password `lab-secret`, and a topology file that
/// names it only through a file (with a trailing newline, which is not part of it) and the
/// variable `QL_TEST_MASTER_PASSWORD`.
async fn password_lab() -> (common::Fixture, std::path::PathBuf) {
    let fx = fixture(
        |mut spec| {
            spec.password = Some("lab-secret".into());
            spec
        },
        |topology| topology,
    )
    .await;
    let secret_file = fx.file("sentinel.secret", "lab-secret\n");
    let config = fx.file(
        "secrets.toml",
        &topology_without_inline_passwords(&fx.topology, &secret_file),
    );
    (fx, config)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passwords_come_from_file_or_env_and_errors_name_the_key() {
    let (fx, config) = password_lab().await;
    let cwd = temp_dir();

    // The command reads the variable and the file.
    let output = run(quorumlock(cwd.path())
        .arg("--config")
        .arg(&config)
        .env("QL_TEST_MASTER_PASSWORD", "lab-secret")
        .args(["--json", "health"]));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(json_of(&output)["voting"], json!(5));

    // Without the variable: a usage error naming the key, as text and as JSON.
    let output = run(quorumlock(cwd.path())
        .arg("--config")
        .arg(&config)
        .arg("health"));
    assert_eq!(output.status.code(), Some(2), "{}", stdout(&output));
    assert!(
        stderr(&output).contains("groups[0].password_env")
            && stderr(&output).contains("QL_TEST_MASTER_PASSWORD"),
        "{}",
        stderr(&output)
    );
    let output = run(quorumlock(cwd.path())
        .arg("--config")
        .arg(&config)
        .args(["--json", "health"]));
    assert_eq!(output.status.code(), Some(2));
    let error = json_of(&output);
    assert_eq!(error["field"], json!("groups[0].password_env"), "{error}");
    assert_eq!(error["kind"], json!("config"), "{error}");

    // A password given two ways is refused, naming the key.
    let twice = fx.file(
        "twice.toml",
        &std::fs::read_to_string(&config).expect("config").replacen(
            "password_env = \"QL_TEST_MASTER_PASSWORD\"",
            "password_env = \"QL_TEST_MASTER_PASSWORD\"\npassword = \"lab-secret\"",
            1,
        ),
    );
    let output = run(quorumlock(cwd.path())
        .arg("--config")
        .arg(&twice)
        .env("QL_TEST_MASTER_PASSWORD", "lab-secret")
        .args(["--json", "health"]));
    assert_eq!(output.status.code(), Some(2));
    let error = json_of(&output);
    assert_eq!(error["field"], json!("groups[0].password"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_library_reads_secrets_only_when_asked() {
    let (_lab, config) = password_lab().await;
    let mut topology = Topology::from_file(&config).expect("the file parses");
    assert_eq!(topology.groups[0].password, None);
    assert_eq!(topology.groups[0].sentinel_password, None);
    let refused = Locks::connect(topology.clone())
        .await
        .err()
        .map(|error| error.to_string())
        .unwrap_or_default();
    assert!(refused.contains("groups[0].password_env"), "{refused}");

    topology
        .resolve_secrets(|name| (name == "QL_TEST_MASTER_PASSWORD").then(|| "lab-secret".into()))
        .expect("secrets resolve");
    let locks = Locks::connect(topology).await.expect("connect");
    let lease = locks
        .acquire("ops:secret")
        .ttl(Duration::from_secs(5))
        .await
        .expect("granted with the resolved passwords");
    lease.release().await.expect("release");
    locks.close().await;
}

#[test]
fn a_bearer_token_given_twice_is_refused() {
    let dir = temp_dir();
    let config = dir.path().join("quorumlock.toml");
    std::fs::write(&config, UNREACHABLE).expect("config");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, TOKEN).expect("token");
    let serve = |json: bool| {
        let mut command = quorumlock(dir.path());
        if json {
            command.arg("--json");
        }
        run(command
            .env("QUORUMLOCK_MCP_TOKEN", TOKEN)
            .args(["serve", "--http", "127.0.0.1:0", "--token-file"])
            .arg(&token_file))
    };
    let text = serve(false);
    assert_eq!(text.status.code(), Some(2), "{}", stderr(&text));
    assert!(stderr(&text).contains("token_file"), "{}", stderr(&text));
    let json = serve(true);
    assert_eq!(json.status.code(), Some(2));
    assert_eq!(json_of(&json)["field"], json!("token_file"));
}

#[test]
fn json_errors_keep_the_text_forms_exit_codes() {
    let dir = temp_dir();
    let unreachable = dir.path().join("unreachable.toml");
    std::fs::write(&unreachable, UNREACHABLE).expect("config");
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, format!("drift_factor = 0.9\n{UNREACHABLE}")).expect("config");
    let cases: [(&str, Vec<&str>, u8, Value); 4] = [
        (
            "no topology",
            vec!["status", "r"],
            2,
            json!({"kind": "no_topology", "field": "config"}),
        ),
        (
            "a bad key",
            vec!["--config", bad.to_str().expect("utf-8"), "status", "r"],
            2,
            json!({"kind": "config", "field": "drift_factor"}),
        ),
        (
            "a usage error",
            vec!["acquire"],
            2,
            json!({"kind": "usage"}),
        ),
        (
            "no quorum",
            vec![
                "--config",
                unreachable.to_str().expect("utf-8"),
                "acquire",
                "r",
            ],
            3,
            json!({"kind": "unavailable", "resource": "r", "needed": 2, "total": 3}),
        ),
    ];
    for (case, args, code, expected) in cases {
        let text = run(quorumlock(dir.path()).args(&args));
        assert_eq!(
            text.status.code(),
            Some(i32::from(code)),
            "{case}: {}",
            stderr(&text)
        );
        assert!(stdout(&text).is_empty(), "{case}: {}", stdout(&text));
        let json = run(quorumlock(dir.path()).arg("--json").args(&args));
        assert_eq!(json.status.code(), Some(i32::from(code)), "{case}");
        let error = json_of(&json);
        assert!(
            error["error"].as_str().is_some_and(|m| !m.is_empty()),
            "{case}: {error}"
        );
        assert_eq!(error["exit_code"], json!(code), "{case}: {error}");
        for (key, value) in expected.as_object().expect("object") {
            assert_eq!(&error[key], value, "{case}: {key} in {error}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn piped_logs_are_plain_and_follow_the_flags() {
    let fx = plain_lab().await;
    let cwd = temp_dir();
    let health = |args: &[&str], rust_log: Option<&str>| {
        let mut command = quorumlock(cwd.path());
        command.arg("--config").arg(fx.lab.config_path());
        if let Some(filter) = rust_log {
            command.env("RUST_LOG", filter);
        }
        let output = run(command.args(args).arg("health").stderr(Stdio::piped()));
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        stderr(&output)
    };
    let verbose = health(&["-vvv"], None);
    assert!(verbose.lines().count() > 0, "-vvv logs something");
    assert!(!verbose.contains("\x1b["), "colour codes in {verbose:?}");
    assert!(
        verbose.contains("TRACE") || verbose.contains("DEBUG"),
        "{verbose}"
    );
    // RUST_LOG wins over -v.
    assert_eq!(health(&["-vvv"], Some("off")), "");
    assert_eq!(health(&["-qq"], None), "");
    // JSON lines: every line one object with a level and a target.
    let lines = health(&["-vvv", "--log-format", "json"], None);
    assert!(lines.lines().count() > 0);
    for line in lines.lines() {
        let event: Value = serde_json::from_str(line)
            .unwrap_or_else(|error| panic!("log line is not JSON ({error}): {line}"));
        assert!(
            event["level"].is_string() && event["target"].is_string(),
            "{line}"
        );
        assert!(event["timestamp"].is_string(), "{line}");
    }

    // serve's stderr, which MCP clients keep in log files.
    let server = within(
        Duration::from_secs(60),
        http_server(&fx.lab.config_path(), None, &[]),
    )
    .await;
    let log = server
        .stderr
        .lock()
        .map(|l| l.join("\n"))
        .unwrap_or_default();
    assert!(log.contains("without a bearer token"), "{log}");
    assert!(!log.contains("\x1b["), "colour codes in {log:?}");
    let json_server = within(
        Duration::from_secs(60),
        http_server_with_env(
            &fx.lab.config_path(),
            None,
            &["--log-format", "json"],
            &[("RUST_LOG", "info,fred=warn")],
        ),
    )
    .await;
    let log = json_server
        .stderr
        .lock()
        .map(|l| l.clone())
        .unwrap_or_default();
    let warning = log
        .iter()
        .find(|line| line.contains("without a bearer token"))
        .unwrap_or_else(|| panic!("no warning in {log:?}"));
    let event: Value = serde_json::from_str(warning).expect("a JSON log line");
    assert_eq!(event["level"], json!("WARN"));
    // The server logs the topology file it runs with, as fields of the event.
    let config = log
        .iter()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|event| event["message"] == json!("topology file"))
        .unwrap_or_else(|| panic!("no topology file event in {log:?}"));
    assert_eq!(
        config["config"],
        json!(fx.lab.config_path().display().to_string())
    );
    assert_eq!(config["source"], json!("--config"));
}

/// Checks that `text` is Prometheus text exposition (OpenMetrics flavour), line by line, and
/// returns every sample as (series, value).
fn parse_exposition(text: &str) -> Vec<(String, f64)> {
    let mut samples = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.last(), Some(&"# EOF"), "ends with # EOF");
    for line in lines {
        if let Some(comment) = line.strip_prefix("# ") {
            let mut words = comment.splitn(3, ' ');
            let kind = words.next().unwrap_or("");
            if kind == "EOF" {
                continue;
            }
            assert!(
                ["HELP", "TYPE", "UNIT"].contains(&kind),
                "unknown comment: {line}"
            );
            let name = words.next().unwrap_or("");
            assert!(valid_metric_name(name), "bad metric name in {line}");
            if kind == "TYPE" {
                let kinds = [
                    "counter",
                    "gauge",
                    "histogram",
                    "info",
                    "unknown",
                    "summary",
                    "stateset",
                ];
                assert!(kinds.contains(&words.next().unwrap_or("")), "{line}");
            }
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("no value: {line}"));
        let name_end = series.find('{').unwrap_or(series.len());
        assert!(valid_metric_name(&series[..name_end]), "bad name: {line}");
        if name_end < series.len() {
            let labels = series[name_end..]
                .strip_prefix('{')
                .and_then(|rest| rest.strip_suffix('}'))
                .unwrap_or_else(|| panic!("bad labels: {line}"));
            check_labels(labels, line);
        }
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            other => other
                .parse()
                .unwrap_or_else(|_| panic!("bad value: {line}")),
        };
        samples.push((series.to_string(), value));
    }
    samples
}

fn valid_metric_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// `name="value"` pairs separated by commas, values with `\\`, `\"` and `\n` escapes.
fn check_labels(mut labels: &str, line: &str) {
    while !labels.is_empty() {
        let (name, rest) = labels
            .split_once("=\"")
            .unwrap_or_else(|| panic!("bad label: {line}"));
        assert!(
            valid_metric_name(name) && !name.contains(':'),
            "bad label name: {line}"
        );
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => {
                    let escaped = chars.next().map(|(_, c)| c);
                    assert!(
                        matches!(escaped, Some('\\' | '"' | 'n')),
                        "bad escape: {line}"
                    );
                }
                Some((at, '"')) => break at,
                Some(_) => {}
                None => panic!("unterminated label value: {line}"),
            }
        };
        labels = &rest[end + 1..];
        labels = labels.strip_prefix(',').unwrap_or(labels);
    }
}

/// Every sample name a scrape shows: the names of its samples, and of each declared metric
/// with the suffixes its type adds.
fn metric_names(text: &str) -> std::collections::HashSet<String> {
    let mut names = std::collections::HashSet::new();
    for line in text.lines() {
        if let Some(declared) = line.strip_prefix("# TYPE ") {
            let name = declared.split(' ').next().unwrap_or("");
            for suffix in ["", "_total", "_bucket", "_count", "_sum", "_info"] {
                names.insert(format!("{name}{suffix}"));
            }
        } else if !line.starts_with('#') {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            names.insert(line[..end].to_string());
        }
    }
    names
}

/// The metric names every query of compose/grafana/quorumlock.json uses; the board must
/// cover the quorum, groups voting and quarantined, grants and refusals, acquire latency,
/// keepalive leases and losses, and MCP sessions.
fn grafana_board_metrics() -> Vec<String> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/compose/grafana/quorumlock.json"
    ))
    .expect("compose/grafana/quorumlock.json");
    let board: serde_json::Value = serde_json::from_str(&text).expect("the board is JSON");
    let mut names = Vec::new();
    let panels = board["panels"].as_array().expect("panels");
    for panel in panels {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("every target has an expr");
            let mut rest = expr;
            while let Some(at) = rest.find("quorumlock_") {
                let tail = &rest[at..];
                let end = tail
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(tail.len());
                names.push(tail[..end].to_string());
                rest = &tail[end..];
            }
        }
    }
    for needed in [
        "quorumlock_quorum_available",
        "quorumlock_groups_voting",
        "quorumlock_group_admission",
        "quorumlock_mcp_acquisitions_total",
        "quorumlock_mcp_denials_total",
        "quorumlock_mcp_acquire_duration_seconds_bucket",
        "quorumlock_mcp_keepalive_leases",
        "quorumlock_mcp_keepalive_lost_total",
        "quorumlock_mcp_sessions",
    ] {
        assert!(
            names.iter().any(|name| name == needed),
            "the Grafana board has no panel on {needed}"
        );
    }
    names
}

/// The metric names in the `expr` of every alert rule in docs/operations.md's "Metrics and
/// alerts" section (its ```yaml block, parsed as YAML).
fn alert_rule_metrics() -> Vec<String> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md"))
        .expect("docs/operations.md");
    let section = doc
        .split("## Metrics and alerts")
        .nth(1)
        .expect("a Metrics and alerts section");
    let yaml = section
        .split("```yaml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a yaml block");
    let documents = yaml_rust2::YamlLoader::load_from_str(yaml).expect("the alert rules parse");
    let rules = &documents[0]["groups"][0]["rules"];
    let rules = rules.as_vec().expect("a list of rules");
    assert!(rules.len() >= 4, "quorum, group, quarantine and p99 alerts");
    let mut names = Vec::new();
    for rule in rules {
        assert!(rule["alert"].as_str().is_some(), "every rule has a name");
        let expr = rule["expr"].as_str().expect("every rule has an expr");
        let mut rest = expr;
        while let Some(at) = rest.find("quorumlock_") {
            let tail = &rest[at..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(tail.len());
            names.push(tail[..end].to_string());
            rest = &tail[end..];
        }
    }
    for alert in ["quorumlock_quorum_available", "quorumlock_group_up"] {
        assert!(
            names.iter().any(|name| name == alert),
            "no alert on {alert}"
        );
    }
    names
}

fn sample(samples: &[(String, f64)], series: &str) -> f64 {
    samples
        .iter()
        .find(|(name, _)| name == series)
        .map(|(_, value)| *value)
        .unwrap_or_else(|| panic!("no series {series}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_show_the_quorum_votes_and_build() {
    let mut fx = plain_lab().await;
    let token_file = fx.file("token", &format!("{TOKEN}\n"));
    let token_path = token_file.to_str().expect("utf-8 path");
    let server = within(
        Duration::from_secs(60),
        http_server(&fx.lab.config_path(), None, &["--token-file", token_path]),
    )
    .await;
    let bearer = format!("Bearer {TOKEN}");
    let scrape = async || {
        let (status, body) = raw_http(
            &server.addr,
            "GET",
            "/metrics",
            &[("Authorization", bearer.as_str())],
            b"",
        )
        .await;
        assert_eq!(status, 200, "{body}");
        body
    };
    // The token from --token-file is the one required.
    let (status, _) = raw_http(&server.addr, "GET", "/metrics", &[], b"").await;
    assert_eq!(status, 401);

    let groups: Vec<String> = fx.topology.groups.iter().map(|g| g.name.clone()).collect();
    let text = within(Duration::from_secs(30), scrape()).await;
    let samples = parse_exposition(&text);
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        sample(
            &samples,
            &format!("quorumlock_build_info{{version=\"{version}\"}}")
        ),
        1.0
    );
    assert_eq!(sample(&samples, "quorumlock_quorum_available"), 1.0);
    assert_eq!(sample(&samples, "quorumlock_groups"), 5.0);
    assert_eq!(sample(&samples, "quorumlock_groups_voting"), 5.0);
    assert_eq!(sample(&samples, "quorumlock_quorum_needed_groups"), 3.0);
    for group in &groups {
        let label = format!("{{group=\"{group}\"}}");
        assert_eq!(
            sample(&samples, &format!("quorumlock_group_up{label}")),
            1.0
        );
        assert_eq!(
            sample(&samples, &format!("quorumlock_group_voting{label}")),
            1.0
        );
        assert_eq!(
            sample(
                &samples,
                &format!("quorumlock_group_quarantine_remaining_seconds{label}")
            ),
            0.0
        );
        assert!(
            sample(
                &samples,
                &format!("quorumlock_group_quarantine_policy_seconds{label}")
            ) > 0.0
        );
        for state in [
            "voting",
            "quarantined",
            "unadmitted",
            "no_policy",
            "evicts",
            "unknown",
        ] {
            let series =
                format!("quorumlock_group_admission{{group=\"{group}\",state=\"{state}\"}}");
            let expected = if state == "voting" { 1.0 } else { 0.0 };
            assert_eq!(sample(&samples, &series), expected, "{series}");
        }
    }
    // The server's own series keep their names.
    assert_eq!(sample(&samples, "quorumlock_mcp_acquisitions_total"), 0.0);
    // Every metric the documented alert rules and the Grafana board use exists.
    let known = metric_names(&text);
    for name in alert_rule_metrics() {
        assert!(
            known.contains(&name),
            "operations.md's alerts use {name}, which /metrics lacks"
        );
    }
    for name in grafana_board_metrics() {
        assert!(
            known.contains(&name),
            "compose/grafana/quorumlock.json queries {name}, which /metrics lacks"
        );
    }

    // One group down: still a quorum, four voting; three down: none.
    within(Duration::from_secs(30), async {
        fx.lab.kill(0).await.expect("kill g1")
    })
    .await;
    let samples = parse_exposition(&within(Duration::from_secs(30), scrape()).await);
    assert_eq!(sample(&samples, "quorumlock_quorum_available"), 1.0);
    assert_eq!(sample(&samples, "quorumlock_groups_voting"), 4.0);
    let first = format!("{{group=\"{}\"}}", groups[0]);
    assert_eq!(
        sample(&samples, &format!("quorumlock_group_up{first}")),
        0.0
    );
    assert_eq!(
        sample(&samples, &format!("quorumlock_group_voting{first}")),
        0.0
    );
    within(Duration::from_secs(30), async {
        fx.lab.kill(1).await.expect("kill g2");
        fx.lab.kill(2).await.expect("kill g3");
    })
    .await;
    let samples = parse_exposition(&within(Duration::from_secs(30), scrape()).await);
    assert_eq!(sample(&samples, "quorumlock_quorum_available"), 0.0);
    assert_eq!(sample(&samples, "quorumlock_groups_voting"), 2.0);
}
