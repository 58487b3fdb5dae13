//! The engine's clocks, through one seam: the wall clock (fencing proposals, owner records)
//! and the monotonic clock that measures validity. Real unless a caller skews them: the chaos
//! harness plays clients whose clocks are off (an offset) or run at another rate (drift), for
//! proposals and validity alike.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Microseconds since the Unix epoch (0 for a clock set before it).
fn system_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_micros() as u64)
}

/// A duration in whole milliseconds, saturating instead of wrapping: how every front door and
/// tool writes a duration as `*_ms`.
pub fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Where the engine reads the time. Cheap to clone; clones share their skew.
#[derive(Debug, Clone, Default)]
pub struct Clock {
    skew: Option<Arc<Skew>>,
}

#[derive(Debug)]
struct Skew {
    /// The real instant the skewed clock started from.
    origin: Instant,
    /// The wall clock at `origin`, in µs.
    origin_micros: u64,
    /// Added to the wall clock, in µs (a clock that is off, or jumped).
    offset_micros: AtomicI64,
    /// How fast this clock runs against the real one (1.0: exactly; 0.99: 1% slow).
    rate: f64,
}

/// Rates a skewed clock may run at: a clock at half or twice the real speed is already far
/// outside what any drift allowance covers.
const RATES: std::ops::RangeInclusive<f64> = 0.5..=2.0;

impl Clock {
    /// The machine's own clocks.
    pub fn system() -> Clock {
        Clock::default()
    }

    /// A clock `offset_micros` off the machine's wall clock that runs at `rate` times the
    /// real speed, for wall time and validity alike. `rate` is clamped to 0.5..=2.
    pub fn skewed(offset_micros: i64, rate: f64) -> Clock {
        let rate = if rate.is_finite() {
            rate.clamp(*RATES.start(), *RATES.end())
        } else {
            1.0
        };
        Clock {
            skew: Some(Arc::new(Skew {
                origin: Instant::now(),
                origin_micros: system_micros(),
                offset_micros: AtomicI64::new(offset_micros),
                rate,
            })),
        }
    }

    /// Moves a skewed clock's wall time by `micros` (a jump); the real clock is never moved.
    pub fn jump(&self, micros: i64) {
        if let Some(skew) = &self.skew {
            skew.offset_micros.fetch_add(micros, Ordering::AcqRel);
        }
    }

    /// How fast this clock runs against the real one.
    pub fn rate(&self) -> f64 {
        self.skew.as_ref().map_or(1.0, |skew| skew.rate)
    }

    /// The monotonic time as this clock sees it.
    pub fn now(&self) -> Instant {
        match &self.skew {
            None => Instant::now(),
            Some(skew) => skew.origin + skew.origin.elapsed().mul_f64(skew.rate),
        }
    }

    /// The real instant at which this clock reads `instant` (for checkers that compare
    /// holders with different clocks).
    pub fn to_real(&self, instant: Instant) -> Instant {
        match &self.skew {
            None => instant,
            Some(skew) => {
                skew.origin
                    + instant
                        .saturating_duration_since(skew.origin)
                        .div_f64(skew.rate)
            }
        }
    }

    /// Microseconds since the Unix epoch, as this clock reads them.
    pub fn unix_micros(&self) -> u64 {
        match &self.skew {
            None => system_micros(),
            Some(skew) => {
                let elapsed = skew.origin.elapsed().mul_f64(skew.rate).as_micros() as i64;
                let offset = skew.offset_micros.load(Ordering::Acquire);
                (skew.origin_micros as i64)
                    .saturating_add(elapsed)
                    .saturating_add(offset)
                    .max(0) as u64
            }
        }
    }

    /// Milliseconds since the Unix epoch, as this clock reads them.
    pub fn unix_millis(&self) -> u64 {
        self.unix_micros() / 1000
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_system_clock_is_the_machines() {
        let clock = Clock::system();
        let before = system_micros();
        let read = clock.unix_micros();
        assert!(read >= before && read < before + 1_000_000);
        assert_eq!(clock.rate(), 1.0);
    }

    #[test]
    fn an_offset_moves_wall_time_and_a_jump_moves_it_again() {
        let clock = Clock::skewed(-5_000_000, 1.0);
        let real = system_micros() as i64;
        let read = clock.unix_micros() as i64;
        // Within a second of five seconds behind: the machine's wall clock may be slewed
        // meanwhile, which the skewed clock (counting on the monotonic one) does not follow.
        assert!(
            (read + 5_000_000 - real).abs() < 1_000_000,
            "{read} vs {real}"
        );
        clock.jump(10_000_000);
        assert!(clock.unix_micros() as i64 > real + 4_000_000);
    }

    #[test]
    fn a_slow_clock_measures_less_time_and_maps_back_to_real_time() {
        let clock = Clock::skewed(0, 0.5);
        let (real_start, start) = (Instant::now(), clock.now());
        std::thread::sleep(Duration::from_millis(20));
        let (measured, real) = (clock.now() - start, real_start.elapsed());
        // Half the real time, whatever the machine's load made the sleep.
        let expected = real.mul_f64(0.5);
        let slack = Duration::from_millis(2);
        assert!(
            measured <= expected + slack && measured + slack >= expected,
            "measured {measured:?} for {real:?} of real time"
        );
        let now = clock.now();
        let back = clock.to_real(now);
        let gap = back
            .saturating_duration_since(Instant::now())
            .max(Instant::now().saturating_duration_since(back));
        assert!(gap < Duration::from_millis(50), "{gap:?}");
    }

    #[test]
    fn rates_are_kept_within_bounds() {
        assert_eq!(Clock::skewed(0, 10.0).rate(), 2.0);
        assert_eq!(Clock::skewed(0, 0.0).rate(), 0.5);
        assert_eq!(Clock::skewed(0, f64::NAN).rate(), 1.0);
    }
}
