//! `quorumlock lab`: start, inspect, break and repair the local lab from a shell, one
//! function per subcommand: up, status, nodes (kill, freeze, thaw, restart), migrate, links
//! (partition, heal, slow). The lab itself lives in [`crate::lab`]; this folder only parses
//! arguments and prints results.

mod links;
mod migrate;
mod nodes;
mod status;
mod up;

use std::path::Path;

use clap::Subcommand;

use crate::Error;
use crate::lab::relay::{self, LinkClass};
use crate::lab::{Lab, Node};

/// `quorumlock lab ...`; group numbers on the command line count from 1 (`g1`).
#[derive(Debug, Clone, Subcommand)]
pub enum LabCommand {
    /// Start a lab on 127.0.0.1 (masters, replicas, Sentinels), write its quorumlock.toml, and
    /// leave it running.
    #[command(after_help = "Examples:
  quorumlock lab up                            # 5 groups x (master + replica), 3 Sentinels, free ports
  quorumlock lab up --base-port 7000 --groups 3
  quorumlock lab up --sentinels 0 --replicas 0 # plain masters, no failover
  quorumlock lab up --tls --password s3cret    # TLS only (private CA in <lab dir>/tls), auth
  quorumlock lab up --links                    # a relay in front of every node: partition, heal, slow
  quorumlock lab up --cluster --shards 3       # each group a Redis Cluster: 3 primaries + 1 replica each")]
    Up(up::UpArgs),
    /// Stop every process of the lab (by PID) and remove its state file.
    #[command(after_help = "Examples:
  quorumlock lab down
  quorumlock --lab-dir /tmp/lab2 lab down   # a lab started with that --lab-dir")]
    Down,
    /// Show every process: group, kind, port, PID, state and current role.
    #[command(after_help = "Examples:
  quorumlock lab status
  quorumlock --json lab status | jq '.nodes[] | select(.role == \"master\") | .port'")]
    Status,
    /// SIGKILL the current master of GROUP (of a Cluster group, the primary of --shard);
    /// Sentinel, or the cluster, promotes its replica.
    #[command(after_help = "Example:
  quorumlock lab kill 3           # kill g3's master, then watch `quorumlock lab status`
  quorumlock lab restart 3        # bring it back (empty: nothing is persisted)
  quorumlock lab kill 2 --shard 1 # a lab started with --cluster: g2's shard s1")]
    Kill {
        /// Group number, 1..N (1 is g1).
        group: usize,
        /// Shard number of a Cluster group, 1..S (1 is s1); required with --cluster labs.
        #[arg(long)]
        shard: Option<usize>,
    },
    /// SIGSTOP the current master of GROUP (of a Cluster group, the primary of --shard): its
    /// sockets stay open but it answers nothing.
    #[command(after_help = "Example:
  quorumlock lab freeze 2 && sleep 3 && quorumlock lab thaw 2")]
    Freeze {
        /// Group number, 1..N (1 is g1).
        group: usize,
        /// Shard number of a Cluster group, 1..S (1 is s1); required with --cluster labs.
        #[arg(long)]
        shard: Option<usize>,
    },
    /// SIGCONT every frozen node of GROUP.
    #[command(after_help = "Examples:
  quorumlock lab freeze 2         # g2's master stops answering; its sockets stay open
  quorumlock lab thaw 2           # it answers again")]
    Thaw {
        /// Group number, 1..N (1 is g1).
        group: usize,
    },
    /// Start the dead nodes of GROUP (or of its --shard) again, empty (nothing is
    /// persisted); if none is dead, kill and restart its current master (the shard's primary).
    /// An old master comes back as a replica of the group's current master.
    #[command(after_help = "Examples:
  quorumlock lab kill 3 && quorumlock lab restart 3   # g3's old master rejoins as a replica
  quorumlock lab restart 1        # nothing dead: g1's current master restarts empty
  quorumlock lab restart 2 --shard 1   # a lab started with --cluster: g2's shard s1")]
    Restart {
        /// Group number, 1..N (1 is g1).
        group: usize,
        /// Shard number of a Cluster group, 1..S (1 is s1).
        #[arg(long)]
        shard: Option<usize>,
    },
    /// Move a range of slots of a Cluster group from one shard's primary to another's, keys
    /// and all (SETSLOT IMPORTING/MIGRATING, MIGRATE in batches, SETSLOT NODE); or break one
    /// slot's move off after some keys left, the ways a reshard breaks.
    #[command(after_help = "Examples:
  quorumlock lab migrate 2 --slots 0-99 --from 1 --to 2   # g2: slots 0..99 from s1 to s2
  quorumlock lab migrate 1 --slots 42 --from 1 --to 2 --stop-after-keys 2 --then closed-back
  quorumlock lab migrate 1 --slots 42 --from 1 --to 2 --stop-after-keys 2 --then target-killed")]
    Migrate(migrate::MigrateArgs),
    /// Cut links of the current master of GROUP at its relay (lab started with --links): the
    /// links stay open but carry nothing, as in a network partition, until `lab heal`.
    #[command(after_help = "Examples:
  quorumlock lab partition 2 --from clients             # g2 times out in every vote
  quorumlock lab partition 1 --from replica,sentinels   # Sentinel promotes g1's replica while
                                                        # clients that address the old master still reach it
  quorumlock lab heal 1")]
    Partition {
        /// Group number, 1..N (1 is g1).
        group: usize,
        /// Which links to cut: clients, replica or sentinels; repeat the flag or separate
        /// with commas.
        #[arg(long, value_name = "LINKS", value_delimiter = ',', required = true)]
        from: Vec<LinkClass>,
    },
    /// Lift every cut and every slowdown on every node of GROUP; the links that were cut are
    /// reset, so their peers reconnect.
    #[command(after_help = "Examples:
  quorumlock lab partition 2 --from clients && quorumlock lab heal 2
  quorumlock lab slow 3 --delay-ms 80 && quorumlock lab heal 3")]
    Heal {
        /// Group number, 1..N (1 is g1).
        group: usize,
    },
    /// Delay the client links of the current master of GROUP, both ways (lab started with
    /// --links); replica and Sentinel links keep their speed. `lab heal` ends it.
    #[command(after_help = "Example:
  quorumlock lab slow 3 --delay-ms 80 --jitter-ms 40   # every round trip to g3 takes 2 x 40..120 ms")]
    Slow {
        /// Group number, 1..N (1 is g1).
        group: usize,
        /// Added to every chunk a client link carries, in each direction, in milliseconds.
        #[arg(long)]
        delay_ms: u64,
        /// The delay varies uniformly by up to this much either way, in milliseconds.
        #[arg(long, default_value_t = 0)]
        jitter_ms: u64,
    },
    /// Run one relay (the lab starts one per node with --links): listen on --listen, forward
    /// to --target, take control commands on --control; runs until killed.
    #[command(hide = true)]
    Relay {
        #[arg(long)]
        listen: u16,
        #[arg(long)]
        target: u16,
        #[arg(long)]
        control: u16,
    },
}

