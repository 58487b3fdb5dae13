//! `quorumlock run RESOURCE -- CMD ARGS...`: holds a lock, renewed, for exactly as long as a
//! command runs (like `flock` or `etcdctl lock NAME CMD`). It hands the command the lease in
//! its environment, passes its exit code through, forwards Ctrl-C and SIGTERM to it, stops it
//! when the lease ends, and releases the lock only once no process of the command's group is
//! left, so the lock never goes to anyone else while any of them runs. With `--permits N` it holds one
//! permit of a semaphore instead, so at most N such commands run at once. stdout belongs to
//! the command: everything `run` says goes to stderr.

mod group;
mod supervise;

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, ExitStatus};
use std::time::Duration;

use clap::Args;
use serde_json::{Value, json};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::time::Instant;

use super::exit;
use super::lease::LeaseArgs;
use crate::{Clock, KeptLease, LeaseEnd, Locks, PermitHandle};
use group::CommandGroup;
use supervise::Watch;

/// The least `--ttl-ms` run takes: it kills the command a tenth of the TTL (at least 100 ms)
/// before the validity ends, and renews at every third.
const MIN_RUN_TTL_MS: u64 = 1_000;

/// When `run` stops its command while renewals fail: SIGKILL a margin before the lease's
/// validity ends, and SIGTERM a warning before that.
struct Deadlines {
    /// Between SIGTERM and SIGKILL once the lease ended (`--grace-ms`).
    grace: Duration,
    /// Before the end of the validity: time for the kill to land and the group to be reaped.
    margin: Duration,
    /// Between SIGTERM and the SIGKILL at the end of the validity, while renewals fail: the
    /// grace, but at most a third of the TTL.
    warning: Duration,
}

impl Deadlines {
    fn new(kept: &KeptLease, grace_ms: u64) -> Deadlines {
        let ttl = kept.ttl();
        let grace = Duration::from_millis(grace_ms);
        Deadlines {
            grace,
            margin: (ttl / 10).clamp(Duration::from_millis(100), Duration::from_secs(1)),
            warning: grace.min(ttl / 3),
        }
    }

    /// The real instant by which no process of the command's group may be alive.
    fn kill_by(&self, kept: &KeptLease, clock: &Clock) -> Instant {
        let valid_until = Instant::from_std(clock.to_real(kept.valid_until()));
        valid_until
            .checked_sub(self.margin)
            .unwrap_or_else(Instant::now)
    }

    /// When the group gets SIGTERM if no renewal came by then.
    fn term_by(&self, kill_by: Instant) -> Instant {
        kill_by.checked_sub(self.warning).unwrap_or(kill_by)
    }
}

const RUN_HELP: &str = "The command runs with QUORUMLOCK_RESOURCE, QUORUMLOCK_TOKEN and QUORUMLOCK_FENCING_TOKEN in its
environment, in a process group of its own, while the lease is renewed every third of its TTL.
When it ends, what it left running in its group gets SIGTERM (SIGKILL after --grace-ms), and
the lock is released once no process of the group is left; its exit code is passed through
(killed by a signal: 128 + the signal). Ctrl-C and SIGTERM to run are forwarded to the group;
at a terminal the command gets the terminal, so Ctrl-C, Ctrl-Z and prompts work. If the lease
ends (force-released, held past max_hold_ms, or renewals failing), the group gets SIGTERM,
then SIGKILL after --grace-ms and in any case before the lease's validity ends, and run exits
121 once the group is gone, before the lock can go to anyone else. If run itself dies, the
group is killed. A lock that cannot be taken exits 1 (held) or 3 (quorum unavailable) without
running the command. run prints only to stderr (one JSON object a line with --json).

With --permits N, RESOURCE names a semaphore of N permits and the command runs under one of
them, so at most N commands run at once (every caller must give the same N). The command
also gets QUORUMLOCK_PERMIT (its permit, 0 to N-1); QUORUMLOCK_TOKEN names the permit, so
release and extend take it as they take a lock's; the fencing token is the permit's own.

Examples:
  quorumlock run db:migrations -- ./migrate.sh up
  quorumlock run api:search --permits 4 --wait-ms 60000 -- ./crawl.sh   # at most 4 at once
  quorumlock run nightly --wait-ms 60000 --ttl-ms 30000 -- sh -c 'backup --fence \"$QUORUMLOCK_FENCING_TOKEN\"'";

