//! What one dashboard poll returns: the groups, one page of the locks held now (with every
//! holder of a split lock), the semaphores on that page, this server's waiters and the
//! timeline. A page costs the same with ten locks or ten thousand: [`PAGE`] locks, each read
//! once more on every group to see whether it is split; the first page is shared by every
//! viewer for a second.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde::Serialize;
use tokio::sync::Mutex;

use super::groups::{GroupWatch, GroupsView};
use super::timeline::{Event, Timeline};
use super::waiting::Waiting;
use crate::{HolderGroups, Locks, SemaphoreStatus};

/// Locks and semaphores on one page.
pub const PAGE: usize = 50;
/// Most resources listed with waiters.
const MAX_WAITER_ROWS: usize = 200;
/// Status reads in flight at once while a page is built.
const STATUS_READS: usize = 16;
/// How long the first page answers every viewer.
const FRESH_FOR: Duration = Duration::from_secs(1);

/// One lock held on a majority.
#[derive(Debug, Clone, Serialize)]
pub struct LockRow {
    pub resource: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub purpose: Option<String>,
    pub remaining_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fencing_token: Option<u64>,
    /// True when groups hold it under more than one token; `holders` then lists each.
    pub split: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub holders: Vec<HolderGroups>,
}

/// One semaphore with permits held.
#[derive(Debug, Clone, Serialize)]
pub struct SemaphoreRow {
    pub name: String,
    pub used: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub permits: Option<u32>,
    pub holders: Vec<String>,
}

/// One page of locks and semaphores.
#[derive(Debug, Clone, Serialize)]
pub struct LocksPage {
    pub locks: Vec<LockRow>,
    pub semaphores: Vec<SemaphoreRow>,
    /// Pass it back as `cursor` for the next page; absent on the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
    /// Why the locks could not be listed (too few groups answer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct WaiterRow {
    pub resource: String,
    pub waiting: usize,
}

/// The whole answer to one poll.
#[derive(Debug, Serialize)]
pub struct Snapshot {
    pub generated_at: String,
    pub server_version: &'static str,
    pub health: Arc<GroupsView>,
    pub page: Arc<LocksPage>,
    pub waiters: Vec<WaiterRow>,
    pub timeline: Vec<Event>,
}

/// Builds snapshots; shared by every viewer of one server.
pub struct Snapshots {
    locks: Locks,
    groups: Arc<GroupWatch>,
    timeline: Arc<Timeline>,
    waiting: Arc<Waiting>,
    first_page: Mutex<Option<(Instant, Arc<LocksPage>)>>,
}

impl Snapshots {
    pub fn new(
        locks: Locks,
        groups: Arc<GroupWatch>,
        timeline: Arc<Timeline>,
        waiting: Arc<Waiting>,
    ) -> Snapshots {
        Snapshots {
            locks,
            groups,
            timeline,
            waiting,
            first_page: Mutex::new(None),
        }
    }

    pub async fn snapshot(&self, cursor: Option<&str>) -> Snapshot {
        let (health, page) = tokio::join!(self.groups.view(), self.page(cursor));
        Snapshot {
            generated_at: crate::mcp::contract::rfc3339(std::time::SystemTime::now()),
            server_version: env!("CARGO_PKG_VERSION"),
            health,
            page,
            waiters: self
                .waiting
                .snapshot(MAX_WAITER_ROWS)
                .into_iter()
                .map(|(resource, waiting)| WaiterRow { resource, waiting })
                .collect(),
            timeline: self.timeline.recent(),
        }
    }

    async fn page(&self, cursor: Option<&str>) -> Arc<LocksPage> {
        if cursor.is_some() {
            return Arc::new(self.read_page(cursor).await);
        }
        let mut first = self.first_page.lock().await;
        if let Some((at, page)) = first.as_ref()
            && at.elapsed() < FRESH_FOR
        {
            return Arc::clone(page);
        }
        let page = Arc::new(self.read_page(None).await);
        *first = Some((Instant::now(), Arc::clone(&page)));
        page
    }

    async fn read_page(&self, cursor: Option<&str>) -> LocksPage {
        let listed = match self.locks.list_page("", PAGE, cursor).await {
            Ok(listed) => listed,
            Err(error) => {
                return LocksPage {
                    locks: Vec::new(),
                    semaphores: Vec::new(),
                    next_cursor: None,
                    error: Some(error.to_string()),
                };
            }
        };
        let locks = futures::stream::iter(listed.locks)
            .map(|lock| async move {
                let status = self.locks.status(&lock.resource).await.ok();
                let split = status.as_ref().is_some_and(|s| s.split);
                LockRow {
                    resource: lock.resource,
                    owner: lock.owner,
                    purpose: lock.purpose,
                    remaining_ms: lock.remaining_ms,
                    fencing_token: lock.fencing_token,
                    split,
                    holders: match status {
                        Some(status) if split => status.holders,
                        _ => Vec::new(),
                    },
                }
            })
            .buffered(STATUS_READS)
            .collect()
            .await;
        LocksPage {
            locks,
            semaphores: listed.semaphores.iter().map(semaphore_row).collect(),
            next_cursor: listed.next_cursor,
            error: None,
        }
    }
}

fn semaphore_row(semaphore: &SemaphoreStatus) -> SemaphoreRow {
    SemaphoreRow {
        name: semaphore.name.clone(),
        used: semaphore.holders.len(),
        permits: semaphore.permits,
        holders: semaphore
            .holders
            .iter()
            .map(|permit| {
                let mut text = format!(
                    "#{} {}",
                    permit.permit,
                    permit.holder.owner.as_deref().unwrap_or("unnamed")
                );
                if let Some(fence) = permit.fencing_token {
                    text.push_str(&format!(" (fence {fence})"));
                }
                text
            })
            .collect(),
    }
}
