//! quorumlock: majority-backed distributed locks over independent Redis master groups.
//!
//! A lock is granted only when a majority of N (usually five) independent Redis master
//! groups agree, each group a master with replicas watched by Sentinel. Every lease carries a
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
//! Layout:
//! - [`config`]: the topology file (groups, Sentinels, timeouts, drift) and its validation.
//! - `group`: one group's fred client, per-call timeout, scripts by SHA with NOSCRIPT reload.
//! - `batch`: group commit: the lock calls waiting for one master go out as one script call.
//! - `scripts`: the `lua/` files, compiled in and named once.
//! - [`security`]: ACL credentials and TLS, applied alike to every client the engine builds.
//! - `quorum`: the one fan-out helper every operation uses, and the votes it reports.
//! - [`sentinel`]: `+switch-master` subscribers that move a group to its new master at once.
//! - `waiters`: release announcements that wake denied acquires instead of polling.
//! - [`lock`]: acquire / extend / release with validity and fencing.
//! - [`lease`]: the acquire builder, leases, keepalive.
//! - [`inspect`]: one lock as each group sees it; the current locks.
//! - [`health`]: each group's reachability, master, Sentinels, replicas and admission.
//! - `connection`: keeps fred clients connected from their first try on, and closes them.
//! - `diagnose`: why a group that is down cannot be reached, with the setting to check.
//! - [`install`]: finds `redis-server`, installing Debian's package when it is missing.
//! - [`lab`]: a local topology of real `redis-server` masters, replicas and Sentinels.
//! - [`chaos`]: workers, fault injector and fenced store for the chaos runs.
//! - [`checker`]: proves that no two holders overlapped and no fencing token went backwards.
//! - [`bench`]: the engine benchmark behind `quorumlock bench`.
//! - [`mcp`]: the MCP server for agents (stdio, streamable HTTP with bearer auth).
//! - `cli`: the `quorumlock` command (the binary's `main.rs` only calls it).

mod batch;
pub mod bench;
pub mod chaos;
pub mod checker;
pub mod cli;
pub mod config;
mod connection;
mod diagnose;
pub mod error;
mod group;
pub mod health;
pub mod inspect;
pub mod install;
pub mod lab;
pub mod lease;
pub mod lock;
pub mod mcp;
mod quorum;
pub mod resource;
mod scripts;
pub mod security;
pub mod sentinel;
mod waiters;

pub use config::{ConfigError, GroupConfig, TlsSettings, Topology};
pub use error::{Error, Holder};
pub use health::{Admission, GroupHealth, Health};
pub use inspect::{GroupView, ListedLock, LockList, LockStatus};
pub use lease::{Acquire, KeptLease, Lease, LeaseEnd};
pub use lock::{AcquireOptions, Extended, Locks, Released};
pub use quorum::{GroupVote, Vote};
pub use sentinel::Failover;
