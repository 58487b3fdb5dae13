"""Majority-backed distributed locks with fencing tokens, for Python.

The quorumlock engine runs in this process: a lock is granted when a majority of the
independent Redis master groups of the topology agree, and every lease carries a fencing
token that grows from one holder to the next. A keepalive renews the lease while the block
under it runs::

    import quorumlock

    locks = quorumlock.connect()          # the CLI's config search

    async with locks.lock("db:migrations", ttl=15, wait=10, owner="agent-7") as lease:
        store.write(lease.fencing_token, ...)

    with locks.lock("db:migrations") as lease:   # the same in sync code
        store.write(lease.fencing_token, ...)

An async block whose lease is lost is cancelled at its next await, before anyone else can
hold the lock, and `async with` raises LeaseLost; `lease.lost` (an asyncio.Event) is set for
the tasks the block handed the lease to. Cancelling the task releases the lock.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import weakref
from types import TracebackType
from typing import Any, Dict, List, Optional, Sequence, Tuple, Type, Union

from . import _native
from ._errors import (
    ConfigError,
    Expired,
    HeldByAnother,
    InvalidInput,
    LeaseLost,
    ListingUnavailable,
    NoQuorum,
    NotHeld,
    QuorumlockError,
    lease_lost,
)
from ._types import (
    Admission,
    GroupHealth,
    GroupView,
    GroupVote,
    Health,
    Holder,
    HolderGroups,
    ListedLock,
    LockList,
    LockStatus,
    PermitHolder,
    Policy,
    ReplicaView,
    SemaphoreStatus,
    SentinelView,
)

__all__ = [
    "Admission",
    "AsyncLease",
    "ConfigError",
    "Expired",
    "GroupHealth",
    "GroupView",
    "GroupVote",
    "Health",
    "HeldByAnother",
    "Holder",
    "HolderGroups",
    "InvalidInput",
    "Lease",
    "LeaseLost",
    "ListedLock",
    "ListingUnavailable",
    "LockList",
    "LockRequest",
    "LockStatus",
    "Locks",
    "MAX_PERMITS",
    "NoQuorum",
    "NotHeld",
    "PermitHolder",
    "Policy",
    "QuorumlockError",
    "ReplicaView",
    "SemaphoreStatus",
    "SentinelView",
    "aconnect",
    "connect",
]

__version__ = "0.1.0"

MAX_PERMITS: int = _native.MAX_PERMITS

PathLike = Union[str, "os.PathLike[str]"]

_log = logging.getLogger("quorumlock")


def _invalid(field: str, reason: str) -> InvalidInput:
    return InvalidInput(f"invalid {field}: {reason}", field, reason)


def _seconds(field: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _invalid(field, f"must be a number of seconds, not {type(value).__name__}")
    return float(value)


def _text(field: str, value: object) -> str:
    if not isinstance(value, str):
        raise _invalid(field, f"must be a string, not {type(value).__name__}")
    return value


def _label(field: str, value: object) -> Optional[str]:
    return None if value is None else _text(field, value)


def _count(field: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _invalid(field, f"must be an integer, not {type(value).__name__}")
    return value


def _path(config_path: Optional[PathLike]) -> Optional[str]:
    if config_path is None:
        return None
    if not isinstance(config_path, (str, os.PathLike)):
        raise _invalid("config_path", "must be a path")
    return os.fspath(config_path)


# One bridge per event loop: the engine's runtime completes the loop's futures through it,
# waking the loop with a byte on a socket the loop watches.
_bridges: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _native.Bridge]" = (
    weakref.WeakKeyDictionary()
)


def _bridge() -> _native.Bridge:
    """The running loop's bridge, made on its first call. The loop must support add_reader
    (every selector loop does, uvloop too)."""
    loop = asyncio.get_running_loop()
    bridge = _bridges.get(loop)
    if bridge is None:
        bridge = _native.Bridge(loop)
        loop.add_reader(bridge.fileno(), bridge.drain)
        _bridges[loop] = bridge
    return bridge


def connect(config_path: Optional[PathLike] = None) -> Locks:
    """Connects to every group of the topology in `config_path`, or else of the file the
    CLI would find: QUORUMLOCK_CONFIG, ./quorumlock.toml, the user's
    ~/.config/quorumlock/quorumlock.toml (or $XDG_CONFIG_HOME's), /etc/quorumlock/quorumlock.toml.
    Passwords kept in files or variables, and QUORUMLOCK_* overrides, are read as the CLI
    reads them. Groups that are down do not fail the call: they reconnect in the background.

    Blocks until connected (without holding the GIL); in async code, use `aconnect`."""
    native = _native.connect(_path(config_path), None)
    return Locks(native)


async def aconnect(config_path: Optional[PathLike] = None) -> Locks:
    """`connect` for async code: the event loop runs on while it connects."""
    native = await _native.connect(_path(config_path), _bridge())
    return Locks(native)


class Locks:
    """A connection to every group; share it (one per process is plenty).

    `lock`, `lock_all` and `semaphore` return a LockRequest, used with `with` or
    `async with`. The views come twice: `status` for sync code and `astatus` for async
    code, and so on."""

    def __init__(self, native: _native.NativeLocks) -> None:
        self._native = native

    @property
    def config_path(self) -> str:
        """The topology file in use."""
        return self._native.config_path

    @property
    def quorum(self) -> int:
        """Votes needed for a majority."""
        return self._native.quorum

    @property
    def groups(self) -> List[str]:
        """The names of the groups that vote."""
        return self._native.groups

    def __repr__(self) -> str:
        return f"<quorumlock.Locks {len(self.groups)} groups from {self.config_path}>"

    def lock(
        self,
        resource: str,
        *,
        ttl: Optional[float] = None,
        wait: float = 0.0,
        owner: Optional[str] = None,
        purpose: Optional[str] = None,
    ) -> LockRequest:
        """A lock on `resource`. `ttl`: seconds the lock lives on each group between renewals
        (default 15, or the topology's max_ttl_ms when lower); `wait`: seconds to keep
        trying while someone else holds it or the quorum is down (default 0: one try);
        `owner` and `purpose`: shown to everyone who inspects or waits for it."""
        return LockRequest(
            self, "one", [_text("resource", resource)], 0, ttl, wait, owner, purpose
        )

    def lock_all(
        self,
        resources: Sequence[str],
        *,
        ttl: Optional[float] = None,
        wait: float = 0.0,
        owner: Optional[str] = None,
        purpose: Optional[str] = None,
    ) -> LockRequest:
        """Several resources at once, all or nothing: one lease and one fencing token for all
        of them. Names may come in any order; two callers naming the same resources never
        deadlock."""
        if isinstance(resources, str) or not isinstance(resources, Sequence):
            raise _invalid("resources", "must be a list of resource names")
        names = [_text("resources", name) for name in resources]
        return LockRequest(self, "all", names, 0, ttl, wait, owner, purpose)

    def semaphore(
        self,
        name: str,
        permits: int,
        *,
        ttl: Optional[float] = None,
        wait: float = 0.0,
        owner: Optional[str] = None,
        purpose: Optional[str] = None,
    ) -> LockRequest:
        """One permit of the semaphore `name`, which has `permits` permits (every caller must
        name the same count): at most that many holders at once."""
        return LockRequest(
            self,
            "permit",
            [_text("name", name)],
            _count("permits", permits),
            ttl,
            wait,
            owner,
            purpose,
        )

    def status(self, resource: str) -> LockStatus:
        """The lock as every group sees it now (advisory)."""
        raw: str = self._native.status(_text("resource", resource), None)
        return LockStatus.from_json(_json(raw))

    async def astatus(self, resource: str) -> LockStatus:
        raw: str = await self._native.status(_text("resource", resource), _bridge())
        return LockStatus.from_json(_json(raw))

    def list(
        self, prefix: str = "", *, limit: int = 100, cursor: Optional[str] = None
    ) -> LockList:
        """Locks held on a majority whose name starts with `prefix`, and semaphores with a
        permit held: one page of at most `limit`; pass `next_cursor` for the next."""
        args = _list_args(prefix, limit, cursor)
        return LockList.from_json(_json(self._native.list(*args, None)))

    async def alist(
        self, prefix: str = "", *, limit: int = 100, cursor: Optional[str] = None
    ) -> LockList:
        args = _list_args(prefix, limit, cursor)
        return LockList.from_json(_json(await self._native.list(*args, _bridge())))

    def semaphore_status(self, name: str) -> SemaphoreStatus:
        """The permit count and the permits held of semaphore `name` (advisory)."""
        raw: str = self._native.semaphore_status(_text("name", name), None)
        return SemaphoreStatus.from_json(_json(raw))

    async def asemaphore_status(self, name: str) -> SemaphoreStatus:
        raw: str = await self._native.semaphore_status(_text("name", name), _bridge())
        return SemaphoreStatus.from_json(_json(raw))

    def health(self) -> Health:
        """Every group's health, and whether a majority can vote."""
        return Health.from_json(_json(self._native.health(None)))

    async def ahealth(self) -> Health:
        return Health.from_json(_json(await self._native.health(_bridge())))

    def force_release(self, resource: str) -> bool:
        """Deletes the lock on every group whoever holds it, for operators clearing a stuck
        lock. The holder is not told; its fencing token stays below every later holder's."""
        released: bool = self._native.force_release(_text("resource", resource), None)
        return released

    async def aforce_release(self, resource: str) -> bool:
        released: bool = await self._native.force_release(_text("resource", resource), _bridge())
        return released

    def close(self) -> None:
        """Lets the calls in flight land, then closes every connection. A process that
        exits right after releasing should call it."""
        self._native.close(None)

    async def aclose(self) -> None:
        await self._native.close(_bridge())

    def __enter__(self) -> Locks:
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()

    async def __aenter__(self) -> Locks:
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await self.aclose()


def _json(raw: Any) -> Dict[str, Any]:
    import json

    value: Dict[str, Any] = json.loads(raw)
    return value


def _list_args(prefix: str, limit: int, cursor: Optional[str]) -> Tuple[str, int, Optional[str]]:
    return (_text("prefix", prefix), _count("limit", limit), _label("cursor", cursor))


class LockRequest:
    """What `Locks.lock`, `lock_all` and `semaphore` return: use it with `with` (a Lease)
    or `async with` (an AsyncLease). The lease is kept alive while the block runs and
    released when it ends. One request may serve several tasks or threads at once, each
    with a lease of its own."""

    def __init__(
        self,
        locks: Locks,
        kind: str,
        names: List[str],
        permits: int,
        ttl: Optional[float],
        wait: float,
        owner: Optional[str],
        purpose: Optional[str],
    ) -> None:
        self._locks = locks
        self._kind = kind
        self._names = names
        # The native acquire's arguments before the bridge, checked and built once.
        self._request = (
            kind,
            names,
            permits,
            None if ttl is None else _seconds("ttl", ttl),
            _seconds("wait", wait),
            _label("owner", owner),
            _label("purpose", purpose),
        )
        # The leases of the blocks running now, by task (async) or thread (sync).
        self._held: Dict[object, List[Any]] = {}

    def __repr__(self) -> str:
        return f"<quorumlock.LockRequest {self._kind} {self._names}>"

    def acquire(self) -> Lease:
        """Acquires without a block: the caller must `release()` the lease (dropping it
        releases it too, in the background). The keepalive renews it meanwhile."""
        return Lease(self._locks._native.acquire(*self._request, None))

    async def aacquire(self) -> AsyncLease:
        """`acquire` for async code; `lease.lost` is set if the lease ends, but no task is
        cancelled: the caller watches it."""
        return await self._acquire_for(None)

    async def _acquire_for(self, task: Optional["asyncio.Task[Any]"]) -> AsyncLease:
        """An async lease whose end cancels `task` (none: nothing is cancelled)."""
        relay = _EndRelay()
        native = await self._locks._native.acquire(*self._request, _bridge(), relay)
        return AsyncLease(native, task, relay)

    def _push(self, key: object, lease: Any) -> None:
        self._held.setdefault(key, []).append(lease)

    def _pop(self, key: object) -> Any:
        stack = self._held[key]
        lease = stack.pop()
        if not stack:
            del self._held[key]
        return lease

    def __enter__(self) -> Lease:
        lease = self.acquire()
        self._push(("thread", threading.get_ident()), lease)
        return lease

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        lease: Lease = self._pop(("thread", threading.get_ident()))
        reason = lease._lost_reason()
        try:
            lease.release()
        except QuorumlockError as error:
            _log.warning("releasing %s after the block failed; its TTL frees it: %s", self._names, error)
        if reason is not None:
            raise lease_lost(lease.resource, reason) from exc

    async def __aenter__(self) -> AsyncLease:
        task = asyncio.current_task()
        lease = await self._acquire_for(task)
        self._push(("task", id(task)), lease)
        return lease

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        lease: AsyncLease = self._pop(("task", id(asyncio.current_task())))
        await lease._exit_block(exc_type, exc)


class Lease:
    """A lease held in sync code, renewed by the engine's keepalive until released.

    Pass `fencing_token` with every write to the protected resource. Check `lost` (or call
    `check()`) before a write: a sync block cannot be stopped from outside, so the `with`
    statement raises LeaseLost only when the block ends."""

    def __init__(self, native: _native.NativeLease) -> None:
        self._native = native

    @property
    def resource(self) -> str:
        """The resource; for `lock_all`, the first of `resources`."""
        return self._native.resources[0]

    @property
    def resources(self) -> List[str]:
        """Every resource the lease holds, in canonical (sorted) order."""
        return self._native.resources

    @property
    def token(self) -> str:
        """The secret that proves ownership (for a permit it names the permit's slot)."""
        return self._native.token

    @property
    def fencing_token(self) -> int:
        """Larger than the fencing token of every earlier holder of the resource."""
        return self._native.fencing_token

    @property
    def ttl(self) -> float:
        """Seconds each renewal asks for."""
        return self._native.ttl

    @property
    def validity(self) -> float:
        """Seconds before the lease may no longer be relied on (0 once it ended): do not
        begin a write that cannot finish by then."""
        return self._native.validity()

    def _lost_reason(self) -> Optional[str]:
        reason = self._native.lost_reason()
        if reason is None:
            ended = self._native.ended()
            if ended is not None and ended[0] == "max_hold":
                reason = ended[1]
        return reason

    @property
    def lost(self) -> bool:
        """True once the lease no longer protects the work: lost, run out, or stopped at
        max_hold_ms."""
        return self._lost_reason() is not None

    def check(self) -> None:
        """Raises LeaseLost if the lease no longer protects the work."""
        reason = self._lost_reason()
        if reason is not None:
            raise lease_lost(self.resource, reason)

    def release(self) -> bool:
        """Stops the keepalive and releases the lock on every group; returns whether this
        call deleted it (False when it was gone already or released before)."""
        released: bool = self._native.release(None)
        return released

    def __repr__(self) -> str:
        return f"<quorumlock.Lease {self.resources} fencing_token={self.fencing_token}>"


class _EndRelay:
    """What the engine calls on the event loop when a lease ends before its release. It is
    handed to the acquire, so the engine watches the lease from the moment it holds it, and
    it holds the lease weakly, so that a lease nobody keeps is still dropped (and released).
    An end that arrives before the lease object exists waits here for it."""

    __slots__ = ("_lease", "_end")

    def __init__(self) -> None:
        self._lease: Optional["weakref.ref[AsyncLease]"] = None
        self._end: Optional[Tuple[str, str]] = None

    def follow(self, lease: "AsyncLease") -> None:
        self._lease = weakref.ref(lease)
        if self._end is not None:
            lease._ended(self._end)

    def __call__(self, end: Tuple[str, str]) -> None:
        if self._lease is None:
            self._end = end
            return
        lease = self._lease()
        if lease is not None:
            lease._ended(end)


class AsyncLease:
    """A lease held in async code, renewed by the engine's keepalive until released.

    `lost` is an asyncio.Event, set when the lease ends before the block does (lost, run
    out, or stopped at max_hold_ms); hand it to the tasks the block starts. The block itself
    is cancelled at that moment, and `async with` raises LeaseLost."""

    def __init__(
        self,
        native: _native.NativeLease,
        task: Optional["asyncio.Task[Any]"],
        relay: "_EndRelay",
    ) -> None:
        self._native = native
        # Made on first use, since most blocks never look at it; on Python 3.9 an Event
        # takes the loop current where it is made, so it is made here, on the loop.
        self._lost: Optional[asyncio.Event] = None
        if sys.version_info < (3, 10):
            self._lost = asyncio.Event()
        self._end: Optional[Tuple[str, str]] = None
        self._task = task
        # Cancellations the task had before the block: ours is told apart from others'.
        self._cancelling = _cancelling(task)
        self._closing = False
        self._cancelled_for_loss = False
        relay.follow(self)

    def _ended(self, end: Tuple[str, str]) -> None:
        if self._closing:
            return
        self._end = end
        if self._lost is not None:
            self._lost.set()
        task = self._task
        if task is not None and not task.done():
            self._cancelled_for_loss = True
            task.cancel()

    @property
    def lost(self) -> asyncio.Event:
        """Set when the lease ends before the block does."""
        if self._lost is None:
            self._lost = asyncio.Event()
            if self._end is not None:
                self._lost.set()
        return self._lost

    @property
    def resource(self) -> str:
        """The resource; for `lock_all`, the first of `resources`."""
        return self._native.resources[0]

    @property
    def resources(self) -> List[str]:
        """Every resource the lease holds, in canonical (sorted) order."""
        return self._native.resources

    @property
    def token(self) -> str:
        """The secret that proves ownership (for a permit it names the permit's slot)."""
        return self._native.token

    @property
    def fencing_token(self) -> int:
        """Larger than the fencing token of every earlier holder of the resource."""
        return self._native.fencing_token

    @property
    def ttl(self) -> float:
        """Seconds each renewal asks for."""
        return self._native.ttl

    @property
    def validity(self) -> float:
        """Seconds before the lease may no longer be relied on (0 once it ended)."""
        return self._native.validity()

    @property
    def end_reason(self) -> Optional[str]:
        """Why the lease ended before its block did, once it has."""
        return None if self._end is None else self._end[1]

    def _lost_reason(self) -> Optional[str]:
        reason = self._native.lost_reason()
        if reason is None and self._end is not None:
            reason = self._end[1]
        return reason

    def check(self) -> None:
        """Raises LeaseLost if the lease no longer protects the work."""
        reason = self._lost_reason()
        if reason is not None:
            raise lease_lost(self.resource, reason)

    def _stop_following(self) -> None:
        self._closing = True
        self._native.stop_watching()

    async def release(self) -> bool:
        """Stops the keepalive and releases the lock on every group; returns whether this
        call deleted it."""
        self._stop_following()
        released: bool = await self._native.release(_bridge())
        return released

    async def _exit_block(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException]
    ) -> None:
        self._stop_following()
        reason = self._lost_reason()
        ours = self._cancelled_for_loss
        # Our cancellation may not have reached the block yet (it ended without another
        # await): then it arrives at the release's await, once, and is absorbed there.
        delivered = exc_type is not None and issubclass(exc_type, asyncio.CancelledError)
        await self._release_in_exit(absorb_one=ours and not delivered)
        if ours:
            task = self._task
            if task is not None and sys.version_info >= (3, 11):
                if task.uncancel() > self._cancelling:
                    # Someone else cancelled the task too: that cancellation goes on.
                    return
            raise lease_lost(self.resource, reason or "the lease ended") from exc
        if reason is not None:
            raise lease_lost(self.resource, reason) from exc

    async def _release_in_exit(self, absorb_one: bool) -> None:
        # Shielded: a cancellation of the task leaves the release running, and the lock is
        # released whatever happens to the block.
        release = asyncio.ensure_future(self._native.release(_bridge()))
        while True:
            try:
                await asyncio.shield(release)
                return
            except asyncio.CancelledError:
                if absorb_one and not release.cancelled():
                    absorb_one = False
                    continue
                raise
            except QuorumlockError as error:
                _log.warning(
                    "releasing %s after the block failed; its TTL frees it: %s",
                    self.resources,
                    error,
                )
                return

    def __repr__(self) -> str:
        return f"<quorumlock.AsyncLease {self.resources} fencing_token={self.fencing_token}>"


def _cancelling(task: Optional["asyncio.Task[Any]"]) -> int:
    if task is None or sys.version_info < (3, 11):
        return 0
    return task.cancelling()
