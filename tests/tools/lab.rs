//! The lab against real redis-server processes: start and teardown, failover after a kill,
//! freeze and thaw, a taken base port, stop and attach. Each test owns a lab in a temporary
//! directory and checks through its own sockets and /proc, not only through the lab's API.

use crate::common;

use std::collections::HashMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{poll_until, start_lab, temp_dir};
use quorumlock::Topology;
use quorumlock::lab::{Lab, LabError, LabSpec, NodeKind};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const PING_WITHIN: Duration = Duration::from_millis(200);

/// Sends one inline command and returns the whole reply once `complete` accepts it, or
/// `None` if the node does not answer within `within`.
async fn exchange(
    port: u16,
    command: &str,
    within: Duration,
    complete: impl Fn(&str) -> bool,
) -> Option<String> {
    let attempt = async {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        stream
            .write_all(format!("{command}\r\n").as_bytes())
            .await
            .ok()?;
        let mut reply = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let read = stream.read(&mut chunk).await.ok()?;
            if read == 0 {
                return None;
            }
            reply.extend_from_slice(&chunk[..read]);
            let text = String::from_utf8_lossy(&reply).into_owned();
            if complete(&text) {
                return Some(text);
            }
        }
    };
    tokio::time::timeout(within, attempt).await.ok().flatten()
}

/// One-line replies: status, error, integer.
async fn simple(port: u16, command: &str) -> Option<String> {
    exchange(port, command, PING_WITHIN, |text| text.ends_with("\r\n"))
        .await
        .map(|text| text.trim_end().to_string())
}

async fn answers_ping(port: u16) -> bool {
    simple(port, "PING").await.as_deref() == Some("+PONG")
}

/// `SENTINEL MASTER <service>` as a map; the reply is a flat array of bulk strings.
async fn sentinel_master(port: u16, service: &str) -> HashMap<String, String> {
    let complete = |text: &str| {
        let lines: Vec<&str> = text.split("\r\n").collect();
        let count: usize = lines[0]
            .trim_start_matches('*')
            .parse()
            .unwrap_or(usize::MAX);
        lines.len() > 2 * count.min(10_000)
    };
    let command = format!("SENTINEL MASTER {service}");
    let reply = exchange(port, &command, Duration::from_secs(1), complete)
        .await
        .expect("Sentinel answers SENTINEL MASTER");
    let values: Vec<&str> = reply
        .split("\r\n")
        .skip(1)
        .filter(|line| !line.starts_with('$') && !line.is_empty())
        .collect();
    values
        .chunks_exact(2)
        .map(|pair| (pair[0].to_string(), pair[1].to_string()))
        .collect()
}

fn gone(pid: u32) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists()
}

/// PIDs of every process whose working directory is inside `dir`: redis-server runs in its
/// node directory, so this finds lab processes the lab itself might have lost track of.
fn processes_in(dir: &Path) -> Vec<u32> {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd.starts_with(&dir))
        })
        .collect()
}

