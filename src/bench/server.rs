//! What a throughput phase cost the servers: CPU (`INFO cpu`) and script calls (`INFO
//! commandstats`) of every primary of every group, read before and after the phase, and the
//! bench process's own CPU. Per cycle and per shard these figures carry over to machines
//! where each primary has a core of its own, which a shared lab cannot show.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::{InfoSection, Locks};

/// How long one primary may take to answer both `INFO` reads.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The servers' share of one phase, per lock+release cycle.
#[derive(Debug, Clone, Serialize)]
pub struct ServerCost {
    /// Primaries read, over every group.
    pub primaries: usize,
    /// Primaries per group: the shards of a Cluster group, 1 for a master.
    pub shards_per_group: f64,
    /// `used_cpu_sys` + `used_cpu_user` of every primary, per cycle.
    pub cpu_us_per_cycle: f64,
    /// The same per group: what one cycle costs each group, whatever its shards.
    pub cpu_us_per_cycle_per_group: f64,
    /// The same per shard: what one cycle costs one primary of a group when the slots in use
    /// spread evenly over its shards.
    pub cpu_us_per_cycle_per_shard: f64,
    /// EVALSHA and EVAL calls of every primary of a group, per cycle: 2 without batching,
    /// less when group commit puts several calls in one script call.
    pub script_calls_per_cycle_per_group: f64,
    /// CPU of the bench process (every thread), per cycle.
    pub client_cpu_us_per_cycle: f64,
    /// The machine's 1-minute load average when the phase ended.
    pub load_average: Option<f64>,
}

/// One primary's counters.
#[derive(Debug, Clone, Copy)]
struct Counters {
    cpu_secs: f64,
    script_calls: u64,
}

/// The counters of every primary, keyed by group and address, and the client's CPU.
#[derive(Debug, Clone)]
pub(crate) struct Snapshot {
    primaries: BTreeMap<(String, String), Counters>,
    groups: usize,
    client_cpu: Duration,
}

impl Snapshot {
    /// Reads every primary of every group once every call handed to it has been answered.
    /// Fails naming the group or primary that could not be read.
    pub async fn take(locks: &Locks) -> Result<Snapshot, String> {
        let sections = [InfoSection::Cpu, InfoSection::CommandStats];
        let mut primaries = BTreeMap::new();
        for primary in locks.primary_info(&sections, READ_TIMEOUT).await? {
            let counters = counters(&primary.sections).map_err(|error| {
                format!(
                    "group {} primary {}: {error}",
                    primary.group, primary.address
                )
            })?;
            primaries.insert((primary.group, primary.address), counters);
        }
        Ok(Snapshot {
            primaries,
            groups: locks.topology().groups.len(),
            client_cpu: client_cpu(),
        })
    }

    /// What happened between `self` and `after`, per cycle. `None` when the primaries
    /// changed in between (a failover or a slot map that moved) or no cycle ran.
    pub fn cost(&self, after: &Snapshot, cycles: u64) -> Option<ServerCost> {
        if cycles == 0
            || self.groups == 0
            || self.primaries.is_empty()
            || self.primaries.keys().ne(after.primaries.keys())
        {
            return None;
        }
        let (mut cpu_secs, mut script_calls) = (0.0, 0u64);
        for (key, before) in &self.primaries {
            let now = after.primaries.get(key)?;
            cpu_secs += (now.cpu_secs - before.cpu_secs).max(0.0);
            script_calls += now.script_calls.saturating_sub(before.script_calls);
        }
        let cycles = cycles as f64;
        let groups = self.groups as f64;
        let shards_per_group = self.primaries.len() as f64 / groups;
        let cpu_us_per_cycle = cpu_secs * 1e6 / cycles;
        let client = after.client_cpu.saturating_sub(self.client_cpu);
        Some(ServerCost {
            primaries: self.primaries.len(),
            shards_per_group,
            cpu_us_per_cycle,
            cpu_us_per_cycle_per_group: cpu_us_per_cycle / groups,
            cpu_us_per_cycle_per_shard: cpu_us_per_cycle / groups / shards_per_group,
            script_calls_per_cycle_per_group: script_calls as f64 / cycles / groups,
            client_cpu_us_per_cycle: client.as_secs_f64() * 1e6 / cycles,
            load_average: load_average(),
        })
    }
}

/// The counters in one primary's `INFO cpu` and `INFO commandstats` answers.
fn counters(sections: &[String]) -> Result<Counters, String> {
    let [cpu, stats] = sections else {
        return Err(format!("{} INFO sections read, not 2", sections.len()));
    };
    Ok(Counters {
        cpu_secs: cpu_seconds(cpu).ok_or("INFO cpu has no used_cpu_sys and used_cpu_user")?,
        script_calls: calls(stats, "evalsha") + calls(stats, "eval"),
    })
}

/// `used_cpu_sys` + `used_cpu_user` of an `INFO cpu` answer.
fn cpu_seconds(info: &str) -> Option<f64> {
    let field = |name: &str| -> Option<f64> {
        info.lines()
            .find_map(|line| line.trim().strip_prefix(name)?.strip_prefix(':'))
            .and_then(|value| value.trim().parse().ok())
    };
    Some(field("used_cpu_sys")? + field("used_cpu_user")?)
}

/// Calls of `command` in an `INFO commandstats` answer (0 when it never ran).
fn calls(stats: &str, command: &str) -> u64 {
    stats
        .lines()
        .find_map(|line| {
            line.trim()
                .strip_prefix(&format!("cmdstat_{command}:calls="))
        })
        .and_then(|rest| rest.split(',').next())
        .and_then(|calls| calls.parse().ok())
        .unwrap_or(0)
}

/// CPU time of this process, every thread.
fn client_cpu() -> Duration {
    // SAFETY: getrusage only writes into the struct passed to it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return Duration::ZERO;
    }
    let time = |t: libc::timeval| {
        Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
            + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
    };
    time(usage.ru_utime) + time(usage.ru_stime)
}

/// The 1-minute load average, from /proc/loadavg (Linux only).
fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_seconds_add_system_and_user_time() {
        let info = "# CPU\r\nused_cpu_sys:1.250000\r\nused_cpu_user:2.500000\r\nused_cpu_sys_children:9.0\r\nused_cpu_sys_main_thread:1.0\r\n";
        assert_eq!(cpu_seconds(info), Some(3.75));
    }

    #[test]
    fn cpu_seconds_are_none_without_both_fields() {
        assert_eq!(cpu_seconds("# CPU\r\nused_cpu_sys:1.0\r\n"), None);
    }

    #[test]
    fn calls_read_one_command_and_not_its_prefix() {
        let stats = "cmdstat_evalsha:calls=120,usec=5,usec_per_call=0.04\r\ncmdstat_eval:calls=3,usec=1\r\n";
        assert_eq!(calls(stats, "evalsha"), 120);
        assert_eq!(calls(stats, "eval"), 3);
        assert_eq!(calls(stats, "get"), 0);
    }
}
