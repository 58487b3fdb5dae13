//! Admission of a Cluster group, slot by slot, against a real Redis Cluster with replicas: a
//! slot whose admission fails (here: mid-migration, its marker gone) is reported, and the
//! slots after it in the same script call still replicate their raised lock policy, or a
//! replica promoted later would sit out too short a quarantine.

use crate::common;

use std::time::Duration;

use common::resp::{Reply, call, call_replica, tag_of, text};
use common::{connect, eventually, port_of, start_lab, temp_dir};
use quorumlock::AdmitOptions;
use quorumlock::lab::{ClusterShape, LabSpec, NodeKind};

/// How long a raised policy may take to reach a replica on a busy machine.
const REPLICATED_WITHIN: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_slot_does_not_stop_the_next_ones_policy() {
    let dir = temp_dir();
    let lab = start_lab(LabSpec {
        groups: 3,
        sentinels: 0,
        replicas: 1,
        cluster: Some(ClusterShape { shards: 2 }),
        ..LabSpec::new(dir.path())
    })
    .await;
    let status = lab.status().await;
    let node = |shard: usize, kind: NodeKind| port_of(&status, 0, shard, kind);
    let (primary, replica) = (node(0, NodeKind::Master), node(0, NodeKind::Replica));
    let other = node(1, NodeKind::Master);
    let other_id = text(other, &["CLUSTER", "MYID"]).await.expect("node id");

    // Slot 0 of g1's first shard loses its admission marker and starts migrating away: the
    // admission's write of its marker fails there ("non local key"), after the policy.
    let marker = format!("{{{}}}ql:admission", tag_of(0));
    assert_eq!(
        call(primary, &["DEL", &marker]).await,
        Some(Reply::Integer(1)),
        "slot 0's marker is where the engine puts it"
    );
    assert_eq!(
        call(
            primary,
            &["CLUSTER", "SETSLOT", "0", "MIGRATING", &other_id]
        )
        .await,
        Some(Reply::Text("OK".into()))
    );

    let locks = connect(lab.topology()).await;
    let admitted = locks
        .admit(&AdmitOptions {
            groups: vec!["g1".into()],
            ..AdmitOptions::new(90_000)
        })
        .await
        .expect("admit answers");
    let error = admitted[0].error.as_deref().unwrap_or_default();
    assert!(
        error.contains("non local key"),
        "slot 0 was admitted: {admitted:?}"
    );

    // Slot 1 came right after slot 0 in the same script call: its raised policy must reach
    // the replica.
    let policy = format!("{{{}}}ql:policy", tag_of(1));
    let on_primary = text(primary, &["HGET", &policy, "max_ttl_ms"]).await;
    assert_eq!(on_primary.as_deref(), Some("90000"));
    let on_replica = || {
        let policy = policy.clone();
        async move { call_replica(replica, &["HGET", &policy, "max_ttl_ms"]).await }
    };
    let replicated = eventually(REPLICATED_WITHIN, || async {
        on_replica().await == Some(Reply::Text("90000".into()))
    })
    .await;
    assert!(
        replicated,
        "slot 1's raised policy never reached the replica: {:?}",
        on_replica().await
    );
    let _ = call(primary, &["CLUSTER", "SETSLOT", "0", "STABLE"]).await;
    locks.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_at_max_lag_0_is_refused_by_name() {
    let dir = temp_dir();
    let lab = start_lab(LabSpec {
        groups: 3,
        sentinels: 0,
        replicas: 1,
        cluster: Some(ClusterShape { shards: 2 }),
        ..LabSpec::new(dir.path())
    })
    .await;
    let status = lab.status().await;
    // One primary of g1 turns min-replicas-to-write off with a lag of 0; the other keeps the
    // lab's lag, which a merge per setting took instead.
    let weak = port_of(&status, 0, 1, NodeKind::Master);
    assert_eq!(
        call(weak, &["CONFIG", "SET", "min-replicas-max-lag", "0"]).await,
        Some(Reply::Text("OK".into()))
    );
    let locks = connect(lab.topology()).await;
    let admitted = locks
        .admit(&AdmitOptions {
            groups: vec!["g1".into()],
            force: true,
            ..AdmitOptions::new(lab.spec().max_ttl_ms)
        })
        .await
        .expect("admit answers");
    let error = admitted[0].error.as_deref().unwrap_or_default();
    assert!(
        error.contains(&format!(":{weak} has replicas and min-replicas-max-lag 0")),
        "g1 was not refused naming its primary on port {weak}: {admitted:?}"
    );
    let health = locks.health().await;
    assert!(
        health.groups[0]
            .unsafe_settings
            .iter()
            .any(|s| s.contains(&format!("min-replicas-max-lag is 0 on 127.0.0.1:{weak}"))),
        "{:?}",
        health.groups[0]
    );
    locks.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_adopts_a_policy_outside_acknowledged_mode() {
    // adopt.lua as the engine runs it, answering the first field of its reply only: this
    // test's RESP reads no arrays.
    const ADOPT: &str = concat!(
        "local function adopt()\n",
        include_str!("../../lua/info.lua"),
        include_str!("../../lua/policy_fields.lua"),
        include_str!("../../lua/adopt.lua"),
        "end\nreturn adopt()[1]\n"
    );
    let dir = temp_dir();
    let lab = start_lab(LabSpec {
        groups: 1,
        sentinels: 0,
        replicas: 0,
        cluster: Some(ClusterShape { shards: 1 }),
        ..LabSpec::new(dir.path())
    })
    .await;
    let status = lab.status().await;
    let primary = port_of(&status, 0, 0, NodeKind::Master);
    // Slot 0 lost its policy, and the other groups' policy is in acknowledged mode, which a
    // Cluster group has no way to honour: WAIT there cannot tell which replicas a slot's
    // promotion may pick. The slot adopts the policy without the mode.
    let (marker, policy) = (
        format!("{{{}}}ql:admission", tag_of(0)),
        format!("{{{}}}ql:policy", tag_of(0)),
    );
    assert_eq!(
        call(primary, &["DEL", &policy]).await,
        Some(Reply::Integer(1)),
        "slot 0's policy is where the engine puts it"
    );
    let adopted = call(
        primary,
        &["EVAL", ADOPT, "2", &marker, &policy, "60000", "3000", "1"],
    )
    .await;
    assert_eq!(adopted, Some(Reply::Integer(1)), "slot 0 adopts the policy");
    assert_eq!(
        text(primary, &["HGET", &policy, "acked_replicas"])
            .await
            .as_deref(),
        Some("0"),
        "a Cluster slot adopted acknowledged mode"
    );
    assert_eq!(
        text(primary, &["HGET", &policy, "max_ttl_ms"])
            .await
            .as_deref(),
        Some("60000")
    );
}
