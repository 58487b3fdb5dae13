//! The six tools. Each decodes its arguments, asks the engine, and hands a [`Reply`] (or a
//! [`ToolError`]) to [`finish`]; descriptions are written for the language model that picks
//! and calls the tools.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use rmcp::handler::server::common::{schema_for_empty_input, schema_for_input, schema_for_output};
use rmcp::model::{CallToolResult, JsonObject};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, tool, tool_router};
use schemars::JsonSchema;

use crate::engine::clock::millis;
use crate::engine::resource::parse_permit_handle;
use crate::{Admission, GroupLockState};

use super::arguments::{self, Target, decode};
use super::contract::{
    AcquireLockArgs, AcquireLockResult, ClusterHealthArgs, ClusterHealthResult, ExtendLockArgs,
    ExtendLockResult, GroupHealthView, ListLocksArgs, ListLocksResult, LockStatusArgs,
    LockStatusResult, QuorumReport, ReleaseLockArgs, ReleaseLockResult, rfc3339,
};
use super::handler::LockServer;
use super::reply::{Reply, ToolError, finish};
use super::sessions::{KeptRelease, Refusal};
use crate::AcquireOptions;
use crate::Error;

const ACQUIRE_LOCK: &str = "Take a distributed lock on a shared resource before you change it, so that no other agent or process changes it at the same time. \
The lock is granted only when a majority of independent Redis groups agree, and it frees itself after ttl_ms unless you extend or release it. \
Name what you lock with exactly one of resource (one name) or resources (a list). \
When one piece of work changes several resources (an edit that touches several files, say), pass all of them as resources in this one call: you get every one of them or none, under one token and one fencing_token. Never lock them one call at a time: two agents each holding part of what the other needs wait for each other forever. \
If acquired is true: pass fencing_token with every write to the protected resource (with resources: to each of them; storage that checks it rejects writes from a holder whose lease ran out), finish within validity_ms or call extend_lock, and call release_lock with the token when done, naming the same resource or resources. \
For work longer than one TTL set keepalive: true, and this server renews the lease until you release it or your session ends. \
If acquired is false, someone else holds it (see holder, and held_resource for which one of your resources): that is a normal answer, not an error, and you hold none of them; do other work and retry after retry_after_ms. \
To let at most N agents do something at once (at most N agents call this API at once, say) rather than one, pass permits: N with resource: the resource then names a semaphore of N permits and you take one of them; every caller must pass the same N (another count is refused naming permits). The reply says which permit you hold (permit) and its token, which release_lock and extend_lock take unchanged with the same resource; keepalive works the same. acquired: false then means all N permits are taken (holder is the one that frees first). \
A tool error about quorum means the lock service is degraded: never proceed as if you held the lock; check cluster_health. \
Keepalive leases are capped per session and per server: beyond a cap the call is a tool error naming the limit, and it leaves no lock behind.";

const RELEASE_LOCK: &str = "Release a lock you hold as soon as you are done with the resource, so others can take it. \
Pass the token from acquire_lock and the same resource, or the same resources (a set is released together). released: false means this token did not hold the lock (it expired, was already released, or the token is wrong); the lock was left alone, unless groups_maybe_released is above 0: then it is gone, and this call cannot tell whether it or the expiry removed it. \
Also stops this server's renewal of a keepalive lease. Safe to repeat.";

const EXTEND_LOCK: &str = "Renew a lock you hold for ttl_ms more milliseconds, counted from now, before validity_ms runs out, when your work takes longer than planned. \
Pass the token from acquire_lock and the same resource, or the same resources (a set is renewed together). \
extended: false means the lease is already gone (expired or taken over): stop writing to the protected resource and call acquire_lock again. \
Not needed for keepalive leases.";

const LOCK_STATUS: &str = "Look at one lock without changing it: whether it is held, by whom (owner, purpose), for how much longer, its fencing token, and each Redis group's view. \
Advisory only: the answer may be stale a moment later, so never use it in place of acquire_lock. \
When the resource is a semaphore in use, semaphore shows its permit count and who holds which permit. \
If this server keeps a keepalive lease on the resource, keepalive.state says whether it is still renewing or was lost (then stop writing and acquire again). \
Only a keepalive lease of your own session is shown.";

const LIST_LOCKS: &str = "List the locks currently held, optionally only those whose resource name starts with prefix: resource, owner, purpose and time left. \
Semaphores with a permit held are listed apart under semaphores, one entry each: its permit count and who holds which permit, with owner, purpose and time left. \
Use it to see what other agents are working on. Advisory, like lock_status. \
A result holds at most limit entries; when next_cursor is present, more match: call list_locks again with the same prefix and cursor set to that next_cursor for the next page, until next_cursor is absent.";

const CLUSTER_HEALTH: &str = "Check the lock service itself: whether enough Redis groups answer to grant locks (quorum_available), and each group's reachability and latency. \
Call it when a tool reports a quorum error, before retrying.";

/// A tool's input schema from its argument type. The schema is static, so a failure is a bug
/// caught by the unit tests; serving an open schema beats refusing to start.
fn input_schema<T: JsonSchema + 'static>() -> Arc<JsonObject> {
    schema_for_input::<T>().unwrap_or_else(|error| {
        tracing::error!(%error, "a tool's input schema is invalid; advertising an empty one");
        schema_for_empty_input()
    })
}

