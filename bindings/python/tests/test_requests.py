"""Request bodies that are requests (model, token limit, params), selections,
cache breakpoints and the pending mark, against the CLI's ``respond``; the
options' checks and defaults; ``append()`` beside ``wmreplay serve``; the
async variants; a missing log and a log of junk.

Runs against whichever ``wmreplay`` is importable (see test_wmreplay.py).
"""

import asyncio
import json
import os
import re
import subprocess
import threading
import urllib.request
import warnings
from pathlib import Path

import pytest

import wmreplay
import oracle
from test_wmreplay import EXAMPLE, cli

# Option sets `respond` takes, with the windows, selections and marks each
# exercises (the same as the Node.js package's test).
CASES = [
    dict(tail=12, cache="auto"),
    dict(max_tokens=900, tokenizer="o200k_base", start_on="text_input", mark_pending=True),
    dict(max_tokens=700, tokenizer="cl100k_base", cache="auto", cache_ttl="1h"),
    dict(tail=40, session_only=True, session_id="s-0", kinds=["wm_event", "text_input"],
         since=1763700000000),
    dict(until=1763700150000, mark_pending=True, format="openai", system="Be brief."),
    dict(max_tokens=500, tokenizer="bytes", format="ndjson"),
    dict(tail=5, format="xml", record="js"),
    dict(model="claude-sonnet-4-5", tail=12, cache="auto", mark_pending=True),
    dict(model="claude-opus-4-5", max_output_tokens=200,
         params={"temperature": 0.2, "stop_sequences": ["END"]}, max_tokens=800),
    dict(model="gpt-5", format="openai", params={"max_tokens": 50, "stop": ["END"]}, tail=20),
    dict(summaries=True, facts=True, tail=30),
    dict(summaries=True, model="claude-sonnet-4-5", cache="auto", mark_pending=True),
    dict(facts=True, format="openai"),
]


@pytest.fixture
def turns_log(tmp_path):
    """The example, a burst of events longer than the cache's lookback, and
    an unanswered text_input at the end."""
    lines = [EXAMPLE.read_text().rstrip("\n")]
    for i in range(90):
        lines.append(json.dumps({"type": "text_output" if i % 3 == 0 else "wm_event",
                                 "ts_ms": 1763700100000 + i, "session_id": f"s-{i % 2}", "n": i},
                                separators=(",", ":")))
    # Keyed facts and a summary of the first part (for summaries and facts).
    lines.append('{"type":"wm_fact","ts_ms":1763700100010,"key":"user.name","value":"Ann"}')
    lines.append('{"type":"wm_fact","ts_ms":1763700100020,"key":"tone","value":{"short":true}}')
    lines.append('{"type":"wm_summary","ts_ms":1763700100050,'
                 '"covers":{"ts_ms":1763700100030,"offset":0},"text":"earlier turns"}')
    lines.append('{"type": "text_input", "ts_ms": 1763700200000, "session_id": "s-0", "text": "pending?"}')
    p = tmp_path / "turns.log"
    p.write_text("\n".join(lines) + "\n")
    return p


def flags(o):
    """The CLI's flags for the package's options."""
    out = []
    for k, v in o.items():
        if k == "session_id":
            out += ["--session", v]
        elif k == "params":
            for name, value in v.items():
                out += ["--param", f"{name}={json.dumps(value)}"]
        elif k == "kinds":
            out += ["--kinds", ",".join(v)]
        elif v is True:
            out.append("--" + k.replace("_", "-"))
        else:
            out += ["--" + k.replace("_", "-"), str(v)]
    return out


def respond(path, text, o):
    return subprocess.run([cli(), "respond", str(path), "--text", text, *flags(o)],
                          check=True, capture_output=True).stdout


