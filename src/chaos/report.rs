//! The run's report: what happened, the verdict, and the table `quorumlock chaos` prints.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::faults::{self, Injected, StormRounds};
use super::stats::{self, FaultStats};
use super::workers::{self, PatternStats};
use super::{
    Availability, ChaosOptions, Finished, Pattern, RefusedWrite, SEMAPHORE, Shared, Tally,
};
use crate::Topology;
use crate::millis;

/// What happened, and whether it was safe.
#[derive(Debug, Clone, Serialize)]
pub struct ChaosReport {
    pub duration_ms: u64,
    /// Acquisitions of every kind: single locks, sets and permits.
    pub acquisitions: u64,
    pub acquire_attempts: u64,
    pub failed_acquires: u64,
    /// Sets of resources acquired (all or nothing).
    pub set_acquisitions: u64,
    /// Permits of the semaphore acquired.
    pub permit_acquisitions: u64,
    /// Workers, attempts and acquisitions per pattern.
    pub per_pattern: Vec<PatternStats>,
    /// Share of acquire calls that succeeded within their wait (the injector keeps at most
    /// `max_down` groups disrupted, so every call was made in that condition).
    pub success_rate: f64,
    pub faults_injected: Injected,
    pub pauses: u64,
    pub crashes: u64,
    /// Overlaps of holders with every assumption kept: violations.
    pub overlaps: usize,
    /// Overlaps while a clock assumption was broken on purpose (a master clock jump, a
    /// client clock beyond the drift allowance): not violations of the promise, which
    /// excludes them, but never a pass either; the fenced store must still reject every
    /// stale write.
    pub overlaps_assumption_broken: usize,
    /// Of `overlaps`, those where a set held the resource.
    pub set_overlaps: usize,
    /// Of `overlaps`, those of two holders of one semaphore slot.
    pub slot_overlaps: usize,
    /// The semaphore's permit count (0 without permit workers).
    pub permits: u32,
    /// The most permits held at once, labelled holds included.
    pub most_permits_held: usize,
    /// Permits that began while the whole count was held, with every assumption kept:
    /// violations.
    pub permits_over: usize,
    /// Permits beyond the count that only a broken clock assumption explains (labelled).
    pub permits_over_assumption_broken: usize,
    /// Fencing tokens that did not grow on a resource (per member for sets) or on a slot.
    pub fencing_regressions: usize,
    /// Of `fencing_regressions`, those where a set was one of the holds.
    pub set_fencing_regressions: usize,
    /// Of `fencing_regressions`, those on a semaphore slot.
    pub slot_fencing_regressions: usize,
    pub stale_writes_rejected: u64,
    /// Writes the fenced store accepted from a holder after a newer holder had been granted
    /// the lock (before that one's first write).
    pub stale_writes_accepted: u64,
    /// Writes refused although their holder's lease was valid, with every assumption kept: a
    /// safety violation.
    pub valid_writes_rejected: u64,
    /// Writes refused although their holder believed its lease valid, while a clock
    /// assumption was broken (its own clock beyond the allowance, or a master clock jump
    /// within one TTL): the fenced store doing its job when the lease could not.
    pub valid_writes_rejected_assumption_broken: u64,
    /// Locks and permits still held after every worker stopped and one TTL passed.
    pub locks_left: usize,
    /// What happened during each kind of fault.
    pub per_fault: Vec<FaultStats>,
    /// The longest time in the run with no successful acquire.
    pub longest_gap_ms: u64,
    /// Grants, the share of acquires that succeeded, the longest gap and when it began, and
    /// with a storm each group's time out of the vote.
    pub availability: Availability,
    /// Storm rounds, and those that found as many groups faulted as allowed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub storm: Option<StormRounds>,
    /// With a storm, every fault in the order injected: when, where, and how long the group
    /// counted as faulted.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub timeline: Vec<TimelineFault>,
}

