//! The lab's layout and configs: which node gets which name and ports (the order in the module
//! docs), and the config text of every master, replica and Sentinel, including the listening
//! lines of a TLS lab, the ids Sentinels are pre-seeded with, and, in a lab with links, the
//! public ports (relays) that replicas, Sentinels and clients are pointed at. A cluster lab
//! has its own layout and config lines ([`cluster_layout`], `cluster_conf`).

use std::path::Path;

use super::certificates::TLS_DIR;
use super::{LabError, LabSpec, NodeKind};

/// The ports of a data node's relay in a lab with links.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RelayPorts {
    /// Where the relay listens: the port replicas, Sentinels and clients use.
    pub(super) public: u16,
    /// Where the relay takes its one-line control commands.
    pub(super) control: u16,
}

/// Where a node of a cluster lab sits: its shard, and the port of its cluster bus.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ClusterPorts {
    /// 0-based shard of its group.
    pub(super) shard: usize,
    /// Where it talks to the other nodes of its cluster (`cluster-port`).
    pub(super) bus: u16,
}

/// A node about to be started.
pub(super) struct Slot {
    pub(super) name: String,
    pub(super) group: Option<usize>,
    pub(super) kind: NodeKind,
    /// Where the process itself listens.
    pub(super) port: u16,
    /// The relay in front of a data node of a lab with links.
    pub(super) relay: Option<RelayPorts>,
    /// Shard and bus port of a node of a cluster lab.
    pub(super) cluster: Option<ClusterPorts>,
}

impl Slot {
    /// The port everyone but the lab itself uses.
    pub(super) fn public_port(&self) -> u16 {
        self.relay.map_or(self.port, |relay| relay.public)
    }
}

pub(super) fn group_name(group: usize) -> String {
    format!("g{}", group + 1)
}

pub(super) fn consecutive_ports(base: u16, count: usize) -> Result<Vec<u16>, LabError> {
    let last = usize::from(base) + count - 1;
    if base == 0 || last > usize::from(u16::MAX) {
        return Err(LabError::InvalidSpec(format!(
            "--base-port {base} cannot fit {count} consecutive ports below 65536; pick a base between 1024 and {}",
            usize::from(u16::MAX) + 1 - count
        )));
    }
    Ok((0..count)
        .filter_map(|offset| u16::try_from(usize::from(base) + offset).ok())
        .collect())
}

/// Gives each node its ports, in the order of the module docs: `ports` holds
/// [`LabSpec::port_count`] ports. The first block is the ports everyone uses (with links, the
/// data nodes' public ports); with links, the data nodes' real ports follow in the same
/// order, then their relays' control ports.
pub(super) fn layout(spec: &LabSpec, ports: &[u16]) -> Vec<Slot> {
    if let Some(shape) = spec.cluster {
        return cluster_layout(spec, shape.shards, ports);
    }
    let data_nodes = spec.groups * (1 + spec.replicas);
    let node_count = spec.node_count();
    let mut named = Vec::with_capacity(spec.node_count());
    for group in 0..spec.groups {
        named.push((
            format!("g{}-master", group + 1),
            Some(group),
            NodeKind::Master,
        ));
    }
    for group in 0..spec.groups {
        for replica in 0..spec.replicas {
            let name = format!("g{}-replica{}", group + 1, replica + 1);
            named.push((name, Some(group), NodeKind::Replica));
        }
    }
    for sentinel in 0..spec.sentinels {
        named.push((
            format!("sentinel{}", sentinel + 1),
            None,
            NodeKind::Sentinel,
        ));
    }
    named
        .into_iter()
        .zip(ports)
        .enumerate()
        .map(|(index, ((name, group, kind), &named_port))| {
            let relayed = spec.links && index < data_nodes;
            let real = ports.get(node_count + index).copied();
            let control = ports.get(node_count + data_nodes + index).copied();
            match (relayed, real, control) {
                (true, Some(port), Some(control)) => Slot {
                    name,
                    group,
                    kind,
                    port,
                    relay: Some(RelayPorts {
                        public: named_port,
                        control,
                    }),
                    cluster: None,
                },
                _ => Slot {
                    name,
                    group,
                    kind,
                    port: named_port,
                    relay: None,
                    cluster: None,
                },
            }
        })
        .collect()
}

