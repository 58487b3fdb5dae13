//! Wall-clock time and millisecond conversions, in one place.
//!
//! Fencing proposals and owner records read the wall clock; validity is measured on the
//! monotonic clock (`Instant`) by the callers.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Microseconds since the Unix epoch (0 for a clock set before it).
pub(crate) fn unix_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_micros() as u64)
}

/// Milliseconds since the Unix epoch.
pub(crate) fn unix_millis() -> u64 {
    unix_micros() / 1000
}

/// A duration in whole milliseconds, saturating instead of wrapping.
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
