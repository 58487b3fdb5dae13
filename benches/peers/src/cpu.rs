//! CPU accounting: this process's CPU time (getrusage) and the lab's redis processes'
//! (/proc/<pid>/stat), turned into a cost per lock+release cycle.

use std::time::Duration;

use crate::lab::LabPids;

/// CPU time of this process (all threads) and its context switches.
#[derive(Clone, Copy, Default)]
struct SelfUsage {
    cpu: Duration,
    voluntary_switches: i64,
    involuntary_switches: i64,
}

fn self_usage() -> SelfUsage {
    // SAFETY: getrusage only writes into the struct we pass.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } == 0;
    if !ok {
        return SelfUsage::default();
    }
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    SelfUsage {
        cpu: tv(usage.ru_utime) + tv(usage.ru_stime),
        voluntary_switches: usage.ru_nvcsw,
        involuntary_switches: usage.ru_nivcsw,
    }
}

/// utime + stime of a process (all threads), from /proc/<pid>/stat.
fn process_cpu(pid: u32) -> Duration {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return Duration::ZERO;
    };
    // Fields after the command name, which is in parentheses and may contain spaces.
    let Some(rest) = stat.rsplit_once(')').map(|(_, rest)| rest) else {
        return Duration::ZERO;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state); utime is field 14, stime 15.
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i)?.parse::<u64>().ok())
        .sum();
    // SAFETY: sysconf only reads a system constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_micros(ticks * 1_000_000 / hz)
}

/// CPU used so far by this process and by the lab, taken before and after a phase.
#[derive(Clone, Copy)]
pub struct CpuSnapshot {
    client: SelfUsage,
    masters: Duration,
    others: Duration,
}

impl CpuSnapshot {
    pub fn take(pids: &LabPids) -> CpuSnapshot {
        let sum = |list: &[u32]| list.iter().map(|&p| process_cpu(p)).sum::<Duration>();
        CpuSnapshot {
            client: self_usage(),
            masters: sum(&pids.masters),
            others: sum(&pids.replicas) + sum(&pids.sentinels),
        }
    }
}

/// CPU per cycle over one phase, in µs, and context switches per cycle.
#[derive(Clone, Copy, Default)]
pub struct CpuPerCycle {
    pub client_us: f64,
    pub masters_us: f64,
    pub others_us: f64,
    pub client_util: f64,
    pub voluntary_switches: f64,
    pub involuntary_switches: f64,
}

impl CpuPerCycle {
    pub fn between(
        before: CpuSnapshot,
        after: CpuSnapshot,
        cycles: u64,
        wall: Duration,
    ) -> CpuPerCycle {
        // No cycle, no cost per cycle: NaN prints as "-", never as a figure.
        let n = if cycles == 0 { f64::NAN } else { cycles as f64 };
        let us = |d: Duration| d.as_secs_f64() * 1e6 / n;
        let client_cpu = after.client.cpu.saturating_sub(before.client.cpu);
        CpuPerCycle {
            client_us: us(client_cpu),
            masters_us: us(after.masters.saturating_sub(before.masters)),
            others_us: us(after.others.saturating_sub(before.others)),
            client_util: client_cpu.as_secs_f64() / wall.as_secs_f64(),
            voluntary_switches: (after.client.voluntary_switches - before.client.voluntary_switches)
                as f64
                / n,
            involuntary_switches: (after.client.involuntary_switches
                - before.client.involuntary_switches) as f64
                / n,
        }
    }
}
