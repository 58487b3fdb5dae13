//! The safety checker: every holder reports what it held and when (in real time, whatever
//! its own clock said), and the checker proves that no two holders of one resource
//! overlapped, that no semaphore ever had more holders than permits, and that no fencing
//! token went backwards. A set's hold is a hold of each of its members, checked against
//! every other hold of that resource, single or set; a permit's hold is a hold of its
//! semaphore's slot, whose fencing token is the slot's. An overlap (or a permit beyond the
//! count) of holds made while an assumption of docs/safety.md was broken on purpose (a clock
//! jump, a client clock drifting beyond the allowance) is counted apart, labelled, and never
//! taken for a pass.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::{Clock, Lease, PermitHandle};

/// One completed hold, as its holder saw it: of one resource, of a set of resources (all at
/// once), or of one permit of a semaphore.
#[derive(Debug, Clone)]
pub struct Hold {
    /// The resource; for a set, the first of `resources`; for a permit, the semaphore.
    pub resource: String,
    /// Every resource held: one, unless the hold is of a set. A permit's is its semaphore.
    pub resources: Vec<String>,
    /// For a permit: its slot, and the semaphore's permit count when the holder knows it.
    pub permit: Option<Permit>,
    /// The fencing token: of each resource held, or of the permit's slot.
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

/// Which permit of a semaphore a hold was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permit {
    /// The slot, from 0 to the permit count − 1.
    pub slot: u32,
    /// The semaphore's permit count; `None` leaves the count unchecked (the slots still are).
    pub permits: Option<u32>,
}

impl Hold {
    /// A hold of `lease` that began at `acquired_at` and ends now. `clock` is the clock the
    /// lease was measured on, so its validity is compared in real time. A permit's lease is
    /// told by its token, which names its slot; [`Hold::with_permits`] adds the count.
    pub fn ending_now(lease: &Lease, acquired_at: Instant, clock: &Clock) -> Self {
        Hold {
            resource: lease.resource().to_string(),
            resources: lease.resources().to_vec(),
            permit: PermitHandle::parse(lease.token()).map(|PermitHandle { slot, .. }| Permit {
                slot,
                permits: None,
            }),
            fencing_token: lease.fencing_token(),
            acquired_at,
            valid_until: clock.to_real(lease.valid_until()),
            released_at: Instant::now(),
            clock_broken: false,
        }
    }

    /// This hold, a permit of a semaphore of `permits` permits.
    pub fn with_permits(mut self, permits: u32) -> Self {
        if let Some(permit) = self.permit.as_mut() {
            permit.permits = Some(permits);
        }
        self
    }

    /// The stretch of time in which the holder relied on the lock.
    fn relied_until(&self) -> Instant {
        self.released_at.min(self.valid_until)
    }

    fn is_set(&self) -> bool {
        self.resources.len() > 1
    }

    /// What the hold excludes others from, each with its own fencing order: every resource
    /// of a lock or set, or the slot of a permit.
    fn units(&self) -> Vec<Unit<'_>> {
        match self.permit {
            Some(permit) => vec![Unit {
                name: self.resource.as_str(),
                slot: Some(permit.slot),
            }],
            None if self.resources.is_empty() => vec![Unit {
                name: self.resource.as_str(),
                slot: None,
            }],
            None => self
                .resources
                .iter()
                .map(|name| Unit {
                    name: name.as_str(),
                    slot: None,
                })
                .collect(),
        }
    }
}

/// One thing a single holder may have at a time: a resource, or a semaphore's slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Unit<'a> {
    name: &'a str,
    slot: Option<u32>,
}

/// The most permits of one semaphore held at once.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct SemaphorePeak {
    pub name: String,
    pub permits: u32,
    /// Permits held at once at the busiest moment (every hold counted, labelled ones too).
    pub most_held: usize,
    pub holds: usize,
}

/// What the checker found.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Verdict {
    pub holds: usize,
    /// Pairs of holds of one resource (or of one semaphore slot) whose relied-on intervals
    /// intersect, with every assumption kept: violations.
    pub overlaps: usize,
    /// Overlapping pairs where a clock assumption was broken on purpose: a master's clock
    /// jumped while one of them held, or a holder's clock ran outside the drift allowance.
    pub overlaps_assumption_broken: usize,
    /// Of `overlaps`, the pairs where one hold or both were of a set (counted once per
    /// member they share).
    pub set_overlaps: usize,
    /// Of `overlaps`, the pairs of holders of one semaphore slot.
    pub slot_overlaps: usize,
    /// Holds that were granted after another one of the same resource (or semaphore slot),
    /// yet carry a smaller or equal fencing token.
    pub fencing_regressions: usize,
    /// Of `fencing_regressions`, those where the later hold or the earlier was of a set.
    pub set_fencing_regressions: usize,
    /// Of `fencing_regressions`, those on a semaphore slot.
    pub slot_fencing_regressions: usize,
    /// Permits that began while their semaphore's whole count was already held, with every
    /// assumption kept: violations.
    pub permits_over: usize,
    /// Permits beyond the count explained only by a broken clock assumption: enough of the
    /// holders already there had a clock beyond the allowance, or held across a master
    /// clock jump, that the rest fit within the count.
    pub permits_over_assumption_broken: usize,
    /// Per semaphore, the most permits held at once.
    pub semaphores: Vec<SemaphorePeak>,
}

