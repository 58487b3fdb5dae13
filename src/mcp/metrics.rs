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
use prometheus_client::registry::{Metric, Registry, Unit};

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
        ClusterMetrics {
            quorum_available: QUORUM_AVAILABLE.add(registry),
            quorum_needed: QUORUM_NEEDED_GROUPS.add(registry),
            groups: GROUPS.add(registry),
            groups_voting: GROUPS_VOTING.add(registry),
            group_up: GROUP_UP.add(registry),
            group_voting: GROUP_VOTING.add(registry),
            group_admission: GROUP_ADMISSION.add(registry),
            group_quarantine_remaining: GROUP_QUARANTINE_REMAINING.add(registry),
            group_quarantine_policy: GROUP_QUARANTINE_POLICY.add(registry),
            group_latency: GROUP_PING_LATENCY.add(registry),
        }
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

/// One metric's registration: its name (under the registry's prefix), unit and help.
struct Spec {
    name: &'static str,
    unit: Option<Unit>,
    help: &'static str,
}

impl Spec {
    const fn plain(name: &'static str, help: &'static str) -> Spec {
        Spec {
            name,
            unit: None,
            help,
        }
    }

    const fn seconds(name: &'static str, help: &'static str) -> Spec {
        Spec {
            name,
            unit: Some(Unit::Seconds),
            help,
        }
    }

    /// Registers a new metric under this spec and returns the handle the server records
    /// through.
    fn add<M: Metric + Clone + Default>(&self, registry: &mut Registry) -> M {
        self.add_metric(registry, M::default())
    }

    /// [`Spec::add`] for a metric that is not built by `Default` (a histogram, or a family of
    /// them).
    fn add_metric<M: Metric + Clone>(&self, registry: &mut Registry, metric: M) -> M {
        match &self.unit {
            Some(unit) => {
                registry.register_with_unit(self.name, self.help, unit.clone(), metric.clone())
            }
            None => registry.register(self.name, self.help, metric.clone()),
        }
        metric
    }
}

// The registration table: every metric's name, unit and help, in the order `/metrics` lists
// them (the quorum and group series first, then the server's own under `mcp_`).
const QUORUM_AVAILABLE: Spec = Spec::plain(
    "quorum_available",
    "1 when at least a majority of groups is reachable and votes: locks can be granted",
);
const QUORUM_NEEDED_GROUPS: Spec = Spec::plain(
    "quorum_needed_groups",
    "Groups that must vote for a majority (N/2 + 1)",
);
const GROUPS: Spec = Spec::plain("groups", "Groups in the topology");
const GROUPS_VOTING: Spec = Spec::plain("groups_voting", "Groups reachable and voting");
const GROUP_UP: Spec = Spec::plain("group_up", "1 when the group's master answers a ping");
const GROUP_VOTING: Spec = Spec::plain(
    "group_voting",
    "1 when the group is reachable and its master votes",
);
const GROUP_ADMISSION: Spec = Spec::plain(
    "group_admission",
    "1 for the admission state the group's master is in (voting, quarantined, unadmitted, no_policy, evicts, unknown), 0 for the others",
);
const GROUP_QUARANTINE_REMAINING: Spec = Spec::seconds(
    "group_quarantine_remaining",
    "Time before a quarantined master votes again; 0 when it is not quarantined",
);
const GROUP_QUARANTINE_POLICY: Spec = Spec::seconds(
    "group_quarantine_policy",
    "Length of a quarantine under the lock policy the group's master holds (max_ttl_ms + write_window_ms)",
);
const GROUP_PING_LATENCY: Spec = Spec::seconds(
    "group_ping_latency",
    "Round trip of the health probe's ping to the group's master",
);
const ACQUISITIONS: Spec = Spec::plain("acquisitions", "Locks granted");
const DENIALS: Spec = Spec::plain(
    "denials",
    "Acquires refused because someone else holds the lock",
);
const QUORUM_FAILURES: Spec = Spec::plain(
    "quorum_failures",
    "Calls that failed because too few groups answered",
);
const GROUP_ERRORS: Spec = Spec::plain(
    "group_errors",
    "Votes that were an error or a timeout, by group",
);
const GROUP_UNSAFE: Spec = Spec::plain(
    "group_unsafe",
    "1 while a group's master has a setting that breaks a safety assumption (an eviction policy, unbounded writes after a partition): see cluster_health",
);
const KEEPALIVE_LEASES: Spec = Spec::plain(
    "keepalive_leases",
    "Keepalive leases this server renews right now",
);
const KEEPALIVE_LOST: Spec = Spec::plain(
    "keepalive_lost",
    "Keepalive leases lost to a failed renewal",
);
const KEEPALIVE_MAX_HOLD: Spec = Spec::plain(
    "keepalive_max_hold",
    "Keepalive leases released because they reached max_hold_ms",
);
const SESSIONS: Spec = Spec::plain(
    "sessions",
    "HTTP sessions open right now (at most max_sessions)",
);
const REFUSALS: Spec = Spec::plain(
    "refusals",
    "Sessions, keepalive leases and tool calls refused because a capacity limit was reached, by limit",
);
const TOOL_CALLS: Spec = Spec::plain("tool_calls", "Tool calls by tool and outcome");
const TOOL_CALL_DURATION: Spec =
    Spec::seconds("tool_call_duration", "Time to answer a tool call, by tool");
const ACQUIRE_DURATION: Spec = Spec::seconds(
    "acquire_duration",
    "Time the engine took to decide an acquire (granted, held or failed)",
);

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
        let tool_calls = TOOL_CALLS.add(registry);
        let tool_duration = TOOL_CALL_DURATION.add_metric(
            registry,
            Family::<ToolName, Histogram, fn() -> Histogram>::new_with_constructor(
                latency_histogram,
            ),
        );
        let acquire_duration = ACQUIRE_DURATION.add_metric(registry, latency_histogram());
        Metrics {
            cluster,
            tool_calls,
            tool_duration,
            acquire_duration,
            acquisitions: ACQUISITIONS.add(registry),
            denials: DENIALS.add(registry),
            quorum_failures: QUORUM_FAILURES.add(registry),
            group_errors: GROUP_ERRORS.add(registry),
            group_unsafe: GROUP_UNSAFE.add(registry),
            keepalive_active: KEEPALIVE_LEASES.add(registry),
            keepalive_lost: KEEPALIVE_LOST.add(registry),
            keepalive_max_hold: KEEPALIVE_MAX_HOLD.add(registry),
            sessions: SESSIONS.add(registry),
            refusals: REFUSALS.add(registry),
            // Last: the sub-registry above borrows it until here.
            registry: root,
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
