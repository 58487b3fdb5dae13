//! Admission to the vote: a master that lost its data adopts the lock policy of a majority
//! of groups, operators admit brand-new masters or raise the policy, and put a master or a
//! Cluster slot back in quarantine when it may have lost keys the engine cannot see.
//!
//! The rule itself runs on the masters (`lua/admission.lua`); this side only fills in a
//! policy that a master lost, from what a majority of groups hold (`Policy::adopt`).

use std::sync::{Arc, PoisonError};
use std::time::Duration;

use fred::types::Value;

use crate::engine::clock::millis;
use crate::engine::error::{AdmitRefusal, Error};
use crate::engine::health::{GroupSettings, read_write_settings};
use crate::engine::locks::{Engine, Locks};
use crate::engine::protocol::Policy;
use crate::engine::resource::{admission_key, policy_key};
use crate::group::cluster::Every;
use crate::group::diagnose::ask_sentinel_replicas;
use crate::group::reply::{Reply, integer};
use crate::group::scripts::{self, GroupScript};
use crate::group::slots::{HashSlot, SLOTS};

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

/// What to admit, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmitOptions {
    /// Group names; empty: every group.
    pub groups: Vec<String>,
    /// The longest TTL the masters grant (a larger one already in force stays).
    pub max_ttl_ms: u64,
    /// The write window of an old master cut off from its replicas or its cluster. `None`:
    /// computed for each group from what its masters run (`min-replicas-to-write`,
    /// `min-replicas-max-lag`, `cluster-node-timeout`; the largest any Cluster primary
    /// needs).
    /// A window below what a group's masters need is refused unless `allow_short_window`.
    pub write_window_ms: Option<u64>,
    /// How long the masters sit out before they vote: zero for a brand-new deployment; the
    /// policy's quarantine for masters that may have missed grants.
    pub delay: Duration,
    /// Admit at once even a master that holds lock or fence keys.
    pub force: bool,
    /// Accept a `write_window_ms` below what a group's masters need: an old master cut off
    /// from its replicas may grant after the promoted one's quarantine ended.
    pub allow_short_window: bool,
    /// Admit a master with replicas and `min-replicas-to-write 0` (or
    /// `min-replicas-max-lag 0`): cut off from its replicas it grants with no end.
    pub allow_unreplicated_writes: bool,
    /// Admit a group whose settings cannot be read (on any one of its masters), under the
    /// `write_window_ms` given (required then): with nothing read, both the unreplicated
    /// check and the window check are skipped for the whole group.
    pub allow_unread_settings: bool,
    /// The acknowledged mode: `Some(true)` turns it on, each master's policy naming the
    /// replicas it has now; `Some(false)` turns it off; `None` keeps what each master runs.
    pub acknowledged: Option<bool>,
}

impl AdmitOptions {
    /// Every group, under `max_ttl_ms` and the write window their masters need, at once, with
    /// no escape taken.
    pub fn new(max_ttl_ms: u64) -> Self {
        AdmitOptions {
            groups: Vec::new(),
            max_ttl_ms,
            write_window_ms: None,
            delay: Duration::ZERO,
            force: false,
            allow_short_window: false,
            allow_unreplicated_writes: false,
            allow_unread_settings: false,
            acknowledged: None,
        }
    }

    /// The acknowledged mode to admit `group` under, as admit.lua takes it: the replicas its
    /// master has now (on), 0 (off), or `None` (kept as it is).
    fn acked_for(
        &self,
        group: &str,
        settings: &Result<GroupSettings, String>,
    ) -> Result<Option<u32>, AdmitRefusal> {
        match (self.acknowledged, settings) {
            (None, _) => Ok(None),
            (Some(false), _) => Ok(Some(0)),
            (Some(true), Err(reason)) => Err(AdmitRefusal::SettingsUnread {
                group: group.to_string(),
                reason: reason.clone(),
            }),
            (Some(true), Ok(settings)) => match settings.primaries.as_slice() {
                [primary] if primary.settings.is_cluster() => {
                    Err(AdmitRefusal::AcknowledgedCluster {
                        group: group.to_string(),
                    })
                }
                [primary] if primary.settings.replica_count > 0 => Ok(Some(
                    u32::try_from(primary.settings.replica_count).unwrap_or(u32::MAX),
                )),
                [_] => Err(AdmitRefusal::NoReplicas {
                    group: group.to_string(),
                }),
                _ => Err(AdmitRefusal::AcknowledgedCluster {
                    group: group.to_string(),
                }),
            },
        }
    }

