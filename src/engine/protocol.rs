//! The contract between the engine and the scripts in `lua/`, in one place: the codes the
//! voting scripts answer, the lock policy every master holds, and the admission rule.
//!
//! The engine, the tests and the protocol model all read these; the scripts use the same
//! numbers, which a test checks against the Lua sources.

use crate::engine::resource::{admission_key, policy_key};
use crate::engine::vote::Majority;
use crate::group::scripts::ADMIT_LUA;

/// What the acquire and extend scripts answer, as the first element of their reply.
pub mod code {
    /// Acquire: another token holds the lock. Extend: the token does not hold it.
    pub const HELD: u64 = 0;
    /// Granted (acquire), or renewed (extend).
    pub const GRANTED: u64 = 1;
    /// Acquire: the group's fence is at or above the proposal.
    pub const FENCE_AHEAD: u64 = 2;
    /// The master's history is new: it sits out until every lease it may have missed expired.
    pub const QUARANTINED: u64 = 3;
    /// The master has no lock policy (it lost its data): it cannot tell how long to sit out.
    pub const NO_POLICY: u64 = 4;
    /// The TTL asked for is above the master's policy.
    pub const ABOVE_POLICY: u64 = 5;
    /// The master may evict keys (`maxmemory` with a policy other than `noeviction`): it
    /// could drop a live lock or a fence, so it does not vote.
    pub const EVICTS: u64 = 6;
    /// A semaphore's permit: it exists with another permit count than the one asked with.
    pub const PERMITS_DIFFER: u64 = 7;
    /// Release: no lock of the call exists on the group, whoever held it.
    pub const ABSENT: u64 = 8;
    /// Acknowledged mode: the call did not say it waits for as many replicas as the
    /// master's policy names (the detail); nothing was written.
    pub const ACKS_REQUIRED: u64 = 9;
    /// Acknowledged mode: the master does not have exactly the replicas its policy names,
    /// each in sync (`{10, attached, needed}`); nothing was written.
    pub const REPLICAS_MISSING: u64 = 10;
}

/// The shortest life of a fence key after its last grant.
pub const FENCE_TTL_FLOOR_MS: u64 = 86_400_000;
/// A fence key lives at least this many of the policy's longest TTLs after its last grant.
pub const FENCE_TTL_IN_TTLS: u64 = 100;

/// The lock policy a master holds in `<prefix>:policy`, replicated with its data: the bounds
/// that decide how long a master that lost data sits out of the vote. The server owns it, so
/// clients with different configurations agree on the quarantine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "mcp", derive(schemars::JsonSchema))]
pub struct Policy {
    /// Longest TTL the master grants or renews.
    pub max_ttl_ms: u64,
    /// How long an old master cut off from its replicas may go on accepting writes:
    /// `min-replicas-max-lag` plus two seconds of Redis's once-a-second checks. 0 for a
    /// master without replicas.
    pub write_window_ms: u64,
    /// Acknowledged mode when above 0: the number of replicas the master has, every one of
    /// which must acknowledge a grant or renewal (`WAIT`) before it counts. A replica promoted
    /// from such a master holds every counted vote, so it takes over its master's admission
    /// instead of sitting out (docs/safety.md, "Acknowledged mode").
    #[serde(default)]
    pub acked_replicas: u32,
}

impl Policy {
    /// The key a master holds its policy in, under `key_prefix` (`<prefix>:policy`).
    pub fn key(key_prefix: &str) -> String {
        policy_key(key_prefix)
    }

    /// The command that admits one master to the vote at once under this policy, setting its
    /// acknowledged mode to `acked_replicas` (0: off): `EVAL` of `lua/admit.lua` on the
    /// master's admission marker and policy under `key_prefix`. Only for masters just started
    /// empty, which cannot have missed a grant (a lab's); [`crate::Locks::admit`] is the
    /// checked way for a deployment.
    pub fn admit_command(self, key_prefix: &str) -> Vec<String> {
        vec![
            "EVAL".to_string(),
            ADMIT_LUA.to_string(),
            "2".to_string(),
            admission_key(key_prefix),
            policy_key(key_prefix),
            self.max_ttl_ms.to_string(),
            self.write_window_ms.to_string(),
            // Votes at once (no delay), not forced.
            "0".to_string(),
            "0".to_string(),
            self.acked_replicas.to_string(),
        ]
    }

    /// How long a master with a new history sits out: every lease it may have granted and
    /// lost has expired by then, including those an isolated old master granted before it
    /// stopped accepting writes.
    pub fn quarantine_ms(self) -> u64 {
        self.max_ttl_ms.saturating_add(self.write_window_ms)
    }

