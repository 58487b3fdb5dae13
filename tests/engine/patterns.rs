//! Two ways to hold a lock for the length of some work, against a lab: `quorumlock run`
//! around a command (exit codes, the lease in its environment, signals, a lost lease) and
//! `Locks::with_lock` around a future (its output, release, a lost lease).

use crate::common;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{connect, plain_lab};
use quorumlock::{AcquireOptions, Error, LeaseEnd, Topology};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

const BIN: &str = env!("CARGO_BIN_EXE_quorumlock");
/// `quorumlock run`'s exit code when the lease was lost (`cli::exit::LEASE_LOST`).
const LEASE_LOST: i32 = 121;
/// Long enough for a loaded machine to renew in time, short enough that a renewal (every
/// third of it) finds a force release quickly.
const TTL_MS: u64 = 1000;
/// Bound on anything that should take a few renewals at most.
const PROMPTLY: Duration = Duration::from_secs(10);

/// `quorumlock --config CONFIG run ARGS...` run to the end.
async fn run_to_end(config: &Path, args: &[&str]) -> std::process::Output {
    let output = Command::new(BIN)
        .arg("--config")
        .arg(config)
        .arg("run")
        .args(args)
        .env_remove("QUORUMLOCK_CONFIG")
        .stdin(Stdio::null())
        .output();
    tokio::time::timeout(PROMPTLY, output)
        .await
        .expect("quorumlock run ends")
        .expect("run quorumlock")
}

