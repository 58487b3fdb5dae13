//! Admission to the vote: a master that lost its data adopts the lock policy of a majority
//! of groups, operators admit brand-new masters or raise the policy, and put a master or a
//! Cluster slot back in quarantine when it may have lost keys the engine cannot see.
//!
//! The rule itself runs on the masters (`lua/admission.lua`); this side only fills in a
//! policy that a master lost, from what a majority of groups hold (`Policy::adopt`).
//!
//! - `options`: what an operator asks to admit, and the window and mode each group gets;
//! - `admit`: admitting masters, and ending acknowledged mode;
//! - `outcome`: what admitting or quarantining did on each group;
//! - `quarantine`: putting a master or a slot back in quarantine;
//! - `policies`: reading the groups' policies, and adopting one for a master that lost it.

mod admit;
mod options;
mod outcome;
mod policies;
mod quarantine;

use fred::types::Value;

use crate::engine::protocol::Policy;
use crate::group::reply::{Reply, integer};

pub use options::AdmitOptions;
pub use outcome::{GroupAdmission, GroupQuarantine, QuarantineScope, ReplicaAcks};

/// A policy as `lua/policy.lua` answers it: `{max_ttl_ms, write_window_ms}`, or `{}`.
pub(crate) fn parse_policy(values: &[Value]) -> Option<Policy> {
    Some(Policy {
        max_ttl_ms: integer(values.first())?,
        write_window_ms: integer(values.get(1)).unwrap_or(0),
        acked_replicas: integer(values.get(2))
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0),
    })
}

/// A reply that is not an answer, in words.
pub(crate) fn describe<T>(reply: &Reply<T>) -> String {
    match reply {
        Reply::Answer(_) => "answered".to_string(),
        Reply::Timeout => "timeout".to_string(),
        Reply::Failed(message) => message.clone(),
        Reply::NotSent(reason) => format!("not sent: {reason}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_reply_is_read_and_an_empty_one_is_none() {
        assert_eq!(
            parse_policy(&[Value::Integer(60_000), Value::Integer(3_000)]),
            Some(Policy {
                max_ttl_ms: 60_000,
                write_window_ms: 3_000,
                acked_replicas: 0,
            })
        );
        assert_eq!(parse_policy(&[]), None);
    }
}
