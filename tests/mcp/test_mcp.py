"""wmreplay's MCP server driven by the official MCP Python SDK (`mcp`, the
version .ci/mcp-tests.sh pins), over stdio (`wmreplay mcp LOG`) and
streamable HTTP (`wmreplay serve --mcp`).

Run with .ci/mcp-tests.sh, or by hand: WMREPLAY_BIN=target/debug/wmreplay
python -m pytest tests/mcp -q (in a virtualenv with `mcp` and `pytest`).
"""

import asyncio
import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import httpx2
import pytest
from mcp import Client, ClientSession, MCPError, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

ROOT = Path(__file__).resolve().parents[2]
BIN = os.environ.get("WMREPLAY_BIN") or str(ROOT / "target" / "debug" / "wmreplay")
TOOLS = {
    "search_memory",
    "memory",
    "get_facts",
    "set_fact",
    "delete_fact",
    "append_record",
    "recent_context",
}
RECORD_LIMIT = "8KiB"


def summarized_log(path: Path) -> None:
    """Two records, a summary covering them, one record after it."""
    lines = [
        {"type": "text_input", "ts_ms": 1, "text": "I moved to Porto last spring"},
        {"type": "text_output", "ts_ms": 2, "text": "Noted: you live in Porto."},
    ]
    data = b""
    offsets = []
    for rec in lines:
        offsets.append(len(data))
        data += json.dumps(rec).encode() + b"\n"
    summary = {
        "type": "wm_summary",
        "ts_ms": 3,
        "covers": {"ts_ms": 2, "offset": offsets[-1]},
        "text": "The user lives in Porto.",
        "folded": {"records": 2, "tokens": 20},
        "model": "test",
    }
    data += json.dumps(summary).encode() + b"\n"
    data += json.dumps({"type": "event", "ts_ms": 4, "text": "after the summary"}).encode() + b"\n"
    path.write_bytes(data)


def text(result) -> str:
    return result.content[0].text


def body(result) -> dict:
    assert not result.is_error, text(result)
    return json.loads(text(result))


