"""An agent loop on quorumlock's MCP tools, with the official MCP Python SDK.

For each task the agent takes the lock on a shared resource, writes to the storage that
resource protects with the lock's fencing token, and releases the lock. The storage (a JSON
file here; a database row or an object store in practice) keeps the highest fencing token
it has seen and refuses a write that carries a lower one, so a holder whose lease ran out
while it was paused cannot overwrite the work of the holder after it. At the end the agent
tries a write with its first, stale token and shows it refused.

    pip install -r requirements.txt
    quorumlock lab up
    python agent.py --config .quorumlock/lab/quorumlock.toml           # stdio: starts `quorumlock serve`
    QUORUMLOCK_MCP_TOKEN=... python agent.py --url http://locks.internal:8848/mcp   # a running server
"""

import argparse
import asyncio
import json
import os
import sys
from contextlib import asynccontextmanager
from pathlib import Path

import httpx2
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client


class StaleWrite(Exception):
    """The storage has seen a higher fencing token: a later holder has written."""


class FencedStore:
    """A value in a JSON file that only a holder with the highest fencing token may change."""

    def __init__(self, path: Path):
        self.path = path

    def read(self) -> dict:
        if not self.path.exists():
            return {"fencing_token": 0, "writes": []}
        return json.loads(self.path.read_text())

    def write(self, fencing_token: int, value: str) -> None:
        state = self.read()
        if fencing_token < state["fencing_token"]:
            raise StaleWrite(
                f"fencing token {fencing_token} is below {state['fencing_token']}: "
                "a later holder has written"
            )
        state["fencing_token"] = fencing_token
        state["writes"].append({"fencing_token": fencing_token, "value": value})
        # Written whole and renamed, so a reader never sees half a file.
        scratch = self.path.with_suffix(".tmp")
        scratch.write_text(json.dumps(state, indent=2))
        scratch.replace(self.path)


class ToolError(Exception):
    """A tool answered with isError. `kind` says what went wrong (docs/mcp.md, "Errors"):
    invalid_input, held_too_long, no_quorum (never write as if you held the lock),
    over_limit, expired, session_closed or internal."""

    def __init__(self, tool: str, kind: str, text: str):
        super().__init__(f"{tool}: {text}")
        self.kind = kind


async def call(session: ClientSession, tool: str, arguments: dict) -> dict:
    """Calls a tool and returns its structured result; a tool error raises with its kind."""
    result = await session.call_tool(tool, arguments)
    if result.is_error:
        text = " ".join(block.text for block in result.content if hasattr(block, "text"))
        error = (result.structured_content or {}).get("error", {})
        raise ToolError(tool, error.get("kind", "internal"), text)
    return result.structured_content


async def run_tasks(session: ClientSession, args: argparse.Namespace) -> None:
    store = FencedStore(Path(args.store))
    first_token = None
    for task in range(1, args.tasks + 1):
        lock = await call(
            session,
            "acquire_lock",
            {
                "resource": args.resource,
                "ttl_ms": 15000,
                "wait_ms": 10000,
                "owner": args.owner,
                "purpose": f"task {task}: update {args.resource}",
            },
        )
        if not lock["acquired"]:
            holder = lock.get("holder", {})
            print(f"task {task}: {args.resource} is held by {holder.get('owner', 'someone')}; skipped")
            continue
        fencing_token = lock["fencing_token"]
        first_token = first_token or fencing_token
        try:
            store.write(fencing_token, f"task {task} by {args.owner}")
            print(f"task {task}: wrote with fencing token {fencing_token}")
        finally:
            # Released whatever the work did, so the next agent need not wait for the TTL.
            released = await call(
                session, "release_lock", {"resource": args.resource, "token": lock["token"]}
            )
            print(f"task {task}: released={str(released['released']).lower()}")

    if first_token is not None and args.tasks > 1:
        try:
            store.write(first_token, "a paused holder wakes up")
            print(f"stale write with fencing token {first_token} was accepted")
        except StaleWrite as refused:
            print(f"stale write refused: {refused}")


@asynccontextmanager
async def connect(args: argparse.Namespace):
    """An initialised session: over HTTP with the bearer token when --url is given, else
    over stdio with `quorumlock serve` as a child process."""
    if args.url:
        token = os.environ.get("QUORUMLOCK_MCP_TOKEN")
        if not token:
            sys.exit("set QUORUMLOCK_MCP_TOKEN to the server's bearer token")
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx2.AsyncClient(headers=headers) as http:
            async with streamable_http_client(args.url, http_client=http) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    yield session
    else:
        serve_args = ["--config", args.config, "serve"] if args.config else ["serve"]
        server = StdioServerParameters(command=args.server, args=serve_args)
        async with stdio_client(server) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", help="topology file for `quorumlock serve` (stdio)")
    parser.add_argument("--server", default="quorumlock", help="the quorumlock binary (stdio)")
    parser.add_argument("--url", help="a running server's /mcp URL (HTTP)")
    parser.add_argument("--store", default="store.json", help="the fenced storage file")
    parser.add_argument("--resource", default="report:daily")
    parser.add_argument("--owner", default=f"python-agent-{os.getpid()}")
    parser.add_argument("--tasks", type=int, default=3)
    args = parser.parse_args()
    async with connect(args) as session:
        await run_tasks(session, args)


if __name__ == "__main__":
    asyncio.run(main())
