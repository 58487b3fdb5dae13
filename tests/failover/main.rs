//! Faults against real labs: failovers, partitions, the safety properties under them, and the
//! chaos harness.
//!
//! One test binary for the area: each file below is one of its modules, and the support
//! modules are shared.

#[path = "../common/mod.rs"]
mod common;

mod chaos;
mod failover;
mod partition;
mod safety;
