"""The second process of the contention test: connects, says "ready", waits for "go" on
stdin, then runs its tasks against the same lock and prints what each block held, as JSON
lines."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

import quorumlock
from support import FencedStore


async def contend(
    locks: quorumlock.Locks, resource: str, store: FencedStore, who: str, rounds: int
) -> List[Dict[str, Any]]:
    held: List[Dict[str, Any]] = []
    for round_ in range(rounds):
        async with locks.lock(resource, ttl=10, wait=60, owner=who) as lease:
            start = time.monotonic_ns()
            accepted = store.write(lease.fencing_token, f"{who} round {round_}")
            await asyncio.sleep(0.005)
            held.append(
                {
                    "start": start,
                    "end": time.monotonic_ns(),
                    "token": lease.fencing_token,
                    "who": who,
                    "accepted": accepted,
                }
            )
    return held


async def main() -> None:
    config, resource, store_path, tasks, rounds = sys.argv[1:6]
    locks = await quorumlock.aconnect(config)
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    store = FencedStore(Path(store_path))
    pid = os.getpid()
    results = await asyncio.gather(
        *(
            contend(locks, resource, store, f"{pid}/{n}", int(rounds))
            for n in range(int(tasks))
        )
    )
    await locks.aclose()
    for held in results:
        for row in held:
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