async def exercise(s: ClientSession) -> None:
    """Every tool, good and bad arguments, and the resources."""
    init = await s.initialize()
    assert init.server_info.name == "wmreplay"
    listed = (await s.list_tools()).tools
    assert {t.name for t in listed} == TOOLS
    for t in listed:
        schema = t.input_schema
        assert schema["type"] == "object", t.name
        assert not {"oneOf", "anyOf", "allOf"} & set(schema), t.name
        assert t.description, t.name

    # recent_context on the log as it stands: the summary, the record after it.
    ctx = body(await s.call_tool("recent_context", {}))
    assert ctx["summary"] == "The user lives in Porto."
    assert [r["record"]["text"] for r in ctx["records"]] == ["after the summary"]
    assert ctx["earlier"] == 0

    # append_record: stamped by the server when it has no ts_ms.
    added = body(
        await s.call_tool(
            "append_record",
            {"record": {"type": "note", "text": "invoice lisbon-4711 is due Friday"}},
        )
    )
    assert added["ts_ms"] > 1_000_000_000_000 and added["bytes"] > 0
    given = body(await s.call_tool("append_record", {"record": {"type": "note", "ts_ms": 5, "text": "x"}}))
    assert given["ts_ms"] == 5

    # Facts.
    put = body(await s.call_tool("set_fact", {"key": "city", "value": {"name": "Porto"}}))
    assert put["key"] == "city" and put["deleted"] is False
    body(await s.call_tool("set_fact", {"key": "gone", "value": 1}))
    deleted = body(await s.call_tool("delete_fact", {"key": "gone"}))
    assert deleted["deleted"] is True
    facts = body(await s.call_tool("get_facts", {}))["facts"]
    assert facts == {"city": {"name": "Porto"}}

    # The memory tool: files under /memories, kept as facts.
    r = await s.call_tool("memory", {"command": "create", "path": "/memories/todo.md", "file_text": "buy milk\n"})
    assert not r.is_error, text(r)
    r = await s.call_tool(
        "memory", {"command": "str_replace", "path": "/memories/todo.md", "old_str": "milk", "new_str": "bread"}
    )
    assert not r.is_error, text(r)
    r = await s.call_tool("memory", {"command": "view", "path": "/memories/todo.md"})
    assert "buy bread" in text(r)
    facts = body(await s.call_tool("get_facts", {}))["facts"]
    assert facts["/memories/todo.md"] == "buy bread\n"

    # search_memory: the whole log, the summarized records included.
    found = body(await s.call_tool("search_memory", {"query": "lisbon invoice"}))
    assert found["query"] == "lisbon invoice"
    assert "lisbon-4711" in found["records"][0]["record"]["text"]
    found = body(await s.call_tool("search_memory", {"query": "Porto spring", "limit": 3}))
    assert any(r["record"].get("ts_ms") == 1 for r in found["records"])

    # recent_context: newest first to the limit, in replay order.
    ctx = body(await s.call_tool("recent_context", {"limit": 2}))
    assert len(ctx["records"]) == 2 and ctx["earlier"] > 0
    assert ctx["records"][-1]["record"]["type"] == "wm_fact"

    # Bad arguments: an error result naming what is wrong, never a crash.
    bad = [
        ("search_memory", {}, "`query` is required"),
        ("search_memory", {"query": "x", "limit": 0}, "`limit` must be an integer from 1 to 20"),
        ("search_memory", {"query": 7}, "`query` is required (a string)"),
        ("set_fact", {"key": "k"}, "`value` is required"),
        ("set_fact", {"key": "", "value": 1}, "invalid_key"),
        ("set_fact", {"key": "big", "value": "x" * 9000}, "record_too_large"),
        ("delete_fact", {}, "`key` is required"),
        ("append_record", {}, "`record` is required"),
        ("append_record", {"record": "text"}, "a JSON object"),
        ("append_record", {"record": {"text": "no type"}}, "invalid_record"),
        ("append_record", {"record": {"type": "t", "ts_ms": "now"}}, "`ts_ms` must be a number"),
        ("append_record", {"record": {"type": "t", "text": "x" * 9000}}, "record_too_large"),
        ("memory", {}, "`command` is required"),
        ("memory", {"command": "view", "path": "/etc/passwd"}, "restricted to /memories"),
        ("memory", {"command": "view", "path": "/memories/../x"}, "Invalid path"),
        ("memory", {"command": "format"}, "Unknown command"),
        ("memory", {"command": "create", "path": "/memories/big", "file_text": "x" * 9000}, "limit"),
        ("recent_context", {"limit": 1000}, "`limit` must be an integer from 1 to 200"),
    ]
    for name, args, want in bad:
        r = await s.call_tool(name, args)
        assert r.is_error, (name, args, text(r))
        assert want in text(r), (name, args, text(r))
        assert "/tmp" not in text(r), text(r)
    # Nothing of those was written.
    facts = body(await s.call_tool("get_facts", {}))["facts"]
    assert set(facts) == {"city", "/memories/todo.md"}

    # An unknown tool is a protocol error (invalid params).
    with pytest.raises(MCPError) as e:
        await s.call_tool("no_such_tool", {})
    assert e.value.error.code == -32602
    assert "search_memory" in e.value.error.message

    # Resources: the facts and the newest summary.
    uris = {str(r.uri) for r in (await s.list_resources()).resources}
    assert uris == {"wmreplay://facts", "wmreplay://summary"}
    read = await s.read_resource("wmreplay://facts")
    assert json.loads(read.contents[0].text)["facts"]["city"] == {"name": "Porto"}
    read = await s.read_resource("wmreplay://summary")
    assert read.contents[0].text == "The user lives in Porto."
    with pytest.raises(MCPError):
        await s.read_resource("wmreplay://nothing")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http(method: str, url: str, data=None, headers=None):
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


class Serve:
    """`wmreplay serve --mcp` on a free loopback port."""

    def __init__(self, *args: str, env=None):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [BIN, "serve", "--mcp", "--addr", f"127.0.0.1:{self.port}", "--max-record-bytes", RECORD_LIMIT, *args],
            env={**os.environ, "RUST_LOG": "warn", **(env or {})},
            stdout=subprocess.DEVNULL,
        )
        deadline = time.time() + 30
        while True:
            try:
                if http("GET", self.base + "/healthz")[0] == 200:
                    return
            except OSError:
                pass
            assert self.proc.poll() is None, "serve exited"
            assert time.time() < deadline, "serve did not start"
            time.sleep(0.05)

    def stop(self) -> float:
        """SIGTERM; the seconds it took to exit."""
        t0 = time.time()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)
        return time.time() - t0


