//! A 3-member etcd cluster on 127.0.0.1, from Debian's `etcd-server` package: started in a
//! temporary folder, stopped by PID when it is dropped, and its leader found and killed for
//! the failover phase.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use etcd_client::Client;

use crate::BoxError;

/// Members of the cluster: a majority survives one of them dying.
const MEMBERS: usize = 3;
/// How long the cluster may take to elect a leader and answer on every member.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a member may take to exit after SIGTERM before it is SIGKILLed.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// One running etcd process.
struct Member {
    name: String,
    client_port: u16,
    /// None once the process has been killed and reaped.
    child: Option<Child>,
}

impl Member {
    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }
}

/// A running cluster. Dropping it stops every member that is still running.
pub struct EtcdCluster {
    members: Vec<Member>,
    /// The members' data and logs; removed after they have stopped (field order).
    dir: tempfile::TempDir,
}

impl EtcdCluster {
    /// Starts three members on free ports and waits until each answers with the same leader.
    pub async fn start() -> Result<EtcdCluster, BoxError> {
        let binary = etcd_binary()?;
        let dir = tempfile::Builder::new().prefix("peers-etcd").tempdir()?;
        let ports = free_ports(2 * MEMBERS)?;
        let (client_ports, peer_ports) = ports.split_at(MEMBERS);
        let initial_cluster: Vec<String> = peer_ports
            .iter()
            .enumerate()
            .map(|(i, port)| format!("m{i}=http://127.0.0.1:{port}"))
            .collect();
        let initial_cluster = initial_cluster.join(",");
        let mut cluster = EtcdCluster {
            members: Vec::new(),
            dir,
        };
        for (i, (&client_port, &peer_port)) in client_ports.iter().zip(peer_ports).enumerate() {
            let name = format!("m{i}");
            // A member that cannot start drops `cluster`, which stops those already started.
            let child = spawn_member(
                &binary,
                cluster.dir.path(),
                &name,
                client_port,
                peer_port,
                &initial_cluster,
            )?;
            cluster.members.push(Member {
                name,
                client_port,
                child: Some(child),
            });
        }
        cluster.wait_ready().await?;
        Ok(cluster)
    }

    /// The client URLs of every member, running or not.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(Member::endpoint).collect()
    }

    /// The PIDs of the members still running.
    pub fn pids(&self) -> Vec<u32> {
        self.members
            .iter()
            .filter_map(|member| member.child.as_ref().map(Child::id))
            .collect()
    }

    /// Waits until every member answers a status call naming the same leader.
    async fn wait_ready(&mut self) -> Result<(), BoxError> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            self.check_running()?;
            match self.leader_index().await {
                Ok(_) => return Ok(()),
                Err(error) if Instant::now() >= deadline => {
                    return Err(format!(
                        "the etcd cluster did not elect a leader within {} s ({error}); see the member logs in {}",
                        START_TIMEOUT.as_secs(),
                        self.dir.path().display()
                    )
                    .into());
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// An error naming the member's log if a member has exited on its own.
    fn check_running(&mut self) -> Result<(), BoxError> {
        for member in &mut self.members {
            if let Some(child) = member.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                member.child = None;
                return Err(format!(
                    "etcd member {} exited with {status}; see {}",
                    member.name,
                    self.dir
                        .path()
                        .join(format!("{}.log", member.name))
                        .display()
                )
                .into());
            }
        }
        Ok(())
    }

    /// Asks each running member for its status (the maintenance API); the index of the member
    /// that is the leader, once every running member names the same one.
    async fn leader_index(&self) -> Result<usize, BoxError> {
        let mut leader = None;
        let mut leader_index = None;
        for (index, member) in self.members.iter().enumerate() {
            if member.child.is_none() {
                continue;
            }
            let mut client = Client::connect([member.endpoint()], None).await?;
            let status = tokio::time::timeout(Duration::from_secs(2), client.status())
                .await
                .map_err(|_| format!("member {} did not answer its status", member.name))??;
            let named = status.leader();
            if named == 0 || leader.is_some_and(|l| l != named) {
                return Err(format!("member {} names no agreed leader yet", member.name).into());
            }
            leader = Some(named);
            if status.header().map(|h| h.member_id()) == Some(named) {
                leader_index = Some(index);
            }
        }
        leader_index.ok_or_else(|| "no running member is the leader".into())
    }

    /// SIGKILLs the current leader and reaps it; returns its name.
    pub async fn kill_leader(&mut self) -> Result<String, BoxError> {
        let index = self.leader_index().await?;
        let member = &mut self.members[index];
        if let Some(mut child) = member.child.take() {
            child.kill()?;
            child.wait()?;
        }
        Ok(member.name.clone())
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for member in &mut self.members {
            if let Some(child) = member.child.take() {
                stop(child, &member.name);
            }
        }
    }
}

