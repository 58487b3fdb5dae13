//! The lock commands for people: status, list, acquire (optionally held until Ctrl-C),
//! release, extend, force-release and a live watch. Acquire, release and extend take one
//! resource or several: several are one lease, taken all or nothing. `acquire --permits N`
//! takes one permit of a semaphore instead; `status` and `watch` show a semaphore's holders,
//! and `list` every semaphore with a permit held.

use std::io::{BufRead, IsTerminal, Write};
use std::time::Duration;

use clap::Args;
use serde_json::json;

use super::exit;
use super::lease::{LeaseArgs, who_am_i};
use super::output::{self, duration_ms, or_dash};
use crate::Error;
use crate::LockStatus;
use crate::{Detached, Lease, LeaseEnd};
use crate::{Locks, PermitHandle, Released, SemaphoreStatus};

#[derive(Debug, Clone, Args)]
#[command(
    after_help = "When the name is a semaphore in use, its permits and their holders are shown too.\n\nExamples:\n  quorumlock status db:migrations\n  quorumlock --json status db:migrations | jq .fencing_token\n  quorumlock --json status api:search | jq .semaphore.holders"
)]
pub struct StatusArgs {
    /// The lock's (or semaphore's) resource name.
    resource: String,
}

#[derive(Debug, Clone, Args)]
#[command(
    after_help = "Locks are listed first, then semaphores with a permit held: one entry each, with its\npermits held of its count and a row per holder (--json: `semaphores`, beside `locks`).\n\nA page holds at most --limit entries, sorted by name; when more match it ends with the\ncursor of the next page (--json: `next_cursor`). Following the cursors lists every lock\nheld all along exactly once.\n\nExamples:\n  quorumlock list\n  quorumlock list jobs: --limit 20\n  quorumlock list jobs: --limit 20 --cursor CURSOR   # the page after, CURSOR as printed"
)]
pub struct ListArgs {
    /// Only resources whose name starts with this.
    #[arg(default_value = "")]
    prefix: String,
    /// At most this many locks and semaphores together on a page.
    #[arg(long, default_value_t = 100)]
    limit: usize,
    /// Start at this page: the cursor the page before printed (with the same prefix).
    #[arg(long)]
    cursor: Option<String>,
}

#[derive(Debug, Clone, Args)]
#[command(
    after_help = "Several resources are taken as one lease, all or nothing: one token and one fencing token\nfor all of them, or none of them when any is held.\n\nWith --permits N, RESOURCE names a semaphore of N permits: at most N holders at once (say,\nat most N workers calling an API), each with a permit of its own; every caller must give the\nsame N. The token names the permit; release and extend take it like a lock's.\n\nExamples:\n  quorumlock acquire db:migrations --ttl-ms 30000 --purpose \"migration 42\"   # prints the token\n  quorumlock acquire deploy --hold        # keep it (renewed) until Ctrl-C, then release it\n  quorumlock acquire src/a.rs src/b.rs src/c.rs --purpose refactor   # all three, or none\n  quorumlock acquire api:search --permits 4 --hold   # one of 4 permits, until Ctrl-C"
)]
pub struct AcquireArgs {
    /// The resource to lock; several are locked together, all or nothing (at most 64).
    #[arg(required = true, num_args = 1.., value_name = "RESOURCE")]
    resources: Vec<String>,
    #[command(flatten)]
    lease: LeaseArgs,
    /// Keep the lock, renewing it, until Ctrl-C or SIGTERM; then release it.
    #[arg(long)]
    hold: bool,
    /// Take one permit of the semaphore RESOURCE, which has N permits (1..=128; every
    /// caller must give the same N). One resource only.
    #[arg(long, value_name = "N")]
    permits: Option<u32>,
}

#[derive(Debug, Clone, Args)]
#[command(
    after_help = "Examples:\n  quorumlock release db:migrations --token 3f2a...\n  quorumlock release src/a.rs src/b.rs src/c.rs --token 3f2a...   # a set, as acquired"
)]
pub struct ReleaseArgs {
    /// The resource, or every resource of a set acquired together (any order).
    #[arg(required = true, num_args = 1.., value_name = "RESOURCE")]
    resources: Vec<String>,
    /// The token `acquire` printed.
    #[arg(long)]
    token: String,
}

