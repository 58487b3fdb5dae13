//! What the chaos workers take, and the worker loop: single locks and sets of resources drawn
//! from one small pool (so sets contend with single locks and with each other), and permits
//! of one semaphore with more workers than permits. Every hold is reported to the checker and
//! written through the fenced store: a resource's key for a lock or each member of a set, the
//! slot's key for a permit.

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::Rng;
use rand::seq::SliceRandom;
use serde::Serialize;

use super::checker::{Checker, Hold};
use super::store::FencedStore;
use super::{ChaosOptions, Fault, RESOURCE_PREFIX, Tally};
use crate::{Lease, Locks, PermitHandle};

/// The semaphore the permit workers share.
pub const SEMAPHORE: &str = "chaos:permits";

/// What a worker takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Pattern {
    /// One resource of the pool at a time.
    Locks,
    /// Two or three resources of the pool at once, all or nothing, named in a random order.
    Sets,
    /// One permit of the run's semaphore.
    Permits,
}

impl Pattern {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Locks => "locks",
            Pattern::Sets => "sets",
            Pattern::Permits => "permits",
        }
    }

    /// Every pattern, in the order reports list them.
    pub const ALL: [Pattern; 3] = [Pattern::Locks, Pattern::Sets, Pattern::Permits];

    fn index(self) -> usize {
        self as usize
    }
}

impl FromStr for Pattern {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        Pattern::ALL
            .into_iter()
            .find(|pattern| pattern.name() == text)
            .ok_or_else(|| {
                format!(
                    "unknown pattern `{text}`; expected one of {}",
                    Pattern::ALL.map(Pattern::name).join(", ")
                )
            })
    }
}

/// What each worker takes: the pool's `workers` take single locks, or with sets on, one in
/// three takes sets (all of them with sets alone); then `permit_workers` take permits.
pub(crate) fn roles(options: &ChaosOptions) -> Vec<Pattern> {
    let on = |pattern| options.patterns.contains(&pattern);
    let pool = match (on(Pattern::Locks), on(Pattern::Sets)) {
        (false, false) => 0,
        _ => options.workers,
    };
    let mut roles: Vec<Pattern> = (0..pool)
        .map(|worker| {
            if on(Pattern::Sets) && (!on(Pattern::Locks) || worker % 3 == 1) {
                Pattern::Sets
            } else {
                Pattern::Locks
            }
        })
        .collect();
    if on(Pattern::Permits) {
        roles.extend(std::iter::repeat_n(
            Pattern::Permits,
            options.permit_workers,
        ));
    }
    roles
}

/// Counts of one pattern's acquires.
#[derive(Default)]
pub(crate) struct PatternTally {
    pub attempts: AtomicU64,
    pub acquired: AtomicU64,
    pub failed: AtomicU64,
}

impl Tally {
    fn of(&self, pattern: Pattern) -> &PatternTally {
        &self.patterns[pattern.index()]
    }
}

/// One pattern's figures in a report.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PatternStats {
    pub pattern: &'static str,
    pub workers: usize,
    pub acquire_attempts: u64,
    pub acquisitions: u64,
    pub failed_acquires: u64,
}

pub(crate) fn pattern_stats(roles: &[Pattern], tally: &Tally) -> Vec<PatternStats> {
    Pattern::ALL
        .into_iter()
        .filter_map(|pattern| {
            let workers = roles.iter().filter(|r| **r == pattern).count();
            (workers > 0).then(|| {
                let counts = tally.of(pattern);
                PatternStats {
                    pattern: pattern.name(),
                    workers,
                    acquire_attempts: counts.attempts.load(Ordering::Relaxed),
                    acquisitions: counts.acquired.load(Ordering::Relaxed),
                    failed_acquires: counts.failed.load(Ordering::Relaxed),
                }
            })
        })
        .collect()
}

/// What one acquire asks for.
enum Ask {
    Lock(String),
    /// The resources in the (random) order the worker names them.
    Set(Vec<String>),
    Permit,
}

impl Ask {
    fn draw(pattern: Pattern, resources: usize, rng: &mut impl Rng) -> Ask {
        let name = |index: usize| format!("{RESOURCE_PREFIX}{index}");
        match pattern {
            Pattern::Locks => Ask::Lock(name(rng.gen_range(0..resources))),
            Pattern::Sets => {
                let size = rng.gen_range(2..=3).min(resources);
                let mut pool: Vec<usize> = (0..resources).collect();
                pool.shuffle(rng);
                Ask::Set(pool.into_iter().take(size).map(name).collect())
            }
            Pattern::Permits => Ask::Permit,
        }
    }
}

