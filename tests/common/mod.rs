//! Shared test support: one fixture for every lab-backed test (a lab in a temporary directory,
//! a connected client, the topology it was tuned to), plain clients to look at each master
//! directly, and the waits the tests share.
//!
//! Cleanup: the `Lab` kills every process it started, by PID, when it is dropped, so a test
//! that panics still leaves no redis-server behind. `Fixture` declares the lab before its
//! temporary directory, so the processes are gone before their directory is removed.

#![allow(dead_code)]

use std::future::Future;
use std::ops::Range;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use fred::prelude::*;
use quorumlock::lab::{Lab, LabSpec, NodeKind, NodeStatus};
use quorumlock::{Locks, Topology};
use tempfile::TempDir;

pub mod resp;

/// A running lab, its temporary directory, and a connected client.
pub struct Fixture {
    pub lab: Lab,
    pub locks: Locks,
    pub topology: Topology,
    dir: TempDir,
}

/// Five Sentinel-watched groups (master + replica), three Sentinels.
pub async fn sentinel_lab() -> Fixture {
    fixture(|spec| spec, |topology| topology).await
}

/// Five plain masters without replicas or Sentinels: for tests that freeze masters longer
/// than Sentinel's down-after and must not see a failover.
pub async fn plain_lab() -> Fixture {
    fixture(plain, |topology| topology).await
}

/// The lab every lab-backed test starts: `spec` shapes [`LabSpec::new`] (e.g. [`plain`]), and
/// `tune` the topology the client connects with (timeouts, retries, acknowledgements).
pub async fn fixture(
    spec: impl FnOnce(LabSpec) -> LabSpec,
    tune: impl FnOnce(Topology) -> Topology,
) -> Fixture {
    let dir = temp_dir();
    let lab = start_lab(spec(LabSpec::new(dir.path()))).await;
    let topology = tune(lab.topology());
    let locks = connect(topology.clone()).await;
    Fixture {
        lab,
        locks,
        topology,
        dir,
    }
}

/// The shape of [`plain_lab`], for [`fixture`]: plain masters, no replicas, no Sentinels.
pub fn plain(spec: LabSpec) -> LabSpec {
    LabSpec {
        replicas: 0,
        sentinels: 0,
        ..spec
    }
}

/// A temporary directory, removed when dropped.
pub fn temp_dir() -> TempDir {
    tempfile::tempdir().expect("temp dir")
}

/// Starts a lab (and says how long that took). For tests of the lab itself; every other test
/// takes a [`Fixture`].
pub async fn start_lab(spec: LabSpec) -> Lab {
    let started = Instant::now();
    let shape = format!("{} groups, {} Sentinels", spec.groups, spec.sentinels);
    let lab = Lab::start(spec).await.expect("lab starts");
    eprintln!(
        "Lab::start ({shape}) took {} ms",
        started.elapsed().as_millis()
    );
    lab
}

/// A client of `topology`. Connecting never fails on groups that are down or refuse it.
pub async fn connect(topology: Topology) -> Locks {
    Locks::connect(topology)
        .await
        .expect("connecting never fails on a group that is down or refuses the client")
}

impl Fixture {
    /// Another client of the lab, with the fixture's topology: its own connections,
    /// subscribers and keepalives.
    pub async fn client(&self) -> Locks {
        connect(self.topology.clone()).await
    }

    /// A path for a scratch file, in the fixture's temporary directory beside the lab's.
    pub fn path(&self, name: &str) -> PathBuf {
        let scratch = self.dir.path().join("scratch");
        std::fs::create_dir_all(&scratch).expect("scratch dir");
        scratch.join(name)
    }

