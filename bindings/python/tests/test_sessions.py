"""The session records (``wmreplay.sessions``) and ``wmreplay.records``, without
the frameworks: the fold of items, pops and clears, limits, errors, concurrent
writers (other sessions, ``append``, ``wmreplay serve``), and that neither
``wmreplay`` nor ``wmreplay.sessions`` needs a framework installed. The
frameworks' own runs are in test_sessions_agents.py and
test_sessions_langchain.py."""

import asyncio
import json
import multiprocessing
import os
import subprocess
import sys
import threading
import urllib.request

import pytest

import wmreplay
from wmreplay.sessions import (
    SESSION_RECORD_TYPES,
    SessionLog,
    SessionRecordWarning,
    WmreplaySession,
)
from test_requests import serve, stop


def lines(log):
    """The log's records, decoded line by line (not through the package)."""
    return [json.loads(l) for l in open(log, encoding="utf-8").read().splitlines()]


def offsets(log):
    """The byte offset of each line of the log."""
    out, at = [], 0
    for l in open(log, "rb").read().split(b"\n")[:-1]:
        out.append(at)
        at += len(l) + 1
    return out


# records()


def test_records_gives_each_record_with_its_offset_in_replay_or_log_order(tmp_path):
    log = tmp_path / "wm.log"
    rows = [
        {"type": "text_input", "ts_ms": 30, "session_id": "s", "text": "late"},
        {"type": "wm_event", "ts_ms": 10, "n": 1.5},
        {"type": "text_output", "ts_ms": 20, "session_id": "t", "text": "é"},
    ]
    log.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows) + "not json\n",
                   encoding="utf-8")
    at = offsets(log)
    by_replay = wmreplay.records(log, warn=False)
    assert [list(r) for r in by_replay] == [["offset", "ts_ms", "type", "record"]] * 3
    assert [r["record"] for r in by_replay] == [rows[1], rows[2], rows[0]]
    assert [r["offset"] for r in by_replay] == [at[1], at[2], at[0]]
    assert [r["ts_ms"] for r in by_replay] == [10, 20, 30]
    assert [r["type"] for r in by_replay] == ["wm_event", "text_output", "text_input"]
    by_log = wmreplay.records(str(log), order="log")
    assert [r["record"] for r in by_log] == rows
    # The filters are a search's: a session keeps records without one too.
    kept = wmreplay.records(log, session="s", order="log")
    assert [r["record"] for r in kept] == [rows[0], rows[1]]
    assert [r["record"] for r in wmreplay.records(log, kinds=["text_output"])] == [rows[2]]
    assert [r["ts_ms"] for r in wmreplay.records(log, since=15, until=25)] == [20]
    assert asyncio.run(wmreplay.arecords(log, order="log")) == by_log


def test_records_of_a_missing_log_and_bad_options(tmp_path):
    missing = tmp_path / "none.log"
    assert wmreplay.records(missing) == []
    with pytest.raises(FileNotFoundError) as e:
        wmreplay.records(missing, require_log=True)
    assert e.value.filename == str(missing)
    with pytest.raises(IsADirectoryError):
        wmreplay.records(tmp_path)
    with pytest.raises(ValueError, match='`order` must be "replay" or "log"'):
        wmreplay.records(missing, order="time")
    with pytest.raises(TypeError, match="`since` must be a number"):
        wmreplay.records(missing, since="0")
    with pytest.raises(TypeError):
        wmreplay.records(missing, kinds="session_item")
    # A file of bad lines warns, as a replay does.
    junk = tmp_path / "junk.log"
    junk.write_text("a\nb\n")
    with pytest.warns(wmreplay.SkippedLinesWarning, match="junk.log"):
        assert wmreplay.records(junk) == []


# The session records, folded.


