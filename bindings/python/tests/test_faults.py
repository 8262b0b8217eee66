"""The package when things go wrong around it: several threads on one object,
a log changed under a ``Replay``, memory that runs out.

What could hang or kill the interpreter runs in a child process with a
timeout, so that a regression fails the test instead of hanging or killing
pytest.
"""

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

import wmreplay


def run_child(script, *args, timeout=300, env=None):
    """Runs `script` in a fresh interpreter (the one running the tests, so the
    same wmreplay) and returns the completed process."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script), *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, env=env)


def numbered_log(path, n):
    """`n` records in ts_ms order, record i with ts_ms i."""
    with open(path, "w") as f:
        for i in range(n):
            f.write('{"type":"%s","ts_ms":%d,"text":"message %d"}\n'
                    % ("text_output" if i % 3 == 0 else "text_input", i, i))
    return path


def quoted_log(path, size):
    """Records whose text is all double quotes, about `size` bytes: a quote is
    2 bytes in the log (``\\"``) and 4 in a JSON body that carries the line
    (``\\\\\\"``), so the messages of this log take twice its size."""
    text = '"' * (32 << 10)
    with open(path, "w") as f:
        written = i = 0
        while written < size:
            line = json.dumps({"type": "text_input", "ts_ms": i, "text": text}) + "\n"
            f.write(line)
            written += len(line)
            i += 1
    return path


# --- Several threads -------------------------------------------------------

DRAIN = """
    import json, sys, threading, wmreplay
    path, threads = sys.argv[1], int(sys.argv[2])
    it = wmreplay.replay(path).iter_messages()
    got = [[] for _ in range(threads)]
    def drain(k):
        for m in it:
            got[k].append(int(m["content"][0]["text"].split("ts_ms: ")[1].split("\\n")[0]))
    ts = [threading.Thread(target=drain, args=(k,), daemon=True) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    if any(t.is_alive() for t in ts):
        print("HUNG", flush=True)
        import os; os._exit(3)
    print(json.dumps(got))
"""


@pytest.mark.parametrize("threads", [2, 8])
def test_one_message_iterator_drained_from_several_threads_hands_out_each_message_once(
        tmp_path, threads):
    # Reported as a deadlock of the interpreter. The iterator's position now
    # moves by compare-and-swap, with no lock at all, so nothing can wait on
    # it; each message goes to exactly one thread, each thread's in order.
    n = 50_000
    p = numbered_log(tmp_path / "wm.log", n)
    out = run_child(DRAIN, p, threads, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    got = json.loads(out.stdout)
    assert sorted(i for part in got for i in part) == list(range(n))
    for part in got:
        assert part == sorted(part)


STALL = """
    import json, sys, threading, time, wmreplay
    path = sys.argv[1]
    for _ in range(5):
        live = wmreplay.LiveReplay(path, record="js")
        ticks, stop = [], threading.Event()

        def tick():
            while not stop.is_set():
                ticks.append(time.perf_counter())
                time.sleep(0.001)

        ticker = threading.Thread(target=tick)
        ticker.start()
        refresher = threading.Thread(target=live.refresh)
        refresher.start()
        time.sleep(0.01)
        asked = time.perf_counter()
        stats = live.stats
        answered = time.perf_counter()
        refresher.join()
        stop.set()
        ticker.join()
        if answered - asked >= 0.1:
            break  # else the refresh was over too soon to tell: again
    during = [t for t in ticks if asked <= t <= answered]
    gaps = [b - a for a, b in zip([asked] + during, during + [answered])]
    print(json.dumps({"waited": answered - asked, "longest_gap": max(gaps),
                      "parsed": live.stats["parsed_entries"]}))
"""


def test_live_stats_waits_for_a_refresh_without_stopping_other_threads(tmp_path):
    # LiveReplay.stats waited for the replay's lock holding the GIL: while
    # another thread refreshed (GIL released, lock held), every Python
    # thread stopped until the refresh ended (0.67 s here for this log). The
    # lock is now waited for with the GIL released. One worker thread, so
    # that the refresh lasts long enough to tell on any machine.
    p = quoted_log(tmp_path / "wm.log", 64 << 20)
    out = run_child(STALL, p, env={**os.environ, "RAYON_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stdout + out.stderr
    got = json.loads(out.stdout)
    assert got["waited"] >= 0.1, f"stats never waited for a refresh: {got}"
    assert got["longest_gap"] < got["waited"] / 2, got
    assert got["parsed"] == wmreplay.replay(p).stats["parsed_entries"]


# --- A log changed under a Replay -----------------------------------------

def read_everything(r):
    """Everything a Replay reads the log again for."""
    yield "messages", lambda: r.messages()
    yield "messages openai", lambda: r.messages("openai")
    yield "iter_messages", lambda: r.iter_messages()
    for fmt in ["anthropic", "openai", "ndjson", "xml"]:
        yield f"request_body {fmt}", lambda fmt=fmt: r.request_body("x", format=fmt)


@pytest.mark.parametrize("change", ["emptied", "halved", "rewritten"])
def test_a_log_changed_after_replay_is_the_changed_error_never_nul_bytes(tmp_path, change):
    # A Replay keeps its log mapped. Truncated after replay() returned, the
    # map's lost pages read as zeros (the engine's SIGBUS guard), and
    # request_body() returned them: 143 MB of NULs for a 100 MB log, not
    # JSON, and no error. Every call that reads the log again now checks it
    # afterwards and raises the CLI's "changed ... replay it again" error.
    p = numbered_log(tmp_path / "wm.log", 100_000)
    size = p.stat().st_size
    r = wmreplay.replay(p)
    n = len(r)
    whole = r.request_body("x")
    if change == "emptied":
        os.truncate(p, 0)
    elif change == "halved":
        os.truncate(p, size // 2)
    else:
        # Same length, other bytes, a later modification time.
        time.sleep(0.01)
        with open(p, "r+b") as f:
            f.write(b" " * size)
    for name, call in read_everything(r):
        with pytest.raises(OSError) as e:
            out = call()
            # Only reached on failure: say what came back instead.
            nuls = out.count(b"\0") if isinstance(out, bytes) else "-"
            pytest.fail(f"{name} returned {type(out).__name__} ({nuls} NUL bytes)")
        assert e.value.filename == str(p), name
        assert "changed" in str(e.value) and "replay it again" in str(e.value), str(e.value)
        # No errno to give: a FileError, whose str() is the message alone,
        # not OSError's "[Errno None] message: 'path'".
        assert isinstance(e.value, wmreplay.FileError) and e.value.errno is None, name
        assert str(e.value) == e.value.strerror and "Errno" not in str(e.value), str(e.value)
    # What was computed at replay() still stands, and a new replay reads the
    # file as it is now.
    assert len(r) == n
    again = wmreplay.replay(p).request_body("x")
    assert b"\0" not in again and again != whole
    json.loads(again)


# --- Memory that runs out --------------------------------------------------

OOM = """
    import json, os, resource, sys, wmreplay
    path, tiny = sys.argv[1], sys.argv[2]
    MiB = 1 << 20

    def vm():
        for line in open("/proc/self/status"):
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024

    def limit(headroom):
        # Only the soft limit: it can be raised again.
        hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        resource.setrlimit(resource.RLIMIT_AS, (vm() + headroom, hard))

    def unlimit():
        hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        resource.setrlimit(resource.RLIMIT_AS, (hard, hard))

    def outcome(call):
        try:
            out = call()
            return ["ok", len(out) if hasattr(out, "__len__") else 0]
        except MemoryError as e:
            return ["MemoryError", str(e)]

    # The thread pools and the json module started before any limit.
    wmreplay.replay(tiny).messages()
    r = wmreplay.replay(path)
    size = os.path.getsize(path)
    got = {}
    # 64 MiB beyond what the process holds: its messages (twice the log)
    # cannot be rendered.
    limit(64 * MiB)
    got["messages"] = outcome(lambda: r.messages())
    got["iter_messages"] = outcome(lambda: r.iter_messages())
    got["request_body"] = outcome(lambda: r.request_body("x"))
    unlimit()
    # Room to map the log, not to re-serialise it (record="js" keeps a copy
    # of every record, about the log's size).
    limit(size + 64 * MiB)
    got["replay js"] = outcome(lambda: wmreplay.replay(path, record="js"))
    unlimit()
    # The process goes on, and the memory is back.
    got["after"] = outcome(lambda: r.request_body("x"))
    print(json.dumps(got))
"""


def test_memory_running_out_is_a_memory_error_not_an_abort(tmp_path):
    # Under an address-space limit (ulimit -v), messages() and
    # iter_messages() aborted the interpreter (SIGABRT) allocating the
    # rendered messages, and replay(record="js") growing the re-serialised
    # records. Both are allocated fallibly now: MemoryError, naming the log.
    # The limit is set by the child itself, after the log is replayed, to
    # what it then holds plus a margin: the same on any machine, whatever
    # the interpreter and its thread pools take.
    p = quoted_log(tmp_path / "quotes.log", 128 << 20)
    tiny = numbered_log(tmp_path / "tiny.log", 10)
    out = run_child(OOM, p, tiny)
    assert out.returncode == 0, (out.returncode, out.stdout, out.stderr[-2000:])
    got = json.loads(out.stdout)
    for name in ["messages", "iter_messages", "request_body", "replay js"]:
        kind, message = got[name]
        assert kind == "MemoryError", (name, got[name])
        assert message.startswith(f"{p}: cannot allocate "), message
        assert "does not fit in memory" in message
    assert got["after"][0] == "ok" and got["after"][1] > 2 * p.stat().st_size
