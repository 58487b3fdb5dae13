//! `acquire_lock`: one lock, a set of locks (all or nothing), or a permit of a semaphore;
//! with `keepalive`, this server renews it for the session.

use std::time::Instant;

use rmcp::RoleServer;
use rmcp::model::JsonObject;
use rmcp::service::RequestContext;

use super::super::arguments::{self, Target, decode};
use super::super::contract::{AcquireLockArgs, AcquireLockResult, QuorumReport, rfc3339};
use super::super::handler::LockServer;
use super::super::reply::{Reply, ToolError};
use super::super::sessions::{Refusal, SessionKey};
use super::describe_holder;
use crate::{AcquireOptions, Error, Lease, PermitHandle, millis};

impl LockServer {
    pub(super) async fn acquire(
        &self,
        arguments: JsonObject,
        context: &RequestContext<RoleServer>,
    ) -> Result<Reply, ToolError> {
        let args: AcquireLockArgs = decode(arguments)?;
        let shared = self.shared();
        let target = arguments::target(args.resource, args.resources)?;
        let permits = arguments::permits(args.permits, &target)?;
        let ttl = match args.ttl_ms {
            Some(ttl_ms) => shared.limits.ttl("ttl_ms", ttl_ms)?,
            None => shared.limits.default_ttl(),
        };
        let wait = shared.limits.wait("wait_ms", args.wait_ms)?;
        let session = self.keepalive_session(args.keepalive, context)?;
        let options = AcquireOptions {
            ttl,
            wait,
            owner: args.owner,
            purpose: args.purpose,
        };
        let lease = match self.attempt(&target, permits, options).await? {
            Ok(lease) => lease,
            Err(Error::Held {
                resource,
                holder,
                votes,
            }) => {
                shared.metrics.denied();
                shared.metrics.votes(&votes);
                return held_reply(
                    target,
                    permits,
                    resource,
                    holder,
                    shared.locks.topology().retry_delay_ms,
                );
            }
            Err(error) => return Err(self.failure(error)),
        };
        shared.metrics.acquired();
        shared.metrics.votes(lease.votes());
        let quorum = QuorumReport::from_votes(lease.votes(), shared.locks.quorum());
        let validity_ms = millis(lease.validity());
        // A permit's token ends in its slot.
        let permit = permits.and_then(|_| Some(PermitHandle::parse(lease.token())?.slot));
        let held = Held {
            permit,
            permits,
            validity_ms,
            kept: session.is_some(),
        };
        let summary = acquired_summary(&target, &lease, &quorum, &held);
        let result = AcquireLockResult {
            acquired: true,
            resource: lease.resource().to_string(),
            resources: lease.resources().to_vec(),
            token: Some(lease.token().to_string()),
            permit,
            permits,
            fencing_token: Some(lease.fencing_token()),
            validity_ms: Some(validity_ms),
            expires_at: Some(rfc3339(lease.expires_at())),
            keepalive: Some(session.is_some()),
            quorum: Some(quorum),
            held_resource: None,
            holder: None,
            retry_after_ms: None,
        };
        self.hand_over(lease, session, context).await?;
        Reply::new(summary, &result)
    }

    /// The session that keeps the lease alive when `keepalive` asks for it, with room under
    /// the keepalive caps. The caps are checked before the engine is asked, so a refused call
    /// takes no lock (adopting checks again, for calls that raced past this one).
    fn keepalive_session(
        &self,
        keepalive: bool,
        context: &RequestContext<RoleServer>,
    ) -> Result<Option<SessionKey>, ToolError> {
        if !keepalive {
            return Ok(None);
        }
        let shared = self.shared();
        let session = self
            .session(&context.extensions)
            .filter(|session| shared.sessions.is_open(session))
            .ok_or_else(|| {
                ToolError::invalid_input(
                    "keepalive",
                    "invalid argument `keepalive`: this request has no MCP session (stateless HTTP), so the server cannot tell when you are gone; use keepalive: false and extend_lock instead",
                )
            })?;
        if let Err(Refusal::Limit { limit, message }) = shared.sessions.keepalive_room(&session) {
            return Err(self.over_limit(limit, message));
        }
        Ok(Some(session))
    }

    /// Asks the engine, in a task of its own: if the client cancels the call, the task still
    /// finishes, and a lease nobody will receive is released when the task drops it.
    async fn attempt(
        &self,
        target: &Target,
        permits: Option<u32>,
        options: AcquireOptions,
    ) -> Result<Result<Lease, Error>, ToolError> {
        let shared = self.shared();
        let (locks, request) = (shared.locks.clone(), target.clone());
        let started = Instant::now();
        let attempt = tokio::spawn(async move {
            if let Some(permits) = permits {
                locks
                    .acquire_permit_with(request.first(), permits, &options)
                    .await
            } else if request.set {
                locks.acquire_all_with(&request.names, &options).await
            } else {
                locks.acquire_with(request.first(), &options).await
            }
        })
        .await
        .map_err(|error| ToolError::internal(format!("the acquire task failed: {error}")))?;
        shared.metrics.acquire_decided(started.elapsed());
        Ok(attempt)
    }

