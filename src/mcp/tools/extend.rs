//! `extend_lock`: renews a lock or a set by token for a new TTL.

use std::time::{Instant, SystemTime};

use rmcp::model::JsonObject;

use super::super::arguments::{self, decode};
use super::super::contract::{ExtendLockArgs, ExtendLockResult, rfc3339};
use super::super::handler::LockServer;
use super::super::reply::{Reply, ToolError};
use crate::{Error, millis};

impl LockServer {
    pub(super) async fn extend(&self, arguments: JsonObject) -> Result<Reply, ToolError> {
        let args: ExtendLockArgs = decode(arguments)?;
        let target = arguments::target(args.resource, args.resources)?;
        arguments::token(&args.token)?;
        let shared = self.shared();
        let ttl = shared.limits.ttl("ttl_ms", args.ttl_ms)?;
        let extended = if target.set {
            shared
                .locks
                .extend_all(&target.names, &args.token, ttl)
                .await
        } else {
            shared.locks.extend(target.first(), &args.token, ttl).await
        };
        let label = target.label();
        let (resource, resources) = (target.first().to_string(), target.names);
        let result = match extended {
            Ok(extended) => {
                shared.metrics.votes(&extended.votes);
                let validity = extended
                    .valid_until
                    .saturating_duration_since(Instant::now());
                ExtendLockResult {
                    extended: true,
                    resource,
                    resources,
                    validity_ms: Some(millis(validity)),
                    expires_at: Some(rfc3339(SystemTime::now() + validity)),
                }
            }
            Err(Error::NotHeld { votes, .. }) => {
                shared.metrics.votes(&votes);
                ExtendLockResult {
                    extended: false,
                    resource,
                    resources,
                    validity_ms: None,
                    expires_at: None,
                }
            }
            Err(error) => return Err(self.failure(error)),
        };
        let summary = match result.validity_ms {
            Some(validity_ms) => format!("extended {label}: valid for {validity_ms} ms more"),
            None => format!(
                "not extended: this token no longer holds {label}; stop writing to {} and acquire_lock again",
                if result.resources.len() > 1 {
                    "them"
                } else {
                    "it"
                }
            ),
        };
        Reply::new(summary, &result)
    }
}
