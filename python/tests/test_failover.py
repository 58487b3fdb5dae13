"""A master killed while tasks contend: the callers see nothing of it."""

from __future__ import annotations

import asyncio
import time
from typing import List, Optional

import quorumlock
from support import Held, Lab, check_exclusive


def test_a_master_killed_mid_run_changes_nothing_for_the_caller(own_lab: Lab) -> None:
    async def body() -> None:
        locks = await quorumlock.aconnect(own_lab.config)
        held: List[Held] = []
        enough = asyncio.Event()
        killed_at: Optional[int] = None

        def after_kill() -> int:
            return sum(1 for h in held if killed_at is not None and h.start > killed_at)

        async def worker(n: int) -> None:
            # Until sixteen blocks ran after the kill.
            while after_kill() < 16:
                async with locks.lock("failover:run", ttl=5, wait=120) as lease:
                    start = time.monotonic_ns()
                    await asyncio.sleep(0.01)
                    held.append(Held(start, time.monotonic_ns(), lease.fencing_token, str(n)))
                    if len(held) >= 12:
                        enough.set()

        async def kill() -> None:
            nonlocal killed_at
            await enough.wait()
            await asyncio.to_thread(own_lab.cli, "lab", "kill", "2")
            killed_at = time.monotonic_ns()

        # Any error of any task fails the test here.
        await asyncio.gather(kill(), *(worker(n) for n in range(8)))
        assert after_kill() >= 16
        check_exclusive(held)
        assert not own_lab.masters()[1]["alive"]
        await locks.aclose()

    asyncio.run(body())
