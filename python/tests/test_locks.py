"""Locks from sync and async code: contention across tasks and processes, waiting without
blocking the event loop or other threads, what errors say, the views, the config search."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

import pytest

import quorumlock
from quorumlock import HeldByAnother, InvalidInput, QuorumlockError
from support import FencedStore, Held, Lab, check_exclusive, poll_until, redis_command

HERE = Path(__file__).parent


async def _contend(
    locks: quorumlock.Locks, resource: str, store: FencedStore, who: str, rounds: int
) -> List[Held]:
    held: List[Held] = []
    for round_ in range(rounds):
        async with locks.lock(resource, ttl=10, wait=60, owner=who) as lease:
            start = time.monotonic_ns()
            assert store.write(lease.fencing_token, f"{who} round {round_}")
            await asyncio.sleep(0.005)
            held.append(Held(start, time.monotonic_ns(), lease.fencing_token, who))
    return held


def test_eight_tasks_in_two_processes_hold_the_lock_in_turn_with_growing_fencing_tokens(
    lab: Lab, scratch: Path
) -> None:
    resource = "contend:two-processes"
    store = FencedStore(scratch / "store.jsonl")
    other = subprocess.Popen(
        [sys.executable, str(HERE / "contender.py"), str(lab.config), resource, str(store.path), "4", "5"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert other.stdout is not None and other.stdin is not None
        assert other.stdout.readline().strip() == "ready"

        async def here() -> List[Held]:
            locks = await quorumlock.aconnect(lab.config)
            assert other.stdin is not None
            other.stdin.write("go\n")
            other.stdin.flush()
            results = await asyncio.gather(
                *(_contend(locks, resource, store, f"here/{n}", 5) for n in range(4))
            )
            await locks.aclose()
            return [held for task in results for held in task]

        held = asyncio.run(here())
        out, _ = other.communicate(timeout=120)
    finally:
        if other.poll() is None:
            other.kill()
    assert other.returncode == 0
    rows = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert all(row["accepted"] for row in rows)
    held += [Held.from_json(row) for row in rows]
    assert len(held) == 40
    assert {h.who.split("/")[0] for h in held} >= {"here", str(other.pid)}
    check_exclusive(held)
    assert all(row["accepted"] for row in store.rows())


def test_two_hundred_waiting_tasks_leave_the_event_loop_running(lab: Lab) -> None:
    async def body() -> None:
        locks = await quorumlock.aconnect(lab.config)
        held: Dict[str, List[Held]] = {f"many:{n}": [] for n in range(4)}
        done = asyncio.Event()
        waiting = 0
        # The most tasks seen waiting inside the engine by another task of the loop.
        most_seen_waiting = 0

        async def ticker() -> None:
            nonlocal most_seen_waiting
            while not done.is_set():
                most_seen_waiting = max(most_seen_waiting, waiting)
                await asyncio.sleep(0.001)

        async def one(n: int) -> None:
            nonlocal waiting
            resource = f"many:{n % 4}"
            waiting += 1
            async with locks.lock(resource, ttl=10, wait=120) as lease:
                waiting -= 1
                start = time.monotonic_ns()
                await asyncio.sleep(0)
                held[resource].append(
                    Held(start, time.monotonic_ns(), lease.fencing_token, str(n))
                )

        ticking = asyncio.ensure_future(ticker())
        await asyncio.gather(*(one(n) for n in range(200)))
        done.set()
        await ticking
        await locks.aclose()
        assert sum(len(h) for h in held.values()) == 200
        for blocks in held.values():
            check_exclusive(blocks)
        # The loop went on running other work while most of the tasks waited in the engine.
        assert most_seen_waiting >= 100, most_seen_waiting

    asyncio.run(body())


def test_a_sync_acquire_that_waits_lets_other_threads_run(lab: Lab) -> None:
    resource = "gil:sync"
    locks = quorumlock.connect(lab.config)
    master = lab_master_ports(lab)[0]
    channel = "ql:{" + resource + "}:released"
    outcome: Dict[str, Any] = {}

    def contender() -> None:
        try:
            with locks.lock(resource, ttl=10, wait=60) as lease:
                outcome["token"] = lease.fencing_token
        except QuorumlockError as error:
            outcome["error"] = error

    with locks.lock(resource, ttl=10) as first:
        thread = threading.Thread(target=contender)
        thread.start()
        # This thread runs Python code while the other one waits inside the engine: its
        # wait subscribed to the lock's release channel.
        assert poll_until(lambda: redis_command(master, "PUBSUB", "NUMSUB", channel)[1] > 0)
        token = first.fencing_token
    thread.join(timeout=60)
    assert "error" not in outcome, outcome
    assert outcome["token"] > token
    locks.close()


def lab_master_ports(lab: Lab) -> List[int]:
    return [int(node["port"]) for node in lab.masters()]


def test_a_held_lock_is_refused_naming_its_holder(lab: Lab) -> None:
    locks = quorumlock.connect(lab.config)
    with locks.lock("held:named", owner="agent-7", purpose="apply migration 42") as lease:
        with pytest.raises(HeldByAnother) as refused:
            with locks.lock("held:named"):
                pass
        error = refused.value
        assert error.resource == "held:named"
        assert error.holder is not None
        assert error.holder.owner == "agent-7"
        assert error.holder.purpose == "apply migration 42"
        assert sum(vote.vote == "held" for vote in error.votes) >= locks.quorum
        assert "agent-7" in str(error)
        status = locks.status("held:named")
        assert status.held and status.fencing_token == lease.fencing_token
    assert not locks.status("held:named").held
    locks.close()


def test_cancelling_a_task_releases_its_lock(lab: Lab) -> None:
    async def body() -> None:
        locks = await quorumlock.aconnect(lab.config)
        entered = asyncio.Event()

        async def holder() -> None:
            async with locks.lock("cancel:me", ttl=10):
                entered.set()
                await asyncio.Event().wait()

        task = asyncio.ensure_future(holder())
        await entered.wait()
        assert (await locks.astatus("cancel:me")).held
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # Released by the time the task ended: taken again at once.
        async with locks.lock("cancel:me", ttl=10, wait=0):
            pass
        await locks.aclose()

    asyncio.run(body())


def test_a_task_cancelled_while_it_waits_leaves_no_lock_behind(lab: Lab) -> None:
    async def body() -> None:
        locks = await quorumlock.aconnect(lab.config)
        async with locks.lock("cancel:waiting", ttl=10) as first:
            waiting = asyncio.ensure_future(
                locks.lock("cancel:waiting", ttl=10, wait=60).__aenter__()
            )
            # Once it waits inside the engine, subscribed to the lock's release channel.
            master = lab_master_ports(lab)[0]
            channel = "ql:{cancel:waiting}:released"
            subscribed = await asyncio.to_thread(
                poll_until, lambda: redis_command(master, "PUBSUB", "NUMSUB", channel)[1] > 0
            )
            assert subscribed and not waiting.done()
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            status = await locks.astatus("cancel:waiting")
            assert status.fencing_token == first.fencing_token
        async with locks.lock("cancel:waiting", ttl=10, wait=0):
            pass
        await locks.aclose()

    asyncio.run(body())


BAD_INPUT: List[Any] = [
    ("resource", lambda locks: locks.lock("")),
    ("resource", lambda locks: locks.lock("a\nb")),
    ("resource", lambda locks: locks.lock(42)),
    ("ttl", lambda locks: locks.lock("x", ttl=0)),
    ("ttl", lambda locks: locks.lock("x", ttl=-1)),
    ("ttl", lambda locks: locks.lock("x", ttl=float("nan"))),
    ("ttl", lambda locks: locks.lock("x", ttl=3600)),
    ("ttl", lambda locks: locks.lock("x", ttl="15")),
    ("wait", lambda locks: locks.lock("x", wait=-0.5)),
    ("wait", lambda locks: locks.lock("x", wait=float("inf"))),
    ("owner", lambda locks: locks.lock("x", owner="two\nlines")),
    ("purpose", lambda locks: locks.lock("x", purpose="p" * 5000)),
    ("resources", lambda locks: locks.lock_all([])),
    ("resources", lambda locks: locks.lock_all(["a", "a"])),
    ("resources", lambda locks: locks.lock_all("abc")),
    ("permits", lambda locks: locks.semaphore("s", 0)),
    ("permits", lambda locks: locks.semaphore("s", -1)),
    ("permits", lambda locks: locks.semaphore("s", quorumlock.MAX_PERMITS + 1)),
    ("permits", lambda locks: locks.semaphore("s", 2.5)),
]


@pytest.mark.parametrize("field,request_of", BAD_INPUT)
def test_bad_input_raises_invalid_input_naming_the_field(
    lab: Lab, field: str, request_of: Callable[[quorumlock.Locks], quorumlock.LockRequest]
) -> None:
    locks = quorumlock.connect(lab.config)
    with pytest.raises(InvalidInput) as sync_error:
        with request_of(locks):
            pass
    assert sync_error.value.field == field, sync_error.value

    async def body() -> InvalidInput:
        with pytest.raises(InvalidInput) as async_error:
            async with request_of(locks):
                pass
        return async_error.value

    error = asyncio.run(body())
    assert error.field == field
    assert isinstance(error, ValueError)
    locks.close()


def test_bad_input_to_the_views_names_the_field(lab: Lab) -> None:
    locks = quorumlock.connect(lab.config)
    calls: List[Tuple[str, Callable[[], object]]] = [
        ("resource", lambda: locks.status("")),
        ("limit", lambda: locks.list(limit=0)),
        ("limit", lambda: locks.list(limit=-3)),
        ("prefix", lambda: locks.list("a\x00")),
        ("name", lambda: locks.semaphore_status(None)),  # type: ignore[arg-type]
    ]
    for field, call in calls:
        with pytest.raises(InvalidInput) as error:
            call()
        assert error.value.field == field
    locks.close()


def test_status_list_and_health_are_dataclasses(lab: Lab) -> None:
    async def body() -> None:
        locks = await quorumlock.aconnect(lab.config)
        async with locks.lock("views:lock", owner="carol", purpose="deploy") as lease:
            async with locks.semaphore("views:sem", 3, owner="worker-1"):
                status = await locks.astatus("views:lock")
                assert dataclasses.is_dataclass(status)
                assert status.held and status.holder is not None
                assert status.holder.owner == "carol"
                assert status.fencing_token == lease.fencing_token
                assert len(status.groups) == 5
                assert all(view.state == "held" for view in status.groups)

                listed = await locks.alist("views:")
                assert [lock.resource for lock in listed.locks] == ["views:lock"]
                assert listed.locks[0].owner == "carol"
                [sem] = listed.semaphores
                assert sem.name == "views:sem" and sem.permits == 3
                assert [h.holder.owner for h in sem.holders] == ["worker-1"]
                assert [lock.resource for lock in locks.list("views:").locks] == ["views:lock"]

                semaphore = await locks.asemaphore_status("views:sem")
                assert semaphore.permits == 3 and len(semaphore.holders) == 1

        health = await locks.ahealth()
        assert dataclasses.is_dataclass(health)
        assert health.quorum_available and health.quorum == 3
        assert [group.group for group in health.groups] == locks.groups
        assert all(group.reachable for group in health.groups)
        assert all(group.admission.state in ("voting", "unadmitted") for group in health.groups)
        assert locks.health().quorum == 3
        await locks.aclose()

    asyncio.run(body())


def test_connect_follows_the_cli_config_search(
    lab: Lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = lab.config.read_text()
    monkeypatch.delenv("QUORUMLOCK_CONFIG", raising=False)
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)

    # The user's file.
    user = home / ".config" / "quorumlock" / "quorumlock.toml"
    user.parent.mkdir(parents=True)
    user.write_text(text)
    assert quorumlock.connect().config_path == str(user)

    # ./quorumlock.toml comes before it.
    (work / "quorumlock.toml").write_text(text)
    assert quorumlock.connect().config_path == "quorumlock.toml"

    # QUORUMLOCK_CONFIG before both; a file it names must exist.
    monkeypatch.setenv("QUORUMLOCK_CONFIG", str(lab.config))
    assert quorumlock.connect().config_path == str(lab.config)
    monkeypatch.setenv("QUORUMLOCK_CONFIG", str(tmp_path / "missing.toml"))
    with pytest.raises(quorumlock.ConfigError) as missing:
        quorumlock.connect()
    assert "missing.toml" in str(missing.value)

    # An explicit path wins; a broken file names the key that is wrong.
    broken = tmp_path / "broken.toml"
    broken.write_text(text.replace("drift_factor = 0.01", "drift_factor = 7.0"))
    with pytest.raises(quorumlock.ConfigError) as invalid:
        quorumlock.connect(broken)
    assert invalid.value.key == "drift_factor"

    # Nothing anywhere: the error says where it looked.
    monkeypatch.delenv("QUORUMLOCK_CONFIG")
    (work / "quorumlock.toml").unlink()
    user.unlink()
    with pytest.raises(quorumlock.ConfigError) as nothing:
        quorumlock.connect()
    assert "quorumlock.toml" in str(nothing.value)


def test_a_lock_request_serves_several_tasks_each_with_its_own_lease(lab: Lab) -> None:
    async def body() -> None:
        locks = await quorumlock.aconnect(lab.config)
        shared = locks.lock("shared:request", ttl=10, wait=60)
        held: List[Held] = []

        async def one(n: int) -> None:
            async with shared as lease:
                start = time.monotonic_ns()
                await asyncio.sleep(0.002)
                held.append(Held(start, time.monotonic_ns(), lease.fencing_token, str(n)))

        await asyncio.gather(*(one(n) for n in range(6)))
        check_exclusive(held)
        assert len(held) == 6
        await locks.aclose()

    asyncio.run(body())
