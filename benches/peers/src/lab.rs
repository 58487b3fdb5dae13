//! The local lab every library runs against: the Redis lab and a 3-member etcd cluster, each
//! started in a temporary folder, each library connected and warmed up, the PIDs read, and
//! everything stopped again. In the product's shape a second quorumlock client uses its own
//! key prefix, whose policy the masters hold in acknowledged mode.

use std::time::{Duration, Instant};

use quorumlock::lab::{Lab, LabSpec, NodeKind};
use quorumlock::{Admission, AdmitOptions, Locks};
use rslock::LockManager;

use crate::BoxError;
use crate::etcd::EtcdLocks;
use crate::etcd_cluster::EtcdCluster;
use crate::floor::Floor;
use crate::libraries::{Library, LibraryKind, TTL};
use crate::options::Shape;

/// Sequential cycles per library before the first round: connections up, scripts loaded.
const WARMUP_CYCLES: usize = 1000;
/// etcd leases made before the first round: one per concurrent holder (64 tasks at
/// concurrency 64, 16 contenders), so that no round pays for granting them.
const ETCD_LEASES: usize = 80;
/// The key prefix of quorumlock in acknowledged mode: its policy (`qa:policy`) is apart from
/// the default prefix's, so both modes run on the same masters.
const ACKED_PREFIX: &str = "qa";
/// How long a group brought back after a kill may take to have its replica in sync again.
const REJOIN_TIMEOUT: Duration = Duration::from_secs(30);

/// The lab's PIDs by the role they were started in. For etcd, `masters` are its members.
pub struct LabPids {
    pub masters: Vec<u32>,
    pub replicas: Vec<u32>,
    pub sentinels: Vec<u32>,
}

impl LabPids {
    async fn of(lab: &Lab) -> LabPids {
        let mut pids = LabPids {
            masters: Vec::new(),
            replicas: Vec::new(),
            sentinels: Vec::new(),
        };
        for node in lab.status().await {
            match node.kind {
                NodeKind::Master => pids.masters.push(node.pid),
                NodeKind::Replica => pids.replicas.push(node.pid),
                NodeKind::Sentinel => pids.sentinels.push(node.pid),
            }
        }
        pids
    }

    fn of_etcd(cluster: &EtcdCluster) -> LabPids {
        LabPids {
            masters: cluster.pids(),
            replicas: Vec::new(),
            sentinels: Vec::new(),
        }
    }
}

/// A running Redis lab and etcd cluster with every library connected.
pub struct ConnectedLab {
    lab: Lab,
    /// The lab's files; removed when this is dropped, after the lab has stopped.
    _dir: tempfile::TempDir,
    /// Stopped by PID when dropped, so also when a round fails.
    pub etcd_cluster: EtcdCluster,
    pub quorum: Library,
    /// quorumlock in acknowledged mode; only in the product's shape (the plain shape has no
    /// replica to acknowledge).
    pub quorum_acked: Option<Library>,
    pub rs: Library,
    pub floor: Library,
    pub etcd: Library,
    pub pids: LabPids,
    pub etcd_pids: LabPids,
}

impl ConnectedLab {
    /// Starts a lab of the given shape and the etcd cluster, and connects every library.
    pub async fn start(shape: Shape) -> Result<ConnectedLab, BoxError> {
        let etcd_cluster = EtcdCluster::start().await?;
        let etcd = EtcdLocks::connect(&etcd_cluster.endpoints(), ETCD_LEASES).await?;
        let dir = tempfile::tempdir()?;
        let mut spec = LabSpec::new(dir.path());
        if shape == Shape::Plain {
            spec.replicas = 0;
            spec.sentinels = 0;
        }
        let lab = Lab::start(spec).await?;
        let locks = Locks::connect(lab.topology()).await?;
        let quorum_acked = if shape == Shape::Sentinel {
            Some(Library::QuorumAcked(connect_acknowledged(&lab).await?))
        } else {
            None
        };
        let mut ports = Vec::new();
        for group in 0..lab.spec().groups {
            ports.push(lab.master_of(group).await?.port);
        }
        // rslock and the floor talk to the masters directly; only quorumlock knows the groups.
        let uris: Vec<String> = ports
            .iter()
            .map(|port| format!("redis://127.0.0.1:{port}"))
            .collect();
        let manager = LockManager::new(uris);
        let floor = Floor::connect(&ports).await?;
        let pids = LabPids::of(&lab).await;
        let etcd_pids = LabPids::of_etcd(&etcd_cluster);
        Ok(ConnectedLab {
            lab,
            _dir: dir,
            etcd_cluster,
            quorum: Library::Quorum(locks),
            quorum_acked,
            rs: Library::Rs(manager),
            floor: Library::Floor(floor),
            etcd: Library::Etcd(etcd),
            pids,
            etcd_pids,
        })
    }

