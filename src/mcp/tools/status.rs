//! `lock_status`: one lock's holder, fencing token and group states, the semaphore of that
//! name, and this server's keepalive lease of it.

use rmcp::RoleServer;
use rmcp::model::JsonObject;
use rmcp::service::RequestContext;

use super::super::arguments::{self, decode};
use super::super::contract::{KeepaliveView, LockStatusArgs, LockStatusResult};
use super::super::handler::LockServer;
use super::super::reply::{Reply, ToolError};

use super::describe_holder;
use crate::{GroupLockState, LockStatus, SemaphoreStatus};

impl LockServer {
    pub(super) async fn status(
        &self,
        arguments: JsonObject,
        context: &RequestContext<RoleServer>,
    ) -> Result<Reply, ToolError> {
        let args: LockStatusArgs = decode(arguments)?;
        arguments::resource(&args.resource)?;
        let shared = self.shared();
        let (status, semaphore) = tokio::join!(
            shared.locks.status(&args.resource),
            shared.locks.semaphore_status(&args.resource)
        );
        let status = status.map_err(|error| self.failure(error))?;
        // The name is a semaphore in use when a majority keeps a permit count for it.
        let semaphore = Some(semaphore.map_err(|error| self.failure(error))?)
            .filter(|semaphore| semaphore.permits.is_some());
        for group in status
            .groups
            .iter()
            .filter(|g| matches!(g.state, GroupLockState::Error | GroupLockState::Timeout))
        {
            shared.metrics.group_error(&group.group);
        }
        let session = self.session(&context.extensions);
        let keepalive = shared.sessions.view(session.as_ref(), &args.resource);
        let summary = summary(&status, semaphore.as_ref(), keepalive.as_ref());
        let result = LockStatusResult {
            resource: status.resource,
            held: status.held,
            holder: status.holder,
            fencing_token: status.fencing_token,
            groups: status.groups,
            holders: status.holders,
            split: status.split,
            keepalive,
            semaphore,
        };
        Reply::new(summary, &result)
    }
}

/// One line on the lock, the semaphore of that name, and this server's keepalive lease.
fn summary(
    status: &LockStatus,
    semaphore: Option<&SemaphoreStatus>,
    keepalive: Option<&KeepaliveView>,
) -> String {
    let mut summary = match (&status.holder, status.held) {
        _ if status.split => format!(
            "`{}` is SPLIT between {} tokens ({}): a broken assumption or a lease that is ending; see holders",
            status.resource,
            status.holders.len(),
            status
                .holders
                .iter()
                .map(|h| format!(
                    "{} on {}",
                    describe_holder(h.owner.as_deref(), h.purpose.as_deref()),
                    h.groups.join(", ")
                ))
                .collect::<Vec<_>>()
                .join("; ")
        ),
        (Some(holder), true) => format!(
            "`{}` is held by {} for another {} ms (fencing token {})",
            status.resource,
            describe_holder(holder.owner.as_deref(), holder.purpose.as_deref()),
            holder.remaining_ms,
            status.fencing_token.unwrap_or_default()
        ),
        _ => format!("`{}` is free", status.resource),
    };
    if let Some(semaphore) = semaphore {
        summary.push_str(&format!(
            "; semaphore of {} permits, {} held{}",
            semaphore.permits.unwrap_or_default(),
            semaphore.holders.len(),
            if semaphore.holders.is_empty() {
                String::new()
            } else {
                format!(
                    " ({})",
                    semaphore
                        .holders
                        .iter()
                        .map(|h| format!(
                            "permit {} by {}",
                            h.permit,
                            describe_holder(h.holder.owner.as_deref(), h.holder.purpose.as_deref())
                        ))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        ));
    }
    if let Some(keepalive) = keepalive {
        summary.push_str(&format!(
            "; this server's keepalive lease: {}",
            keepalive.state.as_str()
        ));
        if let Some(reason) = &keepalive.reason {
            summary.push_str(&format!(" ({reason})"));
        }
    }
    summary
}
