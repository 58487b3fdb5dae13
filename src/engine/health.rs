//! The health of every group as an operator needs it: reachability and latency, the master
//! the engine talks to and what each Sentinel names, role, replicas and their lag, and
//! whether the master votes or sits out its quarantine.

use fred::types::{InfoKind, Value};
use serde::Serialize;

use crate::engine::locks::Locks;
use crate::engine::protocol::Policy;
use crate::engine::resource::{admission_key, policy_key};
use crate::group::Group;
use crate::group::cluster::Every;
use crate::group::diagnose::{ask_sentinel, connection_failure};
use crate::group::reply::Reply;
use crate::group::scripts::GroupScript;

/// One Sentinel's answer about a group.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct SentinelView {
    pub sentinel: String,
    /// The master this Sentinel names for the group.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub master: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One replica as its master reports it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[cfg_attr(feature = "mcp", derive(schemars::JsonSchema))]
pub struct ReplicaView {
    pub address: String,
    pub state: String,
    /// Seconds since the replica's last acknowledgement.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lag_s: Option<u64>,
    /// Replication bytes the replica is behind its master.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_behind: Option<i64>,
}

/// Whether a master takes part in the vote.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Admission {
    /// It votes.
    Voting,
    /// New to the vote (promoted, restarted empty or wiped); votes again after this long.
    Quarantined { remaining_ms: u64 },
    /// It has not been asked to vote since its history began; its first vote starts the
    /// quarantine.
    Unadmitted,
    /// It lost its data and its lock policy: it sits out until it adopts the policy of a
    /// majority of groups (at the next acquire), or an operator admits it.
    NoPolicy,
    /// It may evict keys (`maxmemory` with this `maxmemory-policy`), so it does not vote.
    Evicts { maxmemory_policy: String },
    /// Could not be read.
    Unknown,
}

/// One group's health.
#[derive(Debug, Clone, Serialize)]
pub struct GroupHealth {
    pub group: String,
    pub reachable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The master the engine is connected to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub master: Option<String>,
    /// `master` or `slave`, as the node reports itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    pub replicas: Vec<ReplicaView>,
    /// Each Sentinel's view (empty for a plain group).
    pub sentinels: Vec<SentinelView>,
    /// True when every Sentinel that answered names the master the engine uses (with no
    /// master, the same master as each other); absent when no Sentinel named one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sentinels_agree: Option<bool>,
    pub admission: Admission,
    /// The lock policy the master holds (absent: it has none, or it could not be read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<Policy>,
    /// Settings that break a safety assumption, each with what to change.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unsafe_settings: Vec<String>,
}

impl Admission {
    /// How far from voting: what speaks for a group whose parts (a Cluster group's
    /// primaries) answer differently.
    fn distance_from_voting(&self) -> u8 {
        match self {
            Admission::Voting => 0,
            Admission::Unadmitted => 1,
            Admission::Unknown => 2,
            Admission::Quarantined { .. } => 3,
            Admission::NoPolicy => 4,
            Admission::Evicts { .. } => 5,
        }
    }
}

impl GroupHealth {
    /// Reachable and voting.
    pub fn votes(&self) -> bool {
        self.reachable && matches!(self.admission, Admission::Voting | Admission::Unadmitted)
    }
}

/// Every group's health and whether a majority can vote.
#[derive(Debug, Clone, Serialize)]
pub struct Health {
    /// True when at least `quorum` groups are reachable and not quarantined.
    pub quorum_available: bool,
    pub quorum: usize,
    pub voting: usize,
    pub groups: Vec<GroupHealth>,
}

impl Locks {
    /// Asks every group (and its Sentinels) how it is doing.
    pub async fn health(&self) -> Health {
        let engine = &self.engine;
        let keys = AdmissionKeys {
            marker: admission_key(&engine.topology.key_prefix),
            policy: policy_key(&engine.topology.key_prefix),
        };
        let groups: Vec<GroupHealth> =
            futures::future::join_all(engine.groups.iter().map(|group| group_health(group, &keys)))
                .await;
        let voting = groups.iter().filter(|g| g.votes()).count();
        Health {
            quorum_available: voting >= engine.majority.needed,
            quorum: engine.majority.needed,
            voting,
            groups,
        }
    }
}

/// The keys a master keeps about its admission.
struct AdmissionKeys {
    marker: String,
    policy: String,
}