/// The layout of a cluster lab: in each group (g1 first) each shard (s1 first) lists its
/// primary, then its replicas, named `g1-s1-primary`, `g1-s1-replica1`. The first half of
/// `ports` are their client ports in that order, the second half their cluster bus ports.
pub(super) fn cluster_layout(spec: &LabSpec, shards: usize, ports: &[u16]) -> Vec<Slot> {
    let mut named = Vec::with_capacity(spec.groups * shards * (1 + spec.replicas));
    for group in 0..spec.groups {
        for shard in 0..shards {
            let prefix = format!("g{}-s{}", group + 1, shard + 1);
            named.push((format!("{prefix}-primary"), group, shard, NodeKind::Master));
            for replica in 0..spec.replicas {
                let name = format!("{prefix}-replica{}", replica + 1);
                named.push((name, group, shard, NodeKind::Replica));
            }
        }
    }
    let count = named.len();
    named
        .into_iter()
        .enumerate()
        .filter_map(|(index, (name, group, shard, kind))| {
            Some(Slot {
                name,
                group: Some(group),
                kind,
                port: *ports.get(index)?,
                relay: None,
                cluster: Some(ClusterPorts {
                    shard,
                    bus: *ports.get(count + index)?,
                }),
            })
        })
        .collect()
}

/// The slots each of `shards` primaries starts with: 16,384 split into consecutive ranges
/// whose sizes differ by at most one.
pub(super) fn slot_ranges(shards: usize) -> Vec<(u16, u16)> {
    let total = usize::from(CLUSTER_SLOTS);
    (0..shards)
        .filter_map(|shard| {
            let first = u16::try_from(shard * total / shards).ok()?;
            let last = u16::try_from((shard + 1) * total / shards - 1).ok()?;
            Some((first, last))
        })
        .collect()
}

/// The hash slots of a Redis Cluster.
pub(super) const CLUSTER_SLOTS: u16 = 16_384;

/// One config text per slot, in slot order.
pub(super) fn render_confs(spec: &LabSpec, slots: &[Slot]) -> Vec<String> {
    let master_port = |group: usize| {
        slots
            .iter()
            .find(|slot| slot.kind == NodeKind::Master && slot.group == Some(group))
            .map(Slot::public_port)
    };
    let sentinel_ids: Vec<(u16, String)> = slots
        .iter()
        .filter(|slot| slot.kind == NodeKind::Sentinel)
        .map(|slot| (slot.port, random_sentinel_id()))
        .collect();
    slots
        .iter()
        .map(|slot| {
            let node_dir = spec.dir.join(&slot.name);
            if let Some(cluster) = slot.cluster {
                return cluster_conf(spec, slot, &node_dir, cluster);
            }
            match slot.kind {
                NodeKind::Master => data_conf(spec, slot, &node_dir, None),
                NodeKind::Replica => {
                    data_conf(spec, slot, &node_dir, slot.group.and_then(master_port))
                }
                NodeKind::Sentinel => sentinel_conf(spec, slot, &node_dir, slots, &sentinel_ids),
            }
        })
        .collect()
}