def test_items_pops_and_clears_are_records_and_the_session_is_their_fold(tmp_path):
    log = tmp_path / "wm.log"
    log.write_text('{"type":"wm_event","ts_ms":1}\n')
    s = SessionLog(log, "s1")
    other = SessionLog(log, "s2")
    assert s.items() == [] and s.pop() is None
    assert len(lines(log)) == 1, "popping an empty session writes nothing"
    a = {"role": "user", "content": "hi"}
    b = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"x": [1, 2.5, null]}'}
    c = {"type": "function_call_output", "call_id": "c1", "output": "ok ✓"}
    s.add([a, b])
    other.add([{"role": "user", "content": "elsewhere"}])
    s.add([c])
    assert s.items() == [a, b, c]
    assert other.items() == [{"role": "user", "content": "elsewhere"}]
    recs = lines(log)
    at = offsets(log)
    assert [r["type"] for r in recs] == ["wm_event"] + ["session_item"] * 4
    assert recs[1] == {"ts_ms": recs[1]["ts_ms"], "type": "session_item", "session_id": "s1", "item": a}
    assert list(recs[1]) == ["ts_ms", "type", "session_id", "item"], "stamped first, by append"
    assert all(isinstance(r["ts_ms"], int) for r in recs)

    assert s.pop() == c
    pop = lines(log)[-1]
    assert pop == {"ts_ms": pop["ts_ms"], "type": "session_pop", "session_id": "s1",
                   "popped": {"offset": at[4], "ts_ms": recs[4]["ts_ms"]}}
    assert s.items() == [a, b]
    assert s.pop() == b and s.items() == [a]
    s.add([c])
    assert s.items() == [a, c]
    s.clear()
    assert lines(log)[-1] == {"ts_ms": lines(log)[-1]["ts_ms"], "type": "session_clear", "session_id": "s1"}
    assert s.items() == [] and s.pop() is None
    s.add([b])
    assert s.items() == [b], "items added after a clear stay"
    assert other.items() == [{"role": "user", "content": "elsewhere"}], "another session is untouched"
    # Nothing was ever deleted: every line written is still there.
    assert [r["type"] for r in lines(log)] == (["wm_event"] + ["session_item"] * 4 + ["session_pop"] * 2
                                               + ["session_item", "session_clear", "session_item"])


def test_limit_is_the_latest_n_in_chronological_order(tmp_path):
    s = SessionLog(tmp_path / "wm.log", "s")
    items = [{"role": "user", "content": str(i)} for i in range(5)]
    s.add(items)
    assert s.items() == items
    assert s.items(2) == items[3:]
    assert s.items(1) == items[4:]
    assert s.items(5) == items and s.items(50) == items
    assert s.items(0) == []
    s.pop()
    assert s.items(2) == items[2:4]
    with pytest.raises(ValueError, match="at least 0"):
        s.items(-1)
    with pytest.raises(TypeError):
        s.items("2")
    with pytest.raises(TypeError):
        s.items(True)

    async def main():
        session = WmreplaySession("s", tmp_path / "wm.log")
        assert await session.get_items() == items[:4]
        assert await session.get_items(limit=3) == items[1:4]
        with pytest.raises(ValueError):
            await session.get_items(-2)

        class Settings:  # the shape of agents.SessionSettings
            limit = 2

        limited = WmreplaySession("s", tmp_path / "wm.log", session_settings=Settings())
        assert await limited.get_items() == items[2:4]
        assert await limited.get_items(3) == items[1:4], "an explicit limit wins"

    asyncio.run(main())


def test_items_come_back_exactly_as_added(tmp_path):
    log = tmp_path / "wm.log"
    item = {
        "type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
        "content": [{"type": "output_text", "text": "line\nbreak \"quoted\" \\ \u2028 😀 \x00 \x1f",
                     "annotations": [], "logprobs": []}],
        "numbers": [0, -1, 2**63, 1.0, 1e-7, 1.7976931348623157e308, -0.0],
        "nested": {"a": {"b": {"c": [None, True, False, {}, []]}}},
        "": "empty key", "unicode key é": "x",
    }
    s = SessionLog(log, "round-trip")
    s.add([item, {"lone": "\ud800"}])
    back = SessionLog(log, "round-trip").items()
    assert back == [item, {"lone": "\ud800"}]
    assert json.dumps(back[0], sort_keys=True) == json.dumps(item, sort_keys=True)
    assert [type(v) for v in back[0]["numbers"]] == [type(v) for v in item["numbers"]]
    assert list(back[0]) == list(item), "key order kept"


