//! Cluster groups against real Redis Clusters on loopback: every group of the lab is a
//! cluster of plain redis-servers, and the engine reaches them through its own slot map. A
//! lock there is granted, renewed, released and fenced as on Sentinel groups; every key of a
//! resource lives in the slot of its whole name; a set is refused; a replica the cluster
//! promotes sits out the vote, and the engine follows the new map without waiting for a
//! call to time out. Releases are announced by sharded pub/sub: a waiter is woken by the
//! release, not by its next poll, before and after a failover inside a group.

use crate::common;

use std::time::{Duration, Instant};

use common::resp::{Reply, array, call, key_slot, migrate_keys, start_slot_move, text};
use common::{connect, eventually, port_of, start_lab, temp_dir};
use quorumlock::lab::{ClusterShape, Lab, LabSpec, NodeKind};
use quorumlock::{Error, GroupVote, Lease, Locks, Topology, Vote};
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
    topology: Topology,
    /// How long a promoted replica sits out: the longest TTL and the write window.
    quarantine_ms: u64,
    _dir: TempDir,
}

async fn cluster_lab(groups: usize, shards: usize, replicas: usize) -> ClusterLab {
    tuned_cluster_lab(groups, shards, replicas, |topology| topology).await
}

/// [`cluster_lab`] with the client's topology tuned by `tune`.
async fn tuned_cluster_lab(
    groups: usize,
    shards: usize,
    replicas: usize,
    tune: impl FnOnce(Topology) -> Topology,
) -> ClusterLab {
    let dir = temp_dir();
    let spec = LabSpec {
        groups,
        sentinels: 0,
        replicas,
        cluster: Some(ClusterShape { shards }),
        ..LabSpec::new(dir.path())
    };
    let policy = spec.policy();
    let lab = start_lab(spec).await;
    let topology = tune(lab.topology());
    let locks = connect(topology.clone()).await;
    ClusterLab {
        lab,
        locks,
        topology,
        quarantine_ms: policy.max_ttl_ms + policy.write_window_ms,
        _dir: dir,
    }
}

/// Checks that `group` did not grant: it refused as quarantined, or was not waited for.
fn assert_sits_out(votes: &[GroupVote], group: &str) {
    assert!(
        matches!(
            vote_of(votes, group),
            Vote::Quarantined { .. } | Vote::NotAwaited
        ),
        "{votes:?}"
    );
}

