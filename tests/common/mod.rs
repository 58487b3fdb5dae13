//! Shared test support: a lab per test, and plain clients to look at each master directly.

#![allow(dead_code)]

use std::time::Duration;

use fred::prelude::*;
use quorumlock::lab::{Lab, LabSpec};
use quorumlock::{Locks, Topology};

/// A running lab, its temporary directory, and a connected client.
pub struct Fixture {
    pub lab: Lab,
    pub locks: Locks,
    pub topology: Topology,
    _dir: tempfile::TempDir,
}

/// Five Sentinel-watched groups (master + replica), three Sentinels.
pub async fn sentinel_lab() -> Fixture {
    fixture(|spec| spec, |t| t).await
}

/// Five plain masters without replicas or Sentinels: for tests that freeze masters longer
/// than Sentinel's down-after and must not see a failover.
pub async fn plain_lab() -> Fixture {
    fixture(
        |mut spec| {
            spec.replicas = 0;
            spec.sentinels = 0;
            spec
        },
        |t| t,
    )
    .await
}

pub async fn fixture(
    spec: impl FnOnce(LabSpec) -> LabSpec,
    tune: impl FnOnce(Topology) -> Topology,
) -> Fixture {
    let dir = tempfile::tempdir().expect("temp dir");
    let lab = Lab::start(spec(LabSpec::new(dir.path())))
        .await
        .expect("lab starts");
    let topology = tune(lab.topology());
    let locks = Locks::connect(topology.clone()).await.expect("connect");
    Fixture {
        lab,
        locks,
        topology,
        _dir: dir,
    }
}

impl Fixture {
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

    /// The value of `key` on every group's master (None where absent).
    pub async fn values_of(&self, key: &str) -> Vec<Option<String>> {
        let mut values = Vec::new();
        for group in 0..self.topology.groups.len() {
            let client = self.master(group).await;
            values.push(client.get(key).await.expect("GET"));
            let _ = client.quit().await;
        }
        values
    }
}

/// The lock key of `resource` under the default prefix.
pub fn lock_key(resource: &str) -> String {
    format!("ql:{{{resource}}}:lock")
}

/// The fence key of `resource` under the default prefix.
pub fn fence_key(resource: &str) -> String {
    format!("ql:{{{resource}}}:fence")
}