    /// How long a fence key lives after its last grant: long enough that a proposal made
    /// after it expired is above it (proposals follow the clock), unless a client's clock is
    /// off by half of it. It bounds the keys kept for resources nobody locks any more.
    pub fn fence_ttl_ms(self) -> u64 {
        FENCE_TTL_FLOOR_MS.max(self.max_ttl_ms.saturating_mul(FENCE_TTL_IN_TTLS))
    }

    /// The write window of a master with `min-replicas-to-write 1` and this
    /// `min-replicas-max-lag` (seconds): Redis counts a replica's lag in whole seconds from
    /// its last acknowledgement (sent once a second) and rechecks once a second, so a master
    /// cut off from its replica takes writes for at most the lag plus two seconds.
    pub fn write_window_for(min_replicas_max_lag_s: u64) -> u64 {
        min_replicas_max_lag_s
            .saturating_add(2)
            .saturating_mul(1000)
    }

    /// The larger of two policies, field by field: a policy only ever grows.
    pub fn merge(self, other: Policy) -> Policy {
        Policy {
            max_ttl_ms: self.max_ttl_ms.max(other.max_ttl_ms),
            write_window_ms: self.write_window_ms.max(other.write_window_ms),
            acked_replicas: self.acked_replicas.max(other.acked_replicas),
        }
    }

    /// The policy a master that lost its own adopts from the other groups: the largest of
    /// theirs, once a majority of all groups told it. Any lease the master granted before it
    /// lost its data was granted by a majority too, and every group of that majority that
    /// still knows the lease enforced a policy at least as large, so a majority of answers
    /// contains one of them. `None` when fewer than a majority answered with a policy.
    pub fn adopt(answers: &[Option<Policy>], majority: Majority) -> Option<Policy> {
        let known: Vec<Policy> = answers.iter().flatten().copied().collect();
        if known.len() < majority.needed {
            return None;
        }
        known.into_iter().reduce(Policy::merge)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: Policy = Policy {
        max_ttl_ms: 1_000,
        write_window_ms: 3_000,
        acked_replicas: 0,
    };
    const LARGE: Policy = Policy {
        max_ttl_ms: 300_000,
        write_window_ms: 0,
        acked_replicas: 0,
    };

    #[test]
    fn the_quarantine_covers_the_longest_ttl_and_the_write_window() {
        assert_eq!(SMALL.quarantine_ms(), 4_000);
    }

    #[test]
    fn policies_merge_field_by_field_upwards() {
        assert_eq!(
            SMALL.merge(LARGE),
            Policy {
                max_ttl_ms: 300_000,
                write_window_ms: 3_000,
                acked_replicas: 0,
            }
        );
    }

    #[test]
    fn a_policy_is_adopted_only_from_a_majority_of_groups() {
        let five = Majority::of(5);
        assert_eq!(
            Policy::adopt(&[Some(SMALL), Some(LARGE), None, None, None], five),
            None
        );
        assert_eq!(
            Policy::adopt(&[Some(SMALL), Some(LARGE), Some(SMALL), None, None], five),
            Some(SMALL.merge(LARGE))
        );
    }

    /// The scripts answer with the same numbers the engine reads.
    #[test]
    fn the_scripts_answer_with_the_codes_of_this_module() {
        let answers = |lua: &str, codes: &[u64]| {
            for value in codes {
                assert!(
                    lua.contains(&format!("return {{{value}")),
                    "a script never answers {value}:\n{lua}"
                );
            }
        };
        answers(
            include_str!("../../lua/admission.lua"),
            &[
                code::QUARANTINED,
                code::NO_POLICY,
                code::EVICTS,
                code::ABOVE_POLICY,
            ],
        );
        answers(
            include_str!("../../lua/acquire.lua"),
            &[code::HELD, code::GRANTED, code::FENCE_AHEAD],
        );
        assert!(
            include_str!("../../lua/acquire.lua").contains(&format!(
                "math.max({FENCE_TTL_FLOOR_MS}, policy_max_ttl * {FENCE_TTL_IN_TTLS})"
            )),
            "acquire.lua gives fence keys another lifetime than Policy::fence_ttl_ms"
        );
        answers(
            include_str!("../../lua/extend.lua"),
            &[code::HELD, code::GRANTED],
        );
        assert!(
            include_str!("../../lua/release.lua").contains(&format!("return {}", code::ABSENT)),
            "release.lua never answers that no lock exists"
        );
    }
}