#[derive(Debug, Clone, Args)]
#[command(
    after_help = "Examples:\n  quorumlock extend db:migrations --token 3f2a... --ttl-ms 30000\n  quorumlock extend src/a.rs src/b.rs src/c.rs --token 3f2a...   # a set, as acquired"
)]
pub struct ExtendArgs {
    /// The resource, or every resource of a set acquired together (any order).
    #[arg(required = true, num_args = 1.., value_name = "RESOURCE")]
    resources: Vec<String>,
    /// The token `acquire` printed.
    #[arg(long)]
    token: String,
    /// New TTL in milliseconds, counted from now.
    #[arg(long, default_value_t = 15_000)]
    ttl_ms: u64,
}

#[derive(Debug, Clone, Args)]
#[command(
    after_help = "Deletes the lock on every group whoever holds it; the holder is not told. Its fencing\ntoken stays below every later holder's, so fenced storage still rejects its late writes.\n\nExample:\n  quorumlock force-release stuck:job --yes"
)]
pub struct ForceReleaseArgs {
    resource: String,
    /// Do not ask for confirmation.
    #[arg(long)]
    yes: bool,
}

#[derive(Debug, Clone, Args)]
#[command(
    after_help = "A name that is also a semaphore in use shows its permits and their holders under the lock\nview, as `status` does, so holders are seen coming and going (--json: one status a line,\nwith `semaphore`). --all shows every lock and every semaphore with a permit held.\n\nExamples:\n  quorumlock watch db:migrations\n  quorumlock watch api:search        # a semaphore's permit holders\n  quorumlock watch --all --interval-ms 1000"
)]
pub struct WatchArgs {
    /// The lock (or semaphore) to watch.
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    resource: Option<String>,
    /// Watch every current lock and semaphore instead.
    #[arg(long)]
    all: bool,
    /// Refresh interval in milliseconds.
    #[arg(long, default_value_t = 500)]
    interval_ms: u64,
}

fn status_table(status: &LockStatus, quorum: usize) -> String {
    let named = |owner: &Option<String>, purpose: &Option<String>| {
        format!(
            "{}{}",
            owner.as_deref().unwrap_or("an unnamed owner"),
            purpose
                .as_deref()
                .map(|p| format!(" ({p})"))
                .unwrap_or_default()
        )
    };
    let verdict = match (&status.holder, status.holders.first()) {
        _ if status.split => {
            let each: Vec<String> = status
                .holders
                .iter()
                .enumerate()
                .map(|(index, h)| {
                    format!(
                        "#{} {} on {} ({} left, fence {})",
                        index + 1,
                        named(&h.owner, &h.purpose),
                        h.groups.join(", "),
                        duration_ms(h.remaining_ms),
                        or_dash(h.fencing_token)
                    )
                })
                .collect();
            format!(
                "SPLIT: {} tokens hold it; {}; quorum {quorum}",
                status.holders.len(),
                each.join("; ")
            )
        }
        (Some(holder), Some(groups)) if status.held => format!(
            "HELD by {}, {} left, fencing token {} ({} of {} groups hold it; quorum {quorum})",
            named(&holder.owner, &holder.purpose),
            duration_ms(holder.remaining_ms),
            or_dash(status.fencing_token),
            groups.groups.len(),
            status.groups.len()
        ),
        _ => format!("FREE (no token holds a majority; quorum {quorum})"),
    };
    // With a split, each row says which holder its group holds the lock for.
    let holder_of = |group: &str| {
        status
            .holders
            .iter()
            .position(|h| h.groups.iter().any(|g| g == group))
            .map(|index| format!("#{}", index + 1))
    };
    let rows = status.groups.iter().map(|g| {
        let mut row = vec![
            g.group.clone(),
            g.state.to_string(),
            or_dash(g.owner.as_ref()),
            or_dash(g.purpose.as_ref()),
            or_dash(g.remaining_ms.map(duration_ms)),
            or_dash(g.fence),
        ];
        if status.split {
            row.push(or_dash(holder_of(&g.group)));
        }
        row
    });
    let mut header = vec!["GROUP", "STATE", "OWNER", "PURPOSE", "REMAINING", "FENCE"];
    if status.split {
        header.push("HOLDER");
    }
    format!(
        "{}: {verdict}\n\n{}",
        status.resource,
        output::table(header, rows)
    )
}

/// A semaphore's permits and holders: `NAME: semaphore of N permits, K held`, then a table.
fn semaphore_table(semaphore: &SemaphoreStatus, permits: u32) -> String {
    let mut text = format!(
        "{}: semaphore of {permits} permits, {} held\n",
        semaphore.name,
        semaphore.holders.len()
    );
    if !semaphore.holders.is_empty() {
        let rows = semaphore.holders.iter().map(|h| {
            [
                h.permit.to_string(),
                or_dash(h.holder.owner.as_ref()),
                or_dash(h.holder.purpose.as_ref()),
                duration_ms(h.holder.remaining_ms),
                or_dash(h.fencing_token),
            ]
        });
        text.push('\n');
        text.push_str(&output::table(
            ["PERMIT", "OWNER", "PURPOSE", "REMAINING", "FENCE"],
            rows,
        ));
    }
    text
}

