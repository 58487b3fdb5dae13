//! What a bench reads from the servers beside the lock calls: an `INFO` section of each
//! group, the sections of every primary over a connection of its own, and a full key scan.
//! Nothing here votes; the figures say what the lock calls cost the servers.

use std::time::Duration;

use fred::prelude::*;
use fred::types::InfoKind;

use crate::engine::locks::Locks;
use crate::group::Group;
use crate::group::reply::Reply;

/// An `INFO` section a bench reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InfoSection {
    /// `used_memory` and the rest of `INFO memory`.
    Memory,
    /// `used_cpu_sys`, `used_cpu_user` and the rest of `INFO cpu`.
    Cpu,
    /// The calls of each command (`INFO commandstats`).
    CommandStats,
}

impl InfoSection {
    fn kind(self) -> InfoKind {
        match self {
            InfoSection::Memory => InfoKind::Memory,
            InfoSection::Cpu => InfoKind::Cpu,
            InfoSection::CommandStats => InfoKind::CommandStats,
        }
    }
}

/// The `INFO` sections one primary answered.
#[derive(Debug, Clone)]
pub struct PrimaryInfo {
    /// The group's name.
    pub group: String,
    /// The primary's `host:port`.
    pub address: String,
    /// One text per section asked for, in the order asked.
    pub sections: Vec<String>,
}

impl Locks {
    /// Waits, within the per-call timeout, until every lock call handed to a group has been
    /// answered, including those nobody waits for any more (the groups a vote was decided
    /// without): what the servers did is then all done.
    pub async fn settle(&self) {
        futures::future::join_all(self.engine.groups.iter().map(Group::settle)).await;
    }

    /// `INFO <section>` of each group's master (a Cluster group's first primary), in the
    /// topology's order, within the per-call timeout; `None` for a group that did not answer.
    pub async fn group_info(&self, section: InfoSection) -> Vec<Option<String>> {
        let reads = self
            .engine
            .groups
            .iter()
            .map(|group| group.info(section.kind()));
        futures::future::join_all(reads)
            .await
            .into_iter()
            .map(|reply| match reply {
                Reply::Answer(text) => Some(text),
                _ => None,
            })
            .collect()
    }

    /// `sections` of every primary of every group, group by group once the group settled,
    /// each primary read over a connection of its own within `timeout`. Fails naming the
    /// group or primary that could not be read.
    pub async fn primary_info(
        &self,
        sections: &[InfoSection],
        timeout: Duration,
    ) -> Result<Vec<PrimaryInfo>, String> {
        let mut primaries = Vec::new();
        for group in &self.engine.groups {
            group.settle().await;
            let addresses = group
                .connected_master()
                .ok_or_else(|| format!("group {} has no connected master to read", group.name))?;
            for address in addresses.split(',') {
                let (host, port) = address
                    .rsplit_once(':')
                    .and_then(|(host, port)| Some((host, port.parse::<u16>().ok()?)))
                    .ok_or_else(|| {
                        format!(
                            "group {}: primary address {address:?} is not host:port",
                            group.name
                        )
                    })?;
                let config = group.reach().master_config(host, port);
                let sections = tokio::time::timeout(timeout, read(config, sections))
                    .await
                    .map_err(|_| format!("INFO took over {timeout:?}"))
                    .and_then(|read| read)
                    .map_err(|error| format!("group {} primary {address}: {error}", group.name))?;
                primaries.push(PrimaryInfo {
                    group: group.name.clone(),
                    address: address.to_string(),
                    sections,
                });
            }
        }
        Ok(primaries)
    }

    /// Scans every group at once for all the keys matching `pattern` (on every primary of a
    /// Cluster group), each page within the per-call timeout: the floor of a listing that
    /// walks the whole keyspace. How many keys each group holds, `None` where a scan failed.
    pub async fn scan_every_group(&self, pattern: &str) -> Vec<Option<usize>> {
        let scans = self
            .engine
            .groups
            .iter()
            .map(|group| group.scan_keys(pattern, usize::MAX));
        futures::future::join_all(scans)
            .await
            .into_iter()
            .map(|reply| match reply {
                Reply::Answer(keys) => Some(keys.len()),
                _ => None,
            })
            .collect()
    }
}

/// `sections` of one primary, over a connection of its own.
async fn read(config: Config, sections: &[InfoSection]) -> Result<Vec<String>, String> {
    let client = Client::new(config, None, None, None);
    client.init().await.map_err(|error| error.to_string())?;
    let read = async {
        let mut texts = Vec::with_capacity(sections.len());
        for section in sections {
            texts.push(client.info::<String>(Some(section.kind())).await?);
        }
        Ok::<_, fred::error::Error>(texts)
    }
    .await;
    let _ = client.quit().await;
    read.map_err(|error| error.to_string())
}
