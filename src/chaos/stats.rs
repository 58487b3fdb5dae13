//! What happened during each kind of fault: how many acquisitions succeeded while it was in
//! force, and the longest stretch in which no acquire succeeded at all.

use std::time::Instant;

use serde::Serialize;

use crate::chaos::checker::Hold;
use crate::chaos::faults::{Fault, FaultWindow};
use crate::millis;

/// The figures of one kind of fault.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct FaultStats {
    pub fault: &'static str,
    /// Faults of this kind injected.
    pub injected: usize,
    /// Acquisitions that succeeded while a fault of this kind was in force.
    pub acquisitions: usize,
    /// The longest time, overlapping a fault of this kind, in which no acquire succeeded.
    pub longest_gap_ms: u64,
}

/// The longest stretch of a run with no successful acquire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gap {
    pub start: Instant,
    pub ms: u64,
}

/// One row per kind of fault that was injected, and the longest gap of the whole run (the
/// first of the longest, starting at the run's start when nothing was acquired before it).
pub fn per_fault(
    windows: &[FaultWindow],
    holds: &[Hold],
    run: (Instant, Instant),
) -> (Vec<FaultStats>, Gap) {
    let mut starts: Vec<Instant> = holds.iter().map(|h| h.acquired_at).collect();
    starts.sort();
    // Gaps between successive acquisitions, with the run's start and end as bounds.
    let mut gaps = Vec::with_capacity(starts.len() + 1);
    let mut previous = run.0;
    for start in starts.iter().copied().chain(std::iter::once(run.1)) {
        if start > previous {
            gaps.push((previous, start));
        }
        previous = previous.max(start);
    }
    let longest = gaps
        .iter()
        .map(|(a, b)| Gap {
            start: *a,
            ms: millis(*b - *a),
        })
        .fold(
            Gap {
                start: run.0,
                ms: 0,
            },
            |best, gap| if gap.ms > best.ms { gap } else { best },
        );
    let stats = Fault::ALL
        .into_iter()
        .filter_map(|fault| {
            let mine: Vec<&FaultWindow> = windows.iter().filter(|w| w.fault == fault).collect();
            if mine.is_empty() {
                return None;
            }
            let inside = |at: Instant| mine.iter().any(|w| w.start <= at && at < w.end);
            let touches =
                |(a, b): &(Instant, Instant)| mine.iter().any(|w| *a < w.end && w.start < *b);
            Some(FaultStats {
                fault: fault.name(),
                injected: mine.len(),
                acquisitions: starts.iter().filter(|at| inside(**at)).count(),
                longest_gap_ms: gaps
                    .iter()
                    .filter(|gap| touches(gap))
                    .map(|(a, b)| millis(*b - *a))
                    .max()
                    .unwrap_or(0),
            })
        })
        .collect();
    (stats, longest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn hold_at(at: Instant) -> Hold {
        Hold {
            resource: "r".into(),
            resources: vec!["r".into()],
            permit: None,
            fencing_token: 1,
            acquired_at: at,
            valid_until: at,
            released_at: at,
            clock_broken: false,
        }
    }

    #[test]
    fn acquisitions_and_gaps_are_counted_per_fault() {
        let base = Instant::now();
        let ms = |n: u64| base + Duration::from_millis(n);
        let holds: Vec<Hold> = [10, 20, 500, 510].map(|n| hold_at(ms(n))).to_vec();
        let windows = [
            FaultWindow {
                fault: Fault::Kill,
                group: 0,
                start: ms(15),
                end: ms(100),
            },
            FaultWindow {
                fault: Fault::Latency,
                group: 1,
                start: ms(505),
                end: ms(600),
            },
        ];
        let (stats, longest) = per_fault(&windows, &holds, (base, ms(1000)));
        assert_eq!(
            longest,
            Gap {
                start: ms(510),
                ms: 490
            }
        );
        assert_eq!(stats.len(), 2);
        assert_eq!(stats[0].fault, "kill");
        assert_eq!(stats[0].acquisitions, 1);
        assert_eq!(stats[0].longest_gap_ms, 480);
        assert_eq!(stats[1].fault, "latency");
        assert_eq!(stats[1].acquisitions, 1);
        assert_eq!(stats[1].longest_gap_ms, 490);
    }
}
