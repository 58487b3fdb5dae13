//! Resource names: validation, and the Redis keys one resource owns on every master.
//!
//! The name only ever travels as a key or an argument, never inside Lua source. All keys of
//! one resource share one hash tag so the scripts stay valid on Redis Cluster too.

use fred::types::Key;

use crate::engine::error::Error;

/// Longest accepted resource name, in bytes.
pub const MAX_RESOURCE_BYTES: usize = 512;
/// Longest accepted owner or purpose text, in bytes.
pub const MAX_LABEL_BYTES: usize = 1024;

/// The keys of one resource, `<prefix>:{<resource>}:lock|fence` (the lock's value carries the
/// holder's token and owner record), and the master's admission marker `<prefix>:admission`
/// and lock policy `<prefix>:policy` (no braces, so no resource key can ever equal them).
#[derive(Debug, Clone)]
pub(crate) struct ResourceKeys {
    pub lock: Key,
    pub fence: Key,
    pub admission: Key,
    pub policy: Key,
    /// Pub/sub channel on which releases wake the waiters of this resource.
    pub released: String,
}

/// The key under which a master records since when its replication history may vote.
pub(crate) fn admission_key(prefix: &str) -> String {
    format!("{prefix}:admission")
}

/// The key of a master's lock policy (replicated; see `protocol::Policy`).
pub(crate) fn policy_key(prefix: &str) -> String {
    format!("{prefix}:policy")
}

impl ResourceKeys {
    pub fn new(prefix: &str, resource: &str) -> Self {
        let key = |suffix: &str| Key::from(format!("{prefix}:{{{resource}}}:{suffix}"));
        ResourceKeys {
            lock: key("lock"),
            fence: key("fence"),
            admission: Key::from(admission_key(prefix)),
            policy: Key::from(policy_key(prefix)),
            released: format!("{prefix}:{{{resource}}}:released"),
        }
    }

    /// Keys of the acquire script.
    pub fn acquire(&self) -> Vec<Key> {
        vec![
            self.lock.clone(),
            self.fence.clone(),
            self.admission.clone(),
            self.policy.clone(),
        ]
    }

    /// Keys of the inspect script.
    pub fn inspect(&self) -> Vec<Key> {
        vec![self.lock.clone(), self.fence.clone()]
    }

    /// Keys of the extend script.
    pub fn extend(&self) -> Vec<Key> {
        vec![
            self.lock.clone(),
            self.admission.clone(),
            self.policy.clone(),
        ]
    }

    /// Keys of the release script.
    pub fn release(&self) -> Vec<Key> {
        vec![self.lock.clone()]
    }
}

/// Checks a resource name: non-empty, at most [`MAX_RESOURCE_BYTES`], no control characters.
pub fn validate_resource(resource: &str) -> Result<(), Error> {
    if resource.is_empty() {
        return Err(Error::invalid("resource", "must not be empty"));
    }
    if resource.len() > MAX_RESOURCE_BYTES {
        return Err(Error::invalid(
            "resource",
            format!(
                "is {} bytes long; the limit is {MAX_RESOURCE_BYTES}",
                resource.len()
            ),
        ));
    }
    if let Some(bad) = resource.chars().find(|c| c.is_control()) {
        return Err(Error::invalid(
            "resource",
            format!("contains the control character {bad:?}; use printable text"),
        ));
    }
    Ok(())
}

/// Checks an optional owner/purpose label: bounded length, no control characters.
pub(crate) fn validate_label(field: &'static str, label: Option<&str>) -> Result<(), Error> {
    let Some(label) = label else { return Ok(()) };
    if label.len() > MAX_LABEL_BYTES {
        return Err(Error::invalid(
            field,
            format!(
                "is {} bytes long; the limit is {MAX_LABEL_BYTES}",
                label.len()
            ),
        ));
    }
    if label.chars().any(|c| c.is_control()) {
        return Err(Error::invalid(field, "must not contain control characters"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_names_with_the_field() {
        for bad in ["", "a\nb", "tab\there", "\u{7f}"] {
            let message = validate_resource(bad).expect_err(bad).to_string();
            assert!(message.contains("resource"), "{message}");
        }
        let long = "x".repeat(MAX_RESOURCE_BYTES + 1);
        assert!(validate_resource(&long).is_err());
        assert!(validate_resource(&"x".repeat(MAX_RESOURCE_BYTES)).is_ok());
    }

    #[test]
    fn keys_never_collide_across_names() {
        let names = [
            "a",
            "a}:lock",
            "a}",
            "{a}",
            "a b",
            "*",
            "ключ",
            "a}:lock}:owner",
        ];
        let mut seen = std::collections::HashSet::new();
        for name in names {
            let keys = ResourceKeys::new("ql", name);
            for key in [keys.lock, keys.fence] {
                assert_ne!(key, keys.admission);
                assert!(seen.insert(key.as_bytes().to_vec()), "{name} collides");
            }
        }
    }
}
