//! The operator dashboard in a real browser: headless Chromium opens the page that
//! `quorumlock serve --http` serves, the token is typed into it, and every check reads what
//! the page renders while a real lab takes a lock, loses a master, gets it back in
//! quarantine and releases the lock.

use crate::browser_support;
use crate::common;
use crate::mcp_support;

use std::path::PathBuf;
use std::time::Duration;

use browser_support::Browser;
use mcp_support::{BIN, http_server};
use serde_json::Value;

const TOKEN: &str = "dashboard-token-0123456789abcdef";
/// A check of behaviour, not of timing: a busy 2-core machine gets plenty of time.
const DEADLINE: Duration = Duration::from_secs(60);

/// `quorumlock --config <config> --json <args>`, parsed.
async fn cli(config: &std::path::Path, args: &[&str]) -> Value {
    let output = tokio::process::Command::new(BIN)
        .arg("--config")
        .arg(config)
        .arg("--json")
        .args(args)
        .env_remove("QUORUMLOCK_CONFIG")
        .output()
        .await
        .expect("run quorumlock");
    assert!(
        output.status.success(),
        "quorumlock {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("JSON output")
}

/// The row of the groups table that names `group`.
fn row_of<'t>(table: &'t str, group: &str) -> Option<&'t str> {
    table
        .lines()
        .find(|line| line.split('\t').next() == Some(group))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn it_shows_a_lock_a_lost_master_and_the_release() {
    // Plain masters, so a killed master stays down until it is restarted, and a policy long
    // enough that the lock and the quarantine outlast the checks.
    let mut fx = common::fixture(
        |spec| quorumlock::lab::LabSpec {
            max_ttl_ms: 300_000,
            ..common::plain(spec)
        },
        |topology| topology,
    )
    .await;
    let config = fx.lab.config_path();
    let server = http_server(&config, Some(TOKEN), &[]).await;
    let mut browser = Browser::start().await;

    // 1. The page asks for the token; it is typed in, and the board appears.
    browser.navigate(&format!("http://{}/", server.addr)).await;
    browser
        .wait_for_text("#login", DEADLINE, "the token prompt", |t| {
            t.contains("Bearer token")
        })
        .await;
    browser
        .eval("document.getElementById('token').focus()")
        .await;
    browser.type_text(TOKEN).await;
    browser
        .eval("document.getElementById('connect').click()")
        .await;
    browser
        .wait_for_text("#quorum", DEADLINE, "the quorum", |t| {
            t.contains("quorum available: 5 of 5 groups vote")
        })
        .await;
    let url = browser.eval("location.href").await;
    assert!(
        !url.as_str().unwrap_or_default().contains(TOKEN),
        "the token must never be in a URL: {url}"
    );

    // 2. A lock taken with the CLI shows with its owner, purpose and fencing token.
    let lease = cli(
        &config,
        &[
            "acquire",
            "deploy:web",
            "--owner",
            "ana@ci",
            "--purpose",
            "roll out v2.4",
            "--ttl-ms",
            "240000",
        ],
    )
    .await;
    let token = lease["token"].as_str().expect("token").to_string();
    let fence = lease["fencing_token"].as_u64().expect("fencing token");
    let locks = browser
        .wait_for_text("#locks tbody", DEADLINE, "the lock", |t| {
            t.contains("deploy:web") && t.contains("ana@ci") && t.contains(&fence.to_string())
        })
        .await;
    assert!(locks.contains("roll out v2.4"), "{locks}");
    // A permit an agent takes through this server shows with its count and on the timeline.
    let (agent, _) = server.connect(Some(TOKEN)).await.expect("an MCP session");
    let permit = mcp_support::ok(
        &agent,
        "acquire_lock",
        serde_json::json!({"resource": "api:quota", "permits": 3, "owner": "bot-7", "ttl_ms": 240000}),
    )
    .await;
    assert_eq!(permit["acquired"], Value::Bool(true), "{permit}");
    browser
        .wait_for_text("#semaphores tbody", DEADLINE, "the permit", |t| {
            t.contains("api:quota") && t.contains("1 of 3") && t.contains("bot-7")
        })
        .await;
    browser
        .wait_for_text("#timeline tbody", DEADLINE, "the grant", |t| {
            t.contains("grant") && t.contains("granted to bot-7")
        })
        .await;

    // 3. A master dies: its group goes down; back (empty) and admitted, it is reachable and
    // sits out its quarantine.
    let group = fx.topology.groups[0].name.clone();
    fx.lab.kill(0).await.expect("kill a master");
    browser
        .wait_for_text("#groups tbody", DEADLINE, "the group down", |t| {
            row_of(t, &group).is_some_and(|row| row.contains("unreachable"))
        })
        .await;
    browser
        .wait_for_text("#quorum", DEADLINE, "four groups voting", |t| {
            t.contains("4 of 5 groups vote")
        })
        .await;
    fx.lab.restart(0).await.expect("restart the master");
    // Back empty, it may have missed grants: it votes after the policy's quarantine.
    let policy = fx.lab.spec().policy();
    let admitted = fx
        .locks
        .admit(&quorumlock::AdmitOptions {
            groups: vec![group.clone()],
            write_window_ms: Some(policy.write_window_ms),
            delay: Duration::from_millis(policy.quarantine_ms()),
            ..quorumlock::AdmitOptions::new(policy.max_ttl_ms)
        })
        .await
        .expect("admit the restarted master");
    assert!(admitted.iter().all(|a| a.error.is_none()), "{admitted:?}");
    let groups = browser
        .wait_for_text("#groups tbody", DEADLINE, "the group in quarantine", |t| {
            row_of(t, &group).is_some_and(|row| row.contains("quarantined") && row.contains(" s"))
        })
        .await;
    let row = row_of(&groups, &group).unwrap_or_default().to_string();
    assert!(!row.contains("unreachable"), "{row}");
    let timeline = browser
        .wait_for_text("#timeline tbody", DEADLINE, "the group's changes", |t| {
            t.contains("→ unreachable") && t.contains("→ quarantined")
        })
        .await;
    assert!(timeline.contains(&group), "{timeline}");
    // The lock is still held on the four other groups, and still shown.
    assert!(
        browser.text_of("#locks tbody").await.contains("deploy:web"),
        "the lock vanished while held"
    );
    let screenshot = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard.png");
    browser.screenshot(&screenshot).await;
    eprintln!("screenshot: {}", screenshot.display());

    // 4. Released with the CLI, the lock goes from the page.
    let released = cli(&config, &["release", "deploy:web", "--token", &token]).await;
    assert_eq!(released["released"], Value::Bool(true), "{released}");
    browser
        .wait_for_text("#locks tbody", DEADLINE, "the lock gone", |t| {
            !t.contains("deploy:web") && t.contains("no locks held")
        })
        .await;
}