#[derive(Debug, Clone, Args)]
#[command(after_help = RUN_HELP)]
// The shared lease arguments, worded for run.
#[command(mut_arg("ttl_ms", |arg| arg.help(
    "Lease TTL in milliseconds; renewed every third of it while the command runs"
)))]
#[command(mut_arg("purpose", |arg| arg.help("Why (default: \"run\" and the program's name)")))]
pub struct RunArgs {
    /// The resource to lock (with --permits: the semaphore).
    resource: String,
    /// Run under one permit of the semaphore RESOURCE, which has N permits (1..=128; every
    /// caller must give the same N), instead of under its lock.
    #[arg(long, value_name = "N")]
    permits: Option<u32>,
    #[command(flatten)]
    lease: LeaseArgs,
    /// Once the lease ended, or the command left processes behind: milliseconds between
    /// SIGTERM and SIGKILL to its group (SIGKILL comes before the validity ends either way).
    #[arg(long, default_value_t = 5_000)]
    grace_ms: u64,
    /// The command and its arguments, after `--`.
    #[arg(required = true, num_args = 1.., trailing_var_arg = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

/// Where `run` reports what it does: stderr, as text or as one JSON object a line.
struct Say {
    json: bool,
}

impl Say {
    fn event(&self, event: Value, text: impl std::fmt::Display) {
        if self.json {
            eprintln!("{event}");
        } else {
            eprintln!("quorumlock: {text}");
        }
    }
}

pub async fn run(locks: &Locks, args: &RunArgs, json: bool) -> anyhow::Result<u8> {
    let say = Say { json };
    let program = args.command.first().ok_or_else(|| {
        crate::Error::invalid("command", "run needs a command to run, after `--`")
    })?;
    if args.lease.ttl_ms < MIN_RUN_TTL_MS {
        return Err(crate::Error::invalid(
            "ttl_ms",
            format!(
                "{} ms is below run's {MIN_RUN_TTL_MS} ms: run kills the command a tenth of the TTL (at least 100 ms) before the lease ends, and renews it every third",
                args.lease.ttl_ms
            ),
        )
        .into());
    }
    // Listening from the start: a Ctrl-C while waiting for the lock ends the wait.
    let mut signals = Signals::new()?;
    let kept = match take_lease(locks, args, program, &say, &mut signals).await? {
        Ok(kept) => kept,
        Err(code) => return Ok(code),
    };
    let (permit, the_hold) = announce(args, &kept, &say);
    let mut group = match start(args, program, &kept, permit, &say) {
        Ok(group) => group,
        Err(code) => {
            let _ = kept.release().await;
            return Ok(code);
        }
    };
    let watch = Watch {
        args,
        say: &say,
        the_hold: &the_hold,
        deadlines: Deadlines::new(&kept, args.grace_ms),
        clock: locks.clock(),
    };
    let lost = watch.supervise(&kept, &mut group, &mut signals).await;
    // No process of the group is left: only now may the lock go to anyone else.
    group.take_terminal();
    let status = group
        .status()
        .unwrap_or_else(|| ExitStatus::from_raw(libc::SIGKILL));
    // Ctrl-C or Ctrl-\ at the terminal reached the command's group alone: once it is done,
    // the rest of run's own group (a script run was called from, a pipeline) gets it too, as
    // it would have without run.
    let pass_on = status
        .signal()
        .filter(|&signal| group.has_terminal() && [libc::SIGINT, libc::SIGQUIT].contains(&signal));
    drop(group);
    let (code, lease_lost) = finish(args, kept, status, lost, &the_hold, &say).await;
    if !lease_lost && let Some(signal) = pass_on {
        // SAFETY: kill(2) on this process's own group; run's handler takes its own copy.
        unsafe { libc::kill(0, signal) };
    }
    Ok(code)
}

/// The signals run forwards to the command, listened to from the start.
struct Signals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
    quit: Signal,
}

impl Signals {
    fn new() -> std::io::Result<Signals> {
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
            quit: signal(SignalKind::quit())?,
        })
    }
}

