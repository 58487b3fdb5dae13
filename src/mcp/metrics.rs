//! Prometheus metrics of the MCP server, served as OpenMetrics text at `/metrics`.
//!
//! Labels are bounded: tool names come from the fixed tool list, outcomes from a fixed set,
//! groups from the topology.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

use crate::{GroupVote, Vote};

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

fn latency_histogram() -> Histogram {
    // 50 µs to ~1.6 s: loopback round trips up to a slow, waiting acquire.
    Histogram::new(exponential_buckets(0.000_05, 2.0, 16))
}

/// Every metric the server records.
pub struct Metrics {
    registry: Registry,
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
        let mut registry = Registry::with_prefix("quorumlock_mcp");
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
            registry,
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