/// SIGTERM, then SIGKILL if the member has not exited within the grace period.
fn stop(mut child: Child, name: &str) {
    let Ok(pid) = libc::pid_t::try_from(child.id()) else {
        let _ = child.kill();
        let _ = child.wait();
        return;
    };
    // SAFETY: kill only sends a signal to our own child, which has not been reaped yet.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let deadline = Instant::now() + STOP_GRACE;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("warning: etcd member {name} ignored SIGTERM; killing it");
    let _ = child.kill();
    let _ = child.wait();
}

fn spawn_member(
    binary: &Path,
    dir: &Path,
    name: &str,
    client_port: u16,
    peer_port: u16,
    initial_cluster: &str,
) -> Result<Child, BoxError> {
    let log = std::fs::File::create(dir.join(format!("{name}.log")))?;
    let client_url = format!("http://127.0.0.1:{client_port}");
    let peer_url = format!("http://127.0.0.1:{peer_port}");
    let child = Command::new(binary)
        .arg("--name")
        .arg(name)
        .arg("--data-dir")
        .arg(dir.join(name))
        .args(["--listen-client-urls", &client_url])
        .args(["--advertise-client-urls", &client_url])
        .args(["--listen-peer-urls", &peer_url])
        .args(["--initial-advertise-peer-urls", &peer_url])
        .args(["--initial-cluster", initial_cluster])
        .args(["--initial-cluster-token", "quorumlock-peers"])
        .args(["--initial-cluster-state", "new"])
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .map_err(|error| format!("cannot start {}: {error}", binary.display()))?;
    Ok(child)
}

/// Ports the OS hands out as free now; each listener is closed before etcd binds it.
fn free_ports(count: usize) -> Result<Vec<u16>, BoxError> {
    let listeners = (0..count)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(listeners
        .iter()
        .map(|listener| listener.local_addr().map(|a| a.port()))
        .collect::<Result<Vec<_>, _>>()?)
}

/// `etcd` on PATH, else Debian's `etcd-server` package is installed with apt-get (as root).
fn etcd_binary() -> Result<PathBuf, BoxError> {
    if let Some(path) = on_path("etcd") {
        return Ok(path);
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err(
            "etcd is not on PATH; install it with `sudo apt-get install etcd-server`".into(),
        );
    }
    eprintln!("etcd is missing: installing Debian's etcd-server package with apt-get ...");
    let install = || {
        Command::new("apt-get")
            .args(["install", "-y", "-q", "etcd-server"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(Stdio::null())
            .status()
    };
    if !install()?.success() {
        // A fresh machine has no package lists yet.
        Command::new("apt-get").args(["update", "-q"]).status()?;
        if !install()?.success() {
            return Err("`apt-get install etcd-server` failed; install it by hand".into());
        }
    }
    on_path("etcd").ok_or_else(|| "etcd-server installed, but etcd is still not on PATH".into())
}

fn on_path(binary: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin")])
        .map(|dir| dir.join(binary))
        .find(|candidate| candidate.is_file())
}
