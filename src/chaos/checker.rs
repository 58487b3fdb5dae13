//! The safety checker: every holder reports what it held and when (in real time, whatever
//! its own clock said), and the checker proves that no two holders of one resource
//! overlapped and no fencing token went backwards. An overlap of holds made while an
//! assumption of docs/safety.md was broken on purpose (a clock jump, a client clock drifting
//! beyond the allowance) is counted apart, labelled, and never taken for a pass.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use serde::Serialize;

use crate::{Clock, Lease};

/// One completed hold of a resource, as its holder saw it.
#[derive(Debug, Clone)]
pub struct Hold {
    pub resource: String,
    pub fencing_token: u64,
    /// When the acquire call returned the lease.
    pub acquired_at: Instant,
    /// When the lease stopped being valid, per the engine.
    pub valid_until: Instant,
    /// When the holder stopped using it (released or gave up).
    pub released_at: Instant,
    /// The holder's clock ran outside the drift allowance while it held the lock.
    pub clock_broken: bool,
}

impl Hold {
    /// A hold of `lease` that began at `acquired_at` and ends now. `clock` is the clock the
    /// lease was measured on, so its validity is compared in real time.
    pub fn ending_now(lease: &Lease, acquired_at: Instant, clock: &Clock) -> Self {
        Hold {
            resource: lease.resource().to_string(),
            fencing_token: lease.fencing_token(),
            acquired_at,
            valid_until: clock.to_real(lease.valid_until()),
            released_at: Instant::now(),
            clock_broken: false,
        }
    }

    /// The stretch of time in which the holder relied on the lock.
    fn relied_until(&self) -> Instant {
        self.released_at.min(self.valid_until)
    }
}

/// What the checker found.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Verdict {
    pub holds: usize,
    /// Pairs of holds of one resource whose relied-on intervals intersect, with every
    /// assumption kept: violations.
    pub overlaps: usize,
    /// Overlapping pairs where a clock assumption was broken on purpose: a master's clock
    /// jumped while one of them held, or a holder's clock ran outside the drift allowance.
    pub overlaps_assumption_broken: usize,
    /// Holds that were granted after another one of the same resource, yet carry a smaller or
    /// equal fencing token.
    pub fencing_regressions: usize,
}

impl Verdict {
    pub fn is_safe(&self) -> bool {
        self.overlaps == 0 && self.fencing_regressions == 0
    }
}

/// Collects holds from many workers; cheap to share behind an `Arc`.
#[derive(Debug, Default)]
pub struct Checker {
    holds: Mutex<Vec<Hold>>,
}

impl Checker {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn record(&self, hold: Hold) {
        if let Ok(mut holds) = self.holds.lock() {
            holds.push(hold);
        }
    }

    pub fn holds(&self) -> Vec<Hold> {
        self.holds.lock().map(|h| h.clone()).unwrap_or_default()
    }

    /// Checks every resource's holds in the order they were granted, with no assumption
    /// broken.
    pub fn verdict(&self) -> Verdict {
        self.verdict_with(&[], std::time::Duration::ZERO)
    }

    /// [`Checker::verdict`], labelling the overlaps that a broken clock assumption explains:
    /// the earlier holder's own clock ran beyond the allowance (a slow clock only lengthens
    /// its own holder's belief), or a master's clock jumped (at one of `jumps`) while the
    /// earlier hold was running, cutting its keys short, and the later hold began after the
    /// jump. `in_flight` is how early a grant may have landed before the holder saw it.
    pub fn verdict_with(&self, jumps: &[Instant], in_flight: std::time::Duration) -> Verdict {
        let spans_jump = |earlier: &Hold, later: &Hold| {
            jumps.iter().any(|jump| {
                earlier.acquired_at <= *jump + in_flight
                    && earlier.relied_until() > *jump
                    && later.acquired_at > *jump
            })
        };
        let holds = self.holds();
        let mut by_resource: HashMap<&str, Vec<&Hold>> = HashMap::new();
        for hold in &holds {
            by_resource
                .entry(hold.resource.as_str())
                .or_default()
                .push(hold);
        }
        let mut verdict = Verdict {
            holds: holds.len(),
            ..Verdict::default()
        };
        for list in by_resource.values_mut() {
            list.sort_by_key(|h| h.acquired_at);
            for (index, earlier) in list.iter().enumerate() {
                for later in &list[index + 1..] {
                    if later.acquired_at >= earlier.relied_until() {
                        break;
                    }
                    let broken = earlier.clock_broken || spans_jump(earlier, later);
                    if broken {
                        verdict.overlaps_assumption_broken += 1;
                    } else {
                        verdict.overlaps += 1;
                    }
                }
            }
            verdict.fencing_regressions += list
                .windows(2)
                .filter(|pair| pair[1].fencing_token <= pair[0].fencing_token)
                .count();
        }
        verdict
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn hold(start: u64, end: u64, fence: u64, base: Instant) -> Hold {
        Hold {
            resource: "r".into(),
            fencing_token: fence,
            acquired_at: base + Duration::from_millis(start),
            valid_until: base + Duration::from_millis(end + 100),
            released_at: base + Duration::from_millis(end),
            clock_broken: false,
        }
    }

    #[test]
    fn finds_overlaps_and_regressions() {
        let base = Instant::now();
        let checker = Checker::new();
        checker.record(hold(0, 10, 1, base));
        checker.record(hold(10, 20, 2, base));
        assert!(checker.verdict().is_safe());
        checker.record(hold(15, 30, 3, base));
        checker.record(hold(40, 50, 2, base));
        let verdict = checker.verdict();
        assert_eq!(verdict.overlaps, 1);
        assert_eq!(verdict.fencing_regressions, 1);
    }

    #[test]
    fn only_the_earlier_holders_slow_clock_explains_an_overlap() {
        let base = Instant::now();
        let slow = |start, end, fence, clock_broken| Hold {
            clock_broken,
            ..hold(start, end, fence, base)
        };
        let checker = Checker::new();
        checker.record(slow(0, 30, 1, false));
        checker.record(slow(20, 40, 2, true));
        assert_eq!(checker.verdict().overlaps, 1);
        let checker = Checker::new();
        checker.record(slow(0, 30, 1, true));
        checker.record(slow(20, 40, 2, false));
        let verdict = checker.verdict_with(&[], Duration::ZERO);
        assert_eq!(
            (verdict.overlaps, verdict.overlaps_assumption_broken),
            (0, 1)
        );
    }

    #[test]
    fn overlaps_around_a_clock_jump_are_labelled_not_passed() {
        let base = Instant::now();
        let checker = Checker::new();
        checker.record(hold(0, 30, 1, base));
        checker.record(hold(20, 40, 2, base));
        // A jump while the earlier hold ran, before the later began, explains the overlap.
        let jump = base + Duration::from_millis(15);
        let verdict = checker.verdict_with(&[jump], Duration::from_millis(10));
        assert_eq!(verdict.overlaps, 0);
        assert_eq!(verdict.overlaps_assumption_broken, 1);
        // A jump after the later hold began, or long after both, explains nothing.
        for at in [25, 500] {
            let jump = base + Duration::from_millis(at);
            let verdict = checker.verdict_with(&[jump], Duration::from_millis(10));
            assert_eq!(verdict.overlaps, 1, "jump at {at} ms");
        }
    }
}
