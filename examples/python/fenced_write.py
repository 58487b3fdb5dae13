"""Fenced writes with the native quorumlock package: the engine runs in this process.

Three workers share one report. Each takes the lock on it with `async with`, writes with the
lease's fencing token, and lets the block release the lock. The storage (a JSON file here; a
database row or an object store in practice) keeps the highest fencing token it has seen and
refuses a write that carries a lower one, so a holder whose lease ran out while it was
paused cannot overwrite the work of the holder after it. At the end a write with the first
worker's stale token is refused.

    pip install ./python                  # from the repository's root
    quorumlock lab up
    python examples/python/fenced_write.py --config .quorumlock/lab/quorumlock.toml
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path
from typing import Any, Dict, List, Optional

import quorumlock


class StaleWrite(Exception):
    """The storage has seen a higher fencing token: a later holder has written."""


class FencedStore:
    """A value in a JSON file that only a holder with the highest fencing token may change."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> Dict[str, Any]:
        if not self.path.exists():
            return {"fencing_token": 0, "writes": []}
        state: Dict[str, Any] = json.loads(self.path.read_text())
        return state

    def write(self, fencing_token: int, value: str) -> None:
        state = self.read()
        if fencing_token < state["fencing_token"]:
            raise StaleWrite(
                f"fencing token {fencing_token} is below {state['fencing_token']}: "
                "a later holder has written"
            )
        state["fencing_token"] = fencing_token
        writes: List[Dict[str, Any]] = state["writes"]
        writes.append({"fencing_token": fencing_token, "value": value})
        # Written whole and renamed, so a reader never sees half a file.
        scratch = self.path.with_suffix(".tmp")
        scratch.write_text(json.dumps(state, indent=2))
        scratch.replace(self.path)


async def work(
    locks: quorumlock.Locks, store: FencedStore, resource: str, worker: int
) -> int:
    """One worker's turn: the lock, one fenced write, the release. Returns its token."""
    async with locks.lock(
        resource, ttl=15, wait=30, owner=f"worker-{worker}", purpose="update the report"
    ) as lease:
        # Slow work would check lease.validity before a write it may not finish in time;
        # should the lease be lost, this block is cancelled and LeaseLost raised.
        store.write(lease.fencing_token, f"task {worker} by worker-{worker}")
        print(f"worker-{worker} wrote with fencing token {lease.fencing_token}")
        return lease.fencing_token


async def main(config: Optional[str], store_path: Path, resource: str) -> None:
    locks = await quorumlock.aconnect(config)
    store = FencedStore(store_path)
    try:
        tokens = []
        for worker in (1, 2, 3):
            tokens.append(await work(locks, store, resource, worker))
        status = await locks.astatus(resource)
        print(f"after the workers: held={status.held}")
        try:
            store.write(tokens[0], "a write from a paused first worker")
        except StaleWrite as refused:
            print(f"stale write refused: fencing token {tokens[0]} ({refused})")
    except quorumlock.HeldByAnother as error:
        holder = error.holder.owner if error.holder else "another holder"
        print(f"{resource} is held by {holder}; try again later")
        raise SystemExit(1) from error
    except quorumlock.NoQuorum as error:
        print(f"no quorum: these groups failed: {', '.join(error.failed_groups)}")
        raise SystemExit(1) from error
    finally:
        await locks.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Fenced writes with the native quorumlock package.")
    parser.add_argument(
        "--config",
        default=os.environ.get("QUORUMLOCK_CONFIG"),
        help="topology file (default: the CLI's search: QUORUMLOCK_CONFIG, ./quorumlock.toml, ...)",
    )
    parser.add_argument("--store", type=Path, default=Path("report.json"))
    parser.add_argument("--resource", default="report:weekly")
    args = parser.parse_args()
    asyncio.run(main(args.config, args.store, args.resource))
