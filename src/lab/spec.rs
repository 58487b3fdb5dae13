//! What a lab starts ([`LabSpec`]): its shape, ports, security and lock policy, and the
//! checks that refuse a spec that cannot work.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{ClusterShape, LabError, MAX_NODES};
use crate::protocol::Policy;

/// What to start. [`LabSpec::new`] gives five groups of master + replica under three Sentinels.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LabSpec {
    /// Number of master groups, named g1..gN.
    pub groups: usize,
    /// Replicas per group.
    pub replicas: usize,
    /// Sentinels watching every group; 0 starts plain masters that clients reach directly.
    pub sentinels: usize,
    /// First port of a consecutive block (layout in the module docs); `None` uses free ports.
    pub base_port: Option<u16>,
    /// Where configs, logs, `lab.json` and `quorumlock.toml` go.
    pub dir: PathBuf,
    /// Silence after which a Sentinel calls a master down.
    pub down_after_ms: u64,
    /// Sentinel failover timeout; also how long before a failed failover is retried.
    pub failover_timeout_ms: u64,
    /// Password every node (and Sentinel) requires; written into the topology.
    #[serde(default)]
    pub password: Option<String>,
    /// TLS only, with mutual authentication, under a CA generated in `<dir>/tls/`.
    #[serde(default)]
    pub tls: bool,
    /// The longest TTL the masters grant: the lock policy they are admitted under, and the
    /// topology's `max_ttl_ms`.
    #[serde(default = "default_max_ttl_ms")]
    pub max_ttl_ms: u64,
    /// With replicas: `min-replicas-to-write 1` and this `min-replicas-max-lag` (seconds) on
    /// every data node, so a master cut off from its replica stops taking writes within a
    /// bounded window that the policy's quarantine covers ([`LabSpec::new`]:
    /// [`LAB_MIN_REPLICAS_MAX_LAG_S`]). A master whose replicas are all gone then refuses
    /// writes (`NOREPLICAS`): a promoted replica takes writes once it has a replica again
    /// ([`Lab::rejoin`]). `None` leaves the window unbounded, which `health` flags: for
    /// labs that need that unsafe shape.
    #[serde(default)]
    pub min_replicas_max_lag_s: Option<u64>,
    /// A relay in front of every data node, so that links can be cut and slowed
    /// ([`Lab::partition`], [`Lab::heal`], [`Lab::slow`]); layout in the module docs. Not
    /// with TLS: the relay tells links apart by the commands they carry.
    #[serde(default)]
    pub links: bool,
    /// The `quorumlock` executable that runs each relay (`quorumlock lab relay`); required
    /// with `links`. The CLI passes itself; tests pass `env!("CARGO_BIN_EXE_quorumlock")`.
    #[serde(default)]
    pub binary: Option<PathBuf>,
    /// Each group a Redis Cluster of this shape instead of a master watched by Sentinels
    /// (module docs, "Cluster labs"); needs `sentinels: 0`, and neither links nor TLS.
    /// `replicas` is then the number of replicas of each shard's primary.
    #[serde(default)]
    pub cluster: Option<ClusterShape>,
    /// Acknowledged mode: the masters' policy names their replicas, every one of which
    /// acknowledges a grant before it counts, and a promoted replica votes at once
    /// (docs/safety.md, "Acknowledged mode"). Needs replicas and Sentinel groups.
    #[serde(default)]
    pub acknowledged: bool,
}

/// The lab's `min-replicas-max-lag`: short, so the write window (and with it a promoted
/// replica's quarantine) stays short, and a whole second above the replicas' once-a-second
/// acknowledgements.
pub const LAB_MIN_REPLICAS_MAX_LAG_S: u64 = 1;

fn default_max_ttl_ms() -> u64 {
    crate::DEFAULT_MAX_TTL_MS
}

