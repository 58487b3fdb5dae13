//! `quorumlock lab`: start, inspect, break and repair the local lab from a shell. The lab
//! itself lives in [`crate::lab`]; this module only parses arguments and prints results.

use std::path::Path;
use std::time::Instant;

use clap::Subcommand;

use super::output;
use crate::Error;
use crate::lab::{Lab, LabSpec, NodeStatus};

/// `quorumlock lab ...`; group numbers on the command line count from 1 (`g1`).
#[derive(Debug, Clone, Subcommand)]
pub enum LabCommand {
    /// Start a lab on 127.0.0.1 (masters, replicas, Sentinels), write its quorumlock.toml, and
    /// leave it running.
    #[command(after_help = "Examples:
  quorumlock lab up                            # 5 groups x (master + replica), 3 Sentinels, free ports
  quorumlock lab up --base-port 7000 --groups 3
  quorumlock lab up --sentinels 0 --replicas 0 # plain masters, no failover
  quorumlock lab up --tls --password s3cret    # TLS only (private CA in <lab dir>/tls), auth")]
    Up {
        /// First of a block of consecutive ports: masters, then replicas, then Sentinels.
        /// Default: free ports chosen by the OS.
        #[arg(long)]
        base_port: Option<u16>,
        /// Number of master groups (g1..gN); use an odd number.
        #[arg(long, default_value_t = 5)]
        groups: usize,
        /// Replicas per group.
        #[arg(long, default_value_t = 1)]
        replicas: usize,
        /// Sentinels watching every group; 0 starts plain masters without failover.
        #[arg(long, default_value_t = 3)]
        sentinels: usize,
        /// Milliseconds of silence before a Sentinel calls a master down.
        #[arg(long, default_value_t = 500)]
        down_after_ms: u64,
        /// Sentinel failover timeout in milliseconds.
        #[arg(long, default_value_t = 2000)]
        failover_timeout_ms: u64,
        /// Password every node and Sentinel requires (written into the lab's quorumlock.toml).
        #[arg(long, env = "QUORUMLOCK_LAB_PASSWORD")]
        password: Option<String>,
        /// Listen on TLS only, with client certificates, under a CA generated in the lab dir.
        #[arg(long)]
        tls: bool,
    },
    /// Stop every process of the lab (by PID) and remove its state file.
    Down,
    /// Show every process: group, kind, port, PID, state and current role.
    #[command(after_help = "Examples:
  quorumlock lab status
  quorumlock --json lab status | jq '.nodes[] | select(.role == \"master\") | .port'")]
    Status,
    /// SIGKILL the current master of GROUP; Sentinel promotes its replica.
    #[command(after_help = "Example:
  quorumlock lab kill 3        # kill g3's master, then watch `quorumlock lab status`
  quorumlock lab restart 3     # bring it back (empty: nothing is persisted)")]
    Kill {
        /// Group number, 1..N (1 is g1).
        group: usize,
    },
    /// SIGSTOP the current master of GROUP: its sockets stay open but it answers nothing.
    #[command(after_help = "Example:
  quorumlock lab freeze 2 && sleep 3 && quorumlock lab thaw 2")]
    Freeze {
        /// Group number, 1..N (1 is g1).
        group: usize,
    },
    /// SIGCONT every frozen node of GROUP.
    Thaw {
        /// Group number, 1..N (1 is g1).
        group: usize,
    },
    /// Start the dead nodes of GROUP again, empty (nothing is persisted); if none is dead,
    /// kill and restart its current master.
    Restart {
        /// Group number, 1..N (1 is g1).
        group: usize,
    },
}