#[tool_router(vis = "pub(crate)")]
impl LockServer {
    #[tool(
        name = "acquire_lock",
        description = ACQUIRE_LOCK,
        input_schema = input_schema::<AcquireLockArgs>(),
        output_schema = schema_for_output::<AcquireLockResult>(),
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
        input_schema = input_schema::<ReleaseLockArgs>(),
        output_schema = schema_for_output::<ReleaseLockResult>(),
        annotations(title = "Release a lock", read_only_hint = false, destructive_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn release_lock(&self, arguments: JsonObject) -> CallToolResult {
        finish(self.release(arguments).await)
    }

    #[tool(
        name = "extend_lock",
        description = EXTEND_LOCK,
        input_schema = input_schema::<ExtendLockArgs>(),
        output_schema = schema_for_output::<ExtendLockResult>(),
        annotations(title = "Extend a lock", read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn extend_lock(&self, arguments: JsonObject) -> CallToolResult {
        finish(self.extend(arguments).await)
    }

    #[tool(
        name = "lock_status",
        description = LOCK_STATUS,
        input_schema = input_schema::<LockStatusArgs>(),
        output_schema = schema_for_output::<LockStatusResult>(),
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
        input_schema = input_schema::<ListLocksArgs>(),
        output_schema = schema_for_output::<ListLocksResult>(),
        annotations(title = "List held locks", read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn list_locks(&self, arguments: JsonObject) -> CallToolResult {
        finish(self.list(arguments).await)
    }

    #[tool(
        name = "cluster_health",
        description = CLUSTER_HEALTH,
        input_schema = input_schema::<ClusterHealthArgs>(),
        output_schema = schema_for_output::<ClusterHealthResult>(),
        annotations(title = "Lock service health", read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn cluster_health(&self, arguments: JsonObject) -> CallToolResult {
        finish(self.health(arguments).await)
    }
}

impl LockServer {
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
        let ttl = shared.limits.ttl("ttl_ms", args.ttl_ms)?;
        let wait = shared.limits.wait("wait_ms", args.wait_ms)?;
        let session = match args.keepalive {
            false => None,
            true => Some(
                self.session(&context.extensions)
                    .filter(|session| shared.sessions.is_open(session))
                    .ok_or_else(|| {
                        ToolError::invalid_arguments(
                            "invalid argument `keepalive`: this request has no MCP session (stateless HTTP), so the server cannot tell when you are gone; use keepalive: false and extend_lock instead",
                        )
                    })?,
            ),
        };
        // The keepalive caps are checked before the engine is asked, so a refused call takes
        // no lock (adopting checks again, for calls that raced past this one).
        if let Some(session) = &session
            && let Err(Refusal::Limit { message, .. }) = shared.sessions.keepalive_room(session)
        {
            return Err(ToolError::failed(message));
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
        let permit = permits.and_then(|_| Some(parse_permit_handle(lease.token())?.1));
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
                            ToolError::failed(
                                "the session ended (or the server is shutting down) while the lock was being acquired; it was released again",
                            )
                        }
                        Refusal::Limit { message, .. } => {
                            // Released before answering, so the agent holds nothing it was not told of.
                            if let Err(error) = refused.lease.release().await {
                                tracing::warn!(%error, "releasing a lease refused at a keepalive cap failed; its TTL will free it");
                            }
                            ToolError::failed(message)
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
                let (vote, quarantine_remaining_ms) = match group.admission {
                    Admission::Voting => ("voting", None),
                    Admission::Quarantined { remaining_ms } => ("quarantined", Some(remaining_ms)),
                    Admission::Unadmitted => ("new", None),
                    Admission::NoPolicy => ("no_policy", None),
                    Admission::Evicts { .. } => ("evicts", None),
                    Admission::Unknown => ("unknown", None),
                };
                GroupHealthView {
                    group: group.group,
                    master: group.master,
                    reachable: group.reachable,
                    latency_ms: group.latency_ms,
                    role: group.role,
                    replicas: group.replicas,
                    sentinels_agree: group.sentinels_agree,
                    vote: vote.to_string(),
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
    ToolError::invalid_arguments(format!(
        "invalid argument `{field}`: this token's keepalive lease holds {kept} together; pass exactly those as `resources` to release it. Nothing was released"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_has_object_schemas_and_a_description() {
        for tool in LockServer::tool_router().list_all() {
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
        assert_eq!(LockServer::tool_router().list_all().len(), 6);
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
        let tools = LockServer::tool_router().list_all();
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
        assert!(
            description.contains("at most N agents call this API at once")
                && description.contains("same N"),
            "{description}"
        );
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
        for tool in LockServer::tool_router().list_all() {
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
            assert!(description.contains("resources"), "{}", tool.name);
            let output = tool.output_schema.as_ref().expect("output schema");
            assert!(
                output["properties"]["resources"]["type"] == serde_json::json!("array"),
                "{}: {}",
                tool.name,
                serde_json::Value::Object((**output).clone())
            );
        }
    }
}
