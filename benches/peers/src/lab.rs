//! The local lab every library runs against: the Redis lab and a 3-member etcd cluster, each
//! started in a temporary folder, each library connected and warmed up, the PIDs read, and
//! everything stopped again.

use quorumlock::Locks;
use quorumlock::lab::{Lab, LabSpec, NodeKind};
use rslock::LockManager;

use crate::BoxError;
use crate::etcd::EtcdLocks;
use crate::etcd_cluster::EtcdCluster;
use crate::floor::Floor;
use crate::libraries::{Library, LibraryKind};
use crate::options::Shape;

/// Sequential cycles per library before the first round: connections up, scripts loaded.
const WARMUP_CYCLES: usize = 1000;
/// etcd leases made before the first round: one per concurrent holder (64 tasks at
/// concurrency 64, 16 contenders), so that no round pays for granting them.
const ETCD_LEASES: usize = 80;

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

/// A running Redis lab and etcd cluster with all four libraries connected.
pub struct ConnectedLab {
    lab: Lab,
    /// The lab's files; removed when this is dropped, after the lab has stopped.
    _dir: tempfile::TempDir,
    /// Stopped by PID when dropped, so also when a round fails.
    pub etcd_cluster: EtcdCluster,
    pub quorum: Library,
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
            rs: Library::Rs(manager),
            floor: Library::Floor(floor),
            etcd: Library::Etcd(etcd),
            pids,
            etcd_pids,
        })
    }

    /// The connected client of one library.
    pub fn library(&self, kind: LibraryKind) -> &Library {
        match kind {
            LibraryKind::Quorum => &self.quorum,
            LibraryKind::Rs => &self.rs,
            LibraryKind::Floor => &self.floor,
            LibraryKind::Etcd => &self.etcd,
        }
    }

    /// The server processes a library talks to, for CPU accounting.
    pub fn pids_of(&self, kind: LibraryKind) -> &LabPids {
        match kind {
            LibraryKind::Etcd => &self.etcd_pids,
            LibraryKind::Quorum | LibraryKind::Rs | LibraryKind::Floor => &self.pids,
        }
    }

    /// SIGKILLs the master of one group (Sentinel promotes its replica).
    pub async fn kill_master(&mut self, group: usize) -> Result<(), BoxError> {
        self.lab.kill(group).await?;
        Ok(())
    }

    /// Closes every library's connections, then stops the lab's and etcd's processes.
    pub async fn stop(self) {
        self.quorum.close().await;
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
