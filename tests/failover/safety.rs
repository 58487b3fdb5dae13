//! The holes a review found beyond process crashes, each closed with a test that fails
//! without its fix: the quarantine belongs to the masters, not to a client's config; each
//! attempt has its own token; a master that may evict keys does not vote; a split lock is
//! shown as a split.

use crate::common;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{connect, fence_key, fixture, lock_key, plain, poll_until};
use fred::prelude::*;
use fred::types::{CustomCommand, Value};
use quorumlock::lab::LabSpec;
use quorumlock::{Admission, AdmitOptions, Error, Topology, Vote};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

const MS: Duration = Duration::from_millis(1);

/// A lab of plain masters whose lock policy allows leases of at most `max_ttl_ms`.
fn plain_with_policy(max_ttl_ms: u64) -> impl FnOnce(LabSpec) -> LabSpec {
    move |spec| LabSpec {
        max_ttl_ms,
        ..plain(spec)
    }
}

/// The same topology for an older client whose config caps leases lower.
fn with_max_ttl(topology: &Topology, max_ttl_ms: u64) -> Topology {
    Topology {
        max_ttl_ms,
        ..topology.clone()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shorter_client_max_ttl_cannot_cut_a_quarantine() {
    let mut fx = fixture(plain_with_policy(3_000), |topology| topology).await;
    // A takes a lease on g1..g3 while g4 and g5 are down.
    fx.lab.kill(3).await.expect("kill g4");
    fx.lab.kill(4).await.expect("kill g5");
    let a = fx
        .locks
        .acquire("shared")
        .ttl(3_000 * MS)
        .await
        .expect("A holds g1..g3");
    // g1 loses A's grant, and g4 and g5 come back empty: three masters that know nothing.
    for group in [0, 3, 4] {
        fx.lab.restart(group).await.expect("restart empty");
    }
    // B runs an older config with a 600 ms max TTL. Under a client-chosen quarantine the
    // three empty masters would vote for it after 600 ms.
    let b = connect(with_max_ttl(&fx.topology, 600)).await;
    let wait = a.validity().saturating_sub(300 * MS);
    let outcome = b.acquire("shared").ttl(600 * MS).wait(wait).await;
    assert!(
        a.validity() > Duration::ZERO,
        "the test ran past A's lease; it proves nothing"
    );
    match outcome {
        Ok(lease) => panic!(
            "B took the lock while A's lease was valid for another {:?}: {:?}",
            a.validity(),
            lease.votes()
        ),
        Err(error) => {
            // Only two masters hold a policy: the empty ones cannot adopt one from a majority.
            let no_policy = error
                .votes()
                .iter()
                .filter(|v| v.vote == Vote::NoPolicy)
                .count();
            assert!(no_policy >= 1, "{error}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_emptied_master_sits_out_the_majority_policy() {
    let mut fx = fixture(plain_with_policy(3_000), |topology| topology).await;
    fx.lab.restart(0).await.expect("restart g1 empty");
    let b = connect(with_max_ttl(&fx.topology, 600)).await;
    // g1 has lost its policy; the four others grant, and an acquire that hears g1 answer
    // "no policy" makes it adopt theirs (one decided before g1 answered does not: try again).
    let quarantine = poll_until(Duration::from_secs(5), || async {
        if let Ok(lease) = b.acquire("adopted").ttl(600 * MS).await {
            let _ = lease.release().await;
        }
        let health = b.health().await;
        match health.groups[0].admission {
            Admission::Quarantined { remaining_ms } => {
                Some((remaining_ms, health.groups[0].policy))
            }
            _ => None,
        }
    })
    .await;
    let (remaining_ms, policy) = quarantine.expect("g1 adopted a policy and sits out");
    assert!(
        remaining_ms > 2_000,
        "g1 sits out {remaining_ms} ms: a client's 600 ms set it, not the policy's 3 s"
    );
    assert_eq!(policy.map(|p| p.max_ttl_ms), Some(3_000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raise_during_a_quarantine_lengthens_it() {
    let mut fx = fixture(plain_with_policy(1_000), |topology| topology).await;
    fx.lab.restart(0).await.expect("restart g1 empty");
    // g1 adopts the majority's 1 s policy and sits out 1 s from then.
    let adopted = poll_until(Duration::from_secs(5), || async {
        if let Ok(lease) = fx.locks.acquire("adopted").ttl(500 * MS).await {
            let _ = lease.release().await;
        }
        let health = fx.locks.health().await;
        matches!(health.groups[0].admission, Admission::Quarantined { .. }).then_some(())
    })
    .await;
    adopted.expect("g1 adopted a policy and sits out");
    // The policy is raised to 4 s while g1 sits out: a master that may have missed grants
    // made under the raised policy must sit out the longer quarantine, counted from the same
    // start.
    let raised = fx
        .locks
        .admit(&AdmitOptions {
            groups: vec!["g1".into()],
            ..AdmitOptions::new(4_000)
        })
        .await
        .expect("admit");
    assert!(raised[0].error.is_none(), "{raised:?}");
    let health = fx.locks.health().await;
    assert_eq!(health.groups[0].policy.map(|p| p.max_ttl_ms), Some(4_000));
    assert!(
        matches!(health.groups[0].admission, Admission::Quarantined { remaining_ms } if remaining_ms > 2_000),
        "g1 sits out only what is left of the old 1 s policy: {:?}",
        health.groups[0].admission
    );
    // The master's own vote agrees with its health view.
    let refused = fx
        .locks
        .acquire("after-raise")
        .ttl(500 * MS)
        .await
        .expect("four groups grant");
    assert!(
        matches!(refused.votes()[0].vote, Vote::Quarantined { remaining_ms } if remaining_ms > 1_500)
            || refused.votes()[0].vote == Vote::NotAwaited,
        "{:?}",
        refused.votes()[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ttl_above_the_policy_is_refused_by_name() {
    let fx = fixture(plain_with_policy(3_000), |topology| topology).await;
    let newer = connect(with_max_ttl(&fx.topology, 300_000)).await;
    match newer.acquire("long").ttl(Duration::from_secs(300)).await {
        Err(Error::InvalidInput { field, reason }) => {
            assert_eq!(field, "ttl");
            assert!(reason.contains("3000 ms"), "{reason}");
        }
        other => panic!("a 300 s lease under a 3 s policy gave {other:?}"),
    }
    let lease = newer
        .acquire("long")
        .ttl(1_000 * MS)
        .await
        .expect("within the policy");
    match newer
        .extend("long", lease.token(), Duration::from_secs(300))
        .await
    {
        Err(Error::InvalidInput { field, .. }) => assert_eq!(field, "ttl"),
        other => panic!("extending to 300 s under a 3 s policy gave {other:?}"),
    }
}

/// What a master runs while it is watched: the lines `MONITOR` prints.
struct Monitor {
    lines: Arc<Mutex<Vec<String>>>,
    reader: tokio::task::JoinHandle<()>,
}

impl Monitor {
    async fn start(port: u16) -> Monitor {
        let mut stream = TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect");
        stream.write_all(b"MONITOR\r\n").await.expect("MONITOR");
        let mut reader = BufReader::new(stream);
        let mut first = String::new();
        reader.read_line(&mut first).await.expect("MONITOR answers");
        assert_eq!(first.trim(), "+OK");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let reader = tokio::spawn(async move {
            let mut line = String::new();
            while reader.read_line(&mut line).await.unwrap_or(0) > 0 {
                sink.lock().expect("lines").push(std::mem::take(&mut line));
            }
        });
        Monitor { lines, reader }
    }

    /// The acquire calls clients sent so far for `resource`: the only calls that name its
    /// fence key. The commands the scripts run inside (`[0 lua]`) are left out.
    fn acquires(&self, resource: &str) -> Vec<String> {
        let fence = format!("\"{}\"", fence_key(resource));
        self.lines
            .lock()
            .expect("lines")
            .iter()
            .filter(|line| line.contains(&fence) && !line.contains(" lua] "))
            .cloned()
            .collect()
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// The tokens (32 hex digits, as acquire draws them) a MONITOR line carries.
fn tokens_in(line: &str) -> Vec<String> {
    line.split('"')
        .filter(|part| part.len() == 32 && part.bytes().all(|b| b.is_ascii_hexdigit()))
        .map(str::to_string)
        .collect()
}

/// Plants another holder's lock on `groups`, behind the clients' backs.
async fn plant_holder(fx: &common::Fixture, resource: &str, groups: std::ops::Range<usize>) {
    let planted = format!("{PLANTED}\n{{}}");
    fx.on_masters(groups, async |master| {
        let _: () = master
            .set(
                lock_key(resource),
                planted.as_str(),
                Some(Expiration::PX(10_000)),
                None,
                false,
            )
            .await
            .expect("SET");
    })
    .await;
}

const PLANTED: &str = "0000000000000000000000000000beef";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_attempt_of_one_acquire_has_its_own_token() {
    let fx = fixture(plain, |topology| topology).await;
    // Another holder on g1..g3: each attempt is granted by g4 and g5 only, denied, and
    // rolled back there. A rollback of one attempt that lands late must not be able to
    // delete the grant of the next, so the next must carry another token.
    plant_holder(&fx, "contested", 0..3).await;
    let monitor = Monitor::start(fx.lab.master_of(3).await.expect("g4").port).await;
    let outcome = fx
        .locks
        .acquire("contested")
        .wait(Duration::from_millis(1_500))
        .await;
    assert!(matches!(outcome, Err(Error::Held { .. })), "{outcome:?}");
    let acquires = monitor.acquires("contested");
    let tokens: HashSet<String> = acquires
        .iter()
        .flat_map(|line| tokens_in(line))
        .filter(|token| token != PLANTED)
        .collect();
    assert!(acquires.len() >= 2, "one attempt only: {acquires:?}");
    assert_eq!(
        tokens.len(),
        acquires.len(),
        "{} attempts carried {} tokens",
        acquires.len(),
        tokens.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_waiter_does_not_spin_on_its_rollbacks() {
    let fx = fixture(plain, |topology| topology).await;
    plant_holder(&fx, "spun", 0..3).await;
    let monitor = Monitor::start(fx.lab.master_of(3).await.expect("g4").port).await;
    let wait = Duration::from_millis(1_500);
    let outcome = fx.locks.acquire("spun").wait(wait).await;
    assert!(matches!(outcome, Err(Error::Held { .. })), "{outcome:?}");
    // The holder has 10 s left, so the waiter's timer fires every 10 × retry_delay_ms
    // (500 ms); each of its rollbacks used to wake it again at once.
    let attempts = monitor.acquires("spun").len();
    assert!(
        attempts <= 8,
        "{attempts} attempts in {wait:?}: the waiter woke itself"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicting_master_does_not_vote_and_health_says() {
    let fx = fixture(plain, |topology| topology).await;
    for group in 0..3 {
        let master = fx.master(group).await;
        let _: Value = master
            .custom(
                CustomCommand::new_static("CONFIG", None, false),
                vec!["SET", "maxmemory", "1gb", "maxmemory-policy", "allkeys-lru"],
            )
            .await
            .expect("CONFIG SET");
    }
    match fx.locks.acquire("evictable").await {
        Err(error @ Error::Unavailable { .. }) => {
            let evicting = error
                .votes()
                .iter()
                .filter(|v| matches!(v.vote, Vote::Evicts { .. }))
                .count();
            assert_eq!(evicting, 3, "{error}");
            assert!(error.to_string().contains("noeviction"), "{error}");
        }
        other => panic!("three evicting masters still formed a majority: {other:?}"),
    }
    let health = fx.locks.health().await;
    assert!(
        matches!(health.groups[0].admission, Admission::Evicts { .. }),
        "{:?}",
        health.groups[0]
    );
    assert!(
        health.groups[0]
            .unsafe_settings
            .iter()
            .any(|s| s.contains("maxmemory-policy")),
        "{:?}",
        health.groups[0].unsafe_settings
    );
    assert!(!health.quorum_available);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_under_two_tokens_shows_as_a_split() {
    let fx = fixture(plain, |topology| topology).await;
    let record = |owner: &str| format!("{{\"owner\":\"{owner}\"}}");
    let plant = |token: &'static str, owner: String, groups: std::ops::Range<usize>| {
        let value = format!("{token}\n{owner}");
        fx.on_masters(groups, async move |master| {
            let _: () = master
                .set(
                    lock_key("torn"),
                    value.as_str(),
                    Some(Expiration::PX(10_000)),
                    None,
                    false,
                )
                .await
                .expect("SET");
        })
    };
    plant("0000000000000000000000000000000a", record("agent-a"), 0..2).await;
    plant("0000000000000000000000000000000b", record("agent-b"), 2..5).await;

    let status = fx.locks.status("torn").await.expect("status");
    assert!(status.split, "{status:?}");
    assert_eq!(status.holders.len(), 2);
    assert_eq!(status.holders[0].owner.as_deref(), Some("agent-b"));
    assert_eq!(status.holders[0].groups, ["g3", "g4", "g5"]);
    assert!(status.holders[0].majority);
    assert_eq!(status.holders[1].groups, ["g1", "g2"]);
    assert!(!status.holders[1].majority);

    let config = fx.file("quorumlock.toml", &fx.topology.to_toml());
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_quorumlock"))
        .arg("--config")
        .arg(&config)
        .args(["status", "torn"])
        .output()
        .expect("run quorumlock status");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("SPLIT"), "{text}");
    assert!(text.contains("agent-a on g1, g2"), "{text}");
    assert!(text.contains("agent-b on g3, g4, g5"), "{text}");
    assert!(!text.contains("5 of 5"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_keys_expire_long_after_their_last_grant() {
    let fx = fixture(plain, |topology| topology).await;
    let lease = fx.locks.acquire("fenced").await.expect("acquire");
    lease.release().await.expect("release");
    let policy = fx.lab.spec().policy();
    let lifetimes: Vec<i64> = fx
        .on_masters(fx.groups(), async |master| {
            master.pttl(fence_key("fenced")).await.expect("PTTL")
        })
        .await;
    for pttl in lifetimes {
        // -1 would be a fence that never expires: memory that grows with every name locked.
        assert!(pttl > 0, "a fence key without a TTL");
        let pttl = pttl as u64;
        assert!(
            pttl <= policy.fence_ttl_ms() && pttl > policy.fence_ttl_ms() - 60_000,
            "fence PTTL {pttl} ms, expected about {} ms",
            policy.fence_ttl_ms()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keepalive_giving_up_releases_what_it_holds() {
    let mut fx = fixture(plain, |topology| topology).await;
    let kept = fx
        .locks
        .acquire("abandoned")
        .ttl(1_500 * MS)
        .await
        .expect("acquire")
        .keepalive();
    // With three masters frozen the renewals fail, but g4 and g5 keep renewing their part
    // until the keepalive gives up.
    for group in 0..3 {
        fx.lab.freeze(group).await.expect("freeze");
    }
    let ended = tokio::time::timeout(Duration::from_secs(5), kept.lost())
        .await
        .expect("the keepalive gives up");
    assert!(matches!(ended, quorumlock::LeaseEnd::Lost(_)), "{ended:?}");
    // g4 was renewed a moment ago (about 1.4 s left): only a release can clear it this soon.
    let cleared = common::eventually(Duration::from_millis(500), || async {
        fx.value_on(3, &lock_key("abandoned")).await.is_none()
    })
    .await;
    for group in 0..3 {
        fx.lab.thaw(group).await.expect("thaw");
    }
    assert!(cleared, "the given-up lease still stands on g4");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_client_leaves_no_connection() {
    let fx = fixture(plain, |topology| topology).await;
    let observer = fx.master(0).await;
    let connected = async || {
        let list: String = observer
            .custom(
                CustomCommand::new_static("CLIENT", None, false),
                vec!["LIST"],
            )
            .await
            .expect("CLIENT LIST");
        list.lines().count()
    };
    let before = connected().await;
    let other = connect(fx.topology.clone()).await;
    // A waiter makes the client subscribe too.
    let _ = other
        .acquire("dropped")
        .wait(Duration::from_millis(50))
        .await;
    let during = connected().await;
    assert!(during > before, "the second client never connected");
    drop(other);
    let closed = common::eventually(Duration::from_secs(3), || async {
        connected().await == before
    })
    .await;
    assert!(
        closed,
        "{} connections before the client, {during} with it, {} after it was dropped",
        before,
        connected().await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admit_waits_out_a_quarantine_for_a_lossy_master() {
    let mut fx = fixture(plain_with_policy(3_000), |topology| topology).await;
    let config = fx.file("quorumlock.toml", &fx.topology.to_toml());
    let admit = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_quorumlock"))
            .arg("--config")
            .arg(&config)
            .arg("admit")
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run quorumlock admit")
    };
    let lease = fx
        .locks
        .acquire("kept")
        .ttl(2_000 * MS)
        .await
        .expect("acquire");
    // Without a terminal, admit wants --yes.
    let unconfirmed = admit(&["--group", "g1"]);
    assert!(!unconfirmed.status.success());
    assert!(String::from_utf8_lossy(&unconfirmed.stderr).contains("--yes"));
    // g1 votes and holds the lease's keys: admitting it again at once only raises its
    // policy, and never cuts its history's quarantine short.
    let raised = admit(&["--group", "g1", "--max-ttl-ms", "4000", "--yes"]);
    let text = String::from_utf8_lossy(&raised.stdout);
    assert!(raised.status.success(), "{text}");
    let health = fx.locks.health().await;
    assert_eq!(health.groups[0].policy.map(|p| p.max_ttl_ms), Some(4_000));
    // Three masters restarted empty cannot adopt a policy from the two others; an operator
    // admits them after the quarantine.
    for group in 0..3 {
        fx.lab.restart(group).await.expect("restart");
    }
    // Without a delay an empty master is refused: other groups hold a policy, so it lost its
    // data rather than being new.
    let forgotten = admit(&["--group", "g1", "--yes"]);
    let text = String::from_utf8_lossy(&forgotten.stdout);
    assert!(!forgotten.status.success(), "{text}");
    assert!(text.contains("no lock policy"), "{text}");
    let admitted = admit(&[
        "--group",
        "g1",
        "--group",
        "g2",
        "--group",
        "g3",
        "--after-ms",
        "3000",
        "--yes",
    ]);
    let text = String::from_utf8_lossy(&admitted.stdout);
    assert!(admitted.status.success(), "{text}");
    let health = fx.locks.health().await;
    for group in &health.groups[..3] {
        assert!(
            matches!(group.admission, Admission::Quarantined { remaining_ms } if remaining_ms > 2_000),
            "{:?}",
            group.admission
        );
        assert_eq!(group.policy.map(|p| p.max_ttl_ms), Some(3_000));
    }
    // Admitting again at once (raising the policy, say) never shortens a quarantine.
    let again = admit(&["--group", "g1", "--yes"]);
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stdout)
    );
    let health = fx.locks.health().await;
    assert!(
        matches!(health.groups[0].admission, Admission::Quarantined { remaining_ms } if remaining_ms > 1_500),
        "{:?}",
        health.groups[0].admission
    );
    // When no master holds a policy the deployment looks brand new, but a master that holds
    // lock or fence keys is not: it is refused unless forced.
    for group in fx.groups() {
        fx.lab.restart(group).await.expect("restart");
    }
    fx.lab
        .run_on_master(0, &["SET", &fence_key("left-behind"), "1"])
        .await
        .expect("plant a fence key");
    let bootstrap = admit(&["--yes"]);
    let text = String::from_utf8_lossy(&bootstrap.stdout);
    assert!(!bootstrap.status.success(), "{text}");
    let refused: Vec<&str> = text.lines().filter(|l| l.contains("REFUSED")).collect();
    assert_eq!(refused.len(), 1, "{text}");
    assert!(
        refused[0].starts_with("g1") && refused[0].contains("not brand new"),
        "{text}"
    );
    drop(lease);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admitting_at_once_skips_no_quarantine() {
    let mut fx = common::sentinel_lab().await;
    let policy = fx.lab.spec().policy();
    let admit_g1 = AdmitOptions {
        groups: vec!["g1".into()],
        ..AdmitOptions::new(policy.max_ttl_ms)
    };
    let quarantine_ms = policy.quarantine_ms();
    // g1's replica holds the policy before its master dies.
    let before = fx.locks.admit(&admit_g1).await.expect("admit");
    assert_eq!(
        before[0].replicas.map(|r| r.acknowledged),
        Some(1),
        "{before:?}"
    );
    let mut failovers = fx.locks.failovers();
    let killed = fx.lab.kill(0).await.expect("kill g1's master");
    let failover = tokio::time::timeout(Duration::from_secs(15), failovers.recv())
        .await
        .expect("Sentinel announces the switch")
        .expect("event");
    assert_eq!(failover.group, "g1");
    // No vote has met the promoted replica yet, and it holds the policy it replicated. It
    // may have missed grants, so an operator's admission at once (to raise the policy, say)
    // must still leave it the whole quarantine.
    let old = format!("127.0.0.1:{}", killed.port);
    let promoted = poll_until(Duration::from_secs(10), || async {
        let health = fx.locks.health().await;
        let g1 = &health.groups[0];
        (g1.master.as_deref() != Some(old.as_str()) && g1.policy.is_some()).then_some(())
    })
    .await;
    promoted.expect("g1 answers from its promoted replica");
    // With min-replicas-to-write it takes writes once the old master is back as its replica.
    fx.lab.restart(0).await.expect("restart the old master");
    fx.lab.rejoin(0).await.expect("the old master replicates");
    let replicated = poll_until(Duration::from_secs(10), || async {
        let health = fx.locks.health().await;
        let replicas = &health.groups[0].replicas;
        replicas
            .iter()
            .any(|replica| replica.state == "online")
            .then_some(())
    })
    .await;
    replicated.expect("g1's new master has a replica online");
    // Online is not yet acknowledged within min-replicas-max-lag on a loaded machine: the
    // admission's writes may be refused (NOREPLICAS) for a moment. Admitting again never
    // shortens a quarantine.
    let admitted = poll_until(Duration::from_secs(10), || async {
        let admitted = fx.locks.admit(&admit_g1).await.expect("admit");
        admitted[0].error.is_none().then_some(admitted)
    })
    .await
    .expect("g1 is admitted once its replica acknowledges writes");
    let votes_in_ms = admitted[0].votes_in_ms.expect("admit says when g1 votes");
    assert!(
        votes_in_ms + 1_000 > quarantine_ms,
        "g1 votes in {votes_in_ms} ms, not after the {quarantine_ms} ms quarantine"
    );
    let health = fx.locks.health().await;
    assert!(
        matches!(health.groups[0].admission, Admission::Quarantined { remaining_ms } if remaining_ms + 1_000 > quarantine_ms),
        "{:?}",
        health.groups[0].admission
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admit_calls_no_deployment_new_while_groups_are_silent() {
    let mut fx = fixture(plain_with_policy(3_000), |topology| topology).await;
    // g1 lost its data; every other group holds the policy but none answers.
    for group in 1..5 {
        fx.lab.kill(group).await.expect("kill");
    }
    fx.lab.restart(0).await.expect("restart g1 empty");
    let admitted = fx
        .locks
        .admit(&AdmitOptions {
            groups: vec!["g1".into()],
            ..AdmitOptions::new(3_000)
        })
        .await
        .expect("admit");
    let why = admitted[0].error.as_deref().unwrap_or_default();
    assert!(
        why.contains("did not answer"),
        "g1 was admitted as if the deployment were brand new: {admitted:?}"
    );
    let health = fx.locks.health().await;
    assert!(
        !matches!(health.groups[0].admission, Admission::Voting),
        "{:?}",
        health.groups[0].admission
    );
}

/// `quorumlock admit` with the lab's topology, without a terminal.
fn admit_command(config: &std::path::Path, args: &[&str]) -> (bool, String) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_quorumlock"))
        .arg("--config")
        .arg(config)
        .arg("admit")
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run quorumlock admit");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

/// The lines of an admit table that refuse a group.
fn refused_lines(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|line| line.contains("REFUSED"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admit_gives_each_group_its_max_lag_window() {
    let fx = common::sentinel_lab().await;
    // g2's master now runs a longer lag than the lab's own policy covers.
    fx.lab
        .run_on_master(1, &["CONFIG", "SET", "min-replicas-max-lag", "10"])
        .await
        .expect("CONFIG SET");
    let admitted = fx
        .locks
        .admit(&AdmitOptions::new(fx.lab.spec().max_ttl_ms))
        .await
        .expect("admit");
    assert!(admitted.iter().all(|a| a.error.is_none()), "{admitted:?}");
    // Read back from the masters.
    let health = fx.locks.health().await;
    let windows: Vec<Option<u64>> = health
        .groups
        .iter()
        .map(|group| group.policy.map(|policy| policy.write_window_ms))
        .collect();
    let lab_window = fx.lab.spec().policy().write_window_ms;
    assert_eq!(
        windows,
        vec![
            Some(lab_window),
            Some(quorumlock::protocol::Policy::write_window_for(10)),
            Some(lab_window),
            Some(lab_window),
            Some(lab_window),
        ]
    );
    for group in &health.groups {
        assert!(group.unsafe_settings.is_empty(), "{group:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admit_refuses_a_window_below_the_max_lag() {
    let fx = common::sentinel_lab().await;
    let config = fx.file("quorumlock.toml", &fx.topology.to_toml());
    fx.lab
        .run_on_master(1, &["CONFIG", "SET", "min-replicas-max-lag", "10"])
        .await
        .expect("CONFIG SET");
    // 5 s covers the other masters' lag of 1 s, not g2's 10 s.
    let (ok, text) = admit_command(&config, &["--write-window-ms", "5000", "--yes"]);
    assert!(!ok, "{text}");
    let refused = refused_lines(&text);
    assert_eq!(refused.len(), 1, "{text}");
    assert!(refused[0].starts_with("g2"), "{text}");
    assert!(refused[0].contains("min-replicas-max-lag 10 s"), "{text}");
    assert!(refused[0].contains("--allow-short-window"), "{text}");
    let health = fx.locks.health().await;
    assert_eq!(
        health.groups[1].policy.map(|p| p.write_window_ms),
        Some(fx.lab.spec().policy().write_window_ms),
        "the refused window reached g2"
    );
    // Another risk's flag does not accept this one.
    let (ok, text) = admit_command(
        &config,
        &[
            "--group",
            "g2",
            "--write-window-ms",
            "5000",
            "--allow-unreplicated-writes",
            "--yes",
        ],
    );
    assert!(!ok, "{text}");
    // Its own flag accepts it, and health shows the gap.
    let (ok, text) = admit_command(
        &config,
        &[
            "--group",
            "g2",
            "--write-window-ms",
            "5000",
            "--allow-short-window",
            "--yes",
        ],
    );
    assert!(ok, "{text}");
    let health = fx.locks.health().await;
    let g2 = &health.groups[1];
    assert_eq!(g2.policy.map(|p| p.write_window_ms), Some(5_000));
    assert!(
        g2.unsafe_settings
            .iter()
            .any(|s| s.contains("min-replicas-max-lag 10 s") && s.contains("12000")),
        "{g2:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admit_refuses_min_replicas_to_write_0_by_name() {
    let fx = common::sentinel_lab().await;
    let config = fx.file("quorumlock.toml", &fx.topology.to_toml());
    fx.lab
        .run_on_master(2, &["CONFIG", "SET", "min-replicas-to-write", "0"])
        .await
        .expect("CONFIG SET");
    let (ok, text) = admit_command(&config, &["--yes"]);
    assert!(!ok, "{text}");
    let refused = refused_lines(&text);
    assert_eq!(refused.len(), 1, "{text}");
    assert!(refused[0].starts_with("g3"), "{text}");
    assert!(refused[0].contains("min-replicas-to-write 0"), "{text}");
    assert!(refused[0].contains("--allow-unreplicated-writes"), "{text}");
    // Another risk's flag does not accept this one.
    let (ok, text) = admit_command(
        &config,
        &[
            "--group",
            "g3",
            "--write-window-ms",
            "60000",
            "--allow-short-window",
            "--yes",
        ],
    );
    assert!(!ok, "{text}");
    let (ok, text) = admit_command(
        &config,
        &["--group", "g3", "--allow-unreplicated-writes", "--yes"],
    );
    assert!(ok, "{text}");
    let health = fx.locks.health().await;
    assert!(
        health.groups[2]
            .unsafe_settings
            .iter()
            .any(|s| s.contains("min-replicas-to-write is 0")),
        "{:?}",
        health.groups[2]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_laggier_group_adopts_its_own_window_after_loss() {
    // Sentinel must not promote g2's replica, which holds the policy, while its master
    // restarts: that restart takes longer than the lab's 500 ms down-after on a busy machine.
    let mut fx = common::fixture(
        |spec| quorumlock::lab::LabSpec {
            down_after_ms: 60_000,
            ..spec
        },
        |topology| topology,
    )
    .await;
    fx.lab.restart(1).await.expect("restart g2 empty");
    // Set after the restart: the node's config file still has the lab's lag.
    fx.lab
        .run_on_master(1, &["CONFIG", "SET", "min-replicas-max-lag", "60"])
        .await
        .expect("CONFIG SET");
    let needed = quorumlock::protocol::Policy::write_window_for(60);
    let adopted = poll_until(Duration::from_secs(30), || async {
        if let Ok(lease) = fx.locks.acquire("adopted").ttl(1_000 * MS).await {
            let _ = lease.release().await;
        }
        fx.locks.health().await.groups[1].policy
    })
    .await
    .expect("g2 adopted a policy");
    assert!(
        adopted.write_window_ms >= needed,
        "g2 adopted {adopted:?}, below the {needed} ms its min-replicas-max-lag 60 needs"
    );
    let others = fx.locks.health().await.groups[0].policy;
    assert_eq!(
        others.map(|p| p.write_window_ms),
        Some(fx.lab.spec().policy().write_window_ms),
        "only g2 needs the larger window"
    );
}
