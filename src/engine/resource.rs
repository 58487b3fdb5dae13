//! Resource names: validation, and the Redis keys one resource owns on every master.
//!
//! The name only ever travels as a key or an argument, never inside Lua source. All keys of
//! one resource share one hash tag so the scripts stay valid on Redis Cluster too.

use fred::types::Key;

use crate::engine::error::Error;
use crate::group::slots::HashSlot;
use crate::group::subscriber::ReleaseChannel;

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
    /// For a semaphore's slot, the semaphore's permit count, which renewals keep alive.
    pub count: Option<Key>,
}

/// The key of semaphore `name`'s permit count.
fn permit_count_key(prefix: &str, name: &str) -> Key {
    Key::from(format!("{prefix}:{{{name}}}:permits"))
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
            count: None,
        }
    }

    /// The keys of a semaphore's slot: a lock of its own; the slots of one semaphore share a
    /// release channel, so a release wakes its waiters whichever slot it frees.
    pub fn slot(prefix: &str, name: &str, slot: u32) -> Self {
        let key = |suffix: &str| Key::from(format!("{prefix}:{{{name}}}:{suffix}"));
        ResourceKeys {
            lock: key(&format!("permit:{slot}")),
            fence: key(&format!("permit:{slot}:fence")),
            admission: Key::from(admission_key(prefix)),
            policy: Key::from(policy_key(prefix)),
            released: format!("{prefix}:{{{name}}}:permits:released"),
            count: Some(permit_count_key(prefix, name)),
        }
    }

    /// Keys of the inspect script.
    pub fn inspect(&self) -> Vec<Key> {
        vec![self.lock.clone(), self.fence.clone()]
    }

    /// Keys of the force release script.
    pub fn release(&self) -> Vec<Key> {
        vec![self.lock.clone()]
    }
}

/// Most resources one lease may take at once: every grant reads and writes all of them in one
/// script call, which holds the master meanwhile.
pub const MAX_SET_RESOURCES: usize = 64;

/// What one lease holds on every group: one resource, or several taken all or nothing. The
/// names are in one canonical (sorted) order, so two leases naming the same resources in any
/// order send the same keys.
#[derive(Debug, Clone)]
pub(crate) struct LeaseKeys {
    pub names: Vec<String>,
    pub members: Vec<ResourceKeys>,
}

impl LeaseKeys {
    /// The keys of one resource, named as given (checked by the caller).
    pub fn one(prefix: &str, resource: &str) -> Self {
        LeaseKeys {
            names: vec![resource.to_string()],
            members: vec![ResourceKeys::new(prefix, resource)],
        }
    }

    /// The keys of a set of resources: at least one, at most [`MAX_SET_RESOURCES`], each
    /// a valid name, none named twice.
    pub fn set<S: AsRef<str>>(prefix: &str, resources: &[S]) -> Result<Self, Error> {
        if resources.is_empty() {
            return Err(Error::invalid(
                "resources",
                "must name at least one resource",
            ));
        }
        if resources.len() > MAX_SET_RESOURCES {
            return Err(Error::invalid(
                "resources",
                format!(
                    "names {} resources; one lease takes at most {MAX_SET_RESOURCES}",
                    resources.len()
                ),
            ));
        }
        let mut names: Vec<String> = Vec::with_capacity(resources.len());
        for resource in resources {
            validate_resource(resource.as_ref())?;
            names.push(resource.as_ref().to_string());
        }
        names.sort();
        if let Some(twice) = names.windows(2).find(|pair| pair[0] == pair[1]) {
            return Err(Error::invalid(
                "resources",
                format!("names `{}` twice; name each resource once", twice[0]),
            ));
        }
        let members = names
            .iter()
            .map(|name| ResourceKeys::new(prefix, name))
            .collect();
        Ok(LeaseKeys { names, members })
    }

    /// How errors and logs name the lease: its resource, or its resources joined.
    pub fn label(&self) -> String {
        self.names.join(", ")
    }

    /// The Cluster hash slot of the lease's one resource; `None` for a set of several, whose
    /// resources live in slots of their own.
    pub fn hash_slot(&self) -> Option<HashSlot> {
        match self.names.as_slice() {
            [name] => Some(HashSlot::of_resource(name)),
            _ => None,
        }
    }

    fn shared(&self) -> &ResourceKeys {
        &self.members[0]
    }

