//! The Lua scripts in `lua/`, compiled into the binary and named once here.
//!
//! Each script runs atomically on one master; the engine calls them by SHA and reloads them
//! when a master answers NOSCRIPT (after a restart, a failover or `SCRIPT FLUSH`). Shared
//! prologues are prepended at compile time: `holder.lua` (the lock's value) to every script
//! that reads a lock, `info.lua` to those that read INFO, `admission.lua` to the scripts that
//! vote. `BATCH` carries acquire,
//! release and extend as functions, for the group-commit path (`crate::batch`).

use std::sync::LazyLock;

use fred::types::scripts::Script;

/// Grant when admitted, free (or ours) and the fencing proposal is above the stored fence.
pub(crate) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::from_lua(concat!(
        include_str!("../../lua/holder.lua"),
        include_str!("../../lua/info.lua"),
        include_str!("../../lua/admission.lua"),
        include_str!("../../lua/acquire.lua")
    ))
});
/// Grant one permit of a semaphore: a free slot, when admitted and the count agrees.
pub(crate) static PERMIT: LazyLock<Script> = LazyLock::new(|| {
    Script::from_lua(concat!(
        include_str!("../../lua/holder.lua"),
        include_str!("../../lua/info.lua"),
        include_str!("../../lua/admission.lua"),
        include_str!("../../lua/permit.lua")
    ))
});
/// Compare-and-pexpire of the lock, when admitted.
pub(crate) static EXTEND: LazyLock<Script> = LazyLock::new(|| {
    Script::from_lua(concat!(
        include_str!("../../lua/holder.lua"),
        include_str!("../../lua/info.lua"),
        include_str!("../../lua/admission.lua"),
        include_str!("../../lua/extend.lua")
    ))
});
/// Compare-and-delete of the lock.
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::from_lua(concat!(
        include_str!("../../lua/holder.lua"),
        include_str!("../../lua/release.lua")
    ))
});
/// Several acquire, permit, release and extend calls in one script call.
pub(crate) static BATCH: LazyLock<Script> = LazyLock::new(|| {
    Script::from_lua(concat!(
        include_str!("../../lua/holder.lua"),
        include_str!("../../lua/info.lua"),
        include_str!("../../lua/admission.lua"),
        "local CALLS = {}\nCALLS.acquire = function(KEYS, ARGV)\n",
        include_str!("../../lua/acquire.lua"),
        "end\nCALLS.release = function(KEYS, ARGV)\n",
        include_str!("../../lua/release.lua"),
        "end\nCALLS.extend = function(KEYS, ARGV)\n",
        include_str!("../../lua/extend.lua"),
        "end\nCALLS.permit = function(KEYS, ARGV)\n",
        include_str!("../../lua/permit.lua"),
        "end\n",
        include_str!("../../lua/batch.lua")
    ))
});
/// Delete of the lock whatever the token (operators only).
pub(crate) static FORCE_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::from_lua(include_str!("../../lua/force_release.lua")));
/// Read-only view of the lock, its owner record and its fence.
pub(crate) static INSPECT: LazyLock<Script> = LazyLock::new(|| {
    Script::from_lua(concat!(
        include_str!("../../lua/holder.lua"),
        include_str!("../../lua/inspect.lua")
    ))
});

/// Gives a master that lost its data the policy of a majority of groups.
pub(crate) static ADOPT: LazyLock<Script> = LazyLock::new(|| {
    Script::from_lua(concat!(
        include_str!("../../lua/info.lua"),
        include_str!("../../lua/adopt.lua")
    ))
});
/// Reads a listing's keys in some slots of one Cluster primary.
pub(crate) static LIST_SLOTS: LazyLock<Script> =
    LazyLock::new(|| Script::from_lua(include_str!("../../lua/list_slots.lua")));
/// Read-only view of a master's lock policy.
pub(crate) static POLICY: LazyLock<Script> =
    LazyLock::new(|| Script::from_lua(include_str!("../../lua/policy.lua")));