def test_bad_items_raise_naming_the_log_and_write_nothing(tmp_path):
    log = tmp_path / "wm.log"
    s = SessionLog(log, "s")
    s.add([{"role": "user", "content": "kept"}])
    before = log.read_bytes()
    with pytest.raises(TypeError, match="item 1 must be a dict"):
        s.add([{"ok": 1}, "not a dict"])
    with pytest.raises(ValueError, match=r"wm\.log: item 1 of session 's' cannot be written as JSON"):
        s.add([{"ok": 1}, {"data": b"bytes"}])
    with pytest.raises(ValueError, match="item 0"):
        s.add([{"x": float("nan")}])
    assert log.read_bytes() == before
    with pytest.raises(TypeError):
        SessionLog(log, 42)
    with pytest.raises(IsADirectoryError) as e:
        SessionLog(tmp_path, "s").items()
    assert e.value.filename == str(tmp_path)
    with pytest.raises(IsADirectoryError):
        SessionLog(tmp_path, "s").add([{"a": 1}])


def test_records_of_other_writers_are_read_by_the_same_rules(tmp_path):
    log = tmp_path / "wm.log"
    rows = [
        {"type": "session_item", "ts_ms": 1, "session_id": "s", "item": {"n": 1}},
        {"type": "session_item", "ts_ms": 2, "item": {"n": "no session"}},
        {"type": "session_item", "ts_ms": 3, "session_id": "s"},
        {"type": "session_item", "ts_ms": 4, "session_id": "s", "item": {"n": 2}},
        {"type": "session_pop", "ts_ms": 5, "session_id": "s", "popped": {"offset": "x"}},
        {"type": "session_item", "ts_ms": 0, "session_id": "s", "item": {"n": 3, "ts": "earlier"}},
        {"type": "session_pop", "ts_ms": 6, "session_id": "s", "popped": {"offset": 0}},
        {"type": "session_pop", "ts_ms": 7, "session_id": "s", "popped": {"offset": 0}},
    ]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    s = SessionLog(log, "s")
    with pytest.warns(SessionRecordWarning) as w:
        items = s.items()
    # Log order, not ts_ms order; the record without a session is not the
    # session's; a pop of an item popped already pops nothing more.
    assert items == [{"n": 2}, {"n": 3, "ts": "earlier"}]
    messages = sorted(str(x.message) for x in w)
    at = offsets(log)
    assert any(f"wm.log: byte {at[2]}: a session_item record without `item`" in m for m in messages)
    assert any(f"wm.log: byte {at[4]}: a session_pop record" in m for m in messages)


def test_async_methods_run_in_a_thread_and_give_the_same(tmp_path):
    log = tmp_path / "wm.log"

    async def main():
        s = WmreplaySession("a", log)
        assert repr(s) == f"WmreplaySession('a', {str(log)!r})"
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        t = asyncio.create_task(ticker())
        await s.add_items([{"role": "user", "content": str(i)} for i in range(3)])
        got = await asyncio.gather(s.get_items(), s.get_items(1), s.log.aitems(2))
        popped = await s.pop_item()
        await s.clear_session()
        empty = await s.get_items()
        none = await s.pop_item()
        t.cancel()
        return got, popped, empty, none, ticks

    got, popped, empty, none, ticks = asyncio.run(main())
    assert got[0] == [{"role": "user", "content": str(i)} for i in range(3)]
    assert got[1] == got[0][2:] and got[2] == got[0][1:]
    assert popped == {"role": "user", "content": "2"}
    assert empty == [] and none is None
    assert ticks > 0, "the loop ran while the calls were in threads"
    assert [r["type"] for r in lines(log)] == ["session_item"] * 3 + ["session_pop", "session_clear"]


# Concurrent writers.


def _writer(log, session_id, n):
    s = SessionLog(log, session_id)
    for i in range(n):
        s.add([{"who": session_id, "n": i, "k": 0}, {"who": session_id, "n": i, "k": 1}])


