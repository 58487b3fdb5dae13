"""examples/python/fenced_write.py runs against a real lab: three fenced writes in order, the
stale one refused, the lock free afterwards."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import quorumlock
from support import Lab

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "python" / "fenced_write.py"


def test_the_fenced_write_example_writes_in_order_and_refuses_the_stale_write(
    lab: Lab, tmp_path: Path
) -> None:
    store = tmp_path / "report.json"
    done = subprocess.run(
        [
            sys.executable,
            str(EXAMPLE),
            "--config",
            str(lab.config),
            "--store",
            str(store),
            "--resource",
            "example:report",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    writes = json.loads(store.read_text())["writes"]
    tokens = [write["fencing_token"] for write in writes]
    assert len(tokens) == 3 and tokens == sorted(set(tokens))
    assert f"stale write refused: fencing token {tokens[0]}" in done.stdout
    assert "held=False" in done.stdout
    locks = quorumlock.connect(lab.config)
    with locks.lock("example:report") as lease:
        assert lease.fencing_token > tokens[-1]
    locks.close()