impl Verdict {
    pub fn is_safe(&self) -> bool {
        self.overlaps == 0 && self.fencing_regressions == 0 && self.permits_over == 0
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
        self.verdict_with(&[], Duration::ZERO)
    }

    /// [`Checker::verdict`], labelling the overlaps that a broken clock assumption explains:
    /// the earlier holder's own clock ran beyond the allowance (a slow clock only lengthens
    /// its own holder's belief), or a master's clock jumped (at one of `jumps`) while the
    /// earlier hold was running, cutting its keys short, and the later hold began after the
    /// jump. `in_flight` is how early a grant may have landed before the holder saw it.
    /// A permit beyond its semaphore's count is labelled by the same rule, applied to each
    /// holder that was already there: it is labelled only when the holders it does not
    /// explain fit within the count.
    pub fn verdict_with(&self, jumps: &[Instant], in_flight: Duration) -> Verdict {
        let broken = BrokenAssumptions { jumps, in_flight };
        let holds = self.holds();
        let mut verdict = Verdict {
            holds: holds.len(),
            ..Verdict::default()
        };
        check_units(&holds, &broken, &mut verdict);
        check_semaphores(&holds, &broken, &mut verdict);
        verdict
    }
}

/// The clock assumptions a run broke on purpose: the master clock jumps, and how early a
/// grant may land before its holder sees it.
struct BrokenAssumptions<'a> {
    jumps: &'a [Instant],
    in_flight: Duration,
}

impl BrokenAssumptions<'_> {
    /// Whether a broken assumption explains `later` beginning while `earlier` relied on its
    /// hold: `earlier`'s own clock, or a jump during `earlier` and before `later`.
    fn explains(&self, earlier: &Hold, later: &Hold) -> bool {
        earlier.clock_broken
            || self.jumps.iter().any(|jump| {
                earlier.acquired_at <= *jump + self.in_flight
                    && earlier.relied_until() > *jump
                    && later.acquired_at > *jump
            })
    }
}

/// No two holders of one resource, or of one slot, at once; tokens only grow on each.
fn check_units(holds: &[Hold], broken: &BrokenAssumptions<'_>, verdict: &mut Verdict) {
    let mut by_unit: HashMap<Unit<'_>, Vec<&Hold>> = HashMap::new();
    for hold in holds {
        for unit in hold.units() {
            by_unit.entry(unit).or_default().push(hold);
        }
    }
    for (unit, list) in by_unit.iter_mut() {
        list.sort_by_key(|h| h.acquired_at);
        for (index, earlier) in list.iter().enumerate() {
            for later in &list[index + 1..] {
                if later.acquired_at >= earlier.relied_until() {
                    break;
                }
                if broken.explains(earlier, later) {
                    verdict.overlaps_assumption_broken += 1;
                } else {
                    verdict.overlaps += 1;
                    verdict.set_overlaps += usize::from(earlier.is_set() || later.is_set());
                    verdict.slot_overlaps += usize::from(unit.slot.is_some());
                }
            }
        }
        for pair in list.windows(2) {
            if pair[1].fencing_token <= pair[0].fencing_token {
                verdict.fencing_regressions += 1;
                verdict.set_fencing_regressions +=
                    usize::from(pair[0].is_set() || pair[1].is_set());
                verdict.slot_fencing_regressions += usize::from(unit.slot.is_some());
            }
        }
    }
}

