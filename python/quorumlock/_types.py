"""The views the engine returns, as dataclasses: a lock's status, the listing, health.

Each is read from the JSON the native module writes; fields the engine leaves out (absent
options) come back as None.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

Json = Dict[str, Any]


def _opt_int(data: Json, key: str) -> Optional[int]:
    value = data.get(key)
    return None if value is None else int(value)


def _opt_str(data: Json, key: str) -> Optional[str]:
    value = data.get(key)
    return None if value is None else str(value)


@dataclass(frozen=True)
class Holder:
    """Who holds a lock, as far as the groups told: owner and purpose as given, and the
    milliseconds left on the holder's lease (it may extend it)."""

    owner: Optional[str]
    purpose: Optional[str]
    remaining_ms: int

    @classmethod
    def from_json(cls, data: Json) -> Holder:
        return cls(
            owner=_opt_str(data, "owner"),
            purpose=_opt_str(data, "purpose"),
            remaining_ms=int(data.get("remaining_ms", 0)),
        )


@dataclass(frozen=True)
class GroupVote:
    """One group's vote: `vote` is its kind ("granted", "held", "timeout", "error",
    "quarantined", ...), `details` the rest (a holder's owner, an error's message)."""

    group: str
    vote: str
    details: Json = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Json) -> GroupVote:
        details = {k: v for k, v in data.items() if k not in ("group", "vote")}
        return cls(group=str(data["group"]), vote=str(data["vote"]), details=details)


@dataclass(frozen=True)
class GroupView:
    """One group's view of one lock; `state` is "held", "free", "timeout" or "error"."""

    group: str
    state: str
    remaining_ms: Optional[int]
    owner: Optional[str]
    purpose: Optional[str]
    fence: Optional[int]
    error: Optional[str]

    @classmethod
    def from_json(cls, data: Json) -> GroupView:
        return cls(
            group=str(data["group"]),
            state=str(data["state"]),
            remaining_ms=_opt_int(data, "remaining_ms"),
            owner=_opt_str(data, "owner"),
            purpose=_opt_str(data, "purpose"),
            fence=_opt_int(data, "fence"),
            error=_opt_str(data, "error"),
        )


@dataclass(frozen=True)
class HolderGroups:
    """One token a lock is held under, with the groups that hold it."""

    owner: Optional[str]
    purpose: Optional[str]
    remaining_ms: int
    fencing_token: Optional[int]
    groups: List[str]
    majority: bool

    @classmethod
    def from_json(cls, data: Json) -> HolderGroups:
        return cls(
            owner=_opt_str(data, "owner"),
            purpose=_opt_str(data, "purpose"),
            remaining_ms=int(data["remaining_ms"]),
            fencing_token=_opt_int(data, "fencing_token"),
            groups=[str(g) for g in data["groups"]],
            majority=bool(data["majority"]),
        )


@dataclass(frozen=True)
class LockStatus:
    """A lock as the quorum sees it. Advisory: it may change right after it is read."""

    resource: str
    held: bool
    holder: Optional[Holder]
    fencing_token: Optional[int]
    groups: List[GroupView]
    holders: List[HolderGroups]
    split: bool

    @classmethod
    def from_json(cls, data: Json) -> LockStatus:
        holder = data.get("holder")
        return cls(
            resource=str(data["resource"]),
            held=bool(data["held"]),
            holder=None if holder is None else Holder.from_json(holder),
            fencing_token=_opt_int(data, "fencing_token"),
            groups=[GroupView.from_json(g) for g in data["groups"]],
            holders=[HolderGroups.from_json(h) for h in data["holders"]],
            split=bool(data["split"]),
        )


@dataclass(frozen=True)
class ListedLock:
    """One current lock, as listed."""

    resource: str
    owner: Optional[str]
    purpose: Optional[str]
    remaining_ms: int
    fencing_token: Optional[int]

    @classmethod
    def from_json(cls, data: Json) -> ListedLock:
        return cls(
            resource=str(data["resource"]),
            owner=_opt_str(data, "owner"),
            purpose=_opt_str(data, "purpose"),
            remaining_ms=int(data["remaining_ms"]),
            fencing_token=_opt_int(data, "fencing_token"),
        )


@dataclass(frozen=True)
class PermitHolder:
    """One held permit of a semaphore: its slot (0 to permits - 1) and its holder."""

    permit: int
    holder: Holder
    fencing_token: Optional[int]

    @classmethod
    def from_json(cls, data: Json) -> PermitHolder:
        return cls(
            permit=int(data["permit"]),
            holder=Holder.from_json(data),
            fencing_token=_opt_int(data, "fencing_token"),
        )


@dataclass(frozen=True)
class SemaphoreStatus:
    """A semaphore as the groups see it: the permit count a majority keeps (None when it is
    not in use) and the permits held now."""

    name: str
    permits: Optional[int]
    holders: List[PermitHolder]

    @classmethod
    def from_json(cls, data: Json) -> SemaphoreStatus:
        return cls(
            name=str(data["name"]),
            permits=_opt_int(data, "permits"),
            holders=[PermitHolder.from_json(h) for h in data["holders"]],
        )