/// One storm fault on the run's timeline.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct TimelineFault {
    /// Milliseconds after the run started.
    pub at_ms: u64,
    pub group: String,
    pub fault: &'static str,
    /// How long the group counted as faulted: the hold until the fault was undone, or for a
    /// restart its quarantine.
    pub faulted_ms: u64,
}

impl ChaosReport {
    pub fn violations(&self) -> u64 {
        self.overlaps as u64
            + self.permits_over as u64
            + self.fencing_regressions as u64
            + self.valid_writes_rejected
            + self.stale_writes_accepted
            + self.locks_left as u64
    }

    /// The one-word outcome: no violation and no assumption broken, no violation but
    /// overlaps (or permits beyond the count) under broken clock assumptions, or violations.
    pub fn verdict(&self) -> &'static str {
        let labelled = self.overlaps_assumption_broken + self.permits_over_assumption_broken;
        match (self.is_safe(), labelled) {
            (true, 0) => "SAFE",
            (true, _) => {
                "SAFE WITHIN ITS ASSUMPTIONS (overlaps or extra permits only while a clock assumption was broken; every stale write rejected)"
            }
            (false, _) => "VIOLATIONS FOUND",
        }
    }

    pub fn is_safe(&self) -> bool {
        self.violations() == 0
    }

    /// A human-readable summary.
    pub fn table(&self) -> String {
        let mut lines = vec![
            format!(
                "duration                  {:.1} s",
                self.duration_ms as f64 / 1000.0
            ),
            format!(
                "acquisitions              {} (sets {}, permits {})",
                self.acquisitions, self.set_acquisitions, self.permit_acquisitions
            ),
            format!(
                "failed acquires           {} of {} ({:.2}% succeeded within their wait)",
                self.failed_acquires,
                self.acquire_attempts,
                self.success_rate * 100.0
            ),
        ];
        for stats in &self.per_pattern {
            let rate = if stats.acquire_attempts == 0 {
                0.0
            } else {
                stats.acquisitions as f64 / stats.acquire_attempts as f64 * 100.0
            };
            lines.push(format!(
                "  {:<8} {:>2} workers, acquisitions {:>6}, failed {:>4} ({:.2}% succeeded)",
                stats.pattern, stats.workers, stats.acquisitions, stats.failed_acquires, rate
            ));
        }
        lines.extend(self.safety_lines());
        for stats in &self.per_fault {
            lines.push(format!(
                "  {:<10} injected {:>4}, acquisitions during {:>6}, longest gap {:>6} ms",
                stats.fault, stats.injected, stats.acquisitions, stats.longest_gap_ms
            ));
        }
        lines.extend(self.availability_lines());
        lines.push(format!("verdict                   {}", self.verdict()));
        lines.join("\n")
    }

    /// The faults injected, and every figure the safety promise is checked on.
    fn safety_lines(&self) -> Vec<String> {
        let f = &self.faults_injected;
        vec![
            format!(
                "faults injected           {} (kill {}, freeze {}, restart {}, partition {}, latency {}, clock drift {}, clock jump {}, migrate {}), worker pauses {}, worker crashes {}",
                f.total(),
                f.kill,
                f.freeze,
                f.restart,
                f.partition,
                f.latency,
                f.clock_drift,
                f.clock_jump,
                f.migrate,
                self.pauses,
                self.crashes
            ),
            format!(
                "overlaps                  {} (set members {}, permit slots {})",
                self.overlaps, self.set_overlaps, self.slot_overlaps
            ),
            format!(
                "overlaps, assumption broken {}",
                self.overlaps_assumption_broken
            ),
            format!(
                "permits held at once      at most {} of {}",
                self.most_permits_held, self.permits
            ),
            format!("permits beyond the count  {}", self.permits_over),
            format!(
                "  with an assumption broken {}",
                self.permits_over_assumption_broken
            ),
            format!(
                "fencing regressions       {} (set members {}, permit slots {})",
                self.fencing_regressions,
                self.set_fencing_regressions,
                self.slot_fencing_regressions
            ),
            format!("stale writes rejected     {}", self.stale_writes_rejected),
            format!("stale writes accepted     {}", self.stale_writes_accepted),
            format!("valid writes rejected     {}", self.valid_writes_rejected),
            format!(
                "  with an assumption broken {}",
                self.valid_writes_rejected_assumption_broken
            ),
            format!("locks still present       {}", self.locks_left),
            format!(
                "longest gap, no acquire   {} ms, from {:.1} s into the run",
                self.availability.longest_gap_ms,
                self.availability.longest_gap_started_ms as f64 / 1000.0
            ),
        ]
    }

    fn availability_lines(&self) -> Vec<String> {
        let a = &self.availability;
        let mut lines = vec![format!(
            "grants                    {} ({:.1}/s); {:.2}% of {} acquires (wait {} ms) succeeded",
            a.grants,
            a.grants_per_s,
            a.success_share * 100.0,
            a.acquires,
            a.wait_ms
        )];
        if let Some(rounds) = &self.storm {
            lines.push(format!(
                "storm rounds              {} ({} found every allowed group faulted; at most {} faulted at once)",
                rounds.rounds, rounds.rounds_full, rounds.most_faulted
            ));
        }
        for fault in &self.timeline {
            lines.push(format!(
                "  at {:>6.1} s {:<4} {:<10} faulted {:>5.1} s",
                fault.at_ms as f64 / 1000.0,
                fault.group,
                fault.fault,
                fault.faulted_ms as f64 / 1000.0
            ));
        }
        if let Some(no_quorum_ms) = a.no_quorum_ms {
            lines.push(format!(
                "no quorum (health, 1/s)   {:.1} s; quarantine {} ms",
                no_quorum_ms as f64 / 1000.0,
                a.quarantine_ms
            ));
        }
        for group in &a.out_of_vote {
            lines.push(format!(
                "  {:<10} out of the vote {:>7.1} s, longest {:>7.1} s",
                group.group,
                group.out_of_vote_ms as f64 / 1000.0,
                group.longest_out_ms as f64 / 1000.0
            ));
        }
        lines
    }
}

