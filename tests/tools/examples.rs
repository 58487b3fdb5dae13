//! The examples run: each example binary runs against a lab of its own and must exit 0 and
//! print what it set out to show. Each finds the lab by another of the ways the examples
//! share (the lab directory, `QUORUMLOCK_CONFIG`, a path argument). Also: every Rust snippet
//! in the README is the top of an example (the first, of examples/fenced_write.rs), and the
//! bench's set rows cost a group one script call per acquire and one per release whatever the
//! size of the set.
//!
//! The binaries: `cargo build --examples` in the profile this test was built in, which costs
//! nothing when `cargo test` already built them, and builds them under `cargo test --test
//! examples`. A cargo that keeps the build directory locked while tests run (older ones did)
//! would block that build: after [`LOCK_PATIENCE`] of "Blocking waiting for file lock" it is
//! stopped and the binaries `cargo test` built beside this test's executable are used; when
//! there are none, it is given up after [`LOCK_LIMIT`] with what to run instead.

use crate::common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use common::{plain_lab, sentinel_lab};
use quorumlock::bench::{BenchOptions, run as run_bench};

/// How long the examples' build may wait for a lock before the prebuilt binaries are used.
const LOCK_PATIENCE: Duration = Duration::from_secs(60);
/// How long it may wait for a lock when there are none (other builds hold it meanwhile).
const LOCK_LIMIT: Duration = Duration::from_secs(900);
const EXAMPLES: [&str; 4] = [
    "fenced_write",
    "keepalive",
    "semaphore",
    "several_resources",
];
/// An example that has not exited by then is killed and the test fails.
const RUN_LIMIT: Duration = Duration::from_secs(90);

/// How an example is pointed at the lab.
enum Find {
    /// `QUORUMLOCK_LAB_DIR`, as after `quorumlock lab up --lab-dir DIR`.
    LabDir,
    /// `QUORUMLOCK_CONFIG`.
    ConfigEnv,
    /// The topology file as the first argument.
    Argument,
}

