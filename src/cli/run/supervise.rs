//! Watching the command's process group while the lease is renewed: what run does when the
//! command exits and leaves processes behind, is stopped at a terminal, or the lease ends or
//! runs low, until no process of the group is left.

use tokio::time::Instant;

use super::group::{Change, CommandGroup};
use super::{Deadlines, RunArgs, Say, Signals, describe};
use crate::{Clock, KeptLease};
use serde_json::json;

/// What the watch over one command's group works from.
pub(super) struct Watch<'a> {
    pub args: &'a RunArgs,
    pub say: &'a Say,
    /// How messages name what is held.
    pub the_hold: &'a str,
    pub deadlines: Deadlines,
    pub clock: &'a Clock,
}

/// Where the group's stop stands.
#[derive(Default)]
struct Stop {
    /// Why the group is being stopped, once it is: the lease ended, or the command exited
    /// and left processes behind.
    lost: Option<String>,
    kill_at: Option<Instant>,
    killed: bool,
}

impl Watch<'_> {
    /// Runs until no process of the group is left; why the lease was lost, if it was.
    pub(super) async fn supervise(
        &self,
        kept: &KeptLease,
        group: &mut CommandGroup,
        signals: &mut Signals,
    ) -> Option<String> {
        let deadlines = &self.deadlines;
        let mut lease_state = kept.watch();
        let mut stop = Stop::default();
        let mut guard_deadline: Option<Instant> = None;
        loop {
            if group.status().is_some() && group.is_empty() {
                break;
            }
            let kill_by = deadlines.kill_by(kept, self.clock);
            // The guard kills the group a little after run would, should run be stopped or
            // starved by then.
            let backstop = kill_by + deadlines.margin / 2;
            if guard_deadline != Some(backstop) {
                group.kill_at(backstop.into_std());
                guard_deadline = Some(backstop);
            }
            let next_kill = stop.kill_at.map_or(kill_by, |at| at.min(kill_by));
            let term_by = deadlines.term_by(kill_by);
            let ending = stop.lost.is_none() && stop.kill_at.is_none();
            tokio::select! {
                change = group.changed() => self.changed(change, kept, group, &mut stop),
                // A renewal, a failed one, or the end: the deadlines are read again.
                () = lease_state.changed() => {}
                end = kept.lost(), if ending => {
                    let reason = describe(end);
                    self.say.event(
                        json!({"event": "lease_lost", "resource": self.args.resource, "reason": reason, "grace_ms": self.args.grace_ms}),
                        format!("lost {} ({reason}); sending SIGTERM to the command, SIGKILL in {} ms at the latest", self.the_hold, self.args.grace_ms),
                    );
                    self.terminate(group, &mut stop, reason);
                }
                // Renewals are failing and the validity runs low: a warning before the kill.
                _ = tokio::time::sleep_until(term_by), if ending && kept.renewals_failing() => {
                    let reason = "renewals failed; the lease's validity is running out".to_string();
                    self.say.event(
                        json!({"event": "lease_lost", "resource": self.args.resource, "reason": reason, "grace_ms": self.args.grace_ms}),
                        format!("{reason}; sending SIGTERM to the command, SIGKILL before the validity ends"),
                    );
                    self.terminate(group, &mut stop, reason);
                }
                _ = tokio::time::sleep_until(next_kill), if !stop.killed => {
                    self.kill_if_due(kept, group, &mut stop);
                }
                Some(()) = signals.interrupt.recv() => group.signal(libc::SIGINT),
                Some(()) = signals.terminate.recv() => group.signal(libc::SIGTERM),
                Some(()) = signals.hangup.recv() => group.signal(libc::SIGHUP),
                Some(()) = signals.quit.recv() => group.signal(libc::SIGQUIT),
            }
        }
        stop.lost
    }

    /// The command exited and left processes behind, or was stopped at a terminal.
    fn changed(&self, change: Change, kept: &KeptLease, group: &mut CommandGroup, stop: &mut Stop) {
        match change {
            Change::LeaderExited(_) if !stop.killed && !group.is_empty() => {
                self.say.event(
                    json!({"event": "leftovers", "resource": self.args.resource, "grace_ms": self.args.grace_ms}),
                    format!("the command exited and left processes in its group; sending them SIGTERM, SIGKILL in {} ms at the latest", self.args.grace_ms),
                );
                group.signal(libc::SIGTERM);
                stop.kill_at
                    .get_or_insert(Instant::now() + self.deadlines.grace);
            }
            Change::LeaderStopped if group.has_terminal() => {
                // Ctrl-Z: stop with the command, so the shell gets its terminal back. The
                // guard kills the group at the end of the validity if run is not
                // continued by then.
                group.take_terminal();
                // SAFETY: stops this process until the shell continues it.
                unsafe { libc::raise(libc::SIGSTOP) };
                // A lease that ran out meanwhile must not see its command continue.
                if Instant::now() >= self.deadlines.kill_by(kept, self.clock) {
                    group.kill();
                    stop.killed = true;
                    stop.lost.get_or_insert_with(|| {
                        "the validity ran out while the command was stopped".into()
                    });
                } else {
                    group.give_terminal();
                    group.signal(libc::SIGCONT);
                }
            }
            _ => {}
        }
    }

    /// The lease ended or runs low: SIGTERM now, SIGKILL after the grace.
    fn terminate(&self, group: &CommandGroup, stop: &mut Stop, reason: String) {
        group.signal(libc::SIGTERM);
        stop.lost = Some(reason);
        stop.kill_at = Some(Instant::now() + self.deadlines.grace);
    }

    /// SIGKILL to the group once its kill is due, unless a renewal moved the deadlines.
    fn kill_if_due(&self, kept: &KeptLease, group: &mut CommandGroup, stop: &mut Stop) {
        if stop.kill_at.is_none_or(|at| Instant::now() < at)
            && Instant::now() < self.deadlines.kill_by(kept, self.clock)
        {
            return;
        }
        self.say.event(
            json!({"event": "killed", "resource": self.args.resource}),
            "sending SIGKILL to the command's process group".to_string(),
        );
        group.kill();
        stop.killed = true;
        if group.status().is_none() {
            stop.lost
                .get_or_insert_with(|| "the lease's validity ran out".into());
        }
    }
}