@pytest.mark.parametrize("case", CASES, ids=[json.dumps(c) for c in CASES])
def test_bodies_are_the_clis_respond_byte_for_byte(turns_log, case):
    o = {"session_id": "s-42", **case}
    want = respond(turns_log, 'what "now"?', o)
    session_id = o.pop("session_id")
    assert wmreplay.request_body(turns_log, 'what "now"?', session_id, **o) == want
    # The same options on a replay already made, and on a live replay.
    record = o.pop("record", "raw")
    fmt = o.pop("format", "anthropic")
    system = o.pop("system", None)
    r = wmreplay.replay(turns_log, record=record)
    assert r.request_body('what "now"?', session_id, fmt, system, **o) == want
    live = wmreplay.LiveReplay(turns_log, format=fmt, record=record)
    for _ in range(2):
        assert live.request_body('what "now"?', session_id, system, **o) == want


@pytest.mark.parametrize("case", [dict(recall=2, tail=5), dict(recall=3, tail=5, language="none", format="openai"),
                                  dict(recall=1, kinds=["wm_event"], model="claude-sonnet-4-5")],
                         ids=["recall", "recall-none-openai", "recall-kinds"])
def test_recall_is_the_clis_respond_recall_byte_for_byte(turns_log, case):
    text = "what was the user refactoring yesterday, the replay module?"
    want = respond(turns_log, text, case)
    assert b"WM_KIND=recall" in want
    o = dict(case)
    assert wmreplay.request_body(turns_log, text, **o) == want
    fmt = o.pop("format", "anthropic")
    assert wmreplay.replay(turns_log).request_body(text, None, fmt, **o) == want
    live = wmreplay.LiveReplay(turns_log, format=fmt)
    for _ in range(2):
        assert live.request_body(text, **o) == want
    # Out of range: refused before anything is read.
    for bad in [0, 1001, 2.5]:
        with pytest.raises(ValueError, match="`recall` must be a whole number from 1 to 1000"):
            wmreplay.request_body(turns_log, text, recall=bad)
    with pytest.raises(ValueError, match="`language`: unknown language"):
        wmreplay.request_body(turns_log, text, recall=2, language="klingon")


def test_a_live_replay_recalls_what_was_appended_since(turns_log):
    """A LiveReplay keeps the recall index open between bodies: what is
    appended since is found in it (brought up to date first), and a body in
    another language reads that language's index."""
    text = "what was the user refactoring yesterday, the replay module?"
    case = dict(recall=2, tail=5)
    live = wmreplay.LiveReplay(turns_log)
    assert live.request_body(text, **case) == respond(turns_log, text, case)
    # Older than the window's records: only recall can bring it.
    with open(turns_log, "a") as f:
        f.write('{"type":"wm_insight","ts_ms":1763700000500,"text":"yesterday the user was '
                'refactoring the replay module, its chunk splitter"}\n')
    want = respond(turns_log, text, case)
    assert b"its chunk splitter" in want
    assert live.request_body(text, **case) == want
    other = dict(case, language="none")
    assert live.request_body(text, **other) == respond(turns_log, text, other)
    assert live.request_body(text, **case) == want


def test_a_model_brings_its_leading_fields(turns_log):
    body = json.loads(wmreplay.request_body(turns_log, "hi", model="claude-sonnet-4-5"))
    assert list(body) == ["model", "max_tokens", "system", "messages"]
    assert body["max_tokens"] == 1024
    openai = json.loads(wmreplay.request_body(turns_log, "hi", format="openai", model="gpt-5",
                                              max_output_tokens=300, params={"temperature": 0.5}))
    assert list(openai) == ["model", "max_completion_tokens", "temperature", "messages"]
    assert list(json.loads(wmreplay.request_body(turns_log, "hi"))) == ["system", "messages"]


def test_bodies_and_replays_default_to_record_raw(tmp_path):
    p = tmp_path / "spaced.log"
    p.write_text('{"type": "wm_event", "ts_ms": 1.0, "b": 2, "a": 1}\n')
    want = 'WM_JSON: {\\"type\\": \\"wm_event\\", \\"ts_ms\\": 1.0, \\"b\\": 2, \\"a\\": 1}'
    assert want in wmreplay.request_body(p, "hi").decode()
    assert want in wmreplay.LiveReplay(p).request_body("hi").decode()
    assert wmreplay.replay(p).messages()[0]["content"][0]["text"].endswith(
        'WM_JSON: {"type": "wm_event", "ts_ms": 1.0, "b": 2, "a": 1}')


