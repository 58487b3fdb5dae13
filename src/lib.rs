//! quorumlock: majority-backed distributed locks over independent Redis master groups.
//!
//! Layout:
//! - [`config`]: the topology file (groups, Sentinels, timeouts, drift) and its validation.
//! - [`lab`]: a local topology of real `redis-server` masters, replicas and Sentinels on loopback.

pub mod config;
pub mod lab;

pub use config::{ConfigError, GroupConfig, Topology};