    /// Hands the lease to the session that keeps it alive, or detaches it: the lock then
    /// lives until its TTL or until release_lock by token.
    async fn hand_over(
        &self,
        lease: Lease,
        session: Option<SessionKey>,
        context: &RequestContext<RoleServer>,
    ) -> Result<(), ToolError> {
        let Some(session) = session else {
            let _ = lease.detach();
            return Ok(());
        };
        let kept = lease.keepalive();
        let Err(refused) = self
            .shared()
            .sessions
            .adopt(session, self.notice_peer(context), kept)
        else {
            return Ok(());
        };
        Err(match refused.refusal {
            Refusal::Closed => {
                // Dropping the kept lease releases it.
                drop(refused.lease);
                ToolError::session_closed(
                    "the session ended (or the server is shutting down) while the lock was being acquired; it was released again",
                )
            }
            Refusal::Limit { limit, message } => {
                // Released before answering, so the agent holds nothing it was not told of.
                if let Err(error) = refused.lease.release().await {
                    tracing::warn!(%error, "releasing a lease refused at a keepalive cap failed; its TTL will free it");
                }
                self.over_limit(limit, message)
            }
        })
    }
}

/// What an acquired lease is, beside the lease itself.
struct Held {
    /// The permit's slot, for a permit.
    permit: Option<u32>,
    /// The semaphore's permit count, for a permit.
    permits: Option<u32>,
    /// The lease's validity when it was acquired.
    validity_ms: u64,
    /// Whether this server keeps it alive.
    kept: bool,
}

/// What was acquired, for how long, by how many groups, and what to do with it.
fn acquired_summary(target: &Target, lease: &Lease, quorum: &QuorumReport, held: &Held) -> String {
    format!(
        "acquired {}: fencing token {}{}, valid for {} ms, {} of {} groups granted ({} needed){}",
        match (held.permit, held.permits) {
            (Some(slot), Some(count)) => format!(
                "permit {slot} of semaphore {} ({count} permits; release it with its token)",
                target.label()
            ),
            _ if target.names.len() > 1 => format!("{} together", target.label()),
            _ => target.label(),
        },
        lease.fencing_token(),
        if target.names.len() > 1 {
            " for writes to each of them"
        } else {
            ""
        },
        held.validity_ms,
        quorum.granted,
        quorum.groups.len(),
        quorum.needed,
        if held.kept {
            "; the server renews it until release_lock or the end of this session"
        } else {
            "; pass fencing_token with every write and release_lock when done"
        }
    )
}

/// "Held by someone else": a normal result telling the agent whom to wait for, how long, and,
/// for a set, which of its resources is held (`held`, as the engine named it).
pub(super) fn held_reply(
    target: Target,
    permits: Option<u32>,
    held: String,
    holder: Option<crate::Holder>,
    retry_delay_ms: u64,
) -> Result<Reply, ToolError> {
    let remaining_ms = holder.as_ref().map_or(0, |h| h.remaining_ms);
    let retry_after_ms = remaining_ms.max(retry_delay_ms).max(1);
    let who = holder.as_ref().map_or_else(
        || "another holder".to_string(),
        |h| describe_holder(h.owner.as_deref(), h.purpose.as_deref()),
    );
    // The engine names the member it found held; when the groups did not say, it names the
    // whole set, and so does the summary.
    let held_resource = target.names.contains(&held).then_some(held);
    let what = match (&held_resource, target.names.len()) {
        (Some(held), 1) if let Some(count) = permits => format!(
            "every one of the {count} permits of semaphore `{held}` is taken; the first to free"
        ),
        (Some(held), 1) => format!("`{held}` is"),
        (Some(held), count) => format!("`{held}`, one of the {count} resources you asked for, is"),
        (None, _) => format!("one of {} is", target.label()),
    };
    let none_taken = if target.names.len() > 1 {
        "; you hold none of them"
    } else {
        ""
    };
    let summary = format!(
        "not acquired: {what} held by {who} for another {remaining_ms} ms{none_taken}; do other work and retry after {retry_after_ms} ms"
    );
    let result = AcquireLockResult {
        acquired: false,
        resource: target.first().to_string(),
        resources: target.names,
        token: None,
        permit: None,
        permits,
        fencing_token: None,
        validity_ms: None,
        expires_at: None,
        keepalive: None,
        quorum: None,
        held_resource,
        holder: Some(holder.unwrap_or_default()),
        retry_after_ms: Some(retry_after_ms),
    };
    Reply::new(summary, &result)
}
