//! The `quorumlock` binary end to end against a lab: tables, `--json`, exit codes, bad input,
//! Ctrl-C on `acquire --hold` releasing the lock, and several resources taken as one lease.

use crate::common;

use std::path::Path;
use std::process::{Output, Stdio};

use common::{lock_key, plain_lab, sentinel_lab};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_quorumlock");

async fn quorumlock(config: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("--config")
        .arg(config)
        .args(args)
        .env_remove("QUORUMLOCK_CONFIG")
        .output()
        .await
        .expect("run quorumlock")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_commands_print_tables_json_and_exit_codes() {
    let fx = sentinel_lab().await;
    let config = fx.lab.config_path();

    let acquired = quorumlock(
        &config,
        &[
            "--json",
            "acquire",
            "db:migrations",
            "--owner",
            "alice",
            "--purpose",
            "m42",
        ],
    )
    .await;
    assert_eq!(acquired.status.code(), Some(0), "{}", stderr(&acquired));
    let lease: serde_json::Value = serde_json::from_str(&stdout(&acquired)).expect("acquire JSON");
    assert_eq!(lease["acquired"], true);
    let token = lease["token"].as_str().expect("token").to_string();
    let fence = lease["fencing_token"].as_u64().expect("fencing_token");
    assert!(lease["validity_ms"].as_u64().expect("validity_ms") > 0);
    assert!(
        lease["expires_at"]
            .as_str()
            .is_some_and(|t| t.contains('T'))
    );

    let table = quorumlock(&config, &["status", "db:migrations"]).await;
    assert_eq!(table.status.code(), Some(0));
    let text = stdout(&table);
    assert!(text.contains("HELD by alice (m42)"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("GROUP") && l.contains("FENCE")),
        "{text}"
    );
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with('g')).collect();
    assert_eq!(rows.len(), 5, "{text}");
    // Every group holds it: the command let the grants the vote did not wait for land
    // before it exited.
    assert_eq!(
        rows.iter().filter(|l| l.contains(" held ")).count(),
        5,
        "{text}"
    );

    let status = quorumlock(&config, &["--json", "status", "db:migrations"]).await;
    let status: serde_json::Value = serde_json::from_str(&stdout(&status)).expect("status JSON");
    assert_eq!(status["held"], true);
    assert_eq!(status["fencing_token"].as_u64(), Some(fence));
    assert_eq!(status["holder"]["owner"], "alice");
    assert_eq!(status["groups"].as_array().map(Vec::len), Some(5));
    assert!(status["groups"][0]["state"].is_string());

    let denied = quorumlock(&config, &["acquire", "db:migrations"]).await;
    assert_eq!(denied.status.code(), Some(1), "held elsewhere exits 1");
    assert!(
        stderr(&denied).contains("held by alice"),
        "{}",
        stderr(&denied)
    );

    let listed = quorumlock(&config, &["--json", "list", "db:"]).await;
    let listed: serde_json::Value = serde_json::from_str(&stdout(&listed)).expect("list JSON");
    assert_eq!(listed["locks"][0]["resource"], "db:migrations");
    assert_eq!(listed["truncated"], false);

    let wrong = quorumlock(
        &config,
        &[
            "release",
            "db:migrations",
            "--token",
            "0123456789abcdef0123456789abcdef",
        ],
    )
    .await;
    assert_eq!(
        wrong.status.code(),
        Some(1),
        "a wrong token releases nothing"
    );
    let extended = quorumlock(
        &config,
        &[
            "extend",
            "db:migrations",
            "--token",
            &token,
            "--ttl-ms",
            "20000",
        ],
    )
    .await;
    assert_eq!(extended.status.code(), Some(0), "{}", stderr(&extended));
    let released = quorumlock(&config, &["release", "db:migrations", "--token", &token]).await;
    assert_eq!(released.status.code(), Some(0), "{}", stderr(&released));

    let health = quorumlock(&config, &["--json", "health"]).await;
    assert_eq!(health.status.code(), Some(0));
    let health: serde_json::Value = serde_json::from_str(&stdout(&health)).expect("health JSON");
    assert_eq!(health["quorum_available"], true);
    assert_eq!(health["groups"][0]["admission"]["state"], "voting");

    let forced = quorumlock(&config, &["acquire", "stuck"]).await;
    assert_eq!(forced.status.code(), Some(0));
    let refused = quorumlock(&config, &["force-release", "stuck"]).await;
    assert_eq!(
        refused.status.code(),
        Some(4),
        "no terminal to confirm on: {}",
        stderr(&refused)
    );
    let cleared = quorumlock(&config, &["force-release", "stuck", "--yes"]).await;
    assert_eq!(cleared.status.code(), Some(0), "{}", stderr(&cleared));
    assert!(stderr(&cleared).contains("force-released `stuck`"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_clear_error_and_exit_code() {
    let fx = sentinel_lab().await;
    let config = fx.lab.config_path();

    let control = quorumlock(&config, &["acquire", "bad\u{7}name"]).await;
    assert_eq!(control.status.code(), Some(2));
    assert!(
        stderr(&control).contains("invalid resource"),
        "{}",
        stderr(&control)
    );

    let missing = quorumlock(Path::new("/nonexistent/quorumlock.toml"), &["status", "x"]).await;
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        stderr(&missing).contains("/nonexistent/quorumlock.toml"),
        "{}",
        stderr(&missing)
    );

    let broken = fx.file(
        "broken.toml",
        "[[groups]]\nname = \"g1\"\nsentinels = [\"127.0.0.1:1\"]\n",
    );
    let invalid = quorumlock(&broken, &["status", "x"]).await;
    assert_eq!(invalid.status.code(), Some(2));
    assert!(
        stderr(&invalid).contains("groups[0].service"),
        "{}",
        stderr(&invalid)
    );

    // Ports nothing listens on: every group fails, and the error names them.
    let groups: String = (1..=5)
        .map(|g| {
            format!(
                "[[groups]]\nname = \"dead{g}\"\naddress = \"127.0.0.1:{}\"\n",
                free_port()
            )
        })
        .collect();
    let unreachable = fx.file("unreachable.toml", &groups);
    let down = quorumlock(&unreachable, &["acquire", "x"]).await;
    assert_eq!(down.status.code(), Some(3), "{}", stderr(&down));
    assert!(
        stderr(&down).contains("dead1") && stderr(&down).contains("quorumlock health"),
        "{}",
        stderr(&down)
    );
    let health = quorumlock(&unreachable, &["health"]).await;
    assert_eq!(health.status.code(), Some(3));
}

/// A loopback port nobody listens on (bound, read back, released).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_on_hold_releases_the_lock() {
    let fx = sentinel_lab().await;
    let config = fx.lab.config_path();
    let mut holder = Command::new(BIN)
        .arg("--config")
        .arg(&config)
        .args(["acquire", "held-by-cli", "--hold", "--ttl-ms", "1000"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn");
    let mut lines = BufReader::new(holder.stdout.take().expect("stdout")).lines();
    while let Some(line) = lines.next_line().await.expect("read") {
        if line.starts_with("holding it") {
            break;
        }
    }
    // Outlive the TTL: only the keepalive keeps it.
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    assert!(fx.locks.status("held-by-cli").await.expect("status").held);

    let pid = holder.id().expect("pid") as i32;
    // SAFETY: kill(2) on the child this test spawned.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let status = holder.wait().await.expect("wait");
    assert_eq!(status.code(), Some(0));
    let mut rest = String::new();
    while let Some(line) = lines.next_line().await.expect("read") {
        rest.push_str(&line);
    }
    assert!(rest.contains("released held-by-cli"), "{rest}");
    assert!(!fx.locks.status("held-by-cli").await.expect("status").held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_resources_are_one_lease() {
    let fx = plain_lab().await;
    let config = fx.lab.config_path();

    let acquired = quorumlock(
        &config,
        &[
            "--json", "acquire", "set:c", "set:a", "set:b", "--owner", "alice",
        ],
    )
    .await;
    assert_eq!(acquired.status.code(), Some(0), "{}", stderr(&acquired));
    let lease: serde_json::Value = serde_json::from_str(&stdout(&acquired)).expect("acquire JSON");
    assert_eq!(lease["acquired"], true);
    assert_eq!(
        lease["resources"],
        serde_json::json!(["set:a", "set:b", "set:c"])
    );
    assert_eq!(lease["resource"], "set:a");
    let token = lease["token"].as_str().expect("token").to_string();
    let fence = lease["fencing_token"].as_u64().expect("one fencing_token");
    for resource in ["set:a", "set:b", "set:c"] {
        let status = fx.locks.status(resource).await.expect("status");
        assert!(status.held, "{resource} is not held");
        assert_eq!(status.fencing_token, Some(fence), "{resource}");
    }

    // One member is enough to refuse a single lock, and a set that overlaps takes nothing.
    let denied = quorumlock(&config, &["--json", "acquire", "set:b"]).await;
    assert_eq!(denied.status.code(), Some(1), "{}", stdout(&denied));
    let denied: serde_json::Value = serde_json::from_str(&stdout(&denied)).expect("denial JSON");
    assert_eq!(denied["acquired"], false);
    assert_eq!(denied["held_resource"], "set:b");
    assert_eq!(denied["holder"]["owner"], "alice");
    let overlapping = quorumlock(&config, &["acquire", "set:x", "set:b"]).await;
    assert_eq!(overlapping.status.code(), Some(1));
    assert!(
        stderr(&overlapping).contains("`set:b` is held by alice"),
        "{}",
        stderr(&overlapping)
    );
    assert_eq!(fx.values_of(&lock_key("set:x")).await, vec![None; 5]);

    let extended = quorumlock(
        &config,
        &[
            "--json", "extend", "set:b", "set:c", "set:a", "--token", &token, "--ttl-ms", "20000",
        ],
    )
    .await;
    assert_eq!(extended.status.code(), Some(0), "{}", stderr(&extended));
    let extended: serde_json::Value =
        serde_json::from_str(&stdout(&extended)).expect("extend JSON");
    assert_eq!(
        extended["resources"],
        serde_json::json!(["set:a", "set:b", "set:c"])
    );

    let released = quorumlock(
        &config,
        &["release", "set:c", "set:b", "set:a", "--token", &token],
    )
    .await;
    assert_eq!(released.status.code(), Some(0), "{}", stderr(&released));
    assert!(
        stdout(&released).contains("released set:a, set:b, set:c on"),
        "{}",
        stdout(&released)
    );
    for resource in ["set:a", "set:b", "set:c"] {
        assert_eq!(fx.values_of(&lock_key(resource)).await, vec![None; 5]);
    }

    // The table prints the command that releases the whole set, and it works.
    let table = quorumlock(&config, &["acquire", "set:b", "set:a"]).await;
    assert_eq!(table.status.code(), Some(0), "{}", stderr(&table));
    let text = stdout(&table);
    assert!(text.contains("acquired set:a, set:b"), "{text}");
    let command = text
        .lines()
        .find_map(|line| line.split_once("with: quorumlock ").map(|(_, rest)| rest))
        .unwrap_or_else(|| panic!("no release command in {text}"));
    let args: Vec<&str> = command.split_whitespace().collect();
    assert_eq!(&args[..3], ["release", "set:a", "set:b"], "{command}");
    let released = quorumlock(&config, &args).await;
    assert_eq!(released.status.code(), Some(0), "{}", stderr(&released));
    assert!(!fx.locks.status("set:a").await.expect("status").held);

    let twice = quorumlock(&config, &["acquire", "set:a", "set:b", "set:a"]).await;
    assert_eq!(twice.status.code(), Some(2));
    assert!(
        stderr(&twice).contains("invalid resources") && stderr(&twice).contains("`set:a` twice"),
        "{}",
        stderr(&twice)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_renews_a_set_until_ctrl_c() {
    let fx = plain_lab().await;
    let config = fx.lab.config_path();
    let mut holder = Command::new(BIN)
        .arg("--config")
        .arg(&config)
        .args(["acquire", "kept:a", "kept:b", "--hold", "--ttl-ms", "1000"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn");
    let mut lines = BufReader::new(holder.stdout.take().expect("stdout")).lines();
    while let Some(line) = lines.next_line().await.expect("read") {
        if line.starts_with("holding it") {
            break;
        }
    }
    // Both stay held, under one fencing token, well past the TTL: only the keepalive keeps them.
    let started = std::time::Instant::now();
    while started.elapsed() < std::time::Duration::from_millis(2000) {
        let a = fx.locks.status("kept:a").await.expect("status");
        let b = fx.locks.status("kept:b").await.expect("status");
        assert!(a.held && b.held, "lost after {:?}", started.elapsed());
        assert_eq!(a.fencing_token, b.fencing_token);
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    let pid = holder.id().expect("pid") as i32;
    // SAFETY: kill(2) on the child this test spawned.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let status = holder.wait().await.expect("wait");
    assert_eq!(status.code(), Some(0));
    let mut rest = String::new();
    while let Some(line) = lines.next_line().await.expect("read") {
        rest.push_str(&line);
    }
    assert!(rest.contains("released kept:a, kept:b"), "{rest}");
    for resource in ["kept:a", "kept:b"] {
        assert_eq!(fx.values_of(&lock_key(resource)).await, vec![None; 5]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_are_taken_shown_and_released_by_token() {
    let fx = plain_lab().await;
    let config = fx.lab.config_path();
    let take = |owner: &'static str, ttl: &'static str| {
        let config = config.clone();
        async move {
            quorumlock(
                &config,
                &[
                    "--json",
                    "acquire",
                    "sem:api",
                    "--permits",
                    "2",
                    "--owner",
                    owner,
                    "--ttl-ms",
                    ttl,
                ],
            )
            .await
        }
    };

    let mut tokens = Vec::new();
    let mut slots = Vec::new();
    for (owner, ttl) in [("alice", "30000"), ("bob", "20000")] {
        let acquired = take(owner, ttl).await;
        assert_eq!(acquired.status.code(), Some(0), "{}", stderr(&acquired));
        let lease: serde_json::Value =
            serde_json::from_str(&stdout(&acquired)).expect("acquire JSON");
        assert_eq!(lease["acquired"], true);
        assert_eq!(lease["permits"], 2);
        let slot = lease["permit"].as_u64().expect("permit slot");
        let token = lease["token"].as_str().expect("token").to_string();
        assert!(token.ends_with(&format!("-{slot}")), "{token}");
        assert!(lease["fencing_token"].as_u64().is_some());
        tokens.push(token);
        slots.push(slot);
    }
    slots.sort_unstable();
    assert_eq!(slots, [0, 1]);

    // Both permits are taken: the third caller is refused, naming the soonest to expire.
    let third = quorumlock(
        &config,
        &["acquire", "sem:api", "--permits", "2", "--owner", "carol"],
    )
    .await;
    assert_eq!(third.status.code(), Some(1), "{}", stdout(&third));
    assert!(
        stderr(&third).contains("`sem:api` is held by bob"),
        "{}",
        stderr(&third)
    );
    let denied = take("carol", "1000").await;
    assert_eq!(denied.status.code(), Some(1));
    let denied: serde_json::Value = serde_json::from_str(&stdout(&denied)).expect("denial JSON");
    assert_eq!(denied["acquired"], false);
    assert_eq!(denied["holder"]["owner"], "bob");

    let table = quorumlock(&config, &["status", "sem:api"]).await;
    assert_eq!(table.status.code(), Some(0), "{}", stderr(&table));
    let text = stdout(&table);
    assert!(
        text.contains("sem:api: semaphore of 2 permits, 2 held"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("PERMIT") && l.contains("OWNER")),
        "{text}"
    );
    assert!(text.contains("alice") && text.contains("bob"), "{text}");
    let view = quorumlock(&config, &["--json", "status", "sem:api"]).await;
    let view: serde_json::Value = serde_json::from_str(&stdout(&view)).expect("status JSON");
    assert_eq!(view["semaphore"]["permits"], 2);
    let mut owners: Vec<&str> = view["semaphore"]["holders"]
        .as_array()
        .expect("holders")
        .iter()
        .map(|h| h["owner"].as_str().expect("owner"))
        .collect();
    owners.sort_unstable();
    assert_eq!(owners, ["alice", "bob"]);
    // A plain lock has no semaphore view.
    let plain = quorumlock(&config, &["--json", "status", "not:a:semaphore"]).await;
    let plain: serde_json::Value = serde_json::from_str(&stdout(&plain)).expect("status JSON");
    assert!(plain.get("semaphore").is_none(), "{plain}");

    // Extending and releasing by the permit's token act on that permit.
    let extended = quorumlock(
        &config,
        &[
            "extend", "sem:api", "--token", &tokens[1], "--ttl-ms", "20000",
        ],
    )
    .await;
    assert_eq!(extended.status.code(), Some(0), "{}", stderr(&extended));
    let released = quorumlock(&config, &["release", "sem:api", "--token", &tokens[1]]).await;
    assert_eq!(released.status.code(), Some(0), "{}", stderr(&released));
    let status = fx.locks.semaphore_status("sem:api").await.expect("status");
    assert_eq!(status.holders.len(), 1, "{status:?}");
    assert_eq!(status.holders[0].holder.owner.as_deref(), Some("alice"));
    let again = quorumlock(
        &config,
        &["acquire", "sem:api", "--permits", "2", "--owner", "carol"],
    )
    .await;
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    assert!(
        stdout(&again).contains("acquired permit") && stdout(&again).contains("(2 permits)"),
        "{}",
        stdout(&again)
    );

    // Counts out of range, disagreeing with the semaphore's, or with several resources.
    for bad in [
        &["acquire", "sem:new", "--permits", "0"][..],
        &["acquire", "sem:api", "--permits", "3"],
        &["acquire", "sem:a", "sem:b", "--permits", "2"],
    ] {
        let refused = quorumlock(&config, bad).await;
        assert_eq!(
            refused.status.code(),
            Some(2),
            "{bad:?}: {}",
            stderr(&refused)
        );
        assert!(
            stderr(&refused).contains("invalid permits"),
            "{bad:?}: {}",
            stderr(&refused)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_renews_a_permit_until_ctrl_c() {
    let fx = plain_lab().await;
    let config = fx.lab.config_path();
    let mut holder = Command::new(BIN)
        .arg("--config")
        .arg(&config)
        .args([
            "acquire",
            "kept:sem",
            "--permits",
            "3",
            "--hold",
            "--ttl-ms",
            "1000",
            "--owner",
            "dave",
        ])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn");
    let mut lines = BufReader::new(holder.stdout.take().expect("stdout")).lines();
    while let Some(line) = lines.next_line().await.expect("read") {
        if line.starts_with("holding it") {
            break;
        }
    }
    let started = std::time::Instant::now();
    while started.elapsed() < std::time::Duration::from_millis(2000) {
        let status = fx.locks.semaphore_status("kept:sem").await.expect("status");
        assert_eq!(
            status.holders.len(),
            1,
            "lost after {:?}",
            started.elapsed()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let pid = holder.id().expect("pid") as i32;
    // SAFETY: kill(2) on the child this test spawned.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let status = holder.wait().await.expect("wait");
    assert_eq!(status.code(), Some(0));
    let status = fx.locks.semaphore_status("kept:sem").await.expect("status");
    assert!(status.holders.is_empty(), "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_shows_a_semaphore_as_one_entry() {
    let fx = plain_lab().await;
    let config = fx.lab.config_path();
    let common::LockAndPermits { lock, permits } =
        common::hold_a_lock_and_two_permits(&fx.locks).await;

    let listed = quorumlock(&config, &["--json", "list", "api:"]).await;
    assert_eq!(listed.status.code(), Some(0), "{}", stderr(&listed));
    let list: serde_json::Value = serde_json::from_str(&stdout(&listed)).expect("list JSON");
    let locks = list["locks"].as_array().expect("locks");
    assert_eq!(locks.len(), 1, "no rows for permits: {list}");
    assert_eq!(locks[0]["resource"], "api:deploy");
    let semaphores = list["semaphores"].as_array().expect("semaphores");
    assert_eq!(semaphores.len(), 1, "{list}");
    assert_eq!(semaphores[0]["name"], "api:search");
    assert_eq!(semaphores[0]["permits"], 3);
    let holders = semaphores[0]["holders"].as_array().expect("holders");
    assert_eq!(holders.len(), 2, "{list}");
    assert!(
        holders.iter().all(|h| h["purpose"] == "crawl"
            && h["remaining_ms"].as_u64().is_some_and(|ms| ms > 0)
            && h["fencing_token"].as_u64().is_some()),
        "{list}"
    );

    let table = quorumlock(&config, &["list", "api:"]).await;
    assert_eq!(table.status.code(), Some(0), "{}", stderr(&table));
    let text = stdout(&table);
    assert!(text.lines().any(|l| l.starts_with("RESOURCE")), "{text}");
    let entry: Vec<&str> = text.lines().filter(|l| l.contains("api:search")).collect();
    assert_eq!(
        entry,
        ["api:search: semaphore of 3 permits, 2 held"],
        "one entry for the semaphore: {text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("PERMIT") && l.contains("OWNER")),
        "{text}"
    );
    for owner in ["worker-1", "worker-2"] {
        assert!(
            text.lines()
                .any(|l| l.contains(owner) && l.contains("crawl")),
            "{owner}: {text}"
        );
    }
    assert!(!text.contains("permit:"), "no key names: {text}");

    for permit in permits {
        permit.release().await.expect("release");
    }
    let after = quorumlock(&config, &["list", "api:"]).await;
    let text = stdout(&after);
    assert!(!text.contains("semaphore"), "{text}");
    lock.release().await.expect("release");
}

/// The next frame of a `--json watch` that satisfies `wanted`, within 20 s.
async fn frame_where(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    wanted: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let found = tokio::time::timeout(std::time::Duration::from_secs(20), async {
        while let Some(line) = lines.next_line().await.expect("read watch") {
            let frame: serde_json::Value = serde_json::from_str(&line).expect("a JSON frame");
            if wanted(&frame) {
                return Some(frame);
            }
        }
        None
    })
    .await;
    found
        .expect("watch showed the expected frame in time")
        .expect("watch ended early")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_shows_permit_holders_come_and_go() {
    let fx = plain_lab().await;
    let mut watch = Command::new(BIN)
        .arg("--config")
        .arg(fx.lab.config_path())
        .args(["--json", "watch", "api:search", "--interval-ms", "100"])
        .env_remove("QUORUMLOCK_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn watch");
    let mut lines = BufReader::new(watch.stdout.take().expect("stdout")).lines();
    let owners = |frame: &serde_json::Value| -> Vec<String> {
        frame["semaphore"]["holders"]
            .as_array()
            .map(|holders| {
                holders
                    .iter()
                    .filter_map(|h| h["owner"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };

    let first = fx
        .locks
        .acquire_permit("api:search", 2)
        .owner("worker-1")
        .await
        .expect("permit");
    let frame = frame_where(&mut lines, |f| owners(f) == ["worker-1"]).await;
    assert_eq!(frame["semaphore"]["permits"], 2, "{frame}");
    assert_eq!(frame["resource"], "api:search");

    let second = fx
        .locks
        .acquire_permit("api:search", 2)
        .owner("worker-2")
        .await
        .expect("permit");
    frame_where(&mut lines, |f| owners(f).len() == 2).await;

    first.release().await.expect("release");
    frame_where(&mut lines, |f| owners(f) == ["worker-2"]).await;
    second.release().await.expect("release");
    let frame = frame_where(&mut lines, |f| {
        f["semaphore"].is_object() && owners(f).is_empty()
    })
    .await;
    assert_eq!(frame["semaphore"]["holders"], serde_json::json!([]));

    // Ctrl-C ends the watch; its frames are read to the end meanwhile, so that it is never
    // left blocked writing to a full pipe.
    let drain = tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let pid = watch.id().expect("pid") as i32;
    // SAFETY: kill(2) on the child this test spawned.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let status = tokio::time::timeout(std::time::Duration::from_secs(20), watch.wait())
        .await
        .expect("watch ends on Ctrl-C")
        .expect("wait");
    assert_eq!(status.code(), Some(0));
    drain.await.expect("stdout read to its end");
}