    /// Writes a scratch file (a config file, say) and returns its path.
    pub fn file(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, contents).expect("write");
        path
    }

    /// Every group's index.
    pub fn groups(&self) -> Range<usize> {
        0..self.topology.groups.len()
    }

    /// A plain client to the current master of `group`.
    pub async fn master(&self, group: usize) -> Client {
        let node = self.lab.master_of(group).await.expect("master");
        let client = Builder::from_config(Config {
            server: ServerConfig::new_centralized("127.0.0.1", node.port),
            ..Default::default()
        })
        .with_performance_config(|p| p.default_command_timeout = Duration::from_secs(2))
        .build()
        .expect("client");
        client.init().await.expect("connect to master");
        client
    }

    /// Runs `command` with a plain client on the master of each group in `groups`, in order;
    /// returns what it returned for each.
    pub async fn on_masters<T>(
        &self,
        groups: Range<usize>,
        command: impl AsyncFn(&Client) -> T,
    ) -> Vec<T> {
        let mut results = Vec::new();
        for group in groups {
            let client = self.master(group).await;
            results.push(command(&client).await);
            let _ = client.quit().await;
        }
        results
    }

    /// The value of `key` on `group`'s master (None where absent).
    pub async fn value_on(&self, group: usize, key: &str) -> Option<String> {
        self.on_masters(group..group + 1, async |client| get(client, key).await)
            .await
            .remove(0)
    }

    /// The value of `key` on every group's master (None where absent).
    pub async fn values_of(&self, key: &str) -> Vec<Option<String>> {
        self.on_masters(self.groups(), async |client| get(client, key).await)
            .await
    }

    /// Deletes `key` on every group's master, behind the clients' backs.
    pub async fn delete_everywhere(&self, key: &str) {
        self.on_masters(self.groups(), async |client| {
            let _: i64 = client.del(key).await.expect("DEL");
        })
        .await;
    }

    /// Waits until `channel` has a subscriber on `group`'s master; false if none shows
    /// within `limit`.
    pub async fn subscribed(&self, group: usize, channel: &str, limit: Duration) -> bool {
        let master = self.master(group).await;
        let seen = eventually(limit, || async {
            let counts: Vec<fred::types::Value> = master
                .custom(
                    fred::types::CustomCommand::new_static("PUBSUB", None, false),
                    vec!["NUMSUB", channel],
                )
                .await
                .expect("PUBSUB NUMSUB");
            counts
                .get(1)
                .and_then(fred::types::Value::as_i64)
                .unwrap_or(0)
                > 0
        })
        .await;
        let _ = master.quit().await;
        seen
    }
}

async fn get(client: &Client, key: &str) -> Option<String> {
    client.get(key).await.expect("GET")
}

/// Polls `probe` every 50 ms until it yields a value or `limit` passes.
pub async fn poll_until<T, F, Fut>(limit: Duration, mut probe: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = probe().await {
            return Some(value);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls `check` every 50 ms until it returns true or `limit` passes; returns whether it did.
pub async fn eventually<F, Fut>(limit: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    poll_until(limit, || {
        let check = check();
        async move { check.await.then_some(()) }
    })
    .await
    .is_some()
}

/// Whether the quorum reports `resource` free within `limit` (a status that fails counts as
/// still held).
pub async fn released_within(locks: &Locks, resource: &str, limit: Duration) -> bool {
    eventually(limit, || async {
        !locks
            .status(resource)
            .await
            .map(|status| status.held)
            .unwrap_or(true)
    })
    .await
}

/// The lock key of `resource` under the default prefix.
pub fn lock_key(resource: &str) -> String {
    format!("ql:{{{resource}}}:lock")
}

/// The fence key of `resource` under the default prefix.
pub fn fence_key(resource: &str) -> String {
    format!("ql:{{{resource}}}:fence")
}

/// The release channel of `resource` under the default prefix.
pub fn released_channel(resource: &str) -> String {
    format!("ql:{{{resource}}}:released")
}

/// What the listing tests hold: the lock `api:deploy` (owner carol) and two permits of the
/// 3-permit semaphore `api:search` (owners worker-1 and worker-2, purpose crawl).
pub struct LockAndPermits {
    pub lock: quorumlock::Lease,
    pub permits: Vec<quorumlock::Lease>,
}

pub async fn hold_a_lock_and_two_permits(locks: &Locks) -> LockAndPermits {
    let lock = locks
        .acquire("api:deploy")
        .owner("carol")
        .await
        .expect("lock");
    let mut permits = Vec::new();
    for owner in ["worker-1", "worker-2"] {
        permits.push(
            locks
                .acquire_permit("api:search", 3)
                .ttl(Duration::from_secs(5))
                .owner(owner)
                .purpose("crawl")
                .await
                .expect("permit"),
        );
    }
    LockAndPermits { lock, permits }
}

/// The port of the node of `kind` in `shard` of `group` of a Cluster lab, as the lab started
/// it.
pub fn port_of(status: &[NodeStatus], group: usize, shard: usize, kind: NodeKind) -> u16 {
    status
        .iter()
        .find(|node| node.group == Some(group) && node.shard == Some(shard) && node.kind == kind)
        .map(|node| node.port)
        .unwrap_or_else(|| panic!("g{} has shard {shard} with a {kind:?}", group + 1))
}
