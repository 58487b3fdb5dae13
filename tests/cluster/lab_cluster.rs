//! Cluster labs against real redis-server processes: five groups each a Redis Cluster with
//! every slot served and every node agreeing, a shard's primary killed and its replica
//! promoted by the cluster, slots moved between shards with their keys, and `lab down`
//! leaving no process behind. The tests look at the nodes through their own sockets and
//! /proc; the lab only tells them where the nodes are.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::resp::{Reply, call, cluster_info, cluster_nodes, integer, key_slot};
use common::{eventually, poll_until, start_lab, temp_dir};
use quorumlock::lab::{ClusterShape, Lab, LabSpec, NodeKind};

const FAILOVER_WITHIN: Duration = Duration::from_secs(20);
const EXIT_WITHIN: Duration = Duration::from_secs(5);

/// A process is gone once /proc has no entry for it, or it is a zombie waiting to be reaped.
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// A lab started by the `quorumlock` binary in a temporary directory; dropping it runs
/// `lab down`, so a failing test leaves nothing running.
struct CommandLineLab {
    dir: tempfile::TempDir,
}

impl CommandLineLab {
    fn run(&self, args: &[&str]) -> std::process::Output {
        std::process::Command::new(env!("CARGO_BIN_EXE_quorumlock"))
            .arg("--lab-dir")
            .arg(self.dir.path())
            .args(args)
            .output()
            .expect("run quorumlock")
    }

