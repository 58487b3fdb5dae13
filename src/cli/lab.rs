//! `quorumlock lab`: start, inspect, break and repair the local lab from a shell. The lab
//! itself lives in [`crate::lab`]; this module only parses arguments and prints results.

use std::path::Path;
use std::time::{Duration, Instant};

use clap::{Subcommand, ValueEnum};

use super::output;
use crate::Error;
use crate::lab::relay::{self, LinkClass};
use crate::lab::{ClusterShape, Interruption, Lab, LabSpec, Node, NodeStatus};

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
    Up {
        /// First of a block of consecutive ports: masters, then replicas, then Sentinels.
        /// Default: free ports chosen by the OS.
        #[arg(long)]
        base_port: Option<u16>,
        /// Number of master groups (g1..gN); use an odd number.
        #[arg(long, default_value_t = 5)]
        groups: usize,
        /// Replicas per group (with --cluster, per shard).
        #[arg(long, default_value_t = 1)]
        replicas: usize,
        /// Sentinels watching every group; 0 starts plain masters without failover.
        #[arg(long, default_value_t = 3, conflicts_with = "cluster")]
        sentinels: usize,
        /// Milliseconds of silence before a Sentinel calls a master down (with --cluster,
        /// the cluster's node timeout).
        #[arg(long, default_value_t = 500)]
        down_after_ms: u64,
        /// Sentinel failover timeout in milliseconds.
        #[arg(long, default_value_t = 2000)]
        failover_timeout_ms: u64,
        /// Password every node and Sentinel requires (written into the lab's quorumlock.toml).
        #[arg(long, env = "QUORUMLOCK_LAB_PASSWORD")]
        password: Option<String>,
        /// Listen on TLS only, with client certificates, under a CA generated in the lab dir.
        #[arg(long, conflicts_with_all = ["links", "cluster"])]
        tls: bool,
        /// Put a relay in front of every master and replica, so that `lab partition`,
        /// `lab heal` and `lab slow` can cut and slow its links. Clients, replicas and
        /// Sentinels use the relays' ports; `lab status` shows both.
        #[arg(long, conflicts_with = "cluster")]
        links: bool,
        /// Make every group a Redis Cluster (no Sentinels): --shards primaries, each with
        /// --replicas replicas, the 16,384 slots split evenly. It fails over by itself, with
        /// three shards or more.
        #[arg(long)]
        cluster: bool,
        /// Primaries per Cluster group (with --cluster).
        #[arg(long, default_value_t = 3, requires = "cluster")]
        shards: usize,
        /// Admit the masters in acknowledged mode: a vote counts once every replica holds
        /// it, and a promoted replica votes at once instead of sitting out the quarantine.
        #[arg(long, conflicts_with = "cluster")]
        acknowledged: bool,
    },
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
    Migrate {
        /// Group number, 1..N (1 is g1).
        group: usize,
        /// Slots to move: FIRST-LAST or one slot, within 0-16383.
        #[arg(long, value_parser = parse_slots)]
        slots: SlotRange,
        /// Shard number the slots leave, 1..S.
        #[arg(long)]
        from: usize,
        /// Shard number that serves them afterwards, 1..S.
        #[arg(long)]
        to: usize,
        /// Break the move of one slot off after this many keys left, in the order CLUSTER
        /// GETKEYSINSLOT lists them (newest first, as redis-cli moves them).
        #[arg(long, requires = "then")]
        stop_after_keys: Option<usize>,
        /// How a broken-off move ends: the slot closed back on its source, or the target's
        /// primary killed first and then the slot closed back.
        #[arg(long, value_enum, requires = "stop_after_keys")]
        then: Option<BreakOff>,
    },
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
        LabCommand::Up {
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
        } => {
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
        LabCommand::Kill {
            group,
            shard: Some(shard),
        } => {
            let mut lab = Lab::open(dir)?;
            let (index, shard_index) = shard_index(&lab, group, shard)?;
            let node = lab.kill_primary(index, shard_index).await?;
            let next = if lab.spec().replicas == 0 {
                format!(
                    "it has no replica: its slots stay down until `quorumlock lab restart {group} --shard {shard}`"
                )
            } else {
                format!(
                    "the cluster promotes a replica after {} ms of silence if most of g{group}'s primaries are alive",
                    lab.spec().down_after_ms
                )
            };
            println!(
                "killed the primary of g{group} shard s{shard}, {} (PID {}); {next}",
                shown(&node),
                node.pid
            );
            Ok(())
        }
        LabCommand::Freeze {
            group,
            shard: Some(shard),
        } => {
            let mut lab = Lab::open(dir)?;
            let (index, shard_index) = shard_index(&lab, group, shard)?;
            let node = lab.freeze_primary(index, shard_index).await?;
            println!(
                "froze the primary of g{group} shard s{shard}, {} (PID {}, SIGSTOP); resume it with `quorumlock lab thaw {group}`",
                shown(&node),
                node.pid
            );
            Ok(())
        }
        LabCommand::Restart {
            group,
            shard: Some(shard),
        } => {
            let mut lab = Lab::open(dir)?;
            let (index, shard_index) = shard_index(&lab, group, shard)?;
            let nodes = lab.restart_shard(index, shard_index).await?;
            for node in nodes {
                println!(
                    "restarted g{group} s{shard} {} {} (PID {}), empty; it rejoins its cluster",
                    node.kind,
                    shown(&node),
                    node.pid
                );
            }
            Ok(())
        }
        LabCommand::Migrate {
            group,
            slots,
            from,
            to,
            stop_after_keys: Some(keys),
            then: Some(then),
        } => {
            let mut lab = Lab::open(dir)?;
            let (index, from_index) = shard_index(&lab, group, from)?;
            let (_, to_index) = shard_index(&lab, group, to)?;
            if slots.first != slots.last {
                anyhow::bail!(
                    "--stop-after-keys breaks off the move of one slot: give --slots one slot, not {}-{}",
                    slots.first,
                    slots.last
                );
            }
            let interruption = match then {
                BreakOff::ClosedBack => Interruption::ClosedBack,
                BreakOff::TargetKilled => Interruption::TargetKilled,
            };
            let report = lab
                .interrupt_migration(index, from_index, to_index, slots.first, keys, interruption)
                .await?;
            println!(
                "moved {} keys of slot {} of g{group} from s{from} ({}) to s{to} ({}), then {}; s{from} serves the slot again. Quarantine it unless it may not have lost a key: quorumlock quarantine --group g{group} --slot {}",
                report.keys,
                slots.first,
                shown(&report.from),
                shown(&report.to),
                match then {
                    BreakOff::ClosedBack => "closed the slot back on the source",
                    BreakOff::TargetKilled => "killed the target and closed the slot back",
                },
                slots.first
            );
            Ok(())
        }
        LabCommand::Migrate {
            group,
            slots,
            from,
            to,
            ..
        } => {
            let mut lab = Lab::open(dir)?;
            let (index, from_index) = shard_index(&lab, group, from)?;
            let (_, to_index) = shard_index(&lab, group, to)?;
            let started = Instant::now();
            let report = lab
                .migrate_slots(index, from_index, to_index, slots.first..=slots.last)
                .await?;
            println!(
                "moved {} slots ({}-{}) and {} keys of g{group} from s{from} ({}) to s{to} ({}) in {:.1} s",
                report.slots,
                slots.first,
                slots.last,
                report.keys,
                shown(&report.from),
                shown(&report.to),
                started.elapsed().as_secs_f64()
            );
            Ok(())
        }
        LabCommand::Kill { group, shard: None } => {
            let mut lab = Lab::open(dir)?;
            let node = lab.kill(group_index(&lab, group)?).await?;
            let next = if lab.spec().sentinels == 0 {
                format!(
                    "no Sentinel watches it: g{group} stays down until `quorumlock lab restart {group}`"
                )
            } else if lab.spec().min_replicas_max_lag_s.is_some() && lab.spec().replicas == 1 {
                format!(
                    "Sentinel promotes its replica after {} ms of silence, which takes writes once it has a replica again: `quorumlock lab restart {group}` brings the old master back as one",
                    lab.spec().down_after_ms
                )
            } else {
                format!(
                    "Sentinel promotes a replica after {} ms of silence",
                    lab.spec().down_after_ms
                )
            };
            println!(
                "killed the master of g{group}, {} (PID {}); {next}",
                shown(&node),
                node.pid
            );
            Ok(())
        }
        LabCommand::Freeze { group, shard: None } => {
            let mut lab = Lab::open(dir)?;
            let node = lab.freeze(group_index(&lab, group)?).await?;
            println!(
                "froze the master of g{group}, {} (PID {}, SIGSTOP); resume it with `quorumlock lab thaw {group}`",
                shown(&node),
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
                println!("thawed {} (PID {}, SIGCONT)", shown(&node), node.pid);
            }
            Ok(())
        }
        LabCommand::Restart { group, shard: None } => {
            let mut lab = Lab::open(dir)?;
            let index = group_index(&lab, group)?;
            let nodes = lab.restart(index).await?;
            for node in nodes {
                println!(
                    "restarted g{group} {} {} (PID {}), empty",
                    node.kind,
                    shown(&node),
                    node.pid
                );
            }
            // An old master comes back as a master; Sentinel would make it a replica only
            // some seconds later.
            if lab.spec().sentinels > 0 {
                match lab.rejoin(index).await {
                    Ok(told) => {
                        for node in told {
                            println!(
                                "{} now replicates from g{group}'s current master",
                                shown(&node)
                            );
                        }
                    }
                    Err(error) => println!("left as it came back: {error}"),
                }
            }
            Ok(())
        }
        LabCommand::Partition { group, from } => {
            let lab = Lab::open(dir)?;
            let index = group_index(&lab, group)?;
            let mut classes = from;
            classes.sort();
            classes.dedup();
            let mut node = None;
            for class in &classes {
                node = Some(lab.partition(index, *class).await?);
            }
            let names: Vec<&str> = classes.iter().map(|class| class.name()).collect();
            if let Some(node) = node {
                println!(
                    "cut the {} links of g{group}'s master, {}; heal them with `quorumlock lab heal {group}`",
                    names.join(", "),
                    shown(&node)
                );
            }
            Ok(())
        }
        LabCommand::Heal { group } => {
            let lab = Lab::open(dir)?;
            let nodes = lab.heal(group_index(&lab, group)?).await?;
            let shown: Vec<String> = nodes.iter().map(shown).collect();
            println!(
                "healed g{group}: every link of {} forwards again, without delay",
                shown.join(", ")
            );
            Ok(())
        }
        LabCommand::Slow {
            group,
            delay_ms,
            jitter_ms,
        } => {
            let lab = Lab::open(dir)?;
            let index = group_index(&lab, group)?;
            let limit = relay::MAX_LATENCY.as_millis();
            for (field, value) in [("--delay-ms", delay_ms), ("--jitter-ms", jitter_ms)] {
                if u128::from(value) > limit {
                    return Err(Error::InvalidInput {
                        field,
                        reason: format!("must be at most {limit} (10 minutes), got {value}"),
                    }
                    .into());
                }
            }
            let node = lab
                .slow(
                    index,
                    Duration::from_millis(delay_ms),
                    Duration::from_millis(jitter_ms),
                )
                .await?;
            println!(
                "client links of g{group}'s master, {}, now wait {delay_ms} ms (± {jitter_ms} ms) each way; undo with `quorumlock lab heal {group}`",
                shown(&node)
            );
            Ok(())
        }
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

/// A node's address as clients see it, and its own port when a relay stands in between.
fn shown(node: &Node) -> String {
    if node.public_port == node.port {
        node.address()
    } else {
        format!("{} (real port {})", node.public_address(), node.port)
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

/// A range of hash slots from the command line, both ends included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotRange {
    pub first: u16,
    pub last: u16,
}

fn parse_slots(text: &str) -> Result<SlotRange, String> {
    let slot = |part: &str| {
        part.trim()
            .parse::<u16>()
            .ok()
            .filter(|&slot| slot < 16_384)
            .ok_or_else(|| format!("`{part}` is not a slot number between 0 and 16383"))
    };
    let (first, last) = match text.split_once('-') {
        Some((first, last)) => (slot(first)?, slot(last)?),
        None => (slot(text)?, slot(text)?),
    };
    if first > last {
        return Err(format!(
            "{first}-{last} ends before it starts; write FIRST-LAST"
        ));
    }
    Ok(SlotRange { first, last })
}

/// One row per process: each node, and under a node with links its relay. A node's PORT is
/// the one clients use, with the node's own port beside it when a relay stands in between.
fn table(nodes: &[NodeStatus]) -> String {
    let rows = nodes.iter().flat_map(|node| {
        let group = match (node.group, node.shard) {
            (Some(group), Some(shard)) => format!("g{} s{}", group + 1, shard + 1),
            (Some(group), None) => format!("g{}", group + 1),
            (None, _) => "-".to_string(),
        };
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
        let port = if node.public_port == node.port {
            node.port.to_string()
        } else {
            format!("{} (real {})", node.public_port, node.port)
        };
        let row = [
            group.clone(),
            node.kind.to_string(),
            port,
            node.pid.to_string(),
            state.to_string(),
            role,
        ];
        let relay = node.relay.as_ref().map(|relay| {
            let links = match &relay.state {
                None if relay.alive => "not answering".to_string(),
                None => "-".to_string(),
                Some(state) => {
                    let cut = if state.cut.is_empty() {
                        "nothing cut".to_string()
                    } else {
                        format!("cut: {}", state.cut.join(","))
                    };
                    let slow = match (state.latency_ms, state.jitter_ms) {
                        (0, 0) => String::new(),
                        (delay, 0) => format!(", clients +{delay} ms"),
                        (delay, jitter) => format!(", clients +{delay}±{jitter} ms"),
                    };
                    format!("to {}, {cut}{slow}", node.port)
                }
            };
            [
                group,
                "relay".to_string(),
                format!("{} (control {})", relay.port, relay.control_port),
                relay.pid.to_string(),
                if relay.alive { "up" } else { "dead" }.to_string(),
                links,
            ]
        });
        std::iter::once(row).chain(relay)
    });
    let last = if nodes.iter().any(|node| node.relay.is_some()) {
        "ROLE / LINKS"
    } else {
        "ROLE"
    };
    output::table(["GROUP", "KIND", "PORT", "PID", "STATE", last], rows)
}

/// How `lab migrate --stop-after-keys` ends the move it breaks off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BreakOff {
    /// `CLUSTER SETSLOT <slot> STABLE` on both sides, as `redis-cli --cluster fix` does.
    ClosedBack,
    /// SIGKILL the target's primary, then close the slot back on the source.
    TargetKilled,
}
