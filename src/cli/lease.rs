//! The lease arguments `acquire` and `run` share: TTL, wait, owner and purpose, flattened into
//! each command's arguments (`run` words the TTL and purpose for itself).

use std::time::Duration;

use clap::Args;

use crate::Acquire;

/// How long a lease lasts, how long to wait for it, and whom it names.
#[derive(Debug, Clone, Args)]
pub struct LeaseArgs {
    /// Lease TTL in milliseconds.
    #[arg(long, default_value_t = 15_000)]
    pub ttl_ms: u64,
    /// Keep trying this many milliseconds while it is held elsewhere.
    #[arg(long, default_value_t = 0)]
    pub wait_ms: u64,
    /// Who holds it (default: $USER@host).
    #[arg(long)]
    pub owner: Option<String>,
    /// Why.
    #[arg(long)]
    pub purpose: Option<String>,
}

impl LeaseArgs {
    /// `request` with this TTL, wait, owner (default: $USER@host) and purpose, if given.
    pub fn dress(&self, request: Acquire) -> Acquire {
        let request = request
            .ttl(Duration::from_millis(self.ttl_ms))
            .wait(Duration::from_millis(self.wait_ms))
            .owner(self.owner.clone().unwrap_or_else(who_am_i));
        match &self.purpose {
            Some(purpose) => request.purpose(purpose.as_str()),
            None => request,
        }
    }
}

/// `$USER@host`, the owner a lease names when none is given.
pub fn who_am_i() -> String {
    let user = std::env::var("USER").unwrap_or_else(|_| "unknown".into());
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into());
    format!("{user}@{host}")
}