/// Puts a master, or a Cluster slot, back in quarantine (operators).
pub(crate) static QUARANTINE: LazyLock<Script> = LazyLock::new(|| {
    Script::from_lua(concat!(
        include_str!("../../lua/info.lua"),
        include_str!("../../lua/quarantine.lua")
    ))
});

/// Read-only view of a master's admission, for health reports.
pub(crate) static ADMISSION_STATE: LazyLock<Script> = LazyLock::new(|| {
    Script::from_lua(concat!(
        include_str!("../../lua/info.lua"),
        include_str!("../../lua/admission_state.lua")
    ))
});

/// A script about a whole group (its admission or policy), run once on a master, or, in a
/// Cluster group, once per slot: by one call per primary of its `each_slot` form
/// (`lua/each_slot.lua` around the script as a function).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GroupScript {
    Admit,
    Adopt,
    Policy,
    AdmissionState,
    Quarantine,
}

/// `lua/each_slot.lua` around the script made of `parts`, as the function `RUN`.
macro_rules! each_slot {
    ($($part:literal),+) => {
        LazyLock::new(|| {
            Script::from_lua(concat!(
                "local function RUN(KEYS, ARGV)\n",
                $(include_str!($part),)+
                "end\n",
                include_str!("../../lua/each_slot.lua")
            ))
        })
    };
}

static ADMIT_EACH_SLOT: LazyLock<Script> = each_slot!("../../lua/info.lua", "../../lua/admit.lua");
static ADOPT_EACH_SLOT: LazyLock<Script> = each_slot!("../../lua/info.lua", "../../lua/adopt.lua");
static POLICY_EACH_SLOT: LazyLock<Script> = each_slot!("../../lua/policy.lua");
static ADMISSION_STATE_EACH_SLOT: LazyLock<Script> =
    each_slot!("../../lua/info.lua", "../../lua/admission_state.lua");
static QUARANTINE_EACH_SLOT: LazyLock<Script> =
    each_slot!("../../lua/info.lua", "../../lua/quarantine.lua");

impl GroupScript {
    /// The script as one master runs it.
    pub fn single(self) -> &'static Script {
        match self {
            GroupScript::Admit => &ADMIT,
            GroupScript::Adopt => &ADOPT,
            GroupScript::Policy => &POLICY,
            GroupScript::AdmissionState => &ADMISSION_STATE,
            GroupScript::Quarantine => &QUARANTINE,
        }
    }

    /// The script run for each of a Cluster primary's slots in one call.
    pub fn each_slot(self) -> &'static Script {
        match self {
            GroupScript::Admit => &ADMIT_EACH_SLOT,
            GroupScript::Adopt => &ADOPT_EACH_SLOT,
            GroupScript::Policy => &POLICY_EACH_SLOT,
            GroupScript::AdmissionState => &ADMISSION_STATE_EACH_SLOT,
            GroupScript::Quarantine => &QUARANTINE_EACH_SLOT,
        }
    }
}

/// Every script the engine runs by SHA, to load onto a master before its first lock call:
/// a NOSCRIPT round trip on the hot path would delay that group past the vote.
pub(crate) fn all() -> [&'static Script; 18] {
    [
        &ACQUIRE,
        &PERMIT,
        &EXTEND,
        &RELEASE,
        &BATCH,
        &FORCE_RELEASE,
        &INSPECT,
        &ADMISSION_STATE,
        &ADOPT,
        &POLICY,
        &ADMIT,
        &ADMIT_EACH_SLOT,
        &ADOPT_EACH_SLOT,
        &POLICY_EACH_SLOT,
        &ADMISSION_STATE_EACH_SLOT,
        &LIST_SLOTS,
        &QUARANTINE,
        &QUARANTINE_EACH_SLOT,
    ]
}

/// Admits a master's current replication history to the vote under a lock policy (bootstrap
/// of fresh masters, and raising a policy).
pub(crate) const ADMIT_LUA: &str = concat!(
    include_str!("../../lua/info.lua"),
    include_str!("../../lua/admit.lua")
);
/// [`ADMIT_LUA`], run by SHA.
pub(crate) static ADMIT: LazyLock<Script> = LazyLock::new(|| Script::from_lua(ADMIT_LUA));
