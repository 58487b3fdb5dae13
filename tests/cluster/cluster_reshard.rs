//! Reshards that break off partway, against real Redis Clusters: a slot closed back on its
//! source after some of its keys left (by hand, or with the target's primary killed) keeps
//! its admission marker, whose ledger notices the missing lock or fence, so the slot sits
//! out instead of granting the lock again. Nothing else puts a slot out: grants, renewals,
//! releases, expiries and a whole migration keep the documented rule. Operators put a slot,
//! a resource's slot or a whole group out with `Locks::quarantine`. A release whose slot
//! moved reaches the new owner within its call timeout.

use crate::common;

use std::time::Duration;

use common::resp::{Reply, array, call, key_slot, migrate_keys, start_slot_move, tag_of, text};
use common::{connect, eventually, port_of, released_within, start_lab, temp_dir};
use quorumlock::lab::{ClusterShape, Interruption, Lab, LabSpec, NodeKind};
use quorumlock::{AdmitOptions, Error, GroupVote, Locks, QuarantineScope, Vote};
use tempfile::TempDir;

const MS: Duration = Duration::from_millis(1);
/// Long enough that a lease outlives every step of a test.
const LONG: Duration = Duration::from_secs(30);

/// The acquire script as the engine compiles it (src/group/scripts.rs).
const ACQUIRE_LUA: &str = concat!(
    include_str!("../../lua/holder.lua"),
    include_str!("../../lua/info.lua"),
    include_str!("../../lua/policy_fields.lua"),
    include_str!("../../lua/admission.lua"),
    include_str!("../../lua/acquire.lua")
);

/// Three Cluster groups of two shards each, no replicas, and a client. The lab is declared
/// first: its processes are stopped (by PID, on drop) before their directory is removed.
struct ReshardLab {
    lab: Lab,
    locks: Locks,
    /// How long a slot new to its primary sits out: the longest TTL and the write window.
    quarantine_ms: u64,
    _dir: TempDir,
}

async fn reshard_lab() -> ReshardLab {
    let dir = temp_dir();
    let spec = LabSpec {
        groups: 3,
        sentinels: 0,
        replicas: 0,
        cluster: Some(ClusterShape { shards: 2 }),
        ..LabSpec::new(dir.path())
    };
    let policy = spec.policy();
    let lab = start_lab(spec).await;
    let locks = connect(lab.topology()).await;
    ReshardLab {
        lab,
        locks,
        quarantine_ms: policy.max_ttl_ms + policy.write_window_ms,
        _dir: dir,
    }
}

impl ReshardLab {
    /// The shard of `group` that serves `resource`'s slot, and the other one.
    async fn shards_of(&self, group: usize, resource: &str) -> (usize, usize) {
        let shard = self
            .lab
            .shard_serving(group, key_slot(resource))
            .await
            .expect("a primary serves the slot");
        (shard, 1 - shard)
    }

    /// The ports of the primaries of `group`'s shards that serve `resource`'s slot and that
    /// do not.
    async fn source_and_target(&self, group: usize, resource: &str) -> (u16, u16) {
        let (from, to) = self.shards_of(group, resource).await;
        let status = self.lab.status().await;
        (
            port_of(&status, group, from, NodeKind::Master),
            port_of(&status, group, to, NodeKind::Master),
        )
    }

    /// Milliseconds until `resource`'s slot votes on `group` (<= 0: it votes), read from the
    /// slot's marker on the primary that serves it, as lua/admission.lua reads it.
    async fn sits_out_ms(&self, group: usize, resource: &str) -> i64 {
        const LEFT: &str = "local a = redis.call('HMGET', KEYS[1], 'vote_from', 'since') \
            local t = redis.call('TIME') \
            local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) \
            local since = tonumber(a[2]) \
            local from = tonumber(a[1]) or 0 \
            if since then from = math.max(from, since + tonumber(ARGV[1])) end \
            return from - now";
        let (source, _) = self.source_and_target(group, resource).await;
        let marker = slot_key(resource, "admission");
        let quarantine = self.quarantine_ms.to_string();
        match call(source, &["EVAL", LEFT, "1", &marker, &quarantine]).await {
            Some(Reply::Integer(left)) => left,
            other => panic!("g{}: the marker of {resource}'s slot: {other:?}", group + 1),
        }
    }