@pytest.fixture
def log(tmp_path: Path) -> Path:
    path = tmp_path / "memory.log"
    summarized_log(path)
    return path


def stdio_params(log: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=BIN,
        args=["mcp", str(log), "--max-record-bytes", RECORD_LIMIT],
        env={"RUST_LOG": "warn"},
    )


def test_stdio(log: Path):
    async def main():
        async with stdio_client(stdio_params(log)) as (read, write):
            async with ClientSession(read, write) as s:
                await exercise(s)

    asyncio.run(main())
    # Every line the server wrote is a whole JSON record.
    for line in log.read_text().splitlines():
        json.loads(line)


def test_streamable_http_and_context(log: Path):
    server = Serve("--log", str(log))
    try:

        async def main():
            async with streamable_http_client(server.base + "/mcp") as (read, write):
                async with ClientSession(read, write) as s:
                    await exercise(s)

        asyncio.run(main())
        # What MCP wrote is in the request a turn would send.
        status, sent = http("POST", server.base + "/v1/context", json.dumps({"text": "hi"}).encode())
        assert status == 200, sent
        assert b"lisbon-4711" in sent and b"buy bread" in sent
    finally:
        server.stop()


def test_the_modern_client_over_both_transports(log: Path):
    """`mcp.Client` in its default mode (`server/discover`, no handshake)."""
    server = Serve("--log", str(log))
    try:

        async def main():
            for target in (server.base + "/mcp", stdio_params(log)):
                async with Client(target) as c:
                    assert {t.name for t in (await c.list_tools()).tools} == TOOLS
                    r = await c.call_tool("set_fact", {"key": "mode", "value": "modern"})
                    assert not r.is_error, text(r)
                    r = await c.call_tool("search_memory", {"limit": 99, "query": "x"})
                    assert r.is_error and "`limit`" in text(r)

        asyncio.run(main())
    finally:
        server.stop()


def test_a_log_dir_behind_a_token(tmp_path: Path):
    summarized_log(tmp_path / "alpha.log")
    server = Serve("--log-dir", str(tmp_path), "--auth-token-env", "WM_TEST_TOKEN", env={"WM_TEST_TOKEN": "s3cret"})
    url = server.base + "/v1/logs/alpha/mcp"
    try:
        ping = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()
        accept = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        assert http("POST", url, ping, accept)[0] == 401
        assert http("POST", server.base + "/mcp", ping, accept)[0] in (401, 404)

        async def main():
            client = httpx2.AsyncClient(headers={"Authorization": "Bearer s3cret"})
            async with client, streamable_http_client(url, http_client=client) as (read, write):
                async with ClientSession(read, write) as s:
                    await s.initialize()
                    r = await s.call_tool("recent_context", {"limit": 1})
                    assert body(r)["summary"] == "The user lives in Porto."
                    body(await s.call_tool("append_record", {"record": {"type": "note", "text": "to beta"}}))
            bad = httpx2.AsyncClient(headers={"Authorization": "Bearer s3cret"})
            async with bad, streamable_http_client(server.base + "/v1/logs/..%2Fx/mcp", http_client=bad) as (
                read,
                write,
            ):
                async with ClientSession(read, write) as s:
                    with pytest.raises(Exception):
                        await s.initialize()

        asyncio.run(main())
        assert "to beta" in (tmp_path / "alpha.log").read_text()
    finally:
        server.stop()


def test_a_foreign_host_is_refused_and_shutdown_does_not_wait_on_mcp(log: Path):
    server = Serve("--log", str(log))
    try:
        ping = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        status, _ = http("POST", server.base + "/mcp", ping, {**headers, "Host": "evil.example"})
        assert status == 403
        status, answer = http("POST", server.base + "/mcp", ping, {**headers, "Host": f"localhost:{server.port}"})
        assert status == 200, answer
        # No stream is ever left open: a GET for one is refused.
        status, _ = http("GET", server.base + "/mcp", headers={"Accept": "text/event-stream"})
        assert status == 405
    finally:
        took = server.stop()
    assert took < 5, took
    assert server.proc.returncode == 0