/// A lock and, when the name is also a semaphore in use, its permits: as JSON (the
/// semaphore under `semaphore`) or as tables.
async fn status_view(locks: &Locks, resource: &str, json: bool) -> anyhow::Result<StatusView> {
    let (status, semaphore) =
        tokio::join!(locks.status(resource), locks.semaphore_status(resource));
    let status = status?;
    // The name is a semaphore in use when a majority keeps a permit count for it.
    let semaphore = semaphore?;
    let permits = semaphore.permits;
    if json {
        let mut view = serde_json::to_value(&status)?;
        if permits.is_some()
            && let Some(object) = view.as_object_mut()
        {
            object.insert("semaphore".into(), serde_json::to_value(&semaphore)?);
        }
        return Ok(StatusView::Json(view));
    }
    let mut text = status_table(&status, locks.quorum());
    if let Some(permits) = permits {
        text.push('\n');
        text.push_str(&semaphore_table(&semaphore, permits));
    }
    Ok(StatusView::Text(text))
}

/// One rendering of [`status_view`].
enum StatusView {
    Json(serde_json::Value),
    Text(String),
}

pub async fn status(locks: &Locks, args: &StatusArgs, json: bool) -> anyhow::Result<u8> {
    match status_view(locks, &args.resource, json).await? {
        StatusView::Json(view) => output::json(&view)?,
        StatusView::Text(text) => print!("{text}"),
    }
    Ok(exit::OK)
}

fn list_table(list: &crate::LockList) -> String {
    if list.locks.is_empty() && list.semaphores.is_empty() {
        return "no locks held\n".to_string();
    }
    let mut text = String::new();
    if !list.locks.is_empty() {
        let rows = list.locks.iter().map(|l| {
            [
                l.resource.clone(),
                or_dash(l.owner.as_ref()),
                or_dash(l.purpose.as_ref()),
                duration_ms(l.remaining_ms),
                or_dash(l.fencing_token),
            ]
        });
        text.push_str(&output::table(
            ["RESOURCE", "OWNER", "PURPOSE", "REMAINING", "FENCE"],
            rows,
        ));
    }
    // One entry per semaphore, as `status` shows it: a line with its count, then its holders.
    for semaphore in &list.semaphores {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&semaphore_table(
            semaphore,
            semaphore.permits.unwrap_or_default(),
        ));
    }
    if let Some(cursor) = &list.next_cursor {
        text.push_str(&format!("(more match: next page with --cursor {cursor})\n"));
    }
    text
}

pub async fn list(locks: &Locks, args: &ListArgs, json: bool) -> anyhow::Result<u8> {
    let list = locks
        .list_page(&args.prefix, args.limit, args.cursor.as_deref())
        .await?;
    if json {
        output::json(&list)?;
    } else {
        print!("{}", list_table(&list));
    }
    Ok(exit::OK)
}

/// The resources as the engine orders a set: sorted (one resource stays as given).
fn canonical(resources: &[String]) -> Vec<String> {
    let mut names = resources.to_vec();
    names.sort();
    names
}

/// How tables name one resource or a set: `a` or `a, b, c`.
fn label(resources: &[String]) -> String {
    resources.join(", ")
}

pub async fn acquire(locks: &Locks, args: &AcquireArgs, json: bool) -> anyhow::Result<u8> {
    let request = match (args.resources.as_slice(), args.permits) {
        ([one], Some(permits)) => locks.acquire_permit(one.as_str(), permits),
        (_, Some(_)) => {
            return Err(Error::InvalidInput {
                field: "permits",
                reason: "takes one permit of one semaphore: name one resource, not several".into(),
            }
            .into());
        }
        ([one], None) => locks.acquire(one.as_str()),
        (several, None) => locks.acquire_all(several),
    };
    let lease = match args.lease.dress(request).await {
        Ok(lease) => lease,
        Err(Error::Held {
            resource,
            holder,
            votes,
        }) if json => {
            // `resource` names the member of a set that is held (the set itself when the
            // groups did not say which).
            let asked = canonical(&args.resources);
            let held_resource = asked.contains(&resource).then_some(resource);
            let mut denial = json!({
                "acquired": false,
                "resource": asked[0],
                "resources": asked,
                "held_resource": held_resource,
                "holder": holder,
                "votes": votes,
            });
            if let Some(permits) = args.permits {
                // Every permit is taken; `holder` is the one whose permit expires first.
                denial["permits"] = json!(permits);
            }
            output::json(&denial)?;
            return Ok(exit::DENIED);
        }
        Err(error) => return Err(error.into()),
    };
    print_acquired(&lease, args, json)?;
    if args.hold {
        return hold(lease, args, json).await;
    }
    let Detached {
        resources, token, ..
    } = lease.detach();
    if !json {
        println!(
            "release {} with: quorumlock release {} --token {token}",
            if resources.len() > 1 { "them" } else { "it" },
            resources.join(" ")
        );
    }
    Ok(exit::OK)
}