    /// The connected client of one library; `None` for acknowledged mode in the plain shape.
    pub fn library(&self, kind: LibraryKind) -> Option<&Library> {
        match kind {
            LibraryKind::Quorum => Some(&self.quorum),
            LibraryKind::QuorumAcked => self.quorum_acked.as_ref(),
            LibraryKind::Rs => Some(&self.rs),
            LibraryKind::Floor => Some(&self.floor),
            LibraryKind::Etcd => Some(&self.etcd),
        }
    }

    /// Every connected library, in the order of the first round.
    pub fn libraries(&self) -> Vec<&Library> {
        let mut all = vec![&self.quorum];
        all.extend(self.quorum_acked.as_ref());
        all.extend([&self.rs, &self.floor, &self.etcd]);
        all
    }

    /// The server processes a library talks to, for CPU accounting.
    pub fn pids_of(&self, kind: LibraryKind) -> &LabPids {
        match kind {
            LibraryKind::Etcd => &self.etcd_pids,
            LibraryKind::Quorum
            | LibraryKind::QuorumAcked
            | LibraryKind::Rs
            | LibraryKind::Floor => &self.pids,
        }
    }

    /// SIGKILLs the master of one group (Sentinel promotes its replica).
    pub async fn kill_master(&mut self, group: usize) -> Result<(), BoxError> {
        self.lab.kill(group).await?;
        Ok(())
    }

    /// Starts a killed master of `group` again as a replica of the promoted one, and waits
    /// until acknowledged mode counts the group's votes again: its new master has its replica
    /// online and votes. Until then that group refuses every vote (`replicas_missing`).
    pub async fn rejoin_acknowledged(&mut self, group: usize) -> Result<Duration, BoxError> {
        let Some(Library::QuorumAcked(locks)) = &self.quorum_acked else {
            return Err("no quorumlock client in acknowledged mode on this lab".into());
        };
        let started = Instant::now();
        self.lab.restart(group).await?;
        // Sentinel would convert the old master only some seconds later.
        self.lab.rejoin(group).await?;
        let resource = format!("peers:rejoin:{}", std::process::id());
        loop {
            let health = locks.health().await;
            let state = health.groups.get(group);
            match state {
                Some(g) if g.votes() && g.admission == Admission::Voting => {
                    return Ok(started.elapsed());
                }
                // The promoted master has not been asked to vote since its promotion: a
                // grant makes it take over its old master's record and vote.
                Some(g) if g.votes() => {
                    if let Ok(lease) = locks.acquire(&resource).ttl(TTL).await {
                        let _ = lease.release().await;
                    }
                }
                _ => {}
            }
            if started.elapsed() > REJOIN_TIMEOUT {
                let state = state.map(|g| (g.admission.clone(), g.replicas_missing()));
                return Err(format!(
                    "group {group} did not vote again in acknowledged mode within {} s after its old master rejoined: admission and missing replicas {state:?}",
                    REJOIN_TIMEOUT.as_secs()
                )
                .into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Closes every library's connections, then stops the lab's and etcd's processes.
    pub async fn stop(self) {
        self.quorum.close().await;
        if let Some(acked) = self.quorum_acked {
            acked.close().await;
        }
        self.rs.close().await;
        self.floor.close().await;
        self.etcd.close().await;
        // Dropping the cluster stops its members by PID.
        drop(self.etcd_cluster);
        if let Err(error) = self.lab.stop().await {
            eprintln!("warning: lab did not stop cleanly: {error}");
        }
    }
}

/// A quorumlock client under `ACKED_PREFIX`, its masters admitted in acknowledged mode: each
/// master's policy names the replicas it has now, and every grant waits for all of them.
async fn connect_acknowledged(lab: &Lab) -> Result<Locks, BoxError> {
    let mut topology = lab.topology();
    topology.key_prefix = ACKED_PREFIX.to_string();
    let locks = Locks::connect(topology).await?;
    let options = AdmitOptions {
        acknowledged: Some(true),
        ..AdmitOptions::new(lab.spec().max_ttl_ms)
    };
    for admission in locks.admit(&options).await? {
        let acked = admission.policy.map_or(0, |policy| policy.acked_replicas);
        if let Some(error) = admission.error {
            return Err(format!(
                "admitting {} in acknowledged mode: {error}",
                admission.group
            )
            .into());
        }
        if acked == 0 {
            return Err(format!(
                "{} was admitted, but its policy is not in acknowledged mode",
                admission.group
            )
            .into());
        }
    }
    Ok(locks)
}

/// Sequential acquire+release cycles on a few resources, results ignored: the first cycles
/// pay for connections and script loads, which no round should measure.
pub async fn warm_up(library: &Library, prefix: &str) {
    for i in 0..WARMUP_CYCLES {
        if let Ok(held) = library
            .try_acquire(&format!("{prefix}:warm:{}", i % 8))
            .await
        {
            let _ = library.release(held).await;
        }
    }
}