    /// Asserts that no slot of `resources` sits out on any group.
    async fn assert_every_slot_votes(&self, resources: &[&str], after: &str) {
        for group in 0..3 {
            for resource in resources {
                let left = self.sits_out_ms(group, resource).await;
                assert!(
                    left <= 0,
                    "after {after}, the slot of {resource} sits out on g{} for {left} ms",
                    group + 1
                );
            }
        }
    }
}

/// The key of `resource` with `suffix` as a Cluster group names it: in the resource's slot.
fn cluster_key(resource: &str, suffix: &str) -> String {
    format!(
        "{{{}}}ql:{{{resource}}}:{suffix}",
        tag_of(key_slot(resource))
    )
}

/// A key of the whole group (`admission`, `policy`) in `resource`'s slot.
fn slot_key(resource: &str, name: &str) -> String {
    format!("{{{}}}ql:{name}", tag_of(key_slot(resource)))
}

/// Closes `slot` back on its source, as `redis-cli --cluster fix` does with an open slot.
async fn close_back(source: u16, target: u16, slot: u16) {
    let slot = slot.to_string();
    for port in [target, source] {
        assert_eq!(
            call(port, &["CLUSTER", "SETSLOT", &slot, "STABLE"]).await,
            Some(Reply::Text("OK".into()))
        );
    }
}

fn vote_of(votes: &[GroupVote], group: &str) -> Vote {
    votes
        .iter()
        .find(|v| v.group == group)
        .map(|v| v.vote.clone())
        .unwrap_or(Vote::NotAwaited)
}