def test_sessions_append_and_the_server_never_tear_or_interleave(tmp_path):
    log = tmp_path / "wm.log"
    log.write_text('{"type":"wm_event","ts_ms":1}\n')
    proc, url = serve(log)
    rounds = 30
    errors = []

    def server_writer():
        try:
            for i in range(rounds):
                body = json.dumps([{"type": "wm_event", "who": "serve", "n": i, "k": k} for k in (0, 1)])
                req = urllib.request.Request(f"{url}/v1/records", data=body.encode(),
                                             headers={"content-type": "application/json"})
                with urllib.request.urlopen(req) as resp:
                    assert resp.status == 200
        except Exception as e:  # reported below
            errors.append(e)

    async def sessions_in_one_loop():
        a, b = WmreplaySession("loop-a", log), WmreplaySession("loop-b", log)

        async def run(s):
            for i in range(rounds):
                await s.add_items([{"who": s.session_id, "n": i, "k": 0},
                                   {"who": s.session_id, "n": i, "k": 1}])
        await asyncio.gather(run(a), run(b))

    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(log), f"proc-{p}", rounds)) for p in range(2)]
    try:
        threads = [threading.Thread(target=server_writer)]
        threads += [threading.Thread(target=_writer, args=(log, f"thread-{t}", rounds)) for t in range(2)]
        for x in procs + threads:
            x.start()
        asyncio.run(sessions_in_one_loop())
        for x in procs + threads:
            x.join()
    finally:
        stop(proc)
    assert not errors, errors
    assert all(p.exitcode == 0 for p in procs)
    text = log.read_text()
    assert text.endswith("\n")
    recs = [json.loads(l) for l in text.splitlines()]  # every line whole
    assert wmreplay.replay(log).stats["skipped_invalid_json"] == 0
    for a, b in zip(recs, recs[1:]):
        first = a.get("item", a)
        if first.get("k") == 0:
            second = b.get("item", b)
            assert (second["who"], second["n"], second["k"]) == (first["who"], first["n"], 1), "a batch is whole"
    for who in ["proc-0", "proc-1", "thread-0", "thread-1", "loop-a", "loop-b"]:
        want = [{"who": who, "n": i, "k": k} for i in range(rounds) for k in (0, 1)]
        assert SessionLog(log, who).items() == want, who
    served = [r for r in recs if r.get("who") == "serve"]
    assert len(served) == 2 * rounds


def test_pops_in_one_process_take_turns(tmp_path):
    log = tmp_path / "wm.log"
    items = [{"n": i} for i in range(12)]
    SessionLog(log, "s").add(items)
    got = []

    def popper():
        got.append(SessionLog(log, "s").pop())

    threads = [threading.Thread(target=popper) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got, key=lambda x: x["n"]) == items, "each item popped once"
    assert SessionLog(log, "s").items() == []
    pops = [r for r in lines(log) if r["type"] == "session_pop"]
    assert len({p["popped"]["offset"] for p in pops}) == 12


# No framework needed.


BLOCKER = """
import sys
class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("agents", "langchain_core", "langchain"):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked)", name=name)
sys.meta_path.insert(0, Blocker())
"""


def test_wmreplay_and_its_agents_session_need_no_framework(tmp_path):
    code = BLOCKER + f"""
import asyncio, wmreplay, wmreplay.sessions
from wmreplay.sessions import WmreplaySession
s = WmreplaySession("s", {str(tmp_path / 'wm.log')!r})
async def main():
    await s.add_items([{{"role": "user", "content": "hi"}}])
    return await s.get_items()
assert asyncio.run(main()) == [{{"role": "user", "content": "hi"}}]
assert not any(m.split(".")[0] in ("agents", "langchain_core") for m in sys.modules)
try:
    from wmreplay.sessions import WmreplayChatMessageHistory
except ModuleNotFoundError as e:
    assert e.name.startswith("langchain_core"), e
    print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_the_record_types_are_named_once():
    assert SESSION_RECORD_TYPES == ("session_item", "session_pop", "session_clear")
    assert set(wmreplay.sessions.__all__) >= {"SessionLog", "WmreplaySession", "WmreplayChatMessageHistory"}
