//! The health of every group as an operator needs it: reachability and latency, the master
//! the engine talks to and what each Sentinel names, role, replicas and their lag, and
//! whether the master votes or sits out its quarantine.

use fred::types::{InfoKind, Value};
use serde::Serialize;

use crate::engine::admission::describe;
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
    /// Reachable and voting: in acknowledged mode, with every replica its policy names
    /// online.
    pub fn votes(&self) -> bool {
        self.reachable
            && matches!(self.admission, Admission::Voting | Admission::Unadmitted)
            && self.replicas_missing().is_none()
    }

    /// In acknowledged mode, the replicas online of those the policy names, when fewer (or
    /// more) are connected: the master then does not vote.
    pub fn replicas_missing(&self) -> Option<(usize, u32)> {
        let needed = self.policy.map_or(0, |policy| policy.acked_replicas);
        let online = self.replicas.iter().filter(|r| r.state == "online").count();
        (needed > 0 && (online != needed as usize || self.replicas.len() != needed as usize))
            .then_some((online, needed))
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
        read_write_settings(group),
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
    let unsafe_settings = unsafe_settings(&admission, policy, &config);
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
            acked_replicas: number(5).and_then(|n| u32::try_from(n).ok()).unwrap_or(0),
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

/// The settings `health` and `admit` read on a group's master (on each primary of a Cluster
/// group).
pub(crate) const WRITE_SETTINGS: [&str; 4] = [
    "min-replicas-to-write",
    "min-replicas-max-lag",
    "cluster-enabled",
    "cluster-node-timeout",
];

/// A master setting that bounds how long an old master cut off from its replicas, or from
/// most of its cluster, goes on taking writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum WindowSetting {
    #[serde(rename = "min-replicas-max-lag")]
    MinReplicasMaxLag,
    #[serde(rename = "cluster-node-timeout")]
    ClusterNodeTimeout,
}

impl WindowSetting {
    /// The name Redis gives it.
    pub fn name(self) -> &'static str {
        match self {
            WindowSetting::MinReplicasMaxLag => "min-replicas-max-lag",
            WindowSetting::ClusterNodeTimeout => "cluster-node-timeout",
        }
    }

    /// The unit of its value.
    fn unit(self) -> &'static str {
        match self {
            WindowSetting::MinReplicasMaxLag => "s",
            WindowSetting::ClusterNodeTimeout => "ms",
        }
    }
}

impl std::fmt::Display for WindowSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A master setting at 0 that lets a master with replicas take writes without them: Redis
/// checks the replicas only when both `min-replicas-to-write` and `min-replicas-max-lag`
/// are above 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ReplicaSetting {
    #[serde(rename = "min-replicas-to-write")]
    MinReplicasToWrite,
    #[serde(rename = "min-replicas-max-lag")]
    MinReplicasMaxLag,
}

impl std::fmt::Display for ReplicaSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ReplicaSetting::MinReplicasToWrite => "min-replicas-to-write",
            ReplicaSetting::MinReplicasMaxLag => "min-replicas-max-lag",
        })
    }
}

/// One setting that bounds the write window, its value, and the window it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WindowBound {
    pub(crate) setting: WindowSetting,
    pub(crate) value: u64,
    pub(crate) needed_ms: u64,
}

/// What a group's master runs that decides how long it may take writes once cut off from
/// its replicas or its cluster: read from `CONFIG GET` ([`WRITE_SETTINGS`]) and whether
/// `INFO replication` lists replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WriteSettings {
    pub(crate) replicas: bool,
    /// The replicas the master lists.
    pub(crate) replica_count: usize,
    min_replicas_to_write: Option<u64>,
    min_replicas_max_lag_s: Option<u64>,
    /// Only on a Cluster node.
    cluster_node_timeout_ms: Option<u64>,
}

