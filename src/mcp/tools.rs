//! The six tools. Each decodes its arguments, asks the engine, and hands a [`Reply`] (or a
//! [`ToolError`]) to [`finish`]; descriptions are written for the language model that picks
//! and calls the tools.

use std::time::{Instant, SystemTime};

use rmcp::model::{CallToolResult, JsonObject};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, tool, tool_router};

use crate::{Admission, GroupLockState, PermitHandle, millis};

use super::arguments::{self, Target, decode};
use super::contract::{
    AcquireLockArgs, AcquireLockResult, ClusterHealthArgs, ClusterHealthResult, ExtendLockArgs,
    ExtendLockResult, GroupHealthView, HealthVote, ListLocksArgs, ListLocksResult, LockStatusArgs,
    LockStatusResult, QuorumReport, ReleaseLockArgs, ReleaseLockResult, rfc3339,
};
use super::handler::LockServer;
use super::reply::{Reply, ToolError, finish};
use super::schema;
use super::sessions::{KeptRelease, Refusal};
use crate::AcquireOptions;
use crate::Error;

const ACQUIRE_LOCK: &str = "Lock a shared resource before changing it; resources: several, all or nothing (one call each can deadlock); permits: N lets N holders share it. \
If acquired: write with fencing_token, release_lock with token within validity_ms (or extend_lock; keepalive: true has the server renew it). \
Else retry after retry_after_ms.";

const RELEASE_LOCK: &str = "Release your lock when done: token, same resource(s). \
released false: the token did not hold it (but groups_maybe_released > 0: it is gone). Safe to repeat.";

const EXTEND_LOCK: &str = "Renew your lock for ttl_ms from now, before validity_ms ends: token, same resource(s). \
extended false: lost; stop writing, reacquire.";

const LOCK_STATUS: &str = "Read one lock: holder, fencing_token, group states, semaphore permits, your keepalive lease (lost: stop writing, reacquire). \
Advisory: never instead of acquire_lock.";

const LIST_LOCKS: &str = "Held locks and semaphores in use, by name prefix: who works on what. Advisory. \
Pass next_cursor, if set, as cursor for more.";

const CLUSTER_HEALTH: &str = "Whether enough Redis groups vote to grant locks, and each group's state. Call after no_quorum.";

