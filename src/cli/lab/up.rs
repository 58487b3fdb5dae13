//! `lab up`: starts a lab, writes its quorumlock.toml and leaves it running.

use std::path::Path;
use std::time::Instant;

use clap::Args;

use crate::lab::{ClusterShape, Lab, LabSpec};

/// The arguments of `lab up`.
#[derive(Debug, Clone, Args)]
pub struct UpArgs {
    /// First of a block of consecutive ports: masters, then replicas, then Sentinels.
    /// Default: free ports chosen by the OS.
    #[arg(long)]
    pub base_port: Option<u16>,
    /// Number of master groups (g1..gN); use an odd number.
    #[arg(long, default_value_t = 5)]
    pub groups: usize,
    /// Replicas per group (with --cluster, per shard).
    #[arg(long, default_value_t = 1)]
    pub replicas: usize,
    /// Sentinels watching every group; 0 starts plain masters without failover.
    #[arg(long, default_value_t = 3, conflicts_with = "cluster")]
    pub sentinels: usize,
    /// Milliseconds of silence before a Sentinel calls a master down (with --cluster,
    /// the cluster's node timeout).
    #[arg(long, default_value_t = 500)]
    pub down_after_ms: u64,
    /// Sentinel failover timeout in milliseconds.
    #[arg(long, default_value_t = 2000)]
    pub failover_timeout_ms: u64,
    /// Password every node and Sentinel requires (written into the lab's quorumlock.toml).
    #[arg(long, env = "QUORUMLOCK_LAB_PASSWORD")]
    pub password: Option<String>,
    /// Listen on TLS only, with client certificates, under a CA generated in the lab dir.
    #[arg(long, conflicts_with_all = ["links", "cluster"])]
    pub tls: bool,
    /// Put a relay in front of every master and replica, so that `lab partition`,
    /// `lab heal` and `lab slow` can cut and slow its links. Clients, replicas and
    /// Sentinels use the relays' ports; `lab status` shows both.
    #[arg(long, conflicts_with = "cluster")]
    pub links: bool,
    /// Make every group a Redis Cluster (no Sentinels): --shards primaries, each with
    /// --replicas replicas, the 16,384 slots split evenly. It fails over by itself, with
    /// three shards or more.
    #[arg(long)]
    pub cluster: bool,
    /// Primaries per Cluster group (with --cluster).
    #[arg(long, default_value_t = 3, requires = "cluster")]
    pub shards: usize,
    /// Admit the masters in acknowledged mode: a vote counts once every replica holds
    /// it, and a promoted replica votes at once instead of sitting out the quarantine.
    #[arg(long, conflicts_with = "cluster")]
    pub acknowledged: bool,
}

/// Starts the lab `args` describe in `dir` and leaves it running.
pub(super) async fn run(args: UpArgs, dir: &Path) -> anyhow::Result<()> {
    let UpArgs {
        base_port,
        groups,
        replicas,
        sentinels,
        down_after_ms,
        failover_timeout_ms,
        password,
        tls,
        links,
        cluster,
        shards,
        acknowledged,
    } = args;
    // The relays are this very executable, run as `quorumlock lab relay`.
    let binary = if links {
        Some(std::env::current_exe().map_err(|error| {
            anyhow::anyhow!(
                "cannot find this executable to run the relays (`quorumlock lab relay`): {error}"
            )
        })?)
    } else {
        None
    };
    let spec = LabSpec {
        groups,
        replicas,
        // Cluster groups fail over by themselves.
        sentinels: if cluster { 0 } else { sentinels },
        base_port,
        down_after_ms,
        failover_timeout_ms,
        password,
        tls,
        links,
        binary,
        cluster: cluster.then_some(ClusterShape { shards }),
        acknowledged,
        ..LabSpec::new(dir)
    };
    start(spec).await
}

/// Starts the lab, says what runs and how to use it, and leaves it running.
async fn start(spec: LabSpec) -> anyhow::Result<()> {
    let started = Instant::now();
    let lab = Lab::start(spec).await?;
    let spec = lab.spec();
    let members = match spec.replicas {
        0 => "master only".to_string(),
        1 => "master + 1 replica".to_string(),
        count => format!("master + {count} replicas"),
    };
    let members = match spec.cluster {
        Some(shape) => format!(
            "each a Redis Cluster of {} shard{}, {}",
            shape.shards,
            if shape.shards == 1 { "" } else { "s" },
            members.replacen("master", "primary", 1)
        ),
        None => members,
    };
    let watchers = match spec.sentinels {
        0 => "no Sentinels".to_string(),
        count => format!("{count} Sentinels"),
    };
    let security = match (spec.tls, spec.password.is_some()) {
        (false, false) => "",
        (true, false) => ", TLS",
        (false, true) => ", password",
        (true, true) => ", TLS + password",
    };
    let links = if spec.links {
        ", a relay in front of every node"
    } else {
        ""
    };
    println!(
        "lab up in {:.1} s: {} groups ({members}), {watchers}{security}{links}, {} processes; files in {}",
        started.elapsed().as_secs_f64(),
        spec.groups,
        lab.pids().len(),
        lab.dir().display()
    );
    let config = lab.config_path();
    println!("config: {}", config.display());
    println!(
        "use it: quorumlock --lab <command> (or --config {}); stop it: quorumlock lab down",
        config.display()
    );
    if spec.links {
        println!(
            "break links: quorumlock lab partition N --from clients|replica|sentinels, lab slow N --delay-ms D, lab heal N"
        );
    }
    lab.detach();
    Ok(())
}