impl WriteSettings {
    pub(crate) fn read(config: &[(String, String)], replica_count: usize) -> Self {
        let setting = |name: &str| {
            config
                .iter()
                .find(|(key, _)| key == name)
                .and_then(|(_, value)| value.parse::<u64>().ok())
        };
        let cluster = config
            .iter()
            .any(|(key, value)| key == "cluster-enabled" && value == "yes");
        WriteSettings {
            replicas: replica_count > 0,
            replica_count,
            min_replicas_to_write: setting("min-replicas-to-write"),
            min_replicas_max_lag_s: setting("min-replicas-max-lag"),
            cluster_node_timeout_ms: setting("cluster-node-timeout").filter(|_| cluster),
        }
    }

    /// Whether the master is a Cluster node.
    pub(crate) fn is_cluster(&self) -> bool {
        self.cluster_node_timeout_ms.is_some()
    }

    /// The setting at 0 that lets a master with replicas take writes without them, with no
    /// end once Sentinel or the cluster promoted one.
    pub(crate) fn unreplicated(&self) -> Option<ReplicaSetting> {
        if !self.replicas {
            return None;
        }
        match (self.min_replicas_to_write, self.min_replicas_max_lag_s) {
            (Some(0), _) => Some(ReplicaSetting::MinReplicasToWrite),
            (Some(_), Some(0)) => Some(ReplicaSetting::MinReplicasMaxLag),
            _ => None,
        }
    }

    /// Each setting that bounds the write window, with the window it needs.
    pub(crate) fn bounds(&self) -> Vec<WindowBound> {
        let mut bounds = Vec::new();
        if let Some(timeout) = self.cluster_node_timeout_ms {
            bounds.push(WindowBound {
                setting: WindowSetting::ClusterNodeTimeout,
                value: timeout,
                needed_ms: timeout.saturating_add(CLUSTER_WINDOW_MARGIN_MS),
            });
        }
        if let (true, None, Some(lag)) = (
            self.replicas,
            self.unreplicated(),
            self.min_replicas_max_lag_s,
        ) {
            bounds.push(WindowBound {
                setting: WindowSetting::MinReplicasMaxLag,
                value: lag,
                needed_ms: Policy::write_window_for(lag),
            });
        }
        bounds
    }

    /// The smallest write window that covers every bound (0 for a master without replicas
    /// outside a cluster).
    pub(crate) fn needed_window_ms(&self) -> u64 {
        self.bounds()
            .iter()
            .map(|bound| bound.needed_ms)
            .max()
            .unwrap_or(0)
    }
}

/// One master's (one Cluster primary's) [`WriteSettings`], named by its address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PrimarySettings {
    pub(crate) primary: String,
    pub(crate) settings: WriteSettings,
}

/// The write settings of every master of a group, one per Cluster primary: a setting is
/// only safe together with the other settings and the replicas of the same primary, so they
/// are never merged per setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GroupSettings {
    pub(crate) primaries: Vec<PrimarySettings>,
}

impl GroupSettings {
    /// The first primary that takes writes without its replicas, and the setting at 0.
    pub(crate) fn unreplicated(&self) -> Option<(&str, ReplicaSetting)> {
        self.primaries.iter().find_map(|primary| {
            primary
                .settings
                .unreplicated()
                .map(|setting| (primary.primary.as_str(), setting))
        })
    }

    /// For each setting that bounds the write window, the primary that needs the largest
    /// window for it.
    pub(crate) fn bounds(&self) -> Vec<(&str, WindowBound)> {
        let mut weakest: Vec<(&str, WindowBound)> = Vec::new();
        for primary in &self.primaries {
            for bound in primary.settings.bounds() {
                match weakest
                    .iter_mut()
                    .find(|(_, seen)| seen.setting == bound.setting)
                {
                    Some(kept) if kept.1.needed_ms >= bound.needed_ms => {}
                    Some(kept) => *kept = (primary.primary.as_str(), bound),
                    None => weakest.push((primary.primary.as_str(), bound)),
                }
            }
        }
        weakest
    }