    /// The write window to admit `group` under, from what its masters run (or why they
    /// cannot be read), or the refusal. In acknowledged mode an old master cut off from its
    /// replicas gets no vote counted, so writes it takes without them are no risk.
    fn window_for(
        &self,
        group: &str,
        settings: Result<GroupSettings, String>,
    ) -> Result<u64, AdmitRefusal> {
        let settings = match (settings, self.write_window_ms) {
            (Ok(settings), _) => settings,
            (Err(_), Some(window)) if self.allow_unread_settings => return Ok(window),
            (Err(reason), _) => {
                return Err(AdmitRefusal::SettingsUnread {
                    group: group.to_string(),
                    reason,
                });
            }
        };
        if let Some((primary, setting)) = settings.unreplicated()
            && !self.allow_unreplicated_writes
            && self.acknowledged != Some(true)
        {
            return Err(AdmitRefusal::UnreplicatedWrites {
                group: group.to_string(),
                primary: primary.to_string(),
                setting,
            });
        }
        let Some(window) = self.write_window_ms else {
            return Ok(settings.needed_window_ms());
        };
        let short = settings
            .bounds()
            .into_iter()
            .filter(|(_, bound)| bound.needed_ms > window)
            .max_by_key(|(_, bound)| bound.needed_ms);
        match short {
            Some((primary, bound)) if !self.allow_short_window => Err(AdmitRefusal::ShortWindow {
                group: group.to_string(),
                primary: primary.to_string(),
                setting: bound.setting,
                value: bound.value,
                needed_ms: bound.needed_ms,
                window_ms: window,
            }),
            _ => Ok(window),
        }
    }
}

/// What [`Locks::admit`] did on one group.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GroupAdmission {
    pub group: String,
    /// The policy now in force on the group's master (a policy only grows, so it may be
    /// larger than the one asked for).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<Policy>,
    /// Milliseconds until the master votes: the delay asked for, or longer when a
    /// quarantine in progress, or one that starts now, outlasts it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub votes_in_ms: Option<u64>,
    /// Replicas that acknowledged the policy, of those connected: a replica promoted before
    /// it saw a raised policy would sit out the old, shorter quarantine.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<ReplicaAcks>,
    /// Why the master was not admitted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The refusal, when the master's settings were the reason (`error` has its words).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusal: Option<AdmitRefusal>,
}

/// Replicas that acknowledged a write, of those connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ReplicaAcks {
    pub acknowledged: u64,
    pub connected: u64,
}

/// What [`Locks::quarantine`] puts back in quarantine on one group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuarantineScope {
    /// The whole group: its master, or every slot of a Cluster group.
    Group,
    /// One hash slot of a Cluster group (0 to 16383); a Sentinel group's master.
    Slot(u16),
    /// The slot of one resource in a Cluster group; a Sentinel group's master.
    Resource(String),
}

/// What [`Locks::quarantine`] did on one group.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GroupQuarantine {
    pub group: String,
    /// What sits out: `master`, `slot <n>`, or `every slot`.
    pub quarantined: String,
    /// Milliseconds until it votes again (the longest over its slots): at least the
    /// policy's quarantine, longer when one in progress outlasts it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub votes_in_ms: Option<u64>,
    /// Slots (or the master) with no lock policy: they do not vote anyway.
    #[serde(skip_serializing_if = "is_zero")]
    pub without_policy: usize,
    /// Why it was not (wholly) quarantined, and what to do.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

fn is_zero(count: &usize) -> bool {
    *count == 0
}

/// How long an admission waits for the replicas to acknowledge the policy.
const REPLICA_WAIT: Duration = Duration::from_secs(2);

