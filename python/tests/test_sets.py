"""Several resources at once, all or nothing; and semaphores, never more holders than
permits."""

from __future__ import annotations

import asyncio
import time

import pytest

import quorumlock
from quorumlock import HeldByAnother
from support import Lab


def test_lock_all_takes_every_resource_or_none(lab: Lab) -> None:
    async def body() -> None:
        locks = await quorumlock.aconnect(lab.config)
        names = ["set:c", "set:a", "set:b"]
        async with locks.lock("set:b", ttl=10, owner="someone-else"):
            with pytest.raises(HeldByAnother) as refused:
                async with locks.lock_all(names, ttl=10):
                    pass
            assert refused.value.holder is not None
            assert refused.value.holder.owner == "someone-else"
            # Nothing of the set stayed behind on the free resources.
            for free in ("set:a", "set:c"):
                assert not (await locks.astatus(free)).held

        async with locks.lock_all(names, ttl=10, owner="all-three") as lease:
            assert lease.resources == ["set:a", "set:b", "set:c"]
            for name in names:
                status = await locks.astatus(name)
                assert status.held and status.fencing_token == lease.fencing_token
                with pytest.raises(HeldByAnother):
                    async with locks.lock(name):
                        pass
        for name in names:
            assert not (await locks.astatus(name)).held
        await locks.aclose()

    asyncio.run(body())


def test_semaphore_permits_are_never_more_than_the_count(lab: Lab) -> None:
    async def body() -> None:
        locks = await quorumlock.aconnect(lab.config)
        holding = 0
        most = 0
        tokens = set()

        async def worker(n: int) -> None:
            nonlocal holding, most
            for _ in range(3):
                async with locks.semaphore("sem:three", 3, ttl=10, wait=120, owner=f"w{n}") as permit:
                    holding += 1
                    most = max(most, holding)
                    tokens.add(permit.token)
                    await asyncio.sleep(0.01)
                    holding -= 1

        await asyncio.gather(*(worker(n) for n in range(10)))
        assert most <= 3
        assert len(tokens) == 30

        # Three held: a fourth is refused, and the groups show three holders.
        async with locks.semaphore("sem:three", 3, ttl=10, owner="a"):
            async with locks.semaphore("sem:three", 3, ttl=10, owner="b"):
                async with locks.semaphore("sem:three", 3, ttl=10, owner="c"):
                    with pytest.raises(HeldByAnother):
                        async with locks.semaphore("sem:three", 3, ttl=10, owner="d"):
                            pass
                    status = await locks.asemaphore_status("sem:three")
                    assert status.permits == 3
                    assert sorted(h.holder.owner or "" for h in status.holders) == ["a", "b", "c"]
        await locks.aclose()

    asyncio.run(body())


def test_a_sync_semaphore_holds_no_more_than_its_permits_across_threads(lab: Lab) -> None:
    import threading

    locks = quorumlock.connect(lab.config)
    guard = threading.Lock()
    holding = 0
    most = 0

    def worker() -> None:
        nonlocal holding, most
        for _ in range(2):
            with locks.semaphore("sem:threads", 2, ttl=10, wait=120):
                with guard:
                    holding += 1
                    most = max(most, holding)
                time.sleep(0.01)
                with guard:
                    holding -= 1

    threads = [threading.Thread(target=worker) for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert most <= 2
    locks.close()
