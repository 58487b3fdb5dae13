//! Redis Cluster groups against real clusters: admission slot by slot, listings, resharding,
//! the lab's clusters and the MCP server on them.
//!
//! One test binary for the area: each file below is one of its modules, and the support
//! modules are shared.

#[path = "../common/mod.rs"]
mod common;
#[path = "../mcp_support/mod.rs"]
mod mcp_support;

mod cluster;
mod cluster_admission;
mod cluster_listing;
mod cluster_reshard;
mod lab_cluster;
mod mcp_cluster;