impl Locks {
    /// Admits the masters of `options.groups` to the vote under at least `options.max_ttl_ms`
    /// and a write window that covers what each group's masters run (computed, or checked
    /// when given: see [`AdmitOptions`]), after `options.delay`, and waits for their replicas
    /// to acknowledge the policy. A group whose settings leave the window open, or cannot be
    /// read, is refused with an [`AdmitRefusal`] unless its escape is taken. For a
    /// brand-new deployment, for raising the policy, and for masters that lost their data
    /// when too few groups hold a policy for them to adopt one: then the delay must cover
    /// every lease they may have missed (the policy's quarantine). An admission never
    /// shortens a quarantine. Without `force`, a master with a policy but a history no vote
    /// has met (promoted, or restarted with its data) sits out the policy's quarantine from
    /// now (admit.lua). A master without a policy that holds lock or fence keys was not
    /// brand new, so it is admitted only when the delay covers the quarantine.
    pub async fn admit(&self, options: &AdmitOptions) -> Result<Vec<GroupAdmission>, Error> {
        let engine = &self.engine;
        for name in &options.groups {
            if !engine.groups.iter().any(|group| &group.name == name) {
                return Err(Error::invalid(
                    "group",
                    format!("`{name}` is not a group of this topology"),
                ));
            }
        }
        if options.max_ttl_ms == 0 {
            return Err(Error::invalid("max_ttl_ms", "must be above 0"));
        }
        let prefix = &engine.topology.key_prefix;
        let policy_name = policy_key(prefix);
        let keys = vec![
            admission_key(prefix).as_str().into(),
            policy_name.as_str().into(),
        ];
        // A master without a policy, while other groups hold one, lost its data: it may be
        // admitted only after the largest policy's quarantine (or by force). Only when every
        // group answers with no policy is the deployment brand new: a group that does not
        // answer may hold one, and leases a majority granted with it.
        let answers = engine.read_policy_answers().await;
        let held: Vec<Policy> = answers.iter().filter_map(PolicyAnswer::policy).collect();
        let silent = answers
            .iter()
            .filter(|answer| matches!(answer, PolicyAnswer::NoAnswer))
            .count();
        let none_held = held.is_empty();
        let brand_new = none_held && silent == 0;
        let lock_keys = format!("{prefix}:{{*");
        let chosen = engine
            .groups
            .iter()
            .filter(|group| options.groups.is_empty() || options.groups.contains(&group.name));
        let admissions = chosen.map(|group| {
            let (keys, lock_keys, held) = (keys.clone(), lock_keys.as_str(), held.as_slice());
            let policy_name = policy_name.as_str();
            async move {
                let refused = |error: String| GroupAdmission {
                    group: group.name.clone(),
                    policy: None,
                    votes_in_ms: None,
                    replicas: None,
                    error: Some(error),
                    refusal: None,
                };
                // The window that covers what this group's masters run, from the reading
                // `health` shows.
                let settings = read_write_settings(group)
                    .await
                    .map_err(|unread| unread.reason);
                let shape = options.acked_for(&group.name, &settings).and_then(|acked| {
                    Ok((acked, options.window_for(&group.name, settings)?))
                });
                let (acked, write_window_ms) = match shape {
                    Ok(shape) => shape,
                    Err(refusal) => {
                        return GroupAdmission {
                            refusal: Some(refusal.clone()),
                            ..refused(refusal.to_string())
                        };
                    }
                };
                if let Some(replicas @ 1..) = acked
                    && let Err(refusal) = sentinels_know_no_other_replica(group, replicas).await
                {
                    return GroupAdmission {
                        refusal: Some(refusal.clone()),
                        ..refused(refusal.to_string())
                    };
                }
                let asked = Policy {
                    max_ttl_ms: options.max_ttl_ms,
                    write_window_ms,
                    acked_replicas: acked.unwrap_or(0),
                };
                let largest = held.iter().copied().fold(asked, Policy::merge);
                let covered = millis(options.delay) >= largest.quarantine_ms();
                let args = vec![
                    Value::from(asked.max_ttl_ms.to_string()),
                    Value::from(asked.write_window_ms.to_string()),
                    Value::from(millis(options.delay).to_string()),
                    Value::from(if options.force { "1" } else { "0" }),
                    Value::from(acked.map(|n| n.to_string()).unwrap_or_default()),
                    // Set to `revoked` once the replicas hold the end of acknowledged mode.
                    Value::from(""),
                ];
                if !options.force && !covered && !group_has_policy(group, policy_name).await {
                    if none_held && silent > 0 {
                        return refused(format!(
                            "has no lock policy, and {silent} group(s) did not answer: they may hold one, so this may not be a brand-new deployment and the master may have missed grants: admit it when every group answers, with --after-ms {} (the policy's quarantine), or force it",
                            largest.quarantine_ms()
                        ));
                    }
                    if !brand_new {
                        return refused(format!(
                            "has no lock policy while other groups hold one, so it lost its data and may have missed grants: admit it with --after-ms {} (the largest policy's quarantine), or force it",
                            largest.quarantine_ms()
                        ));
                    }
                    match group.scan_keys(lock_keys, 1).await {
                        Reply::Answer(found) if found.is_empty() => {}
                        Reply::Answer(found) => {
                            return refused(format!(
                                "holds lock or fence keys (`{}`) but no lock policy, so it is not brand new and may have missed grants: admit it after the policy's quarantine, or force it",
                                found.join("`, `")
                            ));
                        }
                        other => return refused(format!("cannot look for keys: {}", describe(&other))),
                    }
                }
                // Once on a master; once per slot in a Cluster group, which votes from when
                // its last slot does.
                let connection = group.connection_ids();
                let replies = group
                    .eval_group::<Vec<Value>>(Every::Slot, GroupScript::Admit, keys.clone(), args.clone())
                    .await;
                let (mut policy, mut votes_in_ms, leaving) = match read_admission(replies) {
                    Ok(admitted) => admitted,
                    Err(error) => return refused(error),
                };
                if leaving {
                    // The mode ends only once every replica holds the revoked record
                    // (lua/admit.lua).
                    if let Err(error) =
                        confirm_revocation(group, policy.acked_replicas, &connection).await
                    {
                        return refused(error);
                    }
                    let mut args = args;
                    args[5] = Value::from("revoked");
                    let replies = group
                        .eval_group::<Vec<Value>>(Every::Slot, GroupScript::Admit, keys, args)
                        .await;
                    (policy, votes_in_ms) = match read_admission(replies) {
                        Ok((policy, votes_in_ms, false)) => (policy, votes_in_ms),
                        Ok(_) => return refused(
                            "the record of acknowledged mode changed while the mode was ending (a failover?): it stays on; run admit again".to_string(),
                        ),
                        Err(error) => return refused(error),
                    };
                }
                let replicas = group.wait_for_replicas(REPLICA_WAIT).await;
                tracing::info!(
                    group = group.name,
                    max_ttl_ms = policy.max_ttl_ms,
                    write_window_ms = policy.write_window_ms,
                    delay_ms = millis(options.delay),
                    votes_in_ms,
                    ?replicas,
                    "admitted a master to the vote"
                );
                GroupAdmission {
                    group: group.name.clone(),
                    policy: Some(policy),
                    votes_in_ms: Some(votes_in_ms),
                    replicas: replicas.map(|(acknowledged, connected)| ReplicaAcks {
                        acknowledged,
                        connected,
                    }),
                    error: None,
                    refusal: None,
                }
            }
        });
        Ok(futures::future::join_all(admissions).await)
    }
}