async fn group_health(group: &Group, keys: &AdmissionKeys) -> GroupHealth {
    let (ping, info, admission, sentinels, config) = tokio::join!(
        group.ping(),
        group.info(InfoKind::Replication),
        group.eval_group::<Vec<Value>>(
            Every::Shard,
            GroupScript::AdmissionState,
            vec![keys.marker.as_str().into(), keys.policy.as_str().into()],
            Vec::new()
        ),
        sentinel_views(group),
        group.config(&[
            "min-replicas-to-write",
            "min-replicas-max-lag",
            "cluster-enabled",
            "cluster-node-timeout",
        ]),
    );
    let (latency_ms, error) = match ping {
        Reply::Answer(rtt) => (Some(rtt.as_secs_f64() * 1000.0), None),
        Reply::Timeout => (None, Some("timeout".to_string())),
        Reply::Failed(message) => (None, Some(message)),
        Reply::NotSent(reason) => (None, Some(format!("not sent: {reason}"))),
    };
    // fred's own words for a client that cannot connect rarely say why.
    let error = match error {
        Some(error) if !group.connected() => {
            let cause = match group.down_because() {
                Some(cause) => Some(cause),
                None => connection_failure(group.reach()).await,
            };
            Some(cause.map_or(error, |cause| format!("not connected: {cause}")))
        }
        error => error,
    };
    let (role, replicas) = match info {
        Reply::Answer(text) => parse_replication(&text),
        _ => (None, Vec::new()),
    };
    // A Cluster group's primaries each answer: the one furthest from voting speaks for it.
    let admissions: Vec<(Admission, Option<Policy>)> = admission
        .into_iter()
        .map(|reply| match reply {
            Reply::Answer(values) => read_admission(&values),
            _ => (Admission::Unknown, None),
        })
        .collect();
    let (admission, policy) = admissions
        .iter()
        .max_by_key(|(admission, _)| admission.distance_from_voting())
        .cloned()
        .unwrap_or((Admission::Unknown, None));
    let unsafe_settings = unsafe_settings(&admission, policy, &replicas, &config);
    let master = group.connected_master();
    // With no master of the engine's own, the Sentinels are compared with each other.
    let named: Vec<&String> = sentinels
        .iter()
        .filter_map(|view| view.master.as_ref())
        .collect();
    let sentinels_agree = named.first().map(|first| {
        let reference = master.as_ref().unwrap_or(first);
        named.iter().all(|candidate| *candidate == reference)
    });
    GroupHealth {
        group: group.name.clone(),
        reachable: latency_ms.is_some(),
        latency_ms,
        error,
        master,
        role,
        replicas,
        sentinels,
        sentinels_agree,
        admission,
        policy,
        unsafe_settings,
    }
}

/// What `lua/admission_state.lua` answered: the admission, and the policy when there is one.
fn read_admission(values: &[Value]) -> (Admission, Option<Policy>) {
    let number = |at: usize| values.get(at).and_then(Value::as_i64);
    let policy = match (number(2), number(3)) {
        (Some(max_ttl_ms), Some(window)) if max_ttl_ms >= 0 => Some(Policy {
            max_ttl_ms: max_ttl_ms as u64,
            write_window_ms: window.max(0) as u64,
        }),
        _ => None,
    };
    let evicts = values
        .get(4)
        .and_then(Value::as_string)
        .filter(|policy| !policy.is_empty());
    let admission = match (number(0), number(1), evicts, policy) {
        (_, _, Some(maxmemory_policy), _) => Admission::Evicts { maxmemory_policy },
        (Some(_), _, None, None) => Admission::NoPolicy,
        (Some(0), _, None, Some(_)) => Admission::Unadmitted,
        (Some(1), Some(left), None, Some(_)) if left > 0 => Admission::Quarantined {
            remaining_ms: left as u64,
        },
        (Some(1), Some(_), None, Some(_)) => Admission::Voting,
        _ => Admission::Unknown,
    };
    (admission, policy)
}

/// What a Cluster primary's write window must add to its node timeout: it notices that it
/// lost most of its cluster in its cron, ten times a second, and then refuses writes.
const CLUSTER_WINDOW_MARGIN_MS: u64 = 1_000;

/// The settings of a master that break an assumption of docs/safety.md.
fn unsafe_settings(
    admission: &Admission,
    policy: Option<Policy>,
    replicas: &[ReplicaView],
    config: &Reply<Vec<(String, String)>>,
) -> Vec<String> {
    let mut found = Vec::new();
    if let Admission::Evicts { maxmemory_policy } = admission {
        found.push(format!(
            "maxmemory-policy {maxmemory_policy} with maxmemory set may evict a live lock or fence: set maxmemory-policy noeviction (the master does not vote until then)"
        ));
    }
    let Reply::Answer(config) = config else {
        return found;
    };
    let setting = |name: &str| {
        config
            .iter()
            .find(|(key, _)| key == name)
            .and_then(|(_, value)| value.parse::<u64>().ok())
    };
    let cluster = config
        .iter()
        .any(|(key, value)| key == "cluster-enabled" && value == "yes");
    if let (true, Some(timeout), Some(policy)) = (cluster, setting("cluster-node-timeout"), policy)
    {
        let needed = timeout.saturating_add(CLUSTER_WINDOW_MARGIN_MS);
        if policy.write_window_ms < needed {
            found.push(format!(
                "cluster-node-timeout {timeout} ms lets a primary cut off from most of its cluster take writes for up to {needed} ms, longer than the lock policy's write window of {} ms: raise it with `quorumlock admit --write-window-ms {needed}`",
                policy.write_window_ms
            ));
        }
    }
    if replicas.is_empty() {
        return found;
    }
    match (setting("min-replicas-to-write"), setting("min-replicas-max-lag")) {
        (Some(0), _) => found.push(
            "min-replicas-to-write is 0: a master cut off from its replica keeps granting after Sentinel or the cluster promoted the replica; set min-replicas-to-write 1 and min-replicas-max-lag"
                .to_string(),
        ),
        (Some(_), Some(lag)) => {
            let needed = Policy::write_window_for(lag);
            if let Some(policy) = policy.filter(|p| p.write_window_ms < needed) {
                found.push(format!(
                    "min-replicas-max-lag {lag} s lets an isolated master take writes for up to {needed} ms, longer than the lock policy's write window of {} ms: raise it with `quorumlock admit --write-window-ms {needed}`",
                    policy.write_window_ms
                ));
            }
        }
        _ => {}
    }
    found
}