/// `replica_of` is the master's public port.
fn data_conf(spec: &LabSpec, slot: &Slot, node_dir: &Path, replica_of: Option<u16>) -> String {
    let mut conf = format!(
        "# Written by quorumlock lab. Sentinel may rewrite it when it reconfigures this node.\n\
         {}\
         bind 127.0.0.1\n\
         daemonize no\n\
         logfile \"\"\n\
         dir {}\n\
         save \"\"\n\
         appendonly no\n\
         # Full syncs go over the socket at once: no 5 s batching delay, no dump left on disk.\n\
         repl-diskless-sync yes\n\
         repl-diskless-sync-delay 0\n\
         repl-diskless-load swapdb\n\
         # An evicted lock or fence key would hand the lock to a second holder.\n\
         maxmemory-policy noeviction\n",
        listen_conf(spec, slot.port),
        quote(node_dir)
    );
    if let Some(relay) = slot.relay {
        // Behind a relay: a replica tells its master (and so Sentinel, through INFO) the
        // relay's port, so that every link to this node goes through the relay.
        conf.push_str(&format!("replica-announce-port {}\n", relay.public));
    }
    if let Some(password) = &spec.password {
        // A replica authenticates to its master, and a master becomes a replica after a failover.
        conf.push_str(&format!("requirepass {password}\nmasterauth {password}\n"));
    }
    if let Some(master) = replica_of {
        conf.push_str(&format!("replicaof 127.0.0.1 {master}\n"));
    }
    if let (Some(lag), true) = (spec.min_replicas_max_lag_s, spec.replicas > 0) {
        // A master cut off from its replica stops taking writes after `lag` seconds, so an
        // old master that lost a failover cannot go on granting.
        conf.push_str(&format!(
            "min-replicas-to-write 1\nmin-replicas-max-lag {lag}\n"
        ));
    }
    conf
}

/// A cluster node: a data node without `replicaof` (a cluster node becomes a replica through
/// `CLUSTER REPLICATE`), with its own `nodes.conf` in its directory and an explicit bus port,
/// since the default (port + 10000) may fall outside the port range or on a taken port.
fn cluster_conf(spec: &LabSpec, slot: &Slot, node_dir: &Path, cluster: ClusterPorts) -> String {
    let mut conf = data_conf(spec, slot, node_dir, None);
    conf.push_str(&format!(
        "cluster-enabled yes\n\
         cluster-config-file nodes.conf\n\
         cluster-port {}\n\
         cluster-announce-ip 127.0.0.1\n\
         cluster-node-timeout {}\n\
         # A replica takes over however long it was cut off: the lab wants failovers to happen.\n\
         cluster-replica-validity-factor 0\n\
         # The slots of the other shards stay served while one shard has no primary.\n\
         cluster-require-full-coverage no\n",
        cluster.bus, spec.down_after_ms
    ));
    conf
}

/// Pre-seeds the other Sentinels and the replicas, which Sentinel would otherwise discover
/// through hello messages and INFO only after a few seconds.
fn sentinel_conf(
    spec: &LabSpec,
    me: &Slot,
    node_dir: &Path,
    slots: &[Slot],
    sentinel_ids: &[(u16, String)],
) -> String {
    let quorum = spec.sentinels / 2 + 1;
    let my_id = sentinel_ids
        .iter()
        .find(|(port, _)| *port == me.port)
        .map(|(_, id)| id.as_str())
        .unwrap_or_default();
    let mut conf = format!(
        "# Written by quorumlock lab; Sentinel rewrites it as it learns.\n\
         {}\
         bind 127.0.0.1\n\
         daemonize no\n\
         logfile \"\"\n\
         dir {}\n\
         sentinel myid {my_id}\n",
        listen_conf(spec, me.port),
        quote(node_dir)
    );
    if let Some(password) = &spec.password {
        // Sentinels talk to each other too, so each presents the password the others require.
        conf.push_str(&format!(
            "requirepass {password}\nsentinel sentinel-pass {password}\n"
        ));
    }
    for master in slots.iter().filter(|slot| slot.kind == NodeKind::Master) {
        let Some(group) = master.group else { continue };
        let name = group_name(group);
        conf.push_str(&format!(
            "sentinel monitor {name} 127.0.0.1 {} {quorum}\n\
             sentinel down-after-milliseconds {name} {}\n\
             sentinel failover-timeout {name} {}\n\
             sentinel parallel-syncs {name} 1\n",
            master.public_port(),
            spec.down_after_ms,
            spec.failover_timeout_ms
        ));
        if let Some(password) = &spec.password {
            conf.push_str(&format!("sentinel auth-pass {name} {password}\n"));
        }
        let replicas = slots
            .iter()
            .filter(|slot| slot.kind == NodeKind::Replica && slot.group == Some(group));
        for replica in replicas {
            conf.push_str(&format!(
                "sentinel known-replica {name} 127.0.0.1 {}\n",
                replica.public_port()
            ));
        }
        for (port, id) in sentinel_ids.iter().filter(|(port, _)| *port != me.port) {
            conf.push_str(&format!(
                "sentinel known-sentinel {name} 127.0.0.1 {port} {id}\n"
            ));
        }
    }
    conf
}