/// Prints what `acquire` got: its token, fencing token and validity.
fn print_acquired(lease: &Lease, args: &AcquireArgs, json: bool) -> anyhow::Result<()> {
    let expires_at = chrono::DateTime::<chrono::Utc>::from(lease.expires_at()).to_rfc3339();
    let resources = lease.resources().to_vec();
    // A permit's token ends in its slot.
    let permit = args
        .permits
        .and_then(|permits| Some((PermitHandle::parse(lease.token())?.slot, permits)));
    if json {
        let mut acquired = json!({
            "acquired": true,
            "resource": lease.resource(),
            "resources": resources,
            "token": lease.token(),
            "fencing_token": lease.fencing_token(),
            "validity_ms": lease.validity().as_millis() as u64,
            "expires_at": expires_at,
            "votes": lease.votes(),
        });
        if let Some((slot, permits)) = permit {
            acquired["permit"] = json!(slot);
            acquired["permits"] = json!(permits);
        }
        output::json(&acquired)?;
    } else {
        match permit {
            Some((slot, permits)) => println!(
                "acquired permit {slot} of {} ({permits} permits)",
                label(&resources)
            ),
            None => println!("acquired {}", label(&resources)),
        }
        println!("token          {}", lease.token());
        if resources.len() > 1 {
            println!(
                "fencing token  {} (one for all {}: pass it with writes to each)",
                lease.fencing_token(),
                resources.len()
            );
        } else {
            println!("fencing token  {}", lease.fencing_token());
        }
        println!(
            "valid for      {} (until {expires_at})",
            duration_ms(lease.validity().as_millis() as u64)
        );
    }
    Ok(())
}

/// `acquire --hold`: keeps the lease, renewed, until Ctrl-C or SIGTERM, then releases it.
async fn hold(lease: Lease, args: &AcquireArgs, json: bool) -> anyhow::Result<u8> {
    let resources = lease.resources().to_vec();
    let kept = lease.keepalive();
    if !json {
        println!(
            "holding it, renewed every {} ms; Ctrl-C releases it",
            args.lease.ttl_ms / 3
        );
    }
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        end = kept.lost() => {
            let reason = match end {
                LeaseEnd::Lost(reason) => reason,
                LeaseEnd::MaxHold => "max_hold_ms reached".to_string(),
                LeaseEnd::Released => "released".to_string(),
            };
            eprintln!("the lock on {} ended: {reason}", label(&resources));
            // At max_hold the lock is still ours until this release.
            let _ = kept.release().await;
            return Ok(exit::DENIED);
        }
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    let released = kept.release().await?;
    report_release(&resources, &released, json)
}

/// Prints a release of one resource or of a set (`resources` in the engine's order). Only a
/// delete this release made is reported as released: a lock gone after a try that went
/// unanswered may have expired first.
fn report_release(resources: &[String], released: &Released, json: bool) -> anyhow::Result<u8> {
    let named = label(resources);
    let several = resources.len() > 1;
    let maybe_released = released.groups_maybe_released();
    if json {
        output::json(&json!({
            "released": released.released,
            "resource": resources[0],
            "resources": resources,
            "groups_released": released.groups_released,
            "groups_maybe_released": maybe_released,
            "votes": released.votes,
        }))?;
    } else if released.released {
        println!("released {named} on {} groups", released.groups_released);
    } else if maybe_released > 0 {
        println!(
            "{named} {} gone from {maybe_released} groups, but this release's try there went unanswered: whether it or the lease's end (expiry, force release) removed {} cannot be told; not reported as released",
            if several { "are" } else { "is" },
            if several { "them" } else { "it" }
        );
    } else {
        println!(
            "{named} {} not held by this token (expired, released, or someone else's); nothing changed",
            if several { "were" } else { "was" }
        );
    }
    Ok(if released.released {
        exit::OK
    } else {
        exit::DENIED
    })
}