    /// Keys of the acquire script: each member's lock and fence, then marker and policy.
    pub fn acquire(&self) -> Vec<Key> {
        let mut keys = Vec::with_capacity(2 * self.members.len() + 2);
        for member in &self.members {
            keys.push(member.lock.clone());
            keys.push(member.fence.clone());
        }
        keys.push(self.shared().admission.clone());
        keys.push(self.shared().policy.clone());
        keys
    }

    /// Keys of the extend script: each member's lock, each permit count, then marker and
    /// policy. The script is told how many locks lead (see [`LeaseKeys::extend_args`]).
    pub fn extend(&self) -> Vec<Key> {
        let mut keys = self.release();
        keys.extend(self.members.iter().filter_map(|m| m.count.clone()));
        keys.push(self.shared().admission.clone());
        keys.push(self.shared().policy.clone());
        keys
    }

    /// Arguments of the extend script: the token, the TTL, and how many of its keys are
    /// locks.
    pub fn extend_args(&self, token: &str, ttl_ms: u64) -> Vec<fred::types::Value> {
        vec![
            token.into(),
            fred::types::Value::from(ttl_ms as i64),
            fred::types::Value::from(self.members.len() as i64),
        ]
    }

    /// Keys of the release script: each member's lock.
    pub fn release(&self) -> Vec<Key> {
        self.members.iter().map(|m| m.lock.clone()).collect()
    }

    /// Arguments of the release script: the token, the announcement, each member's channel.
    pub fn release_args(&self, token: &str, announcement: &str) -> Vec<fred::types::Value> {
        let mut args = vec![token.into(), announcement.into()];
        args.extend(self.members.iter().map(|m| m.released.as_str().into()));
        args
    }
}

/// Most permits one semaphore may have: a permit's grant reads every slot in one script call.
pub const MAX_PERMITS: u32 = 128;

/// What an acquire asks the groups for.
#[derive(Debug, Clone)]
pub(crate) enum Claim {
    /// Every resource of a set, all or nothing (one resource is a set of one).
    Set(LeaseKeys),
    /// One permit of a counting semaphore: any one of its slots.
    Permit(PermitKeys),
}

/// The keys of a semaphore of `permits` permits: its permit count, and one slot per permit.
/// Each slot is a lock of its own (`<prefix>:{<name>}:permit:<slot>`) with its own fence.
#[derive(Debug, Clone)]
pub(crate) struct PermitKeys {
    pub name: String,
    pub permits: u32,
    pub count: Key,
    pub slots: Vec<ResourceKeys>,
}

impl PermitKeys {
    /// The keys of semaphore `name` with `permits` permits, both checked.
    pub fn new(prefix: &str, name: &str, permits: u32) -> Result<Self, Error> {
        validate_resource(name)?;
        if permits == 0 || permits > MAX_PERMITS {
            return Err(Error::invalid(
                "permits",
                format!("{permits} is outside 1..={MAX_PERMITS}"),
            ));
        }
        Ok(PermitKeys {
            name: name.to_string(),
            permits,
            count: permit_count_key(prefix, name),
            slots: (0..permits)
                .map(|slot| ResourceKeys::slot(prefix, name, slot))
                .collect(),
        })
    }
}

impl PermitKeys {
    /// Every slot but `keep`, as one lease's keys (for deletes by token).
    fn others(&self, keep: Option<usize>) -> LeaseKeys {
        LeaseKeys {
            names: vec![self.name.clone()],
            members: self
                .slots
                .iter()
                .enumerate()
                .filter(|(slot, _)| Some(*slot) != keep)
                .map(|(_, keys)| keys.clone())
                .collect(),
        }
    }
}

impl Claim {
    /// The Cluster hash slot of what it claims (see [`LeaseKeys::hash_slot`]).
    pub fn hash_slot(&self) -> Option<HashSlot> {
        match self {
            Claim::Set(keys) => keys.hash_slot(),
            Claim::Permit(keys) => Some(HashSlot::of_resource(&keys.name)),
        }
    }

    /// How errors and logs name it.
    pub fn label(&self) -> String {
        match self {
            Claim::Set(keys) => keys.label(),
            Claim::Permit(keys) => keys.name.clone(),
        }
    }

