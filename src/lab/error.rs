//! The lab's one error type, worded for the person who has to fix what failed.

use super::relay::RelayError;
use super::state::STATE_FILE;
use std::io;
use std::path::PathBuf;

/// Why a lab operation failed, worded for the person who has to fix it.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error(transparent)]
    RedisServerMissing(#[from] crate::lab::install::InstallError),
    #[error("invalid lab settings: {0}")]
    InvalidSpec(String),
    #[error("invalid {field}: {reason}")]
    InvalidArgument { field: &'static str, reason: String },
    #[error(
        "this lab has no relays in front of its nodes, so its links cannot be cut or slowed; start the lab with links (`quorumlock lab up --links`, or LabSpec.links)"
    )]
    NoLinks,
    #[error("the relay of {node} (control port {port}) failed: {source}")]
    Relay {
        node: String,
        port: u16,
        source: RelayError,
    },
    #[error("the relay of {node} exited during start-up: {last_log_line} (full log: {log})")]
    RelayExited {
        node: String,
        log: PathBuf,
        last_log_line: String,
    },
    #[error("cannot create the lab's TLS certificates: {0}")]
    Certificates(String),
    #[error("the lab's TLS files cannot be used: {0}")]
    Tls(#[from] crate::ConfigError),
    #[error(
        "port {port} (for {node}) is already in use; pick another --base-port (this lab needs {needed} consecutive ports) or leave --base-port out to use free ports"
    )]
    PortTaken {
        port: u16,
        node: String,
        needed: usize,
    },
    #[error(
        "a lab is already running in {dir} (PIDs {pids:?}); stop it with `quorumlock lab down` or use another --lab-dir"
    )]
    AlreadyRunning { dir: PathBuf, pids: Vec<u32> },
    #[error("no lab in {dir} ({STATE_FILE} not found); start one with `quorumlock lab up`")]
    NoLab { dir: PathBuf },
    #[error(
        "lab state file {path} cannot be used: {message}; if no lab is running there, delete the file"
    )]
    State { path: PathBuf, message: String },
    #[error("cannot {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("cannot start redis-server for {node}: {source}")]
    Spawn { node: String, source: io::Error },
    #[error("redis-server for {node} exited during start-up: {last_log_line} (full log: {log})")]
    Exited {
        node: String,
        log: PathBuf,
        last_log_line: String,
    },
    #[error("lab not ready after {waited_ms} ms: {pending}; the logs are under {dir}")]
    NotReady {
        waited_ms: u128,
        pending: String,
        dir: PathBuf,
    },
    #[error(
        "group index {group} is out of range: this lab has {groups} groups, g1..g{groups} (indexes count from 0)"
    )]
    NoSuchGroup { group: usize, groups: usize },
    #[error(
        "shard index {shard} is out of range: each group of this lab has {shards} shards, s1..s{shards} (indexes count from 0)"
    )]
    NoSuchShard { shard: usize, shards: usize },
    #[error(
        "{group} is a Redis Cluster of {shards} shards, so it has no single master: name a shard (`--shard 1..{shards}`, or the lab's *_primary methods)"
    )]
    ShardRequired { group: String, shards: usize },
    #[error(
        "this lab's groups are not Redis Clusters, so they have no shards; start one with `quorumlock lab up --cluster`"
    )]
    NotCluster,
    #[error("cannot find the current master of {group}: {reason}; check `quorumlock lab status`")]
    NoMaster { group: String, reason: String },
    #[error("{command} on {node} failed: {reason}")]
    Command {
        node: String,
        command: String,
        reason: String,
    },
    #[error("cannot admit {node} to the vote: {reason}")]
    Admit { node: String, reason: String },
    #[error(
        "{node} (port {port}) is not running; if Sentinel has not promoted a replica yet, wait a moment, or bring the node back with `quorumlock lab restart {number}`"
    )]
    NotRunning {
        node: String,
        port: u16,
        number: usize,
    },
    #[error(
        "{node} (port {port}) is not running; if the cluster has not promoted a replica yet, wait a moment (that needs most of the group's primaries alive), or bring the node back with `quorumlock lab restart {group} --shard {shard}`"
    )]
    PrimaryNotRunning {
        node: String,
        port: u16,
        /// 1-based, as on the command line.
        group: usize,
        /// 1-based, as on the command line.
        shard: usize,
    },
    #[error("cannot signal {node} (PID {pid}): {source}")]
    Signal {
        node: String,
        pid: u32,
        source: io::Error,
    },
    #[error(
        "{node} (PID {pid}) is still running {waited_ms} ms after SIGKILL; check it with `ps -p {pid}`"
    )]
    StillRunning {
        node: String,
        pid: u32,
        waited_ms: u128,
    },
}
