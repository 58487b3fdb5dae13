//! `release_lock`: releases a lock or a set by token, through this server's keepalive lease
//! when it keeps one for that token.

use rmcp::model::JsonObject;

use super::super::arguments::{self, Target, decode};
use super::super::contract::{ReleaseLockArgs, ReleaseLockResult};
use super::super::handler::LockServer;
use super::super::reply::{Reply, ToolError};
use super::super::sessions::KeptRelease;
use crate::Error;

impl LockServer {
    pub(super) async fn release(&self, arguments: JsonObject) -> Result<Reply, ToolError> {
        let args: ReleaseLockArgs = decode(arguments)?;
        let target = arguments::target(args.resource, args.resources)?;
        arguments::token(&args.token)?;
        let shared = self.shared();
        let released = match shared.sessions.release(&target.names, &args.token).await {
            KeptRelease::Released(released) => released,
            KeptRelease::OtherSet(kept) => return Err(other_set(&target, &kept)),
            KeptRelease::NotKept if target.set => {
                shared.locks.release_all(&target.names, &args.token).await
            }
            KeptRelease::NotKept => shared.locks.release(target.first(), &args.token).await,
        };
        let (released, groups_released, groups_maybe_released) = match released {
            Ok(released) => {
                shared.metrics.votes(&released.votes);
                let maybe_released = released.groups_maybe_released();
                (released.released, released.groups_released, maybe_released)
            }
            Err(Error::NotHeld { votes, .. }) => {
                shared.metrics.votes(&votes);
                (false, 0, 0)
            }
            Err(error) => return Err(self.failure(error)),
        };
        let summary = if released {
            format!(
                "released {} ({groups_released} groups); {} free for others now",
                target.label(),
                if target.names.len() > 1 {
                    "they are"
                } else {
                    "it is"
                }
            )
        } else if groups_maybe_released > 0 {
            format!(
                "not confirmed released: {} is gone from {groups_maybe_released} groups, but this call's try there went unanswered, so it or the lease's expiry removed it; do not assume the lease held until now",
                target.label()
            )
        } else {
            format!(
                "nothing released: this token does not hold {} (expired, already released, or a wrong token); the lock was left alone",
                target.label()
            )
        };
        Reply::new(
            summary,
            &ReleaseLockResult {
                released,
                resource: target.first().to_string(),
                resources: target.names,
                groups_released,
                groups_maybe_released,
            },
        )
    }
}

/// A release naming part of a set (or more than it) that a keepalive lease of this token holds:
/// releasing only what was named would leave the rest renewing, so nothing is released.
fn other_set(target: &Target, kept: &[String]) -> ToolError {
    let field = if target.set { "resources" } else { "resource" };
    let kept = kept
        .iter()
        .map(|name| format!("`{name}`"))
        .collect::<Vec<_>>()
        .join(", ");
    ToolError::invalid_input(
        field,
        format!(
            "invalid argument `{field}`: this token's keepalive lease holds {kept} together; pass exactly those as `resources` to release it. Nothing was released"
        ),
    )
}
