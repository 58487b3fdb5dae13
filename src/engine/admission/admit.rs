//! Admitting masters to the vote under a policy, and ending acknowledged mode only once
//! every replica holds its end.

use std::time::Duration;

use fred::types::{Key, Value};

use super::describe;
use super::options::AdmitOptions;
use super::outcome::{GroupAdmission, ReplicaAcks};
use super::parse_policy;
use super::policies::{PolicyAnswer, group_has_policy};
use crate::engine::clock::millis;
use crate::engine::error::{AdmitRefusal, Error};
use crate::engine::health::read_write_settings;
use crate::engine::locks::Locks;
use crate::engine::protocol::Policy;
use crate::engine::resource::{admission_key, policy_key};
use crate::group::Group;
use crate::group::cluster::Every;
use crate::group::diagnose::ask_sentinel_replicas;
use crate::group::reply::Reply;
use crate::group::reply::integer;
use crate::group::scripts::GroupScript;

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
        let answers = engine.read_policy_answers().await;
        let survey = Survey {
            keys: vec![
                admission_key(prefix).as_str().into(),
                policy_name.as_str().into(),
            ],
            lock_keys: format!("{prefix}:{{*"),
            held: answers.iter().filter_map(PolicyAnswer::policy).collect(),
            silent: answers
                .iter()
                .filter(|answer| matches!(answer, PolicyAnswer::NoAnswer))
                .count(),
            policy_name,
        };
        let chosen = engine
            .groups
            .iter()
            .filter(|group| options.groups.is_empty() || options.groups.contains(&group.name));
        let admissions = chosen.map(|group| admit_group(group, options, &survey));
        Ok(futures::future::join_all(admissions).await)
    }
}

/// What the groups' policies were before any group was admitted, and the keys admit.lua
/// takes.
struct Survey {
    keys: Vec<Key>,
    policy_name: String,
    /// The pattern of lock and fence keys.
    lock_keys: String,
    /// The policies held by the groups that answered with one.
    held: Vec<Policy>,
    /// Groups that did not answer.
    silent: usize,
}

impl Survey {
    /// A master without a policy, while other groups hold one, lost its data. Only when every
    /// group answers with no policy is the deployment brand new: a group that does not
    /// answer may hold one, and leases a majority granted with it.
    fn brand_new(&self) -> bool {
        self.held.is_empty() && self.silent == 0
    }
}

/// An admission refused on `group`, with `error` saying why.
fn refused(group: &Group, error: String) -> GroupAdmission {
    GroupAdmission {
        group: group.name.clone(),
        policy: None,
        votes_in_ms: None,
        replicas: None,
        error: Some(error),
        refusal: None,
    }
}

/// An admission refused on `group` for its settings.
fn refused_for(group: &Group, refusal: AdmitRefusal) -> GroupAdmission {
    GroupAdmission {
        refusal: Some(refusal.clone()),
        ..refused(group, refusal.to_string())
    }
}

/// Admits one group's master (or every slot of a Cluster group) and waits for its replicas.
async fn admit_group(group: &Group, options: &AdmitOptions, survey: &Survey) -> GroupAdmission {
    let (acked, write_window_ms) = match group_shape(group, options).await {
        Ok(shape) => shape,
        Err(refusal) => return refused_for(group, refusal),
    };
    let asked = Policy {
        max_ttl_ms: options.max_ttl_ms,
        write_window_ms,
        acked_replicas: acked.unwrap_or(0),
    };
    let largest = survey.held.iter().copied().fold(asked, Policy::merge);
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
    if !options.force
        && !covered
        && !group_has_policy(group, &survey.policy_name).await
        && let Err(error) = check_unpoliced_master(group, survey, largest).await
    {
        return refused(group, error);
    }
    let (policy, votes_in_ms) = match run_admit(group, survey.keys.clone(), args).await {
        Ok(admitted) => admitted,
        Err(error) => return refused(group, error),
    };
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

/// The acknowledged mode and the write window to admit `group` under, from the reading
/// `health` shows of what its masters run, or the refusal.
async fn group_shape(
    group: &Group,
    options: &AdmitOptions,
) -> Result<(Option<u32>, u64), AdmitRefusal> {
    let settings = read_write_settings(group)
        .await
        .map_err(|unread| unread.reason);
    let acked = options.acked_for(&group.name, &settings)?;
    let write_window_ms = options.window_for(&group.name, settings)?;
    if let Some(replicas @ 1..) = acked {
        sentinels_know_no_other_replica(group, replicas).await?;
    }
    Ok((acked, write_window_ms))
}

/// Whether a master without a lock policy may be admitted before the quarantine of the
/// `largest` policy: only in a brand-new deployment, and only when it holds no lock or fence
/// keys.
async fn check_unpoliced_master(
    group: &Group,
    survey: &Survey,
    largest: Policy,
) -> Result<(), String> {
    let silent = survey.silent;
    if survey.held.is_empty() && silent > 0 {
        return Err(format!(
            "has no lock policy, and {silent} group(s) did not answer: they may hold one, so this may not be a brand-new deployment and the master may have missed grants: admit it when every group answers, with --after-ms {} (the policy's quarantine), or force it",
            largest.quarantine_ms()
        ));
    }
    if !survey.brand_new() {
        return Err(format!(
            "has no lock policy while other groups hold one, so it lost its data and may have missed grants: admit it with --after-ms {} (the largest policy's quarantine), or force it",
            largest.quarantine_ms()
        ));
    }
    match group.scan_keys(&survey.lock_keys, 1).await {
        Reply::Answer(found) if found.is_empty() => Ok(()),
        Reply::Answer(found) => Err(format!(
            "holds lock or fence keys (`{}`) but no lock policy, so it is not brand new and may have missed grants: admit it after the policy's quarantine, or force it",
            found.join("`, `")
        )),
        other => Err(format!("cannot look for keys: {}", describe(&other))),
    }
}

/// Runs admit.lua on the group: once on a master, once per slot in a Cluster group, which
/// votes from when its last slot does. When the call ends acknowledged mode, the mode ends
/// only once every replica holds the revoked record (lua/admit.lua), in a second call.
async fn run_admit(
    group: &Group,
    keys: Vec<Key>,
    mut args: Vec<Value>,
) -> Result<(Policy, u64), String> {
    let connection = group.connection_ids();
    let replies = group
        .eval_group::<Vec<Value>>(Every::Slot, GroupScript::Admit, keys.clone(), args.clone())
        .await;
    let (policy, votes_in_ms, leaving) = read_admission(replies)?;
    if !leaving {
        return Ok((policy, votes_in_ms));
    }
    confirm_revocation(group, policy.acked_replicas, &connection).await?;
    args[5] = Value::from("revoked");
    let replies = group
        .eval_group::<Vec<Value>>(Every::Slot, GroupScript::Admit, keys, args)
        .await;
    match read_admission(replies)? {
        (policy, votes_in_ms, false) => Ok((policy, votes_in_ms)),
        _ => Err(
            "the record of acknowledged mode changed while the mode was ending (a failover?): it stays on; run admit again".to_string(),
        ),
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
