//! What the lab asks its nodes through the control client: whether a node answers, whether a
//! replica's link to its master is up, whether a master has a replica good enough to take
//! writes, and the parsing of `ROLE`, `SENTINEL MASTER` and `SENTINEL get-master-addr-by-name`
//! replies.

use std::collections::HashMap;

use super::CONTROL_TIMEOUT;
use super::resp;

pub(super) async fn ping(control: &resp::Control, port: u16) -> Result<(), String> {
    match resp::call(control, port, &["PING"], CONTROL_TIMEOUT).await? {
        resp::Reply::Status(pong) if pong == "PONG" => Ok(()),
        other => Err(format!("unexpected PING reply {other:?}")),
    }
}

pub(super) async fn replica_link_up(control: &resp::Control, port: u16) -> Result<(), String> {
    let reply = resp::call(control, port, &["INFO", "replication"], CONTROL_TIMEOUT).await?;
    let info = reply.text().unwrap_or_default();
    if info
        .lines()
        .any(|line| line.trim() == "master_link_status:up")
    {
        Ok(())
    } else {
        Err("replication link to its master is not up yet".into())
    }
}

/// Whether a master with `min-replicas-to-write` counts a replica good enough to take writes
/// (`min_slaves_good_slaves` in `INFO replication`).
pub(super) async fn good_replicas(control: &resp::Control, port: u16) -> Result<(), String> {
    let reply = resp::call(control, port, &["INFO", "replication"], CONTROL_TIMEOUT).await?;
    let info = reply.text().unwrap_or_default();
    let good = info
        .lines()
        .find_map(|line| line.trim().strip_prefix("min_slaves_good_slaves:"))
        .and_then(|count| count.parse::<u64>().ok());
    match good {
        Some(count) if count > 0 => Ok(()),
        _ => Err(
            "no replica acknowledged it yet, so it refuses writes (min-replicas-to-write)".into(),
        ),
    }
}

/// `SENTINEL get-master-addr-by-name` answers `[ip, port]`, or nil for an unknown service.
pub(super) fn parse_master_addr(reply: &resp::Reply) -> Result<u16, String> {
    reply
        .items()
        .and_then(|items| items.get(1))
        .and_then(resp::Reply::integer)
        .and_then(|port| u16::try_from(port).ok())
        .ok_or_else(|| format!("unexpected reply {reply:?}"))
}

/// `ROLE` answers `["master", ..]`, `["slave", ip, port, ..]` or `["sentinel", ..]`.
pub(super) fn parse_role(reply: &resp::Reply) -> Option<(String, Option<u16>)> {
    let items = reply.items()?;
    let role = items.first()?.text()?;
    if role == "slave" {
        let master = items
            .get(2)
            .and_then(resp::Reply::integer)
            .and_then(|port| u16::try_from(port).ok());
        Some(("replica".into(), master))
    } else {
        Some((role.to_string(), None))
    }
}

/// Turns a flat `[key, value, key, value, ..]` reply into a map.
pub(super) fn field_map(reply: &resp::Reply) -> HashMap<String, String> {
    let items = reply.items().unwrap_or_default();
    items
        .chunks_exact(2)
        .filter_map(|pair| Some((pair[0].text()?.to_string(), pair[1].text()?.to_string())))
        .collect()
}
