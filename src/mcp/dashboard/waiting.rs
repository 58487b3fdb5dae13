//! Waiters per resource, as this server knows them: `acquire_lock` calls with a `wait_ms`
//! still running here. Other processes' waiters are theirs; nothing in Redis counts them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Calls waiting now, by resource.
#[derive(Debug, Default)]
pub struct Waiting {
    by_resource: Mutex<BTreeMap<String, usize>>,
}

/// One call's wait; dropping it (the call returned, or was cancelled) stops counting it.
pub struct WaitGuard {
    waiting: Arc<Waiting>,
    resources: Vec<String>,
}

impl Waiting {
    pub fn new() -> Waiting {
        Waiting::default()
    }

    fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, usize>> {
        self.by_resource
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts one call waiting on each of `resources` until the guard drops.
    pub fn start(self: &Arc<Self>, resources: Vec<String>) -> WaitGuard {
        let mut map = self.map();
        for resource in &resources {
            *map.entry(resource.clone()).or_default() += 1;
        }
        WaitGuard {
            waiting: Arc::clone(self),
            resources,
        }
    }

    /// Resources with calls waiting, by name, at most `limit` of them.
    pub fn snapshot(&self, limit: usize) -> Vec<(String, usize)> {
        self.map()
            .iter()
            .take(limit)
            .map(|(resource, count)| (resource.clone(), *count))
            .collect()
    }
}

impl Drop for WaitGuard {
    fn drop(&mut self) {
        let mut map = self.waiting.map();
        for resource in &self.resources {
            if let Some(count) = map.get_mut(resource) {
                *count -= 1;
                if *count == 0 {
                    map.remove(resource);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_counts_until_its_guard_drops() {
        let waiting = Arc::new(Waiting::new());
        let first = waiting.start(vec!["a".into(), "b".into()]);
        let second = waiting.start(vec!["a".into()]);
        assert_eq!(
            waiting.snapshot(10),
            vec![("a".to_string(), 2), ("b".to_string(), 1)]
        );
        drop(first);
        assert_eq!(waiting.snapshot(10), vec![("a".to_string(), 1)]);
        drop(second);
        assert!(waiting.snapshot(10).is_empty());
    }
}
