//! A fenced store: the stand-in for the resource a lock protects. It remembers the highest
//! fencing token that wrote to each key and rejects writes that carry a smaller one, which is
//! what turns a lease that expired during a pause into a harmless late write.
//!
//! It also hears of every grant the moment the holder gets it, only to count the writes it
//! accepted from a holder that a newer one had already replaced: the window fencing cannot
//! close, between a new holder's grant and its first write.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// The highest tokens seen for one key.
#[derive(Debug, Default, Clone, Copy)]
struct Seen {
    written: u64,
    granted: u64,
}

/// In-memory fenced storage shared by every worker of a run.
#[derive(Debug, Default)]
pub struct FencedStore {
    keys: Mutex<HashMap<String, Seen>>,
    accepted: AtomicU64,
    rejected: AtomicU64,
    stale_accepted: AtomicU64,
}

impl FencedStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// A holder of `key` got `fencing_token` (bookkeeping only: storage learns a token when
    /// it is written).
    pub fn granted(&self, key: &str, fencing_token: u64) {
        if let Ok(mut keys) = self.keys.lock() {
            let seen = keys.entry(key.to_string()).or_default();
            seen.granted = seen.granted.max(fencing_token);
        }
    }

    /// Writes to `key` with `fencing_token`: accepted unless a larger token already wrote.
    pub fn write(&self, key: &str, fencing_token: u64) -> bool {
        let (accepted, stale) = match self.keys.lock() {
            Ok(mut keys) => {
                let seen = keys.entry(key.to_string()).or_default();
                if fencing_token >= seen.written {
                    seen.written = fencing_token;
                    (true, fencing_token < seen.granted)
                } else {
                    (false, false)
                }
            }
            Err(_) => (false, false),
        };
        let counter = if accepted {
            &self.accepted
        } else {
            &self.rejected
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if stale {
            self.stale_accepted.fetch_add(1, Ordering::Relaxed);
        }
        accepted
    }

    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }

    /// Writes refused because a newer holder had already written.
    pub fn rejected(&self) -> u64 {
        self.rejected.load(Ordering::Relaxed)
    }

    /// Writes accepted although a holder with a larger token had been granted the lock
    /// before they landed.
    pub fn stale_accepted(&self) -> u64 {
        self.stale_accepted.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_only_smaller_tokens() {
        let store = FencedStore::new();
        assert!(store.write("k", 5));
        assert!(store.write("k", 5));
        assert!(store.write("k", 7));
        assert!(!store.write("k", 6));
        assert!(store.write("other", 1));
        assert_eq!((store.accepted(), store.rejected()), (4, 1));
        assert_eq!(store.stale_accepted(), 0);
    }

    #[test]
    fn a_write_that_lands_before_the_newer_holders_first_is_counted_stale() {
        let store = FencedStore::new();
        assert!(store.write("k", 5));
        store.granted("k", 9);
        assert!(store.write("k", 5));
        assert_eq!(store.stale_accepted(), 1);
        assert!(store.write("k", 9));
        assert!(!store.write("k", 5));
        assert_eq!(store.stale_accepted(), 1);
    }
}
