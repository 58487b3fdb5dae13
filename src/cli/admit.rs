//! `quorumlock admit`: gives masters the lock policy and admits them to the vote. For a
//! brand-new deployment (its masters have no policy and sit out until admitted), for raising
//! the policy, and for masters that lost their data when too few groups hold a policy to
//! adopt one (then with `--after-ms` of at least the policy's quarantine). The write window
//! is computed from what each group's masters run unless given; the engine checks it, and
//! each risk an operator may accept has a flag of its own.

use std::io::{BufRead, IsTerminal, Write};
use std::time::Duration;

use clap::Args;

use super::exit;
use super::output::{self, or_dash};
use crate::{AdmitOptions, Locks};

#[derive(Debug, Clone, Args)]
#[command(
    after_help = "Examples:\n  quorumlock admit --yes                               # a brand-new deployment, every group, at once\n  quorumlock admit --max-ttl-ms 300000 --yes           # raise the policy\n  quorumlock admit --group g2 --after-ms 72000 --yes   # a master that lost its data: after the quarantine\n  quorumlock admit --acknowledged --yes                # votes count once every replica holds them"
)]
pub struct AdmitArgs {
    /// Group to admit (repeat for several); every group when absent.
    #[arg(long = "group")]
    groups: Vec<String>,
    /// Longest TTL the masters grant. Default: the topology's max_ttl_ms.
    #[arg(long)]
    max_ttl_ms: Option<u64>,
    /// How long an old master cut off from its replicas may go on taking writes, in ms.
    /// Default: computed for each group from what its masters run (min-replicas-max-lag
    /// plus 2 s; cluster-node-timeout plus 1 s), and a smaller one is refused.
    #[arg(long)]
    write_window_ms: Option<u64>,
    /// Milliseconds the masters sit out before they vote (0: at once, for masters that never
    /// held a lock).
    #[arg(long, default_value_t = 0)]
    after_ms: u64,
    /// Admit at once, after --after-ms only, even masters that may have missed grants: a
    /// promoted master no vote has met, or one that lost its data.
    #[arg(long)]
    force: bool,
    /// Accept a --write-window-ms below what a group's masters need: an old master cut off
    /// from its replicas may grant after the promoted one's quarantine ended.
    #[arg(long, requires = "write_window_ms")]
    allow_short_window: bool,
    /// Admit a master with replicas and min-replicas-to-write 0: cut off from its replicas,
    /// it grants with no end after Sentinel or the cluster promoted one.
    #[arg(long)]
    allow_unreplicated_writes: bool,
    /// Admit a group whose settings cannot be read (CONFIG GET refused), unchecked, under
    /// the --write-window-ms given.
    #[arg(long, requires = "write_window_ms")]
    allow_unread_settings: bool,
    /// Acknowledged mode: a vote counts only once every replica of its master holds it, so
    /// a replica promoted in its place votes at once instead of sitting out the quarantine.
    /// Each group's policy names the replicas its master has now; every one must be up for
    /// the group to vote. Kept as each master runs it unless this or --unacknowledged.
    #[arg(long, conflicts_with = "unacknowledged")]
    acknowledged: bool,
    /// Turns acknowledged mode off: a promoted replica sits out the quarantine again.
    #[arg(long)]
    unacknowledged: bool,
    /// Do not ask for confirmation.
    #[arg(long)]
    yes: bool,
}

pub async fn run(locks: &Locks, args: &AdmitArgs, json: bool) -> anyhow::Result<u8> {
    let max_ttl_ms = args.max_ttl_ms.unwrap_or(locks.topology().max_ttl_ms);
    let window = args.write_window_ms.map_or_else(
        || "computed from each master's settings".to_string(),
        |window| window.to_string(),
    );
    let groups = if args.groups.is_empty() {
        "every group".to_string()
    } else {
        args.groups.join(", ")
    };
    if !args.yes
        && !confirm(&format!(
            "Admit {groups} to the vote under max_ttl_ms={max_ttl_ms} write_window_ms={window}, after {} ms? [y/N] ",
            args.after_ms
        ))?
    {
        eprintln!("nothing admitted");
        return Ok(exit::USAGE);
    }
    let admitted = locks
        .admit(&AdmitOptions {
            groups: args.groups.clone(),
            write_window_ms: args.write_window_ms,
            delay: Duration::from_millis(args.after_ms),
            force: args.force,
            allow_short_window: args.allow_short_window,
            allow_unreplicated_writes: args.allow_unreplicated_writes,
            allow_unread_settings: args.allow_unread_settings,
            acknowledged: match (args.acknowledged, args.unacknowledged) {
                (true, _) => Some(true),
                (_, true) => Some(false),
                _ => None,
            },
            ..AdmitOptions::new(max_ttl_ms)
        })
        .await?;
    let failed = admitted.iter().any(|a| a.error.is_some());
    if json {
        output::json(&admitted)?;
    } else {
        let rows = admitted.iter().map(|a| {
            [
                a.group.clone(),
                if a.error.is_some() {
                    "REFUSED"
                } else {
                    "admitted"
                }
                .to_string(),
                or_dash(a.policy.map(|p| p.max_ttl_ms)),
                or_dash(a.policy.map(|p| p.write_window_ms)),
                or_dash(a.policy.map(|p| p.acked_replicas)),
                or_dash(a.votes_in_ms),
                or_dash(
                    a.replicas
                        .map(|r| format!("{}/{}", r.acknowledged, r.connected)),
                ),
                or_dash(a.error.as_ref()),
            ]
        });
        print!(
            "{}",
            output::table(
                [
                    "GROUP",
                    "RESULT",
                    "MAX_TTL_MS",
                    "WINDOW_MS",
                    "ACKED_BY",
                    "VOTES_IN_MS",
                    "REPLICAS",
                    "WHY"
                ],
                rows
            )
        );
    }
    Ok(if failed { exit::FAILURE } else { exit::OK })
}

/// Asks on the terminal; without one, `--yes` is required.
pub(super) fn confirm(question: &str) -> anyhow::Result<bool> {
    if !std::io::stdin().is_terminal() {
        anyhow::bail!("this changes who may vote: confirm with --yes (no terminal to ask on)");
    }
    eprint!("{question}");
    std::io::stderr().flush()?;
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}
