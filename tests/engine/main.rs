//! The engine's lock calls against real labs: locks, sets, semaphores, listings, renewals and
//! the patterns built on them.
//!
//! One test binary for the area: each file below is one of its modules, and the support
//! modules are shared.

#[path = "../common/mod.rs"]
mod common;

mod engine;
mod listing;
mod many_locks;
mod patterns;
mod renewal_queue;
mod semaphores;
mod sets;