#[tool_router(vis = "pub(crate)")]
impl LockServer {
    #[tool(
        name = "acquire_lock",
        description = ACQUIRE_LOCK,
        input_schema = schema::input::<AcquireLockArgs>(),
        output_schema = schema::output::<AcquireLockResult>(),
        annotations(title = "Acquire a lock", read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false)
    )]
    async fn acquire_lock(
        &self,
        arguments: JsonObject,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        finish(self.acquire(arguments, &context).await)
    }

    #[tool(
        name = "release_lock",
        description = RELEASE_LOCK,
        input_schema = schema::input::<ReleaseLockArgs>(),
        output_schema = schema::output::<ReleaseLockResult>(),
        annotations(title = "Release a lock", read_only_hint = false, destructive_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn release_lock(&self, arguments: JsonObject) -> CallToolResult {
        finish(self.release(arguments).await)
    }

    #[tool(
        name = "extend_lock",
        description = EXTEND_LOCK,
        input_schema = schema::input::<ExtendLockArgs>(),
        output_schema = schema::output::<ExtendLockResult>(),
        annotations(title = "Extend a lock", read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn extend_lock(&self, arguments: JsonObject) -> CallToolResult {
        finish(self.extend(arguments).await)
    }

    #[tool(
        name = "lock_status",
        description = LOCK_STATUS,
        input_schema = schema::input::<LockStatusArgs>(),
        output_schema = schema::output::<LockStatusResult>(),
        annotations(title = "Show a lock", read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn lock_status(
        &self,
        arguments: JsonObject,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        finish(self.status(arguments, &context).await)
    }

    #[tool(
        name = "list_locks",
        description = LIST_LOCKS,
        input_schema = schema::input::<ListLocksArgs>(),
        output_schema = schema::output::<ListLocksResult>(),
        annotations(title = "List held locks", read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn list_locks(&self, arguments: JsonObject) -> CallToolResult {
        finish(self.list(arguments).await)
    }

    #[tool(
        name = "cluster_health",
        description = CLUSTER_HEALTH,
        input_schema = schema::input::<ClusterHealthArgs>(),
        output_schema = schema::output::<ClusterHealthResult>(),
        annotations(title = "Lock service health", read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn cluster_health(&self, arguments: JsonObject) -> CallToolResult {
        finish(self.health(arguments).await)
    }
}

impl LockServer {
    /// A refusal at the keepalive cap `limit`, with the cap's value.
    fn over_limit(&self, limit: &'static str, message: String) -> ToolError {
        let capacity = &self.shared().capacity;
        let max = match limit {
            "max_keepalive_per_session" => capacity.max_keepalive_per_session,
            _ => capacity.max_keepalive,
        };
        ToolError::over_limit(limit, max, message)
    }

    /// An engine failure as a tool error, counted in the metrics.
    fn failure(&self, error: Error) -> ToolError {
        let metrics = &self.shared().metrics;
        metrics.votes(error.votes());
        if error.is_unavailable() {
            metrics.quorum_failed();
        }
        ToolError::from(error)
    }

    async fn acquire(
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
        let session = match args.keepalive {
            false => None,
            true => Some(
                self.session(&context.extensions)
                    .filter(|session| shared.sessions.is_open(session))
                    .ok_or_else(|| {
                        ToolError::invalid_input(
                            "keepalive",
                            "invalid argument `keepalive`: this request has no MCP session (stateless HTTP), so the server cannot tell when you are gone; use keepalive: false and extend_lock instead",
                        )
                    })?,
            ),
        };
        // The keepalive caps are checked before the engine is asked, so a refused call takes
        // no lock (adopting checks again, for calls that raced past this one).
        if let Some(session) = &session
            && let Err(Refusal::Limit { limit, message }) = shared.sessions.keepalive_room(session)
        {
            return Err(self.over_limit(limit, message));
        }
        let options = AcquireOptions {
            ttl,
            wait,
            owner: args.owner,
            purpose: args.purpose,
        };
        // The acquire runs in its own task: if the client cancels the call, the task still
        // finishes, and a lease nobody will receive is released when the task drops it.
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
        let lease = match attempt {
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
        let summary = format!(
            "acquired {}: fencing token {}{}, valid for {validity_ms} ms, {} of {} groups granted ({} needed){}",
            match (permit, permits) {
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
            quorum.granted,
            quorum.groups.len(),
            quorum.needed,
            if session.is_some() {
                "; the server renews it until release_lock or the end of this session"
            } else {
                "; pass fencing_token with every write and release_lock when done"
            }
        );
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
        match session {
            Some(session) => {
                let kept = lease.keepalive();
                if let Err(refused) = shared.sessions.adopt(session, context.peer.clone(), kept) {
                    return Err(match refused.refusal {
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
                    });
                }
            }
            None => {
                // The lock now lives until its TTL or until release_lock by token.
                let _ = lease.detach();
            }
        }
        Reply::new(summary, &result)
    }

    async fn release(&self, arguments: JsonObject) -> Result<Reply, ToolError> {
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

    async fn extend(&self, arguments: JsonObject) -> Result<Reply, ToolError> {
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

    async fn status(
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
        if let Some(semaphore) = &semaphore {
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
                                describe_holder(
                                    h.holder.owner.as_deref(),
                                    h.holder.purpose.as_deref()
                                )
                            ))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                }
            ));
        }
        if let Some(keepalive) = &keepalive {
            summary.push_str(&format!(
                "; this server's keepalive lease: {}",
                keepalive.state.as_str()
            ));
            if let Some(reason) = &keepalive.reason {
                summary.push_str(&format!(" ({reason})"));
            }
        }
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

    async fn list(&self, arguments: JsonObject) -> Result<Reply, ToolError> {
        let args: ListLocksArgs = decode(arguments)?;
        let prefix = args.prefix.unwrap_or_default();
        arguments::prefix(&prefix)?;
        let limit = arguments::list_limit(args.limit)?;
        let cursor = arguments::cursor(args.cursor.as_deref())?;
        let list = self
            .shared()
            .locks
            .list_page(&prefix, limit, cursor)
            .await
            .map_err(|error| self.failure(error))?;
        let mut summary = format!(
            "{} lock{} held",
            list.locks.len(),
            if list.locks.len() == 1 { "" } else { "s" },
        );
        if !list.semaphores.is_empty() {
            let each: Vec<String> = list
                .semaphores
                .iter()
                .map(|s| {
                    format!(
                        "{}: {} of {} permits held",
                        s.name,
                        s.holders.len(),
                        s.permits.unwrap_or_default()
                    )
                })
                .collect();
            summary.push_str(&format!(
                ", {} semaphore{} in use ({})",
                list.semaphores.len(),
                if list.semaphores.len() == 1 { "" } else { "s" },
                each.join("; ")
            ));
        }
        if !prefix.is_empty() {
            summary.push_str(&format!(" under `{prefix}`"));
        }
        if list.truncated {
            summary.push_str(" (more exist: pass next_cursor as cursor for the next page)");
        }
        let result = ListLocksResult {
            locks: list.locks,
            semaphores: list.semaphores,
            truncated: list.truncated,
            next_cursor: list.next_cursor,
        };
        Reply::new(summary, &result)
    }

    async fn health(&self, arguments: JsonObject) -> Result<Reply, ToolError> {
        let _: ClusterHealthArgs = decode(arguments)?;
        let shared = self.shared();
        let health = shared.locks.health().await;
        let groups: Vec<GroupHealthView> = health
            .groups
            .into_iter()
            .map(|group| {
                if !group.reachable {
                    shared.metrics.group_error(&group.group);
                }
                shared
                    .metrics
                    .group_unsafe(&group.group, !group.unsafe_settings.is_empty());
                let quarantine_remaining_ms = match group.admission {
                    Admission::Quarantined { remaining_ms } => Some(remaining_ms),
                    _ => None,
                };
                let vote = HealthVote::from(&group.admission);
                GroupHealthView {
                    group: group.group,
                    master: group.master,
                    reachable: group.reachable,
                    latency_ms: group.latency_ms,
                    role: group.role,
                    replicas: group.replicas,
                    sentinels_agree: group.sentinels_agree,
                    vote,
                    quarantine_remaining_ms,
                    error: group.error,
                    unsafe_settings: group.unsafe_settings,
                }
            })
            .collect();
        let reachable = groups.iter().filter(|g| g.reachable).count();
        let unreachable: Vec<&str> = groups
            .iter()
            .filter(|g| !g.reachable)
            .map(|g| g.group.as_str())
            .collect();
        let summary = if health.quorum_available {
            format!(
                "quorum available: {} of {} groups vote ({} needed){}",
                health.voting,
                groups.len(),
                health.quorum,
                if unreachable.is_empty() {
                    String::new()
                } else {
                    format!("; unreachable: {}", unreachable.join(", "))
                }
            )
        } else {
            format!(
                "NO quorum: only {} of {} groups vote ({} needed); unreachable: {}. Locks cannot be granted until they are back",
                health.voting,
                groups.len(),
                health.quorum,
                unreachable.join(", ")
            )
        };
        Reply::new(
            summary,
            &ClusterHealthResult {
                quorum_available: health.quorum_available,
                needed: health.quorum,
                reachable,
                voting: health.voting,
                groups,
            },
        )
    }
}

fn describe_holder(owner: Option<&str>, purpose: Option<&str>) -> String {
    let mut text = owner.unwrap_or("an unnamed owner").to_string();
    if let Some(purpose) = purpose {
        text.push_str(&format!(" ({purpose})"));
    }
    text
}

/// "Held by someone else": a normal result telling the agent whom to wait for, how long, and,
/// for a set, which of its resources is held (`held`, as the engine named it).
fn held_reply(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::Limits;

    /// The tools as a server with the default limits lists them.
    fn listed() -> Vec<rmcp::model::Tool> {
        let mut router = LockServer::tool_router();
        schema::bound(&mut router, &Limits::default());
        router.list_all()
    }

    #[test]
    fn every_tool_has_object_schemas_and_a_description() {
        for tool in listed() {
            assert_eq!(
                tool.input_schema.get("type"),
                Some(&serde_json::json!("object")),
                "{}",
                tool.name
            );
            let output = tool
                .output_schema
                .as_ref()
                .map(|schema| schema.get("type").cloned());
            assert_eq!(
                output,
                Some(Some(serde_json::json!("object"))),
                "{}",
                tool.name
            );
            assert!(
                tool.description.as_ref().is_some_and(|d| d.len() > 80),
                "{}",
                tool.name
            );
            assert!(tool.annotations.is_some(), "{}", tool.name);
        }
        assert_eq!(listed().len(), 6);
    }

    fn structured(reply: Result<Reply, ToolError>) -> (String, serde_json::Value) {
        let result = finish(reply);
        let summary = result
            .content
            .first()
            .and_then(|block| block.as_text())
            .map(|text| text.text.clone())
            .unwrap_or_default();
        (summary, result.structured_content.unwrap_or_default())
    }

    #[test]
    fn a_denied_set_names_the_held_member_and_says_none_was_taken() {
        let target = arguments::target(None, Some(vec!["c".into(), "b".into(), "a".into()]))
            .expect("target");
        let holder = crate::Holder {
            owner: Some("agent-2".into()),
            purpose: None,
            remaining_ms: 900,
        };
        let (summary, result) = structured(held_reply(
            target.clone(),
            None,
            "b".into(),
            Some(holder),
            50,
        ));
        assert_eq!(result["acquired"], serde_json::json!(false));
        assert_eq!(result["resource"], serde_json::json!("a"));
        assert_eq!(result["resources"], serde_json::json!(["a", "b", "c"]));
        assert_eq!(result["held_resource"], serde_json::json!("b"));
        assert_eq!(result["retry_after_ms"], serde_json::json!(900));
        assert!(
            summary.contains("`b`, one of the 3") && summary.contains("none of them"),
            "{summary}"
        );
        // When the groups did not say which member is held, the whole set is named.
        let (summary, result) = structured(held_reply(target, None, "a, b, c".into(), None, 50));
        assert!(result.get("held_resource").is_none(), "{result}");
        assert!(summary.contains("one of `a`, `b`, `c`"), "{summary}");
    }

    #[test]
    fn acquire_lock_takes_permits_and_lock_status_shows_a_semaphore() {
        let tools = listed();
        let tool = |name: &str| {
            tools
                .iter()
                .find(|tool| tool.name == name)
                .cloned()
                .expect("tool")
        };
        let acquire = tool("acquire_lock");
        let permits = &acquire.input_schema["properties"]["permits"];
        assert_eq!(permits["minimum"], serde_json::json!(1), "{permits}");
        assert_eq!(permits["maximum"], serde_json::json!(128), "{permits}");
        let description = acquire.description.as_deref().unwrap_or_default();
        assert!(description.contains("permits: N"), "{description}");
        let output = acquire.output_schema.as_ref().expect("output schema");
        for field in ["permit", "permits", "token"] {
            assert!(
                output["properties"].get(field).is_some(),
                "acquire_lock output lacks {field}"
            );
        }
        let status = tool("lock_status");
        let output = serde_json::Value::Object((*status.output_schema.expect("schema")).clone());
        let text = output.to_string();
        assert!(output["properties"].get("semaphore").is_some(), "{text}");
        for field in [
            "\"permits\"",
            "\"holders\"",
            "\"permit\"",
            "\"remaining_ms\"",
        ] {
            assert!(text.contains(field), "lock_status schema lacks {field}");
        }
    }

    #[test]
    fn a_denied_permit_says_every_permit_is_taken() {
        let target = arguments::target(Some("api".into()), None).expect("target");
        let holder = crate::Holder {
            owner: Some("agent-1".into()),
            purpose: None,
            remaining_ms: 700,
        };
        let (summary, result) =
            structured(held_reply(target, Some(2), "api".into(), Some(holder), 50));
        assert_eq!(result["acquired"], serde_json::json!(false));
        assert_eq!(result["permits"], serde_json::json!(2));
        assert_eq!(result["held_resource"], serde_json::json!("api"));
        assert!(
            summary.contains("2 permits of semaphore `api` is taken")
                && summary.contains("agent-1"),
            "{summary}"
        );
    }

    #[test]
    fn the_lock_tools_take_resource_or_resources_and_describe_both() {
        for tool in listed() {
            if !["acquire_lock", "release_lock", "extend_lock"].contains(&tool.name.as_ref()) {
                continue;
            }
            let properties = &tool.input_schema["properties"];
            assert_eq!(
                properties["resources"]["maxItems"],
                serde_json::json!(64),
                "{}",
                tool.name
            );
            assert_eq!(
                properties["resources"]["minItems"],
                serde_json::json!(1),
                "{}",
                tool.name
            );
            let required = tool
                .input_schema
                .get("required")
                .cloned()
                .unwrap_or_default();
            assert!(
                !required.to_string().contains("resource"),
                "{}: {required}",
                tool.name
            );
            let description = tool.description.as_deref().unwrap_or_default();
            assert!(
                description.contains("resources") || description.contains("resource(s)"),
                "{}: {description}",
                tool.name
            );
            let output = tool.output_schema.as_ref().expect("output schema");
            assert!(
                output["properties"]["resources"]["items"] == serde_json::json!({"type": "string"}),
                "{}: {}",
                tool.name,
                serde_json::Value::Object((**output).clone())
            );
        }
    }
}