/// A `quorumlock run` in the background, in a process group of its own (never a terminal's
/// foreground group, so its signals come from this test only). Dropping it before it ended
/// kills the group: `run` and its command.
struct Running {
    child: Child,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl Running {
    fn start(config: &Path, args: &[&str]) -> Running {
        Running::start_with(config, &[], args)
    }

    /// [`Running::start`] with `env` set for `run`.
    fn start_with(config: &Path, env: &[(&str, &str)], args: &[&str]) -> Running {
        let mut child = Command::new(BIN)
            .arg("--config")
            .arg(config)
            .arg("run")
            .args(args)
            .envs(env.iter().copied())
            .env_remove("QUORUMLOCK_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("spawn quorumlock run");
        let stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
        Running { child, stdout }
    }

    /// Waits for the command to print `line` on its stdout.
    async fn said(&mut self, line: &str) {
        let seen = tokio::time::timeout(PROMPTLY, async {
            while let Some(next) = self.stdout.next_line().await.expect("read stdout") {
                if next == line {
                    return true;
                }
            }
            false
        })
        .await;
        assert_eq!(seen, Ok(true), "the command never printed {line:?}");
    }

    fn signal(&self, signal: i32) {
        let pid = self.child.id().expect("still running") as i32;
        // SAFETY: kill(2) on the process this test spawned, not yet reaped.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    }

    /// Waits (bounded) for `run` to exit; returns its status and its stderr.
    async fn ended(&mut self) -> (ExitStatus, String) {
        let status = tokio::time::timeout(PROMPTLY, self.child.wait())
            .await
            .expect("quorumlock run ends, it does not hang")
            .expect("wait");
        let mut stderr = String::new();
        self.child
            .stderr
            .take()
            .expect("stderr")
            .read_to_string(&mut stderr)
            .await
            .expect("read stderr");
        (status, stderr)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let (Ok(None), Some(pid)) = (self.child.try_wait(), self.child.id()) {
            // SAFETY: the process group this test created (its leader is still running).
            unsafe { libc::kill(-(pid as i32), libc::SIGKILL) };
        }
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_passes_the_exit_code_through_and_frees_the_lock() {
    let fx = plain_lab().await;
    let config = fx.lab.config_path();
    let seen = fx.path("env");
    let script = format!(
        "echo \"$QUORUMLOCK_RESOURCE $QUORUMLOCK_FENCING_TOKEN $QUORUMLOCK_TOKEN\" > '{}'; echo out; exit 7",
        seen.display()
    );
    let ran = run_to_end(&config, &["jobs:nightly", "--", "sh", "-c", &script]).await;
    assert_eq!(ran.status.code(), Some(7), "{}", text(&ran.stderr));
    assert_eq!(text(&ran.stdout), "out\n", "stdout is the command's alone");

    let env = std::fs::read_to_string(&seen).expect("the command wrote its environment");
    let fields: Vec<&str> = env.split_whitespace().collect();
    assert_eq!(fields.len(), 3, "{env:?}");
    assert_eq!(fields[0], "jobs:nightly");
    let fence: u64 = fields[1].parse().expect("a numeric fencing token");
    assert!(fence > 0);
    assert_eq!(fields[2].len(), 32, "the token: {env:?}");
    let stderr = text(&ran.stderr);
    assert!(
        stderr.contains(&format!("with fencing token {fence}")) && stderr.contains("released"),
        "{stderr}"
    );

    // Released, not left to its TTL: another client takes it at once.
    let next = fx
        .client()
        .await
        .acquire("jobs:nightly")
        .await
        .expect("free right after run");
    assert!(next.fencing_token() > fence);
    next.release().await.expect("release");

    // A command killed by a signal: 128 + the signal, as shells report it.
    let killed = run_to_end(&config, &["jobs:nightly", "--", "sh", "-c", "kill -9 $$"]).await;
    assert_eq!(
        killed.status.code(),
        Some(128 + 9),
        "{}",
        text(&killed.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_on_a_held_lock_exits_1_without_the_command() {
    let fx = plain_lab().await;
    let config = fx.lab.config_path();
    let held = fx
        .locks
        .acquire("deploy")
        .ttl(Duration::from_secs(30))
        .owner("alice")
        .await
        .expect("acquire");
    let marker = fx.path("started");
    let touch = format!("touch '{}'", marker.display());
    let denied = run_to_end(
        &config,
        &["deploy", "--wait-ms", "0", "--", "sh", "-c", &touch],
    )
    .await;
    assert_eq!(denied.status.code(), Some(1), "{}", text(&denied.stderr));
    let stderr = text(&denied.stderr);
    assert!(
        stderr.contains("not run") && stderr.contains("held by alice"),
        "{stderr}"
    );
    assert!(!marker.exists(), "the command must not have run");
    held.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_without_a_command_is_a_usage_error() {
    // Arguments are checked before any topology is looked for.
    let nowhere = Path::new("/nonexistent/quorumlock.toml");
    for args in [&["deploy"][..], &["deploy", "--"][..]] {
        let output = run_to_end(nowhere, args).await;
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = text(&output.stderr);
        assert!(stderr.contains("COMMAND"), "{args:?}: {stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_sigterms_the_command_and_run_exits() {
    let fx = plain_lab().await;
    let config = fx.lab.config_path();
    let trapped = fx.path("trapped");
    // `sleep & wait`: a shell runs a trap only between commands, and `wait` is one it leaves.
    let script = format!(
        "trap 'echo TERM > \"{}\"; kill $! 2>/dev/null; exit 0' TERM; echo ready; sleep 60 >/dev/null 2>&1 & wait",
        trapped.display()
    );
    let ttl = TTL_MS.to_string();
    let mut run = Running::start(
        &config,
        &[
            "batch",
            "--ttl-ms",
            &ttl,
            "--grace-ms",
            "5000",
            "--",
            "sh",
            "-c",
            &script,
        ],
    );
    run.said("ready").await;
    // Outlive the TTL: only the keepalive keeps it.
    tokio::time::sleep(Duration::from_millis(TTL_MS + 300)).await;
    assert!(fx.locks.status("batch").await.expect("status").held);

    let forced = Instant::now();
    fx.client()
        .await
        .force_release("batch")
        .await
        .expect("force release");
    let (status, stderr) = run.ended().await;
    assert_eq!(status.code(), Some(LEASE_LOST), "{stderr}");
    assert!(
        forced.elapsed() < Duration::from_millis(3 * TTL_MS),
        "noticed at a renewal, not later: {:?}",
        forced.elapsed()
    );
    assert_eq!(
        std::fs::read_to_string(&trapped).expect("the command got SIGTERM"),
        "TERM\n"
    );
    assert!(stderr.contains("lost the lock on batch"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_ignoring_sigterm_dies_after_the_grace() {
    let fx = plain_lab().await;
    let config = fx.lab.config_path();
    let ttl = TTL_MS.to_string();
    let mut run = Running::start(
        &config,
        &[
            "stubborn",
            "--ttl-ms",
            &ttl,
            "--grace-ms",
            "300",
            "--",
            "sh",
            "-c",
            "trap '' TERM; echo ready; while :; do sleep 0.1; done",
        ],
    );
    run.said("ready").await;
    fx.client()
        .await
        .force_release("stubborn")
        .await
        .expect("force release");
    let (status, stderr) = run.ended().await;
    assert_eq!(status.code(), Some(LEASE_LOST), "{stderr}");
    assert!(stderr.contains("sending SIGKILL"), "{stderr}");
    assert!(stderr.contains("killed by signal 9"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_reaches_the_command_and_frees_the_lock() {
    let fx = plain_lab().await;
    let config = fx.lab.config_path();
    let trapped = fx.path("trapped");
    let script = format!(
        "trap 'echo INT > \"{}\"; kill $! 2>/dev/null; exit 5' INT; echo ready; sleep 60 >/dev/null 2>&1 & wait",
        trapped.display()
    );
    let mut run = Running::start(&config, &["interactive", "--", "sh", "-c", &script]);
    run.said("ready").await;
    assert!(fx.locks.status("interactive").await.expect("status").held);

    run.signal(libc::SIGINT);
    let (status, stderr) = run.ended().await;
    assert_eq!(status.code(), Some(5), "the command's own code: {stderr}");
    assert_eq!(
        std::fs::read_to_string(&trapped).expect("the command got SIGINT"),
        "INT\n"
    );
    assert!(stderr.contains("released interactive"), "{stderr}");
    let next = fx.client().await.acquire("interactive").await;
    assert!(next.is_ok(), "released, not left to its TTL: {next:?}");
}

/// A command for `run --permits`: writes its permit, token and fencing token to `seen`, says
/// `ready`, and exits 0 on SIGINT.
fn permit_holder(seen: &Path) -> String {
    format!(
        "trap 'kill $! 2>/dev/null; exit 0' INT; echo \"$QUORUMLOCK_RESOURCE $QUORUMLOCK_PERMIT $QUORUMLOCK_TOKEN $QUORUMLOCK_FENCING_TOKEN\" > '{}'; echo ready; sleep 60 >/dev/null 2>&1 & wait",
        seen.display()
    )
}

/// What a `permit_holder` wrote: (resource, permit, token, fencing token).
fn permit_seen(seen: &Path) -> (String, u32, String, u64) {
    let env = std::fs::read_to_string(seen).expect("the command wrote its environment");
    let fields: Vec<&str> = env.split_whitespace().collect();
    assert_eq!(fields.len(), 4, "{env:?}");
    (
        fields[0].to_string(),
        fields[1].parse().expect("QUORUMLOCK_PERMIT is a number"),
        fields[2].to_string(),
        fields[3]
            .parse()
            .expect("QUORUMLOCK_FENCING_TOKEN is a number"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_permits_runs_at_most_n_commands() {
    let fx = plain_lab().await;
    let config = fx.lab.config_path();
    let (seen_a, seen_b) = (fx.path("a"), fx.path("b"));
    let (script_a, script_b) = (permit_holder(&seen_a), permit_holder(&seen_b));
    let mut first = Running::start(
        &config,
        &[
            "api",
            "--permits",
            "2",
            "--owner",
            "a",
            "--",
            "sh",
            "-c",
            &script_a,
        ],
    );
    first.said("ready").await;
    let mut second = Running::start(
        &config,
        &[
            "api",
            "--permits",
            "2",
            "--owner",
            "b",
            "--",
            "sh",
            "-c",
            &script_b,
        ],
    );
    second.said("ready").await;

    let (resource, permit_a, token_a, fence_a) = permit_seen(&seen_a);
    let (_, permit_b, token_b, _) = permit_seen(&seen_b);
    assert_eq!(resource, "api");
    assert_ne!(permit_a, permit_b);
    assert!(permit_a < 2 && permit_b < 2);
    // The token is the permit's handle: it names the permit.
    assert!(token_a.ends_with(&format!("-{permit_a}")), "{token_a}");
    assert!(token_b.ends_with(&format!("-{permit_b}")), "{token_b}");
    assert!(fence_a > 0);
    let status = fx.locks.semaphore_status("api").await.expect("status");
    assert_eq!(status.permits, Some(2));
    let mut owners: Vec<&str> = status
        .holders
        .iter()
        .map(|h| h.holder.owner.as_deref().expect("owner"))
        .collect();
    owners.sort_unstable();
    assert_eq!(owners, ["a", "b"], "{status:?}");

    // Both permits are taken: a third command is not run.
    let marker = fx.path("third");
    let touch = format!("touch '{}'", marker.display());
    let denied = run_to_end(
        &config,
        &["api", "--permits", "2", "--", "sh", "-c", &touch],
    )
    .await;
    assert_eq!(denied.status.code(), Some(1), "{}", text(&denied.stderr));
    assert!(text(&denied.stderr).contains("not run"));
    assert!(!marker.exists(), "the command must not have run");
    // Nor under another count: exit 2 naming the field.
    let differs = run_to_end(
        &config,
        &["api", "--permits", "3", "--", "sh", "-c", &touch],
    )
    .await;
    assert_eq!(differs.status.code(), Some(2), "{}", text(&differs.stderr));
    assert!(text(&differs.stderr).contains("permits"));
    assert!(!marker.exists(), "the command must not have run");

    // The first ends: its permit is released, and the next command gets it.
    first.signal(libc::SIGINT);
    let (status, stderr) = first.ended().await;
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!("acquired permit {permit_a} of api (2 permits)"))
            && stderr.contains("released api"),
        "{stderr}"
    );
    let seen_c = fx.path("c");
    let script_c = format!(
        "echo \"$QUORUMLOCK_PERMIT $QUORUMLOCK_FENCING_TOKEN\" > '{}'; exit 4",
        seen_c.display()
    );
    let third = run_to_end(
        &config,
        &["api", "--permits", "2", "--", "sh", "-c", &script_c],
    )
    .await;
    assert_eq!(third.status.code(), Some(4), "{}", text(&third.stderr));
    let env = std::fs::read_to_string(&seen_c).expect("the third command ran");
    let fields: Vec<u64> = env
        .split_whitespace()
        .map(|f| f.parse().expect("a number"))
        .collect();
    assert_eq!(fields[0], u64::from(permit_a), "the freed permit: {env}");
    assert!(
        fields[1] > fence_a,
        "the permit's fencing token grows: {env}"
    );

    second.signal(libc::SIGINT);
    let (status, stderr) = second.ended().await;
    assert_eq!(status.code(), Some(0), "{stderr}");
    let status = fx.locks.semaphore_status("api").await.expect("status");
    assert!(
        status.holders.is_empty(),
        "every permit released: {status:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_returns_the_output_and_releases() {
    let fx = plain_lab().await;
    let other = fx.client().await;
    let options = AcquireOptions {
        ttl: Duration::from_millis(TTL_MS),
        owner: Some("worker".into()),
        ..AcquireOptions::default()
    };
    let look = &other;
    let (scope, held_inside, fence_inside) = fx
        .locks
        .with_lock("report", &options, |scope| async move {
            // Outlive the TTL: only the keepalive keeps it.
            tokio::time::sleep(Duration::from_millis(TTL_MS + 300)).await;
            let status = look.status("report").await.expect("status");
            (scope, status.held, status.fencing_token)
        })
        .await
        .expect("with_lock");
    assert!(held_inside, "held, and renewed, while the work ran");
    assert_eq!(fence_inside, Some(scope.fencing_token()));
    assert_eq!(scope.resource(), "report");
    assert!(
        scope.is_lost(),
        "the scope says the lease ended with the work"
    );

    let next = other.acquire("report").await;
    assert!(next.is_ok(), "released, not left to its TTL: {next:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_drops_the_work_when_the_lease_is_lost() {
    let fx = plain_lab().await;
    let admin = fx.client().await;
    let options = AcquireOptions {
        ttl: Duration::from_millis(TTL_MS),
        ..AcquireOptions::default()
    };
    let (started, started_rx) = tokio::sync::oneshot::channel();
    let (noticed, noticed_rx) = tokio::sync::oneshot::channel();
    let dropped = Arc::new(AtomicBool::new(false));
    let work_dropped = DropFlag(dropped.clone());
    let work = fx.locks.with_lock("import", &options, |scope| async move {
        let _flag = work_dropped;
        // A task the work started learns of the loss through its clone of the scope.
        let watcher = scope.clone();
        tokio::spawn(async move {
            watcher.lost().await;
            let _ = noticed.send(watcher.is_lost());
        });
        let _ = started.send(scope.fencing_token());
        std::future::pending::<()>().await;
    });
    let force = async {
        started_rx.await.expect("the work started");
        let forced = Instant::now();
        admin.force_release("import").await.expect("force release");
        forced
    };
    let (outcome, forced) = tokio::time::timeout(PROMPTLY, async { tokio::join!(work, force) })
        .await
        .expect("with_lock returns when the lease is lost, though the work never ends");
    match outcome {
        Err(Error::LeaseLost { resource, reason }) => {
            assert_eq!(resource, "import");
            assert!(!reason.is_empty());
        }
        other => panic!("expected LeaseLost, got {other:?}"),
    }
    assert!(
        forced.elapsed() < Duration::from_millis(3 * TTL_MS),
        "noticed at a renewal, not later: {:?}",
        forced.elapsed()
    );
    assert!(
        dropped.load(Ordering::SeqCst),
        "the work future was dropped"
    );
    let noticed = tokio::time::timeout(PROMPTLY, noticed_rx).await;
    assert!(
        matches!(noticed, Ok(Ok(true))),
        "the scope's lost() fired: {noticed:?}"
    );
}

/// Sets its flag when dropped.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A command deaf to SIGTERM with a child of its own, so only a SIGKILL to its whole group
/// stops both. It writes both PIDs to `pids`, then says `ready`.
fn stubborn_pair(pids: &Path) -> String {
    format!(
        "trap '' TERM; sleep 60 & echo \"$$ $!\" > '{}'; echo ready; wait",
        pids.display()
    )
}

/// The two PIDs [`stubborn_pair`] wrote: the shell's and its child's.
fn pair_pids(pids: &Path) -> [i32; 2] {
    let written = std::fs::read_to_string(pids).expect("the command wrote its PIDs");
    let mut parsed = written
        .split_whitespace()
        .map(|pid| pid.parse().expect("a PID"));
    [
        parsed.next().expect("the shell's PID"),
        parsed.next().expect("its child's PID"),
    ]
}

/// A process as `/proc/PID/stat` shows it: enough to tell it from a later process that got
/// the same PID, and whether it is a zombie (which runs nothing).
#[derive(Debug, Clone, PartialEq)]
struct ProcessStat {
    pid: i32,
    state: char,
    /// Clock ticks after boot when it started.
    started: u64,
}

impl ProcessStat {
    /// Parses one line of `/proc/PID/stat`; the name in parentheses may hold spaces.
    fn parse(line: &str) -> Option<ProcessStat> {
        let (pid, rest) = line.split_once(" (")?;
        let (_, after_name) = rest.rsplit_once(") ")?;
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        // After the name: state is field 3 of the line, start time field 22.
        Some(ProcessStat {
            pid: pid.trim().parse().ok()?,
            state: fields.first()?.chars().next()?,
            started: fields.get(19)?.parse().ok()?,
        })
    }

    fn same_process(&self, other: &ProcessStat) -> bool {
        self.pid == other.pid && self.started == other.started
    }
}

/// Process `pid` as `/proc` shows it now, if it exists.
fn process_stat(pid: i32) -> Option<ProcessStat> {
    ProcessStat::parse(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// When process `pid` exits (at once when it is gone already), from its pidfd: it need not
/// be this test's child.
async fn exit_of(pid: i32) -> Instant {
    use std::os::fd::{FromRawFd, OwnedFd};
    // SAFETY: pidfd_open takes a PID and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
    if fd < 0 {
        return Instant::now();
    }
    // SAFETY: a descriptor just returned to us, owned here alone.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: the AsyncFd owns the descriptor, which stays open as long as it lives.
    let fd = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
    }
    .map_err(|refused| refused.to_string())
    .expect("watch the pidfd");
    let _ready = fd.readable().await.expect("pidfd readable");
    Instant::now()
}

/// True when process `pid` has exited (a zombie counts: it runs nothing), asked through a
/// pidfd without waiting.
fn has_exited(pid: i32) -> bool {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    // SAFETY: pidfd_open takes a PID and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
    if fd < 0 {
        return true;
    }
    // SAFETY: a descriptor just returned to us, owned here alone.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut ready = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll on one valid pollfd, without waiting.
    unsafe { libc::poll(&mut ready, 1, 0) == 1 }
}

/// When the last of `pids` exited, or `None` if one still ran `within` from now.
async fn all_exited(pids: [i32; 2], within: Duration) -> Option<Instant> {
    let both = async { tokio::join!(exit_of(pids[0]), exit_of(pids[1])) };
    let (first, second) = tokio::time::timeout(within, both).await.ok()?;
    Some(first.max(second))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_max_hold_the_command_dies_before_the_next_holder() {
    let fx = plain_lab().await;
    let config = fx.lab.config_path();
    let pids = fx.path("pids");
    let script = stubborn_pair(&pids);
    // max_hold is reached at the first renewal, a third of the TTL in.
    let mut first = Running::start_with(
        &config,
        &[("QUORUMLOCK_MAX_HOLD_MS", "3000")],
        &[
            "capped",
            "--ttl-ms",
            "3000",
            "--grace-ms",
            "5000",
            "--",
            "bash",
            "-c",
            &script,
        ],
    );
    first.said("ready").await;
    let [shell, child] = pair_pids(&pids);
    let first_command = [process_stat(shell), process_stat(child)].map(|stat| {
        stat.unwrap_or_else(|| panic!("the first command's processes {shell} and {child} run"))
    });
    // The next holder's first act: look for any process of the first command.
    let check = format!("cat /proc/{shell}/stat /proc/{child}/stat 2>/dev/null; true");
    let next = run_to_end(
        &config,
        &["capped", "--wait-ms", "20000", "--", "bash", "-c", &check],
    )
    .await;
    let still_running: Vec<ProcessStat> = text(&next.stdout)
        .lines()
        .filter_map(ProcessStat::parse)
        .filter(|seen| first_command.iter().any(|first| first.same_process(seen)))
        .filter(|seen| seen.state != 'Z')
        .collect();
    assert!(
        still_running.is_empty(),
        "the next holder ran while the first command still ran: {still_running:?}; {}",
        text(&next.stderr)
    );
    let (status, stderr) = first.ended().await;
    assert_eq!(status.code(), Some(LEASE_LOST), "{stderr}");
    assert!(stderr.contains("max_hold_ms"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_renewals_kill_the_command_before_expiry() {
    let mut fx = plain_lab().await;
    let config = fx.lab.config_path();
    let pids = fx.path("pids");
    let script = stubborn_pair(&pids);
    // Renewals come every third of the TTL; the kill lands a tenth of it (1 s) before the
    // validity's end, which covers run's start-up in the bound below.
    let ttl = Duration::from_secs(10);
    // run's acquire starts after this, so its validity ends after `started` + the lifetime.
    let started = Instant::now();
    let mut run = Running::start(
        &config,
        &[
            "frozen",
            "--ttl-ms",
            "10000",
            "--grace-ms",
            "60000",
            "--",
            "bash",
            "-c",
            &script,
        ],
    );
    run.said("ready").await;
    let pids = pair_pids(&pids);
    for group in 0..3 {
        fx.lab.freeze(group).await.expect("freeze a master");
    }
    assert!(
        started.elapsed() < ttl / 3,
        "three masters frozen before the first renewal, {:?} in",
        started.elapsed()
    );
    let lifetime =
        ttl.saturating_sub(ttl.mul_f64(fx.topology.drift_factor) + Duration::from_millis(2));
    let dead = all_exited(pids, ttl + PROMPTLY).await;
    let validity_end = started + lifetime;
    match dead {
        Some(dead) => assert!(
            dead <= validity_end,
            "the last process of the command died {:?} after the lease's validity ended",
            dead - validity_end
        ),
        None => panic!("the command's processes outlived the lease by {PROMPTLY:?}"),
    }
    let (status, stderr) = run.ended().await;
    assert_eq!(status.code(), Some(LEASE_LOST), "{stderr}");
    for group in 0..3 {
        fx.lab.thaw(group).await.expect("thaw");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_dies_with_run_when_run_is_killed() {
    let fx = plain_lab().await;
    let config = fx.lab.config_path();
    let pids = fx.path("pids");
    let script = stubborn_pair(&pids);
    let mut run = Running::start(&config, &["orphaned", "--", "bash", "-c", &script]);
    run.said("ready").await;
    let pids = pair_pids(&pids);
    run.signal(libc::SIGKILL);
    assert!(
        all_exited(pids, PROMPTLY).await.is_some(),
        "the command's processes outlived run"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_dies_with_run_killed_as_it_starts() {
    let fx = plain_lab().await;
    let config = fx.lab.config_path();
    // The command kills run at once, racing run's own steps after the spawn: the guard
    // must know the group however early run dies.
    for round in 0..20 {
        let pids = fx.path(&format!("pids-{round}"));
        let script = format!(
            "sleep 60 & echo \"$$ $!\" > '{}'; kill -KILL $PPID; wait",
            pids.display()
        );
        // A resource per round: a killed run leaves its lock to expire.
        let resource = format!("starting-{round}");
        let mut run = Running::start(&config, &[&resource, "--", "bash", "-c", &script]);
        let (status, stderr) = run.ended().await;
        assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}: {stderr}");
        let pids = pair_pids(&pids);
        assert!(
            all_exited(pids, PROMPTLY).await.is_some(),
            "round {round}: the command's processes outlived run"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_max_hold_with_lock_drops_the_work_first() {
    let fx = plain_lab().await;
    let capped = connect(Topology {
        max_hold_ms: 1500,
        ..fx.topology.clone()
    })
    .await;
    let next = fx.client().await;
    let options = AcquireOptions {
        ttl: Duration::from_millis(1500),
        ..AcquireOptions::default()
    };
    let dropped = Arc::new(AtomicBool::new(false));
    let work_dropped = SlowDropFlag(dropped.clone());
    let (started, started_rx) = tokio::sync::oneshot::channel();
    let work = capped.with_lock("capped", &options, |_scope| async move {
        let _flag = work_dropped;
        let _ = started.send(());
        std::future::pending::<()>().await;
    });
    // A task of its own, on the other worker thread: the work's drop blocks this one.
    let work_was_dropped = dropped.clone();
    let take_next = tokio::spawn(async move {
        started_rx.await.expect("the work started");
        let lease = next
            .acquire("capped")
            .wait(PROMPTLY)
            .await
            .expect("the next holder gets the lock");
        let work_gone = work_was_dropped.load(Ordering::SeqCst);
        lease.release().await.expect("release");
        work_gone
    });
    let (outcome, work_gone) =
        tokio::time::timeout(PROMPTLY, async { tokio::join!(work, take_next) })
            .await
            .expect("with_lock returns at max_hold");
    let work_gone = work_gone.expect("the next holder's task");
    assert!(
        matches!(outcome, Err(Error::LeaseLost { .. })),
        "{outcome:?}"
    );
    assert!(
        work_gone,
        "the next holder had the lock before the work was dropped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_lease_ends_at_its_validity_if_renewal_hangs() {
    let mut fx = plain_lab().await;
    // A renewal to a frozen master waits out this call timeout, far past the validity.
    let slow = connect(Topology {
        call_timeout_ms: 8_000,
        ..fx.topology.clone()
    })
    .await;
    let kept = slow
        .acquire("hung")
        .ttl(Duration::from_millis(1500))
        .keepalive()
        .await
        .expect("acquire");
    for group in 0..3 {
        fx.lab.freeze(group).await.expect("freeze a master");
    }
    let end = tokio::time::timeout(PROMPTLY, kept.lost())
        .await
        .expect("the loss is declared");
    let noticed = Instant::now();
    assert!(matches!(end, LeaseEnd::Lost(_)), "{end:?}");
    let valid_until = slow.clock().to_real(kept.valid_until());
    // Scheduling slack only: the hung renewal would answer 8 s after it was sent.
    let slack = Duration::from_secs(2);
    assert!(
        noticed <= valid_until + slack,
        "told of the loss {:?} after the validity ended",
        noticed - valid_until
    );
    for group in 0..3 {
        fx.lab.thaw(group).await.expect("thaw");
    }
}

/// Sets its flag when dropped, after a cleanup that takes a while.
struct SlowDropFlag(Arc<AtomicBool>);

impl Drop for SlowDropFlag {
    fn drop(&mut self) {
        // Cleanup that blocks its thread, as a file flush or a join might.
        std::thread::sleep(Duration::from_millis(300));
        self.0.store(true, Ordering::SeqCst);
    }
}

/// `quorumlock run ARGS...` on a terminal of its own (a pseudo-terminal whose session `run`
/// leads), and what the terminal shows, a chunk at a time.
struct OnTerminal {
    run: std::process::Child,
    terminal: std::fs::File,
    shown: tokio::sync::mpsc::UnboundedReceiver<String>,
}

impl OnTerminal {
    fn start(config: &Path, args: &[&str]) -> OnTerminal {
        use std::os::fd::{FromRawFd, OwnedFd};
        use std::os::unix::process::CommandExt;
        let (mut leader, mut follower) = (0, 0);
        // SAFETY: openpty writes two new descriptors; no name, settings or size are asked for.
        let opened = unsafe {
            libc::openpty(
                &mut leader,
                &mut follower,
                std::ptr::null_mut(),
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        assert_eq!(opened, 0, "openpty");
        // SAFETY: both descriptors were just opened and are owned here alone.
        let (leader, follower) =
            unsafe { (OwnedFd::from_raw_fd(leader), OwnedFd::from_raw_fd(follower)) };
        let io = |fd: &OwnedFd| Stdio::from(fd.try_clone().expect("dup"));
        let mut command = std::process::Command::new(BIN);
        command
            .arg("--config")
            .arg(config)
            .arg("run")
            .args(args)
            .env_remove("QUORUMLOCK_CONFIG")
            .stdin(io(&follower))
            .stdout(io(&follower))
            .stderr(io(&follower));
        // SAFETY: setsid and ioctl are async-signal-safe; the terminal becomes the new
        // session's controlling terminal, with `run`'s group in its foreground.
        unsafe {
            command.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let run = command.spawn().expect("spawn quorumlock run");
        drop(follower);
        let terminal = std::fs::File::from(leader);
        let mut reader = terminal.try_clone().expect("dup");
        let (show, shown) = tokio::sync::mpsc::unbounded_channel();
        std::thread::spawn(move || {
            use std::io::Read;
            let mut chunk = [0u8; 4096];
            // Ends when every process on the terminal closed it (EIO) or the test ended.
            while let Ok(read @ 1..) = reader.read(&mut chunk) {
                if show.send(text(&chunk[..read])).is_err() {
                    break;
                }
            }
        });
        OnTerminal {
            run,
            terminal,
            shown,
        }
    }

    /// Waits until the terminal has shown `expected`; returns all it showed so far.
    async fn shows(&mut self, expected: &str, seen: &mut String) {
        let found = tokio::time::timeout(PROMPTLY, async {
            while !seen.contains(expected) {
                match self.shown.recv().await {
                    Some(chunk) => seen.push_str(&chunk),
                    None => return false,
                }
            }
            true
        })
        .await;
        assert_eq!(
            found,
            Ok(true),
            "the terminal never showed {expected:?}: {seen:?}"
        );
    }

    /// Types `keys` at the terminal.
    fn types(&mut self, keys: &[u8]) {
        use std::io::Write;
        self.terminal.write_all(keys).expect("type at the terminal");
    }
}

impl Drop for OnTerminal {
    fn drop(&mut self) {
        let _ = self.run.kill();
        let _ = self.run.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_a_terminal_the_command_gets_input_and_ctrl_c() {
    let fx = plain_lab().await;
    let config = fx.lab.config_path();
    let mut run = OnTerminal::start(
        &config,
        &[
            "typed",
            "--",
            "sh",
            "-c",
            // The trap makes the end certain wherever the SIGINT lands between commands.
            "trap 'echo interrupted; exit 130' INT; read line; echo got:$line; echo ready; while :; do sleep 0.1; done",
        ],
    );
    let mut seen = String::new();
    run.shows("running", &mut seen).await;
    run.types(b"hello\n");
    run.shows("got:hello", &mut seen).await;
    run.shows("ready", &mut seen).await;
    // Ctrl-C: the terminal sends SIGINT to its foreground group, which is the command's.
    run.types(b"\x03");
    run.shows("interrupted", &mut seen).await;
    run.shows("exit code 130", &mut seen).await;
    let status = tokio::task::block_in_place(|| run.run.wait()).expect("wait for run");
    assert_eq!(status.code(), Some(128 + libc::SIGINT), "{seen}");
    let next = fx.client().await.acquire("typed").await;
    assert!(next.is_ok(), "released after Ctrl-C: {next:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ctrl_z_stopped_command_dies_before_the_lease_goes() {
    let fx = plain_lab().await;
    let config = fx.lab.config_path();
    let pid_file = fx.path("pid");
    // Ctrl-Z stops the shell, and run stops with it; the child ignores SIGTSTP and runs on.
    let script = fx.file(
        "stopped.sh",
        &format!(
            "(trap '' TSTP; exec sleep 60) &\necho $! > '{}'\necho ready\nwait\n",
            pid_file.display()
        ),
    );
    let script = script.to_string_lossy().into_owned();
    let mut run = OnTerminal::start(
        &config,
        &["stopped", "--ttl-ms", "1000", "--", "sh", &script],
    );
    let mut seen = String::new();
    run.shows("ready", &mut seen).await;
    let child: i32 = std::fs::read_to_string(&pid_file)
        .expect("the command wrote its child's PID")
        .trim()
        .parse()
        .expect("a PID");
    run.types(b"\x1a");
    // Nobody renews while run is stopped; the next holder gets the lock once it lapses.
    let next = fx
        .client()
        .await
        .acquire("stopped")
        .wait(PROMPTLY)
        .await
        .expect("the lock lapses while run is stopped");
    assert!(
        has_exited(child),
        "the next holder has the lock while the stopped command's child still runs"
    );
    next.release().await.expect("release");
    // SAFETY: kill(2) on the process this test spawned, still unreaped.
    unsafe { libc::kill(run.run.id() as i32, libc::SIGCONT) };
    let status = tokio::task::block_in_place(|| run.run.wait()).expect("wait for run");
    assert_eq!(status.code(), Some(LEASE_LOST), "{seen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leftover_processes_stop_before_the_release() {
    let fx = plain_lab().await;
    let config = fx.lab.config_path();
    let pid_file = fx.path("pid");
    let script = format!("sleep 60 & echo $! > '{}'; exit 3", pid_file.display());
    let ran = run_to_end(&config, &["leftovers", "--", "sh", "-c", &script]).await;
    let stderr = text(&ran.stderr);
    assert_eq!(
        ran.status.code(),
        Some(3),
        "the command's own code: {stderr}"
    );
    let child: i32 = std::fs::read_to_string(&pid_file)
        .expect("the command wrote its child's PID")
        .trim()
        .parse()
        .expect("a PID");
    assert!(
        has_exited(child),
        "run released the lock while the command's child still ran: {stderr}"
    );
    assert!(stderr.contains("left processes in its group"), "{stderr}");
}