impl LabSpec {
    /// Five groups, one replica each, three Sentinels, free ports, fast failure detection,
    /// and masters that stop taking writes within a second of losing their replica.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        LabSpec {
            groups: 5,
            replicas: 1,
            sentinels: 3,
            base_port: None,
            dir: dir.into(),
            down_after_ms: 500,
            failover_timeout_ms: 2000,
            password: None,
            tls: false,
            max_ttl_ms: crate::DEFAULT_MAX_TTL_MS,
            min_replicas_max_lag_s: Some(LAB_MIN_REPLICAS_MAX_LAG_S),
            links: false,
            binary: None,
            cluster: None,
            acknowledged: false,
        }
    }

    /// Whether its masters take writes only while a replica acknowledges them
    /// (`min-replicas-to-write 1`).
    pub(super) fn writes_need_replica(&self) -> bool {
        self.replicas > 0 && self.min_replicas_max_lag_s.is_some()
    }

    /// Shards per group: 1 unless the groups are Redis Clusters.
    pub(super) fn shards(&self) -> usize {
        self.cluster.map_or(1, |shape| shape.shards)
    }

    /// The lock policy the lab admits its masters under.
    pub fn policy(&self) -> Policy {
        let mut write_window_ms = match self.min_replicas_max_lag_s {
            Some(lag) if self.replicas > 0 => Policy::write_window_for(lag),
            _ => 0,
        };
        // A Cluster primary cut off from most of the others takes writes until its node
        // timeout runs out, and a second more covers the cron that notices (as `health`
        // checks).
        if self.cluster.is_some() {
            write_window_ms = write_window_ms.max(self.down_after_ms.saturating_add(1_000));
        }
        Policy {
            max_ttl_ms: self.max_ttl_ms,
            write_window_ms,
            acked_replicas: if self.acknowledged {
                u32::try_from(self.replicas).unwrap_or(u32::MAX)
            } else {
                0
            },
        }
    }

    pub(super) fn node_count(&self) -> usize {
        self.data_node_count() + self.sentinels
    }

    pub(super) fn data_node_count(&self) -> usize {
        self.groups * self.shards() * (1 + self.replicas)
    }

    /// Ports the lab takes: one per process, with links a real port and a control port
    /// more per data node, and in a cluster lab a bus port more per node.
    pub(super) fn port_count(&self) -> usize {
        let relays = if self.links {
            self.data_node_count()
        } else {
            0
        };
        let buses = if self.cluster.is_some() {
            self.data_node_count()
        } else {
            0
        };
        self.node_count() + 2 * relays + buses
    }

    /// Processes the lab starts, relays included.
    pub(super) fn process_count(&self) -> usize {
        let relays = if self.links {
            self.data_node_count()
        } else {
            0
        };
        self.node_count() + relays
    }

    pub(super) fn validate(&self) -> Result<(), LabError> {
        let invalid = |message: String| Err(LabError::InvalidSpec(message));
        if self.groups == 0 {
            return invalid("groups must be at least 1 (5 is the usual quorum setup)".into());
        }
        self.validate_cluster()?;
        if self.process_count() > MAX_NODES {
            let relays = if self.links { " (+ a relay each)" } else { "" };
            return invalid(format!(
                "{} groups x (1 + {} replicas){relays} + {} Sentinels is {} processes; the lab allows at most {MAX_NODES}",
                self.groups,
                self.replicas,
                self.sentinels,
                self.process_count()
            ));
        }
        self.validate_links()?;
        if self.min_replicas_max_lag_s == Some(0) {
            return invalid(
                "min_replicas_max_lag_s must be above 0: Redis turns min-replicas-to-write off at a lag of 0 (leave it unset to opt out)"
                    .into(),
            );
        }
        if self.down_after_ms == 0 || self.failover_timeout_ms == 0 {
            return invalid("down_after_ms and failover_timeout_ms must be above 0".into());
        }
        // Redis config files and AUTH split on whitespace; quotes would survive as text.
        if let Some(password) = &self.password
            && (password.is_empty()
                || password
                    .chars()
                    .any(|c| c.is_whitespace() || c.is_control() || c == '"' || c == '\\'))
        {
            return invalid(
                "the password must be non-empty, without spaces, quotes, backslashes or control characters"
                    .into(),
            );
        }
        Ok(())
    }

    /// A cluster lab: a valid shape, no Sentinels, links or TLS, and not too many nodes.
    fn validate_cluster(&self) -> Result<(), LabError> {
        let invalid = |message: String| Err(LabError::InvalidSpec(message));
        let Some(shape) = self.cluster else {
            return Ok(());
        };
        shape.validate()?;
        if self.sentinels > 0 {
            return invalid(format!(
                "a cluster lab has no Sentinels (each cluster fails over by itself); set sentinels to 0, not {}",
                self.sentinels
            ));
        }
        if self.links || self.tls {
            return invalid(
                "a cluster lab takes neither links nor tls: its nodes announce their own ports on a plain cluster bus"
                    .into(),
            );
        }
        if self.process_count() > MAX_NODES {
            return invalid(format!(
                "{} groups x {} shards x (1 + {} replicas) is {} processes; the lab allows at most {MAX_NODES}",
                self.groups,
                shape.shards,
                self.replicas,
                self.process_count()
            ));
        }
        Ok(())
    }

    /// A lab with links: no TLS, and the quorumlock executable to run the relays.
    fn validate_links(&self) -> Result<(), LabError> {
        let invalid = |message: String| Err(LabError::InvalidSpec(message));
        if !self.links {
            return Ok(());
        }
        if self.tls {
            return invalid(
                "links cannot be combined with tls: the relays tell clients, replicas and Sentinels apart by the commands they send, which TLS hides"
                    .into(),
            );
        }
        match &self.binary {
            None => {
                return invalid(
                    "binary must name the quorumlock executable when links is set: it runs the relay in front of every node (`quorumlock lab relay`)"
                        .into(),
                );
            }
            Some(binary) if !binary.is_file() => {
                return invalid(format!(
                    "binary {} (the quorumlock executable that runs the relays) is not a file",
                    binary.display()
                ));
            }
            Some(_) => {}
        }
        Ok(())
    }
}
