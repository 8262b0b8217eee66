"""The Python package against the plain-Python oracle and the CLI.

Runs against whichever ``wmreplay`` is importable: CI installs the wheel in a
fresh virtualenv and runs a copy of this folder, with ``WMREPLAY_REPO`` set to
the repository (for the example log and the CLI).
"""

import json
import os
import stat
import random
import shutil
import subprocess
from pathlib import Path

import pytest

import wmreplay
import oracle

ROOT = Path(os.environ.get("WMREPLAY_REPO") or Path(__file__).resolve().parents[3])
EXAMPLE = ROOT / "examples" / "working_memory.log"
assert EXAMPLE.is_file(), f"{EXAMPLE} is missing: set WMREPLAY_REPO to the repository"


def cli():
    """The wmreplay binary: $WMREPLAY_BIN, else the newer of those cargo built."""
    if os.environ.get("WMREPLAY_BIN"):
        return os.environ["WMREPLAY_BIN"]
    built = [p for p in [ROOT / "target/release/wmreplay", ROOT / "target/debug/wmreplay"]
             if p.exists()]
    if built:
        return str(max(built, key=lambda p: p.stat().st_mtime))
    found = shutil.which("wmreplay")
    assert found, "build the CLI first (cargo build) or set WMREPLAY_BIN"
    return found


EDGE_CASES = [
    # CRLF, blank lines, tabs, a BOM only at the start of the file
    "\ufeff{\"type\":\"a\",\"ts_ms\":2}\r\n\n  \t{\"type\":\"b\",\"ts_ms\":1}\t\n",
    # every number form of ts_ms; ties keep file order; -0 equals 0
    "{\"type\":\"n\",\"ts_ms\":1e3}\n{\"type\":\"n\",\"ts_ms\":-0}\n{\"type\":\"n\",\"ts_ms\":0}\n"
    "{\"type\":\"n\",\"ts_ms\":1.5}\n{\"type\":\"n\",\"ts_ms\":12345678901234567890}\n"
    "{\"type\":\"n\",\"ts_ms\":1e400}\n{\"type\":\"n\",\"ts_ms\":1e-7}\n{\"type\":\"n\",\"ts_ms\":0.000001}\n",
    # invalid JSON and invalid shapes are skipped and counted
    "not json\n{\"type\":\"a\",\"ts_ms\":1,}\n[1,2]\n{\"ts_ms\":1}\n{\"type\":1,\"ts_ms\":1}\n"
    "{\"type\":\"a\",\"ts_ms\":\"1\"}\n{\"type\":\"a\",\"ts_ms\":NaN}\n{\"type\":\"a\",\"ts_ms\":01}\n",
    # duplicate keys (the last wins), escapes, non-ASCII, a lone surrogate escape
    "{\"type\":\"x\",\"type\":\"text_output\",\"ts_ms\":5,\"t\":\"\u00e9 \\u00e9 \\\"q\\\" \\ud800 /\"}\n"
    "{\"type\":\"text\\u005finput\",\"ts_ms\":4}\n",
    # an unterminated last line is a line like any other
    "{\"type\":\"a\",\"ts_ms\":1}\n{\"type\":\"b\",\"ts_ms\":0}",
    "",
]


def write(tmp_path, text, name="wm.log"):
    p = tmp_path / name
    p.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return p


def check_same(path):
    r = wmreplay.replay(path)
    want_messages, want_stats = oracle.replay(path)
    # The default is the original function's (Anthropic Messages) shape,
    # "openai" the text as a string; iter_messages gives the same dicts.
    assert r.messages() == oracle.anthropic(want_messages)
    assert list(r.iter_messages()) == oracle.anthropic(want_messages)
    assert r.messages("openai") == want_messages
    assert list(r.iter_messages(format="openai")) == want_messages
    for k, v in want_stats.items():
        assert r.stats[k] == v, k
    assert len(r) == want_stats["parsed_entries"]


def test_the_example_log_replays_like_the_oracle():
    check_same(EXAMPLE)


@pytest.mark.parametrize("text", EDGE_CASES)
def test_the_contracts_edge_cases_replay_like_the_oracle(tmp_path, text):
    import warnings
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        check_same(write(tmp_path, text))
    # A case of mostly bad lines says so, once, naming the first.
    skipped = [w for w in seen if issubclass(w.category, wmreplay.SkippedLinesWarning)]
    assert len(skipped) <= 1
    for w in skipped:
        assert "the first skipped is line" in str(w.message)


def generated_log(path, size):
    """Records of every kind with bursts, ties and late arrivals."""
    rng = random.Random(7)
    kinds = ["text_input", "text_output", "wm_event", "wm_insight", "vision"]
    ts = 1_763_700_000_000
    with open(path, "w", encoding="utf-8") as f:
        written = 0
        i = 0
        while written < size:
            i += 1
            ts += rng.choice([0, 1, 7, 1000])
            t = ts - rng.choice([0, 0, 0, 0, 5000])
            text = " ".join(rng.choice(["alpha", "béta", "\"q\"", "tab\there", "日本"])
                            for _ in range(rng.randint(1, 40)))
            line = ('{"type":"%s","ts_ms":%d,"session_id":"s-%d","n":%d,"text":%s}\n'
                    % (rng.choice(kinds), t, i % 3, i, oracle.json.dumps(text, ensure_ascii=False)))
            if i % 97 == 0:
                line = "{broken line " + str(i) + "\n"
            f.write(line)
            written += len(line.encode("utf-8"))


def test_a_generated_10_mib_log_replays_like_the_oracle(tmp_path):
    p = tmp_path / "big.log"
    generated_log(p, 10 << 20)
    check_same(p)


