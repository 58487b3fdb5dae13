//! `lab kill`, `lab freeze`, `lab thaw` and `lab restart`: stop, pause and bring back the
//! master of a group, or the primary of one shard of a Cluster group.

use std::path::Path;

use super::{group_index, shard_index, shown};
use crate::lab::Lab;

/// `lab kill GROUP [--shard S]`: SIGKILL the group's master, or the shard's primary.
pub(super) async fn kill(dir: &Path, group: usize, shard: Option<usize>) -> anyhow::Result<()> {
    let mut lab = Lab::open(dir)?;
    let Some(shard) = shard else {
        return kill_master(&mut lab, group).await;
    };
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

async fn kill_master(lab: &mut Lab, group: usize) -> anyhow::Result<()> {
    let node = lab.kill(group_index(lab, group)?).await?;
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

/// `lab freeze GROUP [--shard S]`: SIGSTOP the group's master, or the shard's primary.
pub(super) async fn freeze(dir: &Path, group: usize, shard: Option<usize>) -> anyhow::Result<()> {
    let mut lab = Lab::open(dir)?;
    let Some(shard) = shard else {
        let node = lab.freeze(group_index(&lab, group)?).await?;
        println!(
            "froze the master of g{group}, {} (PID {}, SIGSTOP); resume it with `quorumlock lab thaw {group}`",
            shown(&node),
            node.pid
        );
        return Ok(());
    };
    let (index, shard_index) = shard_index(&lab, group, shard)?;
    let node = lab.freeze_primary(index, shard_index).await?;
    println!(
        "froze the primary of g{group} shard s{shard}, {} (PID {}, SIGSTOP); resume it with `quorumlock lab thaw {group}`",
        shown(&node),
        node.pid
    );
    Ok(())
}

/// `lab thaw GROUP`: SIGCONT every frozen node of the group.
pub(super) async fn thaw(dir: &Path, group: usize) -> anyhow::Result<()> {
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

/// `lab restart GROUP [--shard S]`: start the group's (or the shard's) dead nodes again, or
/// its current master when none is dead.
pub(super) async fn restart(dir: &Path, group: usize, shard: Option<usize>) -> anyhow::Result<()> {
    let mut lab = Lab::open(dir)?;
    let Some(shard) = shard else {
        return restart_group(&mut lab, group).await;
    };
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

async fn restart_group(lab: &mut Lab, group: usize) -> anyhow::Result<()> {
    let index = group_index(lab, group)?;
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