/// Checks that no Sentinel of `group` knows more replicas than the `replicas` its master
/// has connected, which acknowledged mode's policy would name. Sentinel may promote any
/// replica it knows once that replica is back, and a vote that replica never held would be
/// lost. A group no Sentinel watches has nothing to check; one whose Sentinels all fail to
/// answer is refused.
async fn sentinels_know_no_other_replica(
    group: &crate::group::Group,
    replicas: u32,
) -> Result<(), AdmitRefusal> {
    let Some(watched) = group.sentinels() else {
        return Ok(());
    };
    let connected = usize::try_from(replicas).unwrap_or(usize::MAX);
    let asks = watched.addresses.iter().map(|(host, port)| async move {
        let sentinel = format!("{host}:{port}");
        let known = match group.sentinel_config(host, *port) {
            Some(config) => ask_sentinel_replicas(config, &watched.service)
                .await
                .map_err(|error| error.to_string()),
            None => Err("not a Sentinel-watched group".to_string()),
        };
        (sentinel, known)
    });
    let answers = futures::future::join_all(asks).await;
    if let Some((sentinel, known)) = answers
        .iter()
        .filter_map(|(sentinel, known)| Some((sentinel, *known.as_ref().ok()?)))
        .find(|(_, known)| *known > connected)
    {
        return Err(AdmitRefusal::ReplicaUnconnected {
            group: group.name.clone(),
            sentinel: sentinel.clone(),
            known,
            connected,
        });
    }
    if answers.iter().all(|(_, known)| known.is_err()) {
        let reason = answers
            .iter()
            .filter_map(|(sentinel, known)| Some(format!("{sentinel}: {}", known.as_ref().err()?)))
            .collect::<Vec<_>>()
            .join("; ");
        return Err(AdmitRefusal::SentinelsUnread {
            group: group.name.clone(),
            reason,
        });
    }
    Ok(())
}

