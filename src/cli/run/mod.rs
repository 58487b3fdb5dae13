//! `quorumlock run RESOURCE -- CMD ARGS...`: holds a lock, renewed, for exactly as long as a
//! command runs (like `flock` or `etcdctl lock NAME CMD`). It hands the command the lease in
//! its environment, passes its exit code through, forwards Ctrl-C and SIGTERM to it, stops it
//! when the lease ends, and releases the lock only once no process of the command's group is
//! left, so the lock never goes to anyone else while any of them runs. With `--permits N` it holds one
//! permit of a semaphore instead, so at most N such commands run at once. stdout belongs to
//! the command: everything `run` says goes to stderr.

mod group;

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, ExitStatus};
use std::time::Duration;

use clap::Args;
use serde_json::{Value, json};
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::Instant;

use super::exit;
use crate::{Clock, KeptLease, LeaseEnd, Locks, PermitHandle};
use group::{Change, CommandGroup};

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
pub struct RunArgs {
    /// The resource to lock (with --permits: the semaphore).
    resource: String,
    /// Run under one permit of the semaphore RESOURCE, which has N permits (1..=128; every
    /// caller must give the same N), instead of under its lock.
    #[arg(long, value_name = "N")]
    permits: Option<u32>,
    /// Lease TTL in milliseconds; renewed every third of it while the command runs.
    #[arg(long, default_value_t = 15_000)]
    ttl_ms: u64,
    /// Keep trying this many milliseconds while it is held elsewhere.
    #[arg(long, default_value_t = 0)]
    wait_ms: u64,
    /// Who holds it (default: $USER@host).
    #[arg(long)]
    owner: Option<String>,
    /// Why (default: "run" and the program's name).
    #[arg(long)]
    purpose: Option<String>,
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
    let resource = args.resource.as_str();
    let program = args.command.first().ok_or_else(|| {
        crate::Error::invalid("command", "run needs a command to run, after `--`")
    })?;
    if args.ttl_ms < MIN_RUN_TTL_MS {
        return Err(crate::Error::invalid(
            "ttl_ms",
            format!(
                "{} ms is below run's {MIN_RUN_TTL_MS} ms: run kills the command a tenth of the TTL (at least 100 ms) before the lease ends, and renews it every third",
                args.ttl_ms
            ),
        )
        .into());
    }
    // Listening from the start: a Ctrl-C while waiting for the lock ends the wait.
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut hangup = signal(SignalKind::hangup())?;
    let mut quit = signal(SignalKind::quit())?;
    let purpose = args
        .purpose
        .clone()
        .unwrap_or_else(|| format!("run {}", program_name(program)));
    let request = match args.permits {
        Some(permits) => locks.acquire_permit(resource, permits),
        None => locks.acquire(resource),
    };
    let request = request
        .ttl(Duration::from_millis(args.ttl_ms))
        .wait(Duration::from_millis(args.wait_ms))
        .owner(args.owner.clone().unwrap_or_else(who_am_i))
        .purpose(purpose);
    let interrupted = |signal: i32| -> anyhow::Result<u8> {
        say.event(
            json!({"event": "interrupted", "resource": resource, "signal": signal}),
            format!("interrupted while acquiring {resource}; the command was not run"),
        );
        Ok(128 + signal as u8)
    };
    let kept = tokio::select! {
        kept = request.keepalive() => kept.map_err(|error| {
            anyhow::Error::new(error).context("the command was not run")
        })?,
        Some(()) = interrupt.recv() => return interrupted(libc::SIGINT),
        Some(()) = terminate.recv() => return interrupted(libc::SIGTERM),
        Some(()) = hangup.recv() => return interrupted(libc::SIGHUP),
        Some(()) = quit.recv() => return interrupted(libc::SIGQUIT),
    };
    let fence = kept.fencing_token();
    // A permit's token ends in its slot.
    let permit = args
        .permits
        .and_then(|_| Some(PermitHandle::parse(kept.token())?.slot));
    let mut acquired = json!({"event": "acquired", "resource": resource, "fencing_token": fence, "ttl_ms": args.ttl_ms});
    // How messages name what is held: `the lock on R`, or `permit P of R (N permits)`.
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

    let mut command = Command::new(program);
    command
        .args(&args.command[1..])
        .env("QUORUMLOCK_RESOURCE", resource)
        .env("QUORUMLOCK_TOKEN", kept.token())
        .env("QUORUMLOCK_FENCING_TOKEN", fence.to_string());
    match permit {
        Some(slot) => command.env("QUORUMLOCK_PERMIT", slot.to_string()),
        // A value inherited from an enclosing `run --permits` would name no permit of ours.
        None => command.env_remove("QUORUMLOCK_PERMIT"),
    };
    let mut group = match CommandGroup::spawn(command) {
        Ok(group) => group,
        Err(error) => {
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
            let _ = kept.release().await;
            return Ok(code);
        }
    };

