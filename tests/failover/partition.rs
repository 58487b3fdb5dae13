//! Partitions and slow links against real Sentinels, through the relays a lab with links puts
//! in front of every master and replica: locks are served through the relays, a master cut
//! off from its clients times out and comes back when healed, a master cut off from its
//! replica and Sentinels is replaced while direct clients still reach it, and the split brain
//! that follows ("an isolated old master keeps granting") is closed by the write window.
//!
//! Every test starts its own lab; the lab kills its processes (relays included) by PID when
//! dropped, also when a test fails.

use crate::common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{Fixture, connect, eventually, fixture, lock_key, poll_until};
use fred::prelude::{Expiration, KeysInterface};
use quorumlock::lab::relay::LinkClass;
use quorumlock::lab::{LabError, LabSpec, Node};
use quorumlock::{Error, GroupConfig, Lease, Locks, Topology, Vote};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const MS: Duration = Duration::from_millis(1);

/// `spec` with a relay in front of every data node, run by this crate's binary.
fn with_links(spec: LabSpec) -> LabSpec {
    LabSpec {
        links: true,
        binary: Some(env!("CARGO_BIN_EXE_quorumlock").into()),
        ..spec
    }
}

fn vote_of(votes: &[quorumlock::GroupVote], group: &str) -> Vote {
    votes
        .iter()
        .find(|v| v.group == group)
        .map(|v| v.vote.clone())
        .unwrap_or(Vote::NotAwaited)
}

/// Acquires and releases `resource`; returns the release's votes, which wait for every
/// group, so they say what each group did.
async fn release_votes(locks: &Locks, resource: &str) -> Option<Vec<quorumlock::GroupVote>> {
    let lease = locks.acquire(resource).ttl(2_000 * MS).await.ok()?;
    lease.release().await.ok().map(|released| released.votes)
}

fn gone(pid: u32) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists()
}