@dataclass(frozen=True)
class LockList:
    """Current locks and semaphores whose name starts with a prefix; `next_cursor` is set
    when more match than this page holds."""

    locks: List[ListedLock]
    semaphores: List[SemaphoreStatus]
    truncated: bool
    next_cursor: Optional[str]

    @classmethod
    def from_json(cls, data: Json) -> LockList:
        return cls(
            locks=[ListedLock.from_json(lock) for lock in data["locks"]],
            semaphores=[SemaphoreStatus.from_json(s) for s in data["semaphores"]],
            truncated=bool(data["truncated"]),
            next_cursor=_opt_str(data, "next_cursor"),
        )


@dataclass(frozen=True)
class SentinelView:
    """One Sentinel's answer about a group: the master it names, or why it did not answer."""

    sentinel: str
    master: Optional[str]
    error: Optional[str]

    @classmethod
    def from_json(cls, data: Json) -> SentinelView:
        return cls(
            sentinel=str(data["sentinel"]),
            master=_opt_str(data, "master"),
            error=_opt_str(data, "error"),
        )


@dataclass(frozen=True)
class ReplicaView:
    """One replica as its master reports it."""

    address: str
    state: str
    lag_s: Optional[int]
    bytes_behind: Optional[int]

    @classmethod
    def from_json(cls, data: Json) -> ReplicaView:
        return cls(
            address=str(data["address"]),
            state=str(data["state"]),
            lag_s=_opt_int(data, "lag_s"),
            bytes_behind=_opt_int(data, "bytes_behind"),
        )


@dataclass(frozen=True)
class Admission:
    """Whether a master takes part in the vote: `state` is "voting", "quarantined" (for
    `remaining_ms` more), "unadmitted", "no_policy", "evicts" (with its
    `maxmemory_policy`) or "unknown"."""

    state: str
    remaining_ms: Optional[int] = None
    maxmemory_policy: Optional[str] = None

    @classmethod
    def from_json(cls, data: Json) -> Admission:
        return cls(
            state=str(data["state"]),
            remaining_ms=_opt_int(data, "remaining_ms"),
            maxmemory_policy=_opt_str(data, "maxmemory_policy"),
        )


@dataclass(frozen=True)
class Policy:
    """The lock policy a master holds: its longest TTL, its write window, and the replicas
    that acknowledge each vote in acknowledged mode (0 otherwise)."""

    max_ttl_ms: int
    write_window_ms: int
    acked_replicas: int

    @classmethod
    def from_json(cls, data: Json) -> Policy:
        return cls(
            max_ttl_ms=int(data["max_ttl_ms"]),
            write_window_ms=int(data["write_window_ms"]),
            acked_replicas=int(data.get("acked_replicas", 0)),
        )


@dataclass(frozen=True)
class GroupHealth:
    """One group's health: reachability and latency, the master in use and what each
    Sentinel names, replicas, admission, policy, and settings that break an assumption."""

    group: str
    reachable: bool
    latency_ms: Optional[float]
    error: Optional[str]
    master: Optional[str]
    role: Optional[str]
    replicas: List[ReplicaView]
    sentinels: List[SentinelView]
    sentinels_agree: Optional[bool]
    admission: Admission
    policy: Optional[Policy]
    unsafe_settings: List[str]

    @classmethod
    def from_json(cls, data: Json) -> GroupHealth:
        latency = data.get("latency_ms")
        agree = data.get("sentinels_agree")
        policy = data.get("policy")
        return cls(
            group=str(data["group"]),
            reachable=bool(data["reachable"]),
            latency_ms=None if latency is None else float(latency),
            error=_opt_str(data, "error"),
            master=_opt_str(data, "master"),
            role=_opt_str(data, "role"),
            replicas=[ReplicaView.from_json(r) for r in data.get("replicas", [])],
            sentinels=[SentinelView.from_json(s) for s in data.get("sentinels", [])],
            sentinels_agree=None if agree is None else bool(agree),
            admission=Admission.from_json(data["admission"]),
            policy=None if policy is None else Policy.from_json(policy),
            unsafe_settings=[str(s) for s in data.get("unsafe_settings", [])],
        )


@dataclass(frozen=True)
class Health:
    """Every group's health, and whether a majority (`quorum` groups) can vote."""

    quorum_available: bool
    quorum: int
    voting: int
    groups: List[GroupHealth]

    @classmethod
    def from_json(cls, data: Json) -> Health:
        return cls(
            quorum_available=bool(data["quorum_available"]),
            quorum=int(data["quorum"]),
            voting=int(data["voting"]),
            groups=[GroupHealth.from_json(g) for g in data["groups"]],
        )
