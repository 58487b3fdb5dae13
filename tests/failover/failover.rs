//! Failover safety against real Sentinels: a promoted replica or a master restarted without
//! its data sits out the vote for its policy's quarantine, and Sentinel's `+switch-master`
//! moves a group to its new master at once.

use crate::common;

use std::time::{Duration, Instant};

use common::{eventually, fixture, lock_key, plain, sentinel_lab};
use quorumlock::lab::LabSpec;
use quorumlock::{AdmitOptions, Error, Locks, Vote};

const MS: Duration = Duration::from_millis(1);

fn vote_of(votes: &[quorumlock::GroupVote], group: &str) -> Vote {
    votes
        .iter()
        .find(|v| v.group == group)
        .map(|v| v.vote.clone())
        .unwrap_or(Vote::NotAwaited)
}

/// The votes of one attempt, whether it succeeded or not.
async fn attempt_votes(locks: &Locks, resource: &str) -> Vec<quorumlock::GroupVote> {
    match locks.acquire(resource).ttl(500 * MS).await {
        Ok(lease) => {
            let votes = lease.votes().to_vec();
            lease.release().await.expect("release");
            votes
        }
        Err(error) => error.votes().to_vec(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_replica_sits_out_and_the_group_moves() {
    let mut fx = sentinel_lab().await;
    let mut failovers = fx.locks.failovers();
    let killed = fx.lab.kill(0).await.expect("kill");
    let failover = tokio::time::timeout(Duration::from_secs(15), failovers.recv())
        .await
        .expect("Sentinel announces the switch")
        .expect("event");
    assert_eq!(failover.group, "g1");
    assert_ne!(failover.master, format!("127.0.0.1:{}", killed.port));

    // The group answers again from the promoted replica. With min-replicas-to-write it
    // refuses writes until it has a replica of its own.
    let deadline = Instant::now() + Duration::from_secs(5);
    let answered_at = loop {
        let votes = attempt_votes(&fx.locks, "after-switch").await;
        match vote_of(&votes, "g1") {
            Vote::Error { message } if message.contains("NOREPLICAS") => break Instant::now(),
            Vote::Granted => panic!("a freshly promoted replica voted"),
            other => assert!(
                Instant::now() < deadline,
                "g1 never answered from its new master: {other:?}"
            ),
        }
    };
    eprintln!(
        "g1 answered from its new master {:?} after +switch-master (reconnect took {:?})",
        answered_at - failover.announced_at,
        failover.reconnected_at - failover.announced_at
    );
    // The old master comes back, empty, as its replica. The new master must not vote yet
    // then either: it may have missed the last grants of the dead master.
    fx.lab.restart(0).await.expect("restart the old master");
    fx.lab.rejoin(0).await.expect("the old master replicates");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let votes = attempt_votes(&fx.locks, "after-rejoin").await;
        match vote_of(&votes, "g1") {
            Vote::Quarantined { remaining_ms } => {
                assert!(remaining_ms <= fx.lab.spec().policy().quarantine_ms());
                break;
            }
            Vote::Granted => panic!("a freshly promoted replica voted"),
            other => assert!(
                Instant::now() < deadline,
                "g1 never sat out its quarantine: {other:?}"
            ),
        }
    }

    let health = fx.locks.health().await;
    let g1 = &health.groups[0];
    assert!(
        matches!(g1.admission, quorumlock::Admission::Quarantined { .. }),
        "{g1:?}"
    );
    assert_eq!(health.voting, 4);
    assert_ne!(
        g1.master.as_deref(),
        Some(format!("127.0.0.1:{}", killed.port).as_str())
    );

    // A client that starts after the failover reads the quarantine from the server itself.
    let late = fx.client().await;
    // The vote may be decided before g1 answers; ask until it does.
    let mut late_vote = Vote::NotAwaited;
    for _ in 0..20 {
        late_vote = vote_of(&attempt_votes(&late, "late-client").await, "g1");
        if late_vote != Vote::NotAwaited {
            break;
        }
    }
    assert!(
        matches!(late_vote, Vote::Quarantined { .. }),
        "{late_vote:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_emptied_master_rejoins_without_a_double_grant() {
    let mut fx = fixture(
        |spec| LabSpec {
            max_ttl_ms: 2_000,
            ..plain(spec)
        },
        |topology| topology,
    )
    .await;
    let holder = fx
        .locks
        .acquire("precious")
        .ttl(1_500 * MS)
        .await
        .expect("holder");
    // The vote was decided at the third grant; wait until the last two land too, so the
    // restarts below take the holder's grant away from a majority.
    let everywhere = eventually(Duration::from_secs(2), || async {
        fx.values_of(&lock_key("precious"))
            .await
            .iter()
            .all(Option::is_some)
    })
    .await;
    assert!(everywhere, "the holder's grant never reached every group");

    // A majority of masters comes back without the holder's grant.
    for group in 0..3 {
        fx.lab.restart(group).await.expect("restart");
    }
    let contender = fx.client().await;
    let first = contender
        .acquire("precious")
        .await
        .expect_err("restarted masters must not vote");
    assert!(
        matches!(first, Error::Unavailable { .. } | Error::Held { .. }),
        "{first}"
    );
    // They lost their lock policy with their data, and two groups are too few to tell them
    // theirs: they stay out until an operator admits them.
    for vote in &first.votes()[..3] {
        assert!(
            matches!(vote.vote, Vote::NoPolicy | Vote::NotAwaited),
            "{first}"
        );
    }
    assert!(
        first.votes().iter().any(|v| v.vote == Vote::NoPolicy),
        "{first}"
    );
    // The operator admits them after the policy's quarantine, as docs/operations.md says.
    let policy = fx.lab.spec().policy();
    let restarted: Vec<String> = ["g1", "g2", "g3"].map(String::from).to_vec();
    let admitted = contender
        .admit(&AdmitOptions {
            groups: restarted,
            delay: Duration::from_millis(policy.quarantine_ms()),
            ..AdmitOptions::new(policy.max_ttl_ms)
        })
        .await
        .expect("admit");
    assert!(admitted.iter().all(|a| a.error.is_none()), "{admitted:?}");

    // Keep trying: the contender may win only once the holder's lease has run out.
    let deadline = Instant::now() + Duration::from_secs(10);
    let lease = loop {
        match contender.acquire("precious").ttl(1_000 * MS).await {
            Ok(lease) => break lease,
            Err(error) => assert!(Instant::now() < deadline, "never acquired again: {error}"),
        }
        tokio::time::sleep(20 * MS).await;
    };
    assert!(
        lease.acquired_at() >= holder.valid_until(),
        "double grant: the contender won while the holder's lease was still valid"
    );
    assert!(lease.fencing_token() > holder.fencing_token());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreplicated_grants_do_not_count_in_acknowledged_mode() {
    let fx = fixture(
        |spec| LabSpec {
            acknowledged: true,
            ..spec
        },
        |mut topology| {
            // A replica that has just synced can take a few hundred ms to acknowledge.
            topology.call_timeout_ms = 1_500;
            topology.replica_ack_timeout_ms = 1_000;
            topology
        },
    )
    .await;
    let lease = fx
        .locks
        .acquire("acked")
        .await
        .expect("replicas acknowledge");
    assert!(
        lease
            .votes()
            .iter()
            .filter(|v| v.vote == Vote::Granted)
            .count()
            >= 3
    );
    lease.release().await.expect("release");

    // Replicas of three groups stop acknowledging (frozen, as in a partition).
    let frozen: Vec<u32> = fx
        .lab
        .status()
        .await
        .into_iter()
        .filter(|node| {
            node.kind == quorumlock::lab::NodeKind::Replica && node.group.is_some_and(|g| g < 3)
        })
        .map(|node| node.pid)
        .collect();
    assert_eq!(frozen.len(), 3);
    for pid in &frozen {
        // SAFETY: kill(2) on a PID of a replica this test's lab started.
        assert_eq!(unsafe { libc::kill(*pid as i32, libc::SIGSTOP) }, 0);
    }
    let error = fx
        .locks
        .acquire("unacked")
        .await
        .expect_err("unacknowledged grants do not count");
    for pid in &frozen {
        // SAFETY: as above.
        unsafe { libc::kill(*pid as i32, libc::SIGCONT) };
    }
    assert!(error.is_unavailable(), "{error}");
    assert!(
        error
            .to_string()
            .contains("acknowledged by 0 of the master's 1 replicas"),
        "{error}"
    );
    let values = fx.values_of(&lock_key("unacked")).await;
    assert_eq!(
        values,
        vec![None; 5],
        "unacknowledged grants were not rolled back"
    );
}

/// A lab in acknowledged mode, with a call timeout that leaves room for a replica that has
/// just synced to acknowledge.
async fn acknowledged_lab() -> common::Fixture {
    fixture(
        |spec| LabSpec {
            acknowledged: true,
            ..spec
        },
        |mut topology| {
            topology.call_timeout_ms = 1_500;
            topology.replica_ack_timeout_ms = 1_000;
            topology
        },
    )
    .await
}

/// Kills `group`'s master, waits for Sentinel's switch, then brings the old master back as
/// the new one's replica: in acknowledged mode a master votes only with its replica.
async fn fail_over(fx: &mut common::Fixture, group: usize) {
    let mut failovers = fx.locks.failovers();
    fx.lab.kill(group).await.expect("kill");
    let name = format!("g{}", group + 1);
    tokio::time::timeout(Duration::from_secs(15), async {
        while let Ok(failover) = failovers.recv().await {
            if failover.group == name {
                return;
            }
        }
    })
    .await
    .expect("Sentinel announces the switch");
    fx.lab.restart(group).await.expect("restart the old master");
    fx.lab
        .rejoin(group)
        .await
        .expect("the old master replicates");
}

/// `group`'s vote on attempts until it is neither a failure to answer nor a refusal for a
/// missing replica: the promoted master with its replica back.
async fn settled_vote(locks: &Locks, group: &str, resource: &str) -> Vote {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let vote = vote_of(&attempt_votes(locks, resource).await, group);
        let settling = matches!(
            vote,
            Vote::Timeout | Vote::Error { .. } | Vote::ReplicasMissing { .. } | Vote::NotAwaited
        );
        if !settling || Instant::now() > deadline {
            return vote;
        }
        tokio::time::sleep(50 * MS).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledged_promotion_votes_at_once_and_keeps_the_lock() {
    let mut fx = acknowledged_lab().await;
    let lease = fx
        .locks
        .acquire("kept")
        .ttl(Duration::from_secs(30))
        .await
        .expect("every replica acknowledges");
    fail_over(&mut fx, 0).await;
    // The promoted replica holds the grant its master counted.
    assert!(
        fx.value_on(0, &lock_key("kept")).await.is_some(),
        "the counted grant is gone from the promoted replica"
    );
    // And it votes long before the quarantine (a minute) would have ended.
    let vote = settled_vote(&fx.locks, "g1", "after-failover").await;
    assert_eq!(vote, Vote::Granted, "a cleanly promoted replica sat out");
    lease.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledged_replica_without_the_record_sits_out() {
    let mut fx = acknowledged_lab().await;
    attempt_votes(&fx.locks, "records").await;
    // The replica's record names another history, as if it had missed its master's: it
    // cannot show that it holds every vote its master counted.
    let replica = fx
        .lab
        .status()
        .await
        .into_iter()
        .find(|node| node.kind == quorumlock::lab::NodeKind::Replica && node.group == Some(0))
        .expect("g1's replica");
    for args in [
        &["CONFIG", "SET", "replica-read-only", "no"][..],
        &["HSET", "ql:policy:acked", "history", "another"][..],
    ] {
        assert!(common::resp::call(replica.port, args).await.is_some());
    }
    fail_over(&mut fx, 0).await;
    match settled_vote(&fx.locks, "g1", "after-failover").await {
        Vote::Quarantined { remaining_ms } => {
            assert!(remaining_ms <= fx.lab.spec().policy().quarantine_ms())
        }
        other => panic!("a replica that may have missed votes did not sit out: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledged_master_short_of_its_replica_does_not_vote() {
    // Without min-replicas-to-write, which acknowledged mode does not need, so the master's
    // own check answers rather than Redis's NOREPLICAS; one group, so its vote is awaited.
    let fx = fixture(
        |spec| LabSpec {
            acknowledged: true,
            min_replicas_max_lag_s: None,
            groups: 1,
            ..spec
        },
        |topology| topology,
    )
    .await;
    let replica = fx
        .lab
        .status()
        .await
        .into_iter()
        .find(|node| node.kind == quorumlock::lab::NodeKind::Replica && node.group == Some(0))
        .expect("g1's replica");
    // SAFETY: kill(2) on the PID of a replica this test's lab started.
    assert_eq!(unsafe { libc::kill(replica.pid as i32, libc::SIGKILL) }, 0);
    // The master notices the closed link at once; an attempt in between may still vote.
    let refused = common::poll_until(Duration::from_secs(10), || async {
        match vote_of(&attempt_votes(&fx.locks, "short").await, "g1") {
            vote @ Vote::ReplicasMissing { .. } => Some(vote),
            _ => None,
        }
    })
    .await;
    assert_eq!(
        refused,
        Some(Vote::ReplicasMissing {
            online: 0,
            needed: 1
        })
    );
    assert_eq!(fx.value_on(0, &lock_key("short")).await, None);
    let health = fx.locks.health().await;
    assert_eq!(health.groups[0].replicas_missing(), Some((0, 1)));
    assert_eq!(health.voting, 0, "{health:?}");
}

/// A client that does not wait for the replicas (an older one, or one whose idea of the mode
/// is stale) gets no vote: the master refuses and writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledged_master_refuses_a_client_waiting_for_none() {
    const ACQUIRE: &str = concat!(
        include_str!("../../lua/holder.lua"),
        include_str!("../../lua/info.lua"),
        include_str!("../../lua/policy_fields.lua"),
        include_str!("../../lua/admission.lua"),
        include_str!("../../lua/acquire.lua")
    );
    let fx = acknowledged_lab().await;
    let lock = lock_key("raw");
    let fence = common::fence_key("raw");
    for acks in ["0", ""] {
        let reply = fx
            .lab
            .run_on_master(
                0,
                &[
                    "EVAL",
                    ACQUIRE,
                    "4",
                    &lock,
                    &fence,
                    "ql:admission",
                    "ql:policy",
                    "token",
                    "5000",
                    "100",
                    "{}",
                    acks,
                ],
            )
            .await
            .expect("the script answers");
        assert!(reply.contains("Integer(9)"), "{reply}");
    }
    assert_eq!(fx.value_on(0, &lock).await, None);
}

/// The lab node of `kind` in group `group` (0-based).
async fn node_of(
    fx: &common::Fixture,
    kind: quorumlock::lab::NodeKind,
    group: usize,
) -> quorumlock::lab::NodeStatus {
    fx.lab
        .status()
        .await
        .into_iter()
        .find(|node| node.kind == kind && node.group == Some(group))
        .expect("the lab has that node")
}

/// One field of the policy hash on the node at `port`.
async fn policy_field(port: u16, field: &str) -> common::resp::Reply {
    common::resp::call(port, &["HGET", "ql:policy", field])
        .await
        .expect("the node answers")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_mode_gives_a_modeless_client_no_policy() {
    let fx = acknowledged_lab().await;
    // A client from before the mode reads the TTL from max_ttl_ms only, and would grant
    // without waiting for the replicas. Finding no policy, it does not vote.
    let master = node_of(&fx, quorumlock::lab::NodeKind::Master, 0).await;
    assert_eq!(
        policy_field(master.port, "max_ttl_ms").await,
        common::resp::Reply::Nil,
        "a master in acknowledged mode shows older clients a policy they would vote under"
    );
    let lease = fx.locks.acquire("acked").await.expect("this client votes");
    lease.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_mode_ends_once_replicas_hold_the_revocation() {
    use quorumlock::lab::NodeKind;
    let fx = acknowledged_lab().await;
    attempt_votes(&fx.locks, "records").await;
    let master = node_of(&fx, NodeKind::Master, 0).await;
    let replica = node_of(&fx, NodeKind::Replica, 0).await;
    let off = AdmitOptions {
        groups: vec!["g1".to_string()],
        acknowledged: Some(false),
        ..AdmitOptions::new(fx.lab.spec().max_ttl_ms)
    };
    // A frozen replica cannot hold the revocation. Promoted later with its master's record,
    // it would take it over and vote at once, without the grants its master made outside
    // the mode. So the mode stays on.
    // SAFETY: kill(2) on the PID of a replica this test's lab started.
    assert_eq!(unsafe { libc::kill(replica.pid as i32, libc::SIGSTOP) }, 0);
    let refused = fx.locks.admit(&off).await;
    // SAFETY: as above.
    unsafe { libc::kill(replica.pid as i32, libc::SIGCONT) };
    let refused = refused.expect("admit answers");
    let why = refused[0].error.clone().unwrap_or_default();
    assert!(
        why.contains("confirmed the end of acknowledged mode"),
        "the mode ended while a replica could not hold its end: {refused:?}"
    );
    assert_eq!(
        policy_field(master.port, "acked_replicas").await,
        common::resp::Reply::Text("1".to_string()),
        "the mode is off on the master"
    );
    // The replica back, it holds the revoked record, the mode ends, and no node keeps a
    // record to take over. Until the resumed replica reports its offset, the master may
    // refuse writes (min-replicas-max-lag): admit is tried again then.
    assert!(
        eventually(Duration::from_secs(10), || async {
            common::resp::call(replica.port, &["HGET", "ql:policy:acked", "revoked"]).await
                == Some(common::resp::Reply::Text("1".to_string()))
        })
        .await,
        "the replica never got the revoked record"
    );
    let ended = common::poll_until(Duration::from_secs(10), || async {
        let admitted = fx.locks.admit(&off).await.expect("admit answers");
        admitted[0].error.is_none().then_some(admitted)
    })
    .await;
    assert!(
        ended.is_some(),
        "the mode never ended with every replica up"
    );
    assert_eq!(
        policy_field(master.port, "acked_replicas").await,
        common::resp::Reply::Text("0".to_string())
    );
    assert!(
        eventually(Duration::from_secs(5), || async {
            common::resp::call(replica.port, &["EXISTS", "ql:policy:acked"]).await
                == Some(common::resp::Reply::Integer(0))
        })
        .await,
        "the replica keeps the record"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_mode_is_refused_while_a_replica_is_unknown() {
    use quorumlock::lab::NodeKind;
    let fx = fixture(
        |spec| LabSpec {
            acknowledged: true,
            replicas: 2,
            groups: 3,
            ..spec
        },
        |mut topology| {
            topology.call_timeout_ms = 1_500;
            topology.replica_ack_timeout_ms = 1_000;
            topology
        },
    )
    .await;
    let master = node_of(&fx, NodeKind::Master, 0).await;
    let replica = node_of(&fx, NodeKind::Replica, 0).await;
    // SAFETY: kill(2) on the PID of a replica this test's lab started.
    assert_eq!(unsafe { libc::kill(replica.pid as i32, libc::SIGKILL) }, 0);
    assert!(
        eventually(Duration::from_secs(10), || async {
            matches!(
                common::resp::call(master.port, &["INFO", "replication"]).await,
                Some(common::resp::Reply::Text(info)) if info.contains("connected_slaves:1")
            )
        })
        .await,
        "the master still lists the dead replica"
    );
    // A policy naming one replica would let Sentinel promote the other, once back, though
    // it never held the votes.
    let admitted = fx
        .locks
        .admit(&AdmitOptions {
            groups: vec!["g1".to_string()],
            acknowledged: Some(true),
            ..AdmitOptions::new(fx.lab.spec().max_ttl_ms)
        })
        .await
        .expect("admit answers");
    let why = admitted[0].error.clone().unwrap_or_default();
    assert!(
        why.contains("knows 2 replicas but the master has 1 connected"),
        "acknowledged mode was admitted short of a replica Sentinel may promote: {admitted:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_acknowledged_mode_a_client_stops_waiting() {
    use quorumlock::lab::NodeKind;
    let fx = acknowledged_lab().await;
    // The client learns the mode from a vote.
    let lease = fx
        .locks
        .acquire("learned")
        .await
        .expect("acknowledged grant");
    lease.release().await.expect("release");
    let off = AdmitOptions {
        acknowledged: Some(false),
        ..AdmitOptions::new(fx.lab.spec().max_ttl_ms)
    };
    let ended = common::poll_until(Duration::from_secs(10), || async {
        let admitted = fx.locks.admit(&off).await.expect("admit answers");
        admitted.iter().all(|a| a.error.is_none()).then_some(())
    })
    .await;
    assert!(ended.is_some(), "the mode never ended");
    // Replicas of three groups stop acknowledging. Outside the mode that costs nothing; a
    // client that still waited for them would count no grant.
    let mut frozen = Vec::new();
    for group in 0..3 {
        frozen.push(node_of(&fx, NodeKind::Replica, group).await.pid);
    }
    for pid in &frozen {
        // SAFETY: kill(2) on a PID of a replica this test's lab started.
        assert_eq!(unsafe { libc::kill(*pid as i32, libc::SIGSTOP) }, 0);
    }
    let granted = fx.locks.acquire("after").await;
    for pid in &frozen {
        // SAFETY: as above.
        unsafe { libc::kill(*pid as i32, libc::SIGCONT) };
    }
    granted
        .expect("a grant outside the mode waits for no replica")
        .release()
        .await
        .expect("release");
}