/// Takes the lease, renewed from then on; a signal while waiting for it ends run with
/// 128 + the signal, the command not run.
async fn take_lease(
    locks: &Locks,
    args: &RunArgs,
    program: &OsString,
    say: &Say,
    signals: &mut Signals,
) -> anyhow::Result<Result<KeptLease, u8>> {
    let resource = args.resource.as_str();
    let purpose = args
        .lease
        .purpose
        .clone()
        .unwrap_or_else(|| format!("run {}", program_name(program)));
    let request = match args.permits {
        Some(permits) => locks.acquire_permit(resource, permits),
        None => locks.acquire(resource),
    };
    let request = args.lease.dress(request).purpose(purpose);
    let interrupted = |signal: i32| -> anyhow::Result<Result<KeptLease, u8>> {
        say.event(
            json!({"event": "interrupted", "resource": resource, "signal": signal}),
            format!("interrupted while acquiring {resource}; the command was not run"),
        );
        Ok(Err(128 + signal as u8))
    };
    Ok(Ok(tokio::select! {
        kept = request.keepalive() => kept.map_err(|error| {
            anyhow::Error::new(error).context("the command was not run")
        })?,
        Some(()) = signals.interrupt.recv() => return interrupted(libc::SIGINT),
        Some(()) = signals.terminate.recv() => return interrupted(libc::SIGTERM),
        Some(()) = signals.hangup.recv() => return interrupted(libc::SIGHUP),
        Some(()) = signals.quit.recv() => return interrupted(libc::SIGQUIT),
    }))
}

/// Says what was acquired. The permit's slot, for a permit, and how messages name what is
/// held: `the lock on R`, or `permit P of R (N permits)`.
fn announce(args: &RunArgs, kept: &KeptLease, say: &Say) -> (Option<u32>, String) {
    let resource = args.resource.as_str();
    let fence = kept.fencing_token();
    // A permit's token ends in its slot.
    let permit = args
        .permits
        .and_then(|_| Some(PermitHandle::parse(kept.token())?.slot));
    let mut acquired = json!({"event": "acquired", "resource": resource, "fencing_token": fence, "ttl_ms": args.lease.ttl_ms});
    let (held, the_hold) = match (permit, args.permits) {
        (Some(slot), Some(permits)) => {
            acquired["permit"] = json!(slot);
            acquired["permits"] = json!(permits);
            let named = format!("permit {slot} of {resource} ({permits} permits)");
            (named.clone(), named)
        }
        _ => (resource.to_string(), format!("the lock on {resource}")),
    };
    say.event(
        acquired,
        format!(
            "acquired {held} with fencing token {fence}; running {}",
            shown(&args.command)
        ),
    );
    (permit, the_hold)
}

/// Starts the command in a process group of its own, with the lease in its environment; the
/// exit code run ends with when it cannot be started.
fn start(
    args: &RunArgs,
    program: &OsString,
    kept: &KeptLease,
    permit: Option<u32>,
    say: &Say,
) -> Result<CommandGroup, u8> {
    let resource = args.resource.as_str();
    let mut command = Command::new(program);
    command
        .args(&args.command[1..])
        .env("QUORUMLOCK_RESOURCE", resource)
        .env("QUORUMLOCK_TOKEN", kept.token())
        .env("QUORUMLOCK_FENCING_TOKEN", kept.fencing_token().to_string());
    match permit {
        Some(slot) => command.env("QUORUMLOCK_PERMIT", slot.to_string()),
        // A value inherited from an enclosing `run --permits` would name no permit of ours.
        None => command.env_remove("QUORUMLOCK_PERMIT"),
    };
    CommandGroup::spawn(command).map_err(|error| {
        // As shells do: 127 when there is no such program, 126 when it cannot be run.
        let code = if error.kind() == std::io::ErrorKind::NotFound {
            127
        } else {
            126
        };
        say.event(
            json!({"event": "not_started", "resource": resource, "error": error.to_string(), "exit_code": code}),
            format!("cannot run {}: {error}", shown(&args.command)),
        );
        code
    })
}