/// Sentinel requires a run id of exactly 40 hex characters.
fn random_sentinel_id() -> String {
    rand::random::<[u8; 20]>()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// The listening lines of a node: a plain port, or TLS only with client certificates. With
/// `tls-replication` replicas and Sentinels connect over TLS and announce their TLS port.
fn listen_conf(spec: &LabSpec, port: u16) -> String {
    if !spec.tls {
        return format!("port {port}\n");
    }
    let tls = spec.dir.join(TLS_DIR);
    format!(
        "port 0\n\
         tls-port {port}\n\
         tls-cert-file {}\n\
         tls-key-file {}\n\
         tls-ca-cert-file {}\n\
         tls-auth-clients yes\n\
         tls-replication yes\n",
        quote(&tls.join("node.crt")),
        quote(&tls.join("node.key")),
        quote(&tls.join("ca.crt")),
    )
}

/// Quotes a path for a Redis config file.
fn quote(path: &Path) -> String {
    let text = path.display().to_string();
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_follows_the_documented_port_order() {
        let spec = LabSpec::new("/tmp/lab");
        let ports = consecutive_ports(7000, spec.node_count()).expect("fits");
        let slots = layout(&spec, &ports);
        let find = |name: &str| slots.iter().find(|slot| slot.name == name).map(|s| s.port);
        assert_eq!(slots.len(), 13);
        assert_eq!(find("g1-master"), Some(7000));
        assert_eq!(find("g5-master"), Some(7004));
        assert_eq!(find("g1-replica1"), Some(7005));
        assert_eq!(find("g5-replica1"), Some(7009));
        assert_eq!(find("sentinel1"), Some(7010));
        assert_eq!(find("sentinel3"), Some(7012));
        assert!(consecutive_ports(65530, 13).is_err());
    }

    #[test]
    fn sentinel_conf_seeds_peers_and_replicas() {
        let spec = LabSpec::new("/tmp/lab");
        let ports = consecutive_ports(7000, spec.node_count()).expect("fits");
        let slots = layout(&spec, &ports);
        let confs = render_confs(&spec, &slots);
        let sentinel = &confs[10];
        assert!(sentinel.contains("sentinel monitor g3 127.0.0.1 7002 2\n"));
        assert!(sentinel.contains("sentinel known-replica g3 127.0.0.1 7007\n"));
        assert_eq!(sentinel.matches("sentinel known-sentinel g1 ").count(), 2);
        assert!(
            !sentinel.contains("127.0.0.1 7010 "),
            "a Sentinel must not know itself"
        );
        let id = sentinel
            .lines()
            .find_map(|line| line.strip_prefix("sentinel myid "))
            .unwrap_or_default();
        assert_eq!(id.len(), 40);
        assert!(confs[11].contains(&format!("known-sentinel g1 127.0.0.1 7010 {id}\n")));
        assert!(confs[5].contains("replicaof 127.0.0.1 7000\n"));
        assert!(!confs[0].contains("replicaof"));
        assert!(!confs[0].contains("replica-announce-port"));
    }

    #[test]
    fn a_cluster_lab_lists_each_shard_primary_first_and_gives_every_node_a_bus_port() {
        let spec = LabSpec {
            cluster: Some(crate::lab::ClusterShape { shards: 2 }),
            sentinels: 0,
            ..LabSpec::new("/tmp/lab")
        };
        assert_eq!(spec.port_count(), 2 * 5 * 2 * 2);
        let ports = consecutive_ports(7000, spec.port_count()).expect("fits");
        let slots = layout(&spec, &ports);
        assert_eq!(slots.len(), 20);
        let find = |name: &str| slots.iter().find(|slot| slot.name == name).expect(name);
        let primary = find("g1-s2-primary");
        assert_eq!((primary.port, primary.kind), (7002, NodeKind::Master));
        assert_eq!(
            primary.cluster,
            Some(ClusterPorts {
                shard: 1,
                bus: 7022
            })
        );
        let replica = find("g2-s1-replica1");
        assert_eq!((replica.port, replica.group), (7005, Some(1)));
        assert_eq!(replica.cluster.map(|cluster| cluster.bus), Some(7025));

        let confs = render_confs(&spec, &slots);
        assert!(confs[2].contains("cluster-enabled yes\n"));
        assert!(confs[2].contains("cluster-config-file nodes.conf\n"));
        assert!(confs[2].contains("cluster-port 7022\n"));
        assert!(confs[2].contains("cluster-node-timeout 500\n"));
        assert!(
            !confs[5].contains("replicaof"),
            "CLUSTER REPLICATE makes replicas"
        );
    }

    #[test]
    fn slot_ranges_cover_every_slot_once_in_near_equal_parts() {
        assert_eq!(slot_ranges(1), vec![(0, 16_383)]);
        assert_eq!(
            slot_ranges(3),
            vec![(0, 5460), (5461, 10_921), (10_922, 16_383)]
        );
        for shards in 1..=7 {
            let ranges = slot_ranges(shards);
            assert_eq!(ranges.len(), shards);
            assert_eq!(ranges.first().map(|range| range.0), Some(0));
            assert_eq!(ranges.last().map(|range| range.1), Some(16_383));
            for pair in ranges.windows(2) {
                assert_eq!(pair[0].1 + 1, pair[1].0);
            }
        }
    }

    #[test]
    fn with_links_everyone_but_the_lab_uses_the_public_ports() {
        let spec = LabSpec {
            links: true,
            ..LabSpec::new("/tmp/lab")
        };
        assert_eq!(spec.port_count(), 13 + 2 * 10);
        let ports = consecutive_ports(7000, spec.port_count()).expect("fits");
        let slots = layout(&spec, &ports);
        assert_eq!(slots.len(), 13);
        let find = |name: &str| slots.iter().find(|slot| slot.name == name).expect(name);
        // The documented layout stays what clients see; real and control ports follow.
        let master = find("g1-master");
        assert_eq!(master.public_port(), 7000);
        assert_eq!(master.port, 7013);
        assert_eq!(master.relay.map(|relay| relay.control), Some(7023));
        let replica = find("g1-replica1");
        assert_eq!((replica.public_port(), replica.port), (7005, 7018));
        let sentinel = find("sentinel1");
        assert_eq!((sentinel.port, sentinel.relay), (7010, None));

        let confs = render_confs(&spec, &slots);
        assert!(confs[0].contains("port 7013\n"));
        assert!(confs[0].contains("replica-announce-port 7000\n"));
        assert!(confs[5].contains("port 7018\n"));
        assert!(confs[5].contains("replica-announce-port 7005\n"));
        assert!(confs[5].contains("replicaof 127.0.0.1 7000\n"));
        assert!(confs[10].contains("sentinel monitor g1 127.0.0.1 7000 2\n"));
        assert!(confs[10].contains("sentinel known-replica g1 127.0.0.1 7005\n"));
        assert!(
            !confs[10].contains("7013"),
            "Sentinels never see a real port"
        );
    }
}