/// Reads role and replicas from `INFO replication`.
fn parse_replication(text: &str) -> (Option<String>, Vec<ReplicaView>) {
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.trim().strip_prefix(name)?.strip_prefix(':'))
            .map(str::to_string)
    };
    let master_offset: Option<i64> = field("master_repl_offset").and_then(|v| v.parse().ok());
    let replicas = text
        .lines()
        .filter(|line| line.starts_with("slave") && line.contains("ip="))
        .map(|line| {
            let pairs: Vec<(&str, &str)> = line
                .split_once(':')
                .map(|(_, rest)| {
                    rest.trim()
                        .split(',')
                        .filter_map(|pair| pair.split_once('='))
                        .collect()
                })
                .unwrap_or_default();
            let get = |key: &str| pairs.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
            ReplicaView {
                address: format!(
                    "{}:{}",
                    get("ip").unwrap_or("?"),
                    get("port").unwrap_or("?")
                ),
                state: get("state").unwrap_or("unknown").to_string(),
                lag_s: get("lag").and_then(|v| v.parse().ok()),
                bytes_behind: get("offset")
                    .and_then(|v| v.parse::<i64>().ok())
                    .zip(master_offset)
                    .map(|(offset, master)| master - offset),
            }
        })
        .collect();
    (field("role"), replicas)
}

/// Asks each of the group's Sentinels which master it names.
async fn sentinel_views(group: &Group) -> Vec<SentinelView> {
    let Some(watched) = group.sentinels() else {
        return Vec::new();
    };
    let asks = watched.addresses.iter().map(|(host, port)| async move {
        let sentinel = format!("{host}:{port}");
        let answer = match group.sentinel_config(host, *port) {
            Some(config) => ask_sentinel(config, &watched.service)
                .await
                .map_err(|error| error.to_string()),
            None => Err("not a Sentinel-watched group".to_string()),
        };
        match answer {
            Ok(master) => SentinelView {
                sentinel,
                master: Some(master),
                error: None,
            },
            Err(error) => SentinelView {
                sentinel,
                master: None,
                error: Some(error),
            },
        }
    });
    futures::future::join_all(asks).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_node_timeout_longer_than_the_write_window_is_unsafe() {
        let config = |timeout: &str| {
            Reply::Answer(vec![
                ("cluster-enabled".to_string(), "yes".to_string()),
                ("cluster-node-timeout".to_string(), timeout.to_string()),
            ])
        };
        let policy = Some(Policy {
            max_ttl_ms: 60_000,
            write_window_ms: 12_000,
        });
        let found = unsafe_settings(&Admission::Voting, policy, &[], &config("15000"));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("--write-window-ms 16000"), "{found:?}");
        assert!(unsafe_settings(&Admission::Voting, policy, &[], &config("11000")).is_empty());
        // Not a cluster node: the node timeout says nothing.
        let plain = Reply::Answer(vec![
            ("cluster-enabled".to_string(), "no".to_string()),
            ("cluster-node-timeout".to_string(), "15000".to_string()),
        ]);
        assert!(unsafe_settings(&Admission::Voting, policy, &[], &plain).is_empty());
    }

    #[test]
    fn reads_replicas_and_their_lag() {
        let info = "# Replication\r\nrole:master\r\nconnected_slaves:1\r\nslave0:ip=127.0.0.1,port=6380,state=online,offset=90,lag=1\r\nmaster_repl_offset:100\r\n";
        let (role, replicas) = parse_replication(info);
        assert_eq!(role.as_deref(), Some("master"));
        assert_eq!(
            replicas,
            vec![ReplicaView {
                address: "127.0.0.1:6380".into(),
                state: "online".into(),
                lag_s: Some(1),
                bytes_behind: Some(10),
            }]
        );
    }
}