/// The policy now in force, the ms until the master votes (the latest over a Cluster group's
/// slots), and whether acknowledged mode waits for its replicas to hold the revoked record
/// before it can end: admit.lua's replies, one per master or slot.
fn read_admission(replies: Vec<Reply<Vec<Value>>>) -> Result<(Policy, u64, bool), String> {
    let mut admitted: Option<(Policy, u64, bool)> = None;
    for reply in replies {
        let values = match reply {
            Reply::Answer(values) => values,
            other => return Err(describe(&other)),
        };
        let (Some(policy), Some(votes_in_ms)) = (
            parse_policy(values.get(1..3).unwrap_or(&[])),
            integer(values.get(3)),
        ) else {
            return Err(format!("unexpected admit reply {values:?}"));
        };
        let policy = Policy {
            acked_replicas: integer(values.get(4))
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(0),
            ..policy
        };
        let leaving = integer(values.get(5)) == Some(1);
        admitted = Some(match admitted {
            None => (policy, votes_in_ms, leaving),
            Some((seen, latest, was_leaving)) => (
                seen.merge(policy),
                latest.max(votes_in_ms),
                was_leaving || leaving,
            ),
        });
    }
    admitted.ok_or_else(|| "no answer to the admission".to_string())
}

/// Waits until every replica of `group`'s master holds the revoked record of acknowledged
/// mode, written on `connection`: `WAIT` counts only its own connection's writes, so a
/// reconnect in between proves nothing. A replica that missed the revocation could be
/// promoted, take the record over and vote at once without the grants that, outside the
/// mode, its master no longer waits for.
async fn confirm_revocation(
    group: &crate::group::Group,
    replicas: u32,
    connection: &std::collections::HashMap<fred::types::config::Server, i64>,
) -> Result<(), String> {
    let acks = group.wait_for_replicas(REPLICA_WAIT).await;
    let moved = !crate::group::batch::same_connection(connection, &group.connection_ids());
    match acks {
        _ if moved => Err(
            "the connection to the master changed before its replicas confirmed the end of acknowledged mode: it stays on; run admit again".to_string(),
        ),
        Some((acknowledged, connected))
            if acknowledged >= u64::from(replicas) && acknowledged == connected =>
        {
            Ok(())
        }
        Some((acknowledged, connected)) => Err(format!(
            "{acknowledged} of the master's {connected} connected replicas (its policy names {replicas}) confirmed the end of acknowledged mode within {} ms: it stays on, and a replica promoted now sits out the quarantine; run admit again once every replica is up",
            REPLICA_WAIT.as_millis()
        )),
        None => Err(
            "WAIT for the replicas to confirm the end of acknowledged mode failed: it stays on; run admit again".to_string(),
        ),
    }
}

impl Locks {
    /// The longest TTL every master that answered accepts: the shortest `max_ttl_ms` among
    /// their lock policies. `None` when no master answered with a policy.
    pub async fn policy_max_ttl(&self) -> Option<Duration> {
        let policies = self.engine.read_policies().await;
        policies
            .iter()
            .flatten()
            .map(|policy| Duration::from_millis(policy.max_ttl_ms))
            .min()
    }

