//! The command `run` starts, as a process group of its own: spawned with a parent-death
//! signal and a guard process that kills the group if `run` dies, handed the terminal when
//! `run` has it, signalled as a group, and reaped until no process of the group is left.
//!
//! `run` is made a child subreaper, so members of the group whose parents exit are
//! reparented to it: their deaths reach it as SIGCHLD, and it reaps them.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus};
use std::time::Duration;

use tokio::signal::unix::{Signal, SignalKind, signal};

/// What changed in the group since the last look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The command itself (the group's leader) exited; other members may still run.
    LeaderExited(ExitStatus),
    /// The command was stopped (Ctrl-Z at the terminal).
    LeaderStopped,
    /// Some other process was reaped, or the fallback check came round.
    Reaped,
}

/// The command's process group. Dropping it before the group is empty kills the group.
pub struct CommandGroup {
    /// The command's PID, which is also its process group's ID.
    leader: libc::pid_t,
    /// The leader's exit status, once it was reaped.
    status: Option<ExitStatus>,
    /// True once no process of the group is left; the group ID may then be reused, so
    /// nothing is sent to it any more.
    empty: bool,
    child_exited: Signal,
    terminal: Option<Terminal>,
    guard: Option<Guard>,
}

impl CommandGroup {
    /// Spawns `command` as the leader of a new process group, with SIGKILL as its
    /// parent-death signal, hands it the terminal when `run` is the terminal's foreground,
    /// and starts the guard that kills the group if `run` dies.
    pub fn spawn(mut command: Command) -> io::Result<CommandGroup> {
        // SAFETY: prctl on this process only; it only changes who reaps orphans.
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
        // Listening before the spawn, so no exit is missed.
        let child_exited = signal(SignalKind::child())?;
        let terminal = Terminal::foreground();
        let tty = terminal.as_ref().map(|t| t.tty.as_raw_fd());
        // SAFETY: getpid has no preconditions.
        let parent = unsafe { libc::getpid() };
        // SAFETY: the closure runs in the child between fork and exec and calls only
        // async-signal-safe functions (setpgid, sigaction, tcsetpgrp, prctl, getppid, kill).
        unsafe {
            command.pre_exec(move || {
                if libc::setpgid(0, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
                if let Some(tty) = tty {
                    // A background group asking for the terminal is sent SIGTTOU.
                    libc::signal(libc::SIGTTOU, libc::SIG_IGN);
                    libc::tcsetpgrp(tty, libc::getpid());
                }
                // `run` ignores SIGTTOU to take the terminal back; the command must not.
                libc::signal(libc::SIGTTOU, libc::SIG_DFL);
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
                // `run` died before the death signal was set: nothing would send it.
                if libc::getppid() != parent {
                    libc::kill(libc::getpid(), libc::SIGKILL);
                }
                Ok(())
            });
        }
        let child = command.spawn()?;
        let leader = child.id() as libc::pid_t;
        // Also from this side, as shells do, so neither order of the two calls races.
        // SAFETY: setpgid and tcsetpgrp on our own child; errors only mean the child did it
        // already or has exited.
        unsafe {
            libc::setpgid(leader, leader);
            if let Some(tty) = tty {
                libc::tcsetpgrp(tty, leader);
            }
        }
        let guard = Guard::start(leader);
        let mut group = CommandGroup {
            leader,
            status: None,
            empty: false,
            child_exited,
            terminal,
            guard: None,
        };
        match guard {
            Ok(guard) => group.guard = Some(guard),
            Err(error) => {
                group.kill();
                return Err(error);
            }
        }
        Ok(group)
    }

    /// Sends `signal` to every process of the group, unless none is left.
    pub fn signal(&self, signal: i32) {
        if !self.empty {
            // SAFETY: kill(2) on the group we created; a group ID is not reused while any
            // process of the group is alive, and `empty` is set as soon as none is.
            unsafe { libc::kill(-self.leader, signal) };
        }
    }

    /// SIGKILL to every process of the group.
    pub fn kill(&self) {
        self.signal(libc::SIGKILL);
    }

    /// True once no process of the group is left.
    pub fn is_empty(&mut self) -> bool {
        if !self.empty {
            // SAFETY: signal 0 only checks that some process of the group exists.
            let none = unsafe { libc::kill(-self.leader, 0) } != 0
                && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
            if none {
                self.empty = true;
                // Nothing is left to kill, and the group ID may be reused from now on.
                if let Some(guard) = self.guard.take() {
                    guard.stand_down();
                }
            }
        }
        self.empty
    }

    /// The leader's exit status, once it exited.
    pub fn status(&self) -> Option<ExitStatus> {
        self.status
    }

    /// Waits for the next change: the leader exiting or stopping, or another process of the
    /// group reaped. Cancel-safe.
    pub async fn changed(&mut self) -> Change {
        loop {
            if let Some(change) = self.reap() {
                return change;
            }
            if self.status.is_none() {
                self.child_exited.recv().await;
                continue;
            }
            // Once the leader is gone, the rest of the group reaches this process as orphans,
            // with a SIGCHLD each. A member whose parent left the group and lives on does
            // not: a slow check covers it.
            tokio::select! {
                _ = self.child_exited.recv() => {}
                _ = tokio::time::sleep(Duration::from_millis(250)) => return Change::Reaped,
            }
        }
    }

    /// Reaps what has ended: the leader (stopped or exited) first, then any other child.
    fn reap(&mut self) -> Option<Change> {
        let mut change = None;
        if self.status.is_none() {
            let mut raw = 0;
            // SAFETY: waitpid on our own child, with a valid pointer for its status.
            let pid =
                unsafe { libc::waitpid(self.leader, &mut raw, libc::WNOHANG | libc::WUNTRACED) };
            if pid == self.leader {
                if libc::WIFSTOPPED(raw) {
                    return Some(Change::LeaderStopped);
                }
                self.status = Some(ExitStatus::from_raw(raw));
                change = self.status.map(Change::LeaderExited);
            }
        }
        loop {
            let mut raw = 0;
            // SAFETY: as above, for any child: orphans of the group and the guard.
            let pid = unsafe { libc::waitpid(-1, &mut raw, libc::WNOHANG) };
            if pid <= 0 {
                break;
            }
            if pid == self.leader && self.status.is_none() {
                self.status = Some(ExitStatus::from_raw(raw));
                change = self.status.map(Change::LeaderExited);
            } else if change.is_none() {
                change = Some(Change::Reaped);
            }
        }
        change
    }

    /// Takes the terminal back for `run`'s own process group (when it was handed over).
    pub fn take_terminal(&self) {
        if let Some(terminal) = &self.terminal {
            terminal.give_to(terminal.own_group);
        }
    }

    /// Hands the terminal to the group again after `run` was continued in the foreground.
    pub fn give_terminal(&self) {
        if let Some(terminal) = &self.terminal
            && !self.empty
            && terminal.is_foreground()
        {
            terminal.give_to(self.leader);
        }
    }

    /// True when the group holds the terminal `run` gave it.
    pub fn has_terminal(&self) -> bool {
        self.terminal.is_some()
    }
}

impl Drop for CommandGroup {
    fn drop(&mut self) {
        if !self.is_empty() {
            self.kill();
        }
        self.take_terminal();
        // A guard still standing sees its pipe close and kills the group too.
    }
}

/// The terminal `run` was the foreground of, handed to the command's group.
struct Terminal {
    tty: File,
    own_group: libc::pid_t,
}

impl Terminal {
    /// The controlling terminal, when this process's group is its foreground group.
    fn foreground() -> Option<Terminal> {
        let tty = File::open("/dev/tty").ok()?;
        // SAFETY: getpgrp has no preconditions.
        let own_group = unsafe { libc::getpgrp() };
        let terminal = Terminal { tty, own_group };
        if !terminal.is_foreground() {
            return None;
        }
        // `run` takes the terminal back from a background group when the command ends.
        // SAFETY: setting a signal's disposition to ignore.
        unsafe { libc::signal(libc::SIGTTOU, libc::SIG_IGN) };
        Some(terminal)
    }