/// The fenced store's key of a semaphore's slot.
pub fn slot_key(semaphore: &str, slot: u32) -> String {
    format!("{semaphore}#permit:{slot}")
}

/// The store's keys of a lease: the resources the holder named, or its permit's slot (the
/// slot its token names).
fn store_keys(ask: &Ask, lease: &Lease) -> Vec<String> {
    match ask {
        Ask::Lock(resource) => vec![resource.clone()],
        Ask::Set(resources) => resources.clone(),
        Ask::Permit => match PermitHandle::parse(lease.token()) {
            Some(PermitHandle { slot, .. }) => vec![slot_key(SEMAPHORE, slot)],
            None => vec![SEMAPHORE.to_string()],
        },
    }
}

/// What the holder relied on, as it asked for it: the resources it named (a set's in
/// canonical order), or its permit of the semaphore of `permits` permits.
fn as_asked(mut hold: Hold, ask: &Ask, permits: u32) -> Hold {
    match ask {
        Ask::Lock(_) => hold,
        Ask::Set(resources) => {
            let mut names = resources.clone();
            names.sort();
            hold.resource = names[0].clone();
            hold.resources = names;
            hold
        }
        Ask::Permit => hold.with_permits(permits),
    }
}

/// The worker loop: acquire, claim the store with the token, maybe stall past validity,
/// write again, report the hold, then release (or crash and leave it to the TTL).
pub(crate) async fn work(
    worker: usize,
    pattern: Pattern,
    options: ChaosOptions,
    deadline: Instant,
    (locks, checker, store, tally): (Locks, Arc<Checker>, Arc<FencedStore>, Arc<Tally>),
) {
    let owner = format!("chaos-worker-{worker}");
    let pauses = options.injects(Fault::Pause);
    let clock_broken = super::clock_broken(locks.clock(), locks.topology().drift_factor);
    let counts = tally.of(pattern);
    while Instant::now() < deadline {
        let (ask, pause, crash, work) = {
            let mut rng = rand::thread_rng();
            (
                Ask::draw(pattern, options.resources, &mut rng),
                pauses && rng.gen_bool(options.pause_chance),
                rng.gen_bool(options.crash_chance),
                Duration::from_micros(rng.gen_range(200..3000)),
            )
        };
        tally.attempts.fetch_add(1, Ordering::Relaxed);
        counts.attempts.fetch_add(1, Ordering::Relaxed);
        let acquire = match &ask {
            Ask::Lock(resource) => locks.acquire(resource.as_str()),
            Ask::Set(resources) => locks.acquire_all(resources),
            Ask::Permit => locks.acquire_permit(SEMAPHORE, options.permits),
        };
        let acquired = acquire
            .ttl(options.ttl)
            .wait(options.wait)
            .owner(owner.as_str())
            .await;
        let lease = match acquired {
            Ok(lease) => lease,
            Err(error) => {
                tally.failed.fetch_add(1, Ordering::Relaxed);
                counts.failed.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(%error, pattern = pattern.name(), "chaos: acquire failed");
                continue;
            }
        };
        tally.acquired.fetch_add(1, Ordering::Relaxed);
        counts.acquired.fetch_add(1, Ordering::Relaxed);
        let acquired_at = Instant::now();
        let fence = lease.fencing_token();
        let keys = store_keys(&ask, &lease);
        // The holder's first act is to claim each resource with its token, as real fenced
        // storage learns a token at its first use.
        for key in &keys {
            store.granted(key, fence);
        }
        let write = |valid: bool| {
            let refused = keys.iter().filter(|key| !store.write(key, fence)).count();
            if refused > 0 && valid {
                tally.valid_write_rejected(acquired_at, clock_broken);
            }
        };
        write(lease.validity() > Duration::ZERO);
        if pause {
            // The holder does not know it stalled: it writes as if it still held the lock.
            tally.pauses.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(lease.validity() + Duration::from_millis(100)).await;
        }
        tokio::time::sleep(work).await;
        write(lease.validity() > Duration::ZERO);
        let hold = Hold {
            clock_broken,
            ..Hold::ending_now(&lease, acquired_at, locks.clock())
        };
        checker.record(as_asked(hold, &ask, options.permits));
        if crash {
            tally.crashes.fetch_add(1, Ordering::Relaxed);
            let _ = lease.detach();
        } else {
            let _ = lease.release().await;
        }
    }
}