pub async fn release(locks: &Locks, args: &ReleaseArgs, json: bool) -> anyhow::Result<u8> {
    let released = match args.resources.as_slice() {
        [one] => locks.release(one, &args.token).await?,
        several => locks.release_all(several, &args.token).await?,
    };
    report_release(&canonical(&args.resources), &released, json)
}

pub async fn extend(locks: &Locks, args: &ExtendArgs, json: bool) -> anyhow::Result<u8> {
    let ttl = Duration::from_millis(args.ttl_ms);
    let extended = match args.resources.as_slice() {
        [one] => locks.extend(one, &args.token, ttl).await?,
        several => locks.extend_all(several, &args.token, ttl).await?,
    };
    let validity = extended
        .valid_until
        .saturating_duration_since(std::time::Instant::now());
    let resources = canonical(&args.resources);
    if json {
        output::json(&json!({
            "extended": true,
            "resource": resources[0],
            "resources": resources,
            "validity_ms": validity.as_millis() as u64,
            "votes": extended.votes,
        }))?;
    } else {
        println!(
            "extended {}: valid for {}",
            label(&resources),
            duration_ms(validity.as_millis() as u64)
        );
    }
    Ok(exit::OK)
}

pub async fn force_release(
    locks: &Locks,
    args: &ForceReleaseArgs,
    json: bool,
) -> anyhow::Result<u8> {
    let status = locks.status(&args.resource).await?;
    let holder = status
        .holder
        .as_ref()
        .map_or_else(|| "nobody (per the quorum)".to_string(), |h| h.to_string());
    if !args.yes {
        if !std::io::stdin().is_terminal() {
            anyhow::bail!(
                "refusing to force-release without --yes: standard input is not a terminal to confirm on"
            );
        }
        eprint!(
            "Delete the lock on `{}` (held by {holder}) on every group? [y/N] ",
            args.resource
        );
        std::io::stderr().flush()?;
        let mut answer = String::new();
        std::io::stdin().lock().read_line(&mut answer)?;
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            eprintln!("not released");
            return Ok(exit::DENIED);
        }
    }
    let released = locks.force_release(&args.resource).await?;
    let by = who_am_i();
    tracing::warn!(resource = %args.resource, %by, %holder, groups = released.groups_released, "force-released");
    eprintln!(
        "force-released `{}` (held by {holder}) by {by}",
        args.resource
    );
    report_release(std::slice::from_ref(&args.resource), &released, json)
}

pub async fn watch(locks: &Locks, args: &WatchArgs, json: bool) -> anyhow::Result<u8> {
    use tokio::io::AsyncWriteExt;
    let mut ticks = tokio::time::interval(Duration::from_millis(args.interval_ms.max(50)));
    // One listener for the whole watch: a Ctrl-C while a frame is read or written is kept
    // until the next select, and ends the watch even when a slow reader blocks stdout.
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let mut stdout = tokio::io::stdout();
    loop {
        tokio::select! {
            _ = interrupt.recv() => return Ok(exit::OK),
            _ = ticks.tick() => {}
        }
        let frame = tokio::select! {
            _ = interrupt.recv() => return Ok(exit::OK),
            frame = watch_frame(locks, args, json) => frame?,
        };
        let text = if json {
            format!("{frame}\n")
        } else {
            // Clear the screen and home the cursor, so the view refreshes in place.
            format!(
                "\x1b[2J\x1b[H{frame}\n(refreshing every {} ms; Ctrl-C to quit)\n",
                args.interval_ms
            )
        };
        let written = tokio::select! {
            _ = interrupt.recv() => return Ok(exit::OK),
            written = async {
                stdout.write_all(text.as_bytes()).await?;
                stdout.flush().await
            } => written,
        };
        match written {
            Ok(()) => {}
            // The reader is gone (`watch ... | head`): nothing more to show.
            Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => return Ok(exit::OK),
            Err(error) => return Err(error.into()),
        }
    }
}

/// One frame of `watch`: the lock (and semaphore) view, or the list of everything held.
async fn watch_frame(locks: &Locks, args: &WatchArgs, json: bool) -> anyhow::Result<String> {
    Ok(match &args.resource {
        Some(resource) if !args.all => match status_view(locks, resource, json).await? {
            StatusView::Json(view) => serde_json::to_string(&view)?,
            StatusView::Text(text) => text,
        },
        _ => {
            let list = locks.list("", 1000).await?;
            if json {
                serde_json::to_string(&list)?
            } else {
                list_table(&list)
            }
        }
    })
}