@pytest.mark.parametrize("options,error,says", [
    (dict(max_output_tokens=5), ValueError, "`max_output_tokens` needs `model`"),
    (dict(params={"temperature": 1}), ValueError, "`params` needs `model`"),
    (dict(model="claude-sonnet-4-5", max_output_tokens=0), ValueError, "`max_output_tokens` must be"),
    (dict(model="claude-sonnet-4-5", params={"temprature": 1}), ValueError, "temprature"),
    (dict(model="claude-sonnet-4-5", params={"temperature": "hot"}), ValueError, "temperature"),
    (dict(model="claude-sonnet-4-5", params=[1]), TypeError, "`params` must be a dict"),
    (dict(tail=-1), ValueError, "`tail` must be a whole number"),
    (dict(tail="5"), TypeError, "`tail` must be a number"),
    (dict(tail=True), TypeError, "`tail` must be a number"),
    (dict(trim_to=0.5), ValueError, "`trim_to` needs `max_tokens` or `tail`"),
    (dict(tail=5, trim_to=2), ValueError, "`trim_to`"),
    (dict(start_on="text_input"), ValueError, "`start_on`"),
    (dict(since=5, until=1), ValueError, "`since`"),
    (dict(tokenizer="gpt2", max_tokens=5), ValueError, "`tokenizer`"),
    (dict(cache="yes"), ValueError, "`cache` must be"),
    (dict(cache="auto", format="openai"), ValueError, "anthropic"),
    (dict(cache_ttl="2h"), ValueError, "`cache_ttl`"),
    (dict(format="html"), ValueError, "`format`"),
    (dict(record="yaml"), ValueError, "`record`"),
    (dict(session_only=True), ValueError, "`session_id`"),
    (dict(kinds="wm_event"), TypeError, "`kinds` must be a list of str"),
    (dict(max_output_token=5), TypeError, "unexpected keyword argument 'max_output_token'"),
])
def test_invalid_options_raise_naming_the_option(turns_log, options, error, says):
    with pytest.raises(error) as e:
        wmreplay.request_body(turns_log, "x", **options)
    assert says in str(e.value)


def test_a_replay_or_live_replay_refuses_what_it_was_made_with(turns_log):
    with pytest.raises(TypeError):
        wmreplay.LiveReplay(turns_log).request_body("x", format="openai")
    with pytest.raises(TypeError):
        wmreplay.replay(turns_log).request_body("x", record="js")
    with pytest.raises(ValueError, match="max_output_tokens"):
        wmreplay.LiveReplay(turns_log).request_body("x", max_output_tokens=3)


def test_trim_to_remembers_the_window_start_as_respond_does(turns_log, tmp_path):
    state = tmp_path / "trim.db"
    o = dict(max_tokens=600, tokenizer="bytes", trim_to=0.5, state=str(state))
    first = wmreplay.request_body(turns_log, "hi", **o)
    with open(turns_log, "a") as f:
        f.write('{"type":"wm_event","ts_ms":1763700300000,"x":1}\n')
    second = wmreplay.request_body(turns_log, "hi", **o)

    def start(body):
        return json.loads(body)["messages"][0]["content"][0]["text"]
    assert start(second) == start(first)
    assert state.exists()
    assert second == respond(turns_log, "hi", o)