/// The faults of `windows` on the run's timeline, with the topology's group names.
pub(super) fn timeline(
    windows: &[faults::FaultWindow],
    topology: &Topology,
    started: Instant,
) -> Vec<TimelineFault> {
    windows
        .iter()
        .map(|window| TimelineFault {
            at_ms: millis(window.start.saturating_duration_since(started)),
            group: topology
                .groups
                .get(window.group)
                .map_or_else(|| format!("#{}", window.group), |g| g.name.clone()),
            fault: window.fault.name(),
            faulted_ms: millis(window.end.saturating_duration_since(window.start)),
        })
        .collect()
}

/// The report of a finished run: the checker's verdict, the tally, and what the injector did.
pub(super) fn of_run(options: &ChaosOptions, run: Finished) -> ChaosReport {
    let (started, ended) = run.span;
    let Shared {
        checker,
        store,
        tally,
    } = &run.shared;
    // A grant may land on a master up to one call timeout before its holder hears of it.
    let in_flight = run.topology.call_timeout();
    let verdict = checker.verdict_with(&run.injector.jumps, in_flight);
    let refused = refused_writes(tally, &run.injector.jumps, in_flight);
    let (per_fault, longest_gap) =
        stats::per_fault(&run.injector.windows, &checker.holds(), (started, ended));
    let attempts = tally.attempts.load(Ordering::Relaxed);
    let acquired = tally.acquired.load(Ordering::Relaxed);
    let per_pattern = workers::pattern_stats(&run.roles, tally);
    let acquired_by = |pattern: Pattern| {
        per_pattern
            .iter()
            .find(|stats| stats.pattern == pattern.name())
            .map_or(0, |stats| stats.acquisitions)
    };
    let availability = availability_of(options, &run, attempts, acquired, longest_gap);
    ChaosReport {
        duration_ms: millis(ended - started),
        acquisitions: acquired,
        acquire_attempts: attempts,
        failed_acquires: tally.failed.load(Ordering::Relaxed),
        set_acquisitions: acquired_by(Pattern::Sets),
        permit_acquisitions: acquired_by(Pattern::Permits),
        per_pattern,
        success_rate: availability.success_share,
        faults_injected: run.injector.injected.clone(),
        pauses: tally.pauses.load(Ordering::Relaxed),
        crashes: tally.crashes.load(Ordering::Relaxed),
        overlaps: verdict.overlaps,
        overlaps_assumption_broken: verdict.overlaps_assumption_broken,
        set_overlaps: verdict.set_overlaps,
        slot_overlaps: verdict.slot_overlaps,
        permits: if run.permits { options.permits } else { 0 },
        most_permits_held: verdict
            .semaphores
            .iter()
            .find(|peak| peak.name == SEMAPHORE)
            .map_or(0, |peak| peak.most_held),
        permits_over: verdict.permits_over,
        permits_over_assumption_broken: verdict.permits_over_assumption_broken,
        fencing_regressions: verdict.fencing_regressions,
        set_fencing_regressions: verdict.set_fencing_regressions,
        slot_fencing_regressions: verdict.slot_fencing_regressions,
        stale_writes_rejected: store.rejected() - refused.total,
        stale_writes_accepted: store.stale_accepted(),
        valid_writes_rejected: refused.total - refused.assumption_broken,
        valid_writes_rejected_assumption_broken: refused.assumption_broken,
        locks_left: run.locks_left,
        per_fault,
        longest_gap_ms: longest_gap.ms,
        availability,
        storm: options.storm.map(|_| run.injector.rounds),
        timeline: if options.storm.is_some() {
            timeline(&run.injector.windows, &run.topology, started)
        } else {
            Vec::new()
        },
    }
}

