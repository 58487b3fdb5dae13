//! Cluster groups against real Redis Clusters on loopback: every group of the lab is a
//! cluster of plain redis-servers, and the engine reaches them through its own slot map. A
//! lock there is granted, renewed, released and fenced as on Sentinel groups; every key of a
//! resource lives in the slot of its whole name; a set is refused; a replica the cluster
//! promotes sits out the vote, and the engine follows the new map without waiting for a
//! call to time out.

mod common;

use std::time::{Duration, Instant};

use common::resp::{Reply, call, key_slot};
use common::{connect, start_lab, temp_dir};
use quorumlock::lab::{ClusterShape, Lab, LabSpec, NodeKind};
use quorumlock::{Error, GroupVote, Locks, Vote};
use tempfile::TempDir;

const MS: Duration = Duration::from_millis(1);
/// How long a promoted replica may take to answer from the engine's new map: a map read
/// (at once after MOVED, or the one every second), with room for two busy cores.
const FOLLOWS_WITHIN: Duration = Duration::from_secs(10);

/// A cluster lab and a client of it. The lab is declared first: its processes are stopped
/// (by PID, on drop) before their directory is removed.
struct ClusterLab {
    lab: Lab,
    locks: Locks,
    _dir: TempDir,
}

async fn cluster_lab(groups: usize, shards: usize, replicas: usize) -> ClusterLab {
    let dir = temp_dir();
    let lab = start_lab(LabSpec {
        groups,
        sentinels: 0,
        replicas,
        cluster: Some(ClusterShape { shards }),
        ..LabSpec::new(dir.path())
    })
    .await;
    let locks = connect(lab.topology()).await;
    ClusterLab {
        lab,
        locks,
        _dir: dir,
    }
}

fn vote_of(votes: &[GroupVote], group: &str) -> Vote {
    votes
        .iter()
        .find(|v| v.group == group)
        .map(|v| v.vote.clone())
        .unwrap_or(Vote::NotAwaited)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_on_cluster_groups_is_granted_renewed_released_and_fenced() {
    let fx = cluster_lab(3, 2, 0).await;
    let mut first = fx
        .locks
        .acquire("jobs:}nightly")
        .ttl(5_000 * MS)
        .await
        .expect("granted on a majority of Cluster groups");
    assert!(
        first
            .votes()
            .iter()
            .all(|v| v.vote == Vote::Granted || v.vote == Vote::NotAwaited),
        "{:?}",
        first.votes()
    );
    match fx.locks.acquire("jobs:}nightly").ttl(5_000 * MS).await {
        Err(Error::Held { .. }) => {}
        other => panic!("a held lock was granted again: {other:?}"),
    }
    first.extend(5_000 * MS).await.expect("renewed");
    let fence = first.fencing_token();
    first.release().await.expect("released");
    let second = fx
        .locks
        .acquire("jobs:}nightly")
        .ttl(5_000 * MS)
        .await
        .expect("free again after release");
    assert!(second.fencing_token() > fence);
    second.release().await.expect("released");

    // A semaphore's permits live in its name's slot too.
    let permit = fx
        .locks
        .acquire_permit("{pool}", 2)
        .ttl(5_000 * MS)
        .await
        .expect("a permit");
    let status = fx.locks.semaphore_status("{pool}").await.expect("status");
    assert_eq!(status.holders.len(), 1, "{status:?}");
    permit.release().await.expect("released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_of_a_resource_lives_in_the_slot_of_its_whole_name() {
    let fx = cluster_lab(3, 2, 0).await;
    let primaries: Vec<u16> = fx
        .lab
        .status()
        .await
        .iter()
        .filter(|node| node.group == Some(0) && node.kind == NodeKind::Master)
        .map(|node| node.port)
        .collect();
    assert_eq!(primaries.len(), 2);
    // Names whose own braces would give Redis an empty hash tag, or one that is not theirs.
    let names = ["}x", "{", "{}", "a{b}c", "{b}1", "{b}2", "plain"];
    let mut slots = Vec::new();
    for name in names {
        let lease = fx
            .locks
            .acquire(name)
            .ttl(10_000 * MS)
            .await
            .unwrap_or_else(|error| panic!("{name}: {error}"));
        // g1's lock key, wherever it is: on exactly one primary, in the name's own slot.
        let mut found = Vec::new();
        for port in &primaries {
            let pattern = format!("*ql:{{{name}}}:lock");
            for key in keys(*port, &pattern).await {
                found.push((*port, key));
            }
        }
        assert_eq!(found.len(), 1, "{name}: {found:?}");
        let (port, lock) = &found[0];
        let slot = key_slot(name);
        let fence = lock.replace(":lock", ":fence");
        for key in [lock.as_str(), fence.as_str()] {
            let keyslot = match call(*port, &["CLUSTER", "KEYSLOT", key]).await {
                Some(Reply::Integer(slot)) => slot,
                other => panic!("KEYSLOT {key}: {other:?}"),
            };
            assert_eq!(keyslot, i64::from(slot), "{name}: {key}");
        }
        assert_eq!(
            call(*port, &["EXISTS", &fence]).await,
            Some(Reply::Integer(1)),
            "{name}: its fence is beside its lock"
        );
        slots.push(slot);
        lease.release().await.expect("released");
    }
    // Two names that share a brace tag keep slots of their own.
    assert_ne!(slots[4], slots[5]);
}

/// Every key matching `pattern` on the node at `port`, SCAN page by page.
async fn keys(port: u16, pattern: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut cursor = "0".to_string();
    loop {
        let Some(page) = scan(port, &cursor, pattern).await else {
            return found;
        };
        found.extend(page.1);
        cursor = page.0;
        if cursor == "0" {
            return found;
        }
    }
}

/// One SCAN page: the next cursor and the keys, read from the raw reply.
async fn scan(port: u16, cursor: &str, pattern: &str) -> Option<(String, Vec<String>)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let args = ["SCAN", cursor, "MATCH", pattern, "COUNT", "1000"];
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let mut request = format!("*{}\r\n", args.len());
    for arg in args {
        request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(page) = parse_scan(&buffer) {
            return Some(page);
        }
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..read]);
    }
}