/// The topology of a client still on the old side: g1 addresses `old` (its public port)
/// directly, the other groups follow Sentinel as usual.
fn addressing(topology: &Topology, old: &Node) -> Topology {
    let mut topology = topology.clone();
    topology.groups[0] = GroupConfig::direct("g1", &old.public_address());
    topology
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lab_with_links_serves_locks_through_relays() {
    let fx = fixture(with_links, |topology| topology).await;

    // Sentinel names the public ports: every client link goes through a relay.
    for group in fx.groups() {
        let master = fx.lab.master_of(group).await.expect("master");
        assert_ne!(master.public_port, master.port, "{master:?}");
    }
    let lease = fx.locks.acquire("relayed").await.expect("acquire");
    let granted = lease
        .votes()
        .iter()
        .filter(|v| v.vote == Vote::Granted)
        .count();
    assert!(granted >= 3, "{:?}", lease.votes());
    let released = lease.release().await.expect("release");
    assert!(
        released.votes.iter().all(|v| v.vote == Vote::Granted),
        "{:?}",
        released.votes
    );

    // Each master's relay carries its client, replica and Sentinel links.
    let status = fx.lab.status().await;
    assert_eq!(status.len(), 13);
    for node in &status {
        assert!(node.alive, "{node:?}");
        let Some(group) = node.group else {
            assert!(node.relay.is_none(), "Sentinels are not behind relays");
            continue;
        };
        let relay = node.relay.as_ref().expect("every data node has a relay");
        let state = relay.state.as_ref().expect("the relay answers");
        assert!(relay.alive && state.cut.is_empty(), "{node:?}");
        assert_eq!(relay.port, node.public_port);
        if node.role.as_deref() == Some("master") {
            assert!(
                state.clients >= 1 && state.replicas >= 1 && state.sentinels >= 1,
                "g{} master's relay: {state:?}",
                group + 1
            );
        } else {
            let master = fx.lab.master_of(group).await.expect("master");
            assert_eq!(node.replica_of, Some(master.public_port), "{node:?}");
        }
    }

    // The relays are lab processes like any other: listed, and gone with the lab.
    let pids = fx.lab.pids();
    assert_eq!(pids.len(), 13 + 10);
    drop(fx);
    for pid in pids {
        assert!(gone(pid), "PID {pid} survived dropping the lab");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lab_without_links_refuses_partitions() {
    let fx = fixture(common::plain, |topology| topology).await;
    let error = fx
        .lab
        .partition(0, LinkClass::Client)
        .await
        .expect_err("no relays");
    assert!(matches!(error, LabError::NoLinks), "{error:?}");
    assert!(error.to_string().contains("with links"), "{error}");
    assert!(matches!(fx.lab.heal(0).await, Err(LabError::NoLinks)));
    assert!(matches!(
        fx.lab.slow(0, 10 * MS, MS).await,
        Err(LabError::NoLinks)
    ));

    let dir = common::temp_dir();
    let spec = LabSpec {
        links: true,
        ..LabSpec::new(dir.path())
    };
    let error = quorumlock::lab::Lab::start(spec)
        .await
        .err()
        .expect("links without a binary");
    assert!(
        matches!(&error, LabError::InvalidSpec(message) if message.contains("binary")),
        "{error:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cutting_client_links_times_a_group_out_until_healed() {
    let fx = fixture(with_links, |topology| topology).await;
    let before = fx.lab.master_of(0).await.expect("master");
    assert_eq!(
        vote_of(
            &release_votes(&fx.locks, "cut-off").await.expect("lock"),
            "g1"
        ),
        Vote::Granted
    );

    let cut = fx
        .lab
        .partition(0, LinkClass::Client)
        .await
        .expect("partition");
    assert_eq!(cut.port, before.port);
    // The other four groups still make a majority; g1 answers nothing within the call
    // timeout: the call times out, or a call queued behind one that hangs is never sent.
    for attempt in 0..3 {
        let votes = release_votes(&fx.locks, "cut-off")
            .await
            .expect("four groups still lock");
        let vote = vote_of(&votes, "g1");
        let timed_out = match &vote {
            Vote::Timeout => true,
            Vote::Error { message } => message.contains("for the whole call timeout"),
            _ => false,
        };
        assert!(timed_out, "attempt {attempt}: g1 voted {vote:?}");
    }
    // Sentinel's links were not cut: no failover, and the lab still reaches the node.
    assert_eq!(fx.lab.master_of(0).await.expect("master").port, before.port);
    let status = fx.lab.status().await;
    let row = status
        .iter()
        .find(|node| node.port == before.port)
        .expect("listed");
    assert_eq!(row.role.as_deref(), Some("master"));
    let cut_classes = row
        .relay
        .as_ref()
        .and_then(|relay| relay.state.as_ref())
        .map(|state| state.cut.clone());
    assert_eq!(cut_classes, Some(vec!["clients".to_string()]));

    let healed_at = Instant::now();
    let healed = fx.lab.heal(0).await.expect("heal");
    assert_eq!(healed.len(), 2, "master and replica: {healed:?}");
    let back = eventually(Duration::from_secs(10), || async {
        release_votes(&fx.locks, "cut-off")
            .await
            .is_some_and(|votes| vote_of(&votes, "g1") == Vote::Granted)
    })
    .await;
    assert!(back, "g1 never voted again after the heal");
    eprintln!(
        "g1 voted again {} ms after the heal",
        healed_at.elapsed().as_millis()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cutting_a_masters_sentinel_links_promotes_its_replica() {
    // The unsafe shape on purpose: without min-replicas-to-write the old master goes on
    // taking writes once cut off from its replica.
    let fx = fixture(
        |spec| {
            with_links(LabSpec {
                min_replicas_max_lag_s: None,
                ..spec
            })
        },
        |topology| topology,
    )
    .await;
    let old = fx.lab.master_of(0).await.expect("master");
    fx.lab
        .partition(0, LinkClass::Replica)
        .await
        .expect("cut replica");
    fx.lab
        .partition(0, LinkClass::Sentinel)
        .await
        .expect("cut Sentinels");
    let cut_at = Instant::now();

    let promoted = poll_until(Duration::from_secs(20), || async {
        let master = fx.lab.master_of(0).await.ok()?;
        (master.port != old.port).then_some(master)
    })
    .await
    .expect("Sentinel promotes the replica within 20 s");
    eprintln!(
        "Sentinel promoted g1's replica {} ms after the cut",
        cut_at.elapsed().as_millis()
    );

    // Two masters now: the promoted replica, and the old one that nobody told.
    let status = fx.lab.status().await;
    let role_of = |port: u16| {
        status
            .iter()
            .find(|node| node.port == port)
            .and_then(|node| node.role.clone())
    };
    assert_eq!(role_of(promoted.port).as_deref(), Some("master"));
    assert_eq!(role_of(old.port).as_deref(), Some("master"));

    // A client that addresses the old master directly still locks through it.
    let direct = connect(addressing(&fx.topology, &old)).await;
    let votes = release_votes(&direct, "old-side")
        .await
        .expect("the old side still locks");
    assert_eq!(vote_of(&votes, "g1"), Vote::Granted, "{votes:?}");
    direct.close().await;

    let healed_at = Instant::now();
    fx.lab.heal(0).await.expect("heal");
    let rejoined = eventually(Duration::from_secs(20), || async {
        fx.lab.status().await.iter().any(|node| {
            node.port == old.port
                && node.role.as_deref() == Some("replica")
                && node.replica_of == Some(promoted.public_port)
        })
    })
    .await;
    assert!(
        rejoined,
        "the old master never rejoined as a replica of the promoted one"
    );
    eprintln!(
        "the old master became a replica {} ms after the heal",
        healed_at.elapsed().as_millis()
    );
    assert_eq!(
        fx.lab.master_of(0).await.expect("master").port,
        promoted.port
    );
}

/// How long one PING takes through `port`, on a fresh connection.
async fn ping_time(port: u16) -> Duration {
    let started = Instant::now();
    let mut stream = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    stream.write_all(b"PING\r\n").await.expect("write");
    let mut answer = [0u8; 7];
    tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut answer))
        .await
        .expect("an answer within 5 s")
        .expect("read");
    assert_eq!(&answer, b"+PONG\r\n");
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_client_links_delay_answers_until_healed() {
    let fx = fixture(|spec| with_links(common::plain(spec)), |topology| topology).await;
    let master = fx.lab.master_of(0).await.expect("master");
    assert!(ping_time(master.public_port).await < Duration::from_millis(150));

    let slowed = fx.lab.slow(0, 150 * MS, 20 * MS).await.expect("slow");
    assert_eq!(slowed.port, master.port);
    // 150 ± 20 ms each way.
    assert!(ping_time(master.public_port).await >= Duration::from_millis(260));
    // The lab's own port is never slowed, and the other groups are untouched.
    assert!(ping_time(master.port).await < Duration::from_millis(150));
    let other = fx.lab.master_of(1).await.expect("g2");
    assert!(ping_time(other.public_port).await < Duration::from_millis(150));
    let status = fx.lab.status().await;
    let state = status
        .iter()
        .find(|node| node.port == master.port)
        .and_then(|node| node.relay.clone())
        .and_then(|relay| relay.state)
        .expect("the relay answers");
    assert_eq!((state.latency_ms, state.jitter_ms), (150, 20));
    let error = fx
        .lab
        .slow(0, Duration::from_secs(3_600), MS)
        .await
        .expect_err("an hour is above the relay's limit");
    assert!(
        matches!(error, LabError::InvalidArgument { field: "delay", .. }),
        "{error:?}"
    );

    fx.lab.heal(0).await.expect("heal");
    assert!(ping_time(master.public_port).await < Duration::from_millis(150));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_node_keeps_its_relay_and_cuts() {
    let mut fx = fixture(|spec| with_links(common::plain(spec)), |topology| topology).await;
    let relay_pid = |status: &[quorumlock::lab::NodeStatus], port: u16| {
        status
            .iter()
            .find(|node| node.port == port)
            .and_then(|node| node.relay.as_ref())
            .map(|relay| relay.pid)
    };
    let before = fx.lab.master_of(0).await.expect("master");
    let relay_before = relay_pid(&fx.lab.status().await, before.port).expect("relay");
    fx.lab
        .partition(0, LinkClass::Replica)
        .await
        .expect("partition");

    let restarted = fx.lab.restart(0).await.expect("restart");
    assert_eq!(restarted.len(), 1);
    assert_ne!(restarted[0].pid, before.pid);
    assert_eq!(restarted[0].public_port, before.public_port);
    let status = fx.lab.status().await;
    assert_eq!(relay_pid(&status, before.port), Some(relay_before));
    let node = status
        .iter()
        .find(|node| node.port == before.port)
        .expect("listed");
    let cut = node
        .relay
        .as_ref()
        .and_then(|relay| relay.state.as_ref())
        .map(|state| state.cut.clone());
    assert_eq!(cut, Some(vec!["replica".to_string()]));
    // Clients reach the new process through the same relay: it answers (it came back empty,
    // so it sits out, but an answer is not a timeout).
    assert!(ping_time(before.public_port).await < Duration::from_secs(1));
    let votes = release_votes(&fx.locks, "after-restart")
        .await
        .expect("the other four groups lock");
    assert!(
        !matches!(vote_of(&votes, "g1"), Vote::Timeout | Vote::Error { .. }),
        "{votes:?}"
    );
}

/// A lab driven through the `quorumlock` binary; `lab down` on drop, so a failed test
/// leaves nothing running.
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

    /// Runs a command that must succeed; returns its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let output = self.run(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{args:?} failed: {stderr}");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Runs a command that must fail as a usage error; returns its stderr.
    fn usage_error(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {output:?}");
        String::from_utf8_lossy(&output.stderr).into_owned()
    }
}

impl Drop for CommandLineLab {
    fn drop(&mut self) {
        let _ = self.run(&["lab", "down"]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_lab_with_links_obeys_partition_heal_and_slow() {
    let cli = CommandLineLab {
        dir: common::temp_dir(),
    };
    let up = cli.ok(&["lab", "up", "--links", "--groups", "3"]);
    assert!(up.contains("a relay in front of every node"), "{up}");

    // `lab up` has exited; its relays run on, recorded with the nodes.
    let lab = quorumlock::lab::Lab::open(cli.dir.path()).expect("attach");
    let pids = lab.pids();
    assert_eq!(pids.len(), 3 * 2 + 3 + 3 * 2);
    let status = lab.status().await;
    let relays: Vec<_> = status
        .iter()
        .filter_map(|node| node.relay.clone())
        .collect();
    assert_eq!(relays.len(), 6);
    assert!(
        relays
            .iter()
            .all(|relay| relay.alive && relay.state.is_some()),
        "{relays:?}"
    );

    let cut = cli.ok(&[
        "lab",
        "partition",
        "1",
        "--from",
        "replica",
        "--from",
        "sentinels",
    ]);
    assert!(cut.contains("replica, sentinels"), "{cut}");
    cli.ok(&["lab", "partition", "2", "--from", "clients,replica"]);
    cli.ok(&["lab", "slow", "3", "--delay-ms", "50", "--jitter-ms", "10"]);
    let table = cli.ok(&["lab", "status"]);
    assert!(table.contains("cut: replica,sentinels"), "{table}");
    assert!(table.contains("cut: clients,replica"), "{table}");
    assert!(table.contains("clients +50±10 ms"), "{table}");
    let json: serde_json::Value =
        serde_json::from_str(&cli.ok(&["--json", "lab", "status"])).expect("JSON status");
    let g1_master = &json["nodes"][0];
    assert_eq!(g1_master["name"], "g1-master");
    assert_eq!(
        g1_master["relay"]["state"]["cut"],
        serde_json::json!(["replica", "sentinels"])
    );
    assert_ne!(g1_master["port"], g1_master["public_port"]);

    // Bad input names the field.
    assert!(
        cli.usage_error(&["lab", "partition", "1", "--from", "masters"])
            .contains("--from")
    );
    assert!(
        cli.usage_error(&["lab", "partition", "1"])
            .contains("--from")
    );
    assert!(
        cli.usage_error(&["lab", "partition", "9", "--from", "clients"])
            .contains("GROUP")
    );
    assert!(cli.usage_error(&["lab", "heal", "0"]).contains("GROUP"));
    let too_slow = cli.usage_error(&["lab", "slow", "1", "--delay-ms", "700000"]);
    assert!(too_slow.contains("--delay-ms"), "{too_slow}");
    // The relay subcommand is for the lab itself.
    let help = cli.ok(&["lab", "--help"]);
    assert!(
        help.contains("partition") && !help.contains("\n  relay "),
        "{help}"
    );

    for group in ["1", "2", "3"] {
        cli.ok(&["lab", "heal", group]);
    }
    let table = cli.ok(&["lab", "status"]);
    assert_eq!(table.matches("nothing cut").count(), 6, "{table}");
    assert!(!table.contains("clients +"), "{table}");

    cli.ok(&["lab", "down"]);
    // Orphans of `lab up`: init reaps them a moment after they die.
    let all_gone = eventually(Duration::from_secs(5), || async {
        pids.iter().all(|&pid| gone(pid))
    })
    .await;
    assert!(all_gone, "a PID of {pids:?} survived `lab down`");
}

/// What one run of the split-brain scenario saw, in ms after the cut.
#[derive(Debug)]
struct SplitBrain {
    /// The policy's write window: how long the old master may take writes after the cut.
    write_window_ms: u64,
    /// Sentinel names the promoted replica.
    promoted_ms: u128,
    /// The last renewal the old side (O) got; its lease is valid until `o_valid_until_ms`.
    o_last_renewal_ms: u128,
    o_valid_until_ms: u128,
    /// Why O's renewals stopped (`None`: they never failed before the scenario ended).
    o_stopped_by: Option<String>,
    /// The promoted replica's first answer to S (quarantined, with how long it had left).
    s_first_quarantine: Option<(u128, u64)>,
    /// S's first grant: when its acquire returned the lease.
    s_granted_ms: Option<u128>,
    /// S got its lease while O's was still valid.
    overlap: bool,
}

const RESOURCE: &str = "split-brain";
const LEASE_TTL: Duration = Duration::from_millis(3_000);
/// How often O renews: often enough that its last renewal is close to the old master's last
/// accepted write.
const RENEW_EVERY: Duration = Duration::from_millis(150);

/// g1's master is cut off from its replicas and Sentinels. O, a client still on the old side
/// (g1 addressed directly at the old master), holds a lease on old g1 + g2 + g3 (g4 and g5
/// refuse it: another holder's lock sits there) and renews it for as long as the old master
/// takes writes, so its lease is as late as the old master allows. S follows Sentinel and
/// tries to take the same lock from the moment of the cut, so its first touch of the
/// promoted replica starts that replica's quarantine as early as possible. S can win on the
/// promoted g1 + g4 + g5 once that quarantine is over.
///
/// Two replicas per group: with `min-replicas-to-write 1` and a single replica, the promoted
/// replica would have no replica of its own until the old master rejoins and would refuse
/// every write, so S could never win on it and the test would pass for another reason than
/// the write window.
async fn split_brain(min_replicas_max_lag_s: Option<u64>) -> SplitBrain {
    let fx: Fixture = fixture(
        |spec| {
            with_links(LabSpec {
                replicas: 2,
                max_ttl_ms: LEASE_TTL.as_millis() as u64,
                min_replicas_max_lag_s,
                ..spec
            })
        },
        |topology| topology,
    )
    .await;
    let policy = fx.lab.spec().policy();
    eprintln!(
        "policy: max_ttl_ms {}, write_window_ms {}",
        policy.max_ttl_ms, policy.write_window_ms
    );
    let old = fx.lab.master_of(0).await.expect("g1's master");
    let o_side = connect(addressing(&fx.topology, &old)).await;
    let s_side = &fx.locks;

    // Another holder's lock on g4 and g5, gone a moment after O's grant.
    let planted = fx
        .on_masters(3..5, async |client| {
            let set: Option<String> = client
                .set(
                    lock_key(RESOURCE),
                    "another-holder\n",
                    Some(Expiration::PX(800)),
                    None,
                    false,
                )
                .await
                .expect("plant");
            set
        })
        .await;
    assert!(planted.iter().all(Option::is_some), "{planted:?}");
    let mut o_lease: Lease = o_side
        .acquire(RESOURCE)
        .ttl(LEASE_TTL)
        .await
        .expect("O locks old g1 + g2 + g3");
    let o_groups: Vec<&str> = o_lease
        .votes()
        .iter()
        .filter(|v| v.vote == Vote::Granted)
        .map(|v| v.group.as_str())
        .collect();
    assert_eq!(o_groups, ["g1", "g2", "g3"], "{:?}", o_lease.votes());

    fx.lab
        .partition(0, LinkClass::Replica)
        .await
        .expect("cut replicas");
    fx.lab
        .partition(0, LinkClass::Sentinel)
        .await
        .expect("cut Sentinels");
    let cut = Instant::now();
    let since = |instant: Instant| instant.saturating_duration_since(cut).as_millis();
    // Long enough for the promoted replica's quarantine (at most 6 s here) after a slow
    // failover, short enough for the test's budget.
    let end = cut + Duration::from_secs(16);

    let s_done = AtomicBool::new(false);
    let renewals = async {
        let mut last_renewal = o_lease.acquired_at();
        let mut stopped_by = None;
        while Instant::now() < end && !s_done.load(Ordering::Relaxed) {
            tokio::time::sleep(RENEW_EVERY).await;
            let started = Instant::now();
            match o_lease.extend(LEASE_TTL).await {
                Ok(_) => last_renewal = started,
                Err(error) => {
                    stopped_by = Some(format!(
                        "{error}; g1 said {:?}",
                        vote_of(error.votes(), "g1")
                    ));
                    break;
                }
            }
            if o_lease.valid_until() < started {
                break;
            }
        }
        (last_renewal, o_lease.valid_until(), stopped_by)
    };
    let promotion = poll_until(Duration::from_secs(15), || async {
        let master = fx.lab.master_of(0).await.ok()?;
        (master.port != old.port).then(Instant::now)
    });
    let contender = async {
        let mut first_quarantine = None;
        loop {
            match s_side.acquire(RESOURCE).ttl(LEASE_TTL).await {
                Ok(lease) => {
                    s_done.store(true, Ordering::Relaxed);
                    return (Some((lease, Instant::now())), first_quarantine);
                }
                Err(error) => {
                    if let (None, Vote::Quarantined { remaining_ms }) =
                        (first_quarantine, vote_of(error.votes(), "g1"))
                    {
                        first_quarantine = Some((Instant::now(), remaining_ms));
                    }
                    assert!(
                        matches!(error, Error::Held { .. } | Error::Unavailable { .. }),
                        "{error}"
                    );
                }
            }
            if Instant::now() >= end {
                return (None, first_quarantine);
            }
            tokio::time::sleep(50 * MS).await;
        }
    };
    let ((o_last_renewal, o_valid_until, o_stopped_by), promoted, (s_lease, s_quarantine)) =
        tokio::join!(renewals, promotion, contender);
    let promoted = promoted.expect("Sentinel promoted a replica of g1");
    // O's lease is left to expire where it stands, as a partitioned client's would.
    let o_lease_fence = o_lease.detach().fencing_token;
    // S relies on the lock from the moment its acquire returns.
    let overlap = s_lease
        .as_ref()
        .is_some_and(|(_, returned)| *returned < o_valid_until);
    if let Some((lease, _)) = &s_lease {
        assert!(
            lease.fencing_token() > o_lease_fence,
            "S's fencing token must be above O's"
        );
    }
    let outcome = SplitBrain {
        write_window_ms: policy.write_window_ms,
        promoted_ms: since(promoted),
        o_last_renewal_ms: since(o_last_renewal),
        o_valid_until_ms: since(o_valid_until),
        o_stopped_by,
        s_first_quarantine: s_quarantine.map(|(at, left)| (since(at), left)),
        s_granted_ms: s_lease.as_ref().map(|(_, returned)| since(*returned)),
        overlap,
    };
    eprintln!("split brain, min_replicas_max_lag_s {min_replicas_max_lag_s:?}: {outcome:#?}");
    o_side.close().await;
    outcome
}

impl SplitBrain {
    /// When the promoted replica votes at the earliest: S's first touch started its
    /// quarantine, which had this long left.
    fn promoted_votes_from_ms(&self) -> u128 {
        let (seen, left) = self
            .s_first_quarantine
            .expect("S met the promoted replica in its quarantine");
        seen + u128::from(left)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_master_stops_before_the_new_one_votes() {
    let run = split_brain(Some(1)).await;
    assert!(
        !run.overlap,
        "S held the lock while O's lease from the old master was still valid: {run:#?}"
    );
    // Why: the old master took its last write within the write window, and the promoted
    // replica's quarantine (max TTL + write window) outlasts every lease it granted.
    assert!(
        run.o_last_renewal_ms <= u128::from(run.write_window_ms),
        "the old master took writes beyond the write window: {run:#?}"
    );
    assert!(
        run.promoted_votes_from_ms() >= run.o_valid_until_ms,
        "the promoted replica would vote while O's lease is valid: {run:#?}"
    );
    // The scenario really happened: O held a lease across the promotion, the old master
    // refused its renewals once it had no replica left, and S won afterwards.
    assert!(
        run.o_valid_until_ms > run.promoted_ms,
        "O's lease ran out before the promotion; nothing was tested: {run:#?}"
    );
    let stopped = run.o_stopped_by.as_deref().unwrap_or_default();
    assert!(
        stopped.contains("NOREPLICAS"),
        "the old master should refuse O's renewals: {run:#?}"
    );
    let granted = run.s_granted_ms.expect("S locks once O's lease is over");
    assert!(granted >= run.o_valid_until_ms, "{run:#?}");
}

/// The same scenario without the fix (no `min-replicas-to-write`, no write window in the
/// policy): the old master takes O's renewals for as long as the partition lasts, the
/// promoted replica votes one `max_ttl_ms` after S's first touch, and S wins on the promoted
/// g1 + g4 + g5 while O still holds old g1 + g2 + g3. This is the failure the fix prevents; if
/// it ever stops overlapping, the test above no longer shows anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_write_window_an_isolated_master_grants() {
    let run = split_brain(None).await;
    assert_eq!(run.o_stopped_by, None, "{run:#?}");
    assert!(
        run.promoted_votes_from_ms() < run.o_valid_until_ms,
        "the promoted replica's quarantine (max TTL only) should end while O renews: {run:#?}"
    );
    assert!(
        run.overlap,
        "without the fix S should win while O's lease is valid: {run:#?}"
    );
}