def test_append_writes_what_the_server_would(tmp_path):
    log = tmp_path / "append.log"
    log.write_text('{"type":"wm_event","ts_ms":9000000000000}\n{"type":"to')
    r = wmreplay.append(log, [{"type": "text_input", "text": 'hi "é"'},
                              '{ "type": "wm_event",\n "ts_ms": 3 }'])
    assert r["written"] == 2
    assert [x["ts_ms"] for x in r["records"]] == [9000000000000, 3]
    text = log.read_text()
    assert text == ('{"type":"wm_event","ts_ms":9000000000000}\n{"type":"to\n'
                    '{"ts_ms":9000000000000,"type":"text_input","text":"hi \\"é\\""}\n'
                    '{"type":"wm_event","ts_ms":3}\n')
    data = log.read_bytes()
    assert r["records"][0]["offset"] == data.index(b'{"ts_ms"')
    assert r["records"][1]["offset"] == r["records"][0]["offset"] + r["records"][0]["bytes"]
    # One record alone, as a dict or bytes; a lone surrogate is escaped.
    assert wmreplay.append(log, {"type": "a", "ts_ms": 5, "s": "\ud800"})["written"] == 1
    assert log.read_text().endswith('{"type":"a","ts_ms":5,"s":"\\ud800"}\n')
    assert wmreplay.append(log, b'{"type":"b","ts_ms":6}')["written"] == 1
    before = log.read_bytes()
    for batch, error, says in [
        ([{"type": "a"}, {"ts_ms": 1}], ValueError, 'record 1: no "type" member'),
        ([{"type": "a", "ts_ms": "now"}], ValueError, 'record 0: "ts_ms" is not a number'),
        ([{"type": 1}], ValueError, '"type" is not a string'),
        (["not json"], ValueError, "record 0: invalid JSON"),
        ([{"type": "a", "x": float("nan")}], ValueError, "record 0 cannot be serialised"),
        ([[1, 2]], TypeError, "record 0 must be a dict"),
        ([], ValueError, "no records"),
    ]:
        with pytest.raises(error, match=re.escape(says)):
            wmreplay.append(log, batch)
    assert log.read_bytes() == before
    with pytest.raises(IsADirectoryError):
        wmreplay.append(tmp_path, {"type": "a"})
    r = wmreplay.replay(log, warn=False)
    assert r.stats["parsed_entries"] == 5 and r.stats["skipped_invalid_json"] == 1


def serve(log):
    """``wmreplay serve --log LOG`` on an ephemeral port: (process, url).
    ``process.seen`` holds what it has written to stderr."""
    proc = subprocess.Popen([cli(), "serve", "--log", str(log), "--addr", "127.0.0.1:0",
                             "--no-fsync"], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            env={**os.environ, "RUST_LOG": "info"}, text=True)
    proc.seen = []
    for line in proc.stderr:
        proc.seen.append(line)
        m = re.search(r"(127\.0\.0\.1:\d+)", line)
        if m and "listening" in line:
            # Keep reading stderr so the server never blocks on it.
            threading.Thread(target=lambda: proc.seen.extend(proc.stderr), daemon=True).start()
            return proc, f"http://{m.group(1)}"
    raise AssertionError(f"serve did not start: {''.join(proc.seen)}")


def stop(proc):
    """Stops a server from serve(): it must still be running (a server that
    exited mid-test explains its clients' errors), and must stop cleanly."""
    running = proc.poll() is None
    proc.terminate()
    code = proc.wait(20)
    tail = "".join(proc.seen[-20:])
    assert running, f"serve exited during the test ({code}):\n{tail}"
    assert code == 0, f"serve stopped with {code}:\n{tail}"


