//! The lab's processes: finding `redis-server`, picking and checking ports, spawning a node
//! (or the relay in front of it) with its log, explaining a process that died while starting,
//! and signals by PID, including the check that a PID still belongs to the process it was
//! recorded for.

use std::fs::{self, OpenOptions};
use std::io;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::confs::Slot;
use super::state::{NodeRecord, RelayRecord, io_error};
use super::{LabError, NodeKind};

/// The binary to run; installing it may take a while, so it runs off the async threads.
pub(super) async fn find_redis_server() -> Result<PathBuf, LabError> {
    tokio::task::spawn_blocking(crate::lab::install::redis_server)
        .await
        .map_err(|error| LabError::InvalidSpec(format!("redis-server lookup stopped: {error}")))?
        .map_err(LabError::from)
}

/// Holds every listener until all ports are read, so the OS cannot hand out one port twice.
pub(super) fn free_ports(count: usize) -> Result<Vec<u16>, LabError> {
    let listeners = (0..count)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<io::Result<Vec<_>>>()
        .map_err(io_error("bind a free port on", Path::new("127.0.0.1")))?;
    listeners
        .iter()
        .map(|listener| listener.local_addr().map(|address| address.port()))
        .collect::<io::Result<Vec<_>>>()
        .map_err(io_error("read a free port on", Path::new("127.0.0.1")))
}

/// Checks the whole block before anything is spawned, so a taken port leaves nothing behind.
/// `needed` is the size of the block, relays' ports included.
pub(super) fn ensure_free(slots: &[Slot], needed: usize) -> Result<(), LabError> {
    for slot in slots {
        let relay = slot.relay.iter().flat_map(|relay| {
            [
                (relay.public, format!("{}'s relay", slot.name)),
                (relay.control, format!("{}'s relay control", slot.name)),
            ]
        });
        for (port, node) in std::iter::once((slot.port, slot.name.clone())).chain(relay) {
            if TcpListener::bind(("127.0.0.1", port)).is_err() {
                return Err(LabError::PortTaken { port, node, needed });
            }
        }
    }
    Ok(())
}

pub(super) fn spawn(redis: &Path, record: &NodeRecord) -> Result<Child, LabError> {
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&record.log)
        .map_err(io_error("open log file", &record.log))?;
    let log_err = log
        .try_clone()
        .map_err(io_error("open log file", &record.log))?;
    let mut command = Command::new(redis);
    command.arg(&record.conf);
    if record.kind == NodeKind::Sentinel {
        command.arg("--sentinel");
    }
    let child = command
        .current_dir(record.node_dir())
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .spawn()
        .map_err(|source| LabError::Spawn {
            node: record.name.clone(),
            source,
        })?;
    tracing::debug!(node = %record.name, port = record.port, pid = child.id(), "lab: started");
    Ok(child)
}

/// Starts `<binary> lab relay` in front of a data node: it listens on the node's public port,
/// forwards to its real port and takes control commands on its control port. It runs in the
/// node's directory and outlives the process that started it, like the node.
pub(super) fn spawn_relay(
    binary: &Path,
    record: &NodeRecord,
    relay: &RelayRecord,
) -> Result<Child, LabError> {
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&relay.log)
        .map_err(io_error("open log file", &relay.log))?;
    let log_err = log
        .try_clone()
        .map_err(io_error("open log file", &relay.log))?;
    let child = Command::new(binary)
        .args(["lab", "relay", "--listen"])
        .arg(relay.public_port.to_string())
        .arg("--target")
        .arg(record.port.to_string())
        .arg("--control")
        .arg(relay.control_port.to_string())
        .current_dir(record.node_dir())
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .spawn()
        .map_err(|source| LabError::Spawn {
            node: format!("{}'s relay ({})", record.name, binary.display()),
            source,
        })?;
    tracing::debug!(
        node = %record.name,
        port = relay.public_port,
        target = record.port,
        pid = child.id(),
        "lab: relay started"
    );
    Ok(child)
}

/// Explains why a relay died while starting, from the last line of its log.
pub(super) fn relay_exit_error(
    record: &NodeRecord,
    relay: &RelayRecord,
    needed: usize,
) -> LabError {
    let log = fs::read_to_string(&relay.log).unwrap_or_default();
    if log.contains("Address already in use") {
        let port = if log.contains("control commands") {
            relay.control_port
        } else {
            relay.public_port
        };
        return LabError::PortTaken {
            port,
            node: format!("{}'s relay", record.name),
            needed,
        };
    }
    LabError::RelayExited {
        node: record.name.clone(),
        log: relay.log.clone(),
        last_log_line: last_line(&log),
    }
}

fn last_line(log: &str) -> String {
    log.lines()
        .rev()
        .find(|line| !line.trim().is_empty())
        .unwrap_or("(empty log)")
        .to_string()
}

/// Explains why a node died while starting, from the last line of its log.
pub(super) fn exit_error(record: &NodeRecord, needed: usize) -> LabError {
    let log = fs::read_to_string(&record.log).unwrap_or_default();
    if log.contains("Address already in use") {
        return LabError::PortTaken {
            port: record.port,
            node: record.name.clone(),
            needed,
        };
    }
    LabError::Exited {
        node: record.name.clone(),
        log: record.log.clone(),
        last_log_line: last_line(&log),
    }
}

pub(super) fn send_signal(pid: u32, signal: libc::c_int) -> io::Result<()> {
    // PID 0 and negative PIDs address whole process groups, and 1 is init: never those.
    let pid = libc::pid_t::try_from(pid)
        .ok()
        .filter(|&pid| pid > 1)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a single process"))?;
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    if unsafe { libc::kill(pid, signal) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether the PID still belongs to this node. kill(pid, 0) alone is not enough: the PID may
/// have been reused, and a zombie still exists. `/proc/<pid>/cmdline` is empty for a zombie
/// and names redis-server with our config path (before Redis retitles itself) or our port
/// (after, as `redis-server 127.0.0.1:<port>`).
pub(super) fn is_lab_process(record: &NodeRecord) -> bool {
    if send_signal(record.pid, 0).is_err() {
        return false;
    }
    let Ok(raw) = fs::read(format!("/proc/{}/cmdline", record.pid)) else {
        return false;
    };
    let cmdline = String::from_utf8_lossy(&raw);
    let port_suffix = format!(":{}", record.port);
    let conf = record.conf.display().to_string();
    cmdline.contains("redis-server")
        && cmdline
            .split(['\0', ' '])
            .any(|word| word.ends_with(&port_suffix) || word == conf)
}

/// Whether the PID still belongs to this relay: a live process whose command line is
/// `... lab relay --listen <public port> ... --control <control port>`.
pub(super) fn is_relay_process(relay: &RelayRecord) -> bool {
    if send_signal(relay.pid, 0).is_err() {
        return false;
    }
    let Ok(raw) = fs::read(format!("/proc/{}/cmdline", relay.pid)) else {
        return false;
    };
    let cmdline = String::from_utf8_lossy(&raw);
    let words: Vec<&str> = cmdline.split('\0').collect();
    let pair = |flag: &str, port: u16| {
        let port = port.to_string();
        words
            .windows(2)
            .any(|window| window[0] == flag && window[1] == port)
    };
    words.windows(2).any(|window| window == ["lab", "relay"])
        && pair("--listen", relay.public_port)
        && pair("--control", relay.control_port)
}
