//! The Lua scripts in `lua/`, compiled into the binary and declared once here: each script
//! is one entry of the `scripts!` table, which also builds [`all`], the list of every script.
//!
//! Each script runs atomically on one master; the engine calls them by SHA and reloads them
//! when a master answers NOSCRIPT (after a restart, a failover or `SCRIPT FLUSH`). Shared
//! prologues are prepended at compile time: `holder.lua` (the lock's value) to every script
//! that reads a lock, `info.lua` to those that read INFO, `policy_fields.lua` to those that
//! read or write the lock policy, `admission.lua` to the scripts that vote. `BATCH` carries acquire,
//! release and extend as functions, for the group-commit path (`crate::batch`).

use std::sync::LazyLock;

use fred::types::scripts::Script;

/// The text of the `lua/` files named, one after the other.
macro_rules! lua {
    ($($file:literal),+ $(,)?) => {
        concat!($(include_str!(concat!("../../lua/", $file))),+)
    };
}

/// The prologues of a script that votes (the lock's value, INFO, admission), then `files`.
macro_rules! voting {
    ($($file:literal),*) => {
        lua!("holder.lua", "info.lua", "policy_fields.lua", "admission.lua" $(, $file)*)
    };
}

/// `lua/each_slot.lua` around the script made of `files`, as the function `RUN`.
macro_rules! each_slot {
    ($($file:literal),+) => {
        concat!(
            "local function RUN(KEYS, ARGV)\n",
            lua!($($file),+),
            "end\n",
            lua!("each_slot.lua")
        )
    };
}

/// Declares each script once, as a static compiled on first use, and [`all`] from the same
/// list.
macro_rules! scripts {
    ($($(#[$doc:meta])* $vis:vis $name:ident = $source:expr;)+) => {
        $(
            $(#[$doc])*
            $vis static $name: LazyLock<Script> =
                LazyLock::new(|| Script::from_lua($source));
        )+

        /// Every script the engine runs by SHA, to load onto a master before its first lock
        /// call: a NOSCRIPT round trip on the hot path would delay that group past the vote.
        pub(crate) fn all() -> [&'static Script; [$(stringify!($name)),+].len()] {
            [$(&$name),+]
        }
    };
}

/// Admits a master's current replication history to the vote under a lock policy (bootstrap
/// of fresh masters, and raising a policy).
pub(crate) const ADMIT_LUA: &str = lua!("info.lua", "policy_fields.lua", "admit.lua");

scripts! {
    /// Grant when admitted, free (or ours) and the fencing proposal is above the stored fence.
    pub(crate) ACQUIRE = voting!("acquire.lua");
    /// Grant one permit of a semaphore: a free slot, when admitted and the count agrees.
    pub(crate) PERMIT = voting!("permit.lua");
    /// Compare-and-pexpire of the lock, when admitted.
    pub(crate) EXTEND = voting!("extend.lua");
    /// Compare-and-delete of the lock.
    pub(crate) RELEASE = lua!("holder.lua", "release.lua");
    /// Several acquire, permit, release and extend calls in one script call.
    pub(crate) BATCH = concat!(
        voting!(),
        "local CALLS = {}\nCALLS.acquire = function(KEYS, ARGV)\n",
        lua!("acquire.lua"),
        "end\nCALLS.release = function(KEYS, ARGV)\n",
        lua!("release.lua"),
        "end\nCALLS.extend = function(KEYS, ARGV)\n",
        lua!("extend.lua"),
        "end\nCALLS.permit = function(KEYS, ARGV)\n",
        lua!("permit.lua"),
        "end\n",
        lua!("batch.lua")
    );
    /// Delete of the lock whatever the token (operators only).
    pub(crate) FORCE_RELEASE = lua!("force_release.lua");
    /// Read-only view of the lock, its owner record and its fence.
    pub(crate) INSPECT = lua!("holder.lua", "inspect.lua");
    /// Read-only view of a master's admission, for health reports.
    pub(crate) ADMISSION_STATE = lua!("info.lua", "policy_fields.lua", "admission_state.lua");
    /// Gives a master that lost its data the policy of a majority of groups.
    pub(crate) ADOPT = lua!("info.lua", "policy_fields.lua", "adopt.lua");
    /// Read-only view of a master's lock policy.
    pub(crate) POLICY = lua!("policy_fields.lua", "policy.lua");
    /// [`ADMIT_LUA`], run by SHA.
    pub(crate) ADMIT = ADMIT_LUA;
    ADMIT_EACH_SLOT = each_slot!("info.lua", "policy_fields.lua", "admit.lua");
    ADOPT_EACH_SLOT = each_slot!("info.lua", "policy_fields.lua", "adopt.lua");
    POLICY_EACH_SLOT = each_slot!("policy_fields.lua", "policy.lua");
    ADMISSION_STATE_EACH_SLOT = each_slot!("info.lua", "policy_fields.lua", "admission_state.lua");
    /// Reads a listing's keys in some slots of one Cluster primary.
    pub(crate) LIST_SLOTS = lua!("list_slots.lua");
    /// Puts a master, or a Cluster slot, back in quarantine (operators).
    pub(crate) QUARANTINE = lua!("info.lua", "policy_fields.lua", "quarantine.lua");
    QUARANTINE_EACH_SLOT = each_slot!("info.lua", "policy_fields.lua", "quarantine.lua");
}

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
