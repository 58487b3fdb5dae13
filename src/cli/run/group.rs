//! The command `run` starts, as a process group of its own: spawned with a parent-death
//! signal and watched by a guard process that kills the group at a deadline `run` keeps
//! moving, or when `run` dies; handed the terminal when `run` has it; signalled as a group;
//! and reaped until no process of the group is left.
//!
//! `run` is made a child subreaper, so members of the group whose parents exit are
//! reparented to it: their deaths reach it as SIGCHLD, and it reaps them.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

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
    /// parent-death signal, under a guard that kills the group if `run` dies, and hands it
    /// the terminal when `run` is the terminal's foreground.
    pub fn spawn(mut command: Command) -> io::Result<CommandGroup> {
        // SAFETY: prctl on this process only; it only changes who reaps orphans.
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
        // Listening before the spawn, so no exit is missed.
        let child_exited = signal(SignalKind::child())?;
        // Started first, so there is no moment when the command runs unguarded.
        let guard = Guard::start()?;
        let terminal = Terminal::foreground();
        let tty = terminal.as_ref().map(|t| t.tty.as_raw_fd());
        // SAFETY: getpid has no preconditions.
        let parent = unsafe { libc::getpid() };
        // The command names its own group to the guard before it execs, so a `run` killed
        // right after the spawn still leaves a guard that knows what to kill.
        let guard_pipe = guard.pipe.as_raw_fd();
        // SAFETY: the closure runs in the child between fork and exec and calls only
        // async-signal-safe functions (setpgid, sigaction, tcsetpgrp, prctl, getppid, kill,
        // write).
        // The parent-death signal follows the thread that forks: `run` spawns from the
        // runtime's main thread, which lives as long as `run`.
        unsafe {
            command.pre_exec(move || {
                if libc::setpgid(0, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
                if let Some(tty) = tty {
                    // A background group asking for the terminal is sent SIGTTOU.
                    libc::signal(libc::SIGTTOU, libc::SIG_IGN);
                    libc::tcsetpgrp(tty, libc::getpid());
                    // `run` ignores SIGTTOU to take the terminal back; the command must not.
                    libc::signal(libc::SIGTTOU, libc::SIG_DFL);
                }
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
                // `run` died before the death signal was set: nothing would send it.
                if libc::getppid() != parent {
                    libc::kill(libc::getpid(), libc::SIGKILL);
                }
                let group = (libc::getpid() as u64).to_ne_bytes();
                if libc::write(guard_pipe, group.as_ptr().cast(), group.len())
                    != group.len() as isize
                {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        // `spawn` returns once the command has exec'd, so its group and the terminal's
        // foreground are already set.
        let child = match command.spawn() {
            Ok(child) => child,
            Err(error) => {
                // The group may be named already; it is gone, and its ID may be reused.
                guard.stand_down();
                return Err(error);
            }
        };
        let leader = child.id() as libc::pid_t;
        Ok(CommandGroup {
            leader,
            status: None,
            empty: false,
            child_exited,
            terminal,
            guard: Some(guard),
        })
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

    /// Tells the guard to kill the group at `deadline` unless told a later one first, so
    /// the group dies on time even while `run` is stopped or starved.
    pub fn kill_at(&mut self, deadline: Instant) {
        if let Some(guard) = &mut self.guard {
            guard.deadline(deadline);
        }
    }

    /// True once no process of the group is left but zombies (they run nothing).
    pub fn is_empty(&mut self) -> bool {
        if !self.empty && no_member_runs(self.leader) {
            self.empty = true;
            // Nothing is left to kill, and the group ID may be reused from now on.
            if let Some(guard) = self.guard.take() {
                guard.stand_down();
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
            // not, nor does a zombie whose parent never reaps it: a slow check covers them.
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
            // SAFETY: as above, for any child: orphans of the group and the guard. `run`
            // has no other children (it uses no other child process).
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

    /// Takes the terminal back for `run`'s own process group, if the command's group holds
    /// it (after `bg`, the shell holds it, and it stays there).
    pub fn take_terminal(&self) {
        if let Some(terminal) = &self.terminal
            && terminal.foreground_group() == self.leader
        {
            terminal.give_to(terminal.own_group);
        }
    }

    /// Hands the terminal to the group again after `run` was continued in the foreground.
    pub fn give_terminal(&self) {
        if let Some(terminal) = &self.terminal
            && !self.empty
            && terminal.foreground_group() == terminal.own_group
        {
            terminal.give_to(self.leader);
        }
    }

    /// True when `run` handed the group its terminal.
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

/// True when no process of group `group` is left but zombies.
fn no_member_runs(group: libc::pid_t) -> bool {
    // SAFETY: signal 0 only checks that some process of the group exists.
    if unsafe { libc::kill(-group, 0) } != 0 {
        // ESRCH: none. EPERM: some member we may not signal (a setuid program) still runs.
        return io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
    }
    // Something is there: zombies only, when every process of the group is one.
    let Ok(processes) = std::fs::read_dir("/proc") else {
        return false;
    };
    for process in processes.flatten() {
        let Ok(stat) = std::fs::read_to_string(process.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses.
        let Some((_, after)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut fields = after.split_whitespace();
        let (state, pgrp) = (fields.next(), fields.nth(1));
        if pgrp == Some(group.to_string().as_str()) && state != Some("Z") {
            return false;
        }
    }
    true
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
        if terminal.foreground_group() != own_group {
            return None;
        }
        // `run` takes the terminal back from a background group when the command ends.
        // SAFETY: setting a signal's disposition to ignore.
        unsafe { libc::signal(libc::SIGTTOU, libc::SIG_IGN) };
        Some(terminal)
    }

    fn foreground_group(&self) -> libc::pid_t {
        // SAFETY: reads the terminal's foreground group through an open descriptor.
        unsafe { libc::tcgetpgrp(self.tty.as_raw_fd()) }
    }

    fn give_to(&self, group: libc::pid_t) {
        // SAFETY: tcsetpgrp on an open descriptor of our controlling terminal.
        unsafe { libc::tcsetpgrp(self.tty.as_raw_fd(), group) };
    }
}

/// A process forked from `run` that kills the command's group at a deadline `run` keeps
/// moving, or as soon as `run` dies: it reads a pipe whose only writer is `run`, and the
/// kernel closes that end however `run` ends.
///
/// Messages are 8 bytes (native order), each written whole (a pipe write of up to PIPE_BUF
/// bytes is atomic): the group to watch, written by the command itself before it execs, then
/// deadlines on CLOCK_MONOTONIC in nanoseconds, and 0 to stand down once the group is gone.
/// End of file without that 0 kills the group.
struct Guard {
    pipe: OwnedFd,
}

impl Guard {
    fn start() -> io::Result<Guard> {
        let mut fds = [0 as RawFd; 2];
        // SAFETY: pipe2 writes two descriptors into the array it is given.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just created and are owned here alone.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // Computed before the fork: the child may only make async-signal-safe calls.
        // SAFETY: sysconf has no preconditions.
        let open_max = unsafe { libc::sysconf(libc::_SC_OPEN_MAX) }.clamp(1024, 1 << 20) as RawFd;
        // SAFETY: the child calls only async-signal-safe functions (setpgid, sigaction,
        // close, close_range, read, poll, clock_gettime, kill, _exit) and never returns
        // into Rust code.
        match unsafe { libc::fork() } {
            -1 => Err(io::Error::last_os_error()),
            0 => unsafe { guard(read.as_raw_fd(), write.as_raw_fd(), open_max) },
            _ => {
                drop(read);
                Ok(Guard { pipe: write })
            }
        }
    }

    fn send(&self, message: u64) {
        let bytes = message.to_ne_bytes();
        // SAFETY: writes 8 bytes from a valid buffer to our own pipe.
        unsafe { libc::write(self.pipe.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) };
    }

    /// Moves the deadline at which the guard kills the group.
    fn deadline(&mut self, at: Instant) {
        let left = at.saturating_duration_since(Instant::now());
        let at = monotonic_nanos()
            .saturating_add(left.as_nanos() as u64)
            .max(1);
        self.send(at);
    }

    /// Tells the guard the group is gone, so it exits without killing anything.
    fn stand_down(self) {
        self.send(0);
    }
}

/// CLOCK_MONOTONIC now, in nanoseconds.
fn monotonic_nanos() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec it is given; async-signal-safe.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    (now.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(now.tv_nsec as u64)
}

/// The guard's whole life, in the forked child.
///
/// # Safety
/// Only in a child just forked from `run`, with `read` and `write` the guard's pipe.
unsafe fn guard(read: RawFd, write: RawFd, open_max: RawFd) -> ! {
    // SAFETY: all async-signal-safe; see `Guard::start`.
    unsafe {
        // Out of `run`'s group, so a signal to that group (Ctrl-C, a kill of the job, Ctrl-Z)
        // does not reach it, and deaf to the ones a terminal sends.
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
        // Its own copy of the write end would keep the pipe open after `run` died.
        libc::close(write);
        // Hold none of `run`'s descriptors (its stdout, its connections) but the pipe.
        let below = if read > 0 {
            libc::syscall(libc::SYS_close_range, 0u32, (read - 1) as u32, 0u32)
        } else {
            0
        };
        let above = libc::syscall(libc::SYS_close_range, (read + 1) as u32, u32::MAX, 0u32);
        if below != 0 || above != 0 {
            for fd in (0..open_max).filter(|&fd| fd != read) {
                libc::close(fd);
            }
        }
        let mut group: libc::pid_t = 0;
        let mut deadline: u64 = 0;
        loop {
            let timeout = if deadline == 0 {
                -1
            } else {
                let left = deadline.saturating_sub(monotonic_nanos());
                left.div_ceil(1_000_000).min(i32::MAX as u64) as i32
            };
            if timeout == 0 {
                if group > 0 {
                    libc::kill(-group, libc::SIGKILL);
                }
                libc::_exit(0);
            }
            let mut ready = libc::pollfd {
                fd: read,
                events: libc::POLLIN,
                revents: 0,
            };
            if libc::poll(&mut ready, 1, timeout) <= 0 {
                // Timed out (checked again above) or interrupted.
                continue;
            }
            let mut bytes = [0u8; 8];
            let got = libc::read(read, bytes.as_mut_ptr().cast(), bytes.len());
            if got < 0 && *libc::__errno_location() == libc::EINTR {
                continue;
            }
            if got != bytes.len() as isize {
                // `run` is gone without saying the group is: kill it.
                if group > 0 {
                    libc::kill(-group, libc::SIGKILL);
                }
                libc::_exit(0);
            }
            match u64::from_ne_bytes(bytes) {
                0 => libc::_exit(0),
                named if group == 0 => group = named as libc::pid_t,
                at => deadline = at,
            }
        }
    }
}
