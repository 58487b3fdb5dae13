"""A small bench in one process against one lab: quorumlock's Python package, pottery's
AIORedlock on the same five masters, redis-py's single-master Lock, and the Rust engine
itself (called from Rust inside the package's native module, no Python in the loop).

    pip install ./python redis pottery        # a release build of the package
    quorumlock lab up
    python python/bench.py --config .quorumlock/lab/quorumlock.toml

Each round (TTL 10 s) first times sequential acquires: acquire one resource, release it,
--samples times per library; only the acquire is timed (for quorumlock, entering
`async with`, which starts the keepalive). The Rust engine is timed beside them in the same
process on the same connection: a bare acquire, and an acquire that starts the keepalive,
which is what `async with` waits for. The samples are taken in blocks of 50, each library
in turn, the order rotating from block to block: a shared machine's speed drifts by a
fifth within seconds, and blocks taken in turn meet the same drift.

Then, for each library in turn (the order rotates between rounds):

1. lock+release cycles/s with 64 asyncio tasks, each on its own resource, for --secs;
2. contention for --secs: 16 tasks, one resource, 1 ms hold, each waiting as the library
   waits (quorumlock: `wait`, woken by the release; pottery: retries every 0-200 ms;
   redis-py: retries every 100 ms). Holds that overlap are counted.

Every figure is the median over the rounds. The masters for pottery and redis-py are the
ones quorumlock's health names (redis-py's Lock uses the first group's).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from typing import Any, Awaitable, Callable, Dict, List, Optional, Tuple

# This file sits beside the package's sources, which lack the native part: import the
# installed package instead.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]

import redis.asyncio as aioredis  # noqa: E402
from pottery import AIORedlock  # noqa: E402

import quorumlock  # noqa: E402
from quorumlock import _native  # noqa: E402

TTL = 10.0
ENGINE = "Rust engine (same process)"
ENGINE_KEPT = "Rust engine + keepalive"
C64 = 64
CONTENDERS = 16
HOLD = 0.001
# Sequential acquires per library before the next library's turn.
BLOCK = 50
# Seconds of quiet before each block.
SETTLE = 0.02


class Peer:
    """One library under test: acquire (returns a release callable) and a contended
    acquire that waits until `deadline` (returns None when it did not get the lock)."""

    name = ""

    async def acquire(self, resource: str) -> Callable[[], Awaitable[Any]]:
        raise NotImplementedError

    async def contend(
        self, resource: str, deadline: float
    ) -> Optional[Callable[[], Awaitable[Any]]]:
        raise NotImplementedError


class Quorumlock(Peer):
    name = "quorumlock (Python)"

    def __init__(self, locks: quorumlock.Locks) -> None:
        self.locks = locks

    async def _enter(self, request: quorumlock.LockRequest) -> Callable[[], Awaitable[Any]]:
        await request.__aenter__()

        async def release() -> None:
            await request.__aexit__(None, None, None)

        return release

    async def acquire(self, resource: str) -> Callable[[], Awaitable[Any]]:
        return await self._enter(self.locks.lock(resource, ttl=TTL))

    async def contend(
        self, resource: str, deadline: float
    ) -> Optional[Callable[[], Awaitable[Any]]]:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        try:
            return await self._enter(self.locks.lock(resource, ttl=TTL, wait=left))
        except quorumlock.HeldByAnother:
            return None


class Pottery(Peer):
    name = "pottery AIORedlock (5 masters)"

    def __init__(self, masters: List[aioredis.Redis]) -> None:
        self.masters = masters

    def _lock(self, resource: str) -> AIORedlock:
        return AIORedlock(key=resource, masters=set(self.masters), auto_release_time=TTL)

    async def acquire(self, resource: str) -> Callable[[], Awaitable[Any]]:
        lock = self._lock(resource)
        if not await lock.acquire(blocking=False):
            raise RuntimeError(f"pottery did not get the free resource {resource}")
        return lock.release

    async def contend(
        self, resource: str, deadline: float
    ) -> Optional[Callable[[], Awaitable[Any]]]:
        left = deadline - time.monotonic()
        lock = self._lock(resource)
        if left > 0 and await lock.acquire(blocking=True, timeout=left):
            return lock.release
        return None


class RedisPy(Peer):
    name = "redis-py Lock (1 master)"

    def __init__(self, master: aioredis.Redis) -> None:
        self.master = master

    async def acquire(self, resource: str) -> Callable[[], Awaitable[Any]]:
        lock = self.master.lock(resource, timeout=TTL, blocking=False)
        if not await lock.acquire():
            raise RuntimeError(f"redis-py did not get the free resource {resource}")
        return lock.release

    async def contend(
        self, resource: str, deadline: float
    ) -> Optional[Callable[[], Awaitable[Any]]]:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        lock = self.master.lock(resource, timeout=TTL, blocking_timeout=left)
        if await lock.acquire():
            return lock.release
        return None


def percentile(values: List[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def latency(peer: Peer, resource: str, samples: int) -> List[float]:
    micros: List[float] = []
    for _ in range(samples):
        started = time.perf_counter()
        release = await peer.acquire(resource)
        micros.append((time.perf_counter() - started) * 1e6)
        await release()
    return micros


async def cycles(peer: Peer, prefix: str, tasks: int, secs: float) -> float:
    deadline = time.monotonic() + secs
    counts = [0] * tasks

    async def one(n: int) -> None:
        resource = f"{prefix}:{n}"
        while time.monotonic() < deadline:
            release = await peer.acquire(resource)
            await release()
            counts[n] += 1

    started = time.monotonic()
    await asyncio.gather(*(one(n) for n in range(tasks)))
    return sum(counts) / (time.monotonic() - started)


async def contention(peer: Peer, resource: str, secs: float) -> Dict[str, float]:
    deadline = time.monotonic() + secs
    holding = 0
    overlaps = 0
    acquisitions = 0
    longest_wait = 0.0

    async def worker() -> None:
        nonlocal holding, overlaps, acquisitions, longest_wait
        while time.monotonic() < deadline:
            asked = time.monotonic()
            release = await peer.contend(resource, deadline)
            if release is None:
                return
            longest_wait = max(longest_wait, time.monotonic() - asked)
            holding += 1
            if holding > 1:
                overlaps += 1
            acquisitions += 1
            await asyncio.sleep(HOLD)
            holding -= 1
            await release()

    started = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(CONTENDERS)))
    elapsed = time.monotonic() - started
    return {
        "acquisitions_per_s": acquisitions / elapsed,
        "overlaps": float(overlaps),
        "max_wait_ms": longest_wait * 1000,
    }


def tag(round_: int, peer: Peer) -> str:
    return f"bench:{round_}:{type(peer).__name__.lower()}"


async def latencies(
    peers: List[Peer], locks: quorumlock.Locks, round_: int, samples: int
) -> Dict[str, List[float]]:
    """Every library's sequential acquires, and the engine's, BLOCK at a time in turn. The
    order rotates from block to block, so each takes each place in it as often, and each
    block starts after SETTLE of quiet, so none inherits the work or the warm threads the
    previous turn left."""

    def engine(keepalive: bool) -> Callable[[int], Awaitable[List[float]]]:
        # The engine alone: a bare acquire, or one that starts the keepalive, as the
        # package's `async with` does.
        async def run(count: int) -> List[float]:
            return _native._engine_acquire_micros(
                locks._native, f"bench:{round_}:engine:seq", count, TTL, keepalive
            )

        return run

    def library(peer: Peer) -> Callable[[int], Awaitable[List[float]]]:
        return lambda count: latency(peer, f"{tag(round_, peer)}:seq", count)

    turns = [(peer.name, library(peer)) for peer in peers]
    turns += [(ENGINE, engine(False)), (ENGINE_KEPT, engine(True))]
    micros: Dict[str, List[float]] = {name: [] for name, _ in turns}
    for block, start in enumerate(range(0, samples, BLOCK)):
        count = min(BLOCK, samples - start)
        shift = block % len(turns)
        for name, timed in turns[shift:] + turns[:shift]:
            # The previous turn's releases finish, and its threads settle, before this turn.
            await asyncio.sleep(SETTLE)
            micros[name] += await timed(count)
    return micros


async def one_round(
    peers: List[Peer], locks: quorumlock.Locks, round_: int, samples: int, secs: float
) -> Dict[str, Dict[str, float]]:
    results: Dict[str, Dict[str, float]] = {
        name: {
            "acquire_p50_us": statistics.median(micros),
            "acquire_p99_us": percentile(micros, 0.99),
        }
        for name, micros in (await latencies(peers, locks, round_, samples)).items()
    }
    shift = round_ % len(peers)
    for peer in peers[shift:] + peers[:shift]:
        rate = await cycles(peer, f"{tag(round_, peer)}:c64", C64, secs)
        contended = await contention(peer, f"{tag(round_, peer)}:contend", secs)
        results[peer.name].update({"cycles_per_s_c64": rate, **contended})
    return results


def medians(rounds: List[Dict[str, Dict[str, float]]]) -> Dict[str, Dict[str, float]]:
    merged: Dict[str, Dict[str, float]] = {}
    for name in rounds[0]:
        merged[name] = {}
        for figure in rounds[0][name]:
            values = [r[name][figure] for r in rounds]
            # Overlaps are summed: one is one too many.
            merged[name][figure] = (
                sum(values) if figure == "overlaps" else statistics.median(values)
            )
    return merged


def table(merged: Dict[str, Dict[str, float]]) -> str:
    rows: List[Tuple[str, str, int]] = [
        ("acquire p50 (µs)", "acquire_p50_us", 0),
        ("acquire p99 (µs)", "acquire_p99_us", 0),
        (f"lock+release cycles/s, {C64} tasks", "cycles_per_s_c64", 0),
        (f"contended acquisitions/s ({CONTENDERS} tasks, 1 ms hold)", "acquisitions_per_s", 1),
        ("contended max wait (ms)", "max_wait_ms", 0),
        ("contended overlaps (sum of rounds)", "overlaps", 0),
    ]
    names = list(merged)
    lines = [
        "| figure | " + " | ".join(names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    for label, key, digits in rows:
        cells = [
            "-" if key not in merged[n] else f"{merged[n][key]:,.{digits}f}" for n in names
        ]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


async def main(config: Optional[str], rounds: int, samples: int, secs: float) -> Dict[str, Any]:
    locks = await quorumlock.aconnect(config)
    health = await locks.ahealth()
    addresses = [group.master for group in health.groups if group.master]
    if len(addresses) != len(health.groups):
        raise SystemExit(f"every group needs a master for the bench: {addresses}")
    masters = []
    for address in addresses:
        host, port = address.rsplit(":", 1)
        masters.append(aioredis.Redis(host=host, port=int(port)))
    peers: List[Peer] = [Quorumlock(locks), Pottery(masters), RedisPy(masters[0])]
    results = [await one_round(peers, locks, n, samples, secs) for n in range(rounds)]
    merged = medians(results)
    for master in masters:
        await master.aclose()
    await locks.aclose()
    python_p50 = merged["quorumlock (Python)"]["acquire_p50_us"]
    return {
        "rounds": results,
        "medians": merged,
        "python_over_engine_p50": python_p50 / merged[ENGINE]["acquire_p50_us"],
        "python_over_kept_engine_p50": python_p50 / merged[ENGINE_KEPT]["acquire_p50_us"],
        "load_average": os.getloadavg(),
        "python": sys.version.split()[0],
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="quorumlock, pottery and redis-py, one lab")
    parser.add_argument("--config", default=os.environ.get("QUORUMLOCK_CONFIG"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--secs", type=float, default=2.0)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    report = asyncio.run(main(args.config, args.rounds, args.samples, args.secs))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(table(report["medians"]))
        print()
        print(
            f"quorumlock (Python) acquire p50 / Rust engine's: "
            f"{report['python_over_engine_p50']:.2f} bare, "
            f"{report['python_over_kept_engine_p50']:.2f} with the keepalive; load average "
            + ", ".join(f"{x:.1f}" for x in report["load_average"])
        )