/// `*2 $cursor *n $key...`, once all of it arrived.
fn parse_scan(buffer: &[u8]) -> Option<(String, Vec<String>)> {
    let mut lines = Vec::new();
    let mut at = 0;
    while let Some(end) = buffer[at..].windows(2).position(|pair| pair == b"\r\n") {
        lines.push(String::from_utf8_lossy(&buffer[at..at + end]).into_owned());
        at += end + 2;
    }
    // *2, $len, cursor, *n, then $len and key for each.
    let count: usize = lines.get(3)?.strip_prefix('*')?.parse().ok()?;
    if lines.len() < 4 + 2 * count {
        return None;
    }
    let keys = (0..count).map(|i| lines[5 + 2 * i].clone()).collect();
    Some((lines[2].clone(), keys))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_of_several_resources_is_refused_on_cluster_groups_naming_the_field() {
    let fx = cluster_lab(3, 1, 0).await;
    match fx.locks.acquire_all(&["a", "b"]).ttl(5_000 * MS).await {
        Err(Error::InvalidInput { field, reason }) => {
            assert_eq!(field, "resources");
            assert!(reason.contains("Redis Cluster"), "{reason}");
        }
        other => panic!("a set was not refused: {other:?}"),
    }
    // A set of one is one resource.
    let one = fx
        .locks
        .acquire_all(&["a"])
        .ttl(5_000 * MS)
        .await
        .expect("a set of one");
    one.release().await.expect("released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_the_cluster_promotes_sits_out_the_vote_and_the_engine_follows_the_new_map() {
    let fx = cluster_lab(3, 1, 1).await;
    let status = fx.lab.status().await;
    let node = |kind: NodeKind| {
        status
            .iter()
            .find(|node| node.group == Some(0) && node.kind == kind)
            .map(|node| node.port)
            .expect("g1 has a primary and a replica")
    };
    let (old, replica) = (node(NodeKind::Master), node(NodeKind::Replica));
    let lease = fx
        .locks
        .acquire("before")
        .ttl(2_000 * MS)
        .await
        .expect("granted before the failover");
    lease.release().await.expect("released");

    // The replica takes the slots over on its own: no agreement needed, so one shard will do.
    assert_eq!(
        call(replica, &["CLUSTER", "FAILOVER", "TAKEOVER"]).await,
        Some(Reply::Text("OK".into()))
    );
    let switched = Instant::now();
    // The old primary redirects its slots to the new one; the engine reads the map again on
    // that answer and asks the new primary, which has a history no vote has met.
    let quarantined = loop {
        let votes = match fx.locks.acquire("after").ttl(500 * MS).await {
            Ok(lease) => {
                let votes = lease.votes().to_vec();
                lease.release().await.expect("released");
                votes
            }
            Err(error) => error.votes().to_vec(),
        };
        match vote_of(&votes, "g1") {
            Vote::Quarantined { remaining_ms } => break remaining_ms,
            Vote::Granted => panic!("a freshly promoted replica voted"),
            other => assert!(
                switched.elapsed() < FOLLOWS_WITHIN,
                "g1 never answered from its new primary: {other:?}"
            ),
        }
    };
    assert!(quarantined <= 60_000, "{quarantined}");
    eprintln!(
        "g1 answered from its new primary {:?} after the takeover",
        switched.elapsed()
    );
    // Health reads one slot of each primary: quarantined, or not yet asked to vote (its
    // first vote starts the quarantine), never voting.
    let health = fx.locks.health().await;
    let g1 = &health.groups[0];
    assert!(
        matches!(
            g1.admission,
            quorumlock::Admission::Quarantined { .. } | quorumlock::Admission::Unadmitted
        ),
        "{g1:?}"
    );
    assert_eq!(
        g1.master.as_deref(),
        Some(format!("127.0.0.1:{replica}").as_str())
    );
    assert_ne!(replica, old);
}
