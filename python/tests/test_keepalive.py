"""Leases kept alive while their block runs, and what a block is told when its lease ends:
renewed past the TTL, lost to a force release, and lost to a quorum that stopped answering,
told before anyone else can hold the lock."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Optional

import pytest

import quorumlock
from quorumlock import LeaseLost, NoQuorum
from support import Lab, direct_config, poll_until, with_drift


def test_a_lease_is_renewed_past_its_ttl_while_the_async_block_runs(lab: Lab) -> None:
    async def body() -> None:
        locks = await quorumlock.aconnect(lab.config)
        async with locks.lock("keep:async", ttl=0.6) as lease:
            for _ in range(4):
                # Each wait is longer than half the TTL: only renewals keep the lock.
                await asyncio.sleep(0.4)
                status = await locks.astatus("keep:async")
                assert status.held and status.fencing_token == lease.fencing_token
                assert 0 < lease.validity <= 0.6
            assert not lease.lost.is_set()
        assert not (await locks.astatus("keep:async")).held
        await locks.aclose()

    asyncio.run(body())


def test_a_lease_is_renewed_past_its_ttl_while_the_sync_block_runs(lab: Lab) -> None:
    locks = quorumlock.connect(lab.config)
    with locks.lock("keep:sync", ttl=0.6) as lease:
        for _ in range(4):
            time.sleep(0.4)
            status = locks.status("keep:sync")
            assert status.held and status.fencing_token == lease.fencing_token
        assert not lease.lost
        lease.check()
    assert not locks.status("keep:sync").held
    locks.close()


def test_a_force_released_lease_cancels_the_async_block_and_raises_lease_lost(
    lab: Lab,
) -> None:
    async def body() -> None:
        locks = await quorumlock.aconnect(lab.config)
        operator = await quorumlock.aconnect(lab.config)
        reached_the_end = False
        lease: Optional[quorumlock.AsyncLease] = None
        with pytest.raises(LeaseLost) as lost:
            async with locks.lock("lose:async", ttl=0.6) as lease:
                assert await operator.aforce_release("lose:async")
                await asyncio.Event().wait()
                reached_the_end = True
        assert not reached_the_end
        assert lease is not None and lease.lost.is_set()
        assert lost.value.resource == "lose:async"
        assert "another holder" in lost.value.reason
        assert lease.end_reason == lost.value.reason
        # The task was not left cancelled: it goes on awaiting.
        await asyncio.sleep(0)
        await operator.aclose()
        await locks.aclose()

    asyncio.run(body())


def test_a_sync_block_whose_lease_is_lost_sees_it_and_the_with_raises(lab: Lab) -> None:
    locks = quorumlock.connect(lab.config)
    with pytest.raises(LeaseLost) as lost:
        with locks.lock("lose:sync", ttl=0.6) as lease:
            assert not lease.lost
            assert locks.force_release("lose:sync")
            # The keepalive's next renewal (within a third of the TTL) finds it gone.
            assert poll_until(lambda: lease.lost)
            with pytest.raises(LeaseLost):
                lease.check()
    assert lost.value.resource == "lose:sync"
    locks.close()


def test_a_block_is_told_of_a_loss_before_anyone_else_can_hold_the_lock(
    linked_lab: Lab, tmp_path: Path
) -> None:
    """The holder reaches the masters through relays; cutting three of them from their
    clients stops its renewals, while a second client, connected to the masters' own ports,
    still reaches every group and waits for the lock. The holder's block must be told
    (cancelled) before the second client gets the lock."""
    resource = "edge:told-first"
    # A larger drift allowance than the default leaves a visible margin between the end of
    # the validity (when the holder is told) and the expiry of the keys.
    holder_config = with_drift(linked_lab, tmp_path / "holder.toml", 0.2)
    other_config = direct_config(linked_lab, tmp_path / "direct.toml")

    async def body() -> None:
        holder = await quorumlock.aconnect(holder_config)
        other = await quorumlock.aconnect(other_config)
        told_at: Optional[float] = None
        acquired_at: Optional[float] = None

        async def contend() -> None:
            nonlocal acquired_at
            async with other.lock(resource, ttl=5, wait=60):
                acquired_at = time.monotonic()

        contender: Optional["asyncio.Future[None]"] = None
        try:
            with pytest.raises(LeaseLost):
                async with holder.lock(resource, ttl=2) as lease:
                    for group in ("1", "2", "3"):
                        await asyncio.to_thread(
                            linked_lab.cli, "lab", "partition", group, "--from", "clients"
                        )
                    contender = asyncio.ensure_future(contend())
                    try:
                        await asyncio.Event().wait()
                    except asyncio.CancelledError:
                        told_at = time.monotonic()
                        raise
            assert lease.lost.is_set()
            assert contender is not None
            await contender
        finally:
            for group in ("1", "2", "3"):
                await asyncio.to_thread(linked_lab.cli, "lab", "heal", group)
        assert told_at is not None and acquired_at is not None
        assert told_at < acquired_at, (told_at, acquired_at)
        await other.aclose()
        await holder.aclose()

    asyncio.run(body())


def test_no_quorum_names_the_groups_that_failed(linked_lab: Lab) -> None:
    locks = quorumlock.connect(linked_lab.config)
    try:
        for group in ("1", "2", "3"):
            linked_lab.cli("lab", "partition", group, "--from", "clients")
        with pytest.raises(NoQuorum) as refused:
            with locks.lock("edge:no-quorum", ttl=5):
                pass
        error = refused.value
        assert error.failed_groups == ["g1", "g2", "g3"]
        assert (error.needed, error.total) == (3, 5)
        assert "g1" in str(error)
    finally:
        for group in ("1", "2", "3"):
            linked_lab.cli("lab", "heal", group)
    locks.close()