    /// Puts `scope` of group `group` back in quarantine (lua/quarantine.lua): it sits out
    /// max_ttl_ms + write_window_ms from now, as a promoted master does, and a quarantine in
    /// progress is never shortened. For losses the engine cannot see: a Cluster slot closed
    /// back on its source after some keys left it, keys restored by hand (see
    /// docs/operations.md). On a Sentinel group the master sits out whatever the scope.
    pub async fn quarantine(
        &self,
        group: &str,
        scope: &QuarantineScope,
    ) -> Result<GroupQuarantine, Error> {
        let engine = &self.engine;
        let Some(chosen) = engine.groups.iter().find(|g| g.name == group) else {
            return Err(Error::invalid(
                "group",
                format!("`{group}` is not a group of this topology"),
            ));
        };
        let prefix = &engine.topology.key_prefix;
        let keys = vec![
            admission_key(prefix).as_str().into(),
            policy_key(prefix).as_str().into(),
        ];
        let slot = match scope {
            QuarantineScope::Group => None,
            QuarantineScope::Slot(index) => Some(HashSlot::new(*index).ok_or_else(|| {
                Error::invalid(
                    "slot",
                    format!(
                        "{index} is not a hash slot: pick one from 0 to {}",
                        SLOTS - 1
                    ),
                )
            })?),
            QuarantineScope::Resource(resource) => {
                crate::engine::resource::validate_resource(resource)?;
                Some(HashSlot::of_resource(resource))
            }
        };
        let (quarantined, replies) = match (chosen.is_cluster(), slot) {
            (true, Some(slot)) => (
                format!("slot {}", slot.index()),
                vec![
                    chosen
                        .eval::<Vec<Value>>(slot, &scripts::QUARANTINE, keys, Vec::new())
                        .await,
                ],
            ),
            (true, None) => (
                "every slot".to_string(),
                chosen
                    .eval_group::<Vec<Value>>(Every::Slot, GroupScript::Quarantine, keys, vec![])
                    .await,
            ),
            (false, _) => (
                "master".to_string(),
                chosen
                    .eval_group::<Vec<Value>>(Every::Slot, GroupScript::Quarantine, keys, vec![])
                    .await,
            ),
        };
        let mut outcome = GroupQuarantine {
            group: chosen.name.clone(),
            quarantined,
            votes_in_ms: None,
            without_policy: 0,
            error: None,
        };
        let mut failed = 0;
        let mut first_failure = None;
        for reply in &replies {
            match reply {
                Reply::Answer(values) if integer(values.first()) == Some(1) => {
                    let left = integer(values.get(1)).unwrap_or(0);
                    outcome.votes_in_ms = Some(outcome.votes_in_ms.map_or(left, |l| l.max(left)));
                }
                Reply::Answer(values) if integer(values.first()) == Some(0) => {
                    outcome.without_policy += 1;
                }
                other => {
                    failed += 1;
                    first_failure.get_or_insert_with(|| match other {
                        Reply::Answer(values) => format!("unexpected reply {values:?}"),
                        other => describe(other),
                    });
                }
            }
        }
        if let Some(why) = first_failure {
            outcome.error = Some(format!(
                "{failed} of {} runs failed (first: {why}). A slot whose marker or policy already left for another node sits out by itself once closed back here (no marker, or no policy); otherwise run the quarantine again before the slot votes",
                replies.len()
            ));
        }
        tracing::warn!(
            group = outcome.group,
            quarantined = outcome.quarantined,
            votes_in_ms = outcome.votes_in_ms,
            failed,
            "an operator put part of a group back in quarantine"
        );
        Ok(outcome)
    }
}

/// What one group answered when asked for its lock policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PolicyAnswer {
    Held(Policy),
    /// It answered, with no policy.
    Missing,
    /// It did not answer (down, cut off, timed out).
    NoAnswer,
}

impl PolicyAnswer {
    fn policy(&self) -> Option<Policy> {
        match self {
            PolicyAnswer::Held(policy) => Some(*policy),
            PolicyAnswer::Missing | PolicyAnswer::NoAnswer => None,
        }
    }
}

/// Whether `group`'s master holds a lock policy (a master that does not answer counts as
/// having none: admitting it is refused until it answers).
async fn group_has_policy(group: &crate::group::Group, policy: &str) -> bool {
    let replies = group
        .eval_group::<Vec<Value>>(
            Every::Slot,
            GroupScript::Policy,
            vec![policy.into()],
            vec![],
        )
        .await;
    replies
        .iter()
        .all(|reply| matches!(reply, Reply::Answer(values) if parse_policy(values).is_some()))
}