/// Asserts that Y's acquire of `resource` was refused, and that `groups` (0-based) sit out
/// for its slot: they answered so, or answered after the vote was decided and sit out now.
async fn assert_refused_by_quarantine(
    fx: &ReshardLab,
    attempt: Result<quorumlock::Lease, Error>,
    resource: &str,
    groups: &[usize],
) {
    let votes = match attempt {
        Ok(lease) => panic!(
            "Y was granted {resource} while X holds it: {:?}",
            lease.votes()
        ),
        Err(error) => error.votes().to_vec(),
    };
    for &group in groups {
        let name = format!("g{}", group + 1);
        match vote_of(&votes, &name) {
            Vote::Quarantined { .. } => {}
            Vote::NotAwaited => {
                let out = eventually(Duration::from_secs(5), || async {
                    fx.sits_out_ms(group, resource).await > 0
                })
                .await;
                assert!(out, "{name} answered late and does not sit out: {votes:?}");
            }
            other => panic!("{name} did not sit out ({other:?}): {votes:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_closed_back_sits_out_with_one_holder() {
    let fx = reshard_lab().await;
    let resource = "r1";
    let _x = fx
        .locks
        .acquire(resource)
        .ttl(LONG)
        .await
        .expect("X holds r1");
    // On g1 and g2 the slot starts moving, only the lock key leaves, and the slot is closed
    // back on both sides: the source serves it again without the lock.
    let slot = key_slot(resource);
    let lock = cluster_key(resource, "lock");
    for group in [0, 1] {
        let (source, target) = fx.source_and_target(group, resource).await;
        start_slot_move(source, target, slot).await;
        migrate_keys(source, target, &[&lock]).await;
        close_back(source, target, slot).await;
        assert_eq!(
            call(source, &["EXISTS", &lock]).await,
            Some(Reply::Integer(0))
        );
    }
    let y = fx.locks.acquire(resource).ttl(LONG).await;
    assert_refused_by_quarantine(&fx, y, resource, &[0, 1]).await;
    assert!(
        fx.sits_out_ms(0, resource).await > (fx.quarantine_ms as i64) / 2,
        "g1's slot sits out the policy's quarantine from when it found the loss"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_closed_back_after_its_target_died_sits_out() {
    let mut fx = reshard_lab().await;
    let resource = "r2";
    let _x = fx
        .locks
        .acquire(resource)
        .ttl(LONG)
        .await
        .expect("X holds r2");
    let slot = key_slot(resource);
    let lock = cluster_key(resource, "lock");
    for group in [0, 1] {
        let (source, _) = fx.source_and_target(group, resource).await;
        let (from, to) = fx.shards_of(group, resource).await;
        // The two newest keys of the slot leave first, as redis-cli moves them: the lock and
        // the fence X was just granted. Then the target dies with them.
        let report = fx
            .lab
            .interrupt_migration(group, from, to, slot, 2, Interruption::TargetKilled)
            .await
            .expect("a migration broken off");
        assert_eq!(report.keys, 2);
        assert_eq!(
            call(source, &["EXISTS", &lock]).await,
            Some(Reply::Integer(0)),
            "g{}: the lock left with the first keys",
            group + 1
        );
    }
    let y = fx.locks.acquire(resource).ttl(LONG).await;
    assert_refused_by_quarantine(&fx, y, resource, &[0, 1]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_fence_refuses_a_proposal_below_it() {
    let fx = reshard_lab().await;
    let resource = "r3";
    let x = fx
        .locks
        .acquire(resource)
        .ttl(LONG)
        .await
        .expect("X holds r3");
    let fence = x.fencing_token();
    x.release().await.expect("released");
    // On g1 only the fence key leaves (the lock is gone already), and the slot is closed back.
    let slot = key_slot(resource);
    let fence_key = cluster_key(resource, "fence");
    let (source, target) = fx.source_and_target(0, resource).await;
    start_slot_move(source, target, slot).await;
    migrate_keys(source, target, &[&fence_key]).await;
    close_back(source, target, slot).await;
    // A client whose clock lags proposes below X's fence.
    let (lock, marker, policy) = (
        cluster_key(resource, "lock"),
        slot_key(resource, "admission"),
        slot_key(resource, "policy"),
    );
    let lower = (fence - 1).to_string();
    let answer = array(
        source,
        &[
            "EVAL",
            ACQUIRE_LUA,
            "4",
            &lock,
            &fence_key,
            &marker,
            &policy,
            "lagging-client",
            "10000",
            &lower,
            "{}",
        ],
    )
    .await
    .expect("an answer");
    assert_eq!(
        answer.first().map(String::as_str),
        Some("3"),
        "a proposal below the fence that left was answered {answer:?}, not quarantined"
    );
    assert_eq!(text(source, &["GET", &fence_key]).await, None);
    assert_eq!(
        call(source, &["EXISTS", &lock]).await,
        Some(Reply::Integer(0))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordinary_calls_and_a_migration_put_no_slot_out_early() {
    let mut fx = reshard_lab().await;
    let locks = &fx.locks;
    for _ in 0..3 {
        let mut lease = locks.acquire("cycle").ttl(2_000 * MS).await.expect("free");
        lease.extend(2_000 * MS).await.expect("renewed");
        lease.release().await.expect("released");
    }
    // A lease that expires, and one renewed shorter than it was granted, then expires.
    let _expiring = locks.acquire("expiry").ttl(300 * MS).await.expect("free");
    let mut shortened = locks
        .acquire("shortened")
        .ttl(5_000 * MS)
        .await
        .expect("free");
    shortened.extend(300 * MS).await.expect("renewed");
    for resource in ["expiry", "shortened"] {
        assert!(
            released_within(locks, resource, Duration::from_secs(5)).await,
            "{resource} never expired"
        );
    }
    // Every lock key gone on every group before the next grants.
    for group in 0..3 {
        for resource in ["expiry", "shortened"] {
            let (source, _) = fx.source_and_target(group, resource).await;
            let lock = cluster_key(resource, "lock");
            let gone = eventually(Duration::from_secs(5), || {
                let lock = lock.clone();
                async move { call(source, &["EXISTS", &lock]).await == Some(Reply::Integer(0)) }
            })
            .await;
            assert!(gone, "g{}: {resource} never expired", group + 1);
        }
    }
    for resource in ["expiry", "shortened"] {
        locks
            .acquire(resource)
            .ttl(2_000 * MS)
            .await
            .unwrap_or_else(|error| panic!("{resource} after it expired: {error}"))
            .release()
            .await
            .expect("released");
    }
    // Permits, and a force release.
    for _ in 0..2 {
        let permit = locks
            .acquire_permit("pool", 2)
            .ttl(2_000 * MS)
            .await
            .expect("a permit");
        permit.release().await.expect("released");
    }
    let _forced = locks.acquire("forced").ttl(LONG).await.expect("free");
    locks.force_release("forced").await.expect("force released");
    locks
        .acquire("forced")
        .ttl(2_000 * MS)
        .await
        .expect("free after the force release")
        .release()
        .await
        .expect("released");
    let resources = ["cycle", "expiry", "shortened", "pool", "forced"];
    fx.assert_every_slot_votes(&resources, "grants, renewals, releases and expiries")
        .await;

    // A whole migration moves the marker with the keys: the slot sits out on its new primary
    // (a history it has not met, the documented rule) and nowhere else.
    let moved = "moved";
    locks
        .acquire(moved)
        .ttl(2_000 * MS)
        .await
        .expect("free")
        .release()
        .await
        .expect("released");
    let held = locks.acquire("held").ttl(LONG).await.expect("free");
    let (from, to) = fx.shards_of(0, moved).await;
    let slot = key_slot(moved);
    fx.lab
        .migrate_slots(0, from, to, slot..=slot)
        .await
        .expect("migrated");
    let left = fx.sits_out_ms(0, moved).await;
    assert!(
        left <= 0 || left <= fx.quarantine_ms as i64,
        "the moved slot sits out {left} ms, beyond the policy's quarantine"
    );
    fx.assert_every_slot_votes(&resources, "a whole migration of another slot")
        .await;
    held.release().await.expect("released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quarantine_puts_any_scope_out_and_never_shortens() {
    let fx = reshard_lab().await;
    let locks = &fx.locks;
    let quarantine = fx.quarantine_ms as i64;
    let near = |left: i64| left > quarantine - 10_000 && left <= quarantine;

    let slot = key_slot("by-slot");
    let out = locks
        .quarantine("g1", &QuarantineScope::Slot(slot))
        .await
        .expect("quarantined");
    assert_eq!(out.error, None, "{out:?}");
    assert_eq!(out.quarantined, format!("slot {slot}"));
    assert!(out.votes_in_ms.is_some_and(|ms| near(ms as i64)), "{out:?}");
    assert!(near(fx.sits_out_ms(0, "by-slot").await));
    assert!(fx.sits_out_ms(0, "other").await <= 0);

    let out = locks
        .quarantine("g2", &QuarantineScope::Resource("by-name".into()))
        .await
        .expect("quarantined");
    assert_eq!(out.error, None, "{out:?}");
    assert!(near(fx.sits_out_ms(1, "by-name").await));
    assert!(fx.sits_out_ms(1, "other").await <= 0);

    // g3 sits out three quarantines from an operator's admission: a quarantine of the whole
    // group later keeps that.
    let admitted = locks
        .admit(&AdmitOptions {
            groups: vec!["g3".into()],
            write_window_ms: Some(fx.lab.spec().policy().write_window_ms),
            delay: Duration::from_millis(3 * fx.quarantine_ms),
            ..AdmitOptions::new(fx.lab.spec().policy().max_ttl_ms)
        })
        .await
        .expect("admit answers");
    assert_eq!(admitted[0].error, None, "{admitted:?}");
    let out = locks
        .quarantine("g3", &QuarantineScope::Group)
        .await
        .expect("quarantined");
    assert_eq!(out.error, None, "{out:?}");
    assert_eq!(out.quarantined, "every slot");
    assert!(
        out.votes_in_ms.is_some_and(|ms| ms as i64 > 2 * quarantine),
        "the quarantine shortened an admission's delay: {out:?}"
    );
    for resource in ["by-slot", "by-name", "other"] {
        assert!(fx.sits_out_ms(2, resource).await > 2 * quarantine);
    }
    // The slots left vote: g1 and g2 grant `other`.
    let lease = locks.acquire("other").ttl(LONG).await.expect("granted");
    assert!(matches!(
        vote_of(lease.votes(), "g3"),
        Vote::Quarantined { .. } | Vote::NotAwaited
    ));
    lease.release().await.expect("released");

    match locks.quarantine("g1", &QuarantineScope::Slot(16_384)).await {
        Err(Error::InvalidInput { field: "slot", .. }) => {}
        other => panic!("slot 16384: {other:?}"),
    }
    match locks.quarantine("g9", &QuarantineScope::Group).await {
        Err(Error::InvalidInput { field: "group", .. }) => {}
        other => panic!("g9: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_after_a_move_reaches_the_new_owner() {
    let fx = reshard_lab().await;
    let resource = "r6";
    let x = fx
        .locks
        .acquire(resource)
        .ttl(LONG)
        .await
        .expect("X holds r6");
    // g1's slot moves whole, keys and marker, and is handed over; the engine's map has not
    // been read since.
    let slot = key_slot(resource);
    let slot_text = slot.to_string();
    let (source, target) = fx.source_and_target(0, resource).await;
    start_slot_move(source, target, slot).await;
    let keys = array(source, &["CLUSTER", "GETKEYSINSLOT", &slot_text, "100"])
        .await
        .expect("the slot's keys");
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    migrate_keys(source, target, &keys).await;
    let target_id = text(target, &["CLUSTER", "MYID"]).await.expect("node id");
    for port in [target, source] {
        assert_eq!(
            call(
                port,
                &["CLUSTER", "SETSLOT", &slot_text, "NODE", &target_id]
            )
            .await,
            Some(Reply::Text("OK".into()))
        );
    }
    let released = x.release().await.expect("released");
    let lock = cluster_key(resource, "lock");
    assert_eq!(
        call(target, &["EXISTS", &lock]).await,
        Some(Reply::Integer(0)),
        "the lock stays on g1's new owner until its TTL: {:?}",
        released.votes
    );
    assert_eq!(released.groups_released, 3, "{:?}", released.votes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_off_migration_gives_no_extra_permit() {
    let fx = reshard_lab().await;
    let name = "sem";
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(
            fx.locks
                .acquire_permit(name, 2)
                .ttl(LONG)
                .await
                .expect("a permit of two"),
        );
    }
    // On g1 and g2 only the count leaves (grants write it last, so it is the newest key),
    // and the slot is closed back.
    let slot = key_slot(name);
    let count = cluster_key(name, "permits");
    for group in [0, 1] {
        let (source, target) = fx.source_and_target(group, name).await;
        start_slot_move(source, target, slot).await;
        migrate_keys(source, target, &[&count]).await;
        close_back(source, target, slot).await;
    }
    let third = fx.locks.acquire_permit(name, 3).ttl(LONG).await;
    assert!(
        third.is_err(),
        "a third holder of a two-permit semaphore: {third:?}"
    );
    let status = fx.locks.semaphore_status(name).await.expect("status");
    assert!(status.holders.len() <= 2, "{status:?}");
}
