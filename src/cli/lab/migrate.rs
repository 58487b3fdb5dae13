//! `lab migrate`: move a range of slots of a Cluster group between shards, or break one
//! slot's move off the ways a reshard breaks.

use std::path::Path;
use std::time::Instant;

use clap::{Args, ValueEnum};

use super::{shard_index, shown};
use crate::lab::{Interruption, Lab};

/// The arguments of `lab migrate`.
#[derive(Debug, Clone, Args)]
pub struct MigrateArgs {
    /// Group number, 1..N (1 is g1).
    pub group: usize,
    /// Slots to move: FIRST-LAST or one slot, within 0-16383.
    #[arg(long, value_parser = parse_slots)]
    pub slots: SlotRange,
    /// Shard number the slots leave, 1..S.
    #[arg(long)]
    pub from: usize,
    /// Shard number that serves them afterwards, 1..S.
    #[arg(long)]
    pub to: usize,
    /// Break the move of one slot off after this many keys left, in the order CLUSTER
    /// GETKEYSINSLOT lists them (newest first, as redis-cli moves them).
    #[arg(long, requires = "then")]
    pub stop_after_keys: Option<usize>,
    /// How a broken-off move ends: the slot closed back on its source, or the target's
    /// primary killed first and then the slot closed back.
    #[arg(long, value_enum, requires = "stop_after_keys")]
    pub then: Option<BreakOff>,
}

/// Moves the slots, or breaks one slot's move off when `--stop-after-keys` is given.
pub(super) async fn run(args: MigrateArgs, dir: &Path) -> anyhow::Result<()> {
    let MigrateArgs {
        group,
        slots,
        from,
        to,
        stop_after_keys,
        then,
    } = args;
    let mut lab = Lab::open(dir)?;
    let (index, from_index) = shard_index(&lab, group, from)?;
    let (_, to_index) = shard_index(&lab, group, to)?;
    if let (Some(keys), Some(then)) = (stop_after_keys, then) {
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
        return Ok(());
    }
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

/// How `lab migrate --stop-after-keys` ends the move it breaks off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BreakOff {
    /// `CLUSTER SETSLOT <slot> STABLE` on both sides, as `redis-cli --cluster fix` does.
    ClosedBack,
    /// SIGKILL the target's primary, then close the slot back on the source.
    TargetKilled,
}
