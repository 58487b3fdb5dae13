//! Fencing proposals: every proposal of a process is above the wall clock and above every
//! fence the process has proposed or seen, so its tokens only grow.

use std::sync::atomic::{AtomicU64, Ordering};

/// The highest fence this process has proposed or seen.
#[derive(Debug, Default)]
pub(crate) struct Fences {
    highest: AtomicU64,
}

impl Fences {
    /// A proposal above `now_micros` (the wall clock in µs) and above every fence so far.
    pub fn propose(&self, now_micros: u64) -> u64 {
        let floor = now_micros.saturating_sub(1);
        let previous = self
            .highest
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |last| {
                Some(last.max(floor).saturating_add(1))
            })
            .unwrap_or_else(|last| last);
        previous.max(floor).saturating_add(1)
    }

    /// Raises the floor of later proposals above a fence a group answered with.
    pub fn observe(&self, fence: u64) {
        self.highest.fetch_max(fence, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proposals_follow_the_clock() {
        let fences = Fences::default();
        assert_eq!(fences.propose(1_000), 1_000);
        assert_eq!(fences.propose(5_000), 5_000);
    }

    #[test]
    fn proposals_grow_even_when_the_clock_stands_still_or_goes_back() {
        let fences = Fences::default();
        let first = fences.propose(10_000);
        let second = fences.propose(10_000);
        let third = fences.propose(9_000);
        assert!(first < second && second < third, "{first} {second} {third}");
    }

    #[test]
    fn a_fence_seen_ahead_of_the_clock_lifts_every_later_proposal_above_it() {
        let fences = Fences::default();
        fences.observe(1_000_000);
        assert_eq!(fences.propose(10), 1_000_001);
        // A lower fence seen later lowers nothing.
        fences.observe(5);
        assert_eq!(fences.propose(10), 1_000_002);
    }

    #[test]
    fn a_clock_before_the_epoch_still_gives_growing_proposals() {
        let fences = Fences::default();
        let first = fences.propose(0);
        assert!(fences.propose(0) > first);
    }

    #[test]
    fn concurrent_proposals_are_unique() {
        let fences = std::sync::Arc::new(Fences::default());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let fences = fences.clone();
                std::thread::spawn(move || {
                    (0..1_000).map(|_| fences.propose(42)).collect::<Vec<_>>()
                })
            })
            .collect();
        let mut all: Vec<u64> = threads
            .into_iter()
            .flat_map(|t| t.join().unwrap_or_default())
            .collect();
        let count = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), count);
        assert_eq!(count, 4_000);
    }
}
