//! The MCP server, driven as a binary by real clients: tools, contract, sessions, the
//! dashboard, security and the swarm load command.
//!
//! One test binary for the area: each file below is one of its modules, and the support
//! modules are shared.

#[path = "../browser_support/mod.rs"]
mod browser_support;
#[path = "../common/mod.rs"]
mod common;
#[path = "../mcp_support/mod.rs"]
mod mcp_support;

mod clients;
mod dashboard;
mod mcp;
mod mcp_contract;
mod mcp_load;
mod security;
