//! The fault injector: kills, freezes and restarts masters of a lab at random moments (so
//! also in the middle of acquires), never disrupting more than `max_down` groups at a time,
//! and brings every group back afterwards.

use std::str::FromStr;
use std::time::{Duration, Instant};

use rand::Rng;
use rand::seq::SliceRandom;
use serde::Serialize;

use crate::lab::{Lab, LabError};

/// A kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Fault {
    /// SIGKILL a master; Sentinel promotes its replica; the dead node comes back later.
    Kill,
    /// SIGSTOP a master for a while (a partition or a long pause), then SIGCONT.
    Freeze,
    /// SIGKILL a master and start it again at once, empty (no persistence).
    Restart,
    /// A worker stalls past its lease's validity before it writes (a GC pause).
    Pause,
}

impl FromStr for Fault {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.trim() {
            "kill" => Ok(Fault::Kill),
            "freeze" => Ok(Fault::Freeze),
            "restart" => Ok(Fault::Restart),
            "pause" => Ok(Fault::Pause),
            other => Err(format!(
                "unknown fault `{other}`; expected kill, freeze, restart or pause"
            )),
        }
    }
}

/// Something to undo later.
enum Recovery {
    Thaw,
    Revive,
}

struct Pending {
    group: usize,
    at: Instant,
    recovery: Recovery,
}

/// Faults injected so far, by kind.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Injected {
    pub kill: u64,
    pub freeze: u64,
    pub restart: u64,
}

impl Injected {
    pub fn total(&self) -> u64 {
        self.kill + self.freeze + self.restart
    }
}

pub(crate) struct Injector {
    faults: Vec<Fault>,
    max_down: usize,
    /// How long a group stays out of the vote after it got its master back (the quarantine).
    quarantine: Duration,
    /// Until when each group counts as disrupted.
    down_until: Vec<Instant>,
    pending: Vec<Pending>,
    pub injected: Injected,
}

/// Time Sentinel may take to promote a replica (down-after plus the election), with margin.
const FAILOVER_ALLOWANCE: Duration = Duration::from_millis(3000);

impl Injector {
    pub fn new(groups: usize, faults: &[Fault], max_down: usize, quarantine: Duration) -> Self {
        let now = Instant::now();
        Injector {
            faults: faults
                .iter()
                .copied()
                .filter(|f| *f != Fault::Pause)
                .collect(),
            max_down,
            quarantine,
            down_until: vec![now; groups],
            pending: Vec::new(),
            injected: Injected::default(),
        }
    }

    /// Groups counted as disrupted right now.
    pub fn disrupted(&self) -> usize {
        let now = Instant::now();
        self.down_until.iter().filter(|until| **until > now).count()
    }

    /// Undoes what is due, then injects one new fault if fewer than `max_down` groups are
    /// disrupted.
    pub async fn step(&mut self, lab: &mut Lab) -> Result<(), LabError> {
        self.recover(lab, false).await?;
        if self.faults.is_empty() || self.disrupted() >= self.max_down {
            return Ok(());
        }
        let now = Instant::now();
        let healthy: Vec<usize> = (0..self.down_until.len())
            .filter(|g| self.down_until[*g] <= now)
            .collect();
        let (group, fault, hold) = {
            let mut rng = rand::thread_rng();
            let (Some(group), Some(fault)) = (
                healthy.choose(&mut rng).copied(),
                self.faults.choose(&mut rng).copied(),
            ) else {
                return Ok(());
            };
            (
                group,
                fault,
                Duration::from_millis(rng.gen_range(300..1500)),
            )
        };
        match fault {
            Fault::Kill => {
                lab.kill(group).await?;
                self.injected.kill += 1;
                self.later(group, now + FAILOVER_ALLOWANCE, Recovery::Revive);
            }
            Fault::Freeze => {
                lab.freeze(group).await?;
                self.injected.freeze += 1;
                // A freeze longer than down-after also ends in a failover.
                self.later(group, now + hold, Recovery::Thaw);
                self.down_until[group] = now + FAILOVER_ALLOWANCE.max(hold) + self.quarantine;
            }
            Fault::Restart => {
                lab.restart(group).await?;
                self.injected.restart += 1;
                self.down_until[group] =
                    Instant::now() + self.quarantine + Duration::from_millis(500);
            }
            Fault::Pause => {}
        }
        tracing::info!(group, ?fault, "chaos: fault injected");
        Ok(())
    }

    fn later(&mut self, group: usize, at: Instant, recovery: Recovery) {
        self.down_until[group] =
            self.down_until[group].max(at + FAILOVER_ALLOWANCE + self.quarantine);
        self.pending.push(Pending {
            group,
            at,
            recovery,
        });
    }

    /// Runs the due recoveries (all of them with `everything`).
    pub async fn recover(&mut self, lab: &mut Lab, everything: bool) -> Result<(), LabError> {
        let now = Instant::now();
        let (due, later): (Vec<_>, Vec<_>) = self
            .pending
            .drain(..)
            .partition(|p| everything || p.at <= now);
        self.pending = later;
        for pending in due {
            match pending.recovery {
                Recovery::Thaw => {
                    lab.thaw(pending.group).await?;
                }
                Recovery::Revive => {
                    lab.restart(pending.group).await?;
                }
            }
        }
        Ok(())
    }
}
