//! How available the locks stayed: grants, the share of acquires that succeeded within their
//! wait, the longest time with no grant at all, and (sampled once a second by `health`) how
//! long each group was out of the vote and how long no majority voted.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::Locks;
use crate::millis;

/// How often the vote watcher asks `health`.
pub const HEALTH_EVERY: Duration = Duration::from_secs(1);

/// The availability figures of a run.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Availability {
    /// How long every acquire waited for its lock (`wait_ms`) before it gave up.
    pub wait_ms: u64,
    /// Acquire calls made (every one with `wait_ms`).
    pub acquires: u64,
    /// Share of those calls that succeeded within their wait.
    pub success_share: f64,
    /// Grants: acquisitions of every kind.
    pub grants: u64,
    pub grants_per_s: f64,
    /// The longest time with no successful acquire.
    pub longest_gap_ms: u64,
    /// When that gap began, in milliseconds after the run started.
    pub longest_gap_started_ms: u64,
    /// How long a new master sat out after a failover or a restart under the lab's policy
    /// (`max_ttl_ms + write_window_ms`).
    pub quarantine_ms: u64,
    /// Sampled by `health` once a second (storm runs): time with fewer than a majority of
    /// groups voting.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_quorum_ms: Option<u64>,
    /// Sampled by `health` once a second (storm runs): each group's time out of the vote
    /// (unreachable, quarantined, without a policy, or not voting for another reason).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub out_of_vote: Vec<GroupOutOfVote>,
}

/// One group's time out of the vote, as `health` saw it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct GroupOutOfVote {
    pub group: String,
    /// Total time out of the vote.
    pub out_of_vote_ms: u64,
    /// The longest stretch out of the vote.
    pub longest_out_ms: u64,
}

/// What the vote watcher saw.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VoteWatch {
    pub no_quorum_ms: u64,
    pub groups: Vec<GroupOutOfVote>,
}

/// One `health` sample: when it answered, whether each group voted, whether a majority did.
#[derive(Debug, Clone)]
pub struct Sample {
    pub at: Instant,
    pub voting: Vec<(String, bool)>,
    pub quorum: bool,
}

impl VoteWatch {
    /// Adds the time from `previous` to `now` with the state `previous` saw: a state holds
    /// until a sample says otherwise.
    pub fn count(&mut self, previous: &Sample, now: Instant, out_since: &mut [Option<Instant>]) {
        let span = millis(now.saturating_duration_since(previous.at));
        if !previous.quorum {
            self.no_quorum_ms += span;
        }
        for (index, (name, votes)) in previous.voting.iter().enumerate() {
            if index >= self.groups.len() {
                self.groups.push(GroupOutOfVote {
                    group: name.clone(),
                    out_of_vote_ms: 0,
                    longest_out_ms: 0,
                });
            }
            let Some(since) = out_since.get_mut(index) else {
                continue;
            };
            let group = &mut self.groups[index];
            if *votes {
                *since = None;
            } else {
                group.out_of_vote_ms += span;
                let start = *since.get_or_insert(previous.at);
                group.longest_out_ms = group
                    .longest_out_ms
                    .max(millis(now.saturating_duration_since(start)));
            }
        }
    }
}

/// Asks `health` every [`HEALTH_EVERY`] until `deadline` and adds up each group's time out of
/// the vote and the time without a majority.
pub async fn watch_votes(locks: Locks, deadline: Instant) -> VoteWatch {
    let mut watch = VoteWatch::default();
    let mut ticks = tokio::time::interval(HEALTH_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut previous: Option<Sample> = None;
    let mut out_since: Vec<Option<Instant>> = Vec::new();
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = tokio::time::sleep_until(deadline.into()) => break,
        }
        let health = locks.health().await;
        let now = Instant::now().min(deadline);
        let sample = Sample {
            at: now,
            voting: health
                .groups
                .iter()
                .map(|group| (group.group.clone(), group.votes()))
                .collect(),
            quorum: health.quorum_available,
        };
        out_since.resize(sample.voting.len(), None);
        if let Some(previous) = &previous {
            watch.count(previous, now, &mut out_since);
        }
        previous = Some(sample);
        if now >= deadline {
            break;
        }
    }
    if let Some(previous) = &previous {
        watch.count(previous, deadline, &mut out_since);
    }
    watch
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at: Instant, voting: [bool; 2], quorum: bool) -> Sample {
        Sample {
            at,
            voting: vec![("g1".into(), voting[0]), ("g2".into(), voting[1])],
            quorum,
        }
    }

    #[test]
    fn time_out_of_the_vote_is_counted_from_the_sample_that_saw_it() {
        let base = Instant::now();
        let s = |n: u64| base + Duration::from_secs(n);
        let samples = [
            sample(s(0), [true, true], true),
            sample(s(1), [false, true], true),
            sample(s(2), [false, false], false),
            sample(s(4), [true, false], true),
            sample(s(5), [false, true], true),
        ];
        let mut watch = VoteWatch::default();
        let mut out_since = vec![None; 2];
        for pair in samples.windows(2) {
            watch.count(&pair[0], pair[1].at, &mut out_since);
        }
        watch.count(&samples[4], s(7), &mut out_since);
        assert_eq!(watch.no_quorum_ms, 2000);
        assert_eq!(
            watch.groups,
            vec![
                GroupOutOfVote {
                    group: "g1".into(),
                    out_of_vote_ms: 5000,
                    longest_out_ms: 3000,
                },
                GroupOutOfVote {
                    group: "g2".into(),
                    out_of_vote_ms: 3000,
                    longest_out_ms: 3000,
                },
            ]
        );
    }
}