def test_append_interleaved_with_serve_loses_and_tears_nothing(tmp_path):
    log = tmp_path / "served.log"
    log.write_text('{"type":"wm_event","ts_ms":1}\n')
    proc, url = serve(log)
    rounds = 40
    errors = []

    def python_writer(t):
        try:
            for i in range(rounds):
                wmreplay.append(log, [{"type": "wm_event", "who": f"py-{t}", "n": i, "k": 0},
                                      {"type": "wm_event", "who": f"py-{t}", "n": i, "k": 1}])
        except Exception as e:  # reported below
            errors.append(e)

    def server_writer(t):
        try:
            for i in range(rounds):
                body = json.dumps([{"type": "wm_event", "who": f"serve-{t}", "n": i, "k": k}
                                   for k in (0, 1)]).encode()
                req = urllib.request.Request(f"{url}/v1/records", data=body,
                                             headers={"content-type": "application/json"})
                with urllib.request.urlopen(req) as resp:
                    assert resp.status == 200
        except Exception as e:
            errors.append(e)

    async def async_writer():
        for i in range(rounds):
            await wmreplay.aappend(log, [{"type": "wm_event", "who": "aio", "n": i, "k": 0},
                                         {"type": "wm_event", "who": "aio", "n": i, "k": 1}])

    try:
        threads = [threading.Thread(target=python_writer, args=(t,)) for t in range(2)]
        threads += [threading.Thread(target=server_writer, args=(t,)) for t in range(2)]
        for t in threads:
            t.start()
        asyncio.run(async_writer())
        for t in threads:
            t.join()
    finally:
        stop(proc)
    assert not errors, errors
    text = log.read_text()
    assert text.endswith("\n")
    records = [json.loads(line) for line in text.splitlines()]
    seen = {}
    for r in records[1:]:
        key = (r["who"], r["n"], r["k"])
        seen[key] = seen.get(key, 0) + 1
    assert len(seen) == 5 * rounds * 2, "every record is there"
    assert set(seen.values()) == {1}, "once"
    for a, b in zip(records, records[1:]):
        if a.get("k") == 0:
            assert (b["who"], b["n"], b["k"]) == (a["who"], a["n"], 1)


def test_async_variants_give_what_the_blocking_calls_give(turns_log, tmp_path):
    async def main():
        r = await wmreplay.areplay(turns_log)
        body = await wmreplay.arequest_body(turns_log, "hi", tail=5, model="claude-sonnet-4-5")
        live = wmreplay.LiveReplay(turns_log)
        refreshed = await live.arefresh()
        live_body = await live.arequest_body("hi", tail=5, model="claude-sonnet-4-5")
        replay_body = await r.arequest_body("hi", tail=5, model="claude-sonnet-4-5")
        # Several at once: they run in threads, the loop stays free.
        many = await asyncio.gather(*[wmreplay.arequest_body(turns_log, f"q{i}") for i in range(4)])
        appended = await wmreplay.aappend(tmp_path / "a.log", {"type": "a"})
        return r, body, refreshed, live_body, replay_body, many, appended

    r, body, refreshed, live_body, replay_body, many, appended = asyncio.run(main())
    assert len(r) == wmreplay.replay(turns_log).stats["parsed_entries"]
    want = wmreplay.request_body(turns_log, "hi", tail=5, model="claude-sonnet-4-5")
    assert body == live_body == replay_body == want
    assert refreshed["rebuilt"]
    assert [b.endswith(f'user_text: q{i}"}}]}}]}}'.encode()) for i, b in enumerate(many)] == [True] * 4
    assert appended["written"] == 1


def test_replay_threads_out_of_range_is_a_value_error_naming_it():
    for bad in [-1, 2**70]:
        with pytest.raises(ValueError, match="`threads` must be 0"):
            wmreplay.replay(EXAMPLE, threads=bad)
    with pytest.raises(TypeError, match="`threads` must be an int"):
        wmreplay.replay(EXAMPLE, threads="2")
    assert len(wmreplay.replay(EXAMPLE, threads=2)) == len(wmreplay.replay(EXAMPLE))


def test_the_version_is_the_installed_distributions():
    import importlib.metadata
    assert wmreplay.__version__ == importlib.metadata.version("wmreplay")


def test_the_current_request_builder_and_the_system_rule():
    assert wmreplay.SYSTEM_RULE == oracle.SYSTEM_RULE
    assert wmreplay.build_current_user_request_message("hi", "s-1") == \
        "CURRENT_USER_REQUEST\nsession_id: s-1\nuser_text: hi"
    assert wmreplay.build_current_user_request_message("hi", "") == \
        "CURRENT_USER_REQUEST\nsession_id: \nuser_text: hi"
    assert wmreplay.build_current_user_request_message("hi") == \
        "CURRENT_USER_REQUEST\nsession_id: none\nuser_text: hi"


