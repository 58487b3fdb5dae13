//! `CLUSTER NODES` read into one [`NodeLine`] per node.

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct NodeLine {
    pub(super) id: String,
    pub(super) port: u16,
    pub(super) flags: Vec<String>,
    /// The ID of its primary, for a replica.
    pub(super) primary: Option<String>,
    /// Slot ranges as printed (`0-5460`, `5461`), without migration entries (`[..]`).
    pub(super) slots: Vec<String>,
}

impl NodeLine {
    pub(super) fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|own| own == flag)
    }

    pub(super) fn is_primary(&self) -> bool {
        self.has_flag("master")
    }

    /// Flagged failed (`fail`) or suspected (`fail?`) by the node that answered.
    pub(super) fn is_failing(&self) -> bool {
        self.has_flag("fail") || self.has_flag("fail?")
    }

    /// Still joining: a MEET not yet answered, or an address not yet known.
    pub(super) fn is_joining(&self) -> bool {
        self.has_flag("handshake") || self.has_flag("noaddr")
    }

    pub(super) fn serves(&self, slot: u16) -> bool {
        serves(&self.slots, slot)
    }
}

/// Whether `slot` is in one of the printed ranges.
pub(super) fn serves(ranges: &[String], slot: u16) -> bool {
    ranges
        .iter()
        .filter_map(|range| parse_range(range))
        .any(|(first, last)| (first..=last).contains(&slot))
}

pub(super) fn parse_range(text: &str) -> Option<(u16, u16)> {
    match text.split_once('-') {
        Some((first, last)) => Some((first.parse().ok()?, last.parse().ok()?)),
        None => {
            let slot = text.parse().ok()?;
            Some((slot, slot))
        }
    }
}

/// Parses `CLUSTER NODES`, one node a line:
/// `<id> <ip:port@bus[,hostname]> <flags> <primary id or -> <ping> <pong> <epoch> <link> <slots>..`.
pub(super) fn parse_nodes(text: &str) -> Result<Vec<NodeLine>, String> {
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let bad = || format!("unexpected CLUSTER NODES line `{line}`");
            if fields.len() < 8 {
                return Err(bad());
            }
            let address = fields[1].split(['@', ',']).next().unwrap_or_default();
            let port = address
                .rsplit_once(':')
                .and_then(|(_, port)| port.parse().ok())
                .ok_or_else(bad)?;
            Ok(NodeLine {
                id: fields[0].to_string(),
                port,
                flags: fields[2].split(',').map(str::to_string).collect(),
                primary: (fields[3] != "-").then(|| fields[3].to_string()),
                slots: fields[8..]
                    .iter()
                    .filter(|slot| !slot.starts_with('['))
                    .map(|slot| slot.to_string())
                    .collect(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    pub(super) fn cluster_nodes_lines_give_roles_slots_and_ports_without_migration_entries() {
        let text = "\
07c3 127.0.0.1:30004@40004 slave e7d1 0 1426238317239 4 connected
e7d1 127.0.0.1:30001@40001,host myself,master - 0 0 1 connected 0-5460 5462 [5461->-abcd]
292f 127.0.0.1:30002@40002 master,fail? - 0 1426238316232 2 connected 5463-10922
";
        let lines = parse_nodes(text).expect("valid");
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0].primary.as_deref(), Some("e7d1"));
        assert!(!lines[0].is_primary());
        assert_eq!(lines[1].port, 30001);
        assert_eq!(lines[1].slots, vec!["0-5460", "5462"]);
        assert!(lines[1].serves(0) && lines[1].serves(5460) && lines[1].serves(5462));
        assert!(!lines[1].serves(5461));
        assert!(lines[2].is_failing() && lines[2].is_primary());
        assert!(parse_nodes("too short").is_err());
    }
}
