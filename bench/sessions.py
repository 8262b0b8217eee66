#!/usr/bin/env python3
"""What finding a session's history costs through the Anthropic door, on a
small and a large log whose records belong to many sessions.

Claude Code and Codex name their session on every request (Claude Code's
`x-claude-code-session-id`, Codex's `session-id`), so the server reads back
the log for that session's records before each turn. This harness sends, for
each of `--n` new sessions, its first request (one user message) and its
second (the first turn resent as history, then a new message), with an
instant mock model behind `wmreplay serve`, and the same requests without a
session; and one request straight to the mock (the direct call). The logs
are `wmreplay gen`'s seed-1 corpus (records of sessions `s-0`…`s-99` and
some without one), generated once into target/bench-data/.

    cargo build --release
    python3 bench/sessions.py --sizes 1MiB,1GiB --n 15

Prints, per log, the p50 of each kind of request in milliseconds, once the
server is idle after a first request. The first request of the first new
session on a log also builds the log's index of where its sessions begin
(a walk over the last 256 MiB): printed apart ("first ever").
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "target", "bench-data")
ANSWER = json.dumps({
    "id": "msg_1", "type": "message", "role": "assistant", "model": "m",
    "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
    "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1},
}).encode()


class Mock(BaseHTTPRequestHandler):
    """An instant Anthropic Messages model (keep-alive, Nagle off)."""
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(ANSWER)))
        self.end_headers()
        self.wfile.write(ANSWER)


def post(url, body, session):
    headers = {"content-type": "application/json", "x-api-key": "k",
               "anthropic-version": "2023-06-01"}
    if session:
        headers["x-claude-code-session-id"] = session
    t = time.perf_counter()
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)
    with urllib.request.urlopen(req) as r:
        r.read()
    return (time.perf_counter() - t) * 1000


def ask(messages):
    return {"model": "m", "max_tokens": 50, "messages": messages}


def corpus(binary, size):
    os.makedirs(DATA, exist_ok=True)
    path = os.path.join(DATA, f"sessions-{size}.log")
    if not os.path.exists(path):
        subprocess.run([binary, "gen", "--size", size, "--seed", "1", path], check=True)
    return path


def serve(binary, log, upstream):
    env = dict(os.environ, ANTHROPIC_API_KEY="k", WMREPLAY_MODEL="m")
    env.pop("RUST_LOG", None)
    proc = subprocess.Popen(
        [binary, "serve", "--log", log, "--upstream", upstream, "--addr", "127.0.0.1:0"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if "listening" in line:
            addr = next(w for w in line.replace('"', " ").replace("=", " ").split()
                        if w.startswith("127.0.0.1:"))
            threading.Thread(target=proc.stderr.read, daemon=True).start()
            url = f"http://{addr}"
            while True:
                try:
                    with urllib.request.urlopen(url + "/readyz") as r:
                        if r.status == 200:
                            return proc, url
                except OSError:
                    time.sleep(0.05)
    sys.exit("serve did not start")


def run(binary, size, n, upstream):
    scratch = tempfile.mkdtemp(prefix="wmreplay-sessions-")
    log = os.path.join(scratch, "wm.log")
    shutil.copy(corpus(binary, size), log)
    proc, url = serve(binary, log, upstream)
    door = url + "/anthropic/v1/messages"
    try:
        # The log's writer and state store opened, and the inspector's
        # index of the log (built after the first replay) left to finish.
        post(door, ask([{"role": "user", "content": "warm-up"}]), None)
        time.sleep(3)
        direct = [post(upstream + "/v1/messages", ask([{"role": "user", "content": "hi"}]), None)
                  for _ in range(n)]
        rows = {"first ever": [], "first": [], "second": [], "no session": []}
        for i in range(n):
            session = str(uuid.uuid4())
            first = [{"role": "user", "content": f"question {i} {session}"}]
            t = post(door, ask(first), session)
            rows["first ever" if i == 0 else "first"].append(t)
            second = first + [{"role": "assistant", "content": "ok"},
                              {"role": "user", "content": f"next {i}"}]
            rows["second"].append(post(door, ask(second), session))
            plain = [{"role": "user", "content": f"plain {i} {uuid.uuid4()}"}]
            rows["no session"].append(post(door, ask(plain), None))
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(scratch, ignore_errors=True)
    cells = ", ".join(f"{k} {statistics.median(v):.1f}" for k, v in rows.items())
    print(f"{size}: direct {statistics.median(direct):.1f}, {cells} (ms, p50 of {n})")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "wmreplay"))
    p.add_argument("--sizes", default="1MiB,1GiB")
    p.add_argument("--n", type=int, default=15)
    a = p.parse_args()
    mock = ThreadingHTTPServer(("127.0.0.1", 0), Mock)
    threading.Thread(target=mock.serve_forever, daemon=True).start()
    upstream = f"http://127.0.0.1:{mock.server_address[1]}"
    for size in a.sizes.split(","):
        run(a.bin, size, a.n, upstream)


if __name__ == "__main__":
    main()
