"""The exceptions: one base class, and one class per way a call can fail, each carrying the
facts of the engine's error (who holds the lock, which groups failed, which field is wrong).
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional

from ._types import GroupVote, Holder


class QuorumlockError(Exception):
    """Base class of every error the package raises. `message` says what happened and what
    to do next."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ConfigError(QuorumlockError):
    """The topology file is missing, unreadable or invalid; `key` names the wrong key when
    one is."""

    def __init__(self, message: str, key: Optional[str] = None) -> None:
        super().__init__(message)
        self.key = key


class InvalidInput(QuorumlockError, ValueError):
    """A value passed in is out of bounds; `field` names it ("ttl", "wait", "resource",
    "permits", ...)."""

    def __init__(self, message: str, field: str, reason: str) -> None:
        super().__init__(message)
        self.field = field
        self.reason = reason


class HeldByAnother(QuorumlockError):
    """Someone else holds the lock and `wait` ran out; `holder` says who, as the groups told
    (None when they did not say)."""

    def __init__(
        self,
        message: str,
        resource: str,
        holder: Optional[Holder],
        votes: List[GroupVote],
    ) -> None:
        super().__init__(message)
        self.resource = resource
        self.holder = holder
        self.votes = votes


class NoQuorum(QuorumlockError):
    """Too few groups answered to decide: the infrastructure failed, not the contention.
    `failed_groups` names them; the lock was not taken."""

    def __init__(
        self,
        message: str,
        resource: str,
        needed: int,
        total: int,
        failed_groups: List[str],
        votes: List[GroupVote],
    ) -> None:
        super().__init__(message)
        self.resource = resource
        self.needed = needed
        self.total = total
        self.failed_groups = failed_groups
        self.votes = votes


class ListingUnavailable(NoQuorum):
    """Too few groups answered for a listing to tell which locks are held."""


class Expired(QuorumlockError):
    """A majority granted, but the round trips used up the lease's validity; the grants were
    rolled back. Use a longer ttl."""

    def __init__(
        self, message: str, resource: str, elapsed_ms: int, votes: List[GroupVote]
    ) -> None:
        super().__init__(message)
        self.resource = resource
        self.elapsed_ms = elapsed_ms
        self.votes = votes


class NotHeld(QuorumlockError):
    """The token no longer holds the lock on a majority (it expired, was released, or was
    force-released)."""

    def __init__(self, message: str, resource: str, votes: List[GroupVote]) -> None:
        super().__init__(message)
        self.resource = resource
        self.votes = votes


class LeaseLost(QuorumlockError):
    """The lease ended while the block under it ran: the keepalive found it lost, its
    validity ran out, or it reached max_hold_ms. The block may be partly done; writes fenced
    with its fencing token are refused once a later holder wrote."""

    def __init__(self, message: str, resource: str, reason: str) -> None:
        super().__init__(message)
        self.resource = resource
        self.reason = reason


def lease_lost(resource: str, reason: str) -> LeaseLost:
    """The LeaseLost of a block, worded as the engine words it."""
    message = (
        f"the lease on `{resource}` was lost while the work ran ({reason}); the work was "
        "stopped and may be partly done: check what it wrote (fenced storage rejects writes "
        "under its fencing token once a later holder wrote), then acquire again"
    )
    return LeaseLost(message, resource, reason)


def _votes(facts: Dict[str, Any]) -> List[GroupVote]:
    return [GroupVote.from_json(vote) for vote in facts.get("votes") or []]


def _from_native(kind: str, message: str, facts_json: str) -> QuorumlockError:
    """Builds the exception the native module raises for an engine error of `kind`."""
    facts: Dict[str, Any] = json.loads(facts_json)
    if kind == "invalid_input":
        return InvalidInput(message, str(facts["field"]), str(facts["reason"]))
    if kind == "held":
        holder = facts.get("holder")
        return HeldByAnother(
            message,
            str(facts["resource"]),
            None if holder is None else Holder.from_json(holder),
            _votes(facts),
        )
    if kind in ("unavailable", "listing_unavailable"):
        cls = NoQuorum if kind == "unavailable" else ListingUnavailable
        return cls(
            message,
            str(facts["resource"]),
            int(facts["needed"]),
            int(facts["total"]),
            [str(group) for group in facts["failed_groups"]],
            _votes(facts),
        )
    if kind == "expired":
        return Expired(
            message, str(facts["resource"]), int(facts["elapsed_ms"]), _votes(facts)
        )
    if kind == "not_held":
        return NotHeld(message, str(facts["resource"]), _votes(facts))
    if kind == "lease_lost":
        return LeaseLost(message, str(facts["resource"]), str(facts["reason"]))
    if kind == "config":
        key = facts.get("key")
        return ConfigError(message, None if key is None else str(key))
    return QuorumlockError(message)