    /// The smallest write window that covers what every primary needs.
    pub(crate) fn needed_window_ms(&self) -> u64 {
        self.primaries
            .iter()
            .map(|primary| primary.settings.needed_window_ms())
            .max()
            .unwrap_or(0)
    }
}

/// Why a group's write settings could not be read, naming the master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unread {
    pub(crate) reason: String,
    /// The master answered with an error (an ACL without CONFIG GET, say), rather than not
    /// answering: only then is it a setting problem rather than a group that is down.
    pub(crate) refused: bool,
}

impl std::fmt::Display for Unread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

/// Reads a group's [`GroupSettings`] with `CONFIG GET` ([`WRITE_SETTINGS`]) and
/// `INFO replication` on each master: the one reading both `health` and `admit` use. Any
/// primary that does not answer makes the whole reading fail, naming it.
pub(crate) async fn read_write_settings(group: &Group) -> Result<GroupSettings, Unread> {
    let readings = match group.primary_settings(&WRITE_SETTINGS).await {
        Reply::Answer(readings) => readings,
        other => {
            return Err(Unread {
                reason: describe(&other),
                refused: matches!(other, Reply::Failed(_)),
            });
        }
    };
    let mut primaries = Vec::with_capacity(readings.len());
    for reading in readings {
        let unread = |what: &str, reply: &Reply<()>| Unread {
            reason: format!("{what} on {}: {}", reading.address, describe(reply)),
            refused: matches!(reply, Reply::Failed(_)),
        };
        let config = match reading.config {
            Reply::Answer(config) => config,
            other => return Err(unread("CONFIG GET", &other.map(|_| ()))),
        };
        let replicas = match reading.info {
            Reply::Answer(text) => parse_replication(&text).1.len(),
            other => return Err(unread("INFO replication", &other.map(|_| ()))),
        };
        primaries.push(PrimarySettings {
            settings: WriteSettings::read(&config, replicas),
            primary: reading.address,
        });
    }
    Ok(GroupSettings { primaries })
}