fn vote_of(votes: &[GroupVote], group: &str) -> Vote {
    votes
        .iter()
        .find(|v| v.group == group)
        .map(|v| v.vote.clone())
        .unwrap_or(Vote::NotAwaited)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_is_granted_renewed_released_and_fenced() {
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
async fn a_resources_keys_live_in_its_whole_names_slot() {
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
        let scan = ["SCAN", &cursor, "MATCH", pattern, "COUNT", "1000"];
        // `*2 $cursor *n $key...`, flattened: the cursor, then the keys.
        let Some(page) = array(port, &scan).await else {
            return found;
        };
        let Some((next, keys)) = page.split_first() else {
            return found;
        };
        found.extend_from_slice(keys);
        cursor = next.clone();
        if cursor == "0" {
            return found;
        }
    }
}

/// How many script calls (`EVALSHA`) the node at `port` has run.
async fn script_calls(port: u16) -> u64 {
    let stats = text(port, &["INFO", "commandstats"])
        .await
        .unwrap_or_default();
    stats
        .lines()
        .find_map(|line| line.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|calls| calls.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_batches_many_slots_in_one_script_call() {
    let fx = tuned_cluster_lab(3, 1, 0, patient).await;
    let primaries = primaries(&fx.lab, 0).await;
    let [primary] = primaries[..] else {
        panic!("one primary per group: {primaries:?}");
    };
    let names: Vec<String> = (0..64).map(|n| format!("batch:{n}")).collect();
    let slots: std::collections::BTreeSet<u16> = names.iter().map(|n| key_slot(n)).collect();
    assert!(
        slots.len() > 60,
        "the names spread over slots: {}",
        slots.len()
    );

    // All at once: the first call finds the lane idle, the others queue behind it.
    let before = script_calls(primary).await;
    let leases = acquire_at_once(&fx.locks, &names).await;
    let sent = script_calls(primary).await - before;
    let leases: Vec<_> = leases
        .into_iter()
        .zip(&names)
        .map(|(lease, name)| lease.unwrap_or_else(|error| panic!("{name}: {error}")))
        .collect();
    assert!(
        sent <= 16,
        "64 grants of {} slots took {sent} script calls on one primary",
        slots.len()
    );
    let status = fx.locks.status("batch:7").await.expect("status");
    assert!(status.holder.is_some(), "{status:?}");

    let before = script_calls(primary).await;
    let released = futures::future::join_all(leases.into_iter().map(|lease| lease.release())).await;
    let sent = script_calls(primary).await - before;
    for (release, name) in released.into_iter().zip(&names) {
        release.unwrap_or_else(|error| panic!("{name}: {error}"));
    }
    assert!(
        sent <= 16,
        "64 releases took {sent} script calls on one primary"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_checks_each_slots_admission() {
    let fx = tuned_cluster_lab(3, 1, 0, patient).await;
    let [primary] = primaries(&fx.lab, 0).await[..] else {
        panic!("one primary per group");
    };
    // g1 holds the slot of `batch:40` out of the vote; its other slots stay admitted.
    let quarantined = key_slot("batch:40");
    let marker = keys(primary, "*ql:admission")
        .await
        .into_iter()
        .find(|key| tag_slot(key) == Some(quarantined))
        .expect("an admission marker in every slot");
    let far_future = "99999999999999";
    assert_eq!(
        call(primary, &["HSET", &marker, "vote_from", far_future]).await,
        Some(Reply::Integer(0))
    );

    let names: Vec<String> = (0..64).map(|n| format!("batch:{n}")).collect();
    let before = script_calls(primary).await;
    let leases = acquire_at_once(&fx.locks, &names).await;
    // The calls went out together; g1 grants `batch:41` and never `batch:40`.
    let lock_on_g1 = |name: &str| {
        let pattern = format!("*ql:{{{name}}}:lock");
        async move { !keys(primary, &pattern).await.is_empty() }
    };
    assert!(eventually(10 * FOLLOWS_WITHIN, || lock_on_g1("batch:41")).await);
    assert!(!lock_on_g1("batch:40").await, "a quarantined slot granted");
    let sent = script_calls(primary).await - before;
    assert!(
        sent <= 16,
        "64 grants took {sent} script calls: not batched"
    );
    for (lease, name) in leases.into_iter().zip(&names) {
        let lease = lease.unwrap_or_else(|error| panic!("{name}: {error}"));
        if name == "batch:40" {
            assert_sits_out(lease.votes(), "g1");
        }
        lease.release().await.expect("released");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_mid_migration_writes_on_neither_side() {
    let fx = tuned_cluster_lab(3, 2, 0, patient).await;
    let status = fx.lab.status().await;
    let primary_of = |shard: usize| port_of(&status, 0, shard, NodeKind::Master);
    let names: Vec<String> = (0..64).map(|n| format!("moving:{n}")).collect();
    let mut on_source = Vec::new();
    for name in &names {
        let shard = fx
            .lab
            .shard_serving(0, key_slot(name))
            .await
            .expect("served");
        if shard == 0 {
            on_source.push(name.clone());
        }
    }
    // The last of g1's first shard moves; the one before it shows when the batch ran.
    let [.., witness, moving] = &on_source[..] else {
        panic!("too few names on one shard: {on_source:?}");
    };
    let (source, target) = (primary_of(0), primary_of(1));
    let holder = fx
        .locks
        .acquire(moving)
        .ttl(30_000 * MS)
        .await
        .expect("granted before the move");

    // Its slot starts moving, and its lock key (only) reaches the target first.
    start_slot_move(source, target, key_slot(moving)).await;
    let lock_pattern = format!("*ql:{{{moving}}}:lock");
    let [lock] = &keys(source, &lock_pattern).await[..] else {
        panic!("the lock of {moving} is on the source");
    };
    migrate_keys(source, target, &[lock]).await;
    let fence = lock.replace(":lock", ":fence");
    let fence_before = text(source, &["GET", &fence]).await;
    assert!(fence_before.is_some(), "the fence stays on the source");

    // Everything at once, the moving resource last: its call to g1 goes out in a batch.
    let before = script_calls(source).await;
    let attempts = acquire_at_once(&fx.locks, &names).await;
    let witness_pattern = format!("*ql:{{{witness}}}:lock");
    let ran = eventually(FOLLOWS_WITHIN, || {
        let pattern = witness_pattern.clone();
        async move { !keys(source, &pattern).await.is_empty() }
    })
    .await;
    assert!(ran, "the batch never reached the source");
    let sent = script_calls(source).await - before;
    assert!(
        sent < on_source.len() as u64 / 2,
        "{} grants took {sent} script calls on the source: not batched",
        on_source.len()
    );
    // The source has the fence but not the lock: it never reads the lock as free.
    assert!(
        keys(source, &lock_pattern).await.is_empty(),
        "granted on the source"
    );
    assert_eq!(text(source, &["GET", &fence]).await, fence_before);
    let on_target = text_asking(target, lock).await.unwrap_or_default();
    assert!(
        on_target.starts_with(holder.token()),
        "the moved lock changed: {on_target:?}"
    );
    for (attempt, name) in attempts.into_iter().zip(&names) {
        match attempt {
            Ok(lease) if name != moving => {
                lease.release().await.expect("released");
            }
            Err(Error::Held { .. }) if name == moving => {}
            other => panic!("{name}: {other:?}"),
        }
    }
}

/// The string at `key` on a node importing its slot.
async fn text_asking(port: u16, key: &str) -> Option<String> {
    match common::resp::call_asking(port, &["GET", key]).await? {
        Reply::Text(text) => Some(text),
        _ => None,
    }
}

/// The slot of a key that starts with a `{T}` slot tag.
fn tag_slot(key: &str) -> Option<u16> {
    let tag = key.strip_prefix('{')?.split_once('}')?.0;
    Some(key_slot(tag))
}

/// One field of `INFO <section>` on the node at `port`, as a number (`prefix` is what comes
/// before it on its line, `field=` or `field:`).
async fn info_number(port: u16, section: &str, prefix: &str) -> u64 {
    let text = text(port, &["INFO", section]).await.unwrap_or_default();
    text.lines()
        .find_map(|line| line.strip_prefix(prefix))
        .and_then(|rest| rest.split([',', '\r']).next())
        .and_then(|number| number.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_slot_map_is_reread_over_existing_clients() {
    let fx = cluster_lab(3, 1, 0).await;
    let [primary] = primaries(&fx.lab, 0).await[..] else {
        panic!("one primary per group");
    };
    let map_reads = || info_number(primary, "commandstats", "cmdstat_cluster|slots:calls=");
    let connections = || info_number(primary, "stats", "total_connections_received:");
    // Each read of a number here is a connection of its own: counted, and taken off.
    let connected_before = connections().await;
    let reads_before = map_reads().await;
    let mut own = 2;
    let mut reads = reads_before;
    while reads < reads_before + 3 {
        tokio::time::sleep(100 * MS).await;
        reads = map_reads().await;
        own += 1;
    }
    let connected = connections().await - connected_before;
    assert!(
        connected < own + 3,
        "{} map reads opened {} connections",
        reads - reads_before,
        connected - own
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_is_refused_naming_the_field() {
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
async fn a_promoted_replica_sits_out_and_the_map_follows() {
    let fx = cluster_lab(3, 1, 1).await;
    let status = fx.lab.status().await;
    let (old, replica) = (
        port_of(&status, 0, 0, NodeKind::Master),
        port_of(&status, 0, 0, NodeKind::Replica),
    );
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
    // Until the old primary hears of the takeover it still takes writes: the write window,
    // which the new primary's quarantine covers. Once it knows, it redirects its slots to
    // the new primary; the engine reads the map again on that answer and asks the new
    // primary, which has a history no vote has met.
    assert!(
        eventually(FOLLOWS_WITHIN, || async {
            text(old, &["INFO", "replication"])
                .await
                .is_some_and(|info| info.contains("role:slave"))
        })
        .await,
        "the old primary never heard of the takeover"
    );
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
    assert!(quarantined <= fx.quarantine_ms, "{quarantined}");
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

/// Retries 10 s apart: only a release announcement can wake a waiter sooner.
/// A call timeout that 64 calls at once meet on two busy cores: the tests of batches need
/// every call answered, not a bound on how fast.
fn patient(mut topology: Topology) -> Topology {
    topology.call_timeout_ms = 2_000;
    topology
}

fn slow_retries(mut topology: Topology) -> Topology {
    topology.retry_delay_ms = 10_000;
    topology
}

/// Well under the 10 s between a waiter's tries, with room for two busy cores.
const WOKEN_WITHIN: Duration = Duration::from_secs(3);

/// A 10 s lease on each of `names`, all asked for at once, so the calls to each primary
/// after the first queue behind it and go out as a batch.
async fn acquire_at_once(locks: &Locks, names: &[String]) -> Vec<Result<Lease, Error>> {
    futures::future::join_all(
        names
            .iter()
            .map(|name| locks.acquire(name).ttl(10_000 * MS).into_future()),
    )
    .await
}

/// The ports of `group`'s primaries, as the lab started them or as they are now.
async fn primaries(lab: &Lab, group: usize) -> Vec<u16> {
    lab.status()
        .await
        .iter()
        .filter(|node| node.group == Some(group) && node.kind == NodeKind::Master)
        .map(|node| node.port)
        .collect()
}

/// How many clients of the node at `port` subscribe (SSUBSCRIBE) to the release channel of
/// `resource`, whatever slot tag the channel carries.
async fn shard_subscribers(port: u16, resource: &str) -> i64 {
    let pattern = format!("*ql:{{{resource}}}:released");
    let Some(channels) = array(port, &["PUBSUB", "SHARDCHANNELS", &pattern]).await else {
        return 0;
    };
    let mut count = 0;
    for channel in channels {
        if let Some(counts) = array(port, &["PUBSUB", "SHARDNUMSUB", &channel]).await {
            count += counts
                .get(1)
                .and_then(|n| n.parse::<i64>().ok())
                .unwrap_or(0);
        }
    }
    count
}

/// Whether some client subscribes to `resource`'s release channel on a primary of each group.
async fn subscribed_in_every_group(lab: &Lab, groups: usize, resource: &str) -> bool {
    for group in 0..groups {
        let mut subscribers = 0;
        for port in primaries(lab, group).await {
            subscribers += shard_subscribers(port, resource).await;
        }
        if subscribers == 0 {
            return false;
        }
    }
    true
}

/// A waiter on Cluster groups is woken by the release: retries are 10 s apart, so only the
/// announcement (SPUBLISH in the resource's slot, heard by the waiter's SSUBSCRIBE on that
/// slot's primary) can give it the lock sooner. The same holds for a force release. With
/// the announcements off, each waiter would get the lock at its next try, 10 s on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_wakes_at_the_release_not_its_next_poll() {
    let fx = tuned_cluster_lab(3, 2, 0, slow_retries).await;
    // The holder is another client: its release reaches the waiter only through the groups.
    let other = connect(fx.topology.clone()).await;
    let holder = other
        .acquire("wake")
        .ttl(Duration::from_secs(30))
        .await
        .expect("holder");
    let lease = woken_by(&fx, &fx.locks, "the release", || async {
        holder.release().await.expect("release");
    })
    .await;

    // Once the first waiter's subscriptions are gone, a waiter in the other client waits for
    // the lock it holds; a force release wakes it.
    assert!(
        eventually(Duration::from_secs(5), || async {
            let mut subscribers = 0;
            for group in 0..3 {
                for port in primaries(&fx.lab, group).await {
                    subscribers += shard_subscribers(port, "wake").await;
                }
            }
            subscribers == 0
        })
        .await,
        "the woken waiter did not unsubscribe"
    );
    let taken = woken_by(&fx, &other, "the force release", || async {
        let forced = fx.locks.force_release("wake").await.expect("force release");
        assert!(forced.released);
    })
    .await;
    taken.release().await.expect("released");
    drop(lease);
    other.close().await;
}

/// Starts a waiter for `wake` in `waiter`, waits until it subscribed in every group, runs
/// `release`, and returns the waiter's lease once it checked that `release` woke it.
async fn woken_by<F: std::future::Future<Output = ()>>(
    fx: &ClusterLab,
    waiter: &Locks,
    what: &str,
    release: impl FnOnce() -> F,
) -> Lease {
    let waiting = {
        let waiter = waiter.clone();
        tokio::spawn(async move { waiter.acquire("wake").wait(Duration::from_secs(25)).await })
    };
    assert!(
        eventually(Duration::from_secs(5), || subscribed_in_every_group(
            &fx.lab, 3, "wake"
        ))
        .await,
        "the waiter before {what} never subscribed on the primaries of the slot"
    );
    let released_at = Instant::now();
    release().await;
    let lease = waiting
        .await
        .expect("task")
        .expect("the waiter gets the lock");
    let woke_after = lease.acquired_at().saturating_duration_since(released_at);
    assert!(
        woke_after < WOKEN_WITHIN,
        "woke {woke_after:?} after {what}, at attempt {}: it polled",
        lease.attempts()
    );
    lease
}

/// After `CLUSTER FAILOVER TAKEOVER` in g1, a waiter that subscribed before the failover is
/// still woken by a release announced in g1 alone. Redis drops a shard subscription when its
/// primary is demoted, so this proves the engine subscribed again on the new primary once its
/// slot map changed: the test sees the subscription appear there, and then makes g1's
/// announcement the only one (the lock is taken off g2 and g3 behind the clients' backs), so
/// nothing else could wake the waiter before its next try, 25 s on. The waiter is then
/// granted by g2 and g3, while g1's new primary sits out its quarantine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_wakes_at_a_release_after_a_failover() {
    let fx = tuned_cluster_lab(3, 1, 1, slow_retries).await;
    let status = fx.lab.status().await;
    let node = |group: usize, kind: NodeKind| port_of(&status, group, 0, kind);
    let (old, replica) = (node(0, NodeKind::Master), node(0, NodeKind::Replica));
    let other = connect(fx.topology.clone()).await;
    let holder = other
        .acquire("promoted")
        .ttl(Duration::from_secs(30))
        .await
        .expect("holder");
    let waiter = {
        let locks = fx.locks.clone();
        tokio::spawn(async move {
            locks
                .acquire("promoted")
                .wait(Duration::from_secs(25))
                .await
        })
    };
    assert!(
        eventually(Duration::from_secs(5), || subscribed_in_every_group(
            &fx.lab, 3, "promoted"
        ))
        .await,
        "the waiter never subscribed"
    );
    assert!(shard_subscribers(old, "promoted").await > 0);
    // The replica has the holder's lock before it takes over, so the release finds it there.
    assert!(
        eventually(Duration::from_secs(5), || replicated(old)).await,
        "g1's replica never caught up"
    );
    assert_eq!(
        call(replica, &["CLUSTER", "FAILOVER", "TAKEOVER"]).await,
        Some(Reply::Text("OK".into()))
    );
    assert!(
        eventually(FOLLOWS_WITHIN, || async {
            shard_subscribers(replica, "promoted").await > 0
        })
        .await,
        "the waiter never subscribed again on g1's new primary"
    );
    // The holder's client follows the new map too, so its release reaches the new primary.
    let new_primary = format!("127.0.0.1:{replica}");
    assert!(
        eventually(FOLLOWS_WITHIN, || async {
            other.health().await.groups[0].master.as_deref() == Some(new_primary.as_str())
        })
        .await,
        "the holder's client never followed g1's new primary"
    );
    // g2 and g3 lose the lock as a release deletes it, entry in the slot's ledger and all: a
    // lock key deleted alone looks lost to the slot, which then sits out (lua/admission.lua).
    for group in [1, 2] {
        let port = node(group, NodeKind::Master);
        for key in keys(port, "*ql:{promoted}:lock").await {
            let tag = key.split('}').next().unwrap_or_default();
            let marker = format!("{tag}}}ql:admission");
            let entry = format!("l:{key}");
            assert_eq!(
                call(port, &["HDEL", &marker, &entry]).await,
                Some(Reply::Integer(1))
            );
            assert_eq!(call(port, &["DEL", &key]).await, Some(Reply::Integer(1)));
        }
    }
    let released_at = Instant::now();
    let released = holder.release().await.expect("release");
    assert_eq!(
        released.groups_released, 1,
        "only g1 held it: {:?}",
        released.votes
    );
    let lease = waiter
        .await
        .expect("task")
        .expect("the waiter gets the lock");
    let woke_after = lease.acquired_at().saturating_duration_since(released_at);
    assert!(
        woke_after < WOKEN_WITHIN,
        "woke {woke_after:?} after the release: g1's announcement did not reach it"
    );
    // g1's new primary sits out its quarantine: refused, or not waited for.
    assert_sits_out(lease.votes(), "g1");
    lease.release().await.expect("released");
    other.close().await;
}

/// Whether every replica of the primary at `port` has all of its writes.
async fn replicated(port: u16) -> bool {
    let Some(info) = text(port, &["INFO", "replication"]).await else {
        return false;
    };
    let field = |line: &str, name: &str| {
        line.split(',')
            .find_map(|pair| pair.split(':').next_back()?.strip_prefix(name))
            .map(str::to_string)
    };
    let offset = info
        .lines()
        .find_map(|line| line.trim().strip_prefix("master_repl_offset:"))
        .map(str::to_string);
    let replicas: Vec<Option<String>> = info
        .lines()
        .filter(|line| line.starts_with("slave"))
        .map(|line| field(line, "offset="))
        .collect();
    !replicas.is_empty() && offset.is_some() && replicas.iter().all(|seen| *seen == offset)
}