/// Never more permits of a semaphore held at once than it has.
fn check_semaphores(holds: &[Hold], broken: &BrokenAssumptions<'_>, verdict: &mut Verdict) {
    let mut by_semaphore: HashMap<&str, Vec<&Hold>> = HashMap::new();
    for hold in holds {
        if hold.permit.is_some() {
            by_semaphore
                .entry(hold.resource.as_str())
                .or_default()
                .push(hold);
        }
    }
    let mut names: Vec<&str> = by_semaphore.keys().copied().collect();
    names.sort_unstable();
    for name in names {
        let list = by_semaphore.get_mut(name).expect("listed");
        list.sort_by_key(|h| h.acquired_at);
        let Some(permits) = list
            .iter()
            .filter_map(|h| h.permit.and_then(|p| p.permits))
            .min()
        else {
            continue;
        };
        let mut most_held = 0;
        // The holders still relying on a permit when the next one begins.
        let mut present: Vec<&Hold> = Vec::new();
        for later in list.iter() {
            present.retain(|earlier| later.acquired_at < earlier.relied_until());
            most_held = most_held.max(present.len() + 1);
            if present.len() >= permits as usize {
                let unexplained = present
                    .iter()
                    .filter(|e| !broken.explains(e, later))
                    .count();
                if unexplained >= permits as usize {
                    verdict.permits_over += 1;
                } else {
                    verdict.permits_over_assumption_broken += 1;
                }
            }
            present.push(later);
        }
        verdict.semaphores.push(SemaphorePeak {
            name: name.to_string(),
            permits,
            most_held,
            holds: list.len(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn hold(start: u64, end: u64, fence: u64, base: Instant) -> Hold {
        Hold {
            resource: "r".into(),
            resources: vec!["r".into()],
            permit: None,
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

    fn permit(start: u64, end: u64, slot: u32, fence: u64, base: Instant) -> Hold {
        Hold {
            resource: "sem".into(),
            resources: vec!["sem".into()],
            permit: Some(Permit {
                slot,
                permits: Some(2),
            }),
            ..hold(start, end, fence, base)
        }
    }

    #[test]
    fn a_set_overlaps_single_holds_of_each_member_only() {
        let base = Instant::now();
        let set = |start, end, fence, members: &[&str]| Hold {
            resource: members[0].into(),
            resources: members.iter().map(|m| m.to_string()).collect(),
            ..hold(start, end, fence, base)
        };
        let checker = Checker::new();
        checker.record(set(0, 30, 5, &["a", "b"]));
        // Another resource, and a member after the set let go: no overlap.
        checker.record(set(10, 20, 6, &["c"]));
        checker.record(set(30, 40, 7, &["b"]));
        assert!(checker.verdict().is_safe(), "{:?}", checker.verdict());
        // A single hold of a member while the set held it, and a set sharing one member.
        checker.record(set(5, 15, 8, &["a"]));
        checker.record(set(25, 35, 9, &["c", "b"]));
        let verdict = checker.verdict();
        assert_eq!(
            (verdict.overlaps, verdict.set_overlaps),
            (3, 3),
            "{verdict:?}"
        );
        assert_eq!(verdict.fencing_regressions, 1, "{verdict:?}");
        assert_eq!(verdict.set_fencing_regressions, 1, "{verdict:?}");
    }

    #[test]
    fn permits_are_counted_per_semaphore_and_labelled_like_overlaps() {
        let base = Instant::now();
        let checker = Checker::new();
        checker.record(permit(0, 30, 0, 10, base));
        checker.record(permit(10, 40, 1, 10, base));
        checker.record(permit(30, 50, 0, 11, base));
        let verdict = checker.verdict();
        assert!(verdict.is_safe(), "{verdict:?}");
        assert_eq!(verdict.semaphores[0].most_held, 2);
        // A third holder on a slot of its own (one the count does not have).
        checker.record(permit(35, 45, 2, 1, base));
        let verdict = checker.verdict();
        assert_eq!(
            (verdict.permits_over, verdict.overlaps),
            (1, 0),
            "{verdict:?}"
        );
        assert_eq!(verdict.semaphores[0].most_held, 3);
        // Explained only when enough of the holders already there are: one of two is not.
        let broken = Checker::new();
        broken.record(Hold {
            clock_broken: true,
            ..permit(0, 30, 0, 10, base)
        });
        broken.record(permit(10, 40, 1, 10, base));
        broken.record(permit(20, 25, 2, 1, base));
        let verdict = broken.verdict();
        assert_eq!(
            (verdict.permits_over, verdict.permits_over_assumption_broken),
            (0, 1),
            "{verdict:?}"
        );
        // A master clock jump explains the holders that held across it, not those that
        // began after it: the third permit fits with the one that began after the jump; the
        // fourth does not, beside two that began after it.
        let around_a_jump = Checker::new();
        around_a_jump.record(permit(0, 30, 0, 10, base));
        around_a_jump.record(permit(16, 40, 1, 10, base));
        around_a_jump.record(permit(20, 25, 2, 1, base));
        around_a_jump.record(permit(23, 24, 3, 1, base));
        let jump = base + Duration::from_millis(15);
        let verdict = around_a_jump.verdict_with(&[jump], Duration::ZERO);
        assert_eq!(
            (verdict.permits_over, verdict.permits_over_assumption_broken),
            (1, 1),
            "{verdict:?}"
        );
        let late = base + Duration::from_millis(100);
        let verdict = around_a_jump.verdict_with(&[late], Duration::ZERO);
        assert_eq!(
            (verdict.permits_over, verdict.semaphores[0].most_held),
            (2, 4)
        );
    }
}
