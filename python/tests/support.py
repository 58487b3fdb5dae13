"""What the tests share: the lab, the fenced store, and a check of held intervals."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Sequence


def quorumlock_bin() -> str:
    found = os.environ.get("QUORUMLOCK_BIN") or shutil.which("quorumlock")
    if not found:
        raise RuntimeError(
            "the tests need the quorumlock binary: set QUORUMLOCK_BIN or put it on PATH"
        )
    return found


@dataclass
class Lab:
    dir: Path

    @property
    def config(self) -> Path:
        return self.dir / "quorumlock.toml"

    def cli(self, *args: str) -> str:
        done = subprocess.run(
            [quorumlock_bin(), "--lab-dir", str(self.dir), *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"quorumlock {' '.join(args)} failed: {done.stdout}{done.stderr}"
            )
        return done.stdout

    def status(self) -> Dict[str, Any]:
        value: Dict[str, Any] = json.loads(self.cli("--json", "lab", "status"))
        return value

    def masters(self) -> List[Dict[str, Any]]:
        """The master nodes, group by group."""
        nodes = [n for n in self.status()["nodes"] if n["kind"] == "master"]
        return sorted(nodes, key=lambda n: int(n["group"]))

    def stop(self) -> None:
        # `lab down` kills every process of the lab by the PID it recorded.
        if (self.dir / "lab.json").exists():
            self.cli("lab", "down")


def start_lab(directory: Path, *args: str) -> Lab:
    lab = Lab(directory)
    lab.cli("lab", "up", *args)
    return lab


def direct_config(lab: Lab, path: Path) -> Path:
    """A topology that reaches each master at its own port, past its relay: a client
    that a partition at the relays does not cut off."""
    lines = [
        'key_prefix = "ql"',
        "call_timeout_ms = 1000",
    ]
    for node in lab.masters():
        lines += [
            "",
            "[[groups]]",
            f'name = "g{int(node["group"]) + 1}"',
            f'address = "127.0.0.1:{node["port"]}"',
        ]
    path.write_text("\n".join(lines) + "\n")
    return path


def with_drift(lab: Lab, path: Path, drift_factor: float) -> Path:
    """The lab's topology with another clock-drift allowance."""
    text = lab.config.read_text()
    lines = [
        f"drift_factor = {drift_factor}" if line.startswith("drift_factor") else line
        for line in text.splitlines()
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


class FencedStore:
    """Storage that checks fencing tokens, as the docs ask of a protected resource: a write
    below the highest token seen is refused. A file under an exclusive lock, so that
    several processes share it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, fencing_token: int, value: str) -> bool:
        with open(self.path, "a+", encoding="utf-8") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            handle.seek(0)
            rows = [json.loads(line) for line in handle if line.strip()]
            highest = max((int(r["token"]) for r in rows if r["accepted"]), default=0)
            accepted = fencing_token >= highest
            handle.write(
                json.dumps({"token": fencing_token, "value": value, "accepted": accepted})
                + "\n"
            )
            return accepted

    def rows(self) -> List[Dict[str, Any]]:
        if not self.path.exists():
            return []
        with open(self.path, encoding="utf-8") as handle:
            return [json.loads(line) for line in handle if line.strip()]


@dataclass
class Held:
    """One block that held a lock: when it began and ended (time.monotonic_ns, which every
    process of the machine shares), and its fencing token."""

    start: int
    end: int
    token: int
    who: str

    @classmethod
    def from_json(cls, row: Dict[str, Any]) -> Held:
        return cls(int(row["start"]), int(row["end"]), int(row["token"]), str(row["who"]))


def check_exclusive(held: Sequence[Held]) -> None:
    """No two blocks overlap, and each holder's fencing token is above the one before."""
    ordered = sorted(held, key=lambda h: h.start)
    for before, after in zip(ordered, ordered[1:]):
        assert after.start >= before.end, f"{before} overlaps {after}"
        assert after.token > before.token, f"{after} does not fence above {before}"


def redis_command(port: int, *args: str) -> Any:
    """One command to the Redis node at 127.0.0.1:`port`, over a plain socket; returns the
    reply (integers, strings, lists)."""
    import socket

    request = f"*{len(args)}\r\n" + "".join(
        f"${len(arg.encode())}\r\n{arg}\r\n" for arg in args
    )
    with socket.create_connection(("127.0.0.1", port), timeout=5) as connection:
        connection.sendall(request.encode())
        reader = connection.makefile("rb")
        return _reply(reader)


def _reply(reader: Any) -> Any:
    line = reader.readline().rstrip(b"\r\n")
    kind, rest = line[:1], line[1:]
    if kind == b":":
        return int(rest)
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        raise RuntimeError(rest.decode())
    if kind == b"$":
        size = int(rest)
        if size < 0:
            return None
        data = reader.read(size + 2)[:-2]
        return data.decode()
    if kind == b"*":
        return [_reply(reader) for _ in range(int(rest))]
    raise RuntimeError(f"unexpected reply {line!r}")


def poll_until(check: Any, limit: float = 30.0, every: float = 0.02) -> bool:
    """Calls `check` until it returns true or `limit` seconds pass; returns whether it did."""
    import time

    deadline = time.monotonic() + limit
    while True:
        if check():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(every)