    /// The release channel of the resource called `name` (any, when `name` is not one), and
    /// the slot of that resource (where a Cluster group announces its releases).
    pub fn channel(&self, name: Option<&str>) -> ReleaseChannel {
        match self {
            Claim::Set(keys) => {
                let member = name
                    .and_then(|name| keys.names.iter().position(|n| n == name))
                    .unwrap_or(0);
                ReleaseChannel {
                    name: keys.members[member].released.clone(),
                    slot: HashSlot::of_resource(&keys.names[member]),
                }
            }
            Claim::Permit(keys) => ReleaseChannel {
                name: keys.slots[0].released.clone(),
                slot: HashSlot::of_resource(&keys.name),
            },
        }
    }

    /// The script keys of a grant: for a permit, the count, every slot's lock and fence, the
    /// marker and the policy.
    pub fn grant_keys(&self) -> Vec<Key> {
        match self {
            Claim::Set(keys) => keys.acquire(),
            Claim::Permit(keys) => {
                let mut all = Vec::with_capacity(2 * keys.slots.len() + 3);
                all.push(keys.count.clone());
                for slot in &keys.slots {
                    all.push(slot.lock.clone());
                    all.push(slot.fence.clone());
                }
                all.push(keys.slots[0].admission.clone());
                all.push(keys.slots[0].policy.clone());
                all
            }
        }
    }

    /// What a lease won on `slot` holds (a set holds all of itself).
    pub fn held(&self, slot: usize) -> LeaseKeys {
        match self {
            Claim::Set(keys) => keys.clone(),
            Claim::Permit(keys) => LeaseKeys {
                names: vec![keys.name.clone()],
                members: vec![keys.slots[slot.min(keys.slots.len() - 1)].clone()],
            },
        }
    }

    /// What a failed attempt's rollback deletes by token: everything it may have been
    /// granted.
    pub fn rollback(&self) -> LeaseKeys {
        match self {
            Claim::Set(keys) => keys.clone(),
            Claim::Permit(keys) => keys.others(None),
        }
    }

    /// What a won permit rolls back: the slots other than the one it won. `None` for a set,
    /// which has nothing beside what it won.
    pub fn strays(&self, won: usize) -> Option<LeaseKeys> {
        match self {
            Claim::Set(_) => None,
            Claim::Permit(keys) => Some(keys.others(Some(won))),
        }
    }
}

/// The token a permit's holder is given: the token the slot holds, and the slot, so that a
/// release or renewal by token finds the slot without asking for the permit count.
pub(crate) fn permit_handle(token: &str, slot: usize) -> String {
    format!("{token}-{slot}")
}

/// A permit's handle, the token its holder is given (`<token>-<slot>`): the token the slot
/// holds, and the slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PermitHandle<'a> {
    /// The token the slot's lock holds.
    pub token: &'a str,
    /// The slot, from 0.
    pub slot: u32,
}

impl<'a> PermitHandle<'a> {
    /// The token and slot of a permit's handle; `None` for a lock's token (it has no `-`).
    pub fn parse(handle: &'a str) -> Option<Self> {
        let (token, slot) = handle.rsplit_once('-')?;
        Some(PermitHandle {
            token,
            slot: slot.parse().ok()?,
        })
    }
}

/// The Redis Cluster hash slot every key of `resource` lives in (its keys share one hash tag).
pub fn cluster_slot(resource: &str) -> u16 {
    HashSlot::of_resource(resource).index()
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
    fn a_set_is_named_in_one_order_and_refuses_repeats_empty_and_oversized_sets() {
        let one = LeaseKeys::set("ql", &["b", "a", "c"]).expect("set");
        let other = LeaseKeys::set("ql", &["c", "b", "a"]).expect("set");
        assert_eq!(one.names, ["a", "b", "c"]);
        assert_eq!(one.acquire(), other.acquire());
        let field = |result: Result<LeaseKeys, Error>| match result {
            Err(Error::InvalidInput { field, reason }) => format!("{field}: {reason}"),
            other => panic!("accepted: {other:?}"),
        };
        assert!(field(LeaseKeys::set::<&str>("ql", &[])).starts_with("resources"));
        assert!(field(LeaseKeys::set("ql", &["a", "b", "a"])).contains("`a` twice"));
        let many: Vec<String> = (0..=MAX_SET_RESOURCES).map(|i| i.to_string()).collect();
        assert!(field(LeaseKeys::set("ql", &many)).starts_with("resources"));
        assert!(field(LeaseKeys::set("ql", &["ok", ""])).starts_with("resource"));
    }

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
