//! A fenced store: the stand-in for the resource a lock protects. It remembers the highest
//! fencing token that wrote to each key and rejects writes that carry a smaller one, which is
//! what turns a lease that expired during a pause into a harmless late write.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// In-memory fenced storage shared by every worker of a run.
#[derive(Debug, Default)]
pub struct FencedStore {
    highest: Mutex<HashMap<String, u64>>,
    accepted: AtomicU64,
    rejected: AtomicU64,
}

impl FencedStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Writes to `key` with `fencing_token`: accepted unless a larger token already wrote.
    pub fn write(&self, key: &str, fencing_token: u64) -> bool {
        let accepted = match self.highest.lock() {
            Ok(mut highest) => {
                let seen = highest.entry(key.to_string()).or_insert(0);
                if fencing_token >= *seen {
                    *seen = fencing_token;
                    true
                } else {
                    false
                }
            }
            Err(_) => false,
        };
        let counter = if accepted {
            &self.accepted
        } else {
            &self.rejected
        };
        counter.fetch_add(1, Ordering::Relaxed);
        accepted
    }

    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }

    /// Writes refused because a newer holder had already written.
    pub fn rejected(&self) -> u64 {
        self.rejected.load(Ordering::Relaxed)
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
    }
}
