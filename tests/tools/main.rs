//! The CLI and the tools around it: commands, the lab, the compose deployment, operations, the
//! examples and the docs' claims about the code.
//!
//! One test binary for the area: each file below is one of its modules, and the support
//! modules are shared.

#[path = "../common/mod.rs"]
mod common;
#[path = "../mcp_support/mod.rs"]
mod mcp_support;

mod cli;
mod compose;
mod docs;
mod examples;
mod lab;
mod operations;