    fn is_foreground(&self) -> bool {
        // SAFETY: reads the terminal's foreground group through an open descriptor.
        unsafe { libc::tcgetpgrp(self.tty.as_raw_fd()) == self.own_group }
    }

    fn give_to(&self, group: libc::pid_t) {
        // SAFETY: tcsetpgrp on an open descriptor of our controlling terminal.
        unsafe { libc::tcsetpgrp(self.tty.as_raw_fd(), group) };
    }
}

/// A process forked from `run` that kills the command's group when `run` dies: it waits on
/// a pipe whose only writer is `run`, and the kernel closes that end however `run` ends.
struct Guard {
    /// The write end: a byte tells the guard to leave; closing it without one, to kill.
    stand_down: OwnedFd,
}

impl Guard {
    fn start(group: libc::pid_t) -> io::Result<Guard> {
        let mut fds = [0 as RawFd; 2];
        // SAFETY: pipe2 writes two descriptors into the array it is given.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just created and are owned here alone.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: the child calls only async-signal-safe functions (setpgid, sigaction,
        // close_range, read, kill, _exit) before it exits; it never returns into Rust code.
        match unsafe { libc::fork() } {
            -1 => Err(io::Error::last_os_error()),
            0 => unsafe { guard(read.as_raw_fd(), group) },
            _ => {
                drop(read);
                Ok(Guard { stand_down: write })
            }
        }
    }

    /// Tells the guard the group is gone, so it exits without killing anything.
    fn stand_down(self) {
        let byte = [1u8];
        // SAFETY: writes one byte from a valid buffer to our own pipe.
        unsafe { libc::write(self.stand_down.as_raw_fd(), byte.as_ptr().cast(), 1) };
    }
}

/// The guard's whole life, in the forked child.
///
/// # Safety
/// Only in a child just forked from `run`, with `read` the read end of the guard's pipe.
unsafe fn guard(read: RawFd, group: libc::pid_t) -> ! {
    // SAFETY: all async-signal-safe; see `Guard::start`.
    unsafe {
        // Out of `run`'s group, so a signal to that group (Ctrl-C, a kill of the job) does
        // not reach it, and deaf to the ones a terminal sends.
        libc::setpgid(0, 0);
        for signal in [
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGTSTP,
            libc::SIGTTIN,
            libc::SIGTTOU,
            libc::SIGPIPE,
        ] {
            libc::signal(signal, libc::SIG_IGN);
        }
        // Hold none of `run`'s descriptors (its stdout, its connections) but the pipe.
        if read > 0 {
            libc::syscall(libc::SYS_close_range, 0u32, (read - 1) as u32, 0u32);
        }
        libc::syscall(libc::SYS_close_range, (read + 1) as u32, u32::MAX, 0u32);
        let mut byte = 0u8;
        loop {
            let got = libc::read(read, (&mut byte as *mut u8).cast(), 1);
            if got < 0 && *libc::__errno_location() == libc::EINTR {
                continue;
            }
            if got != 1 {
                // `run` is gone without saying the group is: kill it.
                libc::kill(-group, libc::SIGKILL);
            }
            libc::_exit(0);
        }
    }
}