/// The settings of a master that break an assumption of docs/safety.md; a Cluster group
/// shows each problem of its weakest primary, naming it.
fn unsafe_settings(
    admission: &Admission,
    policy: Option<Policy>,
    settings: &Result<GroupSettings, Unread>,
) -> Vec<String> {
    let mut found = Vec::new();
    if let Admission::Evicts { maxmemory_policy } = admission {
        found.push(format!(
            "maxmemory-policy {maxmemory_policy} with maxmemory set may evict a live lock or fence: set maxmemory-policy noeviction (the master does not vote until then)"
        ));
    }
    // In acknowledged mode a master cut off from its replicas gets no vote counted, so how
    // long it goes on taking writes does not matter.
    if policy.is_some_and(|policy| policy.acked_replicas > 0) {
        return found;
    }
    let settings = match settings {
        Ok(settings) => settings,
        // Refused (an ACL without CONFIG GET, say): nothing shows whether the write window
        // is bounded. A group that does not answer shows as down instead.
        Err(Unread {
            reason,
            refused: true,
        }) => {
            found.push(format!(
                "cannot read {} ({reason}), so nothing shows how long a master cut off from its replicas takes writes: let this client run CONFIG GET, or check them by hand",
                WRITE_SETTINGS.join(", ")
            ));
            return found;
        }
        Err(_) => return found,
    };
    match settings.unreplicated() {
        Some((primary, ReplicaSetting::MinReplicasToWrite)) => found.push(format!(
            "min-replicas-to-write is 0 on {primary}: a master cut off from its replica keeps granting after Sentinel or the cluster promoted the replica; set min-replicas-to-write 1 and min-replicas-max-lag"
        )),
        Some((primary, ReplicaSetting::MinReplicasMaxLag)) => found.push(format!(
            "min-replicas-max-lag is 0 on {primary}, which turns min-replicas-to-write off: a master cut off from its replica keeps granting after Sentinel or the cluster promoted the replica; set min-replicas-max-lag 10"
        )),
        None => {}
    }
    let Some(policy) = policy else {
        return found;
    };
    for (primary, bound) in settings.bounds() {
        if policy.write_window_ms >= bound.needed_ms {
            continue;
        }
        let WindowBound {
            setting,
            value,
            needed_ms,
        } = bound;
        let unit = setting.unit();
        found.push(match setting {
            WindowSetting::ClusterNodeTimeout => format!(
                "{setting} {value} {unit} on {primary} lets a primary cut off from most of its cluster take writes for up to {needed_ms} ms, longer than the lock policy's write window of {} ms: raise it with `quorumlock admit --write-window-ms {needed_ms}`",
                policy.write_window_ms
            ),
            WindowSetting::MinReplicasMaxLag => format!(
                "{setting} {value} {unit} on {primary} lets an isolated master take writes for up to {needed_ms} ms, longer than the lock policy's write window of {} ms: raise it with `quorumlock admit --write-window-ms {needed_ms}`",
                policy.write_window_ms
            ),
        });
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

    fn primary(address: &str, pairs: &[(&str, &str)], replicas: bool) -> PrimarySettings {
        let config: Vec<(String, String)> = pairs
            .iter()
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect();
        PrimarySettings {
            primary: address.to_string(),
            settings: WriteSettings::read(&config, usize::from(replicas)),
        }
    }

    #[test]
    fn a_cluster_node_timeout_longer_than_the_write_window_is_unsafe() {
        let config = |timeout: &str| {
            Ok(GroupSettings {
                primaries: vec![primary(
                    "a:1",
                    &[
                        ("cluster-enabled", "yes"),
                        ("cluster-node-timeout", timeout),
                    ],
                    false,
                )],
            })
        };
        let policy = Some(Policy {
            max_ttl_ms: 60_000,
            write_window_ms: 12_000,
            acked_replicas: 0,
        });
        let found = unsafe_settings(&Admission::Voting, policy, &config("15000"));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("--write-window-ms 16000"), "{found:?}");
        assert!(unsafe_settings(&Admission::Voting, policy, &config("11000")).is_empty());
        // Not a cluster node: the node timeout says nothing.
        let plain = Ok(GroupSettings {
            primaries: vec![primary(
                "a:1",
                &[("cluster-enabled", "no"), ("cluster-node-timeout", "15000")],
                false,
            )],
        });
        assert!(unsafe_settings(&Admission::Voting, policy, &plain).is_empty());
    }

    #[test]
    fn a_cluster_group_shows_its_weakest_primarys_problem_naming_it() {
        let cluster = |lag: &'static str| {
            [
                ("min-replicas-to-write", "1"),
                ("min-replicas-max-lag", lag),
                ("cluster-enabled", "yes"),
                ("cluster-node-timeout", "1000"),
            ]
        };
        // A lag of 0 on one primary is not hidden by a larger lag on another, and the
        // first primary having no replica does not hide the others'.
        let settings = GroupSettings {
            primaries: vec![
                primary("a:1", &cluster("10"), false),
                primary("b:2", &cluster("10"), true),
                primary("c:3", &cluster("0"), true),
            ],
        };
        assert_eq!(
            settings.unreplicated(),
            Some(("c:3", ReplicaSetting::MinReplicasMaxLag))
        );
        assert_eq!(settings.needed_window_ms(), Policy::write_window_for(10));
        let policy = Some(Policy {
            max_ttl_ms: 60_000,
            write_window_ms: 2_000,
            acked_replicas: 0,
        });
        let found = unsafe_settings(&Admission::Voting, policy, &Ok(settings));
        assert!(found[0].contains("is 0 on c:3"), "{found:?}");
        assert!(
            found
                .iter()
                .any(|s| s.contains("min-replicas-max-lag 10 s on b:2")),
            "{found:?}"
        );
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
