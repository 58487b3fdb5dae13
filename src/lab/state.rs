//! The lab's files: the state file `<dir>/lab.json` that lets a later process attach to a
//! running lab (what it records about every process, relays included, and the shards of a
//! cluster lab; reading it back; refusing to start over a lab that still runs), and the file
//! helpers the rest of the lab writes through.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::process::{is_lab_process, is_relay_process};
use super::{LabError, LabSpec, NodeKind};

pub(super) const STATE_FILE: &str = "lab.json";

/// What `lab.json` remembers about one process.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct NodeRecord {
    pub(super) name: String,
    pub(super) group: Option<usize>,
    pub(super) kind: NodeKind,
    /// Where the process listens; the lab's own control connections use it.
    pub(super) port: u16,
    pub(super) pid: u32,
    pub(super) conf: PathBuf,
    pub(super) log: PathBuf,
    /// The relay process in front of a data node of a lab with links.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) relay: Option<RelayRecord>,
    /// Where a node of a cluster lab sits in its group's cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) cluster: Option<ClusterRecord>,
}

impl NodeRecord {
    pub(super) fn node_dir(&self) -> &Path {
        self.conf.parent().unwrap_or(Path::new("."))
    }

    /// The port replicas, Sentinels and clients use: the relay's, else the node's own.
    pub(super) fn public_port(&self) -> u16 {
        self.relay
            .as_ref()
            .map_or(self.port, |relay| relay.public_port)
    }
}

/// What `lab.json` remembers about a node of a cluster lab: the shard it was started in
/// (its primary may since be one of its replicas), its bus port and its cluster node ID,
/// which it keeps across restarts in its `nodes.conf`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct ClusterRecord {
    /// 0-based shard of its group.
    pub(super) shard: usize,
    pub(super) bus_port: u16,
    /// Empty until the lab has read it with `CLUSTER MYID`.
    pub(super) node_id: String,
}

/// What `lab.json` remembers about the relay (`quorumlock lab relay`) in front of a node.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct RelayRecord {
    /// Where it listens and forwards to the node's port.
    pub(super) public_port: u16,
    /// Where it takes control commands (cut, heal, latency, status).
    pub(super) control_port: u16,
    pub(super) pid: u32,
    pub(super) log: PathBuf,
}

/// The content of `lab.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct LabState {
    pub(super) spec: LabSpec,
    pub(super) nodes: Vec<NodeRecord>,
    /// Ports of the nodes currently stopped with SIGSTOP.
    pub(super) frozen: BTreeSet<u16>,
}

pub(super) fn io_error(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> LabError {
    let path = path.to_path_buf();
    move |source| LabError::Io {
        action,
        path,
        source,
    }
}

/// Writes through a temporary file so that a reader never sees half a state file.
pub(super) fn write_file(path: &Path, text: &str) -> Result<(), LabError> {
    let temporary = path.with_extension("tmp");
    fs::write(&temporary, text).map_err(io_error("write", &temporary))?;
    fs::rename(&temporary, path).map_err(io_error("write", path))
}

pub(super) fn remove_if_present(path: &Path) -> Result<(), LabError> {
    match fs::remove_file(path) {
        Err(error) if error.kind() != io::ErrorKind::NotFound => {
            Err(io_error("remove", path)(error))
        }
        _ => Ok(()),
    }
}

/// Creates the lab directory and makes it absolute, because Redis resolves the paths in its
/// config from its own working directory.
pub(super) fn prepare_dir(dir: &Path) -> Result<PathBuf, LabError> {
    fs::create_dir_all(dir).map_err(io_error("create lab directory", dir))?;
    dir.canonicalize()
        .map_err(io_error("resolve lab directory", dir))
}

pub(super) fn read_state(dir: &Path) -> Result<LabState, LabError> {
    let path = dir.join(STATE_FILE);
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            return Err(LabError::NoLab {
                dir: dir.to_path_buf(),
            });
        }
        Err(error) => return Err(io_error("read", &path)(error)),
    };
    serde_json::from_str(&text).map_err(|error| LabError::State {
        path,
        message: error.to_string(),
    })
}

/// Refuses to start over a lab whose processes still run: its state file would be
/// overwritten and those processes lost track of.
pub(super) fn refuse_if_running(dir: &Path) -> Result<(), LabError> {
    let state = match read_state(dir) {
        Ok(state) => state,
        // No lab, or a state file too damaged to name any process: nothing to protect.
        Err(LabError::NoLab { .. } | LabError::State { .. }) => return Ok(()),
        Err(error) => return Err(error),
    };
    let nodes = state
        .nodes
        .iter()
        .filter(|node| is_lab_process(node))
        .map(|node| node.pid);
    let relays = state
        .nodes
        .iter()
        .filter_map(|node| node.relay.as_ref())
        .filter(|relay| is_relay_process(relay))
        .map(|relay| relay.pid);
    let pids: Vec<u32> = nodes.chain(relays).collect();
    if pids.is_empty() {
        Ok(())
    } else {
        Err(LabError::AlreadyRunning {
            dir: dir.to_path_buf(),
            pids,
        })
    }
}
