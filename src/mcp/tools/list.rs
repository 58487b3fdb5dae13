//! `list_locks`: the held locks and semaphores in use under a name prefix, a page at a time.

use rmcp::model::JsonObject;

use super::super::arguments::{self, decode};
use super::super::contract::{ListLocksArgs, ListLocksResult};
use super::super::handler::LockServer;
use super::super::reply::{Reply, ToolError};

impl LockServer {
    pub(super) async fn list(&self, arguments: JsonObject) -> Result<Reply, ToolError> {
        let args: ListLocksArgs = decode(arguments)?;
        let prefix = args.prefix.unwrap_or_default();
        arguments::prefix(&prefix)?;
        let limit = arguments::list_limit(args.limit)?;
        let cursor = arguments::cursor(args.cursor.as_deref())?;
        let list = self
            .shared()
            .locks
            .list_page(&prefix, limit, cursor)
            .await
            .map_err(|error| self.failure(error))?;
        let mut summary = format!(
            "{} lock{} held",
            list.locks.len(),
            if list.locks.len() == 1 { "" } else { "s" },
        );
        if !list.semaphores.is_empty() {
            let each: Vec<String> = list
                .semaphores
                .iter()
                .map(|s| {
                    format!(
                        "{}: {} of {} permits held",
                        s.name,
                        s.holders.len(),
                        s.permits.unwrap_or_default()
                    )
                })
                .collect();
            summary.push_str(&format!(
                ", {} semaphore{} in use ({})",
                list.semaphores.len(),
                if list.semaphores.len() == 1 { "" } else { "s" },
                each.join("; ")
            ));
        }
        if !prefix.is_empty() {
            summary.push_str(&format!(" under `{prefix}`"));
        }
        if list.truncated {
            summary.push_str(" (more exist: pass next_cursor as cursor for the next page)");
        }
        let result = ListLocksResult {
            locks: list.locks,
            semaphores: list.semaphores,
            truncated: list.truncated,
            next_cursor: list.next_cursor,
        };
        Reply::new(summary, &result)
    }
}