/// Runs one `lab` subcommand against the lab in `dir`.
pub async fn run(command: LabCommand, dir: &Path, json: bool) -> anyhow::Result<()> {
    match command {
        LabCommand::Up(args) => up::run(args, dir).await,
        LabCommand::Down => down(dir).await,
        LabCommand::Status => status::run(&Lab::open(dir)?, json).await,
        LabCommand::Kill { group, shard } => nodes::kill(dir, group, shard).await,
        LabCommand::Freeze { group, shard } => nodes::freeze(dir, group, shard).await,
        LabCommand::Thaw { group } => nodes::thaw(dir, group).await,
        LabCommand::Restart { group, shard } => nodes::restart(dir, group, shard).await,
        LabCommand::Migrate(args) => migrate::run(args, dir).await,
        LabCommand::Partition { group, from } => links::partition(dir, group, from).await,
        LabCommand::Heal { group } => links::heal(dir, group).await,
        LabCommand::Slow {
            group,
            delay_ms,
            jitter_ms,
        } => links::slow(dir, group, delay_ms, jitter_ms).await,
        LabCommand::Relay {
            listen,
            target,
            control,
        } => {
            relay::serve(listen, target, control).await?;
            Ok(())
        }
    }
}

/// `lab down`: stops every process of the lab and removes its state file.
async fn down(dir: &Path) -> anyhow::Result<()> {
    let lab = Lab::open(dir)?;
    let count = lab.pids().len();
    let shown = lab.dir().display().to_string();
    lab.stop().await?;
    println!("lab in {shown} stopped ({count} processes)");
    Ok(())
}

/// A node's address as clients see it, and its own port when a relay stands in between.
fn shown(node: &Node) -> String {
    if node.public_port == node.port {
        node.address()
    } else {
        format!("{} (real port {})", node.public_address(), node.port)
    }
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

/// Turns 1-based GROUP and --shard arguments into the lab's 0-based indexes.
fn shard_index(lab: &Lab, group: usize, shard: usize) -> Result<(usize, usize), Error> {
    let index = group_index(lab, group)?;
    let Some(shape) = lab.spec().cluster else {
        return Err(Error::InvalidInput {
            field: "--shard",
            reason: "this lab's groups are not Redis Clusters; start one with `quorumlock lab up --cluster`, or leave --shard out".into(),
        });
    };
    if (1..=shape.shards).contains(&shard) {
        Ok((index, shard - 1))
    } else {
        Err(Error::InvalidInput {
            field: "--shard",
            reason: format!(
                "must be between 1 and {} (each group has s1..s{}), got {shard}",
                shape.shards, shape.shards
            ),
        })
    }
}