def test_a_missing_log_is_reported_or_refused(tmp_path):
    missing = tmp_path / "nowhere.log"
    with pytest.warns(wmreplay.MissingLogWarning):
        assert wmreplay.replay(missing).stats["log_missing"] is True
    assert wmreplay.replay(EXAMPLE).stats["log_missing"] is False
    for call in [
        lambda: wmreplay.replay(missing, require_log=True),
        lambda: wmreplay.request_body(missing, "x", require_log=True),
        lambda: wmreplay.LiveReplay(missing).request_body("x", require_log=True),
        lambda: wmreplay.LiveReplay(missing).refresh(require_log=True),
    ]:
        with pytest.raises(FileNotFoundError) as e:
            call()
        assert e.value.filename == str(missing)
        assert "does not exist" in str(e.value)
    live = wmreplay.LiveReplay(missing)
    assert live.refresh(warn=False)["log_missing"] is True
    assert live.stats["log_missing"] is True
    missing.write_text('{"type":"a","ts_ms":1}\n')
    r = live.refresh()
    assert r["log_missing"] is False and r["records_added"] == 1


def warnings_of_each_call(path):
    """The warnings of replay() and request_body() with and without warn, and
    of one LiveReplay called three times (another, with warn=False, once)."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        wmreplay.replay(path)
        wmreplay.request_body(path, "x")
        wmreplay.replay(path, warn=False)
        wmreplay.request_body(path, "x", warn=False)
        wmreplay.LiveReplay(path).refresh(warn=False)
        live = wmreplay.LiveReplay(path)
        live.refresh()
        live.request_body("x")
        live.request_body("x")
    return seen, live


def test_a_missing_log_warns_as_the_cli_does_unless_told_not_to(tmp_path):
    missing = tmp_path / "nowhere.log"
    # Once per call, and once per LiveReplay while the log stays missing.
    seen, live = warnings_of_each_call(missing)
    assert [w.category for w in seen] == [wmreplay.MissingLogWarning] * 3, [str(w.message) for w in seen]
    for w in seen:
        assert str(w.message) == (f"{missing} does not exist; replaying it as an empty log "
                                  "(require_log=True makes this an error, warn=False silences it)")
    # Found again, then gone: warned again.
    missing.write_text('{"type":"a","ts_ms":1}\n')
    live.refresh()
    missing.unlink()
    with pytest.warns(wmreplay.MissingLogWarning):
        live.refresh()


def test_a_log_of_junk_warns_unless_told_not_to(tmp_path):
    junk = tmp_path / "junk.log"
    junk.write_text('{"a": 1}\nnot json\n{"type":"ok","ts_ms":1}\n')
    seen, _ = warnings_of_each_call(junk)
    assert len(seen) == 3, [str(w.message) for w in seen]
    for w in seen:
        assert issubclass(w.category, wmreplay.SkippedLinesWarning)
        assert str(w.message).startswith(
            f'{junk}: 2 of its 3 lines are not valid records; the first skipped is line 1 '
            '(byte 0): no "type" member'), str(w.message)
    # A log with few bad lines replays silently.
    fine = tmp_path / "fine.log"
    fine.write_text('{"type":"a","ts_ms":1}\n{"type":"b","ts_ms":2}\nbad\n')
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        wmreplay.request_body(fine, "x")
    assert seen == []
    # A warnings filter turns it into an error, as for any warning.
    with warnings.catch_warnings():
        warnings.simplefilter("error", wmreplay.SkippedLinesWarning)
        with pytest.raises(wmreplay.SkippedLinesWarning):
            wmreplay.replay(junk)


def test_lone_surrogates_in_type_are_kept(tmp_path):
    p = tmp_path / "surrogates.log"
    p.write_text('{"type":"\\ud800","ts_ms":1}\n{"type":"a\\udc00b","ts_ms":2}\n')
    messages = wmreplay.replay(p).messages("openai")
    want, _ = oracle.replay(p)
    assert messages == want
    assert messages[0]["content"].startswith("WM_KIND=\ud800\n")
