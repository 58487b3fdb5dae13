"""Labs for the tests: real redis-server groups started by the `quorumlock` binary
(`quorumlock lab up`) in a temporary directory, and stopped by PID (`quorumlock lab down`).

The binary is QUORUMLOCK_BIN, else `quorumlock` on PATH; `cargo test --test python` passes
the one it built.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest

from support import Lab, start_lab

# The engine in a test wheel is a debug build on a busy machine: a call to one group may take
# longer than the 100 ms a production topology allows.
os.environ.setdefault("QUORUMLOCK_CALL_TIMEOUT_MS", "1000")


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """Five Sentinel groups (master + replica), three Sentinels, shared by the tests that
    leave it as they found it."""
    started = start_lab(tmp_path_factory.mktemp("lab"))
    yield started
    started.stop()


@pytest.fixture()
def own_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """A lab of its own, for a test that breaks it."""
    started = start_lab(tmp_path_factory.mktemp("own-lab"))
    yield started
    started.stop()


@pytest.fixture(scope="module")
def linked_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """Five plain masters, each behind a relay that can cut its client links."""
    started = start_lab(
        tmp_path_factory.mktemp("linked-lab"),
        "--links",
        "--sentinels",
        "0",
        "--replicas",
        "0",
    )
    yield started
    started.stop()


@pytest.fixture()
def scratch(tmp_path: Path) -> Path:
    return tmp_path
