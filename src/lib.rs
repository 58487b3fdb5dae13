//! quorumlock: majority-backed distributed locks over independent Redis master groups.
//!
//! A lock is granted only when a majority of N (usually five) independent Redis master
//! groups agree, each group a master with replicas watched by Sentinel, or a Redis Cluster. Every lease carries a
//! fencing token that grows from one holder to the next, so storage that checks it rejects
//! writes from a holder whose lease ran out while it was paused.
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use quorumlock::{Locks, Topology};
//! let locks = Locks::connect(Topology::from_file("quorumlock.toml")?).await?;
//! let lease = locks.acquire("db:migrations").ttl(Duration::from_secs(15))
//!     .wait(Duration::from_secs(10)).owner("agent-7").purpose("apply migration 42").await?;
//! println!("write with fencing token {}", lease.fencing_token());
//! lease.release().await?;
//! # Ok(()) }
//! ```
//!
//! Layout (see docs/design.md, "Layout"): dependencies point one way, front doors and tools
//! → engine → group → config.
//! - `config`: the topology file (groups, Sentinels, timeouts, drift) and its validation.
//! - `engine/`: acquire / extend / release with validity and fencing, leases and keepalive,
//!   the vote and its one majority rule, waiters, and the status and health views. Its public
//!   types are re-exported here, once.
//! - `group/`: one group, a master or a Redis Cluster: its fred clients and per-call timeout,
//!   the slot map, group commit, the `lua/` scripts by SHA, the Sentinel watch, release
//!   subscribers, connecting, diagnosis, ACL and TLS.
//! - `cli/` (feature `cli`): the `quorumlock` command; the binary's `main.rs` only calls it.
//! - [`mcp`] (feature `mcp`): the MCP server for agents (stdio, streamable HTTP with bearer auth).
//! - [`lab`] (feature `tools`): a local topology of real `redis-server` masters, replicas and
//!   Sentinels, and the installer that finds or installs `redis-server`.
//! - [`chaos`] (feature `tools`): workers, fault injector, fenced store and the safety checker.
//! - [`bench`] (feature `tools`): the engine benchmark, and the MCP round-trip benchmark and
//!   agent-swarm load (feature `mcp-bench`).

// Functions stay under 80 lines (clippy.toml); tests are exempt.
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

mod config;
mod engine;
mod group;

#[cfg(feature = "tools")]
pub mod bench;
#[cfg(feature = "tools")]
pub mod chaos;
#[cfg(feature = "cli")]
pub mod cli;
#[cfg(feature = "tools")]
pub mod lab;
#[cfg(feature = "mcp")]
pub mod mcp;

pub use config::{
    ConfigError, ConfigLocation, ConfigSource, DEFAULT_CALL_TIMEOUT_MS, DEFAULT_DRIFT_FACTOR,
    DEFAULT_KEY_PREFIX, DEFAULT_MAX_HOLD_MS, DEFAULT_MAX_TTL_MS, DEFAULT_REPLICA_ACK_TIMEOUT_MS,
    DEFAULT_RETRY_DELAY_MS, Endpoint, GroupConfig, TlsSettings, Topology,
};
pub use engine::admission::{
    AdmitOptions, GroupAdmission, GroupQuarantine, QuarantineScope, ReplicaAcks,
};
pub use engine::clock::{Clock, millis};
pub use engine::error::{AdmitRefusal, Error, Holder};
pub use engine::health::{
    Admission, GroupHealth, Health, ReplicaSetting, ReplicaView, WindowSetting,
};
pub use engine::inspect::{
    GroupLockState, GroupView, HolderGroups, ListedLock, LockList, LockStatus, MAX_LIST_LIMIT,
};
pub use engine::lease::{Acquire, Detached, KeptLease, Lease, LeaseEnd, RenewalCounts};
pub use engine::locks::{
    AcquireOptions, DEFAULT_TTL, Extended, Locks, MAX_WAIT, MIN_TTL, Released,
};
pub use engine::protocol;
pub use engine::resource::{
    MAX_LABEL_BYTES, MAX_PERMITS, MAX_RESOURCE_BYTES, MAX_SET_RESOURCES, PermitHandle,
    cluster_slot, validate_resource,
};
pub use engine::scoped::LeaseScope;
pub use engine::semaphore::{PermitHolder, SemaphoreStatus};
#[cfg(feature = "tools")]
pub use engine::servers::{InfoSection, PrimaryInfo};
pub use engine::vote::{GroupVote, Majority, Vote};
pub use group::sentinel::Failover;