def test_stdio_and_serve_write_one_log_without_interleaving(log: Path):
    """A stdio MCP process and a `serve` append to the same log at once."""
    server = Serve("--log", str(log))
    n = 40
    try:

        def post_records():
            for i in range(n):
                rec = {"type": "from_http", "i": i, "pad": "h" * 3000}
                status, answer = http("POST", server.base + "/v1/records", json.dumps(rec).encode())
                assert status == 200, answer

        async def main():
            async with stdio_client(stdio_params(log)) as (read, write):
                async with ClientSession(read, write) as s:
                    await s.initialize()
                    poster = threading.Thread(target=post_records)
                    poster.start()
                    results = await asyncio.gather(
                        *(
                            s.call_tool("append_record", {"record": {"type": "from_mcp", "i": i, "pad": "m" * 3000}})
                            for i in range(n)
                        )
                    )
                    poster.join()
                    assert not any(r.is_error for r in results)

        asyncio.run(main())
        kinds = [json.loads(line)["type"] for line in log.read_text().splitlines()]
        assert kinds.count("from_mcp") == n and kinds.count("from_http") == n
        status, sent = http("POST", server.base + "/v1/context", json.dumps({"text": "hi"}).encode())
        assert status == 200 and sent.count(b"WM_KIND=from_mcp") == n
    finally:
        server.stop()


def test_memory_edits_from_two_processes_are_never_lost(log: Path):
    """Finding "memory edits lost across processes": `serve --mcp` and
    `wmreplay mcp` on one log, each inserting lines into one memory file at
    once, each insert acknowledged. Every acknowledged line is in the file
    afterwards (the adversarial run lost 7 of 30): a command appends only
    if the log did not change since it read the files, and runs again on
    the files as they then stand otherwise."""
    server = Serve("--log", str(log))
    n = 15
    path = "/memories/shared.md"
    try:

        async def main():
            async with Client(server.base + "/mcp") as over_http, Client(stdio_params(log)) as over_stdio:
                r = await over_http.call_tool("memory", {"command": "create", "path": path, "file_text": "start\n"})
                assert not r.is_error, text(r)

                async def insert(c, who, i):
                    args = {"command": "insert", "path": path, "insert_line": 0, "insert_text": f"{who}-{i}\n"}
                    r = await c.call_tool("memory", args)
                    assert not r.is_error, text(r)

                await asyncio.gather(
                    *(insert(over_http, "http", i) for i in range(n)),
                    *(insert(over_stdio, "stdio", i) for i in range(n)),
                )
                for c in (over_http, over_stdio):
                    r = await c.call_tool("memory", {"command": "view", "path": path})
                    shown = text(r)
                    missing = [
                        f"{who}-{i}" for who in ("http", "stdio") for i in range(n) if f"{who}-{i}" not in shown
                    ]
                    assert not missing, (missing, shown)

        asyncio.run(main())
    finally:
        server.stop()


def test_arguments_nested_too_deep_are_answered_with_an_error_over_both_transports(log: Path):
    """Finding: "MCP arguments nested ~124 deep get no answer at all over
    stdio (the client waits forever); over HTTP a plain-text 415". Both
    transports answer the request, under its id, with an error that says
    how deep it is and how deep the server reads; the session goes on."""
    server = Serve("--log", str(log))
    value = 1
    for _ in range(124):
        value = [value]
    try:

        async def main():
            for target in (stdio_params(log), server.base + "/mcp"):
                async with Client(target) as c:
                    with pytest.raises(MCPError) as raised:
                        await asyncio.wait_for(c.call_tool("set_fact", {"key": "deep", "value": value}), 20)
                    assert "levels deep" in str(raised.value) and "at most 100" in str(raised.value), raised.value
                    # The session goes on.
                    r = await asyncio.wait_for(c.call_tool("set_fact", {"key": "shallow", "value": [[1]]}), 20)
                    assert not r.is_error, text(r)

        asyncio.run(main())
        # Nothing deep was written.
        assert '"deep"' not in log.read_text()
    finally:
        server.stop()
