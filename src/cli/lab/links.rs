//! `lab partition`, `lab heal` and `lab slow`: cut, restore and slow the links of a group's
//! master at its relay (a lab started with --links).

use std::path::Path;
use std::time::Duration;

use super::{group_index, shown};
use crate::Error;
use crate::lab::Lab;
use crate::lab::relay::{self, LinkClass};

/// `lab partition GROUP --from LINKS`: cut those links of the group's master.
pub(super) async fn partition(
    dir: &Path,
    group: usize,
    mut classes: Vec<LinkClass>,
) -> anyhow::Result<()> {
    let lab = Lab::open(dir)?;
    let index = group_index(&lab, group)?;
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

/// `lab heal GROUP`: lift every cut and slowdown on every node of the group.
pub(super) async fn heal(dir: &Path, group: usize) -> anyhow::Result<()> {
    let lab = Lab::open(dir)?;
    let nodes = lab.heal(group_index(&lab, group)?).await?;
    let shown: Vec<String> = nodes.iter().map(shown).collect();
    println!(
        "healed g{group}: every link of {} forwards again, without delay",
        shown.join(", ")
    );
    Ok(())
}

/// `lab slow GROUP --delay-ms D [--jitter-ms J]`: delay the client links of the group's
/// master.
pub(super) async fn slow(
    dir: &Path,
    group: usize,
    delay_ms: u64,
    jitter_ms: u64,
) -> anyhow::Result<()> {
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