/// Runs one `lab` subcommand against the lab in `dir`.
pub async fn run(command: LabCommand, dir: &Path, json: bool) -> anyhow::Result<()> {
    match command {
        LabCommand::Up {
            base_port,
            groups,
            replicas,
            sentinels,
            down_after_ms,
            failover_timeout_ms,
            password,
            tls,
        } => {
            let spec = LabSpec {
                groups,
                replicas,
                sentinels,
                base_port,
                down_after_ms,
                failover_timeout_ms,
                password,
                tls,
                ..LabSpec::new(dir)
            };
            up(spec).await
        }
        LabCommand::Down => {
            let lab = Lab::open(dir)?;
            let count = lab.pids().len();
            let shown = lab.dir().display().to_string();
            lab.stop().await?;
            println!("lab in {shown} stopped ({count} processes)");
            Ok(())
        }
        LabCommand::Status => status(&Lab::open(dir)?, json).await,
        LabCommand::Kill { group } => {
            let mut lab = Lab::open(dir)?;
            let node = lab.kill(group_index(&lab, group)?).await?;
            let next = if lab.spec().sentinels == 0 {
                format!(
                    "no Sentinel watches it: g{group} stays down until `quorumlock lab restart {group}`"
                )
            } else {
                format!(
                    "Sentinel promotes a replica after {} ms of silence",
                    lab.spec().down_after_ms
                )
            };
            println!(
                "killed the master of g{group}, {} (PID {}); {next}",
                node.address(),
                node.pid
            );
            Ok(())
        }
        LabCommand::Freeze { group } => {
            let mut lab = Lab::open(dir)?;
            let node = lab.freeze(group_index(&lab, group)?).await?;
            println!(
                "froze the master of g{group}, {} (PID {}, SIGSTOP); resume it with `quorumlock lab thaw {group}`",
                node.address(),
                node.pid
            );
            Ok(())
        }
        LabCommand::Thaw { group } => {
            let mut lab = Lab::open(dir)?;
            let nodes = lab.thaw(group_index(&lab, group)?).await?;
            if nodes.is_empty() {
                println!("nothing frozen in g{group}");
            }
            for node in nodes {
                println!("thawed {} (PID {}, SIGCONT)", node.address(), node.pid);
            }
            Ok(())
        }
        LabCommand::Restart { group } => {
            let mut lab = Lab::open(dir)?;
            let nodes = lab.restart(group_index(&lab, group)?).await?;
            for node in nodes {
                println!(
                    "restarted g{group} {} {} (PID {}), empty",
                    node.kind,
                    node.address(),
                    node.pid
                );
            }
            Ok(())
        }
    }
}

async fn up(spec: LabSpec) -> anyhow::Result<()> {
    let started = Instant::now();
    let lab = Lab::start(spec).await?;
    let spec = lab.spec();
    let members = match spec.replicas {
        0 => "master only".to_string(),
        1 => "master + 1 replica".to_string(),
        count => format!("master + {count} replicas"),
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
    println!(
        "lab up in {:.1} s: {} groups ({members}), {watchers}{security}, {} processes; files in {}",
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
    lab.detach();
    Ok(())
}

async fn status(lab: &Lab, json: bool) -> anyhow::Result<()> {
    let nodes = lab.status().await;
    if json {
        let document = serde_json::json!({
            "dir": lab.dir(),
            "config": lab.config_path(),
            "nodes": nodes,
        });
        println!("{}", serde_json::to_string_pretty(&document)?);
    } else {
        print!("{}", table(&nodes));
    }
    Ok(())
}

/// Turns a 1-based GROUP argument into the lab's 0-based index.
fn group_index(lab: &Lab, group: usize) -> Result<usize, Error> {
    let groups = lab.spec().groups;
    if (1..=groups).contains(&group) {
        Ok(group - 1)
    } else {
        Err(Error::InvalidInput {
            field: "GROUP",
            reason: format!(
                "must be between 1 and {groups} (this lab has g1..g{groups}), got {group}"
            ),
        })
    }
}

fn table(nodes: &[NodeStatus]) -> String {
    output::table(
        ["GROUP", "KIND", "PORT", "PID", "STATE", "ROLE"],
        nodes.iter().map(|node| {
            let state = match (node.alive, node.frozen) {
                (false, _) => "dead",
                (true, true) => "frozen",
                (true, false) => "up",
            };
            let role = match (&node.role, node.replica_of) {
                (Some(role), Some(master)) => format!("{role} of {master}"),
                (Some(role), None) => role.clone(),
                (None, _) => "-".to_string(),
            };
            [
                node.group
                    .map_or("-".to_string(), |group| format!("g{}", group + 1)),
                node.kind.to_string(),
                node.port.to_string(),
                node.pid.to_string(),
                state.to_string(),
                role,
            ]
        }),
    )
}