def test_request_body_is_the_clis_respond_body_byte_for_byte(tmp_path):
    for path in [EXAMPLE, write(tmp_path, EDGE_CASES[3])]:
        for fmt in ["anthropic", "openai", "ndjson", "xml"]:
            want = subprocess.run(
                [cli(), "respond", str(path), "--text", "what \"now\"?\n", "--session", "s-42",
                 "--format", fmt], check=True, capture_output=True).stdout
            got = wmreplay.replay(path).request_body("what \"now\"?\n", session_id="s-42",
                                                     format=fmt)
            assert got == want, fmt
    # And the Anthropic body is the original algorithm's, serialised as JSON.stringify does.
    assert (wmreplay.replay(EXAMPLE).request_body("hi", "s-1")
            == oracle.request_body(EXAMPLE, "hi", "s-1"))


def test_messages_are_what_the_request_body_holds_ready_to_send():
    r = wmreplay.replay(EXAMPLE)
    messages = r.messages()
    assert messages and all(
        set(m) == {"role", "content"} and m["role"] in ("user", "assistant")
        and len(m["content"]) == 1 and set(m["content"][0]) == {"type", "text"}
        and m["content"][0]["type"] == "text" and m["content"][0]["text"].startswith("WM_KIND=")
        for m in messages)
    # A request built from messages() is the request_body the package renders.
    anthropic = json.loads(r.request_body("hi", "s-1"))
    assert anthropic["messages"][:-1] == messages
    openai = json.loads(r.request_body("hi", "s-1", format="openai"))
    assert openai["messages"][1:-1] == r.messages("openai")
    # The stream of messages is the list, one at a time.
    it = r.iter_messages()
    assert iter(it) is it and next(it) == messages[0]
    assert len(list(it)) == len(messages) - 1
    with pytest.raises(StopIteration):
        next(it)
    for fmt in ["ndjson", "xml", "html"]:
        with pytest.raises(ValueError):
            r.messages(fmt)
        with pytest.raises(ValueError):
            r.iter_messages(fmt)


def test_a_missing_log_is_an_empty_replay(tmp_path):
    with pytest.warns(wmreplay.MissingLogWarning) as seen:
        r = wmreplay.replay(tmp_path / "none.log")
    # The warning points at the line that called replay().
    assert seen[0].filename == __file__, seen[0].filename
    assert r.messages() == []
    assert list(r.iter_messages()) == []
    assert r.stats["total_lines"] == 0
    body = r.request_body("hi")
    assert body.endswith(b"user_text: hi\"}]}]}")


def test_an_unreadable_log_raises_an_oserror_naming_the_path(tmp_path):
    with pytest.raises(IsADirectoryError) as e:
        wmreplay.replay(tmp_path)
    assert e.value.filename == str(tmp_path)
    # A FIFO is refused at once (not read forever): a plain OSError, EINVAL.
    # (Windows has no FIFOs in the file system.)
    if hasattr(os, "mkfifo"):
        fifo = tmp_path / "fifo.log"
        os.mkfifo(fifo)
        assert stat.S_ISFIFO(fifo.stat().st_mode)
        with pytest.raises(OSError) as e:
            wmreplay.replay(fifo)
        assert e.value.errno == 22 and e.value.filename == str(fifo)
    live = wmreplay.LiveReplay(tmp_path)
    with pytest.raises(IsADirectoryError) as e:
        live.refresh()
    assert e.value.filename == str(tmp_path)
    locked = write(tmp_path, EDGE_CASES[0], "locked.log")
    locked.chmod(0)
    try:
        # Root reads it anyway; Windows's chmod only sets read-only.
        if hasattr(os, "geteuid") and os.geteuid() != 0:
            with pytest.raises(PermissionError) as e:
                wmreplay.replay(locked)
            assert str(locked) in str(e.value)
    finally:
        locked.chmod(0o644)
    with pytest.raises(ValueError):
        wmreplay.replay(EXAMPLE, record="yaml")
    with pytest.raises(ValueError):
        wmreplay.replay(EXAMPLE).request_body("x", format="html")


def test_live_replay_after_appends_equals_a_fresh_replay(tmp_path):
    p = write(tmp_path, EXAMPLE.read_bytes())
    live = wmreplay.LiveReplay(p)
    assert live.refresh()["rebuilt"]
    with open(p, "ab") as f:
        f.write(b'{"type":"text_output","ts_ms":1763700099000,"text":"new"}\n')
        f.write(b'{"type":"wm_event","ts_ms":1,"late":true}\n')
        f.write(b'{"type":"half')
    got = live.request_body("next?", session_id="s-42")
    # The unterminated line is not read yet: the body equals a replay of the
    # committed bytes, which is the file without it.
    committed = write(tmp_path, p.read_bytes().rsplit(b"\n", 1)[0] + b"\n", "committed.log")
    assert got == wmreplay.replay(committed).request_body("next?", "s-42")
    info = live.refresh()
    assert not info["rebuilt"] and info["records_added"] == 0
    with open(p, "ab") as f:
        f.write(b'","ts_ms":5}\n')
    assert live.request_body("again") == wmreplay.replay(p).request_body("again")


def test_js_record_mode_writes_json_stringify(tmp_path):
    p = write(tmp_path, '{"ts_ms":1e0, "type":"a", "1":2, "0":{"b":1.50}}\n')
    text = wmreplay.replay(p, record="js").messages()[0]["content"][0]["text"]
    assert text.endswith('WM_JSON: {"0":{"b":1.5},"1":2,"ts_ms":1,"type":"a"}')
    assert wmreplay.replay(p, record="js").messages("openai")[0]["content"] == text