/// Releases the lease once the command's group is gone and says how it ended: the exit code
/// run ends with (the command's own, or [`exit::LEASE_LOST`]), and whether the lease was lost.
async fn finish(
    args: &RunArgs,
    kept: KeptLease,
    status: ExitStatus,
    lost: Option<String>,
    the_hold: &str,
    say: &Say,
) -> (u8, bool) {
    let resource = args.resource.as_str();
    let (code, how) = exit_code_of(status);
    // A loss the keepalive reported as the command ended counts too.
    let lost = lost.or_else(|| kept.ended().map(describe));
    if let Some(reason) = lost {
        // At max_hold the lock is still ours: released now. A lost lease's task gave up, and
        // what it still held is released by token in the background.
        let released = kept.release().await.is_ok_and(|released| released.released);
        say.event(
            json!({"event": "ended", "resource": resource, "exit_code": exit::LEASE_LOST, "command_exit_code": code, "lease_lost": reason, "released": released}),
            format!(
                "the command ended ({how}) after {the_hold} was lost; exiting {}",
                exit::LEASE_LOST
            ),
        );
        return (exit::LEASE_LOST, true);
    }
    match kept.release().await {
        Ok(released) if released.released => say.event(
            json!({"event": "ended", "resource": resource, "exit_code": code, "released": true, "groups_released": released.groups_released}),
            format!(
                "the command ended ({how}); released {resource} on {} groups",
                released.groups_released
            ),
        ),
        Ok(released) if released.groups_maybe_released() > 0 => say.event(
            json!({"event": "ended", "resource": resource, "exit_code": code, "released": false, "groups_maybe_released": released.groups_maybe_released()}),
            format!(
                "the command ended ({how}); {resource} is gone on {} groups, but whether this release or the lease's end removed it cannot be told",
                released.groups_maybe_released()
            ),
        ),
        Ok(_) => say.event(
            json!({"event": "ended", "resource": resource, "exit_code": code, "released": false, "groups_maybe_released": 0}),
            format!(
                "the command ended ({how}); {resource} was no longer held by this lease (expired or force-released since its last renewal)"
            ),
        ),
        Err(error) => say.event(
            json!({"event": "ended", "resource": resource, "exit_code": code, "released": false, "error": error.to_string()}),
            format!(
                "the command ended ({how}); releasing {resource} failed, its TTL will free it: {error}"
            ),
        ),
    }
    (code, false)
}

/// The exit code `run` passes through, and how to say it: the command's own code, or
/// 128 + the signal that killed it, as shells do.
fn exit_code_of(status: ExitStatus) -> (u8, String) {
    match (status.code(), status.signal()) {
        (Some(code), _) => (code as u8, format!("exit code {code}")),
        (None, Some(signal)) => (
            (128 + signal).clamp(0, 255) as u8,
            format!("killed by signal {signal}"),
        ),
        (None, None) => (exit::FAILURE, "no exit status".to_string()),
    }
}

fn describe(end: LeaseEnd) -> String {
    match end {
        LeaseEnd::Lost(reason) => reason,
        LeaseEnd::MaxHold => "held for max_hold_ms; released once the command stopped".to_string(),
        LeaseEnd::Released => "released".to_string(),
    }
}

/// The program's file name, for the default purpose (its arguments may hold secrets).
fn program_name(program: &OsString) -> String {
    Path::new(program)
        .file_name()
        .unwrap_or(program)
        .to_string_lossy()
        .chars()
        .filter(|c| !c.is_control())
        .take(200)
        .collect()
}

/// The command line, for messages: words with anything but plain characters are quoted
/// as a shell would need them.
fn shown(command: &[OsString]) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_./:=@%+,-".contains(c);
    command
        .iter()
        .map(|part| {
            let part = part.to_string_lossy();
            if !part.is_empty() && part.chars().all(plain) {
                part.into_owned()
            } else {
                format!("'{}'", part.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_killed_by_a_signal_exits_128_plus_the_signal() {
        let killed = ExitStatus::from_raw(libc::SIGKILL);
        assert_eq!(exit_code_of(killed).0, 128 + libc::SIGKILL as u8);
        let exited = ExitStatus::from_raw(7 << 8);
        assert_eq!(exit_code_of(exited), (7, "exit code 7".to_string()));
    }

    #[test]
    fn the_command_line_is_shown_as_a_shell_would_read_it() {
        let command = ["sh", "-c", "echo it's"].map(OsString::from);
        assert_eq!(shown(&command), r"sh -c 'echo it'\''s'");
    }

    #[test]
    fn the_default_purpose_names_the_program_without_its_path_or_arguments() {
        assert_eq!(program_name(&OsString::from("/usr/bin/pg_dump")), "pg_dump");
    }
}
