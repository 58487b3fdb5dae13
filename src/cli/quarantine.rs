//! `quorumlock quarantine`: puts a master, or one slot or every slot of a Cluster group,
//! back in quarantine when it may have lost keys the engine cannot see (a slot closed back
//! on its source mid-reshard, keys restored by hand). Never shortens a quarantine.

use clap::Args;

use super::admit::confirm;
use super::exit;
use super::output::{self, or_dash};
use crate::{Locks, QuarantineScope};

#[derive(Debug, Clone, Args)]
#[command(
    after_help = "Examples:\n  quorumlock quarantine --group g2 --slot 4242 --yes        # before closing slot 4242 back on its source\n  quorumlock quarantine --group g2 --resource deploy --yes  # the slot of one resource\n  quorumlock quarantine --group g2 --yes                    # the master, or every slot of a Cluster group"
)]
pub struct QuarantineArgs {
    /// The group to quarantine.
    #[arg(long)]
    group: String,
    /// One hash slot of a Cluster group (0-16383). A Sentinel group's master sits out whole.
    #[arg(long, conflicts_with = "resource")]
    slot: Option<u16>,
    /// The slot of this resource in a Cluster group. A Sentinel group's master sits out whole.
    #[arg(long)]
    resource: Option<String>,
    /// Do not ask for confirmation.
    #[arg(long)]
    yes: bool,
}

pub async fn run(locks: &Locks, args: &QuarantineArgs, json: bool) -> anyhow::Result<u8> {
    let (scope, what) = match (&args.slot, &args.resource) {
        (Some(slot), _) => (QuarantineScope::Slot(*slot), format!("slot {slot} of")),
        (None, Some(resource)) => (
            QuarantineScope::Resource(resource.clone()),
            format!("the slot of `{resource}` in"),
        ),
        (None, None) => (QuarantineScope::Group, "the whole of".to_string()),
    };
    if !args.yes
        && !confirm(&format!(
            "Quarantine {what} {}: it sits out the vote for max_ttl_ms + write_window_ms from now? [y/N] ",
            args.group
        ))?
    {
        eprintln!("nothing quarantined");
        return Ok(exit::USAGE);
    }
    let outcome = locks.quarantine(&args.group, &scope).await?;
    let failed = outcome.error.is_some();
    if json {
        output::json(&outcome)?;
    } else {
        let row = [
            outcome.group.clone(),
            if failed { "FAILED" } else { "quarantined" }.to_string(),
            outcome.quarantined.clone(),
            or_dash(outcome.votes_in_ms),
            outcome.without_policy.to_string(),
            or_dash(outcome.error.as_ref()),
        ];
        print!(
            "{}",
            output::table(
                ["GROUP", "RESULT", "WHAT", "VOTES_IN_MS", "NO_POLICY", "WHY"],
                [row]
            )
        );
    }
    Ok(if failed { exit::FAILURE } else { exit::OK })
}