fn spec(dir: &Path, groups: usize) -> LabSpec {
    LabSpec {
        groups,
        ..LabSpec::new(dir)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_serves_every_group_and_drop_kills_all() {
    let dir = temp_dir();
    let lab = start_lab(LabSpec::new(dir.path())).await;

    let topology = lab.topology();
    assert_eq!(topology.groups.len(), 5);
    for (index, group) in topology.groups.iter().enumerate() {
        let name = format!("g{}", index + 1);
        assert_eq!(group.name, name);
        assert_eq!(group.service.as_deref(), Some(name.as_str()));
        assert_eq!(group.sentinels.len(), 3);
        assert_eq!(group.address, None);
    }
    let written = std::fs::read_to_string(lab.config_path()).expect("quorumlock.toml written");
    assert_eq!(Topology::from_toml(&written).expect("valid TOML"), topology);

    for group in 0..5 {
        let master = lab
            .master_of(group)
            .await
            .expect("Sentinel names the master");
        assert_eq!((master.group, master.kind), (group, NodeKind::Master));
        assert!(
            answers_ping(master.port).await,
            "g{} master answers",
            group + 1
        );
    }
    // The pre-seeded configs make every Sentinel know its peers and the replicas at once.
    for sentinel in &topology.groups[0].sentinels {
        let port: u16 = sentinel
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("port");
        for group in &topology.groups {
            let fields = sentinel_master(port, &group.name).await;
            assert_eq!(
                fields.get("num-other-sentinels").map(String::as_str),
                Some("2")
            );
            assert_eq!(fields.get("num-slaves").map(String::as_str), Some("1"));
        }
    }

    let statuses = lab.status().await;
    assert_eq!(statuses.len(), 13);
    for status in &statuses {
        assert!(status.alive && !status.frozen, "{status:?}");
        assert_eq!(
            status.role.as_deref(),
            Some(status.kind.to_string().as_str()),
            "{status:?}"
        );
    }

    let pids = lab.pids();
    let state_file = dir.path().join("lab.json");
    assert!(state_file.exists());
    assert_eq!(processes_in(dir.path()).len(), pids.len());
    drop(lab);
    for pid in pids {
        assert!(gone(pid), "PID {pid} survived dropping the lab");
    }
    assert_eq!(processes_in(dir.path()), Vec::<u32>::new());
    assert!(
        !state_file.exists(),
        "an owned lab's state file goes with it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_promotes_and_restart_brings_the_node_back() {
    let dir = temp_dir();
    let mut lab = start_lab(spec(dir.path(), 3)).await;
    let before = lab.master_of(1).await.expect("master of g2");

    let killed = lab.kill(1).await.expect("kill g2's master");
    assert_eq!((killed.port, killed.pid), (before.port, before.pid));
    assert!(gone(killed.pid));
    assert!(!answers_ping(killed.port).await);

    let killed_at = Instant::now();
    let promoted = poll_until(Duration::from_secs(20), || async {
        let master = lab.master_of(1).await.ok()?;
        (master.port != killed.port).then_some(master)
    })
    .await
    .expect("Sentinel promotes the replica within 20 s");
    eprintln!("failover took {} ms", killed_at.elapsed().as_millis());
    assert_eq!(promoted.kind, NodeKind::Replica);
    let role = exchange(promoted.port, "ROLE", PING_WITHIN, |text| {
        text.contains("master")
    })
    .await;
    assert!(role.is_some(), "the promoted replica reports itself master");
    // The other groups are untouched.
    assert_eq!(lab.master_of(0).await.expect("g1").kind, NodeKind::Master);

    let restarted = lab.restart(1).await.expect("restart g2");
    assert_eq!(
        restarted.len(),
        1,
        "only the dead node is restarted: {restarted:?}"
    );
    assert_eq!(restarted[0].port, killed.port);
    assert_ne!(restarted[0].pid, killed.pid);
    assert!(answers_ping(killed.port).await);
    let status = lab.status().await;
    let back = status
        .iter()
        .find(|node| node.port == killed.port)
        .expect("listed");
    assert!(back.alive && back.pid == restarted[0].pid, "{back:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_master_answers_nothing_until_thawed() {
    let dir = temp_dir();
    let mut lab = start_lab(spec(dir.path(), 3)).await;

    let frozen = lab.freeze(2).await.expect("freeze g3's master");
    assert!(
        !answers_ping(frozen.port).await,
        "a frozen master must not answer"
    );
    let status = lab.status().await;
    let row = status
        .iter()
        .find(|node| node.port == frozen.port)
        .expect("listed");
    assert!(row.alive && row.frozen && row.role.is_none(), "{row:?}");
    assert!(
        lab.thaw(0).await.expect("thaw g1").is_empty(),
        "nothing frozen in g1"
    );

    let thawed = lab.thaw(2).await.expect("thaw g3");
    assert_eq!(
        thawed.iter().map(|node| node.port).collect::<Vec<_>>(),
        vec![frozen.port]
    );
    assert!(
        answers_ping(frozen.port).await,
        "a thawed master answers again"
    );
    let status = lab.status().await;
    let row = status
        .iter()
        .find(|node| node.port == frozen.port)
        .expect("listed");
    assert!(row.alive && !row.frozen, "{row:?}");

    // Dropping the lab must also end a process that is stopped.
    let frozen_again = lab.freeze(0).await.expect("freeze g1's master");
    drop(lab);
    assert!(
        gone(frozen_again.pid),
        "a frozen PID survived dropping the lab"
    );
    assert_eq!(processes_in(dir.path()), Vec::<u32>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_base_port_is_refused_up_front() {
    let dir = temp_dir();
    let needed = 3 * 2 + 3;
    // Hold a port in the middle of the block (g3's master) while the rest of the block is free.
    // Blocks are looked for below the kernel's ephemeral range, where the other tests' free
    // ports and connections (taken from that range) do not crowd them.
    let (listener, base) = (15_000u16..30_000)
        .step_by(needed + 1)
        .find_map(|base| {
            let middle = base + 2;
            let listener = TcpListener::bind(("127.0.0.1", middle)).ok()?;
            let rest_free = (base..base + needed as u16)
                .filter(|candidate| *candidate != middle)
                .all(|candidate| TcpListener::bind(("127.0.0.1", candidate)).is_ok());
            rest_free.then_some((listener, base))
        })
        .expect("a free block of ports");
    let taken = listener.local_addr().expect("address").port();

    let error = Lab::start(LabSpec {
        base_port: Some(base),
        ..spec(dir.path(), 3)
    })
    .await
    .err()
    .expect("start must refuse a taken port");
    assert!(
        matches!(error, LabError::PortTaken { port, .. } if port == taken),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains(&taken.to_string()) && message.contains("--base-port"),
        "{message}"
    );
    assert_eq!(processes_in(dir.path()), Vec::<u32>::new());
    let created: Vec<_> = std::fs::read_dir(dir.path()).expect("dir").collect();
    assert!(
        created.is_empty(),
        "nothing may be written or spawned first: {created:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_removes_state_and_open_needs_a_lab() {
    let dir = temp_dir();
    let error = Lab::open(dir.path()).err().expect("no lab yet");
    assert!(matches!(error, LabError::NoLab { .. }), "{error:?}");
    assert!(error.to_string().contains("quorumlock lab up"), "{error}");

    // Plain masters: the cheapest lab, and the direct-address branch of every operation.
    let mut lab = start_lab(LabSpec {
        replicas: 0,
        sentinels: 0,
        ..spec(dir.path(), 3)
    })
    .await;
    let topology = lab.topology();
    let master = lab.master_of(0).await.expect("g1 master");
    assert_eq!(topology.groups[0].address, Some(master.address()));
    assert!(topology.groups[0].sentinels.is_empty());

    // Restart without a dead node restarts the master, empty.
    assert_eq!(
        simple(master.port, "SET probe 1").await.as_deref(),
        Some("+OK")
    );
    let restarted = lab.restart(0).await.expect("restart g1");
    assert_eq!(restarted.len(), 1);
    assert_eq!(restarted[0].port, master.port);
    assert_ne!(restarted[0].pid, master.pid);
    assert!(gone(master.pid));
    assert_eq!(
        simple(master.port, "EXISTS probe").await.as_deref(),
        Some(":0")
    );

    // A second process attaches through the state file and leaves the lab running.
    let attached = Lab::open(dir.path()).expect("attach");
    assert_eq!(attached.pids(), lab.pids());
    assert_eq!(attached.topology(), topology);
    drop(attached);
    assert!(
        answers_ping(master.port).await,
        "dropping an attached lab must not stop it"
    );
    let again = Lab::start(LabSpec::new(dir.path()))
        .await
        .err()
        .expect("refused");
    assert!(
        matches!(again, LabError::AlreadyRunning { .. }),
        "{again:?}"
    );

    let pids = lab.pids();
    let state_file: PathBuf = dir.path().join("lab.json");
    lab.stop().await.expect("stop");
    assert!(!state_file.exists());
    for pid in &pids {
        assert!(gone(*pid), "PID {pid} survived stop");
    }
    assert_eq!(processes_in(dir.path()), Vec::<u32>::new());
    let error = Lab::open(dir.path()).err().expect("stopped");
    assert!(matches!(error, LabError::NoLab { .. }), "{error:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_default_lab_shows_no_unsafe_setting() {
    let dir = temp_dir();
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_quorumlock"))
            .arg("--lab-dir")
            .arg(dir.path())
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run quorumlock")
    };
    let up = run(&["lab", "up"]);
    assert!(up.status.success(), "{up:?}");
    let health = run(&["--lab", "health"]);
    let text = String::from_utf8_lossy(&health.stdout).into_owned();
    let down = run(&["lab", "down"]);
    assert!(down.status.success(), "{down:?}");
    assert!(health.status.success(), "{health:?}");
    // Replicas and min-replicas-to-write 1 with a write window that covers the lag.
    assert!(!text.contains("UNSAFE"), "{text}");
    assert!(text.contains("5 of 5 groups vote"), "{text}");
}