/// One group's policy from what its master (or each slot of a Cluster group) answered: no
/// answer when any part did not answer, since it may hold a larger policy; else the largest
/// held; else none.
fn group_policy(replies: &[Reply<Vec<Value>>]) -> PolicyAnswer {
    let mut held: Option<Policy> = None;
    for reply in replies {
        match reply {
            Reply::Answer(values) => {
                if let Some(policy) = parse_policy(values) {
                    held = Some(held.map_or(policy, |seen| seen.merge(policy)));
                }
            }
            _ => return PolicyAnswer::NoAnswer,
        }
    }
    match (replies.is_empty(), held) {
        (true, _) => PolicyAnswer::NoAnswer,
        (false, Some(policy)) => PolicyAnswer::Held(policy),
        (false, None) => PolicyAnswer::Missing,
    }
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

impl Engine {
    /// Gives the groups marked in `unadmitted` (they answered that they have no lock policy)
    /// the largest policy of the groups, once a majority of groups answered with one. In a
    /// task of its own, off the caller's path; a group already being adopted is skipped.
    pub(crate) fn adopt_policies(self: &Arc<Self>, unadmitted: Vec<bool>) {
        let targets: Vec<bool> = {
            let mut adopting = self.adopting.lock().unwrap_or_else(PoisonError::into_inner);
            unadmitted
                .iter()
                .zip(adopting.iter_mut())
                .map(|(&wanted, busy)| {
                    let start = wanted && !*busy;
                    *busy |= start;
                    start
                })
                .collect()
        };
        if !targets.contains(&true) {
            return;
        }
        let engine = self.clone();
        self.cleanup.spawn(async move {
            engine.adopt(&targets).await;
            let mut adopting = engine
                .adopting
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            for (busy, &done) in adopting.iter_mut().zip(&targets) {
                *busy &= !done;
            }
        });
    }

    /// Every group's lock policy (`None` where it has none or did not answer).
    pub(crate) async fn read_policies(&self) -> Vec<Option<Policy>> {
        self.read_policy_answers()
            .await
            .iter()
            .map(PolicyAnswer::policy)
            .collect()
    }

    /// What each group answered when asked for its lock policy.
    async fn read_policy_answers(&self) -> Vec<PolicyAnswer> {
        let policy = policy_key(&self.topology.key_prefix);
        let replies = futures::future::join_all(self.groups.iter().map(|group| {
            group.eval_group::<Vec<Value>>(
                Every::Slot,
                GroupScript::Policy,
                vec![policy.as_str().into()],
                vec![],
            )
        }))
        .await;
        replies
            .iter()
            .map(|replies| group_policy(replies))
            .collect()
    }

    async fn adopt(&self, targets: &[bool]) {
        let prefix = &self.topology.key_prefix;
        let policy = policy_key(prefix);
        let answers = self.read_policies().await;
        let Some(adopted) = Policy::adopt(&answers, self.majority) else {
            tracing::warn!(
                with_policy = answers.iter().flatten().count(),
                needed = self.majority.needed,
                "a master lost its lock policy and too few groups hold one to adopt: it stays out of the vote until `quorumlock admit`"
            );
            return;
        };
        let marker = admission_key(prefix);
        let keys = vec![marker.as_str().into(), policy.as_str().into()];
        let adoptions = self
            .groups
            .iter()
            .zip(targets)
            .filter(|(_, target)| **target)
            .map(|(group, _)| {
                let keys = keys.clone();
                async move {
                    let adopted = own_window(group, adopted).await;
                    let args = vec![
                        Value::from(adopted.max_ttl_ms.to_string()),
                        Value::from(adopted.write_window_ms.to_string()),
                        Value::from(adopted.acked_replicas.to_string()),
                    ];
                    let replies = group
                        .eval_group::<Vec<Value>>(Every::Slot, GroupScript::Adopt, keys, args)
                        .await;
                    // Adopted where any part lacked the policy; unanswered where any part
                    // did not answer, so the next vote tries again.
                    let done = replies.iter().any(
                        |reply| matches!(reply, Reply::Answer(values) if integer(values.first()) == Some(1)),
                    );
                    let reply = match replies.iter().find(|reply| !matches!(reply, Reply::Answer(_))) {
                        Some(_) => Reply::Timeout,
                        None => Reply::Answer(vec![Value::from(i64::from(done))]),
                    };
                    (group, adopted, reply)
                }
            });
        for (group, adopted, reply) in futures::future::join_all(adoptions).await {
            match reply {
                Reply::Answer(values) if integer(values.first()) == Some(1) => tracing::info!(
                    group = group.name,
                    max_ttl_ms = adopted.max_ttl_ms,
                    write_window_ms = adopted.write_window_ms,
                    quarantine_ms = adopted.quarantine_ms(),
                    "a master that lost its data adopted the lock policy of a majority of groups; it sits out its quarantine"
                ),
                Reply::Answer(_) => {}
                _ => tracing::debug!(
                    group = group.name,
                    "adopting a lock policy did not answer; the next vote tries again"
                ),
            }
        }
    }
}

/// The adopted policy with at least the write window `group`'s own masters need: the
/// others' policy says nothing about a group that runs a longer `min-replicas-max-lag` or
/// `cluster-node-timeout`. Settings that cannot be read leave the adopted policy as it is,
/// with a warning naming the group.
async fn own_window(group: &crate::group::Group, adopted: Policy) -> Policy {
    match read_write_settings(group).await {
        Ok(settings) => Policy {
            write_window_ms: adopted.write_window_ms.max(settings.needed_window_ms()),
            ..adopted
        },
        Err(unread) => {
            tracing::warn!(
                group = group.name,
                reason = %unread,
                write_window_ms = adopted.write_window_ms,
                "cannot read the settings that bound this group's write window: it adopts the other groups' window, which may not cover what its masters need; check it with `quorumlock health`"
            );
            adopted
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::health::{PrimarySettings, ReplicaSetting, WriteSettings};

    /// One master at `m:1` running `pairs`.
    fn settings(pairs: &[(&str, &str)], replicas: bool) -> Result<GroupSettings, String> {
        let config: Vec<(String, String)> = pairs
            .iter()
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect();
        Ok(GroupSettings {
            primaries: vec![PrimarySettings {
                primary: "m:1".to_string(),
                settings: WriteSettings::read(&config, usize::from(replicas)),
            }],
        })
    }

    const LAG_10: &[(&str, &str)] = &[
        ("min-replicas-to-write", "1"),
        ("min-replicas-max-lag", "10"),
        ("cluster-enabled", "no"),
    ];

    #[test]
    fn a_window_left_out_is_computed_from_the_weakest_setting_of_the_masters() {
        let options = AdmitOptions::new(60_000);
        assert_eq!(options.window_for("g1", settings(LAG_10, true)), Ok(12_000));
        // Without replicas the lag bounds nothing.
        assert_eq!(options.window_for("g1", settings(LAG_10, false)), Ok(0));
        let cluster = [
            ("min-replicas-to-write", "1"),
            ("min-replicas-max-lag", "1"),
            ("cluster-enabled", "yes"),
            ("cluster-node-timeout", "15000"),
        ];
        assert_eq!(
            options.window_for("g1", settings(&cluster, true)),
            Ok(16_000)
        );
    }

    #[test]
    fn a_short_window_is_refused_naming_the_setting_unless_its_own_escape_is_taken() {
        let short = AdmitOptions {
            write_window_ms: Some(5_000),
            ..AdmitOptions::new(60_000)
        };
        let refused = short.window_for("g2", settings(LAG_10, true));
        assert_eq!(
            refused,
            Err(AdmitRefusal::ShortWindow {
                group: "g2".into(),
                primary: "m:1".into(),
                setting: crate::engine::health::WindowSetting::MinReplicasMaxLag,
                value: 10,
                needed_ms: 12_000,
                window_ms: 5_000,
            })
        );
        let text = refused
            .err()
            .map(|refusal| refusal.to_string())
            .unwrap_or_default();
        assert!(text.starts_with("g2: min-replicas-max-lag 10 s"), "{text}");
        let other_escapes = AdmitOptions {
            allow_unreplicated_writes: true,
            allow_unread_settings: true,
            ..short.clone()
        };
        assert!(
            other_escapes
                .window_for("g2", settings(LAG_10, true))
                .is_err()
        );
        let allowed = AdmitOptions {
            allow_short_window: true,
            ..short
        };
        assert_eq!(allowed.window_for("g2", settings(LAG_10, true)), Ok(5_000));
    }

    #[test]
    fn replicas_that_writes_do_not_wait_for_are_refused_unless_their_own_escape_is_taken() {
        let off = [
            ("min-replicas-to-write", "0"),
            ("min-replicas-max-lag", "10"),
        ];
        // A lag of 0 turns min-replicas-to-write off too.
        let no_lag = [
            ("min-replicas-to-write", "1"),
            ("min-replicas-max-lag", "0"),
        ];
        for (pairs, setting) in [
            (&off[..], ReplicaSetting::MinReplicasToWrite),
            (&no_lag[..], ReplicaSetting::MinReplicasMaxLag),
        ] {
            let options = AdmitOptions {
                write_window_ms: Some(60_000),
                allow_short_window: true,
                allow_unread_settings: true,
                ..AdmitOptions::new(60_000)
            };
            assert_eq!(
                options.window_for("g3", settings(pairs, true)),
                Err(AdmitRefusal::UnreplicatedWrites {
                    group: "g3".into(),
                    primary: "m:1".into(),
                    setting
                })
            );
            let allowed = AdmitOptions {
                allow_unreplicated_writes: true,
                ..options
            };
            assert_eq!(allowed.window_for("g3", settings(pairs, true)), Ok(60_000));
        }
    }

    #[test]
    fn unread_settings_are_refused_unless_allowed_with_a_window_of_the_operators() {
        let unread = || Err("CONFIG GET: NOPERM".to_string());
        let options = AdmitOptions::new(60_000);
        assert!(matches!(
            options.window_for("g4", unread()),
            Err(AdmitRefusal::SettingsUnread { .. })
        ));
        let no_window = AdmitOptions {
            allow_unread_settings: true,
            ..options.clone()
        };
        assert!(no_window.window_for("g4", unread()).is_err());
        let allowed = AdmitOptions {
            write_window_ms: Some(12_000),
            ..no_window
        };
        assert_eq!(allowed.window_for("g4", unread()), Ok(12_000));
    }

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
