//! Prometheus metrics of the MCP server, served as OpenMetrics text at `/metrics`: the
//! server's own (`quorumlock_mcp_*`: tool calls, acquires, keepalives, sessions), the state
//! of the quorum and of each group as the last scrape's health probe saw it
//! (`quorumlock_quorum_*`, `quorumlock_group_*`), and `quorumlock_build_info`.
//!
//! Labels are bounded: tool names come from the fixed tool list, outcomes from a fixed set,
//! groups from the topology, admission states from [`Admission`].

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};

use crate::{Admission, GroupVote, Health, Vote};

/// The `Content-Type` of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolCall {
    tool: String,
    /// `ok` or `error` (a tool error result).
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolName {
    tool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitName {
    /// The capacity field that was reached, e.g. `max_keepalive_per_session`.
    limit: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GroupName {
    group: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GroupState {
    group: String,
    /// One of [`ADMISSION_STATES`].
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Build {
    version: String,
}

/// Every value of the `state` label of `quorumlock_group_admission`: one series per group
/// and state, 1 for the group's current state and 0 for the others.
pub const ADMISSION_STATES: [&str; 6] = [
    "voting",
    "quarantined",
    "unadmitted",
    "no_policy",
    "evicts",
    "unknown",
];

fn admission_state(admission: &Admission) -> &'static str {
    match admission {
        Admission::Voting => "voting",
        Admission::Quarantined { .. } => "quarantined",
        Admission::Unadmitted => "unadmitted",
        Admission::NoPolicy => "no_policy",
        Admission::Evicts { .. } => "evicts",
        Admission::Unknown => "unknown",
    }
}

type Seconds = Gauge<f64, AtomicU64>;

/// The quorum and group series, set from a health probe.
struct ClusterMetrics {
    quorum_available: Gauge,
    quorum_needed: Gauge,
    groups: Gauge,
    groups_voting: Gauge,
    group_up: Family<GroupName, Gauge>,
    group_voting: Family<GroupName, Gauge>,
    group_admission: Family<GroupState, Gauge>,
    group_quarantine_remaining: Family<GroupName, Seconds>,
    group_quarantine_policy: Family<GroupName, Seconds>,
    group_latency: Family<GroupName, Seconds>,
}

impl ClusterMetrics {
    fn register(registry: &mut Registry) -> ClusterMetrics {
        let metrics = ClusterMetrics {
            quorum_available: Gauge::default(),
            quorum_needed: Gauge::default(),
            groups: Gauge::default(),
            groups_voting: Gauge::default(),
            group_up: Family::default(),
            group_voting: Family::default(),
            group_admission: Family::default(),
            group_quarantine_remaining: Family::default(),
            group_quarantine_policy: Family::default(),
            group_latency: Family::default(),
        };
        registry.register(
            "quorum_available",
            "1 when at least a majority of groups is reachable and votes: locks can be granted",
            metrics.quorum_available.clone(),
        );
        registry.register(
            "quorum_needed_groups",
            "Groups that must vote for a majority (N/2 + 1)",
            metrics.quorum_needed.clone(),
        );
        registry.register("groups", "Groups in the topology", metrics.groups.clone());
        registry.register(
            "groups_voting",
            "Groups reachable and voting",
            metrics.groups_voting.clone(),
        );
        registry.register(
            "group_up",
            "1 when the group's master answers a ping",
            metrics.group_up.clone(),
        );
        registry.register(
            "group_voting",
            "1 when the group is reachable and its master votes",
            metrics.group_voting.clone(),
        );
        registry.register(
            "group_admission",
            "1 for the admission state the group's master is in (voting, quarantined, unadmitted, no_policy, evicts, unknown), 0 for the others",
            metrics.group_admission.clone(),
        );
        registry.register_with_unit(
            "group_quarantine_remaining",
            "Time before a quarantined master votes again; 0 when it is not quarantined",
            Unit::Seconds,
            metrics.group_quarantine_remaining.clone(),
        );
        registry.register_with_unit(
            "group_quarantine_policy",
            "Length of a quarantine under the lock policy the group's master holds (max_ttl_ms + write_window_ms)",
            Unit::Seconds,
            metrics.group_quarantine_policy.clone(),
        );
        registry.register_with_unit(
            "group_ping_latency",
            "Round trip of the health probe's ping to the group's master",
            Unit::Seconds,
            metrics.group_latency.clone(),
        );
        metrics
    }

    fn record(&self, health: &Health) {
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        self.quorum_available
            .set(i64::from(health.quorum_available));
        self.quorum_needed.set(count(health.quorum));
        self.groups.set(count(health.groups.len()));
        self.groups_voting.set(count(health.voting));
        for group in &health.groups {
            let name = GroupName {
                group: group.group.clone(),
            };
            self.group_up
                .get_or_create(&name)
                .set(i64::from(group.reachable));
            self.group_voting
                .get_or_create(&name)
                .set(i64::from(group.votes()));
            let current = admission_state(&group.admission);
            for state in ADMISSION_STATES {
                self.group_admission
                    .get_or_create(&GroupState {
                        group: group.group.clone(),
                        state: state.to_string(),
                    })
                    .set(i64::from(state == current));
            }
            let remaining_ms = match group.admission {
                Admission::Quarantined { remaining_ms } => remaining_ms,
                _ => 0,
            };
            self.group_quarantine_remaining
                .get_or_create(&name)
                .set(seconds(remaining_ms));
            if let Some(policy) = group.policy {
                self.group_quarantine_policy
                    .get_or_create(&name)
                    .set(seconds(policy.quarantine_ms()));
            }
            match group.latency_ms {
                Some(ms) => {
                    self.group_latency.get_or_create(&name).set(ms / 1000.0);
                }
                // A group that does not answer has no latency, rather than its last one.
                None => {
                    self.group_latency.remove(&name);
                }
            }
        }
    }
}

fn seconds(ms: u64) -> f64 {
    Duration::from_millis(ms).as_secs_f64()
}

fn latency_histogram() -> Histogram {
    // 50 µs to ~1.6 s: loopback round trips up to a slow, waiting acquire.
    Histogram::new(exponential_buckets(0.000_05, 2.0, 16))
}

/// Every metric the server records.
pub struct Metrics {
    registry: Registry,
    cluster: ClusterMetrics,
    tool_calls: Family<ToolCall, Counter>,
    tool_duration: Family<ToolName, Histogram, fn() -> Histogram>,
    acquire_duration: Histogram,
    acquisitions: Counter,
    denials: Counter,
    quorum_failures: Counter,
    group_errors: Family<GroupName, Counter>,
    group_unsafe: Family<GroupName, Gauge>,
    keepalive_active: Gauge,
    keepalive_lost: Counter,
    keepalive_max_hold: Counter,
    sessions: Gauge,
    refusals: Family<LimitName, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut root = Registry::with_prefix("quorumlock");
        root.register(
            "build",
            "The running quorumlock's version",
            Info::new(Build {
                version: env!("CARGO_PKG_VERSION").to_string(),
            }),
        );
        let cluster = ClusterMetrics::register(&mut root);
        let registry = root.sub_registry_with_prefix("mcp");
        let tool_calls = Family::<ToolCall, Counter>::default();
        registry.register(
            "tool_calls",
            "Tool calls by tool and outcome",
            tool_calls.clone(),
        );
        let tool_duration = Family::<ToolName, Histogram, fn() -> Histogram>::new_with_constructor(
            latency_histogram,
        );
        registry.register_with_unit(
            "tool_call_duration",
            "Time to answer a tool call, by tool",
            Unit::Seconds,
            tool_duration.clone(),
        );
        let acquire_duration = latency_histogram();
        registry.register_with_unit(
            "acquire_duration",
            "Time the engine took to decide an acquire (granted, held or failed)",
            Unit::Seconds,
            acquire_duration.clone(),
        );
        let acquisitions = Counter::default();
        registry.register("acquisitions", "Locks granted", acquisitions.clone());
        let denials = Counter::default();
        registry.register(
            "denials",
            "Acquires refused because someone else holds the lock",
            denials.clone(),
        );
        let quorum_failures = Counter::default();
        registry.register(
            "quorum_failures",
            "Calls that failed because too few groups answered",
            quorum_failures.clone(),
        );
        let group_errors = Family::<GroupName, Counter>::default();
        registry.register(
            "group_errors",
            "Votes that were an error or a timeout, by group",
            group_errors.clone(),
        );
        let group_unsafe = Family::<GroupName, Gauge>::default();
        registry.register(
            "group_unsafe",
            "1 while a group's master has a setting that breaks a safety assumption (an eviction policy, unbounded writes after a partition): see cluster_health",
            group_unsafe.clone(),
        );
        let keepalive_active = Gauge::default();
        registry.register(
            "keepalive_leases",
            "Keepalive leases this server renews right now",
            keepalive_active.clone(),
        );
        let keepalive_lost = Counter::default();
        registry.register(
            "keepalive_lost",
            "Keepalive leases lost to a failed renewal",
            keepalive_lost.clone(),
        );
        let keepalive_max_hold = Counter::default();
        registry.register(
            "keepalive_max_hold",
            "Keepalive leases released because they reached max_hold_ms",
            keepalive_max_hold.clone(),
        );
        let sessions = Gauge::default();
        registry.register(
            "sessions",
            "HTTP sessions open right now (at most max_sessions)",
            sessions.clone(),
        );
        let refusals = Family::<LimitName, Counter>::default();
        registry.register(
            "refusals",
            "Sessions, keepalive leases and tool calls refused because a capacity limit was reached, by limit",
            refusals.clone(),
        );
        Metrics {
            registry: root,
            cluster,
            tool_calls,
            tool_duration,
            acquire_duration,
            acquisitions,
            denials,
            quorum_failures,
            group_errors,
            group_unsafe,
            keepalive_active,
            keepalive_lost,
            keepalive_max_hold,
            sessions,
            refusals,
        }
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)?;
        Ok(text)
    }

    /// Sets the quorum and group series from a health probe.
    pub fn record_health(&self, health: &Health) {
        self.cluster.record(health);
    }

    pub(crate) fn tool_call(&self, tool: &str, ok: bool, elapsed: Duration) {
        let outcome = if ok { "ok" } else { "error" };
        self.tool_calls
            .get_or_create(&ToolCall {
                tool: tool.to_string(),
                outcome: outcome.to_string(),
            })
            .inc();
        self.tool_duration
            .get_or_create(&ToolName {
                tool: tool.to_string(),
            })
            .observe(elapsed.as_secs_f64());
    }

    pub(crate) fn acquire_decided(&self, elapsed: Duration) {
        self.acquire_duration.observe(elapsed.as_secs_f64());
    }

    pub(crate) fn acquired(&self) {
        self.acquisitions.inc();
    }

    pub(crate) fn denied(&self) {
        self.denials.inc();
    }

    pub(crate) fn quorum_failed(&self) {
        self.quorum_failures.inc();
    }

    /// Counts every failed vote against its group; a master that refused to vote because it
    /// may evict keys is flagged unsafe.
    pub(crate) fn votes(&self, votes: &[GroupVote]) {
        for vote in votes.iter().filter(|vote| vote.vote.is_failure()) {
            self.group_error(&vote.group);
            if matches!(vote.vote, Vote::Evicts { .. }) {
                self.group_unsafe(&vote.group, true);
            }
        }
    }

    /// Whether a group's master has a setting that breaks a safety assumption.
    pub(crate) fn group_unsafe(&self, group: &str, flagged: bool) {
        self.group_unsafe
            .get_or_create(&GroupName {
                group: group.to_string(),
            })
            .set(i64::from(flagged));
    }

    pub(crate) fn group_error(&self, group: &str) {
        self.group_errors
            .get_or_create(&GroupName {
                group: group.to_string(),
            })
            .inc();
    }

    pub(crate) fn keepalive_started(&self) {
        self.keepalive_active.inc();
    }

    pub(crate) fn keepalive_stopped(&self) {
        self.keepalive_active.dec();
    }

    pub(crate) fn keepalive_lost(&self) {
        self.keepalive_lost.inc();
    }

    pub(crate) fn keepalive_max_hold(&self) {
        self.keepalive_max_hold.inc();
    }

    pub(crate) fn sessions(&self, open: usize) {
        self.sessions.set(i64::try_from(open).unwrap_or(i64::MAX));
    }

    /// A request refused at the capacity limit `limit` (a [`crate::mcp::Capacity`] field).
    pub(crate) fn refused(&self, limit: &str) {
        self.refusals
            .get_or_create(&LimitName {
                limit: limit.to_string(),
            })
            .inc();
    }
}
