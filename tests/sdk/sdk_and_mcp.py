"""Two kinds of clients writing one log at once: the official `anthropic`
SDK (turns through the provider-compatible endpoint) and the official MCP
client (`mcp`, from PyPI; `append_record` and `set_fact` over streamable
HTTP), all concurrently against one `wmreplay serve --mcp`. The Rust test
that runs this script (tests/service/sdk_clients.rs) then checks that the log holds
every write, whole.

Usage: python sdk_and_mcp.py ROOT_URL TURNS WRITES
Prints one JSON object: the turns answered and the MCP writes acknowledged.
"""

import asyncio
import json
import sys

import anthropic
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client


async def turns(root: str, n: int) -> list:
    client = anthropic.AsyncAnthropic(base_url=root + "/anthropic", api_key="sk-client", max_retries=2)

    async def one(i: int) -> str:
        m = await client.messages.create(
            model="claude-test",
            max_tokens=64,
            messages=[{"role": "user", "content": f"sdk turn {i}"}],
        )
        assert m.type == "message" and m.role == "assistant", m
        return m.content[0].text

    return await asyncio.gather(*(one(i) for i in range(n)))


async def writes(root: str, n: int) -> list:
    async with streamable_http_client(root + "/mcp") as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()

            async def one(i: int) -> dict:
                if i % 2:
                    r = await s.call_tool("set_fact", {"key": f"fact-{i}", "value": {"n": i}})
                else:
                    r = await s.call_tool("append_record", {"record": {"type": "mcp_note", "n": i, "text": f"note {i}"}})
                assert not r.is_error, r
                return json.loads(r.content[0].text)

            return await asyncio.gather(*(one(i) for i in range(n)))


async def main(root: str, n_turns: int, n_writes: int) -> dict:
    answered, acked = await asyncio.gather(turns(root, n_turns), writes(root, n_writes))
    return {"answered": len(answered), "acked": [a["offset"] for a in acked]}


if __name__ == "__main__":
    root, n_turns, n_writes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    print(json.dumps(asyncio.run(main(root, n_turns, n_writes))))
