//! The Lua scripts in `lua/`, compiled into the binary and named once here.
//!
//! Each script runs atomically on one master; the engine calls them by SHA and reloads them
//! when a master answers NOSCRIPT (after a restart, a failover or `SCRIPT FLUSH`). The scripts
//! that vote share the admission prologue, prepended at compile time.

use std::sync::LazyLock;

use fred::types::scripts::Script;

/// Grant when admitted, free (or ours) and the fencing proposal is above the stored fence.
pub(crate) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::from_lua(concat!(
        include_str!("../lua/admission.lua"),
        include_str!("../lua/acquire.lua")
    ))
});
/// Compare-and-pexpire of the lock and its owner record, when admitted.
pub(crate) static EXTEND: LazyLock<Script> = LazyLock::new(|| {
    Script::from_lua(concat!(
        include_str!("../lua/admission.lua"),
        include_str!("../lua/extend.lua")
    ))
});
/// Compare-and-delete of the lock and its owner record.
pub(crate) static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::from_lua(include_str!("../lua/release.lua")));
/// Delete of the lock and its owner record whatever the token (operators only).
pub(crate) static FORCE_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::from_lua(include_str!("../lua/force_release.lua")));
/// Read-only view of the lock, its fence and its owner record.
pub(crate) static INSPECT: LazyLock<Script> =
    LazyLock::new(|| Script::from_lua(include_str!("../lua/inspect.lua")));

/// Read-only view of a master's admission, for health reports.
pub(crate) static ADMISSION_STATE: LazyLock<Script> =
    LazyLock::new(|| Script::from_lua(include_str!("../lua/admission_state.lua")));

/// Every script the engine runs by SHA, to load onto a master before its first lock call:
/// a NOSCRIPT round trip on the hot path would delay that group past the vote.
pub(crate) fn all() -> [&'static Script; 6] {
    [
        &ACQUIRE,
        &EXTEND,
        &RELEASE,
        &FORCE_RELEASE,
        &INSPECT,
        &ADMISSION_STATE,
    ]
}

/// Admits a master's current replication history to the vote (bootstrap of fresh masters).
pub const ADMIT_LUA: &str = include_str!("../lua/admit.lua");
