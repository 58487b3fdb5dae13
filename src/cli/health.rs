//! `quorumlock health`: every group's reachability, master, Sentinels, replicas and
//! admission, whether a quorum can vote, and which topology file is in use.

use super::exit;
use super::output::{self, or_dash};
use crate::ConfigLocation;
use crate::Locks;
use crate::{Admission, Health};

fn admission(admission: &Admission) -> String {
    match admission {
        Admission::Voting => "voting".into(),
        Admission::Quarantined { remaining_ms } => {
            format!("quarantined {}", output::duration_ms(*remaining_ms))
        }
        Admission::Unadmitted => "new (quarantined at first vote)".into(),
        Admission::NoPolicy => "no policy (lost its data; adopts at next acquire)".into(),
        Admission::Evicts { maxmemory_policy } => format!("UNSAFE: evicts ({maxmemory_policy})"),
        Admission::Unknown => "unknown".into(),
    }
}

fn table(health: &Health, config: &ConfigLocation) -> String {
    let rows = health.groups.iter().map(|g| {
        let replicas = g
            .replicas
            .iter()
            .map(|r| format!("{} {} lag {}s", r.address, r.state, or_dash(r.lag_s)))
            .collect::<Vec<_>>()
            .join(", ");
        let answered = g.sentinels.iter().filter(|s| s.master.is_some()).count();
        let sentinels = match (g.sentinels.len(), g.sentinels_agree) {
            (0, _) => "-".to_string(),
            (all, Some(true)) => format!("{answered}/{all} agree"),
            (all, Some(false)) => format!("{answered}/{all} DISAGREE"),
            (all, None) => format!("{answered}/{all} answer"),
        };
        [
            g.group.clone(),
            if g.reachable {
                "up".into()
            } else {
                format!("DOWN ({})", or_dash(g.error.as_ref()))
            },
            or_dash(g.latency_ms.map(|ms| format!("{ms:.2} ms"))),
            or_dash(g.master.as_ref()),
            or_dash(g.role.as_ref()),
            if replicas.is_empty() {
                "-".into()
            } else {
                replicas
            },
            sentinels,
            match (
                g.replicas_missing(),
                g.policy.map_or(0, |p| p.acked_replicas),
            ) {
                (Some((online, needed)), _) => format!(
                    "{}, REPLICAS MISSING {online}/{needed} (acknowledged mode)",
                    admission(&g.admission)
                ),
                (None, 0) => admission(&g.admission),
                (None, needed) => format!("{}, acked by {needed}", admission(&g.admission)),
            },
        ]
    });
    let warnings: String = health
        .groups
        .iter()
        .flat_map(|g| {
            g.unsafe_settings
                .iter()
                .map(move |s| format!("UNSAFE {}: {s}\n", g.group))
        })
        .collect();
    format!(
        "{}\n{warnings}{}: {} of {} groups vote (quorum {})\nconfig: {config}\n",
        output::table(
            [
                "GROUP",
                "STATE",
                "LATENCY",
                "MASTER",
                "ROLE",
                "REPLICAS",
                "SENTINELS",
                "VOTE"
            ],
            rows
        ),
        if health.quorum_available {
            "quorum available"
        } else {
            "QUORUM UNAVAILABLE"
        },
        health.voting,
        health.groups.len(),
        health.quorum
    )
}

pub async fn run(locks: &Locks, config: &ConfigLocation, json: bool) -> anyhow::Result<u8> {
    let health = locks.health().await;
    if json {
        let mut view = serde_json::to_value(&health)?;
        if let Some(object) = view.as_object_mut() {
            object.insert("config".into(), serde_json::to_value(config)?);
        }
        output::json(&view)?;
    } else {
        print!("{}", table(&health, config));
    }
    Ok(if health.quorum_available {
        exit::OK
    } else {
        exit::UNAVAILABLE
    })
}