    let deadlines = Deadlines::new(&kept, args.grace_ms);
    let clock = locks.clock();
    let mut lease_state = kept.watch();
    // Why the group is being stopped, once it is: the lease ended, or the command exited and
    // left processes behind.
    let mut lost: Option<String> = None;
    let mut kill_at: Option<Instant> = None;
    let mut killed = false;
    let mut guard_deadline: Option<Instant> = None;
    loop {
        if group.status().is_some() && group.is_empty() {
            break;
        }
        let kill_by = deadlines.kill_by(&kept, clock);
        // The guard kills the group a little after run would, should run be stopped or
        // starved by then.
        let backstop = kill_by + deadlines.margin / 2;
        if guard_deadline != Some(backstop) {
            group.kill_at(backstop.into_std());
            guard_deadline = Some(backstop);
        }
        let next_kill = kill_at.map_or(kill_by, |at| at.min(kill_by));
        let term_by = deadlines.term_by(kill_by);
        tokio::select! {
            change = group.changed() => match change {
                Change::LeaderExited(_) if !killed && !group.is_empty() => {
                    say.event(
                        json!({"event": "leftovers", "resource": resource, "grace_ms": args.grace_ms}),
                        format!("the command exited and left processes in its group; sending them SIGTERM, SIGKILL in {} ms at the latest", args.grace_ms),
                    );
                    group.signal(libc::SIGTERM);
                    kill_at.get_or_insert(Instant::now() + deadlines.grace);
                }
                Change::LeaderStopped if group.has_terminal() => {
                    // Ctrl-Z: stop with the command, so the shell gets its terminal back. The
                    // guard kills the group at the end of the validity if run is not
                    // continued by then.
                    group.take_terminal();
                    // SAFETY: stops this process until the shell continues it.
                    unsafe { libc::raise(libc::SIGSTOP) };
                    // A lease that ran out meanwhile must not see its command continue.
                    if Instant::now() >= deadlines.kill_by(&kept, clock) {
                        group.kill();
                        killed = true;
                        lost.get_or_insert_with(|| "the validity ran out while the command was stopped".into());
                    } else {
                        group.give_terminal();
                        group.signal(libc::SIGCONT);
                    }
                }
                _ => {}
            },
            // A renewal, a failed one, or the end: the deadlines are read again.
            () = lease_state.changed() => {}
            end = kept.lost(), if lost.is_none() && kill_at.is_none() => {
                let reason = describe(end);
                say.event(
                    json!({"event": "lease_lost", "resource": resource, "reason": reason, "grace_ms": args.grace_ms}),
                    format!("lost {the_hold} ({reason}); sending SIGTERM to the command, SIGKILL in {} ms at the latest", args.grace_ms),
                );
                group.signal(libc::SIGTERM);
                lost = Some(reason);
                kill_at = Some(Instant::now() + deadlines.grace);
            }
            // Renewals are failing and the validity runs low: a warning before the kill.
            _ = tokio::time::sleep_until(term_by), if lost.is_none() && kill_at.is_none() && kept.renewals_failing() => {
                let reason = "renewals failed; the lease's validity is running out".to_string();
                say.event(
                    json!({"event": "lease_lost", "resource": resource, "reason": reason, "grace_ms": args.grace_ms}),
                    format!("{reason}; sending SIGTERM to the command, SIGKILL before the validity ends"),
                );
                group.signal(libc::SIGTERM);
                lost = Some(reason);
                kill_at = Some(Instant::now() + deadlines.grace);
            }
            _ = tokio::time::sleep_until(next_kill), if !killed => {
                // Renewed meanwhile: the deadlines moved.
                if kill_at.is_none_or(|at| Instant::now() < at)
                    && Instant::now() < deadlines.kill_by(&kept, clock)
                {
                    continue;
                }
                say.event(
                    json!({"event": "killed", "resource": resource}),
                    "sending SIGKILL to the command's process group".to_string(),
                );
                group.kill();
                killed = true;
                if group.status().is_none() {
                    lost.get_or_insert_with(|| "the lease's validity ran out".into());
                }
            }
            Some(()) = interrupt.recv() => group.signal(libc::SIGINT),
            Some(()) = terminate.recv() => group.signal(libc::SIGTERM),
            Some(()) = hangup.recv() => group.signal(libc::SIGHUP),
            Some(()) = quit.recv() => group.signal(libc::SIGQUIT),
        }
    }
    // No process of the group is left: only now may the lock go to anyone else.
    group.take_terminal();
    let status = group
        .status()
        .unwrap_or_else(|| ExitStatus::from_raw(libc::SIGKILL));
    let (code, how) = exit_code_of(status);
    // Ctrl-C or Ctrl-\ at the terminal reached the command's group alone: once it is done,
    // the rest of run's own group (a script run was called from, a pipeline) gets it too, as
    // it would have without run.
    let pass_on = status
        .signal()
        .filter(|&signal| group.has_terminal() && [libc::SIGINT, libc::SIGQUIT].contains(&signal));
    drop(group);

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
        return Ok(exit::LEASE_LOST);
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
    if let Some(signal) = pass_on {
        // SAFETY: kill(2) on this process's own group; run's handler takes its own copy.
        unsafe { libc::kill(0, signal) };
    }
    Ok(code)
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

fn who_am_i() -> String {
    let user = std::env::var("USER").unwrap_or_else(|_| "unknown".into());
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into());
    format!("{user}@{host}")
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