/// Writes refused although their holders believed their leases valid.
struct RefusedWrites {
    total: u64,
    /// Of `total`, those a broken clock assumption explains.
    assumption_broken: u64,
}

/// Counts the refused valid writes, and those explained by a broken assumption. Only the
/// writer's own hold explains a refusal: its clock, or a jump that cut its keys while it held
/// them.
fn refused_writes(tally: &Tally, jumps: &[Instant], in_flight: Duration) -> RefusedWrites {
    let refused = tally
        .valid_writes_rejected
        .lock()
        .map(|list| list.clone())
        .unwrap_or_default();
    let explained = |write: &&RefusedWrite| {
        write.clock_broken
            || jumps
                .iter()
                .any(|jump| write.acquired_at <= *jump + in_flight && *jump <= write.at)
    };
    RefusedWrites {
        total: refused.len() as u64,
        assumption_broken: refused.iter().filter(explained).count() as u64,
    }
}

/// Grants, the share of acquires that succeeded, the longest gap, and with a storm each
/// group's time out of the vote.
fn availability_of(
    options: &ChaosOptions,
    run: &Finished,
    attempts: u64,
    acquired: u64,
    longest_gap: stats::Gap,
) -> Availability {
    let (started, ended) = run.span;
    Availability {
        wait_ms: millis(options.wait),
        acquires: attempts,
        success_share: if attempts == 0 {
            0.0
        } else {
            acquired as f64 / attempts as f64
        },
        grants: acquired,
        grants_per_s: acquired as f64 / (ended - started).as_secs_f64().max(0.001),
        longest_gap_ms: longest_gap.ms,
        longest_gap_started_ms: millis(longest_gap.start.saturating_duration_since(started)),
        quarantine_ms: run.quarantine_ms,
        no_quorum_ms: run.votes.as_ref().map(|watch| watch.no_quorum_ms),
        out_of_vote: run
            .votes
            .as_ref()
            .map(|watch| watch.groups.clone())
            .unwrap_or_default(),
    }
}