    fn ok(&self, args: &[&str]) -> String {
        let output = self.run(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{args:?} failed: {stderr}");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    fn error(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert!(!output.status.success(), "{args:?} succeeded: {output:?}");
        String::from_utf8_lossy(&output.stderr).into_owned()
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for CommandLineLab {
    fn drop(&mut self) {
        let _ = self.run(&["lab", "down"]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lab_serves_five_groups_moves_slots_and_stops() {
    let cli = CommandLineLab { dir: temp_dir() };
    let up = cli.ok(&["lab", "up", "--cluster", "--shards", "2", "--replicas", "1"]);
    assert!(
        up.contains("5 groups (each a Redis Cluster of 2 shards"),
        "{up}"
    );

    let lab = Lab::open(cli.path()).expect("attach");
    let pids = lab.pids();
    assert_eq!(pids.len(), 5 * 2 * 2);
    let written = std::fs::read_to_string(lab.config_path()).expect("quorumlock.toml");
    for group in 0..5 {
        let seeds = lab.cluster_seeds(group).expect("a cluster lab has seeds");
        assert_eq!(seeds.len(), 4, "g{}: every node is a seed", group + 1);
        let ports: Vec<u16> = seeds.iter().map(|(_, port)| *port).collect();
        let listed: Vec<String> = ports
            .iter()
            .map(|port| format!("\"127.0.0.1:{port}\""))
            .collect();
        assert!(written.contains(&listed.join(",\n    ")), "{written}");
        // Every node: ok, every slot assigned, every node known, the same slot map.
        let mut maps = Vec::new();
        for &port in &ports {
            let info = cluster_info(port).await;
            let field = |key: &str| info.get(key).cloned().unwrap_or_default();
            assert_eq!(field("cluster_state"), "ok", "port {port}: {info:?}");
            assert_eq!(field("cluster_slots_assigned"), "16384");
            assert_eq!(field("cluster_slots_ok"), "16384");
            assert_eq!(field("cluster_known_nodes"), "4");
            assert_eq!(field("cluster_size"), "2", "two primaries serve slots");
            maps.push(cluster_nodes(port).await);
        }
        assert!(maps.windows(2).all(|pair| pair[0] == pair[1]), "{maps:?}");
        let mut primaries: Vec<&String> = maps[0]
            .values()
            .filter(|(flags, _)| flags == "master")
            .map(|(_, slots)| slots)
            .collect();
        primaries.sort();
        assert_eq!(primaries, vec!["0-8191", "8192-16383"]);
    }

    // A cluster group has no single master: the shard must be named, and exist.
    assert!(cli.error(&["lab", "kill", "1"]).contains("--shard"));
    assert!(
        cli.error(&["lab", "kill", "1", "--shard", "3"])
            .contains("between 1 and 2")
    );

    // Fifty keys in slots 0..=99 of g3, served by shard s1 at first.
    let source = lab.primary_of(2, 0).await.expect("s1's primary");
    let target = lab.primary_of(2, 1).await.expect("s2's primary");
    let keys: Vec<String> = (0..)
        .map(|number| format!("key{number}"))
        .filter(|key| key_slot(key) < 100)
        .take(50)
        .collect();
    assert_eq!(
        integer(source.port, &["CLUSTER", "KEYSLOT", &keys[0]]).await,
        Some(i64::from(key_slot(&keys[0])))
    );
    for key in &keys {
        let reply = call(source.port, &["SET", key, key]).await;
        assert_eq!(reply, Some(Reply::Text("OK".into())));
    }
    let moved = cli.ok(&[
        "lab", "migrate", "3", "--slots", "0-99", "--from", "1", "--to", "2",
    ]);
    // Each slot also holds its admission marker and lock policy (the lab admits every slot).
    assert!(
        moved.contains("moved 100 slots (0-99) and 250 keys"),
        "{moved}"
    );
    for key in &keys {
        assert_eq!(
            call(target.port, &["GET", key]).await,
            Some(Reply::Text(key.clone()))
        );
        let redirected = call(source.port, &["GET", key]).await;
        assert_eq!(
            redirected,
            Some(Reply::Error(format!(
                "MOVED {} 127.0.0.1:{}",
                key_slot(key),
                target.port
            )))
        );
    }
    for slot in ["0", "50", "99"] {
        let left = integer(source.port, &["CLUSTER", "COUNTKEYSINSLOT", slot]).await;
        assert_eq!(left, Some(0), "the keys of slot {slot} left the source");
    }
    // Every node of g3 agrees on the new slot map.
    for (_, port) in lab.cluster_seeds(2).expect("seeds") {
        let map = cluster_nodes(port).await;
        let slots = |port: u16| map.get(&port).map(|(_, slots)| slots.clone());
        assert_eq!(slots(source.port).as_deref(), Some("100-8191"), "{map:?}");
        assert_eq!(
            slots(target.port).as_deref(),
            Some("0-99 8192-16383"),
            "{map:?}"
        );
    }
    // Slots a shard does not serve cannot leave it.
    let refused = cli.error(&[
        "lab", "migrate", "3", "--slots", "50-60", "--from", "1", "--to", "2",
    ]);
    assert!(refused.contains("slot 50 is not served"), "{refused}");

    let down = cli.ok(&["lab", "down"]);
    assert!(down.contains("stopped (20 processes)"), "{down}");
    let all_gone = eventually(EXIT_WITHIN, || {
        let done = pids.iter().all(|&pid| gone(pid));
        async move { done }
    })
    .await;
    let left: Vec<u32> = pids.iter().copied().filter(|&pid| !gone(pid)).collect();
    assert!(all_gone, "still running after lab down: {left:?}");
    assert!(!cli.path().join("lab.json").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_primary_gets_its_replica_promoted() {
    let dir = temp_dir();
    // A cluster fails over only while most of its primaries are alive: three shards.
    let mut lab = start_lab(LabSpec {
        groups: 2,
        sentinels: 0,
        cluster: Some(ClusterShape { shards: 3 }),
        ..LabSpec::new(dir.path())
    })
    .await;
    let status = lab.status().await;
    let replica = status
        .iter()
        .find(|node| {
            node.group == Some(1) && node.shard == Some(1) && node.kind == NodeKind::Replica
        })
        .expect("g2 s2 has a replica")
        .clone();
    let survivor = lab.primary_of(1, 0).await.expect("g2 s1's primary").port;
    let slots_before = cluster_nodes(survivor).await;

    let killed = lab.kill_primary(1, 1).await.expect("kill g2 s2's primary");
    assert_eq!((killed.group, killed.shard), (1, Some(1)));
    assert_eq!(killed.kind, NodeKind::Master);
    assert!(gone(killed.pid));
    let (_, (_, served)) = slots_before
        .iter()
        .find(|(port, _)| **port == killed.port)
        .expect("the killed primary was in the map");
    assert_eq!(served, "5461-10921");

    // The cluster's own event: the replica turns primary of the same slots, the old primary
    // is marked failed, and the state is ok again.
    let (replica_port, killed_port) = (replica.port, killed.port);
    let promoted = poll_until(FAILOVER_WITHIN, || {
        let served = served.clone();
        async move {
            let map = cluster_nodes(survivor).await;
            let (flags, slots) = map.get(&replica_port)?;
            let old_failed = map
                .get(&killed_port)
                .is_some_and(|(flags, _)| flags.contains("fail"));
            let ok = cluster_info(survivor).await.get("cluster_state").cloned();
            let done = flags == "master" && *slots == served && old_failed;
            (done && ok.as_deref() == Some("ok")).then_some(())
        }
    })
    .await;
    assert!(
        promoted.is_some(),
        "g2 s2's replica was not promoted within {FAILOVER_WITHIN:?}: {:?}",
        cluster_nodes(survivor).await
    );
    let now = lab
        .primary_of(1, 1)
        .await
        .expect("the lab finds the new primary");
    assert_eq!(now.port, replica.port);
    // The slot's lock policy came with replication; its admission marker, the old
    // primary's own, did not.
    assert_eq!(
        integer(replica.port, &["CLUSTER", "COUNTKEYSINSLOT", "5461"]).await,
        Some(1)
    );

    // The old primary comes back empty and rejoins as a replica of its successor.
    let restarted = lab.restart_shard(1, 1).await.expect("restart g2 s2");
    assert_eq!(restarted.len(), 1);
    assert_eq!(restarted[0].port, killed.port);
    let rejoined = eventually(FAILOVER_WITHIN, || async move {
        cluster_nodes(survivor)
            .await
            .get(&killed_port)
            .is_some_and(|(flags, _)| flags == "slave")
    })
    .await;
    assert!(rejoined, "{:?}", cluster_nodes(survivor).await);
    let pids = lab.pids();
    drop(lab);
    assert!(
        pids.iter().all(|&pid| gone(pid)),
        "dropping the lab stops every process"
    );
}
