//! The lock engine: acquire, extend and release on a majority of groups, leases and
//! keepalive, the vote, waiters, and the status and health views.
//!
//! It talks to each master group only through [`crate::group`], and knows nothing of the
//! front doors (CLI, MCP) or the tools (lab, chaos, bench) built on it.

pub(crate) mod acquire;
pub(crate) mod admission;
pub(crate) mod by_token;
pub(crate) mod clock;
pub(crate) mod error;
pub(crate) mod fan_out;
pub(crate) mod fence;
pub(crate) mod health;
pub(crate) mod inspect;
pub(crate) mod lease;
pub(crate) mod locks;
pub mod protocol;
pub(crate) mod resource;
pub(crate) mod scoped;
pub(crate) mod semaphore;
#[cfg(feature = "tools")]
pub(crate) mod servers;
pub(crate) mod vote;
pub(crate) mod waiters;