/// Runs the example `name` against a fresh Sentinel lab; returns its stdout after checking
/// that it exited 0.
async fn run_example(name: &str, find: Find) -> String {
    let binary = example(name);
    let fx = sentinel_lab().await;
    let workdir = common::temp_dir();
    let mut command = tokio::process::Command::new(&binary);
    command
        .current_dir(workdir.path())
        .env_remove("QUORUMLOCK_CONFIG")
        .env_remove("QUORUMLOCK_LAB_DIR")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    match find {
        Find::LabDir => command.env("QUORUMLOCK_LAB_DIR", fx.lab.dir()),
        Find::ConfigEnv => command.env("QUORUMLOCK_CONFIG", fx.lab.config_path()),
        Find::Argument => command.arg(fx.lab.config_path()),
    };
    let started = Instant::now();
    let output = tokio::time::timeout(RUN_LIMIT, command.output())
        .await
        .unwrap_or_else(|_| panic!("example {name} still ran after {RUN_LIMIT:?}; killed"))
        .unwrap_or_else(|error| panic!("cannot run {}: {error}", binary.display()));
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    );
    eprintln!(
        "example {name} ran {} ms, {}\n--- stdout\n{stdout}--- stderr\n{stderr}",
        started.elapsed().as_millis(),
        output.status
    );
    assert!(output.status.success(), "example {name} failed");
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_write_rejects_the_stale_holder() {
    let out = run_example("fenced_write", Find::LabDir).await;
    assert!(out.contains("agent-7 wrote \"migration 42\" under fencing token"));
    assert!(out.contains("stale holder rejected: fencing token"));
    assert!(out.contains("storage holds \"agent-b's write\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalive_notices_the_loss_and_stops_the_work() {
    let out = run_example("keepalive", Find::ConfigEnv).await;
    assert!(out.contains("lease lost (Lost("));
    assert!(out.contains("the lock is released"));
    assert!(out.contains("with_lock stopped the work"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_resources_are_taken_all_or_nothing() {
    let out = run_example("several_resources", Find::Argument).await;
    assert!(out.contains(r#"holding ["accounts:alice", "accounts:bob", "ledger"]"#));
    assert!(out.contains(r#"["ledger"] refused: ledger is held by transfer-17"#));
    assert!(out.contains("refused: accounts:alice is held by transfer-17"));
    assert!(out.contains("accounts:carol is free"));
    assert!(out.contains("released the set on "));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_permits_never_let_in_more_than_two_workers() {
    let out = run_example("semaphore", Find::ConfigEnv).await;
    let holding: Vec<&str> = out
        .lines()
        .filter(|line| line.contains(" holds a permit (fencing token "))
        .collect();
    assert_eq!(holding.len(), 6, "every worker got a permit in turn");
    // The example counts the workers inside; each line says how many were in with it.
    for line in &holding {
        assert!(
            line.ends_with("1 of 2 in use") || line.ends_with("2 of 2 in use"),
            "{line}"
        );
    }
    assert_eq!(out.matches(" released its permit").count(), 6);
    assert!(out.contains("all 6 workers called the API; at most "));
    assert!(out.contains("never more than 2"));
    assert!(out.contains("api:search now: 0 of 2 permits held"));
}

/// Every Rust snippet in README.md is an example's part between its `README` lines, so each
/// compiles with the examples; the "Use it from Rust" one is the top of
/// examples/fenced_write.rs.
#[test]
fn every_readme_snippet_tops_an_example() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let mut marked: HashMap<String, String> = HashMap::new();
    for entry in std::fs::read_dir(root.join("examples")).expect("examples/") {
        let path = entry.expect("an entry of examples/").path();
        if path.extension().is_none_or(|ext| ext != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("an example");
        if let Some(part) = text
            .split("// README: begin\n")
            .nth(1)
            .and_then(|rest| rest.split("// README: end").next())
        {
            marked.insert(part.to_string(), path.display().to_string());
        }
    }
    let snippets: Vec<&str> = readme
        .split("```rust\n")
        .skip(1)
        .filter_map(|block| block.split("```").next())
        .collect();
    assert!(!snippets.is_empty(), "README.md has a Rust snippet");
    for snippet in &snippets {
        assert!(
            marked.contains_key(*snippet),
            "this README.md Rust snippet is no example's part between its README lines; copy it from the example, or remove it:\n{snippet}"
        );
    }
    let first = readme
        .split("## Use it from Rust")
        .nth(1)
        .and_then(|section| section.split("```rust\n").nth(1))
        .and_then(|block| block.split("```").next())
        .expect("a ```rust block under \"## Use it from Rust\" in README.md");
    assert!(
        marked
            .get(first)
            .is_some_and(|path| path.ends_with("fenced_write.rs")),
        "README.md's first Rust snippet differs from examples/fenced_write.rs: copy the example's part between its README lines into the README"
    );
}

/// `quorumlock bench`'s set rows: a set costs each group one script call to acquire and one
/// to release, as the single lock does, whatever its size (a call per member would make a
/// set of 4 cost 8 calls a cycle). A call retried or rolled back after a timeout on a busy
/// machine adds to the count now and then, hence a bound rather than exactly 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_set_rows_cost_one_script_call_per_group() {
    let fx = plain_lab().await;
    let options = BenchOptions {
        samples: 20,
        set_sizes: vec![1, 4, 16],
        concurrency: Vec::new(),
        phase: Duration::from_millis(200),
        contenders: 2,
        ..BenchOptions::default()
    };
    let report = run_bench(&fx.locks, &options, |_| {}).await.expect("bench");
    print!("{}", report.table());
    let sizes: Vec<_> = report.sets.iter().map(|row| row.set_size).collect();
    assert_eq!(sizes, [None, Some(1), Some(4), Some(16)]);
    for row in &report.sets {
        assert_eq!(row.cycle.samples, 20);
        let calls = row.script_calls_per_cycle.expect("INFO commandstats on g1");
        assert!(
            (2.0..4.0).contains(&calls),
            "set of {:?}: {calls} script calls per acquire+release on g1",
            row.set_size
        );
    }
    assert!(report.table().contains("set of 16"));
}

/// The path of the example binary `name`, after building the examples once per test process.
fn example(name: &str) -> PathBuf {
    static BUILT: OnceLock<HashMap<String, PathBuf>> = OnceLock::new();
    let built = BUILT.get_or_init(build_examples);
    built
        .get(name)
        .cloned()
        .unwrap_or_else(|| panic!("no example binary {name} among {built:?}"))
}

/// `target/<profile>/`, the directory of this test's `deps/`.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's executable");
    exe.parent()
        .and_then(Path::parent)
        .expect("the test runs from target/<profile>/deps/")
        .to_path_buf()
}

/// Builds every example in this test's profile and returns their paths by name; falls back
/// to the binaries beside this test when the build waits on a lock for too long.
fn build_examples() -> HashMap<String, PathBuf> {
    let profile = match profile_dir().file_name().and_then(|name| name.to_str()) {
        Some("debug") | None => "dev".to_string(),
        Some(other) => other.to_string(),
    };
    let mut child = Command::new(env!("CARGO"))
        .args(["build", "--examples", "--profile", &profile])
        .arg("--message-format=json-render-diagnostics")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run cargo build --examples");
    let stdout = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        let mut examples = HashMap::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let Ok(message) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            let is_example = message["target"]["kind"]
                .as_array()
                .is_some_and(|kinds| kinds.iter().any(|kind| kind == "example"));
            if let (true, Some(name), Some(path)) = (
                is_example,
                message["target"]["name"].as_str(),
                message["executable"].as_str(),
            ) {
                examples.insert(name.to_string(), PathBuf::from(path));
            }
        }
        examples
    });
    let blocked = Arc::new(AtomicBool::new(false));
    let stderr = child.stderr.take().expect("stderr");
    let seen = blocked.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            // Blocked until the next line says that cargo got on with it.
            seen.store(
                line.contains("Blocking waiting for file lock"),
                Ordering::Relaxed,
            );
            eprintln!("{line}");
        }
    });
    let mut blocked_since = None;
    loop {
        if let Some(status) = child.try_wait().expect("wait for cargo") {
            assert!(status.success(), "cargo build --examples failed: {status}");
            return reader.join().expect("cargo's messages");
        }
        if !blocked.load(Ordering::Relaxed) {
            blocked_since = None;
        } else {
            let waited = blocked_since.get_or_insert_with(Instant::now).elapsed();
            let prebuilt = prebuilt();
            if (waited > LOCK_PATIENCE && prebuilt.is_some()) || waited > LOCK_LIMIT {
                let _ = child.kill();
                let _ = child.wait();
                eprintln!(
                    "cargo build --examples waited {waited:?} for a lock; stopped it, using the examples in {}",
                    profile_dir().join("examples").display()
                );
                return prebuilt.unwrap_or_else(|| {
                    panic!(
                        "no example binaries in {}: run `cargo build --examples` first, or the whole `cargo test`",
                        profile_dir().join("examples").display()
                    )
                });
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The examples `cargo test` built in `target/<profile>/examples/`, if they are all there.
fn prebuilt() -> Option<HashMap<String, PathBuf>> {
    let dir = profile_dir().join("examples");
    EXAMPLES
        .into_iter()
        .map(|name| {
            let path = dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
            path.is_file().then(|| (name.to_string(), path))
        })
        .collect()
}
