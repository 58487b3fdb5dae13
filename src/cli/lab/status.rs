//! `lab status`: every process of the lab, as a table or JSON.

use super::super::output;
use crate::lab::{Lab, NodeStatus};

/// Prints every process of `lab`.
pub(super) async fn run(lab: &Lab, json: bool) -> anyhow::Result<()> {
    let nodes = lab.status().await;
    if json {
        let document = serde_json::json!({
            "dir": lab.dir(),
            "config": lab.config_path(),
            "nodes": nodes,
        });
        println!("{}", serde_json::to_string_pretty(&document)?);
    } else {
        print!("{}", table(&nodes));
    }
    Ok(())
}

/// One row per process: each node, and under a node with links its relay. A node's PORT is
/// the one clients use, with the node's own port beside it when a relay stands in between.
fn table(nodes: &[NodeStatus]) -> String {
    let rows = nodes.iter().flat_map(|node| {
        let group = match (node.group, node.shard) {
            (Some(group), Some(shard)) => format!("g{} s{}", group + 1, shard + 1),
            (Some(group), None) => format!("g{}", group + 1),
            (None, _) => "-".to_string(),
        };
        let state = match (node.alive, node.frozen) {
            (false, _) => "dead",
            (true, true) => "frozen",
            (true, false) => "up",
        };
        let role = match (&node.role, node.replica_of) {
            (Some(role), Some(master)) => format!("{role} of {master}"),
            (Some(role), None) => role.clone(),
            (None, _) => "-".to_string(),
        };
        let port = if node.public_port == node.port {
            node.port.to_string()
        } else {
            format!("{} (real {})", node.public_port, node.port)
        };
        let row = [
            group.clone(),
            node.kind.to_string(),
            port,
            node.pid.to_string(),
            state.to_string(),
            role,
        ];
        let relay = node.relay.as_ref().map(|relay| {
            let links = match &relay.state {
                None if relay.alive => "not answering".to_string(),
                None => "-".to_string(),
                Some(state) => {
                    let cut = if state.cut.is_empty() {
                        "nothing cut".to_string()
                    } else {
                        format!("cut: {}", state.cut.join(","))
                    };
                    let slow = match (state.latency_ms, state.jitter_ms) {
                        (0, 0) => String::new(),
                        (delay, 0) => format!(", clients +{delay} ms"),
                        (delay, jitter) => format!(", clients +{delay}±{jitter} ms"),
                    };
                    format!("to {}, {cut}{slow}", node.port)
                }
            };
            [
                group,
                "relay".to_string(),
                format!("{} (control {})", relay.port, relay.control_port),
                relay.pid.to_string(),
                if relay.alive { "up" } else { "dead" }.to_string(),
                links,
            ]
        });
        std::iter::once(row).chain(relay)
    });
    let last = if nodes.iter().any(|node| node.relay.is_some()) {
        "ROLE / LINKS"
    } else {
        "ROLE"
    };
    output::table(["GROUP", "KIND", "PORT", "PID", "STATE", last], rows)
}
